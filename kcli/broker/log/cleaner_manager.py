"""LogCleanerManager: which compacted log to clean next, and how far each has been cleaned (Kafka's).

Every log with `compact` in cleanup.policy has a first dirty offset: where the last clean stopped, as
recorded in `cleaner-offset-checkpoint` at the root of its log dir (the log start offset when there is
no entry, or when the entry is out of range). Cleaning may not pass the first uncleanable offset: the
last stable offset, the active segment, and the first dirty segment younger than min.compaction.lag.ms.
The dirty ratio is the bytes between the two over all bytes up to the second; the filthiest log above
its min.cleanable.dirty.ratio (or holding records older than max.compaction.lag.ms) is cleaned next.

The state of each partition (in progress, aborted) lives here behind one lock, because the cleaner
thread and the broker's thread both read and change it.
"""

from __future__ import annotations

import enum
import logging
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from formats.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from formats.errors import CheckpointError
from kcli.broker.log.config import LONG_MAX, LogConfig
from kcli.broker.log.log import Log
from kcli.broker.log.segment import Segment
from kcli.files import write_atomically

logger = logging.getLogger("kcli.broker.log.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]


class LogCleaningState(enum.Enum):
    """Kafka's LogCleaningState for a partition the cleaner is busy with (no entry: idle)."""

    IN_PROGRESS = "LogCleaningInProgress"
    ABORTED = "LogCleaningAborted"


class LastRecord(NamedTuple):
    """What the cleaner must keep of an active producer: its last data batch (or, with none, its last
    marker in this epoch), so its sequence numbers survive cleaning (Kafka's LastRecord)."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass
class LogToClean:
    """One log chosen for cleaning, with the offsets and byte counts that chose it (Kafka's LogToClean)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset: cleaning reads the dirty section below it
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False
    segments: list[Segment] = field(default_factory=list)  # the log's segments when it was chosen
    last_records_of_producers: dict[int, LastRecord] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.log.topic, self.log.partition)


class LogCleanerManager:
    """Cleaning state and checkpoints of every compacted log in `log_dirs`."""

    def __init__(self, log_dirs: Iterable[Path]) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self._lock = threading.Lock()
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        self._in_progress: dict[TopicPartition, LogCleaningState] = {}
        self._uncleanable: set[TopicPartition] = set()
        self.paused: set[TopicPartition] = set()
        """Partitions not to be cleaned for now: their replica is moving between log dirs."""
        self.dirtiest_log_cleanable_ratio = 0.0

    # --- checkpoints ---------------------------------------------------------------------------------

    def load_checkpoints(self) -> list[str]:
        """Read (creating when missing) each log dir's cleaner-offset-checkpoint; returns problems found."""
        problems = []
        for log_dir in self.log_dirs:
            path = log_dir / CLEANER_OFFSET_CHECKPOINT
            entries: dict[TopicPartition, int] = {}
            try:
                if path.exists():
                    entries = read_offset_checkpoint(path.read_text("utf-8"))
                else:
                    write_atomically(path, write_offset_checkpoint({}))
            except (CheckpointError, UnicodeDecodeError, OSError) as e:
                problems.append(f"{path}: unreadable checkpoint ignored, every compacted log is dirty ({e})")
            with self._lock:
                self._checkpoints[log_dir] = entries
        return problems

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: offset for entries in self._checkpoints.values() for tp, offset in entries.items()}

    def all_cleaner_checkpoints_in(self, log_dir: Path) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._checkpoints.get(log_dir, {}))

    def update_checkpoint(
        self,
        log_dir: Path,
        live: Iterable[TopicPartition],
        *,
        update: tuple[TopicPartition, int] | None = None,
        remove: TopicPartition | None = None,
    ) -> None:
        """Rewrite `log_dir`'s checkpoint: entries of live partitions only, one updated or removed."""
        live_set = set(live)
        with self._lock:
            entries = {tp: o for tp, o in self._checkpoints.get(log_dir, {}).items() if tp in live_set}
            if remove is not None:
                entries.pop(remove, None)
            if update is not None:
                entries[update[0]] = update[1]
            self._checkpoints[log_dir] = entries
            text = write_offset_checkpoint(entries)
            write_atomically(log_dir / CLEANER_OFFSET_CHECKPOINT, text)

    # --- choosing a log ------------------------------------------------------------------------------

    def grab_filthiest_compacted_log(
        self, logs: Iterable[Log], now_ms: int, live: Callable[[], Iterable[TopicPartition]]
    ) -> LogToClean | None:
        """The compacted log most worth cleaning now, marked in progress; None if none qualifies."""
        last_clean = self.all_cleaner_checkpoints()
        dirty_logs = []
        for each in logs:
            tp = (each.topic, each.partition)
            if not each.config.compact:
                continue
            with self._lock:
                if tp in self._in_progress or tp in self._uncleanable or tp in self.paused:
                    continue
            try:
                first_dirty, uncleanable, force_update = cleanable_offsets(each, last_clean.get(tp), now_ms)
                if force_update:
                    self.update_checkpoint(each.dir.parent, live(), update=(tp, first_dirty))
                delay_ms = max_compaction_delay(each, first_dirty, now_ms)
                candidate = log_to_clean(each, first_dirty, uncleanable, need_compaction_now=delay_ms > 0)
            except Exception:  # noqa: BLE001 - Kafka's LogCleaningException: this partition stops being cleaned
                logger.exception("Failed to calculate log cleaning stats for partition %s", each.name)
                self.mark_partition_uncleanable(tp)
                continue
            if candidate.total_bytes > 0:
                dirty_logs.append(candidate)
        self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for c in dirty_logs), default=0.0)
        cleanable = [
            c
            for c in dirty_logs
            if (c.need_compaction_now and c.cleanable_bytes > 0)
            or c.cleanable_ratio > min_cleanable_ratio(c.log.config)
        ]
        if not cleanable:
            return None
        filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
        with self._lock:
            self._in_progress[filthiest.topic_partition] = LogCleaningState.IN_PROGRESS
        return filthiest

    # --- states --------------------------------------------------------------------------------------

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """A clean in progress stops at its next check and swaps nothing more in (the log is going away)."""
        with self._lock:
            if self._in_progress.get(tp) is LogCleaningState.IN_PROGRESS:
                self._in_progress[tp] = LogCleaningState.ABORTED
            self._uncleanable.discard(tp)

    def is_aborted(self, tp: TopicPartition) -> bool:
        with self._lock:
            return self._in_progress.get(tp) is LogCleaningState.ABORTED

    def done_cleaning(
        self, tp: TopicPartition, log_dir: Path, end_offset: int | None, live: Iterable[TopicPartition]
    ) -> None:
        """Kafka's doneCleaning: checkpoint `end_offset` (None: nothing to record) and clear the state."""
        with self._lock:
            state = self._in_progress.pop(tp, None)
        if state is LogCleaningState.IN_PROGRESS and end_offset is not None:
            self.update_checkpoint(log_dir, live, update=(tp, end_offset))

    def mark_partition_uncleanable(self, tp: TopicPartition) -> None:
        with self._lock:
            self._in_progress.pop(tp, None)
            self._uncleanable.add(tp)

    def uncleanable_partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._uncleanable)


