"""Segment: one `.log` file with its `.index` and `.timeindex` (Kafka's LogSegment).

Appends go to the end of the file with `os.pwritev` on a file descriptor the segment keeps open; the same
descriptor is what a fetch hands to `os.sendfile`. The sparse-index rule is `formats.segment.SegmentIndexer`.
Reads never decode records: they walk batch headers (a few bytes each, read with `os.pread`) from the
nearest index entry. Indexes of segments that are not active are opened on first use, so loading a log
with many segments touches only their names.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from formats import _native
from formats.errors import CorruptIndexError
from formats.index import (
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    AbortedTxn,
    encode_aborted_txn,
    read_txn_index,
)
from formats.records import (
    CRC_START,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MIN_UNIT_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    RecordBatch,
    describe_bad_unit,
    read_batch,
)
from formats.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    SegmentIndexer,
    StopReason,
    filename,
    unit_size_at,
    walk,
)
from kcli.broker.log.config import LogConfig
from kcli.broker.log.epochs import LeaderEpochCache
from kcli.broker.log.errors import LogStorageError
from kcli.broker.log.index import OffsetIndexFile, TimeIndexFile
from kcli.broker.log.producer_state import end_txn, replay_batches

if TYPE_CHECKING:
    from kcli.broker.log.producer_state import ProducerStateManager

_INT32_MAX = 2**31 - 1
_RECOVERY_WINDOW = 64 * 1024 * 1024  # bytes walked per pass during recovery (memory-mapped, not read)
_ABORTED_TXN_SIZE = 34  # a .txnindex entry: version int16, producer id, first, last, last stable offset
_HEADER_READ = 4096  # bytes read per pread when walking headers; small batches share one read
_RECENT_STARTS = 16  # append ends remembered per segment (recent_start)
_V2_PREFIX = struct.Struct(">qiibIhiqq")  # base offset .. max timestamp (43 bytes)
_V2_PREFIX_SIZE = _V2_PREFIX.size
_LEGACY_PREFIX = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_TIMESTAMP = struct.Struct(">q")  # v1 only, at byte 18
_open_lock = threading.Lock()


class BatchHeader(NamedTuple):
    """What a read needs of one batch, from its first 43 bytes."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    magic: int
    partition_leader_epoch: int
    max_timestamp: int


class RecoveryResult(NamedTuple):
    """What `Segment.recover` found: the valid prefix, and why it stopped if bytes were dropped."""

    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    problem: str | None
    dropped_first_offset: int | None  # what the first dropped unit claims, when its header was readable
    dropped_last_offset: int | None


