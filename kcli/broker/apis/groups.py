"""Group membership and admin APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16) and DeleteGroups (42).

The handlers do what Kafka's KafkaApis does around the group coordinator: read each version's fields
(a v0 JoinGroup's rebalance timeout is its session timeout, MEMBER_ID_REQUIRED from v4, SkipAssignment
from v9), call `kcli.broker.group.coordinator`, and shape the answer for the version (ProtocolName is
"" rather than null before JoinGroup v7, LeaveGroup before v3 folds member errors into one code).

FindCoordinator answers with this node for every group key. Kafka asks for __consumer_offsets to be
created the first time and answers COORDINATOR_NOT_AVAILABLE until it exists; here creation is
complete when the controller call returns, so the answer a client would get on its retry comes at once.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.metadata import OPERATIONS_NOT_REQUESTED
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.group.coordinator import GroupCoordinator
from kcli.broker.group.group import JoinResult
from kcli.broker.group.storage import OFFSETS_TOPIC
from kcli.broker.txn.state_manager import TRANSACTION_STATE_TOPIC
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger("kcli.broker")

FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2

_NO_THROTTLE = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)
_MESSAGES = {
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client library or the message "
        "was sent to an incompatible broker. See the broker logs for more details."
    ),
}


def coordinator_of(ctx: RequestContext) -> GroupCoordinator | None:
    """The node's group coordinator; None for a broker started without storage."""
    node = ctx.state.node
    return None if node is None else getattr(node, "groups", None)


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka shows it (InetAddress.toString of the peer: "/127.0.0.1")."""
    peer = ctx.connection.peer
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def _readable(ctx: RequestContext, group_id: str) -> bool:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup need READ on the group (GROUP_AUTHORIZATION_FAILED)."""
    return ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id)


def millis(value: datetime.timedelta) -> int:
    return int(value / _MS)


# --- FindCoordinator ------------------------------------------------------------------------------------


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(FIND_COORDINATOR, version)
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if version >= 4:
        coordinator_cls = nested_type(response_cls, "Coordinator")
        coordinators = []
        for key in request.coordinator_keys:
            error, node_id, host, port = await _find_coordinator(ctx, key_type, key)
            coordinators.append(
                build(
                    coordinator_cls,
                    key=key,
                    node_id=node_id,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=None,
                )
            )
        return build(response_cls, throttle_time=_NO_THROTTLE, coordinators=tuple(coordinators))
    error, node_id, host, port = await _find_coordinator(ctx, key_type, request.key)
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=error,
        error_message=_MESSAGES.get(error, error.name) if error is not ErrorCode.none else "NONE",
        node_id=node_id,
        host=host,
        port=port,
    )


