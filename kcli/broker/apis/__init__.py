"""The API registry: api key -> (min version, max version, async handler).

The registry is the single source of truth for what the broker advertises in ApiVersions: an
API is listed exactly when a handler is registered, with exactly the versions it handles. One
module per API family contributes its `APIS` list; `build_registry()` collects them.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import types
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import cache

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from kcli.broker.apis.context import RequestContext

Handler = Callable[[RequestContext, typing.Any], Awaitable[typing.Any]]
"""`async def handle(ctx, request) -> response entity | None` (None: no response, e.g. acks=0)."""


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler

    @property
    def name(self) -> str:
        return api_name(self.api_key)

    def handles(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class ApiRegistry:
    """Handlers by api key; refuses versions kio cannot encode, so we never advertise them."""

    def __init__(self, specs: typing.Iterable[ApiSpec] = ()) -> None:
        self._specs: dict[int, ApiSpec] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: ApiSpec) -> None:
        if spec.api_key in self._specs:
            raise ValueError(f"API key {spec.api_key} is registered twice")
        low, high = kio_versions(spec.api_key) or (0, -1)
        if not (low <= spec.min_version <= spec.max_version <= high):
            raise ValueError(
                f"{spec.name} v{spec.min_version}-{spec.max_version} is outside kio's v{low}-{high}"
            )
        self._specs[spec.api_key] = spec

    def get(self, api_key: int) -> ApiSpec | None:
        return self._specs.get(api_key)

    def __iter__(self) -> Iterator[ApiSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.api_key))

    def __contains__(self, api_key: int) -> bool:
        return api_key in self._specs


def build_registry() -> ApiRegistry:
    """The broker's registry: every API family module's `APIS`."""
    from kcli.broker.apis import (
        api_versions,
        cluster,
        configs,
        fetch,
        groups,
        list_offsets,
        log_dirs,
        metadata,
        offset_for_leader_epoch,
        offsets,
        produce,
        producer_id,
        producers,
        records,
        topics,
        transactions,
    )

    return ApiRegistry(
        [
            *api_versions.APIS,
            *metadata.APIS,
            *cluster.APIS,
            *topics.APIS,
            *configs.APIS,
            *records.APIS,
            *log_dirs.APIS,
            *produce.APIS,
            *producer_id.APIS,
            *fetch.APIS,
            *list_offsets.APIS,
            *offset_for_leader_epoch.APIS,
            *groups.APIS,
            *offsets.APIS,
            *transactions.APIS,
            *producers.APIS,
        ]
    )


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
    from kcli.broker.apis.nullable_schemas import RESPONSES  # where Kafka sends -1 kio cannot read

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


def _default_value(f: dataclasses.Field, error: ErrorCode, message: str | None) -> object:
    field_type = f.type
    optional = False
    if isinstance(field_type, types.UnionType) or typing.get_origin(field_type) is typing.Union:
        args = [a for a in typing.get_args(field_type) if a is not type(None)]
        optional = len(args) < len(typing.get_args(field_type))
        field_type = args[0]
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
