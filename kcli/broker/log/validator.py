"""Produce-time validation of a leader append (Kafka's UnifiedLog.analyzeAndValidateRecords + LogValidator).

The hot path reads one batch header with `formats._native.scan` (which also checks the CRC) and decides
everything from it: base offset, size against max.message.bytes, CRC, offset range and record count,
control and sequence rules, the LogAppendTime rules. Records are decoded only where Kafka's outcome
depends on them and the header cannot tell: a compacted topic (every record needs a key), finite
message.timestamp.(before|after).max.ms on a CreateTime topic, a compression.type that differs from the
producer's codec (the batch is rebuilt), and legacy v0/v1 input (converted to one v2 batch).

Two things Kafka does while iterating records are deliberately skipped on the fast path, because the
CRC already proves the producer wrote exactly these bytes: re-deriving the batch max timestamp from the
records (the header's is kept) and rejecting structurally broken records inside a valid CRC.
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from formats import _native
from formats.compression import Codec
from formats.errors import CompressionError, FormatError
from formats.records import (
    CONTROL_BIT,
    CRC_START,
    MIN_UNIT_SIZE,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    LegacyBatch,
    RecordBatch,
    RecordSpec,
    TimestampType,
    build_batch,
)
from formats.segment import StopReason, walk
from kcli.broker.log.config import LogConfig
from kcli.broker.log.errors import RecordError

_MAX_TIMESTAMP_AT = 35
_ATTRIBUTES_AT = 21
_CRC_AT = 17
_INT64 = struct.Struct(">q")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")

# Fields of the tuples `_native.scan` returns.
_POSITION, _BASE_OFFSET, _LENGTH, _EPOCH, _MAGIC, _CRC, _ATTRIBUTES, _DELTA = range(8)
_BASE_TS, _MAX_TS, _PRODUCER_ID, _PRODUCER_EPOCH, _BASE_SEQUENCE, _COUNT, _CRC_VALID = range(8, 15)


class AppendOrigin(Enum):
    """Who is appending, which decides the checks (Kafka's AppendOrigin)."""

    CLIENT = "client"  # a producer: every check
    COORDINATOR = "coordinator"  # the broker's own group/transaction coordinators: control batches allowed
    RAFT_LEADER = "raft_leader"  # the metadata quorum leader: offsets and epochs already assigned


_CLIENT = AppendOrigin.CLIENT  # an enum member read from its class costs more than the rest of a check
_new_tuple = tuple.__new__  # builds a NamedTuple without the Python-level __new__ its constructor calls


class BatchProducerInfo(NamedTuple):
    """The producer fields of one v2 batch header: what the producer-state checks read."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool


class ValidatedBatch(NamedTuple):
    """One v2 batch ready to append: `header` (61 bytes, writable) still needs base offset and epoch."""

    header: bytearray
    body: memoryview | bytes
    size: int
    last_offset_delta: int
    max_timestamp: int
    records_count: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    producer: BatchProducerInfo | None  # None for a batch without a producer id


class BatchValidator:
    """Produce-time checks for one partition under one config (the log builds a new one on config change).

    The common case (one v2 batch, nothing that needs its records) costs one native header scan and a
    handful of integer comparisons; everything else takes the general path below.
    """

    def __init__(self, config: LogConfig, topic_partition: str) -> None:
        self.config = config
        self.topic_partition = topic_partition
        self.max_message_bytes = config.max_message_bytes
        self.log_append_time = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
        bounded = (
            config.message_timestamp_before_max_ms < _LONG_MAX
            or config.message_timestamp_after_max_ms < _LONG_MAX
        )
        self.needs_records = config.compact or (bounded and not self.log_append_time)
        self.target_codec = (
            None if config.compression_type == "producer" else int(config.target_codec(Codec.NONE))
        )
        # The codec and timestamp-type bits (attributes & 0x0F) a batch may carry and still take the fast
        # path: a known codec the topic keeps as it is, CreateTime; none when the records must be read.
        codecs = range(5) if self.target_codec is None else (self.target_codec,)
        self.fast_attributes = frozenset(() if self.needs_records else codecs)

    def validate(
        self, records: bytes | bytearray | memoryview, *, now_ms: int, origin: AppendOrigin
    ) -> ValidatedBatch:
        """Check a produce request's records for this partition; raise RecordError exactly as Kafka would."""
        view = records if type(records) is memoryview else memoryview(records)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        found, stop, reason = _native.scan(view, 0, len(view), True)
        if reason or len(found) != 1:
            return self._validate_general(view, found, stop, reason, now_ms=now_ms, origin=origin)
        (position, base_offset, length, _, _, crc, attributes, delta, _, max_ts, producer_id, _, base_sequence, count, crc_valid) = found[0]  # fmt: skip
        size = length + 12
        if origin is _CLIENT:
            if (
                base_offset
                or delta + 1 != count
                or count <= 0
                or attributes & CONTROL_BIT
                or (producer_id >= 0 and base_sequence < 0)
            ):
                return self._validate_general(view, found, stop, reason, now_ms=now_ms, origin=origin)
        if (
            size > self.max_message_bytes
            or not crc_valid
            or attributes & 0x0F not in self.fast_attributes  # LogAppendTime from a producer, codec
        ):
            return self._validate_general(view, found, stop, reason, now_ms=now_ms, origin=origin)
        header = bytearray(view[position : position + RECORD_BATCH_OVERHEAD])
        body = view[position + RECORD_BATCH_OVERHEAD : position + size]
        producer = _producer_of(found[0])
        if self.log_append_time:
            _set_max_timestamp(header, body, attributes | TIMESTAMP_TYPE_BIT, now_ms)
            return _new_tuple(ValidatedBatch, (header, body, size, delta, now_ms, count, now_ms, producer))
        return _new_tuple(ValidatedBatch, (header, body, size, delta, max_ts, count, -1, producer))

    def _validate_general(
        self, view: memoryview, found: list, stop: int, reason: int, *, now_ms: int, origin: AppendOrigin
    ) -> ValidatedBatch:
        """Every case in Kafka's order, with Kafka's messages."""
        config, topic_partition = self.config, self.topic_partition
        if reason == StopReason.LEGACY:
            if found:
                raise RecordError(
                    ErrorCode.invalid_record,
                    f"Batch magic {view[stop + 16]} is not the same as the first batch's magic byte 2 in topic "
                    f"partition {topic_partition}",
                )
            return _convert_legacy(view, config, now_ms=now_ms, topic_partition=topic_partition)
        if reason == StopReason.BAD_SIZE:
            size = int.from_bytes(view[stop + 8 : stop + 12], "big", signed=True)
            if size < MIN_UNIT_SIZE:
                message = f"Record size {size} is less than the minimum record overhead ({MIN_UNIT_SIZE})"
            else:
                message = (
                    f"Record batch is corrupt (the size {size + 12} is smaller than the minimum allowed overhead "
                    f"{RECORD_BATCH_OVERHEAD})"
                )
            raise RecordError(ErrorCode.corrupt_message, f"{message} in topic partition {topic_partition}")
        if reason == StopReason.BAD_MAGIC:
            magic = view[stop + 16]
            raise RecordError(
                ErrorCode.corrupt_message,
                f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}",
            )
        if not found:
            raise RecordError(
                ErrorCode.invalid_record, f"The append to {topic_partition} holds no complete record batch"
            )
        is_client = origin is AppendOrigin.CLIENT
        for batch in found:
            _check_shallow(batch, config, is_client, topic_partition)
        if len(found) > 1:
            raise RecordError(ErrorCode.invalid_record, "Compressed outer record has more than one batch")
        batch = found[0]
        _check_batch(batch, is_client, topic_partition)
        return _validate_v2(view, batch, config, now_ms=now_ms, topic_partition=topic_partition)


