"""A segment archive as scan work, without Spark: find the segments, plan byte ranges, read one range.

An archive is any directory tree holding Kafka partition dirs (copied log dirs, backups, tiered-storage
downloads); topic and partition come from the dir names, the log dir's checkpoints say where each log
starts and whether the cleaner has run on it. The root is a local path (or file:// URL), read through
mmap, or any other fsspec URL (s3://, gcs://, memory://, zip://...::file://...), read in large
sequential block reads; segment paths are then URLs that every executor opens itself.

A range [start, end) of a .log file owns every batch whose first byte lies in it, so ranges are planned
from file sizes alone and each reader finds its own first batch: the last `.index` entry at or below
`start`, then a header walk to the first batch at or after it (from byte 0 when there is no index).
Walking is `kcli.logdir.SegmentReader`'s: bounded windows, CRCs checked without the GIL.
"""

from __future__ import annotations

import bisect
import mmap
import os
import posixpath
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from formats.checkpoints import read_offset_checkpoint
from formats.errors import FormatError
from formats.index import OffsetIndex
from formats.records import HEADER_SIZE_UP_TO_MAGIC
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
from kcli.errors import KcliError
from kcli.logdir import WINDOW_BYTES, Chunk, SegmentEnd, SegmentReader

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
    path: str  # absolute, or an fsspec URL
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
    path: str  # absolute (or an fsspec URL), so executors whose cwd is elsewhere find it
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


def archive_root(root: str | os.PathLike) -> str:
    """The root as every executor can open it: an absolute local path, or the fsspec URL unchanged."""
    text = os.fspath(root)
    if is_url(text):
        return text
    return str(Path(_local_path(text)).resolve())


def check_archive(root: str) -> None:
    """Open the archive's root as discover() will, before a Spark session is started for it: a
    missing dir is a FileNotFoundError naming it, an fsspec URL of a protocol fsspec does not know (or
    whose package is not installed) a KcliError naming the URL."""
    try:
        _FsspecTree(root) if is_url(root) else _LocalTree(root)
    except (ValueError, ImportError) as exc:  # fsspec: "Protocol not known: ...", "Install s3fs ..."
        raise KcliError(f"{root}: {str(exc).rstrip('.')}.") from None


def is_url(path: str) -> bool:
    """An fsspec URL other than file://, which is read as a local path (through mmap, the fast way)."""
    return "::" in path or (bool(_SCHEME.match(path)) and not path.startswith("file://"))


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
    tree = _FsspecTree(os.fspath(root)) if is_url(os.fspath(root)) else _LocalTree(root)
    compacted = set(compacted_topics) | COMPACTED_INTERNAL_TOPICS
    include = set(include_topics) if include_topics is not None else None
    exclude = set(exclude_topics)
    files: list[SegmentFile] = []
    for dirpath, sizes in tree.walk():
        parsed = parse_partition_dir(tree.basename(dirpath))
        segments = sorted((base_offset_of(n), n) for n in sizes if _is_segment_name(n))
        if parsed is None or parsed[1] is not None or not segments:
            continue
        tp = parsed[0]
        if (include is not None and tp.topic not in include) or tp.topic in exclude:
            continue
        parent = tree.parent(dirpath)
        log_start = _checkpoint(tree.read_text(parent, LOG_START_CHECKPOINT)).get(tuple(tp))
        cleaned = tuple(tp) in _checkpoint(tree.read_text(parent, CLEANER_CHECKPOINT))
        partition = PartitionDir(
            tree.relative(parent),
            tp.topic,
            tp.partition,
            tree.location(dirpath),
            log_start,
            cleaned or tp.topic in compacted,
            segments[0][0],
        )
        for base, name in segments:
            files.append(SegmentFile(partition, tree.location(tree.join(dirpath, name)), base, sizes[name]))
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


