"""Kafka's "generated message" encoding, driven by the tables in `formats.internal.schemas`.

Non-flexible versions use int16-length strings and int32-length bytes and arrays; flexible versions
use compact lengths (uvarint of length + 1, 0 for null) and end every struct with tagged fields.
Reading follows Kafka's generated readers, including their error wording; writing follows the
generated writers (tagged fields in tag order, only when not default). The JSON half renders decoded
data as Kafka's generated JsonConverters do and prints it as Jackson's JsonNode.toString does.
Everything here is internal to `formats.internal`.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from formats.errors import FormatError
from formats.internal.schemas import Field, Schema
from formats.wire import VarintError, read_uvarint, write_uvarint


class Malformed(Exception):
    """Bytes that do not follow a schema; `message` is the sentence to show, `kafka_message` Kafka's own."""

    def __init__(self, message: str, kafka_message: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kafka_message = kafka_message if kafka_message is not None else message


INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
_UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")
_UUID = struct.Struct(">16s")

_FIXED: dict[str, struct.Struct] = {
    "bool": INT8,
    "int8": INT8,
    "int16": INT16,
    "uint16": _UINT16,
    "int32": INT32,
    "uint32": _UINT32,
    "int64": _INT64,
    "float64": _FLOAT64,
}


class Reader:
    """A cursor over a buffer whose reads fail with Kafka's wording when bytes run out."""

    __slots__ = ("_buf", "_end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._buf = data
        self._end = len(data)
        self.pos = 0

    def remaining(self) -> int:
        return self._end - self.pos

    def fixed(self, codec: struct.Struct) -> Any:
        pos = self.pos
        if pos + codec.size > self._end:
            raise Malformed(
                f"Not enough bytes to read a {codec.size}-byte value: only {self._end - pos} byte(s) available"
            )
        self.pos = pos + codec.size
        return codec.unpack_from(self._buf, pos)[0]

    def take(self, size: int) -> bytes:
        remaining = self._end - self.pos
        if size > remaining:
            raise Malformed(f"Error reading byte array of {size} byte(s): only {remaining} byte(s) available")
        start = self.pos
        self.pos = start + size
        return bytes(self._buf[start : self.pos])

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes, wrapped to 32 bits as Java's int would be."""
        try:
            value, self.pos = read_uvarint(self._buf, self.pos, self._end)
        except VarintError as exc:
            raise Malformed(
                "Not enough bytes to read an unsigned varint"
                if exc.truncated
                else "Varint is too long, the most significant bit in the 5th byte is set"
            ) from None
        return value & 0xFFFFFFFF

    def compact_length(self) -> int:
        """A compact length (uvarint of length + 1), as Java computes it with ints: -1 means null."""
        return signed32(signed32(self.uvarint()) - 1)


def sentence(message: str) -> str:
    """Kafka's inner messages have no final period; ours are sentences."""
    return message if message.endswith(".") else message + "."


def signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value >= 0x80000000 else value


def read_version(reader: Reader, name: str) -> int:
    try:
        return reader.fixed(INT16)
    except Malformed:
        raise Malformed(f"Could not read version from {name}'s buffer.") from None


def read_message(schema: Schema, version: int, reader: Reader, name: str) -> dict[str, Any]:
    """Read one coordinator message, wrapping failures the way CoordinatorRecordSerde words them."""
    effective = effective_version(schema, version)
    try:
        return read_struct(schema.fields, effective, effective in schema.flexible, reader)
    except Malformed as e:
        raise Malformed(
            f"Could not read record with version {version} from {name}'s buffer due to: {e.message}."
        ) from None


def effective_version(schema: Schema, version: int) -> int:
    """The version whose layout Kafka's generated reader uses: versions past either end read as that end."""
    return min(max(version, schema.valid.lowest), schema.valid.highest)


def read_struct(fields: tuple[Field, ...], version: int, flexible: bool, reader: Reader) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for field in fields:
        if version not in field.versions:
            continue
        if version in field.tagged:
            data[field.name] = field.default
        else:
            data[field.name] = _read_field(field, version, flexible, reader, False)
    if flexible:
        for _ in range(signed32(reader.uvarint())):
            tag = signed32(reader.uvarint())
            size = signed32(reader.uvarint())
            field = _tagged_field(fields, tag)
            if field is None:
                if size < 0:
                    raise Malformed(f"Tagged field {tag} has a negative size {size}")
                reader.take(size)  # an unknown tagged field: skipped, as Kafka keeps it opaque
                continue
            if version not in field.tagged.intersect(field.versions):
                raise Malformed(f"Tag {tag} is not valid for version {version}")
            data[field.name] = _read_field(field, version, True, reader, True)
    return data


def _tagged_field(fields: tuple[Field, ...], tag: int) -> Field | None:
    for field in fields:
        if field.tag == tag:
            return field
    return None


def _read_field(field: Field, version: int, flexible: bool, reader: Reader, tagged: bool) -> Any:
    if field.is_array:
        length = reader.compact_length() if flexible else reader.fixed(INT32)
        if length < 0:
            return _null(field, version)
        if length > reader.remaining():
            raise Malformed(
                f"Tried to allocate a collection of size {length}, but there are only "
                f"{reader.remaining()} bytes remaining."
            )
        return tuple(_read_element(field, version, flexible, reader) for _ in range(length))
    if field.type == "struct":
        if version in field.nullable:
            present = signed32(reader.uvarint()) > 0 if tagged else reader.fixed(INT8) >= 0
            if not present:
                return None
        return read_struct(field.fields, version, flexible, reader)
    if field.type in ("string", "bytes"):
        return _read_variable(field.type, field.name, version in field.nullable, flexible, reader)
    return _read_primitive(field.type, reader)


def _read_element(field: Field, version: int, flexible: bool, reader: Reader) -> Any:
    if field.type == "struct":
        return read_struct(field.fields, version, flexible, reader)
    if field.type in ("string", "bytes"):
        return _read_variable(field.type, field.name + " element", False, flexible, reader)
    return _read_primitive(field.type, reader)


def _read_variable(kind: str, name: str, nullable: bool, flexible: bool, reader: Reader) -> Any:
    if flexible:
        length = reader.compact_length()
    else:
        length = reader.fixed(INT16 if kind == "string" else INT32)
    if length < 0:
        if nullable:
            return None
        raise Malformed(f"non-nullable field {name} was serialized as null")
    if kind == "bytes":
        return reader.take(length)
    if length > 0x7FFF:
        raise Malformed(f"string field {name} had invalid length {length}")
    # Java's new String(bytes, UTF_8) replaces malformed input rather than failing; so do we.
    return reader.take(length).decode("utf-8", "replace")


def _read_primitive(kind: str, reader: Reader) -> Any:
    if kind == "uuid":
        return UUID(bytes=reader.fixed(_UUID))
    value = reader.fixed(_FIXED[kind])
    return value != 0 if kind == "bool" else value


def _null(field: Field, version: int) -> None:
    if version in field.nullable:
        return None
    raise Malformed(f"non-nullable field {field.name} was serialized as null")


# --- writing ------------------------------------------------------------------------------------------------


def encode_prefixed(schema: Schema, version: int, data: Mapping[str, Any]) -> bytes:
    """Kafka's MessageUtil.toVersionPrefixedBytes: int16 version, then the message."""
    if version not in schema.valid:
        raise FormatError(f"{schema.name} has no version {version}; its versions are {schema.valid}.")
    out = bytearray(INT16.pack(version))
    write_struct(schema.fields, version, version in schema.flexible, data, out, schema.name)
    return bytes(out)


def write_struct(
    fields: tuple[Field, ...],
    version: int,
    flexible: bool,
    data: Mapping[str, Any],
    out: bytearray,
    where: str,
) -> None:
    if not isinstance(data, Mapping):
        raise FormatError(f"{where} must be a mapping of field names to values, not {type(data).__name__}.")
    known = {field.name for field in fields}
    for name in data:
        if name not in known:
            raise FormatError(f"{where} has no field named {name!r}.")
    tagged: list[tuple[int, bytes]] = []
    for field in fields:
        value = _normalise(field, data.get(field.name, field.default))
        if version not in field.versions:
            if not field.ignorable and value != field.default:
                raise FormatError(
                    f"Attempted to write a non-default {field.name} at version {version} of {where}."
                )
            continue
        if version in field.tagged:
            if value != field.default:
                payload = bytearray()
                _write_field(field, version, True, value, payload, where, tagged=True)
                tagged.append((field.tag or 0, bytes(payload)))
            continue
        _write_field(field, version, flexible, value, out, where, tagged=False)
    if flexible:
        write_uvarint32(out, len(tagged))
        for tag, payload in sorted(tagged):
            write_uvarint32(out, tag)
            write_uvarint32(out, len(payload))
            out += payload
    elif tagged:
        raise FormatError(f"Tagged fields were set, but version {version} of {where} does not support them.")


def _normalise(field: Field, value: Any) -> Any:
    """Arrays as tuples, so that comparing with a field's default means what Kafka's checks mean."""
    if field.is_array and value is not None and not isinstance(value, tuple):
        if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
            raise FormatError(f"Field {field.name} must be a sequence, not {type(value).__name__}.")
        return tuple(value)
    return value


def _write_field(
    field: Field, version: int, flexible: bool, value: Any, out: bytearray, where: str, *, tagged: bool
) -> None:
    if value is None:
        if version not in field.nullable:
            raise FormatError(f"Field {field.name} of {where} is not nullable at version {version}.")
        if field.type == "struct" and not field.is_array:
            out += b"\x00" if tagged else b"\xff"
        elif flexible:
            out += b"\x00"
        else:
            out += b"\xff\xff" if field.type == "string" and not field.is_array else b"\xff\xff\xff\xff"
        return
    if field.is_array:
        if flexible:
            write_uvarint32(out, len(value) + 1)
        else:
            out += INT32.pack(len(value))
        for element in value:
            _write_element(field, version, flexible, element, out, where)
        return
    if field.type == "struct":
        if version in field.nullable:
            out += b"\x01"
        write_struct(field.fields, version, flexible, value, out, f"{where}.{field.name}")
        return
    _write_element(field, version, flexible, value, out, where)


def _write_element(
    field: Field, version: int, flexible: bool, value: Any, out: bytearray, where: str
) -> None:
    kind = field.type
    if kind == "struct":
        write_struct(field.fields, version, flexible, value, out, f"{where}.{field.name}")
    elif kind == "string":
        if not isinstance(value, str):
            raise FormatError(f"Field {field.name} of {where} must be a string, not {type(value).__name__}.")
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError:
            raise FormatError(f"Field {field.name} of {where} is not valid Unicode text.") from None
        if len(raw) > 0x7FFF:  # any version: Kafka's readers refuse a longer string, compact or not
            raise FormatError(f"'{field.name}' field is too long to be serialized")
        if flexible:
            write_uvarint32(out, len(raw) + 1)
        else:
            out += INT16.pack(len(raw))
        out += raw
    elif kind == "bytes":
        if not isinstance(value, bytes | bytearray | memoryview):
            raise FormatError(f"Field {field.name} of {where} must be bytes, not {type(value).__name__}.")
        raw = bytes(value)
        if flexible:
            write_uvarint32(out, len(raw) + 1)
        else:
            out += INT32.pack(len(raw))
        out += raw
    elif kind == "uuid":
        if not isinstance(value, UUID):
            raise FormatError(
                f"Field {field.name} of {where} must be a uuid.UUID, not {type(value).__name__}."
            )
        out += value.bytes
    elif kind == "bool":
        if not isinstance(value, bool):
            raise FormatError(f"Field {field.name} of {where} must be a bool, not {type(value).__name__}.")
        out += b"\x01" if value else b"\x00"
    elif kind == "float64":
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise FormatError(f"Field {field.name} of {where} must be a number, not {type(value).__name__}.")
        out += _FLOAT64.pack(value)
    else:
        if not isinstance(value, int) or isinstance(value, bool):
            raise FormatError(
                f"Field {field.name} of {where} must be an integer, not {type(value).__name__}."
            )
        try:
            out += _FIXED[kind].pack(value)
        except struct.error:
            raise FormatError(f"Field {field.name} of {where} is out of range for {kind}: {value}.") from None


def write_uvarint32(out: bytearray, value: int) -> None:
    """`formats.wire.write_uvarint` for a value an unsigned 32-bit varint holds (Java's readers take no
    more); FormatError for any other, as these values come from users' records."""
    if value < 0 or value > 0xFFFFFFFF:
        raise FormatError(f"{value} cannot be written as an unsigned varint.")
    write_uvarint(out, value)


# --- JSON as Kafka's JsonConverters and Jackson print it -------------------------------------------------------


def json_tree(schema: Schema, version: int, data: Mapping[str, Any]) -> dict[str, Any]:
    return _json_struct(schema.fields, effective_version(schema, version), data)


def _json_struct(fields: tuple[Field, ...], version: int, data: Mapping[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for field in fields:
        if version not in field.versions:
            continue
        value = data.get(field.name, field.default)
        if version in field.tagged and value == field.default:
            continue  # tagged fields are written only when not default
        node[field.name] = _json_value(field, version, value)
    return node


def _json_value(field: Field, version: int, value: Any) -> Any:
    if value is None:
        return None
    if field.is_array:
        return [_json_scalar(field, version, element) for element in value]
    return _json_scalar(field, version, value)


def _json_scalar(field: Field, version: int, value: Any) -> Any:
    if field.type == "struct":
        return _json_struct(field.fields, version, value)
    if field.type == "uuid":
        return kafka_uuid(value)
    if field.type == "bytes":
        return base64.b64encode(value).decode("ascii")
    return value


def kafka_uuid(value: UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_JSON_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def json_string(text: str) -> str:
    """Jackson's escaping: quote, backslash and control characters; \\u00XX in upper-case hex; no ASCII-only."""
    return (
        '"' + _JSON_NEEDS_ESCAPE.sub(lambda m: _JSON_ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04X}", text) + '"'
    )


def dumps(value: Any) -> str:
    """Compact JSON the way Jackson's JsonNode.toString writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json_string(k)}:{dumps(v)}" for k, v in value.items()) + "}"
    return "[" + ",".join(dumps(v) for v in value) + "]"


def java_double(value: float) -> str:
    """Java's Double.toString (shortest digits): 1.0E7, 100.0, 0.001, 1.0E-4; NaN/Infinity quoted by Jackson."""
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    if len(digit_tuple) == 1:
        # Java prints at least two digits and picks the two-digit decimal closest to the exact value,
        # which differs from "d.0" only for the sparsest subnormals (4.9E-324).
        two_digits = f"{Decimal(abs(value)):.1e}"
        if float(two_digits) == abs(value):
            _, digit_tuple, exponent = Decimal(two_digits).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    exponent = int(exponent) + len(digit_tuple) - len(digits)
    point = len(digits) + exponent  # value = 0.digits * 10**point
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"