async def _find_coordinator(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
    """(error, node id, host, port) for one key; the error node is (-1, "", -1)."""
    no_node = (-1, "", -1)
    if key_type == GROUP_KEY_TYPE and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return (ErrorCode.group_authorization_failed, *no_node)
    if key_type == TRANSACTION_KEY_TYPE and not ctx.authorize(
        AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return (ErrorCode.transactional_id_authorization_failed, *no_node)
    if key_type == GROUP_KEY_TYPE:
        coordinator = coordinator_of(ctx)
        if coordinator is None:
            return (ErrorCode.coordinator_not_available, *no_node)
        topic, partition = OFFSETS_TOPIC, coordinator.partition_for(key)
    elif key_type == TRANSACTION_KEY_TYPE:
        node = ctx.state.node
        coordinator = None if node is None else getattr(node, "transaction_coordinator", None)
        if coordinator is None:
            return (ErrorCode.coordinator_not_available, *no_node)
        topic, partition = TRANSACTION_STATE_TOPIC, coordinator.partition_for(key)
    else:
        return (ErrorCode.invalid_request, *no_node)
    state = ctx.state
    if state.image.topic(topic) is None:
        if state.auto_create_topics is None:
            return (ErrorCode.coordinator_not_available, *no_node)
        created = await state.auto_create_topics([topic])
        if created.get(topic, ErrorCode.none) is not ErrorCode.none:
            return (ErrorCode.coordinator_not_available, *no_node)
        if coordinator is not None:
            partition = coordinator.partition_for(key)  # the real partition count is known now
    image = ctx.image  # the coordinator's endpoint on the listener the request came in on
    info = image.topic(topic)
    leader = (
        next((p.leader_id for p in info.partitions if p.partition_index == partition), -1) if info else -1
    )
    broker = next((b for b in image.brokers() if b.node_id == leader and not b.is_fenced), None)
    if broker is None:
        return (ErrorCode.coordinator_not_available, *no_node)
    return ErrorCode.none, broker.node_id, broker.host, broker.port


# --- JoinGroup ------------------------------------------------------------------------------------------


async def handle_join_group(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(JOIN_GROUP, version)
    if not _readable(ctx, request.group_id):
        return _join_response(
            response_cls, version, JoinResult(request.member_id, ErrorCode.group_authorization_failed)
        )
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return _join_response(
            response_cls, version, JoinResult(request.member_id, ErrorCode.coordinator_not_available)
        )
    session_timeout_ms = millis(request.session_timeout)
    rebalance_timeout_ms = millis(request.rebalance_timeout) if version >= 1 else session_timeout_ms
    result = await coordinator.join_group(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
        client_id=ctx.client_id,
        client_host=client_host(ctx),
        rebalance_timeout_ms=rebalance_timeout_ms,
        session_timeout_ms=session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        reason=getattr(request, "reason", None),
    )
    return _join_response(response_cls, version, result)


def _join_response(response_cls: type, version: int, result: JoinResult) -> object:
    member_cls = nested_type(response_cls, "JoinGroupResponseMember")
    members = tuple(
        build(member_cls, member_id=member_id, group_instance_id=instance_id, metadata=metadata)
        for member_id, instance_id, metadata in result.members
    )
    protocol_name = result.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""  # non-nullable before v7
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


# --- SyncGroup ------------------------------------------------------------------------------------------


async def handle_sync_group(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(SYNC_GROUP, version)
    coordinator = coordinator_of(ctx)
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if not _readable(ctx, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif coordinator is None:
        error = ErrorCode.coordinator_not_available
    elif version >= 5 and (protocol_type is None or protocol_name is None):
        error = ErrorCode.inconsistent_group_protocol  # both are mandatory from v5
    else:
        result = await coordinator.sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            protocol_type,
            protocol_name,
            getattr(request, "group_instance_id", None),
            {a.member_id: a.assignment for a in request.assignments},
        )
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=result.error,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
        )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=error,
        protocol_type=None,
        protocol_name=None,
        assignment=b"",
    )


# --- Heartbeat and LeaveGroup ---------------------------------------------------------------------------


async def handle_heartbeat(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(HEARTBEAT, ctx.api_version)
    coordinator = coordinator_of(ctx)
    if not _readable(ctx, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif coordinator is None:
        error = ErrorCode.coordinator_not_available
    else:
        error = coordinator.heartbeat(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            request.generation_id,
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=error)


async def handle_leave_group(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(LEAVE_GROUP, version)
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in request.members]
    else:
        leaving = [(request.member_id, None, None)]
    coordinator = coordinator_of(ctx)
    if not _readable(ctx, request.group_id):
        top, errors = ErrorCode.group_authorization_failed, []
    elif coordinator is None:
        top, errors = ErrorCode.coordinator_not_available, []
    else:
        top, errors = coordinator.leave_group(request.group_id, leaving)
    if version < 3:
        # One code: the group's error, else the member's.
        error = (
            top if top is not ErrorCode.none else next((e for e in errors if e is not ErrorCode.none), top)
        )
        return build(response_cls, throttle_time=_NO_THROTTLE, error_code=error)
    member_cls = nested_type(response_cls, "MemberResponse")
    members = tuple(
        build(member_cls, member_id=member_id, group_instance_id=instance_id, error_code=error)
        for (member_id, instance_id, _), error in zip(leaving, errors, strict=False)
    )
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=top, members=members)


# --- DescribeGroups, ListGroups, DeleteGroups ----------------------------------------------------------


async def handle_describe_groups(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(DESCRIBE_GROUPS, version)
    group_cls = nested_type(response_cls, "DescribedGroup")
    member_cls = nested_type(response_cls, "DescribedGroupMember")
    coordinator = coordinator_of(ctx)
    include_operations = getattr(request, "include_authorized_operations", False)
    groups = []
    for group_id in request.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            error, summary = ErrorCode.group_authorization_failed, None
        elif coordinator is None:
            error, summary = ErrorCode.coordinator_not_available, None
        else:
            error, summary = coordinator.describe_group(group_id)
        message = None
        if summary is not None and version >= 6 and summary.state == "Dead":
            error, message = ErrorCode.group_id_not_found, f"Group {group_id} not found."  # KIP-1043
            if coordinator is not None and group_id in coordinator.manager.consumer_groups:
                message = f"Group {group_id} is not a classic group."
        members = ()
        if summary is not None and error is ErrorCode.none:
            members = tuple(
                build(
                    member_cls,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata,
                    member_assignment=m.assignment,
                )
                for m in summary.members
            )
        groups.append(
            build(
                group_cls,
                error_code=error,
                error_message=message,
                group_id=group_id,
                group_state=summary.state if summary is not None else "",
                protocol_type=summary.protocol_type if summary is not None else "",
                protocol_data=summary.protocol if summary is not None else "",
                members=members,
                authorized_operations=(
                    ctx.authorized_operations(ResourceType.GROUP, group_id)
                    if include_operations and error is ErrorCode.none
                    else OPERATIONS_NOT_REQUESTED
                ),
            )
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, groups=tuple(groups))


async def handle_list_groups(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(LIST_GROUPS, ctx.api_version)
    group_cls = nested_type(response_cls, "ListedGroup")
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        error, listed = ErrorCode.coordinator_not_available, []
    else:
        error, listed = coordinator.list_groups(
            getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
        )
    if ctx.state.authorizer is not None and not ctx.authorize(
        AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    ):  # KafkaApis: without DESCRIBE on the cluster, only the groups the principal may DESCRIBE
        listed = [
            g
            for g in listed
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g[0], log_if_denied=False)
        ]
    groups = tuple(
        build(
            group_cls,
            group_id=group_id,
            protocol_type=protocol_type,
            group_state=state,
            group_type=group_type,
        )
        for group_id, protocol_type, state, group_type in listed
    )
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=error, groups=groups)


async def handle_delete_groups(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(DELETE_GROUPS, ctx.api_version)
    result_cls = nested_type(response_cls, "DeletableGroupResult")
    names = list(dict.fromkeys(request.groups_names))
    coordinator = coordinator_of(ctx)
    denied = [n for n in names if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, n)]
    allowed = [n for n in names if n not in denied]
    if not allowed:
        errors = {}
    elif coordinator is None:
        errors = dict.fromkeys(allowed, ErrorCode.coordinator_not_available)
    else:
        errors = coordinator.delete_groups(allowed)
    errors.update(dict.fromkeys(denied, ErrorCode.group_authorization_failed))
    results = tuple(build(result_cls, group_id=name, error_code=errors[name]) for name in names)
    return build(response_cls, throttle_time=_NO_THROTTLE, results=results)


def _versions(api_key: int) -> tuple[int, int]:
    versions = kio_versions(api_key)
    assert versions is not None
    return versions


APIS = [
    ApiSpec(FIND_COORDINATOR, *_versions(FIND_COORDINATOR), handle_find_coordinator),
    ApiSpec(JOIN_GROUP, *_versions(JOIN_GROUP), handle_join_group),
    ApiSpec(HEARTBEAT, *_versions(HEARTBEAT), handle_heartbeat),
    ApiSpec(LEAVE_GROUP, *_versions(LEAVE_GROUP), handle_leave_group),
    ApiSpec(SYNC_GROUP, *_versions(SYNC_GROUP), handle_sync_group),
    ApiSpec(DESCRIBE_GROUPS, *_versions(DESCRIBE_GROUPS), handle_describe_groups),
    ApiSpec(LIST_GROUPS, *_versions(LIST_GROUPS), handle_list_groups),
    ApiSpec(DELETE_GROUPS, *_versions(DELETE_GROUPS), handle_delete_groups),
]
