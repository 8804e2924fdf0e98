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
- incremental fetch sessions (v7+, KIP-227, replication/fetch_session.py): a full fetch (epoch 0)
  may open one, and an incremental fetch names only the partitions added or changed and the ones to
  forget; it reads the partitions of the session that changed (and waits on the whole session) and
  answers only those with something to say.
  A session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
  FETCH_SESSION_TOPIC_ID_ERROR) is the answer's error, with no partitions.

Zero copy: the response is encoded by hand (byte for byte what kio writes; see the tests) around the
records, and each partition's records are a `FileRegion` of its segment file, sent with sendfile.
No record byte is read into Python on this path.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import FileRegion, FramedResponse, RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.log.log import FetchSlice
from kcli.broker.quota.fetch_quota import consumer_quota
from kcli.broker.replication.fetch_metadata import INVALID_SESSION_ID
from kcli.broker.replication.fetch_session import (
    IncrementalFetchContext,
    PartitionId,
    SessionlessFetchContext,
)
from kcli.broker.replication.manager import FetchParams, FetchPartitionData, FetchTarget
from kcli.broker.replication.replica_selector import ClientMetadata
from kcli.protocol.fetch_codec import write_fetch_response
from kcli.protocol.messages import kio_versions, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = 1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FIRST_SESSION_VERSION = 7
FIRST_TOPIC_ID_VERSION = 13


async def handle_fetch(ctx: RequestContext, request: Any) -> FramedResponse:
    """KafkaApis.handleFetchRequest: decode, the session's context, ReplicaManager.fetchMessages, encode."""
    version = ctx.api_version
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    fetch_data = _fetch_data(ctx, request)
    if version >= FIRST_SESSION_VERSION:
        context = ctx.fetch_manager.new_context(
            version,
            request.session_id,
            request.session_epoch,
            replica_id >= 0,
            fetch_data,
            _forgotten(request, version),
            _topic_names(ctx) if version >= FIRST_TOPIC_ID_VERSION else _no_names,
        )
        if context.error is not ErrorCode.none:
            return encode_response(version, context.error, [])
    else:
        context = SessionlessFetchContext(fetch_data)

    targets: list[FetchTarget] = []
    unknown: list[FetchPartitionData] = []
    readable = _readable(ctx, replica_id)
    for target in context.partitions():
        if target.topic is None:  # a topic id this broker does not know
            unknown.append(
                FetchPartitionData(None, target.topic_id, target.partition, ErrorCode.unknown_topic_id)
            )
        elif readable is not None and not readable(target.topic):
            unknown.append(
                FetchPartitionData(
                    target.topic, target.topic_id, target.partition, ErrorCode.topic_authorization_failed
                )
            )
        else:
            targets.append(target)
    quota = consumer_quota(ctx, request)
    params = FetchParams(
        replica_id=replica_id,
        replica_epoch=request.replica_state.replica_epoch if version >= 15 else -1,
        max_wait=request.max_wait.total_seconds(),
        min_bytes=request.min_bytes,
        max_bytes=quota.max_bytes(min(request.max_bytes, int(ctx.state.config["fetch.max.bytes"]))),  # type: ignore[call-overload]
        read_committed=request.isolation_level == READ_COMMITTED,
        client_metadata=ClientMetadata(request.rack_id, ctx.client_id) if version >= 11 else None,
    )
    changes = context.changes if isinstance(context, IncrementalFetchContext) else None
    results = await ctx.replicas.fetch_messages(params, targets, changes)
    if (version <= 5 or version >= 16) and any(r.error_code is not ErrorCode.none for r in results):
        results = [_for_version(r, version, ctx) for r in results]
    results += unknown
    error, session_id, answer = context.update_and_generate_response_data(
        results, partial(ctx.replicas.at_fetch_end, params)
    )
    response = encode_response(
        version, error, _group(answer, version), _leader_endpoints(ctx, answer), session_id
    )
    # Over the consumer's quota: Kafka's getThrottledResponse, no partitions, the incremental session's
    # id kept (a full fetch's new session is not announced: the next fetch is full again)
    throttled_id = session_id if isinstance(context, IncrementalFetchContext) else INVALID_SESSION_ID
    return quota.check(response, lambda: encode_response(version, ErrorCode.none, [], (), throttled_id))


