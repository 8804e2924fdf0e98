"""The Verifier: which files of a log dir, partition dir or segment are checked, and in what order.

A log dir's partitions come first (to learn their log start and end), then its root checkpoints against
them; in a partition, its segments in offset order, then the leader-epoch checkpoint against the epochs
the walk met, partition.metadata and the producer snapshots. Reading overlaps with checking: the next
segment's reader starts when the current one reaches its end, and its indexes are parsed a slice after
each window of the current one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from formats.checkpoints import read_meta_properties, read_partition_metadata
from formats.segment import SNAPSHOT_SUFFIX, base_offset_of, parse_partition_dir
from kcli.logdir import SegmentReader
from ops.verify.checkpoints import (
    OffsetEntries,
    check_root_checkpoint,
    check_snapshot,
    quiet_offset_checkpoint,
    read_offset_checkpoint,
    read_text_file,
)
from ops.verify.context import Context, VerifyOptions
from ops.verify.epochs import check_leader_epoch_checkpoint
from ops.verify.findings import Finding, Summary, os_sentence
from ops.verify.indexes import IndexFiles, load_indexes
from ops.verify.targets import (
    CLEANER_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    ROOT_CHECKPOINTS,
    Target,
    is_segment_name,
    log_bytes,
)
from ops.verify.walk import PartitionLog, Segment, finish_log, segment_end, segment_start, walk_chunk

COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


_METADATA_SNAPSHOT = re.compile(r"^\d{20}-\d{10}\.checkpoint$")
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


class Verifier:
    """Verify targets one after another; each finding goes to `report` as soon as it is known."""

    def __init__(
        self,
        options: VerifyOptions,
        report: Callable[[Finding], object],
        *,
        progress: Callable[[Path, int], Callable[[int], None] | None] | None = None,
    ) -> None:
        self.options = options
        self._ctx = Context(options, report)
        self._progress_factory = progress
        self._progress: Callable[[int], None] | None = None
        self._bytes_before = 0  # .log bytes of the segments already walked, for the progress bar
        self.summary = self._ctx.summary

    def run(self, targets: Iterable[Target]) -> Summary:
        targets = list(targets)
        if self._progress_factory and targets:
            total = sum(log_bytes(t) for t in targets)
            self._progress = self._progress_factory(targets[0].path, total)
        for target in targets:
            if target.kind == "segment":
                self._verify_lone_segment(target.path)
            elif target.kind == "partition":
                self._verify_lone_partition(target.path)
            elif target.kind == "segments":  # no TOPIC-PARTITION name to check them against: one by one
                for name in sorted(n for n in os.listdir(target.path) if is_segment_name(n)):
                    self._verify_lone_segment(target.path / name)
            else:
                self._verify_log_dir(target.path)
        return self.summary

    # --- log dirs -----------------------------------------------------------------------------------------

    def _verify_log_dir(self, path: Path) -> None:
        """Partitions first (to learn their log start and end), then the root checkpoints against them."""
        checkpointed: dict[str, OffsetEntries] = {}
        for name in ROOT_CHECKPOINTS:
            if (path / name).is_file():
                checkpointed[name] = read_offset_checkpoint(self._ctx, path / name)
        if (path / META_PROPERTIES).is_file():
            read_text_file(self._ctx, path / META_PROPERTIES, read_meta_properties)
        log_start = {tp: offset for tp, (offset, _) in checkpointed.get(LOG_START_CHECKPOINT, {}).items()}
        cleaned = set(checkpointed.get(CLEANER_CHECKPOINT, {}))
        dirs = []
        for name in os.listdir(path):
            parsed = parse_partition_dir(name)
            if parsed and (path / name).is_dir():
                dirs.append((tuple(parsed[0]), parsed[1] or "", name))
        ranges: dict[tuple[str, int], tuple[int, int]] = {}
        for tp, state, name in sorted(dirs):
            # A -delete, -future or -stray dir is not the partition the checkpoints name: its log start
            # offset is recorded nowhere.
            log = PartitionLog(name, None if state else log_start.get(tp), tp in cleaned)
            log.log_start_recorded = not state
            self._verify_partition(path / name, log)
            if not state:  # -delete, -future and -stray dirs are not the partition the checkpoints name
                ranges[tp] = (log.log_start, log.log_end)
        for name, entries in checkpointed.items():
            if name != CLEANER_CHECKPOINT:  # Kafka resets a cleaner checkpoint that is out of range
                check_root_checkpoint(self._ctx, path / name, entries, ranges)

    def _verify_lone_partition(self, path: Path) -> None:
        """A partition dir on its own; the checkpoints of the log dir around it, if any, inform the gaps."""
        path = path.resolve()
        log = PartitionLog(path.name)
        tp = (log.topic, log.partition)
        log_start = quiet_offset_checkpoint(path.parent / LOG_START_CHECKPOINT)
        log.log_start_checkpoint = log_start.get(tp)
        log.compacted = tp in quiet_offset_checkpoint(path.parent / CLEANER_CHECKPOINT)
        self._verify_partition(path, log)

    # --- partitions ---------------------------------------------------------------------------------------

    def _verify_partition(self, path: Path, log: PartitionLog) -> None:
        if log.topic in self.options.compacted_topics or log.topic in COMPACTED_INTERNAL_TOPICS:
            log.compacted = True
        names = os.listdir(path)
        segments = sorted((base_offset_of(n), n) for n in names if is_segment_name(n))
        if log.topic == CLUSTER_METADATA_TOPIC:
            # KafkaMetadataLog's log start offset is its latest snapshot's end offset (once retention
            # moved it there): the leader-epoch-checkpoint's first entry starts at it, not at the
            # first segment's base.
            snapshot_ends = [int(n[:20]) for n in names if _METADATA_SNAPSHOT.match(n)]
            if snapshot_ends and max(snapshot_ends) > 0:
                log.log_start_checkpoint = max(max(snapshot_ends), log.log_start_checkpoint or 0)
                log.log_start_recorded = True
        if segments:
            log.first_segment_base = segments[0][0]
        # Each segment's walk starts as soon as the walk of the one before has reached its end, and its
        # index files are parsed a slice after each window of the one before: both overlap with the walk.
        # Only the segment being checked and the next one hold a reader and parsed indexes.
        current: SegmentFiles | None = None
        upcoming: SegmentFiles | None = None
        try:
            for i, (base, name) in enumerate(segments):
                current, upcoming = upcoming or self._segment_files(path / name, base, names), None
                if i + 1 < len(segments):
                    next_base, next_name = segments[i + 1]
                    upcoming = self._segment_files(path / next_name, next_base, names)
                    upcoming.reader.start(after=current.reader)
                self._verify_segment(
                    path / name, base, log, current, upcoming, is_last=upcoming is None, lone=False
                )
                current.reader.close()
        finally:
            for files in (current, upcoming):
                if files is not None:
                    files.reader.close()
        if segments:
            log.log_end = max(log.log_end, segments[-1][0])  # an empty active segment still moves the end
        finish_log(self._ctx, log)
        if LEADER_EPOCH_CHECKPOINT in names:
            check_leader_epoch_checkpoint(
                self._ctx,
                path / LEADER_EPOCH_CHECKPOINT,
                log.epoch_runs,
                log.log_start if log.log_start_recorded else None,
                log.log_end,
            )
        if PARTITION_METADATA in names:
            read_text_file(self._ctx, path / PARTITION_METADATA, read_partition_metadata)
        for name in sorted(names):
            if name.endswith(SNAPSHOT_SUFFIX) and base_offset_of(name) is not None:
                check_snapshot(self._ctx, path / name)

    def _verify_lone_segment(self, path: Path) -> None:
        log = PartitionLog(path.parent.resolve().name)
        base = base_offset_of(path.name)
        log.first_segment_base = base
        files = SegmentFiles(self._reader(path), IndexFiles(path, base, None) if base is not None else None)
        try:
            self._verify_segment(path, base, log, files, None, is_last=True, lone=True)
        finally:
            files.reader.close()
        finish_log(self._ctx, log)

    def _segment_files(self, path: Path, base: int, names: list[str]) -> SegmentFiles:
        return SegmentFiles(self._reader(path), IndexFiles(path, base, names))

    def _reader(self, path: Path) -> SegmentReader:
        on_progress = None
        if self._progress is not None:
            progress = self._progress
            on_progress = lambda done: progress(self._bytes_before + done)  # noqa: E731
        return SegmentReader(path, check_crc=True, window=self.options.window, on_progress=on_progress)

    def _verify_segment(
        self,
        path: Path,
        base: int | None,
        log: PartitionLog,
        files: SegmentFiles,
        upcoming: SegmentFiles | None,
        *,
        is_last: bool,
        lone: bool,
    ) -> None:
        """Walk the segment's .log through its indexes; parse the upcoming segment's indexes meanwhile."""
        reader, indexes = files
        next_indexes = upcoming.indexes if upcoming is not None else None
        seg = Segment(path, base)
        self.summary.files += 1
        self.summary.segments += 1
        try:
            size = path.stat().st_size
        except OSError as e:
            self._ctx.find(path, None, None, None, "unreadable_file", os_sentence(e))
            return
        self.summary.bytes += size
        if not reader.started:
            reader.start()  # the first windows are checksummed while the indexes are read
        if indexes is not None:
            load_indexes(self._ctx, seg.indexes, indexes, size, lone=lone)
        first = True
        try:
            for chunk in reader.chunks():
                if first:
                    segment_start(self._ctx, seg, log, chunk)
                    first = False
                walk_chunk(self._ctx, seg, log, chunk)
                if next_indexes is not None:
                    next_indexes.parse_slice()
        except OSError as e:
            self._ctx.find(path, None, None, None, "unreadable_file", os_sentence(e))
            return
        finally:
            self._bytes_before += size
        segment_end(self._ctx, seg, log, reader, is_last)


class SegmentFiles(NamedTuple):
    reader: SegmentReader
    indexes: IndexFiles | None  # None for a segment whose name gives no base offset
