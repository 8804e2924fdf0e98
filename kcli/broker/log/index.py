"""The writable `.index` and `.timeindex` of a segment: memory-mapped, preallocated, trimmed like Kafka's.

A new index file is created at `segment.index.bytes` rounded down to whole entries and mapped; entries
are written into the map (the page cache flushes them, or `flush` forces them). When the segment stops
being active, is closed or finishes recovery, the file is trimmed to its entries; an active segment's
index is re-extended. Entry encoding and the reading rules come from `formats.index`.
"""

from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar

from formats.index import (
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    OffsetIndex,
    TimeIndex,
    encode_offset_entry,
    encode_time_entry,
    preallocated_size,
)
from formats.records import NO_TIMESTAMP

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_OFFSET_ENTRY = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
_TIME_ENTRY = struct.Struct(">qi")


def _map(fd: int, length: int) -> mmap.mmap:
    """A shared map of an index file, read ahead no further than the page touched. An index is
    preallocated (10 MiB by default) and mostly a hole: with the kernel's readahead the first entry
    written into a new index made its fault fill the readahead window with zeroed page cache, 2.7 ms
    of CPU for a 10 MiB index instead of 5 us, two of them for every partition's first record and every
    roll; entries are read by bisection, which readahead does not help either."""
    mapped = mmap.mmap(fd, length)
    mapped.madvise(mmap.MADV_RANDOM)
    return mapped


