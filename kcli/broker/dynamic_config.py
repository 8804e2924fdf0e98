"""Dynamic broker configs (KIP-226), as Kafka's DynamicBrokerConfig keeps them in KRaft mode.

A broker's properties may be changed without a restart at two levels, both stored as ConfigRecords
(resource type BROKER) in the metadata log: per broker (resource name "<node id>") and cluster-wide
(resource name ""). Precedence, highest first: the broker's own dynamic value, the cluster-wide
dynamic default, the static property (file, flags), Kafka's default. Every node folds the two levels
over its static properties (`BrokerConfig.set_dynamic`) whenever the metadata image changes them.

Which properties are dynamic: the subset of Kafka's (DynamicBrokerConfig.AllDynamicConfigs and
DynamicConfig.Broker's quota properties) that kcli applies live:
- the replication throttles `leader.replication.throttled.rate`, `follower.replication.throttled.rate`
  (only settable dynamically, as in Kafka) and `replica.alter.log.dirs.io.max.bytes.per.second`;
- the broker-wide log defaults that topic configs fall back to (DynamicLogConfig: every broker synonym
  of a topic config kcli acts on); every log takes the new defaults at once;
- the log cleaner's settings (LogCleaner.ReconfigurableConfigs);
- the connection limits (DynamicConnectionQuota: max.connections, the per-IP count and its overrides,
  the creation rate), which the next connection meets.
- per broker, an SSL listener's keystore (`kcli.broker.dynamic_keystore`).
Any other broker property is refused with Kafka's sentence for a property that cannot be updated
dynamically; a name Kafka does not know is a custom property, accepted and stored as Kafka does
(KafkaConfig keeps unknown originals), and acted on by nobody.

The broker that receives an alter request validates broker resources before it goes to the
controller (ConfigAdminManager.preprocess): names, types and ranges, then the resulting properties
as a whole (what Kafka finds building the new KafkaConfig and asking each reconfigurable).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kcli.broker.dynamic_keystore import RECONFIGURABLE_CONFIGS, check_keystores, keystore_key
from kcli.config import (
    BROKER_CONFIGS,
    KCLI_DEFAULTS,
    LONG_MAX,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigKey,
    at_least,
    parse_value,
)

LEADER_REPLICATION_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICATION_THROTTLED_RATE = "follower.replication.throttled.rate"
REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND = "replica.alter.log.dirs.io.max.bytes.per.second"
QUOTA_BYTES_PER_SECOND_DEFAULT = LONG_MAX
"""QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT: no throttle."""

QUOTA_CONFIGS: dict[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey(
            LEADER_REPLICATION_THROTTLED_RATE,
            "long",
            QUOTA_BYTES_PER_SECOND_DEFAULT,
            at_least(0),
            "Upper bound (bytes/s) on replication traffic this broker sends as leader of the replicas "
            "listed in leader.replication.throttled.replicas (each topic). Only set dynamically.",
        ),
        ConfigKey(
            FOLLOWER_REPLICATION_THROTTLED_RATE,
            "long",
            QUOTA_BYTES_PER_SECOND_DEFAULT,
            at_least(0),
            "Upper bound (bytes/s) on replication traffic this broker fetches as follower of the replicas "
            "listed in follower.replication.throttled.replicas (each topic). Only set dynamically.",
        ),
    )
}
"""DynamicConfig.Broker's own properties (QuotaConfig.brokerQuotaConfigs), not in the static table but for
replica.alter.log.dirs.io.max.bytes.per.second, which kcli also takes statically."""

LOG_CLEANER_CONFIGS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
    }
)
"""LogCleaner.ReconfigurableConfigs."""

LOG_CONFIGS = frozenset(
    synonyms[0].name
    for topic_name, synonyms in TOPIC_CONFIG_SYNONYMS.items()
    if TOPIC_CONFIGS[topic_name].used and BROKER_CONFIGS[synonyms[0].name].used
)
"""DynamicLogConfig.ReconfigurableConfigs: the first broker synonym of each topic config (log.retention.ms,
not log.retention.hours), less what kcli does not act on (message format, down-conversion)."""

CONNECTION_QUOTA_CONFIGS = frozenset(
    {
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
    }
)
"""DynamicConnectionQuota.ReconfigurableConfigs: ConnectionQuotas reads them on every new connection."""

DYNAMIC_CONFIGS = (
    frozenset(QUOTA_CONFIGS)
    | {REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND}
    | LOG_CLEANER_CONFIGS
    | LOG_CONFIGS
    | CONNECTION_QUOTA_CONFIGS
)
"""The broker properties kcli updates live."""

PER_BROKER_CONFIGS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        # SslConfigs.RECONFIGURABLE_CONFIGS (Kafka's DynamicSecurityConfigs): a keystore or truststore update
        *RECONFIGURABLE_CONFIGS,
    }
)
"""Kafka's dynamic properties that only a broker's own level may set (DynamicBrokerConfig.PerBrokerConfigs:
its listener and SSL/SASL ones; these are the ones kcli knows). kcli cannot change them live, so per
broker they are refused as static, all but the keystore and truststore (`kcli.broker.dynamic_keystore`); at the cluster-wide
level Kafka's own refusal comes first."""


