"""Topic and broker configs as an operator sees them: what is set where, and changing it.

DescribeConfigs and IncrementalAlterConfigs, the admin APIs Kafka's `kafka-configs.sh` (ConfigCommand)
uses, so this works against Apache Kafka as well as kcli's broker. A topic's configs are asked of any
broker, a broker's of that broker; the cluster-wide broker defaults are the broker resource named "".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import KafkaClient
from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.protocol.configs import OpType, ResourceType
from kcli.protocol.messages import build, nested_type

DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
BROKER_DEFAULTS = ""
"""The broker resource name of the dynamic defaults shared by every broker (`--entity-default`)."""


class ConfigError(KcliError):
    """A config the cluster refused to describe or change; the sentence carries the broker's reason."""


# DescribeConfigsResponse.ConfigSource id -> the name the Java admin client (and so kafka-configs.sh) prints.
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: str

    def __str__(self) -> str:
        return f"{self.source}:{self.name}={_java(self.value)}"


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    """None for a sensitive value (the broker never sends those)."""
    source: str
    is_sensitive: bool
    read_only: bool
    synonyms: tuple[ConfigSynonym, ...] = ()

    @property
    def is_default(self) -> bool:
        """Kafka's ConfigEntry.isDefault: the value is the built-in default, set nowhere."""
        return self.source == "DEFAULT_CONFIG"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "sensitive": self.is_sensitive,
            "read_only": self.read_only,
            "synonyms": [{"name": s.name, "value": s.value, "source": s.source} for s in self.synonyms],
        }


@dataclass(frozen=True, slots=True)
class ResourceConfigs:
    """Every config of one topic or broker, sorted by name."""

    resource_type: ResourceType
    name: str
    entries: tuple[ConfigEntry, ...]

    def dynamic(self) -> tuple[ConfigEntry, ...]:
        """What kafka-configs.sh --describe shows without --all: the entries set on this very resource."""
        source = _DYNAMIC_SOURCE[(self.resource_type, self.name == BROKER_DEFAULTS)]
        return tuple(e for e in self.entries if e.source == source)

    def to_json(self, entries: Iterable[ConfigEntry] | None = None) -> dict[str, Any]:
        chosen = self.entries if entries is None else entries
        return {
            "entity_type": self.resource_type.label,
            "entity_name": self.name,
            "configs": [e.to_json() for e in chosen],
        }


_DYNAMIC_SOURCE = {
    (ResourceType.TOPIC, False): "DYNAMIC_TOPIC_CONFIG",
    (ResourceType.BROKER, False): "DYNAMIC_BROKER_CONFIG",
    (ResourceType.BROKER, True): "DYNAMIC_DEFAULT_BROKER_CONFIG",
}


# --- describe --------------------------------------------------------------------------------------


async def describe_configs(
    cluster: Cluster,
    resources: Iterable[tuple[ResourceType, str]],
    *,
    include_synonyms: bool = True,
    broker_order: bool = False,
) -> list[ResourceConfigs]:
    """The configs of each resource, in the order given, each resource's entries sorted by name, or with
    `broker_order` in the order of the broker's answer (kafka-topics.sh prints them so); a refused resource
    raises ConfigError.

    One request per answering broker, so describing every topic of a cluster is one round trip.
    """
    wanted = list(dict.fromkeys(resources))
    by_broker: dict[int, tuple[KafkaClient, list[tuple[ResourceType, str]]]] = {}
    for resource_type, name in wanted:
        client = await _answering_broker(cluster, resource_type, name)
        by_broker.setdefault(id(client), (client, []))[1].append((resource_type, name))
    found: dict[tuple[ResourceType, str], ResourceConfigs] = {}
    for client, asked in by_broker.values():
        cls = client.request_type(DESCRIBE_CONFIGS)
        resource_cls = nested_type(cls, "DescribeConfigsResource")
        request = build(
            cls,
            resources=tuple(
                build(resource_cls, resource_type=int(t), resource_name=n, configuration_keys=None)
                for t, n in asked
            ),
            include_synonyms=include_synonyms,
            include_documentation=False,
        )
        response = await client.send(request)
        for result in response.results:
            key = (ResourceType(result.resource_type), result.resource_name)
            if result.error_code != ErrorCode.none:
                raise ConfigError(_refusal("describe the configs of", *key, result))
            entries = _entries(result.configs)
            found[key] = ResourceConfigs(*key, entries if broker_order else tuple(sorted(entries, key=_name)))
    return [found[key] for key in wanted]


def _entries(configs: Iterable[Any]) -> tuple[ConfigEntry, ...]:
    entries = (
        ConfigEntry(
            c.name,
            c.value,
            SOURCE_NAMES.get(c.config_source, "UNKNOWN"),
            c.is_sensitive,
            c.read_only,
            tuple(
                ConfigSynonym(s.name, s.value, SOURCE_NAMES.get(s.source, "UNKNOWN"))
                for s in getattr(c, "synonyms", ())
            ),
        )
        for c in configs
    )
    return tuple(entries)


def _name(entry: ConfigEntry) -> str:
    return entry.name


