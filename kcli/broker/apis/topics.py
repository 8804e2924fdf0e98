"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37): topic admin through the controller.

A KRaft broker forwards these requests to the active controller, and Kafka's `ControllerApis` answers
them. Here the controller is this node's `QuorumController`; the handlers do what `ControllerApis`
does around it (duplicate names, names and ids in one DeleteTopics, Kafka's messages) and the
controller does what `ReplicationControlManager` does (validation, records, one batch per call).

Timeouts follow the KRaft controller: the request's timeout is the deadline of the controller
event, and an event past its deadline is not performed. A timeout of 0 or less is therefore
REQUEST_TIMED_OUT for every topic and nothing changes; any positive timeout is enough here,
because the controller commits before it answers.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections import Counter
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext, controller_error, forward_unless_active, on_controller
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.metadata.controller import (
    ApiError,
    CreateTopicResult,
    DeleteTopicResult,
    NewTopic,
)
from kcli.broker.quota.manager import ControllerMutationQuota
from kcli.broker.quota.quotas import THROTTLING_QUOTA_EXCEEDED_MESSAGE, mutation_quota, throttle
from kcli.config import CLUSTER_METADATA_TOPIC
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37

ZERO_UUID = uuid.UUID(int=0)
_NO_THROTTLE = datetime.timedelta(0)

# What Kafka's `new ApiError(error)` carries for the two errors its controller reports without a
# sentence of its own (findTopicIds / findTopicNames).
_DEFAULT_MESSAGES = {
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.unknown_topic_id: "This server does not host this topic ID.",
}


async def handle_create_topics(ctx: RequestContext, request: object) -> object:
    """KafkaApis: without CREATE on the cluster, each topic needs CREATE on itself; the others are
    TOPIC_AUTHORIZATION_FAILED and never reach the controller."""
    if not _checked_here(ctx):
        return await _create_topics(ctx, request)
    topics = request.topics  # type: ignore[attr-defined]
    denied: list[str] = []
    if not ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
        denied = [
            t.name for t in topics if not ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, t.name)
        ]
    if not denied:
        return await _create_topics(ctx, request)
    kept = tuple(t for t in topics if t.name not in denied)
    response = await _create_topics(ctx, dataclasses.replace(request, topics=kept))  # type: ignore[type-var]
    response_cls = response_type(CREATE_TOPICS, ctx.api_version)
    refused = tuple(
        _created(response_cls, CreateTopicResult(name, _AUTHORIZATION_FAILED))
        for name in dict.fromkeys(denied)
    )
    return dataclasses.replace(response, topics=(*response.topics, *refused))  # type: ignore[attr-defined]


def _checked_here(ctx: RequestContext) -> bool:
    """Whether the request is authorized: whenever an authorizer is set, on a broker's listener and on
    the controller's, where a forwarded request's principal is the one its Envelope names (KIP-590)."""
    return ctx.state.authorizer is not None


