"""The metadata image: an immutable fold of KRaft metadata records (Kafka's `MetadataImage`).

`ClusterMetadataImage` is what request handlers read, through the views `BrokerInfo`, `TopicInfo` and
`PartitionInfo` among others; it never changes. A `MetadataDelta` replays records on top of an image
and yields the next one, copying only what the records touch, so replaying a whole log is one pass
and a controller operation costs a copy of the maps it changes. The replay rules are Kafka's:
a PartitionChangeRecord replaces the fields it carries, bumps the leader epoch when it names a
leader (even the same one) and always bumps the partition epoch; RemoveTopicRecord also drops the
topic's configs; a ConfigRecord with a null value deletes the key; a UserScramCredentialRecord
replaces the user's credential for its mechanism and RemoveUserScramCredentialRecord drops it; a
ClientQuotaRecord sets or removes one key of a quota entity, and an entity left with no key is gone;
an AccessControlEntryRecord adds an ACL under its id and RemoveAccessControlEntryRecord drops it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from kio.schema.errors import ErrorCode

from formats.internal import MetadataRecord
from kcli.config import TOPIC_CONFIG_SYNONYMS, TOPIC_CONFIGS, BrokerConfig, is_internal_topic
from kcli.features import METADATA_VERSION as METADATA_VERSION
from kcli.features import MV_3_9_IV0 as MV_3_9_IV0
from kcli.features import is_elr_enabled
from kcli.protocol.configs import ResourceType
from kcli.quota_config import QuotaEntity, quota_entity
from kcli.security.acl import StandardAcl
from kcli.security.scram import ScramCredential
from kcli.security.scram_credentials import MECHANISM_NAMES

TOPIC_RESOURCE = ResourceType.TOPIC
BROKER_RESOURCE = ResourceType.BROKER

NO_LEADER = -1
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.Leader default

PRODUCER_ID_BLOCK_SIZE = 1000  # ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as clients must reach it (its advertised listener)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    is_fenced: bool = False


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: tuple[int, ...]
    isr_nodes: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    is_internal: bool = False


# DirectoryId's reserved values: a replica whose directory is not known yet, or is offline.
DIRECTORY_MIGRATING = uuid.UUID(int=0)
DIRECTORY_UNASSIGNED = uuid.UUID(int=1)
DIRECTORY_LOST = uuid.UUID(int=2)

# DescribeConfigs ConfigSource ids.
TOPIC_CONFIG_SOURCE = 1
DYNAMIC_BROKER_CONFIG_SOURCE = 2
DYNAMIC_DEFAULT_BROKER_CONFIG_SOURCE = 3
STATIC_BROKER_CONFIG_SOURCE = 4
DEFAULT_CONFIG_SOURCE = 5


class MetadataReplayError(Exception):
    """A record that cannot apply to the image (Kafka's MetadataLoader treats this as a fault)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """What a RegisterBrokerRecord says about one broker, updated by fence/unfence records."""

    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    features: Mapping[str, tuple[int, int]]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    log_dirs: tuple[uuid.UUID, ...]

    def endpoint(self, listener_name: str) -> Endpoint | None:
        for endpoint in self.endpoints:
            if endpoint.name == listener_name:
                return endpoint
        return None


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's assignment and leadership (Kafka's `PartitionRegistration`)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> PartitionRegistration:
        replicas = tuple(data["replicas"])
        return cls(
            replicas=replicas,
            isr=tuple(data["isr"]),
            leader=data["leader"],
            leader_epoch=data["leaderEpoch"],
            partition_epoch=data["partitionEpoch"],
            removing_replicas=tuple(data["removingReplicas"]),
            adding_replicas=tuple(data["addingReplicas"]),
            leader_recovery_state=data.get("leaderRecoveryState", 0),
            directories=_default_to_migrating(data.get("directories") or (), len(replicas)),
            elr=tuple(data.get("eligibleLeaderReplicas") or ()),
            last_known_elr=tuple(data.get("lastKnownElr") or ()),
        )

    def merge(self, change: Mapping[str, Any]) -> PartitionRegistration:
        """Apply a PartitionChangeRecord: null fields are unchanged; a named leader bumps the epoch."""
        replicas = self.replicas if change.get("replicas") is None else tuple(change["replicas"])
        directories = self.directories if change.get("directories") is None else tuple(change["directories"])
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.get("leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE:
            leader, leader_epoch = change["leader"], self.leader_epoch + 1
        recovery = change.get("leaderRecoveryState", -1)
        return PartitionRegistration(
            replicas=replicas,
            isr=self.isr if change.get("isr") is None else tuple(change["isr"]),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=_or(change.get("removingReplicas"), self.removing_replicas),
            adding_replicas=_or(change.get("addingReplicas"), self.adding_replicas),
            leader_recovery_state=self.leader_recovery_state if recovery == -1 else recovery,
            directories=_default_to_migrating(directories, len(replicas)),
            elr=_or(change.get("eligibleLeaderReplicas"), self.elr),
            last_known_elr=_or(change.get("lastKnownElr"), self.last_known_elr),
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """A range of producer ids handed to one broker: [first_producer_id, first_producer_id + size)."""

    assigned_broker_id: int
    first_producer_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """A topic config as DescribeConfigs and CreateTopics (v5+) report it."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False


@dataclass(frozen=True, eq=False)
class ClusterMetadataImage:
    """Cluster metadata as of `offset` in the metadata log; never mutated after construction.

    `cluster_id` comes from meta.properties, `controller_id` is the active controller (this node in a
    quorum of one) and `listener_name` picks which endpoint of each broker clients are given.
    """

    cluster_id: str
    controller_id: int
    listener_name: str
    offset: int = -1
    features: Mapping[str, int] = field(default_factory=dict)
    brokers_by_id: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=dict)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=dict)
    producer_ids: ProducerIdsBlock | None = None
    scram: Mapping[str, Mapping[str, ScramCredential]] = field(default_factory=dict)
    """Mechanism name -> user -> stored credential (Kafka's ScramImage)."""
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=dict)
    """Quota entity -> key -> value (Kafka's ClientQuotasImage)."""
    acls: Mapping[uuid.UUID, StandardAcl] = field(default_factory=dict)
    """ACL id -> ACL (Kafka's AclsImage), replayed from AccessControlEntryRecord."""
    _infos: dict[uuid.UUID, TopicInfo] = field(default_factory=dict, repr=False, compare=False)
    _topics_by_name: dict[str, TopicImage] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Name -> topic, filled as names are looked up: Produce asks twice per partition, and going through
    topic_ids hashes a uuid.UUID in Python each time. Safe as a cache: an image never changes."""
    _views: dict[str, ClusterMetadataImage] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """This image as seen from another listener (`for_listener`), made once per listener."""

    @classmethod
    def empty(cls, cluster_id: str, controller_id: int, listener_name: str) -> ClusterMetadataImage:
        return cls(cluster_id, controller_id, listener_name)

    # --- views for request handlers -------------------------------------------------------------

    def for_listener(self, listener_name: str) -> ClusterMetadataImage:
        """The same image giving each broker's endpoint on `listener_name`: Kafka answers Metadata,
        FindCoordinator and DescribeCluster with the endpoints of the listener the request came in on."""
        if not listener_name or listener_name == self.listener_name:
            return self
        view = self._views.get(listener_name)
        if view is None:
            view = replace(self, listener_name=listener_name, _infos={})
            self._views[listener_name] = view
        return view

    def brokers(self) -> Sequence[BrokerInfo]:
        """Registered brokers that have our listener, fenced ones flagged (DescribeCluster filters them)."""
        out = []
        for broker_id in sorted(self.brokers_by_id):
            registration = self.brokers_by_id[broker_id]
            endpoint = registration.endpoint(self.listener_name)
            if endpoint is not None:
                out.append(
                    BrokerInfo(
                        broker_id, endpoint.host, endpoint.port, registration.rack, registration.fenced
                    )
                )
        return tuple(out)

    def topics(self) -> Iterable[TopicInfo]:
        return [self._info(topic) for topic in self.topics_by_id.values()]

    def topic(self, name: str) -> TopicInfo | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self._info(self.topics_by_id[topic_id])

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else self._info(topic)

    # --- what the controller and the data APIs need -----------------------------------------------

    @property
    def metadata_version(self) -> int:
        """The finalized metadata.version level, 0 before the bootstrap record."""
        return self.features.get(METADATA_VERSION, 0)

    @property
    def elr_enabled(self) -> bool:
        """Eligible leader replicas are kept (KIP-966): eligible.leader.replicas.version >= 1 on a
        metadata.version of 4.0-IV1 or later (FeatureControlManager.isElrFeatureEnabled)."""
        return is_elr_enabled(self.features)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers_by_id.get(broker_id)

    def topic_image(self, name: str) -> TopicImage | None:
        topic = self._topics_by_name.get(name)
        if topic is None:
            topic_id = self.topic_ids.get(name)
            if topic_id is None:
                return None
            topic = self._topics_by_name[name] = self.topics_by_id[topic_id]
        return topic

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self.topic_ids.get(name)

    def partitions_of(self, topic: str) -> Mapping[int, PartitionRegistration] | None:
        """Partition index -> registration, or None when the topic does not exist."""
        image = self.topic_image(topic)
        return None if image is None else image.partitions

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        image = self.topic_image(topic)
        return None if image is None else image.partitions.get(partition)

    def topic_config(self, name: str) -> dict[str, str]:
        """Only the configs set explicitly on the topic (its ConfigRecords), as raw strings."""
        return dict(self.configs.get((TOPIC_RESOURCE, name), {}))

    def broker_config(self, name: str) -> dict[str, str]:
        """Dynamic broker configs: `name` is a node id, or "" for the cluster-wide defaults."""
        return dict(self.configs.get((BROKER_RESOURCE, name), {}))

    def effective_topic_config(self, name: str, config: BrokerConfig) -> dict[str, object]:
        """Every topic property parsed: the broker's defaults with the topic's overrides on top."""
        return config.topic_config(self.topic_config(name))

    def topic_config_entries(self, name: str, config: BrokerConfig) -> list[ConfigEntry]:
        """DescribeConfigs' view of a topic: each property, its value as text and where it came from."""
        return topic_config_entries(config, self.topic_config(name))

    def next_producer_id_block(self, broker_id: int | None = None) -> ProducerIdsBlock:
        """The block the next ProducerIdsRecord will hand out (ProducerIdControlManager)."""
        first = 0 if self.producer_ids is None else self.producer_ids.first_producer_id
        return ProducerIdsBlock(self.controller_id if broker_id is None else broker_id, first)

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """The stored credential a SCRAM exchange checks a client's proof against, or None."""
        return self.scram.get(mechanism, {}).get(user)

    def partitions_led_by(self, broker_id: int) -> list[tuple[str, int, PartitionRegistration]]:
        """(topic, partition, registration) of every partition whose leader is `broker_id`."""
        return [
            (topic.name, index, partition)
            for topic in self.topics_by_id.values()
            for index, partition in sorted(topic.partitions.items())
            if partition.leader == broker_id
        ]

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name equals `name` once '.' is read as '_' (Kafka's collision rule)."""
        if "." not in name and "_" not in name:
            return None
        unified = name.replace(".", "_")
        for existing in self.topic_ids:
            if ("." in existing or "_" in existing) and existing.replace(".", "_") == unified:
                return existing
        return None

    def __eq__(self, other: object) -> bool:
        """Same metadata (offset and fold), which is what a replay must reproduce."""
        if not isinstance(other, ClusterMetadataImage):
            return NotImplemented
        return (
            self.cluster_id == other.cluster_id
            and self.controller_id == other.controller_id
            and self.offset == other.offset
            and dict(self.features) == dict(other.features)
            and dict(self.brokers_by_id) == dict(other.brokers_by_id)
            and {k: (v.name, dict(v.partitions)) for k, v in self.topics_by_id.items()}
            == {k: (v.name, dict(v.partitions)) for k, v in other.topics_by_id.items()}
            and {k: dict(v) for k, v in self.configs.items()}
            == {k: dict(v) for k, v in other.configs.items()}
            and self.producer_ids == other.producer_ids
            and {k: dict(v) for k, v in self.scram.items() if v}
            == {k: dict(v) for k, v in other.scram.items() if v}
            and {k: dict(v) for k, v in self.client_quotas.items()}
            == {k: dict(v) for k, v in other.client_quotas.items()}
            and dict(self.acls) == dict(other.acls)
        )

    __hash__ = None  # type: ignore[assignment]

    def _info(self, topic: TopicImage) -> TopicInfo:
        info = self._infos.get(topic.topic_id)
        if info is None:
            info = TopicInfo(
                name=topic.name,
                topic_id=topic.topic_id,
                partitions=tuple(
                    self._partition_info(index, topic.partitions[index]) for index in sorted(topic.partitions)
                ),
                is_internal=is_internal_topic(topic.name),
            )
            self._infos[topic.topic_id] = info
        return info

    def _partition_info(self, index: int, partition: PartitionRegistration) -> PartitionInfo:
        """KRaftMetadataCache's rules: no live leader endpoint -> leader -1 with an error code."""
        leader, error = partition.leader, ErrorCode.none
        registration = self.brokers_by_id.get(partition.leader)
        if registration is None:
            leader, error = NO_LEADER, ErrorCode.leader_not_available
        elif registration.fenced or registration.endpoint(self.listener_name) is None:
            leader, error = NO_LEADER, ErrorCode.listener_not_found
        offline = tuple(
            replica
            for i, replica in enumerate(partition.replicas)
            if replica not in self.brokers_by_id
            or self.brokers_by_id[replica].fenced  # KRaftMetadataCache.isReplicaOffline
            or self.brokers_by_id[replica].endpoint(self.listener_name) is None
            or (i < len(partition.directories) and partition.directories[i] == DIRECTORY_LOST)
        )
        return PartitionInfo(
            partition_index=index,
            leader_id=leader,
            leader_epoch=partition.leader_epoch,
            replica_nodes=partition.replicas,
            isr_nodes=partition.isr,
            offline_replicas=offline,
            error_code=error,
        )


class MetadataDelta:
    """Records replayed on top of an image; `apply()` returns the next image.

    Kafka buffers the records between BeginTransactionRecord and EndTransactionRecord and drops them
    on AbortTransactionRecord; so does `replay`, so a log Kafka wrote folds the same way.
    """

    def __init__(self, image: ClusterMetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self.features = dict(image.features)
        self.brokers = dict(image.brokers_by_id)
        self.topics: dict[uuid.UUID, TopicImage] = dict(image.topics_by_id)
        self.topic_ids = dict(image.topic_ids)
        self.configs: dict[tuple[int, str], Mapping[str, str]] = dict(image.configs)
        self.producer_ids = image.producer_ids
        self.scram: dict[str, Mapping[str, ScramCredential]] = dict(image.scram)
        self.client_quotas: dict[QuotaEntity, Mapping[str, float]] = dict(image.client_quotas)
        self.acls: dict[uuid.UUID, StandardAcl] | None = None
        """A copy of the image's ACLs once an ACL record comes; None keeps the image's mapping."""
        self._changed_partitions: dict[uuid.UUID, dict[int, PartitionRegistration]] = {}
        self._pending: list[tuple[MetadataRecord, int]] | None = None

    def replay(self, record: MetadataRecord, offset: int = -1) -> None:
        """Fold one record (at `offset` in the log, if known)."""
        if offset >= 0:
            self.offset = max(self.offset, offset)
        name = record.name
        if name == "BeginTransactionRecord":
            self._pending = []
            return
        if name == "EndTransactionRecord":
            pending, self._pending = self._pending or [], None
            for held, _ in pending:
                self._apply(held)
            return
        if name == "AbortTransactionRecord":
            self._pending = None
            return
        if self._pending is not None:
            self._pending.append((record, offset))
            return
        self._apply(record)

    def replay_all(self, records: Iterable[tuple[MetadataRecord, int]]) -> MetadataDelta:
        for record, offset in records:
            self.replay(record, offset)
        return self

    def apply(self) -> ClusterMetadataImage:
        topics = dict(self.topics)
        for topic_id, partitions in self._changed_partitions.items():
            topic = topics.get(topic_id)
            if topic is not None:
                topics[topic_id] = TopicImage(topic.name, topic_id, MappingProxyType(partitions))
        image = self.image
        return ClusterMetadataImage(
            cluster_id=image.cluster_id,
            controller_id=image.controller_id,
            listener_name=image.listener_name,
            offset=self.offset,
            features=MappingProxyType(dict(self.features)),
            brokers_by_id=MappingProxyType(dict(self.brokers)),
            topics_by_id=MappingProxyType(topics),
            topic_ids=MappingProxyType(dict(self.topic_ids)),
            configs=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.configs.items()}),
            producer_ids=self.producer_ids,
            scram=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.scram.items() if v}),
            client_quotas=self._client_quotas_image(),
            acls=image.acls if self.acls is None else MappingProxyType(self.acls),
        )

    def _client_quotas_image(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        """The previous image's mapping when no ClientQuotaRecord came: quota lookups cache on it."""
        if self.client_quotas == self.image.client_quotas:
            return self.image.client_quotas
        return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.client_quotas.items()})

    # --- one method per record type ---------------------------------------------------------------

    def _apply(self, record: MetadataRecord) -> None:
        handler = _HANDLERS.get(record.name)
        if handler is not None:
            handler(self, record.data)
        # Other records (ACLs, delegation tokens, controller registrations, ZK
        # migration state, NoOpRecord) carry nothing this image holds.

    def _feature_level(self, data: Mapping[str, Any]) -> None:
        if data["featureLevel"] == 0:
            self.features.pop(data["name"], None)
        else:
            self.features[data["name"]] = data["featureLevel"]

    def _register_broker(self, data: Mapping[str, Any]) -> None:
        self.brokers[data["brokerId"]] = BrokerRegistration(
            broker_id=data["brokerId"],
            incarnation_id=data["incarnationId"],
            broker_epoch=data["brokerEpoch"],
            endpoints=tuple(
                Endpoint(e["name"], e["host"], e["port"], e["securityProtocol"]) for e in data["endPoints"]
            ),
            features={
                f["name"]: (f["minSupportedVersion"], f["maxSupportedVersion"]) for f in data["features"]
            },
            rack=data["rack"],
            fenced=data["fenced"],
            in_controlled_shutdown=data.get("inControlledShutdown", False),
            log_dirs=tuple(data.get("logDirs") or ()),
        )

    def _unregister_broker(self, data: Mapping[str, Any]) -> None:
        current = self.brokers.get(data["brokerId"])
        if current is not None and current.broker_epoch == data["brokerEpoch"]:
            del self.brokers[data["brokerId"]]

    def _set_fenced(self, broker_id: int, epoch: int, fenced: bool | None, shutdown: bool | None) -> None:
        current = self.brokers.get(broker_id)
        if current is None or current.broker_epoch != epoch:
            raise MetadataReplayError(f"no registration of broker {broker_id} with epoch {epoch} to change")
        self.brokers[broker_id] = dataclasses.replace(
            current,
            fenced=current.fenced if fenced is None else fenced,
            in_controlled_shutdown=current.in_controlled_shutdown if shutdown is None else shutdown,
        )

    def _fence_broker(self, data: Mapping[str, Any]) -> None:
        self._set_fenced(data["id"], data["epoch"], True, None)

    def _unfence_broker(self, data: Mapping[str, Any]) -> None:
        self._set_fenced(data["id"], data["epoch"], False, None)

    def _broker_registration_change(self, data: Mapping[str, Any]) -> None:
        fenced = {-1: False, 0: None, 1: True}.get(data.get("fenced", 0))
        shutdown = True if data.get("inControlledShutdown", 0) == 1 else None
        self._set_fenced(data["brokerId"], data["brokerEpoch"], fenced, shutdown)

    def _topic(self, data: Mapping[str, Any]) -> None:
        topic_id, name = data["topicId"], data["name"]
        self.topics[topic_id] = TopicImage(name, topic_id, MappingProxyType({}))
        self.topic_ids[name] = topic_id
        self._changed_partitions[topic_id] = {}

    def _partition(self, data: Mapping[str, Any]) -> None:
        partitions = self._partitions_for_update(data["topicId"], data["partitionId"], "create")
        partitions[data["partitionId"]] = PartitionRegistration.from_record(data)

    def _partition_change(self, data: Mapping[str, Any]) -> None:
        partitions = self._partitions_for_update(data["topicId"], data["partitionId"], "change")
        current = partitions.get(data["partitionId"])
        if current is None:
            raise MetadataReplayError(
                f"Tried to change partition {data['topicId']}:{data['partitionId']}, "
                "but no partition with that id was found."
            )
        partitions[data["partitionId"]] = current.merge(data)

    def _clear_elr(self, data: Mapping[str, Any]) -> None:
        """ClearElrRecord (min.insync.replicas changed): the named topic's partitions, or every topic's
        when the name is empty, lose their ELR and last known ELR, as a PartitionChangeRecord setting
        both empty would (the partition epoch moves; the leader epoch does not)."""
        name = data.get("topicName") or ""
        if name:
            topic_id = self.topic_ids.get(name)
            if topic_id is None:
                raise MetadataReplayError(
                    f"Unable to clear elr for topic with name {name}: no such topic found."
                )
            topic_ids = [topic_id]
        else:
            topic_ids = list(self.topics)
        for topic_id in topic_ids:
            current = self._changed_partitions.get(topic_id, self.topics[topic_id].partitions)
            if not any(p.elr or p.last_known_elr for p in current.values()):
                continue
            partitions = self._partitions_for_update(topic_id, -1, "clear the ELR of")
            for index, partition in list(partitions.items()):
                if partition.elr or partition.last_known_elr:
                    partitions[index] = partition.merge({"eligibleLeaderReplicas": [], "lastKnownElr": []})

    def _remove_topic(self, data: Mapping[str, Any]) -> None:
        topic = self.topics.pop(data["topicId"], None)
        if topic is None:
            raise MetadataReplayError(f"Can't find topic with ID {data['topicId']} to remove.")
        del self.topic_ids[topic.name]
        self._changed_partitions.pop(topic.topic_id, None)
        self.configs.pop((TOPIC_RESOURCE, topic.name), None)

    def _config(self, data: Mapping[str, Any]) -> None:
        key = (data["resourceType"], data["resourceName"])
        values = dict(self.configs.get(key, {}))
        if data["value"] is None:
            values.pop(data["name"], None)
        else:
            values[data["name"]] = data["value"]
        if values:
            self.configs[key] = values
        else:
            self.configs.pop(key, None)

    def _producer_ids(self, data: Mapping[str, Any]) -> None:
        current = self.producer_ids
        if current is not None and data["nextProducerId"] <= current.first_producer_id:
            raise MetadataReplayError(
                f"Next Producer ID from replayed record ({data['nextProducerId']}) is not greater than "
                f"current next Producer ID in block ({current})"
            )
        self.producer_ids = ProducerIdsBlock(data["brokerId"], data["nextProducerId"])

    def _user_scram_credential(self, data: Mapping[str, Any]) -> None:
        mechanism = MECHANISM_NAMES.get(data["mechanism"])
        if mechanism is None:  # ScramMechanism.UNKNOWN: no exchange can use it
            return
        users = dict(self.scram.get(mechanism, {}))
        users[data["name"]] = ScramCredential(
            mechanism=mechanism,
            salt=bytes(data["salt"]),
            stored_key=bytes(data["storedKey"]),
            server_key=bytes(data["serverKey"]),
            iterations=data["iterations"],
        )
        self.scram[mechanism] = users

    def _remove_user_scram_credential(self, data: Mapping[str, Any]) -> None:
        mechanism = MECHANISM_NAMES.get(data["mechanism"])
        users = dict(self.scram.get(mechanism, {})) if mechanism is not None else {}
        if users.pop(data["name"], None) is not None:
            self.scram[mechanism] = users  # type: ignore[index]

    def _client_quota(self, data: Mapping[str, Any]) -> None:
        """ClientQuotaControlManager.replay: set or remove one key of the entity."""
        entity = quota_entity((e["entityType"], e["entityName"]) for e in data["entity"])
        values = dict(self.client_quotas.get(entity, {}))
        if data["remove"]:
            values.pop(data["key"], None)
        else:
            values[data["key"]] = float(data["value"])
        if values:
            self.client_quotas[entity] = values
        else:
            self.client_quotas.pop(entity, None)

    def _access_control_entry(self, data: Mapping[str, Any]) -> None:
        """AclControlManager.replay: the ACL under its id."""
        if self.acls is None:
            self.acls = dict(self.image.acls)
        self.acls[data["id"]] = StandardAcl.from_record(data)

    def _remove_access_control_entry(self, data: Mapping[str, Any]) -> None:
        if self.acls is None:
            self.acls = dict(self.image.acls)
        if self.acls.pop(data["id"], None) is None:
            raise MetadataReplayError(f"Tried to remove ACL {data['id']}, but no ACL with that ID was found.")

    def _partitions_for_update(self, topic_id: uuid.UUID, partition_id: int, what: str) -> dict:
        if topic_id not in self.topics:
            raise MetadataReplayError(
                f"Tried to {what} partition {topic_id}:{partition_id}, but no topic with that ID was found."
            )
        partitions = self._changed_partitions.get(topic_id)
        if partitions is None:
            partitions = dict(self.topics[topic_id].partitions)
            self._changed_partitions[topic_id] = partitions
        return partitions


