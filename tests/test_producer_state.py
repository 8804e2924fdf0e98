"""Producer state against Kafka's rules: the state machine alone, then through a real Log on real files.

The rules are those of Kafka 3.x/4.x's ProducerAppendInfo and ProducerStateManager (sequence checks,
epoch bumps, the 5 cached batches, wrap at Int32.MAX, KIP-360's acceptance of unknown producers), and
of UnifiedLog/LogLoader for snapshots: one per roll named after the new segment, one at close, deleted
with their segments, rebuilt from the newest one after a restart.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from formats.records import ControlType, RecordSpec, build_batch, build_control_batch
from formats.snapshot import ProducerSnapshotEntry, read_snapshot, write_snapshot
from kcli.broker.log import AppendOrigin, Log, LogConfig, RecordError
from kcli.broker.log.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchProducerInfo,
    ProducerStateEntry,
    ProducerStateManager,
    check_leader_append,
    increment_sequence,
)

T0 = 1_700_000_000_000
INT32_MAX = 2**31 - 1
TOPIC_ID = uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100")
PID = 1000


# --- the state machine --------------------------------------------------------------------------------


class Partition:
    """A ProducerStateManager fed as UnifiedLog feeds it: offsets from a log end, updates after checks."""

    def __init__(self, path: Path, origin: AppendOrigin = AppendOrigin.CLIENT) -> None:
        self.state = ProducerStateManager(path, "t-0")
        self.origin = origin
        self.log_end = 0

    def append(
        self,
        base_sequence: int,
        count: int = 1,
        *,
        epoch: int = 0,
        producer_id: int = PID,
        timestamp: int = T0,
        transactional: bool = False,
    ) -> tuple[int, int]:
        """(first offset, last offset) the produce response would carry; raises RecordError."""
        info = BatchProducerInfo(producer_id, epoch, base_sequence, transactional, False)
        first, last = self.log_end, self.log_end + count - 1
        duplicate, append_info, _ = check_leader_append(
            self.state,
            info,
            first_offset=first,
            last_offset=last,
            max_timestamp=timestamp,
            origin=self.origin,
        )
        if duplicate is not None:
            return duplicate.first_offset, duplicate.last_offset
        assert append_info is not None
        self.state.update(append_info)
        self.log_end = last + 1
        self.state.update_map_end_offset(self.log_end)
        return first, last

    def entry(self, producer_id: int = PID) -> ProducerStateEntry:
        entry = self.state.last_entry(producer_id)
        assert entry is not None
        return entry


def refused(partition: Partition, code: ErrorCode, *args: int, **kwargs: int) -> str:
    before = (partition.log_end, repr(partition.state.last_entry(kwargs.get("producer_id", PID))))
    with pytest.raises(RecordError) as raised:
        partition.append(*args, **kwargs)
    assert raised.value.error_code == code
    assert (partition.log_end, repr(partition.state.last_entry(kwargs.get("producer_id", PID)))) == before
    return raised.value.message


def test_in_sequence_batches_and_the_first_batch_of_an_unknown_producer(tmp_path: Path) -> None:
    p = Partition(tmp_path)
    # KIP-360: an unknown producer id is taken with any sequence (no UNKNOWN_PRODUCER_ID from the log).
    assert p.append(42, 3) == (0, 2)
    assert p.append(45, 2) == (3, 4)
    entry = p.entry()
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 42, 46, 4)
    message = refused(p, ErrorCode.out_of_order_sequence_number, 48)
    assert message == (
        f"Out of order sequence number for producer {PID} at offset 5 in partition t-0: 48 (incoming seq. number), "
        "46 (current end sequence number)"
    )
    refused(p, ErrorCode.out_of_order_sequence_number, 46)  # overlaps, but is not a cached range


def test_duplicates_of_the_last_five_batches_get_their_original_offsets(tmp_path: Path) -> None:
    p = Partition(tmp_path)
    p.append(0, 2, producer_id=7)  # another producer in between changes nothing
    sent = [(seq, p.append(seq, 2)) for seq in range(0, 12, 2)]  # six batches
    end = p.log_end
    for seq, offsets in sent[-NUM_BATCHES_TO_RETAIN:]:
        assert p.append(seq, 2) == offsets
    assert p.log_end == end
    # The sixth-newest is forgotten: a retry of it is out of order, not a duplicate.
    refused(p, ErrorCode.out_of_order_sequence_number, sent[0][0], 2)
    # A duplicate must match the whole range, under the same epoch.
    refused(p, ErrorCode.out_of_order_sequence_number, 2, 4)


def test_epochs_older_refused_newer_restart_at_zero(tmp_path: Path) -> None:
    p = Partition(tmp_path)
    p.append(0, 5, epoch=3)
    message = refused(p, ErrorCode.invalid_producer_epoch, 5, epoch=2)
    assert (
        message
        == f"Epoch of producer {PID} at offset 5 in t-0 is 2, which is smaller than the last seen epoch 3"
    )
    refused(p, ErrorCode.out_of_order_sequence_number, 5, epoch=4)  # a bumped epoch starts at 0
    assert p.append(0, 2, epoch=4) == (5, 6)
    entry = p.entry()
    assert (entry.producer_epoch, len(entry.batch_metadata)) == (4, 1)  # the old epoch's batches are gone
    # The same sequence range under the old epoch is not a duplicate but a fenced producer.
    refused(p, ErrorCode.invalid_producer_epoch, 0, 5, epoch=3)


def test_sequences_wrap_at_int32_max(tmp_path: Path) -> None:
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert increment_sequence(5, 3) == 8
    p = Partition(tmp_path)
    p.append(INT32_MAX - 2, 3)  # ends at Int32.MAX
    assert p.append(0, 2) == (3, 4)
    p2 = Partition(tmp_path / "b")
    p2.append(INT32_MAX - 1, 4)  # wraps inside the batch: Int32.MAX - 1, Int32.MAX, 0, 1
    assert p2.entry().last_seq == 1
    assert p2.append(INT32_MAX - 1, 4) == (0, 3)  # its retry is still recognised
    assert p2.append(2) == (4, 4)
    p3 = Partition(tmp_path / "c")
    p3.append(INT32_MAX - 1)
    refused(p3, ErrorCode.out_of_order_sequence_number, 1)  # Int32.MAX must come before 0


def test_a_refused_batch_changes_nothing_and_checks_only_apply_to_clients(tmp_path: Path) -> None:
    p = Partition(tmp_path)
    p.append(0, 2)
    info = BatchProducerInfo(PID, 0, 2, False, False)
    _, pending, _ = check_leader_append(
        p.state, info, first_offset=2, last_offset=2, max_timestamp=T0, origin=AppendOrigin.CLIENT
    )
    assert pending is not None and p.entry().last_seq == 1  # prepared, not applied
    coordinator = Partition(tmp_path / "g", AppendOrigin.COORDINATOR)
    coordinator.append(0)
    assert coordinator.append(17) == (1, 1)  # offset commits carry no meaningful sequences
    refused(coordinator, ErrorCode.invalid_producer_epoch, 18, epoch=-5)


def test_transactional_batches_need_an_ongoing_transaction(tmp_path: Path) -> None:
    p = Partition(tmp_path)
    message = refused(p, ErrorCode.invalid_txn_state, 0, transactional=True)
    assert message == "Record was not part of an ongoing transaction"


def test_expiry_spares_producers_inside_a_transaction(tmp_path: Path) -> None:
    p = Partition(tmp_path)
    p.state.producer_id_expiration_ms = 1000
    p.append(0, timestamp=T0, producer_id=1)
    p.append(0, timestamp=T0 + 500, producer_id=2)
    p.state.producers[3] = ProducerStateEntry(3, 0, 0, T0, current_txn_first_offset=0)
    assert p.state.remove_expired_producers(T0 + 999) == 0
    assert p.state.remove_expired_producers(T0 + 1000) == 1
    assert sorted(p.state.producers) == [2, 3]
    assert p.state.remove_expired_producers(T0 + 10**9) == 1
    assert sorted(p.state.producers) == [3]


# --- snapshots ----------------------------------------------------------------------------------------


def test_snapshot_keeps_the_last_batch_and_reloads(tmp_path: Path) -> None:
    p = Partition(tmp_path)
    p.append(0, 3, epoch=2, timestamp=T0 + 5)
    p.append(3, 2, epoch=2, timestamp=T0 + 9)
    path = p.state.take_snapshot()
    assert path == tmp_path / "00000000000000000005.snapshot"
    assert p.state.take_snapshot() is None  # nothing new since: Kafka skips it
    assert read_snapshot(path.read_bytes()) == [ProducerSnapshotEntry(PID, 2, 4, 4, 1, T0 + 9, -1, -1)]
    reloaded = ProducerStateManager(tmp_path, "t-0")
    reloaded.truncate_and_reload(0, 5, T0)
    entry = reloaded.last_entry(PID)
    assert entry is not None and (entry.first_seq, entry.last_seq, entry.last_data_offset) == (3, 4, 4)
    assert reloaded.map_end_offset == 5
    # Only the last batch survives a snapshot: its retry is a duplicate, the one before is out of order.
    again = Partition(tmp_path)
    again.state, again.log_end = reloaded, 5
    assert again.append(3, 2, epoch=2) == (3, 4)
    refused(again, ErrorCode.out_of_order_sequence_number, 0, 3, epoch=2)
    assert again.append(5, epoch=2) == (5, 5)


def test_reload_drops_out_of_range_corrupt_and_expired(tmp_path: Path) -> None:
    def snapshot(offset: int, *entries: ProducerSnapshotEntry) -> Path:
        path = tmp_path / f"{offset:020d}.snapshot"
        path.write_bytes(write_snapshot(entries))
        return path

    old = ProducerSnapshotEntry(1, 0, 9, 9, 9, T0 - 2 * 86_400_000, -1, -1)
    fresh = ProducerSnapshotEntry(2, 0, 4, 14, 4, T0, -1, -1)
    snapshot(0, fresh)
    snapshot(15, old, fresh)
    corrupt = snapshot(20, fresh)
    corrupt.write_bytes(corrupt.read_bytes()[:-1] + b"\x00")
    beyond = snapshot(30, fresh)
    state = ProducerStateManager(tmp_path, "t-0")
    problems = state.truncate_and_reload(0, 25, T0)
    assert [(p.path.name, p.message.split(".")[0]) for p in problems] == [
        (corrupt.name, "Snapshot is corrupt (CRC is no longer valid)")
    ]
    assert not beyond.exists() and not corrupt.exists()  # past the log end / unreadable
    assert not (tmp_path / f"{0:020d}.snapshot").exists()  # at or below the log start offset
    assert list(state.producers) == [2]  # producer 1 expired while the broker was down
    assert state.map_end_offset == 15


def test_stray_snapshots_only_the_newest_past_the_last_segment_stays(tmp_path: Path) -> None:
    for offset in (0, 5, 10, 20, 25):
        (tmp_path / f"{offset:020d}.snapshot").write_bytes(write_snapshot([]))
    state = ProducerStateManager(tmp_path, "t-0")
    state.remove_stray_snapshots([0, 10, 20])
    assert sorted(state.snapshots) == [0, 10, 20, 25]
    state.remove_stray_snapshots([0, 10, 30])
    assert sorted(state.snapshots) == [0, 10]
    assert sorted(os.listdir(tmp_path)) == [f"{0:020d}.snapshot", f"{10:020d}.snapshot"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**15 - 1),
            st.integers(0, INT32_MAX),
            st.integers(0, INT32_MAX),
            st.integers(-1, 2**40),
            st.integers(-1, 2**31 - 1),
            st.one_of(st.none(), st.integers(0, 2**40)),
        ),
        max_size=5,
    )
)
def test_entry_snapshot_round_trip(entries: list[tuple]) -> None:
    states = []
    for producer_id, epoch, last_seq, delta_seed, last_offset, coordinator_epoch, txn in entries:
        state = ProducerStateEntry(producer_id, epoch, coordinator_epoch, T0, txn)
        if last_offset >= 0:
            delta = delta_seed % (min(last_offset, 1000) + 1)
            state.add_batch(epoch, last_seq, last_offset, delta, T0)
        states.append(state)
    data = write_snapshot(s.to_snapshot() for s in states)
    back = [ProducerStateEntry.from_snapshot(e) for e in read_snapshot(data)]
    assert [repr(s) for s in back] == [repr(s) for s in states]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_retries_in_any_order_never_duplicate_or_reorder(
    tmp_path_factory: pytest.TempPathFactory, data
) -> None:
    """A producer with up to 5 batches in flight retries any of them any number of times: every batch is
    written once, in order, and every retry of a written batch gets that batch's offsets."""
    p = Partition(tmp_path_factory.mktemp("retries"))
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=20))
    sequences, seq = [], data.draw(st.integers(INT32_MAX - 20, INT32_MAX))
    for size in sizes:
        sequences.append(seq)
        seq = increment_sequence(seq, size)
    written: dict[int, tuple[int, int]] = {}
    next_batch = 0
    while next_batch < len(sizes):
        in_flight = [i for i in written if i >= next_batch - NUM_BATCHES_TO_RETAIN]
        choice = data.draw(st.sampled_from([next_batch, *in_flight]))
        offsets = p.append(sequences[choice], sizes[choice])
        if choice == next_batch:
            written[choice] = offsets
            next_batch += 1
        else:
            assert offsets == written[choice]
    expected, offset = [], 0
    for size in sizes:
        expected.append((offset, offset + size - 1))
        offset += size
    assert [written[i] for i in range(len(sizes))] == expected
    assert p.log_end == offset


