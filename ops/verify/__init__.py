"""Check every file of a segment, a partition dir or a whole log dir against the rules Kafka keeps.

The findings are facts an operator can act on, each a `Finding` with the file, the byte position, the
offsets concerned, a stable `kind` and one sentence. Errors are states Kafka would refuse, lose data
over or never write itself; warnings are states Kafka creates on purpose (a compacted range, a log start
moved by retention) or tolerates, printed so the log can be understood but not failing the check.

The segment walk is the hot path: `formats.segment.walk` frames batches and checks CRCs in C, and the
loop over its header tuples below does a handful of comparisons per batch; everything unusual (a bad CRC,
a gap, a new leader epoch, an index entry) leaves the loop for a method of its own.
"""

from __future__ import annotations

import errno
import os
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter, le, lt
from pathlib import Path
from typing import NamedTuple

from formats import _native, checkpoints, snapshot
from formats.errors import FormatError
from formats.index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, OffsetIndex, TimeIndex, read_txn_index
from formats.records import (
    CONTROL_BIT,
    CRC_START,
    DELETE_HORIZON_BIT,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    ControlType,
    LegacyBatch,
    RecordBatch,
    control_type,
    end_txn_marker,
)
from formats.segment import (
    INDEX_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    StopReason,
    base_offset_of,
    filename,
    parse_partition_dir,
    unit_size_at,
)
from ops import gaps
from ops.logdir import WINDOW_BYTES, Chunk, SegmentReader
from ops.verify.findings import (
    ERROR,
    KINDS,
    WARNING,
    Finding,
    Summary,
    checkpoint_sentence,
    os_sentence,
    plural,
    sentence,
)
from ops.verify.targets import (
    CLEANER_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    ROOT_CHECKPOINTS,
    NotKafkaPath,
    Target,
    is_segment_name,
    log_bytes,
    resolve,
)

COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

__all__ = [
    "ERROR",
    "KINDS",
    "WARNING",
    "Finding",
    "NotKafkaPath",
    "Summary",
    "Target",
    "Verifier",
    "VerifyOptions",
    "resolve",
]

_INT32_MAX = 2**31 - 1
_NEVER = sys.maxsize  # an index position or offset no batch reaches
_ALWAYS = -(2**62)  # an index position every batch reaches


