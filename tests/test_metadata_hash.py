"""The consumer group metadata hash (KIP-1101) against values Kafka 4.1's algorithm gives.

The expected values were computed with hash4j 0.22.0 (the XXH3 library Kafka 4.1.2's group coordinator
ships with) feeding the HashStream64 in the order of Kafka's Utils.computeTopicHash and computeGroupHash:
racks sorted and length-prefixed per partition, non-ASCII names, a partition without racks.
tests/test_apache_kafka_ops.py compares the hash with the one Apache Kafka itself writes.
"""

import uuid

from kcli.broker.group.metadata_hash import group_hash, topic_hash_of

ORDERS = uuid.UUID("5f0c1e3a-9b7d-4c2e-8a61-d3f4b2c9e017")
PAYMENTS = uuid.UUID("00000000-0000-0000-0000-000000000001")


def test_topic_hashes_equal_kafkas() -> None:
    orders = topic_hash_of(ORDERS, "orders", [["rack-b", "rack-a"], [], ["rack-c", "rack-a", "rack-b"]])
    assert orders == 1310656090750043316
    assert topic_hash_of(PAYMENTS, "payments-é", [[], []]) == 1042952385611285289


def test_group_hash_equals_kafkas_in_topic_name_order() -> None:
    topics = {"payments-é": 1042952385611285289, "orders": 1310656090750043316}
    assert group_hash(topics) == -1300742376687712811
    assert group_hash({}) == 0


def test_a_rack_change_changes_the_hash() -> None:
    racks = [["rack-b", "rack-a"], [], ["rack-c", "rack-a", "rack-b"]]
    moved = [["rack-b", "rack-a"], ["rack-d"], ["rack-c", "rack-a", "rack-b"]]
    assert topic_hash_of(ORDERS, "orders", racks) != topic_hash_of(ORDERS, "orders", moved)
    assert topic_hash_of(ORDERS, "orders", racks) != topic_hash_of(ORDERS, "orders", [*racks, []])
