"""A segment's .index, .timeindex and .txnindex: read while the segment before is walked, checked on
their own at the start of the segment's walk, then entry by entry as the walk reaches each one.

An offset index entry must point at the start of a batch whose last offset is the entry's offset; a time
index entry must give the max timestamp of the batch ending at its offset, the segment's highest so far.
The walk's hot loop checks the usual entry inline, against the cursor's lists; anything else comes here.
"""

from __future__ import annotations

import errno
import os
import sys
from array import array
from collections.abc import Iterator
from itertools import islice
from operator import le, lt
from pathlib import Path

from formats.errors import FormatError
from formats.index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, OffsetIndex, TimeIndex, read_txn_index
from formats.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, filename
from ops.verify.context import Context, read
from ops.verify.findings import sentence

NEVER = sys.maxsize  # an index position or offset no batch reaches
ALWAYS = -(2**62)  # an index position every batch reaches


class IndexFiles:
    """A segment's .index, .timeindex and .txnindex, read and parsed a slice at a time; no findings yet.

    Parsing the ~66k entries of each index of a 1 GiB segment takes ~20 ms of Python, all of it holding
    the GIL. In one go at the start of the segment, that stalls the walker thread (it needs the GIL for
    each window, and reads only a window ahead); in slices of a few thousand entries, run after each
    window of the segment before, it fits in the time the walker spends checksumming without the GIL.
    load_indexes finishes what is left and finds what is wrong.

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
            self.txn_index_data = read(self.txn_index_path)


class IndexCursor:
    """A segment's index entries still in play, and where the walk stands in them."""

    def __init__(self, log_path: Path, base: int | None) -> None:
        self.index_path = log_path
        self.time_index_path = log_path
        # index entries still in play, as parallel lists; offsets and positions end with a NEVER sentinel
        self.offset_base = base if base is not None else 0  # index entries' offsets are relative to it
        self.index_numbers: range | list[int] = range(0)
        self.index_offsets: list[int] = [NEVER]
        self.index_positions: list[int] = [NEVER]
        self.index_k = 0  # the next entry to meet
        self.index_span: tuple[int, int, int, int] | None = None  # a pre-4.0 entry awaiting its last batch
        self.time_numbers: range | list[int] = range(0)
        self.time_timestamps: list[int] = [NEVER]
        self.time_offsets: list[int] = [NEVER]
        self.time_index_k = 0


def load_indexes(
    ctx: Context, cursor: IndexCursor, indexes: IndexFiles, log_size: int, *, lone: bool
) -> None:
    """Check .index, .timeindex and .txnindex for what needs no log; keep their entries for the walk."""
    indexes.parse()
    if indexes.has_index:
        if ctx.bytes_read(indexes.index_path, indexes.index_data) is not None:
            ctx.summary.files += 1
            _load_offset_index(ctx, cursor, indexes)
    elif log_size and not lone:  # a lone segment may well be a copy without its index
        ctx.find(
            indexes.index_path, None, None, None, "index_missing",
            "the offset index of a non-empty segment is missing; Kafka rebuilds it by recovering the segment.",
        )  # fmt: skip
    if indexes.has_time_index:
        if ctx.bytes_read(indexes.time_index_path, indexes.time_index_data) is not None:
            ctx.summary.files += 1
            _load_time_index(ctx, cursor, indexes)
    if indexes.has_txn_index:
        data = ctx.bytes_read(indexes.txn_index_path, indexes.txn_index_data)
        if data is not None:
            ctx.summary.files += 1
            try:
                read_txn_index(data)
            except FormatError as e:
                ctx.find(indexes.txn_index_path, None, None, None, "index_corrupt", sentence(e))
    cursor.index_path, cursor.time_index_path = indexes.index_path, indexes.time_index_path


