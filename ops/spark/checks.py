"""What one byte range shows: the first level of the audit, run inside each scan task.

A task walks its range in file order and checks what it can see there: offset continuity between its
own batches, CRCs, producer sequences, repeated keys and values. It emits only those candidates and
a few summary rows (its first and last batch, each producer's first and last batches, the records at
its edges), so the second level (`ops.spark.findings`) folds kilobytes per range instead of a row per
batch, and classifies gaps once the whole partition is known.

Rows are (range id, partition key, kind, JSON payload): one schema for every kind, so a Spark data
source can hand them over as they are.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import orjson
import xxhash

from formats import _native
from formats.errors import FormatError
from formats.internal import OffsetCommitKey, decode_offsets_key, decode_offsets_value
from formats.records import CONTROL_BIT, CRC_START, DELETE_HORIZON_BIT, MAGIC_OFFSET, TIMESTAMP_TYPE_BIT
from ops.spark.archive import CONSUMER_OFFSETS, ByteRange, RangeReader

GAPS = "gaps"
DUPLICATES = "duplicates"
LAG = "lag"
COMMITS = "commits"  # reading __consumer_offsets: the first stage of the lag job

PRODUCER_BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: a retry re-sends one of these
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})

Row = tuple[str, str, str, str]  # range id, partition key, kind, payload (JSON)


@dataclass(frozen=True)
class AuditOptions:
    checks: frozenset[str] = frozenset({GAPS})
    check_crc: bool = True
    window_offsets: int = 1000  # content duplicates: copies at most this many offsets apart
    window_ms: int | None = None  # ... or, when set, at most this many milliseconds apart
    at: int | None = None  # lag as it stood at this time (ms since the epoch)
    committed: dict[str, list[int]] = field(default_factory=dict)  # partition key -> offsets to time

    def to_json(self) -> str:
        return orjson.dumps(
            {
                "checks": sorted(self.checks),
                "check_crc": self.check_crc,
                "window_offsets": self.window_offsets,
                "window_ms": self.window_ms,
                "at": self.at,
                "committed": self.committed,
            }
        ).decode()

    @classmethod
    def from_json(cls, text: str) -> AuditOptions:
        d = orjson.loads(text)
        return cls(
            checks=frozenset(d["checks"]),
            check_crc=d["check_crc"],
            window_offsets=d["window_offsets"],
            window_ms=d["window_ms"],
            at=d["at"],
            committed=d["committed"],
        )


def audit_ranges(ranges: Iterable[ByteRange], options: AuditOptions) -> Iterator[Row]:
    """Every row each range yields, range after range."""
    for r in ranges:
        yield from RangeAudit(r, options).run()


class RangeAudit:
    """The checks on one range; run() yields its rows."""

    def __init__(self, byte_range: ByteRange, options: AuditOptions) -> None:
        self.range = byte_range
        self.options = options
        part = byte_range.file.partition
        self.key = part.key
        self.file = byte_range.file.path
        self.rows: list[Row] = []
        checks = options.checks
        internal = part.topic in INTERNAL_TOPICS
        self.idempotence = DUPLICATES in checks and not internal
        self.content = DUPLICATES in checks and not internal
        self.commits = COMMITS in checks and part.topic == CONSUMER_OFFSETS
        self.lag_targets = sorted(options.committed.get(self.key, ())) if LAG in checks else []

    def run(self) -> list[Row]:
        reader = RangeReader(self.range, check_crc=self.options.check_crc)
        state = _Walk()
        producers: dict[tuple[int, int], _Producer] = {}
        sequences: dict[tuple[int, int, int, int], tuple] = {}
        content = _ContentWindow(self.options) if self.content else None
        commits: dict[tuple[str, str, int], tuple] = {}
        lag_times: dict[int, list] = {}
        targets, target_k = self.lag_targets, 0
        at = self.options.at
        end_at = None
        for chunk in reader.chunks():
            base, view = chunk.base, chunk.view
            for batch in chunk.batches:
                position = base + batch[0]
                if batch[4] == 2:
                    (
                        _, first, _, _, _, _, attributes, last_delta,
                        _, max_timestamp, producer_id, producer_epoch, base_sequence,
                        records_count, crc_valid,
                    ) = batch  # fmt: skip
                    last = first + last_delta
                    if records_count != last_delta + 1 or attributes & DELETE_HORIZON_BIT:
                        self._compacted_header(state, position, batch)
                else:  # v0/v1: a compressed wrapper carries only its last inner offset
                    first = None if batch[5] & 0x07 else batch[1]
                    last = batch[1]
                    attributes, crc_valid = 0, batch[7]
                    max_timestamp = batch[6]
                    producer_id = -1
                if crc_valid is not True:
                    self._crc_mismatch(view, base, batch)
                if state.first is None:
                    state.first = [position, first, last]
                elif first != state.expected:
                    if state.expected is not None:
                        self._discontinuity(position, first, last, state)
                state.expected = last + 1 if crc_valid else None
                state.prev_position, state.prev_last, state.prev_attributes = position, last, attributes
                state.prev_crc_valid = bool(crc_valid)
                state.batches += 1
                state.bytes += batch[2] + 12
                if last + 1 > state.end_offset:
                    state.end_offset = last + 1
                if max_timestamp > state.max_timestamp:
                    state.max_timestamp = max_timestamp
                if at is not None and max_timestamp <= at and (end_at is None or last + 1 > end_at):
                    end_at = last + 1
                if not crc_valid:
                    continue
                if targets and target_k < len(targets) and last >= targets[target_k]:
                    target_k = self._time_targets(view, base, batch, targets, target_k, lag_times)
                if attributes & CONTROL_BIT:
                    continue
                if self.idempotence and producer_id >= 0 and base_sequence >= 0:
                    self._sequence(producers, sequences, position, batch)
                if content is not None or self.commits:
                    try:
                        records = batch.records(view)
                    except FormatError as e:
                        self._corrupt(position, first, last, "corrupt_records", _sentence(e))
                        continue
                    if content is not None:
                        bkey = [producer_id, producer_epoch, base_sequence] if producer_id >= 0 else None
                        content.add(records, bkey, self.file, position)
                    if self.commits:
                        self._commits(records, commits, at)
        if reader.end is not None:
            self._range_end(reader)
        self._emit(
            "range",
            {
                "file": self.file,
                "start": self.range.start,
                "end": self.range.end,
                "segment_base": self.range.file.base_offset,
                "batches": state.batches,
                "bytes": state.bytes,
                "first": state.first,
                "last": None
                if state.first is None
                else [state.prev_position, state.prev_last, state.prev_attributes, state.prev_crc_valid],
                "compaction_seen": state.compaction_seen,
                "end_offset": state.end_offset if state.batches else None,
                "end_offset_at": end_at,
                "max_timestamp": state.max_timestamp,
                "stopped": reader.end is not None and reader.end.reason != 0,
            },
        )
        if producers:
            self._emit(
                "producers", [[pid, epoch, p.head, list(p.tail)] for (pid, epoch), p in producers.items()]
            )
        if content is not None:
            for copies in content.pairs:
                self._emit("content", copies)
            if state.batches:
                self._emit("edges", content.edges())
        if lag_times:
            self._emit("lag_times", [[target, *found] for target, found in lag_times.items()])
        for (group, topic, partition), (offset, committed, ts) in commits.items():
            self._emit("commit", [group, topic, partition, offset, committed, ts])
        return self.rows

    # --- findings and candidates ------------------------------------------------------------------------

    def _emit(self, kind: str, payload) -> None:
        self.rows.append((self.range.id, self.key, kind, orjson.dumps(payload).decode()))

    def _corrupt(self, position: int, first: int | None, last: int | None, kind: str, message: str) -> None:
        self._emit("corrupt", [self.file, position, first, last, kind, message])

    def _discontinuity(self, position: int, first: int | None, last: int, state: _Walk) -> None:
        self._emit(
            "discontinuity",
            [
                self.file,
                position,
                first,
                last,
                self.file,
                state.prev_position,
                state.prev_last,
                state.prev_attributes,
            ],
        )

    def _compacted_header(self, state: _Walk, position: int, batch) -> None:
        count, delta = batch.records_count, batch.last_offset_delta
        if count < 0 or delta < 0 or count > delta + 1:
            self._corrupt(
                position, batch.base_offset, batch.last_offset, "corrupt_batch",
                f"the batch declares {count} records for last_offset_delta {delta}, which no writer produces.",
            )  # fmt: skip
        else:
            state.compaction_seen = True

    def _crc_mismatch(self, view: memoryview, base: int, batch) -> None:
        position, end = batch.position, batch.position + batch.size
        if batch.magic == 2:
            computed = _native.crc32c(view[position + CRC_START : end])
            sentence = f"Record batch is corrupt (stored crc = {batch.crc}, computed crc = {computed})."
        else:
            computed = zlib.crc32(view[position + MAGIC_OFFSET : end])
            sentence = f"Record is corrupt (stored crc = {batch.crc}, computed crc = {computed})."
        self._corrupt(base + position, batch.base_offset, batch.last_offset, "crc_mismatch", sentence)

    def _range_end(self, reader: RangeReader) -> None:
        end = reader.end
        if end.reason != 0:
            self._corrupt(
                end.position, None, None, "corrupt_batch",
                f"{end.problem}; the {end.trailing_bytes} bytes from here to the end of the file cannot be framed.",
            )  # fmt: skip
        else:
            self._corrupt(
                end.position, None, None, "torn_tail",
                f"{end.trailing_bytes} bytes after the last whole batch do not form a complete batch.",
            )  # fmt: skip

    def _sequence(self, producers: dict, sequences: dict, position: int, batch) -> None:
        """Idempotent duplicates: the same producer, epoch and sequence range at another offset."""
        pid, epoch, base_seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
        entry = [base_seq, batch.last_sequence, self.file, position, batch.base_offset, batch.last_offset]
        key = (pid, epoch, base_seq, entry[1])
        seen = sequences.get(key)
        if seen is None:
            sequences[key] = entry
        else:
            self._emit("idempotent", [pid, epoch, base_seq, entry[1], [seen[2:], entry[2:]]])
        producer = producers.get((pid, epoch))
        if producer is None:
            producer = producers[(pid, epoch)] = _Producer()
        if len(producer.head) < PRODUCER_BATCHES_KEPT:
            producer.head.append(entry)
        producer.tail.append(entry)

    def _time_targets(self, view, base: int, batch, targets: list[int], k: int, out: dict[int, list]) -> int:
        """For each committed offset up to this batch's last: the first record at or after it, and its time.

        A committed offset below this batch may lie in a gap, or in a range before this one; the second
        level keeps the candidate with the lowest record offset.
        """
        first, attributes = batch.base_offset, batch.attributes
        records = None
        while k < len(targets) and targets[k] <= batch.last_offset:
            target = targets[k]
            k += 1
            if batch.magic == 2 and attributes & TIMESTAMP_TYPE_BIT:
                out[target] = [max(target, first), batch.max_timestamp]  # LogAppendTime: every record's
                continue
            if batch.magic == 2 and target <= first and not attributes & DELETE_HORIZON_BIT:
                out[target] = [first, batch.base_timestamp]  # the first record's timestamp
                continue
            if records is None:
                try:
                    records = batch.records(view)
                except FormatError:
                    records = []
            later = [r for r in records if r.offset >= target]
            out[target] = (
                [later[0].offset, later[0].timestamp] if later else [batch.last_offset, batch.max_timestamp]
            )
        return k

    def _commits(self, records, commits: dict, at: int | None) -> None:
        """The newest committed offset of each (group, topic, partition) in this range, as of `at`."""
        for record in records:
            if record.key is None or (at is not None and record.timestamp > at):
                continue
            try:
                key = decode_offsets_key(record.key)
                if not isinstance(key, OffsetCommitKey):
                    continue
                value = decode_offsets_value(key, record.value)
            except FormatError:
                continue
            committed = None if value is None else value.offset
            commits[(key.group, key.topic, key.partition)] = (record.offset, committed, record.timestamp)


class _Walk:
    """What the walk of one range carries from batch to batch."""

    def __init__(self) -> None:
        self.first: list | None = None  # [position, first offset (None: unknown), last offset]
        self.expected: int | None = None  # the offset the next batch should start at
        self.prev_position = 0
        self.prev_last = 0
        self.prev_attributes = 0
        self.prev_crc_valid = True
        self.batches = 0
        self.bytes = 0
        self.compaction_seen = False
        self.end_offset = 0
        self.max_timestamp = -1


class _Producer:
    def __init__(self) -> None:
        self.head: list[list] = []
        self.tail: deque[list] = deque(maxlen=PRODUCER_BATCHES_KEPT)


class _ContentWindow:
    """Records whose key and value hash alike within the window; the edges for the seams between ranges."""

    PRUNE_EVERY = 65536

    def __init__(self, options: AuditOptions) -> None:
        self.window_offsets = options.window_offsets
        self.window_ms = options.window_ms
        self.last_seen: dict[tuple[int, int], list] = {}
        self.pairs: list[list] = []
        self.head: list[list] = []
        self.tail: deque[list] = deque()
        self.first_offset: int | None = None
        self.min_ts: int | None = None
        self.max_ts: int | None = None
        self.last_offset = 0
        self.added = 0

    def add(self, records, bkey, file: str, position: int) -> None:
        window_offsets, window_ms = self.window_offsets, self.window_ms
        last_seen = self.last_seen
        for record in records:
            value = record.value
            if value is None:
                continue  # a tombstone repeats a key by design
            key = record.key
            h = (xxhash.xxh3_64_intdigest(key) if key is not None else -1, xxhash.xxh3_64_intdigest(value))
            offset, ts = record.offset, record.timestamp
            copy = [offset, ts, h[0], h[1], bkey, file, position]
            seen = last_seen.get(h)
            if (
                seen is not None
                and within(seen, copy, window_offsets, window_ms)
                and not same_batch(seen, copy)
            ):
                self.pairs.append(
                    [h[0], h[1], [seen[0], seen[1], seen[5], seen[6]], [offset, ts, file, position]]
                )
            last_seen[h] = copy
            self._edges(copy)
            self.added += 1
            if self.added % self.PRUNE_EVERY == 0:
                self._prune()

    def _edges(self, copy: list) -> None:
        offset, ts = copy[0], copy[1]
        if self.first_offset is None:
            self.first_offset = offset
        self.last_offset = offset
        self.min_ts = ts if self.min_ts is None else min(self.min_ts, ts)
        self.max_ts = ts if self.max_ts is None else max(self.max_ts, ts)
        if self.window_ms is None:
            if offset < self.first_offset + self.window_offsets:
                self.head.append(copy)
            self.tail.append(copy)
            while self.tail and self.tail[0][0] < offset - self.window_offsets:
                self.tail.popleft()
        else:
            if ts <= self.min_ts + self.window_ms:
                self.head.append(copy)
            self.tail.append(copy)

    def _prune(self) -> None:
        if self.window_ms is None:
            floor = self.last_offset - self.window_offsets
            self.last_seen = {h: c for h, c in self.last_seen.items() if c[0] >= floor}
        else:
            floor = self.max_ts - self.window_ms
            self.last_seen = {h: c for h, c in self.last_seen.items() if c[1] >= floor}
            self.tail = deque(c for c in self.tail if c[1] >= floor)

    def edges(self) -> dict:
        """Records within a window of the range's first and last ones: all a seam check needs."""
        if self.window_ms is None:
            head, tail = self.head, list(self.tail)
        else:
            head = [c for c in self.head if c[1] <= self.min_ts + self.window_ms]
            tail = [c for c in self.tail if c[1] >= self.max_ts - self.window_ms]
        return {"head": head, "tail": tail}


def within(a: list, b: list, window_offsets: int, window_ms: int | None) -> bool:
    """Two copies [offset, timestamp, ...] close enough to count as a duplicate."""
    if window_ms is not None:
        return abs(b[1] - a[1]) <= window_ms
    return abs(b[0] - a[0]) <= window_offsets


def same_batch(a: list, b: list) -> bool:
    """Both copies come from re-sends of one idempotent batch, which the idempotent check reports."""
    return a[4] is not None and a[4] == b[4]


def _sentence(e: BaseException) -> str:
    text = str(e)
    return text if text.endswith(".") else text + "."