def align(path: str, base_offset: int, start: int, file_size: int | None = None) -> int | None:
    """The position of the first batch at or after `start`; None when the walk there meets bytes that
    cannot be framed (the range before this one owns that corruption and reports it)."""
    if start == 0:
        return 0
    position = _index_position_at_or_below(path, base_offset, start)
    if is_url(path):
        return _align_fsspec(path, position, start, file_size)
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
        start = align(r.file.path, r.file.base_offset, r.start, r.file.size)
        if start is None or start >= r.end:
            return
        self.first_position = start
        if is_url(r.file.path):
            reader = FsspecSegmentReader(
                r.file.path, r.file.size, check_crc=self.check_crc, window=self.window, stop_at=r.end
            )
        else:
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


class FsspecSegmentReader:
    """SegmentReader's walk for a segment behind an fsspec URL: window-sized sequential reads, no mapping.

    One read per window (exact byte ranges: fsspec's own block cache is off, since the windows are the
    blocks); reading stops after the window that frames the first batch at or past `stop_at`, so a
    range's task reads its own bytes and at most one batch beyond them.
    """

    def __init__(
        self,
        url: str,
        file_size: int,
        *,
        check_crc: bool = True,
        window: int = WINDOW_BYTES,
        stop_at: int | None = None,
    ) -> None:
        self.url = url
        self.file_size = file_size
        self.check_crc = check_crc
        self.window = window
        self.stop_at = file_size if stop_at is None else min(stop_at, file_size)
        self.end: SegmentEnd | None = None

    def chunks(self, start: int = 0) -> Iterator[Chunk]:
        """Every window's batches in file order; `end` is set when the walk stopped before `stop_at`."""
        position, want = start, self.window
        with _open(self.url) as f:
            while position < self.file_size:
                f.seek(position)
                asked = min(want, self.file_size - position)
                data = f.read(asked)
                result = walk(data, check_crc=self.check_crc)
                if result.batches:
                    yield Chunk(position, memoryview(data), result.batches)
                stop = position + result.stop
                if result.reason is not StopReason.END:
                    self.end = SegmentEnd(stop, self.file_size, result.reason, result.problem(data))
                    return
                if position + len(data) >= self.file_size or len(data) < asked:
                    self.end = SegmentEnd(stop, position + len(data), StopReason.END, None)
                    return
                if stop >= self.stop_at:
                    return
                if stop == position:  # a unit bigger than the window: read it whole (its header first)
                    want = unit_size_at(data, 0) or max(2 * want, HEADER_SIZE_UP_TO_MAGIC)
                else:
                    want = self.window
                position = stop

    def close(self) -> None:
        """Nothing stays open between windows; here for SegmentReader's interface."""


def _align_fsspec(url: str, position: int, start: int, size: int | None) -> int | None:
    """align() over an fsspec URL: a header walk of the bytes from `position` to `start`, read in windows."""
    if size is None:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
        size = fs.size(path)
    with _open(url) as f:
        if start >= size:
            return None
        found = _walk_to(f, position, start)
        if found is None and position:
            found = _walk_to(f, 0, start)  # the index pointed amiss
    return found if found is not None and found < size else None


def _walk_to(f, position: int, start: int) -> int | None:
    """The position of the first unit at or after `start`, walking from `position`; None on bad bytes."""
    while position < start:
        f.seek(position)
        data = f.read(min(WINDOW_BYTES, start - position))
        result = walk(data, check_crc=False)
        if result.reason is not StopReason.END:
            return None
        if result.stop:
            position += result.stop
            continue
        f.seek(position)  # no whole unit before `start`: step over the one there by its header
        size = unit_size_at(f.read(HEADER_SIZE_UP_TO_MAGIC), 0)
        if size is None or size <= 0:
            return None
        position += size
    return position


def _position(batch) -> int:
    return batch[0]


