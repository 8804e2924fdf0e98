"""DynamicConfigPublisher: dynamic configs from each metadata image to the parts that act on them.

As Kafka's DynamicConfigPublisher with its BrokerConfigHandler and TopicConfigHandler, for this node:
- the BROKER resources named by this node's id and "" (the cluster-wide defaults) are folded over the
  static properties (dynamic_config.py; the log dir mover reads its throttle from them), the
  replication quotas get their bounds, every log takes the
  new broker-wide log defaults under its topic overrides, and the log cleaner its settings;
- each topic's leader/follower.replication.throttled.replicas names the partitions the quotas throttle.
A controller-only node installs one too, for its own properties. On a broker it is installed before the
node's own publisher, so logs created for an image already see the broker
defaults that image sets; `initialize` does the same for the image the node starts from (before the
logs are loaded, as Kafka's first publish comes before the log manager's start-up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kcli.broker.dynamic_config import (
    FOLLOWER_REPLICATION_THROTTLED_RATE,
    LEADER_REPLICATION_THROTTLED_RATE,
    LOG_CLEANER_CONFIGS,
    LOG_CONFIGS,
    changed_names,
    config_key,
    effective_values,
    persistent_props,
    quota_bound,
)
from kcli.broker.dynamic_keystore import keystore_key
from kcli.broker.log.cleaner import CleanerConfig
from kcli.broker.log.config import LogConfig
from kcli.broker.log.manager import LogManager
from kcli.broker.metadata.image import ClusterMetadataImage, TopicChanges
from kcli.broker.replication.manager import ReplicaManager
from kcli.broker.replication.quota import ReplicationQuotaManager, throttled_partitions
from kcli.config import BrokerConfig

log = logging.getLogger("kcli.broker")

LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"


class DynamicConfigPublisher:
    name = "DynamicConfigPublisher"

    def __init__(
        self, config: BrokerConfig, logs: LogManager | None = None, replicas: ReplicaManager | None = None
    ) -> None:
        """`logs` and `replicas` are None on a controller-only node: only its properties change."""
        self.config = config
        self.logs = logs
        self.replicas = replicas
        self._values: dict[str, object] = {}
        self._raw: tuple[dict[str, str], dict[str, str]] | None = None
        self._keystores: dict[str, str] = {}
        self._reload_keystores: list[Callable[[Mapping[str, str]], None]] = []

    def on_keystore_change(self, reload: Callable[[Mapping[str, str]], None]) -> None:
        """`reload(dynamic keystore configs)` now and whenever this broker's own ones change (Kafka's
        reconfigurables): the network layer's TLS listeners and the broker's own clients take the
        renewed keystore for their new connections."""
        self._reload_keystores.append(reload)
        if self._keystores:
            reload(self._keystores)

    def initialize(self, image: ClusterMetadataImage) -> None:
        """Apply what `image` holds: broker configs first (the logs about to load read them), every topic's lists."""
        self._apply_broker_configs(image, reconfigure_logs=False)
        if self.replicas is None:
            return
        for topic in image.topic_ids:
            self._apply_throttled_replicas(image, topic)

    def on_metadata_update(
        self, changes: TopicChanges, old: ClusterMetadataImage, new: ClusterMetadataImage
    ) -> None:
        self._apply_broker_configs(new, reconfigure_logs=True)
        if self.replicas is None:
            return
        for topic, _topic_id, _partitions in changes.deleted:
            if topic not in new.topic_ids:
                self.replicas.leader_quota.remove_throttle(topic)
                self.replicas.follower_quota.remove_throttle(topic)
        for topic in {*changes.reconfigured, *(topic for topic, _, _ in changes.created)}:
            self._apply_throttled_replicas(new, topic)

    def _apply_broker_configs(self, image: ClusterMetadataImage, *, reconfigure_logs: bool) -> None:
        """BrokerConfigHandler.processConfigChanges for this node's id and the defaults, when they changed."""
        raw = (image.broker_config(str(self.config.node_id)), image.broker_config(""))
        if raw == self._raw:
            return
        self._raw = raw
        per_broker = persistent_props(raw[0], per_broker=True)
        defaults = persistent_props(raw[1], per_broker=False)
        for level, given, kept in (("node", raw[0], per_broker), ("cluster", raw[1], defaults)):
            ignored = sorted(given.keys() - kept.keys())
            if ignored:
                log.error("dynamic %s configs that cannot apply are ignored: %s", level, ", ".join(ignored))
        keystores = {name: value for name, value in per_broker.items() if keystore_key(name) is not None}
        if keystores != self._keystores:
            self._keystores = keystores
            for reload in self._reload_keystores:
                reload(keystores)
        values = effective_values(per_broker, defaults)
        changed = changed_names(self._values, values)
        self._values = values
        self.config.set_dynamic(values)
        if changed:
            log.info(
                "dynamic broker configs of node %d now: %s (cluster-wide: %s)",
                self.config.node_id,
                _loggable(per_broker),
                _loggable(defaults),
            )
        if self.replicas is None or self.logs is None:
            return
        quotas: tuple[tuple[ReplicationQuotaManager, str], ...] = (
            (self.replicas.leader_quota, LEADER_REPLICATION_THROTTLED_RATE),
            (self.replicas.follower_quota, FOLLOWER_REPLICATION_THROTTLED_RATE),
        )
        for quota, name in quotas:
            quota.update_quota(quota_bound(per_broker, defaults, name))
        if changed & LOG_CLEANER_CONFIGS:
            self.logs.cleaner.reconfigure(CleanerConfig.from_broker(self.config))
        if changed & LOG_CONFIGS:
            # DynamicLogConfig.reconfigure: new broker-wide defaults under each topic's own overrides
            self.logs.default_config = LogConfig.from_broker(self.config)
            if reconfigure_logs:
                by_topic: dict[str, LogConfig] = {}
                for each in self.logs.logs():
                    if each.topic not in by_topic:
                        by_topic[each.topic] = LogConfig.from_broker(
                            self.config, image.topic_config(each.topic)
                        )
                    each.update_config(by_topic[each.topic])

    def _apply_throttled_replicas(self, image: ClusterMetadataImage, topic: str) -> None:
        """TopicConfigHandler.updateThrottledList for both lists of one topic."""
        assert self.replicas is not None
        overrides = image.topic_config(topic)
        for name, quota in (
            (LEADER_THROTTLED_REPLICAS, self.replicas.leader_quota),
            (FOLLOWER_THROTTLED_REPLICAS, self.replicas.follower_quota),
        ):
            value = overrides.get(name, "").strip()
            if value:
                quota.mark_throttled(topic, throttled_partitions(value.split(","), self.config.node_id))
            else:
                quota.remove_throttle(topic)


def _loggable(props: dict[str, str]) -> str:
    """Values of properties of unknown type hidden, as Kafka's KafkaConfig.loggableValue hides them."""
    shown = []
    for name, value in sorted(props.items()):
        spec = config_key(name)
        shown.append(f"{name}={value if spec is not None and spec.type != 'password' else '[hidden]'}")
    return ", ".join(shown) or "none"