class Segment:
    """One segment of a partition's log, named after its base offset."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        config: LogConfig,
        *,
        now_ms: int,
        create: bool,
        suffix: str = "",
    ) -> None:
        """Open the files of an existing segment, or (`create`) make new ones, replacing any leftovers."""
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix
        self.max_index_size = config.segment_index_bytes
        self.index_interval_bytes = config.index_interval_bytes
        self.roll_jitter_ms = config.random_segment_jitter()
        self.created_ms = now_ms
        self.indexer = SegmentIndexer(config.index_interval_bytes)
        self._max_timestamp_loaded = create
        self.rolling_based_timestamp: int | None = None  # max timestamp of the first batch
        self._fd: int | None = None
        self._offset_index: OffsetIndexFile | None = None
        self._time_index: TimeIndexFile | None = None
        self._aborted_txns: list[AbortedTxn] | None = [] if create else None  # read on first use
        # offset -> byte position where the last appends ended: see recent_start
        self._starts: dict[int, int] = {base_offset: 0} if create else {}
        self.log_path = self._path(LOG_SUFFIX)
        if create:
            for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
                path.unlink(missing_ok=True)
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            if config.preallocate:
                os.ftruncate(self._fd, config.segment_bytes)
            self.size = 0
            self._offset_index = OffsetIndexFile(self.index_path, base_offset, self.max_index_size)
            self._time_index = TimeIndexFile(self.time_index_path, base_offset, self.max_index_size)
        else:
            self.size = self.log_path.stat().st_size

    def __repr__(self) -> str:
        return f"Segment({self.log_path.name}, size={self.size})"

    # --- files ---------------------------------------------------------------------------------------

    @property
    def index_path(self) -> Path:
        return self._path(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return self._path(TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> Path:
        return self._path(TXN_INDEX_SUFFIX)

    def _path(self, suffix: str) -> Path:
        return self.dir / filename(self.base_offset, suffix + self.suffix)

    @property
    def fd(self) -> int:
        """The `.log` file descriptor (read-write), opened on first use and kept for sendfile."""
        fd = self._fd
        if fd is None:
            with _open_lock:
                if self._fd is None:
                    self._fd = os.open(self.log_path, os.O_RDWR | os.O_CLOEXEC)
                fd = self._fd
        return fd

    @property
    def offset_index(self) -> OffsetIndexFile:
        index = self._offset_index
        if index is None:
            with _open_lock:
                if self._offset_index is None:
                    self._offset_index = OffsetIndexFile(
                        self.index_path, self.base_offset, self.max_index_size
                    )
                index = self._offset_index
        return index

    @property
    def time_index(self) -> TimeIndexFile:
        index = self._time_index
        if index is None:
            with _open_lock:
                if self._time_index is None:
                    self._time_index = TimeIndexFile(
                        self.time_index_path, self.base_offset, self.max_index_size
                    )
                index = self._time_index
        return index

    def sanity_check(self) -> str | None:
        """Why this segment's indexes cannot be trusted (missing, bad length, bad last entry), or None.

        Reads only file lengths and the last entries, so it costs two or three syscalls per segment.
        A missing `.timeindex` is created empty, as Kafka does, and is not a reason by itself.
        """
        if not self.time_index_path.exists():
            self.time_index.resize(0)
        try:
            index_size = self.index_path.stat().st_size
        except FileNotFoundError:
            return f"offset index {self.index_path.name} is missing"
        time_size = self.time_index_path.stat().st_size
        if index_size % OFFSET_ENTRY_SIZE:
            return f"offset index {self.index_path.name} has {index_size} bytes, not a multiple of 8"
        if time_size % TIME_ENTRY_SIZE:
            return f"time index {self.time_index_path.name} has {time_size} bytes, not a multiple of 12"
        with open(self.index_path, "rb") as f:
            last = (
                os.pread(f.fileno(), OFFSET_ENTRY_SIZE, index_size - OFFSET_ENTRY_SIZE) if index_size else b""
            )
        if last and struct.unpack(">i", last[:4])[0] < 0:
            return f"offset index {self.index_path.name} ends with an offset below the base offset"
        if time_size:
            with open(self.time_index_path, "rb") as f:
                first = os.pread(f.fileno(), TIME_ENTRY_SIZE, 0)
                last = os.pread(f.fileno(), TIME_ENTRY_SIZE, time_size - TIME_ENTRY_SIZE)
            first_ts = struct.unpack(">q", first[:8])[0]
            last_ts, last_rel = struct.unpack(">qi", last)
            untrimmed = last == bytes(TIME_ENTRY_SIZE)  # preallocated slots left by a crash: recovery's job
            if not untrimmed and (last_ts < first_ts or last_rel < 0):
                return f"time index {self.time_index_path.name} ends before it starts"
        if self.txn_index_path.exists():
            try:
                read_txn_index(self.txn_index_path.read_bytes())
            except CorruptIndexError as e:
                return f"transaction index {self.txn_index_path.name}: {e}"
        return None

    # --- appending -----------------------------------------------------------------------------------

    def append(
        self,
        buffers: Sequence[bytes | bytearray | memoryview],
        size: int,
        last_offset: int,
        largest_timestamp: int,
    ) -> None:
        """Write whole batches (`size` bytes in `buffers`) at the end and add index entries by Kafka's rule.

        The caller has checked that `last_offset` fits this segment (see `should_roll`).
        """
        position = self.size
        if position == 0:
            self.rolling_based_timestamp = largest_timestamp
        fd = self._fd
        if fd is None:
            fd = self.fd
        written = os.pwritev(fd, buffers, position)
        if written != size:
            self._finish_write(buffers, position, written, size)
        self.size = position + size
        self._remember_start(last_offset + 1, position + size)
        offset_entry, time_entry = self.indexer.append(position, last_offset, largest_timestamp, size)
        if offset_entry is not None:
            offset_index = self._offset_index
            if offset_index is None:
                offset_index = self.offset_index
            offset_index.append(*offset_entry)
            if time_entry is not None:
                time_index = self._time_index
                if time_index is None:
                    time_index = self.time_index
                time_index.maybe_append(*time_entry)

    def append_batches(
        self, data: memoryview, batches: Sequence[BatchHeader], base_position: int = 0
    ) -> None:
        """Write several batches in one write, with index entries decided per batch (Kafka 4.0's rule)."""
        position = self.size
        if position == 0 and batches:
            self.rolling_based_timestamp = batches[0].max_timestamp
        size = len(data)
        written = os.pwrite(self.fd, data, position)
        if written != size:
            self._finish_write([data], position, written, size)
        self.size = position + size
        if batches:
            self._remember_start(batches[-1].last_offset + 1, position + size)
        indexer = self.indexer
        for batch in batches:
            offset_entry, time_entry = indexer.append(
                position + batch.position - base_position, batch.last_offset, batch.max_timestamp, batch.size
            )
            if offset_entry is not None:
                self.offset_index.append(*offset_entry)
                if time_entry is not None:
                    self.time_index.maybe_append(*time_entry)

    def _remember_start(self, offset: int, position: int) -> None:
        starts = self._starts
        starts[offset] = position
        if len(starts) > _RECENT_STARTS:
            del starts[next(iter(starts))]

    def _finish_write(
        self, buffers: Sequence[bytes | bytearray | memoryview], position: int, written: int, size: int
    ) -> None:
        """Complete a short write; on failure cut the file back so no partial batch is left behind."""
        data = b"".join(bytes(b) for b in buffers)
        try:
            while written < size:
                n = os.pwrite(self.fd, memoryview(data)[written:], position + written)
                if n <= 0:
                    raise OSError(f"short write to {self.log_path}")
                written += n
        except OSError as e:
            os.ftruncate(self.fd, position)
            raise LogStorageError(f"Error while appending to {self.log_path}: {e}") from e

    def should_roll(
        self,
        segment_bytes: int,
        max_segment_ms: int,
        messages_size: int,
        max_timestamp: int,
        last_offset: int,
        now_ms: int,
    ) -> bool:
        """Kafka's LogSegment.shouldRoll, checked before an append of `messages_size` bytes."""
        size = self.size
        if size > segment_bytes - messages_size:
            return True
        if size > 0:
            rolling_based_timestamp = self.rolling_based_timestamp
            if rolling_based_timestamp is not None and rolling_based_timestamp >= 0:
                waited = max_timestamp - rolling_based_timestamp  # time_waited_for_roll's common case
            else:
                waited = self.time_waited_for_roll(now_ms, max_timestamp)
            if waited > max_segment_ms - self.roll_jitter_ms:
                return True
        offset_index, time_index = self._offset_index, self._time_index
        if offset_index is None or time_index is None:
            offset_index, time_index = self.offset_index, self.time_index
        return (
            offset_index.entries >= offset_index.max_entries
            or time_index.entries >= time_index.max_entries - 1
            or not 0 <= last_offset - self.base_offset <= _INT32_MAX
        )

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Time since the segment's first batch (by record timestamps), else since the segment was made."""
        if self.rolling_based_timestamp is None and self.size > 0:
            first = next(self.batch_headers(0, self.size), None)
            if first is not None:
                self.rolling_based_timestamp = first.max_timestamp
        ts = self.rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    # --- timestamps ----------------------------------------------------------------------------------

    def load_max_timestamp(self) -> None:
        """Seed the largest timestamp seen so far from the time index, as Kafka does on first use."""
        if not self._max_timestamp_loaded:
            timestamp, offset = self.time_index.last_entry()
            indexer = self.indexer
            indexer.max_timestamp = timestamp
            indexer.offset_of_max_timestamp = offset
            indexer.last_time_entry_timestamp = timestamp
            self._max_timestamp_loaded = True

    @property
    def max_timestamp_so_far(self) -> int:
        self.load_max_timestamp()
        return self.indexer.max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        self.load_max_timestamp()
        return self.indexer.offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, else the file's modification time (what retention.ms compares)."""
        timestamp = self.max_timestamp_so_far
        if timestamp >= 0:
            return timestamp
        return self.log_path.stat().st_mtime_ns // 1_000_000

    # --- reading -------------------------------------------------------------------------------------

    def batch_headers(self, start: int, end: int) -> Iterator[BatchHeader]:
        """Headers of the whole batches in [start, end) of the file, in order; stops at anything odd."""
        fd = self.fd
        buf = b""
        buf_start = start
        position = start
        while end - position > HEADER_SIZE_UP_TO_MAGIC:
            at = position - buf_start
            if len(buf) - at < _V2_PREFIX_SIZE:
                buf = os.pread(fd, _HEADER_READ, position)
                buf_start = position
                at = 0
                if len(buf) <= HEADER_SIZE_UP_TO_MAGIC:
                    return
            magic = buf[at + 16]
            if magic == 2 and len(buf) - at >= _V2_PREFIX_SIZE:
                base_offset, length, epoch, _, _, _, delta, _, max_ts = _V2_PREFIX.unpack_from(buf, at)
                size = length + LOG_OVERHEAD
                if length < MIN_UNIT_SIZE or end - position < size:
                    return
                yield BatchHeader(position, base_offset, base_offset + delta, size, 2, epoch, max_ts)
            elif magic in (0, 1):
                offset, length, _, _, _ = _LEGACY_PREFIX.unpack_from(buf, at)
                size = length + LOG_OVERHEAD
                if length < MIN_UNIT_SIZE or end - position < size:
                    return
                timestamp = NO_TIMESTAMP
                if magic == 1 and len(buf) - at >= 26:
                    (timestamp,) = _LEGACY_TIMESTAMP.unpack_from(buf, at + 18)
                yield BatchHeader(position, offset, offset, size, magic, NO_PARTITION_LEADER_EPOCH, timestamp)
            else:
                return
            position += size

    def aborted_txns(self) -> list[AbortedTxn]:
        """The entries of this segment's `.txnindex` (none when the file does not exist), in file order."""
        if self._aborted_txns is None:
            path = self.txn_index_path
            self._aborted_txns = read_txn_index(path.read_bytes()) if path.exists() else []
        return self._aborted_txns

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Add an aborted transaction to `.txnindex` (Kafka's LogSegment.updateTxnIndex for an abort).

        Written straight away and made durable with the segment's flush; a crash that loses it is
        repaired by recovery, which rebuilds the index of every segment past the recovery point.
        """
        entries = self.aborted_txns()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"The last offset of appended transactions must increase sequentially, but {txn.last_offset} is "
                f"not greater than current last offset {entries[-1].last_offset} of index {self.txn_index_path}"
            )
        with open(self.txn_index_path, "ab") as f:
            f.write(encode_aborted_txn(txn))
        entries.append(txn)

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """Kafka's TransactionIndex.collectAbortedTxns: the aborted transactions overlapping
        [fetch_offset, upper_bound_offset), and whether later segments can hold no more of them (an entry
        whose last stable offset reaches the upper bound was written after every overlapping abort)."""
        found = []
        for txn in self.aborted_txns():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def recent_start(self, offset: int) -> int | None:
        """Where the first batch whose last offset is >= `offset` starts (the segment's size when there is
        none yet), known without a read when `offset` is where one of the last appends to this segment
        ended; else None. A follower or consumer that keeps up fetches at exactly such an offset, so at
        a thousand partitions this spares every read its index lookup and header walk."""
        return self._starts.get(offset)

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset` (Kafka's translateOffset), or None."""
        position = self._starts.get(offset)
        if position is not None and position >= starting_position:
            return next(self.batch_headers(position, self.size), None)
        _, position = self.offset_index.lookup(offset)
        for header in self.batch_headers(max(position, starting_position), self.size):
            if header.last_offset >= offset:
                return header
        return None

    def whole_batches_end(self, start: int, limit: int) -> int:
        """The largest batch boundary in [start, limit]: where a read of whole batches from `start` stops."""
        end = max(start, self.offset_index.floor_position(limit))
        for header in self.batch_headers(end, self.size):
            if header.position + header.size > limit:
                break
            end = header.position + header.size
        return end

    def read_next_offset(self) -> int:
        """The offset after the last batch, found from the last index entry (Kafka's readNextOffset)."""
        entries = self.offset_index.entries
        position = self.offset_index.entry(entries - 1)[1] if entries else 0
        next_offset = self.base_offset
        for header in self.batch_headers(position, self.size):
            next_offset = header.last_offset + 1
        return next_offset

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record at or after `timestamp` (Kafka's rule)."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, starting_offset))
        for header in self.batch_headers(position, self.size):
            if header.max_timestamp >= timestamp:
                for record in self._records(header):
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.offset, record.timestamp, header.partition_leader_epoch
        return None

    def offset_of_timestamp_in_batch(self, header: BatchHeader, timestamp: int) -> int | None:
        """The first record of the batch with exactly `timestamp` (Kafka's offsetOfMaxTimestamp)."""
        if header.magic == 0:
            return None
        for record in self._records(header):
            if record.timestamp == timestamp:
                return record.offset
        return None

    def _records(self, header: BatchHeader) -> list:
        data = self.read_bytes(header.position, header.size)
        return read_batch(data, 0, check_crc=False).records(data)

    # --- recovery ------------------------------------------------------------------------------------

    def recover(
        self,
        epoch_cache: LeaderEpochCache | None,
        *,
        producer_state: ProducerStateManager,
        before_truncate: Callable[[int, int, int], None] | None = None,
    ) -> RecoveryResult:
        """Rebuild the three indexes from the `.log`, validating every batch; cut the file at the first bad one.

        Kafka's LogSegment.recover: CRC and framing checked per batch, index entries by the sparse rule,
        new leader epochs (above the cache's latest) assigned, then the file truncated to its valid bytes,
        the offset index trimmed and a final time-index entry added. `producer_state` must hold the state
        at this segment's base offset: every valid batch is replayed into it one at a time, so an ABORT
        marker's `.txnindex` entry gets the last stable offset of that moment (Kafka's updateProducerState).
        """
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.reset()
        time_index.reset()
        aborted: list[AbortedTxn] = []
        indexer = self.indexer = SegmentIndexer(self.index_interval_bytes)
        self._max_timestamp_loaded = True
        self.rolling_based_timestamp = None
        size = os.fstat(self.fd).st_size
        valid = 0
        next_offset = self.base_offset
        problem = None
        dropped: tuple[int | None, int | None] = (None, None)
        if size:
            with mmap.mmap(self.fd, size, prot=mmap.PROT_READ) as data:
                valid, next_offset, problem, dropped = self._recover_batches(
                    data, size, indexer, epoch_cache, producer_state, aborted
                )
        if valid < size:
            if before_truncate is not None:  # keeps the bytes about to be cut (the loader's quarantine)
                claimed = dropped[0]  # what the first cut batch claims, if its header is believable
                plausible = claimed is not None and next_offset <= claimed <= next_offset + 0x7FFFFFFF
                before_truncate(valid, size, claimed if plausible else next_offset)  # type: ignore[arg-type]
            os.ftruncate(self.fd, valid)
        self._write_txn_index(aborted)
        self.size = valid
        self._starts.clear()
        offset_index.trim_to_valid_size()
        final = indexer.final_time_entry()
        if final is not None:
            time_index.maybe_append(*final, skip_full_check=True)
        time_index.trim_to_valid_size()
        indexer.bytes_since_last_entry = 0  # Kafka's counter is not carried out of recovery
        return RecoveryResult(valid, size - valid, next_offset, problem, *dropped)

    def _recover_batches(
        self,
        data: mmap.mmap,
        size: int,
        indexer: SegmentIndexer,
        epoch_cache: LeaderEpochCache | None,
        producer_state: ProducerStateManager,
        aborted: list[AbortedTxn],
    ) -> tuple[int, int, str | None, tuple[int | None, int | None]]:
        base_offset = self.base_offset
        offset_index, time_index = self._offset_index, self._time_index
        assert offset_index is not None and time_index is not None
        position = 0
        next_offset = base_offset
        while position < size:
            end = min(size, position + _RECOVERY_WINDOW)
            needed = unit_size_at(data, position)
            if needed is not None and needed > end - position:
                end = min(size, position + max(needed, 0))
            result = walk(data, position, end, check_crc=True)
            for batch in result.batches:
                problem = _invalid_batch(data, batch, base_offset)
                if problem is not None:
                    return position, next_offset, problem, _claimed_offsets(data, position)
                offset_entry, time_entry = indexer.append(
                    batch.position, batch.last_offset, batch.max_timestamp, batch.size
                )
                if offset_entry is not None and not offset_index.is_full():
                    offset_index.append(*offset_entry)
                    if time_entry is not None:
                        time_index.maybe_append(*time_entry)
                if batch.magic == 2:
                    if epoch_cache is not None and batch.partition_leader_epoch >= 0:
                        latest = epoch_cache.latest_epoch()
                        if latest is None or batch.partition_leader_epoch > latest:
                            epoch_cache.assign(batch.partition_leader_epoch, batch.base_offset)
                    _update_producer_state(producer_state, data, batch, aborted)
                position = batch.position + batch.size
                next_offset = batch.next_offset
            if result.reason is not StopReason.END:
                return position, next_offset, result.problem(data), _claimed_offsets(data, position)
            if not result.batches and position < size:
                return (
                    position,
                    next_offset,
                    _torn_tail(data, position, size),
                    _claimed_offsets(data, position),
                )
        return position, next_offset, None, (None, None)

    def _write_txn_index(self, aborted: list[AbortedTxn]) -> None:
        """Replace `.txnindex` with the entries recovery found (Kafka's reset, then one append each): an
        existing file is rewritten, a missing one is created only when there is an entry."""
        path = self.txn_index_path
        if aborted or path.exists():
            with open(path, "wb") as f:
                f.write(b"".join(encode_aborted_txn(txn) for txn in aborted))
        self._aborted_txns = aborted

    def truncate_to(self, offset: int) -> int:
        """Drop every batch, index entry and aborted transaction at or past `offset`; returns the bytes cut.

        Kafka's LogSegment.truncateTo, for a log truncated to an offset (a follower diverging from its
        leader, a torn tail): the `.txnindex` loses the entries whose marker is at or past `offset`
        (TransactionIndex.truncateTo), so a read_committed fetch never reports an abort the log lost.
        """
        header = self.translate_offset(offset)
        self._starts.clear()
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.truncate_to_entries(_entries_below(offset_index, offset))
        time_index.truncate_to_entries(_entries_below(time_index, offset))
        self.truncate_txn_index(offset)
        offset_index.resize(self.max_index_size)
        time_index.resize(self.max_index_size)
        truncated = 0
        if header is not None:
            truncated = self.size - header.position
            os.ftruncate(self.fd, header.position)
            self.size = header.position
        if self.size == 0:
            self.rolling_based_timestamp = None
        indexer = self.indexer = SegmentIndexer(self.index_interval_bytes)
        timestamp, timestamp_offset = time_index.last_entry()
        indexer.max_timestamp = indexer.last_time_entry_timestamp = timestamp
        indexer.offset_of_max_timestamp = timestamp_offset
        self._max_timestamp_loaded = True
        self._reload_largest_timestamp(timestamp_offset)
        return truncated

    def truncate_txn_index(self, offset: int) -> None:
        """Cut `.txnindex` before the first entry whose last offset is at or past `offset`."""
        entries = self.aborted_txns()
        keep = next((k for k, txn in enumerate(entries) if txn.last_offset >= offset), len(entries))
        if keep < len(entries):
            os.truncate(self.txn_index_path, keep * _ABORTED_TXN_SIZE)
            del entries[keep:]

    def _reload_largest_timestamp(self, indexed_offset: int) -> None:
        """Kafka's readLargestTimestamp: the last time-index entry, then the batches after it."""
        _, position = self.offset_index.lookup(indexed_offset)
        indexer = self.indexer
        for header in self.batch_headers(position, self.size):
            if header.max_timestamp > indexer.max_timestamp:
                indexer.max_timestamp = header.max_timestamp
                indexer.offset_of_max_timestamp = header.last_offset

    # --- state changes -------------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """A new segment took over: final time-index entry, indexes and a preallocated `.log` trimmed."""
        self.load_max_timestamp()
        final = self.indexer.final_time_entry()
        if final is not None:
            self.time_index.maybe_append(*final, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._trim_log()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def flush(self) -> None:
        """fsync the `.log` and msync the indexes (only what was opened can hold unflushed writes)."""
        if self._fd is not None:
            os.fsync(self._fd)
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()
        if self._aborted_txns:
            fd = os.open(self.txn_index_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Final time-index entry, trimmed indexes, trimmed `.log`; release every handle."""
        if self._max_timestamp_loaded and self._time_index is not None:
            final = self.indexer.final_time_entry()
            if final is not None:
                self._time_index.maybe_append(*final, skip_full_check=True)
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close()
        if self._fd is not None:
            self._trim_log()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Release the file descriptor and maps without writing anything."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_handler()
        self._offset_index = self._time_index = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def change_suffix(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment (for example to `.deleted`); open handles stay valid."""
        renames = [
            (self._path(suffix), self.dir / filename(self.base_offset, suffix + new_suffix))
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        ]
        assert self.suffix == old_suffix
        for old, new in renames:
            if old.exists():
                os.replace(old, new)
        self.suffix = new_suffix
        self.log_path = self._path(LOG_SUFFIX)
        if self._offset_index is not None:
            self._offset_index.path = self.index_path
        if self._time_index is not None:
            self._time_index.path = self.time_index_path

    def delete_files(self) -> None:
        self.close_handlers()
        for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            path.unlink(missing_ok=True)

    def _trim_log(self) -> None:
        """Cut a preallocated `.log` back to its data (Kafka's FileRecords.trim)."""
        fd = self.fd
        if os.fstat(fd).st_size > self.size:
            os.ftruncate(fd, self.size)


def _update_producer_state(
    producer_state: ProducerStateManager, data: mmap.mmap, batch: object, aborted: list[AbortedTxn]
) -> None:
    """Kafka's LogSegment.updateProducerState: one batch into the producer state; an abort it completes
    goes to `aborted` with the last stable offset at that point."""
    for completed in replay_batches(producer_state, data, [batch]):
        txn = end_txn(producer_state, completed)
        if txn is not None:
            if aborted and aborted[-1].last_offset >= txn.last_offset:
                raise ValueError(  # Kafka's TransactionIndex.append refuses it too
                    f"The last offset of appended transactions must increase sequentially, but "
                    f"{txn.last_offset} is not greater than current last offset {aborted[-1].last_offset}"
                )
            aborted.append(txn)
    producer_state.update_map_end_offset(batch.last_offset + 1)  # type: ignore[attr-defined]


def _entries_below(index: OffsetIndexFile | TimeIndexFile, offset: int) -> int:
    """How many entries an index keeps when truncated to `offset` (Kafka's truncateTo: those whose offset
    is below it). Entry offsets increase, so a binary search finds the cut."""
    low, high = 0, index.entries
    while low < high:
        middle = (low + high) // 2
        entry_offset = (
            index.entry(middle)[0] if isinstance(index, OffsetIndexFile) else index.entry(middle)[1]
        )
        if entry_offset < offset:
            low = middle + 1
        else:
            high = middle
    return low


def _invalid_batch(data: mmap.mmap, batch: object, base_offset: int) -> str | None:
    """Why a framed batch fails Kafka's ensureValid or does not fit the segment, or None."""
    if not batch.crc_valid:  # type: ignore[attr-defined]
        position, end = batch.position, batch.position + batch.size  # type: ignore[attr-defined]
        if isinstance(batch, RecordBatch):
            computed = _native.crc32c(memoryview(data)[position + CRC_START : end])
        else:
            computed = zlib.crc32(memoryview(data)[position + 16 : end])
        return f"Record is corrupt (stored crc = {batch.crc}, computed crc = {computed})"  # type: ignore[attr-defined]
    relative = batch.last_offset - base_offset  # type: ignore[attr-defined]
    if not 0 <= relative <= _INT32_MAX:
        return (
            f"Found offset {batch.last_offset} that cannot be stored relative to the segment's base "  # type: ignore[attr-defined]
            f"offset {base_offset}"
        )
    return None


def _torn_tail(data: mmap.mmap, position: int, size: int) -> str:
    left = size - position
    if left < HEADER_SIZE_UP_TO_MAGIC:
        return f"{left} bytes at the end are fewer than a batch header"
    length = int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
    return describe_bad_unit(length, left, data[position + 16])


def _claimed_offsets(data: mmap.mmap, position: int) -> tuple[int | None, int | None]:
    """The offsets the first dropped unit's header claims, when it looks like a header at all."""
    if len(data) - position < 27:
        return None, None
    length = struct.unpack_from(">i", data, position + 8)[0]
    magic = data[position + 16]
    if length < MIN_UNIT_SIZE or magic > 2:
        return None, None
    base = struct.unpack_from(">q", data, position)[0]
    if magic != 2:
        return base, base
    return base, base + struct.unpack_from(">i", data, position + 23)[0]
