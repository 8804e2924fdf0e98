"""The consumer rebalance protocol's APIs (KIP-848): ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69).

As in Kafka, both are listed in ApiVersions whatever the cluster's features, and answer
UNSUPPORTED_VERSION until `group.version` is finalized at 1 or above, and always where
`group.coordinator.rebalance.protocols` leaves out `consumer` (KafkaApis' isConsumerGroupProtocolEnabled); the group coordinator does the rest
(kcli.broker.group.consumer_coordinator). Heartbeat needs READ on the group and DESCRIBE on each
subscribed topic, Describe DESCRIBE on each group and on every topic its members subscribe to or are
assigned (else the group answers TOPIC_AUTHORIZATION_FAILED), as Kafka 4.1's KafkaApis checks them.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.groups import client_host, coordinator_of, millis
from kcli.broker.apis.metadata import OPERATIONS_NOT_REQUESTED
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.group.consumer_coordinator import HeartbeatRequest
from kcli.broker.group.consumer_group import Assignment
from kcli.features import is_consumer_protocol_enabled
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import AclOperation, ResourceType

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1
"""ConsumerGroupDescribe v1's MemberType of a member using the classic or the consumer protocol."""

_NO_THROTTLE = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)


_UNAUTHORIZED_TOPICS = "The described group uses topics that the client is not authorized to describe."


def _enabled(ctx: RequestContext) -> bool:
    protocols = ctx.state.config["group.coordinator.rebalance.protocols"]
    return "consumer" in protocols and is_consumer_protocol_enabled(ctx.state.image.features)  # type: ignore[operator]


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(CONSUMER_GROUP_HEARTBEAT, ctx.api_version)
    coordinator = coordinator_of(ctx)

    def error_response(error: ErrorCode, message: str | None = None) -> object:
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=error,
            error_message=message,
            member_id=None,
            member_epoch=0,
            heartbeat_interval=_NO_THROTTLE,
            assignment=None,
        )

    if not _enabled(ctx):
        return error_response(
            ErrorCode.unsupported_version, "The consumer rebalance protocol is not enabled."
        )
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return error_response(ErrorCode.group_authorization_failed)
    if request.subscribed_topic_names:  # Kafka 4.1 (KAFKA-18813): DESCRIBE on every subscribed topic
        denied = sorted(
            {
                n
                for n in request.subscribed_topic_names
                if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n)
            }
        )
        if denied:
            return error_response(
                ErrorCode.topic_authorization_failed, f"Unauthorized topics: {', '.join(denied)}"
            )
    if coordinator is None:
        return error_response(ErrorCode.coordinator_not_available)
    owned = request.topic_partitions
    result = await coordinator.consumer.heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=request.subscribed_topic_names,
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned=None if owned is None else [(tp.topic_id, tp.partitions) for tp in owned],
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
            api_version=ctx.api_version,
        )
    )
    if result.error is not ErrorCode.none:
        return error_response(result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment_cls = nested_type(response_cls, "Assignment")
        partitions_cls = nested_type(response_cls, "TopicPartitions")
        assignment = build(
            assignment_cls,
            topic_partitions=tuple(
                build(partitions_cls, topic_id=topic_id, partitions=tuple(sorted(partitions)))
                for topic_id, partitions in sorted(result.assignment.items(), key=lambda e: str(e[0]))
            ),
        )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=result.heartbeat_interval_ms * _MS,
        assignment=assignment,
    )


async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(CONSUMER_GROUP_DESCRIBE, version)
    group_cls = nested_type(response_cls, "DescribedGroup")
    member_cls = nested_type(response_cls, "Member")
    assignment_cls = nested_type(response_cls, "Assignment")
    partitions_cls = nested_type(response_cls, "TopicPartitions")
    coordinator = coordinator_of(ctx)
    image = ctx.state.image

    def assignment(partitions: Assignment) -> object:
        entries = []
        for topic_id, indexes in sorted(partitions.items(), key=lambda e: str(e[0])):
            topic = image.topic_by_id(topic_id)
            if topic is not None:
                entries.append(
                    build(
                        partitions_cls,
                        topic_id=topic_id,
                        topic_name=topic.name,
                        partitions=tuple(sorted(indexes)),
                    )
                )
        return build(assignment_cls, topic_partitions=tuple(entries))

    def empty_group(group_id: str, error: ErrorCode, message: str | None = None) -> object:
        return build(
            group_cls,
            error_code=error,
            error_message=message,
            group_id=group_id,
            group_state="",
            group_epoch=0,
            assignment_epoch=0,
            assignor_name="",
            members=(),
            authorized_operations=OPERATIONS_NOT_REQUESTED,
        )

    if not _enabled(ctx):
        groups = tuple(empty_group(g, ErrorCode.unsupported_version) for g in request.group_ids)
        return build(response_cls, throttle_time=_NO_THROTTLE, groups=groups)
    described = []
    for group_id in request.group_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(empty_group(group_id, ErrorCode.group_authorization_failed))
            continue
        if coordinator is None:
            described.append(empty_group(group_id, ErrorCode.coordinator_not_available))
            continue
        error, message, group = coordinator.consumer.describe(group_id)
        if group is None:
            described.append(empty_group(group_id, error, message))
            continue
        if ctx.state.authorizer is not None:  # Kafka 4.1: no topic the principal may not DESCRIBE is shown
            topics = {name for m in group.members.values() for name in m.subscribed_topic_names or ()}
            for m in group.members.values():
                for partitions in (m.assigned_partitions, group.target_assignment.get(m.member_id, {})):
                    topics.update(t.name for t in map(image.topic_by_id, partitions) if t is not None)
            if any(
                not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name) for name in sorted(topics)
            ):
                described.append(
                    empty_group(group_id, ErrorCode.topic_authorization_failed, _UNAUTHORIZED_TOPICS)
                )
                continue
        members = tuple(
            build(
                member_cls,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assigned_partitions),
                target_assignment=assignment(group.target_assignment.get(m.member_id, {})),
                member_type=CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE,
            )
            for m in group.members.values()
        )
        described.append(
            build(
                group_cls,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state.value,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=coordinator.consumer.default_assignor(group),
                members=members,
                authorized_operations=(
                    ctx.authorized_operations(ResourceType.GROUP, group_id)
                    if request.include_authorized_operations
                    else OPERATIONS_NOT_REQUESTED
                ),
            )
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, groups=tuple(described))


def _versions(api_key: int) -> tuple[int, int]:
    versions = kio_versions(api_key)
    assert versions is not None
    return versions


APIS = [
    ApiSpec(CONSUMER_GROUP_HEARTBEAT, *_versions(CONSUMER_GROUP_HEARTBEAT), handle_consumer_group_heartbeat),
    ApiSpec(CONSUMER_GROUP_DESCRIBE, *_versions(CONSUMER_GROUP_DESCRIBE), handle_consumer_group_describe),
]
