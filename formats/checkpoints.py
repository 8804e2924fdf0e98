"""The small text files next to the segments: checkpoints, ``partition.metadata``, ``meta.properties``.

Readers take the decoded text of a file and return values; writers return the text to write (the
caller writes ``<name>.tmp``, fsyncs and renames, as Kafka does). Parsing follows Kafka's
``CheckpointFile``, ``PartitionMetadataReadBuffer``, ``MetaProperties`` and Java's ``Properties``
closely enough that a file Kafka accepts is accepted here and a file Kafka rejects is rejected,
with Kafka's sentence (file paths left for the caller to add).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple, TypeVar

from formats.errors import CheckpointError

__all__ = [
    "CHECKPOINT_VERSION",
    "EpochEntry",
    "MetaProperties",
    "PartitionMetadata",
    "parse_java_properties",
    "read_clean_shutdown",
    "read_leader_epoch_checkpoint",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "uuid_from_base64",
    "uuid_to_base64",
    "write_clean_shutdown",
    "write_leader_epoch_checkpoint",
    "write_meta_properties",
    "write_offset_checkpoint",
    "write_partition_metadata",
]

CHECKPOINT_VERSION = 0
"""Version of every offset checkpoint and of ``leader-epoch-checkpoint``."""

PARTITION_METADATA_VERSION = 0

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

# Java's regex \s is ASCII only: space, \t, \n, \x0b, \f, \r.
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
# BufferedReader.readLine ends a line at \n, \r or \r\n and at nothing else.
_LINE_TERMINATOR = re.compile(r"\r\n|\r|\n")

T = TypeVar("T")


# --- offset checkpoints and leader-epoch-checkpoint ----------------------------------------------


class EpochEntry(NamedTuple):
    """One ``leader-epoch-checkpoint`` line: leader ``epoch`` started at ``start_offset``."""

    epoch: int
    start_offset: int


def read_offset_checkpoint(text: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from an offset checkpoint file.

    One format serves recovery-point-offset-checkpoint, replication-offset-checkpoint,
    log-start-offset-checkpoint and cleaner-offset-checkpoint; an empty file means no entries.
    """
    return dict(_read_checkpoint(text, _parse_offset_line))


def write_offset_checkpoint(entries: Mapping[tuple[str, int], int]) -> str:
    """The text of an offset checkpoint file, entries sorted by topic then partition."""
    lines = []
    for (topic, partition), offset in sorted(entries.items()):
        if not topic or _JAVA_WHITESPACE.search(topic):
            raise ValueError(f"Topic name {topic!r} cannot be written to a checkpoint file")
        _check_range(partition, _INT32, "partition")
        _check_range(offset, _INT64, "offset")
        lines.append(f"{topic} {partition} {offset}")
    return _write_checkpoint(lines)


def read_leader_epoch_checkpoint(text: str) -> list[EpochEntry]:
    """The epoch entries of a ``leader-epoch-checkpoint`` file, in file order."""
    return _read_checkpoint(text, _parse_epoch_line)


def write_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> str:
    """The text of a ``leader-epoch-checkpoint`` file, entries in the given (ascending) order."""
    lines = []
    for epoch, start_offset in entries:
        _check_range(epoch, _INT32, "epoch")
        _check_range(start_offset, _INT64, "start offset")
        lines.append(f"{epoch} {start_offset}")
    return _write_checkpoint(lines)


def _read_checkpoint(text: str, parse_entry: Callable[[str], T | None]) -> list[T]:
    """Kafka's ``CheckpointReadBuffer.read``: version line, count line, then one entry per line."""
    lines = _java_lines(text)
    if not lines:
        return []
    version = _parse_count_or_version(lines[0])
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"Unrecognised version:{version}, expected version: {CHECKPOINT_VERSION} in checkpoint file"
        )
    if len(lines) == 1:
        return []
    expected_size = _parse_count_or_version(lines[1])
    entries = []
    for line in lines[2:]:
        entry = parse_entry(line)
        if entry is None:
            raise _malformed_line(line)
        entries.append(entry)
    if len(entries) != expected_size:
        raise CheckpointError(
            f"Expected [{expected_size}] entries in checkpoint file, but found only [{len(entries)}]"
        )
    return entries


def _write_checkpoint(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(lines)), *lines])