def _check_shallow(batch: tuple, config: LogConfig, is_client: bool, topic_partition: str) -> None:
    """analyzeAndValidateRecords: base offset 0 from clients, size, CRC."""
    if is_client and batch[_BASE_OFFSET] != 0:
        raise RecordError(
            ErrorCode.invalid_record,
            f"The baseOffset of the record batch in the append to {topic_partition} should be 0, but it is "
            f"{batch[_BASE_OFFSET]}",
        )
    size = batch[_LENGTH] + 12
    if size > config.max_message_bytes:
        raise RecordError(
            ErrorCode.message_too_large,
            f"The record batch size in the append to {topic_partition} is {size} bytes which exceeds the "
            f"maximum configured value of {config.max_message_bytes}.",
        )
    if not batch[_CRC_VALID]:
        raise RecordError(
            ErrorCode.corrupt_message,
            f"Record is corrupt (stored crc = {batch[_CRC]}) in topic partition {topic_partition}.",
        )


def _check_batch(batch: tuple, is_client: bool, topic_partition: str) -> None:
    """LogValidator.validateBatch for a v2 batch."""
    if not is_client:
        return
    base_offset, delta, count = batch[_BASE_OFFSET], batch[_DELTA], batch[_COUNT]
    last_offset = base_offset + delta
    if delta + 1 <= 0:
        raise RecordError(
            ErrorCode.invalid_record,
            f"Batch has an invalid offset range: [{base_offset}, {last_offset}] in topic partition {topic_partition}",
        )
    if count <= 0:
        raise RecordError(
            ErrorCode.invalid_record,
            f"Invalid reported count for record batch: {count} in topic partition {topic_partition}",
        )
    if delta + 1 != count:
        raise RecordError(
            ErrorCode.invalid_record,
            f"Inconsistent batch offset range [{base_offset}, {last_offset}] and count of records {count} in "
            f"topic partition {topic_partition}",
        )
    if batch[_ATTRIBUTES] & CONTROL_BIT:
        raise RecordError(
            ErrorCode.invalid_record,
            f"Clients are not allowed to write control records in topic partition {topic_partition}",
        )
    if batch[_PRODUCER_ID] >= 0 and batch[_BASE_SEQUENCE] < 0:
        raise RecordError(
            ErrorCode.invalid_record,
            f"Invalid sequence number {batch[_BASE_SEQUENCE]} in record batch with producerId "
            f"{batch[_PRODUCER_ID]} in topic partition {topic_partition}",
        )