def _index_position_at_or_below(path: str, base_offset: int, start: int) -> int:
    """The position of the last .index entry at or below `start`, or 0 (no index, or one that is amiss)."""
    try:
        if is_url(path):
            with _open(_sibling(path, filename(base_offset, INDEX_SUFFIX))) as f:
                data = f.read()
        else:
            with open(os.path.join(os.path.dirname(path), filename(base_offset, INDEX_SUFFIX)), "rb") as f:
                data = f.read()
    except OSError:
        return 0
    try:
        index = OffsetIndex(data, base_offset)
        n = bisect.bisect_right(range(len(index)), start, key=lambda i: index[i].position)
        return index[n - 1].position if n else 0
    except (FormatError, IndexError):
        return 0


def _checkpoint(text: str | None) -> dict[tuple[str, int], int]:
    try:
        return read_offset_checkpoint(text) if text is not None else {}
    except FormatError:
        return {}


def _is_segment_name(name: str) -> bool:
    return name.endswith(LOG_SUFFIX) and name.count(".") == 1 and base_offset_of(name) is not None


def _local_path(root: str | os.PathLike) -> str:
    text = os.fspath(root)
    return text[len("file://") :] if text.startswith("file://") else text


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _open(url: str):
    """An fsspec file (a context manager) for window-sized reads: its own read-ahead cache off (the windows are the blocks)."""
    import fsspec

    return fsspec.open(url, "rb", cache_type="none")


def _sibling(url: str, name: str) -> str:
    """The URL of `name` in the dir of the file at `url` (also inside a chained URL's first part)."""
    first, sep, rest = url.partition("::")
    return posixpath.join(posixpath.dirname(first), name) + sep + rest


class _LocalTree:
    """The archive's dirs on the local disk."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(_local_path(os.fspath(root))).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(2, "No such directory", str(root))

    def walk(self) -> Iterator[tuple[str, dict[str, int]]]:
        """(dir, {file name: size}) for every dir under the root, in name order."""
        for dirpath, dirnames, names in os.walk(self.root):
            dirnames.sort()
            yield (
                dirpath,
                {n: os.path.getsize(os.path.join(dirpath, n)) for n in names if _is_segment_name(n)},
            )

    def read_text(self, directory: str, name: str) -> str | None:
        try:
            return Path(directory, name).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def relative(self, directory: str) -> str:
        return "" if Path(directory) == self.root else str(Path(directory).relative_to(self.root))

    basename = staticmethod(os.path.basename)
    parent = staticmethod(os.path.dirname)
    join = staticmethod(os.path.join)

    def location(self, path: str) -> str:
        return path


class _FsspecTree:
    """The archive's dirs behind an fsspec URL; locations are URLs again (chained ones keep their chain)."""

    def __init__(self, url: str) -> None:
        import fsspec

        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.chain = url.partition("::")[1:]  # ("::", "file:///backup.zip") for zip://...::file://...
        if not self.fs.isdir(self.root):
            raise FileNotFoundError(2, "No such directory", url)

    def walk(self) -> Iterator[tuple[str, dict[str, int]]]:
        found = []
        for dirpath, _, infos in self.fs.walk(self.root, detail=True):
            found.append((dirpath, {n: i["size"] for n, i in infos.items() if _is_segment_name(n)}))
        return iter(sorted(found))

    def read_text(self, directory: str, name: str) -> str | None:
        try:
            return self.fs.cat_file(self.join(directory, name)).decode()
        except (OSError, UnicodeDecodeError):
            return None

    def relative(self, directory: str) -> str:
        if directory.rstrip("/") == self.root.rstrip("/"):
            return ""
        return posixpath.relpath(directory, self.root) if self.root else directory

    basename = staticmethod(posixpath.basename)
    parent = staticmethod(posixpath.dirname)

    @staticmethod
    def join(directory: str, name: str) -> str:
        return posixpath.join(directory, name) if directory else name

    def location(self, path: str) -> str:
        return self.fs.unstrip_protocol(path) + "".join(self.chain)
