"""The per-segment index files: ``.index``, ``.timeindex`` and ``.txnindex``.

Views read the bytes of an index file (a ``bytes`` object or a memory map) without copying them;
encoders build the bytes of one entry. Behaviour follows Kafka's ``OffsetIndex``, ``TimeIndex`` and
``TransactionIndex`` (storage module), including how ``kafka-dump-log`` reads an index that was
preallocated and never trimmed because the broker crashed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import ClassVar, NamedTuple, Self

from formats.errors import CorruptIndexError

__all__ = [
    "NO_TIMESTAMP",
    "OFFSET_ENTRY_SIZE",
    "TIME_ENTRY_SIZE",
    "TXN_ENTRY_SIZE",
    "AbortedTxn",
    "OffsetIndex",
    "OffsetIndexEntry",
    "TimeIndex",
    "TimeIndexEntry",
    "encode_aborted_txn",
    "encode_offset_entry",
    "encode_time_entry",
    "format_aborted_txn",
    "preallocated_size",
    "read_txn_index",
]

OFFSET_ENTRY_SIZE = 8
"""``int32 relativeOffset, int32 position``."""

TIME_ENTRY_SIZE = 12
"""``int64 timestamp, int32 relativeOffset``."""

TXN_ENTRY_SIZE = 34
"""``int16 version, int64 producerId, int64 firstOffset, int64 lastOffset, int64 lastStableOffset``."""

NO_TIMESTAMP = -1
"""Kafka's ``RecordBatch.NO_TIMESTAMP``: what a time index lookup returns when no entry matches."""

ABORTED_TXN_VERSION = 0

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")


class OffsetIndexEntry(NamedTuple):
    """One ``.index`` entry with its absolute offset: the batch at ``position`` ends at ``offset``."""

    offset: int
    position: int


class TimeIndexEntry(NamedTuple):
    """One ``.timeindex`` entry: ``timestamp`` is the segment's max timestamp up to absolute ``offset``."""

    timestamp: int
    offset: int


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry: an aborted transaction of ``producer_id`` spanning first..last offset."""

    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class _IndexView:
    """What ``.index`` and ``.timeindex`` views share: fixed-size slots and the zero-slot stop rule.

    ``slots`` counts every whole entry in the bytes, as Kafka does when it reopens an index file;
    ``len()`` and iteration stop at the first slot after slot 0 whose relative offset is 0. A new
    index is preallocated with zeros and trimmed only on roll or clean shutdown, so after a crash
    the tail of the file is zero slots that would otherwise read as entries ``(base_offset, ...)``.
    """

    entry_size: ClassVar[int]
    _relative_offset_at: ClassVar[int]  # byte position of the int32 relative offset inside an entry

    def __init__(self, data: bytes | bytearray | memoryview, base_offset: int) -> None:
        self._view = memoryview(data).cast("B")
        self.base_offset = base_offset
        self.slots = len(self._view) // self.entry_size
        self._entries = _count_until_zero_slot(
            self._view, self.slots, self.entry_size, self._relative_offset_at
        )

    @property
    def length(self) -> int:
        """Length of the bytes the view was given (Kafka's ``length``)."""
        return len(self._view)

    def __len__(self) -> int:
        return self._entries

    def release(self) -> None:
        """Drop the view on the underlying buffer, so a memory map can be closed."""
        self._view.release()

    def as_trimmed(self) -> Self:
        """The index as a roll or a clean shutdown leaves it, for a file still preallocated: the active
        segment's of a running broker, or any after an unclean shutdown, is whole slots of which every one
        after the entries in use is zero. Then this is a view of those entries alone, and of none when the
        file is all zeros (a segment's first batch never gets an entry, so a first slot of zeros is
        preallocation too). Any other file is returned as it is, for Kafka's checks to judge."""
        size = self.entry_size
        used = self._entries * size
        if len(self._view) % size or len(self._view) == used or not _all_zero(self._view[used:]):
            return self
        if used == size and _all_zero(self._view[:size]):
            used = 0
        return type(self)(self._view[:used], self.base_offset)

    def _check_index(self, n: int) -> int:
        if n < 0:
            n += self._entries
        if not 0 <= n < self._entries:
            raise IndexError(f"index entry {n} out of range for {self._entries} entries")
        return n


class OffsetIndex(_IndexView):
    """A view over the bytes of a ``.index`` file of the segment starting at ``base_offset``."""

    entry_size = OFFSET_ENTRY_SIZE
    _relative_offset_at = 0

    def entries(self) -> Iterator[OffsetIndexEntry]:
        """Entries in file order, stopping at the first zero slot after slot 0."""
        base_offset = self.base_offset
        used = self._view[: self._entries * OFFSET_ENTRY_SIZE]
        for relative_offset, position in _OFFSET_ENTRY.iter_unpack(used):
            yield OffsetIndexEntry(base_offset + relative_offset, position)

    __iter__ = entries

    def __getitem__(self, n: int) -> OffsetIndexEntry:
        return self._slot(self._check_index(n))

    def lookup(self, target_offset: int) -> OffsetIndexEntry:
        """The last entry whose offset is <= ``target_offset``, else ``(base_offset, 0)``.

        The caller scans the ``.log`` forward from the returned position to find the target.
        """
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) // 2
            if self._slot(mid).offset <= target_offset:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return OffsetIndexEntry(self.base_offset, 0)
        return self._slot(lo - 1)

    def last_entry(self) -> OffsetIndexEntry:
        """The last entry, or ``(base_offset, 0)`` if there is none (Kafka's ``lastEntry``)."""
        if self._entries == 0:
            return OffsetIndexEntry(self.base_offset, 0)
        return self._slot(self._entries - 1)

    def sanity_check(self) -> None:
        """Kafka's ``OffsetIndex.sanityCheck``, on every slot of the file as Kafka reads it."""
        if self.slots != 0:
            last_offset = self._slot(self.slots - 1).offset
            if last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"Corrupt index found, index file has non-zero size but the last offset is "
                    f"{last_offset} which is less than the base offset {self.base_offset}"
                )
        if self.length % OFFSET_ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"Index file is corrupt, found {self.length} bytes which is neither positive "
                f"nor a multiple of {OFFSET_ENTRY_SIZE}"
            )

    def _slot(self, n: int) -> OffsetIndexEntry:
        relative_offset, position = _OFFSET_ENTRY.unpack_from(self._view, n * OFFSET_ENTRY_SIZE)
        return OffsetIndexEntry(self.base_offset + relative_offset, position)


