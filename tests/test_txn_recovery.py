"""Recovery of the aborted-transaction index (`.txnindex`) and the last stable offset after a crash.

Kafka's LogSegment.recover rebuilds a segment's `.txnindex` while it re-validates the batches, replaying
them one at a time into the producer state at the segment's base offset, so each ABORT marker's entry
carries the last stable offset of its moment. Logs are built through the Log API (transactional batches
as a produce the coordinator verified, markers as the coordinator writes them), crashed by dropping every
handle without a close, damaged (index deleted or stale, torn tail inside or after a marker) and loaded
again without the clean-shutdown marker. The last test kills a real broker with SIGKILL.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, kcli_env, start_broker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from waiting import wait_for

from formats.index import AbortedTxn, encode_aborted_txn, read_txn_index
from formats.records import RecordSpec, build_batch
from kcli.broker.log import Log, LogConfig
from kcli.broker.log.log import TxnMarker
from kcli.client import KafkaClient
from kcli.protocol.messages import build, request_type

pytestmark = pytest.mark.timeout(90)

T0 = 1_700_000_000_000


def txn_batch(producer_id: int, sequence: int, count: int = 2) -> bytes:
    records = [RecordSpec(T0, b"k%d" % i, b"v%d" % i) for i in range(count)]
    return build_batch(
        records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, is_transactional=True
    )


class Writer:
    """A log written as a client and its transaction coordinator would: data batches and markers.

    After each write the high watermark is raised to the log end, as the only in-sync replica's
    Partition does (the Log never moves its own high watermark)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}

    def data(self, producer_id: int) -> int:
        sequence = self.sequences.get(producer_id, 0)
        self.sequences[producer_id] = sequence + 2
        info = self.log.append_as_leader(
            txn_batch(producer_id, sequence), leader_epoch=0, now_ms=T0, transaction_verified=True
        )
        self.log.update_high_watermark(self.log.log_end_offset)
        return info.first_offset

    def end(self, producer_id: int, *, commit: bool) -> int:
        [info] = self.log.write_txn_markers([TxnMarker(producer_id, 0, 0, commit)], leader_epoch=0, now_ms=T0)
        self.log.update_high_watermark(self.log.log_end_offset)
        return info.first_offset


def new_log(dir: Path, **config: object) -> Log:
    return Log.create(dir / "t-0", LogConfig(**config), uuid.uuid4(), clock=lambda: T0)


def crash_and_reload(log: Log, *, recovery_point: int = 0, report: list[str] | None = None) -> Log:
    """Drop every handle without closing (no snapshot at the log end, no clean-shutdown marker), then load."""
    log.close_handlers()
    reloaded = Log.load(
        log.dir,
        log.config,
        recovery_point_checkpoint=recovery_point,
        had_clean_shutdown=False,
        high_watermark_checkpoint=0,
        clock=lambda: T0,
        report=(report if report is not None else []).append,
    )
    reloaded.update_high_watermark(reloaded.log_end_offset)  # as the only replica becoming leader
    return reloaded


def txn_indexes(log: Log) -> dict[int, list[AbortedTxn]]:
    """Every segment's `.txnindex` as read from disk (missing file: no entries)."""
    found = {}
    for segment in log.segments:
        path = segment.txn_index_path
        found[segment.base_offset] = read_txn_index(path.read_bytes()) if path.exists() else []
    return found


def state_of(log: Log) -> tuple:
    """What read_committed readers depend on: LSO, open transactions, and every segment's index."""
    log.update_high_watermark(log.log_end_offset)
    return (
        log.log_end_offset,
        log.last_stable_offset,
        dict(log.producer_state.ongoing_txns),
        txn_indexes(log),
        log.collect_aborted_transactions(0, log.log_end_offset),
    )


def interleaved(dir: Path) -> tuple[Log, Writer]:
    """Two segments; aborts whose last stable offset is held back by another producer's transaction,
    one transaction spanning the roll, one left open at the end."""
    log = new_log(dir)
    w = Writer(log)
    w.data(1)  # 0-1
    w.data(2)  # 2-3
    w.end(1, commit=False)  # 4: aborts 0..4, LSO 2 (producer 2 still open)
    w.data(3)  # 5-6
    log.roll()
    w.end(2, commit=False)  # 7: aborts 2..7, LSO 5 (producer 3)
    w.end(3, commit=True)  # 8
    w.data(4)  # 9-10
    w.data(1)  # 11-12
    w.end(1, commit=False)  # 13: aborts 11..13, LSO 9 (producer 4, left open)
    return log, w


