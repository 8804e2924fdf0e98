"""Committed offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47).

As in Kafka's KafkaApis, partitions the metadata does not know are answered UNKNOWN_TOPIC_OR_PARTITION
before the coordinator sees the request (UNKNOWN_TOPIC_ID for v10's topic ids), and only the rest are
committed. Each version's shape is kept: OffsetCommit v2-v4 may ask for a retention time (stored as an
expire timestamp), OffsetFetch v1 copies a group error into every partition, v2-v7 put it at the top,
v8+ answer several groups each with its own error, and v7+ honour RequireStable.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.groups import coordinator_of, millis
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.group.group import NO_GENERATION, UNKNOWN_MEMBER_ID, OffsetAndMetadata
from kcli.broker.log.log import wall_clock_ms
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import AclOperation, ResourceType

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
OFFSET_DELETE = 47
TOPIC_IDS_VERSION = 10
"""OffsetCommit and OffsetFetch name topics by id from v10."""

DEFAULT_RETENTION_TIME = -1
_NO_THROTTLE = datetime.timedelta(0)


# --- OffsetCommit -------------------------------------------------------------------------------------


async def handle_offset_commit(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(OFFSET_COMMIT, version)
    topic_cls = nested_type(response_cls, "OffsetCommitResponseTopic")
    partition_cls = nested_type(response_cls, "OffsetCommitResponsePartition")
    by_id = version >= TOPIC_IDS_VERSION
    now = wall_clock_ms()
    retention_ms = DEFAULT_RETENTION_TIME
    if 2 <= version <= 4:
        retention_ms = millis(request.retention_time)
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    order: list[tuple[Any, list[tuple[int, tuple[str, int] | None, ErrorCode | None]]]] = []
    group_readable = ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id)
    for topic in request.topics:
        name, missing = _topic_name(ctx, topic, by_id)
        if not group_readable:  # KafkaApis: every partition gets GROUP_AUTHORIZATION_FAILED
            missing = ErrorCode.group_authorization_failed
        elif missing is None and not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name):  # type: ignore[arg-type]
            missing = ErrorCode.topic_authorization_failed
        answers = []
        for partition in topic.partitions:
            key = None if name is None else (name, partition.partition_index)
            if missing is not None:
                answers.append((partition.partition_index, None, missing))
            elif not _partition_exists(ctx, name, partition.partition_index):  # type: ignore[arg-type]
                answers.append((partition.partition_index, key, ErrorCode.unknown_topic_or_partition))
            else:
                answers.append((partition.partition_index, key, None))
                offsets[key] = OffsetAndMetadata(  # type: ignore[index]
                    offset=partition.committed_offset,
                    leader_epoch=getattr(partition, "committed_leader_epoch", -1),
                    metadata=partition.committed_metadata or "",
                    commit_timestamp=now,
                    expire_timestamp=now + retention_ms if retention_ms != DEFAULT_RETENTION_TIME else -1,
                )
        order.append((topic, answers))
    if offsets:
        coordinator = coordinator_of(ctx)
        if coordinator is None:
            errors = dict.fromkeys(offsets, ErrorCode.coordinator_not_available)
        else:
            errors = await coordinator.commit_offsets(
                request.group_id,
                getattr(request, "member_id", UNKNOWN_MEMBER_ID),
                getattr(request, "group_instance_id", None),
                getattr(request, "generation_id_or_member_epoch", NO_GENERATION),
                offsets,
                api_version=version,
            )
    topics = []
    for topic, answers in order:
        partitions = tuple(
            build(
                partition_cls,
                partition_index=index,
                error_code=error if error is not None else errors.get(key, ErrorCode.none),  # type: ignore[arg-type]
            )
            for index, key, error in answers
        )
        topics.append(
            build(
                topic_cls,
                name=getattr(topic, "name", None),
                topic_id=getattr(topic, "topic_id", None),
                partitions=partitions,
            )
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, topics=tuple(topics))


# --- OffsetFetch --------------------------------------------------------------------------------------


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(OFFSET_FETCH, version)
    require_stable = bool(getattr(request, "require_stable", False))
    if version >= 8:
        group_cls = nested_type(response_cls, "OffsetFetchResponseGroup")
        groups = []
        for group in request.groups:
            member = (group.member_id, group.member_epoch) if version >= 9 else None
            error, topics = _fetch_group(
                ctx, response_cls, group.group_id, group.topics, require_stable, member=member
            )
            groups.append(build(group_cls, group_id=group.group_id, topics=topics, error_code=error))
        return build(response_cls, throttle_time=_NO_THROTTLE, groups=tuple(groups))
    error, topics = _fetch_group(ctx, response_cls, request.group_id, request.topics, require_stable)
    if error is not ErrorCode.none and version < 2:
        # v0-1 have no group-level error: every listed partition carries it.
        topic_cls = nested_type(response_cls, "OffsetFetchResponseTopic")
        partition_cls = nested_type(response_cls, "OffsetFetchResponsePartition")
        topics = tuple(
            build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    build(
                        partition_cls, partition_index=p, committed_offset=-1, metadata="", error_code=error
                    )
                    for p in t.partition_indexes
                ),
            )
            for t in request.topics
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=error, topics=topics)


def _fetch_group(
    ctx: RequestContext,
    response_cls: type,
    group_id: str,
    requested: Any,
    require_stable: bool,
    *,
    member: tuple[str | None, int] | None = None,
) -> tuple[ErrorCode, tuple[object, ...]]:
    """(group error, response topics) for one group; `requested` None means every committed partition."""
    version = ctx.api_version
    by_id = version >= TOPIC_IDS_VERSION
    grouped = version >= 8
    topic_cls = nested_type(
        response_cls, "OffsetFetchResponseTopics" if grouped else "OffsetFetchResponseTopic"
    )
    partition_cls = nested_type(
        response_cls, "OffsetFetchResponsePartitions" if grouped else "OffsetFetchResponsePartition"
    )
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, ()
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return ErrorCode.coordinator_not_available, ()
    # (topic reference as asked, name or None, error for the whole topic or None, partition indexes)
    listed: list[tuple[Any, str | None, ErrorCode | None, Iterable[int]]] = []
    keys: list[tuple[str, int]] | None = None
    if requested is not None:
        keys = []
        for topic in requested:
            name, missing = _topic_name(ctx, topic, by_id)
            if missing is None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):  # type: ignore[arg-type]
                missing = ErrorCode.topic_authorization_failed  # Kafka's UNAUTHORIZED_PARTITION
            listed.append((topic, name, missing, topic.partition_indexes))
            if name is not None:
                keys.extend((name, p) for p in topic.partition_indexes)
    error, offsets = coordinator.fetch_offsets(group_id, require_stable and version >= 7, keys, member)
    if error is not ErrorCode.none:
        return error, ()
    if requested is None:
        by_topic: dict[str, list[int]] = {}
        for name, partition in offsets:
            by_topic.setdefault(name, []).append(partition)
        for name, partitions in by_topic.items():
            topic_id = _topic_id(ctx, name)
            if by_id and topic_id is None:
                continue  # a deleted topic has no id to name it by
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_if_denied=False):
                continue  # clients never see offsets of topics they cannot describe
            listed.append((None, name, None, sorted(partitions)))
    topics = []
    for asked, name, missing, partitions in listed:
        answers = []
        for index in partitions:
            if missing is not None:
                committed, partition_error = None, missing
            else:
                committed, partition_error = offsets.get((name, index), (None, ErrorCode.none))  # type: ignore[arg-type]
            answers.append(
                build(
                    partition_cls,
                    partition_index=index,
                    committed_offset=committed.offset if committed is not None else -1,
                    committed_leader_epoch=committed.leader_epoch if committed is not None else -1,
                    metadata=committed.metadata if committed is not None else "",
                    error_code=partition_error,
                )
            )
        topics.append(
            build(
                topic_cls,
                name=name if name is not None else "",
                topic_id=getattr(asked, "topic_id", None) or (_topic_id(ctx, name) if name else None),
                partitions=tuple(answers),
            )
        )
    return ErrorCode.none, tuple(topics)


# --- OffsetDelete -------------------------------------------------------------------------------------


async def handle_offset_delete(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(OFFSET_DELETE, ctx.api_version)
    topic_cls = nested_type(response_cls, "OffsetDeleteResponseTopic")
    partition_cls = nested_type(response_cls, "OffsetDeleteResponsePartition")
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            topics=(),
        )
    known: list[tuple[str, int]] = []
    unknown: set[tuple[str, int]] = set()
    unreadable: set[str] = set()
    for topic in request.topics:
        if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name):
            unreadable.add(topic.name)
            continue
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if _partition_exists(ctx, topic.name, partition.partition_index):
                known.append(key)
            else:
                unknown.add(key)
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        group_error, results = ErrorCode.coordinator_not_available, {}
    else:
        group_error, results = coordinator.delete_offsets(request.group_id, known)
    if group_error is not ErrorCode.none:
        return build(response_cls, throttle_time=_NO_THROTTLE, error_code=group_error, topics=())
    topics = tuple(
        build(
            topic_cls,
            name=topic.name,
            partitions=tuple(
                build(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=ErrorCode.topic_authorization_failed
                    if topic.name in unreadable
                    else ErrorCode.unknown_topic_or_partition
                    if (topic.name, p.partition_index) in unknown
                    else results.get((topic.name, p.partition_index), ErrorCode.none),
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, topics=topics)


# --- topics -------------------------------------------------------------------------------------------


def _topic_name(ctx: RequestContext, topic: Any, by_id: bool) -> tuple[str | None, ErrorCode | None]:
    """(name, None), or (None, UNKNOWN_TOPIC_ID) for a v10 topic id the metadata does not know."""
    if not by_id:
        return topic.name, None
    topic_id: uuid.UUID | None = topic.topic_id
    info = None if topic_id is None else ctx.state.image.topic_by_id(topic_id)
    if info is None:
        return None, ErrorCode.unknown_topic_id
    return info.name, None


def _topic_id(ctx: RequestContext, name: str) -> uuid.UUID | None:
    info = ctx.state.image.topic(name)
    return None if info is None else info.topic_id


def _partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.state.image.topic(topic)
    return info is not None and any(p.partition_index == partition for p in info.partitions)


def _versions(api_key: int) -> tuple[int, int]:
    versions = kio_versions(api_key)
    assert versions is not None
    return versions


APIS = [
    ApiSpec(OFFSET_COMMIT, *_versions(OFFSET_COMMIT), handle_offset_commit),
    ApiSpec(OFFSET_FETCH, *_versions(OFFSET_FETCH), handle_offset_fetch),
    ApiSpec(OFFSET_DELETE, *_versions(OFFSET_DELETE), handle_offset_delete),
]