async def _create_topics(ctx: RequestContext, request: object) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    response_cls = response_type(CREATE_TOPICS, ctx.api_version)
    topics = request.topics  # type: ignore[attr-defined]
    if not topics:
        return build(response_cls, throttle_time=_NO_THROTTLE, topics=())
    counts = Counter(t.name for t in topics)
    reaches_controller = any(n != CLUSTER_METADATA_TOPIC and c == 1 for n, c in counts.items())
    if reaches_controller and _timed_out(request):
        # CreateTopicsRequest.getErrorResponse: every topic of the request, duplicates included.
        results = [_created(response_cls, CreateTopicResult(t.name, _TIMED_OUT)) for t in topics]
        return build(response_cls, throttle_time=_NO_THROTTLE, topics=tuple(results))

    new_topics = [
        NewTopic(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments=[(a.partition_index, tuple(a.broker_ids)) for a in t.assignments],
            configs={c.name: c.value for c in t.configs},
        )
        for t in topics
    ]
    quota = mutation_quota(ctx, strict_since=6)
    permits: dict[str, int] = {}
    if quota is not None:  # KIP-599: each new topic takes its partitions from the client's bucket
        default_partitions = int(ctx.state.config["num.partitions"])  # type: ignore[call-overload]
        for t in new_topics:
            if counts[t.name] == 1 and ctx.state.image.topic_id(t.name) is None:
                n = len(t.assignments) or (default_partitions if t.num_partitions == -1 else t.num_partitions)
                permits[t.name] = n if quota.record(n) else -1
    asked = [t for t in new_topics if permits.get(t.name, 0) >= 0]
    created, refused = await on_controller(
        ctx.controller.create_topics(asked, validate_only=request.validate_only)  # type: ignore[attr-defined]
    )
    outcome = [CreateTopicResult(t.name, refused) for t in asked] if created is None else created
    if quota is not None:
        _refund(quota, permits, [(r.name, r.error) for r in outcome])
        by_name = {r.name: r for r in outcome}
        outcome = [
            by_name.get(t.name) or CreateTopicResult(t.name, _THROTTLED)
            for t in new_topics
            if t.name in by_name or permits.get(t.name, 0) < 0
        ]
        outcome += [r for r in by_name.values() if r.name not in {t.name for t in new_topics}]
    results = [_created(response_cls, result) for result in outcome]
    return build(response_cls, throttle_time=_throttle_time(ctx, quota), topics=tuple(results))


async def handle_delete_topics(ctx: RequestContext, request: object) -> object:
    """KafkaApis: DELETE on each topic (and DESCRIBE for one named by id), else TOPIC_AUTHORIZATION_FAILED."""
    if not _checked_here(ctx):
        return await _delete_topics(ctx, request)
    version = ctx.api_version
    image = ctx.state.image
    denied: list[DeleteTopicResult] = []
    if version >= 6:
        kept = []
        for t in request.topics:  # type: ignore[attr-defined]
            if t.name is None and t.topic_id not in (None, ZERO_UUID):
                info = image.topic_by_id(t.topic_id)
                if info is not None and not (
                    ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name)
                    and ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, info.name)
                ):
                    denied.append(DeleteTopicResult(None, t.topic_id, _AUTHORIZATION_FAILED))
                    continue
            elif t.name is not None and not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, t.name):
                denied.append(DeleteTopicResult(t.name, ZERO_UUID, _AUTHORIZATION_FAILED))
                continue
            kept.append(t)
        narrowed = dataclasses.replace(request, topics=tuple(kept))  # type: ignore[type-var]
    else:
        names = []
        for name in request.topic_names:  # type: ignore[attr-defined]
            if ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
                names.append(name)
            else:
                denied.append(DeleteTopicResult(name, ZERO_UUID, _AUTHORIZATION_FAILED))
        narrowed = dataclasses.replace(request, topic_names=tuple(names))  # type: ignore[type-var]
    if not denied:
        return await _delete_topics(ctx, request)
    response = await _delete_topics(ctx, narrowed)
    response_cls = response_type(DELETE_TOPICS, version)
    refused = tuple(_deleted(response_cls, result) for result in denied)
    return dataclasses.replace(response, responses=(*response.responses, *refused))  # type: ignore[attr-defined]