def _parse_count_or_version(line: str) -> int:
    value = _parse_java_int(line, _INT32)
    if value is None:
        raise _malformed_line(line)
    return value


def _parse_offset_line(line: str) -> tuple[tuple[str, int], int] | None:
    parts = _java_split(_JAVA_WHITESPACE, line)
    if len(parts) != 3:
        return None
    partition = _parse_java_int(parts[1], _INT32)
    offset = _parse_java_int(parts[2], _INT64)
    if partition is None or offset is None:
        return None
    return (parts[0], partition), offset


def _parse_epoch_line(line: str) -> EpochEntry | None:
    parts = _java_split(_JAVA_WHITESPACE, line)
    if len(parts) != 2:
        return None
    epoch = _parse_java_int(parts[0], _INT32)
    start_offset = _parse_java_int(parts[1], _INT64)
    if epoch is None or start_offset is None:
        return None
    return EpochEntry(epoch, start_offset)


def _malformed_line(line: str) -> CheckpointError:
    return CheckpointError(f"Malformed line in checkpoint file: {line}")


# --- partition.metadata and topic ids ------------------------------------------------------------


@dataclass(frozen=True)
class PartitionMetadata:
    """``partition.metadata``: the id of the topic a partition directory belongs to (KIP-516)."""

    version: int
    topic_id: uuid.UUID


_COLON_WHITESPACE = re.compile(r":[ \t\n\x0b\f\r]+")


def read_partition_metadata(text: str) -> PartitionMetadata:
    """Parse ``version: N`` then ``topic_id: <base64>``; any version >= 0 is accepted, as Kafka does."""
    lines = _java_lines(text)
    if not lines:
        raise CheckpointError("Partition metadata file is empty")
    version_parts = _java_split(_COLON_WHITESPACE, lines[0])
    if len(version_parts) != 2:
        raise _malformed_line(lines[0])
    version = _parse_java_int(version_parts[1], _INT32)
    if version is None:
        raise _malformed_line(lines[0])
    if version < PARTITION_METADATA_VERSION:
        raise CheckpointError(f"Unrecognized version of partition metadata file: {version}")
    if len(lines) < 2:
        raise CheckpointError("Partition metadata file has no topic_id line")
    topic_id_parts = _java_split(_COLON_WHITESPACE, lines[1])
    if len(topic_id_parts) != 2:
        raise _malformed_line(lines[1])
    topic_id = uuid_from_base64(topic_id_parts[1])
    if topic_id.int == 0:
        raise CheckpointError("Invalid topic ID in partition metadata file")
    return PartitionMetadata(version, topic_id)


def write_partition_metadata(metadata: PartitionMetadata) -> str:
    """Exactly two lines and no trailing newline, as ``PartitionMetadata.encode`` writes them."""
    if metadata.topic_id.int == 0:
        raise ValueError("The all-zero topic id cannot be written to partition.metadata")
    _check_range(metadata.version, _INT32, "version")
    return f"version: {metadata.version}\ntopic_id: {uuid_to_base64(metadata.topic_id)}"


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: 22 characters of URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


_URL_SAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]*")