async def entity_names(cluster: Cluster, resource_type: ResourceType) -> list[str]:
    """Every topic (internal ones too), or every broker's id (every controller's, from controllers) and
    then the broker defaults, as kafka-configs.sh describes them when no entity name is given."""
    if resource_type is ResourceType.TOPIC:
        response = await cluster.metadata_response(None)
        return sorted(t.name for t in response.topics if t.error_code == ErrorCode.none)
    return [str(node_id) for node_id in await cluster.node_ids()] + [BROKER_DEFAULTS]


# --- alter -----------------------------------------------------------------------------------------


async def alter_configs(
    cluster: Cluster,
    resource_type: ResourceType,
    name: str,
    *,
    set_configs: dict[str, str] | None = None,
    delete_configs: Iterable[str] = (),
    validate_only: bool = False,
) -> None:
    """IncrementalAlterConfigs: SET each of `set_configs`, DELETE (back to the default) each of `delete_configs`.

    As kafka-configs.sh does, a config to delete must be set on the resource now, else nothing is sent.
    """
    to_set = dict(set_configs or {})
    to_delete = list(dict.fromkeys(delete_configs))
    if not to_set and not to_delete:
        raise ConfigError("give at least one config to add or delete.")
    if to_delete:
        (current,) = await describe_configs(cluster, [(resource_type, name)], include_synonyms=False)
        present = {e.name for e in current.dynamic()}
        absent = [k for k in to_delete if k not in present]
        if absent:
            raise ConfigError(
                f"cannot delete {', '.join(absent)}: not set on {_resource(resource_type, name)}."
            )
    # From controllers every change goes to the active one, which alone commits it.
    if cluster.controllers:
        client = await cluster.active_controller()
    else:
        client = await _answering_broker(cluster, resource_type, name)
    cls = client.request_type(INCREMENTAL_ALTER_CONFIGS)
    config_cls = nested_type(cls, "AlterableConfig")
    ops = [config_cls(name=k, config_operation=int(OpType.SET), value=v) for k, v in to_set.items()]
    ops += [config_cls(name=k, config_operation=int(OpType.DELETE), value=None) for k in to_delete]
    resource = nested_type(cls, "AlterConfigsResource")(
        resource_type=int(resource_type), resource_name=name, configs=tuple(ops)
    )
    response = await client.send(cls(resources=(resource,), validate_only=validate_only))
    result = response.responses[0]
    if result.error_code != ErrorCode.none:
        raise ConfigError(_refusal("alter the configs of", resource_type, name, result))


# --- parsing ---------------------------------------------------------------------------------------

_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_CONFIG_KEY = re.compile(r"[a-zA-Z0-9._-]*")


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's --add-config: 'k1=v1,k2=[v1,v2],k3=' (brackets keep commas inside a value)."""
    configs: dict[str, str] = {}
    for pair in re.split("," + _OUTSIDE_BRACKETS, text):
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair)
        if len(parts) != 2:
            raise ConfigError(f"{pair!r} in --add-config is not key=value.")
        key = parts[0].strip()
        if not key or not _CONFIG_KEY.fullmatch(key):
            raise ConfigError(f"{key!r} is not a config name.")
        configs[key] = re.sub(r"\[?\]?", "", parts[1]).strip()
    return configs


def parse_key_values(items: Iterable[str], option: str) -> dict[str, str]:
    """Repeated KEY=VALUE options (kafka-topics.sh's --config)."""
    configs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r} is not KEY=VALUE.")
        configs[key.strip()] = value.strip()
    return configs


# ---------------------------------------------------------------------------------------------------


async def _answering_broker(cluster: Cluster, resource_type: ResourceType, name: str) -> KafkaClient:
    """A broker resource is answered by that broker (that controller, from controllers); topics and the
    broker defaults by any."""
    if resource_type is ResourceType.BROKER and name != BROKER_DEFAULTS:
        return await cluster.node(broker_id(name))
    return cluster.bootstrap


def broker_id(name: str) -> int:
    try:
        return int(name)
    except ValueError:
        raise ConfigError(f"the entity name of a broker must be its integer id, not {name!r}.") from None


def _resource(resource_type: ResourceType, name: str) -> str:
    if resource_type is ResourceType.BROKER and name == BROKER_DEFAULTS:
        return "the broker defaults"
    if resource_type is ResourceType.BROKER:
        return f"broker {name}"
    return f"topic {name!r}"


def _refusal(what: str, resource_type: ResourceType, name: str, result: Any) -> str:
    """One sentence: Kafka's "does not exist" in plain words, otherwise the broker's own message."""
    code = ErrorCode(result.error_code)
    if code == ErrorCode.unknown_topic_or_partition and resource_type is ResourceType.TOPIC:
        return f"topic {name!r} does not exist."
    reason = result.error_message or code.name.upper()
    return f"cannot {what} {_resource(resource_type, name)}: {reason.rstrip('.')}."


def _java(value: str | None) -> str:
    """How Java string concatenation shows a value: null for none."""
    return "null" if value is None else value
