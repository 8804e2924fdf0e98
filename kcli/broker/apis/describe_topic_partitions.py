"""DescribeTopicPartitions (key 75): paged topic descriptions with ELR, from KIP-966.

Follows Kafka's `DescribeTopicPartitionsRequestHandler` and
`KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse`: the topics (all of them when the list
is empty) are answered sorted by name, starting at the request's cursor, until the partition limit
(the request's, capped by `max.request.partition.size.limit`) is used up; the answer then carries
`NextCursor`, the first partition it left out. A cursor whose topic is not in a non-empty topic
list, or whose partition index is negative, fails the whole request with INVALID_REQUEST. Topics the
principal may not DESCRIBE are skipped (named ones answered TOPIC_AUTHORIZATION_FAILED at the end), and
each described topic carries its authorized operations from the ACLs.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.metadata import OPERATIONS_NOT_REQUESTED, ZERO_UUID
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.config import is_internal_topic, is_valid_topic_name
from kcli.protocol.messages import build, nested_type, response_type
from kcli.security.acl import AclOperation, ResourceType

API_KEY = 75
NO_LEADER = -1
_NO_THROTTLE = datetime.timedelta(0)


async def handle_describe_topic_partitions(ctx: RequestContext, request: object) -> object:
    response_cls = response_type(API_KEY, ctx.api_version)
    requested: tuple = request.topics  # type: ignore[attr-defined]
    cursor = request.cursor  # type: ignore[attr-defined]
    fetch_all = not requested
    cursor_topic = cursor.topic_name if cursor is not None else ""
    image = ctx.image

    names = image.topic_ids if fetch_all else [t.name for t in requested]
    topics = sorted({name for name in names if name >= cursor_topic})
    if cursor is not None and (
        (not fetch_all and cursor.topic_name not in topics) or cursor.partition_index < 0
    ):
        # Kafka throws InvalidRequestException; its error response names every requested topic.
        entries = tuple(_topic_entry(response_cls, ErrorCode.invalid_request, t.name) for t in requested)
        return build(response_cls, throttle_time=_NO_THROTTLE, topics=entries, next_cursor=None)

    # Topics the principal cannot DESCRIBE are left out (named, with TOPIC_AUTHORIZATION_FAILED and no
    # id, after the others when asked for), so their existence is not disclosed.
    unauthorized = [n for n in topics if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n)]
    if unauthorized:
        denied = set(unauthorized)
        topics = [n for n in topics if n not in denied]
        if fetch_all:
            unauthorized = []
    limit = max(
        min(int(ctx.state.config["max.request.partition.size.limit"]), request.response_partition_limit),  # type: ignore[attr-defined,call-overload]
        1,
    )
    entries_out: list[object] = []
    next_cursor = None
    cursor_cls = nested_type(response_cls, "Cursor")
    for name in topics:
        if limit == 0:
            # Every partition of the topics before fits: the next page starts at this topic.
            next_cursor = build(cursor_cls, topic_name=name, partition_index=0)
            break
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        described = _describe(response_cls, image, name, start, limit)
        if described is None:
            if not fetch_all:
                error = (
                    ErrorCode.unknown_topic_or_partition
                    if is_valid_topic_name(name)
                    else ErrorCode.invalid_topic_exception
                )
                entries_out.append(_topic_entry(response_cls, error, name))
            continue
        entry, next_index = described
        entries_out.append(entry)
        if next_index is not None:
            next_cursor = build(cursor_cls, topic_name=name, partition_index=next_index)
            break
        limit -= len(entry.partitions)  # type: ignore[attr-defined]
    entries_out = [
        dataclasses.replace(
            e, topic_authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, e.name)
        )  # type: ignore[attr-defined]
        for e in entries_out
    ]
    entries_out += [
        _topic_entry(response_cls, ErrorCode.topic_authorization_failed, name, internal=False)
        for name in unauthorized
    ]
    return build(response_cls, throttle_time=_NO_THROTTLE, topics=tuple(entries_out), next_cursor=next_cursor)


def _describe(
    response_cls: type, image: ClusterMetadataImage, name: str, start: int, limit: int
) -> tuple[object, int | None] | None:
    """The topic's partitions [start, start + limit), and the first one left out (None: all fit)."""
    partitions = image.partitions_of(name)
    info = image.topic(name)
    if partitions is None or info is None:
        return None
    offline = {p.partition_index: p.offline_replicas for p in info.partitions}
    end = min(len(partitions), start + limit)
    partition_cls = nested_type(response_cls, "DescribeTopicPartitionsResponsePartition")
    described = []
    for index in range(start, end):
        registration = partitions.get(index)
        if registration is None:
            continue
        leader = image.broker(registration.leader)
        # getAliveEndpoint: a leader without our listener (or unregistered) is reported as -1.
        has_endpoint = leader is not None and leader.endpoint(image.listener_name) is not None
        described.append(
            build(
                partition_cls,
                error_code=ErrorCode.none,
                partition_index=index,
                leader_id=registration.leader if has_endpoint else NO_LEADER,
                leader_epoch=registration.leader_epoch,
                replica_nodes=registration.replicas,
                isr_nodes=registration.isr,
                eligible_leader_replicas=registration.elr,
                last_known_elr=registration.last_known_elr,
                offline_replicas=offline.get(index, ()),
            )
        )
    entry = _topic_entry(response_cls, ErrorCode.none, name, info.topic_id, partitions=tuple(described))
    return entry, (end if end < len(partitions) else None)


def _topic_entry(
    response_cls: type,
    error: ErrorCode,
    name: str,
    topic_id: uuid.UUID = ZERO_UUID,
    *,
    partitions: tuple[object, ...] = (),
    internal: bool | None = None,
) -> object:
    # Kafka fills the authorized operations of every topic it describes, asked or not (there is no
    # flag in the request; the handler sets them from the ACLs afterwards). Its INVALID_REQUEST answer
    # (getErrorResponse) and a topic the principal may not describe leave them at the default.
    invalid = error is ErrorCode.invalid_request
    topic_cls = nested_type(response_cls, "DescribeTopicPartitionsResponseTopic")
    return build(
        topic_cls,
        error_code=error,
        name=name,
        topic_id=topic_id,
        is_internal=(not invalid and is_internal_topic(name)) if internal is None else internal,
        partitions=partitions,
        topic_authorized_operations=OPERATIONS_NOT_REQUESTED,
    )


APIS = [ApiSpec(API_KEY, 0, 0, handle_describe_topic_partitions)]