def _validate_v2(
    view: memoryview, batch: tuple, config: LogConfig, *, now_ms: int, topic_partition: str
) -> ValidatedBatch:
    size = batch[_LENGTH] + 12
    attributes = batch[_ATTRIBUTES]
    count = batch[_COUNT]
    topic_log_append = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    batch_log_append = bool(attributes & TIMESTAMP_TYPE_BIT)
    max_timestamp = batch[_MAX_TS]
    if batch_log_append and (topic_log_append or max_timestamp == -1):
        message = (
            "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
        )
        raise _record_errors(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            [(i, message) for i in range(max(count, 1))],
        )
    source = Codec(attributes & 0x07) if attributes & 0x07 <= 4 else None
    if source is None:
        raise RecordError(ErrorCode.corrupt_message, f"Unknown compression type id: {attributes & 0x07}")
    target = config.target_codec(source)
    bounded = (
        config.message_timestamp_before_max_ms < _LONG_MAX
        or config.message_timestamp_after_max_ms < _LONG_MAX
    )
    check_timestamps = not topic_log_append and bounded
    if batch_log_append and check_timestamps:
        # Every record of a LogAppendTime batch reads as the batch max timestamp: the header decides.
        _check_timestamps([(i, i, max_timestamp) for i in range(count)], config, now_ms)
        check_timestamps = False
    if config.compact or check_timestamps or target is not source:
        return _validate_records(
            view, batch, source, target, config, now_ms=now_ms, topic_partition=topic_partition
        )
    header = bytearray(view[batch[_POSITION] : batch[_POSITION] + RECORD_BATCH_OVERHEAD])
    body = view[batch[_POSITION] + RECORD_BATCH_OVERHEAD : batch[_POSITION] + size]
    log_append_time = -1
    if topic_log_append:
        log_append_time = max_timestamp = now_ms
        _set_max_timestamp(header, body, attributes | TIMESTAMP_TYPE_BIT, now_ms)
    elif batch_log_append:
        # A CreateTime topic stores it as CreateTime; each record read as the batch max timestamp.
        _set_max_timestamp(header, body, attributes & ~TIMESTAMP_TYPE_BIT, max_timestamp)
    return ValidatedBatch(
        header, body, size, batch[_DELTA], max_timestamp, count, log_append_time, _producer_of(batch)
    )


