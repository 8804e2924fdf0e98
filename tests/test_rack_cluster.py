"""Racks across real `kcli broker` processes (three combined-mode nodes, broker.rack r1/r2/r3) with real
clients: KIP-392 fetch from the closest replica (a confluent_kafka consumer with client.rack=r2 is sent
by the leader to broker 2 and reads everything there), and the operator's view of replication once a
broker is killed (Metadata's offline replicas, `kcli topics describe`'s report filters)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_kcli
from kraft_cluster import REPLICATION, LocalKraftCluster, Writer, create_topic, wait_for, wait_partition

from kcli.features import MV_3_9_IV0

pytestmark = pytest.mark.timeout(180)

RACK_AWARE = "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"


def racked_cluster(root: Path, *overrides: str, release: int | None = None) -> LocalKraftCluster:
    """Three running nodes, node k in rack rk (formatted at `release`, None: kcli's default)."""
    cluster = LocalKraftCluster(root, 3, (*REPLICATION, *overrides), release=release)
    for node in cluster.nodes.values():
        with open(node.node.properties, "a") as properties:
            properties.write(f"\nbroker.rack=r{node.node_id}\n")
    cluster.start()
    return cluster


@pytest.fixture
def racked(tmp_path: Path) -> Iterator[Callable[..., LocalKraftCluster]]:
    """`racked(*overrides)` -> three running nodes, node k in rack rk; every node left running at
    teardown is killed by PID."""
    made: list[LocalKraftCluster] = []

    def start(*overrides: str) -> LocalKraftCluster:
        made.append(racked_cluster(tmp_path / f"cluster-{len(made)}", *overrides))
        return made[-1]

    try:
        yield start
    finally:
        for cluster in made:
            cluster.kill_all()


@pytest.fixture(scope="module")
def plain_racked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], LocalKraftCluster]]:
    """`plain_racked()` -> the module's racked cluster with kcli's defaults (no replica selector) at 3.9
    (ELR off: a partition's last in-sync replica stays in its ISR when its broker dies, as a test here
    expects), shared by the tests that use their own topics on it: a node an earlier test killed is
    started again. Every node left running is killed by PID after the module."""
    made: list[LocalKraftCluster] = []

    def running() -> LocalKraftCluster:
        if not made:
            made.append(racked_cluster(tmp_path_factory.mktemp("racked"), release=MV_3_9_IV0))
        cluster = made[0]
        down = [node for node in cluster.nodes.values() if not node.running]
        for node in down:
            node.start()
        for node in down:
            node.wait_ready()
        return cluster

    try:
        yield running
    finally:
        for cluster in made:
            cluster.kill_all()


class Reader:
    """A confluent_kafka consumer of partition 0 that keeps librdkafka's latest statistics."""

    def __init__(self, bootstrap: str, topic: str, **extra: Any) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.stats: dict[str, Any] = {}
        self.reports = 0
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
        self.reports += 1

    def fresh_stats(self, reports: int = 2) -> None:
        """Until librdkafka has reported its statistics `reports` more times (one every 200 ms, made in
        poll): the fetch counters then count every fetch made before this call, and a few after."""
        target = self.reports + reports

        def reported() -> bool:
            self.consumer.poll(0.05)  # the records are all read: what it returns is not needed
            return self.reports >= target

        wait_for(f"{reports} more statistics reports", reported, 10, interval=0)

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
        reader.fresh_stats()
        fetches = reader.fetches_by_broker()
        assert fetches.get(3, 0) == 0, fetches
        assert fetches[2] > fetches[1], fetches
    finally:
        reader.close()


def test_without_a_replica_selector_consumers_read_from_the_leader(plain_racked) -> None:
    """replica.selector.class is null by default: client.rack changes nothing."""
    cluster = plain_racked()
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
        reader.fresh_stats()
        assert reader.fetching_from() == (1, 1)
        fetches = reader.fetches_by_broker()
        assert fetches.get(2, 0) == 0 and fetches.get(3, 0) == 0 and fetches[1] > 0, fetches
    finally:
        reader.close()


