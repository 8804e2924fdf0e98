"""Partition replication across real `kcli broker` processes, with real clients (confluent-kafka).

Three combined-mode nodes (tests/kraft_cluster.py lays them out and runs them):
1. Replication factor 3: acks=all is answered once the ISR has the records; every replica's log is
   byte for byte the leader's; `kcli verify` passes on each node.
2. The ISR: a follower that stops fetching (SIGSTOP) leaves it after replica.lag.time.max.ms and
   acks=all goes on with min.insync.replicas 2; it comes back when the follower catches up; with
   one replica left acks=all is refused with NOT_ENOUGH_REPLICAS and nothing is written.
3. Leader failover (kill -9 of the leader under load): a new leader from the ISR, no acknowledged
   record lost, the old leader back as a follower that truncated what it alone had.
4. Unclean election: a partition whose only in-sync replica is gone stays offline with
   unclean.leader.election.enable=false; with true it comes back on the out-of-sync replica, and the
   records lost are exactly those above that replica's log end.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
from cli_in_process import run_kcli
from kraft_cluster import (
    LAG_TIME_MS,
    LocalKraftCluster,
    Writer,
    admin,
    create_topic,
    partition_batches,
    partition_state,
    wait_for,
    wait_partition,
)

from kcli.features import MV_3_9_IV0

pytestmark = pytest.mark.timeout(180)

UNCLEAN_INTERVAL_MS = 500  # the controller's unclean-election pass, as in test_elect_cli


def read_all(bootstrap: str, topic: str, end: int, timeout: float = 30.0) -> dict[int, bytes]:
    """Every record of partition 0 up to `end` (exclusive), by offset, read through a consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False}
    )
    got: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < end and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got[message.offset()] = message.value()
    finally:
        consumer.close()
    return got


def end_offsets(cluster: LocalKraftCluster, topic: str, via: str | None = None) -> tuple[int, int]:
    """(log start, high watermark) of partition 0, once its leader answers (a new leader may take a
    moment to learn it leads); through `via` (a broker's bootstrap) when given. A failure says what each
    live broker's Metadata shows."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": via or cluster.live_bootstrap(), "group.id": f"{topic}-marks"})
    try:
        return wait_for(
            f"{topic}: the leader's offsets",
            lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5),
            30,
            interval=0.25,
        )
    except pytest.fail.Exception as failure:
        seen = []
        for node in cluster.nodes.values():
            if node.running:
                try:
                    seen.append(f"node {node.node_id}: {partition_state(cluster, topic, via=node.bootstrap)}")
                except Exception as exc:  # a broker that cannot answer is part of the picture
                    seen.append(f"node {node.node_id}: {exc}")
        pytest.fail(f"{failure}; Metadata (leader, replicas, isr): {'; '.join(seen)}")
    finally:
        consumer.close()


def kcli_high_watermark(bootstrap: str, topic: str) -> int:
    """Partition 0's high watermark from its leader's ListOffsets, through kcli's own client."""
    import asyncio

    from kcli.cluster import Cluster
    from ops.groups import list_offsets

    async def ask() -> int | None:
        async with await Cluster.connect(bootstrap, request_timeout=10.0) as found:
            return (await list_offsets(found, [(topic, 0)], -1)).get((topic, 0))

    return wait_for(f"{topic}: the leader's high watermark", lambda: asyncio.run(ask()), 30, interval=0.25)


def assert_replicas_identical(cluster: LocalKraftCluster, topic: str, nodes: list[int], below: int) -> None:
    """The batches below offset `below` are byte for byte the same on every node."""
    logs = {n: [b for b in partition_batches(cluster, n, topic) if b[0] < below] for n in nodes}
    first = logs[nodes[0]]
    assert first, f"no batch below {below} on node {nodes[0]}"
    for node, batches in logs.items():
        assert batches == first, f"node {node}'s {topic}-0 differs from node {nodes[0]}'s"


def stop_all(cluster: LocalKraftCluster) -> None:
    """SIGTERM to every running node at once (by PID), then each must exit 0."""
    running = [node for node in cluster.nodes.values() if node.running]
    for node in running:
        os.kill(node.pid, signal.SIGTERM)
    for node in running:
        assert node.terminate(send=False) == 0, node.log()


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# --- 1. replication factor 3 ----------------------------------------------------------------------------