@dataclass(frozen=True)
class VerifyOptions:
    deep: bool = False  # decode every record, not only batch headers
    compacted_topics: frozenset[str] = frozenset()  # topics known to have cleanup.policy=compact
    window: int = WINDOW_BYTES


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
        self._report = report
        self._progress_factory = progress
        self._progress: Callable[[int], None] | None = None
        self._bytes_before = 0  # .log bytes of the segments already walked, for the progress bar
        self.summary = Summary()

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
            else:
                self._verify_log_dir(target.path)
        return self.summary

    # --- findings ---------------------------------------------------------------------------------------

    def _find(
        self,
        file: Path | str,
        position: int | None,
        first_offset: int | None,
        last_offset: int | None,
        kind: str,
        message: str,
    ) -> None:
        self.summary.kinds[kind] += 1
        self._report(Finding(str(file), position, first_offset, last_offset, kind, message))

    # --- log dirs -----------------------------------------------------------------------------------------

    def _verify_log_dir(self, path: Path) -> None:
        """Partitions first (to learn their log start and end), then the root checkpoints against them."""
        checkpointed: dict[str, dict[tuple[str, int], tuple[int, int | None]]] = {}
        for name in ROOT_CHECKPOINTS:
            if (path / name).is_file():
                checkpointed[name] = self._read_offset_checkpoint(path / name)
        if (path / META_PROPERTIES).is_file():
            self._read_text_file(path / META_PROPERTIES, checkpoints.read_meta_properties)
        log_start = {tp: offset for tp, (offset, _) in checkpointed.get(LOG_START_CHECKPOINT, {}).items()}
        cleaned = set(checkpointed.get(CLEANER_CHECKPOINT, {}))
        dirs = []
        for name in os.listdir(path):
            parsed = parse_partition_dir(name)
            if parsed and (path / name).is_dir():
                dirs.append((tuple(parsed[0]), parsed[1] or "", name))
        ranges: dict[tuple[str, int], tuple[int, int]] = {}
        for tp, state, name in sorted(dirs):
            log = _PartitionLog(name, log_start.get(tp), tp in cleaned)
            self._verify_partition(path / name, log)
            if not state:  # -delete, -future and -stray dirs are not the partition the checkpoints name
                ranges[tp] = (log.log_start, log.log_end)
        for name, entries in checkpointed.items():
            if name != CLEANER_CHECKPOINT:  # Kafka resets a cleaner checkpoint that is out of range
                self._check_root_checkpoint(path / name, entries, ranges)

    def _verify_lone_partition(self, path: Path) -> None:
        """A partition dir on its own; the checkpoints of the log dir around it, if any, inform the gaps."""
        path = path.resolve()
        log = _PartitionLog(path.name)
        tp = (log.topic, log.partition)
        log_start = _quiet_offset_checkpoint(path.parent / LOG_START_CHECKPOINT)
        log.log_start_checkpoint = log_start.get(tp)
        log.compacted = tp in _quiet_offset_checkpoint(path.parent / CLEANER_CHECKPOINT)
        self._verify_partition(path, log)

    def _read_offset_checkpoint(self, file: Path) -> dict[tuple[str, int], tuple[int, int | None]]:
        """{(topic, partition): (offset, byte position of its line)}, or {} after reporting a bad file."""
        data = self._read_bytes(file)
        if data is None:
            return {}
        self.summary.files += 1
        try:
            entries = checkpoints.read_offset_checkpoint(data.decode("utf-8"))
        except (FormatError, UnicodeDecodeError) as e:
            self._find(file, None, None, None, "checkpoint_corrupt", checkpoint_sentence(e, file))
            return {}
        lines = _entry_line_positions(data)
        return {
            tp: (offset, lines[i] if i < len(lines) else None)
            for i, (tp, offset) in enumerate(entries.items())
        }

    def _check_root_checkpoint(
        self,
        file: Path,
        entries: dict[tuple[str, int], tuple[int, int | None]],
        ranges: dict[tuple[str, int], tuple[int, int]],
    ) -> None:
        what = {
            "recovery-point-offset-checkpoint": "recovery point",
            "replication-offset-checkpoint": "high watermark",
            "log-start-offset-checkpoint": "log start offset",
        }[file.name]
        for (topic, partition), (offset, position) in entries.items():
            name = f"{topic}-{partition}"
            if (topic, partition) not in ranges:
                self._find(
                    file, position, offset, offset, "checkpoint_unknown_partition",
                    f"the {what} of {name} is checkpointed, but this log dir holds no directory {name}.",
                )  # fmt: skip
                continue
            log_start, log_end = ranges[(topic, partition)]
            if offset > log_end:
                self._find(
                    file, position, offset, offset, "checkpoint_beyond_log_end",
                    f"the {what} {offset} of {name} is beyond its log end offset {log_end}.",
                )  # fmt: skip
            elif offset < log_start and what != "log start offset":
                self._find(
                    file, position, offset, offset, "checkpoint_below_log_start",
                    f"the {what} {offset} of {name} is below its log start offset {log_start}.",
                )  # fmt: skip

    # --- partitions ---------------------------------------------------------------------------------------

    def _verify_partition(self, path: Path, log: _PartitionLog) -> None:
        if log.topic in self.options.compacted_topics or log.topic in COMPACTED_INTERNAL_TOPICS:
            log.compacted = True
        names = os.listdir(path)
        segments = sorted((base_offset_of(n), n) for n in names if is_segment_name(n))
        if segments:
            log.first_segment_base = segments[0][0]
        # Each segment's walk starts as soon as the walk of the one before has reached its end, and its
        # index files are parsed a slice after each window of the one before: both overlap with the walk.
        # Only the segment being checked and the next one hold a reader and parsed indexes.
        current: _SegmentFiles | None = None
        upcoming: _SegmentFiles | None = None
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
        self._finish_log(log)
        if LEADER_EPOCH_CHECKPOINT in names:
            self._check_leader_epoch_checkpoint(path / LEADER_EPOCH_CHECKPOINT, log)
        if PARTITION_METADATA in names:
            self._read_text_file(path / PARTITION_METADATA, checkpoints.read_partition_metadata)
        for name in sorted(names):
            if name.endswith(SNAPSHOT_SUFFIX) and base_offset_of(name) is not None:
                self._check_snapshot(path / name)

    def _verify_lone_segment(self, path: Path) -> None:
        log = _PartitionLog(path.parent.resolve().name)
        base = base_offset_of(path.name)
        log.first_segment_base = base
        files = _SegmentFiles(self._reader(path), _IndexFiles(path, base, None) if base is not None else None)
        try:
            self._verify_segment(path, base, log, files, None, is_last=True, lone=True)
        finally:
            files.reader.close()
        self._finish_log(log)

    def _finish_log(self, log: _PartitionLog) -> None:
        """Gaps held back until the whole partition was seen, and the last leader-epoch run."""
        for file, position, first, last, prev_attributes in log.pending_gaps:
            self._report_gap(file, position, gaps.inner_gap(first, last, prev_attributes, log.facts()))
        log.pending_gaps.clear()
        if log.epoch_runs:
            log.epoch_runs[-1][2] = log.prev_last

    # --- segments -----------------------------------------------------------------------------------------

    def _segment_files(self, path: Path, base: int, names: list[str]) -> _SegmentFiles:
        return _SegmentFiles(self._reader(path), _IndexFiles(path, base, names))

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
        log: _PartitionLog,
        files: _SegmentFiles,
        upcoming: _SegmentFiles | None,
        *,
        is_last: bool,
        lone: bool,
    ) -> None:
        """Walk the segment's .log through its indexes; parse the upcoming segment's indexes meanwhile."""
        reader, indexes = files
        next_indexes = upcoming.indexes if upcoming is not None else None
        seg = _Segment(path, base)
        self.summary.files += 1
        self.summary.segments += 1
        try:
            size = path.stat().st_size
        except OSError as e:
            self._find(path, None, None, None, "unreadable_file", os_sentence(e))
            return
        self.summary.bytes += size
        if not reader.started:
            reader.start()  # the first windows are checksummed while the indexes are read
        if indexes is not None:
            self._load_indexes(seg, indexes, size, lone=lone)
        first = True
        try:
            for chunk in reader.chunks():
                if first:
                    self._segment_start(seg, log, chunk)
                    first = False
                self._walk_chunk(seg, log, chunk)
                if next_indexes is not None:
                    next_indexes.parse_slice()
        except OSError as e:
            self._find(path, None, None, None, "unreadable_file", os_sentence(e))
            return
        finally:
            self._bytes_before += size
        self._segment_end(seg, log, reader, is_last)

    def _segment_start(self, seg: _Segment, log: _PartitionLog, chunk: Chunk) -> None:
        """The segment's name against its first batch, the segment before it and the log start."""
        batch = chunk.batches[0]
        position = chunk.base + batch.position
        # a v0/v1 compressed wrapper carries its last inner offset; its first is known only with --deep
        first = None if batch.magic < 2 and batch.attributes & 0x07 else batch.base_offset
        if log.first_offset is None:
            log.first_offset = first if first is not None else batch.last_offset
            self._head(seg, log, position, first)
        if seg.base is None:
            return
        if first is not None and first < seg.base:
            self._find(
                seg.path, position, first, batch.last_offset, "segment_name_mismatch",
                f"the first batch starts at offset {first}, below the base offset {seg.base} the segment is named after.",
            )  # fmt: skip
        elif log.prev_last is not None and seg.base <= log.prev_last < (
            first if first is not None else batch.last_offset
        ):
            self._find(
                seg.path, 0, seg.base, log.prev_last, "offset_overlap",
                f"the segment is named after offset {seg.base}, but the segment before it holds offsets up to {log.prev_last}.",
            )  # fmt: skip

    def _walk_chunk(self, seg: _Segment, log: _PartitionLog, chunk: Chunk) -> None:
        """The hot loop: a few comparisons per batch; anything unusual goes to a method."""
        base = chunk.base
        view = chunk.view
        deep = self.options.deep
        next_offset = log.next_offset  # None: no expectation (start of the log, or after a bad CRC)
        prev_last = log.prev_last
        prev_attributes = log.prev_attributes
        prev_max_timestamp = log.prev_max_timestamp
        epoch = log.epoch
        max_timestamp_so_far = seg.max_timestamp
        # index entries hold offsets relative to the segment's base offset
        offset_base = seg.offset_base
        index_offsets, index_positions, index_k = seg.index_offsets, seg.index_positions, seg.index_k
        index_at = (_ALWAYS if seg.index_span else index_positions[index_k]) - base
        time_timestamps, time_offsets, time_k = seg.time_timestamps, seg.time_offsets, seg.time_index_k
        time_index_at = offset_base + time_offsets[time_k]
        for batch in chunk.batches:
            position = batch[0]
            if batch[4] == 2:
                (
                    _, base_offset, _, partition_leader_epoch, _, _, attributes, last_offset_delta,
                    _, max_timestamp, _, _, _, records_count, crc_valid,
                ) = batch  # fmt: skip
                last_offset = base_offset + last_offset_delta
                if records_count != last_offset_delta + 1 or attributes & DELETE_HORIZON_BIT:
                    self._compacted_batch(seg, log, base + position, batch)
                if crc_valid is not True:
                    self._crc_mismatch(seg, view, base, batch)
                elif deep:
                    self._check_records(seg, log, view, base, batch)
            else:
                base_offset, last_offset, max_timestamp = self._legacy_entry(seg, log, view, base, batch)
                partition_leader_epoch = -1
                attributes = 0
                crc_valid = batch[7]
                if crc_valid is not True:
                    self._crc_mismatch(seg, view, base, batch)
            if base_offset != next_offset:
                self._discontinuity(
                    seg,
                    log,
                    base + position,
                    base_offset,
                    last_offset,
                    next_offset,
                    prev_last,
                    prev_attributes,
                )
            if partition_leader_epoch != epoch:
                epoch = self._leader_epoch_change(
                    seg, log, base + position, base_offset, partition_leader_epoch, epoch, prev_last
                )
            next_offset = last_offset + 1 if crc_valid else None
            prev_last = last_offset
            prev_attributes = attributes
            if max_timestamp > max_timestamp_so_far:
                max_timestamp_so_far = max_timestamp
            elif attributes & TIMESTAMP_TYPE_BIT and max_timestamp < prev_max_timestamp:
                self._log_append_time_backwards(
                    seg, base + position, batch, max_timestamp, prev_max_timestamp
                )
            prev_max_timestamp = max_timestamp
            # index entries: the usual one (this batch's start and last offset) is checked inline
            if position >= index_at:
                if position == index_at and index_offsets[index_k] + offset_base == last_offset:
                    index_k += 1
                    index_at = index_positions[index_k] - base
                else:
                    seg.index_k = index_k
                    index_at = self._offset_index_entries(seg, base + position, last_offset) - base
                    index_k = seg.index_k
            if last_offset >= time_index_at:
                if (
                    last_offset == time_index_at
                    and time_timestamps[time_k] == max_timestamp == max_timestamp_so_far
                    and offset_base + time_offsets[time_k + 1] > last_offset
                ):
                    time_k += 1
                    time_index_at = offset_base + time_offsets[time_k]
                else:
                    seg.time_index_k = time_k
                    time_index_at = self._time_index_entries(
                        seg, last_offset, max_timestamp, max_timestamp_so_far
                    )
                    time_k = seg.time_index_k
        log.next_offset = next_offset
        log.prev_last = prev_last
        log.prev_attributes = prev_attributes
        log.prev_max_timestamp = prev_max_timestamp
        log.epoch = epoch
        seg.max_timestamp = max_timestamp_so_far
        seg.index_k = index_k
        seg.time_index_k = time_k
        self.summary.batches += len(chunk.batches)

    def _segment_end(self, seg: _Segment, log: _PartitionLog, reader: SegmentReader, is_last: bool) -> None:
        end = reader.end
        if end is None:
            return
        after = "" if is_last else "; log recovery would truncate the log here and delete every later segment"
        if end.reason is StopReason.END and end.trailing_bytes:
            declared = self._declared_size(seg.path, end.position, end.trailing_bytes)
            self._find(
                seg.path, end.position, None, None, "torn_tail",
                f"{plural(end.trailing_bytes, 'byte')} after the last whole batch do not form a complete batch"
                f"{declared}{after}.",
            )  # fmt: skip
        elif end.reason is not StopReason.END:
            self._find(
                seg.path, end.position, None, None, "corrupt_batch",
                f"{end.problem}; the {plural(end.trailing_bytes, 'byte')} from here to the end of the file "
                f"cannot be framed{after}.",
            )  # fmt: skip
        if log.prev_last is not None:
            log.log_end = max(log.log_end, log.prev_last + 1)
            if seg.base is not None and log.prev_last - seg.base > _INT32_MAX:
                self._find(
                    seg.path, None, seg.base, log.prev_last, "corrupt_batch",
                    f"offset {log.prev_last} is more than 2^31-1 above the segment's base offset {seg.base}, "
                    "so no index entry can express it.",
                )  # fmt: skip
        self._index_leftovers(seg, end.position)

    def _declared_size(self, path: Path, position: int, available: int) -> str:
        """' (the unit there declares N bytes)' for a torn unit whose size field is all there, else ''."""
        try:
            with open(path, "rb") as f:
                f.seek(position)
                prefix = f.read(12)
        except OSError:
            return ""
        size = unit_size_at(prefix + bytes(5), 0) if len(prefix) == 12 else None
        return f" (the unit there declares {size} bytes)" if size is not None and size > available else ""

    # --- unusual batches ----------------------------------------------------------------------------------

    def _crc_mismatch(
        self, seg: _Segment, view: memoryview, base: int, batch: RecordBatch | LegacyBatch
    ) -> None:
        position = batch.position
        end = position + batch.size
        if batch.magic == 2:
            computed = _native.crc32c(view[position + CRC_START : end])
            sentence = f"Record batch is corrupt (stored crc = {batch.crc}, computed crc = {computed})."
        else:
            computed = zlib.crc32(view[position + MAGIC_OFFSET : end])
            sentence = f"Record is corrupt (stored crc = {batch.crc}, computed crc = {computed})."
        self._find(seg.path, base + position, batch.base_offset, batch.last_offset, "crc_mismatch", sentence)

    def _compacted_batch(self, seg: _Segment, log: _PartitionLog, position: int, batch: RecordBatch) -> None:
        """Fewer records than offsets (or a delete horizon): the cleaner's work, unless the header is impossible."""
        count, delta = batch.records_count, batch.last_offset_delta
        if count < 0 or delta < 0 or count > delta + 1:
            self._find(
                seg.path, position, batch.base_offset, batch.last_offset, "corrupt_batch",
                f"the batch declares {count} records for last_offset_delta {delta}, which no writer produces.",
            )  # fmt: skip
        else:
            log.compaction_seen = True

    def _legacy_entry(
        self, seg: _Segment, log: _PartitionLog, view: memoryview, base: int, batch: LegacyBatch
    ) -> tuple[int | None, int, int]:
        """(first offset or None when unknown, last offset, max timestamp) of a v0/v1 entry.

        A compressed wrapper carries its last inner offset; its first is known only by decompressing it,
        which --deep does.
        """
        compressed = batch.attributes & 0x07
        if not self.options.deep:
            return (None if compressed else batch.offset), batch.offset, batch.timestamp
        position = base + batch.position
        try:
            records = batch.records(view)
        except FormatError as e:
            self._find(seg.path, position, batch.offset, batch.offset, "corrupt_records", sentence(e))
            return (None if compressed else batch.offset), batch.offset, batch.timestamp
        self.summary.records += len(records)
        offsets = [r.offset for r in records]
        if any(a >= b for a, b in zip(offsets, offsets[1:], strict=False)) or offsets[-1] != batch.offset:
            self._find(
                seg.path, position, offsets[0], batch.offset, "corrupt_records",
                f"the inner offsets {offsets[0]}..{offsets[-1]} of the wrapper message at offset {batch.offset} "
                "do not increase up to the wrapper's offset.",
            )  # fmt: skip
        elif compressed and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            log.compaction_seen = True
        if batch.magic == 1 and not batch.attributes & TIMESTAMP_TYPE_BIT:
            newest = max(r.timestamp for r in records)
            if newest > batch.timestamp:
                self._find(
                    seg.path, position, offsets[0], batch.offset, "max_timestamp_mismatch",
                    f"the wrapper message's timestamp {batch.timestamp} is below its newest inner timestamp {newest}.",
                )  # fmt: skip
        return offsets[0], batch.offset, batch.timestamp

    def _check_records(
        self, seg: _Segment, log: _PartitionLog, view: memoryview, base: int, batch: RecordBatch
    ) -> None:
        """--deep: the records' structure, offsets inside the batch's range, timestamps within max_timestamp."""
        position = base + batch.position
        try:
            records = batch.records(view)
        except FormatError as e:
            self._find(
                seg.path, position, batch.base_offset, batch.last_offset, "corrupt_records", sentence(e)
            )
            return
        self.summary.records += len(records)
        if not records:
            return
        offsets = list(map(_OFFSET, records))
        if offsets != list(range(batch.base_offset, batch.base_offset + len(records))):
            if offsets[-1] > batch.last_offset or any(
                a >= b for a, b in zip(offsets, offsets[1:], strict=False)
            ):
                self._find(
                    seg.path, position, batch.base_offset, batch.last_offset, "corrupt_records",
                    f"record offsets {offsets[0]}..{offsets[-1]} do not increase within the batch's offsets "
                    f"{batch.base_offset}..{batch.last_offset}.",
                )  # fmt: skip
            else:
                log.compaction_seen = True  # records removed from inside the batch
        if not batch.attributes & TIMESTAMP_TYPE_BIT:
            newest = max(map(_TIMESTAMP, records))
            if newest > batch.max_timestamp:
                offset = records[list(map(_TIMESTAMP, records)).index(newest)].offset
                self._find(
                    seg.path, position, batch.base_offset, batch.last_offset, "max_timestamp_mismatch",
                    f"the record at offset {offset} has timestamp {newest}, above the batch's max_timestamp "
                    f"{batch.max_timestamp}.",
                )  # fmt: skip
        if batch.attributes & CONTROL_BIT:
            try:
                for record in records:
                    if control_type(record.key) in (ControlType.COMMIT, ControlType.ABORT):
                        end_txn_marker(record.value)
            except FormatError as e:
                self._find(
                    seg.path, position, batch.base_offset, batch.last_offset, "corrupt_records", sentence(e)
                )

    def _log_append_time_backwards(
        self, seg: _Segment, position: int, batch, max_timestamp: int, before: int
    ) -> None:
        self._find(
            seg.path, position, batch.base_offset, batch.last_offset, "timestamp_order",
            f"the LogAppendTime {max_timestamp} of this batch is earlier than the {before} of the batch before it "
            "(the broker's clock went back).",
        )  # fmt: skip

    # --- offsets ------------------------------------------------------------------------------------------

    def _discontinuity(
        self,
        seg: _Segment,
        log: _PartitionLog,
        position: int,
        first: int | None,
        last: int,
        expected: int | None,
        prev_last: int | None,
        prev_attributes: int,
    ) -> None:
        """A batch that does not start at the offset after the previous one: overlap, or a classified gap."""
        if expected is None:
            return  # the log's first batch (see _head), or the batch after a bad CRC, whose offsets are suspect
        if first is None:  # a v0/v1 compressed wrapper read shallowly: only its last offset is known
            if last < expected:
                self._overlap(seg, position, last, last, prev_last)
            return
        if first < expected:
            self._overlap(seg, position, first, last, prev_last)
            return
        self._gap(seg, log, position, expected, first - 1, prev_attributes)

    def _overlap(self, seg: _Segment, position: int, first: int, last: int, prev_last: int | None) -> None:
        self._find(
            seg.path, position, first, last, "offset_overlap",
            f"this batch (offsets {first}..{last}) starts at or below offset {prev_last}, "
            "the last offset of the batch before it.",
        )  # fmt: skip

    def _head(self, seg: _Segment, log: _PartitionLog, position: int, first: int | None) -> None:
        """The first batch of the partition against the log start (the checkpoint, else the segment name)."""
        gap = None if first is None else gaps.head_gap(first, log.facts())
        if gap is not None:
            self._report_gap(seg.path, position, gap)

    def _gap(
        self, seg: _Segment, log: _PartitionLog, position: int, first: int, last: int, prev_attributes: int
    ) -> None:
        gap = gaps.inner_gap(first, last, prev_attributes, log.facts())
        if gap.kind == gaps.UNEXPLAINED:  # a later batch may still show the cleaner's work
            log.pending_gaps.append((seg.path, position, first, last, prev_attributes))
        else:
            self._report_gap(seg.path, position, gap)

    def _report_gap(self, file: Path, position: int, gap: gaps.Gap) -> None:
        self._find(file, position, gap.first, gap.last, gap.kind, gap.message)

    # --- leader epochs ------------------------------------------------------------------------------------

    def _leader_epoch_change(
        self,
        seg: _Segment,
        log: _PartitionLog,
        position: int,
        first: int | None,
        new_epoch: int,
        epoch: int,
        prev_last: int | None,
    ) -> int:
        """Start a new epoch run; an epoch below the one before is a regression. -1 (no epoch) is skipped."""
        if new_epoch < 0 or first is None:
            return epoch
        regressed = new_epoch < epoch
        if regressed:
            self._find(
                seg.path, position, first, first, "leader_epoch_regression",
                f"partition_leader_epoch goes down from {epoch} to {new_epoch} at offset {first}.",
            )  # fmt: skip
        if log.epoch_runs:
            log.epoch_runs[-1][2] = prev_last
        log.epoch_runs.append([new_epoch, first, None, regressed])
        return new_epoch

    def _check_leader_epoch_checkpoint(self, file: Path, log: _PartitionLog) -> None:
        """Each epoch run of the log must map, through the checkpoint, to its own epoch."""
        self.summary.files += 1
        data = self._read_bytes(file)
        if data is None:
            return
        try:
            entries = checkpoints.read_leader_epoch_checkpoint(data.decode("utf-8"))
        except (FormatError, UnicodeDecodeError) as e:
            self._find(file, None, None, None, "checkpoint_corrupt", checkpoint_sentence(e, file))
            return
        lines = _entry_line_positions(data)

        def where(i: int) -> int | None:
            return lines[i] if i < len(lines) else None

        def mismatch(i: int | None, first: int | None, last: int | None, sentence: str) -> None:
            self._find(
                file,
                where(i) if i is not None else None,
                first,
                last,
                "leader_epoch_checkpoint_mismatch",
                sentence,
            )

        ordered = []
        for i, (epoch, start) in enumerate(entries):
            if ordered and (epoch <= ordered[-1][1] or start <= ordered[-1][2]):
                mismatch(
                    i,
                    start,
                    start,
                    f"entry {epoch} {start} does not come after entry {ordered[-1][1]} {ordered[-1][2]}.",
                )
                continue
            if start > log.log_end:
                mismatch(
                    i,
                    start,
                    start,
                    f"epoch {epoch} starts at offset {start}, beyond the log end offset {log.log_end}.",
                )
                continue
            ordered.append((i, epoch, start))
        if not ordered:
            return
        starts = [start for _, _, start in ordered]
        for epoch, first, last, regressed in log.epoch_runs:
            if regressed or last is None or last < first:
                continue
            k = _last_at_or_below(starts, first)
            if k < 0:
                if first >= log.log_start:
                    mismatch(
                        None, first, last,
                        f"offsets {first}..{last} were written in epoch {epoch}, but the first entry starts "
                        f"at offset {starts[0]}.",
                    )  # fmt: skip
                continue
            i, cp_epoch, cp_start = ordered[k]
            if cp_epoch != epoch:
                mismatch(
                    i, first, last,
                    f"offsets {first}..{last} were written in epoch {epoch}, but the entry {cp_epoch} {cp_start} "
                    f"assigns offset {first} to epoch {cp_epoch}.",
                )  # fmt: skip
            elif k + 1 < len(ordered) and ordered[k + 1][2] <= last:
                j, next_epoch, next_start = ordered[k + 1]
                mismatch(
                    j, first, last,
                    f"offsets {first}..{last} were written in epoch {epoch}, but the entry {next_epoch} {next_start} "
                    f"starts epoch {next_epoch} inside them.",
                )  # fmt: skip

    # --- indexes ------------------------------------------------------------------------------------------

    def _load_indexes(self, seg: _Segment, indexes: _IndexFiles, log_size: int, *, lone: bool) -> None:
        """Check .index, .timeindex and .txnindex for what needs no log; keep their entries for the walk."""
        indexes.parse()
        if indexes.has_index:
            if self._bytes_read(indexes.index_path, indexes.index_data) is not None:
                self.summary.files += 1
                self._load_offset_index(seg, indexes)
        elif log_size and not lone:  # a lone segment may well be a copy without its index
            self._find(
                indexes.index_path, None, None, None, "index_missing",
                "the offset index of a non-empty segment is missing; Kafka rebuilds it by recovering the segment.",
            )  # fmt: skip
        if indexes.has_time_index:
            if self._bytes_read(indexes.time_index_path, indexes.time_index_data) is not None:
                self.summary.files += 1
                self._load_time_index(seg, indexes)
        if indexes.has_txn_index:
            data = self._bytes_read(indexes.txn_index_path, indexes.txn_index_data)
            if data is not None:
                self.summary.files += 1
                try:
                    read_txn_index(data)
                except FormatError as e:
                    self._find(indexes.txn_index_path, None, None, None, "index_corrupt", sentence(e))
        seg.index_path, seg.time_index_path = indexes.index_path, indexes.time_index_path

    def _load_offset_index(self, seg: _Segment, indexes: _IndexFiles) -> None:
        """Kafka's sanity check, then the entries whose offsets and positions increase, kept for the walk."""
        path, offsets, positions = indexes.index_path, indexes.index_offsets, indexes.index_positions
        try:
            indexes.index.sanity_check()
        except FormatError as e:
            self._find(path, None, None, None, "index_corrupt", sentence(e))
        numbers: range | list[int] = range(len(offsets))
        if not indexes.index_in_order:
            numbers, kept, base = list(numbers), 0, seg.offset_base
            for n in range(len(offsets)):
                offset, position = offsets[n], positions[n]
                if kept and (offset <= offsets[kept - 1] or position <= positions[kept - 1]):
                    self._find(
                        path, n * OFFSET_ENTRY_SIZE, base + offset, base + offset, "index_corrupt",
                        f"entry {n} (offset {base + offset}, position {position}) does not come after entry "
                        f"{numbers[kept - 1]} (offset {base + offsets[kept - 1]}, position {positions[kept - 1]}).",
                    )  # fmt: skip
                    continue
                numbers[kept], offsets[kept], positions[kept] = n, offset, position
                kept += 1
            del numbers[kept:], offsets[kept:], positions[kept:]
        seg.index_numbers = numbers
        seg.index_offsets, seg.index_positions = [*offsets, _NEVER], [*positions, _NEVER]

    def _load_time_index(self, seg: _Segment, indexes: _IndexFiles) -> None:
        """Kafka's sanity check and its out-of-order check (each timestamp above the entry before)."""
        path, timestamps, offsets = indexes.time_index_path, indexes.time_timestamps, indexes.time_offsets
        try:
            indexes.time_index.sanity_check()
        except FormatError as e:
            self._find(path, None, None, None, "index_corrupt", sentence(e))
        numbers: range | list[int] = range(len(offsets))
        if not indexes.time_index_in_order:
            numbers, kept, base = list(numbers), 0, seg.offset_base
            for n in range(len(offsets)):
                timestamp, offset = timestamps[n], offsets[n]
                if n and timestamp <= timestamps[n - 1]:  # Kafka compares with the entry just before
                    self._find(
                        path, n * TIME_ENTRY_SIZE, base + offset, base + offset, "time_index_out_of_order",
                        f"entry {n} has timestamp {timestamp}, not above the previously indexed timestamp "
                        f"{timestamps[n - 1]}.",
                    )  # fmt: skip
                if kept and offset < offsets[kept - 1]:
                    self._find(
                        path, n * TIME_ENTRY_SIZE, base + offset, base + offset, "time_index_out_of_order",
                        f"entry {n} has offset {base + offset}, below offset {base + offsets[kept - 1]} of entry "
                        f"{numbers[kept - 1]}.",
                    )  # fmt: skip
                    continue
                numbers[kept], offsets[kept] = n, offset
                kept += 1
            timestamps = [timestamps[n] for n in numbers[:kept]]
            del numbers[kept:], offsets[kept:]
        seg.time_numbers = numbers
        seg.time_timestamps, seg.time_offsets = [*timestamps, _NEVER], [*offsets, _NEVER]

    def _offset_index_entries(self, seg: _Segment, position: int, last_offset: int) -> int:
        """Check the index entries up to the batch at file `position`; return where the next one points.

        An entry must point at the start of a batch whose last offset is the entry's offset. Brokers
        before 4.0 wrote one entry per follower append: (last offset of its last batch, position of its
        first batch), which lookups tolerate; such an entry is a warning once the batch ending at its
        offset is found.
        """
        if seg.index_span is not None:
            n, offset, at, at_last = seg.index_span
            if last_offset >= offset:
                seg.index_span = None
                if last_offset == offset:
                    self._find(
                        seg.index_path, n * OFFSET_ENTRY_SIZE, offset, offset, "index_entry_spans_batches",
                        f"entry {n} maps offset {offset} to position {at}, where a batch ending at {at_last} starts; "
                        "the batches from there end at offset "
                        f"{offset} (one entry per follower append, as brokers before 4.0 wrote them).",
                    )  # fmt: skip
                else:
                    self._index_mismatch(seg, n, offset, at, f"no batch from there ends at offset {offset}")
        k = seg.index_k
        positions = seg.index_positions
        while positions[k] <= position:
            n, offset, at = seg.index_numbers[k], seg.offset_base + seg.index_offsets[k], positions[k]
            if at < position:
                self._index_mismatch(seg, n, offset, at, "which is not the start of a batch")
            elif offset > last_offset and seg.index_span is None:
                seg.index_span = (n, offset, at, last_offset)
            elif offset != last_offset:
                self._index_mismatch(seg, n, offset, at, f"but the batch there ends at offset {last_offset}")
            k += 1
        seg.index_k = k
        return _ALWAYS if seg.index_span is not None else positions[k]

    def _index_mismatch(self, seg: _Segment, n: int, offset: int, position: int, why: str) -> None:
        self._find(
            seg.index_path, n * OFFSET_ENTRY_SIZE, offset, offset, "index_mismatch",
            f"entry {n} maps offset {offset} to log position {position}, {why}.",
        )  # fmt: skip

    def _time_index_entries(
        self, seg: _Segment, last_offset: int, max_timestamp: int, max_so_far: int
    ) -> int:
        """Check the time index entries whose offset the batch ending at `last_offset` reaches (Kafka's rules)."""
        k = seg.time_index_k
        offsets, base = seg.time_offsets, seg.offset_base
        while base + offsets[k] <= last_offset:
            n, timestamp, offset = seg.time_numbers[k], seg.time_timestamps[k], base + offsets[k]
            if offset != last_offset:
                why = f"which is not the last offset of a batch (the batch holding it ends at {last_offset})"
            elif timestamp != max_timestamp:
                why = f"but the batch ending there has max timestamp {max_timestamp}"
            elif timestamp != max_so_far:
                why = f"but the segment reached timestamp {max_so_far} before that batch"
            else:
                why = None
            if why:
                self._find(
                    seg.time_index_path, n * TIME_ENTRY_SIZE, offset, offset, "time_index_mismatch",
                    f"entry {n} gives timestamp {timestamp} for offset {offset}, {why}.",
                )  # fmt: skip
            k += 1
        seg.time_index_k = k
        return base + offsets[k]

    def _index_leftovers(self, seg: _Segment, valid_end: int) -> None:
        """Entries no batch reached: inside the last batch, or past the segment's last whole batch."""
        if seg.index_span is not None:
            n, offset, at, _ = seg.index_span
            self._index_mismatch(seg, n, offset, at, f"but no batch from there ends at offset {offset}")
        base = seg.offset_base
        for k in range(seg.index_k, len(seg.index_numbers)):
            n, offset, at = seg.index_numbers[k], base + seg.index_offsets[k], seg.index_positions[k]
            if at < valid_end:
                self._index_mismatch(seg, n, offset, at, "which is not the start of a batch")
            else:
                why = f"beyond the segment's last whole batch (valid bytes end at {valid_end})"
                self._index_mismatch(seg, n, offset, at, why)
        for k in range(seg.time_index_k, len(seg.time_numbers)):
            n, timestamp, offset = seg.time_numbers[k], seg.time_timestamps[k], base + seg.time_offsets[k]
            self._find(
                seg.time_index_path, n * TIME_ENTRY_SIZE, offset, offset, "time_index_mismatch",
                f"entry {n} gives timestamp {timestamp} for offset {offset}, beyond the segment's last batch.",
            )  # fmt: skip

    # --- other partition files ----------------------------------------------------------------------------

    def _check_snapshot(self, path: Path) -> None:
        data = self._read_bytes(path)
        if data is None:
            return
        self.summary.files += 1
        try:
            snapshot.read_snapshot(data)
        except FormatError as e:
            self._find(
                path,
                None,
                None,
                None,
                "snapshot_corrupt",
                f"{sentence(e)[:-1]}; Kafka deletes it and rebuilds producer state.",
            )

    def _read_text_file(self, path: Path, parse: Callable[[str], object]) -> None:
        data = self._read_bytes(path)
        if data is None:
            return
        self.summary.files += 1
        try:
            parse(data.decode("utf-8"))
        except (FormatError, UnicodeDecodeError) as e:
            self._find(path, None, None, None, "checkpoint_corrupt", checkpoint_sentence(e, path))

    def _read_bytes(self, path: Path) -> bytes | None:
        return self._bytes_read(path, _read(path))

    def _bytes_read(self, path: Path, data: bytes | OSError) -> bytes | None:
        """The bytes of a file read earlier, counted; None after reporting why it could not be read."""
        if isinstance(data, OSError):
            self._find(path, None, None, None, "unreadable_file", os_sentence(data))
            return None
        self.summary.bytes += len(data)
        return data


