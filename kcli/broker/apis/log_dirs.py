"""DescribeLogDirs (35): each log dir with the size of every partition log it holds.

Follows `KafkaApis.handleDescribeLogDirsRequest` and `ReplicaManager.describeLogDirs`: one result
per configured log dir (its absolute path), listing the requested partitions (null: all) that live
there, grouped by topic; topics with none of them are left out. The offset lag of a current log is
max(HW - LEO, 0), always 0 on a single node; there are no future logs (AlterReplicaLogDirs). From v4
on, each dir carries its volume's total and usable bytes; a dir that cannot be read reports
KAFKA_STORAGE_ERROR. The metadata log is Raft's, not the log manager's, and is not listed.
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

API_KEY = 35
_NO_THROTTLE = datetime.timedelta(0)
_LONG_MAX = 2**63 - 1


async def handle_describe_log_dirs(ctx: RequestContext, request: object) -> object:
    response_cls = response_type(API_KEY, ctx.api_version)
    wanted = None
    if request.topics is not None:  # type: ignore[attr-defined]
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}  # type: ignore[attr-defined]
    node = ctx.state.node
    logs = list(node.logs.logs()) if node is not None else []
    results = []
    for log_dir in dict.fromkeys(os.path.abspath(d) for d in ctx.state.config.log_dirs):
        resolved = Path(log_dir).resolve()
        held = [each for each in logs if each.dir.parent.resolve() == resolved]
        results.append(_describe_dir(response_cls, log_dir, held, wanted))
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results))


def _describe_dir(
    response_cls: type, log_dir: str, logs: Iterable[Log], wanted: set[tuple[str, int]] | None
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
                offset_lag=max(each.high_watermark - each.log_end_offset, 0),
                is_future_key=False,
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


APIS = [ApiSpec(API_KEY, *kio_versions(API_KEY), handle_describe_log_dirs)]  # type: ignore[misc]
