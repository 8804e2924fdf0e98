"""DeleteRecords (21): move a partition's log start offset up (Kafka's "low watermark").

Follows `KafkaApis.handleDeleteRecordsRequest` and `ReplicaManager.deleteRecordsOnLocalLog`: a
partition the metadata does not know is UNKNOWN_TOPIC_OR_PARTITION, an internal topic is
INVALID_TOPIC_EXCEPTION, a partition this node does not lead is NOT_LEADER_OR_FOLLOWER; the log
itself answers POLICY_VIOLATION (cleanup.policy without delete) and OFFSET_OUT_OF_RANGE (above the
high watermark, or negative other than -1, which means the high watermark). Every failure has low
watermark -1. The whole segments below the new log start offset go at the next retention pass.

Kafka may park the request until every replica's log start offset reaches the offset; with this
node the only replica that is true as soon as the log answers, so the timeout is never waited on.
"""

from __future__ import annotations

import datetime
import logging

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.log.errors import LogStorageError, OffsetOutOfRange
from kcli.broker.log.log import PolicyViolation
from kcli.config import is_internal_topic
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import AclOperation, ResourceType

API_KEY = 21
INVALID_LOW_WATERMARK = -1
_NO_THROTTLE = datetime.timedelta(0)

log = logging.getLogger("kcli.broker")


async def handle_delete_records(ctx: RequestContext, request: object) -> object:
    response_cls = response_type(API_KEY, ctx.api_version)
    topic_cls = nested_type(response_cls, "DeleteRecordsTopicResult")
    partition_cls = nested_type(response_cls, "DeleteRecordsPartitionResult")
    # Kafka keys the request by partition: a partition named twice is answered once, last offset wins.
    requested: dict[str, dict[int, int]] = {}
    for topic in request.topics:  # type: ignore[attr-defined]
        for partition in topic.partitions:
            requested.setdefault(topic.name, {})[partition.partition_index] = partition.offset

    topics = []
    for name, offsets in requested.items():
        partitions = []
        deletable = ctx.authorize(
            AclOperation.DELETE, ResourceType.TOPIC, name
        )  # else TOPIC_AUTHORIZATION_FAILED
        for index, offset in offsets.items():
            if deletable:
                error, low_watermark = delete_records(ctx, name, index, offset)
            else:
                error, low_watermark = ErrorCode.topic_authorization_failed, -1
            partitions.append(
                partition_cls(partition_index=index, low_watermark=low_watermark, error_code=error)
            )
        topics.append(topic_cls(name=name, partitions=tuple(partitions)))
    return build(response_cls, throttle_time=_NO_THROTTLE, topics=tuple(topics))


def delete_records(ctx: RequestContext, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
    """(error, low watermark) for one partition."""
    image = ctx.state.image
    info = image.topic(topic)
    if info is None or all(p.partition_index != partition for p in info.partitions):
        return ErrorCode.unknown_topic_or_partition, INVALID_LOW_WATERMARK
    if is_internal_topic(topic):
        return ErrorCode.invalid_topic_exception, INVALID_LOW_WATERMARK
    leader = next(p.leader_id for p in info.partitions if p.partition_index == partition)
    partition_log = ctx.replicas.log(topic, partition)
    if partition_log is None or leader != ctx.state.node_id:
        return ErrorCode.not_leader_or_follower, INVALID_LOW_WATERMARK
    try:
        low_watermark = partition_log.delete_records_before(offset)
    except (PolicyViolation, OffsetOutOfRange, LogStorageError) as exc:
        log.debug("DeleteRecords on %s-%d to %d failed: %s", topic, partition, offset, exc)
        return exc.error_code, INVALID_LOW_WATERMARK
    log.info("DeleteRecords: log start offset of %s-%d is now %d", topic, partition, low_watermark)
    ctx.replicas.purgatory.check_and_complete((topic, partition))  # fetch sessions answer the new start
    return ErrorCode.none, low_watermark


APIS = [ApiSpec(API_KEY, *kio_versions(API_KEY), handle_delete_records)]  # type: ignore[misc]
