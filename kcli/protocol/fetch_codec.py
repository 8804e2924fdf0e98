"""FetchResponse by hand: read for a follower's hot path, its records left where they arrived, and
written for the broker's, around records it sends from where they lie.

A follower's fetcher takes a FetchResponse of up to replica.fetch.response.max.bytes (10 MiB) about a
thousand times per GiB it replicates. kio's reader copies each partition's records into a bytes object
of their own (the frame itself already a copy of what the socket brought); here the records are
memoryviews of the frame, and the fetcher appends them from there, so no record byte is copied in
Python between the socket and the segment file.

Layout: Kafka's FetchResponse.json from v12 (the first flexible version: compact arrays, strings and
records, tagged fields) to v18; topics named by id from v13. What is returned carries kio's field
names, so a fetcher reads it as it reads kio's entity.

The broker's answer (`write_fetch_response`) is bytes around each partition's records, which stay
slices of segment files (sent with sendfile; no record byte is read into Python on that path), from
v4: byte for byte what kio writes for the same response with the records inline (see the tests).
Nothing here does I/O.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from formats.wire import (
    WireError,
    read_nullable_string,
    read_uvarint,
    skip_tagged_fields,
    write_array_length,
    write_nullable_string,
    write_uvarint,
)

FETCH = 1
FIRST_VERSION = 12
LAST_VERSION = 18
FIRST_TOPIC_ID_VERSION = 13


T = TypeVar("T")


class RecordsSlice(Protocol):
    """A partition's records where they lie; the writer reads only their size."""

    @property
    def size(self) -> int: ...


class EpochEndOffset(NamedTuple):
    epoch: int = -1
    end_offset: int = -1


class LeaderIdAndEpoch(NamedTuple):
    leader_id: int = -1
    leader_epoch: int = -1


class SnapshotId(NamedTuple):
    end_offset: int = -1
    epoch: int = -1


class PartitionData(NamedTuple):
    """One partition of the answer; `records` is a view into the response frame, or None."""

    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None
    preferred_read_replica: int
    records: memoryview | None
    diverging_epoch: EpochEndOffset = EpochEndOffset()
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    snapshot_id: SnapshotId = SnapshotId()


class FetchableTopicResponse(NamedTuple):
    topic: str | None
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionData, ...]


class NodeEndpoint(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


class FetchResponse(NamedTuple):
    throttle_time_ms: int
    error_code: ErrorCode
    session_id: int
    responses: tuple[FetchableTopicResponse, ...]
    node_endpoints: tuple[NodeEndpoint, ...] = ()


class FetchResponseError(ValueError):
    """The bytes are not a FetchResponse of the version asked for."""


# --- reading ------------------------------------------------------------------------------------


def read_fetch_response(frame: bytes | bytearray | memoryview, offset: int, version: int) -> FetchResponse:
    """The FetchResponse body at `offset` of `frame` (after the response header), at `version`."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise FetchResponseError(f"FetchResponse v{version} is not read by hand")
    view = memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    reader = _Reader(view, offset)
    try:
        return reader.response(version)
    except (struct.error, IndexError, WireError) as exc:
        raise FetchResponseError(f"a FetchResponse v{version} ends early: {exc}") from None


class _Reader:
    __slots__ = ("view", "pos", "end")

    def __init__(self, view: memoryview, pos: int) -> None:
        self.view = view
        self.pos = pos
        self.end = len(view)

    def response(self, version: int) -> FetchResponse:
        view = self.view
        throttle, error, session = _HEAD.unpack_from(view, self.pos)
        self.pos += _HEAD.size
        topics = []
        for _ in range(self.count()):
            if version >= FIRST_TOPIC_ID_VERSION:
                raw = bytes(view[self.pos : self.pos + 16])
                if len(raw) != 16:
                    raise IndexError("topic id")
                self.pos += 16
                name = None
                topic_id = None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)
            else:
                name = self.string()
                topic_id = None
            partitions = tuple(self.partition() for _ in range(self.count()))
            self.skip_tags()
            topics.append(FetchableTopicResponse(name, topic_id, partitions))
        endpoints: tuple[NodeEndpoint, ...] = ()
        for tag, start, _ in self.tags():
            if tag == 0:
                end, self.pos = self.pos, start
                endpoints = self.node_endpoints()
                self.pos = end
        return FetchResponse(throttle, ErrorCode(error), session, tuple(topics), endpoints)

    def partition(self) -> PartitionData:
        view = self.view
        index, error, high_watermark, last_stable, log_start = _PARTITION.unpack_from(view, self.pos)
        self.pos += _PARTITION.size
        aborted: tuple[tuple[int, int], ...] | None = None
        count = self.count()
        if count >= 0:
            items = []
            for _ in range(count):
                items.append(_ABORTED.unpack_from(view, self.pos))
                self.pos += _ABORTED.size
                self.skip_tags()
            aborted = tuple(items)
        (preferred,) = _INT32.unpack_from(view, self.pos)
        self.pos += 4
        size = self.uvarint() - 1
        records = None
        if size >= 0:
            end = self.pos + size
            if end > self.end:
                raise IndexError("records")
            records = view[self.pos : end]
            self.pos = end
        diverging, leader, snapshot = EpochEndOffset(), LeaderIdAndEpoch(), SnapshotId()
        for tag, start, _ in self.tags():
            if tag == 0:
                diverging = EpochEndOffset(*_EPOCH_END.unpack_from(view, start))
            elif tag == 1:
                leader = LeaderIdAndEpoch(*_LEADER.unpack_from(view, start))
            elif tag == 2:
                snapshot = SnapshotId(*_SNAPSHOT.unpack_from(view, start))
        return PartitionData(
            index, ErrorCode(error), high_watermark, last_stable, log_start, aborted, preferred, records,
            diverging, leader, snapshot,
        )  # fmt: skip

    def node_endpoints(self) -> tuple[NodeEndpoint, ...]:
        endpoints = []
        for _ in range(self.count()):
            (node_id,) = _INT32.unpack_from(self.view, self.pos)
            self.pos += 4
            host = self.string() or ""
            (port,) = _INT32.unpack_from(self.view, self.pos)
            self.pos += 4
            rack = self.string()
            self.skip_tags()
            endpoints.append(NodeEndpoint(node_id, host, port, rack))
        return tuple(endpoints)

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.view, self.pos, self.end)
        return value

    def count(self) -> int:
        """A compact array's length; -1 for null."""
        return self.uvarint() - 1

    def string(self) -> str | None:
        text, self.pos = read_nullable_string(self.view, self.pos, True)
        return text

    def tags(self) -> list[tuple[int, int, int]]:
        """The (tag, start, size) of each field of a tagged-fields section; the reader moves past them."""
        count = self.uvarint()
        if count == 0:
            return _NO_TAGS
        fields = []
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            fields.append((tag, self.pos, size))
            self.pos += size
        if self.pos > self.end:
            raise IndexError("tagged field")
        return fields

    def skip_tags(self) -> None:
        self.pos = skip_tagged_fields(self.view, self.pos, self.end)


# --- writing ------------------------------------------------------------------------------------


class PartitionResult(NamedTuple):
    """One partition of a FetchResponse to write: `records` is where they lie (the broker's slice of a
    segment file); without one, the records are empty (`empty_records`, as after a read) or null (as for
    a partition the metadata does not know)."""

    topic: str | None
    topic_id: Any
    partition_index: int
    error_code: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] | None = None
    records: RecordsSlice | None = None
    empty_records: bool = False
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None
    preferred_read_replica: int = -1