_HANDLERS = {
    "FeatureLevelRecord": MetadataDelta._feature_level,
    "RegisterBrokerRecord": MetadataDelta._register_broker,
    "UnregisterBrokerRecord": MetadataDelta._unregister_broker,
    "FenceBrokerRecord": MetadataDelta._fence_broker,
    "UnfenceBrokerRecord": MetadataDelta._unfence_broker,
    "BrokerRegistrationChangeRecord": MetadataDelta._broker_registration_change,
    "TopicRecord": MetadataDelta._topic,
    "PartitionRecord": MetadataDelta._partition,
    "PartitionChangeRecord": MetadataDelta._partition_change,
    "RemoveTopicRecord": MetadataDelta._remove_topic,
    "ClearElrRecord": MetadataDelta._clear_elr,
    "ConfigRecord": MetadataDelta._config,
    "ProducerIdsRecord": MetadataDelta._producer_ids,
    "UserScramCredentialRecord": MetadataDelta._user_scram_credential,
    "RemoveUserScramCredentialRecord": MetadataDelta._remove_user_scram_credential,
    "ClientQuotaRecord": MetadataDelta._client_quota,
    "AccessControlEntryRecord": MetadataDelta._access_control_entry,
    "RemoveAccessControlEntryRecord": MetadataDelta._remove_access_control_entry,
}


