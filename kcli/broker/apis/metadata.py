"""Metadata (key 3): brokers, cluster id, controller and topic/partition leadership.

Follows Kafka's `KafkaApis.handleTopicMetadataRequest`: "all topics" is a null list (or, in v0, an
empty one); requested topics that do not exist are auto-created when the broker allows it and
the request asks for it, and otherwise answered with UNKNOWN_TOPIC_OR_PARTITION (or
INVALID_TOPIC_EXCEPTION for a name Kafka would reject). With the StandardAuthorizer, topics the
principal cannot DESCRIBE are left out of "all topics" and answered TOPIC_AUTHORIZATION_FAILED when
named, as are missing ones it cannot CREATE that would be auto-created. The authorized-operations
bitfields still list everything the resource supports.
"""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.metadata.image import ClusterMetadataImage, TopicInfo
from kcli.config import is_internal_topic, is_valid_topic_name
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = 3

# AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12 (AclEntry.supportedOperations).
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
OPERATIONS_NOT_REQUESTED = -(2**31)  # the schema default, Integer.MIN_VALUE
ZERO_UUID = uuid.UUID(int=0)
_NO_THROTTLE = datetime.timedelta(0)


async def handle_metadata(ctx: RequestContext, request: object) -> object:
    version = ctx.api_version
    response_cls = response_type(API_KEY, version)
    requested = request.topics  # type: ignore[attr-defined]
    all_topics = requested is None or (version == 0 and not requested)
    include_topic_ops = version >= 8 and getattr(request, "include_topic_authorized_operations", False)

    if not all_topics and version < 12:
        for topic in requested:
            if topic.name is None or getattr(topic, "topic_id", ZERO_UUID) not in (None, ZERO_UUID):
                # Kafka throws InvalidRequestException; the error response lists each topic with it.
                topics = tuple(
                    _topic_entry(
                        response_cls, ErrorCode.invalid_request, t.name or "", getattr(t, "topic_id", None)
                    )
                    for t in requested
                )
                return build(response_cls, throttle_time=_NO_THROTTLE, brokers=(), topics=topics)

    image = ctx.image
    entries: list[object] = []
    if all_topics:
        entries = [
            _describe(ctx, response_cls, info, include_topic_ops)
            for info in image.topics()
            if _describable(ctx, info.name, log_if_denied=False)
        ]
    else:
        entries = await _requested_topics(ctx, request, response_cls, image, include_topic_ops)

    cluster_ops = OPERATIONS_NOT_REQUESTED
    if 8 <= version <= 10 and getattr(request, "include_cluster_authorized_operations", False):
        cluster_ops = ctx.cluster_authorized_operations()
    broker_cls = nested_type(response_cls, "MetadataResponseBroker")
    image = ctx.image  # auto-creation may have replaced it
    brokers = tuple(
        build(broker_cls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in image.brokers()
        if not b.is_fenced  # KRaftMetadataCache.getAliveBrokerNodes
    )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        brokers=brokers,
        cluster_id=image.cluster_id,
        controller_id=image.controller_id,
        topics=tuple(entries),
        cluster_authorized_operations=cluster_ops,
        error_code=ErrorCode.none,
    )


async def _requested_topics(
    ctx: RequestContext, request: object, response_cls: type, image: ClusterMetadataImage, include_ops: bool
) -> list[object]:
    requested = request.topics  # type: ignore[attr-defined]
    entries: list[object] = []
    ids = [t.topic_id for t in requested if getattr(t, "topic_id", None) not in (None, ZERO_UUID)]
    if ids:
        # v12+: when any topic id is given, ids are used and names are ignored, as Kafka does.
        for topic_id in dict.fromkeys(ids):
            info = image.topic_by_id(topic_id)
            if info is None:
                entries.append(_topic_entry(response_cls, ErrorCode.unknown_topic_id, None, topic_id))
            elif not _describable(ctx, info.name):  # topic ids are not secret: Kafka names the id
                entries.append(
                    _topic_entry(
                        response_cls, ErrorCode.topic_authorization_failed, None, topic_id, is_internal=False
                    )
                )
            else:
                entries.append(_describe(ctx, response_cls, info, include_ops))
        return entries

    names = list(dict.fromkeys(t.name for t in requested if t.name is not None))
    denied = _denied(ctx, request, image, names) if ctx.state.authorizer is not None else {}
    missing = [name for name in names if name not in denied and image.topic(name) is None]
    errors: dict[str, ErrorCode] = {}
    if missing:
        errors = await _create_or_refuse(ctx, request, missing)
        image = ctx.image
    for name in names:
        if name in denied:  # never says whether the topic exists: no topic id, no partitions
            entries.append(_topic_entry(response_cls, ErrorCode.topic_authorization_failed, name, ZERO_UUID))
            continue
        info = image.topic(name)
        if info is not None:
            entries.append(_describe(ctx, response_cls, info, include_ops))
        else:
            # Created (or found) by the active controller, not in this broker's metadata yet: as
            # Kafka, LEADER_NOT_AVAILABLE (retriable), never "no error" with no partitions.
            error = ErrorCode.leader_not_available if errors[name] is ErrorCode.none else errors[name]
            operations = _topic_operations(ctx, name, include_ops)
            entries.append(_topic_entry(response_cls, error, name, ZERO_UUID, operations=operations))
    return entries