# --- state carried along a walk ---------------------------------------------------------------------------


class _PartitionLog:
    """What the walk of one partition carries from batch to batch and from segment to segment."""

    def __init__(self, name: str, log_start_checkpoint: int | None = None, compacted: bool = False) -> None:
        parsed = parse_partition_dir(name)
        self.topic = parsed[0].topic if parsed else None
        self.partition = parsed[0].partition if parsed else None
        self.log_start_checkpoint = log_start_checkpoint
        self.compacted = (
            compacted  # known from cleanup.policy (--compacted, cleaner checkpoint, internal topic)
        )
        self.compaction_seen = False  # some batch shows records removed by the cleaner
        self.first_segment_base: int | None = None
        self.first_offset: int | None = None
        self.next_offset: int | None = None
        self.prev_last: int | None = None
        self.prev_attributes = 0
        self.prev_max_timestamp = NO_TIMESTAMP
        self.epoch = -1
        self.epoch_runs: list[list] = []  # [epoch, first offset, last offset, regressed]
        self.pending_gaps: list[tuple[Path, int, int, int, int]] = []
        self._log_end = 0

    @property
    def log_start(self) -> int:
        """Kafka's rule on load: max(checkpoint, first segment's base offset)."""
        candidates = [o for o in (self.log_start_checkpoint, self.first_segment_base) if o is not None]
        return max(candidates, default=0)

    @property
    def log_end(self) -> int:
        return max(self._log_end, self.log_start)

    def facts(self) -> gaps.PartitionFacts:
        """What classifies a gap, as known so far (compaction_seen may still turn true)."""
        return gaps.PartitionFacts(
            self.log_start_checkpoint, self.first_segment_base, self.compacted, self.compaction_seen
        )

    @log_end.setter
    def log_end(self, value: int) -> None:
        self._log_end = value