def fold(
    image: ClusterMetadataImage, records: Iterable[MetadataRecord | tuple[MetadataRecord, int]]
) -> ClusterMetadataImage:
    """The image after `records` (bare records, or (record, offset) pairs)."""
    delta = MetadataDelta(image)
    for item in records:
        if isinstance(item, MetadataRecord):
            delta.replay(item)
        else:
            delta.replay(*item)
    return delta.apply()


@dataclass(frozen=True, slots=True)
class TopicChanges:
    """What storage must do after an image change (Kafka's TopicsDelta, as the replica manager reads it)."""

    created: tuple[tuple[str, int, uuid.UUID], ...]  # new partitions: (topic, partition, topic id)
    deleted: tuple[tuple[str, uuid.UUID, tuple[int, ...]], ...]  # removed topics and their partitions
    reconfigured: tuple[str, ...]  # surviving topics whose explicit configs changed
    reassigned: tuple[tuple[str, int, uuid.UUID], ...] = ()
    """Surviving partitions whose replicas changed (a reassignment started, completed or was cancelled):
    a broker that gained a replica creates its log, one that lost it deletes the log."""


def topic_changes(old: ClusterMetadataImage, new: ClusterMetadataImage) -> TopicChanges:
    """Partitions to create, topics to delete, topics to reconfigure and partitions whose replicas
    changed between two images (images share what they do not change, so most partitions are skipped
    by identity)."""
    created = []
    reassigned = []
    for topic_id, topic in new.topics_by_id.items():
        before = old.topics_by_id.get(topic_id)
        if before is not None and before.partitions is topic.partitions:
            continue
        known = before.partitions if before is not None else {}
        for index in sorted(topic.partitions):
            previous = known.get(index)
            if previous is None:
                created.append((topic.name, index, topic_id))
                continue
            current = topic.partitions[index]
            if current is not previous and current.replicas != previous.replicas:
                reassigned.append((topic.name, index, topic_id))
    deleted = tuple(
        (topic.name, topic_id, tuple(sorted(topic.partitions)))
        for topic_id, topic in old.topics_by_id.items()
        if topic_id not in new.topics_by_id
    )
    reconfigured = tuple(
        name
        for name, topic_id in new.topic_ids.items()
        if old.topic_ids.get(name) == topic_id
        and old.configs.get((TOPIC_RESOURCE, name)) != new.configs.get((TOPIC_RESOURCE, name))
    )
    return TopicChanges(tuple(created), deleted, reconfigured, tuple(reassigned))