async def _delete_topics(ctx: RequestContext, request: object) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    version = ctx.api_version
    response_cls = response_type(DELETE_TOPICS, version)
    if version >= 6:
        given = [(t.name, t.topic_id or ZERO_UUID) for t in request.topics]  # type: ignore[attr-defined]
    else:
        given = [(name, ZERO_UUID) for name in request.topic_names]  # type: ignore[attr-defined]

    if not ctx.state.config["delete.topic.enable"]:
        # Thrown before the controller is asked; DeleteTopicsRequest.getErrorResponse carries no message.
        code = ErrorCode.invalid_request if version < 3 else ErrorCode.topic_deletion_disabled
        results = [_deleted(response_cls, DeleteTopicResult(n, i, ApiError(code))) for n, i in given]
        return build(response_cls, throttle_time=_NO_THROTTLE, responses=tuple(results))

    early: list[DeleteTopicResult] = []
    references: list[str | uuid.UUID] = []
    for name, topic_id in given:
        if name is None and topic_id == ZERO_UUID:
            error = ApiError(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
            early.append(DeleteTopicResult(None, ZERO_UUID, error))
        elif name is None:
            references.append(topic_id)
        elif topic_id == ZERO_UUID:
            references.append(name)
        else:
            error = ApiError(ErrorCode.invalid_request, "You may not specify both topic name and topic id.")
            early.append(DeleteTopicResult(name, topic_id, error))

    if any(count == 1 for count in Counter(references).values()) and _timed_out(request):
        results = [_deleted(response_cls, DeleteTopicResult(n, i, _TIMED_OUT)) for n, i in given]
        return build(response_cls, throttle_time=_NO_THROTTLE, responses=tuple(results))

    quota = mutation_quota(ctx, strict_since=5)
    throttled: list[DeleteTopicResult] = []
    permits: dict[str | uuid.UUID, int] = {}
    if quota is not None:  # KIP-599: a deleted topic gives back nothing, its partitions count as mutations
        image = ctx.state.image
        kept = []
        for ref in references:
            topic = image.topic(ref) if isinstance(ref, str) else image.topic_by_id(ref)
            n = len(topic.partitions) if topic is not None else 0
            if n and not quota.record(n):
                throttled.append(
                    DeleteTopicResult(
                        ref if isinstance(ref, str) else None,
                        ref if isinstance(ref, uuid.UUID) else ZERO_UUID,
                        _THROTTLED,
                    )
                )
                continue
            permits[ref] = n
            kept.append(ref)
        references = kept
    deleted, refused = await on_controller(ctx.controller.delete_topics(references))
    if deleted is None:
        deleted = [
            DeleteTopicResult(
                r if isinstance(r, str) else None, r if isinstance(r, uuid.UUID) else ZERO_UUID, refused
            )
            for r in references
        ]
    if quota is not None:
        for ref, result in zip(references, deleted, strict=False):
            if result.error.is_failure:
                quota.refund(permits.get(ref, 0))
    outcome = early + deleted + throttled
    results = [_deleted(response_cls, result) for result in outcome]
    return build(response_cls, throttle_time=_throttle_time(ctx, quota), responses=tuple(results))


async def handle_create_partitions(ctx: RequestContext, request: object) -> object:
    """KafkaApis: ALTER on each topic, else TOPIC_AUTHORIZATION_FAILED without asking the controller."""
    if not _checked_here(ctx):
        return await _create_partitions(ctx, request)
    topics = request.topics  # type: ignore[attr-defined]
    denied = [t.name for t in topics if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, t.name)]
    if not denied:
        return await _create_partitions(ctx, request)
    kept = tuple(t for t in topics if t.name not in denied)
    response = await _create_partitions(ctx, dataclasses.replace(request, topics=kept))  # type: ignore[type-var]
    result_cls = nested_type(response_type(CREATE_PARTITIONS, ctx.api_version), "CreatePartitionsTopicResult")
    error = ApiError(ErrorCode.topic_authorization_failed, "The topic authorization is failed.")
    refused = tuple(_partitions_result(result_cls, name, error) for name in dict.fromkeys(denied))
    return dataclasses.replace(response, results=(*response.results, *refused))  # type: ignore[attr-defined]