class _Segment:
    """One segment being walked: its indexes and where the walk stands in them."""

    def __init__(self, path: Path, base: int | None) -> None:
        self.path = path
        self.base = base
        self.index_path = path
        self.time_index_path = path
        # index entries still in play, as parallel lists; offsets and positions end with a _NEVER sentinel
        self.offset_base = base if base is not None else 0  # index entries' offsets are relative to it
        self.index_numbers: range | list[int] = range(0)
        self.index_offsets: list[int] = [_NEVER]
        self.index_positions: list[int] = [_NEVER]
        self.index_k = 0  # the next entry to meet
        self.index_span: tuple[int, int, int, int] | None = None  # a pre-4.0 entry awaiting its last batch
        self.time_numbers: range | list[int] = range(0)
        self.time_timestamps: list[int] = [_NEVER]
        self.time_offsets: list[int] = [_NEVER]
        self.time_index_k = 0
        self.max_timestamp = NO_TIMESTAMP


class _SegmentFiles(NamedTuple):
    reader: SegmentReader
    indexes: _IndexFiles | None  # None for a segment whose name gives no base offset


class _IndexFiles:
    """A segment's .index, .timeindex and .txnindex, read and parsed a slice at a time; no findings yet.

    Parsing the ~66k entries of each index of a 1 GiB segment takes ~20 ms of Python, all of it holding
    the GIL. In one go at the start of the segment, that stalls the walker thread (it needs the GIL for
    each window, and reads only a window ahead); in slices of a few thousand entries, run after each
    window of the segment before, it fits in the time the walker spends checksumming without the GIL.
    _load_indexes finishes what is left and finds what is wrong.

    An index still preallocated (a running broker's active segment, or any after an unclean shutdown) is
    read as its entries in use (`as_trimmed`). As it stands on disk, Kafka's sanity check fails such a time
    index on its zero last slot and `kafka-dump-log.sh` takes a zero first slot for an entry that
    mismatches its batch, though nothing is wrong: the broker trims it on roll or clean shutdown and
    rebuilds it when it recovers the segment.
    """

    SLICE = 4096  # entries per slice: well under a millisecond

    def __init__(self, log_path: Path, base: int, names: list[str] | None) -> None:
        self.base = base
        self.index_path = log_path.with_name(filename(base, INDEX_SUFFIX))
        self.time_index_path = log_path.with_name(filename(base, TIME_INDEX_SUFFIX))
        self.txn_index_path = log_path.with_name(filename(base, TXN_INDEX_SUFFIX))
        present = set(names) if names is not None else None

        def exists(p: Path) -> bool:
            return p.name in present if present is not None else p.is_file()

        self.has_index, self.has_time_index = exists(self.index_path), exists(self.time_index_path)
        self.has_txn_index = exists(self.txn_index_path)
        self.index_data: bytes | OSError = b""
        self.index: OffsetIndex
        self.index_offsets: list[int] = []  # relative to the base offset, as in the file
        self.index_positions: list[int] = []
        self.index_in_order = True  # offsets and positions increase from entry to entry
        self.time_index_data: bytes | OSError = b""
        self.time_index: TimeIndex
        self.time_timestamps: list[int] = []
        self.time_offsets: list[int] = []  # relative to the base offset, as in the file
        self.time_index_in_order = True  # timestamps increase, offsets do not decrease
        self.txn_index_data: bytes | OSError = b""
        self._slices = self._parse()

    def parse_slice(self) -> None:
        next(self._slices, None)

    def parse(self) -> None:
        for _ in self._slices:
            pass

    def _parse(self) -> Iterator[None]:
        if self.has_index:
            self.index_data = data = _read_index(self.index_path, OFFSET_ENTRY_SIZE)
            if isinstance(data, bytes):
                self.index = OffsetIndex(data, self.base).as_trimmed()
                entries = _big_endian_ints(data[: len(self.index) * OFFSET_ENTRY_SIZE], "i")
                offsets, positions = self.index_offsets, self.index_positions
                for start in range(0, len(self.index), self.SLICE):
                    yield
                    end = min(start + self.SLICE, len(self.index))
                    offsets += entries[2 * start : 2 * end : 2].tolist()
                    positions += entries[2 * start + 1 : 2 * end : 2].tolist()
                    before = max(start - 1, 0)  # each slice is checked against the entry before it
                    self.index_in_order = (
                        self.index_in_order
                        and _increasing(offsets[before:end])
                        and _increasing(positions[before:end])
                    )
        if self.has_time_index:
            self.time_index_data = data = _read_index(self.time_index_path, TIME_ENTRY_SIZE)
            if isinstance(data, bytes):
                yield
                self.time_index = TimeIndex(data, self.base).as_trimmed()
                timestamps, offsets = self.time_timestamps, self.time_offsets
                for start in range(0, len(self.time_index), self.SLICE):
                    yield
                    end = min(start + self.SLICE, len(self.time_index))
                    entries = data[start * TIME_ENTRY_SIZE : end * TIME_ENTRY_SIZE]
                    timestamps += _big_endian_column(entries, TIME_ENTRY_SIZE, 0, "q")
                    offsets += _big_endian_column(entries, TIME_ENTRY_SIZE, 8, "i")
                    before = max(start - 1, 0)
                    self.time_index_in_order = (
                        self.time_index_in_order
                        and _increasing(timestamps[before:end])
                        and _non_decreasing(offsets[before:end])
                    )
        if self.has_txn_index:
            self.txn_index_data = _read(self.txn_index_path)


