"""Racks across real `kcli broker` processes (three combined-mode nodes, broker.rack r1/r2/r3) with real
clients: KIP-392 fetch from the closest replica (a confluent_kafka consumer with client.rack=r2 is sent
by the leader to broker 2 and reads everything there)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cluster import LocalKraftCluster, wait_for
from test_replication_cluster import REPLICATION, Writer, create_topic, wait_partition

pytestmark = pytest.mark.timeout(180)

RACK_AWARE = "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture
def racked(tmp_path: Path) -> Iterator[Callable[..., LocalKraftCluster]]:
    """`racked(*overrides)` -> three running nodes, node k in rack rk; every node left running at
    teardown is killed by PID."""
    made: list[LocalKraftCluster] = []

    def start(*overrides: str) -> LocalKraftCluster:
        cluster = LocalKraftCluster(tmp_path / f"cluster-{len(made)}", 3, (*REPLICATION, *overrides))
        made.append(cluster)
        for node in cluster.nodes.values():
            with open(node.node.properties, "a") as properties:
                properties.write(f"\nbroker.rack=r{node.node_id}\n")
        cluster.start()
        return cluster

    try:
        yield start
    finally:
        for cluster in made:
            cluster.kill_all()


class Reader:
    """A confluent_kafka consumer of partition 0 that keeps librdkafka's latest statistics."""

    def __init__(self, bootstrap: str, topic: str, **extra: Any) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.stats: dict[str, Any] = {}
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-reader",
                "enable.auto.commit": False,
                "statistics.interval.ms": 200,
                "stats_cb": self._stats,
                **extra,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.got: dict[int, bytes] = {}

    def _stats(self, raw: str) -> None:
        self.stats = json.loads(raw)

    def read_until(self, end: int, timeout: float = 40.0) -> dict[int, bytes]:
        deadline = time.monotonic() + timeout
        while len(self.got) < end and time.monotonic() < deadline:
            message = self.consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            self.got[message.offset()] = message.value()
        assert len(self.got) == end, f"read {len(self.got)} of {end}"
        return self.got

    def fetching_from(self) -> tuple[int, int]:
        """(leader, broker fetched from) of partition 0, as librdkafka last reported them."""
        self.consumer.poll(0.05)
        partition = self.stats.get("topics", {}).get(self.topic, {}).get("partitions", {}).get("0", {})
        return partition.get("leader", -1), partition.get("broker", -1)

    def fetches_by_broker(self) -> dict[int, int]:
        return {
            b["nodeid"]: b["req"].get("Fetch", 0)
            for b in self.stats.get("brokers", {}).values()
            if b.get("nodeid", -1) >= 0
        }

    def close(self) -> None:
        self.consumer.close()


def test_a_consumer_reads_from_the_follower_in_its_rack(racked) -> None:
    cluster = racked(RACK_AWARE)
    create_topic(cluster.bootstrap, "near", [[1, 2, 3]])
    wait_partition(
        cluster, "near", "led by 1 with all in sync", lambda leader, _, isr: leader == 1 and len(isr) == 3
    )
    writer = Writer(cluster.bootstrap)
    writer.send("near", [b"a-%d" % i for i in range(50)])
    writer.flush()

    reader = Reader(cluster.bootstrap, "near", **{"client.rack": "r2"})
    try:
        got = reader.read_until(50)
        assert got == writer.acked
        # the leader (1) named broker 2 the preferred read replica: librdkafka fetches there now
        assert wait_for("fetches from broker 2", lambda: reader.fetching_from() == (1, 2) or None, 20)
        # records written now reach the consumer through the follower (its high watermark moves on)
        writer.send("near", [b"b-%d" % i for i in range(50)])
        writer.flush()
        got = reader.read_until(100)
        assert got == writer.acked
        assert reader.fetching_from() == (1, 2)
        time.sleep(0.5)
        reader.consumer.poll(0.1)
        fetches = reader.fetches_by_broker()
        assert fetches.get(3, 0) == 0, fetches
        assert fetches[2] > fetches[1], fetches
    finally:
        reader.close()


def test_without_a_replica_selector_consumers_read_from_the_leader(racked) -> None:
    """replica.selector.class is null by default: client.rack changes nothing."""
    cluster = racked()
    create_topic(cluster.bootstrap, "far", [[1, 2, 3]])
    wait_partition(
        cluster, "far", "led by 1 with all in sync", lambda leader, _, isr: leader == 1 and len(isr) == 3
    )
    writer = Writer(cluster.bootstrap)
    writer.send("far", [b"a-%d" % i for i in range(20)])
    writer.flush()
    reader = Reader(cluster.bootstrap, "far", **{"client.rack": "r2"})
    try:
        assert reader.read_until(20) == writer.acked
        time.sleep(0.5)
        assert reader.fetching_from() == (1, 1)
        fetches = reader.fetches_by_broker()
        assert fetches.get(2, 0) == 0 and fetches.get(3, 0) == 0 and fetches[1] > 0, fetches
    finally:
        reader.close()
