"""Producer state of one partition: what makes idempotent (and later transactional) appends safe.

Kafka's ProducerStateManager, ProducerStateEntry and ProducerAppendInfo. For every producer id that
wrote to the partition we keep its epoch, the metadata of its last 5 batches (sequence range, last
offset, offset delta, timestamp), its coordinator epoch and the first offset of its open transaction.
A leader append is checked against that state before anything is written: a retried batch whose exact
sequence range is still cached is a duplicate (answered with the original offsets), a gap is
OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch is INVALID_PRODUCER_EPOCH. An unknown producer id is
accepted with any sequence, as Kafka does since KIP-360 (brokers no longer answer UNKNOWN_PRODUCER_ID
from the log).

The state survives restarts as `<offset>.snapshot` files (formats.snapshot) taken at segment roll and
at close; `loader.rebuild_producer_state` loads the newest snapshot and replays the batches after it, with
Kafka's shortcut for a clean shutdown that left no snapshot at all.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from formats.errors import CorruptSnapshotError, FormatError
from formats.index import ABORTED_TXN_VERSION, AbortedTxn
from formats.records import ControlType, control_type, end_txn_marker, read_batch
from formats.segment import SNAPSHOT_SUFFIX, base_offset_of, filename
from formats.snapshot import ProducerSnapshotEntry, decrement_sequence, read_snapshot, write_snapshot
from kcli.broker.log.errors import RecordError
from kcli.broker.log.validator import AppendOrigin, BatchProducerInfo
from kcli.files import fsync_dir

log = logging.getLogger("kcli.broker.log")

NUM_BATCHES_TO_RETAIN = 5
"""Batches per producer whose sequence ranges are remembered: the client's max.in.flight limit."""
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 24 * 60 * 60 * 1000
INT32_MAX = 2**31 - 1

