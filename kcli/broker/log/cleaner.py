"""Cleaner: one clean of one log whose cleanup.policy includes `compact` (Kafka's Cleaner), with its
configuration, throttle and statistics; `log_cleaner` decides when and on which thread it runs.

One clean of one log (`Cleaner.clean`) makes two passes over segment files:

1. The offset map. The dirty section, [first dirty offset, first uncleanable offset), is read and each
   key's latest offset is put in a SkimpyOffsetMap. When the map is full the section ends there; the
   next clean starts where this one stopped (the cleaner-offset-checkpoint).
2. The rewrite. Every segment from the log start up to the end of the map is rewritten, in groups that
   fit one segment (`group_segments_by_size`), into `<base>.log.cleaned` with its indexes. A record stays
   if no later record has its key (or it lies past the map); a tombstone stays until its batch's delete
   horizon, which the first clean that keeps it sets to now + delete.retention.ms (KIP-534; magic v0/v1
   tombstones go when their segment is older than the last clean segment by delete.retention.ms). A
   batch whose records all stay is copied byte for byte; otherwise it is re-encoded with the same base
   and last offset, producer id, epoch, base sequence, leader epoch, attributes and compression codec,
   and a new CRC. An emptied batch is kept as an empty header when it is its producer's last batch or
   the last batch below the cleaning bound, as Kafka does, so sequence numbers and offsets survive.

Magic v0/v1 segments are cleaned record by record, but a compressed legacy wrapper that keeps some of
its messages is copied whole (Kafka re-encodes it without the dropped messages): nothing is lost,
superseded values inside such a wrapper survive until every message in it is superseded.
"""

from __future__ import annotations

import enum
import heapq
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from formats.compression import Codec
from formats.errors import CorruptIndexError, CorruptRecordError
from formats.index import AbortedTxn, OffsetIndex, encode_aborted_txn, read_txn_index
from formats.records import (
    ControlType,
    LegacyBatch,
    RecordBatch,
    RecordSpec,
    build_batch,
    control_type,
)
from formats.segment import CLEANED_SUFFIX, unit_size_at, walk
from kcli.broker.log.cleaner_manager import LastRecord, LogToClean, delete_retention_ms, segments_in_range
from kcli.broker.log.log import Log, wall_clock_ms
from kcli.broker.log.offset_map import SkimpyOffsetMap
from kcli.broker.log.segment import BatchHeader, Segment
from kcli.config import BrokerConfig

logger = logging.getLogger("kcli.broker.log.cleaner")

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

Swap = Callable[[Log, Segment, list[Segment]], "Future[bool]"]
"""Hands a finished `.cleaned` segment and the segments it replaces to whoever swaps it in."""


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Kafka's CleanerConfig: the broker's log.cleaner.* settings, with Kafka's defaults."""

    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    max_message_size: int = 1024 * 1024 + 12
    max_io_bytes_per_second: float = math.inf
    backoff_ms: int = 15_000
    enable_cleaner: bool = True

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> CleanerConfig:
        return cls(
            num_threads=int(config["log.cleaner.threads"]),  # type: ignore[call-overload]
            dedupe_buffer_size=int(config["log.cleaner.dedupe.buffer.size"]),  # type: ignore[call-overload]
            dedupe_buffer_load_factor=float(config["log.cleaner.io.buffer.load.factor"]),  # type: ignore[arg-type]
            io_buffer_size=int(config["log.cleaner.io.buffer.size"]),  # type: ignore[call-overload]
            max_message_size=int(config["message.max.bytes"]),  # type: ignore[call-overload]
            max_io_bytes_per_second=float(config["log.cleaner.io.max.bytes.per.second"]),  # type: ignore[arg-type]
            backoff_ms=int(config["log.cleaner.backoff.ms"]),  # type: ignore[call-overload]
            enable_cleaner=bool(config["log.cleaner.enable"]),
        )

    @property
    def enabled(self) -> bool:
        return self.enable_cleaner and self.num_threads > 0


class LogCleaningAborted(Exception):
    """The clean stopped on purpose (shutdown, the log deleted, a segment gone); nothing to report."""


