"""Broker configuration with Kafka's property names, types and defaults.

One table (`BROKER_CONFIGS`) maps each broker property to (type, default, validator, doc); a second
(`TOPIC_CONFIGS`) does the same for topic-level properties, and `TOPIC_CONFIG_SYNONYMS` says which
broker property supplies a topic property's default, as Kafka's `ServerTopicConfigSynonyms` does.
Values come from Kafka's defaults, then kcli's embedded defaults (`KCLI_DEFAULTS`, what a single
node needs), then a `server.properties` file, then `key=value` overrides. Any mistake raises
`ConfigError` with one sentence; Kafka properties that kcli accepts but does not act on are
listed with `used=False`, so a stock `server.properties` still loads.
"""

from kcli.config.broker_config import BrokerConfig
from kcli.config.broker_configs import BROKER_CONFIGS, KCLI_DEFAULTS
from kcli.config.listeners import SECURITY_PROTOCOL_IDS, Listener, parse_listeners
from kcli.config.topics import (
    CLUSTER_METADATA_TOPIC,
    INTERNAL_TOPICS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    is_internal_topic,
    is_valid_topic_name,
    parse_topic_value,
)
from kcli.config.types import LONG_MAX, ConfigError, ConfigKey
from kcli.config.values import at_least, load_properties, parse_override, parse_properties, parse_value

__all__ = [
    "BROKER_CONFIGS",
    "CLUSTER_METADATA_TOPIC",
    "INTERNAL_TOPICS",
    "KCLI_DEFAULTS",
    "LONG_MAX",
    "SECURITY_PROTOCOL_IDS",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_SYNONYMS",
    "BrokerConfig",
    "ConfigError",
    "ConfigKey",
    "Listener",
    "at_least",
    "is_internal_topic",
    "is_valid_topic_name",
    "load_properties",
    "parse_listeners",
    "parse_override",
    "parse_properties",
    "parse_topic_value",
    "parse_value",
]