async def _create_partitions(ctx: RequestContext, request: object) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    response_cls = response_type(CREATE_PARTITIONS, ctx.api_version)
    result_cls = nested_type(response_cls, "CreatePartitionsTopicResult")
    topics = request.topics  # type: ignore[attr-defined]
    counts = Counter(t.name for t in topics)
    singles = [t for t in topics if counts[t.name] == 1]
    if singles and _timed_out(request):
        results = [_partitions_result(result_cls, t.name, _TIMED_OUT) for t in topics]
        return build(response_cls, throttle_time=_NO_THROTTLE, results=tuple(results))

    duplicate = ApiError(ErrorCode.invalid_request, "Duplicate topic name.")
    results = [_partitions_result(result_cls, name, duplicate) for name, n in counts.items() if n > 1]
    controller = ctx.controller
    quota = mutation_quota(ctx, strict_since=3)
    for topic in singles:
        partitions = ctx.state.image.partitions_of(topic.name)
        added = topic.count - len(partitions) if partitions is not None else 0
        if quota is not None and added > 0 and not quota.record(added):
            results.append(_partitions_result(result_cls, topic.name, _THROTTLED))
            continue
        assignments = None
        if topic.assignments is not None:
            assignments = [tuple(a.broker_ids) for a in topic.assignments]
        error = await controller_error(
            controller.create_partitions(
                topic.name,
                topic.count,
                assignments,
                validate_only=request.validate_only,  # type: ignore[attr-defined]
            )
        )
        if quota is not None and added > 0 and error.is_failure:
            quota.refund(added)
        results.append(_partitions_result(result_cls, topic.name, error))
    return build(response_cls, throttle_time=_throttle_time(ctx, quota), results=tuple(results))


# ---------------------------------------------------------------------------------------------------

_TIMED_OUT = ApiError(ErrorCode.request_timed_out)
_AUTHORIZATION_FAILED = ApiError(ErrorCode.topic_authorization_failed, "Authorization failed.")
_THROTTLED = ApiError(ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE)


def _refund(
    quota: ControllerMutationQuota, permits: dict[str, int], outcome: list[tuple[str, ApiError]]
) -> None:
    """Partitions of topics the controller then refused go back to the bucket: nothing changed."""
    for name, error in outcome:
        if permits.get(name, 0) > 0 and error.is_failure:
            quota.refund(permits[name])


def _throttle_time(ctx: RequestContext, quota: ControllerMutationQuota | None) -> datetime.timedelta:
    """The mutation quota's throttle time in the answer, the connection muted for it (KIP-599)."""
    if quota is None:
        return _NO_THROTTLE
    throttle_ms = quota.throttle_time_ms
    throttle(ctx, throttle_ms)
    return datetime.timedelta(milliseconds=throttle_ms)


def _timed_out(request: object) -> bool:
    """The controller event's deadline is now + timeout; at 0 or less it has passed before it runs."""
    return request.timeout <= datetime.timedelta(0)  # type: ignore[attr-defined]


def _created(response_cls: type, result: CreateTopicResult) -> object:
    """A CreatableTopicResult: details and configs on success, -1s and no configs on failure."""
    configs: Sequence[object] = ()
    if not result.error.is_failure and response_cls.__version__ >= 5:
        config_cls = nested_type(response_cls, "CreatableTopicConfigs")
        configs = [
            config_cls(
                name=entry.name,
                value=None if entry.is_sensitive else entry.value,
                read_only=entry.read_only,
                config_source=entry.source,
                is_sensitive=entry.is_sensitive,
            )
            for entry in result.configs
        ]
    return build(
        nested_type(response_cls, "CreatableTopicResult"),
        name=result.name,
        topic_id=result.topic_id,
        error_code=result.error.code,
        error_message=result.error.message,
        topic_config_error_code=0,
        num_partitions=result.num_partitions,
        replication_factor=result.replication_factor,
        configs=tuple(configs),
    )


def _deleted(response_cls: type, result: DeleteTopicResult) -> object:
    message = result.error.message
    if message is None:
        message = _DEFAULT_MESSAGES.get(result.error.code)
    return build(
        nested_type(response_cls, "DeletableTopicResult"),
        name=result.name,
        topic_id=result.topic_id,
        error_code=result.error.code,
        error_message=message,
    )


def _partitions_result(result_cls: type, name: str, error: ApiError) -> object:
    return build(result_cls, name=name, error_code=error.code, error_message=error.message)


APIS = [
    ApiSpec(CREATE_TOPICS, *kio_versions(CREATE_TOPICS), handle_create_topics),  # type: ignore[misc]
    ApiSpec(DELETE_TOPICS, *kio_versions(DELETE_TOPICS), handle_delete_topics),  # type: ignore[misc]
    ApiSpec(CREATE_PARTITIONS, *kio_versions(CREATE_PARTITIONS), handle_create_partitions),  # type: ignore[misc]
]
