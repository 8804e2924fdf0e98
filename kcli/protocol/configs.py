"""The config APIs' ids (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), shared by the broker's
handlers and controller and by `kcli configs`: one definition of Kafka's numbers."""

from __future__ import annotations

from enum import IntEnum


class ResourceType(IntEnum):
    """ConfigResource.Type ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @property
    def label(self) -> str:
        """The entity's name in kafka-configs.sh's sentences ("topic", "broker")."""
        return self.name.lower()


class OpType(IntEnum):
    """AlterConfigOp.OpType ids of IncrementalAlterConfigs."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(IntEnum):
    """DescribeConfigsResponse.ConfigSource ids."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8