class TimeIndex(_IndexView):
    """A view over the bytes of a ``.timeindex`` file of the segment starting at ``base_offset``."""

    entry_size = TIME_ENTRY_SIZE
    _relative_offset_at = 8

    def entries(self) -> Iterator[TimeIndexEntry]:
        """Entries in file order, stopping at the first zero slot after slot 0."""
        base_offset = self.base_offset
        used = self._view[: self._entries * TIME_ENTRY_SIZE]
        for timestamp, relative_offset in _TIME_ENTRY.iter_unpack(used):
            yield TimeIndexEntry(timestamp, base_offset + relative_offset)

    __iter__ = entries

    def __getitem__(self, n: int) -> TimeIndexEntry:
        return self._slot(self._check_index(n))

    def lookup(self, target_timestamp: int) -> TimeIndexEntry:
        """The last entry whose timestamp is <= ``target_timestamp``, else ``(-1, base_offset)``."""
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) // 2
            if self._slot(mid).timestamp <= target_timestamp:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return TimeIndexEntry(NO_TIMESTAMP, self.base_offset)
        return self._slot(lo - 1)

    def last_entry(self) -> TimeIndexEntry:
        """The last entry, or ``(-1, base_offset)`` if there is none (Kafka's ``lastEntry``)."""
        if self._entries == 0:
            return TimeIndexEntry(NO_TIMESTAMP, self.base_offset)
        return self._slot(self._entries - 1)

    def sanity_check(self) -> None:
        """Kafka's ``TimeIndex.sanityCheck``, on every slot of the file as Kafka reads it."""
        if self.slots != 0:
            last = self._slot(self.slots - 1)
            first_timestamp = self._slot(0).timestamp
            if last.timestamp < first_timestamp:
                raise CorruptIndexError(
                    f"Corrupt time index found, time index file has non-zero size but the last "
                    f"timestamp is {last.timestamp} which is less than the first timestamp {first_timestamp}"
                )
            if last.offset < self.base_offset:
                raise CorruptIndexError(
                    f"Corrupt time index found, time index file has non-zero size but the last "
                    f"offset is {last.offset} which is less than the first offset {self.base_offset}"
                )
        if self.length % TIME_ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"Time index file is corrupt, found {self.length} bytes which is neither "
                f"positive nor a multiple of {TIME_ENTRY_SIZE}"
            )

    def _slot(self, n: int) -> TimeIndexEntry:
        timestamp, relative_offset = _TIME_ENTRY.unpack_from(self._view, n * TIME_ENTRY_SIZE)
        return TimeIndexEntry(timestamp, self.base_offset + relative_offset)


