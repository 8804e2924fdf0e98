"""Fetch (key 1): record bytes straight from segment files, with Kafka's long poll.

Follows Kafka's `KafkaApis.handleFetchRequest` and `ReplicaManager.fetchMessages`/`readFromLog`:
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

Zero copy: the response is written by hand (`kcli.protocol.fetch_codec`, byte for byte what kio writes)
around the records, and each partition's records are a `FileRegion` of its segment file, sent with sendfile.
No record byte is read into Python on this path.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import FileRegion, FramedResponse, RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.log import LogStorageError, OffsetOutOfRange
from kcli.broker.log.log import FetchSlice
from kcli.broker.replication.partition import PartitionError
from kcli.broker.replication.replica_selector import ClientMetadata
from kcli.protocol.fetch_codec import PartitionResult, write_fetch_response
from kcli.protocol.messages import kio_versions, response_type

API_KEY = 1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MIN_THROTTLE_WAIT = 0.001
"""A throttled follower fetch looks at the rate again no sooner than this."""


async def handle_fetch(ctx: RequestContext, request: Any) -> FramedResponse:
    version = ctx.api_version
    if version >= 7 and request.session_epoch not in (INITIAL_EPOCH, FINAL_EPOCH):
        # An incremental fetch: no session is ever created here, so none can be found.
        return encode_response(version, ErrorCode.fetch_session_id_not_found, [])

    targets, unknown = _targets(ctx, request)
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    fetch = _Fetch(
        ctx,
        targets,
        replica_id=replica_id,
        replica_epoch=request.replica_state.replica_epoch if version >= 15 else -1,
        read_committed=request.isolation_level == READ_COMMITTED,
        max_bytes=min(request.max_bytes, int(ctx.state.config["fetch.max.bytes"])),  # type: ignore[call-overload]
        version=version,
        # v11 added the consumer's rack: from then on a consumer may be sent to, and read from, a follower
        client_metadata=ClientMetadata(request.rack_id, ctx.client_id) if version >= 11 else None,
    )
    results, readable, failed = fetch.read()
    max_wait = request.max_wait.total_seconds()
    if max_wait > 0 and fetch.interesting and readable < request.min_bytes and not failed:
        results = await fetch.wait(max_wait, request.min_bytes)
    results += unknown
    if replica_id >= 0:
        # KafkaApis: a follower's answer has passed the quota check; its throttled bytes count now
        ctx.replicas.record_leader_replication(
            (r.topic, r.partition_index, r.records.size) for r in results if r.records is not None and r.topic
        )
    return encode_response(version, ErrorCode.none, _group(results, version), _leader_endpoints(ctx, results))


def encode_response(
    version: int,
    error_code: ErrorCode,
    topics: list[tuple[str | None, Any, list[PartitionResult]]],
    node_endpoints: tuple[tuple[int, str, int, str | None], ...] = (),
) -> FramedResponse:
    """The FetchResponse body as bytes parts around `FileRegion`s of the segment files (sendfile); the
    session id is 0, as no fetch session is kept."""
    parts = write_fetch_response(version, error_code, topics, node_endpoints, region=_file_region)
    return FramedResponse(response_type(API_KEY, version), tuple(parts))


def _file_region(records: FetchSlice) -> FileRegion:
    return FileRegion(_SegmentFile(records.fd), records.position, records.size)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------


class _Target(NamedTuple):
    topic: str
    topic_id: Any
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int


def _targets(ctx: RequestContext, request: Any) -> tuple[list[_Target], list[PartitionResult]]:
    """The partitions to read, in request order, and the ones whose topic id is unknown (v13+)."""
    version = ctx.api_version
    image = ctx.state.image
    targets: list[_Target] = []
    unknown: list[PartitionResult] = []
    seen: dict[tuple[Any, int], int] = {}
    for topic in request.topics:
        if version >= 13:
            topic_image = image.topics_by_id.get(topic.topic_id)
            if topic_image is None:
                unknown.extend(
                    PartitionResult(None, topic.topic_id, p.partition, ErrorCode.unknown_topic_id)
                    for p in topic.partitions
                )
                continue
            name, topic_id = topic_image.name, topic.topic_id
        else:
            name = topic.topic
            topic_id = image.topic_ids.get(name)
        for p in topic.partitions:
            target = _Target(
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


class _Fetch:
    """One fetch request's reads, repeated after each wake-up of its long poll."""

    def __init__(
        self,
        ctx: RequestContext,
        targets: list[_Target],
        *,
        replica_id: int,
        replica_epoch: int = -1,
        read_committed: bool,
        max_bytes: int,
        version: int,
        client_metadata: ClientMetadata | None = None,
    ) -> None:
        self.state = ctx.state
        self.client_metadata = client_metadata
        self.replica_epoch = replica_epoch
        self.replicas = ctx.replicas
        self.image = ctx.state.image
        self.targets = targets
        self.replica_id = replica_id
        self.read_committed = read_committed
        self.max_bytes = max_bytes
        self.version = version
        self.keys: list[tuple[str, int]] = []
        """The partitions a long poll waits on: those read from a local log."""
        self.interesting = 0
        """Partitions that passed the metadata checks; with none, Kafka answers without waiting."""

    def read(self) -> tuple[list[PartitionResult], int, bool]:
        """(results in request order, bytes readable, whether a partition failed): readFromLog."""
        results: list[PartitionResult] = []
        erroneous: list[PartitionResult] = []
        limit = self.max_bytes
        min_one_batch = True
        readable = 0
        failed = False
        keys: list[tuple[str, int]] = []
        self.image = self.state.image
        for target in self.targets:
            result, watched = self._read_partition(
                target, min(target.partition_max_bytes, limit), min_one_batch
            )
            if watched:
                keys.append((target.topic, target.partition))
            if result.error_code in _METADATA_ERRORS:
                erroneous.append(result)
                continue
            results.append(result)
            if result.error_code is not ErrorCode.none:
                failed = True
            elif result.diverging_epoch is not None or result.preferred_read_replica >= 0:
                failed = True  # Kafka answers a diverging epoch or a preferred read replica at once
            size = result.records.size if result.records is not None else 0
            if size:
                min_one_batch = False
                limit = max(0, limit - size)
                readable += size
        self.keys = keys
        self.interesting = len(results)
        return results + erroneous, readable, failed

    async def wait(self, max_wait: float, min_bytes: int) -> list[PartitionResult]:
        """Kafka's DelayedFetch: wait in the purgatory for the partitions read to change, until min_bytes
        are readable or max_wait has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        purgatory = self.replicas.purgatory
        while True:
            await purgatory.wait_for_change(self.keys, min(deadline, self._throttle_wake_up(loop.time())))
            results, readable, failed = self.read()
            if readable >= min_bytes or failed or loop.time() >= deadline:
                return results

    def _throttle_wake_up(self, now: float) -> float:
        """When a follower's throttled partitions may be read again: the leader's replication rate back
        at its bound. (Kafka's DelayedFetch looks again only on a change or at max_wait; looking when
        the rate allows makes the copy follow the bound to within a fetch rather than half a second.)"""
        quota = self.replicas.leader_quota
        if self.replica_id < 0 or not any(quota.is_throttled(t.topic, t.partition) for t in self.targets):
            return math.inf
        pause = quota.seconds_until_within()
        return now + max(pause, _MIN_THROTTLE_WAIT) if pause > 0 else math.inf

    def _read_partition(
        self, target: _Target, max_bytes: int, min_one_batch: bool
    ) -> tuple[PartitionResult, bool]:
        """ReplicaManager.readFromLocalLog for one partition; (result, whether the partition is one to wait on)."""
        topic, topic_id, index = target.topic, target.topic_id, target.partition
        try:
            read = self.replicas.read_from_log(
                self.image,
                topic,
                index,
                target.fetch_offset,
                max_bytes,
                replica_id=self.replica_id,
                read_committed=self.read_committed,
                min_one_batch=min_one_batch,
                current_leader_epoch=target.current_leader_epoch,
                last_fetched_epoch=target.last_fetched_epoch,
                follower_log_start_offset=target.log_start_offset,
                replica_epoch=self.replica_epoch,
                client_metadata=self.client_metadata,
            )
        except PartitionError as e:
            error = e.error_code
            if error is ErrorCode.unknown_topic_or_partition:
                return PartitionResult(topic, topic_id, index, error), False
            leader = None
            if (
                error in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)
                and self.version >= 16
            ):
                registration = self.image.partition(topic, index)
                leader = (registration.leader, registration.leader_epoch)
            return PartitionResult(
                topic, topic_id, index, error, empty_records=True, current_leader=leader
            ), False
        except OffsetOutOfRange:
            return PartitionResult(
                topic, topic_id, index, ErrorCode.offset_out_of_range, empty_records=True
            ), True
        except LogStorageError:
            error = ErrorCode.kafka_storage_error if self.version > 5 else ErrorCode.not_leader_or_follower
            return PartitionResult(topic, topic_id, index, error, empty_records=True), True
        aborted = () if self.read_committed and self.replica_id < 0 else None
        result = PartitionResult(
            topic,
            topic_id,
            index,
            ErrorCode.none,
            read.high_watermark,
            read.last_stable_offset,
            read.log_start_offset,
            aborted,
            records=read.records,
            empty_records=True,
            diverging_epoch=read.diverging_epoch,
            preferred_read_replica=read.preferred_read_replica,
        )
        if read.records is not None and aborted is not None:
            # Kafka's LocalLog.addAbortedTransactions: the aborts overlapping the returned batches.
            partition_log = self.replicas.log(topic, index)
            upper = partition_log.fetch_upper_bound_offset(read.records)
            aborted = tuple(
                (txn.producer_id, txn.first_offset)
                for txn in partition_log.collect_aborted_transactions(target.fetch_offset, upper)
            )
            result = result._replace(aborted_transactions=aborted)
        return result, True


def _leader_endpoints(
    ctx: RequestContext, results: list[PartitionResult]
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
    results: list[PartitionResult], version: int
) -> list[tuple[str | None, Any, list[PartitionResult]]]:
    """Consecutive partitions of one topic share a topic entry, keeping the order (FetchResponse.of)."""
    topics: list[tuple[str | None, Any, list[PartitionResult]]] = []
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


_METADATA_ERRORS = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id})

APIS = [ApiSpec(API_KEY, 4, kio_versions(API_KEY)[1], handle_fetch)]  # type: ignore[index]