# --- rebuilt at recovery ---------------------------------------------------------------------------------


def test_deleted_txnindex_is_rebuilt_with_each_aborts_last_stable_offset(tmp_path: Path) -> None:
    log, _ = interleaved(tmp_path)
    before = state_of(log)
    assert before[3] == {
        0: [AbortedTxn(0, 1, 0, 4, 2)],
        7: [AbortedTxn(0, 2, 2, 7, 5), AbortedTxn(0, 1, 11, 13, 9)],
    }
    assert before[1] == 9 and before[2] == {9: 4}
    originals = {s.base_offset: s.txn_index_path.read_bytes() for s in log.segments}
    for segment in log.segments:
        segment.txn_index_path.unlink()
    recovered = crash_and_reload(log)
    assert state_of(recovered) == before
    # Byte for byte what the appends wrote (Kafka's 34-byte entries).
    assert {s.base_offset: s.txn_index_path.read_bytes() for s in recovered.segments} == originals
    # The transaction left open is still open: its producer can end it, and the abort is indexed.
    Writer(recovered).end(4, commit=False)
    assert recovered.segments[-1].aborted_txns()[-1] == AbortedTxn(0, 4, 9, 14, 15)
    assert recovered.last_stable_offset == 15
    recovered.close()


def test_stale_entries_past_the_recovery_point_are_dropped(tmp_path: Path) -> None:
    log, _ = interleaved(tmp_path)
    before = state_of(log)
    active = log.segments[-1]
    # An abort the log does not hold (its marker was lost with unflushed bytes) left in the index.
    with open(active.txn_index_path, "ab") as f:
        f.write(encode_aborted_txn(AbortedTxn(0, 9, 20, 25, 20)))
    recovered = crash_and_reload(log, recovery_point=active.base_offset + 1)
    assert state_of(recovered) == before
    recovered.close()


def test_segments_below_the_recovery_point_are_trusted(tmp_path: Path) -> None:
    """Kafka recovers only the segments from the one holding the recovery point: a flushed segment's
    index is not read again, and an open transaction spanning the roll comes from the snapshot."""
    log, _ = interleaved(tmp_path)
    before = state_of(log)
    first, active = log.segments
    first.txn_index_path.unlink()
    active.txn_index_path.unlink()
    recovered = crash_and_reload(log, recovery_point=active.base_offset)
    after = state_of(recovered)
    assert after[3] == {0: [], 7: before[3][7]}
    assert after[:3] == before[:3]
    recovered.close()


def test_unreadable_txnindex_after_a_clean_shutdown_gets_its_segment_recovered(tmp_path: Path) -> None:
    log, _ = interleaved(tmp_path)
    before = state_of(log)
    log.close()
    first = log.dir / f"{0:020d}.txnindex"
    first.write_bytes(first.read_bytes() + b"\x00" * 5)  # not a multiple of 34 bytes
    lines: list[str] = []
    reloaded = Log.load(
        log.dir, log.config, had_clean_shutdown=True, high_watermark_checkpoint=14, clock=lambda: T0,
        report=lines.append,
    )  # fmt: skip
    assert any("transaction index" in line and first.name in line for line in lines), lines
    assert state_of(reloaded) == before
    reloaded.close()


