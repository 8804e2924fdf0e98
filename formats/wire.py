"""Kafka's wire primitives, one set for every codec: unsigned varints, the lengths of arrays and the
nullable strings of flexible (compact) and older (fixed-width) versions, tagged-field sections.

They live at the bottom because the bottom needs them: the control records and internal-topic values
in `formats` are Kafka messages too, and `kcli.protocol` (which may import `formats`) writes and reads
requests and responses with the same ones. Sans-I/O: writers append to a `bytearray` (`uvarint` gives
the bytes), readers take a buffer and a position and give back (value, position after).

The hot paths call these per field, so the common case goes first and costs one comparison: a length
or count below 128 is one byte.
"""

from __future__ import annotations

import struct

Buffer = bytes | bytearray | memoryview


class WireError(ValueError):
    """Bytes that cannot hold what they declare: a length past their end, a broken varint."""


class VarintError(WireError):
    """A varint the buffer cannot hold: it ends inside one (`truncated`), or one is longer than 5 bytes.
    Each codec reports it in its own words (guard.DeclaredSizeError, internal.codec.Malformed ...)."""

    def __init__(self, truncated: bool) -> None:
        super().__init__(TRUNCATED_VARINT if truncated else LONG_VARINT)
        self.truncated = truncated


TRUNCATED_VARINT = "the message ends inside a varint"
LONG_VARINT = "a varint is longer than 5 bytes"


# --- varints --------------------------------------------------------------------------------------------


def write_uvarint(out: bytearray, value: int) -> None:
    """Kafka's unsigned varint (lengths and counts of flexible versions), appended to `out`: seven bits a
    byte, low bits first, the high bit set on all but the last."""
    if value < 0x80:  # the common case: one byte
        out.append(value)
        return
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint(value: int) -> bytes:
    """`write_uvarint` as bytes; a value below 128 (nearly every length and count) costs no allocation."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def read_uvarint(buffer: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at `pos` (at most 5 bytes, before `end`) and the position after it."""
    result = 0
    for shift in (0, 7, 14, 21, 28):
        if pos >= end:
            raise VarintError(truncated=True)
        byte = buffer[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
    raise VarintError(truncated=False)


# --- arrays and strings ---------------------------------------------------------------------------------


def write_array_length(out: bytearray, count: int, flexible: bool) -> None:
    """An array's length: a compact one (count + 1, 0 for null = -1) or an int32."""
    if flexible:
        write_uvarint(out, count + 1)
    else:
        out += _INT32(count)


def read_array_length(buffer: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length (-1 for null) and the position after it."""
    if flexible:
        length, pos = read_uvarint(buffer, pos, len(buffer))
        return length - 1, pos
    return _INT32_FROM(buffer, pos)[0], pos + 4


def write_compact_string(out: bytearray, value: str | bytes | None) -> None:
    """A compact nullable string (or bytes): its length + 1 as a varint, 0 for null, then the bytes."""
    if value is None:
        out.append(0)
        return
    data = value.encode() if isinstance(value, str) else value
    size = len(data) + 1
    if size < 0x80:
        out.append(size)
    else:
        write_uvarint(out, size)
    out += data


def write_legacy_string(out: bytearray, value: str | None) -> None:
    """A nullable string of a non-flexible version: an int16 length, -1 for null, then UTF-8."""
    if value is None:
        out += b"\xff\xff"
        return
    data = value.encode()
    out += _INT16(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    """A nullable string, compact in flexible versions."""
    if flexible:
        write_compact_string(out, value)
    else:
        write_legacy_string(out, value)


def read_nullable_string(buffer: Buffer, pos: int, flexible: bool) -> tuple[str | None, int]:
    """A nullable string (compact in flexible versions) and the position after it; WireError when it
    runs past the buffer."""
    if flexible:
        length, pos = read_uvarint(buffer, pos, len(buffer))
        length -= 1
    else:
        (length,) = _INT16_FROM(buffer, pos)
        pos += 2
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buffer):
        raise WireError("the string runs past the frame")
    return bytes(buffer[pos:end]).decode(), end


# --- tagged fields --------------------------------------------------------------------------------------


def skip_tagged_fields(buffer: Buffer, pos: int, end: int) -> int:
    """The position after a tagged-field section whose fields are not read; WireError when one runs
    past `end`."""
    if pos < end and buffer[pos] == 0:  # no tagged fields, the common case
        return pos + 1
    count, pos = read_uvarint(buffer, pos, end)
    for _ in range(count):
        _, pos = read_uvarint(buffer, pos, end)  # tag
        size, pos = read_uvarint(buffer, pos, end)
        pos += size
    if pos > end:
        raise WireError("a tagged field runs past the frame")
    return pos


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]
_INT16 = struct.Struct(">h").pack
_INT32 = struct.Struct(">i").pack
_INT16_FROM = struct.Struct(">h").unpack_from
_INT32_FROM = struct.Struct(">i").unpack_from
