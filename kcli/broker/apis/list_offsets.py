"""ListOffsets (key 2): earliest, latest, max-timestamp and by-timestamp offsets of partitions.

Follows Kafka's `ReplicaManager.fetchOffset` and `Partition.fetchOffsetForTimestamp`:
- LATEST (-1) is the high watermark for read_uncommitted, the last stable offset for read_committed,
  and the log end offset for a replica or the debugging id; it carries the partition's leader epoch;
- EARLIEST (-2) and EARLIEST_LOCAL (-4, v8+) are the log start offset, with the epoch of the first
  leader-epoch entry when that entry starts at or below it;
- MAX_TIMESTAMP (-3, v7+) is the first record with the largest timestamp;
- a timestamp >= 0 is the first record at or after it, found through the time index; an answer at or
  past the last fetchable offset reads as "none" (-1, -1), as Kafka answers it;
- LATEST_TIERED (-5, v9+) and EARLIEST_PENDING_UPLOAD (-6, v11+) are -1: there is no remote storage;
- any other negative timestamp, or one older than the version allows, is UNSUPPORTED_VERSION; a
  partition asked for twice is INVALID_REQUEST (answered once); unknown partitions are
  UNKNOWN_TOPIC_OR_PARTITION; a stale or future current_leader_epoch is FENCED_/UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

import datetime
import sys
from collections import Counter
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.log import LogStorageError
from kcli.protocol.messages import kio_versions, response_type
from kcli.security.acl import AclOperation, ResourceType

API_KEY = 2
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
READ_COMMITTED = 1

TIMESTAMP_MIN_VERSION = {
    EARLIEST_TIMESTAMP: 1,
    LATEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}
"""The first version that may ask for each special timestamp (ReplicaManager.timestampMinSupportedVersion)."""


async def handle_list_offsets(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls, topic_cls, partition_cls = _classes(version)
    with_epoch = version >= 4
    counts = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    answered: set[tuple[str, int]] = set()
    topics = []
    describable: dict[str, bool] = {}
    for topic in request.topics:
        partitions = []
        allowed = describable.get(topic.name)
        if allowed is None:  # KafkaApis: DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED
            allowed = describable[topic.name] = ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name
            )
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if key in answered:
                continue
            answered.add(key)
            if not allowed:
                error, timestamp, offset, epoch = ErrorCode.topic_authorization_failed, -1, -1, -1
            elif counts[key] > 1:
                error, timestamp, offset, epoch = ErrorCode.invalid_request, -1, -1, -1
            else:
                error, timestamp, offset, epoch = _list_offset(ctx, request, topic.name, partition)
            values = {"partition_index": partition.partition_index, "error_code": error}
            values.update(timestamp=timestamp, offset=offset)
            if with_epoch:
                values["leader_epoch"] = epoch
            partitions.append(partition_cls(**values))
        topics.append(topic_cls(name=topic.name, partitions=tuple(partitions)))
    if version >= 2:
        return response_cls(throttle_time=_NO_THROTTLE, topics=tuple(topics))
    return response_cls(topics=tuple(topics))


def _list_offset(
    ctx: RequestContext, request: Any, topic: str, partition: Any
) -> tuple[ErrorCode, int, int, int]:
    """(error, timestamp, offset, leader epoch) for one partition; -1 for whatever is not known."""
    version = ctx.api_version
    timestamp = partition.timestamp
    if timestamp < 0 and version < TIMESTAMP_MIN_VERSION.get(timestamp, sys.maxsize):
        return ErrorCode.unsupported_version, -1, -1, -1
    state = ctx.state
    index = partition.partition_index
    registration = state.image.partition(topic, index)
    if registration is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, -1
    partition_log = ctx.replicas.log(topic, index)
    if partition_log is None:
        return ErrorCode.not_leader_or_follower, -1, -1, -1
    current_epoch = getattr(partition, "current_leader_epoch", -1)
    if current_epoch >= 0 and current_epoch != registration.leader_epoch:
        error = (
            ErrorCode.fenced_leader_epoch
            if registration.leader_epoch > current_epoch
            else ErrorCode.unknown_leader_epoch
        )
        return error, -1, -1, -1
    replica_id = request.replica_id
    only_leader = replica_id != DEBUGGING_REPLICA_ID
    if only_leader and registration.leader != state.node_id:
        return ErrorCode.not_leader_or_follower, -1, -1, -1

    if replica_id != CONSUMER_REPLICA_ID:
        last_fetchable = partition_log.log_end_offset
    elif getattr(request, "isolation_level", 0) == READ_COMMITTED:
        last_fetchable = partition_log.last_stable_offset
    else:
        last_fetchable = partition_log.high_watermark
    try:
        if timestamp == LATEST_TIMESTAMP:
            return ErrorCode.none, -1, last_fetchable, registration.leader_epoch
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            epoch = partition_log.log_start_epoch()
            return ErrorCode.none, -1, partition_log.log_start_offset, -1 if epoch is None else epoch
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            return ErrorCode.none, -1, -1, -1
        if timestamp == MAX_TIMESTAMP:
            found = partition_log.max_timestamp_offset()
        else:
            found = partition_log.offset_for_timestamp(timestamp)
    except LogStorageError:
        return ErrorCode.kafka_storage_error, -1, -1, -1
    if found is None:
        return ErrorCode.none, -1, -1, -1
    offset, found_timestamp, epoch = found
    if offset >= last_fetchable:
        return ErrorCode.none, -1, -1, -1
    return ErrorCode.none, found_timestamp, offset, epoch if epoch >= 0 else -1


_NO_THROTTLE = datetime.timedelta(0)


@cache
def _classes(version: int) -> tuple[Any, Any, Any]:
    response_cls = response_type(API_KEY, version)
    module = sys.modules[response_cls.__module__]
    return response_cls, module.ListOffsetsTopicResponse, module.ListOffsetsPartitionResponse


APIS = [ApiSpec(API_KEY, 1, kio_versions(API_KEY)[1], handle_list_offsets)]  # type: ignore[index]
