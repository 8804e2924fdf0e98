"""A segment archive as scan work, without Spark: find the segments, plan byte ranges, read one range.

An archive is any directory tree holding Kafka partition dirs (copied log dirs, backups, tiered-storage
downloads); topic and partition come from the dir names, the log dir's checkpoints say where each log
starts and whether the cleaner has run on it.

A range [start, end) of a .log file owns every batch whose first byte lies in it, so ranges are planned
from file sizes alone and each reader finds its own first batch: the last `.index` entry at or below
`start`, then a header walk to the first batch at or after it (from byte 0 when there is no index).
Walking is `ops.logdir.SegmentReader`'s: bounded windows, CRCs checked without the GIL.
"""

from __future__ import annotations

import bisect
import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from formats.checkpoints import read_offset_checkpoint
from formats.errors import FormatError
from formats.index import OffsetIndex
from formats.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    StopReason,
    base_offset_of,
    filename,
    parse_partition_dir,
    unit_size_at,
    walk,
)
from ops.logdir import WINDOW_BYTES, Chunk, SegmentReader

TARGET_TASK_BYTES = 1 << 30  # a Python task costs 50-120 ms fixed; the header scan ~0.1 s per GiB
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
CONSUMER_OFFSETS = "__consumer_offsets"


class PartitionDir(NamedTuple):
    """One partition dir of the archive and what its log dir's checkpoints say about it."""

    log_dir: str  # the dir holding it, relative to the archive root ("" for the root itself)
    topic: str
    partition: int
    path: str  # absolute
    log_start_checkpoint: int | None
    compacted: bool  # internal topic, named compacted, or in the log dir's cleaner-offset-checkpoint
    first_segment_base: int | None

    @property
    def key(self) -> str:
        """A stable name for the partition dir within the archive: `logdir/topic-partition`."""
        return (
            f"{self.log_dir}/{self.topic}-{self.partition}"
            if self.log_dir
            else f"{self.topic}-{self.partition}"
        )


class SegmentFile(NamedTuple):
    partition: PartitionDir
    path: str  # absolute, so executors whose cwd is elsewhere find it
    base_offset: int
    size: int


class ByteRange(NamedTuple):
    """The batches of `file` whose first byte lies in [start, end)."""

    file: SegmentFile
    start: int
    end: int

    @property
    def id(self) -> str:
        return f"{self.file.path}:{self.start}"


def discover(
    root: str | os.PathLike,
    *,
    compacted_topics: Iterable[str] = (),
    include_topics: Iterable[str] | None = None,
    exclude_topics: Iterable[str] = (),
) -> list[SegmentFile]:
    """Every .log segment under root, partition by partition, in offset order.

    Dirs Kafka has marked `-delete`, `-future` or `-stray` are not the partition, so they are left out.
    """
    root_path = Path(_local_path(root)).resolve()
    if not root_path.is_dir():
        raise FileNotFoundError(2, "No such directory", str(root))
    compacted = set(compacted_topics) | COMPACTED_INTERNAL_TOPICS
    include = set(include_topics) if include_topics is not None else None
    exclude = set(exclude_topics)
    files: list[SegmentFile] = []
    for dirpath, dirnames, names in os.walk(root_path):
        dirnames.sort()
        parsed = parse_partition_dir(os.path.basename(dirpath))
        segments = sorted((base_offset_of(n), n) for n in names if _is_segment_name(n))
        if parsed is None or parsed[1] is not None or not segments:
            continue
        tp = parsed[0]
        if (include is not None and tp.topic not in include) or tp.topic in exclude:
            continue
        parent = Path(dirpath).parent
        log_start = _checkpoint(parent / LOG_START_CHECKPOINT).get(tuple(tp))
        cleaned = tuple(tp) in _checkpoint(parent / CLEANER_CHECKPOINT)
        log_dir = str(parent.relative_to(root_path)) if parent != root_path else ""
        partition = PartitionDir(
            log_dir,
            tp.topic,
            tp.partition,
            dirpath,
            log_start,
            cleaned or tp.topic in compacted,
            segments[0][0],
        )
        for base, name in segments:
            path = os.path.join(dirpath, name)
            files.append(SegmentFile(partition, path, base, os.path.getsize(path)))
    return files


