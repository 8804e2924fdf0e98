"""SaslHandshake (17) and SaslAuthenticate (36) as KafkaApis answers them: ILLEGAL_SASL_STATE.

The SASL exchange itself happens before a request reaches the handlers (`kcli.broker.authenticator`
on a SASL listener); one that gets here came on a PLAINTEXT listener, or after authentication from a
client that cannot re-authenticate. They are registered so ApiVersions advertises them, which clients
(librdkafka) look for before they authenticate.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.protocol.messages import build, response_type

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


async def handle_sasl_handshake(ctx: RequestContext, request: object) -> object:
    return build(
        response_type(SASL_HANDSHAKE, ctx.api_version), error_code=ErrorCode.illegal_sasl_state, mechanisms=()
    )


async def handle_sasl_authenticate(ctx: RequestContext, request: object) -> object:
    return build(
        response_type(SASL_AUTHENTICATE, ctx.api_version),
        error_code=ErrorCode.illegal_sasl_state,
        error_message="Unexpected handleSaslAuthenticateRequest request received",
        auth_bytes=b"",
    )


APIS = [
    ApiSpec(SASL_HANDSHAKE, 0, 1, handle_sasl_handshake),
    ApiSpec(SASL_AUTHENTICATE, 0, 2, handle_sasl_authenticate),
]
