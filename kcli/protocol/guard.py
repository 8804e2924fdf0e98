"""Check the sizes a message declares before kio decodes it.

kio's native reader allocates an array of the declared length before reading its elements, and a
failed allocation aborts the process: 7 bytes claiming a 4-billion-entry topic array would kill
the broker. Kafka's generated readers refuse such input ("Tried to allocate a collection of size
N, but there are only M bytes remaining."); `check_sizes` applies the same rule by walking the
message layout described by kio's schema classes, without building any objects: every array,
string and bytes field must fit in the bytes that remain, and so must every tagged field.

A length of -1 (null) is taken only where the schema allows null (Kafka's `nullableVersions`, which
kio writes as `... | None`). kio's reader returns None for a null array whatever the schema says,
so a request with a null non-nullable array reached the handlers, which iterate it ("'NoneType'
object is not iterable"). Kafka's readers refuse it: "non-nullable field X was serialized as null".
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable
from functools import cache

from formats.wire import VarintError, read_uvarint, uvarint
from kcli.protocol.messages import unwrap_optional

Edits = list[tuple[int, int, bytes]]
"""(start, end, replacement) byte spans, applied by `without_unknown_tags`."""

Checker = Callable[[bytes, int, int, "Edits | None"], int]
"""(buffer, position, end, edits) -> position after the field; raises DeclaredSizeError.

`edits` collects unknown tagged fields to drop; None inside a tagged field, where dropping one
would change the enclosing tag's size (then an unknown tag is refused instead).
"""


class DeclaredSizeError(ValueError):
    """A length in the message that the message itself cannot hold, or a null its schema forbids."""


def check_sizes(
    entity_type: type, buffer: bytes, offset: int = 0, end: int | None = None
) -> tuple[int, Edits]:
    """Walk one `entity_type` message at `offset`; return where it ends and the unknown tagged
    fields found (Kafka skips those; kio refuses them), or raise DeclaredSizeError."""
    edits: Edits = []
    try:
        position = entity_checker(entity_type)(buffer, offset, len(buffer) if end is None else end, edits)
    except VarintError as exc:
        raise DeclaredSizeError(str(exc)) from None
    return position, edits


def skip_tagged_fields(buffer: bytes, offset: int, end: int) -> int:
    """Skip a tagged-fields section none of whose tags we know (a request header v2)."""
    try:
        return _check_tagged_fields(buffer, offset, end, {}, [])
    except VarintError as exc:
        raise DeclaredSizeError(str(exc)) from None


def without_unknown_tags(buffer: bytes, edits: Edits) -> bytes:
    """The buffer with unknown tagged fields removed and their sections' counts fixed."""
    out = bytearray()
    position = 0
    for start, end, replacement in sorted(edits):
        out += buffer[position:start]
        out += replacement
        position = end
    out += buffer[position:]
    return bytes(out)