# --- Kafka's LogCleanerManager object -------------------------------------------------------------------


def cleanable_offsets(log: Log, last_clean_offset: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable dirty offset, whether the checkpoint must be rewritten)."""
    log_start_offset = log.log_start_offset
    checkpointed = log_start_offset if last_clean_offset is None else last_clean_offset
    force_update = False
    if checkpointed < log_start_offset:
        if not (log.config.compact and log.config.delete):  # expected when retention moves the start
            logger.warning(
                "Resetting first dirty offset of %s to log start offset %d since the checkpointed offset %d "
                "is invalid.",
                log.name,
                log_start_offset,
                checkpointed,
            )
        first_dirty, force_update = log_start_offset, True
    elif checkpointed > log.log_end_offset:
        logger.warning(
            "The last checkpoint dirty offset for partition %s is %d, which is larger than the log end offset "
            "%d. Resetting to the log start offset %d.",
            log.name,
            checkpointed,
            log.log_end_offset,
            log_start_offset,
        )
        first_dirty, force_update = log_start_offset, True
    else:
        first_dirty = checkpointed
    segments = log.segments
    candidates = [log.last_stable_offset, segments[-1].base_offset]
    min_lag_ms = max(min_compaction_lag_ms(log.config), 0)
    if min_lag_ms > 0:
        for segment in non_active_segments_from(segments, first_dirty):
            if segment.largest_timestamp > now_ms - min_lag_ms:
                candidates.append(segment.base_offset)
                break
    return first_dirty, max(first_dirty, min(candidates)), force_update


def max_compaction_delay(log: Log, first_dirty_offset: int, now_ms: int) -> int:
    """How far past max.compaction.lag.ms the oldest dirty segment's first batch is (0: not yet)."""
    clean_until_ms = now_ms - max(log.config.max_compaction_lag_ms, 0)
    if clean_until_ms <= 0:
        return 0
    earliest = LONG_MAX
    for segment in non_active_segments_from(log.segments, first_dirty_offset):
        timestamp = first_batch_timestamp(segment)
        if 0 < timestamp < earliest:
            earliest = timestamp
    return clean_until_ms - earliest if earliest < clean_until_ms else 0


