"""DescribeCluster (key 60): cluster id, controller and brokers, as the admin clients ask for them.

Follows Kafka's `AuthHelper.computeDescribeClusterResponse` on a broker endpoint: asking a broker
to describe controllers is MISMATCHED_ENDPOINT_TYPE, an unknown endpoint type is
UNSUPPORTED_ENDPOINT_TYPE, and the controller id is -1 unless that node is in the broker list. The
cluster's authorized operations come from the ACLs (0 without DESCRIBE on the cluster); a controller
describes the controllers only to a principal with ALTER on the cluster, as Kafka's ControllerApis.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import CLUSTER_AUTHORIZATION_FAILED, RequestContext
from kcli.broker.apis.metadata import OPERATIONS_NOT_REQUESTED
from kcli.broker.apis.registry import ApiSpec
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

API_KEY = 60
ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2
_NO_THROTTLE = datetime.timedelta(0)


async def handle_describe_cluster(ctx: RequestContext, request: object) -> object:
    version = ctx.api_version
    response_cls = response_type(API_KEY, version)
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    image = ctx.image
    if endpoint_type not in (ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS):
        error = ErrorCode.invalid_request if version == 0 else ErrorCode.unsupported_endpoint_type
        return _error(response_cls, error, f"Unsupported endpoint type {endpoint_type}")
    on_controller_listener = ctx.connection.listener == ctx.state.controller_listener_name
    if on_controller_listener and endpoint_type == ENDPOINT_CONTROLLERS:
        # Unlike a broker, a controller asks for ALTER on the cluster (Kafka's ControllerApis).
        if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            return _error(response_cls, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
        return _controllers(ctx, response_cls, request)
    if endpoint_type != ENDPOINT_BROKERS or on_controller_listener:
        if on_controller_listener:
            return _error(
                response_cls,
                ErrorCode.invalid_request if version == 0 else ErrorCode.mismatched_endpoint_type,
                "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER",
            )
        error = ErrorCode.invalid_request if version == 0 else ErrorCode.mismatched_endpoint_type
        return _error(
            response_cls,
            error,
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
        )

    broker_cls = nested_type(response_cls, "DescribeClusterBroker")
    brokers = tuple(
        build(broker_cls, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack, is_fenced=b.is_fenced)
        for b in image.brokers()
        if not b.is_fenced or getattr(request, "include_fenced_brokers", False)
    )
    controller_id = image.controller_id
    if all(b.node_id != controller_id for b in image.brokers()):
        controller_id = -1
    operations = OPERATIONS_NOT_REQUESTED
    if request.include_cluster_authorized_operations:  # type: ignore[attr-defined]
        operations = ctx.cluster_authorized_operations()
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=image.cluster_id,
        controller_id=controller_id,
        brokers=brokers,
        cluster_authorized_operations=operations,
    )


def _controllers(ctx: RequestContext, response_cls: type, request: object) -> object:
    """A controller's answer (KIP-919): the voters at their controller listeners, and the active one."""
    raft = ctx.raft
    broker_cls = nested_type(response_cls, "DescribeClusterBroker")
    controllers = tuple(
        build(broker_cls, broker_id=node_id, host=host, port=port, rack=None, is_fenced=False)
        for node_id, (host, port) in sorted(raft.voter_addresses.items())
    )
    operations = OPERATIONS_NOT_REQUESTED
    if request.include_cluster_authorized_operations:  # type: ignore[attr-defined]
        operations = ctx.cluster_authorized_operations()
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_CONTROLLERS,
        cluster_id=raft.cluster_id,
        controller_id=raft.leader.leader_id,
        brokers=controllers,
        cluster_authorized_operations=operations,
    )


def _error(response_cls: type, error: ErrorCode, message: str) -> object:
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=error,
        error_message=message,
        cluster_id="",
        brokers=(),
    )


APIS = [ApiSpec(API_KEY, 0, kio_versions(API_KEY)[1], handle_describe_cluster)]  # type: ignore[index]
