"""Fetch (key 1): record bytes straight from segment files, with Kafka's long poll.

Follows Kafka's `KafkaApis.handleFetchRequest`: decode, `ReplicaManager.fetch_messages` (the reads, the
long poll, aborted transactions, the leader quota, the followers' state), encode. What the answer says:
- partitions are read in request order; the response budget is min(max_bytes, fetch.max.bytes) and
  each partition's is min(partition_max_bytes, what is left); until one partition returned data, the
  first batch is returned whole even when it is larger (Kafka's minOneMessage);
- consumers read up to the high watermark (read_uncommitted) or the last stable offset
  (read_committed, with the aborted transactions overlapping the batches returned, from the segments'
  `.txnindex`, as Kafka's LocalLog.addAbortedTransactions); a
  follower (replica id >= 0) reads up to the log end offset and must be one of the replicas;
- KIP-392: a consumer's fetch (v11+) may be served by a follower, up to that follower's high watermark
  or last stable offset; with a `replica.selector.class`, the leader answers a consumer better served
  by another in-sync replica (its `rack_id`) with that `preferred_read_replica`, no records, at once;
- errors per partition: UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID (v13+), NOT_LEADER_OR_FOLLOWER,
  FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH against current_leader_epoch, OFFSET_OUT_OF_RANGE, and
  a diverging epoch (v12+) when last_fetched_epoch ends before the fetch offset;
- the answer comes at once when max_wait is 0, nothing is asked for, min_bytes are there or a
  partition failed; otherwise the request waits on the logs' append events (no polling) until
  min_bytes are there or max_wait has passed, then everything is read again;
- a follower's fetch of a throttled replica out of the ISR gets no records while the leader's
  replication rate is over leader.replication.throttled.rate (KIP-73, see replication/quota.py);
- incremental fetch sessions are not kept (as a broker with no session cache slots): a full fetch
  is answered with session id 0, so clients keep sending full fetches, and an incremental fetch is
  FETCH_SESSION_ID_NOT_FOUND with no partitions, which makes them start over with a full one.

Zero copy: the response is encoded by hand (byte for byte what kio writes; see the tests) around the
records, and each partition's records are a `FileRegion` of its segment file, sent with sendfile.
No record byte is read into Python on this path.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import FileRegion, FramedResponse, RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.replication.manager import FetchParams, FetchPartitionData, FetchTarget
from kcli.broker.replication.replica_selector import ClientMetadata
from kcli.protocol.codec import write_uvarint
from kcli.protocol.messages import kio_versions, response_type

API_KEY = 1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


async def handle_fetch(ctx: RequestContext, request: Any) -> FramedResponse:
    """KafkaApis.handleFetchRequest: decode, ReplicaManager.fetchMessages, encode."""
    version = ctx.api_version
    if version >= 7 and request.session_epoch not in (INITIAL_EPOCH, FINAL_EPOCH):
        # An incremental fetch: no session is ever created here, so none can be found.
        return encode_response(version, ErrorCode.fetch_session_id_not_found, [])

    targets, unknown = _targets(ctx, request)
    params = FetchParams(
        replica_id=request.replica_state.replica_id if version >= 15 else request.replica_id,
        replica_epoch=request.replica_state.replica_epoch if version >= 15 else -1,
        max_wait=request.max_wait.total_seconds(),
        min_bytes=request.min_bytes,
        max_bytes=min(request.max_bytes, int(ctx.state.config["fetch.max.bytes"])),  # type: ignore[call-overload]
        read_committed=request.isolation_level == READ_COMMITTED,
        client_metadata=ClientMetadata(request.rack_id, ctx.client_id) if version >= 11 else None,
    )
    results = await ctx.replicas.fetch_messages(params, targets)
    if (version <= 5 or version >= 16) and any(r.error_code is not ErrorCode.none for r in results):
        results = [_for_version(r, version, ctx) for r in results]
    results += unknown
    return encode_response(version, ErrorCode.none, _group(results, version), _leader_endpoints(ctx, results))


def encode_response(
    version: int,
    error_code: ErrorCode,
    topics: list[tuple[str | None, Any, list[FetchPartitionData]]],
    node_endpoints: tuple[tuple[int, str, int, str | None], ...] = (),
    session_id: int = 0,
) -> FramedResponse:
    """The FetchResponse body as bytes parts around `FileRegion`s of the segment files.

    Writes exactly what kio's writer writes for the same response with the records inline.
    """
    flexible = version >= 12
    parts: list[bytes | FileRegion] = []
    out = bytearray(_INT32.pack(0))  # throttle_time_ms
    if version >= 7:
        out += _ERROR_SESSION.pack(error_code, session_id)
    _array_length(out, len(topics), flexible)
    for name, topic_id, partitions in topics:
        if version >= 13:
            out += _ZERO_UUID if topic_id is None else topic_id.bytes  # kio reads the zero id as None
        else:
            _string(out, name, flexible)
        _array_length(out, len(partitions), flexible)
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
                _array_length(out, len(aborted), flexible)
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
                parts.append(FileRegion(_SegmentFile(records.fd), records.position, records.size))  # type: ignore[arg-type]
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
            _array_length(body, len(node_endpoints), True)
            for node_id, host, port, rack in node_endpoints:
                body += _INT32.pack(node_id)
                _string(body, host, True)
                body += _INT32.pack(port)
                _string(body, rack, True)
                body.append(0)
            out += b"\x01\x00"  # one tagged field, tag 0
            write_uvarint(out, len(body))
            out += body
        else:
            out.append(0)
    parts.append(bytes(out))
    return FramedResponse(response_type(API_KEY, version), tuple(parts))


# ---------------------------------------------------------------------------------------------------


def _targets(ctx: RequestContext, request: Any) -> tuple[list[FetchTarget], list[FetchPartitionData]]:
    """The partitions to read, in request order, and the ones whose topic id is unknown (v13+)."""
    version = ctx.api_version
    image = ctx.state.image
    targets: list[FetchTarget] = []
    unknown: list[FetchPartitionData] = []
    seen: dict[tuple[Any, int], int] = {}
    for topic in request.topics:
        if version >= 13:
            topic_image = image.topics_by_id.get(topic.topic_id)
            if topic_image is None:
                unknown.extend(
                    FetchPartitionData(None, topic.topic_id, p.partition, ErrorCode.unknown_topic_id)
                    for p in topic.partitions
                )
                continue
            name, topic_id = topic_image.name, topic.topic_id
        else:
            name = topic.topic
            topic_id = image.topic_ids.get(name)
        for p in topic.partitions:
            target = FetchTarget(
                name,
                topic_id,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1),
                getattr(p, "last_fetched_epoch", -1),
                getattr(p, "log_start_offset", -1),
            )
            key = (name, p.partition)
            if key in seen:  # Kafka keeps partitions in a map: a repeat replaces the first, in place
                targets[seen[key]] = target
            else:
                seen[key] = len(targets)
                targets.append(target)
    return targets, unknown


def _for_version(result: FetchPartitionData, version: int, ctx: RequestContext) -> FetchPartitionData:
    """What the version can say: up to v5 a storage error is NOT_LEADER_OR_FOLLOWER; from v16 a partition
    led elsewhere (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) names its current leader."""
    error = result.error_code
    if version <= 5:
        if error is ErrorCode.kafka_storage_error:
            return result._replace(error_code=ErrorCode.not_leader_or_follower)
    elif error in _NAMES_THE_LEADER:
        registration = ctx.state.image.partition(result.topic, result.partition_index)
        if registration is not None:
            return result._replace(current_leader=(registration.leader, registration.leader_epoch))
    return result


def _leader_endpoints(
    ctx: RequestContext, results: list[FetchPartitionData]
) -> tuple[tuple[int, str, int, str | None], ...]:
    """v16+: the endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH answers."""
    leaders = {
        r.current_leader[0] for r in results if r.current_leader is not None and r.current_leader[0] >= 0
    }
    if not leaders:
        return ()
    return tuple(
        (b.node_id, b.host, b.port, b.rack) for b in ctx.state.image.brokers() if b.node_id in leaders
    )


def _group(
    results: list[FetchPartitionData], version: int
) -> list[tuple[str | None, Any, list[FetchPartitionData]]]:
    """Consecutive partitions of one topic share a topic entry, keeping the order (FetchResponse.of)."""
    topics: list[tuple[str | None, Any, list[FetchPartitionData]]] = []
    by_id = version >= 13
    for result in results:
        if topics:
            name, topic_id, partitions = topics[-1]
            if (topic_id == result.topic_id) if by_id else (name == result.topic):
                partitions.append(result)
                continue
        topics.append((result.topic, result.topic_id, [result]))
    return topics


class _SegmentFile:
    """What loop.sendfile needs of a file: its descriptor and a binary mode (the segment keeps it open)."""

    __slots__ = ("fd",)
    mode = "rb"

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def _partition_tags(out: bytearray, p: FetchPartitionData) -> None:
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


def _array_length(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _INT32.pack(n)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    data = value.encode()
    if flexible:
        write_uvarint(out, len(data) + 1)
    else:
        out += _INT16.pack(len(data))
    out += data


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ZERO_UUID = bytes(16)
_INT64 = struct.Struct(">q")
_ERROR_SESSION = struct.Struct(">hi")
_PARTITION_HEAD = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")
_NAMES_THE_LEADER = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})

APIS = [ApiSpec(API_KEY, 4, kio_versions(API_KEY)[1], handle_fetch)]  # type: ignore[index]
