"""Kafka's request header, and the request body behind it: what the broker reads of every frame,
apart from the sockets that carry it.

A request header is v1 (api key, version, correlation id, legacy nullable client id) or v2 (the same
plus tagged fields) by the request's flexibility; ApiVersions takes any version, so that a client can
learn ours whatever it asked with (KIP-511). Input that breaks these rules raises
`InvalidRequestError`, on which the broker closes the connection, as Kafka's SocketServer does.
"""

from __future__ import annotations

import struct
from functools import cache

from kio.serial import entity_reader

from kcli.protocol.guard import DeclaredSizeError, check_sizes, skip_tagged_fields, without_unknown_tags
from kcli.protocol.messages import API_VERSIONS, api_name, kio_versions, request_type


class InvalidRequestError(Exception):
    """Input the broker cannot answer (Kafka's InvalidRequestException): its connection is closed and
    the reason logged; no other connection notices."""


def read_request_header(frame: bytes) -> tuple[int, int, int, str, int]:
    """(api key, api version, correlation id, client id, offset of the body) of a request frame."""
    if len(frame) < 4:
        raise InvalidRequestError(f"request header is truncated ({len(frame)} bytes)")
    api_key, api_version = _KEY_VERSION.unpack_from(frame)
    correlation_id, client_id, body_offset = parse_request_header(
        frame, header_is_flexible(api_key, api_version)
    )
    return api_key, api_version, correlation_id, client_id, body_offset


def parse_request_header(frame: bytes, flexible: bool) -> tuple[int, str, int]:
    """(correlation id, client id, offset of the body) from a request header v1 or v2.

    The client id is a legacy nullable string even in header v2 (null reads as "", as in Kafka);
    header v2's tagged fields are skipped, since Kafka defines none.
    """
    if len(frame) < 10:
        raise InvalidRequestError(f"request header is truncated ({len(frame)} bytes)")
    correlation_id, length = _CORRELATION_CLIENT_ID.unpack_from(frame, 4)
    position = 10
    client_id = ""
    if length < -1:
        raise InvalidRequestError(f"request header has a negative client id length {length}")
    if length > 0:
        if position + length > len(frame):
            raise InvalidRequestError(f"request header is truncated inside its {length}-byte client id")
        client_id = frame[position : position + length].decode("utf-8", errors="replace")
        position += length
    if flexible:
        try:
            position = skip_tagged_fields(frame, position, len(frame))
        except DeclaredSizeError as exc:
            raise InvalidRequestError(f"malformed request header: {exc}") from None
    return correlation_id, client_id, position


@cache  # only answers are kept: the refusals raise, so client input cannot grow the cache
def header_is_flexible(api_key: int, api_version: int) -> bool:
    """Header v2 for flexible request versions, v1 otherwise; ApiVersions accepts any version."""
    if api_key == API_VERSIONS:
        return api_version >= 3
    versions = kio_versions(api_key)
    if versions is None:
        raise InvalidRequestError(f"unknown API key {api_key}")
    low, high = versions
    if not low <= api_version <= high:
        raise InvalidRequestError(
            f"{api_name(api_key)} v{api_version} is not a version this broker knows (v{low}-v{high})"
        )
    return bool(request_type(api_key, api_version).__flexible__)


def decode_request(name: str, api_key: int, api_version: int, frame: bytes, offset: int) -> object:
    """Check declared sizes first (kio would abort the process on a huge array length), drop
    unknown tagged fields as Kafka does, then let kio build the request."""
    body_type = request_type(api_key, api_version)
    try:
        _, edits = check_sizes(body_type, frame, offset)
    except DeclaredSizeError as exc:
        raise InvalidRequestError(f"malformed {name} v{api_version} request: {exc}") from None
    if edits:
        frame = without_unknown_tags(frame, edits)
    try:
        request, _ = _request_reader(api_key, api_version)(frame, offset)
    except Exception as exc:
        raise InvalidRequestError(f"cannot parse {name} v{api_version} request: {exc}") from None
    return request


@cache
def _request_reader(api_key: int, api_version: int):  # type: ignore[no-untyped-def]
    return entity_reader(request_type(api_key, api_version))


_KEY_VERSION = struct.Struct(">hh")
_CORRELATION_CLIENT_ID = struct.Struct(">ih")
