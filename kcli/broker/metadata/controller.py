"""The controller of a quorum of one: admin operations validated as Kafka validates them, then records.

Each operation follows Kafka's QuorumController: check the request against the current image
(ReplicationControlManager and ConfigurationControlManager rules, error codes and messages), build
the records, append them to the metadata log as ONE batch (so an operation is all or nothing, even
across `kill -9`), fold them into the next image and publish it to the listeners. Validate-only
requests stop before the append. This node is the only voter, so it is always the active
controller, at controller epoch 1; every metadata batch carries that epoch.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kio.schema.errors import ErrorCode

from formats.internal import decode_metadata_record, encode_metadata_record
from kcli.broker.metadata.image import (
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    METADATA_VERSION,
    MV_3_9_IV0,
    TOPIC_RESOURCE,
    ClusterMetadataImage,
    ConfigEntry,
    MetadataDelta,
    MetadataReplayError,
    ProducerIdsBlock,
    topic_config_entries,
)
from kcli.broker.metadata.metadata_log import MetadataLog, MetadataLogError, metadata_log_dir
from kcli.config import (
    CLUSTER_METADATA_TOPIC,
    LONG_MAX,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    Listener,
    parse_topic_value,
)

log = logging.getLogger("kcli.broker.metadata")

CONTROLLER_EPOCH = 1
"""The Raft epoch of a quorum of one that never holds an election: the leader epoch of every batch."""

ZERO_UUID = uuid.UUID(int=0)
MIN_METADATA_VERSION = 1  # IBP_3_0_IV1, the oldest KRaft level
PLAINTEXT = 0  # SecurityProtocol.PLAINTEXT id
MAX_TOPIC_NAME_LENGTH = 249
MAX_RECORDS_PER_USER_OP = 10_000
"""QuorumController.MAX_RECORDS_PER_USER_OP: an admin operation that would write more records fails whole,
before any placement is computed (a CreateTopics of 2**31-1 partitions is one small request)."""

# Records written at MV 3.9-IV0 (MetadataVersion.registerBrokerRecordVersion / partitionRecordVersion).
REGISTER_BROKER_RECORD_VERSION = 3
PARTITION_RECORD_VERSION = 1


class OpType(IntEnum):
    """IncrementalAlterConfigs operations (AlterConfigOp.OpType ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigOp:
    name: str
    op: OpType
    value: str | None = None


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One CreatableTopic: -1 means "the broker default"; `assignments` are (partition, broker ids)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Sequence[tuple[int, Sequence[int]]] = ()
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApiError:
    """An error code with Kafka's message (None where Kafka sends none)."""

    code: ErrorCode = ErrorCode.none
    message: str | None = None

    @property
    def is_failure(self) -> bool:
        return self.code is not ErrorCode.none


NONE = ApiError()
TOO_LARGE = ApiError(ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    """A CreatableTopicResult; the details are filled in on success, as Kafka fills them."""

    name: str
    error: ApiError = NONE
    topic_id: uuid.UUID = ZERO_UUID
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID
    error: ApiError = NONE


class ApiException(Exception):
    """Raised inside an operation to answer with `error` (Kafka's ApiException subclasses)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = ApiError(code, message)


ImageListener = Callable[[ClusterMetadataImage, ClusterMetadataImage], None]
"""Called with (old, new) after every committed operation."""

Record = tuple[str, int, dict[str, Any]]
"""(record type name, version, fields) before encoding."""


class QuorumController:
    """The active controller and sole voter; `image` is always the latest committed metadata."""

    def __init__(
        self,
        config: BrokerConfig,
        metadata_log: MetadataLog,
        image: ClusterMetadataImage,
        *,
        epoch: int = CONTROLLER_EPOCH,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.metadata_log = metadata_log
        self.epoch = epoch
        self._image = image
        self._listeners: list[ImageListener] = []
        self._random = random.Random()

    @classmethod
    def open(
        cls, config: BrokerConfig, *, cluster_id: str, listener_name: str | None = None
    ) -> QuorumController:
        """Open (recover) the metadata log, replay it into an image, and bootstrap an empty log."""
        metadata_log = MetadataLog.open(
            metadata_log_dir(config),
            segment_bytes=int(config["metadata.log.segment.bytes"]),  # type: ignore[call-overload]
            segment_ms=int(config["metadata.log.segment.ms"]),  # type: ignore[call-overload]
        )
        image = ClusterMetadataImage.empty(cluster_id, config.node_id, listener_name or config.listener.name)
        try:
            image = MetadataDelta(image).replay_all(metadata_log.records()).apply()
        except MetadataReplayError as exc:
            metadata_log.close()
            raise MetadataLogError(
                f"cannot replay the metadata log in {metadata_log.directory}: {str(exc).rstrip('.')}."
            ) from None
        controller = cls(config, metadata_log, image)
        metadata_log.write_quorum_state(config.node_id, controller.epoch)
        controller.bootstrap()
        return controller

    @property
    def image(self) -> ClusterMetadataImage:
        return self._image

    def add_listener(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    def close(self) -> None:
        self.metadata_log.close()

    # --- start-up ---------------------------------------------------------------------------------

    def bootstrap(self) -> None:
        """A log with no metadata.version gets the bootstrap FeatureLevelRecord (3.9-IV0, level 21)."""
        if self._image.metadata_version == 0:
            self._commit([("FeatureLevelRecord", 0, {"name": METADATA_VERSION, "featureLevel": MV_3_9_IV0})])
            log.info("bootstrapped the metadata log with metadata.version %d (3.9-IV0)", MV_3_9_IV0)

    def register_broker(
        self,
        listener: Listener,
        *,
        incarnation_id: uuid.UUID | None = None,
        rack: str | None = None,
        log_dirs: Sequence[uuid.UUID] = (),
        broker_id: int | None = None,
    ) -> int:
        """Write this process's RegisterBrokerRecord (unfenced); returns its broker epoch.

        As in ClusterControlManager, the broker epoch is the offset the record is written at, so
        every registration of a new incarnation has a higher epoch than the last.
        """
        broker_id = self.node_id if broker_id is None else broker_id
        broker_epoch = self.metadata_log.next_offset
        record = {
            "brokerId": broker_id,
            "incarnationId": incarnation_id or uuid.uuid4(),
            "brokerEpoch": broker_epoch,
            "endPoints": [
                {
                    "name": listener.name,
                    "host": listener.host,
                    "port": listener.port,
                    "securityProtocol": PLAINTEXT,
                }
            ],
            "features": [
                {
                    "name": METADATA_VERSION,
                    "minSupportedVersion": MIN_METADATA_VERSION,
                    "maxSupportedVersion": MV_3_9_IV0,
                }
            ],
            "rack": rack,
            "fenced": False,
            "inControlledShutdown": False,
            "logDirs": list(log_dirs),
        }
        self._commit([("RegisterBrokerRecord", REGISTER_BROKER_RECORD_VERSION, record)])
        return broker_epoch

    # --- topics -----------------------------------------------------------------------------------

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[CreateTopicResult]:
        """CreateTopics: one result per distinct name, in request order; successes are one batch."""
        image = self._image
        counts: dict[str, int] = {}
        first: dict[str, NewTopic] = {}
        for topic in topics:
            counts[topic.name] = counts.get(topic.name, 0) + 1
            first.setdefault(topic.name, topic)
        errors: dict[str, ApiError] = {}
        for name, topic in first.items():
            error: ApiError | None
            if counts[name] > 1:
                error = ApiError(ErrorCode.invalid_request, "Duplicate topic name.")
            elif name == CLUSTER_METADATA_TOPIC:
                error = ApiError(
                    ErrorCode.invalid_request,
                    f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
                )
            else:
                # Kafka's order: name rules, then collisions, then existence override each other.
                error = topic_name_error(name)
                colliding = image.colliding_topic(name)
                if colliding is not None:
                    error = ApiError(
                        ErrorCode.invalid_topic_exception,
                        f"Topic '{name}' collides with existing topic: {colliding}",
                    )
                if image.topic_id(name) is not None:
                    error = ApiError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
                if error is None:
                    error = self._validate_creation_configs(topic)
            if error is not None:
                errors[name] = error
        ordered = list(first.values())
        needed = sum(self._records_needed(topic) for topic in ordered if topic.name not in errors)
        if needed > MAX_RECORDS_PER_USER_OP:
            return [CreateTopicResult(topic.name, TOO_LARGE) for topic in ordered]

        records: list[Record] = []
        results: list[CreateTopicResult] = []
        for topic in ordered:
            if topic.name in errors:
                results.append(CreateTopicResult(topic.name, errors[topic.name]))
                continue
            try:
                result, topic_records = self._create_topic(topic)
            except ApiException as exc:
                results.append(CreateTopicResult(topic.name, exc.error))
                continue
            results.append(result)
            records.extend(topic_records)
        if records and not validate_only:
            self._commit(records)
        created = [r.name for r in results if not r.error.is_failure]
        if created:
            log.info("%s topic(s) %s", "validated" if validate_only else "created", ", ".join(created))
        return results

    def _records_needed(self, topic: NewTopic) -> int:
        """The records creating `topic` writes: TopicRecord, its ConfigRecords, one PartitionRecord each."""
        partitions = topic.num_partitions
        if topic.assignments:
            partitions = len(topic.assignments)
        elif partitions == -1:
            partitions = int(self.config["num.partitions"])  # type: ignore[call-overload]
        return 1 + len(topic.configs) + max(partitions, 0)

    def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]:
        """DeleteTopics by name or id: one result per distinct reference; removals are one batch."""
        image = self._image
        references = list(dict.fromkeys(topics))
        counts: dict[str | uuid.UUID, int] = {}
        for reference in topics:
            counts[reference] = counts.get(reference, 0) + 1
        if not self.config["delete.topic.enable"]:
            return [
                DeleteTopicResult(*_name_and_id(ref), ApiError(ErrorCode.topic_deletion_disabled))
                for ref in references
            ]
        results: list[DeleteTopicResult] = []
        records: list[Record] = []
        chosen: set[uuid.UUID] = set()
        for reference in references:
            name, topic_id = _name_and_id(reference)
            if counts[reference] > 1:
                what = "name" if isinstance(reference, str) else "id"
                results.append(
                    DeleteTopicResult(
                        name, topic_id, ApiError(ErrorCode.invalid_request, f"Duplicate topic {what}.")
                    )
                )
                continue
            if isinstance(reference, uuid.UUID):
                if reference == ZERO_UUID:
                    error = ApiError(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
                    results.append(DeleteTopicResult(None, ZERO_UUID, error))
                    continue
                topic = image.topics_by_id.get(reference)
                if topic is None:
                    results.append(DeleteTopicResult(None, reference, ApiError(ErrorCode.unknown_topic_id)))
                    continue
                name = topic.name
            else:
                found = image.topic_id(reference)
                if found is None:
                    error = ApiError(ErrorCode.unknown_topic_or_partition)
                    results.append(DeleteTopicResult(reference, ZERO_UUID, error))
                    continue
                topic_id = found
            if topic_id in chosen:
                error = ApiError(
                    ErrorCode.invalid_request,
                    "The provided topic name maps to an ID that was already supplied.",
                )
                results.append(DeleteTopicResult(name, topic_id, error))
                continue
            chosen.add(topic_id)
            records.append(("RemoveTopicRecord", 0, {"topicId": topic_id}))
            results.append(DeleteTopicResult(name, topic_id))
        if records:
            self._commit(records)
            log.info("deleted topic(s) %s", ", ".join(str(r.name) for r in results if not r.error.is_failure))
        return results

    def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> ApiError:
        """CreatePartitions for one topic: raise its partition count to `count`."""
        try:
            records = self._new_partitions(topic, count, assignments)
        except ApiException as exc:
            return exc.error
        if not validate_only:
            self._commit(records)
        return NONE

    # --- configs ----------------------------------------------------------------------------------

    def alter_topic_configs(
        self, topic: str, ops: Sequence[ConfigOp], *, validate_only: bool = False
    ) -> ApiError:
        """IncrementalAlterConfigs on a topic: SET, DELETE, APPEND, SUBTRACT, all or nothing."""
        names = [op.name for op in ops]
        if len(set(names)) != len(names):
            return ApiError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        nulls = [op.name for op in ops if op.op is not OpType.DELETE and op.value is None]
        if nulls:
            return ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
        current = self._image.topic_config(topic)
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
                    return ApiError(
                        ErrorCode.invalid_config,
                        f"Can't {op.op.name} to key {op.name} because its type is not LIST.",
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
        return self._alter_configs(topic, changes, {}, validate_only)

    def replace_topic_configs(
        self, topic: str, configs: Mapping[str, str | None], *, validate_only: bool = False
    ) -> ApiError:
        """Legacy AlterConfigs on a topic: `configs` becomes the whole set of overrides."""
        nulls = [name for name, value in configs.items() if value is None]
        if nulls:
            return ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
        current = self._image.topic_config(topic)
        changes = {name: value for name, value in configs.items() if current.get(name) != value}
        removed = {name: None for name in current if name not in configs}
        return self._alter_configs(topic, changes, removed, validate_only)

    # --- producer ids -----------------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        """AllocateProducerIds: hand out the next block of 1000 and record where the next one starts."""
        registration = self._image.broker(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            raise ApiException(
                ErrorCode.stale_broker_epoch,
                f"Expected broker epoch {registration.broker_epoch if registration else -1}, "
                f"but got broker epoch {broker_epoch}",
            )
        block = self._image.next_producer_id_block(broker_id)
        if block.first_producer_id > LONG_MAX - block.size:
            raise ApiException(
                ErrorCode.unknown_server_error,
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit",
            )
        record = {
            "brokerId": broker_id,
            "brokerEpoch": broker_epoch,
            "nextProducerId": block.next_block_first_id,
        }
        self._commit([("ProducerIdsRecord", 0, record)])
        return block

    # --- auto topic creation ----------------------------------------------------------------------

    async def auto_create_topics(self, names: Sequence[str]) -> Mapping[str, ErrorCode]:
        """The `AutoCreateTopics` hook: create missing topics with the broker's defaults.

        Internal topics get the settings their coordinators ask for (AutoTopicCreationManager).
        A topic that turns out to exist already counts as created.
        """
        results = self.create_topics([self._auto_topic(name) for name in names])
        return {
            r.name: ErrorCode.none if r.error.code is ErrorCode.topic_already_exists else r.error.code
            for r in results
        }

    def _auto_topic(self, name: str) -> NewTopic:
        config = self.config
        if name == "__consumer_offsets":
            return NewTopic(
                name,
                int(config["offsets.topic.num.partitions"]),  # type: ignore[call-overload]
                int(config["offsets.topic.replication.factor"]),  # type: ignore[call-overload]
                configs={
                    "cleanup.policy": "compact",
                    "compression.type": "producer",
                    "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                },
            )
        if name == "__transaction_state":
            return NewTopic(
                name,
                int(config["transaction.state.log.num.partitions"]),  # type: ignore[call-overload]
                int(config["transaction.state.log.replication.factor"]),  # type: ignore[call-overload]
                configs={
                    "unclean.leader.election.enable": "false",
                    "compression.type": "uncompressed",
                    "cleanup.policy": "compact",
                    "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
                    "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
                },
            )
        return NewTopic(
            name,
            int(config["num.partitions"]),  # type: ignore[call-overload]
            int(config["default.replication.factor"]),  # type: ignore[call-overload]
        )

    # --- internals --------------------------------------------------------------------------------

    def _commit(self, records: Sequence[Record]) -> None:
        """Append `records` as one batch, fold them into the next image, tell the listeners."""
        values = [encode_metadata_record(name, version, data) for name, version, data in records]
        base_offset, _ = self.metadata_log.append(
            values, leader_epoch=self.epoch, now_ms=int(time.time() * 1000)
        )
        delta = MetadataDelta(self._image)
        for i, value in enumerate(values):
            delta.replay(decode_metadata_record(value), base_offset + i)
        old, self._image = self._image, delta.apply()
        for listener in self._listeners:
            listener(old, self._image)

    def _create_topic(self, topic: NewTopic) -> tuple[CreateTopicResult, list[Record]]:
        """ReplicationControlManager.createTopic: partitions from assignments or placement."""
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ApiException(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but replication factor was not set to -1.",
                )
            if topic.num_partitions != -1:
                raise ApiException(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions was not set to -1.",
                )
            placements: dict[int, tuple[int, ...]] = {}
            replication_factor: int | None = None
            for index, brokers in topic.assignments:
                if index in placements:
                    raise ApiException(
                        ErrorCode.invalid_replica_assignment,
                        f"Found multiple manual partition assignments for partition {index}",
                    )
                self._validate_manual_assignment(brokers, replication_factor)
                replication_factor = len(brokers)
                if not self._active(brokers):
                    raise ApiException(
                        ErrorCode.invalid_replica_assignment,
                        "All brokers specified in the manual partition assignment for partition "
                        f"{index} are fenced or in controlled shutdown.",
                    )
                placements[index] = tuple(brokers)
            if sorted(placements) != list(range(len(placements))):
                raise ApiException(
                    ErrorCode.invalid_replica_assignment,
                    "partitions should be a consecutive 0-based integer sequence",
                )
            replicas_by_partition = [placements[i] for i in range(len(placements))]
        elif topic.replication_factor < -1 or topic.replication_factor == 0:
            raise ApiException(
                ErrorCode.invalid_replication_factor,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        elif topic.num_partitions < -1 or topic.num_partitions == 0:
            raise ApiException(
                ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."
            )
        else:
            num_partitions = topic.num_partitions
            if num_partitions == -1:
                num_partitions = int(self.config["num.partitions"])  # type: ignore[call-overload]
            replication_factor = topic.replication_factor
            if replication_factor == -1:
                replication_factor = int(self.config["default.replication.factor"])  # type: ignore[call-overload]
            replicas_by_partition = self._place(0, num_partitions, replication_factor)

        topic_id = _random_topic_id()
        records: list[Record] = [("TopicRecord", 0, {"name": topic.name, "topicId": topic_id})]
        for name, value in topic.configs.items():  # ConfigRecords go between TopicRecord and PartitionRecords
            records.append(
                (
                    "ConfigRecord",
                    0,
                    {
                        "resourceType": TOPIC_RESOURCE,
                        "resourceName": topic.name,
                        "name": name,
                        "value": value,
                    },
                )
            )
        for index, replicas in enumerate(replicas_by_partition):
            records.append(self._partition_record(topic_id, index, replicas))
        result = CreateTopicResult(
            name=topic.name,
            topic_id=topic_id,
            num_partitions=len(replicas_by_partition),
            replication_factor=len(replicas_by_partition[0]),
            configs=tuple(
                topic_config_entries(self.config, {k: v for k, v in topic.configs.items() if v is not None})
            ),
        )
        return result, records

    def _new_partitions(
        self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None
    ) -> list[Record]:
        """ReplicationControlManager.createPartitions for one topic."""
        image = self._image.topic_image(topic)
        if image is None:
            raise ApiException(ErrorCode.unknown_topic_or_partition)
        existing = len(image.partitions)
        if count == existing:
            raise ApiException(ErrorCode.invalid_partitions, f"Topic already has {existing} partition(s).")
        if count < existing:
            raise ApiException(
                ErrorCode.invalid_partitions,
                f"The topic {topic} currently has {existing} partition(s); {count} would not be an increase.",
            )
        additional = count - existing
        if additional > MAX_RECORDS_PER_USER_OP:
            raise ApiException(TOO_LARGE.code, TOO_LARGE.message)
        if assignments is not None and len(assignments) != additional:
            raise ApiException(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
                "assignment(s) were specified.",
            )
        replication_factor = len(image.partitions[0].replicas)
        if assignments is not None:
            placements = []
            for i, brokers in enumerate(assignments):
                self._validate_manual_assignment(brokers, replication_factor)
                if not self._active(brokers):
                    raise ApiException(
                        ErrorCode.invalid_replica_assignment,
                        "All brokers specified in the manual partition assignment for partition "
                        f"{existing + i} are fenced or in controlled shutdown.",
                    )
                placements.append(tuple(brokers))
        else:
            placements = self._place(existing, additional, replication_factor)
        return [
            self._partition_record(image.topic_id, existing + i, replicas)
            for i, replicas in enumerate(placements)
        ]

    def _partition_record(self, topic_id: uuid.UUID, index: int, replicas: Sequence[int]) -> Record:
        """A new partition: leader = first active replica, leader epoch 0, ISR = the active replicas."""
        isr = self._active(replicas)
        if not isr:
            raise ApiException(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {len(replicas)} time(s): All brokers are currently "
                "fenced or in controlled shutdown.",
            )
        data = {
            "partitionId": index,
            "topicId": topic_id,
            "replicas": list(replicas),
            "isr": isr,
            "removingReplicas": [],
            "addingReplicas": [],
            "leader": isr[0],
            "leaderRecoveryState": 0,
            "leaderEpoch": 0,
            "partitionEpoch": 0,
            "directories": [self._default_dir(broker) for broker in replicas],
        }
        return ("PartitionRecord", PARTITION_RECORD_VERSION, data)

    def _place(
        self, start_partition: int, num_partitions: int, replication_factor: int
    ) -> list[tuple[int, ...]]:
        """Spread replicas over the registered brokers, unfenced first (StripedReplicaPlacer's checks).

        Placement itself is a simple rotation from a random start, not Kafka's rack-aware striping;
        on one broker both give [node] for every partition.
        """
        brokers = [b for b in self._image.brokers_by_id.values() if not b.in_controlled_shutdown]
        unfenced = sorted(b.broker_id for b in brokers if not b.fenced)
        fenced = sorted(b.broker_id for b in brokers if b.fenced)
        prefix = f"Unable to replicate the partition {replication_factor} time(s): "
        if replication_factor <= 0:
            raise ApiException(
                ErrorCode.invalid_replication_factor,
                prefix
                + f"Invalid replication factor {replication_factor}: the replication factor must be positive.",
            )
        if not unfenced:
            raise ApiException(
                ErrorCode.invalid_replication_factor, prefix + "All brokers are currently fenced."
            )
        if replication_factor > len(brokers):
            raise ApiException(
                ErrorCode.invalid_replication_factor,
                prefix + f"The target replication factor of {replication_factor} cannot be reached because "
                f"only {len(brokers)} broker(s) are registered.",
            )
        start = self._random.randrange(len(unfenced))
        placements = []
        for p in range(start_partition, start_partition + num_partitions):
            shift = (start + p) % len(unfenced)
            rotated = unfenced[shift:] + unfenced[:shift]
            placements.append(tuple((rotated + fenced)[:replication_factor]))
        return placements

    def _validate_manual_assignment(self, brokers: Sequence[int], replication_factor: int | None) -> None:
        if not brokers:
            raise ApiException(
                ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.",
            )
        previous = None
        for broker in sorted(brokers):
            if broker not in self._image.brokers_by_id:
                raise ApiException(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
                )
            if broker == previous:
                raise ApiException(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes the broker {previous} more than once.",
                )
            previous = broker
        if replication_factor is not None and len(brokers) != replication_factor:
            raise ApiException(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes a partition with {len(brokers)} replica(s), but this "
                f"is not consistent with previous partitions, which have {replication_factor} replica(s).",
            )

    def _active(self, brokers: Iterable[int]) -> list[int]:
        """Brokers that may join an ISR: registered, unfenced and not shutting down."""
        out = []
        for broker in brokers:
            registration = self._image.broker(broker)
            if (
                registration is not None
                and not registration.fenced
                and not registration.in_controlled_shutdown
            ):
                out.append(broker)
        return out

    def _default_dir(self, broker: int) -> uuid.UUID:
        """ClusterControlManager.defaultDir: the broker's only log dir, else UNASSIGNED."""
        registration = self._image.broker(broker)
        if registration is None:
            return DIRECTORY_UNASSIGNED
        if not registration.log_dirs:
            return DIRECTORY_MIGRATING
        if len(registration.log_dirs) == 1:
            return registration.log_dirs[0]
        return DIRECTORY_UNASSIGNED

    def _validate_creation_configs(self, topic: NewTopic) -> ApiError | None:
        nulls = [name for name, value in topic.configs.items() if value is None]
        if nulls:
            return ApiError(
                ErrorCode.invalid_config, "Null value not supported for topic configs: " + ",".join(nulls)
            )
        return self._validate_topic_configs(topic.name, dict(topic.configs))  # type: ignore[arg-type]

    def _validate_topic_configs(self, topic: str, configs: Mapping[str, str]) -> ApiError | None:
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

    def _alter_configs(
        self, topic: str, changes: Mapping[str, str | None], removed: Mapping[str, None], validate_only: bool
    ) -> ApiError:
        """ConfigurationControlManager.validateAlterConfig, then the ConfigRecords as one batch."""
        resulting = self._image.topic_config(topic)
        for name, value in {**changes, **removed}.items():
            if value is None:
                resulting.pop(name, None)
            else:
                resulting[name] = value
        error = self._validate_topic_configs(topic, resulting)
        if error is not None:
            return error
        if self._image.topic_id(topic) is None:
            return ApiError(ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist.")
        records: list[Record] = [
            (
                "ConfigRecord",
                0,
                {"resourceType": TOPIC_RESOURCE, "resourceName": topic, "name": name, "value": value},
            )
            for name, value in {**changes, **removed}.items()
        ]
        if records and not validate_only:
            self._commit(records)
        return NONE


def topic_name_error(name: str) -> ApiError | None:
    """Topic.validate's sentences, as INVALID_TOPIC_EXCEPTION."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name == ".":
        reason = "'.' is not allowed"
    elif name == "..":
        reason = "'..' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is None:
        return None
    return ApiError(ErrorCode.invalid_topic_exception, f"Topic name is invalid: {reason}")


def _random_topic_id() -> uuid.UUID:
    """Uuid.randomUuid: never a reserved id (0 or 1) nor one whose base64 form starts with '-'."""
    while True:
        candidate = uuid.uuid4()
        if candidate.int > 1 and candidate.bytes[0] >> 2 != 62:  # 62 is '-' in URL-safe base64
            return candidate


def _name_and_id(reference: str | uuid.UUID) -> tuple[str | None, uuid.UUID]:
    if isinstance(reference, uuid.UUID):
        return None, reference
    return reference, ZERO_UUID


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