@dataclass(frozen=True, slots=True)
class Invalid:
    """Why a broker config change is refused: Kafka answers INVALID_REQUEST with this sentence
    (ConfigAdminManager turns every validation failure into InvalidRequestException, KAFKA-13609)."""

    message: str


def config_key(name: str) -> ConfigKey | None:
    """The schema of a broker property that may be set dynamically or statically; None if unknown."""
    return BROKER_CONFIGS.get(name) or QUOTA_CONFIGS.get(name)


def is_read_only(name: str) -> bool:
    """DescribeConfigs' read_only: whether the property cannot be changed without a restart."""
    return name not in DYNAMIC_CONFIGS


def synonyms_of(name: str) -> tuple[str, ...]:
    """DynamicBrokerConfig.brokerConfigSynonyms: the properties standing for one setting, most specific first."""
    for group in _SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def validate_change(
    config: BrokerConfig,
    props: Mapping[str, str],
    *,
    per_broker: bool,
    current: Mapping[str, str],
    other_level: Mapping[str, str],
) -> Invalid | None:
    """DynamicBrokerConfig.validate: `props` would become a level's whole set of dynamic properties
    (per broker or the cluster-wide defaults) in place of `current`; `other_level` is the other
    level's current set."""
    non_dynamic = [
        name
        for name in props
        if name in BROKER_CONFIGS
        and name not in DYNAMIC_CONFIGS
        and (per_broker or name not in PER_BROKER_CONFIGS)  # dynamic in Kafka: refused below
        and not (
            per_broker and name in RECONFIGURABLE_CONFIGS
        )  # a renewed keystore or truststore (dynamic_keystore)
    ]
    if non_dynamic:
        return Invalid(f"Cannot update these configs dynamically: {_scala_set(non_dynamic)}")
    for name, value in props.items():
        invalid = _type_error(name, value)
        if invalid is not None:
            return invalid
    if not per_broker:
        per_broker_only = [
            name for name in props if name in PER_BROKER_CONFIGS or keystore_key(name) is not None
        ]
        if per_broker_only:
            return Invalid(
                "Cannot update these configs at default cluster level, broker id must be specified: "
                f"{_scala_set(per_broker_only)}"
            )
    if per_broker:
        refused = check_keystores(config, props, current)
        if refused is not None:
            return Invalid(refused)
    defaults, own = (other_level, props) if per_broker else (props, other_level)
    trial = copy.copy(config)
    trial.set_dynamic(effective_values(own, defaults))
    if trial.log_retention_ms == 0:  # KafkaConfig's own requirement, met when the new config is built
        return Invalid(
            "requirement failed: log.retention.ms must be unlimited (-1) or, equal or greater than 1."
        )
    threads, current = int(trial["log.cleaner.threads"]), int(config["log.cleaner.threads"])  # type: ignore[call-overload]
    if threads != current and (threads < 1 or threads < current // 2 or threads > current * 2):
        # LogCleaner.validateReconfiguration; DynamicBrokerConfig reports only its own wrapper's sentence
        return Invalid("Invalid dynamic configuration")
    return None


def persistent_props(raw: Mapping[str, str], *, per_broker: bool) -> dict[str, str]:
    """DynamicBrokerConfig.fromPersistentProps: a level's records less what cannot apply (a static
    property, a value of the wrong type, written by another tool or an older version): those are
    ignored, as Kafka ignores them, with the rest still applied."""
    kept = {}
    for name, value in raw.items():
        if (
            name in BROKER_CONFIGS
            and name not in DYNAMIC_CONFIGS
            and not (per_broker and name in RECONFIGURABLE_CONFIGS)
        ):
            continue
        if not per_broker and name in PER_BROKER_CONFIGS:
            continue
        if _type_error(name, value) is not None:
            continue
        kept[name] = value
    return kept


def effective_values(per_broker: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, object]:
    """The parsed values the two levels put over the static properties (DynamicBrokerConfig.overrideProps).

    Setting one of a group of synonyms hides the others of the group set below it (a dynamic
    log.retention.hours wins over a static log.retention.ms), so those fall back to their defaults.
    Custom properties have no parsed value and are left out.
    """
    values: dict[str, object] = {}
    for level in (defaults, per_broker):
        for name in level:
            for synonym in synonyms_of(name):
                if synonym not in level and synonym in BROKER_CONFIGS:
                    values[synonym] = KCLI_DEFAULTS.get(synonym, BROKER_CONFIGS[synonym].default)
        for name, raw in level.items():
            spec = config_key(name)
            if spec is not None:
                values[name] = _parse(spec, raw)
    return values


def quota_bound(per_broker: Mapping[str, str], defaults: Mapping[str, str], name: str) -> int:
    """BrokerConfigHandler's getOrDefault: the broker's value, else the cluster default, else no limit."""
    for level in (per_broker, defaults):
        if name in level:
            return int(level[name].strip())
    return QUOTA_BYTES_PER_SECOND_DEFAULT


def changed_names(before: Mapping[str, object], after: Mapping[str, object]) -> set[str]:
    """The properties whose effective dynamic value differs between two `effective_values`."""
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


# ---------------------------------------------------------------------------------------------------

_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)