def test_torn_tail_inside_an_abort_marker_reopens_the_transaction(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    w = Writer(log)
    w.data(1)  # 0-1
    w.end(1, commit=False)  # 2
    w.data(2)  # 3-4
    w.end(2, commit=False)  # 5: the marker that will be torn
    active = log.segments[-1]
    assert active.aborted_txns() == [AbortedTxn(0, 1, 0, 2, 3), AbortedTxn(0, 2, 3, 5, 6)]
    marker_size = len(
        build_batch([RecordSpec(T0, b"\x00\x00\x00\x00", b"\x00" * 6)], producer_id=2, is_control=True)
    )
    size = active.size
    lines: list[str] = []
    log.close_handlers()
    os.truncate(active.log_path, size - marker_size // 2)
    recovered = crash_and_reload(log, report=lines)
    assert any("truncated" in line for line in lines), lines
    assert recovered.log_end_offset == 5
    # The abort is gone from the index; producer 2's transaction is open again from offset 3.
    assert txn_indexes(recovered) == {0: [AbortedTxn(0, 1, 0, 2, 3)]}
    assert recovered.last_stable_offset == 3
    assert recovered.producer_state.last_entry(2).current_txn_first_offset == 3
    assert [t.producer_id for t in recovered.collect_aborted_transactions(0, 5)] == [1]
    # The coordinator retries the marker: indexed again, as before the crash.
    Writer(recovered).end(2, commit=False)
    assert txn_indexes(recovered) == {0: [AbortedTxn(0, 1, 0, 2, 3), AbortedTxn(0, 2, 3, 5, 6)]}
    recovered.close()
    dumped = subprocess.run(
        [sys.executable, "-m", "kcli", "dump-segment", str(recovered.segments[0].txn_index_path)],
        capture_output=True, text=True, env=kcli_env(), timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "version: 0 producerId: 1 firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in dumped
    assert "version: 0 producerId: 2 firstOffset: 3 lastOffset: 5 lastStableOffset: 6" in dumped


def test_torn_tail_after_a_marker_keeps_its_entry(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    w = Writer(log)
    w.data(1)
    w.data(2)  # 2-3, left open
    w.end(1, commit=False)  # 4
    before = state_of(log)
    path = log.segments[-1].log_path
    log.close_handlers()
    torn = txn_batch(2, 2, count=10)
    with open(path, "ab") as f:
        f.write(torn[: len(torn) - 7])
    recovered = crash_and_reload(log)
    assert state_of(recovered) == before
    assert recovered.last_stable_offset == 2
    recovered.close()


def test_truncate_to_cuts_the_txnindex_with_the_segment(tmp_path: Path) -> None:
    """Kafka's LogSegment.truncateTo: entries whose marker is at or past the offset go with the bytes."""
    log, _ = interleaved(tmp_path)
    active = log.segments[-1]
    log.close_handlers()
    assert active.truncate_to(14) == 0  # past the end: nothing changes
    assert len(active.aborted_txns()) == 2
    cut = active.truncate_to(13)  # the last abort marker
    assert cut > 0 and active.read_next_offset() == 13
    assert active.aborted_txns() == [AbortedTxn(0, 2, 2, 7, 5)]
    assert read_txn_index(active.txn_index_path.read_bytes()) == [AbortedTxn(0, 2, 2, 7, 5)]
    active.truncate_to(8)
    assert active.read_next_offset() == 8
    assert active.aborted_txns() == [AbortedTxn(0, 2, 2, 7, 5)]
    active.truncate_to(7)
    assert active.aborted_txns() == [] and active.txn_index_path.stat().st_size == 0
    assert active.read_next_offset() == 7
    active.close()
    # What is left loads as a log whose transactions are open again.
    reloaded = Log.load(log.dir, log.config, had_clean_shutdown=False, clock=lambda: T0)
    reloaded.update_high_watermark(reloaded.log_end_offset)
    assert reloaded.log_end_offset == 7 and reloaded.last_stable_offset == 2
    assert reloaded.producer_state.ongoing_txns == {2: 2, 5: 3}
    reloaded.close()


def test_truncate_to_drops_index_entries_and_keeps_appending(tmp_path: Path) -> None:
    log = new_log(tmp_path, index_interval_bytes=1)
    w = Writer(log)
    for producer_id in (1, 2, 3, 4, 5):
        w.data(producer_id)  # 0-1, 2-3, ... 8-9
    segment = log.segments[-1]
    entries = segment.offset_index.entries
    assert entries >= 3
    segment.truncate_to(5)  # inside the batch 4-5: that batch goes too
    assert segment.read_next_offset() == 4
    assert all(segment.offset_index.entry(n)[0] < 4 for n in range(segment.offset_index.entries))
    assert segment.offset_index.entries < entries
    assert segment.translate_offset(2).base_offset == 2 and segment.translate_offset(4) is None
    log.close_handlers()


# --- a crash anywhere equals a log that stopped there ---------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(1, 3)),
        st.tuples(st.sampled_from(["commit", "abort"]), st.integers(1, 3)),
        st.tuples(st.just("roll"), st.just(0)),
    ),
    min_size=3,
    max_size=16,
)


def apply(log: Log, ops: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """Run the ops; returns, per batch written, (segment base offset, byte position after it)."""
    w = Writer(log)
    ends = []
    for kind, producer_id in ops:
        if kind == "roll":
            if log.active_segment.size:
                log.roll()
            continue
        if kind == "data":
            w.data(producer_id)
        else:
            w.end(producer_id, commit=kind == "commit")
        ends.append((log.active_segment.base_offset, log.active_segment.size))
    return ends


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=OPS,
    lost=st.integers(0, 3),
    torn_bytes=st.integers(0, 80),
    recovery=st.floats(0, 1),
    delete_indexes=st.booleans(),
)
def test_recovered_log_equals_the_log_stopped_at_the_crash(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, int]],
    lost: int,
    torn_bytes: int,
    recovery: float,
    delete_indexes: bool,
) -> None:
    """Random transactional appends, commits, aborts and rolls; the log is cut after some batch (plus a
    torn piece of the next one) with later segments lost. The recovered `.txnindex` files, last stable
    offset and open transactions equal those of a log that ran only the ops before the cut."""
    crashed = new_log(tmp_path_factory.mktemp("crashed"))
    ends = apply(crashed, ops)
    if not ends:
        crashed.close()
        return
    kept = max(0, len(ends) - lost)  # batches that survive
    base, position = ends[kept - 1] if kept else (0, 0)
    ops_kept: list[tuple[str, int]] = []
    batches = 0
    for op in ops:
        if batches == kept:
            break  # rolls after the last kept batch made segments the crash loses
        batches += op[0] != "roll"
        ops_kept.append(op)
    crashed.close_handlers()
    for segment in crashed.segments:
        if segment.base_offset > base:
            segment.delete_files()
    cut_segment = next(s for s in crashed.segments if s.base_offset == base)
    if kept < len(ends) and ends[kept][0] == base:  # part of the next batch made it to the file
        torn_bytes = min(torn_bytes, ends[kept][1] - position - 1)
    else:
        torn_bytes = 0
    os.truncate(cut_segment.log_path, position + torn_bytes)
    reference = new_log(tmp_path_factory.mktemp("reference"))
    apply(reference, ops_kept)
    expected = state_of(reference)
    recovery_point = int(recovery * expected[0])
    if delete_indexes:
        for segment in crashed.segments:
            if segment.base_offset <= base:
                segment.txn_index_path.unlink(missing_ok=True)
        # Kafka trusts flushed segments: only those at or past the recovery point are rebuilt.
        recovery_point = 0
    recovered = crash_and_reload(crashed, recovery_point=recovery_point)
    assert state_of(recovered) == expected
    # Both logs go on the same way: the open transactions are aborted by the coordinator.
    for log in (recovered, reference):
        log.write_txn_markers(
            [TxnMarker(p, 0, 0, commit=False) for p in sorted(set(log.producer_state.ongoing_txns.values()))],
            leader_epoch=0,
            now_ms=T0,
        )
    assert state_of(recovered) == state_of(reference)
    recovered.close()
    reference.close()


