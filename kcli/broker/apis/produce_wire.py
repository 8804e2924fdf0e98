"""ProduceRequest and ProduceResponse bytes, read and written by hand (v3-v13).

Produce is the one request whose body is almost all record bytes, and the one a busy broker answers
thousands of times a second. Through kio, each request copies its records into new bytes objects and
builds a dataclass per topic and partition, and each answer builds three levels of dataclasses to
encode a few integers: a fifth of the broker's time per 16 KiB batch. Read here, the records stay
views of the request frame; an answer in which no partition carries record errors or a new leader is
packed in one pass. Other answers still go through kio.

The layouts are Kafka's ProduceRequest.json / ProduceResponse.json: flexible from v9 (compact
strings, arrays and bytes, tagged fields), topics named by id from v13.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

FIRST_FLEXIBLE_VERSION = 9
FIRST_TOPIC_ID_VERSION = 13


class PartitionProduceData(NamedTuple):
    index: int
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str | None  # up to v12
    topic_id: uuid.UUID | None  # from v13; the zero id reads as None, as kio reads it
    partition_data: tuple[PartitionProduceData, ...]


class ProduceRequest(NamedTuple):
    """The fields of a ProduceRequest with kio's names, so the handler reads either kind alike."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


class MalformedRequest(ValueError):
    """The body does not follow the schema of its version; the connection is closed."""


def read_produce_request(frame: bytes, offset: int, version: int) -> ProduceRequest:
    """Parse the body of a ProduceRequest that starts at `offset` of `frame`.

    Unknown tagged fields are skipped and bytes after the body ignored, as Kafka does. Raises
    MalformedRequest for a body that ends early, declares an impossible length or holds a string that is
    not UTF-8.
    """
    try:
        return _read_request(frame, offset, version >= FIRST_FLEXIBLE_VERSION, version)
    except (struct.error, IndexError):
        raise MalformedRequest("the body ends early") from None
    except UnicodeDecodeError:
        raise MalformedRequest("a string is not UTF-8") from None


def write_produce_response(version: int, results: list[tuple[Any, list[tuple[int, Any]]]]) -> bytes | None:
    """The ProduceResponse body for `results` ((topic name or id, [(partition index, Outcome)]) in order).

    None when an outcome carries record errors, an error message or a current leader: those answers are
    rare and go through kio.
    """
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    out = bytearray(_array_length(len(results), flexible))
    for key, outcomes in results:
        if by_id:
            out += _NULL_UUID if key is None else key.bytes
        else:
            out += _string(key, flexible)
        out += _array_length(len(outcomes), flexible)
        for index, outcome in outcomes:
            if (
                outcome.record_errors
                or outcome.error_message is not None
                or outcome.current_leader is not None
            ):
                return None
            if version >= 5:
                out += _PARTITION.pack(
                    index,
                    outcome.error,
                    outcome.base_offset,
                    outcome.log_append_time,
                    outcome.log_start_offset,
                )
            else:
                out += _PARTITION_V3.pack(index, outcome.error, outcome.base_offset, outcome.log_append_time)
            if version >= 8:  # no record errors, a null error message
                out += b"\x01\x00\x00" if flexible else b"\x00\x00\x00\x00\xff\xff"
        if flexible:
            out += b"\x00"  # no tagged fields: the current leader is left out when it is the default
    out += b"\x00\x00\x00\x00"  # throttle time
    if flexible:
        out += b"\x00"  # no node endpoints
    return bytes(out)


# ---------------------------------------------------------------------------------------------------

_INT16 = struct.Struct(">h")
_ACKS_TIMEOUT = struct.Struct(">hi")
_INT32 = struct.Struct(">i")
_INT32_INT32 = struct.Struct(">ii")
_PARTITION = struct.Struct(">ihqqq")
_PARTITION_V3 = struct.Struct(">ihqq")  # v3-v4: no log start offset
_NULL_UUID = bytes(16)
_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def _read_request(frame: bytes, position: int, flexible: bool, version: int) -> ProduceRequest:
    """Field by field; a frame that ends early raises IndexError or struct.error, reported by the caller.

    Written for speed: a one-byte compact length is read in place, as nearly every length is.
    """
    size = len(frame)
    view = memoryview(frame)
    if flexible:
        length = frame[position] - 1
        position += 1
        if length >= 0x7F:
            length, position = _uvarint_at(frame, position - 1)
            length -= 1
    else:
        (length,) = _INT16.unpack_from(frame, position)
        position += 2
    transactional_id = None
    if length >= 0:
        if position + length > size:
            raise IndexError(position)
        transactional_id = frame[position : position + length].decode()
        position += length
    elif length < -1:
        raise MalformedRequest(f"the transactional id has the negative length {length}")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, position)
    topic_count, position = _count(frame, position + 6, flexible)
    topics = []
    for _ in range(topic_count):
        name = topic_id = None
        if version >= FIRST_TOPIC_ID_VERSION:
            raw = frame[position : position + 16]
            if len(raw) != 16:
                raise IndexError(position)
            position += 16
            if raw != _NULL_UUID:
                topic_id = uuid.UUID(bytes=raw)
        else:
            length, position = _count(frame, position, flexible, _INT16)
            if position + length > size:
                raise IndexError(position)
            name = frame[position : position + length].decode()
            position += length
        partition_count, position = _count(frame, position, flexible)
        partitions = []
        for _ in range(partition_count):
            if flexible:
                (index,) = _INT32.unpack_from(frame, position)
                length = frame[position + 4] - 1
                position += 5
                if length >= 0x7F:
                    length, position = _uvarint_at(frame, position - 1)
                    length -= 1
            else:
                index, length = _INT32_INT32.unpack_from(frame, position)
                position += 8
            records = None
            if length >= 0:
                if position + length > size:
                    raise IndexError(position)
                records = view[position : position + length]
                position += length
            elif length < -1:
                raise MalformedRequest(f"the records of partition {index} have the negative length {length}")
            if flexible:
                position = _skip_tagged_fields(frame, position)
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            position = _skip_tagged_fields(frame, position)
        topics.append(TopicProduceData(name, topic_id, tuple(partitions)))
    if flexible:
        _skip_tagged_fields(frame, position)
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))


def _count(frame: bytes, position: int, flexible: bool, fixed: struct.Struct = _INT32) -> tuple[int, int]:
    """An array count or a non-nullable string length, and the position after it."""
    if flexible:
        value, position = _uvarint_at(frame, position)
        value -= 1
    else:
        (value,) = fixed.unpack_from(frame, position)
        position += fixed.size
    if value < 0:
        raise MalformedRequest(
            f"a length or count before byte {position} is {'null' if value == -1 else value}"
        )
    return value, position


def _uvarint_at(frame: bytes, position: int) -> tuple[int, int]:
    byte = frame[position]
    if byte < 0x80:
        return byte, position + 1
    value, shift = byte & 0x7F, 7
    while True:
        position += 1
        byte = frame[position]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position + 1
        shift += 7
        if shift > 28:
            raise MalformedRequest(f"a varint at byte {position} is longer than 5 bytes")


def _skip_tagged_fields(frame: bytes, position: int) -> int:
    count, position = _uvarint_at(frame, position)
    for _ in range(count):
        _, position = _uvarint_at(frame, position)
        size, position = _uvarint_at(frame, position)
        position += size
        if position > len(frame):
            raise IndexError(position)
    return position


def _array_length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _INT32.pack(count)


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode("utf-8")
    return (_uvarint(len(data) + 1) if flexible else _INT16.pack(len(data))) + data


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
