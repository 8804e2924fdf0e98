"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): SCRAM credentials (KIP-554).

Describe is answered by any broker from its metadata image, as Kafka's ScramImage.describe: each
user's mechanisms and iteration counts (never salts or keys), every user when none is named,
RESOURCE_NOT_FOUND for a named user without credentials and DUPLICATE_RESOURCE for one named twice.
Alter goes to the active controller (a broker forwards it, KIP-590), which checks each user and writes
the credentials that pass; a request the controller cannot take gets its error on every user.
Describe needs DESCRIBE on the cluster, Alter ALTER (else CLUSTER_AUTHORIZATION_FAILED), as Kafka's.
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
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kcli.security.scram import MECHANISMS

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
_NO_THROTTLE = datetime.timedelta(0)

_DESCRIBE_DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_DESCRIBE_USER_THAT_DOES_NOT_EXIST = "Attempt to describe a user credential that does not exist: "


async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> object:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # DescribeUserScramCredentialsRequest.getErrorResponse: the error at the top and once per named user
        response_cls = response_type(DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
        result_cls = nested_type(response_cls, "DescribeUserScramCredentialsResult")
        denied, message = ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=denied,
            error_message=message,
            results=tuple(
                build(result_cls, user="", error_code=denied, error_message=message, credential_infos=())
                for _ in request.users or ()
            ),
        )
    return describe_user_scram_credentials(ctx.state.image, request, ctx.api_version)


def describe_user_scram_credentials(image: ClusterMetadataImage, request: Any, version: int) -> object:
    """ScramImage.describe over `image`: users in the order first named (all users, sorted, if none)."""
    response_cls = response_type(DESCRIBE_USER_SCRAM_CREDENTIALS, version)
    result_cls = nested_type(response_cls, "DescribeUserScramCredentialsResult")
    info_cls = nested_type(response_cls, "CredentialInfo")
    duplicated: dict[str, bool] = {}  # user -> named more than once
    if not request.users:
        duplicated = dict.fromkeys(sorted({user for users in image.scram.values() for user in users}), False)
    else:
        for user in request.users:
            duplicated[user.name] = user.name in duplicated
    results = []
    for user, twice in duplicated.items():
        infos = tuple(
            build(info_cls, mechanism=type_, iterations=image.scram[mechanism][user].iterations)
            for mechanism, (type_, _) in MECHANISMS.items()
            if not twice and user in image.scram.get(mechanism, {})
        )
        if twice:
            code, message = ErrorCode.duplicate_resource, _DESCRIBE_DUPLICATE_USER + user
        elif not infos:
            code, message = ErrorCode.resource_not_found, _DESCRIBE_USER_THAT_DOES_NOT_EXIST + user
        else:
            code, message = ErrorCode.none, None
        results.append(
            build(result_cls, user=user, error_code=code, error_message=message, credential_infos=infos)
        )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    response_cls = response_type(ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
    result_cls = nested_type(response_cls, "AlterUserScramCredentialsResult")
    answer: Any = None
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        refused = ApiError(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    else:
        answer, refused = await on_controller(ctx.controller.alter_user_scram_credentials(request))
    if answer is None:  # AlterUserScramCredentialsRequest.getErrorResponse: the error on every user, sorted
        names = sorted({e.name for e in (*request.deletions, *request.upsertions)})
        results = tuple(
            build(result_cls, user=name, error_code=refused.code, error_message=refused.message)
            for name in names
        )
    else:
        results = tuple(
            build(result_cls, user=r.user, error_code=r.error.code, error_message=r.error.message)
            for r in answer
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, results=results)


APIS = [
    ApiSpec(
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        *kio_versions(DESCRIBE_USER_SCRAM_CREDENTIALS),  # type: ignore[misc]
        handle_describe_user_scram_credentials,
    ),
    ApiSpec(
        ALTER_USER_SCRAM_CREDENTIALS,
        *kio_versions(ALTER_USER_SCRAM_CREDENTIALS),  # type: ignore[misc]
        handle_alter_user_scram_credentials,
    ),
]

CONTROLLER_APIS = [spec for spec in APIS if spec.api_key == ALTER_USER_SCRAM_CREDENTIALS]
"""The controller listener serves Alter only (Kafka's ControllerApis); Describe is a broker's."""