class _MappedIndex:
    """What both index files share: the map, the entry count, resizing and trimming."""

    entry_size: ClassVar[int]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        """Open `path`, creating and preallocating it if it does not exist (Kafka's AbstractIndex)."""
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._mmap: mmap.mmap | None = None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            newly_created = True
        except FileExistsError:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            newly_created = False
        try:
            if newly_created:
                os.ftruncate(fd, preallocated_size(max_index_size, self.entry_size))
            self.length = os.fstat(fd).st_size
            if self.length:
                self._mmap = _map(fd, self.length)
        finally:
            os.close(fd)
        self.max_entries = self.length // self.entry_size
        self.entries = 0 if newly_created else self._count_entries()
        self._load_last()

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def resize(self, new_size: int) -> bool:
        """Set the file length to `new_size` rounded down to whole entries; False if it already is."""
        rounded = self.entry_size * (new_size // self.entry_size)
        if rounded == self.length:
            return False
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        os.truncate(self.path, rounded)
        self.length = rounded
        self.max_entries = rounded // self.entry_size
        if rounded:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            try:
                self._mmap = _map(fd, rounded)
            finally:
                os.close(fd)
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self.size_in_bytes)

    def extend_to_max(self) -> None:
        """Make room for entries again (an index that becomes the active segment's)."""
        self.resize(self.max_index_size)

    def reset(self) -> None:
        """Drop every entry and extend the file to its maximum size (before a segment is recovered)."""
        self.truncate_to_entries(0)
        self.resize(self.max_index_size)

    def truncate_to_entries(self, entries: int) -> None:
        if self._mmap is not None and entries < self.entries:
            self._mmap[entries * self.entry_size : self.entries * self.entry_size] = bytes(
                (self.entries - entries) * self.entry_size
            )
        self.entries = entries
        self._load_last()

    def flush(self) -> None:
        """fsync the file: that writes the map's dirty pages too, and unlike msync it releases the GIL."""
        if self.length:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Trim to the entries and release the map (Kafka's AbstractIndex.close)."""
        self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def _count_entries(self) -> int:
        raise NotImplementedError

    def _load_last(self) -> None:
        """Cache what appends compare against (the last entry), so an append reads nothing back."""
        raise NotImplementedError


class OffsetIndexFile(_MappedIndex):
    """`.index`: (offset relative to the segment, position of the batch that ends at that offset)."""

    entry_size = OFFSET_ENTRY_SIZE

    def append(self, offset: int, position: int) -> None:
        if self.entries and offset <= self._last_offset:
            raise ValueError(
                f"Attempt to append an offset ({offset}) to position {self.entries} no larger than the last "
                f"offset appended ({self._last_offset}) to {self.path}."
            )
        entries = self.entries
        if entries >= self.max_entries:
            raise ValueError(f"Attempt to append to a full index (size = {entries}).")
        relative = offset - self.base_offset
        if not (0 <= relative <= _INT32_MAX and 0 <= position <= _INT32_MAX):
            encode_offset_entry(self.base_offset, offset, position)  # raises the encoder's ValueError
        _OFFSET_ENTRY.pack_into(self._mmap, entries * OFFSET_ENTRY_SIZE, relative, position)  # type: ignore[arg-type]
        self.entries = entries + 1
        self._last_offset = offset

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def entry(self, n: int) -> tuple[int, int]:
        relative, position = _OFFSET_ENTRY.unpack_from(self._mmap, n * OFFSET_ENTRY_SIZE)  # type: ignore[arg-type]
        return self.base_offset + relative, position

    def last_offset(self) -> int:
        return self._last_offset

    def _load_last(self) -> None:
        self._last_offset = self.entry(self.entries - 1)[0] if self.entries else self.base_offset

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The last entry with offset <= target, else (base offset, 0): where to start scanning the log."""
        relative = target_offset - self.base_offset
        if self.entries == 0 or relative < 0:
            return self.base_offset, 0
        mm = self._mmap
        k = bisect_right(
            range(self.entries),
            relative,
            key=lambda n: _INT32.unpack_from(mm, n * 8)[0],  # type: ignore[arg-type]
        )
        return self.entry(k - 1) if k else (self.base_offset, 0)

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= `position` (0 if none): a batch boundary to scan from."""
        if self.entries == 0:
            return 0
        mm = self._mmap
        k = bisect_right(
            range(self.entries),
            position,
            key=lambda n: _INT32.unpack_from(mm, n * 8 + 4)[0],  # type: ignore[arg-type]
        )
        return self.entry(k - 1)[1] if k else 0

    def _count_entries(self) -> int:
        return len(OffsetIndex(self._mmap, self.base_offset)) if self._mmap is not None else 0


class TimeIndexFile(_MappedIndex):
    """`.timeindex`: (largest timestamp so far, relative offset of the batch that carries it)."""

    entry_size = TIME_ENTRY_SIZE

    def is_full(self) -> bool:
        """One slot is kept free for the entry a segment gets when it stops being active."""
        return self.entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append unless `timestamp` is not above the last entry's (Kafka's TimeIndex.maybeAppend)."""
        entries = self.entries
        if not skip_full_check and entries >= self.max_entries - 1:
            raise ValueError(f"Attempt to append to a full time index (size = {entries}).")
        if entries:
            if offset < self._last_offset:
                raise ValueError(
                    f"Attempt to append an offset ({offset}) to slot {entries} no larger than the last "
                    f"offset appended ({self._last_offset}) to {self.path}."
                )
            if timestamp <= self._last_timestamp:
                return
        if entries >= self.max_entries:
            self.resize(self.length + TIME_ENTRY_SIZE)
        relative = offset - self.base_offset
        if not (_INT64_MIN <= timestamp <= _INT64_MAX and 0 <= relative <= _INT32_MAX):
            encode_time_entry(self.base_offset, timestamp, offset)  # raises the encoder's ValueError
        _TIME_ENTRY.pack_into(self._mmap, entries * TIME_ENTRY_SIZE, timestamp, relative)  # type: ignore[arg-type]
        self.entries = entries + 1
        self._last_timestamp, self._last_offset = timestamp, offset

    def _load_last(self) -> None:
        self._last_timestamp, self._last_offset = self.last_entry()

    def entry(self, n: int) -> tuple[int, int]:
        timestamp, relative = _TIME_ENTRY.unpack_from(self._mmap, n * TIME_ENTRY_SIZE)  # type: ignore[arg-type]
        return timestamp, self.base_offset + relative

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        return self.entry(self.entries - 1) if self.entries else (NO_TIMESTAMP, self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """The last entry with timestamp <= target, else (-1, base offset)."""
        if self.entries == 0:
            return NO_TIMESTAMP, self.base_offset
        mm = self._mmap
        k = bisect_right(
            range(self.entries),
            target_timestamp,
            key=lambda n: _TIME_ENTRY.unpack_from(mm, n * 12)[0],  # type: ignore[arg-type]
        )
        return self.entry(k - 1) if k else (NO_TIMESTAMP, self.base_offset)

    def _count_entries(self) -> int:
        return len(TimeIndex(self._mmap, self.base_offset)) if self._mmap is not None else 0
