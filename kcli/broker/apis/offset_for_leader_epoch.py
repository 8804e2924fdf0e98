"""OffsetForLeaderEpoch (key 23): where each asked-for leader epoch ends in a partition's log.

Follows Kafka's `ReplicaManager.lastOffsetForLeaderEpoch` and `Partition.lastOffsetForLeaderEpoch`:
consumers (KIP-320) and followers ask it to detect log truncation. The answer is the largest epoch
at or below the one asked for and the start offset of the next epoch (the log end offset for the
latest epoch); an epoch the log cannot place is answered with -1 / -1 and no error. Only the leader
answers (NOT_LEADER_OR_FOLLOWER otherwise); current_leader_epoch fences stale or future callers.

One kcli extension: a v3+ request whose ReplicaId is the debugging id (-2, KIP-279's "debug consumer")
is answered by any replica from its own log, leader or not, so that `kcli recover partitions` can read
a follower's epoch history when a partition has no leader. Kafka answers it from the leader only (its
ReplicaManager.lastOffsetForLeaderEpoch always passes fetchOnlyFromLeader = true); versions below 3
carry no ReplicaId (their implicit -2 is an old follower) and stay leader-only.
"""

from __future__ import annotations

import datetime
import sys
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.protocol.messages import kio_versions, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = 23
DEBUGGING_REPLICA_ID = -2
FIRST_REPLICA_ID_VERSION = 3


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> object:
    response_cls, topic_cls, partition_cls = _classes(ctx.api_version)
    any_replica = ctx.api_version >= FIRST_REPLICA_ID_VERSION and request.replica_id == DEBUGGING_REPLICA_ID
    topics = []
    # KIP-320: CLUSTER_ACTION (a follower) covers every topic; a consumer needs DESCRIBE on each
    cluster_action = ctx.authorize(
        AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    )
    for topic in request.topics:
        partitions = []
        allowed = cluster_action or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        for partition in topic.partitions:
            if allowed:
                error, epoch, end_offset = end_offset_for(ctx, topic.topic, partition, any_replica)
            else:
                error, epoch, end_offset = ErrorCode.topic_authorization_failed, -1, -1
            partitions.append(
                partition_cls(
                    error_code=error,
                    partition=partition.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(topic_cls(topic=topic.topic, partitions=tuple(partitions)))
    return response_cls(throttle_time=_NO_THROTTLE, topics=tuple(topics))


def end_offset_for(
    ctx: RequestContext, topic: str, partition: Any, any_replica: bool = False
) -> tuple[ErrorCode, int, int]:
    """(error, epoch, end offset) for one partition of the request; from any replica's own log when
    `any_replica` (the debugging id), else from the leader's only."""
    state = ctx.state
    index = partition.partition
    registration = state.image.partition(topic, index)
    partition_log = ctx.replicas.log(topic, index)
    if partition_log is None:
        error = (
            ErrorCode.unknown_topic_or_partition if registration is None else ErrorCode.not_leader_or_follower
        )
        return error, -1, -1
    current = partition.current_leader_epoch
    if registration is not None and current >= 0 and current != registration.leader_epoch:
        if registration.leader_epoch > current:
            return ErrorCode.fenced_leader_epoch, -1, -1
        return ErrorCode.unknown_leader_epoch, -1, -1
    if registration is None or (registration.leader != state.node_id and not any_replica):
        return ErrorCode.not_leader_or_follower, -1, -1
    epoch, end_offset = partition_log.end_offset_for_epoch(partition.leader_epoch)
    if end_offset < 0:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, epoch, end_offset


_NO_THROTTLE = datetime.timedelta(0)


@cache
def _classes(version: int) -> tuple[Any, Any, Any]:
    response_cls = response_type(API_KEY, version)
    module = sys.modules[response_cls.__module__]
    return response_cls, module.OffsetForLeaderTopicResult, module.EpochEndOffset


APIS = [ApiSpec(API_KEY, 2, kio_versions(API_KEY)[1], handle_offset_for_leader_epoch)]  # type: ignore[index]
