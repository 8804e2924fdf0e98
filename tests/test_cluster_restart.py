"""A 3-node kcli cluster stopped and started again all at once keeps every partition log.

On such a restart the nodes elect a new metadata quorum leader, and that leader's high watermark is
unknown until it commits a record in its new epoch. A follower that took the first Fetch answer of
that leader (high watermark unknown) for "caught up" loaded a metadata image without any topic and
set every partition log it held aside as `-stray`, the data topics' and __consumer_offsets' alike;
only the quorum leader's copies were left to re-replicate from. Kafka's follower keeps an unknown
high watermark empty and its broker waits for the metadata before it loads the logs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kraft_cluster import LocalKraftCluster, shutdown_ending, wait_for

pytestmark = pytest.mark.timeout(240)

RECORDS = 60


def test_a_whole_cluster_restart_sets_no_log_aside_and_loses_no_record(
    cluster_factory: Callable[..., LocalKraftCluster],
) -> None:
    """SIGTERM all three nodes, start all three: no node logs "marked stray", every record is read back;
    then stop them one by one."""
    cluster = cluster_factory()
    cluster.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 30000})
    admin.create_topics([NewTopic("kept", 3, 3)], request_timeout=60)["kept"].result(60)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 120000})
    for i in range(RECORDS):
        producer.produce("kept", value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(120) == 0
    cluster.wait_status("every voter caught up", lambda status: status.caught_up, timeout=60)

    for node in cluster.nodes.values():  # all at once: the next start elects a quorum leader anew
        os.kill(node.pid, signal.SIGTERM)
    for node in cluster.nodes.values():
        assert node.terminate(send=False) == 0, node.log()
    for node in cluster.nodes.values():
        node.start()
    for node in cluster.nodes.values():
        node.wait_ready()

    for node in cluster.nodes.values():
        assert "marked stray" not in node.log(), node.log()
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "restart-reader",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 30000,
        }
    )
    consumer.subscribe(["kept"])
    seen: set[bytes] = set()

    def all_read() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
        return len(seen) == RECORDS

    wait_for(f"{RECORDS} records read back", all_read, 90, interval=0)
    consumer.close()

    # The whole cluster stopped one node after the other: the first two are fenced by a majority, the
    # last finds the other voters' brokers fenced and does not wait for a fence no majority is left to
    # record (it waited out its 5 s controlled-shutdown timeout before).
    for node in cluster.nodes.values():
        assert node.terminate() == 0, node.log()
    endings = [shutdown_ending(node.log()) for node in cluster.nodes.values()]
    assert endings == ["complete", "complete", "given up"], endings
    assert seen == {f"v{i}".encode() for i in range(RECORDS)}