def encode_offset_entry(base_offset: int, offset: int, position: int) -> bytes:
    """The 8 bytes of an ``.index`` entry; ``offset`` must lie within int32 of ``base_offset``."""
    relative_offset = _relative_offset(base_offset, offset)
    if not 0 <= position <= _INT32_MAX:
        raise ValueError(f"Position {position} does not fit in an offset index entry")
    return _OFFSET_ENTRY.pack(relative_offset, position)


def encode_time_entry(base_offset: int, timestamp: int, offset: int) -> bytes:
    """The 12 bytes of a ``.timeindex`` entry."""
    if not _INT64_MIN <= timestamp <= _INT64_MAX:
        raise ValueError(f"Timestamp {timestamp} does not fit in a time index entry")
    return _TIME_ENTRY.pack(timestamp, _relative_offset(base_offset, offset))


def preallocated_size(segment_index_bytes: int, entry_size: int) -> int:
    """Length Kafka gives a new index file: ``segment.index.bytes`` rounded down to whole entries."""
    if segment_index_bytes < entry_size:
        raise ValueError(f"Invalid max index size: {segment_index_bytes}")
    return entry_size * (segment_index_bytes // entry_size)


def read_txn_index(data: bytes | bytearray | memoryview) -> list[AbortedTxn]:
    """Every aborted transaction in a ``.txnindex`` file, in file order."""
    view = memoryview(data).cast("B")
    if len(view) % TXN_ENTRY_SIZE != 0:
        raise CorruptIndexError(
            f"Transaction index file is corrupt, found {len(view)} bytes which is not a multiple "
            f"of {TXN_ENTRY_SIZE}"
        )
    aborted = []
    for fields in _TXN_ENTRY.iter_unpack(view):
        txn = AbortedTxn(*fields)
        if txn.version != ABORTED_TXN_VERSION:
            raise CorruptIndexError(
                f"Unexpected aborted transaction version {txn.version} in transaction index, "
                f"current version is {ABORTED_TXN_VERSION}"
            )
        aborted.append(txn)
    return aborted


def encode_aborted_txn(txn: AbortedTxn) -> bytes:
    """The 34 bytes of a ``.txnindex`` entry (version 0 is the only one)."""
    if txn.version != ABORTED_TXN_VERSION:
        raise ValueError(f"Aborted transaction version {txn.version} is not {ABORTED_TXN_VERSION}")
    for value in txn[1:]:
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"Value {value} of {txn} does not fit in an int64")
    return _TXN_ENTRY.pack(*txn)


def format_aborted_txn(txn: AbortedTxn) -> str:
    """The line ``kafka-dump-log`` prints for one aborted transaction."""
    return (
        f"version: {txn.version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
        f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}"
    )


def _relative_offset(base_offset: int, offset: int) -> int:
    relative_offset = offset - base_offset
    if not 0 <= relative_offset <= _INT32_MAX:
        raise ValueError(f"Integer overflow for offset: {offset}")
    return relative_offset


_ZEROS = bytes(1 << 16)


def _all_zero(view: memoryview) -> bool:
    """Whether every byte is zero, a 64 KiB chunk at a time (bytes compare with memcmp; a memoryview
    compares element by element, ~25x slower on a 10 MiB preallocated index)."""
    step = len(_ZEROS)
    for start in range(0, len(view), step):
        chunk = bytes(view[start : start + step])
        if chunk != _ZEROS[: len(chunk)]:
            return False
    return True


def _count_until_zero_slot(view: memoryview, slots: int, entry_size: int, field_at: int) -> int:
    """Index of the first slot after slot 0 whose int32 relative offset is 0, or ``slots`` if none.

    A preallocated 10 MiB index has over a million slots, so instead of a Python loop this ORs the
    four byte columns of the relative-offset field (strided copies, one big int each) and looks for
    the first zero byte: a slot whose four bytes are all zero. Chunks keep the cost proportional
    to the entries in use when a crash left a mostly-zero file.
    """
    for chunk_start in range(0, slots, _SLOTS_PER_CHUNK):
        chunk_slots = min(_SLOTS_PER_CHUNK, slots - chunk_start)
        chunk = view[chunk_start * entry_size : (chunk_start + chunk_slots) * entry_size]
        nonzero = 0
        for k in range(4):
            nonzero |= int.from_bytes(chunk[field_at + k :: entry_size])
        first_zero = nonzero.to_bytes(chunk_slots).find(0, 1 if chunk_start == 0 else 0)
        if first_zero >= 0:
            return chunk_start + first_zero
    return slots


_SLOTS_PER_CHUNK = 1 << 16
