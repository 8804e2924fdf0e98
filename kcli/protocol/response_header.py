"""Kafka's response header, and a response framed behind it (size, header, body).

A response header is v0, or v1 with tagged fields for a flexible response; ApiVersions' is always
v0, so that a client can read our answer whatever version it asked with (KIP-511).
"""

from __future__ import annotations

import struct

from kcli.protocol.codec import entity_write
from kcli.protocol.messages import API_VERSIONS


def response_header(correlation_id: int, api_key: int, response_type: type) -> bytes:
    """Header v1 (correlation id + empty tagged fields) for flexible responses, else v0. ApiVersions
    always gets v0, so that a client can read it whatever version it asked for."""
    if response_type.__flexible__ and api_key != API_VERSIONS:  # type: ignore[attr-defined]
        return _INT32.pack(correlation_id) + b"\0"
    return _INT32.pack(correlation_id)


def encode_response(correlation_id: int, api_key: int, response: object) -> bytes:
    """Frame a response: size, header, body."""
    out = bytearray(b"\0\0\0\0")
    out += response_header(correlation_id, api_key, type(response))
    entity_write(type(response))(out, response)
    _INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


_INT32 = struct.Struct(">i")