def write_fetch_response(
    version: int,
    error_code: ErrorCode,
    topics: list[tuple[str | None, Any, list[PartitionResult]]],
    node_endpoints: tuple[tuple[int, str, int, str | None], ...] = (),
    session_id: int = 0,
    *,
    region: Callable[[Any], T],
) -> list[bytes | T]:
    """The FetchResponse body as bytes parts around `region(records)` of each partition with records,
    which the caller sends as they lie (the broker: file regions, with sendfile).

    Writes exactly what kio's writer writes for the same response with the records inline.
    """
    flexible = version >= 12
    parts: list[bytes | T] = []
    out = bytearray(_INT32.pack(0))  # throttle_time_ms
    if version >= 7:
        out += _ERROR_SESSION.pack(error_code, session_id)
    write_array_length(out, len(topics), flexible)
    for name, topic_id, partitions in topics:
        if version >= 13:
            out += _ZERO_UUID if topic_id is None else topic_id.bytes  # kio reads the zero id as None
        else:
            write_nullable_string(out, name, flexible)
        write_array_length(out, len(partitions), flexible)
        for p in partitions:
            out += _PARTITION_HEAD.pack(
                p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
            )
            if version >= 5:
                out += _INT64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                write_array_length(out, len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out.append(0)
            if version >= 11:
                out += _INT32.pack(p.preferred_read_replica)
            records = p.records
            if records is not None and records.size > 0:
                if flexible:
                    write_uvarint(out, records.size + 1)
                else:
                    out += _INT32.pack(records.size)
                parts.append(bytes(out))
                parts.append(region(records))
                out = bytearray()
            elif p.empty_records or records is not None:
                out += b"\x01" if flexible else b"\x00\x00\x00\x00"
            else:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            if flexible:
                _partition_tags(out, p)
        if flexible:
            out.append(0)
    if flexible:
        if node_endpoints and version >= 16:
            body = bytearray()
            write_array_length(body, len(node_endpoints), True)
            for node_id, host, port, rack in node_endpoints:
                body += _INT32.pack(node_id)
                write_nullable_string(body, host, True)
                body += _INT32.pack(port)
                write_nullable_string(body, rack, True)
                body.append(0)
            out += b"\x01\x00"  # one tagged field, tag 0
            write_uvarint(out, len(body))
            out += body
        else:
            out.append(0)
    parts.append(bytes(out))
    return parts


def _partition_tags(out: bytearray, p: PartitionResult) -> None:
    """diverging_epoch (tag 0) and current_leader (tag 1), each only when not its default (-1, -1)."""
    tags = []
    if p.diverging_epoch is not None and p.diverging_epoch != (-1, -1):
        epoch, end_offset = p.diverging_epoch
        tags.append((0, _INT32.pack(epoch) + _INT64.pack(end_offset) + b"\x00"))
    if p.current_leader is not None and p.current_leader != (-1, -1):
        leader_id, leader_epoch = p.current_leader
        tags.append((1, _INT32.pack(leader_id) + _INT32.pack(leader_epoch) + b"\x00"))
    write_uvarint(out, len(tags))
    for tag, body in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(body))
        out += body


_HEAD = struct.Struct(">ihi")
_PARTITION = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_INT32 = struct.Struct(">i")
_EPOCH_END = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")
_SNAPSHOT = struct.Struct(">qi")
_ZERO_UUID = bytes(16)
_INT64 = struct.Struct(">q")
_ERROR_SESSION = struct.Struct(">hi")
_PARTITION_HEAD = struct.Struct(">ihqq")
_NO_TAGS: list[tuple[int, int, int]] = []