class BatchRetention(enum.Enum):
    """What happens to a batch as a whole (Kafka's RecordFilter.BatchRetention)."""

    DELETE = "DELETE"  # dropped whatever its records say
    RETAIN_EMPTY = "RETAIN_EMPTY"  # kept, as an empty header if no record stays
    DELETE_EMPTY = "DELETE_EMPTY"  # kept only if some record stays


class Cleaner:
    """Cleans one log at a time with its offset map and I/O buffers (Kafka's Cleaner)."""

    def __init__(
        self,
        config: CleanerConfig,
        *,
        check_done: Callable[[Log], None],
        throttler: Throttler,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        threads = max(config.num_threads, 1)
        self.offset_map = SkimpyOffsetMap(min(config.dedupe_buffer_size // threads, _INT32_MAX))
        self.dup_buffer_load_factor = config.dedupe_buffer_load_factor
        if self.offset_map.slots * self.dup_buffer_load_factor <= 1:
            raise ValueError(
                "offset map is too small to fit in even a single message, so log cleaning will never make "
                "progress. You can increase log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads"
            )
        self.io_buffer_size = max(config.io_buffer_size // threads // 2, 1)
        self.check_done = check_done
        self.throttler = throttler
        self.clock = clock

    def clean(self, cleanable: LogToClean, now_ms: int, swap: Swap) -> tuple[int, CleanerStats]:
        """Kafka's doClean: map the dirty section, rewrite the log below the map's end in groups, hand
        each group to `swap`; returns the next first dirty offset once every swap is done."""
        log = cleanable.log
        logger.info("Beginning cleaning of log %s", log.name)
        segments = cleanable.segments
        retention_ms = delete_retention_ms(log.config)
        clean_segments = segments_in_range(segments, 0, cleanable.first_dirty_offset)
        legacy_delete_horizon_ms = (
            _last_modified_ms(clean_segments[-1]) - retention_ms if clean_segments else 0
        )
        stats = CleanerStats()
        upper_bound_offset = cleanable.first_uncleanable_offset
        self.build_offset_map(log, segments, cleanable.first_dirty_offset, upper_bound_offset, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.index_done()
        groups = group_segments_by_size(
            segments_in_range(segments, 0, end_offset),
            log.config.segment_bytes,
            log.config.segment_index_bytes,
            upper_bound_offset,
        )
        transactions = CleanedTransactionMetadata()
        swaps = []
        for group in groups:
            if any(f.done() and not f.result() for f in swaps):
                raise LogCleaningAborted()
            cleaned = self.clean_segments(
                log,
                segments,
                group,
                now_ms,
                stats,
                transactions,
                legacy_delete_horizon_ms,
                upper_bound_offset,
                cleanable.last_records_of_producers,
            )
            swaps.append(swap(log, cleaned, group))
        if not all(f.result() for f in swaps):
            raise LogCleaningAborted()
        stats.buffer_utilization = self.offset_map.utilization
        stats.all_done()
        return end_offset, stats

    # --- pass 1: the offset map ------------------------------------------------------------------------

    def build_offset_map(
        self, log: Log, segments: list[Segment], start: int, end: int, stats: CleanerStats
    ) -> None:
        """Put the latest offset of every key in [start, end) in the map, until it is full."""
        offset_map = self.offset_map
        offset_map.clear()
        dirty = segments_in_range(segments, start, end)
        next_starts = [s.base_offset for s in dirty[1:]] + [end]
        transactions = CleanedTransactionMetadata()
        transactions.add_aborted_transactions(collect_aborted_transactions(segments, start, end))
        for segment, next_start in zip(dirty, next_starts, strict=True):
            if self._build_offset_map_for_segment(log, segment, start, next_start, transactions, stats):
                logger.debug(
                    "%s: offset map is full, segment with base offset %d is partially mapped",
                    log.name,
                    segment.base_offset,
                )
                return

    def _build_offset_map_for_segment(
        self,
        log: Log,
        segment: Segment,
        start: int,
        next_segment_start: int,
        transactions: CleanedTransactionMetadata,
        stats: CleanerStats,
    ) -> bool:
        """Map one segment from `start`; True when the map filled up before its end."""
        offset_map = self.offset_map
        put = offset_map.put
        max_desired_map_size = int(offset_map.slots * self.dup_buffer_load_factor)
        with _SourceSegment(segment) as source:
            for chunk, batches, consumed in self._batches(log, source, source.position_of(start)):
                self.throttler.maybe_throttle(consumed)
                for batch in batches:
                    if isinstance(batch, RecordBatch) and batch.is_control:
                        transactions.on_control_batch_read(batch, batch.records(chunk))
                        stats.map_messages_read += 1
                    elif isinstance(batch, RecordBatch) and transactions.on_batch_read(batch):
                        stats.map_messages_read += batch.records_count
                    elif batch.last_offset >= start:
                        records = batch.records(chunk)
                        for record in records:
                            key = record.key
                            if key is not None and record.offset >= start:
                                if len(offset_map) >= max_desired_map_size:
                                    return True
                                put(key, record.offset)
                        stats.map_messages_read += len(records)
                    if batch.last_offset >= start:
                        offset_map.update_latest_offset(batch.last_offset)
                stats.map_bytes_read += consumed
        offset_map.update_latest_offset(next_segment_start - 1)
        return False

    # --- pass 2: the rewrite ---------------------------------------------------------------------------

    def clean_segments(
        self,
        log: Log,
        segments: list[Segment],
        group: list[Segment],
        now_ms: int,
        stats: CleanerStats,
        transactions: CleanedTransactionMetadata,
        legacy_delete_horizon_ms: int,
        upper_bound_offset_of_cleaning_round: int,
        last_records_of_producers: dict[int, LastRecord],
    ) -> Segment:
        """Rewrite `group` into one `.cleaned` segment (flushed, dated like the group's last segment)."""
        cleaned = Segment(
            log.dir, group[0].base_offset, log.config, now_ms=now_ms, create=True, suffix=CLEANED_SUFFIX
        )
        aborted_in_cleaned: list[AbortedTxn] = []
        transactions.cleaned_index = aborted_in_cleaned
        try:
            last_modified_ns = 0
            following = {id(s): n.base_offset for s, n in zip(segments, segments[1:], strict=False)}
            for segment in group:
                upper = following.get(id(segment), _INT64_MAX)
                transactions.add_aborted_transactions(
                    collect_aborted_transactions(segments, segment.base_offset, upper)
                )
                with _SourceSegment(segment) as source:
                    last_modified_ns = source.last_modified_ns
                    retain_legacy_deletes = source.last_modified_ns // 1_000_000 > legacy_delete_horizon_ms
                    self.clean_into(
                        log,
                        source,
                        cleaned,
                        retain_legacy_deletes,
                        delete_retention_ms(log.config),
                        transactions,
                        last_records_of_producers,
                        upper_bound_offset_of_cleaning_round,
                        stats,
                        now_ms,
                    )
            cleaned.on_become_inactive()
            if aborted_in_cleaned:
                _write_file(cleaned.txn_index_path, b"".join(map(encode_aborted_txn, aborted_in_cleaned)))
            cleaned.flush()
            for path in (cleaned.log_path, cleaned.index_path, cleaned.time_index_path):
                os.utime(path, ns=(last_modified_ns, last_modified_ns))
        except BaseException:
            cleaned.delete_files()
            raise
        return cleaned

    def clean_into(
        self,
        log: Log,
        source: _SourceSegment,
        dest: Segment,
        retain_legacy_deletes: bool,
        delete_retention_ms: int,
        transactions: CleanedTransactionMetadata,
        last_records_of_producers: dict[int, LastRecord],
        upper_bound_offset_of_cleaning_round: int,
        stats: CleanerStats,
        now_ms: int,
    ) -> None:
        """Append what survives of one source segment to `dest` (Kafka's cleanInto + MemoryRecords.filterTo)."""
        batch_filter = _BatchFilter(
            self.offset_map,
            now_ms,
            delete_retention_ms,
            retain_legacy_deletes,
            transactions,
            last_records_of_producers,
            upper_bound_offset_of_cleaning_round,
            stats,
        )
        for chunk, batches, consumed in self._batches(log, source, 0):
            self.throttler.maybe_throttle(consumed)
            stats.bytes_read += consumed
            parts: list[bytes | memoryview] = []
            headers: list[BatchHeader] = []
            position = 0
            view = memoryview(chunk)
            for batch in batches:
                kept = batch_filter.filter(chunk, view, batch)
                if kept is None:
                    continue
                data, header = kept
                parts.append(data)
                headers.append(header._replace(position=position))
                position += header.size
            if parts:
                dest.append_batches(memoryview(b"".join(parts)), headers)
                stats.bytes_written += position
                self.throttler.maybe_throttle(position)

    def _batches(
        self, log: Log, source: _SourceSegment, position: int
    ) -> Iterator[tuple[bytes, list[RecordBatch | LegacyBatch], int]]:
        """(chunk, its whole batches, bytes they span) from `position` to the end of the segment, read
        `io_buffer_size` at a time (more for a larger batch); CRCs checked, corruption raised."""
        end = source.size
        buffer_size = self.io_buffer_size
        while position < end:
            self.check_done(log)
            chunk = os.pread(source.fd, min(buffer_size, end - position), position)
            result = walk(chunk, 0, len(chunk), check_crc=True)
            if result.batches:
                for batch in result.batches:
                    if not batch.crc_valid:
                        raise CorruptRecordError(
                            f"Record is corrupt (stored crc = {batch.crc}) in log segment {source.path} at "
                            f"position {position + batch.position}"
                        )
                yield chunk, result.batches, result.stop
                position += result.stop
                buffer_size = self.io_buffer_size
                continue
            problem = result.problem(chunk)
            if problem is not None:
                raise CorruptRecordError(f"{problem} in log segment {source.path} at position {position}")
            needed = unit_size_at(chunk, 0)
            if needed is None or needed > end - position:
                raise CorruptRecordError(
                    f"Log segment may be corrupt, batch size {needed} > {end - position} bytes left in segment "
                    f"for log segment {source.path} at position {position}"
                )
            buffer_size = needed


class _BatchFilter:
    """Kafka's cleaner RecordFilter and MemoryRecords.filterTo for one source segment: what of each
    batch survives, as bytes to append and the header the segment indexes it by."""

    def __init__(
        self,
        offset_map: SkimpyOffsetMap,
        now_ms: int,
        delete_retention_ms: int,
        retain_legacy_deletes: bool,
        transactions: CleanedTransactionMetadata,
        last_records_of_producers: dict[int, LastRecord],
        upper_bound_offset_of_cleaning_round: int,
        stats: CleanerStats,
    ) -> None:
        self.offset_map = offset_map
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.retain_legacy_deletes = retain_legacy_deletes
        self.transactions = transactions
        self.last_records_of_producers = last_records_of_producers
        self.upper_bound = upper_bound_offset_of_cleaning_round
        self.stats = stats

    def filter(
        self, chunk: bytes, view: memoryview, batch: RecordBatch | LegacyBatch
    ) -> tuple[bytes | memoryview, BatchHeader] | None:
        if isinstance(batch, LegacyBatch):
            return self._filter_legacy(chunk, view, batch)
        stats = self.stats
        control_records = None
        if batch.is_control:
            control_records = batch.records(chunk)
            can_discard_batch = self.transactions.on_control_batch_read(batch, control_records)
            horizon = batch.delete_horizon_ms
            discard_batch_records = can_discard_batch and horizon is not None and horizon <= self.now_ms
        else:
            can_discard_batch = self.transactions.on_batch_read(batch)
            discard_batch_records = can_discard_batch
        if batch.producer_id >= 0 and self._is_last_record_of_producer(batch):
            retention = BatchRetention.RETAIN_EMPTY
        elif batch.next_offset == self.upper_bound:
            retention = BatchRetention.RETAIN_EMPTY
        elif discard_batch_records:
            retention = BatchRetention.DELETE
        else:
            retention = BatchRetention.DELETE_EMPTY
        contains_marker_for_empty_txn = can_discard_batch and batch.is_control
        if retention is BatchRetention.DELETE:
            stats.messages_read += batch.records_count
            return None

        records = control_records if control_records is not None else batch.records(chunk)
        stats.messages_read += len(records)
        if discard_batch_records:
            retained = []
        elif batch.is_control:
            retained = records
        else:
            retained = self._retained(records, batch.delete_horizon_ms)
        if retained:
            contains_tombstones = any(r.value is None for r in retained)
            need_delete_horizon = (
                contains_tombstones or contains_marker_for_empty_txn
            ) and batch.delete_horizon_ms is None
            stats.messages_written += len(retained)
            if len(retained) == len(records) and not need_delete_horizon:
                return view[batch.position : batch.position + batch.size], _header_of(batch)
            horizon = (
                self.now_ms + self.delete_retention_ms if need_delete_horizon else batch.delete_horizon_ms
            )
            return _rebuild(batch, retained, horizon)
        if retention is BatchRetention.RETAIN_EMPTY:
            return _rebuild(batch, [], None)
        return None

    def _retained(self, records: list, delete_horizon_ms: int | None) -> list:
        """The records of a v2 data batch that stay (Kafka's shouldRetainRecord)."""
        offset_map = self.offset_map
        latest_offset = offset_map.latest_offset
        latest_for = offset_map.get
        retain_deletes = delete_horizon_ms is None or self.now_ms < delete_horizon_ms
        retained = []
        for record in records:
            offset = record.offset
            if offset > latest_offset:
                retained.append(record)
            elif record.key is None:
                self.stats.invalid_messages_read += 1
            elif offset >= latest_for(record.key) and (record.value is not None or retain_deletes):
                retained.append(record)
        return retained

    def _filter_legacy(
        self, chunk: bytes, view: memoryview, batch: LegacyBatch
    ) -> tuple[bytes | memoryview, BatchHeader] | None:
        """A v0/v1 message or wrapper: kept whole while any of its messages stays."""
        records = batch.records(chunk)
        self.stats.messages_read += len(records)
        offset_map = self.offset_map
        kept = 0
        for record in records:
            if record.offset > offset_map.latest_offset:
                kept += 1
            elif record.key is None:
                self.stats.invalid_messages_read += 1
            elif record.offset >= offset_map.get(record.key) and (
                record.value is not None or self.retain_legacy_deletes
            ):
                kept += 1
        if not kept:
            return None
        self.stats.messages_written += len(records)
        header = BatchHeader(
            batch.position,
            batch.base_offset,
            batch.last_offset,
            batch.size,
            batch.magic,
            -1,
            batch.max_timestamp,
        )
        return view[batch.position : batch.position + batch.size], header

    def _is_last_record_of_producer(self, batch: RecordBatch) -> bool:
        last = self.last_records_of_producers.get(batch.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return batch.last_offset == last.last_data_offset
        return batch.is_control and batch.producer_epoch == last.producer_epoch


def _header_of(batch: RecordBatch) -> BatchHeader:
    return BatchHeader(
        batch.position,
        batch.base_offset,
        batch.last_offset,
        batch.size,
        2,
        batch.partition_leader_epoch,
        batch.max_timestamp,
    )


def _rebuild(batch: RecordBatch, retained: list, delete_horizon_ms: int | None) -> tuple[bytes, BatchHeader]:
    """Kafka's buildRetainedRecordsInto (or writeEmptyHeader for no records): same base and last offset,
    producer fields, leader epoch, flags and codec; records keep their offsets; a new CRC."""
    empty = not retained
    codec = Codec.NONE if empty else batch.compression
    max_timestamp = batch.max_timestamp if empty or batch.log_append_time >= 0 else None
    data = build_batch(
        [RecordSpec(r.timestamp, r.key, r.value, r.headers, r.offset - batch.base_offset) for r in retained],
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        codec=codec,
        timestamp_type=batch.timestamp_type,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        last_offset_delta=batch.last_offset_delta,
        max_timestamp=max_timestamp,
        delete_horizon_ms=None if empty else delete_horizon_ms,
    )
    if max_timestamp is None:
        max_timestamp = max(r.timestamp for r in retained)
    header = BatchHeader(
        batch.position,
        batch.base_offset,
        batch.last_offset,
        len(data),
        2,
        batch.partition_leader_epoch,
        max_timestamp,
    )
    return data, header


def group_segments_by_size(
    segments: list[Segment], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[Segment]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose logs, offset indexes and time indexes
    each fit one segment, and whose offsets fit 32 bits relative to the group's first base offset."""
    sizes = [(s.size, _file_size(s.index_path), _file_size(s.time_index_path)) for s in segments]
    grouped: list[list[Segment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size, index_size, time_index_size = sizes[i]
        i += 1
        while i < len(segments):
            size, offset_index_bytes, time_index_bytes = sizes[i]
            if i + 1 < len(segments):
                last_offset = segments[i + 1].base_offset - 1
            else:
                last_offset = first_uncleanable_offset - 1
            if not (
                log_size + size <= max_size
                and index_size + offset_index_bytes <= max_index_size
                and time_index_size + time_index_bytes <= max_index_size
                and (size == 0 or last_offset - group[-1].base_offset <= _INT32_MAX)
            ):
                break
            group.append(segments[i])
            log_size += size
            index_size += offset_index_bytes
            time_index_size += time_index_bytes
            i += 1
        grouped.append(group)
    return grouped


def collect_aborted_transactions(segments: list[Segment], start: int, upper: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start, upper), from the `.txnindex` files of the segments from
    the one holding `start`, until one records a transaction stable beyond `upper` (Kafka's search)."""
    found: list[AbortedTxn] = []
    for segment in segments_in_range(segments, start, _INT64_MAX):
        try:
            data = segment.txn_index_path.read_bytes()
        except FileNotFoundError:
            continue
        try:
            entries = read_txn_index(data)
        except CorruptIndexError as e:
            raise CorruptIndexError(f"{e} ({segment.txn_index_path})") from e
        complete = False
        for txn in entries:
            if txn.last_offset >= start and txn.first_offset < upper:
                found.append(txn)
            if txn.last_stable_offset >= upper:
                complete = True
                break
        if complete:
            break
    return found


class CleanedTransactionMetadata:
    """Which transactional batches and markers a clean may drop (Kafka's CleanedTransactionMetadata).

    Batches of aborted transactions go; a marker goes once no batch of its transaction is left before
    it (and its delete horizon has passed); the aborted transactions still represented in a cleaned
    segment are written to its `.txnindex`.
    """

    def __init__(self) -> None:
        self._ongoing_committed_txns: set[int] = set()
        self._ongoing_aborted_txns: dict[int, _AbortedTransactionMetadata] = {}
        self._aborted_transactions: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._added = 0
        self.cleaned_index: list[AbortedTxn] | None = None

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            self._added += 1
            heapq.heappush(self._aborted_transactions, (txn.first_offset, self._added, txn))

    def on_control_batch_read(self, batch: RecordBatch, records: list) -> bool:
        """True when the marker may be discarded."""
        self._consume_aborted_txns_up_to(batch.last_offset)
        if not records:
            return True
        kind = control_type(records[0].key)
        producer_id = batch.producer_id
        if kind is ControlType.ABORT:
            aborted = self._ongoing_aborted_txns.pop(producer_id, None)
            if aborted is not None and aborted.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(aborted.aborted_txn)
                return False
            return True
        if kind is ControlType.COMMIT:
            if producer_id in self._ongoing_committed_txns:
                self._ongoing_committed_txns.remove(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """True when the batch belongs to an aborted transaction and may be discarded."""
        self._consume_aborted_txns_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        aborted = self._ongoing_aborted_txns.get(batch.producer_id)
        if aborted is not None:
            aborted.last_observed_batch_offset = batch.last_offset
            return True
        self._ongoing_committed_txns.add(batch.producer_id)
        return False

    def _consume_aborted_txns_up_to(self, offset: int) -> None:
        heap = self._aborted_transactions
        while heap and heap[0][0] <= offset:
            _, _, txn = heapq.heappop(heap)
            self._ongoing_aborted_txns.setdefault(txn.producer_id, _AbortedTransactionMetadata(txn))


@dataclass
class _AbortedTransactionMetadata:
    aborted_txn: AbortedTxn
    last_observed_batch_offset: int | None = None


# --- reading source segments, throttling, stats ------------------------------------------------------------


class _SourceSegment:
    """A segment file opened by the cleaner for reading, with a descriptor of its own: the broker thread
    may rename or close the segment meanwhile (retention), and then the clean is aborted at the swap."""

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.path = segment.log_path
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise LogCleaningAborted() from None
        stat = os.fstat(self.fd)
        self.size = min(segment.size, stat.st_size)
        self.last_modified_ns = stat.st_mtime_ns

    def position_of(self, offset: int) -> int:
        """Where to start reading for `offset`: the segment's offset index entry at or below it."""
        try:
            data = self.segment.index_path.read_bytes()
        except FileNotFoundError:
            return 0
        return OffsetIndex(data, self.segment.base_offset).lookup(offset).position

    def __enter__(self) -> _SourceSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


class Throttler:
    """log.cleaner.io.max.bytes.per.second: sleep when the bytes of the last 300 ms went too fast."""

    def __init__(
        self, desired_rate_per_second: float, stop: threading.Event, check_interval_ms: int = 300
    ) -> None:
        self.desired_rate_per_second = desired_rate_per_second
        self.check_interval_s = check_interval_ms / 1000
        self._stop = stop
        self._period_start = time.monotonic()
        self._observed = 0

    def maybe_throttle(self, observed: int) -> None:
        if math.isinf(self.desired_rate_per_second):
            return
        self._observed += observed
        elapsed = time.monotonic() - self._period_start
        if elapsed < self.check_interval_s:
            return
        if self._observed / elapsed > self.desired_rate_per_second:
            sleep_s = self._observed / self.desired_rate_per_second - elapsed
            if sleep_s > 0:
                self._stop.wait(sleep_s)
        self._period_start = time.monotonic()
        self._observed = 0


@dataclass
class CleanerStats:
    """What one clean read and wrote, and how long its phases took (Kafka's CleanerStats)."""

    start_s: float = field(default_factory=time.monotonic)
    map_complete_s: float = -1.0
    end_s: float = -1.0
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    invalid_messages_read: int = 0
    messages_written: int = 0
    buffer_utilization: float = 0.0

    def index_done(self) -> None:
        self.map_complete_s = time.monotonic()

    def all_done(self) -> None:
        self.end_s = time.monotonic()

    @property
    def elapsed_secs(self) -> float:
        return self.end_s - self.start_s

    @property
    def elapsed_index_secs(self) -> float:
        return self.map_complete_s - self.start_s

    def summary(self, name: str, first_dirty_offset: int, end_offset: int) -> str:
        """One line in the spirit of Kafka's cleaner log (sizes in MB, rates in MB/s)."""
        mb = 1024 * 1024
        elapsed = max(self.elapsed_secs, 1e-3)
        reduction = 100 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0.0
        fewer = 100 * (1 - self.messages_written / self.messages_read) if self.messages_read else 0.0
        return (
            f"Log cleaner thread 0 cleaned log {name} (dirty section = [{first_dirty_offset}, {end_offset}]): "
            f"{self.bytes_read / mb:,.1f} MB of log processed in {elapsed:,.1f} seconds "
            f"({self.bytes_read / mb / elapsed:,.1f} MB/sec), indexed {self.map_bytes_read / mb:,.1f} MB, "
            f"buffer utilization {100 * self.buffer_utilization:.1f}%, {reduction:.1f}% size reduction "
            f"({fewer:.1f}% fewer messages)"
        )


def _last_modified_ms(segment: Segment) -> int:
    try:
        return segment.log_path.stat().st_mtime_ns // 1_000_000
    except FileNotFoundError:
        raise LogCleaningAborted() from None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "Cleaner",
    "CleanerConfig",
    "CleanerStats",
    "LogCleaningAborted",
    "Throttler",
    "group_segments_by_size",
]