def _validate_records(
    view: memoryview,
    batch: tuple,
    source: Codec,
    target: Codec,
    config: LogConfig,
    *,
    now_ms: int,
    topic_partition: str,
) -> ValidatedBatch:
    """The slow path: decode the records for keys, timestamps or recompression."""
    header_values = RecordBatch._make(batch)
    try:
        records = header_values.records(view)
    except CompressionError as e:
        raise RecordError(ErrorCode.corrupt_message, f"{e} in topic partition {topic_partition}") from None
    except FormatError as e:
        raise RecordError(ErrorCode.invalid_record, f"{e} in topic partition {topic_partition}") from None
    topic_log_append = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    _check_records(
        [(i, r.offset, r.timestamp, r.key) for i, r in enumerate(records)],
        config,
        now_ms=now_ms,
        check_timestamps=not topic_log_append and not header_values.attributes & TIMESTAMP_TYPE_BIT,
        topic_partition=topic_partition,
    )
    in_order = all(r.offset - header_values.base_offset == i for i, r in enumerate(records))
    if target is not source or (source is not Codec.NONE and not in_order):
        return _rebuild(
            [RecordSpec(r.timestamp, r.key, r.value, r.headers) for r in records],
            config,
            target,
            now_ms=now_ms,
            producer_id=header_values.producer_id,
            producer_epoch=header_values.producer_epoch,
            base_sequence=header_values.base_sequence,
            is_transactional=header_values.is_transactional,
            topic_partition=topic_partition,
        )
    position, size = batch[_POSITION], batch[_LENGTH] + 12
    header = bytearray(view[position : position + RECORD_BATCH_OVERHEAD])
    body = view[position + RECORD_BATCH_OVERHEAD : position + size]
    if topic_log_append:
        _set_max_timestamp(header, body, header_values.attributes | TIMESTAMP_TYPE_BIT, now_ms)
        return ValidatedBatch(
            header, body, size, batch[_DELTA], now_ms, batch[_COUNT], now_ms, _producer_of(batch)
        )
    max_timestamp = max((r.timestamp for r in records), default=-1)
    if header_values.attributes & TIMESTAMP_TYPE_BIT or max_timestamp != header_values.max_timestamp:
        _set_max_timestamp(header, body, header_values.attributes & ~TIMESTAMP_TYPE_BIT, max_timestamp)
    return ValidatedBatch(
        header, body, size, batch[_DELTA], max_timestamp, batch[_COUNT], -1, _producer_of(batch)
    )


def _convert_legacy(
    view: memoryview, config: LogConfig, *, now_ms: int, topic_partition: str
) -> ValidatedBatch:
    """Magic v0/v1 input becomes one v2 batch, as a broker with message format v2 converts it."""
    result = walk(view, 0, len(view), check_crc=True)
    entries = [b for b in result.batches if isinstance(b, LegacyBatch)]
    if result.reason is not StopReason.END:
        raise RecordError(
            ErrorCode.corrupt_message, f"{result.problem(view)} in topic partition {topic_partition}"
        )
    if len(entries) != len(result.batches):
        raise RecordError(
            ErrorCode.invalid_record,
            f"Batch magic 2 is not the same as the first batch's magic byte {entries[0].magic if entries else 0} "
            f"in topic partition {topic_partition}",
        )
    if not entries:
        raise RecordError(
            ErrorCode.invalid_record, f"The append to {topic_partition} holds no complete record batch"
        )
    first = entries[0]
    source = first.compression
    for entry in entries:
        if entry.size > config.max_message_bytes:
            raise RecordError(
                ErrorCode.message_too_large,
                f"The record batch size in the append to {topic_partition} is {entry.size} bytes which exceeds "
                f"the maximum configured value of {config.max_message_bytes}.",
            )
        if not entry.crc_valid:
            raise RecordError(
                ErrorCode.corrupt_message,
                f"Record is corrupt (stored crc = {entry.crc}) in topic partition {topic_partition}.",
            )
        if entry.magic != first.magic:
            raise RecordError(
                ErrorCode.invalid_record,
                f"Batch magic {entry.magic} is not the same as the first batch's magic byte {first.magic} in topic "
                f"partition {topic_partition}",
            )
    if source is not Codec.NONE and len(entries) > 1:
        raise RecordError(ErrorCode.invalid_record, "Compressed outer record has more than one batch")
    records = []
    try:
        for entry in entries:
            records.extend(entry.records(view))
    except CompressionError as e:
        raise RecordError(ErrorCode.corrupt_message, f"{e} in topic partition {topic_partition}") from None
    except FormatError as e:
        raise RecordError(ErrorCode.corrupt_message, f"{e} in topic partition {topic_partition}") from None
    topic_log_append = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    _check_records(
        [(i, r.offset, r.timestamp, r.key) for i, r in enumerate(records)],
        config,
        now_ms=now_ms,
        check_timestamps=not topic_log_append,
        topic_partition=topic_partition,
    )
    return _rebuild(
        [RecordSpec(r.timestamp, r.key, r.value) for r in records],
        config,
        config.target_codec(source),
        now_ms=now_ms,
        topic_partition=topic_partition,
    )