def reported(cluster: LocalKraftCluster, *flags: str) -> set[tuple[str, int]]:
    """(topic, partition) of each partition line `kcli topics describe <flags>` prints (through the
    entry point in this process; test_topics_cli runs it as a real process)."""
    result = run_kcli(
        "topics", "describe", "-b", cluster.live_bootstrap(), "--topic", "wide|pair|lone", *flags
    )
    assert result.returncode == 0, result.stderr
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert all(fields[0] == "" for fields in lines), result.stdout  # partition lines only
    return {
        (fields[1].removeprefix("Topic: "), int(fields[2].removeprefix("Partition: "))) for fields in lines
    }


def wait_everywhere(
    cluster: LocalKraftCluster, topic: str, what: str, check: Callable[[int, list[int], list[int]], bool]
) -> None:
    """`check` holds in the Metadata of every running node: the describe that follows may ask any of
    them, and a node applies a metadata change a moment after another."""
    for node in cluster.nodes.values():
        if node.running:
            wait_partition(
                cluster, topic, f"{what} (as node {node.node_id} has it)", check, via=node.bootstrap
            )


def test_describe_reports_what_a_killed_broker_leaves_behind(plain_racked) -> None:
    cluster = plain_racked()
    create_topic(cluster.bootstrap, "wide", [[1, 2, 3], [3, 1, 2]], **{"min.insync.replicas": "2"})
    create_topic(cluster.bootstrap, "pair", [[3, 1]], **{"min.insync.replicas": "2"})
    create_topic(cluster.bootstrap, "lone", [[3]])
    for topic in ("wide", "pair", "lone"):
        wait_everywhere(
            cluster, topic, "fully in sync", lambda _, replicas, isr: sorted(isr) == sorted(replicas)
        )
    assert reported(cluster, "--under-replicated-partitions") == set()
    assert reported(cluster, "--unavailable-partitions") == set()
    assert reported(cluster, "--under-min-isr-partitions") == set()
    assert reported(cluster, "--at-min-isr-partitions") == {("pair", 0), ("lone", 0)}

    cluster[3].kill()
    # fenced after its session: out of every ISR it can leave, the leader of none
    wait_everywhere(
        cluster, "pair", "broker 3 out of the ISR", lambda leader, _, isr: isr == [1] and leader == 1
    )
    wait_everywhere(cluster, "wide", "broker 3 out of the ISR", lambda _, __, isr: sorted(isr) == [1, 2])
    wait_everywhere(cluster, "lone", "no leader", lambda leader, _, __: leader == -1)
    from confluent_kafka.admin import AdminClient

    described = run_kcli(
        "topics", "describe", "-b", cluster.live_bootstrap(), "--topic", "wide|pair|lone", "-o", "json"
    )
    by_topic = {d["topic"]: d for d in map(json.loads, described.stdout.splitlines())}
    for topic in ("wide", "pair", "lone"):
        for p in by_topic[topic]["partitions"]:
            assert p["offline_replicas"] == [3], (topic, p)  # replicas on the fenced broker
    [lone] = by_topic["lone"]["partitions"]
    assert lone["leader"] is None and lone["isr"] == [3]  # the last in-sync replica stays in the ISR
    client = AdminClient({"bootstrap.servers": cluster.live_bootstrap()})  # kept: the future dies with it
    assert sorted(n.id for n in client.describe_cluster().result(10).nodes) == [1, 2]

    # TopicCommand: ISR below the replicas; no live leader; no leader or ISR below min.insync.replicas;
    # ISR exactly min.insync.replicas
    assert reported(cluster, "--under-replicated-partitions") == {("wide", 0), ("wide", 1), ("pair", 0)}
    assert reported(cluster, "--unavailable-partitions") == {("lone", 0)}
    assert reported(cluster, "--under-min-isr-partitions") == {("pair", 0), ("lone", 0)}
    assert reported(cluster, "--at-min-isr-partitions") == {("wide", 0), ("wide", 1), ("lone", 0)}
    assert reported(cluster, "--unavailable-partitions", "--under-min-isr-partitions") == {
        ("pair", 0),
        ("lone", 0),
    }