def _general_append(
    partition: Partition, info: BatchProducerInfo, count: int, timestamp: int
) -> tuple[int, int]:
    """Kafka's whole check for a data batch, with no short path: a duplicate, else a copied entry the
    batch is checked against and then folded back (ProducerAppendInfo, ProducerStateManager.update)."""
    first, last = partition.log_end, partition.log_end + count - 1
    last_seq = increment_sequence(info.base_sequence, count - 1)
    entry = partition.state.last_entry(info.producer_id)
    duplicate = entry and entry.find_duplicate_batch(info.producer_epoch, info.base_sequence, last_seq)
    if duplicate:
        return duplicate.first_offset, duplicate.last_offset
    append_info = partition.state.prepare_update(info.producer_id, AppendOrigin.CLIENT)
    append_info.append_data_batch(
        info.producer_epoch, info.base_sequence, last_seq, timestamp, first, last, False
    )
    partition.state.update(append_info)
    partition.log_end = last + 1
    return first, last


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from((0, 0, 0, 1, 2)),
            st.sampled_from((0, 0, 0, 0, 0, -1, -2, -5, 1, 2)),  # 0: the next batch
            st.integers(1, 4),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_the_short_path_for_the_next_batch_leaves_what_the_general_check_leaves(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int, int, int]]
) -> None:
    """check_leader_append takes a short path for a known producer's next in-sequence batch under the
    same epoch; any mix of next batches, retries, gaps, epoch changes and producers ends in the same
    answers, errors and state as Kafka's general check."""
    fast = Partition(tmp_path_factory.mktemp("fast"))
    general = Partition(tmp_path_factory.mktemp("general"))
    next_seq: dict[tuple[int, int], int] = {}
    for step, (epoch, seq_shift, count, producer) in enumerate(steps):
        producer_id = PID + producer % 2
        base = max(0, next_seq.get((producer_id, epoch), 0) + seq_shift)
        info = BatchProducerInfo(producer_id, epoch, base, False, False)
        outcomes = []
        for partition in (fast, general):
            try:
                if partition is fast:
                    result: object = partition.append(
                        base, count, epoch=epoch, producer_id=producer_id, timestamp=T0 + step
                    )
                else:
                    result = _general_append(partition, info, count, T0 + step)
            except RecordError as error:
                result = error.error_code
            outcomes.append(result)
        assert outcomes[0] == outcomes[1]
        if isinstance(outcomes[0], tuple) and outcomes[0][0] == fast.log_end - count:
            next_seq[(producer_id, epoch)] = increment_sequence(base, count)
        assert fast.log_end == general.log_end
        assert repr(fast.state.producers) == repr(general.state.producers)