# --- helpers ----------------------------------------------------------------------------------------------

_OFFSET = itemgetter(0)
_TIMESTAMP = itemgetter(1)


def _read(path: Path) -> bytes | OSError:
    try:
        return path.read_bytes()
    except OSError as e:
        return e


def _read_index(path: Path, entry_size: int) -> bytes | OSError:
    """An index file's bytes, without the 10 MiB of a preallocated file's tail when that tail is a hole.

    A broker creates each index of an active segment at its full preallocated length with one truncate,
    so past the entries the file is sparse. When everything after the first hole is hole and the length
    is whole slots, only the bytes before the hole are read, and two zero slots stand for the rest, which
    is all zeros by definition and which `as_trimmed` drops anyway. A log dir of thousands of partitions
    then reads kilobytes per index rather than 20 MiB per partition.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data_end = _data_end(f.fileno(), size)
            f.seek(0)
            if data_end == size or size % entry_size:
                return f.read()
            head = f.read(data_end)
    except OSError as e:
        return e
    return head + bytes(-len(head) % entry_size + 2 * entry_size)


def _data_end(fd: int, size: int) -> int:
    """Where a file's data ends when a single hole runs from there to its end; otherwise its size."""
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except OSError:
        return size  # no hole support here: read it all
    if hole >= size:
        return size
    try:
        os.lseek(fd, hole, os.SEEK_DATA)
    except OSError as e:
        return hole if e.errno == errno.ENXIO else size  # ENXIO: no data after the hole
    return size  # more data after the hole


