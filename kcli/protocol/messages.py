"""Kafka protocol messages through kio: request and response classes by api key and version, building
entities with the fields a version has, and well-formed error answers.

Used alike by the broker (decoding requests, answering), the client and the operations.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import types
import typing
import uuid
from functools import cache

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

API_VERSIONS = 18
"""ApiVersions' key: its request and response headers follow their own rules (KIP-511)."""


@cache
def api_name(api_key: int) -> str:
    """Kafka's name for an API key, e.g. 3 -> "Metadata"."""
    snake = api_key_map.get(api_key)
    if snake is None:
        return f"api key {api_key}"
    return "".join(part.capitalize() for part in snake.split("_"))


def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The (lowest, highest) version kio has schemas for, or None for an API key kio does not know."""
    return _KIO_VERSIONS.get(api_key)


_KIO_VERSIONS = {
    key: (min(schema_name_map[name]), max(schema_name_map[name])) for key, name in api_key_map.items()
}


@cache
def request_type(api_key: int, version: int) -> type:
    return _payload_class(api_key, version, EntityType.request)


@cache
def response_type(api_key: int, version: int) -> type:
    from kcli.protocol.nullable_schemas import RESPONSES  # where Kafka sends -1 kio cannot read

    return RESPONSES.get((api_key, version)) or _payload_class(api_key, version, EntityType.response)


def build(entity_type: type, **values: object) -> typing.Any:
    """Construct a kio entity, dropping fields this version does not have.

    A handler describes its answer once, with every field any version might carry; `build` keeps
    the ones the response version defines, so one handler serves v0 through the newest.
    """
    names = _field_names(entity_type)
    return entity_type(**{k: v for k, v in values.items() if k in names})


def nested_type(payload_type: type, name: str) -> type:
    """A nested entity class from the same schema module, e.g. ("MetadataResponse", "MetadataResponseBroker")."""
    return getattr(sys.modules[payload_type.__module__], name)


def error_response(api_key: int, version: int, error: ErrorCode, message: str | None = None) -> typing.Any:
    """A response of the right shape whose every error code is `error` and whose lists are empty.

    This is how the broker answers an API it knows but does not implement: a well-formed
    response the client can decode, carrying UNSUPPORTED_VERSION, instead of a dropped connection.
    """
    return default_entity(response_type(api_key, version), error, message)


# ---------------------------------------------------------------------------------------------------


def _payload_class(api_key: int, version: int, entity_type: EntityType) -> type:
    module = load_payload_module(api_key, version, entity_type)  # type: ignore[arg-type]
    suffix = "Request" if entity_type is EntityType.request else "Response"
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) is entity_type:
            if value.__name__.endswith(suffix):
                return value
    raise LookupError(f"kio has no {suffix.lower()} class for api key {api_key} v{version}")


@cache
def _field_names(entity_type: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(entity_type))


def default_entity(entity_type: type, error: ErrorCode, message: str | None) -> typing.Any:
    values: dict[str, object] = {}
    for f in dataclasses.fields(entity_type):
        if f.name == "error_code":
            values[f.name] = error
        elif f.name == "error_message" and message is not None:
            values[f.name] = message
        elif f.default is not dataclasses.MISSING:
            continue
        else:
            values[f.name] = _default_value(f, error, message)
    return entity_type(**values)


def unwrap_optional(field_type: object) -> tuple[object, bool]:
    """(the type inside `X | None`, whether it was optional): kio marks a nullable field that way."""
    if isinstance(field_type, types.UnionType) or typing.get_origin(field_type) is typing.Union:
        args = [a for a in typing.get_args(field_type) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(field_type))
    return field_type, False


def _default_value(f: dataclasses.Field, error: ErrorCode, message: str | None) -> object:
    field_type, optional = unwrap_optional(f.type)
    if typing.get_origin(field_type) is tuple:
        return ()
    if dataclasses.is_dataclass(field_type):
        return None if optional else default_entity(field_type, error, message)  # type: ignore[arg-type]
    kafka_type = f.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return error
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return None if optional else datetime.datetime.fromtimestamp(0, datetime.UTC)
    if optional:
        return None
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "float64":
        return 0.0
    return 0
