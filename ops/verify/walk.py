"""The segment walk: the batches of each chunk of a segment, in order, against the batch before.

This is the hot path: `formats.segment.walk` frames batches and checks CRCs in C, and the loop over its
header tuples in `walk_chunk` does a handful of comparisons per batch; everything unusual (a bad CRC, a
gap, a new leader epoch, an index entry) leaves the loop for a function of its own. Offset continuity is
checked here, and its gaps classified by `ops.gaps`; a gap that looks unexplained is held back until
the whole partition was seen, since a later batch may still show the cleaner's work.
"""

from __future__ import annotations

import zlib
from operator import itemgetter
from pathlib import Path

from formats import _native
from formats.errors import FormatError
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
from formats.segment import StopReason, parse_partition_dir, unit_size_at
from kcli.logdir import Chunk, SegmentReader
from ops import gaps
from ops.verify.context import Context
from ops.verify.epochs import leader_epoch_change
from ops.verify.findings import plural, sentence
from ops.verify.indexes import (
    ALWAYS,
    IndexCursor,
    index_leftovers,
    offset_index_entries,
    time_index_entries,
)

_INT32_MAX = 2**31 - 1
_OFFSET = itemgetter(0)
_TIMESTAMP = itemgetter(1)


class PartitionLog:
    """What the walk of one partition carries from batch to batch and from segment to segment."""

    def __init__(self, name: str, log_start_checkpoint: int | None = None, compacted: bool = False) -> None:
        parsed = parse_partition_dir(name)
        self.topic = parsed[0].topic if parsed else None
        self.partition = parsed[0].partition if parsed else None
        self.log_start_checkpoint = log_start_checkpoint
        self.log_start_recorded = True
        """False for a dir pending deletion (or a -future/-stray one): no checkpoint holds its log start."""
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


class Segment:
    """One segment being walked: its indexes and where the walk stands in them."""

    def __init__(self, path: Path, base: int | None) -> None:
        self.path = path
        self.base = base
        self.indexes = IndexCursor(path, base)
        self.max_timestamp = NO_TIMESTAMP


def segment_start(ctx: Context, seg: Segment, log: PartitionLog, chunk: Chunk) -> None:
    """The segment's name against its first batch, the segment before it and the log start."""
    batch = chunk.batches[0]
    position = chunk.base + batch.position
    # a v0/v1 compressed wrapper carries its last inner offset; its first is known only with --deep
    first = None if batch.magic < 2 and batch.attributes & 0x07 else batch.base_offset
    if log.first_offset is None:
        log.first_offset = first if first is not None else batch.last_offset
        _head(ctx, seg, log, position, first)
    if seg.base is None:
        return
    if first is not None and first < seg.base:
        ctx.find(
            seg.path, position, first, batch.last_offset, "segment_name_mismatch",
            f"the first batch starts at offset {first}, below the base offset {seg.base} the segment is named after.",
        )  # fmt: skip
    elif log.prev_last is not None and seg.base <= log.prev_last < (
        first if first is not None else batch.last_offset
    ):
        ctx.find(
            seg.path, 0, seg.base, log.prev_last, "offset_overlap",
            f"the segment is named after offset {seg.base}, but the segment before it holds offsets up to {log.prev_last}.",
        )  # fmt: skip