# --- through a Log on real files ----------------------------------------------------------------------


def idempotent(seq: int, n: int = 2, *, epoch: int = 0, producer_id: int = PID, ts: int = T0) -> bytes:
    specs = [RecordSpec(ts + i, b"k", b"v" * 200) for i in range(n)]
    return build_batch(specs, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)


def new_log(path: Path, **config: int) -> Log:
    config.setdefault("file_delete_delay_ms", 0)
    return Log.create(path / "t-0", LogConfig(**config), TOPIC_ID, clock=lambda: T0)


def reopen(log: Log, *, clean: bool, recovery_point: int = 0) -> Log:
    return Log.load(
        log.dir,
        log.config,
        recovery_point_checkpoint=recovery_point,
        had_clean_shutdown=clean,
        clock=lambda: T0,
    )


def snapshots(log: Log) -> list[int]:
    return sorted(int(name.split(".")[0]) for name in os.listdir(log.dir) if name.endswith(".snapshot"))


def append(log: Log, data: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    return log.append_as_leader(data, leader_epoch=0, now_ms=T0, origin=origin).first_offset


def test_log_answers_retries_with_original_offsets_and_writes_nothing_refused(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    assert [append(log, idempotent(seq, epoch=1)) for seq in (0, 2, 4)] == [0, 2, 4]
    size = log.size_bytes()
    info = log.append_as_leader(idempotent(2, epoch=1), leader_epoch=0, now_ms=T0)
    # Kafka's answer to a duplicate carries the batch's timestamp as log_append_time.
    assert (info.first_offset, info.last_offset, info.log_append_time) == (2, 3, T0 + 1)
    with pytest.raises(RecordError) as gap:
        append(log, idempotent(9, epoch=1))
    assert gap.value.error_code == ErrorCode.out_of_order_sequence_number
    with pytest.raises(RecordError) as fenced:
        append(log, idempotent(6, epoch=0))
    assert fenced.value.error_code == ErrorCode.invalid_producer_epoch
    assert (log.log_end_offset, log.size_bytes()) == (6, size)
    assert append(log, idempotent(6, epoch=1)) == 6
    log.close()


def test_coordinator_markers_close_transactions_in_the_state(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.producer_state.producers[PID] = ProducerStateEntry(PID, 0, 0, T0, current_txn_first_offset=0)
    log.producer_state.ongoing_txns[0] = PID
    marker = build_control_batch(
        ControlType.ABORT, producer_id=PID, producer_epoch=0, timestamp=T0, coordinator_epoch=3
    )
    assert append(log, marker, AppendOrigin.COORDINATOR) == 0
    entry = log.producer_state.last_entry(PID)
    assert entry is not None and (entry.current_txn_first_offset, entry.coordinator_epoch) == (None, 3)
    assert log.producer_state.ongoing_txns == {}
    zombie = build_control_batch(
        ControlType.COMMIT, producer_id=PID, producer_epoch=0, timestamp=T0, coordinator_epoch=2
    )
    with pytest.raises(RecordError) as fenced:
        append(log, zombie, AppendOrigin.COORDINATOR)
    assert fenced.value.error_code == ErrorCode.transaction_coordinator_fenced
    log.close()


def test_snapshots_at_roll_and_close_deleted_with_their_segments(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=1200)
    for seq in range(0, 12, 2):
        append(log, idempotent(seq))
    log.update_high_watermark(log.log_end_offset)  # as the only in-sync replica's Partition does
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert snapshots(log) == bases[1:]  # one per roll, named after the new segment
    log.maybe_increment_log_start_offset(bases[2])
    log.enforce_retention(T0)
    assert snapshots(log) == bases[2:]
    log.close()
    assert snapshots(log) == [*bases[2:], 12]  # and one at the log end on close
    entries = read_snapshot((log.dir / f"{12:020d}.snapshot").read_bytes())
    assert entries == [ProducerSnapshotEntry(PID, 0, 11, 11, 1, T0 + 1, -1, -1)]


def test_restart_keeps_deduplicating_clean_and_unclean(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=1200)
    for seq in range(0, 12, 2):
        append(log, idempotent(seq))
    log.close()
    clean = reopen(log, clean=True)
    assert clean.producer_state.last_entry(PID) is not None
    assert append(clean, idempotent(10)) == 10  # retry of the last batch before the restart
    assert append(clean, idempotent(12)) == 12
    clean.close_handlers()  # a crash: no close, no snapshot at the log end
    for path in clean.dir.glob("*.snapshot"):
        path.unlink()  # and no snapshot at all: rebuilt from the log alone
    crashed = reopen(clean, clean=False)
    entry = crashed.producer_state.last_entry(PID)
    assert entry is not None and [b.first_offset for b in entry.batch_metadata] == [4, 6, 8, 10, 12]
    bases = [s.base_offset for s in crashed.segments]
    assert snapshots(crashed) == [*bases[-2:], 14]  # taken while rebuilding, as Kafka takes them
    assert append(crashed, idempotent(6)) == 6
    assert append(crashed, idempotent(14)) == 14
    crashed.close()


def test_unclean_restart_drops_snapshots_past_the_recovered_segment(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=1200)
    for seq in range(0, 12, 2):
        append(log, idempotent(seq))
    bases = [s.base_offset for s in log.segments]
    log.close()  # snapshots at every roll and at 12
    torn = log.segments[-1].log_path
    with open(torn, "r+b") as f:
        f.truncate(os.path.getsize(torn) - 10)  # the last batch is torn
    recovery_point = bases[-1]
    crashed = reopen(log, clean=False, recovery_point=recovery_point)
    assert crashed.log_end_offset == 10
    assert 12 not in snapshots(crashed)  # above the recovered segment: it could describe lost batches
    entry = crashed.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 9
    assert append(crashed, idempotent(10)) == 10  # the lost batch is written again, not a duplicate
    crashed.close()


def test_clean_shutdown_without_snapshots_skips_the_scan(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=1200)
    for seq in range(0, 12, 2):
        append(log, idempotent(seq))
    bases = [s.base_offset for s in log.segments]
    log.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()
    upgraded = reopen(log, clean=True)
    # Kafka's upgrade path: empty snapshots at the last two segment bases and the log end, no scan.
    assert snapshots(upgraded) == sorted({*bases[-2:], 12})
    assert upgraded.producer_state.is_empty()
    assert all(
        read_snapshot((upgraded.dir / f"{o:020d}.snapshot").read_bytes()) == [] for o in snapshots(upgraded)
    )
    upgraded.close()
