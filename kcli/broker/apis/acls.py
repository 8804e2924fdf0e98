"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31): ACLs of the StandardAuthorizer (KIP-801).

Without `authorizer.class.name` every answer is SECURITY_DISABLED, as Kafka's. Describe is answered
by any broker from its metadata image and needs DESCRIBE on the cluster; Create and Delete need ALTER
on the cluster and go to the active controller (a broker forwards them, KIP-590), which writes the
records every node replays. On the controller listener a forwarded request is authorized as the
principal its Envelope names.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext, forward_unless_active, on_controller
from kcli.broker.apis.registry import ApiSpec
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclBindingFilter, AclOperation, ResourceType, StandardAcl

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
_NO_THROTTLE = datetime.timedelta(0)
_SECURITY_DISABLED = "No Authorizer is configured."
_CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."


def _refusal(ctx: RequestContext, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without `operation` on
    the cluster, else None."""
    if ctx.state.authorizer is None:
        return ErrorCode.security_disabled, _SECURITY_DISABLED
    if not ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed, _CLUSTER_AUTHORIZATION_FAILED
    return None


async def handle_describe_acls(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(DESCRIBE_ACLS, ctx.api_version)
    resource_cls = nested_type(response_cls, "DescribeAclsResource")
    description_cls = nested_type(response_cls, "AclDescription")
    refused = _refusal(ctx, AclOperation.DESCRIBE)
    acl_filter = AclBindingFilter.from_wire(request)
    if refused is None and acl_filter.unknown_element() is not None:
        refused = ErrorCode.invalid_request, acl_filter.unknown_element()
    if refused is not None:
        code, message = refused
        return build(
            response_cls, throttle_time=_NO_THROTTLE, error_code=code, error_message=message, resources=()
        )
    grouped: dict[tuple[int, str, int], list[StandardAcl]] = defaultdict(list)
    for acl in ctx.state.image.acls.values():
        if acl_filter.matches(acl):
            grouped[(int(acl.resource_type), acl.resource_name, int(acl.pattern_type))].append(acl)
    resources = tuple(
        build(
            resource_cls,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=pattern_type,
            acls=tuple(
                build(
                    description_cls,
                    principal=acl.principal,
                    host=acl.host,
                    operation=int(acl.operation),
                    permission_type=int(acl.permission_type),
                )
                for acl in acls
            ),
        )
        for (resource_type, name, pattern_type), acls in sorted(grouped.items())
    )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        resources=resources,
    )


async def handle_create_acls(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(CREATE_ACLS, ctx.api_version)
    result_cls = nested_type(response_cls, "AclCreationResult")
    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is None:
        forwarded = await forward_unless_active(ctx, request)
        if forwarded is not None:
            return forwarded
        acls = [StandardAcl.from_wire(creation) for creation in request.creations]
        answer, error = await on_controller(ctx.controller.create_acls(acls))
        if answer is not None:
            results = tuple(build(result_cls, error_code=e.code, error_message=e.message) for e in answer)
            return build(response_cls, throttle_time=_NO_THROTTLE, results=results)
        refused = error.code, error.message
    code, message = refused
    results = tuple(build(result_cls, error_code=code, error_message=message) for _ in request.creations)
    return build(response_cls, throttle_time=_NO_THROTTLE, results=results)


async def handle_delete_acls(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(DELETE_ACLS, ctx.api_version)
    result_cls = nested_type(response_cls, "DeleteAclsFilterResult")
    matching_cls = nested_type(response_cls, "DeleteAclsMatchingAcl")
    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is None:
        forwarded = await forward_unless_active(ctx, request)
        if forwarded is not None:
            return forwarded
        filters = [AclBindingFilter.from_wire(f) for f in request.filters]
        answer, error = await on_controller(ctx.controller.delete_acls(filters))
        if answer is not None:
            results = tuple(
                build(
                    result_cls,
                    error_code=r.error.code,
                    error_message=r.error.message,
                    matching_acls=tuple(
                        build(
                            matching_cls, error_code=ErrorCode.none, error_message=None, **acl.wire_fields()
                        )
                        for acl in r.deleted
                    ),
                )
                for r in answer
            )
            return build(response_cls, throttle_time=_NO_THROTTLE, filter_results=results)
        refused = error.code, error.message
    code, message = refused
    results = tuple(
        build(result_cls, error_code=code, error_message=message, matching_acls=()) for _ in request.filters
    )
    return build(response_cls, throttle_time=_NO_THROTTLE, filter_results=results)


APIS = [
    ApiSpec(DESCRIBE_ACLS, *kio_versions(DESCRIBE_ACLS), handle_describe_acls),  # type: ignore[misc]
    ApiSpec(CREATE_ACLS, *kio_versions(CREATE_ACLS), handle_create_acls),  # type: ignore[misc]
    ApiSpec(DELETE_ACLS, *kio_versions(DELETE_ACLS), handle_delete_acls),  # type: ignore[misc]
]

CONTROLLER_APIS = [spec for spec in APIS if spec.api_key != DESCRIBE_ACLS]
"""The controller listener serves Create and Delete (forwarded by brokers); Describe is a broker's."""
