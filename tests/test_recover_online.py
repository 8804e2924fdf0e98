"""`kcli recover partitions`: the unclean recovery of partitions whose whole ISR is gone.

Pure: Kafka's follower truncation worked out from epoch histories, and KIP-966's ranking.
Real: a controller and three brokers (isolated mode, so that stopping brokers never costs the quorum),
one topic of two partitions on brokers [2, 3, 4] with unclean.leader.election.enable=false. Ten records
per partition reach all three (A), and five of a transaction on partition 1; broker 4 is stopped
(SIGSTOP) and leaves the ISR, the transaction aborts (its marker on 2 and 3 only), ten more reach 2 and
3 (B), and five of a transaction on partition 0; broker 3 is stopped too, that transaction commits
(its marker on 2 alone), ten more reach 2 alone (C); broker 2, the whole ISR, is killed and 3 and 4
resume: no partition has a leader. The dry run (broker 2's replica read from its log dir) predicts per
candidate what each replica loses; partition 0 is recovered on broker 3 (the controller's own pick),
partition 1 on broker 4 (a reorder first): exactly the predicted records are missing afterwards,
`orders.recovered` holds exactly them, with their offsets in headers, and a run cut short after its
quarantine copies nothing twice; each transaction whose marker went with broker 2 ends as it had
(COMMIT on 0, ABORT on 1), so read_committed consumers see exactly the committed records; a group
whose committed offset lay above the new log end resumes after the reset the report names.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_kcli
from kraft_cluster import SESSION, IsolatedCluster, NodeProcess, admin, kcli, wait_for

from ops.recover.candidates import (
    EpochHistory,
    ReplicaInfo,
    as_new_leader,
    plan_candidates,
    truncation_offset,
)
from ops.recover.online import read_from_log_dir

TOPIC = "orders"
BROKERS = (2, 3, 4)
PER_STEP = 10
OVERRIDES = (
    *SESSION,
    "replica.lag.time.max.ms=3000",
    "replica.fetch.backoff.ms=200",
    "offsets.topic.num.partitions=4",
    "transaction.state.log.num.partitions=3",  # one partition led by each broker: broker 2 leads one
    "transaction.state.log.min.isr=1",  # the transactions end with one broker left
)
TXN_RECORDS = 5


# --- pure: truncation and ranking -------------------------------------------------------------------


def history(log_end: int, *entries: tuple[int, int]) -> EpochHistory:
    return EpochHistory(tuple(entries), log_end)


def test_a_follower_truncates_where_its_epochs_leave_the_leaders() -> None:
    leader = as_new_leader(history(15, (0, 0), (3, 10)), 6)
    # A follower ahead in the same epoch keeps the leader's length of it.
    assert truncation_offset(as_new_leader(history(20, (0, 0)), 1), history(30, (0, 0))) == 20
    # A follower that is a prefix of the leader loses nothing.
    assert truncation_offset(leader, history(12, (0, 0), (3, 10))) == 12
    # Offsets 10 and 11 were written in epoch 0 on the follower, in epoch 3 on the leader: cut at 10,
    # after a first round at the start of the follower's epoch 5, which the leader never had.
    assert truncation_offset(leader, history(20, (0, 0), (5, 12))) == 10
    # Nothing in common beyond an epoch the leader started later: everything goes.
    assert truncation_offset(as_new_leader(history(5, (4, 0)), 5), history(8, (2, 0))) == 0


@pytest.mark.parametrize(
    ("entries", "log_start", "log_end", "latest"),
    [
        (((0, 0),), 0, 30, 0),
        (((0, 0), (2, 10), (5, 12), (7, 40)), 0, 50, 7),
        (((0, 0), (2, 10), (5, 12), (7, 40)), 0, 50, 9),  # asked from above the latest
        (((3, 5), (4, 9)), 0, 20, 4),  # epoch-less records below offset 5 (message format v0/v1)
        (((1, 0), (4, 20)), 15, 30, 4),  # log start past the first epoch's start
    ],
)
def test_the_epoch_walk_rebuilds_the_history_a_broker_answers_from(
    entries: tuple[tuple[int, int], ...], log_start: int, log_end: int, latest: int
) -> None:
    import asyncio

    from ops.recover.online import walk_epoch_history

    log = EpochHistory(entries, log_end)  # kcli's and Kafka's LeaderEpochFileCache.endOffsetFor rule
    asked: list[int] = []

    async def ask(epoch: int) -> tuple[int, int]:
        asked.append(epoch)
        return log.end_offset_for(epoch)

    found = asyncio.run(walk_epoch_history(ask, latest, log_start))
    assert found == tuple(
        (e, max(start, log_start) if k == 0 else start) for k, (e, start) in enumerate(entries)
    )
    assert len(asked) <= len(entries) + 2 + (latest - entries[-1][0])


def test_candidates_rank_as_kip_966_and_each_loss_is_counted() -> None:
    replicas = [
        ReplicaInfo(4, True, "broker", history(10, (0, 0))),
        ReplicaInfo(3, True, "broker", history(20, (0, 0))),
        ReplicaInfo(2, False, "logdir", history(30, (0, 0), (1, 25))),
        ReplicaInfo(5, True, "none", None, error="unreachable"),
    ]
    ranked = plan_candidates(replicas, partition_epoch=1)
    assert [(c.broker, c.electable) for c in ranked] == [(2, False), (3, True), (4, True)]
    by_broker = {c.broker: c for c in ranked}
    assert [(x.broker, x.start, x.end) for x in by_broker[3].losses] == [(2, 20, 30)]
    assert [(x.broker, x.start, x.end) for x in by_broker[4].losses] == [(3, 10, 20), (2, 10, 30)]
    assert by_broker[3].unknown == (5,)
    assert by_broker[2].why_not is not None and by_broker[2].losses == ()


def test_the_controllers_unclean_pick_is_predicted_with_and_without_elr() -> None:
    from ops.recover.candidates import PartitionRecovery
    from ops.recover.unclean import controller_pick

    plan = PartitionRecovery("t", 0, -1, [2, 3, 4], [2])
    assert controller_pick(plan, {3, 4}) == 3  # no live ISR member: the first live one in replica order
    assert controller_pick(plan, {2, 4}) == 2  # a live ISR member first
    with_elr = PartitionRecovery("t", 0, -1, [2, 3, 4], [], elr=[], last_known_elr=[4])
    assert controller_pick(with_elr, {3, 4}) == 4  # ELR on: the live last known leader, before replica order
    assert controller_pick(with_elr, {3}) == 3


def test_a_stopped_replica_is_read_from_its_log_dir(tmp_path: Path) -> None:
    from formats import checkpoints
    from formats.records import ControlType, RecordSpec, build_batch, build_control_batch
    from formats.segment import filename
    from ops.recover.online import PartitionState, read_from_log_dir, replica_from_log_dir

    directory = tmp_path / f"{TOPIC}-0"
    directory.mkdir()
    plain = build_batch(
        [RecordSpec(1, None, b"a%d" % i) for i in range(5)], base_offset=0, partition_leader_epoch=0
    )
    txn = build_batch(
        [RecordSpec(2, b"k", b"t%d" % i, [("h", b"v")]) for i in range(3)],
        base_offset=5, partition_leader_epoch=2, producer_id=7, producer_epoch=0, base_sequence=0,
        is_transactional=True,
    )  # fmt: skip
    marker = build_control_batch(
        ControlType.ABORT,
        base_offset=8,
        partition_leader_epoch=2,
        producer_id=7,
        producer_epoch=0,
        timestamp=3,
    )
    (directory / filename(0, ".log")).write_bytes(plain + txn + marker)
    (directory / "leader-epoch-checkpoint").write_text(
        checkpoints.write_leader_epoch_checkpoint(
            [checkpoints.EpochEntry(0, 0), checkpoints.EpochEntry(2, 5)]
        )
    )
    (tmp_path / "replication-offset-checkpoint").write_text(
        checkpoints.write_offset_checkpoint({(TOPIC, 0): 5})
    )
    state = PartitionState(TOPIC, 0, -1, 3, (1, 2), (1,))
    info = replica_from_log_dir(1, tmp_path, state, live={2})
    assert (info.live, info.source, info.in_isr, info.high_watermark) == (False, "logdir", True, 5)
    assert info.history == EpochHistory(((0, 0), (2, 5)), 9)
    read = read_from_log_dir(tmp_path, (TOPIC, 0), 6, 9)
    records, size, producers = read.since(6)
    assert [(r.offset, r.value, r.headers, r.leader_epoch, r.transaction) for r in records] == [
        (6, b"t1", (("h", b"v"),), 2, "aborted"),
        (7, b"t2", (("h", b"v"),), 2, "aborted"),
    ]  # the marker is not a record; the whole batch holding offset 6 is cut
    assert (size, producers) == (len(txn) + len(marker), (7,))
    # A marker past the range read still settles the records before it; a transaction without one is open.
    early = read_from_log_dir(tmp_path, (TOPIC, 0), 0, 8).records
    assert [r.transaction for r in early] == [None] * 5 + ["aborted"] * 3
    (directory / filename(0, ".log")).write_bytes(plain + txn)
    assert [r.transaction for r in read_from_log_dir(tmp_path, (TOPIC, 0), 5, 8).records] == ["open"] * 3
    missing = replica_from_log_dir(3, tmp_path / "nowhere", state, live=set())
    assert missing.history is None and "does not exist" in (missing.error or "")


def test_bad_logdir_argument_is_one_sentence(tmp_path: Path) -> None:
    done = run_kcli("recover", "partitions", "--logdir", "two=/nowhere")
    assert done.returncode != 0
    assert "--logdir takes BROKER=PATH" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


# --- real: a cluster with diverged replicas ---------------------------------------------------------


def states(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    metadata = admin(bootstrap).list_topics(topic, timeout=10)
    parts = metadata.topics[topic].partitions
    return {p: (i.leader, list(i.replicas), list(i.isrs)) for p, i in parts.items()}


def wait_states(bootstrap: str, what: str, check: Any, timeout: float = 60.0) -> Any:
    return wait_for(
        what, lambda: (lambda s: s if check(s) else None)(states(bootstrap, TOPIC)), timeout, 0.25
    )


def produce(bootstrap: str, step: str) -> dict[int, dict[int, bytes]]:
    """PER_STEP records to each partition, acks=all; {partition: {offset: value}}."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000}
    )
    acked: dict[int, dict[int, bytes]] = {0: {}, 1: {}}
    failed: list[str] = []

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.partition()][msg.offset()] = msg.value()
        else:
            failed.append(err.name())

    for partition in (0, 1):
        for i in range(PER_STEP):
            producer.produce(
                TOPIC, value=f"{step}-{partition}-{i}".encode(), partition=partition, on_delivery=done
            )
    assert producer.flush(60) == 0 and not failed, failed
    return acked