def walk_chunk(ctx: Context, seg: Segment, log: PartitionLog, chunk: Chunk) -> None:
    """The hot loop: a few comparisons per batch; anything unusual goes to a function."""
    base = chunk.base
    view = chunk.view
    deep = ctx.options.deep
    next_offset = log.next_offset  # None: no expectation (start of the log, or after a bad CRC)
    prev_last = log.prev_last
    prev_attributes = log.prev_attributes
    prev_max_timestamp = log.prev_max_timestamp
    epoch = log.epoch
    max_timestamp_so_far = seg.max_timestamp
    # index entries hold offsets relative to the segment's base offset
    cursor = seg.indexes
    offset_base = cursor.offset_base
    index_offsets, index_positions, index_k = cursor.index_offsets, cursor.index_positions, cursor.index_k
    index_at = (ALWAYS if cursor.index_span else index_positions[index_k]) - base
    time_timestamps, time_offsets, time_k = cursor.time_timestamps, cursor.time_offsets, cursor.time_index_k
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
                _compacted_batch(ctx, seg, log, base + position, batch)
            if crc_valid is not True:
                _crc_mismatch(ctx, seg, view, base, batch)
            elif deep:
                _check_records(ctx, seg, log, view, base, batch)
        else:
            base_offset, last_offset, max_timestamp = _legacy_entry(ctx, seg, log, view, base, batch)
            partition_leader_epoch = -1
            attributes = 0
            crc_valid = batch[7]
            if crc_valid is not True:
                _crc_mismatch(ctx, seg, view, base, batch)
        if base_offset != next_offset:
            _discontinuity(
                ctx,
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
            epoch = leader_epoch_change(
                ctx,
                log.epoch_runs,
                seg.path,
                base + position,
                base_offset,
                partition_leader_epoch,
                epoch,
                prev_last,
            )
        next_offset = last_offset + 1 if crc_valid else None
        prev_last = last_offset
        prev_attributes = attributes
        if max_timestamp > max_timestamp_so_far:
            max_timestamp_so_far = max_timestamp
        elif attributes & TIMESTAMP_TYPE_BIT and max_timestamp < prev_max_timestamp:
            _log_append_time_backwards(ctx, seg, base + position, batch, max_timestamp, prev_max_timestamp)
        prev_max_timestamp = max_timestamp
        # index entries: the usual one (this batch's start and last offset) is checked inline
        if position >= index_at:
            if position == index_at and index_offsets[index_k] + offset_base == last_offset:
                index_k += 1
                index_at = index_positions[index_k] - base
            else:
                cursor.index_k = index_k
                index_at = offset_index_entries(ctx, cursor, base + position, last_offset) - base
                index_k = cursor.index_k
        if last_offset >= time_index_at:
            if (
                last_offset == time_index_at
                and time_timestamps[time_k] == max_timestamp == max_timestamp_so_far
                and offset_base + time_offsets[time_k + 1] > last_offset
            ):
                time_k += 1
                time_index_at = offset_base + time_offsets[time_k]
            else:
                cursor.time_index_k = time_k
                time_index_at = time_index_entries(
                    ctx, cursor, last_offset, max_timestamp, max_timestamp_so_far
                )
                time_k = cursor.time_index_k
    log.next_offset = next_offset
    log.prev_last = prev_last
    log.prev_attributes = prev_attributes
    log.prev_max_timestamp = prev_max_timestamp
    log.epoch = epoch
    seg.max_timestamp = max_timestamp_so_far
    cursor.index_k = index_k
    cursor.time_index_k = time_k
    ctx.summary.batches += len(chunk.batches)


def segment_end(ctx: Context, seg: Segment, log: PartitionLog, reader: SegmentReader, is_last: bool) -> None:
    end = reader.end
    if end is None:
        return
    after = "" if is_last else "; log recovery would truncate the log here and delete every later segment"
    if end.reason is StopReason.END and end.trailing_bytes:
        declared = _declared_size(seg.path, end.position, end.trailing_bytes)
        ctx.find(
            seg.path, end.position, None, None, "torn_tail",
            f"{plural(end.trailing_bytes, 'byte')} after the last whole batch do not form a complete batch"
            f"{declared}{after}.",
        )  # fmt: skip
    elif end.reason is not StopReason.END:
        ctx.find(
            seg.path, end.position, None, None, "corrupt_batch",
            f"{end.problem}; the {plural(end.trailing_bytes, 'byte')} from here to the end of the file "
            f"cannot be framed{after}.",
        )  # fmt: skip
    if log.prev_last is not None:
        log.log_end = max(log.log_end, log.prev_last + 1)
        if seg.base is not None and log.prev_last - seg.base > _INT32_MAX:
            ctx.find(
                seg.path, None, seg.base, log.prev_last, "corrupt_batch",
                f"offset {log.prev_last} is more than 2^31-1 above the segment's base offset {seg.base}, "
                "so no index entry can express it.",
            )  # fmt: skip
    index_leftovers(ctx, seg.indexes, end.position)


def finish_log(ctx: Context, log: PartitionLog) -> None:
    """Gaps held back until the whole partition was seen, and the last leader-epoch run."""
    for file, position, first, last, prev_attributes in log.pending_gaps:
        _report_gap(ctx, file, position, gaps.inner_gap(first, last, prev_attributes, log.facts()))
    log.pending_gaps.clear()
    if log.epoch_runs:
        log.epoch_runs[-1][2] = log.prev_last


def _declared_size(path: Path, position: int, available: int) -> str:
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
    ctx: Context, seg: Segment, view: memoryview, base: int, batch: RecordBatch | LegacyBatch
) -> None:
    position = batch.position
    end = position + batch.size
    if batch.magic == 2:
        computed = _native.crc32c(view[position + CRC_START : end])
        message = f"Record batch is corrupt (stored crc = {batch.crc}, computed crc = {computed})."
    else:
        computed = zlib.crc32(view[position + MAGIC_OFFSET : end])
        message = f"Record is corrupt (stored crc = {batch.crc}, computed crc = {computed})."
    ctx.find(seg.path, base + position, batch.base_offset, batch.last_offset, "crc_mismatch", message)


def _compacted_batch(
    ctx: Context, seg: Segment, log: PartitionLog, position: int, batch: RecordBatch
) -> None:
    """Fewer records than offsets (or a delete horizon): the cleaner's work, unless the header is impossible."""
    count, delta = batch.records_count, batch.last_offset_delta
    if count < 0 or delta < 0 or count > delta + 1:
        ctx.find(
            seg.path, position, batch.base_offset, batch.last_offset, "corrupt_batch",
            f"the batch declares {count} records for last_offset_delta {delta}, which no writer produces.",
        )  # fmt: skip
    else:
        log.compaction_seen = True