_JAVA_TYPE = {"int": "INT", "long": "LONG", "short": "SHORT", "double": "DOUBLE"}


def _parse(spec: ConfigKey, raw: str) -> object:
    table = BROKER_CONFIGS if spec.name in BROKER_CONFIGS else QUOTA_CONFIGS
    return parse_value(table, spec.name, raw)


def _type_error(name: str, value: str) -> Invalid | None:
    """ConfigDef.parse's ConfigException for one value, in Kafka's words; None when it parses."""
    spec = config_key(name)
    if spec is None:
        return None  # a custom property: Kafka's broker config def allows them
    try:
        _parse(spec, value)
    except ConfigError as exc:
        reason = str(exc).rstrip(".").rsplit(": ", 1)[-1]
        if spec.type in _JAVA_TYPE and reason.startswith(("expected", "out of range")):
            reason = f"Not a number of type {_JAVA_TYPE[spec.type]}"
        elif spec.type == "boolean":
            reason = "Expected value to be either true or false"
        else:
            reason = reason[:1].upper() + reason[1:]
        return Invalid(f"Invalid value {value} for configuration {name}: {reason}")
    return None


def _scala_set(names: Iterable[str]) -> str:
    """A Scala Set's toString, as Kafka's messages print the names."""
    return f"Set({', '.join(names)})"
