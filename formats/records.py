"""Record batches (magic v2) and legacy message sets (magic v0/v1).

Batches are plain header values (what one pass over the bytes yields); records are decoded only when
asked, from the buffer the batch's `position` refers to. Views hold no reference to that buffer, so a
reader can unmap a window of a segment while batch values from it are still in use.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import NamedTuple

from formats import _native
from formats.compression import DEFAULT_MAX_UNCOMPRESSED, Codec, codec_of, compress, decompress
from formats.errors import CorruptRecordError
from formats.internal.codec import Malformed, Reader
from formats.wire import VarintError, read_uvarint, write_compact_string, write_uvarint

Buffer = bytes | bytearray | memoryview

LOG_OVERHEAD = 12  # offset int64 + size int32
SIZE_OFFSET = 8  # the int32 size after the base offset
MAGIC_OFFSET = 16  # byte 16 of every unit is its magic, whatever the format
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_BATCH_OVERHEAD = 61
CRC_START = 21  # v2 CRC-32C covers [attributes, end of batch)
ATTRIBUTES_OFFSET = 21  # v2 int16 attributes (codec in the low 3 bits of its second byte)
PRODUCER_ID_OFFSET = 43  # v2 int64 producer id, then int16 producer epoch, int32 base sequence
MIN_UNIT_SIZE = 14  # smallest legal `size` field: the v0 message overhead

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

Record = _native.Record
"""A v2 record: (offset, timestamp, key, value, headers), headers as ((str, bytes | None), ...)."""


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def label(self) -> str:
        """The name kafka-dump-log prints before a timestamp."""
        return _TIMESTAMP_LABELS[self]


_TIMESTAMP_LABELS = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


class RecordBatch(NamedTuple):
    """The header of one magic v2 batch, in on-disk field order (reference §1.1)."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    crc_valid: bool | None

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Codec:
        return codec_of(self.attributes)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        """Set by the log cleaner (KIP-534): then base_timestamp holds the horizon."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    @property
    def last_sequence(self) -> int:
        return _add_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def first_timestamp(self) -> int:
        return self.base_timestamp

    def records(self, buf: Buffer, max_size: int = DEFAULT_MAX_UNCOMPRESSED) -> list[Record]:
        """Decode the records; `buf` is the buffer `position` indexes into."""
        return _native.decode_records(
            self.records_data(buf, max_size),
            self.records_count,
            self.base_offset,
            self.base_timestamp,
            self.log_append_time,
        )

    def records_data(self, buf: Buffer, max_size: int = DEFAULT_MAX_UNCOMPRESSED) -> bytes | memoryview:
        """The records region, decompressed: what the native record decoders take."""
        if self.records_count < 0:
            raise CorruptRecordError(f"Found invalid record count {self.records_count} in magic v2 batch")
        data = memoryview(buf)[self.position + RECORD_BATCH_OVERHEAD : self.position + self.size]
        codec = self.compression
        return data if codec is Codec.NONE else decompress(codec, data, magic=2, max_size=max_size)

    @property
    def log_append_time(self) -> int:
        """The broker's append time, which every record takes under LogAppendTime; else -1."""
        return self.max_timestamp if self.attributes & TIMESTAMP_TYPE_BIT else -1

    def sequence_of(self, offset: int) -> int:
        return _add_sequence(self.base_sequence, offset - self.base_offset)