def topic_config_entries(config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic property, sorted by name: an override is TOPIC_CONFIG, a broker property set in the
    configuration is STATIC_BROKER_CONFIG, anything else is Kafka's DEFAULT_CONFIG."""
    defaults = config.topic_defaults()
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        if name in overrides:
            entries.append(ConfigEntry(name, overrides[name], TOPIC_CONFIG_SOURCE))
            continue
        synonyms = TOPIC_CONFIG_SYNONYMS.get(name, ())
        source = (
            STATIC_BROKER_CONFIG_SOURCE
            if any(config.is_set(s.name) for s in synonyms)
            else DEFAULT_CONFIG_SOURCE
        )
        entries.append(ConfigEntry(name, config_text(defaults[name]), source))
    return entries


def config_text(value: object) -> str | None:
    """A parsed config value as Kafka prints it: lists comma-joined, booleans lower case."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _default_to_migrating(directories: Sequence[uuid.UUID], replicas: int) -> tuple[uuid.UUID, ...]:
    """PartitionRegistration.defaultToMigrating: records before MV 3.7-IV2 carry no directories."""
    if not directories:
        return (DIRECTORY_MIGRATING,) * replicas
    return tuple(directories)


def _or(value: Sequence[int] | None, current: tuple[int, ...]) -> tuple[int, ...]:
    return current if value is None else tuple(value)
