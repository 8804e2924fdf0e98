"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

DescribeConfigs is answered by the broker, as Kafka's `ConfigHelper` answers it: a topic's every
property with its effective value, where it came from (the topic, the broker's properties, or the
default) and, on request, its synonyms and documentation; a broker's every property ("1"), or the
cluster-wide dynamic defaults (""). Entries come sorted by name.

The two alter APIs go first through what a KRaft broker does before forwarding
(`ConfigAdminManager.preprocess`: each resource at most once, no duplicate keys, no null values,
broker resources checked), then the rest goes to the active controller (KIP-590), which validates
topic configs and writes them as ConfigRecords in the metadata log (so they survive restarts) and
hands them to the logs. A request arriving on the controller listener was forwarded by a broker
that has done that first step: the controller only checks the resource, as Kafka's does.

Dynamic broker configs (KIP-226, kcli.broker.dynamic_config): a BROKER resource named by a node id
or "" (the cluster-wide defaults) is validated here, by the broker that received the request, as
Kafka's ConfigAdminManager.preprocess does (a node id must be this broker's own: clients send a
broker's resource to that broker), then goes to the controller, which writes it as ConfigRecords;
every broker applies the records from its metadata image. DescribeConfigs shows each broker property
with its source (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
DEFAULT_CONFIG) and synonyms in that order of precedence, and read_only=false for the properties
kcli updates live. Resource types Kafka has and kcli does not serve (BROKER_LOGGER, CLIENT_METRICS,
GROUP) are answered per resource with INVALID_REQUEST.
"""

from __future__ import annotations

import datetime
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext, controller_error, forward_unless_active
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.dynamic_config import (
    config_key,
    is_read_only,
    persistent_props,
    synonyms_of,
    validate_change,
)
from kcli.broker.metadata.controller import ApiError, ConfigOp, topic_name_error
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.config import (
    BROKER_CONFIGS,
    KCLI_DEFAULTS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigKey,
    Listener,
)
from kcli.protocol.configs import ConfigSource, OpType, ResourceType
from kcli.protocol.messages import build, kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation
from kcli.security.acl import ResourceType as AclResourceType

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44

_NO_THROTTLE = datetime.timedelta(0)
_NONE = ApiError()


# DescribeConfigsResponse.ConfigType ids by kcli.config type; 0 is UNKNOWN.
CONFIG_TYPES = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
    "listeners": 2,  # Kafka's listeners / advertised.listeners are STRING
    "protocol_map": 2,  # listener.security.protocol.map is STRING
}
# Properties kcli parses as lists that Kafka declares as STRING.
_STRING_IN_KAFKA = frozenset({"log.dirs", "controller.listener.names"})

_INVALID_REQUEST_TEXT = (
    "This most likely occurs because of a request being malformed by the client library or the "
    "message was sent to an incompatible broker. See the broker logs for more details."
)


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One DescribeConfigsResourceResult before it is put in a response of some version."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[Synonym, ...]
    config_type: int
    documentation: str | None


# --- DescribeConfigs ---------------------------------------------------------------------------------


async def handle_describe_configs(ctx: RequestContext, request: object) -> object:
    response_cls = response_type(DESCRIBE_CONFIGS, ctx.api_version)
    resources = request.resources  # type: ignore[attr-defined]
    if any(r.resource_type not in _DESCRIBABLE for r in resources):
        # ConfigHelper throws before describing anything; getErrorResponse uses the code's own text.
        error = ApiError(ErrorCode.invalid_request, _INVALID_REQUEST_TEXT)
        results = [_described(response_cls, r, error, ()) for r in resources]
        return build(response_cls, throttle_time=_NO_THROTTLE, results=tuple(results))

    include_synonyms = bool(request.include_synonyms)  # type: ignore[attr-defined]
    include_documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in resources:
        refused = _authorization_error(ctx, resource, AclOperation.DESCRIBE_CONFIGS)
        if refused is not None:
            results.append(_described(response_cls, resource, refused, ()))
            continue
        error, entries = describe_resource(
            ctx.state.config,
            ctx.state.image,
            resource.resource_type,
            resource.resource_name,  # type: ignore[arg-type]
        )
        keys = resource.configuration_keys
        if keys:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        results.append(
            _described(response_cls, resource, error, entries, include_synonyms, include_documentation)
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, results=tuple(results))


def describe_resource(
    config: BrokerConfig, image: ClusterMetadataImage, resource_type: int, name: str
) -> tuple[ApiError, list[DescribedConfig]]:
    """The error (or none) and the entries DescribeConfigs gives for one resource."""
    if resource_type == ResourceType.TOPIC:
        error = topic_name_error(name)
        if error is not None:
            return error, []
        if image.topic_id(name) is None:
            return ApiError(ErrorCode.unknown_topic_or_partition), []
        return _NONE, describe_topic(config, image.topic_config(name), *_dynamic_levels(config, image))
    if resource_type == ResourceType.BROKER:
        if not name:
            return _NONE, describe_cluster_defaults(_dynamic_levels(config, image)[1])
        broker_id = _java_int(name)
        if broker_id is None:
            return ApiError(ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}"), []
        if broker_id != config.node_id:
            message = f"Unexpected broker id, expected {config.node_id} or empty string, but received {name}"
            return ApiError(ErrorCode.invalid_request, message), []
        return _NONE, describe_broker(config, *_dynamic_levels(config, image))
    return _unsupported(resource_type), []


def describe_topic(
    config: BrokerConfig,
    overrides: Mapping[str, str],
    dynamic_broker: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[DescribedConfig]:
    """ConfigHelper.createTopicConfigEntry for every topic property."""
    levels = (dynamic_broker or {}, dynamic_default or {})
    effective = config.topic_config(overrides)
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        spec = TOPIC_CONFIGS[name]
        sensitive = spec.type == "password"
        value = None if sensitive else config_value_text(effective[name])
        synonyms: list[Synonym] = []
        if name in overrides:
            synonyms.append(Synonym(name, value, ConfigSource.TOPIC_CONFIG))
        broker_synonyms = TOPIC_CONFIG_SYNONYMS.get(name)
        if broker_synonyms:
            synonyms += _broker_synonyms(config, broker_synonyms[0].name, sensitive, *levels)
        entries.append(
            DescribedConfig(
                name=name,
                value=value,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                is_sensitive=sensitive,
                synonyms=tuple(synonyms),
                config_type=CONFIG_TYPES.get(spec.type, 0),
                documentation=spec.doc,
            )
        )
    return entries


def describe_broker(
    config: BrokerConfig, dynamic_broker: Mapping[str, str], dynamic_default: Mapping[str, str]
) -> list[DescribedConfig]:
    """ConfigHelper.createBrokerConfigEntry (per broker) for every broker property, and for the
    dynamic-only and custom properties set at either level (Kafka lists its config's originals)."""
    entries = []
    for name in sorted({*BROKER_CONFIGS, *dynamic_default, *dynamic_broker}):
        spec = config_key(name)
        sensitive = spec is None or spec.type == "password"  # KafkaConfig.maybeSensitive
        synonyms = _broker_synonyms(config, name, sensitive, dynamic_broker, dynamic_default)
        if name in BROKER_CONFIGS:
            value = config_value_text(config[name])
        else:
            value = dynamic_broker.get(name, dynamic_default.get(name))
        entries.append(
            DescribedConfig(
                name=name,
                value=None if sensitive else value,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=is_read_only(name),
                is_sensitive=sensitive,
                synonyms=tuple(synonyms),
                config_type=_config_type(spec) if spec is not None else 0,
                documentation=spec.doc if spec is not None else None,
            )
        )
    return entries


def describe_cluster_defaults(dynamic_defaults: Mapping[str, str]) -> list[DescribedConfig]:
    """The cluster-wide dynamic broker defaults (ConfigHelper.createBrokerConfigEntry, not per broker:
    only the DYNAMIC_DEFAULT_BROKER_CONFIG synonyms)."""
    entries = []
    for name in sorted(dynamic_defaults):
        spec = config_key(name)
        sensitive = spec is None or spec.type == "password"  # KafkaConfig.maybeSensitive
        value = None if sensitive else dynamic_defaults[name]
        synonyms = [
            Synonym(n, None if sensitive else dynamic_defaults[n], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            for n in synonyms_of(name)
            if n in dynamic_defaults
        ]
        synonyms = _from_own_name(synonyms, name)
        entries.append(
            DescribedConfig(
                name=name,
                value=value,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=is_read_only(name),
                is_sensitive=sensitive,
                synonyms=tuple(synonyms),
                config_type=_config_type(spec) if spec is not None else 0,
                documentation=spec.doc if spec is not None else None,
            )
        )
    return entries


def config_value_text(value: object) -> str | None:
    """A parsed property as Kafka's ConfigDef.convertToString prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_text(value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ",".join(
            str(item) if isinstance(item, Listener) else config_value_text(item) or "" for item in value
        )
    return str(value)


def java_double_text(value: float) -> str:
    """Java's Double.toString: plain digits in [1e-3, 1e7), else d.dddE<n> (1.7976931348623157E308)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    power = exponent + len(text) - 1  # type: ignore[operator]
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _broker_synonyms(
    config: BrokerConfig,
    name: str,
    sensitive: bool,
    dynamic_broker: Mapping[str, str],
    dynamic_default: Mapping[str, str],
) -> list[Synonym]:
    """ConfigHelper.configSynonyms: each synonym of `name` set dynamically for this broker, then as a
    cluster-wide default, then statically, then by default; from `name` itself on."""
    group = synonyms_of(name)
    found = []
    for level, source in (
        (dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    ):
        found += [
            Synonym(each, None if sensitive else level[each], source) for each in group if each in level
        ]
    explicit = config.explicit()
    for each in group:
        if config.is_set(each):
            value = None if sensitive else config_value_text(explicit[each])
            found.append(Synonym(each, value, ConfigSource.STATIC_BROKER_CONFIG))
    for each in group:
        spec = BROKER_CONFIGS.get(each)
        default = None if spec is None else KCLI_DEFAULTS.get(each, spec.default)
        if default is not None:
            found.append(
                Synonym(each, None if sensitive else config_value_text(default), ConfigSource.DEFAULT_CONFIG)
            )
    return _from_own_name(found, name)


def _dynamic_levels(
    config: BrokerConfig, image: ClusterMetadataImage
) -> tuple[dict[str, str], dict[str, str]]:
    """This broker's dynamic configs and the cluster-wide ones, as they apply (DynamicBrokerConfig's
    currentDynamicBrokerConfigs / currentDynamicDefaultConfigs)."""
    return (
        persistent_props(image.broker_config(str(config.node_id)), per_broker=True),
        persistent_props(image.broker_config(""), per_broker=False),
    )


def _from_own_name(synonyms: list[Synonym], name: str) -> list[Synonym]:
    """Kafka drops the synonyms before the first one named `name` (so a more specific property set
    elsewhere does not show as the source of a less specific one)."""
    for i, synonym in enumerate(synonyms):
        if synonym.name == name:
            return synonyms[i:]
    return []


def _config_type(spec: ConfigKey) -> int:
    return CONFIG_TYPES["string"] if spec.name in _STRING_IN_KAFKA else CONFIG_TYPES.get(spec.type, 0)


def _described(
    response_cls: type,
    resource: object,
    error: ApiError,
    entries: Iterable[DescribedConfig],
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> object:
    entry_cls = nested_type(response_cls, "DescribeConfigsResourceResult")
    synonym_cls = nested_type(response_cls, "DescribeConfigsSynonym")
    configs = tuple(
        build(
            entry_cls,
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=int(e.source),
            is_sensitive=e.is_sensitive,
            synonyms=tuple(synonym_cls(name=s.name, value=s.value, source=int(s.source)) for s in e.synonyms)
            if include_synonyms
            else (),
            config_type=e.config_type,
            documentation=e.documentation if include_documentation else None,
        )
        for e in entries
    )
    return build(
        nested_type(response_cls, "DescribeConfigsResult"),
        error_code=error.code,
        error_message=error.message,
        resource_type=resource.resource_type,  # type: ignore[attr-defined]
        resource_name=resource.resource_name,  # type: ignore[attr-defined]
        configs=configs,
    )


# --- AlterConfigs and IncrementalAlterConfigs --------------------------------------------------------


async def handle_alter_configs(ctx: RequestContext, request: object) -> object:
    """Legacy AlterConfigs: the given configs replace all of a resource's overrides."""
    return await _handle_alter(ctx, request, ALTER_CONFIGS, incremental=False)


async def handle_incremental_alter_configs(ctx: RequestContext, request: object) -> object:
    """IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT, all or nothing per resource."""
    return await _handle_alter(ctx, request, INCREMENTAL_ALTER_CONFIGS, incremental=True)


async def _handle_alter(ctx: RequestContext, request: object, api_key: int, *, incremental: bool) -> object:
    """Preprocess on this broker, then the resources left go to the active controller (here or forwarded)."""
    response_cls = response_type(api_key, ctx.api_version)
    resources = request.resources  # type: ignore[attr-defined]
    validate_only = bool(request.validate_only)  # type: ignore[attr-defined]
    forwarded_here = ctx.connection.listener == ctx.state.controller_listener_name
    errors = _duplicate_resources(resources)
    items: dict[int, list[tuple]] = {}
    for i, resource in enumerate(resources):
        if i in errors:
            continue
        if incremental:
            items[i] = [(c.name, c.value, c.config_operation) for c in resource.configs]
        else:
            items[i] = [(c.name, c.value) for c in resource.configs]
        error = _check_keys_and_values(items[i], null_allowed=incremental)
        if error is None:  # as the caller: on the controller listener, the principal an Envelope names
            error = _authorization_error(ctx, resource, AclOperation.ALTER_CONFIGS)
        if error is None and not forwarded_here:
            error = _preprocess(ctx, resource, items[i], incremental=incremental)
        if error is not None:
            errors[i] = error
    remaining = [i for i in range(len(resources)) if i not in errors]
    if remaining:
        rest = replace(request, resources=tuple(resources[i] for i in remaining))  # type: ignore[type-var]
        forwarded = await forward_unless_active(ctx, rest)
        if forwarded is not None:
            answers = {(r.resource_type, r.resource_name): r for r in forwarded.responses}
            for i in remaining:
                answer = answers.get((resources[i].resource_type, resources[i].resource_name))
                errors[i] = (
                    ApiError(ErrorCode.unknown_server_error)
                    if answer is None
                    else ApiError(answer.error_code, answer.error_message)
                )
        else:
            for i in remaining:
                errors[i] = await _alter_one(
                    ctx, resources[i], items[i], validate_only, incremental=incremental
                )
    return _altered(response_cls, resources, errors)


def _authorization_error(ctx: RequestContext, resource: object, operation: AclOperation) -> ApiError | None:
    """ConfigHelper/ConfigAdminManager's checks: a broker's (or its loggers') configs need `operation` on
    the cluster, a topic's on the topic; None when allowed (or for resources Kafka checks elsewhere)."""
    if ctx.state.authorizer is None:
        return None
    resource_type = resource.resource_type  # type: ignore[attr-defined]
    if resource_type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
        if not ctx.authorize(operation, AclResourceType.CLUSTER, CLUSTER_NAME):
            return ApiError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    elif resource_type == ResourceType.TOPIC:
        if not ctx.authorize(operation, AclResourceType.TOPIC, resource.resource_name):  # type: ignore[attr-defined]
            return ApiError(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
    return None


def _duplicate_resources(resources: Sequence[object]) -> dict[int, ApiError]:
    """ConfigAdminManager.preprocess: every copy of a repeated resource fails, the others go on."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)  # type: ignore[attr-defined]
    error = ApiError(ErrorCode.invalid_request, "Each resource must appear at most once.")
    return {
        i: error
        for i, r in enumerate(resources)
        if counts[(r.resource_type, r.resource_name)] > 1  # type: ignore[attr-defined]
    }


def _check_keys_and_values(items: Sequence[tuple], *, null_allowed: bool) -> ApiError | None:
    """Duplicate keys, then null values (allowed only for DELETE in the incremental API)."""
    names = [item[0] for item in items]
    if len(set(names)) != len(names):
        return ApiError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    nulls = [item[0] for item in items if item[1] is None and not (null_allowed and item[2] == OpType.DELETE)]
    if nulls:
        return ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
    return None


def _preprocess(
    ctx: RequestContext, resource: object, items: Sequence[tuple], *, incremental: bool
) -> ApiError | None:
    """ConfigAdminManager.preprocess's per-resource step on the broker that received the request:
    a broker resource must name this broker (or be the defaults) and its resulting dynamic configs
    must be valid; resource types the controller does not take are answered here."""
    resource_type = resource.resource_type  # type: ignore[attr-defined]
    name = resource.resource_name  # type: ignore[attr-defined]
    if resource_type == ResourceType.BROKER:
        return _preprocess_broker(ctx, name, items, incremental)
    if resource_type == ResourceType.TOPIC:
        return None
    if resource_type in (ResourceType.BROKER_LOGGER, ResourceType.CLIENT_METRICS, ResourceType.GROUP):
        if resource_type == ResourceType.BROKER_LOGGER and not incremental:
            return ApiError(ErrorCode.invalid_request, f"Unknown resource type {resource_type}")
        return _unsupported(resource_type)
    return ApiError(ErrorCode.invalid_request, f"Unknown resource type {resource_type}")


def _preprocess_broker(
    ctx: RequestContext, name: str, items: Sequence[tuple], incremental: bool
) -> ApiError | None:
    """validateResourceNameIsCurrentNodeId, then validateBrokerConfigChange over the resulting level."""
    config = ctx.state.config
    if name:
        broker_id = _java_int(name)
        if broker_id is None:
            return ApiError(ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}")
        if broker_id != config.node_id:
            return ApiError(
                ErrorCode.invalid_request,
                f"Unexpected broker id, expected {config.node_id}, but received {name}",
            )
    per_broker = bool(name)
    image = ctx.state.image
    own, defaults = _dynamic_levels(config, image)
    if incremental:
        props = dict(own if per_broker else defaults)
        for key, value, op in items:
            if op not in OpType._value2member_map_:
                return ApiError(ErrorCode.invalid_request, f"Unknown operations type {op}")
            error = _prepare_incremental(props, key, value, OpType(op))
            if error is not None:
                return error
    else:
        props = {key: value for key, value in items}
    invalid = validate_change(
        config,
        props,
        per_broker=per_broker,
        current=own if per_broker else defaults,
        other_level=defaults if per_broker else own,
    )
    return None if invalid is None else ApiError(ErrorCode.invalid_request, invalid.message)


def _prepare_incremental(props: dict[str, str], key: str, value: str | None, op: OpType) -> ApiError | None:
    """ConfigAdminManager.prepareIncrementalConfigs for one operation on a broker level's properties."""
    if op is OpType.SET:
        props[key] = value  # type: ignore[assignment]
        return None
    if op is OpType.DELETE:
        props.pop(key, None)
        return None
    spec = config_key(key)
    if spec is None:
        return ApiError(ErrorCode.invalid_config, f"Unknown config name: {key}")
    verb = "append" if op is OpType.APPEND else "subtract"
    if spec.type != "list":
        return ApiError(ErrorCode.invalid_config, f"Config value {verb} is not allowed for config key: {key}")
    old = props.get(key)
    if old is None and spec.default is not None:
        old = config_value_text(spec.default)
    parts = [part for part in (old or "").split(",") if part or op is OpType.SUBTRACT]
    given = (value or "").split(",")
    if op is OpType.APPEND:
        parts += [item for item in given if item not in parts]
    else:
        parts = [part for part in parts if part not in given]
    props[key] = ",".join(parts)
    return None


async def _alter_one(
    ctx: RequestContext, resource: object, items: Sequence[tuple], validate_only: bool, *, incremental: bool
) -> ApiError:
    """The controller's part for one resource (this node's controller is the active one)."""
    resource_type = resource.resource_type  # type: ignore[attr-defined]
    name = resource.resource_name  # type: ignore[attr-defined]
    controller = ctx.controller
    if resource_type in (ResourceType.TOPIC, ResourceType.BROKER):
        if incremental:
            error = _unknown_operation(items)
            if error is not None:
                return error
            ops = [ConfigOp(key, OpType(op), value) for key, value, op in items]
            alter = (
                controller.alter_topic_configs
                if resource_type == ResourceType.TOPIC
                else controller.alter_broker_configs
            )
            return await controller_error(alter(name, ops, validate_only=validate_only))
        replace_all = (
            controller.replace_topic_configs
            if resource_type == ResourceType.TOPIC
            else controller.replace_broker_configs
        )
        return await controller_error(replace_all(name, dict(items), validate_only=validate_only))
    if resource_type in (ResourceType.BROKER_LOGGER, ResourceType.CLIENT_METRICS, ResourceType.GROUP):
        if resource_type == ResourceType.BROKER_LOGGER and not incremental:
            return ApiError(ErrorCode.invalid_request, f"Unknown resource type {resource_type}")
        return _unsupported(resource_type)
    return ApiError(ErrorCode.invalid_request, f"Unknown resource type {resource_type}")


def _unknown_operation(ops: Sequence[tuple]) -> ApiError | None:
    for _name, _value, op in ops:
        if op not in OpType._value2member_map_:
            return ApiError(ErrorCode.invalid_request, f"Unknown operations type {op}")
    return None


def _altered(response_cls: type, resources: Sequence[object], errors: Mapping[int, ApiError]) -> object:
    entry_cls = nested_type(response_cls, "AlterConfigsResourceResponse")
    responses = tuple(
        build(
            entry_cls,
            error_code=errors[i].code,
            error_message=errors[i].message,
            resource_type=r.resource_type,  # type: ignore[attr-defined]
            resource_name=r.resource_name,  # type: ignore[attr-defined]
        )
        for i, r in enumerate(resources)
    )
    return build(response_cls, throttle_time=_NO_THROTTLE, responses=responses)


# ---------------------------------------------------------------------------------------------------

_DESCRIBABLE = frozenset(
    {
        ResourceType.TOPIC,
        ResourceType.BROKER,
        ResourceType.BROKER_LOGGER,
        ResourceType.CLIENT_METRICS,
        ResourceType.GROUP,
    }
)


def _java_int(text: str) -> int | None:
    """Integer.parseInt: an optional sign and ASCII digits only (no spaces, no underscores), 32 bits."""
    if not _INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _unsupported(resource_type: int) -> ApiError:
    kind = (
        ResourceType(resource_type).name
        if resource_type in ResourceType._value2member_map_
        else resource_type
    )
    return ApiError(ErrorCode.invalid_request, f"Unsupported resource type: {kind}")


APIS = [
    ApiSpec(DESCRIBE_CONFIGS, *kio_versions(DESCRIBE_CONFIGS), handle_describe_configs),  # type: ignore[misc]
    ApiSpec(ALTER_CONFIGS, *kio_versions(ALTER_CONFIGS), handle_alter_configs),  # type: ignore[misc]
    ApiSpec(
        INCREMENTAL_ALTER_CONFIGS, *kio_versions(INCREMENTAL_ALTER_CONFIGS), handle_incremental_alter_configs
    ),  # type: ignore[misc]
]