class LegacyRecord(NamedTuple):
    """One magic v0/v1 message as a consumer sees it (a wrapper's inner message, or a plain message)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    magic: int
    attributes: int
    crc: int
    crc_valid: bool
    timestamp_type: TimestampType


class LegacyBatch(NamedTuple):
    """One shallow magic v0/v1 entry: a plain message, or a compressed wrapper holding a message set."""

    position: int
    offset: int
    message_size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    crc_valid: bool | None

    @property
    def size(self) -> int:
        return self.message_size + LOG_OVERHEAD

    @property
    def base_offset(self) -> int:
        """Known exactly only after decompression for wrappers; the entry offset stands in for it."""
        return self.offset

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    @property
    def compression(self) -> Codec:
        return codec_of(self.attributes & 0x07)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    is_transactional = False
    is_control = False
    partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
    producer_id = NO_PRODUCER_ID

    def records(self, buf: Buffer, max_size: int = DEFAULT_MAX_UNCOMPRESSED) -> list[LegacyRecord]:
        """The messages a consumer sees: this message, or the inner messages of a wrapper."""
        view = memoryview(buf)
        key, value = _legacy_key_value(view, self.position, self.size, self.magic)
        if self.compression is Codec.NONE:
            return [self._as_record(self.offset, self.timestamp, key, value)]
        if value is None:
            raise CorruptRecordError("Found invalid compressed record set with null value")
        inner = decompress(self.compression, value, magic=self.magic, max_size=max_size)
        return self._inner_records(inner)

    def _as_record(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None) -> LegacyRecord:
        crc_valid = bool(self.crc_valid) if self.crc_valid is not None else True
        return LegacyRecord(
            offset,
            timestamp,
            key,
            value,
            (),
            self.magic,
            self.attributes,
            self.crc,
            crc_valid,
            self.timestamp_type,
        )

    def _inner_records(self, inner: bytes) -> list[LegacyRecord]:
        entries = []
        pos = 0
        while pos < len(inner):
            if len(inner) - pos < HEADER_SIZE_UP_TO_MAGIC:
                raise CorruptRecordError("Found a truncated message inside a compressed wrapper message")
            entry = read_legacy_entry(inner, pos, check_crc=True)
            if entry.compression is not Codec.NONE:
                raise CorruptRecordError("Compressed message set contains a nested compressed message")
            if entry.magic != self.magic:
                raise CorruptRecordError(
                    f"Compressed message set of magic {self.magic} contains a message of magic {entry.magic}"
                )
            key, value = _legacy_key_value(inner, pos, entry.size, entry.magic)
            entries.append((entry, key, value))
            pos += entry.size
        if not entries:
            raise CorruptRecordError("Found invalid compressed record set with no inner records")
        if self.magic == 0:
            offsets = [entry.offset for entry, _, _ in entries]
        else:
            last_relative = entries[-1][0].offset
            if self.offset == 0:
                offsets = [entry.offset for entry, _, _ in entries]
            elif self.offset < last_relative:
                raise CorruptRecordError(
                    f"Found invalid wrapper offset in compressed v1 message set, wrapper offset '{self.offset}' "
                    f"is less than the last inner message offset '{last_relative}' and it is not zero."
                )
            else:
                offsets = [self.offset - last_relative + entry.offset for entry, _, _ in entries]
        log_append = self.magic == 1 and bool(self.attributes & TIMESTAMP_TYPE_BIT)
        out = []
        for offset, (entry, key, value) in zip(offsets, entries, strict=True):
            timestamp = self.timestamp if log_append else entry.timestamp
            ts_type = self.timestamp_type if log_append else entry.timestamp_type
            out.append(
                LegacyRecord(
                    offset,
                    timestamp,
                    key,
                    value,
                    (),
                    entry.magic,
                    entry.attributes,
                    entry.crc,
                    bool(entry.crc_valid),
                    ts_type,
                )
            )
        return out


Batch = RecordBatch | LegacyBatch


# --- reading ----------------------------------------------------------------------------------------------

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEGACY_PREFIX = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes


def read_batch(buf: Buffer, position: int = 0, *, check_crc: bool = True) -> Batch:
    """The unit starting at `position`; it must be complete (see formats.segment.walk for files)."""
    view = memoryview(buf)
    if len(view) - position < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError("Found a record batch shorter than its 17-byte prefix")
    magic = view[position + MAGIC_OFFSET]
    if magic in (0, 1):
        return read_legacy_entry(view, position, check_crc=check_crc)
    if magic != 2:
        raise CorruptRecordError(f"Found unknown record magic {_signed_byte(magic)} at position {position}")
    batches, stop, reason = _native.scan(view, position, len(view), check_crc)
    if not batches or batches[0][0] != position:
        size = int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
        raise CorruptRecordError(describe_bad_unit(size, len(view) - position, magic))
    return RecordBatch._make(batches[0])


def read_legacy_entry(buf: Buffer, position: int, *, check_crc: bool = True) -> LegacyBatch:
    """Parse one v0/v1 message-set entry's header and check its CRC-32 (magic .. end of message)."""
    view = memoryview(buf)
    offset, size, crc, magic, attributes = _LEGACY_PREFIX.unpack_from(view, position)
    overhead = legacy_overhead(magic)
    if size < overhead:
        raise CorruptRecordError(
            f"Found record size {size} smaller than minimum record overhead ({overhead}) at position {position}"
        )
    end = position + LOG_OVERHEAD + size
    if end > len(view):
        raise CorruptRecordError(
            f"Found a message of {size} bytes at position {position} running past the data"
        )
    timestamp = struct.unpack_from(">q", view, position + 18)[0] if magic == 1 else NO_TIMESTAMP
    crc_valid = (zlib.crc32(view[position + MAGIC_OFFSET : end]) == crc) if check_crc else None
    if magic not in (0, 1):
        raise CorruptRecordError(f"Found unknown record magic {magic} in a legacy message set")
    return LegacyBatch(position, offset, size, crc, magic, attributes, timestamp, crc_valid)


