"""One request frame in, its framed answer out: Kafka's KafkaApis.handle, and the one seam between the
network layer (`kcli.broker.network`) and the handlers.

The network layer cuts frames and sends what this returns; it knows no handler, and the handlers know
no socket. What happens to bad input follows Kafka's KafkaApis:
- a header that cannot be parsed, an unknown API key, a version of an API we handle that is outside
  our range, or a body that cannot be parsed: `InvalidRequestError`, and the connection is closed;
- an Envelope on a listener other than the controller's (Kafka enables it there alone): the same;
- an ApiVersions version we do not handle: the v0-shaped UNSUPPORTED_VERSION answer (KIP-511);
- an API that Kafka defines but this broker does not implement yet: a well-formed response of that
  API carrying UNSUPPORTED_VERSION, and the connection stays open;
- a handler that raises: UNKNOWN_SERVER_ERROR in a well-formed response, logged with traceback.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcli.broker.apis.api_versions import API_KEY as API_VERSIONS
from kcli.broker.apis.api_versions import unsupported_version_response
from kcli.broker.apis.context import BrokerState, ConnectionInfo, FramedResponse, RequestContext
from kcli.broker.quota.quotas import on_cpu, record_request_time, throttle, with_throttle_time
from kcli.protocol.envelope import ENVELOPE
from kcli.protocol.messages import api_name, error_response
from kcli.protocol.request_header import InvalidRequestError, decode_request, read_request_header
from kcli.protocol.response_header import encode_response, response_header

log = logging.getLogger("kcli.broker")


@dataclass(frozen=True, slots=True)
class FramedSend:
    """An answer to send in parts (file regions among them): the network layer writes its size and
    header, then the parts, with os.sendfile for file regions on a plain TCP connection."""

    correlation_id: int
    api_key: int
    response: FramedResponse


Answer = bytes | FramedSend | None
"""A framed answer, an answer to send in parts, or None (a Produce with acks=0 gets no answer)."""


async def handle_request(state: BrokerState, connection: ConnectionInfo, frame: bytes) -> Answer:
    """Answer one request frame (after its size prefix) that came in on `connection`."""
    api_key, api_version, correlation_id, client_id, body_offset = read_request_header(frame)
    ctx = RequestContext(api_key, api_version, correlation_id, client_id, connection, state, len(frame))
    registry = ctx.registry
    spec = registry.get(api_key)
    if api_key == API_VERSIONS and (spec is None or not spec.handles(api_version)):
        response = unsupported_version_response(registry)
    elif spec is None and api_key == ENVELOPE:  # Kafka enables it on the controller listener alone
        raise InvalidRequestError(
            f"received an Envelope request on listener {connection.listener or 'of clients'}; an Envelope "
            f"is only accepted on the controller listener"
        )
    elif spec is None:
        log.info(
            "%s v%d from %s is not implemented; answering UNSUPPORTED_VERSION",
            api_name(api_key),
            api_version,
            connection.peer,
        )
        message = f"kcli does not implement {api_name(api_key)} yet"
        response = error_response(api_key, api_version, ErrorCode.unsupported_version, message)
    elif not spec.handles(api_version):
        raise InvalidRequestError(
            f"received {spec.name} v{api_version}, which is not enabled (this broker handles "
            f"v{spec.min_version}-v{spec.max_version})"
        )
    else:
        request = decode_request(spec.name, api_key, api_version, frame, body_offset)
        try:
            if not state.image.client_quotas:
                response = await spec.handler(ctx, request)
            else:  # request_percentage: the handler's own time, throttled as any other quota
                spent = [0]
                response = await on_cpu(spec.handler(ctx, request), spent)
                throttle_ms = record_request_time(ctx, request, spent[0])
                if throttle_ms:
                    throttle(ctx, throttle_ms)
                    response = with_throttle_time(response, throttle_ms)
        except ConnectionAbortedError as exc:  # the handler asks for the connection to be closed
            raise InvalidRequestError(str(exc)) from None
        except Exception:
            log.exception("%s v%d handler failed for %s", spec.name, api_version, connection.peer)
            response = error_response(api_key, api_version, ErrorCode.unknown_server_error)
    if response is None:
        return None
    if isinstance(response, FramedResponse):
        if len(response.parts) == 1 and isinstance(response.parts[0], bytes):  # encoded by the handler
            header = response_header(correlation_id, api_key, response.response_type)
            body = response.parts[0]
            return _INT32.pack(len(header) + len(body)) + header + body
        return FramedSend(correlation_id, api_key, response)
    return encode_response(correlation_id, api_key, response)


_INT32 = struct.Struct(">i")