def _legacy_entry(
    ctx: Context, seg: Segment, log: PartitionLog, view: memoryview, base: int, batch: LegacyBatch
) -> tuple[int | None, int, int]:
    """(first offset or None when unknown, last offset, max timestamp) of a v0/v1 entry.

    A compressed wrapper carries its last inner offset; its first is known only by decompressing it,
    which --deep does.
    """
    compressed = batch.attributes & 0x07
    if not ctx.options.deep:
        return (None if compressed else batch.offset), batch.offset, batch.timestamp
    position = base + batch.position
    try:
        records = batch.records(view)
    except FormatError as e:
        ctx.find(seg.path, position, batch.offset, batch.offset, "corrupt_records", sentence(e))
        return (None if compressed else batch.offset), batch.offset, batch.timestamp
    ctx.summary.records += len(records)
    offsets = [r.offset for r in records]
    if any(a >= b for a, b in zip(offsets, offsets[1:], strict=False)) or offsets[-1] != batch.offset:
        ctx.find(
            seg.path, position, offsets[0], batch.offset, "corrupt_records",
            f"the inner offsets {offsets[0]}..{offsets[-1]} of the wrapper message at offset {batch.offset} "
            "do not increase up to the wrapper's offset.",
        )  # fmt: skip
    elif compressed and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
        log.compaction_seen = True
    if batch.magic == 1 and not batch.attributes & TIMESTAMP_TYPE_BIT:
        newest = max(r.timestamp for r in records)
        if newest > batch.timestamp:
            ctx.find(
                seg.path, position, offsets[0], batch.offset, "max_timestamp_mismatch",
                f"the wrapper message's timestamp {batch.timestamp} is below its newest inner timestamp {newest}.",
            )  # fmt: skip
    return offsets[0], batch.offset, batch.timestamp


def _check_records(
    ctx: Context, seg: Segment, log: PartitionLog, view: memoryview, base: int, batch: RecordBatch
) -> None:
    """--deep: the records' structure, offsets inside the batch's range, timestamps within max_timestamp."""
    position = base + batch.position
    try:
        records = batch.records(view)
    except FormatError as e:
        ctx.find(seg.path, position, batch.base_offset, batch.last_offset, "corrupt_records", sentence(e))
        return
    ctx.summary.records += len(records)
    if not records:
        return
    offsets = list(map(_OFFSET, records))
    if offsets != list(range(batch.base_offset, batch.base_offset + len(records))):
        if offsets[-1] > batch.last_offset or any(a >= b for a, b in zip(offsets, offsets[1:], strict=False)):
            ctx.find(
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
            ctx.find(
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
            ctx.find(seg.path, position, batch.base_offset, batch.last_offset, "corrupt_records", sentence(e))


def _log_append_time_backwards(
    ctx: Context, seg: Segment, position: int, batch, max_timestamp: int, before: int
) -> None:
    ctx.find(
        seg.path, position, batch.base_offset, batch.last_offset, "timestamp_order",
        f"the LogAppendTime {max_timestamp} of this batch is earlier than the {before} of the batch before it "
        "(the broker's clock went back).",
    )  # fmt: skip


# --- offsets ------------------------------------------------------------------------------------------


def _discontinuity(
    ctx: Context,
    seg: Segment,
    log: PartitionLog,
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
            _overlap(ctx, seg, position, last, last, prev_last)
        return
    if first < expected:
        _overlap(ctx, seg, position, first, last, prev_last)
        return
    _gap(ctx, seg, log, position, expected, first - 1, prev_attributes)


def _overlap(ctx: Context, seg: Segment, position: int, first: int, last: int, prev_last: int | None) -> None:
    ctx.find(
        seg.path, position, first, last, "offset_overlap",
        f"this batch (offsets {first}..{last}) starts at or below offset {prev_last}, "
        "the last offset of the batch before it.",
    )  # fmt: skip


def _head(ctx: Context, seg: Segment, log: PartitionLog, position: int, first: int | None) -> None:
    """The first batch of the partition against the log start (the checkpoint, else the segment name)."""
    gap = None if first is None else gaps.head_gap(first, log.facts())
    if gap is not None:
        _report_gap(ctx, seg.path, position, gap)


def _gap(
    ctx: Context, seg: Segment, log: PartitionLog, position: int, first: int, last: int, prev_attributes: int
) -> None:
    gap = gaps.inner_gap(first, last, prev_attributes, log.facts())
    if gap.kind == gaps.UNEXPLAINED:  # a later batch may still show the cleaner's work
        log.pending_gaps.append((seg.path, position, first, last, prev_attributes))
    else:
        _report_gap(ctx, seg.path, position, gap)


def _report_gap(ctx: Context, file: Path, position: int, gap: gaps.Gap) -> None:
    ctx.find(file, position, gap.first, gap.last, gap.kind, gap.message)