def uuid_from_base64(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: URL-safe base64 of 16 bytes, padding optional."""
    if len(text) > 24:
        raise CheckpointError(
            f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID"
        )
    unpadded = text.removesuffix("==") if text.endswith("==") else text.removesuffix("=")
    padding = len(text) - len(unpadded)
    if (
        not _URL_SAFE_BASE64.fullmatch(unpadded)
        or len(unpadded) % 4 == 1
        or (padding and (len(unpadded) + padding) % 4 != 0)
    ):
        raise CheckpointError(f"Input string `{text}` is not valid URL-safe base64")
    try:
        raw = base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))
    except binascii.Error as e:
        raise CheckpointError(f"Input string `{text}` is not valid URL-safe base64") from e
    if len(raw) != 16:
        raise CheckpointError(
            f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the expected "
            f"16 bytes of a base64-encoded UUID"
        )
    return uuid.UUID(bytes=raw)


# --- meta.properties -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MetaProperties:
    """``meta.properties``: which node and cluster a log directory belongs to.

    ``node_id`` is the node's id in both versions; a version 0 (ZooKeeper-era) file stores it as
    ``broker.id``, which is also given as ``broker_id``. Version 1 (KRaft) requires ``node.id``
    and ``cluster.id``. ``directory_id`` is the canonical base64 form of a Kafka Uuid.
    """

    version: int
    node_id: int | None = None
    cluster_id: str | None = None
    directory_id: str | None = None
    broker_id: int | None = None


def read_meta_properties(text: str) -> MetaProperties:
    """Validate like Kafka's ``MetaProperties.Builder(Properties).build()``, in the same order."""
    props = parse_java_properties(text)
    version_string = props.get("version", "0")
    version = _parse_java_int(_java_trim(version_string), _INT32)
    if version is None:
        raise CheckpointError(f"Invalid meta.properties version string '{version_string}'")
    if version not in (0, 1):
        raise CheckpointError(f"Unknown meta.properties version number {version}")

    broker_id = None
    if version == 0:
        if "broker.id" in props:
            broker_id = _required_int_prop(props, "broker.id")
        node_id = broker_id
    else:
        node_id = _required_int_prop(props, "node.id")
    cluster_id = props.get("cluster.id")
    directory_id = None
    if "directory.id" in props:
        try:
            directory_id = uuid_to_base64(uuid_from_base64(props["directory.id"]))
        except CheckpointError as e:
            raise CheckpointError(f"Unable to read directory.id as a Uuid: {e}") from e
    if version == 1 and cluster_id is None:
        raise CheckpointError("cluster.id was not found.")
    return MetaProperties(version, node_id, cluster_id, directory_id, broker_id)


def write_meta_properties(meta: MetaProperties, now: datetime) -> str:
    """The text ``Properties.store`` writes: ``#``, ``#<date>``, then keys in sorted order.

    Java 18 and later store keys sorted, so the output does not depend on hashing. ``now`` must be
    timezone-aware; its zone is written the way ``java.util.Date.toString`` writes it.
    """
    props = {"version": str(meta.version)}
    if meta.version == 0:
        if meta.broker_id is not None and meta.node_id is not None and meta.broker_id != meta.node_id:
            raise ValueError(
                f"A version 0 meta.properties has one id, not {meta.broker_id} and {meta.node_id}"
            )
        broker_id = meta.broker_id if meta.broker_id is not None else meta.node_id
        if broker_id is not None:
            props["broker.id"] = str(broker_id)
    elif meta.version == 1:
        if meta.node_id is None or meta.cluster_id is None:
            raise ValueError("A version 1 meta.properties needs node_id and cluster_id")
        if meta.broker_id is not None:
            raise ValueError("A version 1 meta.properties has node.id, not broker.id")
        props["node.id"] = str(meta.node_id)
    else:
        raise ValueError(f"Unknown meta.properties version number {meta.version}")
    for name, value in (("node.id", meta.node_id), ("broker.id", meta.broker_id)):
        if value is not None:
            _check_range(value, _INT32, name)
    if meta.cluster_id is not None:
        props["cluster.id"] = meta.cluster_id
    if meta.directory_id is not None:
        props["directory.id"] = uuid_to_base64(uuid_from_base64(meta.directory_id))
    lines = ["#", f"#{_java_date(now)}"]
    lines += [
        f"{_escape_property(key, is_key=True)}={_escape_property(value)}"
        for key, value in sorted(props.items())
    ]
    return "".join(f"{line}\n" for line in lines)


def parse_java_properties(text: str) -> dict[str, str]:
    """The key/value pairs of a Java ``.properties`` text, as ``Properties.load`` reads them.

    ``#``/``!`` comment lines, blank lines, ``key=value``, ``key: value`` and ``key value``,
    backslash line continuations and escapes (``\\t``, ``\\n``, ``\\uXXXX``, ...). Leading
    whitespace of a value is dropped, trailing whitespace is kept (Java does the same, which is
    why ``node.id=1 `` fails to parse as a number in Kafka too). Later keys win.
    """
    props: dict[str, str] = {}
    natural_lines = iter(_java_lines(text))
    for natural_line in natural_lines:
        line = natural_line.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        while _ends_with_odd_backslashes(line):
            line = line[:-1]
            continuation = next(natural_lines, None)
            if continuation is None:
                break
            line += continuation.lstrip(" \t\f")
        key, value = _split_property_line(line)
        props[key] = value
    return props


def _split_property_line(line: str) -> tuple[str, str]:
    """Key ends at the first unescaped ``=``, ``:`` or whitespace; one separator may follow."""
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    preceding_backslash = False
    for i, char in enumerate(line):
        if char in "=:" and not preceding_backslash:
            key_end, value_start, has_separator = i, i + 1, True
            break
        if char in " \t\f" and not preceding_backslash:
            key_end, value_start = i, i + 1
            break
        preceding_backslash = char == "\\" and not preceding_backslash
    while value_start < len(line):
        char = line[value_start]
        if char not in " \t\f":
            if has_separator or char not in "=:":
                break
            has_separator = True
        value_start += 1
    return _unescape_property(line[:key_end]), _unescape_property(line[value_start:])


_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape_property(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\" or i == len(text):
            out.append(char)
            continue
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise CheckpointError("Malformed \\uxxxx encoding in properties file")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_PROPERTY_ESCAPES.get(char, char))
    return "".join(out)


def _escape_property(text: str, *, is_key: bool = False) -> str:
    """``Properties.saveConvert`` as used when storing through a Writer (no \\u escapes)."""
    out = []
    for i, char in enumerate(text):
        if char == " ":
            out.append("\\ " if is_key or i == 0 else " ")
        elif char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif char in "=:#!":
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _required_int_prop(props: Mapping[str, str], name: str) -> int:
    """``PropertiesUtils.loadRequiredIntProp``: no trimming, base 10, int32."""
    if name not in props:
        raise CheckpointError(f"Failed to find {name}")
    value = _parse_java_int(props[name], _INT32)
    if value is None:
        raise CheckpointError(f"Unable to read {name} as a base-10 number.")
    return value


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date(now: datetime) -> str:
    """``java.util.Date.toString``: ``Tue Oct 29 10:15:30 UTC 2024`` (English, whatever the locale)."""
    offset = now.utcoffset()
    if offset is None:
        raise ValueError("now must be a timezone-aware datetime")
    zone = now.tzname() or "UTC"
    if zone.startswith("UTC") and offset != timedelta(0):
        zone = "GMT" + zone[3:]  # Java names fixed offsets GMT+hh:mm
    return (
        f"{_DAYS[now.weekday()]} {_MONTHS[now.month - 1]} {now.day:02d} "
        f"{now.hour:02d}:{now.minute:02d}:{now.second:02d} {zone} {now.year}"
    )


# --- .kafka_cleanshutdown ------------------------------------------------------------------------


def read_clean_shutdown(text: str) -> int | None:
    """The broker epoch recorded at the last clean shutdown, or None.

    The file's presence is what marks a clean shutdown; its content is optional (empty before
    3.7), and Kafka treats any content it cannot read as "no epoch" rather than as an error.
    """
    try:
        content = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(content, dict):
        return None
    version = content.get("version", 0)
    broker_epoch = content.get("brokerEpoch")
    if type(version) is not int or type(broker_epoch) is not int:
        return None
    if not _INT64[0] <= broker_epoch <= _INT64[1]:
        return None
    return broker_epoch


def write_clean_shutdown(broker_epoch: int) -> str:
    """``{"version":0,"brokerEpoch":N}``, as the 3.7+ broker writes it."""
    _check_range(broker_epoch, _INT64, "broker epoch")
    return f'{{"version":0,"brokerEpoch":{broker_epoch}}}'


# --- Java parsing rules --------------------------------------------------------------------------


def _java_lines(text: str) -> list[str]:
    """Lines as ``BufferedReader.readLine`` returns them: a final terminator adds no empty line."""
    lines = _LINE_TERMINATOR.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _java_split(pattern: re.Pattern[str], line: str) -> list[str]:
    """``String.split(regex)``: a leading empty field is kept, trailing empty fields are dropped."""
    parts = pattern.split(line)
    if len(parts) == 1:
        return parts
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _parse_java_int(text: str, bounds: tuple[int, int]) -> int | None:
    """``Integer.parseInt`` / ``Long.parseLong``: optional sign, ASCII digits, in range; else None."""
    if not _JAVA_INTEGER.fullmatch(text):
        return None
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        return None
    return value


def _java_trim(text: str) -> str:
    """``String.trim``: strips every char <= U+0020 from both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _check_range(value: int, bounds: tuple[int, int], what: str) -> None:
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"The {what} {value} is out of range")
