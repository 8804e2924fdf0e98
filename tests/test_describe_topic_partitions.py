"""DescribeTopicPartitions (key 75) against real `kcli broker` processes.

A single broker answered with kcli's own client (names, unknown topics, Kafka's cursor paging and
its INVALID_REQUEST cursor rules, the partition limit capped by max.request.partition.size.limit)
cross-checked with confluent-kafka's describe_topics (which librdkafka answers from Metadata); then
three nodes, one of them killed, for offline replicas.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Callable

import pytest
from conftest import BrokerProcess
from kio.schema.errors import ErrorCode
from kraft_cluster import LocalKraftCluster, admin, create_topic, wait_for

from kcli.broker.apis.metadata import TOPIC_OPERATIONS
from kcli.client import KafkaClient
from kcli.protocol.messages import nested_type, request_type

pytestmark = pytest.mark.timeout(120)

REQUEST = request_type(75, 0)
TOPIC = nested_type(REQUEST, "TopicRequest")
CURSOR = nested_type(REQUEST, "Cursor")


def describe(
    bootstrap: str, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
) -> object:
    """One DescribeTopicPartitions round trip with kcli's client."""

    async def run() -> object:
        async with await KafkaClient.connect(bootstrap) as client:
            request = REQUEST(
                topics=tuple(TOPIC(name=n) for n in names),
                response_partition_limit=limit,
                cursor=None if cursor is None else CURSOR(topic_name=cursor[0], partition_index=cursor[1]),
            )
            return await client.send(request)

    return asyncio.run(run())


def pages(response: object) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics]  # type: ignore[attr-defined]


def cursor_of(response: object) -> tuple[str, int] | None:
    cursor = response.next_cursor  # type: ignore[attr-defined]
    return None if cursor is None else (cursor.topic_name, cursor.partition_index)


def make_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(n, p, 1) for n, p in partitions.items()], operation_timeout=30)
    for future in futures.values():
        future.result(30)


def test_topics_by_name_unknown_topics_and_the_partition_fields(broker: BrokerProcess) -> None:
    make_topics(broker.bootstrap, {"beta": 2, "alpha": 1})
    response = describe(broker.bootstrap, ["beta", "nope", "alpha", "bad name!", "beta"])
    assert response.next_cursor is None
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("alpha", ErrorCode.none),
        ("bad name!", ErrorCode.invalid_topic_exception),
        ("beta", ErrorCode.none),
        ("nope", ErrorCode.unknown_topic_or_partition),
    ]
    alpha, bad, beta, nope = response.topics
    assert alpha.topic_id != uuid.UUID(int=0) and beta.topic_id not in (alpha.topic_id, uuid.UUID(int=0))
    assert nope.topic_id is None and nope.partitions == ()  # the zero uuid, which kio reads as None
    assert not beta.is_internal and beta.topic_authorized_operations == TOPIC_OPERATIONS
    assert [p.partition_index for p in beta.partitions] == [0, 1]
    for partition in beta.partitions:
        assert partition.error_code == ErrorCode.none
        assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (1, (1,), (1,))
        assert partition.leader_epoch >= 0
        # ELR not in use: PartitionRegistration's empty arrays, answered as empty lists like Kafka.
        assert partition.eligible_leader_replicas == () and partition.last_known_elr == ()
        assert partition.offline_replicas == ()

    # All topics: an empty list, sorted, and unknown names not invented.
    everything = describe(broker.bootstrap, [])
    assert pages(everything) == [("alpha", [0]), ("beta", [0, 1])]