def log_to_clean(
    log: Log, first_dirty_offset: int, uncleanable_offset: int, *, need_compaction_now: bool = False
) -> LogToClean:
    segments = log.segments
    clean_bytes = sum(s.size for s in segments_in_range(segments, -1, first_dirty_offset))
    first_uncleanable_offset, cleanable_bytes = calculate_cleanable_bytes(
        segments, first_dirty_offset, uncleanable_offset
    )
    return LogToClean(
        log,
        first_dirty_offset,
        first_uncleanable_offset,
        clean_bytes,
        cleanable_bytes,
        need_compaction_now,
        segments,
        last_records_of_active_producers(log),
    )


def last_records_of_active_producers(log: Log) -> dict[int, LastRecord]:
    """Producer id -> its LastRecord, from the log's producer state (read on the log's own thread)."""
    return {
        producer_id: LastRecord(
            entry.last_data_offset if entry.last_data_offset >= 0 else None, entry.producer_epoch
        )
        for producer_id, entry in log.producer_state.producers.items()
    }


def calculate_cleanable_bytes(
    segments: list[Segment], first_dirty_offset: int, uncleanable_offset: int
) -> tuple[int, int]:
    """(base offset of the segment holding the uncleanable offset, bytes of the segments before it from
    the first dirty one): cleaning works on whole segments."""
    non_active = non_active_segments_from(segments, uncleanable_offset)
    first_uncleanable = non_active[0] if non_active else segments[-1]
    first_uncleanable_offset = first_uncleanable.base_offset
    start = min(first_dirty_offset, first_uncleanable_offset)
    cleanable_bytes = sum(s.size for s in segments_in_range(segments, start, first_uncleanable_offset))
    return first_uncleanable_offset, cleanable_bytes


def segments_in_range(segments: list[Segment], from_offset: int, to_offset: int) -> list[Segment]:
    """Segments that may hold offsets in [from_offset, to_offset): the one holding `from_offset` (or the
    first) up to the last starting below `to_offset` (Kafka's LogSegments.values(from, to))."""
    if from_offset == to_offset:
        return []
    if to_offset < from_offset:
        raise ValueError(
            f"Invalid log segment range: from offset {from_offset} is above to offset {to_offset}"
        )
    bases = [s.base_offset for s in segments]
    first = max(bisect_right(bases, from_offset) - 1, 0)
    end = bisect_left(bases, to_offset)
    return segments[first:end]


def non_active_segments_from(segments: list[Segment], from_offset: int) -> list[Segment]:
    """The non-active segments from the one holding `from_offset` on (empty past the active segment)."""
    active_base = segments[-1].base_offset
    if from_offset > active_base:
        return []
    return segments_in_range(segments, from_offset, active_base)


def first_batch_timestamp(segment: Segment) -> int:
    """Max timestamp of the segment's first batch (Kafka's getFirstBatchTimestamp); LONG_MAX if empty."""
    if segment.rolling_based_timestamp is None and segment.size > 0:
        first = next(segment.batch_headers(0, segment.size), None)
        if first is not None:
            segment.rolling_based_timestamp = first.max_timestamp
    timestamp = segment.rolling_based_timestamp
    return LONG_MAX if timestamp is None else timestamp


# --- topic configs the cleaner reads (LogConfig keeps them in `values`) ---------------------------------


def delete_retention_ms(config: LogConfig) -> int:
    return int(config.values.get("delete.retention.ms", 24 * 3600 * 1000))  # type: ignore[call-overload]


def min_compaction_lag_ms(config: LogConfig) -> int:
    return int(config.values.get("min.compaction.lag.ms", 0))  # type: ignore[call-overload]


def min_cleanable_ratio(config: LogConfig) -> float:
    return float(config.values.get("min.cleanable.dirty.ratio", 0.5))  # type: ignore[arg-type]
