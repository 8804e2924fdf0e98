"""The source walk, the hot path of a replay: the batches of each source partition in offset order.

A batch that a producer could have sent goes out raw: a copy of its bytes (its producer fields are
stamped later by the sender). Every other batch is decoded, its records filtered and mapped to
destination partitions (the `partitioner`'s mapping, inline), and gathered into record-mode batches of
up to --batch-bytes. Offset bounds pick the segments read; --committed-only first reads the source's
transaction markers to drop the records of aborted transactions; corrupt data stops the walk or, with
--skip-corrupt, is skipped and counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from formats import _native
from formats.compression import Codec
from formats.errors import FormatError
from formats.records import (
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Batch,
    ControlType,
    Record,
    RecordBatch,
    control_type,
)
from formats.segment import StopReason, base_offset_of
from kcli.logdir import SegmentReader
from ops.replay.batch import OutBatch, SourceDone
from ops.replay.options import Mode, ReplayError, ReplayOptions
from ops.replay.partitioner import Mapping
from ops.replay.report import ReplayStats
from ops.replay.sources import SourcePartition, file_size

CODEC_BITS = 0x07
_CODECS = tuple(Codec)  # by id: a batch's codec bits index it
_LAST_CODEC = len(_CODECS) - 1


class SourceWalk:
    """The batches of every source partition in turn, each partition's followed by a SourceDone.

    What it reads and what it leaves out is counted in `stats` (source bytes, filtered, aborted, control
    and corrupt batches); `num_partitions` is the destination's.
    """

    def __init__(
        self,
        options: ReplayOptions,
        sources: list[SourcePartition],
        stats: ReplayStats,
        warn: Callable[[str], object],
        num_partitions: int,
        key_pattern: re.Pattern[bytes] | None,
    ) -> None:
        self.options = options
        self.sources = sources
        self.stats = stats
        self.warn = warn
        self.num_partitions = num_partitions
        self.key_pattern = key_pattern
        self.read_before = 0  # source bytes in segments finished

    def batches(self, completed: int = 0) -> Iterator[OutBatch | SourceDone]:
        """From source partition `completed` on: the ones before were acknowledged in full by an earlier run."""
        for index, source in enumerate(self.sources):
            if index < completed:
                self.read_before += source.size
                continue
            yield from _PartitionWalk(self, index, source).batches()
            yield SourceDone(index)


def raw_obstacle(batch: Batch) -> str | None:
    """Why a source batch cannot be re-sent as it is, or None when it can."""
    if not isinstance(batch, RecordBatch):
        return f"a magic v{batch.magic} message"
    if batch.records_count != batch.last_offset_delta + 1:
        return "a compacted batch (its records do not fill its offset range)"
    if batch.attributes & DELETE_HORIZON_BIT:
        return "a batch marked by the log cleaner"
    if batch.attributes & TIMESTAMP_TYPE_BIT:
        return "a LogAppendTime batch"
    return None


class _PartitionWalk:
    """The batches of one source partition, in order: raw batches and rebuilt ones per destination."""

    def __init__(self, walk: SourceWalk, index: int, source: SourcePartition) -> None:
        self.walk = walk
        self.options = walk.options
        self.index = index
        self.source = source
        self.open: dict[int, OutBatch] = {}  # record-mode batches being filled, per destination partition
        self.round_robin = source.partition
        self.same = self.options.mapping is Mapping.SAME
        self.name = source.name
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        self.previous: tuple[Path, int] | None = None  # the last segment read and the offset after it

    def batches(self) -> Iterator[OutBatch]:
        opts = self.options
        if opts.committed_only:
            self.aborted = self._aborted_transactions()
        segments = self._segments()
        walk = self.walk
        for path in self.source.segments:
            size = file_size(path)
            if path not in segments:
                walk.read_before += size
                walk.stats.source_bytes = walk.read_before
                continue
            self._check_continuity(path)
            yield from self._segment(path)
            walk.read_before += size
            walk.stats.source_bytes = walk.read_before
        for partition in sorted(self.open):
            yield self.open.pop(partition)

    def _segments(self) -> set[Path]:
        """Segments that may hold offsets in [from_offset, to_offset)."""
        segments = self.source.segments
        bases = [base_offset_of(s.name) for s in segments]
        keep = set()
        for i, path in enumerate(segments):
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            if (
                self.options.from_offset is not None
                and next_base is not None
                and next_base <= self.options.from_offset
            ):
                continue
            if (
                self.options.to_offset is not None
                and bases[i] is not None
                and bases[i] >= self.options.to_offset
            ):
                continue
            keep.add(path)
        return keep

    def _check_continuity(self, path: Path) -> None:
        """Warn when a segment starts past where the one before ended: a segment file is missing."""
        base = base_offset_of(path.name)
        if self.previous is not None and base is not None and base > self.previous[1]:
            self.walk.warn(
                f"kcli replay: warning: offsets {self.previous[1]}..{base - 1} of {self.source.name} are in no "
                f"segment between {self.previous[0].name} and {path.name} (a missing segment file, or compaction)."
            )

    def _segment(self, path: Path) -> Iterator[OutBatch]:
        walk = self.walk
        before = walk.read_before

        def progress(position: int) -> None:
            walk.stats.source_bytes = before + position

        # The common batch, decided in one test instead of _batch's many: a whole v2 data batch that
        # raw mode sends as it is (non-transactional unless --committed-only looks for aborts, offsets
        # filling its range, CreateTime, not cleaned, a known codec, CRC not known bad), while no
        # record-mode batch is open. Everything else goes through _batch.
        opts = self.options
        direct = (
            opts.mode is not Mode.RECORD
            and not opts.record_filters
            and opts.mapping is not Mapping.KEY
            and opts.from_offset is None
            and opts.to_offset is None
        )
        slow_bits = (
            CONTROL_BIT | DELETE_HORIZON_BIT | TIMESTAMP_TYPE_BIT | (TRANSACTIONAL_BIT if self.aborted else 0)
        )
        batch = None
        reader = SegmentReader(path, on_progress=progress)
        try:
            for chunk in reader.chunks():
                view = chunk.view
                for batch in chunk.batches:
                    if (
                        direct
                        and type(batch) is RecordBatch
                        and batch.crc_valid is not False
                        and not batch.attributes & slow_bits
                        and batch.attributes & CODEC_BITS <= _LAST_CODEC
                        and batch.records_count == batch.last_offset_delta + 1
                        and batch.records_count
                        and not self.open
                    ):
                        yield self._raw_batch(batch, view)
                    else:
                        self.previous = (path, batch.next_offset)
                        yield from self._batch(path, chunk.base + batch.position, view, batch)
        except OSError as e:
            raise ReplayError(f"cannot read {path}: {(e.strerror or str(e)).lower()}.") from None
        finally:
            reader.close()
        if batch is not None:
            self.previous = (path, batch.next_offset)
        end = reader.end
        if end is None:
            return
        if end.reason is not StopReason.END:
            self._corrupt(
                path, end.position, end.problem or "corrupt data", end.file_size - end.position, rest=True
            )
        elif end.trailing_bytes:
            walk.warn(
                f"kcli replay: {path}: {end.trailing_bytes} byte(s) after position {end.position} hold no "
                "whole batch (a torn tail); ignored."
            )

    def _batch(self, path: Path, position: int, view: memoryview, batch: Batch) -> Iterator[OutBatch]:
        opts = self.options
        stats = self.walk.stats
        if batch.crc_valid is False:
            self._corrupt(path, position, f"Record is corrupt (stored crc = {batch.crc})", batch.size)
            return
        if batch.is_control:
            stats.control_batches += 1
            return
        if self.aborted and batch.is_transactional and self._is_aborted(batch.producer_id, batch.base_offset):
            stats.aborted_records += batch.records_count
            return
        if (
            opts.to_offset is not None
            and batch.base_offset >= opts.to_offset
            and isinstance(batch, RecordBatch)
        ):
            stats.filtered_records += batch.records_count
            return
        if opts.from_offset is not None and batch.last_offset < opts.from_offset:
            stats.filtered_records += getattr(batch, "records_count", 1)
            return
        if isinstance(batch, RecordBatch) and batch.records_count == 0:
            return
        whole = (opts.from_offset is None or batch.base_offset >= opts.from_offset) and (
            opts.to_offset is None or batch.last_offset < opts.to_offset
        )
        obstacle = raw_obstacle(batch)
        raw = (
            opts.mode is not Mode.RECORD
            and obstacle is None
            and whole
            and not opts.record_filters
            and opts.mapping is not Mapping.KEY
        )
        if opts.mode is Mode.RAW and not raw:
            reason = obstacle or "a batch cut by --from-offset/--to-offset"
            raise ReplayError(
                f"{path}: the batch at position {position} is {reason}, which --mode raw cannot send as it "
                "is: use --mode auto."
            )
        if raw:
            assert isinstance(batch, RecordBatch)
            yield from self._raw(batch, view)
            return
        try:
            records = batch.records(view)
        except FormatError as e:
            self._corrupt(path, position, str(e).rstrip("."), batch.size)
            return
        yield from self._records(batch, records)

    def _raw(self, batch: RecordBatch, view: memoryview) -> Iterator[OutBatch]:
        if self.open:
            partition = self.source.partition if self.options.mapping is Mapping.SAME else self.round_robin
            pending = self.open.pop(partition % self.walk.num_partitions, None)
            if pending is not None:
                yield pending
        batch.compression  # noqa: B018 - raises CompressionError for a codec id no Kafka knows
        yield self._raw_batch(batch, view)

    def _raw_batch(self, batch: RecordBatch, view: memoryview) -> OutBatch:
        """A copy of a source batch, to be stamped with the producer state and sent as it is."""
        if self.same:
            partition = self.source.partition
        else:
            partition = self.round_robin % self.walk.num_partitions
            self.round_robin += 1
        out = OutBatch(partition, self.index, self.name)
        size = batch.batch_length + LOG_OVERHEAD
        out.raw = bytearray(view[batch.position : batch.position + size])
        out.codec = _CODECS[batch.attributes & CODEC_BITS]
        out.count = count = batch.records_count
        out.size = size
        out.runs = [[batch.base_offset, 0, count]]
        return out

    def _records(self, batch: Batch, records: list) -> Iterator[OutBatch]:
        """Filter, map and gather decoded records into batches; the per-record loop of record mode."""
        opts = self.options
        stats = self.walk.stats
        num_partitions = self.walk.num_partitions
        codec = batch.compression if opts.compression is None else opts.compression
        low, high = opts.from_offset, opts.to_offset
        t_low, t_high = opts.from_time, opts.to_time
        pattern = self.walk.key_pattern
        filtering = low is not None or high is not None or opts.record_filters
        mapping = opts.mapping
        limit = opts.batch_bytes
        same = self.source.partition if mapping is Mapping.SAME else None
        by_key = mapping is Mapping.KEY
        murmur2 = _native.murmur2
        out = specs = runs = run = None
        if not isinstance(batch, RecordBatch):  # a legacy record carries its own magic, CRC ... after these
            records = [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
        for record in records:
            offset, timestamp, key, value, headers = record
            if filtering and (
                (low is not None and offset < low)
                or (high is not None and offset >= high)
                or (t_low is not None and timestamp < t_low)
                or (t_high is not None and timestamp >= t_high)
                or (pattern is not None and (key is None or pattern.search(key) is None))
            ):
                stats.filtered_records += 1
                continue
            if same is not None:
                partition = same
            elif by_key and key is not None:
                partition = (murmur2(key) & 0x7FFFFFFF) % num_partitions  # partition_for_key, inline
            else:
                partition = self.round_robin % num_partitions
                self.round_robin += 1
            if out is None or out.partition != partition:
                out = self.open.get(partition)
                if out is None:
                    out = self.open[partition] = OutBatch(partition, self.index, self.source.name)
                    out.codec = codec
                specs, runs = out.specs, out.runs
                run = runs[-1] if runs else None
            specs.append(record)  # build_batch takes decoded records as they are
            if run is not None and run[0] + run[2] == offset:
                run[2] += 1
            else:
                run = [offset, out.count, 1]
                runs.append(run)
            out.count += 1
            size = 20 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
            for name, header_value in headers:
                size += len(name) + 2 + (len(header_value) if header_value is not None else 0)
            out.size += size
            if out.size >= limit:
                yield self.open.pop(partition)
                out = None

    def _corrupt(self, path: Path, position: int, problem: str, size: int, *, rest: bool = False) -> None:
        what = "the rest of the segment" if rest else "the batch"
        if not self.options.skip_corrupt:
            raise ReplayError(
                f"{path}: corrupt data at position {position}: {problem}; --skip-corrupt skips {what}."
            )
        stats = self.walk.stats
        stats.corrupt_batches += 1
        stats.corrupt_bytes += size
        self.walk.warn(
            f"kcli replay: {path}: skipped {size} corrupt byte(s) at position {position}: {problem}."
        )

    # --- transactions ------------------------------------------------------------------------------------

    def _aborted_transactions(self) -> dict[int, list[tuple[int, int]]]:
        """(first offset, marker offset) of every aborted transaction, per producer id; transactions still
        open at the end of the source are treated as aborted (they never committed)."""
        open_txns: dict[int, int] = {}
        aborted: dict[int, list[tuple[int, int]]] = {}
        for path in self.source.segments:
            reader = SegmentReader(path)
            try:
                for chunk in reader.chunks():
                    for batch in chunk.batches:
                        if not batch.is_transactional or batch.crc_valid is False:
                            continue
                        pid = batch.producer_id
                        if not batch.is_control:
                            open_txns.setdefault(pid, batch.base_offset)
                            continue
                        try:
                            kind = control_type(batch.records(chunk.view)[0].key)
                        except (FormatError, IndexError):
                            continue
                        first = open_txns.pop(pid, None)
                        if kind is ControlType.ABORT and first is not None:
                            aborted.setdefault(pid, []).append((first, batch.base_offset))
            except OSError as e:
                raise ReplayError(f"cannot read {path}: {(e.strerror or str(e)).lower()}.") from None
            finally:
                reader.close()
        for pid, first in open_txns.items():
            aborted.setdefault(pid, []).append((first, 1 << 62))
        return aborted

    def _is_aborted(self, producer_id: int, offset: int) -> bool:
        return any(first <= offset <= last for first, last in self.aborted.get(producer_id, ()))