def _quiet_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """A checkpoint read only for context: missing or unreadable means no entries."""
    try:
        return checkpoints.read_offset_checkpoint(path.read_text("utf-8"))
    except (OSError, FormatError, UnicodeDecodeError):
        return {}


def _entry_line_positions(data: bytes) -> list[int]:
    """Byte positions of the entry lines of a checkpoint (after the version and count lines)."""
    starts = [0]
    at = data.find(b"\n")
    while at >= 0 and at + 1 < len(data):
        starts.append(at + 1)
        at = data.find(b"\n", at + 1)
    return starts[2:]


def _big_endian_ints(data: bytes, typecode: str) -> array:
    """The big-endian integers of `data`, all of one type, as an array in native order."""
    values = array(typecode, data)
    if sys.byteorder == "little":
        values.byteswap()
    return values


def _big_endian_column(data: bytes, entry_size: int, at: int, typecode: str) -> list[int]:
    """One big-endian integer field of every fixed-size entry, gathered with strided copies (no per-entry loop)."""
    count = len(data) // entry_size
    width = array(typecode).itemsize
    column = bytearray(count * width)
    for k in range(width):
        column[k::width] = data[at + k :: entry_size][:count]
    values = array(typecode, column)
    if sys.byteorder == "little":
        values.byteswap()
    return values.tolist()


def _increasing(values: list[int]) -> bool:
    return all(map(lt, values, islice(values, 1, None)))


def _non_decreasing(values: list[int]) -> bool:
    return all(map(le, values, islice(values, 1, None)))


def _last_at_or_below(sorted_values: list[int], value: int) -> int:
    """Index of the last element <= value, or -1."""
    lo, hi = 0, len(sorted_values)
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_values[mid] <= value:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1
