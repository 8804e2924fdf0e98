"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): the log dirs of this broker and moves between them.

DescribeLogDirs follows `KafkaApis.handleDescribeLogDirsRequest` and `ReplicaManager.describeLogDirs`:
one result per configured log dir (its absolute path), listing the requested partitions (null: all)
whose current or future log lives there, grouped by topic; topics with none of them are left out. The
size is the log's bytes on disk; the offset lag of a current log is max(HW - LEO, 0), of a future log
(is_future_key) the current log's end minus its own (getLogEndOffsetLag), -1 when the partition has no
current log. From v4 on, each dir carries its volume's total and usable bytes; a dir that cannot be
read reports KAFKA_STORAGE_ERROR. The metadata log is Raft's, not the log manager's, and is not listed.

AlterReplicaLogDirs answers each partition as `ReplicaManager.alterReplicaLogDirs` (see
`kcli.broker.replication.alter_log_dirs`): LOG_DIR_NOT_FOUND for a dir not in `log.dirs`,
KAFKA_STORAGE_ERROR for one that is not usable, REPLICA_NOT_AVAILABLE for a partition with no replica
on this broker (its dir is remembered for when the replica comes), UNKNOWN_TOPIC_OR_PARTITION for one
the metadata does not know.

DescribeLogDirs needs DESCRIBE on the cluster (else no dirs and CLUSTER_AUTHORIZATION_FAILED), and
AlterReplicaLogDirs ALTER (else that error on every partition), as KafkaApis checks them.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from pathlib import Path

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.log.log import Log
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = 35
ALTER_REPLICA_LOG_DIRS = 34
_NO_THROTTLE = datetime.timedelta(0)
_LONG_MAX = 2**63 - 1
INVALID_OFFSET_LAG = -1


async def handle_describe_log_dirs(ctx: RequestContext, request: object) -> object:
    response_cls = response_type(API_KEY, ctx.api_version)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):  # no dirs, the error
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    wanted = None
    if request.topics is not None:  # type: ignore[attr-defined]
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}  # type: ignore[attr-defined]
    node = ctx.state.node
    logs = list(node.logs.all_logs()) if node is not None else []
    current = {(each.topic, each.partition): each for each in node.logs.logs()} if node is not None else {}
    results = []
    for log_dir in dict.fromkeys(os.path.abspath(d) for d in ctx.state.config.log_dirs):
        resolved = Path(log_dir).resolve()
        held = [each for each in logs if each.dir.parent.resolve() == resolved]
        results.append(_describe_dir(response_cls, log_dir, held, wanted, current))
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results))


def _offset_lag(each: Log, current: dict[tuple[str, int], Log]) -> int:
    """ReplicaManager.getLogEndOffsetLag."""
    log = current.get((each.topic, each.partition))
    if log is None:
        return INVALID_OFFSET_LAG
    if log is not each:  # a future log
        return log.log_end_offset - each.log_end_offset
    return max(log.high_watermark - each.log_end_offset, 0)


def _describe_dir(
    response_cls: type,
    log_dir: str,
    logs: Iterable[Log],
    wanted: set[tuple[str, int]] | None,
    current: dict[tuple[str, int], Log],
) -> object:
    result_cls = nested_type(response_cls, "DescribeLogDirsResult")
    topic_cls = nested_type(response_cls, "DescribeLogDirsTopic")
    partition_cls = nested_type(response_cls, "DescribeLogDirsPartition")
    try:
        volume = os.statvfs(log_dir)
    except OSError:
        return build(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=log_dir, topics=())
    by_topic: dict[str, list[object]] = {}
    for each in sorted(logs, key=lambda e: (e.topic, e.partition)):
        if wanted is not None and (each.topic, each.partition) not in wanted:
            continue
        by_topic.setdefault(each.topic, []).append(
            partition_cls(
                partition_index=each.partition,
                partition_size=each.size_bytes(),
                offset_lag=_offset_lag(each, current),
                is_future_key=current.get((each.topic, each.partition)) is not each,
            )
        )
    topics = tuple(topic_cls(name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return build(
        result_cls,
        error_code=ErrorCode.none,
        log_dir=log_dir,
        topics=topics,
        total_bytes=min(volume.f_blocks * volume.f_frsize, _LONG_MAX),
        usable_bytes=min(volume.f_bavail * volume.f_frsize, _LONG_MAX),
        is_cordoned=False,
    )


async def handle_alter_replica_log_dirs(ctx: RequestContext, request: object) -> object:
    response_cls = response_type(ALTER_REPLICA_LOG_DIRS, ctx.api_version)
    topic_cls = nested_type(response_cls, "AlterReplicaLogDirTopicResult")
    partition_cls = nested_type(response_cls, "AlterReplicaLogDirPartitionResult")
    wanted = [
        (topic.name, index, log_dir.path)
        for log_dir in request.dirs  # type: ignore[attr-defined]
        for topic in log_dir.topics
        for index in topic.partitions
    ]
    node = ctx.state.node
    if not ctx.authorize(
        AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME
    ):  # the error on every partition
        errors = {(topic, index): ErrorCode.cluster_authorization_failed for topic, index, _ in wanted}
    elif node is None:
        errors = {(topic, index): ErrorCode.kafka_storage_error for topic, index, _ in wanted}
    else:
        errors = node.alter_log_dirs.alter_replica_log_dirs(wanted)
    by_topic: dict[str, list[object]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(partition_cls(partition_index=index, error_code=error))
    results = tuple(topic_cls(topic_name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return build(response_cls, throttle_time=_NO_THROTTLE, results=results)


APIS = [
    ApiSpec(API_KEY, *kio_versions(API_KEY), handle_describe_log_dirs),  # type: ignore[misc]
    ApiSpec(ALTER_REPLICA_LOG_DIRS, *kio_versions(ALTER_REPLICA_LOG_DIRS), handle_alter_replica_log_dirs),  # type: ignore[misc]
]
