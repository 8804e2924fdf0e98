"""TopicControlManager: which topics and partitions exist and where their replicas go: CreateTopics,
DeleteTopics, CreatePartitions and replica placement. Kafka's ReplicationControlManager does these
too (createTopics, deleteTopics, createPartitions); here they stand apart from the changes to existing
partitions (AlterPartition, elections, reassignments), which stay in ReplicationControlManager and go
through the PartitionChangeBuilder, while a new partition's first record is written here.

Each operation checks the request against the current image with Kafka's rules, error codes and
sentences, and returns the records (TopicRecord, ConfigRecords, PartitionRecords, RemoveTopicRecord)
with the per-topic results. Brokers come from the ClusterControlManager (who may hold a replica,
who may join an ISR, which log dir) and initial configs are checked by the ConfigurationControlManager.
An operation that would write more than MAX_RECORDS_PER_USER_OP records fails whole, before any
placement is computed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.cluster_control_manager import ClusterControlManager
from kcli.broker.metadata.controller.configuration_control_manager import (
    ConfigurationControlManager,
    clear_elr_records,
)
from kcli.broker.metadata.controller.controller_result import (
    NONE,
    ApiError,
    ApiException,
    ControllerResult,
    Record,
)
from kcli.broker.metadata.controller.topic import topic_name_error
from kcli.broker.metadata.image import MV_3_9_IV0, ClusterMetadataImage, ConfigEntry, topic_config_entries
from kcli.broker.metadata.placement import (
    InvalidReplicationFactorException,
    PlacementSpec,
    StripedReplicaPlacer,
    UsableBroker,
)
from kcli.config import CLUSTER_METADATA_TOPIC, INTERNAL_TOPICS, BrokerConfig
from kcli.features import partition_record_version

ZERO_UUID = uuid.UUID(int=0)
MAX_RECORDS_PER_USER_OP = 10_000
"""QuorumController.MAX_RECORDS_PER_USER_OP: an admin operation that would write more records fails whole,
before any placement is computed (a CreateTopics of 2**31-1 partitions is one small request)."""
TOO_LARGE = ApiError(ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One CreatableTopic: -1 means "the broker default"; `assignments` are (partition, broker ids)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Sequence[tuple[int, Sequence[int]]] = ()
    configs: Mapping[str, str | None] = field(default_factory=dict)


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


class TopicControlManager:
    """Validates topic creation, deletion and new partitions, and builds their records from the image."""

    def __init__(
        self,
        config: BrokerConfig,
        cluster_control: ClusterControlManager,
        configuration_control: ConfigurationControlManager,
    ) -> None:
        self.config = config
        self.cluster_control = cluster_control
        self.configuration_control = configuration_control
        self.replica_placer = StripedReplicaPlacer(random.Random())
        """One placer for the controller's life, as ClusterControlManager.replicaPlacer is."""

    # --- CreateTopics -------------------------------------------------------------------------------

    def create_topics(
        self, image: ClusterMetadataImage, topics: Sequence[NewTopic]
    ) -> ControllerResult[list[CreateTopicResult]]:
        """CreateTopics: one result per distinct name, in request order; successes are one batch."""
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
            return ControllerResult([], [CreateTopicResult(topic.name, TOO_LARGE) for topic in ordered])

        records: list[Record] = []
        results: list[CreateTopicResult] = []
        for topic in ordered:
            if topic.name in errors:
                results.append(CreateTopicResult(topic.name, errors[topic.name]))
                continue
            try:
                result, topic_records = self._create_topic(image, topic)
            except ApiException as exc:
                results.append(CreateTopicResult(topic.name, exc.error))
                continue
            results.append(result)
            records.extend(topic_records)
        return ControllerResult(records, results)

    def _records_needed(self, topic: NewTopic) -> int:
        """The records creating `topic` writes: TopicRecord, its ConfigRecords, one PartitionRecord each."""
        partitions = topic.num_partitions
        if topic.assignments:
            partitions = len(topic.assignments)
        elif partitions == -1:
            partitions = int(self.config["num.partitions"])  # type: ignore[call-overload]
        return 1 + len(topic.configs) + max(partitions, 0)

    def _validate_creation_configs(self, topic: NewTopic) -> ApiError | None:
        nulls = [name for name, value in topic.configs.items() if value is None]
        if nulls:
            return ApiError(
                ErrorCode.invalid_config, "Null value not supported for topic configs: " + ",".join(nulls)
            )
        return self.configuration_control.validate_topic_configs(topic.name, dict(topic.configs))  # type: ignore[arg-type]

    def _create_topic(
        self, image: ClusterMetadataImage, topic: NewTopic
    ) -> tuple[CreateTopicResult, list[Record]]:
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
                validate_manual_assignment(image, brokers, replication_factor)
                replication_factor = len(brokers)
                if not self.cluster_control.active_brokers(image, brokers):
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
            try:
                replicas_by_partition = self._place(image, 0, num_partitions, replication_factor)
            except ApiException as exc:
                raise ApiException(
                    exc.error.code,
                    f"Unable to replicate the partition {replication_factor} time(s): {exc.error.message}",
                ) from None

        topic_id = _random_topic_id()
        records: list[Record] = [("TopicRecord", 0, {"name": topic.name, "topicId": topic_id})]
        # ConfigRecords go between TopicRecord and PartitionRecords
        config_records = self.configuration_control.topic_config_records(topic.name, topic.configs)
        records += config_records + clear_elr_records(image, config_records)
        for index, replicas in enumerate(replicas_by_partition):
            records.append(self._partition_record(image, topic_id, index, replicas))
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

    # --- DeleteTopics -------------------------------------------------------------------------------

    def delete_topics(
        self, image: ClusterMetadataImage, topics: Sequence[str | uuid.UUID]
    ) -> ControllerResult[list[DeleteTopicResult]]:
        """DeleteTopics by name or id: one result per distinct reference; removals are one batch."""
        references = list(dict.fromkeys(topics))
        counts: dict[str | uuid.UUID, int] = {}
        for reference in topics:
            counts[reference] = counts.get(reference, 0) + 1
        if not self.config["delete.topic.enable"]:
            disabled = ApiError(ErrorCode.topic_deletion_disabled)
            return ControllerResult(
                [], [DeleteTopicResult(*_name_and_id(ref), disabled) for ref in references]
            )
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
            if name in INTERNAL_TOPICS:
                # Beyond Kafka's KRaft controller, which removes them; Kafka's ZooKeeper-era
                # kafka-topics.sh refused, and InvalidTopicException is what Kafka answers a
                # DeleteRecords or Produce of an internal topic.
                error = ApiError(ErrorCode.invalid_topic_exception, f"Cannot delete internal topic {name}.")
                results.append(DeleteTopicResult(name, topic_id, error))
                continue
            chosen.add(topic_id)
            records.append(("RemoveTopicRecord", 0, {"topicId": topic_id}))
            results.append(DeleteTopicResult(name, topic_id))
        return ControllerResult(records, results)

    # --- CreatePartitions ---------------------------------------------------------------------------

    def create_partitions(
        self,
        image: ClusterMetadataImage,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> ControllerResult[ApiError]:
        """CreatePartitions for one topic: raise its partition count to `count`."""
        try:
            return ControllerResult(self._new_partitions(image, topic, count, assignments), NONE)
        except ApiException as exc:
            return ControllerResult([], exc.error)

    def _new_partitions(
        self,
        image: ClusterMetadataImage,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
    ) -> list[Record]:
        """ReplicationControlManager.createPartitions for one topic."""
        topic_image = image.topic_image(topic)
        if topic_image is None:
            raise ApiException(ErrorCode.unknown_topic_or_partition)
        existing = len(topic_image.partitions)
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
        replication_factor = len(topic_image.partitions[0].replicas)
        if assignments is not None:
            placements = []
            for i, brokers in enumerate(assignments):
                validate_manual_assignment(image, brokers, replication_factor)
                if not self.cluster_control.active_brokers(image, brokers):
                    raise ApiException(
                        ErrorCode.invalid_replica_assignment,
                        "All brokers specified in the manual partition assignment for partition "
                        f"{existing + i} are fenced or in controlled shutdown.",
                    )
                placements.append(tuple(brokers))
        else:
            placements = self._place(image, existing, additional, replication_factor)
        return [
            self._partition_record(image, topic_image.topic_id, existing + i, replicas)
            for i, replicas in enumerate(placements)
        ]

    # --- new partitions and their placement -----------------------------------------------------------

    def _partition_record(
        self, image: ClusterMetadataImage, topic_id: uuid.UUID, index: int, replicas: Sequence[int]
    ) -> Record:
        """A new partition: leader = first active replica, leader epoch 0, ISR = the active replicas."""
        isr = self.cluster_control.active_brokers(image, replicas)
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
            "directories": [self.cluster_control.default_dir(image, broker) for broker in replicas],
        }
        return ("PartitionRecord", partition_record_version(image.metadata_version or MV_3_9_IV0), data)

    def _place(
        self, image: ClusterMetadataImage, start_partition: int, num_partitions: int, replication_factor: int
    ) -> list[tuple[int, ...]]:
        """Replicas for new partitions from the StripedReplicaPlacer, over the registered brokers that are
        not in controlled shutdown (fenced ones only where needed), by their `broker.rack`."""
        usable = [
            UsableBroker(b.broker_id, b.rack, b.fenced) for b in self.cluster_control.usable_brokers(image)
        ]
        try:
            placements = self.replica_placer.place(
                PlacementSpec(start_partition, num_partitions, replication_factor), usable
            )
        except InvalidReplicationFactorException as exc:
            # CreatePartitions answers with the placer's sentence as is; CreateTopics prefixes it
            raise ApiException(ErrorCode.invalid_replication_factor, str(exc)) from None
        return [tuple(replicas) for replicas in placements]


def validate_manual_assignment(
    image: ClusterMetadataImage, brokers: Sequence[int], replication_factor: int | None
) -> None:
    """A manual assignment (CreateTopics, CreatePartitions, a reassignment's target): a non-empty list of
    distinct registered brokers, as long as the partitions before it."""
    if not brokers:
        raise ApiException(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    previous = None
    for broker in sorted(brokers):
        if broker not in image.brokers_by_id:
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