def _load_offset_index(ctx: Context, cursor: IndexCursor, indexes: IndexFiles) -> None:
    """Kafka's sanity check, then the entries whose offsets and positions increase, kept for the walk."""
    path, offsets, positions = indexes.index_path, indexes.index_offsets, indexes.index_positions
    try:
        indexes.index.sanity_check()
    except FormatError as e:
        ctx.find(path, None, None, None, "index_corrupt", sentence(e))
    numbers: range | list[int] = range(len(offsets))
    if not indexes.index_in_order:
        numbers, kept, base = list(numbers), 0, cursor.offset_base
        for n in range(len(offsets)):
            offset, position = offsets[n], positions[n]
            if kept and (offset <= offsets[kept - 1] or position <= positions[kept - 1]):
                ctx.find(
                    path, n * OFFSET_ENTRY_SIZE, base + offset, base + offset, "index_corrupt",
                    f"entry {n} (offset {base + offset}, position {position}) does not come after entry "
                    f"{numbers[kept - 1]} (offset {base + offsets[kept - 1]}, position {positions[kept - 1]}).",
                )  # fmt: skip
                continue
            numbers[kept], offsets[kept], positions[kept] = n, offset, position
            kept += 1
        del numbers[kept:], offsets[kept:], positions[kept:]
    cursor.index_numbers = numbers
    cursor.index_offsets, cursor.index_positions = [*offsets, NEVER], [*positions, NEVER]


def _load_time_index(ctx: Context, cursor: IndexCursor, indexes: IndexFiles) -> None:
    """Kafka's sanity check and its out-of-order check (each timestamp above the entry before)."""
    path, timestamps, offsets = indexes.time_index_path, indexes.time_timestamps, indexes.time_offsets
    try:
        indexes.time_index.sanity_check()
    except FormatError as e:
        ctx.find(path, None, None, None, "index_corrupt", sentence(e))
    numbers: range | list[int] = range(len(offsets))
    if not indexes.time_index_in_order:
        numbers, kept, base = list(numbers), 0, cursor.offset_base
        for n in range(len(offsets)):
            timestamp, offset = timestamps[n], offsets[n]
            if n and timestamp <= timestamps[n - 1]:  # Kafka compares with the entry just before
                ctx.find(
                    path, n * TIME_ENTRY_SIZE, base + offset, base + offset, "time_index_out_of_order",
                    f"entry {n} has timestamp {timestamp}, not above the previously indexed timestamp "
                    f"{timestamps[n - 1]}.",
                )  # fmt: skip
            if kept and offset < offsets[kept - 1]:
                ctx.find(
                    path, n * TIME_ENTRY_SIZE, base + offset, base + offset, "time_index_out_of_order",
                    f"entry {n} has offset {base + offset}, below offset {base + offsets[kept - 1]} of entry "
                    f"{numbers[kept - 1]}.",
                )  # fmt: skip
                continue
            numbers[kept], offsets[kept] = n, offset
            kept += 1
        timestamps = [timestamps[n] for n in numbers[:kept]]
        del numbers[kept:], offsets[kept:]
    cursor.time_numbers = numbers
    cursor.time_timestamps, cursor.time_offsets = [*timestamps, NEVER], [*offsets, NEVER]