def encode_response(
    version: int,
    error_code: ErrorCode,
    topics: list[tuple[str | None, Any, list[FetchPartitionData]]],
    node_endpoints: tuple[tuple[int, str, int, str | None], ...] = (),
    session_id: int = INVALID_SESSION_ID,
) -> FramedResponse:
    """The FetchResponse body as bytes parts around `FileRegion`s of the segment files (sendfile)."""
    parts = write_fetch_response(version, error_code, topics, node_endpoints, session_id, region=_file_region)
    return FramedResponse(response_type(API_KEY, version), tuple(parts))


def _file_region(records: FetchSlice) -> FileRegion:
    return FileRegion(_SegmentFile(records.fd), records.position, records.size)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------


def _fetch_data(ctx: RequestContext, request: Any) -> dict[PartitionId, FetchTarget]:
    """The partitions asked for, in request order, keyed as a session keys them: by topic id from v13 (a
    topic id this broker does not know has no name), by name before. A repeat replaces the first in
    place, as Kafka's map of them does."""
    by_id = ctx.api_version >= FIRST_TOPIC_ID_VERSION
    image = ctx.state.image
    fetch_data: dict[PartitionId, FetchTarget] = {}
    for topic in request.topics:
        if by_id:
            topic_id = topic.topic_id
            topic_image = image.topics_by_id.get(topic_id)
            name = None if topic_image is None else topic_image.name
        else:
            name = topic.topic
            topic_id = image.topic_ids.get(name)
        for p in topic.partitions:
            fetch_data[(topic_id if by_id else name, p.partition)] = FetchTarget(
                name,  # type: ignore[arg-type]
                topic_id,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1),
                getattr(p, "last_fetched_epoch", -1),
                getattr(p, "log_start_offset", -1),
            )
    return fetch_data


def _readable(ctx: RequestContext, replica_id: int) -> Callable[[str], bool] | None:
    """KafkaApis.handleFetchRequest's checks: a follower needs CLUSTER_ACTION on the cluster (else every
    partition is TOPIC_AUTHORIZATION_FAILED), a consumer READ on each topic; None with no authorizer."""
    if ctx.state.authorizer is None:
        return None
    if replica_id >= 0:
        allowed = ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        return lambda topic: allowed
    decided: dict[str, bool] = {}

    def readable(topic: str) -> bool:
        allowed = decided.get(topic)
        if allowed is None:
            allowed = decided[topic] = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic)
        return allowed

    return readable


def _forgotten(request: Any, version: int) -> list[PartitionId]:
    """forgotten_topics_data (v7+): the partitions an incremental fetch drops from its session."""
    by_id = version >= FIRST_TOPIC_ID_VERSION
    return [
        (topic.topic_id if by_id else topic.topic, index)
        for topic in request.forgotten_topics_data
        for index in topic.partitions
    ]


def _topic_names(ctx: RequestContext) -> Callable[[Any], str | None]:
    """A topic id's name in the current metadata, for session partitions whose topic was unknown."""
    topics_by_id = ctx.state.image.topics_by_id

    def name(topic_id: Any) -> str | None:
        topic_image = topics_by_id.get(topic_id)
        return None if topic_image is None else topic_image.name

    return name


def _no_names(topic_id: Any) -> str | None:
    """Before v13 a session names its topics itself."""
    return None


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
    return tuple((b.node_id, b.host, b.port, b.rack) for b in ctx.image.brokers() if b.node_id in leaders)


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


_NAMES_THE_LEADER = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})

APIS = [ApiSpec(API_KEY, 4, kio_versions(API_KEY)[1], handle_fetch)]  # type: ignore[index]