_CLIENT = AppendOrigin.CLIENT  # an enum member read from its class costs more than the rest of a check
_new_tuple = tuple.__new__  # builds a NamedTuple without the Python-level __new__ its constructor calls


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment` on the sequence ring that wraps from Int32.MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class BatchMetadata(NamedTuple):
    """One appended batch as the duplicate check needs it (Kafka's BatchMetadata)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """One producer's state in one partition (Kafka's ProducerStateEntry)."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(default_factory=partial(deque, maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def copy_without_batches(self) -> ProducerStateEntry:
        """What an append starts from: same epochs and transaction, no batches (they are added back on update)."""
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def add_batch(
        self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """A new epoch forgets the batches of the old one."""
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch
            return True
        return False

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Fold an append's result into the stored entry (Kafka's update(ProducerStateEntry))."""
        self.maybe_update_producer_epoch(next_entry.producer_epoch)
        self.batch_metadata.extend(next_entry.batch_metadata)
        self.coordinator_epoch = next_entry.coordinator_epoch
        self.current_txn_first_offset = next_entry.current_txn_first_offset
        self.last_timestamp = next_entry.last_timestamp

    def find_duplicate_batch(
        self, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The cached batch with exactly this sequence range under the current epoch, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:  # the field first: it is cheaper
                return batch
        return None

    def to_snapshot(self) -> ProducerSnapshotEntry:
        return ProducerSnapshotEntry(
            self.producer_id,
            self.producer_epoch,
            self.last_seq,
            self.last_data_offset,
            self.last_offset_delta,
            self.last_timestamp,
            self.coordinator_epoch,
            -1 if self.current_txn_first_offset is None else self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot(cls, entry: ProducerSnapshotEntry) -> ProducerStateEntry:
        """A snapshot keeps only the last batch; `last_offset < 0` means none (Kafka's readSnapshot)."""
        state = cls(
            entry.producer_id,
            entry.epoch,
            entry.coordinator_epoch,
            entry.timestamp,
            entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else None,
        )
        if entry.last_offset >= 0:
            state.batch_metadata.append(
                BatchMetadata(entry.last_sequence, entry.last_offset, entry.offset_delta, entry.timestamp)
            )
        return state


class NextBatch(NamedTuple):
    """The producer-state change of the common leader append: one more batch for a known producer under
    its current epoch, outside any transaction. Applying it (`ProducerStateManager.update`) does what a
    ProducerAppendInfo would, without copying the entry."""

    entry: ProducerStateEntry
    metadata: BatchMetadata


class CompletedTxn(NamedTuple):
    """A transaction an end marker closed (for the transaction index, once transactions exist)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerAppendInfo:
    """The checks and state changes of one producer's batches within one append (Kafka's ProducerAppendInfo).

    Nothing is changed until `ProducerStateManager.update` is called with it, so a rejected append
    leaves the state as it was. `origin` None stands for Kafka's REPLICATION origin (a replay of batches
    already in a log): an epoch going backwards is logged, not refused, and sequences are not checked.
    """

    def __init__(
        self, topic_partition: str, producer_id: int, current: ProducerStateEntry, origin: AppendOrigin | None
    ) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.copy_without_batches()
        self.started_transactions: list[int] = []  # first offsets

    def append_data_batch(
        self,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        """Validate (leader appends) and record one data batch."""
        self._check_producer_epoch(producer_epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
        self.updated.add_batch(
            producer_epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp
        )
        open_txn = self.updated.current_txn_first_offset
        if open_txn is not None and not is_transactional:
            raise RecordError(
                ErrorCode.invalid_txn_state,
                f"Expected transactional write from producer {self.producer_id} at offset {first_offset} in "
                f"partition {self.topic_partition}",
            )
        if open_txn is None and is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_transactions.append(first_offset)

    def append_end_txn_marker(
        self, is_commit: bool, coordinator_epoch: int, producer_epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Record a COMMIT/ABORT marker; returns the transaction it closed, None if it held no data."""
        self._check_producer_epoch(producer_epoch, offset)
        if self.updated.coordinator_epoch > coordinator_epoch and self.origin is not None:
            raise RecordError(
                ErrorCode.transaction_coordinator_fenced,
                f"Invalid coordinator epoch for producerId {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {coordinator_epoch} (zombie), {self.updated.coordinator_epoch} (current)",
            )
        completed = None
        if self.updated.current_txn_first_offset is not None:
            completed = CompletedTxn(
                self.producer_id, self.updated.current_txn_first_offset, offset, not is_commit
            )
        self.updated.maybe_update_producer_epoch(producer_epoch)
        self.updated.coordinator_epoch = coordinator_epoch
        self.updated.current_txn_first_offset = None
        self.updated.last_timestamp = timestamp
        return completed

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        if producer_epoch < self.updated.producer_epoch:
            message = (
                f"Epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition} is "
                f"{producer_epoch}, which is smaller than the last seen epoch {self.updated.producer_epoch}"
            )
            if self.origin is None:
                log.warning("%s", message)
                return
            # Since Kafka 2.7 this is INVALID_PRODUCER_EPOCH (abortable), not the fatal PRODUCER_FENCED.
            raise RecordError(ErrorCode.invalid_producer_epoch, message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated, self.current
        if producer_epoch != updated.producer_epoch:
            # A bumped epoch starts again at sequence 0 (unless the producer was unknown).
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise RecordError(
                    ErrorCode.out_of_order_sequence_number,
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} in "
                    f"partition {self.topic_partition}: {producer_epoch} (request epoch), {first_seq} (seq. number), "
                    f"{updated.producer_epoch} (current producer epoch)",
                )
            return
        if not updated.is_empty:
            last_seq = updated.last_seq
        elif producer_epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # With no epoch known (all its records gone to retention or DeleteRecords) any sequence is accepted.
        if current.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last_seq, first_seq):
            raise RecordError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {first_seq} (incoming seq. number), {last_seq} (current end sequence "
                f"number)",
            )


class SnapshotProblem(NamedTuple):
    path: Path
    message: str


class ProducerStateManager:
    """Every producer's state in one partition, plus the partition's `.snapshot` files."""

    def __init__(
        self,
        dir: Path,
        topic_partition: str,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.dir = dir
        self.topic_partition = topic_partition
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        self.snapshots: dict[int, Path] = self._list_snapshots()
        self.last_map_offset = 0
        self.last_snap_offset = 0

    # --- appends -------------------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: AppendOrigin | None) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self.topic_partition, producer_id, current, origin)

    def update(self, append_info: ProducerAppendInfo | NextBatch) -> None:
        """Make an append's producer changes part of the state (after the bytes are written)."""
        if type(append_info) is NextBatch:
            entry, metadata = append_info
            entry.batch_metadata.append(metadata)
            entry.last_timestamp = metadata.timestamp
            return
        producer_id = append_info.producer_id
        if producer_id == NO_PRODUCER_ID:
            raise ValueError(
                f"Invalid producer id {producer_id} passed to update for partition {self.topic_partition}"
            )
        current = self.producers.get(producer_id)
        if current is not None:
            current.update(append_info.updated)
        else:
            self.producers[producer_id] = append_info.updated
        for first_offset in append_info.started_transactions:
            self.ongoing_txns[first_offset] = producer_id

    def complete_txn(self, completed: CompletedTxn) -> None:
        if self.ongoing_txns.pop(completed.first_offset, None) is None:
            raise ValueError(
                f"Attempted to complete transaction {completed} on partition {self.topic_partition} which was not "
                "started"
            )

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open (single replica: a
        completed transaction is replicated at once, so Kafka's unreplicated transactions are always empty)."""
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The last stable offset once `completed` is done: the first offset of the oldest transaction of
        another producer still open, else the offset after the marker (Kafka's lastStableOffset)."""
        for first_offset in sorted(self.ongoing_txns):
            if self.ongoing_txns[first_offset] != completed.producer_id:
                return first_offset
        return completed.last_offset + 1

    def update_map_end_offset(self, offset: int) -> None:
        """The offset the state is complete up to (exclusive); a snapshot is named after it."""
        self.last_map_offset = offset

    @property
    def map_end_offset(self) -> int:
        return self.last_map_offset

    def is_empty(self) -> bool:
        return not self.producers

    # --- expiry --------------------------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (not those inside a transaction)."""
        expired = [pid for pid, entry in self.producers.items() if self._is_expired(now_ms, entry)]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    # --- snapshots -----------------------------------------------------------------------------------

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write `<map end offset>.snapshot` unless the state has not moved since the last one."""
        if self.last_map_offset <= self.last_snap_offset:
            return None
        path = self.dir / filename(self.last_map_offset, SNAPSHOT_SUFFIX)
        data = write_snapshot(entry.to_snapshot() for entry in self.producers.values())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        log.debug(
            "%s: wrote producer snapshot at offset %d with %d producer ids",
            self.topic_partition, self.last_map_offset, len(self.producers),
        )  # fmt: skip
        self.snapshots[self.last_map_offset] = path
        self.last_snap_offset = self.last_map_offset
        return path

    @staticmethod
    def flush_snapshot(path: Path) -> None:
        """fsync a snapshot written without sync at roll (done on the flusher thread, as Kafka does)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # its segment was deleted in the meantime
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(path.parent)

    def latest_snapshot_offset(self) -> int | None:
        return max(self.snapshots, default=None)

    def oldest_snapshot_offset(self) -> int | None:
        return min(self.snapshots, default=None)

    def delete_snapshot(self, offset: int) -> None:
        """Remove the snapshot named after `offset` (its segment is going away)."""
        path = self.snapshots.pop(offset, None)
        (path or self.dir / filename(offset, SNAPSHOT_SUFFIX)).unlink(missing_ok=True)

    def delete_snapshots_above(self, offset: int) -> None:
        for snapshot_offset in [o for o in self.snapshots if o > offset]:
            self.delete_snapshot(snapshot_offset)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Keep snapshots named after a segment, plus the newest stray one if it is past the last segment
        (the one a clean shutdown writes at the log end); delete the other strays (Kafka's rule)."""
        bases = set(segment_base_offsets)
        max_base = max(bases, default=None)
        self.snapshots = self._list_snapshots()
        latest_stray: int | None = None
        for offset in sorted(self.snapshots):
            if offset in bases:
                continue
            if latest_stray is not None:
                self.delete_snapshot(latest_stray)
            latest_stray = offset
        if latest_stray is not None and max_base is not None and latest_stray < max_base:
            self.delete_snapshot(latest_stray)

    def truncate_and_reload(
        self, log_start_offset: int, log_end_offset: int, now_ms: int
    ) -> list[SnapshotProblem]:
        """Drop snapshots outside (log start, log end] and, unless the state already ends at the log end,
        reload it from the newest snapshot left. Returns the snapshots that were unreadable (deleted)."""
        for offset in list(self.snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self.delete_snapshot(offset)
        if log_end_offset != self.last_map_offset:
            self.producers.clear()
            self.ongoing_txns.clear()
            return self._load_from_snapshot(log_start_offset, now_ms)
        self.on_log_start_offset_incremented(log_start_offset)
        return []

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything and every snapshot; the log restarts empty at `offset`."""
        self.producers.clear()
        self.ongoing_txns.clear()
        for snapshot_offset in list(self.snapshots):
            self.delete_snapshot(snapshot_offset)
        self.last_snap_offset = 0
        self.last_map_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        if self.last_map_offset < log_start_offset:
            self.last_map_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self.last_snap_offset = log_start_offset if latest is None else latest

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> list[SnapshotProblem]:
        problems = []
        while self.snapshots:
            offset = max(self.snapshots)
            path = self.snapshots[offset]
            try:
                entries = read_snapshot(path.read_bytes())
            except (CorruptSnapshotError, OSError) as e:
                problems.append(SnapshotProblem(path, str(e)))
                log.warning("%s: failed to load producer snapshot from %s: %s", self.topic_partition, path, e)
                self.delete_snapshot(offset)
                continue
            for entry in entries:
                state = ProducerStateEntry.from_snapshot(entry)
                if self._is_expired(now_ms, state):
                    continue
                self.producers[state.producer_id] = state
                if state.current_txn_first_offset is not None:
                    self.ongoing_txns[state.current_txn_first_offset] = state.producer_id
            self.last_snap_offset = self.last_map_offset = offset
            return problems
        self.last_snap_offset = self.last_map_offset = log_start_offset
        return problems

    def _list_snapshots(self) -> dict[int, Path]:
        found = {}
        if self.dir.is_dir():
            for path in self.dir.iterdir():
                if path.name.endswith(SNAPSHOT_SUFFIX) and path.is_file():
                    offset = base_offset_of(path.name)
                    if offset is not None:
                        found[offset] = path
        return found


# --- leader appends ----------------------------------------------------------------------------------


class ProducerCheck(NamedTuple):
    """What checking a leader append found: a duplicate to answer with, or the changes to apply."""

    duplicate: BatchMetadata | None
    append_info: ProducerAppendInfo | NextBatch | None
    completed_txn: CompletedTxn | None = None


def check_leader_append(
    state: ProducerStateManager,
    info: BatchProducerInfo,
    *,
    first_offset: int,
    last_offset: int,
    max_timestamp: int,
    origin: AppendOrigin,
    batch: Callable[[], bytes] | None = None,
    transaction_verified: bool = False,
) -> ProducerCheck:
    """UnifiedLog.analyzeAndValidateProducerState for one batch with a producer id.

    Raises RecordError (nothing may be written) for a sequence gap, an old epoch, or a transactional
    batch outside a transaction; returns the cached batch for a retried one. `batch` gives the whole
    batch's bytes, read only for a control batch (its marker). `transaction_verified` says the transaction
    coordinator has this partition in the producer's ongoing transaction (Kafka's verification guard):
    only then may a transactional batch open a transaction here.
    """
    producer_id, producer_epoch, base_sequence, is_transactional, is_control = info
    offset_delta = last_offset - first_offset
    last_seq = NO_SEQUENCE
    if base_sequence >= 0:
        last_seq = increment_sequence(base_sequence, offset_delta)
    entry = state.producers.get(producer_id)
    if origin is _CLIENT and entry is not None:
        duplicate = entry.find_duplicate_batch(producer_epoch, base_sequence, last_seq)
        if duplicate is not None:
            return _new_tuple(ProducerCheck, (duplicate, None, None))
        batches = entry.batch_metadata
        if (
            producer_epoch == entry.producer_epoch
            and batches
            and _in_sequence(batches[-1].last_seq, base_sequence)
            and not (is_transactional or is_control)
            and entry.current_txn_first_offset is None
        ):
            # The common case, which every check below would pass: take it without copying the entry.
            metadata = _new_tuple(BatchMetadata, (last_seq, last_offset, offset_delta, max_timestamp))
            return _new_tuple(ProducerCheck, (None, _new_tuple(NextBatch, (entry, metadata)), None))
    if (
        (origin is AppendOrigin.CLIENT or origin is AppendOrigin.COORDINATOR)
        and info.is_transactional
        and not info.is_control
        and not transaction_verified
        and (entry is None or entry.current_txn_first_offset is None)
    ):
        # No transaction coordinator verified this partition for the transaction.
        raise RecordError(ErrorCode.invalid_txn_state, "Record was not part of an ongoing transaction")
    append_info = state.prepare_update(producer_id, origin)
    if info.is_control:
        marker = None if batch is None else _end_marker(batch())
        if marker is None:
            return ProducerCheck(None, None)
        is_commit, coordinator_epoch, timestamp = marker
        completed = append_info.append_end_txn_marker(
            is_commit, coordinator_epoch, info.producer_epoch, first_offset, timestamp
        )
        return ProducerCheck(None, append_info, completed)
    append_info.append_data_batch(
        info.producer_epoch,
        info.base_sequence,
        last_seq,
        max_timestamp,
        first_offset,
        last_offset,
        info.is_transactional,
    )
    return ProducerCheck(None, append_info)


def _end_marker(data: bytes) -> tuple[bool, int, int] | None:
    """(is commit, coordinator epoch, timestamp) of a control batch's COMMIT/ABORT marker, else None."""
    records = read_batch(data, 0, check_crc=False).records(data)
    if not records:
        return None
    record = records[0]
    kind = control_type(record.key)
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    return kind == ControlType.COMMIT, end_txn_marker(record.value).coordinator_epoch, record.timestamp


def replay_batches(state: ProducerStateManager, data: Any, batches: Iterable[Any]) -> list[CompletedTxn]:
    """Kafka's loadProducersFromRecords for batches already in the log (`data` holds their bytes), taken
    without checks (the REPLICATION origin): each producer's batches are appended to one update, the
    updates applied, and the transactions their end markers close returned for the caller to complete
    (the loader completes them, a follower append also writes the `.txnindex`)."""
    appends: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for batch in batches:
        if batch.magic < 2 or batch.producer_id < 0:
            continue
        append_info = appends.get(batch.producer_id)
        if append_info is None:
            append_info = appends[batch.producer_id] = state.prepare_update(batch.producer_id, None)
        done = _replay_batch(append_info, data, batch)
        if done is not None:
            completed.append(done)
    for append_info in appends.values():
        state.update(append_info)
    return completed


def end_txn(state: ProducerStateManager, completed: CompletedTxn) -> AbortedTxn | None:
    """Close a transaction an end marker completed; an abort's `.txnindex` entry, with the last stable
    offset of that moment (taken before the close, as Kafka's updateTxnIndex is), is returned to be written."""
    txn = None
    if completed.is_aborted:
        txn = AbortedTxn(
            ABORTED_TXN_VERSION,
            completed.producer_id,
            completed.first_offset,
            completed.last_offset,
            state.last_stable_offset(completed),
        )
    state.complete_txn(completed)
    return txn


def _replay_batch(append_info: ProducerAppendInfo, data: Any, batch: Any) -> CompletedTxn | None:
    """Kafka's ProducerAppendInfo.append for one v2 batch: a data batch is recorded, an end marker
    closes the producer's transaction, which is returned."""
    if batch.is_control:
        return _replay_control_batch(append_info, data, batch)
    append_info.append_data_batch(
        batch.producer_epoch,
        batch.base_sequence,
        batch.last_sequence,
        batch.max_timestamp,
        batch.base_offset,
        batch.last_offset,
        batch.is_transactional,
    )
    return None


def _replay_control_batch(
    append_info: ProducerAppendInfo, data: mmap.mmap, batch: Any
) -> CompletedTxn | None:
    # Only this batch's bytes: read_batch frames everything from its position to the end of the buffer.
    with memoryview(data)[batch.position : batch.position + batch.size] as view:
        records = read_batch(view, 0, check_crc=False).records(view)
    if not records:
        return None  # an empty control batch: the cleaner removed the whole transaction
    record = records[0]
    try:
        kind = control_type(record.key)
        if kind not in (ControlType.ABORT, ControlType.COMMIT):
            return None
        marker = end_txn_marker(record.value)
    except FormatError as e:
        log.warning(
            "%s: skipped control batch at offset %d: %s", append_info.topic_partition, batch.base_offset, e
        )
        return None
    return append_info.append_end_txn_marker(
        kind == ControlType.COMMIT,
        marker.coordinator_epoch,
        batch.producer_epoch,
        batch.base_offset,
        record.timestamp,
    )


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "BatchProducerInfo",
    "CompletedTxn",
    "NextBatch",
    "ProducerAppendInfo",
    "ProducerCheck",
    "ProducerStateEntry",
    "ProducerStateManager",
    "check_leader_append",
    "end_txn",
    "increment_sequence",
    "replay_batches",
]