# --- kill -9 of a real broker ----------------------------------------------------------------------------

FAST = ["transaction.state.log.num.partitions=1", "offsets.topic.num.partitions=1"]


def test_kill_9_keeps_aborted_transactions_and_the_last_stable_offset(broker_factory, tmp_path: Path) -> None:
    """confluent-kafka transactions (committed, aborted, one left open, an abort behind it), SIGKILL, the
    `.txnindex` deleted: the restarted broker answers read_committed fetches as before the crash."""
    data_dir = tmp_path / "data"
    first = start_broker(tmp_path / "killed", overrides=FAST, data_dir=data_dir)  # not the factory's: it dies
    try:
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        admin.create_topics([NewTopic("tx", 1, 1)])["tx"].result(15)
        committer, aborter, holder = (
            transactional_producer(first.bootstrap, name) for name in ("committer", "aborter", "holder")
        )
        run_transaction(committer, b"kept", commit=True)
        run_transaction(aborter, b"dropped-1", commit=False)
        holder.begin_transaction()
        holder.produce("tx", b"open", partition=0)
        assert holder.flush(30) == 0
        run_transaction(aborter, b"dropped-2", commit=False)
        run_transaction(committer, b"kept-2", commit=True)
        index_path = data_dir / "tx-0" / f"{0:020d}.txnindex"
        before = wait_for_markers(first.bootstrap, index_path)
        entries = read_txn_index(index_path.read_bytes())
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    assert first.process.returncode == -signal.SIGKILL
    last_stable_offset, aborted, [open_since] = before
    # The second abort came while "holder" was open: its entry's last stable offset is held back there.
    assert [e.last_stable_offset for e in entries] == [entries[0].last_offset + 1, open_since]
    # A read_committed fetch stops at the open transaction: only the first abort overlaps it.
    assert last_stable_offset == open_since
    assert aborted == [(entries[0].producer_id, entries[0].first_offset)]
    index_path.unlink()

    restarted: BrokerProcess = broker_factory(overrides=FAST, data_dir=data_dir)
    assert "no clean shutdown marker" in restarted.log()
    assert asyncio.run(fetch_read_committed(restarted.bootstrap)) == before
    assert read_txn_index(index_path.read_bytes()) == entries
    dumped = subprocess.run(
        [sys.executable, "-m", "kcli", "dump-segment", str(index_path)],
        capture_output=True, text=True, env=kcli_env(), timeout=60, check=True,
    ).stdout  # fmt: skip
    assert f"lastStableOffset: {open_since}" in dumped


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 120_000,
        }
    )
    producer.init_transactions(30)
    return producer


