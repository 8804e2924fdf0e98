"""DescribeClientQuotas (48) and AlterClientQuotas (49): client quotas (KIP-546).

Describe is answered by any broker from its metadata image, as Kafka's ClientQuotasImage.describe:
each filter component matches an entity type EXACT (a name), DEFAULT (the type's default) or
SPECIFIED (any name or default); `strict` also demands the entity have no other type. A filter
Kafka refuses gets its sentence as the response's error. Alter goes to the active controller (a
broker forwards it, KIP-590), which checks each entity; a request the controller cannot take gets its
error on every entity. Describe needs DESCRIBE_CONFIGS on the cluster, Alter ALTER_CONFIGS, as Kafka's.
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
from kcli.broker.metadata.controller.controller_result import ApiError
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.quota_config import CLIENT_ID, ENTITY_TYPES, IP, USER
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
MATCH_TYPE_EXACT = 0
MATCH_TYPE_DEFAULT = 1
MATCH_TYPE_SPECIFIED = 2
_NO_THROTTLE = datetime.timedelta(0)


class _FilterError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> object:
    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(  # DescribeClientQuotasRequest.getErrorResponse
            response_type(DESCRIBE_CLIENT_QUOTAS, ctx.api_version),
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=CLUSTER_AUTHORIZATION_FAILED,
            entries=None,
        )
    return describe_client_quotas(ctx.state.image, request, ctx.api_version)


def describe_client_quotas(image: ClusterMetadataImage, request: Any, version: int) -> object:
    """ClientQuotasImage.describe over `image` (entities in a stable order: by their pairs)."""
    response_cls = response_type(DESCRIBE_CLIENT_QUOTAS, version)
    entry_cls = nested_type(response_cls, "EntryData")
    entity_cls = nested_type(response_cls, "EntityData")
    value_cls = nested_type(response_cls, "ValueData")
    try:
        exact, specified = _filter(request.components)
    except _FilterError as exc:
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=exc.code,
            error_message=str(exc),
            entries=None,
        )
    entries = []
    for entity, values in sorted(image.client_quotas.items(), key=lambda item: repr(item[0])):
        pairs = dict(entity)
        if request.strict and len(pairs) != len(exact) + len(specified):
            continue
        if any(kind not in pairs or pairs[kind] != name for kind, name in exact.items()):
            continue
        if any(kind not in pairs for kind in specified):
            continue
        entries.append(
            build(
                entry_cls,
                entity=tuple(entity_cls(entity_type=k, entity_name=n) for k, n in entity),
                values=tuple(build(value_cls, key=k, value=v) for k, v in sorted(values.items())),
            )
        )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        entries=tuple(entries),
    )


def _filter(components: Any) -> tuple[dict[str, str | None], set[str]]:
    """The exact matches (None: the default) and the types that must merely be present."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise _FilterError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise _FilterError(
                ErrorCode.invalid_request, f"Entity type {kind} cannot appear more than once in the filter."
            )
        if kind not in ENTITY_TYPES:
            raise _FilterError(ErrorCode.unsupported_version, f"Unsupported entity type {kind}")
        match_type = component.match_type
        if match_type == MATCH_TYPE_EXACT:
            if component.match is None:
                raise _FilterError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                )
            exact[kind] = component.match
        elif match_type == MATCH_TYPE_DEFAULT:
            if component.match is not None:
                raise _FilterError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                )
            exact[kind] = None
        elif match_type == MATCH_TYPE_SPECIFIED:
            if component.match is not None:
                raise _FilterError(
                    ErrorCode.invalid_request,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )
            specified.add(kind)
        else:
            raise _FilterError(ErrorCode.invalid_request, f"Unknown match type {match_type}")
    named = set(exact) | specified
    if IP in named and (USER in named or CLIENT_ID in named):
        raise _FilterError(
            ErrorCode.invalid_request,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        )
    return exact, specified


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    response_cls = response_type(ALTER_CLIENT_QUOTAS, ctx.api_version)
    entry_cls = nested_type(response_cls, "EntryData")
    entity_cls = nested_type(response_cls, "EntityData")
    answer: Any = None
    if not ctx.authorize(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        refused = ApiError(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    else:
        answer, refused = await on_controller(
            ctx.controller.alter_client_quotas(list(request.entries), request.validate_only)
        )
    if answer is None:  # AlterClientQuotasRequest.getErrorResponse: the error on every entity
        outcome = [
            (tuple((e.entity_type, e.entity_name) for e in entry.entity), refused.code, refused.message)
            for entry in request.entries
        ]
    else:
        outcome = [(r.entity, r.error.code, r.error.message) for r in answer]
    entries = tuple(
        build(
            entry_cls,
            error_code=code,
            error_message=message,
            entity=tuple(entity_cls(entity_type=k, entity_name=n) for k, n in entity),
        )
        for entity, code, message in outcome
    )
    return build(response_cls, throttle_time=_NO_THROTTLE, entries=entries)


APIS = [
    ApiSpec(
        DESCRIBE_CLIENT_QUOTAS,
        *kio_versions(DESCRIBE_CLIENT_QUOTAS),  # type: ignore[misc]
        handle_describe_client_quotas,
    ),
    ApiSpec(
        ALTER_CLIENT_QUOTAS,
        *kio_versions(ALTER_CLIENT_QUOTAS),  # type: ignore[misc]
        handle_alter_client_quotas,
    ),
]

CONTROLLER_APIS = [spec for spec in APIS if spec.api_key == ALTER_CLIENT_QUOTAS]
"""The controller listener serves Alter only (Kafka's ControllerApis); Describe is a broker's."""
