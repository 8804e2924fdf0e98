"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): moving replicas (KIP-455).

Both are answered by the active controller; a broker forwards them there (KIP-590). A request the
controller cannot take at all (it is not active any more) gets the error in the request's own error
shape, as Kafka's getErrorResponse builds it: AlterPartitionReassignments repeats it on every named
partition and at the top level, ListPartitionReassignments names each asked partition with no replicas.
Alter needs ALTER on the cluster and List DESCRIBE (else CLUSTER_AUTHORIZATION_FAILED in that shape).
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

ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
_NO_THROTTLE = datetime.timedelta(0)


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _alter_error(
            ctx.api_version, request, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED
        )
    response, error = await on_controller(ctx.controller.alter_partition_reassignments(request))
    if error.is_failure:
        return _alter_error(ctx.api_version, request, error.code, error.message)
    return response


async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return _list_error(
            ctx.api_version, request, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED
        )
    response, error = await on_controller(ctx.controller.list_partition_reassignments(request))
    if error.is_failure:
        return _list_error(ctx.api_version, request, error.code, error.message)
    return response


def _alter_error(version: int, request: Any, error: ErrorCode, message: str | None) -> object:
    response_cls = response_type(ALTER_PARTITION_REASSIGNMENTS, version)
    topic_cls = nested_type(response_cls, "ReassignableTopicResponse")
    partition_cls = nested_type(response_cls, "ReassignablePartitionResponse")
    topics = tuple(
        build(
            topic_cls,
            name=topic.name,
            partitions=tuple(
                build(
                    partition_cls,
                    partition_index=partition.partition_index,
                    error_code=error,
                    error_message=message,
                )
                for partition in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        allow_replication_factor_change=getattr(request, "allow_replication_factor_change", True),
        error_code=error,
        error_message=message,
        responses=topics,
    )


def _list_error(version: int, request: Any, error: ErrorCode, message: str | None) -> object:
    response_cls = response_type(LIST_PARTITION_REASSIGNMENTS, version)
    topic_cls = nested_type(response_cls, "OngoingTopicReassignment")
    partition_cls = nested_type(response_cls, "OngoingPartitionReassignment")
    topics = tuple(
        build(
            topic_cls,
            name=topic.name,
            partitions=tuple(
                build(
                    partition_cls,
                    partition_index=index,
                    replicas=(),
                    adding_replicas=(),
                    removing_replicas=(),
                )
                for index in topic.partition_indexes
            ),
        )
        for topic in request.topics or ()
    )
    return build(
        response_cls, throttle_time=_NO_THROTTLE, error_code=error, error_message=message, topics=topics
    )


APIS = [
    ApiSpec(
        ALTER_PARTITION_REASSIGNMENTS,
        *kio_versions(ALTER_PARTITION_REASSIGNMENTS),  # type: ignore[misc]
        handle_alter_partition_reassignments,
    ),
    ApiSpec(
        LIST_PARTITION_REASSIGNMENTS,
        *kio_versions(LIST_PARTITION_REASSIGNMENTS),  # type: ignore[misc]
        handle_list_partition_reassignments,
    ),
]