def legacy_overhead(magic: int) -> int:
    """Smallest legal `size` of a v0 (14) or v1 (22) message."""
    return 14 if magic == 0 else 22


def describe_bad_unit(size: int, available: int, magic: int) -> str:
    """Kafka's sentence for a unit that cannot be framed."""
    minimum = legacy_overhead(magic) if magic in (0, 1) else MIN_UNIT_SIZE
    if size < minimum:
        return f"Found record size {size} smaller than minimum record overhead ({minimum})"
    if magic == 2 and size + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
        return (
            f"Record batch is corrupt (the size {size + LOG_OVERHEAD} is smaller than the minimum "
            f"allowed overhead {RECORD_BATCH_OVERHEAD})"
        )
    if magic > 2:
        return f"Found unknown record magic {magic}"
    return f"Found a batch of {size + LOG_OVERHEAD} bytes with only {available} bytes left"


def _legacy_key_value(
    view: Buffer, position: int, size: int, magic: int
) -> tuple[bytes | None, bytes | None]:
    pos = position + LOG_OVERHEAD + (6 if magic == 0 else 14)
    end = position + size
    key, pos = _legacy_bytes(view, pos, end)
    value, pos = _legacy_bytes(view, pos, end)
    if pos != end:
        raise CorruptRecordError(f"Found {end - pos} unexpected bytes after the value of a legacy message")
    return key, value