def offset_index_entries(ctx: Context, cursor: IndexCursor, position: int, last_offset: int) -> int:
    """Check the index entries up to the batch at file `position`; return where the next one points.

    An entry must point at the start of a batch whose last offset is the entry's offset. Brokers
    before 4.0 wrote one entry per follower append: (last offset of its last batch, position of its
    first batch), which lookups tolerate; such an entry is a warning once the batch ending at its
    offset is found.
    """
    if cursor.index_span is not None:
        n, offset, at, at_last = cursor.index_span
        if last_offset >= offset:
            cursor.index_span = None
            if last_offset == offset:
                ctx.find(
                    cursor.index_path, n * OFFSET_ENTRY_SIZE, offset, offset, "index_entry_spans_batches",
                    f"entry {n} maps offset {offset} to position {at}, where a batch ending at {at_last} starts; "
                    "the batches from there end at offset "
                    f"{offset} (one entry per follower append, as brokers before 4.0 wrote them).",
                )  # fmt: skip
            else:
                _index_mismatch(ctx, cursor, n, offset, at, f"no batch from there ends at offset {offset}")
    k = cursor.index_k
    positions = cursor.index_positions
    while positions[k] <= position:
        n, offset, at = cursor.index_numbers[k], cursor.offset_base + cursor.index_offsets[k], positions[k]
        if at < position:
            _index_mismatch(ctx, cursor, n, offset, at, "which is not the start of a batch")
        elif offset > last_offset and cursor.index_span is None:
            cursor.index_span = (n, offset, at, last_offset)
        elif offset != last_offset:
            _index_mismatch(ctx, cursor, n, offset, at, f"but the batch there ends at offset {last_offset}")
        k += 1
    cursor.index_k = k
    return ALWAYS if cursor.index_span is not None else positions[k]


def _index_mismatch(ctx: Context, cursor: IndexCursor, n: int, offset: int, position: int, why: str) -> None:
    ctx.find(
        cursor.index_path, n * OFFSET_ENTRY_SIZE, offset, offset, "index_mismatch",
        f"entry {n} maps offset {offset} to log position {position}, {why}.",
    )  # fmt: skip


def time_index_entries(
    ctx: Context, cursor: IndexCursor, last_offset: int, max_timestamp: int, max_so_far: int
) -> int:
    """Check the time index entries whose offset the batch ending at `last_offset` reaches (Kafka's rules)."""
    k = cursor.time_index_k
    offsets, base = cursor.time_offsets, cursor.offset_base
    while base + offsets[k] <= last_offset:
        n, timestamp, offset = cursor.time_numbers[k], cursor.time_timestamps[k], base + offsets[k]
        if offset != last_offset:
            why = f"which is not the last offset of a batch (the batch holding it ends at {last_offset})"
        elif timestamp != max_timestamp:
            why = f"but the batch ending there has max timestamp {max_timestamp}"
        elif timestamp != max_so_far:
            why = f"but the segment reached timestamp {max_so_far} before that batch"
        else:
            why = None
        if why:
            ctx.find(
                cursor.time_index_path, n * TIME_ENTRY_SIZE, offset, offset, "time_index_mismatch",
                f"entry {n} gives timestamp {timestamp} for offset {offset}, {why}.",
            )  # fmt: skip
        k += 1
    cursor.time_index_k = k
    return base + offsets[k]


def index_leftovers(ctx: Context, cursor: IndexCursor, valid_end: int) -> None:
    """Entries no batch reached: inside the last batch, or past the segment's last whole batch."""
    if cursor.index_span is not None:
        n, offset, at, _ = cursor.index_span
        _index_mismatch(ctx, cursor, n, offset, at, f"but no batch from there ends at offset {offset}")
    base = cursor.offset_base
    for k in range(cursor.index_k, len(cursor.index_numbers)):
        n, offset, at = cursor.index_numbers[k], base + cursor.index_offsets[k], cursor.index_positions[k]
        if at < valid_end:
            _index_mismatch(ctx, cursor, n, offset, at, "which is not the start of a batch")
        else:
            why = f"beyond the segment's last whole batch (valid bytes end at {valid_end})"
            _index_mismatch(ctx, cursor, n, offset, at, why)
    for k in range(cursor.time_index_k, len(cursor.time_numbers)):
        n, timestamp, offset = (
            cursor.time_numbers[k],
            cursor.time_timestamps[k],
            base + cursor.time_offsets[k],
        )
        ctx.find(
            cursor.time_index_path, n * TIME_ENTRY_SIZE, offset, offset, "time_index_mismatch",
            f"entry {n} gives timestamp {timestamp} for offset {offset}, beyond the segment's last batch.",
        )  # fmt: skip


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
