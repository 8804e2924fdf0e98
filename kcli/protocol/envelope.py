"""Kafka's Envelope (api 58, KIP-590): a client's request as a broker forwards it to the controller.

The envelope carries the client's request as its bytes (request header and body), the principal the
forwarding broker authenticated, serialized as Kafka's DefaultKafkaPrincipalBuilder does (a version
prefix, then DefaultPrincipalData), and the client's IP address as its raw bytes. The controller
answers with the forwarded request's response, header included, in EnvelopeResponse.response_data.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Any

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader

from kcli.protocol.codec import entity_write
from kcli.protocol.guard import skip_tagged_fields

ENVELOPE = 58

FORWARDABLE = frozenset({19, 20, 30, 31, 33, 37, 38, 39, 40, 43, 44, 45, 46, 49, 51, 55, 57, 64, 67, 80, 81})
"""The APIs Kafka marks forwardable (ApiKeys' `forwardable`): the only ones an envelope may carry."""

_PRINCIPAL_VERSION = 0
_INT16 = struct.Struct(">h")


class EnvelopeError(ValueError):
    """An envelope whose principal, address or embedded request cannot be read."""


def serialize_principal(principal: str, *, token_authenticated: bool = False) -> bytes:
    """`principal` ("Type:name") as DefaultKafkaPrincipalBuilder.serialize writes it."""
    principal_type, _, name = principal.partition(":")
    out = bytearray(_INT16.pack(_PRINCIPAL_VERSION))
    data = DefaultPrincipalData(type_=principal_type, name=name, token_authenticated=token_authenticated)
    entity_write(DefaultPrincipalData)(out, data)
    return bytes(out)


def deserialize_principal(data: bytes | None) -> str:
    """The "Type:name" that DefaultKafkaPrincipalBuilder.deserialize reads from `data`."""
    if data is None or len(data) < 2:
        raise EnvelopeError("Failed to deserialize client principal from envelope: no principal data.")
    (version,) = _INT16.unpack_from(data, 0)
    if version != _PRINCIPAL_VERSION:
        raise EnvelopeError(
            f"Failed to deserialize client principal from envelope: Invalid principal data version {version}."
        )
    try:
        principal, _ = entity_reader(DefaultPrincipalData)(data, 2)
    except Exception as exc:  # kio raises whatever its reader meets in bad bytes
        raise EnvelopeError(f"Failed to deserialize client principal from envelope: {exc}.") from None
    return f"{principal.type_}:{principal.name}"


def address_bytes(peer: str) -> bytes:
    """The client's IP address as Java's InetAddress.getAddress gives it (4 or 16 bytes); `peer` is
    "host:port" or "[v6]:port"."""
    host = peer.rsplit(":", 1)[0].strip("[]") if ":" in peer else peer
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return ipaddress.ip_address("0.0.0.0").packed


def parse_address(data: bytes) -> str:
    """The forwarded client's address as text (InetAddress.getByAddress: 4 or 16 bytes)."""
    if len(data) not in (4, 16):
        raise EnvelopeError("Failed to parse client address from envelope.")
    return str(ipaddress.ip_address(data))


def request_bytes(request: Any, *, client_id: str, correlation_id: int) -> bytes:
    """The request header and body, as the client sent them (no size prefix)."""
    header_type = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
    header = header_type(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = bytearray()
    entity_write(header_type)(out, header)
    entity_write(type(request))(out, request)
    return bytes(out)


def envelope(request: Any, *, principal: str, client_id: str, peer: str, correlation_id: int) -> Any:
    """The EnvelopeRequest a broker sends the controller for a client's `request`."""
    return EnvelopeRequest(
        request_data=request_bytes(request, client_id=client_id, correlation_id=correlation_id),
        request_principal=serialize_principal(principal),
        client_host_address=address_bytes(peer),
    )


def read_response(response_cls: type, data: bytes) -> Any:
    """The forwarded request's response from EnvelopeResponse.response_data (header, then body)."""
    offset = skip_tagged_fields(data, 4, len(data)) if response_cls.__flexible__ else 4  # type: ignore[attr-defined]
    response, _ = entity_reader(response_cls)(data, offset)
    return response
