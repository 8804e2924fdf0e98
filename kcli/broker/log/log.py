"""Log: one partition's log on this node (Kafka's UnifiedLog and LocalLog in one class).

Appends validate (see `validator`), stamp the base offset and partition leader epoch into a copy of the
61-byte header (outside the CRC), roll when Kafka would, and write header and payload with one
`os.pwritev`. Reads return file slices for `os.sendfile`, never record bytes. Retention and DeleteRecords
move the log start offset and retire whole segments: renamed to `.deleted`, their files and descriptors
kept until `file.delete.delay.ms` has passed so in-flight sendfiles finish. Recovery points only move
with flushes, as in Kafka.

Concurrency: the log is driven from one thread (the broker's event loop); a roll may hand the flush of
the finished segment to `flush_scheduler` (a background thread), which takes the flush lock and then the
log lock, never the other way round.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from formats.checkpoints import PartitionMetadata, read_partition_metadata, write_partition_metadata
from formats.errors import CheckpointError
from formats.index import AbortedTxn
from formats.records import ControlType, build_control_batch
from formats.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, StopReason, parse_partition_dir, walk
from kcli.broker.log.config import LogConfig
from kcli.broker.log.epochs import LeaderEpochCache
from kcli.broker.log.errors import LogStorageError, OffsetOutOfRange, RecordError, UnexpectedAppendOffset
from kcli.broker.log.loader import LogLoader, rebuild_producer_state
from kcli.broker.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    CompletedTxn,
    ProducerStateManager,
    check_leader_append,
    end_txn,
    replay_batches,
)
from kcli.broker.log.segment import BatchHeader, Segment
from kcli.broker.log.validator import AppendOrigin, BatchValidator
from kcli.files import fsync_dir

log = logging.getLogger("kcli.broker.log")

PARTITION_METADATA = "partition.metadata"
# What a leader append stamps into a batch header: base offset, batch length (rewritten as it is, so one
# pack covers the partition leader epoch at byte 12 too), partition leader epoch. All outside the CRC.
_STAMP = struct.Struct(">qii")
_RAFT_LEADER = AppendOrigin.RAFT_LEADER  # an enum member read from its class costs more than a check
_new_tuple = tuple.__new__  # builds a NamedTuple without the Python-level __new__ its constructor calls


class AppendInfo(NamedTuple):
    """What a produce response needs about an append."""

    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    max_timestamp: int
    records_count: int
    size: int


class TxnMarker(NamedTuple):
    """One transaction marker for `Log.write_txn_markers` (an entry of Kafka's WriteTxnMarkers)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool  # True: COMMIT, False: ABORT
    transaction_version: int = 0
    """WriteTxnMarkers v2's TransactionVersion: 2 when the epoch is the one the transaction's end bumped."""


class FetchSlice(NamedTuple):
    """Bytes of whole batches in a segment file, ready for `os.sendfile(sock, fd, position, size)`."""

    fd: int
    position: int
    size: int
    segment_base: int


class PolicyViolation(Exception):
    """DeleteRecords on a topic whose cleanup.policy does not include delete."""

    error_code = ErrorCode.policy_violation


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """One partition's log. Build it with `Log.create` (new partition) or `Log.load` (existing dir)."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None,
        segments: list[Segment],
        log_start_offset: int,
        recovery_point: int,
        log_end_offset: int,
        epoch_cache: LeaderEpochCache,
        high_watermark: int | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        flush_scheduler: Callable[[Callable[[], None]], object] | None = None,
        producer_state: ProducerStateManager | None = None,
    ) -> None:
        parsed = parse_partition_dir(dir.name)
        if parsed is None:
            raise ValueError(f"{dir} is not named <topic>-<partition>")
        self.topic, self.partition = parsed[0]
        self.dir = dir
        self.config = config
        self.topic_id = topic_id
        self.epoch_cache = epoch_cache
        epoch_cache.flush_scheduler = flush_scheduler  # truncations are written off the event loop
        if producer_state is None:
            producer_state = ProducerStateManager(dir, f"{self.topic}-{self.partition}")
            producer_state.update_map_end_offset(log_end_offset)
        self.producer_state = producer_state
        self._validator = BatchValidator(config, f"{self.topic}-{self.partition}")
        self._max_segment_ms = config.max_segment_ms
        self._segment_bytes = config.segment_bytes
        self._flush_messages = config.flush_messages
        self.clock = clock
        self._flush_scheduler = flush_scheduler
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self._leo = log_end_offset
        self.high_watermark = log_start_offset
        self.update_high_watermark(log_end_offset if high_watermark is None else high_watermark)
        self.last_flush_ms = clock()
        self._pending_deletes: list[tuple[int, Segment]] = []
        self._lock = threading.RLock()
        self._flush_lock = threading.RLock()
        self._closed = False
        self.active_segment.load_max_timestamp()

    # --- construction --------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        dir: Path,
        config: LogConfig,
        topic_id: uuid.UUID,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        flush_scheduler: Callable[[Callable[[], None]], object] | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """A new, empty partition directory: its first segment, its epoch checkpoint and partition.metadata.

        A directory just made holds nothing to recover, so there is no LogLoader pass. The fsyncs that
        make it durable (partition.metadata, the directory, its parent) go to the flusher thread when
        there is one, as Kafka writes partition.metadata asynchronously (PartitionMetadataFile.maybeFlush):
        a CreateTopics of thousands of partitions must not hold the event loop. A crash before they run
        leaves a directory that start-up recovery loads like any other (and a missing partition.metadata
        is written again from the metadata log's topic id).
        """
        dir.mkdir(parents=True, exist_ok=False)
        metadata = dir / PARTITION_METADATA
        # Written whole under a temporary name and renamed, as Kafka's PartitionMetadataFile does: a
        # process killed between the open and the write leaves no file (written again at the next
        # start) rather than an empty one, which start-up refuses to read.
        pending = dir / (PARTITION_METADATA + ".tmp")
        pending.write_text(write_partition_metadata(PartitionMetadata(0, topic_id)))
        os.replace(pending, metadata)
        now_ms = clock()
        segment = Segment(dir, 0, config, now_ms=now_ms, create=True)
        epoch_cache, _ = LeaderEpochCache.load(dir)
        producer_state = ProducerStateManager(
            dir, dir.name, producer_id_expiration_ms=producer_id_expiration_ms
        )
        log = cls(
            dir,
            config,
            topic_id=topic_id,
            segments=[segment],
            log_start_offset=0,
            recovery_point=0,
            log_end_offset=0,
            epoch_cache=epoch_cache,
            high_watermark=0,
            clock=clock,
            flush_scheduler=flush_scheduler,
            producer_state=producer_state,
        )

        def make_durable() -> None:
            fd = os.open(metadata, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(dir)
            fsync_dir(dir.parent)

        if flush_scheduler is not None:
            flush_scheduler(make_durable)
        else:
            make_durable()
        return log

    @classmethod
    def load(
        cls,
        dir: Path,
        config: LogConfig,
        *,
        log_start_offset_checkpoint: int = 0,
        recovery_point_checkpoint: int = 0,
        high_watermark_checkpoint: int | None = None,
        had_clean_shutdown: bool = False,
        clock: Callable[[], int] = wall_clock_ms,
        flush_scheduler: Callable[[Callable[[], None]], object] | None = None,
        report: Callable[[str], None] | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        quarantine: Callable[[], Path] | None = None,
    ) -> Log:
        """Open an existing partition directory, recovering it as Kafka's LogLoader does, then rebuild the
        producer state from the newest snapshot and the batches after it."""
        lines: list[str] = []
        loaded = LogLoader(
            dir,
            config,
            log_start_offset_checkpoint=log_start_offset_checkpoint,
            recovery_point_checkpoint=recovery_point_checkpoint,
            had_clean_shutdown=had_clean_shutdown,
            now_ms=clock(),
            report=report or lines.append,
            producer_id_expiration_ms=producer_id_expiration_ms,
            quarantine=quarantine,
        ).load()
        producer_state = ProducerStateManager(
            dir, dir.name, producer_id_expiration_ms=producer_id_expiration_ms
        )
        producer_state.remove_stray_snapshots(s.base_offset for s in loaded.segments)
        for problem in rebuild_producer_state(
            producer_state,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            last_offset=loaded.log_end_offset,
            now_ms=clock(),
            reload_from_clean_shutdown=had_clean_shutdown,
        ):
            (report or lines.append)(f"{dir.name}: deleted {problem.path.name}: {problem.message}")
        for line in lines:
            log.info("%s", line)
        topic_id = None
        metadata = dir / PARTITION_METADATA
        if metadata.exists():
            try:
                topic_id = read_partition_metadata(metadata.read_text("utf-8")).topic_id
            except (CheckpointError, UnicodeDecodeError) as e:
                reason = str(e).rstrip(".")
                raise CheckpointError(
                    f"Error while reading partition metadata file {metadata}: {reason}."
                ) from None
        return cls(
            dir,
            config,
            topic_id=topic_id,
            segments=loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            log_end_offset=loaded.log_end_offset,
            epoch_cache=loaded.epoch_cache,
            high_watermark=high_watermark_checkpoint if high_watermark_checkpoint is not None else 0,
            clock=clock,
            flush_scheduler=flush_scheduler,
            producer_state=producer_state,
        )

    # --- state ---------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def last_stable_offset(self) -> int:
        """The offset a read_committed fetch stops at: the first offset of the oldest open transaction,
        capped by the high watermark (Kafka's UnifiedLog.lastStableOffset)."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return min(first_unstable, self.high_watermark)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def segments(self) -> list[Segment]:
        """The live segments, oldest first (a snapshot; the list is replaced, never changed in place)."""
        return self._segments

    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from now on; index sizes and intervals of existing segments stay."""
        self.config = config
        self._validator = BatchValidator(config, self.name)
        self._max_segment_ms = config.max_segment_ms
        self._segment_bytes = config.segment_bytes
        self._flush_messages = config.flush_messages

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the high watermark, clamped into [log start offset, log end offset]."""
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self._leo)
        return self.high_watermark

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """A new leader's epoch, starting at `start_offset` (its log end): no record holds it yet, so its
        checkpoint is written on the flusher thread, ahead of any flush of the records it will hold."""
        if leader_epoch >= 0:
            self.epoch_cache.assign(leader_epoch, start_offset, write_later=True)

    # --- appends -------------------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transaction_verified: bool = False,
    ) -> AppendInfo:
        """Validate one produce batch, assign it offsets from the log end and append it.

        `transaction_verified`: the transaction coordinator confirmed this partition is in the producer's
        ongoing transaction, so a transactional batch may open a transaction here (otherwise it is refused
        with INVALID_TXN_STATE unless one is already open).

        Raises RecordError (nothing written) for bad input or a producer-state violation. A retried
        idempotent batch is not written again: the answer carries the offsets of the original, as Kafka's.
        RAFT_LEADER appends keep their offsets.
        """
        if origin is _RAFT_LEADER:
            return self.append_as_follower(records, now_ms=now_ms, leader_epoch=leader_epoch)
        validated = self._validator.validate(records, now_ms=now_ms, origin=origin)
        header, body, size, last_offset_delta, max_timestamp, records_count, log_append_time, producer = (
            validated
        )
        with self._lock:
            self._check_open()
            segment_bytes = self._segment_bytes
            if size > segment_bytes:
                raise _segment_too_small(size, self.name, segment_bytes)
            first_offset = self._leo
            last_offset = first_offset + last_offset_delta
            producer_state = self.producer_state
            producer_append = completed_txn = None
            if producer is not None:
                duplicate, producer_append, completed_txn = check_leader_append(
                    producer_state,
                    producer,
                    first_offset=first_offset,
                    last_offset=last_offset,
                    max_timestamp=max_timestamp,
                    origin=origin,
                    batch=(lambda: bytes(header) + bytes(body)) if producer.is_control else None,
                    transaction_verified=transaction_verified,
                )
                if duplicate is not None:
                    # Kafka answers a duplicate with the batch timestamp as its log append time.
                    return _new_tuple(
                        AppendInfo,
                        (
                            duplicate.first_offset,
                            duplicate.last_offset,
                            duplicate.timestamp,
                            self.log_start_offset,
                            duplicate.timestamp,
                            records_count,
                            0,
                        ),
                    )
            _STAMP.pack_into(header, 0, first_offset, size - 12, leader_epoch)
            segment = self._maybe_roll(size, first_offset, last_offset, max_timestamp, now_ms)
            segment.append((header, body), size, last_offset, max_timestamp)
            if leader_epoch >= 0 and leader_epoch != self.epoch_cache.latest_epoch():
                self.epoch_cache.assign(leader_epoch, first_offset)
            self._leo = last_offset + 1
            if producer_append is not None:
                producer_state.update(producer_append)
                if completed_txn is not None:
                    self._complete_txn(segment, completed_txn)
            producer_state.update_map_end_offset(last_offset + 1)
            log_start_offset = self.log_start_offset
        if last_offset + 1 - self.recovery_point >= self._flush_messages:
            self.flush()
        return _new_tuple(
            AppendInfo,
            (
                first_offset,
                last_offset,
                log_append_time,
                log_start_offset,
                max_timestamp,
                records_count,
                size,
            ),
        )

    def write_txn_markers(
        self, markers: Iterable[TxnMarker], *, leader_epoch: int | None = None, now_ms: int | None = None
    ) -> list[AppendInfo]:
        """Append one COMMIT or ABORT control batch per marker, as leader with the coordinator origin.

        This is the log side of Kafka's WriteTxnMarkers: each marker closes its producer's open
        transaction in this partition (an ABORT adds the transaction to the segment's `.txnindex`) and
        moves the last stable offset. `leader_epoch` defaults to the latest epoch of the log (-1 if none);
        `now_ms` (the marker timestamp) to the log's clock. Markers are appended in order; the first one
        refused raises RecordError (INVALID_PRODUCER_EPOCH for an older producer epoch,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch) and those before it stay written.
        A marker for a producer with no open transaction is still written, as Kafka does.
        """
        now_ms = self.clock() if now_ms is None else now_ms
        results = []
        for marker in markers:
            epoch = self.latest_epoch() if leader_epoch is None else leader_epoch
            batch = build_control_batch(
                ControlType.COMMIT if marker.commit else ControlType.ABORT,
                partition_leader_epoch=-1 if epoch is None else epoch,
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                coordinator_epoch=marker.coordinator_epoch,
                timestamp=now_ms,
            )
            results.append(
                self.append_as_leader(
                    batch,
                    leader_epoch=-1 if epoch is None else epoch,
                    now_ms=now_ms,
                    origin=AppendOrigin.COORDINATOR,
                )
            )
        return results

    def _complete_txn(self, segment: Segment, completed: CompletedTxn) -> None:
        """Close a transaction an end marker in `segment` completed; an abort goes to its `.txnindex`."""
        txn = end_txn(self.producer_state, completed)
        if txn is not None:
            segment.append_aborted_txn(txn)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [start_offset, upper_bound_offset) must
        report, from the `.txnindex` of the segment holding `start_offset` and the later ones until one
        proves the list complete (Kafka's LocalLog.collectAbortedTransactions)."""
        segments, bases = self._segments, self._bases
        found: list[AbortedTxn] = []
        for segment in segments[max(bisect_right(bases, start_offset) - 1, 0) :]:
            txns, complete = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            found.extend(txns)
            if complete:
                break
        return found

    def fetch_upper_bound_offset(self, fetched: FetchSlice) -> int:
        """The offset after the batches of a read: the next batch's base offset in the same segment, else
        the next segment's base, else the log end (Kafka's LogSegment.fetchUpperBoundOffset and fallback)."""
        segments, bases = self._segments, self._bases
        k = bisect_right(bases, fetched.segment_base) - 1
        if k >= 0 and segments[k].base_offset == fetched.segment_base:
            segment = segments[k]
            for header in segment.batch_headers(fetched.position + fetched.size, segment.size):
                return header.base_offset
            if k + 1 < len(segments):
                return segments[k + 1].base_offset
        return self._leo

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, now_ms: int, leader_epoch: int | None = None
    ) -> AppendInfo:
        """Append batches that already carry their offsets and epochs (replication, the metadata quorum).

        Every batch must be whole with a valid CRC, offsets must increase and start at or after the log
        end. With `leader_epoch` given (a Raft leader), every batch must carry that epoch.
        """
        view = memoryview(records)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        result = walk(view, 0, len(view), check_crc=True)
        if result.reason is not StopReason.END:
            raise RecordError(
                ErrorCode.corrupt_message, f"{result.problem(view)} in topic partition {self.name}"
            )
        batches = result.batches
        if not batches:
            raise RecordError(
                ErrorCode.invalid_record, f"The append to {self.name} holds no complete record batch"
            )
        headers = []
        previous = -1
        for batch in batches:
            if not batch.crc_valid:
                raise RecordError(
                    ErrorCode.corrupt_message,
                    f"Record is corrupt (stored crc = {batch.crc}) in topic partition {self.name}.",
                )
            if leader_epoch is not None and batch.partition_leader_epoch != leader_epoch:
                raise RecordError(
                    ErrorCode.invalid_record, "Append from Raft leader did not set the batch epoch correctly"
                )
            if batch.last_offset <= previous:
                raise RecordError(
                    ErrorCode.invalid_record, f"Out of order offsets found in append to {self.name}"
                )
            previous = batch.last_offset
            headers.append(
                BatchHeader(
                    batch.position,
                    batch.base_offset,
                    batch.last_offset,
                    batch.size,
                    batch.magic,
                    batch.partition_leader_epoch,
                    batch.max_timestamp,
                )
            )
        start, end = headers[0].position, headers[-1].position + headers[-1].size
        size = end - start
        max_timestamp = max(h.max_timestamp for h in headers)
        with self._lock:
            self._check_open()
            first_offset, last_offset = headers[0].base_offset, headers[-1].last_offset
            if first_offset < self._leo:
                raise UnexpectedAppendOffset(
                    f"Unexpected offset in append to {self.name}. First offset {first_offset} is less than the "
                    f"next offset {self._leo}.",
                    first_offset,
                    headers[0].last_offset,
                )
            if size > self.config.segment_bytes:
                raise _segment_too_small(size, self.name, self.config.segment_bytes)
            # A legacy wrapper's header gives its last offset only: roll at the log end, as Kafka does.
            roll_offset = first_offset if headers[0].magic >= 2 else self._leo
            segment = self._maybe_roll(size, roll_offset, last_offset, max_timestamp, now_ms)
            segment.append_batches(view[start:end], headers, start)
            self._replay_producer_batches(segment, view, batches)
            for header in headers:
                if header.magic >= 2:
                    if (
                        header.partition_leader_epoch >= 0
                        and header.partition_leader_epoch != self.epoch_cache.latest_epoch()
                    ):
                        self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
                elif len(self.epoch_cache):
                    log.warning(
                        "%s: clearing the leader epoch cache after a magic v%d append",
                        self.name,
                        header.magic,
                    )
                    self.epoch_cache.clear()
            self._leo = last_offset + 1
            log_start_offset = self.log_start_offset
        if last_offset + 1 - self.recovery_point >= self.config.flush_messages:
            self.flush()
        return AppendInfo(first_offset, last_offset, -1, log_start_offset, max_timestamp, -1, size)

    def _replay_producer_batches(self, segment: Segment, view: memoryview, batches: list) -> None:
        """Follower and Raft appends update producer state without checks (Kafka's REPLICATION origin);
        an end marker closes its transaction here as on the leader (`.txnindex`, last stable offset)."""
        for done in replay_batches(self.producer_state, view, batches):
            self._complete_txn(segment, done)
        self.producer_state.update_map_end_offset(batches[-1].next_offset)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle longer than producer.id.expiration.ms; returns how many."""
        with self._lock:
            return self.producer_state.remove_expired_producers(now_ms)

    def _maybe_roll(
        self, size: int, first_offset: int, last_offset: int, max_timestamp: int, now_ms: int
    ) -> Segment:
        segment = self._segments[-1]
        if segment.should_roll(
            self._segment_bytes, self._max_segment_ms, size, max_timestamp, last_offset, now_ms
        ):
            segment = self.roll(first_offset, now_ms=now_ms)
        return segment

    def roll(self, expected_next_offset: int = 0, *, now_ms: int | None = None) -> Segment:
        """Start a new active segment at max(expected_next_offset, log end offset); flush the old one."""
        with self._lock:
            now_ms = self.clock() if now_ms is None else now_ms
            new_offset = max(expected_next_offset, self._leo)
            active = self._segments[-1]
            if new_offset == active.base_offset:
                if active.size:
                    raise LogStorageError(
                        f"Trying to roll a new log segment for {self.name} with start offset {new_offset} while it "
                        f"already exists."
                    )
                # An empty active segment whose index counts as full: replace it (KAFKA-6388).
                active.delete_files()
                segments = self._segments[:-1]
            elif new_offset < active.base_offset:
                raise LogStorageError(
                    f"Trying to roll a new log segment for {self.name} with start offset {new_offset} lower than "
                    f"the start offset of the active segment {active.base_offset}"
                )
            else:
                active.on_become_inactive()
                segments = self._segments
            segment = Segment(self.dir, new_offset, self.config, now_ms=now_ms, create=True)
            self._set_segments([*segments, segment])
            log.debug("%s: rolled new log segment at offset %d", self.name, new_offset)
            # A snapshot named after the new segment, so recovering it can start from there; it is
            # fsynced with the old segment's flush, off this thread, as Kafka does.
            self.producer_state.update_map_end_offset(new_offset)
            snapshot = self.producer_state.take_snapshot(sync=False)

        def flush_rolled() -> None:
            if snapshot is not None:
                self.producer_state.flush_snapshot(snapshot)
            self.flush(new_offset)

        if self._flush_scheduler is None:
            flush_rolled()
        else:
            self._flush_scheduler(flush_rolled)
        return segment

    # --- reads ---------------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, upper_bound: int, min_one_batch: bool
    ) -> FetchSlice | None:
        """Whole batches from the one holding `offset`, ending at or before `upper_bound` (an offset at a
        batch boundary: the high watermark or last stable offset), at most `max_bytes` unless
        `min_one_batch` and the first batch alone is larger. None when there is nothing to return.

        Raises OffsetOutOfRange for offsets outside [log start offset, log end offset].
        """
        segments, bases, leo = self._segments, self._bases, self._leo
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRange(
                f"Received request for offset {offset} for partition {self.name}, but we only have log segments "
                f"in the range {self.log_start_offset} to {leo}."
            )
        if offset >= upper_bound:
            return None
        bound_segment, bound_position = self._position_of(min(upper_bound, leo), segments, bases)
        k = max(bisect_right(bases, offset) - 1, 0)
        for segment in segments[k:]:
            if segment.base_offset > bound_segment:
                return None
            max_position = segment.size if segment.base_offset < bound_segment else bound_position
            start = segment.recent_start(offset)
            if start is not None and start < max_position <= start + max_bytes:
                # max_position is a batch boundary within reach: a fetch that keeps up reads no header
                return FetchSlice(segment.fd, start, max_position - start, segment.base_offset)
            header = segment.translate_offset(offset)
            if header is None:
                continue
            start = header.position
            if start >= max_position:
                return None
            limit = start + max_bytes
            # max_position is a batch boundary (a segment's end, or where the batch holding the bound
            # starts): when it is within reach no header needs reading (a follower that keeps up)
            end = max_position if max_position <= limit else segment.whole_batches_end(start, limit)
            if end == start:
                if not min_one_batch or start + header.size > max_position:
                    return None
                end = start + header.size
            return FetchSlice(segment.fd, start, end - start, segment.base_offset)
        return None

    def _position_of(self, offset: int, segments: list[Segment], bases: list[int]) -> tuple[int, int]:
        """(segment base, byte position) where the batch holding `offset` starts; the end for the log end."""
        active = segments[-1]
        if offset >= self._leo:
            return active.base_offset, active.size
        segment = segments[max(bisect_right(bases, offset) - 1, 0)]
        position = segment.recent_start(offset)
        if position is not None:
            return segment.base_offset, position
        header = segment.translate_offset(offset)
        if header is None:
            return segment.base_offset, segment.size
        return segment.base_offset, header.position

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch or -1) of the first record at or after `timestamp`."""
        for segment in self._segments:
            if segment.largest_timestamp >= timestamp:
                return segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
        return None

    def max_timestamp_offset(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch or -1) of the record with the largest timestamp (first one)."""
        segments = self._segments
        best = max(segments, key=lambda s: s.max_timestamp_so_far)
        timestamp, offset = best.max_timestamp_so_far, best.offset_of_max_timestamp
        _, position = best.offset_index.lookup(offset)
        for header in best.batch_headers(position, best.size):
            if header.max_timestamp == timestamp:
                record_offset = best.offset_of_timestamp_in_batch(header, timestamp)
                if record_offset is None:
                    return None
                return record_offset, timestamp, header.partition_leader_epoch
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers; (-1, -1) when the epoch is unknown."""
        return self.epoch_cache.end_offset_for(epoch, self._leo)

    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch()

    def log_start_epoch(self) -> int | None:
        """The epoch ListOffsets reports with the earliest offset (None if the cache cannot tell)."""
        earliest = self.epoch_cache.earliest_entry()
        if earliest is not None and earliest.start_offset <= self.log_start_offset:
            return earliest.epoch
        return None

    # --- truncation ----------------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Drop every record at or past `target_offset` (a follower that diverged from its leader).

        Kafka's UnifiedLog.truncateTo: segments starting past the target go (as `.deleted`, removed
        after file.delete.delay.ms), the one holding it is cut, the epoch cache loses the epochs
        starting at or past it, producer state is rebuilt up to it, and the recovery point and high
        watermark come down with the log end. Returns False when the log already ends there; even
        then the epoch cache loses an epoch that starts at the log end, as in Kafka: a replica that
        became leader (and so wrote its epoch's start) but was replaced before it appended anything
        would otherwise keep fetching with that epoch, be told it diverged, and never move again.
        """
        with self._lock:
            self._check_open()
            if target_offset >= self._leo:
                self.epoch_cache.truncate_from_end(self._leo)
                return False
            if target_offset < self.log_start_offset:
                raise OffsetOutOfRange(
                    f"Cannot truncate {self.name} to {target_offset}, below its log start offset "
                    f"{self.log_start_offset}"
                )
            now_ms = self.clock()
            kept = [s for s in self._segments if s.base_offset <= target_offset]
            doomed = [s for s in self._segments if s.base_offset > target_offset]
            self._set_segments(kept)
            for segment in doomed:
                segment.change_suffix("", DELETED_SUFFIX)
                self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))
            truncated = kept[-1].truncate_to(target_offset) + sum(s.size for s in doomed)
            self._leo = target_offset
            self.recovery_point = min(self.recovery_point, target_offset)
            self.epoch_cache.truncate_from_end(target_offset)
            rebuild_producer_state(
                self.producer_state,
                self._segments,
                log_start_offset=self.log_start_offset,
                last_offset=target_offset,
                now_ms=now_ms,
                reload_from_clean_shutdown=False,
            )
            if self.high_watermark > target_offset:
                self.high_watermark = target_offset
        log.info("%s: truncated to offset %d (%d bytes)", self.name, target_offset, truncated)
        return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop every segment and restart the log empty at `new_offset` (a replica that installed a snapshot).

        Kafka's UnifiedLog.truncateFullyAndStartAt: the segments go as `.deleted`, a new active segment
        starts at the offset, epochs and producer state are cleared, and the log start offset, recovery
        point and high watermark all move there.
        """
        with self._lock:
            self._check_open()
            now_ms = self.clock()
            doomed = list(self._segments)
            for segment in doomed:
                segment.change_suffix("", DELETED_SUFFIX)
                self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))
            self._set_segments([Segment(self.dir, new_offset, self.config, now_ms=now_ms, create=True)])
            self._leo = new_offset
            self.log_start_offset = self.recovery_point = self.high_watermark = new_offset
            self.epoch_cache.clear()
            self.producer_state.truncate_fully_and_start_at(new_offset)
        log.info("%s: truncated fully, the log now starts at offset %d", self.name, new_offset)

    # --- log start and retention ---------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (-1: the high watermark).

        Returns the new log start offset (the low watermark). Whole segments below it go at the next
        retention pass, as in Kafka.
        """
        if not self.config.delete:
            raise PolicyViolation(
                f"Records of partition {self.name} can not be deleted while the topic is compacted"
            )
        with self._lock:
            if offset == -1:
                offset = self.high_watermark
            if offset < 0:
                raise OffsetOutOfRange(f"The offset {offset} for partition {self.name} is not valid")
            self.maybe_increment_log_start_offset(offset)
            return self.log_start_offset

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        with self._lock:
            if new_log_start_offset > self.high_watermark:
                raise OffsetOutOfRange(
                    f"Cannot increment the log start offset to {new_log_start_offset} of partition {self.name} "
                    f"since it is larger than the high watermark {self.high_watermark}"
                )
            if new_log_start_offset <= self.log_start_offset:
                return False
            self.log_start_offset = new_log_start_offset
            if self.recovery_point < new_log_start_offset:
                self.recovery_point = new_log_start_offset
            self.epoch_cache.truncate_from_start(new_log_start_offset)
            self.producer_state.on_log_start_offset_incremented(new_log_start_offset)
            return True

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole segments below the log start offset and, with cleanup.policy delete, those past
        retention.bytes or retention.ms; returns the bytes deleted."""
        deleted = self._delete_old_segments(_start_offset_breached, now_ms)
        if self.config.delete:
            deleted += self._delete_retention_size_breached(now_ms)
            deleted += self._delete_retention_ms_breached(now_ms)
        return deleted

    def _delete_retention_ms_breached(self, now_ms: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0

        def should_delete(log: Log, segment: Segment, next_segment: Segment | None) -> bool:
            return now_ms - segment.largest_timestamp > retention_ms

        return self._delete_old_segments(should_delete, now_ms)

    def _delete_retention_size_breached(self, now_ms: int) -> int:
        retention_bytes = self.config.retention_bytes
        size = self.size_bytes()
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        diff = size - retention_bytes

        def should_delete(log: Log, segment: Segment, next_segment: Segment | None) -> bool:
            nonlocal diff
            if diff - segment.size >= 0:
                diff -= segment.size
                return True
            return False

        return self._delete_old_segments(should_delete, now_ms)

    def _delete_old_segments(
        self, predicate: Callable[[Log, Segment, Segment | None], bool], now_ms: int
    ) -> int:
        with self._lock:
            self._check_open()
            deletable = []
            segments = self._segments
            for i, segment in enumerate(segments):
                next_segment = segments[i + 1] if i + 1 < len(segments) else None
                upper_bound = next_segment.base_offset if next_segment is not None else self._leo
                if next_segment is None and segment.size == 0:
                    break
                if not (self.high_watermark >= upper_bound and predicate(self, segment, next_segment)):
                    break
                deletable.append(segment)
            if not deletable:
                return 0
            return self._delete_segments(deletable, now_ms)

    def _delete_segments(self, deletable: list[Segment], now_ms: int) -> int:
        if len(deletable) == len(self._segments):
            new_segment = self.roll(now_ms=now_ms)
            if deletable[-1].base_offset == new_segment.base_offset:
                deletable = deletable[:-1]
        if not deletable:
            return 0
        last = deletable[-1]
        following = self._segments[self._segments.index(last) + 1]
        self.maybe_increment_log_start_offset(following.base_offset)
        doomed = set(map(id, deletable))
        self._set_segments([s for s in self._segments if id(s) not in doomed])
        deleted = 0
        for segment in deletable:
            deleted += segment.size
            segment.change_suffix("", DELETED_SUFFIX)
            self.producer_state.delete_snapshot(segment.base_offset)
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))
        log.info(
            "%s: deleted %d segments below offset %d (%d bytes)",
            self.name, len(deletable), following.base_offset, deleted,
        )  # fmt: skip
        self.delete_pending_segments(now_ms)
        return deleted

    def replace_segments(
        self, new_segments: list[Segment], old_segments: list[Segment], *, now_ms: int
    ) -> bool:
        """Swap cleaned segments (files `<base>.log.cleaned` ...) in for the segments they were written from.

        Kafka's LocalLog.replaceSegments: the new files become `.swap` (highest first), the old segments
        `.deleted` (kept file.delete.delay.ms for readers, as retention does), then `.swap` is dropped; the
        LogLoader finishes or undoes a swap a crash interrupted. Returns False, changing nothing, when an
        old segment has left the log meanwhile (retention, a deleted partition).
        """
        with self._lock:
            live = {id(s) for s in self._segments}
            if self._closed or not all(id(s) in live for s in old_segments):
                return False
            new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
            for segment in reversed(new_sorted):
                segment.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
            fsync_dir(self.dir)
            doomed = {id(s) for s in old_segments}
            kept = [s for s in self._segments if id(s) not in doomed]
            self._set_segments(sorted([*kept, *new_sorted], key=lambda s: s.base_offset))
            new_bases = {s.base_offset for s in new_sorted}
            for segment in sorted(old_segments, key=lambda s: s.base_offset):
                segment.change_suffix("", DELETED_SUFFIX)
                if segment.base_offset not in new_bases:
                    self.producer_state.delete_snapshot(segment.base_offset)
                self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))
            for segment in new_sorted:
                segment.change_suffix(SWAP_SUFFIX, "")
            fsync_dir(self.dir)
        return True

    def delete_pending_segments(self, now_ms: int) -> None:
        """Remove `.deleted` segments whose file.delete.delay.ms has passed (closing their descriptors)."""
        if not self._pending_deletes:  # most logs, every periodic tick: no lock taken
            return
        with self._lock:
            due = [s for when, s in self._pending_deletes if when <= now_ms]
            if due:
                self._pending_deletes = [(when, s) for when, s in self._pending_deletes if when > now_ms]
                for segment in due:
                    segment.delete_files()

    # --- flushing and closing ------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding offsets [recovery point, up_to) (default: the log end offset) and
        move the recovery point there.

        The recovery point moves under the log's lock after the flush lock is released, never with both
        held: an append holds the log's lock when a roll flushes the old segment in place (the metadata
        log, which has no flush scheduler), so a flush on another thread that held the flush lock and
        then wanted the log's lock froze the node's event loop for good (seen at a controlled shutdown
        beside a Raft flush)."""
        with self._flush_lock:
            offset = self._leo if up_to is None else min(up_to, self._leo)
            recovery_point = self.recovery_point
            if offset <= recovery_point:
                return
            segments, bases = self._segments, self._bases
            first = max(bisect_right(bases, recovery_point) - 1, 0)
            flushed = [s for s in segments[first:] if s.base_offset < offset]
            try:
                for segment in flushed:
                    segment.flush()
                if any(s.base_offset >= recovery_point for s in flushed):
                    fsync_dir(self.dir)
            except (OSError, ValueError) as e:
                if self._closed:
                    return
                raise LogStorageError(
                    f"Error while flushing log {self.name} up to offset {offset}: {e}"
                ) from e
        self._advance_recovery_point(offset)

    def _advance_recovery_point(self, offset: int) -> None:
        with self._lock:
            offset = min(offset, self._leo)  # the log may have been truncated during the flush
            if offset > self.recovery_point:
                self.recovery_point = offset
                self.last_flush_ms = self.clock()

    def flush_all(self) -> None:
        """fsync every segment from the recovery point, the empty active one included (clean shutdown)."""
        with self._flush_lock:
            end, segments, bases = self._leo, self._segments, self._bases
            first = max(bisect_right(bases, self.recovery_point) - 1, 0)
            for segment in segments[first:]:
                segment.flush()
            fsync_dir(self.dir)
        self._advance_recovery_point(end)

    def close(self) -> None:
        """Close every segment: final time-index entries, trimmed indexes, descriptors released."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            # A snapshot at the log end, so the next start-up need not scan the log for producer state.
            self.producer_state.take_snapshot()
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.close_handlers()

    def close_handlers(self) -> None:
        """Release descriptors and maps without writing (the directory is going away)."""
        self.epoch_cache.close()
        with self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close_handlers()
            for _, segment in self._pending_deletes:
                segment.close_handlers()

    def _check_open(self) -> None:
        if self._closed:
            raise LogStorageError(f"The log of {self.name} is closed")

    def _set_segments(self, segments: Iterable[Segment]) -> None:
        self._segments = list(segments)
        self._bases = [s.base_offset for s in self._segments]

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, start={self.log_start_offset}, end={self._leo}, hw={self.high_watermark}, "
            f"segments={len(self._segments)})"
        )


def _start_offset_breached(log: Log, segment: Segment, next_segment: Segment | None) -> bool:
    return next_segment is not None and next_segment.base_offset <= log.log_start_offset


def _segment_too_small(size: int, name: str, segment_bytes: int) -> RecordError:
    return RecordError(
        ErrorCode.record_list_too_large,
        f"Message batch size is {size} bytes in append to partition {name}, which exceeds the maximum "
        f"configured segment size of {segment_bytes}.",
    )


__all__ = ["AppendInfo", "AppendOrigin", "FetchSlice", "Log", "PolicyViolation", "TxnMarker"]