def plan(
    files: list[SegmentFile], *, target_bytes: int = TARGET_TASK_BYTES, min_tasks: int = 1
) -> list[list[ByteRange]]:
    """Tasks of about target_bytes: big segments split at byte positions, small ones packed together.

    With few bytes in all, the target shrinks so that there are at least min_tasks tasks.
    """
    total = sum(f.size for f in files)
    if min_tasks > 1 and total:
        target_bytes = max(1, min(target_bytes, -(-total // min_tasks)))
    tasks: list[list[ByteRange]] = []
    current: list[ByteRange] = []
    current_bytes = 0
    for f in files:
        pieces = max(1, -(-f.size // target_bytes))
        step = -(-f.size // pieces) if f.size else 0
        for i in range(pieces):
            start, end = i * step, min(f.size, (i + 1) * step) if i + 1 < pieces else f.size
            if current and current_bytes + (end - start) > target_bytes:
                tasks.append(current)
                current, current_bytes = [], 0
            current.append(ByteRange(f, start, end))
            current_bytes += end - start
    if current:
        tasks.append(current)
    return tasks


def align(path: str, base_offset: int, start: int) -> int | None:
    """The position of the first batch at or after `start`; None when the walk there meets bytes that
    cannot be framed (the range before this one owns that corruption and reports it)."""
    if start == 0:
        return 0
    position = _index_position_at_or_below(path, base_offset, start)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if start >= size:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if hasattr(m, "madvise"):
                m.madvise(mmap.MADV_SEQUENTIAL)
            view = memoryview(m)
            try:
                result = walk(view, position, start, check_crc=False)
                if result.reason is not StopReason.END and position:
                    result = walk(view, 0, start, check_crc=False)  # the index pointed amiss
                if result.reason is not StopReason.END:
                    return None
                stop = result.stop
                del result
                if stop < start:  # a batch straddling `start` belongs to the range before
                    size_there = unit_size_at(view, stop)
                    if size_there is None or size_there <= 0:
                        return None
                    stop += size_there
                return stop if stop < size else None
            finally:
                view.release()


class RangeEnd(NamedTuple):
    """Why the walk of a range stopped inside it: bytes that cannot be framed, or a torn tail."""

    position: int
    file_size: int
    reason: StopReason
    problem: str | None

    @property
    def trailing_bytes(self) -> int:
        return self.file_size - self.position


class RangeReader:
    """The batches a ByteRange owns, window by window; afterwards `end` says if the walk stopped inside it."""

    def __init__(self, byte_range: ByteRange, *, check_crc: bool = True, window: int = WINDOW_BYTES) -> None:
        self.range = byte_range
        self.check_crc = check_crc
        self.window = window
        self.end: RangeEnd | None = None
        self.first_position: int | None = None

    def chunks(self) -> Iterator[Chunk]:
        r = self.range
        start = align(r.file.path, r.file.base_offset, r.start)
        if start is None or start >= r.end:
            return
        self.first_position = start
        reader = SegmentReader(r.file.path, check_crc=self.check_crc, window=self.window)
        try:
            for chunk in reader.chunks(start):
                batches = chunk.batches
                limit = r.end - chunk.base
                if batches[-1].position >= limit:
                    cut = bisect.bisect_left(batches, limit, key=_position)
                    if cut:
                        yield Chunk(chunk.base, chunk.view, batches[:cut])
                    return
                yield chunk
        finally:
            reader.close()
        end = reader.end
        if (
            end is not None
            and end.position < r.end
            and (end.reason is not StopReason.END or end.trailing_bytes)
        ):
            self.end = RangeEnd(end.position, end.file_size, end.reason, end.problem)


def _position(batch) -> int:
    return batch[0]


def _index_position_at_or_below(path: str, base_offset: int, start: int) -> int:
    """The position of the last .index entry at or below `start`, or 0 (no index, or one that is amiss)."""
    index_path = os.path.join(os.path.dirname(path), filename(base_offset, INDEX_SUFFIX))
    try:
        with open(index_path, "rb") as f:
            data = f.read()
    except OSError:
        return 0
    try:
        index = OffsetIndex(data, base_offset)
        n = bisect.bisect_right(range(len(index)), start, key=lambda i: index[i].position)
        return index[n - 1].position if n else 0
    except (FormatError, IndexError):
        return 0


def _checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        return read_offset_checkpoint(path.read_text())
    except (OSError, UnicodeDecodeError, FormatError):
        return {}


def _is_segment_name(name: str) -> bool:
    return name.endswith(LOG_SUFFIX) and name.count(".") == 1 and base_offset_of(name) is not None


def _local_path(root: str | os.PathLike) -> str:
    text = os.fspath(root)
    return text[len("file://") :] if text.startswith("file://") else text
