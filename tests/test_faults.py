"""The fault-injection suite (tests/faults): its checker on hand-made histories, its proxy on a real
broker, and a short seeded run of faults on three real kcli processes with real clients.

1. The checker: a history that keeps every promise passes; each violation (an acknowledged write lost
   or moved, a duplicate, a value never sent, offsets out of order or with a gap, a failed write below
   what was known, read_committed missing a commit or showing an abort or half a transaction, a
   consumer that saw what the final read does not hold) is found, in one sentence.
2. The replica comparison: identical replicas pass; a batch that differs below the high watermark, or a
   log that ends below its high watermark, is found.
3. The proxy: a node-to-node connection is told from a client by its client id; cutting the link
   closes its connection and blackholes new ones while clients still pass; healing restores it.
4. A short seeded run (4 faults) with replication factor 1 (what kcli has now: faults on the node
   hosting a partition make writes fail or time out, and the checks still hold) and with replication
   factor 3 and min.insync.replicas 2. KCLI_FAULTS_SEED reruns a seed.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from faults import schedule
from faults.checker import check
from faults.disk import compare_replicas
from faults.history import History, Outcome, Seen, Transaction, TxnOutcome, Write
from faults.proxy import ProxySet, client_id_of, source_node
from faults.run import RunConfig, run

from formats.checkpoints import write_offset_checkpoint
from formats.records import RecordSpec, build_batch
from kcli.client import ClientError, KafkaClient
from kcli.protocol.messages import request_type

# --- 1. the checker ------------------------------------------------------------------------------------


def good_history() -> History:
    """Two partitions; an acked, a failed-and-absent, a timed-out-and-present write; a committed, an
    aborted and an unknown-but-whole transaction; two consumers that agree with the final read."""
    h = History("data", "txn")
    h.writes = [
        Write("v0", 0, -1, Outcome.ACKED, 0),
        Write("v1", 1, -1, Outcome.ACKED, 0),
        Write("v2", 0, 0, Outcome.FAILED, error="NOT_ENOUGH_REPLICAS"),
        Write("v3", 0, 0, Outcome.UNKNOWN, error="timed out"),
        Write("v4", 0, 0, Outcome.ACKED, 2),
        Write("v5", 1, 0, Outcome.PENDING),
    ]
    h.final = {0: [(0, "v0"), (1, "v3"), (2, "v4")], 1: [(0, "v1")]}
    h.final_end = {0: 3, 1: 1}
    h.transactions = [
        Transaction(0, [(0, "t0-0"), (1, "t0-1")], TxnOutcome.COMMITTED),
        Transaction(1, [(0, "t1-0")], TxnOutcome.ABORTED),
        Transaction(2, [(1, "t2-0"), (1, "t2-1")], TxnOutcome.UNKNOWN),
        Transaction(3, [(0, "t3-0")], TxnOutcome.UNKNOWN),
    ]
    h.final_committed = {0: [(0, "t0-0")], 1: [(0, "t0-1"), (3, "t2-0"), (4, "t2-1")]}
    h.consumed = {
        "uncommitted": [Seen("data", 0, 0, "v0"), Seen("txn", 0, 2, "t1-0"), Seen("data", 0, 1, "v3")],
        "committed": [Seen("data", 1, 0, "v1"), Seen("txn", 1, 3, "t2-0")],
    }
    h.read_committed = {"committed"}
    return h


def test_a_history_that_keeps_every_promise_passes() -> None:
    assert check(good_history()) == []
    implicit = good_history()
    implicit.writes[4].offset = None  # librdkafka's implicit acknowledgement carries no offset
    assert check(implicit) == []


def violations_after(edit: object) -> list[str]:
    history = good_history()
    edit(history)  # type: ignore[operator]
    return check(history)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda h: h.final[0].pop(2), "'v4' was acknowledged at data-0 offset 2 and is lost"),
        (
            lambda h: (setattr(h.writes[4], "offset", None), h.final[0].pop(2)),
            "'v4' was acknowledged at data-0 offset None and is lost",
        ),
        (
            lambda h: (setattr(h.writes[4], "offset", None), setattr(h.writes[4], "known_offset", 2)),
            "'v4' was acknowledged (no offset) to partition 0 above offset 2, but is at [(0, 2)]",
        ),
        (
            lambda h: setattr(h.writes[4], "offset", 5),
            "'v4' was acknowledged at data-0 offset 5 but is at [(0, 2)]",
        ),
        (lambda h: h.final[1].append((1, "v0")), "'v0' appears 2 times"),
        (lambda h: h.final[1].append((1, "x9")), "'x9' at [(1, 1)] was never sent"),
        (lambda h: h.final[0].insert(2, (1, "v2")), "data-0: offset 1 ('v2') comes after offset 1"),
        (lambda h: h.final[0].__setitem__(2, (3, "v4")), "data-0: offsets 2..2 are missing"),
        (
            lambda h: setattr(h.writes[3], "known_offset", 1),
            "'v3' (unknown) is at offset 1, not above offset 1",
        ),
        (
            lambda h: setattr(h.writes[4], "known_offset", 2),
            "'v4' was acknowledged at offset 2, not above offset 2",
        ),
        (lambda h: h.final[1].append((1, "v3")), "'v3' appears 2 times"),
        (
            lambda h: h.final_end.__setitem__(0, 4),
            "the final read stopped at offset 2, the high watermark is 4",
        ),
        (lambda h: h.final_committed[0].clear(), "committed transaction 0 lost ['t0-0']"),
        (lambda h: h.final_committed[0].append((2, "t1-0")), "aborted transaction 1 shows ['t1-0']"),
        (lambda h: h.final_committed[1].pop(), "transaction 2 (outcome unknown) is torn"),
        (lambda h: h.final_committed[0].append((5, "zz")), "read_committed shows 'zz' at [(0, 5)], which no"),
        (
            lambda h: h.consumed["uncommitted"].append(Seen("data", 0, 3, "v9")),
            "the final read has None there",
        ),
        (
            lambda h: h.consumed["uncommitted"].append(Seen("data", 0, 0, "v0")),
            "offset 0 came after offset 1",
        ),
        (lambda h: h.consumed["committed"].append(Seen("txn", 0, 2, "t1-0")), "saw 't1-0' of an aborted"),
    ],
    ids=[
        "acked-lost",
        "acked-without-offset-lost",
        "acked-without-offset-below-known",
        "acked-moved",
        "duplicate",
        "never-sent",
        "offsets-not-increasing",
        "offset-gap",
        "unknown-below-known",
        "acked-not-above-known",
        "unknown-twice",
        "final-read-short",
        "committed-lost",
        "aborted-visible",
        "unknown-torn",
        "committed-never-sent",
        "consumer-saw-lost-record",
        "consumer-went-back",
        "read-committed-saw-aborted",
    ],
)
def test_each_violation_is_found(edit: object, expected: str) -> None:
    found = violations_after(edit)
    assert any(expected in v for v in found), found


# --- 2. the replica comparison ----------------------------------------------------------------------


def write_replica(log_dir: Path, values: list[bytes], high_watermark: int, epoch: int = 0) -> None:
    """A partition `t-0` of one batch per value, and its high watermark in the checkpoint."""
    partition = log_dir / "t-0"
    partition.mkdir(parents=True)
    data = b"".join(
        build_batch([RecordSpec(1000 + i, None, v)], base_offset=i, partition_leader_epoch=epoch)
        for i, v in enumerate(values)
    )
    (partition / "00000000000000000000.log").write_bytes(data)
    (log_dir / "replication-offset-checkpoint").write_text(
        write_offset_checkpoint({("t", 0): high_watermark})
    )


def test_replicas_identical_below_the_high_watermark_pass_and_a_difference_is_found(tmp_path: Path) -> None:
    dirs = {n: tmp_path / f"node-{n}" for n in (1, 2, 3)}
    write_replica(dirs[1], [b"a", b"b", b"c"], 3)
    write_replica(dirs[2], [b"a", b"b", b"x"], 2)  # differs only above its high watermark: allowed
    write_replica(dirs[3], [b"a", b"b"], 2)
    violations, compared = compare_replicas(dirs, {("t", 0): [1, 2, 3]})
    assert violations == [] and compared == {("t", 0): 2}

    other = {n: tmp_path / f"other-{n}" for n in (1, 2)}
    write_replica(other[1], [b"a", b"b"], 2)
    write_replica(other[2], [b"a", b"z"], 2)
    violations, _ = compare_replicas(other, {("t", 0): [1, 2]})
    assert violations == ["t-0: replicas 1 and 2 differ below the high watermark 2 (batches at offsets [1])"]

    short = {n: tmp_path / f"short-{n}" for n in (1, 2)}
    write_replica(short[1], [b"a", b"b"], 2)
    write_replica(short[2], [b"a"], 2)
    violations, _ = compare_replicas(short, {("t", 0): [1, 2]})
    assert "t-0: replica 2's log ends at 1, below its high watermark 2" in violations


# --- 3. the proxy --------------------------------------------------------------------------------------


def test_the_client_id_names_the_source_node() -> None:
    assert [source_node(c) for c in ("broker-2-to-controller", "broker-3-fetcher-0", "raft-client-1")] == [
        2,
        3,
        1,
    ]
    assert [source_node(c) for c in ("rdkafka", "kcli", "broker-x-1", "raft-client-2-extra", None)] == [
        None
    ] * 5
    frame = bytes.fromhex("000000140012000300000007") + b"\x00\x0draft-client-4"
    assert client_id_of(frame) == "raft-client-4"
    assert client_id_of(frame[:13]) is None


def test_a_cut_link_blackholes_a_node_connection_while_clients_pass(broker, free_port: int) -> None:  # noqa: ANN001
    proxies = ProxySet([(1, free_port, broker.port)])
    proxies.start()
    api_versions = request_type(18, 0)

    async def ask(client_id: str, timeout: float = 2.0) -> bool:
        try:
            client = await KafkaClient.connect(
                f"127.0.0.1:{free_port}",
                client_id=client_id,
                connect_timeout=timeout,
                request_timeout=timeout,
            )
        except (ClientError, OSError, TimeoutError):
            return False
        try:
            await client.send(api_versions(), timeout=timeout)
            return True
        except (ClientError, OSError, TimeoutError):
            return False
        finally:
            await client.close()

    try:
        assert asyncio.run(ask("broker-2-fetcher-0")) and asyncio.run(ask("rdkafka"))
        proxies.cut([(2, 1)])
        assert not asyncio.run(ask("broker-2-fetcher-0"))  # accepted, never answered
        assert asyncio.run(ask("raft-client-3")) and asyncio.run(ask("rdkafka"))
        assert proxies.links.connections[(2, 1)] >= 2
        proxies.heal()
        assert asyncio.run(ask("broker-2-fetcher-0"))
    finally:
        proxies.stop()


@pytest.fixture
def free_port() -> int:
    from faults.cluster import free_port_range

    return free_port_range(1)


# --- 4. a short seeded run -----------------------------------------------------------------------------

SEED = int(os.environ.get("KCLI_FAULTS_SEED", "7"))  # kill and cut the leader, isolate and stop followers


@pytest.mark.timeout(280)
def test_a_short_seeded_run_of_faults_keeps_every_promise(tmp_path: Path) -> None:
    config = RunConfig(
        seed=SEED,
        faults=4,
        replication_factor=3,
        min_insync_replicas=2,
        steady_timeout=45.0,
        recovery_timeout=60.0,
    )
    result = run(config, tmp_path)
    assert result.ok, result.report()
    assert len(result.faults) == 4 and all(f.recovery_s is not None for f in result.faults), result.report()
    assert {f.kind for f in result.faults} == {f.kind for f in schedule.plan(SEED, 4)}
    acked = sum(1 for w in result.history.writes if w.outcome is Outcome.ACKED)
    assert acked > 100, result.report()
    assert any(t.outcome is TxnOutcome.COMMITTED for t in result.history.transactions), result.report()