def consume(
    bootstrap: str, topic: str, partition: int, count: int, *, committed: bool = True, group: str = ""
) -> list[Any]:
    """`count` messages of `topic`-`partition`: from offset 0 (read_committed, or read_uncommitted), or
    from `group`'s committed offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group or f"{topic}-check", "enable.auto.commit": False,
         "isolation.level": "read_committed" if committed else "read_uncommitted"}
    )  # fmt: skip
    got: list[Any] = []
    end = count
    try:
        if group:
            [start] = consumer.committed([TopicPartition(topic, partition)], timeout=30)
            consumer.assign([start])
        else:
            consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 30
        while len(got) < end and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message)
    finally:
        consumer.close()
    assert len(got) == end, f"{len(got)} of {end} messages of {topic}-{partition}"
    return got


def commit(bootstrap: str, group: str, partition: int, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:  # the first commit creates __consumer_offsets: its coordinator takes a moment to load
        wait_for(
            f"a commit of group {group}",
            lambda: consumer.commit(offsets=[TopicPartition(TOPIC, partition, offset)], asynchronous=False),
            30,
            0.25,
        )
    finally:
        consumer.close()


def high_watermark(bootstrap: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "marks"})
    try:
        return wait_for(
            f"the high watermark of {TOPIC}-{partition}",
            lambda: consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=5),
            30,
            0.25,
        )[1]
    finally:
        consumer.close()


def signal_node(node: NodeProcess, sig: int) -> None:
    os.kill(node.pid, sig)


def coordinated_by(bootstrap: str, broker: int, prefix: str) -> str:
    """A transactional id whose coordinator is `broker`. The transactions here end after a broker is
    stopped (SIGSTOP); an EndTxn sent to a stopped coordinator would wait out librdkafka's 60 s socket
    timeout, though the coordinator moves a session timeout after the stop."""
    import asyncio

    from kcli.cluster import Cluster
    from ops.transactions import transaction_coordinator

    async def find() -> str | None:
        async with await Cluster.connect(bootstrap) as cluster:
            for k in range(64):
                if (await transaction_coordinator(cluster, f"{prefix}-{k}"))[0] == broker:
                    return f"{prefix}-{k}"
        return None

    return wait_for(
        f"a transactional id coordinated by broker {broker}", lambda: asyncio.run(find()), 30, 0.5
    )


def open_transaction(bootstrap: str, transactional_id: str, partition: int) -> tuple[Any, dict[int, bytes]]:
    """A transactional producer with TXN_RECORDS records written to `partition`, acked, not yet ended."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
         "message.timeout.ms": 60000, "transaction.timeout.ms": 120000}
    )  # fmt: skip
    producer.init_transactions(60)
    producer.begin_transaction()
    acked: dict[int, bytes] = {}
    for i in range(TXN_RECORDS):
        producer.produce(
            TOPIC,
            value=f"{transactional_id}-{i}".encode(),
            partition=partition,
            on_delivery=lambda err, msg: (
                acked.__setitem__(msg.offset(), msg.value()) if err is None else None
            ),
        )
    assert producer.flush(60) == 0 and len(acked) == TXN_RECORDS, acked
    return producer, acked


