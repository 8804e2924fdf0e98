"""UpdateFeatures (57): finalized feature levels changed in a running cluster (KIP-584, KIP-778).

A broker forwards the request to the active controller (KIP-590). The controller checks every update
and writes all of them or none; the response carries one error for the whole request, and up to v1 a
result per feature (v2 dropped those, KIP-1022), as Kafka's QuorumController.updateFeatures answers.
The levels a broker supports and the finalized ones are in its ApiVersions response (api_versions.py).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import (
    CLUSTER_AUTHORIZATION_FAILED,
    RequestContext,
    controller_error,
    forward_unless_active,
)
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.metadata.controller.controller_result import ApiError
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

UPDATE_FEATURES = 57
_NO_THROTTLE = datetime.timedelta(0)


async def handle_update_features(ctx: RequestContext, request: Any) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(  # UpdateFeaturesRequest.getErrorResponse: the error alone, no results
            response_type(UPDATE_FEATURES, ctx.api_version),
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=CLUSTER_AUTHORIZATION_FAILED,
            results=(),
        )
    error = await controller_error(ctx.controller.update_features(request))
    return update_features_response(ctx.api_version, request, error)


def update_features_response(version: int, request: Any, error: ApiError) -> object:
    """A failure is the whole request's, its message prefixed as Kafka's; a success lists each
    feature with no error up to v1."""
    response_cls = response_type(UPDATE_FEATURES, version)
    if error.is_failure:
        message = (
            f"The update failed for all features since the following feature had an error: {error.message}"
        )
        return build(
            response_cls, throttle_time=_NO_THROTTLE, error_code=error.code, error_message=message, results=()
        )
    results: tuple[object, ...] = ()
    if version <= 1:
        result_cls = nested_type(response_cls, "UpdatableFeatureResult")
        results = tuple(
            build(result_cls, feature=update.feature, error_code=ErrorCode.none, error_message=None)
            for update in request.feature_updates
        )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=results,
    )


APIS = [ApiSpec(UPDATE_FEATURES, *kio_versions(UPDATE_FEATURES), handle_update_features)]  # type: ignore[misc]