def _rebuild(
    specs: list[RecordSpec],
    config: LogConfig,
    codec: Codec,
    *,
    now_ms: int,
    topic_partition: str,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> ValidatedBatch:
    """A new batch holding the validated records, in the target codec and timestamp type."""
    log_append = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    data = build_batch(
        specs,
        codec=codec,
        timestamp_type=config.message_timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        max_timestamp=now_ms if log_append else None,
        compression_level=config.compression_level(codec),
    )
    if len(data) > config.max_message_bytes:
        raise RecordError(
            ErrorCode.message_too_large,
            f"Message batch size is {len(data)} bytes in append topartition {topic_partition} which exceeds the "
            f"maximum configured size of {config.max_message_bytes}.",
        )
    batch = _native.scan(data, 0, len(data), False)[0][0]
    view = memoryview(data)
    return ValidatedBatch(
        bytearray(view[:RECORD_BATCH_OVERHEAD]),
        view[RECORD_BATCH_OVERHEAD:],
        len(data),
        batch[_DELTA],
        batch[_MAX_TS],
        batch[_COUNT],
        now_ms if log_append else -1,
        _producer_of(batch),
    )


def _check_records(
    records: list[tuple[int, int, int, bytes | None]],
    config: LogConfig,
    *,
    now_ms: int,
    check_timestamps: bool,
    topic_partition: str,
) -> None:
    """Keys on compacted topics (INVALID_RECORD) and timestamp bounds (INVALID_TIMESTAMP), all records."""
    errors: list[tuple[ErrorCode, int, str]] = []
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    for index, offset, timestamp, key in records:
        if config.compact and key is None:
            errors.append(
                (
                    ErrorCode.invalid_record,
                    index,
                    f"Compacted topic cannot accept message without key in topic partition {topic_partition}",
                )
            )
        elif (
            check_timestamps
            and timestamp != -1
            and (now_ms - timestamp > before or timestamp - now_ms > after)
        ):
            errors.append(
                (ErrorCode.invalid_timestamp, index, _timestamp_message(timestamp, offset, now_ms, config))
            )
    if not errors:
        return
    pairs = [(index, message) for _, index, message in errors]
    if any(code is ErrorCode.invalid_timestamp for code, _, _ in errors):
        raise _record_errors(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            pairs,
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in pairs[:3])
    raise _record_errors(
        ErrorCode.invalid_record,
        f"One or more records have been rejected due to {len(pairs)} record errors in total, and only showing "
        f"the first three errors at most: [{shown}]",
        pairs,
    )


def _check_timestamps(records: list[tuple[int, int, int]], config: LogConfig, now_ms: int) -> None:
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    errors = [
        (index, _timestamp_message(timestamp, offset, now_ms, config))
        for index, offset, timestamp in records
        if timestamp != -1 and (now_ms - timestamp > before or timestamp - now_ms > after)
    ]
    if errors:
        raise _record_errors(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            errors,
        )


def _timestamp_message(timestamp: int, offset: int, now_ms: int, config: LogConfig) -> str:
    return (
        f"Timestamp {timestamp} of message with offset {offset} is out of range. The timestamp should be within "
        f"[{now_ms - config.message_timestamp_before_max_ms}, {now_ms + config.message_timestamp_after_max_ms}]"
    )


def _record_errors(code: ErrorCode, message: str, errors: list[tuple[int, str]]) -> RecordError:
    return RecordError(code, message, tuple(errors))


def _producer_of(batch: tuple) -> BatchProducerInfo | None:
    """The producer fields of a scanned batch, None when it has no producer id."""
    if batch[_PRODUCER_ID] < 0:
        return None
    attributes = batch[_ATTRIBUTES]
    return _new_tuple(
        BatchProducerInfo,
        (
            batch[_PRODUCER_ID],
            batch[_PRODUCER_EPOCH],
            batch[_BASE_SEQUENCE],
            (attributes & TRANSACTIONAL_BIT) != 0,
            (attributes & CONTROL_BIT) != 0,
        ),
    )


def _set_max_timestamp(
    header: bytearray, body: memoryview | bytes, attributes: int, max_timestamp: int
) -> None:
    """Kafka's setMaxTimestamp: attributes and max timestamp rewritten, CRC recomputed."""
    _INT16.pack_into(header, _ATTRIBUTES_AT, attributes)
    _INT64.pack_into(header, _MAX_TIMESTAMP_AT, max_timestamp)
    crc = _native.crc32c(body, _native.crc32c(memoryview(header)[CRC_START:]))
    _UINT32.pack_into(header, _CRC_AT, crc)


_LONG_MAX = 2**63 - 1