def test_every_replica_holds_the_leaders_bytes_and_acks_all_waits_for_the_isr(
    replicated_cluster: Callable[..., LocalKraftCluster],
) -> None:
    cluster = replicated_cluster()
    create_topic(cluster.bootstrap, "rf3", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    wait_partition(
        cluster, "rf3", "a leader", lambda leader, r, isr: leader == 1 and sorted(isr) == [1, 2, 3]
    )
    writer = Writer(cluster.bootstrap)
    writer.send("rf3", values("a", 3000))
    writer.flush()
    assert not writer.failed and len(writer.acked) == 3000
    low, high = end_offsets(cluster, "rf3")
    assert (low, high) == (0, 3000)
    assert read_all(cluster.bootstrap, "rf3", 3000) == writer.acked
    wait_partition(cluster, "rf3", "the ISR whole", lambda leader, r, isr: sorted(isr) == [1, 2, 3])

    stop_all(cluster)
    assert_replicas_identical(cluster, "rf3", [1, 2, 3], below=3000)
    for node in cluster.nodes.values():
        result = run_kcli("verify", str(node.node.directory / "data"))
        assert result.returncode == 0, result.stdout + result.stderr


# --- 2. the ISR shrinks and grows -----------------------------------------------------------------------


def test_a_stalled_follower_leaves_the_isr_and_returns_and_min_isr_guards_acks_all(
    replicated_cluster: Callable[..., LocalKraftCluster],
) -> None:
    cluster = replicated_cluster()
    create_topic(cluster.bootstrap, "isr", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    wait_partition(
        cluster, "isr", "a full ISR", lambda leader, r, isr: leader == 1 and sorted(isr) == [1, 2, 3]
    )
    writer = Writer(cluster.bootstrap)
    writer.send("isr", values("before", 100))
    writer.flush()

    # A follower that stops fetching leaves the ISR after replica.lag.time.max.ms; acks=all goes on.
    stalled = cluster[3]
    stalled.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        stopped_at = time.monotonic()
        writer.send("isr", values("during", 100))
        writer.flush()
        wait_partition(cluster, "isr", "node 3 out of the ISR", lambda leader, r, isr: sorted(isr) == [1, 2])
        assert time.monotonic() - stopped_at >= LAG_TIME_MS / 1000 - 0.5
        writer.send("isr", values("shrunk", 100))
        writer.flush()
        assert not writer.failed
    finally:
        stalled.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]

    # Back: it catches up from the leader and is added again.
    wait_partition(
        cluster, "isr", "node 3 back in the ISR", lambda leader, r, isr: sorted(isr) == [1, 2, 3], 60
    )

    # With one in-sync replica left, acks=all is refused and nothing is written. (A topic on nodes 1
    # and 2, so that killing one of them leaves the metadata quorum its majority.)
    create_topic(cluster.bootstrap, "isr2", [[1, 2]], **{"min.insync.replicas": "2"})
    wait_partition(
        cluster, "isr2", "a full ISR", lambda leader, r, isr: leader == 1 and sorted(isr) == [1, 2]
    )
    two = Writer(cluster.bootstrap)
    two.send("isr2", values("two", 10))
    two.flush()
    cluster[2].kill()
    # As the leader itself sees it: another broker may apply the fencing first.
    wait_partition(
        cluster,
        "isr2",
        "the ISR down to the leader, node 1 leading",
        lambda leader, r, isr: leader == 1 and isr == [1],  # ISR [1] alone is also what a fenced node 1 shows
        60,
        via=cluster[1].bootstrap,
    )
    # NOT_ENOUGH_REPLICAS comes at once; the delivery timeout only bounds connecting on a busy machine.
    short = Writer(
        cluster[1].bootstrap, **{"message.timeout.ms": 20000, "enable.idempotence": False, "retries": 0}
    )
    short.send("isr2", values("refused", 1))
    short.producer.flush(30)
    assert [error for _, error in short.failed] == ["NOT_ENOUGH_REPLICAS"], short.failed
    assert end_offsets(cluster, "isr2") == (0, 10)


# --- 3. leader failover ------------------------------------------------------------------------------------


def test_a_killed_leader_is_replaced_from_the_isr_and_no_acknowledged_record_is_lost(
    replicated_cluster: Callable[..., LocalKraftCluster],
) -> None:
    cluster = replicated_cluster()
    create_topic(cluster.bootstrap, "failover", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    wait_partition(
        cluster, "failover", "a full ISR", lambda leader, r, isr: leader == 1 and sorted(isr) == [1, 2, 3]
    )
    writer = Writer(cluster.bootstrap)
    writer.send("failover", values("first", 2000))
    cluster[1].kill()  # mid-way: some of these are acknowledged, some are retried on the new leader
    writer.send("failover", values("second", 2000))
    writer.flush(90)
    leader, _, isr = wait_partition(
        cluster, "failover", "a new leader", lambda leader, r, isr: leader in (2, 3)
    )
    assert 1 not in isr
    assert not writer.failed, writer.failed[:5]
    assert len(writer.acked) == 4000
    _, high = end_offsets(cluster, "failover")
    got = read_all(cluster.live_bootstrap(), "failover", high)
    for offset, value in writer.acked.items():
        assert got.get(offset) == value, f"acknowledged offset {offset} lost"
    assert sorted(got.values()) == sorted(writer.acked.values()), "a record twice, or one nobody sent"

    # The old leader comes back as a follower, truncates what only it had, and rejoins the ISR.
    cluster[1].start()
    cluster[1].wait_ready()
    wait_partition(
        cluster, "failover", "node 1 back in the ISR", lambda leader, r, isr: sorted(isr) == [1, 2, 3], 60
    )
    stop_all(cluster)
    assert_replicas_identical(cluster, "failover", [1, 2, 3], below=high)


# --- 4. unclean leader election ---------------------------------------------------------------------------


def test_unclean_election_brings_back_an_out_of_sync_replica_only_when_allowed(
    replicated_cluster: Callable[..., LocalKraftCluster],
) -> None:
    # at 3.9 (ELR off): the last in-sync replica stays in the ISR when it stops (with ELR it moves to the ELR)
    cluster = replicated_cluster(
        f"unclean.leader.election.interval.ms={UNCLEAN_INTERVAL_MS}", release=MV_3_9_IV0
    )
    create_topic(cluster.bootstrap, "unclean", [[1, 2]], **{"min.insync.replicas": "1"})
    wait_partition(
        cluster, "unclean", "a full ISR", lambda leader, r, isr: leader == 1 and sorted(isr) == [1, 2]
    )
    writer = Writer(cluster.bootstrap)
    writer.send("unclean", values("both", 50))
    writer.flush()
    # Node 2 goes; node 1 alone takes 30 more records.
    cluster[2].kill()
    wait_partition(cluster, "unclean", "node 2 out of the ISR", lambda leader, r, isr: isr == [1], 60)
    writer.send("unclean", values("only-1", 30))
    writer.flush()
    assert len(writer.acked) == 80
    # The only in-sync replica goes; node 2 returns: without unclean election the partition stays offline.
    cluster[1].kill()
    cluster[2].start()
    cluster[2].wait_ready()
    wait_partition(
        cluster, "unclean", "offline once node 1 is fenced", lambda leader, r, isr: leader == -1, 30
    )
    time.sleep(3 * UNCLEAN_INTERVAL_MS / 1000)  # three unclean-election passes: an absence has no event
    leader, _, isr = partition_state(cluster, "unclean")
    assert leader == -1 and isr == [1]

    # Allowed on the topic: node 2 leads, and what is lost is exactly what was above its log end.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(
        "TOPIC",
        "unclean",
        incremental_configs=[
            ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    client = admin(cluster.live_bootstrap())
    client.incremental_alter_configs([resource])[resource].result(30)
    wait_partition(
        cluster, "unclean", "node 2 elected unclean", lambda leader, r, isr: leader == 2 and isr == [2], 30
    )
    high = kcli_high_watermark(cluster[2].bootstrap, "unclean")
    assert high == 50
    got = read_all(cluster.live_bootstrap(), "unclean", high)
    assert got == {o: v for o, v in writer.acked.items() if o < 50}
    lost = {o: v for o, v in writer.acked.items() if o >= high}
    assert sorted(lost.values()) == sorted(values("only-1", 30))

    # Node 1 returns as a follower and truncates the 30 records to the new leader's log.
    cluster[1].start()
    cluster[1].wait_ready()
    wait_partition(
        cluster, "unclean", "node 1 back in the ISR", lambda leader, r, isr: sorted(isr) == [1, 2], 60
    )
    stop_all(cluster)
    assert_replicas_identical(cluster, "unclean", [1, 2], below=high + 1)
    assert max(base for base, _ in partition_batches(cluster, 1, "unclean")) < high
