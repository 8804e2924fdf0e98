"""Envelope on the controller listener (Kafka's ControllerApis.handleEnvelopeRequest, EnvelopeUtils).

A broker forwards a client's admin request in an envelope so that the controller handles it as that
client's: the embedded request runs with the principal, client id and client address the envelope
carries, and its response (header and body) goes back in EnvelopeResponse.response_data. What the
envelope cannot carry is refused in the envelope's own error code, as Kafka does: a principal that
cannot be read is PRINCIPAL_DESERIALIZATION_FAILURE, an address or an API that may not be forwarded is
INVALID_REQUEST, an embedded request that cannot be parsed is UNSUPPORTED_VERSION. Only the controller
listener serves Envelope (a broker listener closes a connection that sends one, as Kafka's does).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import ConnectionInfo, FramedResponse, RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.protocol.envelope import ENVELOPE, FORWARDABLE, EnvelopeError, deserialize_principal, parse_address
from kcli.protocol.messages import api_name, response_type
from kcli.protocol.request_header import InvalidRequestError, decode_request, read_request_header
from kcli.protocol.response_header import encode_response, response_header
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger("kcli.broker")


def authorized_for_cluster_action(ctx: RequestContext) -> bool:
    """Kafka authorizes the envelope's sender (the forwarding broker) for CLUSTER_ACTION on the cluster;
    with no authorizer configured every principal is."""
    return ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)


async def handle_envelope(ctx: RequestContext, request: Any) -> object:
    cls = response_type(ENVELOPE, ctx.api_version)
    if not authorized_for_cluster_action(ctx):
        return cls(
            response_data=None,
            error_code=ErrorCode.cluster_authorization_failed,
        )
    try:
        principal = deserialize_principal(request.request_principal)
    except EnvelopeError as exc:
        log.info("Envelope from %s refused: %s", ctx.connection.peer, exc)
        return cls(response_data=None, error_code=ErrorCode.principal_deserialization_failure)
    try:
        address = parse_address(request.client_host_address)
    except EnvelopeError as exc:
        log.info("Envelope from %s refused: %s", ctx.connection.peer, exc)
        return cls(response_data=None, error_code=ErrorCode.invalid_request)
    data = bytes(request.request_data)
    try:
        api_key, api_version, correlation_id, client_id, body_offset = read_request_header(data)
    except (InvalidRequestError, ValueError) as exc:
        log.info(
            "Envelope from %s refused: Failed to parse request header from envelope: %s",
            ctx.connection.peer,
            exc,
        )
        return cls(response_data=None, error_code=ErrorCode.unsupported_version)
    if api_key not in FORWARDABLE:
        log.info(
            "Envelope from %s refused: API %s is not enabled or is not eligible for forwarding",
            ctx.connection.peer,
            api_name(api_key),
        )
        return cls(response_data=None, error_code=ErrorCode.invalid_request)
    spec = ctx.registry.get(api_key)
    if spec is None or not spec.handles(api_version):
        return cls(response_data=None, error_code=ErrorCode.unsupported_version)
    try:
        inner = decode_request(spec.name, api_key, api_version, data, body_offset)
    except InvalidRequestError as exc:
        log.info("Envelope from %s refused: Failed to parse forwarded request: %s", ctx.connection.peer, exc)
        return cls(response_data=None, error_code=ErrorCode.unsupported_version)
    connection = ConnectionInfo(
        connection_id=ctx.connection.connection_id,
        peer=address,
        listener=ctx.connection.listener,
        principal=principal,
    )
    forwarded = RequestContext(api_key, api_version, correlation_id, client_id, connection, ctx.state)
    log.info(
        "%s v%d forwarded by %s (%s) for principal %s, client id %s, client address %s",
        spec.name,
        api_version,
        ctx.connection.principal,
        ctx.connection.peer,
        principal,
        client_id,
        address,
    )
    response = await spec.handler(forwarded, inner)
    if isinstance(response, FramedResponse):  # an encoded body: the controller's APIs give none other
        body = b"".join(p for p in response.parts if isinstance(p, bytes))
        payload = response_header(correlation_id, api_key, response.response_type) + body
    else:
        payload = encode_response(correlation_id, api_key, response)[4:]
    return cls(response_data=payload, error_code=ErrorCode.none)


CONTROLLER_APIS = [ApiSpec(ENVELOPE, 0, 0, handle_envelope)]
