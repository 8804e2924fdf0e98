"""ElectLeaders (43): preferred or unclean leader elections asked by an operator (KIP-460).

A broker forwards the request to the active controller (KIP-590), which answers per partition after
the elections are committed. A request the controller refuses whole (an unknown election type) gets
that error on every named partition and at the top level, as Kafka's ElectLeadersRequest.getErrorResponse;
so does a principal without ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED), as ControllerApis checks.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import (
    CLUSTER_AUTHORIZATION_FAILED,
    RequestContext,
    forward_unless_active,
    on_controller,
)
from kcli.broker.apis.registry import ApiSpec
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

ELECT_LEADERS = 43
_NO_THROTTLE = datetime.timedelta(0)


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _error_response(
            ctx.api_version, request, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED
        )
    response, error = await on_controller(ctx.controller.elect_leaders(request))
    if error.is_failure:
        return _error_response(ctx.api_version, request, error.code, error.message)
    return response


def _error_response(version: int, request: Any, error: ErrorCode, message: str | None) -> object:
    response_cls = response_type(ELECT_LEADERS, version)
    topic_cls = nested_type(response_cls, "ReplicaElectionResult")
    partition_cls = nested_type(response_cls, "PartitionResult")
    topics = tuple(
        build(
            topic_cls,
            topic=topic.topic,
            partition_result=tuple(
                build(partition_cls, partition_id=index, error_code=error, error_message=message)
                for index in topic.partitions
            ),
        )
        for topic in request.topic_partitions or ()
    )
    return build(response_cls, throttle_time=_NO_THROTTLE, error_code=error, replica_election_results=topics)


APIS = [ApiSpec(ELECT_LEADERS, *kio_versions(ELECT_LEADERS), handle_elect_leaders)]  # type: ignore[misc]
