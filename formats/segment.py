"""Segment files: Kafka's file naming, and walking the units of a .log region.

`walk` is the one loop every reader shares (dump, verify, recovery, replay, Spark): it frames units by
the rules of Kafka's file iterator (reference §1.0) and says exactly why it stopped, so callers can tell
a torn tail from the edge of their window and from corruption.
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import NamedTuple

from formats import _native
from formats.records import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    Batch,
    Buffer,
    RecordBatch,
    describe_bad_unit,
    legacy_overhead,
    read_legacy_entry,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_SEGMENT_NAME = re.compile(r"^(\d{20})\.")
_PARTITION_DIR = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)(?:\.(?P<uuid>[0-9a-f]{32})-(?P<state>delete|future|stray))?$"
)


def filename(base_offset: int, suffix: str) -> str:
    """`00000000000000000042.log`: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}{suffix}"


def base_offset_of(name: str) -> int | None:
    """The offset a segment-family file is named after, or None if the name is not one of Kafka's."""
    match = _SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_partition_dir(name: str) -> tuple[TopicPartition, str | None] | None:
    """`orders-3` -> (orders, 3); also the `.<uuid>-delete|-future|-stray` forms, whose state is returned."""
    match = _PARTITION_DIR.match(name)
    if not match:
        return None
    return TopicPartition(match.group("topic"), int(match.group("partition"))), match.group("state")


class StopReason(IntEnum):
    """Why a walk ended; the numbers are the native scanner's."""

    END = 0  # fewer than a whole unit left before `end`: the edge of the data (or a torn tail)
    LEGACY = 1  # internal to walk: a v0/v1 unit, decoded in Python
    BAD_SIZE = 2  # a unit declares a size below the minimum for its magic
    BAD_MAGIC = 3  # a unit with magic outside 0..2


class WalkResult(NamedTuple):
    batches: list[Batch]
    stop: int
    reason: StopReason

    def problem(self, buf: Buffer) -> str | None:
        """One sentence for a corrupt stop; None when the walk just reached the end of its data."""
        if self.reason is StopReason.END:
            return None
        view = memoryview(buf)
        size = int.from_bytes(view[self.stop + 8 : self.stop + 12], "big", signed=True)
        magic = int.from_bytes(
            view[self.stop + MAGIC_OFFSET : self.stop + MAGIC_OFFSET + 1], "big", signed=True
        )
        return describe_bad_unit(size, len(view) - self.stop, magic)


def walk(buf: Buffer, position: int = 0, end: int | None = None, *, check_crc: bool = True) -> WalkResult:
    """Frame every complete unit in buf[position:end] (v2 batches and legacy entries, in file order)."""
    view = memoryview(buf)
    end = len(view) if end is None else end
    batches: list[Batch] = []
    while True:
        found, stop, reason = _native.scan(view, position, end, check_crc, RecordBatch)
        batches.extend(found)
        if reason != StopReason.LEGACY:
            return WalkResult(batches, stop, StopReason(reason))
        size = int.from_bytes(view[stop + 8 : stop + 12], "big", signed=True)
        if size < legacy_overhead(view[stop + MAGIC_OFFSET]):
            return WalkResult(batches, stop, StopReason.BAD_SIZE)
        entry = read_legacy_entry(view, stop, check_crc=check_crc)
        batches.append(entry)
        position = stop + entry.size


def unit_size_at(buf: Buffer, position: int) -> int | None:
    """Total bytes of the unit starting at `position`, or None if its prefix is not all there."""
    view = memoryview(buf)
    if len(view) - position < HEADER_SIZE_UP_TO_MAGIC:
        return None
    return int.from_bytes(view[position + 8 : position + 12], "big", signed=True) + LOG_OVERHEAD


class IndexEntries(NamedTuple):
    """Index entries one append adds: (last offset, position) and (timestamp, offset), either may be None."""

    offset_entry: tuple[int, int] | None
    time_entry: tuple[int, int] | None


_new_tuple = tuple.__new__  # builds a NamedTuple without the Python-level __new__ its constructor calls
_NO_ENTRIES = IndexEntries(None, None)


class SegmentIndexer:
    """Kafka's sparse-index rule for one segment (LogSegment.append and LogSegment.recover).

    Before an append's bytes count, if more than `index_interval_bytes` were written since the last entry,
    the append gets an offset-index entry (its last offset, the position where it starts) and the time
    index gets (max timestamp so far, its offset) if that timestamp is newer than the last time entry.
    The counter starts at 0 for every opened segment, so a segment's first batch never gets an entry.
    """

    def __init__(self, index_interval_bytes: int = 4096) -> None:
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_last_entry = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.last_time_entry_timestamp = -1

    def append(self, position: int, last_offset: int, max_timestamp: int, size: int) -> IndexEntries:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.bytes_since_last_entry > self.index_interval_bytes:
            self.bytes_since_last_entry = size
            return _new_tuple(IndexEntries, ((last_offset, position), self._maybe_time_entry()))
        self.bytes_since_last_entry += size
        return _NO_ENTRIES

    def final_time_entry(self) -> tuple[int, int] | None:
        """The entry Kafka adds when a segment becomes inactive, is closed or finishes recovery."""
        return self._maybe_time_entry()

    def _maybe_time_entry(self) -> tuple[int, int] | None:
        if self.max_timestamp > self.last_time_entry_timestamp:
            self.last_time_entry_timestamp = self.max_timestamp
            return (self.max_timestamp, self.offset_of_max_timestamp)
        return None