@dataclass
class Planted:
    cluster: IsolatedCluster
    produced: dict[int, dict[int, bytes]]  # every acked record, transactional ones too
    aborted: set[tuple[int, int]]  # (partition, offset) of the aborted transaction's records


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Planted]:
    cluster = IsolatedCluster(tmp_path_factory.mktemp("recover-online"), OVERRIDES)
    stopped: list[NodeProcess] = []
    try:
        cluster.start()
        everyone = cluster.brokers(*BROKERS)
        from confluent_kafka.admin import NewTopic

        client = admin(everyone)  # kept: the futures die with their client
        created = client.create_topics(
            [NewTopic(TOPIC, 2, replica_assignment=[list(BROKERS)] * 2,
                      config={"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})],
            operation_timeout=30,
        )  # fmt: skip
        created[TOPIC].result(30)
        wait_states(
            everyone, "a full ISR", lambda s: all(v[0] == 2 and sorted(v[2]) == [2, 3, 4] for v in s.values())
        )
        produced: dict[int, dict[int, bytes]] = {0: {}, 1: {}}
        aborted: set[tuple[int, int]] = set()
        # (step, the partition of a transaction, how it ends, the broker stopped before it ends, the ISR left)
        steps = (("A", 1, "abort", 4, [2, 3]), ("B", 0, "commit", 3, [2]))
        for step, partition, end, victim, isr in steps:
            for p, records in produce(everyone, step).items():
                produced[p].update(records)
            producer, records = open_transaction(
                everyone, coordinated_by(everyone, 2, f"txn-{step}"), partition
            )
            produced[partition].update(records)
            if end == "abort":
                aborted.update((partition, o) for o in records)
            signal_node(cluster[victim], signal.SIGSTOP)
            stopped.append(cluster[victim])
            wait_states(
                cluster.brokers(2),
                f"broker {victim} out of the ISR",
                lambda s, isr=isr: all(sorted(v[2]) == isr for v in s.values()),
            )
            getattr(producer, f"{end}_transaction")(60)
        for p, records in produce(cluster.brokers(2), "C").items():
            produced[p].update(records)
        cluster[2].kill()
        for node in stopped:
            signal_node(node, signal.SIGCONT)
        stopped.clear()
        live = cluster.brokers(3, 4)
        wait_for(
            "brokers 3 and 4 back, no leader anywhere",
            lambda: (
                {b.id for b in admin(live).list_topics(TOPIC, timeout=10).brokers.values()} == {3, 4}
                and all(v[0] == -1 for v in states(live, TOPIC).values())
            ),
            60,
            0.25,
        )
        yield Planted(cluster, produced, aborted)
    finally:
        for node in stopped:
            if node.running:
                signal_node(node, signal.SIGCONT)
        cluster.kill_all()


def test_dry_run_then_execute_loses_exactly_what_was_predicted(planted: Planted, tmp_path: Path) -> None:
    cluster, produced = planted.cluster, planted.produced
    live = cluster.brokers(3, 4)
    # Offsets: A 0-9 on both; partition 1: the aborted transaction 10-14, its marker 15, B 16-25, C
    # 26-35; partition 0: B 10-19, the committed transaction 20-24, its marker 25, C 26-35.
    assert {p: (len(r), produced_end(r)) for p, r in produced.items()} == {0: (35, 36), 1: (35, 36)}
    dry = run_kcli(
        "recover", "partitions", "--bootstrap-server", live, "--topic", TOPIC,
        "--logdir", f"2={cluster.data(2)}", "-o", "json",
    )  # fmt: skip
    assert dry.returncode == 3, dry.stderr
    text = run_kcli("recover", "partitions", "--bootstrap-server", live, "--logdir", f"2={cluster.data(2)}")
    assert text.returncode == 3, text.stderr
    assert (
        "  candidate 3: broker 4 (last epoch 0, log end 10): broker 2 loses offsets 10..35 (25 records, "
        in text.stdout
    ), text.stdout
    plans = {p["partition"]: p for p in map(json.loads, dry.stdout.splitlines())}
    assert sorted(plans) == [0, 1], dry.stdout
    log_ends = {0: {2: 36, 3: 25, 4: 10}, 1: {2: 36, 3: 26, 4: 15}}
    for partition, plan in plans.items():
        found = {r["broker"]: r for r in plan["replicaStates"]}
        assert {b: (r["source"], r["logEndOffset"]) for b, r in found.items()} == {
            b: ("logdir" if b == 2 else "broker", end) for b, end in log_ends[partition].items()
        }, found
        # A live follower's own high watermark comes with its Fetch -2 answer (its last one from broker 2).
        high = {b: found[b]["highWatermark"] for b in (3, 4)}
        assert all(h is not None and 0 <= h <= found[b]["logEndOffset"] for b, h in high.items()), found
        assert [(c["broker"], c["electable"]) for c in plan["candidates"]] == [
            (2, False),
            (3, True),
            (4, True),
        ], plan
    # Predicted, per candidate: {broker: (start, end, records)}; markers are not records.
    predicted = {
        (p, c["broker"]): {x["broker"]: (x["startOffset"], x["endOffset"], x["records"]) for x in c["losses"]}
        for p, plan in plans.items()
        for c in plan["candidates"]
    }
    assert predicted[(0, 3)] == {2: (25, 36, 10)}, dry.stdout
    assert predicted[(1, 4)] == {3: (15, 26, 10), 2: (15, 36, 20)}, dry.stdout

    # Without broker 2's log dir its loss is unknown, and --execute refuses before doing anything.
    blind = run_kcli("recover", "partitions", "--bootstrap-server", live, "--topic", TOPIC, "-o", "json")
    assert [p["candidates"][0]["unknown"] for p in map(json.loads, blind.stdout.splitlines())] == [[2], [2]]
    refused = run_kcli(
        "recover", "partitions", "--bootstrap-server", live, "--topic", TOPIC, "--partition", "0",
        "--execute", "--journal", str(tmp_path / "refused.jsonl"),
    )  # fmt: skip
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "give their --logdir or --allow-unread-loss" in refused.stderr, refused.stderr
    assert not (tmp_path / "refused.jsonl").exists()  # refused before anything, the journal included

    commit(live, "ahead", 0, 30)  # a group that consumed records the recovery will lose
    # A run cut short after its quarantine: partition 0's records are there before the run below.
    assert quarantine_only(live, cluster.data(2), 0, 3, tmp_path / "cut.jsonl") == 10

    journal = tmp_path / "journal.jsonl"
    results = {}
    for partition, candidate in ((0, 3), (1, 4)):
        done = kcli(
            "recover", "partitions", "--bootstrap-server", live, "--topic", TOPIC,
            "--partition", str(partition), "--logdir", f"2={cluster.data(2)}", "--execute",
            "--candidate", str(candidate), "--journal", str(journal), "-o", "json", timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        result = results[partition] = json.loads(done.stdout.splitlines()[-1])
        assert result["leader"] == candidate and result["replicasReordered"] == (candidate == 4)
    assert [results[p]["quarantined"] for p in (0, 1)] == [0, 20]  # partition 0's ten were copied before
    # Each transaction whose marker only broker 2 had ends as it did, by a marker at the new log end.
    assert [(t["startOffset"], t["result"]) for t in results[0]["openTransactions"]] == [(20, "committed")]
    assert [(t["startOffset"], t["result"]) for t in results[1]["openTransactions"]] == [(10, "aborted")]
    assert [results[p]["logEndOffset"] for p in (0, 1)] == [26, 16]
    assert results[0]["groupsAboveLogEnd"] == [{"group": "ahead", "committedOffset": 30, "logEndOffset": 26}]
    assert results[1]["groupsAboveLogEnd"] == []

    # Broker 3 leads partition 0, broker 4 partition 1, whose replica order is back (every broker's
    # metadata catches up in its own time).
    wait_states(
        live,
        "brokers 3 and 4 leading, the replica order back",
        lambda s: s[0][0] == 3 and s[1][0] == 4 and s[1][1] == [2, 3, 4],
    )
    quarantined: dict[int, dict[int, bytes]] = {0: {}, 1: {}}
    for message in consume(live, TOPIC + ".recovered", 0, 10 + 20):
        headers = dict(message.headers())
        assert headers["kcli.recovered.topic"] == TOPIC.encode()
        quarantined[int(headers["kcli.recovered.partition"])][int(headers["kcli.recovered.offset"])] = (
            message.value()
        )
    for partition, candidate in ((0, 3), (1, 4)):
        end = results[partition]["logEndOffset"]
        assert high_watermark(live, partition) == end
        kept = {m.offset(): m.value() for m in consume(live, TOPIC, partition, end - 1, committed=False)}
        missing = {o: v for o, v in produced[partition].items() if kept.get(o) != v}
        losses = predicted[(partition, candidate)]
        lost_offsets = {o for start, stop, _ in losses.values() for o in range(start, stop)}
        assert missing == {o: produced[partition][o] for o in lost_offsets if o in produced[partition]}
        assert quarantined[partition] == missing
        # read_committed: no transaction hangs, the aborted one stays hidden.
        visible = {o: v for o, v in kept.items() if (partition, o) not in planted.aborted}
        got = consume(live, TOPIC, partition, len(visible))
        assert {m.offset(): m.value() for m in got} == visible
    # The group ahead of the log end resumes from the new records after the reset the report names.
    reset = run_kcli(
        "groups", "reset-offsets", "ahead", "--bootstrap-server", live, "--topic", f"{TOPIC}:0",
        "--to-latest", "--execute",
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr
    # Broker 3 follows broker 4 on partition 1, truncated to its log: it answers OffsetForLeaderEpoch
    # for its own log to the debugging replica id only (kcli's extension), as a follower to anyone else.
    wait_states(live, "broker 3 back in the ISR of partition 1", lambda s: sorted(s[1][2]) == [3, 4])
    assert epoch_end(cluster.brokers(3), 1, 0, replica_id=-2) == ("none", 0, 15)
    assert epoch_end(cluster.brokers(3), 1, 0, replica_id=-1)[0] == "not_leader_or_follower"
    # Broker 2 comes back: it truncates exactly what was predicted for it and holds the leaders' logs.
    cluster[2].start()
    cluster[2].wait_ready()
    wait_states(live, "broker 2 back in every ISR", lambda s: all(2 in v[2] for v in s.values()))
    for partition, candidate in ((0, 3), (1, 4)):
        start = predicted[(partition, candidate)][2][0]
        on_disk = read_from_log_dir(cluster.data(2), (TOPIC, partition), 0, 1 << 62).records
        assert {r.offset: r.value for r in on_disk} == {
            o: v for o, v in produced[partition].items() if o < start
        }
    # Every replica's epoch history, walked over OffsetForLeaderEpoch, now has the epoch of the recovery.
    new = produce(live, "D")
    again = run_kcli("recover", "partitions", "--bootstrap-server", live, "--topic", TOPIC, "-o", "json")
    assert again.returncode == 0, again.stderr  # both partitions have a leader: nothing to recover
    for plan in map(json.loads, again.stdout.splitlines()):
        start = {0: 25, 1: 15}[plan["partition"]]
        histories = {r["broker"]: (r["epochs"], r["logEndOffset"]) for r in plan["replicaStates"]}
        assert len({json.dumps(h) for h in histories.values()}) == 1, histories  # all three alike
        epochs, end = histories[2]
        assert end == start + 1 + PER_STEP and epochs[0] == [0, 0] and epochs[-1][1] == start, epochs
        assert all(c["losses"] == [] for c in plan["candidates"])
    assert {m.offset(): m.value() for m in consume(live, TOPIC, 0, PER_STEP, group="ahead")} == new[0]
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    actions = [line["action"] for line in lines]
    assert actions.count("elect_unclean") == 2 and actions.count("reorder_replicas") == 1
    assert actions.count("write_txn_marker") == 2
    of_1 = [line["action"] for line in lines if line.get("partition") == f"{TOPIC}-1"]
    assert of_1.index("quarantine") < of_1.index("elect_unclean") < of_1.index("write_txn_marker"), of_1


def quarantine_only(bootstrap: str, broker_2: Path, partition: int, candidate: int, journal: Path) -> int:
    """The first step of `--execute` alone, twice, as a run stopped after it and its rerun leave it:
    the records copied by the first (the second copies none)."""
    import asyncio

    from kcli.cluster import Cluster
    from ops.recover.online import plan_partitions
    from ops.recover.unclean import Journal, _quarantine

    async def run() -> int:
        async with await Cluster.connect(bootstrap) as cluster:
            [plan] = await plan_partitions(
                cluster, topics=[TOPIC], partitions=[partition], log_dirs={2: [broker_2]}
            )
            chosen = next(c for c in plan.candidates if c.broker == candidate)
            written = Journal(journal)
            try:
                first = await _quarantine(cluster, plan, chosen, written, lambda _: None)
                assert await _quarantine(cluster, plan, chosen, written, lambda _: None) == 0
            finally:
                written.close()
            return first

    return asyncio.run(run())


def epoch_end(bootstrap: str, partition: int, epoch: int, *, replica_id: int) -> tuple[str, int, int]:
    """(error name, epoch, end offset) of OffsetForLeaderEpoch v4 sent to one broker, by kcli's client."""
    import asyncio

    from kcli.client import KafkaClient
    from kcli.protocol.messages import nested_type, request_type

    async def ask() -> tuple[str, int, int]:
        cls = request_type(23, 4)
        topic_cls = nested_type(cls, "OffsetForLeaderTopic")
        partition_cls = nested_type(cls, "OffsetForLeaderPartition")
        request = cls(
            replica_id=replica_id,
            topics=(
                topic_cls(
                    topic=TOPIC,
                    partitions=(
                        partition_cls(partition=partition, current_leader_epoch=-1, leader_epoch=epoch),
                    ),
                ),
            ),
        )
        async with await KafkaClient.connect(bootstrap) as client:
            answer = (await client.send(request)).topics[0].partitions[0]
        return answer.error_code.name, answer.leader_epoch, answer.end_offset

    return asyncio.run(ask())


def produced_end(records: dict[int, bytes]) -> int:
    return max(records) + 1
