"""ConfigurationControlManager: topic and broker configs, validated as Kafka validates them, as ConfigRecords.

IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and the legacy AlterConfigs (the whole set
of overrides) both end in the same check (ControllerConfigurationValidator + LogConfig.validate over
the topic's resulting overrides) and the same records, one ConfigRecord per changed name. Topic
creation asks here too, for its initial overrides. Dynamic broker configs (BROKER resources, per
node id or "" for the cluster-wide defaults) are validated by the broker that received the request
(kcli.broker.dynamic_config); here only the resource is checked, and the records are written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcli.broker.dynamic_config import config_key
from kcli.broker.metadata.controller.controller_result import NONE, ApiError, ControllerResult, Record
from kcli.broker.metadata.controller.topic import topic_name_error
from kcli.broker.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, ClusterMetadataImage
from kcli.config import TOPIC_CONFIGS, BrokerConfig, ConfigError, parse_topic_value
from kcli.protocol.configs import OpType


@dataclass(frozen=True, slots=True)
class ConfigOp:
    name: str
    op: OpType
    value: str | None = None


class ConfigurationControlManager:
    """Validates topic config changes against the broker's defaults and turns them into ConfigRecords."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config

    def unclean_leader_election_enabled_for_topic(self, image: ClusterMetadataImage, topic: str) -> bool:
        """The topic's effective unclean.leader.election.enable (Kafka's resolveEffectiveTopicConfig):
        the topic's override, else this controller's dynamic broker config, else the cluster-wide
        dynamic default, else the static configuration."""
        name = "unclean.leader.election.enable"
        for value in self._dynamic_values(image, topic, name):
            return value.lower() == "true"
        return bool(self.config[name])

    def min_insync_replicas_for_topic(self, image: ClusterMetadataImage, topic: str) -> int:
        """The topic's effective min.insync.replicas, resolved as unclean.leader.election.enable is: the
        topic's override, this controller's dynamic broker config, the cluster-wide dynamic default,
        the static configuration (what decides the topic's eligible leader replicas)."""
        name = "min.insync.replicas"
        for value in self._dynamic_values(image, topic, name):
            try:
                return int(value)
            except ValueError:
                continue
        return int(self.config[name])  # type: ignore[call-overload]

    def _dynamic_values(self, image: ClusterMetadataImage, topic: str, name: str) -> Iterator[str]:
        """The set values of `name` above the static configuration, strongest first: the topic's
        override, this controller's dynamic broker config, the cluster-wide dynamic default."""
        for overrides in (
            image.topic_config(topic),
            image.broker_config(str(self.config.node_id)),
            image.broker_config(""),
        ):
            value = (overrides.get(name) or "").strip()
            if value:
                yield value

    def elr_safety_records(self, image: ClusterMetadataImage) -> list[Record]:
        """What turning ELR on needs (ActivationRecordsGenerator at bootstrap, maybeGenerateElrSafetyRecords
        on UpdateFeatures): a cluster-level min.insync.replicas, from this controller's static one,
        when the cluster has none."""
        if "min.insync.replicas" in image.broker_config(""):
            return []
        value = str(self.config["min.insync.replicas"])
        return [
            (
                "ConfigRecord",
                0,
                {
                    "resourceType": BROKER_RESOURCE,
                    "resourceName": "",
                    "name": "min.insync.replicas",
                    "value": value,
                },
            )
        ]

    def incremental_alter_topic_configs(
        self, image: ClusterMetadataImage, topic: str, ops: Sequence[ConfigOp]
    ) -> ControllerResult[ApiError]:
        """IncrementalAlterConfigs on a topic: SET, DELETE, APPEND, SUBTRACT, all or nothing."""
        names = [op.name for op in ops]
        if len(set(names)) != len(names):
            return _failed(ApiError(ErrorCode.invalid_request, "Error due to duplicate config keys"))
        nulls = [op.name for op in ops if op.op is not OpType.DELETE and op.value is None]
        if nulls:
            return _failed(
                ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
            )
        current = image.topic_config(topic)
        changes: dict[str, str | None] = {}
        for op in ops:
            old = current.get(op.name)
            if op.op is OpType.SET:
                new = op.value
            elif op.op is OpType.DELETE:
                new = None
            else:
                spec = TOPIC_CONFIGS.get(op.name)
                if spec is None or spec.type != "list":
                    return _failed(
                        ApiError(
                            ErrorCode.invalid_config,
                            f"Can't {op.op.name} to key {op.name} because its type is not LIST.",
                        )
                    )
                parts = _list_parts(old if old is not None else _default_text(op.name))
                for item in (op.value or "").split(","):
                    if op.op is OpType.APPEND and item not in parts:
                        parts.append(item)
                    elif op.op is OpType.SUBTRACT and item in parts:
                        parts.remove(item)
                new = ",".join(parts)
            if new != old:
                changes[op.name] = new
        return self._alter(image, topic, changes)

    def legacy_alter_topic_configs(
        self, image: ClusterMetadataImage, topic: str, configs: Mapping[str, str | None]
    ) -> ControllerResult[ApiError]:
        """Legacy AlterConfigs on a topic: `configs` becomes the whole set of overrides."""
        nulls = [name for name, value in configs.items() if value is None]
        if nulls:
            return _failed(
                ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
            )
        current = image.topic_config(topic)
        changes: dict[str, str | None] = {
            name: value for name, value in configs.items() if current.get(name) != value
        }
        changes.update({name: None for name in current if name not in configs})
        return self._alter(image, topic, changes)

    def incremental_alter_broker_configs(
        self,
        image: ClusterMetadataImage,
        name: str,
        ops: Sequence[ConfigOp],
        controller_ids: Iterable[int] = (),
    ) -> ControllerResult[ApiError]:
        """IncrementalAlterConfigs on a BROKER resource ("<id>" or "" for the cluster-wide defaults).

        The forwarding broker has validated the properties (ConfigAdminManager.preprocess); here, as
        in Kafka's controller, only the resource is checked. A record is written for every key even
        when its value does not change (KAFKA-14136: brokers reload on it)."""
        current = image.broker_config(name)
        changes: dict[str, str | None] = {}
        for op in ops:
            if op.op is OpType.SET:
                changes[op.name] = op.value
            elif op.op is OpType.DELETE:
                changes[op.name] = None
            else:
                spec = config_key(op.name)
                if spec is None or spec.type != "list":
                    return _failed(
                        ApiError(
                            ErrorCode.invalid_config,
                            f"Can't {op.op.name} to key {op.name} because its type is not LIST.",
                        )
                    )
                old = current.get(op.name)
                if old is None and spec.default is not None:
                    old = ",".join(str(item) for item in spec.default)  # type: ignore[attr-defined]
                parts = _list_parts(old)
                for item in (op.value or "").split(","):
                    if op.op is OpType.APPEND and item not in parts:
                        parts.append(item)
                    elif op.op is OpType.SUBTRACT and item in parts:
                        parts.remove(item)
                changes[op.name] = ",".join(parts)
        return self._alter_broker(image, name, changes, controller_ids)

    def legacy_alter_broker_configs(
        self,
        image: ClusterMetadataImage,
        name: str,
        configs: Mapping[str, str | None],
        controller_ids: Iterable[int] = (),
    ) -> ControllerResult[ApiError]:
        """Legacy AlterConfigs on a BROKER resource: `configs` becomes its whole set."""
        changes: dict[str, str | None] = dict(configs)
        changes.update({key: None for key in image.broker_config(name) if key not in configs})
        return self._alter_broker(image, name, changes, controller_ids)

    def _alter_broker(
        self,
        image: ClusterMetadataImage,
        name: str,
        changes: Mapping[str, str | None],
        controller_ids: Iterable[int],
    ) -> ControllerResult[ApiError]:
        """ControllerConfigurationValidator's broker name check, then the resource's existence."""
        if name:
            if not _JAVA_INT.fullmatch(name) or not -(2**31) <= int(name) < 2**31:
                return _failed(
                    ApiError(ErrorCode.invalid_request, "Unable to parse broker name as a base 10 number.")
                )
            node_id = int(name)
            if node_id < 0:
                return _failed(ApiError(ErrorCode.invalid_request, "Invalid negative broker ID."))
            if image.broker(node_id) is None and node_id not in set(controller_ids):
                return _failed(
                    ApiError(ErrorCode.broker_id_not_registered, f"No node with id {node_id} found.")
                )
        if image.elr_enabled and "min.insync.replicas" in changes:
            # ConfigurationControlManager.isDisallowedBrokerMinIsrTransition / ...ClusterMinIsrTransition
            if name:
                return _failed(
                    ApiError(
                        ErrorCode.invalid_config,
                        "Broker-level min.insync.replicas cannot be altered while ELR is enabled.",
                    )
                )
            if changes["min.insync.replicas"] is None:
                return _failed(
                    ApiError(
                        ErrorCode.invalid_config,
                        "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.",
                    )
                )
        records: list[Record] = [
            (
                "ConfigRecord",
                0,
                {"resourceType": BROKER_RESOURCE, "resourceName": name, "name": key, "value": value},
            )
            for key, value in changes.items()
        ]
        return ControllerResult(records + clear_elr_records(image, records), NONE)

    def validate_topic_configs(self, topic: str, configs: Mapping[str, str]) -> ApiError | None:
        """ControllerConfigurationValidator + LogConfig.validate over the topic's resulting overrides."""
        if topic == "":
            return ApiError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
        name_error = topic_name_error(topic)
        if name_error is not None:
            return name_error
        parsed: dict[str, object] = {}
        for name, value in configs.items():
            if name not in TOPIC_CONFIGS:
                return ApiError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
            try:
                parsed[name] = parse_topic_value(name, value)
            except ConfigError as exc:
                return ApiError(ErrorCode.invalid_config, _kafka_sentence(str(exc)))
        effective = self.config.topic_config({})
        effective.update(parsed)
        min_lag, max_lag = effective["min.compaction.lag.ms"], effective["max.compaction.lag.ms"]
        if min_lag > max_lag:  # type: ignore[operator]
            return ApiError(
                ErrorCode.invalid_config,
                f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})",
            )
        if effective["remote.storage.enable"]:
            return ApiError(
                ErrorCode.invalid_config,
                "Tiered Storage functionality is disabled in the broker. "
                "Topic cannot be configured with remote log storage.",
            )
        return None

    def topic_config_records(self, topic: str, changes: Mapping[str, str | None]) -> list[Record]:
        """One ConfigRecord per name (a None value deletes the override)."""
        return [
            (
                "ConfigRecord",
                0,
                {"resourceType": TOPIC_RESOURCE, "resourceName": topic, "name": name, "value": value},
            )
            for name, value in changes.items()
        ]

    def _alter(
        self, image: ClusterMetadataImage, topic: str, changes: Mapping[str, str | None]
    ) -> ControllerResult[ApiError]:
        """ConfigurationControlManager.validateAlterConfig, then the ConfigRecords as one batch."""
        resulting = image.topic_config(topic)
        for name, value in changes.items():
            if value is None:
                resulting.pop(name, None)
            else:
                resulting[name] = value
        error = self.validate_topic_configs(topic, resulting)
        if error is not None:
            return _failed(error)
        if image.topic_id(topic) is None:
            return _failed(
                ApiError(ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist.")
            )
        records = self.topic_config_records(topic, changes)
        return ControllerResult(records + clear_elr_records(image, records), NONE)


def clear_elr_records(image: ClusterMetadataImage, records: Sequence[Record]) -> list[Record]:
    """ConfigurationControlManager.createClearElrRecordsAsNeeded: with ELR on, a change of
    min.insync.replicas clears the ELR it was computed against, of the topic (a topic config) or of
    every topic (a broker config)."""
    if not image.elr_enabled:
        return []
    out: list[Record] = []
    for name, _, data in records:
        if name == "ConfigRecord" and data["name"] == "min.insync.replicas":
            topic = data["resourceName"] if data["resourceType"] == TOPIC_RESOURCE else ""
            out.append(("ClearElrRecord", 0, {"topicName": topic}))
    return out


_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def _failed(error: ApiError) -> ControllerResult[ApiError]:
    return ControllerResult([], error)


def _default_text(name: str) -> str | None:
    """A LIST config's schema default as text (what APPEND/SUBTRACT start from when unset)."""
    default = TOPIC_CONFIGS[name].default
    return None if default is None else ",".join(str(item) for item in default)  # type: ignore[attr-defined]


def _list_parts(value: str | None) -> list[str]:
    return [part for part in (value or "").split(",") if part]


def _kafka_sentence(message: str) -> str:
    """kcli's config sentence in ConfigException's shape: capitalised, no full stop."""
    message = message.rstrip(".")
    return message[:1].upper() + message[1:]