def test_paging_with_a_small_limit_across_two_topics(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(overrides=["max.request.partition.size.limit=3"])
    make_topics(broker.bootstrap, {"one": 2, "two": 3})

    # The broker's cap (3) wins over the request's 2000; the page stops inside "two".
    first = describe(broker.bootstrap, ["two", "one"])
    assert pages(first) == [("one", [0, 1]), ("two", [0])]
    assert cursor_of(first) == ("two", 1)
    second = describe(broker.bootstrap, ["two", "one"], cursor=cursor_of(first))
    assert pages(second) == [("two", [1, 2])] and cursor_of(second) is None

    # A request limit under the cap, and a page ending exactly at a topic's end: the cursor then
    # points at the start of the next topic.
    exact = describe(broker.bootstrap, [], limit=2)
    assert pages(exact) == [("one", [0, 1])] and cursor_of(exact) == ("two", 0)
    # A limit below 1 is read as 1.
    tiny = describe(broker.bootstrap, [], limit=0, cursor=("two", 2))
    assert pages(tiny) == [("two", [2])] and cursor_of(tiny) is None

    # All topics with a cursor topic that does not exist: topics from that name on.
    after = describe(broker.bootstrap, [], cursor=("p", 0))
    assert pages(after) == [("two", [0, 1, 2])]

    # A named list must contain the cursor's topic, and a cursor partition must not be negative:
    # the whole request fails with INVALID_REQUEST, each requested topic named.
    for names, cursor in ((["one"], ("two", 0)), (["one", "two"], ("one", -1))):
        refused = describe(broker.bootstrap, names, cursor=cursor)
        assert [(t.name, t.error_code, t.partitions) for t in refused.topics] == [
            (n, ErrorCode.invalid_request, ()) for n in names
        ]
        assert refused.next_cursor is None


def test_it_agrees_with_confluent_describe_topics(broker: BrokerProcess) -> None:
    """librdkafka 2.16's describe_topics asks Metadata (its protocol debug log shows no
    DescribeTopicPartitions), so this is a cross-check of the two answers, not of the client's use."""
    from confluent_kafka import TopicCollection

    make_topics(broker.bootstrap, {"seen": 3})
    client = admin(broker.bootstrap)  # kept: the futures die with their client
    futures = client.describe_topics(TopicCollection(["seen"]), request_timeout=10)
    description = futures["seen"].result(10)
    assert description.name == "seen" and not description.is_internal
    assert [p.id for p in description.partitions] == [0, 1, 2]
    assert all(p.leader.id == 1 and [r.id for r in p.isr] == [1] for p in description.partitions)
    listed = describe(broker.bootstrap, ["seen"])
    topic_id = listed.topics[0].topic_id
    assert str(description.topic_id) == base64.b64encode(topic_id.bytes).decode().rstrip("=")
    assert [(p.partition_index, p.leader_id) for p in listed.topics[0].partitions] == [
        (p.id, p.leader.id) for p in description.partitions
    ]


def test_offline_replicas_of_a_killed_broker(replicated_cluster: Callable[..., LocalKraftCluster]) -> None:
    cluster = replicated_cluster()
    create_topic(cluster.bootstrap, "spread", [[1, 2, 3], [3, 1, 2]])
    healthy = wait_for(
        "a full ISR",
        lambda: (
            (r := describe(cluster[1].bootstrap, ["spread"]))
            and len(r.topics[0].partitions) == 2  # not yet an UNKNOWN_TOPIC_OR_PARTITION on node 1
            and all(len(p.isr_nodes) == 3 for p in r.topics[0].partitions)
            and r
        ),
        30,
    )
    assert [(p.replica_nodes, p.offline_replicas) for p in healthy.topics[0].partitions] == [
        ((1, 2, 3), ()),
        ((3, 1, 2), ()),
    ]

    cluster[3].kill()
    fenced = wait_for(
        "node 3 fenced, reported offline, and out of the ISR",
        lambda: (
            (r := describe(cluster[1].bootstrap, ["spread"]))
            and all(p.offline_replicas == (3,) and 3 not in p.isr_nodes for p in r.topics[0].partitions)
            and r
        ),
        30,
    )
    first, second = fenced.topics[0].partitions
    # Replicas are the assignment, dead node included (Kafka does not filter them here).
    assert first.replica_nodes == (1, 2, 3) and second.replica_nodes == (3, 1, 2)
    assert first.leader_id == 1 and second.leader_id in (1, 2)  # moved off the killed leader
    assert first.eligible_leader_replicas == () and first.last_known_elr == ()  # ELR off in kcli