def run_transaction(producer: Producer, value: bytes, *, commit: bool) -> None:
    producer.begin_transaction()
    producer.produce("tx", value, partition=0)
    assert producer.flush(30) == 0  # abort_transaction would purge a record not sent yet
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def wait_for_markers(bootstrap: str, index_path: Path) -> tuple[int, list[tuple[int, int]], list[int]]:
    """The coordinator writes markers after EndTxn has been answered: wait until only one transaction
    is open and both aborts are indexed."""
    seen: list[tuple[int, list[tuple[int, int]], list[int]]] = []

    def written() -> tuple[int, list[tuple[int, int]], list[int]] | None:
        seen.append(asyncio.run(fetch_read_committed(bootstrap)))
        indexed = read_txn_index(index_path.read_bytes()) if index_path.exists() else []
        return seen[-1] if len(indexed) == 2 and len(seen[-1][2]) == 1 else None

    return wait_for("the markers", written, 20, interval=0.05, explain=lambda: f"last: {seen[-1:]}")


async def fetch_read_committed(bootstrap: str) -> tuple[int, list[tuple[int, int]], list[int]]:
    """(last stable offset, aborted transactions as (producer id, first offset), first offsets of the open
    transactions from DescribeProducers) for partition tx-0."""
    fetch = request_type(1, 12)
    fetch_module = sys.modules[fetch.__module__]
    partition = build(
        fetch_module.FetchPartition,
        partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )  # fmt: skip
    request = build(
        fetch,
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=1,
        session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(build(fetch_module.FetchTopic, topic="tx", partitions=(partition,)),),
    )  # fmt: skip
    describe = request_type(61, 0)
    describe_module = sys.modules[describe.__module__]
    async with await KafkaClient.connect(bootstrap) as client:
        response = await client.send(request)
        [result] = response.responses[0].partitions
        assert result.error_code == ErrorCode.none
        described = await client.send(
            describe(topics=(describe_module.TopicRequest(name="tx", partition_indexes=(0,)),))
        )
    [producers] = described.topics[0].partitions
    open_since = [
        p.current_txn_start_offset for p in producers.active_producers if p.current_txn_start_offset >= 0
    ]
    aborted = [(t.producer_id, t.first_offset) for t in result.aborted_transactions]
    return result.last_stable_offset, aborted, open_since