def _legacy_bytes(view: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("Legacy message is truncated before its key or value length")
    (length,) = struct.unpack_from(">i", view, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"Legacy message declares a key or value of {length} bytes past its end")
    return bytes(view[pos : pos + length]), pos + length


def _signed_byte(b: int) -> int:
    return b - 256 if b > 127 else b


def _add_sequence(base_sequence: int, delta: int) -> int:
    """Producer sequences wrap at Int32.MAX back to 0; -1 means none."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (base_sequence + delta) % (1 << 31)


# --- control records -----------------------------------------------------------------------------------


class EndTxnMarker(NamedTuple):
    version: int
    coordinator_epoch: int


def control_type(key: bytes | None) -> ControlType:
    """The type named by a control record's key: int16 version (>= 0), int16 type."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("Invalid control record key: fewer than 4 bytes")
    version, kind = struct.unpack_from(">hh", key)
    if version < 0:
        raise CorruptRecordError(
            f"Invalid version found for control record: {version}. May indicate data corruption"
        )
    try:
        return ControlType(kind)
    except ValueError:
        return ControlType.UNKNOWN


class SnapshotHeader(NamedTuple):
    """SnapshotHeaderRecord (control type 3): the first record of a KRaft snapshot."""

    version: int
    last_contained_log_timestamp: int


SNAPSHOT_HEADER_VERSION = 0  # ControlRecordUtils.SNAPSHOT_HEADER_CURRENT_VERSION
SNAPSHOT_FOOTER_VERSION = 0  # ControlRecordUtils.SNAPSHOT_FOOTER_CURRENT_VERSION


def control_record_key(control: ControlType) -> bytes:
    """A control record's key: int16 key version (0), int16 control type."""
    if control is ControlType.UNKNOWN:
        raise ValueError("an UNKNOWN control type has no key")
    return _CONTROL_KEY.pack(0, int(control))


def encode_snapshot_header(
    last_contained_log_timestamp: int, version: int = SNAPSHOT_HEADER_VERSION
) -> bytes:
    """SnapshotHeaderRecord v0 (flexible): int16 Version, int64 LastContainedLogTimestamp, no tagged fields."""
    return _SNAPSHOT_HEADER.pack(version, last_contained_log_timestamp) + b"\0"


def encode_snapshot_footer(version: int = SNAPSHOT_FOOTER_VERSION) -> bytes:
    """SnapshotFooterRecord v0 (flexible): int16 Version, no tagged fields."""
    return _INT16.pack(version) + b"\0"


def snapshot_header(value: Buffer | None) -> SnapshotHeader:
    """Decode a SnapshotHeaderRecord value (read at version 0, as Kafka's ControlRecordUtils does)."""
    data = _control_value(value, _SNAPSHOT_HEADER.size, "snapshot header")
    version, timestamp = _SNAPSHOT_HEADER.unpack_from(data)
    _check_tagged_fields(data, _SNAPSHOT_HEADER.size, "snapshot header")
    return SnapshotHeader(version, timestamp)


def snapshot_footer(value: Buffer | None) -> int:
    """Decode a SnapshotFooterRecord value; returns its version."""
    data = _control_value(value, _INT16.size, "snapshot footer")
    (version,) = _INT16.unpack_from(data)
    _check_tagged_fields(data, _INT16.size, "snapshot footer")
    return version


def _control_value(value: Buffer | None, size: int, what: str) -> memoryview:
    if value is None or len(value) < size + 1:
        raise CorruptRecordError(f"Invalid {what} record value: fewer than {size + 1} bytes")
    return memoryview(value)


def _check_tagged_fields(data: memoryview, position: int, what: str) -> None:
    """Walk the tagged-field section of a flexible message (unknown tags are skipped, as Kafka does)."""
    end = len(data)
    try:
        count, position = read_uvarint(data, position, end)
        for _ in range(count):
            _tag, position = read_uvarint(data, position, end)
            size, position = read_uvarint(data, position, end)
            position += size
            if position > end:
                raise CorruptRecordError(f"Invalid {what} record value: a tagged field runs past its end")
    except VarintError:
        raise CorruptRecordError(f"Invalid {what} record value: a bad unsigned varint") from None
    if position != len(data):
        raise CorruptRecordError(f"Invalid {what} record value: {len(data) - position} byte(s) after its end")


def end_txn_marker(value: bytes | None) -> EndTxnMarker:
    if value is None or len(value) < 6:
        raise CorruptRecordError("Invalid end transaction marker value: fewer than 6 bytes")
    version, coordinator_epoch = struct.unpack_from(">hi", value)
    if version < 0:
        raise CorruptRecordError(
            f"Invalid version found for end transaction marker: {version}. May indicate data corruption"
        )
    return EndTxnMarker(version, coordinator_epoch)


# --- building v2 batches --------------------------------------------------------------------------------


class RecordSpec(NamedTuple):
    """A record to write; offset_delta None means "next slot" (set it to leave compaction-style gaps)."""

    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    offset_delta: int | None = None


def build_batch(
    records: Iterable[RecordSpec | Record | tuple],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    codec: Codec = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one magic v2 batch (CRC last, as Kafka does). An empty `records` makes an empty batch.

    Records are RecordSpec-shaped tuples, or decoded Records, which keep their timestamp, key, value and
    headers and take the next offset delta (their offset is the source's, not this batch's).
    """
    items = records if isinstance(records, list | tuple) else list(records)
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif items:
        first = items[0]
        base_timestamp = first[1] if type(first) is Record else first[0]
    else:
        base_timestamp = NO_TIMESTAMP
    body, delta, latest = _native.encode_records(items, base_timestamp)
    if last_offset_delta is None:
        last_offset_delta = max(delta, 0)
    if max_timestamp is None:
        max_timestamp = latest
    payload = compress(codec, body, level=compression_level) if codec is not Codec.NONE else body
    attributes = int(codec)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    header = bytearray(RECORD_BATCH_OVERHEAD)
    _V2_HEADER.pack_into(
        header,
        0,
        base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(items),
    )
    crc = _native.crc32c(payload, _native.crc32c(memoryview(header)[CRC_START:]))
    struct.pack_into(">I", header, 17, crc)
    return b"".join((header, payload))


def rewrite_producer_state(
    batch: Buffer,
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool = False,
) -> bytearray:
    """A copy of one whole magic v2 batch as a producer would send it under another producer identity.

    Replaying a batch idempotently needs the new producer id, epoch and base sequence in its header, and
    a batch leaves its transaction behind. Those fields sit inside the CRC (attributes onward), so the
    CRC is computed again; the records, compressed or not, are copied as they are. Base offset and
    partition leader epoch are reset to 0 and -1, the values a producer sends (the broker stamps both).
    """
    out = bytearray(batch)
    set_producer_state(
        out,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    return out


def set_producer_state(
    batch: bytearray | memoryview,
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool = False,
) -> None:
    """rewrite_producer_state in place, for a writable buffer holding one whole v2 batch (no copy)."""
    view = memoryview(batch)
    if len(view) < RECORD_BATCH_OVERHEAD or view[MAGIC_OFFSET] != 2:
        raise CorruptRecordError("Only a whole magic v2 record batch can take a new producer state")
    (length,) = _INT32.unpack_from(view, 8)
    if length + LOG_OVERHEAD != len(view):
        raise CorruptRecordError(
            f"Record batch declares {length + LOG_OVERHEAD} bytes but {len(view)} were given"
        )
    (attributes,) = _ATTRIBUTES.unpack_from(view, 21)
    attributes = attributes | TRANSACTIONAL_BIT if is_transactional else attributes & ~TRANSACTIONAL_BIT
    _INT64.pack_into(view, 0, 0)
    _INT32.pack_into(view, 12, NO_PARTITION_LEADER_EPOCH)
    _ATTRIBUTES.pack_into(view, 21, attributes)
    _PRODUCER_FIELDS.pack_into(view, 43, producer_id, producer_epoch, base_sequence)
    _CRC.pack_into(view, 17, _native.crc32c(view[CRC_START:]))


# Per batch on replay's hot path: precompiled, since struct.pack_into with a format string looks it up.
_INT32 = struct.Struct(">i")  # the batch length, the partition leader epoch
_INT64 = struct.Struct(">q")  # the base offset
_ATTRIBUTES = struct.Struct(">H")
_CRC = struct.Struct(">I")
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_CONTROL_KEY = struct.Struct(">hh")  # key version, control type
_INT16 = struct.Struct(">h")
_SNAPSHOT_HEADER = struct.Struct(">hq")  # version, last contained log timestamp


def build_kraft_control_batch(
    records: Sequence[tuple[ControlType, bytes]],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int,
    timestamp: int,
) -> bytes:
    """A control batch as KRaft writes one (LeaderChange, SnapshotHeader/Footer, KRaftVersion, Voters):
    uncompressed, CreateTime, no producer, not transactional; each record at `timestamp`."""
    if not records:
        raise ValueError("a control batch needs at least one record")
    for control, _ in records:
        if control in (ControlType.COMMIT, ControlType.ABORT, ControlType.UNKNOWN):
            raise ValueError(f"{control.name} is not a KRaft control record")
    return build_batch(
        [RecordSpec(timestamp, control_record_key(control), value) for control, value in records],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        is_control=True,
    )


def build_control_batch(
    control: ControlType,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int,
) -> bytes:
    """A transaction marker batch (COMMIT or ABORT): one record, uncompressed, transactional + control."""
    if control not in (ControlType.COMMIT, ControlType.ABORT):
        raise ValueError("only COMMIT and ABORT markers are built here")
    key = control_record_key(control)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [RecordSpec(timestamp, key, value)],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def leader_change_value(leader_id: int, voters: Sequence[int], granting_voters: Sequence[int]) -> bytes:
    """A LeaderChangeMessage v0 (flexible): what a new Raft leader writes first in its epoch.

    Version int16, LeaderId int32, Voters and GrantingVoters as compact arrays of {VoterId int32},
    each struct and the message ending in an empty tagged-field section.
    """

    out = bytearray(struct.pack(">hi", 0, leader_id))
    for ids in (voters, granting_voters):
        write_uvarint(out, len(ids) + 1)
        for voter_id in ids:
            out += struct.pack(">i", voter_id) + b"\0"
    out += b"\0"
    return bytes(out)


def read_leader_change(value: bytes) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader id, voters, granting voters) of a LeaderChangeMessage value (see leader_change_value)."""
    reader = Reader(value)
    try:
        reader.fixed(_INT16)  # the message's Version field
        leader_id = reader.fixed(_INT32)
        lists = []
        for _ in range(2):
            ids = []
            for _ in range(max(reader.compact_length(), 0)):
                ids.append(reader.fixed(_INT32))
                for _ in range(reader.uvarint()):  # tagged fields of the Voter struct
                    reader.uvarint()
                    reader.take(reader.uvarint())
            lists.append(tuple(ids))
    except Malformed as exc:
        raise CorruptRecordError(f"Invalid LeaderChange record: {exc.message}") from None
    return leader_id, lists[0], lists[1]


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT16 = struct.Struct(">H")
_UUID_BYTES = 16

KRAFT_VERSION_RECORD_VERSION = 0  # ControlRecordUtils.KRAFT_VERSION_CURRENT_VERSION
KRAFT_VOTERS_RECORD_VERSION = 0  # ControlRecordUtils.KRAFT_VOTERS_CURRENT_VERSION


class KRaftVoter(NamedTuple):
    """One voter of a VotersRecord (control type 6, KIP-853): its replica key (id, directory id as the
    16 UUID bytes), its endpoints as (listener name, host, port), and the kraft.version range it supports."""

    voter_id: int
    directory_id: bytes
    endpoints: tuple[tuple[str, str, int], ...]
    min_kraft_version: int = 0
    max_kraft_version: int = 1


def kraft_version_value(level: int, version: int = KRAFT_VERSION_RECORD_VERSION) -> bytes:
    """A KRaftVersionRecord v0 (flexible): int16 Version, int16 KRaftVersion, no tagged fields."""
    return struct.pack(">hh", version, level) + b"\0"


def read_kraft_version(value: bytes | memoryview) -> tuple[int, int]:
    """(record version, kraft.version level) of a KRaftVersionRecord value."""
    reader = Reader(value)
    try:
        version = reader.fixed(_INT16)
        level = reader.fixed(_INT16)
        _skip_tags(reader)
    except Malformed as exc:
        raise CorruptRecordError(f"Invalid KRaftVersion record: {exc.message}") from None
    return version, level


def voters_value(voters: Sequence[KRaftVoter], version: int = KRAFT_VOTERS_RECORD_VERSION) -> bytes:
    """A VotersRecord v0 (flexible): int16 Version, then compact array Voters of {int32 VoterId, uuid
    VoterDirectoryId, compact array Endpoints of {compact string Name, compact string Host, uint16 Port},
    struct KRaftVersionFeature {int16 MinSupportedVersion, int16 MaxSupportedVersion}}, each struct and
    the message ending in an empty tagged-field section."""
    out = bytearray(_INT16.pack(version))
    write_uvarint(out, len(voters) + 1)
    for voter in voters:
        if len(voter.directory_id) != _UUID_BYTES:
            raise ValueError("a voter's directory id is 16 bytes")
        out += _INT32.pack(voter.voter_id) + voter.directory_id
        write_uvarint(out, len(voter.endpoints) + 1)
        for name, host, port in voter.endpoints:
            for text in (name, host):
                write_compact_string(out, text)
            out += _UINT16.pack(port) + b"\0"
        out += struct.pack(">hh", voter.min_kraft_version, voter.max_kraft_version) + b"\0"
        out += b"\0"
    out += b"\0"
    return bytes(out)


def read_voters(value: bytes | memoryview) -> tuple[int, tuple[KRaftVoter, ...]]:
    """(record version, voters) of a VotersRecord value (see voters_value); unknown tags are skipped."""
    reader = Reader(value)
    try:
        version = reader.fixed(_INT16)
        voters = []
        for _ in range(max(reader.compact_length(), 0)):
            voter_id = reader.fixed(_INT32)
            directory_id = reader.take(_UUID_BYTES)
            endpoints = []
            for _ in range(max(reader.compact_length(), 0)):
                name = reader.take(max(reader.compact_length(), 0)).decode("utf-8", "replace")
                host = reader.take(max(reader.compact_length(), 0)).decode("utf-8", "replace")
                port = reader.fixed(_UINT16)
                _skip_tags(reader)
                endpoints.append((name, host, port))
            low, high = reader.fixed(_INT16), reader.fixed(_INT16)
            _skip_tags(reader)
            _skip_tags(reader)
            voters.append(KRaftVoter(voter_id, directory_id, tuple(endpoints), low, high))
        _skip_tags(reader)
    except Malformed as exc:
        raise CorruptRecordError(f"Invalid Voters record: {exc.message}") from None
    return version, tuple(voters)


def _skip_tags(reader: Reader) -> None:
    for _ in range(reader.uvarint()):
        reader.uvarint()
        reader.take(reader.uvarint())


def build_leader_change_batch(
    leader_id: int,
    voters: Sequence[int],
    granting_voters: Sequence[int],
    *,
    base_offset: int,
    leader_epoch: int,
    timestamp: int,
) -> bytes:
    """The LeaderChange control batch (control type 2): not transactional, no producer."""
    key = struct.pack(">hh", 0, int(ControlType.LEADER_CHANGE))
    return build_batch(
        [RecordSpec(timestamp, key, leader_change_value(leader_id, voters, granting_voters))],
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        is_control=True,
    )
