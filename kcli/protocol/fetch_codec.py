"""A FetchResponse read by hand for a follower's hot path, its records left where they arrived.

A follower's fetcher takes a FetchResponse of up to replica.fetch.response.max.bytes (10 MiB) about a
thousand times per GiB it replicates. kio's reader copies each partition's records into a bytes object
of their own (the frame itself already a copy of what the socket brought); here the records are
memoryviews of the frame, and the fetcher appends them from there, so no record byte is copied in
Python between the socket and the segment file.

Layout: Kafka's FetchResponse.json from v12 (the first flexible version: compact arrays, strings and
records, tagged fields) to v18; topics named by id from v13. What is returned carries kio's field
names, so a fetcher reads it as it reads kio's entity. Nothing here does I/O.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from kio.schema.errors import ErrorCode

FETCH = 1
FIRST_VERSION = 12
LAST_VERSION = 18
FIRST_TOPIC_ID_VERSION = 13


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
    except (struct.error, IndexError) as exc:
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
        view, pos = self.view, self.pos
        value = shift = 0
        while True:
            byte = view[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise IndexError("a varint longer than 5 bytes")

    def count(self) -> int:
        """A compact array's length; -1 for null."""
        return self.uvarint() - 1

    def string(self) -> str | None:
        size = self.uvarint() - 1
        if size < 0:
            return None
        end = self.pos + size
        if end > self.end:
            raise IndexError("string")
        text = bytes(self.view[self.pos : end]).decode()
        self.pos = end
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
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()
        if self.pos > self.end:
            raise IndexError("tagged field")


_HEAD = struct.Struct(">ihi")
_PARTITION = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_INT32 = struct.Struct(">i")
_EPOCH_END = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")
_SNAPSHOT = struct.Struct(">qi")
_ZERO_UUID = bytes(16)
_NO_TAGS: list[tuple[int, int, int]] = []