@cache
def entity_checker(entity_type: type) -> Checker:
    flexible = bool(entity_type.__flexible__)  # type: ignore[attr-defined]
    steps: list[Checker] = []
    tagged: dict[int, Checker] = {}
    run: list[tuple[Checker, int]] = []  # consecutive fixed-size fields, checked as one span
    # Nested entities are looked up when first used, so compiling never recurses.
    is_request_header = entity_type.__name__ == "RequestHeader"
    for f in dataclasses.fields(entity_type):
        tag = f.metadata.get("tag")
        if tag is None and not (is_request_header and f.name == "client_id"):
            size = _FIXED_SIZES.get(f.metadata.get("kafka_type", ""))
            if size is not None and typing.get_origin(unwrap_optional(f.type)[0]) is not tuple:
                run.append((_field_checker(f, flexible, in_tag=False), size))
                continue
        if run:
            steps.append(_fixed_run(run))
            run = []
        if is_request_header and f.name == "client_id":
            steps.append(_primitive_checker("string", flexible=False, null_ok=True, name=f.name))  # legacy
        elif tag is None:
            steps.append(_field_checker(f, flexible, in_tag=False))
        else:
            tagged[int(tag)] = _field_checker(f, flexible, in_tag=True)
    if run:
        steps.append(_fixed_run(run))

    def check(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
        for step in steps:
            pos = step(buffer, pos, end, edits)
        if flexible:
            pos = _check_tagged_fields(buffer, pos, end, tagged, edits)
        return pos

    return check


# ---------------------------------------------------------------------------------------------------

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT8 = struct.Struct(">b")


def _field_checker(f: dataclasses.Field, flexible: bool, in_tag: bool) -> Checker:
    field_type, optional = unwrap_optional(f.type)
    if typing.get_origin(field_type) is tuple:
        (inner,) = typing.get_args(field_type)[:1]
        inner, _ = unwrap_optional(inner)
        if dataclasses.is_dataclass(inner):
            element = _deferred_entity(inner)  # type: ignore[arg-type]
            return _array_checker(element, flexible, 1, fixed=False, null_ok=optional, name=f.name)
        kafka_type = f.metadata["kafka_type"]
        size = _FIXED_SIZES.get(kafka_type)
        element = _primitive_checker(kafka_type, flexible, null_ok=False, name=f"an element of {f.name}")
        return _array_checker(
            element, flexible, size or 1, fixed=size is not None, null_ok=optional, name=f.name
        )
    if dataclasses.is_dataclass(field_type):
        entity = _deferred_entity(field_type)  # type: ignore[arg-type]
        return _nullable_entity(entity) if optional and not in_tag else entity
    return _primitive_checker(f.metadata["kafka_type"], flexible, null_ok=optional, name=f.name)


def _fixed_run(run: list[tuple[Checker, int]]) -> Checker:
    """Fixed-size fields in a row: one bounds check for all; when they do not fit, the field by field
    checks say which one is cut."""
    if len(run) == 1:
        return run[0][0]
    checkers = tuple(checker for checker, _ in run)
    total = sum(size for _, size in run)

    def check(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
        if pos + total <= end:
            return pos + total
        for checker in checkers:
            pos = checker(buffer, pos, end, edits)
        return pos

    return check


def _deferred_entity(entity_type: type) -> Checker:
    """The entity's checker, compiled on first use (so compiling never recurses) and kept."""
    compiled: list[Checker] = []

    def check(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
        if not compiled:
            compiled.append(entity_checker(entity_type))
        return compiled[0](buffer, pos, end, edits)

    return check


def _nullable_entity(entity: Checker) -> Checker:
    def check(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
        _need(pos, 1, end, "a nullable struct marker")
        if _INT8.unpack_from(buffer, pos)[0] < 0:
            return pos + 1
        return entity(buffer, pos + 1, end, edits)

    return check


def _primitive_checker(kafka_type: str, flexible: bool, *, null_ok: bool, name: str) -> Checker:
    """A fixed-size field, or a string/bytes/records field whose -1 length is refused unless `null_ok`."""
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:

        def fixed(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
            _need(pos, size, end, kafka_type)
            return pos + size

        return fixed
    if kafka_type not in ("string", "bytes", "records"):
        raise LookupError(f"no size rule for kafka_type {kafka_type!r}")
    if flexible:

        def compact(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
            if pos < end and buffer[pos] < 0x80:  # a one-byte length, the common case
                length_plus_one = buffer[pos]
                pos += 1
            else:
                length_plus_one, pos = read_uvarint(buffer, pos, end)
            length = length_plus_one - 1
            if length > 0:
                _need(pos, length, end, f"a {kafka_type} of {length} bytes")
                pos += length
            elif length < 0 and not null_ok:
                raise DeclaredSizeError(_null_message(name))
            return pos

        return compact
    if kafka_type == "string":

        def legacy_string(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
            _need(pos, 2, end, "a string length")
            (length,) = _INT16.unpack_from(buffer, pos)
            if length < 0:
                if length < -1:
                    raise DeclaredSizeError(f"string length {length} is negative")
                if not null_ok:
                    raise DeclaredSizeError(_null_message(name))
            pos += 2
            if length > 0:
                _need(pos, length, end, f"a string of {length} bytes")
                pos += length
            return pos

        return legacy_string

    def legacy_bytes(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
        _need(pos, 4, end, "a bytes length")
        (length,) = _INT32.unpack_from(buffer, pos)
        if length < 0:
            if length < -1:
                raise DeclaredSizeError(f"bytes length {length} is negative")
            if not null_ok:
                raise DeclaredSizeError(_null_message(name))
        pos += 4
        if length > 0:
            _need(pos, length, end, f"{kafka_type} of {length} bytes")
            pos += length
        return pos

    return legacy_bytes


def _array_checker(
    element: Checker, flexible: bool, min_size: int, *, fixed: bool, null_ok: bool, name: str
) -> Checker:
    """Kafka's rules: a declared count larger than the bytes left is refused before anything else, and
    a null (-1) count unless the field is nullable."""
    null_message = _null_message(name)

    def check(buffer: bytes, pos: int, end: int, edits: Edits | None) -> int:
        if flexible:
            if pos < end and buffer[pos] < 0x80:  # a one-byte count, the common case
                count = buffer[pos] - 1
                pos += 1
            else:
                count_plus_one, pos = read_uvarint(buffer, pos, end)
                count = count_plus_one - 1
        else:
            _need(pos, 4, end, "an array length")
            (count,) = _INT32.unpack_from(buffer, pos)
            pos += 4
            if count < -1:
                raise DeclaredSizeError(f"array length {count} is negative")
        if count <= 0:
            if count < 0 and not null_ok:
                raise DeclaredSizeError(null_message)
            return pos
        remaining = end - pos
        if count > remaining or count * min_size > remaining:
            raise DeclaredSizeError(
                f"Tried to allocate a collection of size {count}, but there are only {remaining} bytes remaining"
            )
        if fixed:
            return pos + count * min_size
        for _ in range(count):
            pos = element(buffer, pos, end, edits)
        return pos

    return check


def _check_tagged_fields(
    buffer: bytes, pos: int, end: int, known: dict[int, Checker], edits: Edits | None
) -> int:
    if pos < end and buffer[pos] == 0:  # no tagged fields, the common case
        return pos + 1
    section_start = pos
    count, pos = read_uvarint(buffer, pos, end)
    count_end = pos
    if count > end - pos:
        raise DeclaredSizeError(f"{count} tagged fields cannot fit in {end - pos} bytes")
    kept = 0
    unknown: list[tuple[int, int]] = []
    for _ in range(count):
        tag_start = pos
        tag, pos = read_uvarint(buffer, pos, end)
        size, pos = read_uvarint(buffer, pos, end)
        _need(pos, size, end, f"tagged field {tag} of {size} bytes")
        checker = known.get(tag)
        if checker is not None:
            checker(buffer, pos, pos + size, None)
            kept += 1
        else:
            unknown.append((tag_start, pos + size))
        pos += size
    if unknown:
        if edits is None:
            raise DeclaredSizeError("an unknown tagged field inside a tagged field cannot be skipped")
        edits.append((section_start, count_end, uvarint(kept)))
        edits.extend((start, stop, b"") for start, stop in unknown)
    return pos


def _null_message(name: str) -> str:
    return f"non-nullable field {name} was serialized as null"  # Kafka's sentence


def _need(pos: int, size: int, end: int, what: str) -> None:
    if pos + size > end:
        raise DeclaredSizeError(f"the message ends before {what} ({end - pos} bytes remain)")