def _topic_operations(ctx: RequestContext, name: str, include_ops: bool) -> int:
    """A described topic's authorized operations when the request asks for them (Kafka's bit set)."""
    return ctx.authorized_operations(ResourceType.TOPIC, name) if include_ops else OPERATIONS_NOT_REQUESTED


def _describable(ctx: RequestContext, name: str, *, log_if_denied: bool = True) -> bool:
    return ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_if_denied=log_if_denied)


def _denied(ctx: RequestContext, request: object, image: ClusterMetadataImage, names: list[str]) -> set[str]:
    """KafkaApis.getTopicMetadata's checks: the named topics the principal may not DESCRIBE, and the
    missing ones it may not CREATE (on the cluster or the topic) when they would be auto-created."""
    denied = {name for name in names if not _describable(ctx, name)}
    missing = [name for name in names if name not in denied and image.topic(name) is None]
    if (
        missing
        and bool(ctx.state.config["auto.create.topics.enable"])
        and getattr(request, "allow_auto_topic_creation", True)
        and not ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False)
    ):
        denied.update(
            name for name in missing if not ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)
        )
    return denied


async def _create_or_refuse(ctx: RequestContext, request: object, names: list[str]) -> dict[str, ErrorCode]:
    """Kafka's rule: auto-create when the broker and the request both allow it, else report unknown."""
    errors = {
        name: ErrorCode.unknown_topic_or_partition
        if is_valid_topic_name(name)
        else ErrorCode.invalid_topic_exception
        for name in names
    }
    allowed = bool(ctx.state.config["auto.create.topics.enable"]) and getattr(
        request, "allow_auto_topic_creation", True
    )
    hook = ctx.state.auto_create_topics
    creatable = [name for name in names if errors[name] is ErrorCode.unknown_topic_or_partition]
    if allowed and hook is not None and creatable:
        created = await hook(creatable)
        for name in creatable:
            errors[name] = created.get(name, ErrorCode.leader_not_available)
    return errors


def _describe(ctx: RequestContext, response_cls: type, info: TopicInfo, include_ops: bool) -> object:
    partition_cls = nested_type(response_cls, "MetadataResponsePartition")
    partitions = tuple(
        build(
            partition_cls,
            error_code=p.error_code,
            partition_index=p.partition_index,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replica_nodes,
            isr_nodes=p.isr_nodes,
            offline_replicas=p.offline_replicas,
        )
        for p in info.partitions
    )
    return _topic_entry(
        response_cls,
        ErrorCode.none,
        info.name,
        info.topic_id,
        is_internal=info.is_internal,
        partitions=partitions,
        operations=_topic_operations(ctx, info.name, include_ops),
    )


def _topic_entry(
    response_cls: type,
    error: ErrorCode,
    name: str | None,
    topic_id: uuid.UUID | None,
    *,
    is_internal: bool | None = None,
    partitions: tuple[object, ...] = (),
    operations: int = OPERATIONS_NOT_REQUESTED,
) -> object:
    topic_cls = nested_type(response_cls, "MetadataResponseTopic")
    return build(
        topic_cls,
        error_code=error,
        name=name,
        topic_id=topic_id or ZERO_UUID,
        is_internal=is_internal
        if is_internal is not None
        else (name is not None and is_internal_topic(name)),
        partitions=partitions,
        topic_authorized_operations=operations,
    )


APIS = [ApiSpec(API_KEY, 0, kio_versions(API_KEY)[1], handle_metadata)]  # type: ignore[index]
