"""ReplicationControlManager: the changes to existing partitions: AlterPartition, partition
reassignments (KIP-455), ElectLeaders, and the leader elections that follow broker state changes
(fencing, unfencing, controlled shutdown, unregistration) or run periodically (preferred leaders,
unclean elections). Every such change goes through the PartitionChangeBuilder; which topics and
partitions exist, and where new replicas go, is the TopicControlManager's.

Each operation checks the request against the current image with Kafka's rules, error codes and
sentences, and returns the PartitionChangeRecords with the per-partition answers. Brokers come from
the ClusterControlManager (who may lead, who may join an ISR, which log dir) and the topics' min ISR
and unclean-election settings from the ConfigurationControlManager.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.cluster_control_manager import (
    BrokerControlState,
    BrokerHeartbeat,
    ClusterControlManager,
    HeartbeatReply,
)
from kcli.broker.metadata.controller.configuration_control_manager import ConfigurationControlManager
from kcli.broker.metadata.controller.controller_result import (
    NONE,
    ApiError,
    ApiException,
    ControllerResult,
    Record,
)
from kcli.broker.metadata.controller.partition_change_builder import (
    RECOVERED,
    RECOVERING,
    Election,
    PartitionChangeBuilder,
)
from kcli.broker.metadata.controller.partition_reassignment import (
    PartitionReassignmentReplicas,
    PartitionReassignmentRevert,
    is_reassignment_in_progress,
)
from kcli.broker.metadata.controller.topic_control_manager import validate_manual_assignment
from kcli.broker.metadata.image import (
    MV_3_9_IV0,
    NO_LEADER,
    NO_LEADER_CHANGE,
    ClusterMetadataImage,
    PartitionRegistration,
    TopicImage,
)
from kcli.protocol.messages import build, nested_type, response_type

log = logging.getLogger("kcli.broker.metadata")

ALTER_PARTITION = 56
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
_NO_THROTTLE = datetime.timedelta(0)

PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1
"""ElectionType ids of ElectLeaders (v0 is always PREFERRED)."""
MAX_ELECTIONS_PER_IMBALANCE = 1_000
"""ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE: elections per preferred-leader or unclean pass."""


class ReplicationControlManager:
    """Validates changes to existing partitions and builds their records from the current image."""

    def __init__(
        self, cluster_control: ClusterControlManager, configuration_control: ConfigurationControlManager
    ) -> None:
        self.cluster_control = cluster_control
        self.configuration_control = configuration_control

    # --- AlterPartition -----------------------------------------------------------------------------

    def alter_partition(self, image: ClusterMetadataImage, request: Any) -> ControllerResult[Any]:
        """AlterPartition from a partition leader: validate each partition in Kafka's order, build the
        change through the PartitionChangeBuilder, and answer with the resulting state.

        `request` is a kio AlterPartitionRequest; the answer is the AlterPartitionResponse of the same
        version. A stale broker epoch fails the whole request (top-level STALE_BROKER_EPOCH).
        """
        version = request.__version__
        response_cls = response_type(ALTER_PARTITION, version)
        topic_cls = nested_type(response_cls, "TopicData")
        partition_cls = nested_type(response_cls, "PartitionData")
        try:
            self.cluster_control.check_broker_epoch(image, request.broker_id, request.broker_epoch)
        except ApiException as exc:
            return ControllerResult(
                [], build(response_cls, throttle_time=_NO_THROTTLE, error_code=exc.error.code, topics=())
            )
        records: list[Record] = []
        topics = []
        for topic_data in request.topics:
            partitions = []
            name = getattr(topic_data, "topic_name", None)
            topic_id = topic_data.topic_id if version > 1 else image.topic_id(name or "")
            topic = None if topic_id is None else image.topics_by_id.get(topic_id)
            if topic is None:
                error = ErrorCode.unknown_topic_id if version > 1 else ErrorCode.unknown_topic_or_partition
                log.info(
                    "Rejecting AlterPartition request for unknown topic ID %s or name %s.",
                    topic_data.topic_id if version > 1 else None,
                    name,
                )
                for partition_data in topic_data.partitions:
                    partitions.append(_altered(partition_cls, partition_data.partition_index, error))
            else:
                # The partitions this request changes, as changed so far (a partition named twice
                # is checked against the first change, as Kafka's merged registration is).
                current: dict[int, PartitionRegistration] = dict(topic.partitions)
                for partition_data in topic_data.partitions:
                    index = partition_data.partition_index
                    if version >= 3:
                        new_isr = [(b.broker_id, b.broker_epoch) for b in partition_data.new_isr_with_epochs]
                    else:
                        new_isr = [(b, -1) for b in partition_data.new_isr]
                    recovery = getattr(partition_data, "leader_recovery_state", RECOVERED)
                    partition = current.get(index)
                    error = self._validate_alter_partition(
                        image,
                        request.broker_id,
                        topic.name,
                        index,
                        partition,
                        version,
                        partition_data,
                        new_isr,
                    )
                    if error is not ErrorCode.none:
                        partitions.append(_altered(partition_cls, index, error))
                        continue
                    assert partition is not None
                    builder = self._builder(image, partition, topic.topic_id, index)
                    if self.configuration_control.unclean_leader_election_enabled_for_topic(
                        image, topic.name
                    ):
                        builder.set_election(Election.UNCLEAN)
                    record = (
                        builder.set_target_isr([broker for broker, _ in new_isr])
                        .set_target_leader_recovery_state(recovery)
                        .build()
                    )
                    if record is not None:
                        records.append(record)
                        change = record[2]
                        partition = current[index] = partition.merge(change)
                        leader = change.get("leader", NO_LEADER_CHANGE)
                        if leader not in (NO_LEADER_CHANGE, request.broker_id):
                            # The new ISR completed a reassignment that moved the leadership away:
                            # the change is written, and the old leader must fetch new metadata.
                            error = (
                                ErrorCode.new_leader_elected if version > 1 else ErrorCode.fenced_leader_epoch
                            )
                            log.info(
                                "AlterPartition request from node %d for %s-%d completed the ongoing "
                                "partition reassignment and triggered a leadership change. Returning %s.",
                                request.broker_id,
                                topic.name,
                                index,
                                error.name,
                            )
                            partitions.append(_altered(partition_cls, index, error))
                            continue
                    partitions.append(
                        build(
                            partition_cls,
                            partition_index=index,
                            error_code=ErrorCode.none,
                            leader_id=partition.leader,
                            leader_epoch=partition.leader_epoch,
                            isr=tuple(partition.isr),
                            leader_recovery_state=partition.leader_recovery_state,
                            partition_epoch=partition.partition_epoch,
                        )
                    )
            topics.append(
                build(
                    topic_cls,
                    topic_id=topic_data.topic_id if version > 1 else None,
                    topic_name=name,
                    partitions=tuple(partitions),
                )
            )
        response = build(
            response_cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, topics=tuple(topics)
        )
        return ControllerResult(records, response)

    def _validate_alter_partition(
        self,
        image: ClusterMetadataImage,
        broker_id: int,
        topic: str,
        index: int,
        partition: PartitionRegistration | None,
        version: int,
        data: Any,
        new_isr: Sequence[tuple[int, int]],
    ) -> ErrorCode:
        """ReplicationControlManager.validateAlterPartitionData, in Kafka's order."""
        if partition is None:
            log.info("Rejecting AlterPartition request for unknown partition %s-%d.", topic, index)
            return ErrorCode.unknown_topic_or_partition
        # A leader ahead of this controller means this controller is behind: let the broker look again.
        if data.leader_epoch > partition.leader_epoch or data.partition_epoch > partition.partition_epoch:
            return ErrorCode.not_controller
        if data.leader_epoch < partition.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if broker_id != partition.leader:
            log.info(
                "Rejecting AlterPartition request from node %d for %s-%d because the current leader is %d.",
                broker_id,
                topic,
                index,
                partition.leader,
            )
            return ErrorCode.invalid_request
        if data.partition_epoch < partition.partition_epoch:
            return ErrorCode.invalid_update_version
        members = [broker for broker, _ in new_isr]
        if (
            len(set(members)) != len(members)
            or any(broker < 0 or broker not in partition.replicas for broker in members)
            or partition.leader not in members
        ):
            log.error(
                "Rejecting AlterPartition request from node %d for %s-%d because it specified an invalid ISR %s.",
                broker_id,
                topic,
                index,
                members,
            )
            return ErrorCode.invalid_request
        recovery = getattr(data, "leader_recovery_state", RECOVERED)
        if recovery == RECOVERING and len(members) > 1:
            return ErrorCode.invalid_request
        if partition.leader_recovery_state == RECOVERED and recovery == RECOVERING:
            return ErrorCode.invalid_request
        ineligible = self._ineligible_replicas_for_isr(image, new_isr)
        if ineligible:
            log.info(
                "Rejecting AlterPartition request from node %d for %s-%d because it specified ineligible "
                "replicas %s in the new ISR %s.",
                broker_id,
                topic,
                index,
                ", ".join(ineligible),
                members,
            )
            return ErrorCode.ineligible_replica if version > 1 else ErrorCode.operation_not_attempted
        return ErrorCode.none

    @staticmethod
    def _ineligible_replicas_for_isr(
        image: ClusterMetadataImage, new_isr: Sequence[tuple[int, int]]
    ) -> list[str]:
        """Members that may not join an ISR, with why; a broker epoch of -1 skips the epoch check."""
        ineligible = []
        for broker, epoch in new_isr:
            registration = image.broker(broker)
            if registration is None:
                ineligible.append(f"{broker} (not registered)")
            elif registration.in_controlled_shutdown:
                ineligible.append(f"{broker} (shutting down)")
            elif registration.fenced:
                ineligible.append(f"{broker} (fenced)")
            elif epoch != -1 and epoch != registration.broker_epoch:
                ineligible.append(
                    f"{broker} (broker epoch mismatch: requested={epoch} VS expected={registration.broker_epoch})"
                )
        return ineligible

    # --- ElectLeaders -----------------------------------------------------------------------------------

    def elect_leaders(self, image: ClusterMetadataImage, request: Any) -> ControllerResult[Any]:
        """ElectLeaders (a kio ElectLeadersRequest, v0-2): a PREFERRED or UNCLEAN election per named
        partition, or for every partition when none are named (then the ones that need no election
        are left out). An UNCLEAN request elects even where the topic's config forbids it: it is the
        operator's explicit choice. An unknown election type fails the whole request.
        """
        version = request.__version__
        response_cls = response_type(ELECT_LEADERS, version)
        topic_cls = nested_type(response_cls, "ReplicaElectionResult")
        partition_cls = nested_type(response_cls, "PartitionResult")
        election_type = getattr(request, "election_type", PREFERRED_ELECTION)
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            raise ApiException(ErrorCode.invalid_request, f"Unknown election type {election_type}")
        records: list[Record] = []

        def result(index: int, error: ApiError) -> Any:
            return build(
                partition_cls, partition_id=index, error_code=error.code, error_message=error.message
            )

        topics = []
        if request.topic_partitions is None:
            for name, topic_id in image.topic_ids.items():
                partitions = []
                for index in sorted(image.topics_by_id[topic_id].partitions):
                    error = self.elect_leader(image, name, index, election_type, records)
                    if error.code is not ErrorCode.election_not_needed:
                        partitions.append(result(index, error))
                topics.append(build(topic_cls, topic=name, partition_result=tuple(partitions)))
        else:
            for topic in request.topic_partitions:
                partitions = [
                    result(index, self.elect_leader(image, topic.topic, index, election_type, records))
                    for index in topic.partitions
                ]
                topics.append(build(topic_cls, topic=topic.topic, partition_result=tuple(partitions)))
        response = build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.none,
            replica_election_results=tuple(topics),
        )
        return ControllerResult(records, response)

    def elect_leader(
        self, image: ClusterMetadataImage, topic: str, index: int, election_type: int, records: list[Record]
    ) -> ApiError:
        """One partition of ElectLeaders: its answer, and its change record appended to `records`."""
        topic_id = image.topic_id(topic)
        if topic_id is None:
            return ApiError(ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}")
        partition = image.topics_by_id[topic_id].partitions.get(index)
        if partition is None:
            return ApiError(ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{index}")
        if (election_type == PREFERRED_ELECTION and partition.leader == partition.replicas[0]) or (
            election_type == UNCLEAN_ELECTION and partition.leader != NO_LEADER
        ):
            return ApiError(ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
        election = Election.PREFERRED if election_type == PREFERRED_ELECTION else Election.UNCLEAN
        record = self._builder(image, partition, topic_id, index).set_election(election).build()
        if record is None:
            if election_type == PREFERRED_ELECTION:
                return ApiError(
                    ErrorCode.preferred_leader_not_available, "The preferred leader was not available."
                )
            return ApiError(
                ErrorCode.eligible_leaders_not_available,
                "Eligible topic partition leaders are not available.",
            )
        records.append(record)
        return NONE

    # --- reassignments (KIP-455) --------------------------------------------------------------------------

    def alter_partition_reassignments(
        self, image: ClusterMetadataImage, request: Any
    ) -> ControllerResult[Any]:
        """AlterPartitionReassignments (a kio request, v0-1): start, change or cancel (replicas null)
        the reassignment of each named partition, answered per partition; every change is written in
        one batch. v1's AllowReplicationFactorChange false refuses a target whose size differs from
        the replicas the partition has or is heading for (KIP-860)."""
        version = request.__version__
        response_cls = response_type(ALTER_PARTITION_REASSIGNMENTS, version)
        topic_cls = nested_type(response_cls, "ReassignableTopicResponse")
        partition_cls = nested_type(response_cls, "ReassignablePartitionResponse")
        allow_rf_change = getattr(request, "allow_replication_factor_change", True)
        records: list[Record] = []
        topics = []
        succeeded = total = 0
        for topic in request.topics:
            partitions = []
            for target in topic.partitions:
                error = NONE
                try:
                    record = self._alter_partition_reassignment(image, topic.name, target, allow_rf_change)
                except ApiException as exc:
                    error = exc.error
                    log.info(
                        "Unable to alter partition reassignment for %s:%d because of an %s error: %s",
                        topic.name,
                        target.partition_index,
                        error.code.name,
                        error.message,
                    )
                except Exception:  # as Kafka's catch of Throwable: this partition fails, not the request
                    log.exception(
                        "Unable to alter partition reassignment for %s:%d", topic.name, target.partition_index
                    )
                    error = ApiError(ErrorCode.unknown_server_error)
                else:
                    succeeded += 1
                    if record is not None:
                        records.append(record)
                total += 1
                partitions.append(
                    build(
                        partition_cls,
                        partition_index=target.partition_index,
                        error_code=error.code,
                        error_message=error.message,
                    )
                )
            topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
        if total:
            log.info("Successfully altered %d out of %d partition reassignment(s).", succeeded, total)
        response = build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            allow_replication_factor_change=allow_rf_change,
            error_code=ErrorCode.none,
            error_message=None,
            responses=tuple(topics),
        )
        return ControllerResult(records, response)

    def _alter_partition_reassignment(
        self, image: ClusterMetadataImage, topic: str, target: Any, allow_rf_change: bool
    ) -> Record | None:
        topic_id = image.topic_id(topic)
        if topic_id is None:
            raise ApiException(ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}.")
        partition = image.topics_by_id[topic_id].partitions.get(target.partition_index)
        if partition is None:
            raise ApiException(
                ErrorCode.unknown_topic_or_partition,
                f"Unable to find partition {topic}:{target.partition_index}.",
            )
        if target.replicas is None:
            return self._cancel_partition_reassignment(
                image, topic, topic_id, target.partition_index, partition
            )
        if not allow_rf_change:
            self._validate_replication_factor_unchanged(partition, len(target.replicas))
        return self._change_partition_reassignment(
            image, topic_id, target.partition_index, partition, list(target.replicas)
        )

    def _cancel_partition_reassignment(
        self,
        image: ClusterMetadataImage,
        topic: str,
        topic_id: uuid.UUID,
        index: int,
        partition: PartitionRegistration,
    ) -> Record | None:
        """Back to the original replicas (PartitionReassignmentRevert). When no original replica is in the
        ISR, the first one becomes the ISR alone: refused unless the topic allows unclean elections. The
        leader is elected among the original replicas (uncleanly where the topic allows it); none being
        alive leaves the partition leaderless, as in Kafka."""
        if not is_reassignment_in_progress(partition):
            # Kafka's exception carries the code's default sentence, which the answer leaves out.
            raise ApiException(ErrorCode.no_reassignment_in_progress)
        revert = PartitionReassignmentRevert.of(partition)
        unclean_allowed = self.configuration_control.unclean_leader_election_enabled_for_topic(image, topic)
        if revert.unclean and not unclean_allowed:
            raise ApiException(
                ErrorCode.invalid_replica_assignment,
                f"Unable to revert partition assignment for {topic}:{index} because it would require "
                "an unclean leader election.",
            )
        builder = self._builder(image, partition, topic_id, index)
        if unclean_allowed:
            builder.set_election(Election.UNCLEAN)
        return (
            builder.set_target_isr(revert.isr)
            .set_target_replicas(revert.replicas)
            .set_target_removing([])
            .set_target_adding([])
            .build()
        )

    def _change_partition_reassignment(
        self,
        image: ClusterMetadataImage,
        topic_id: uuid.UUID,
        index: int,
        partition: PartitionRegistration,
        target: list[int],
    ) -> Record | None:
        """Start (or replace) a reassignment: the transitional replicas (target, then the removing ones),
        the adding and removing lists; the builder completes it at once when the ISR already covers the
        target (a reorder, or a shrink to replicas in sync)."""
        validate_manual_assignment(image, target, None)
        reassignment = PartitionReassignmentReplicas.of(partition.replicas, target)
        builder = self._builder(image, partition, topic_id, index)
        if tuple(reassignment.replicas) != partition.replicas:
            builder.set_target_replicas(reassignment.replicas)
        if reassignment.removing:
            builder.set_target_removing(reassignment.removing)
        if reassignment.adding:
            builder.set_target_adding(reassignment.adding)
        return builder.build()

    @staticmethod
    def _validate_replication_factor_unchanged(partition: PartitionRegistration, target_size: int) -> None:
        """KIP-860: the size the partition has, or is heading for when a reassignment is under way."""
        if is_reassignment_in_progress(partition):
            heading = (set(partition.replicas) | set(partition.adding_replicas)) - set(
                partition.removing_replicas
            )
            current = len(heading)
        else:
            current = len(partition.replicas)
        if current != target_size:
            raise ApiException(
                ErrorCode.invalid_replication_factor,
                f"The replication factor is changed from {current} to {target_size}",
            )

    def list_partition_reassignments(self, image: ClusterMetadataImage, request: Any) -> Any:
        """ListPartitionReassignments: the ongoing reassignments among the named partitions (unknown
        topics and partitions, and those not reassigning, are left out), or all of them."""
        response_cls = response_type(LIST_PARTITION_REASSIGNMENTS, request.__version__)
        topic_cls = nested_type(response_cls, "OngoingTopicReassignment")
        partition_cls = nested_type(response_cls, "OngoingPartitionReassignment")
        if request.topics is None:
            wanted = [
                (name, sorted(image.topics_by_id[topic_id].partitions))
                for name, topic_id in sorted(image.topic_ids.items())
            ]
        else:
            wanted = [(topic.name, list(topic.partition_indexes)) for topic in request.topics]
        topics = []
        for name, indexes in wanted:
            registrations = image.partitions_of(name)
            if registrations is None:
                continue
            ongoing = []
            for index in indexes:
                partition = registrations.get(index)
                if partition is None or not is_reassignment_in_progress(partition):
                    continue
                ongoing.append(
                    build(
                        partition_cls,
                        partition_index=index,
                        replicas=partition.replicas,
                        adding_replicas=partition.adding_replicas,
                        removing_replicas=partition.removing_replicas,
                    )
                )
            if ongoing:
                topics.append(build(topic_cls, name=name, partitions=tuple(ongoing)))
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            topics=tuple(topics),
        )

    # --- broker state changes --------------------------------------------------------------------------

    def process_broker_heartbeat(
        self, image: ClusterMetadataImage, heartbeat: BrokerHeartbeat, now: float
    ) -> ControllerResult[HeartbeatReply]:
        """BrokerHeartbeat: the BrokerHeartbeatManager's next state, and the records of the move.

        Fencing (asked, or the end of a controlled shutdown) removes the broker from every ISR and
        elects new leaders where it led; unfencing gives leaderless partitions whose ISR holds it a
        leader; entering controlled shutdown marks the registration and moves leadership away. The
        reply says ShouldShutDown only once the broker leads nothing and the active brokers have seen
        that.
        """
        cluster = self.cluster_control
        cluster.check_broker_epoch(image, heartbeat.broker_id, heartbeat.broker_epoch)
        registration = image.broker(heartbeat.broker_id)
        assert registration is not None
        broker_id, epoch = heartbeat.broker_id, registration.broker_epoch
        current, following = cluster.calculate_next_broker_state(
            image, heartbeat, lambda: self.has_leaderships(image, broker_id)
        )
        records: list[Record] = []
        if current is not following:
            if following in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                self.handle_broker_fenced(image, broker_id, records)
            elif following is BrokerControlState.UNFENCED:
                self.handle_broker_unfenced(image, broker_id, epoch, records)
            elif following is BrokerControlState.CONTROLLED_SHUTDOWN:
                self.handle_broker_in_controlled_shutdown(image, broker_id, epoch, records)
        cluster.touch(broker_id, following.fenced, heartbeat.metadata_offset, now)
        reply = HeartbeatReply(
            is_caught_up=heartbeat.metadata_offset >= registration.broker_epoch,
            is_fenced=following.fenced,
            should_shut_down=following.should_shut_down,
            in_controlled_shutdown=following.in_controlled_shutdown,
        )
        return ControllerResult(records, reply)

    def handle_broker_fenced(
        self, image: ClusterMetadataImage, broker_id: int, records: list[Record]
    ) -> None:
        """Remove the broker from every ISR, elect new leaders where it led, then fence it."""
        registration = image.broker(broker_id)
        if registration is None:
            raise RuntimeError(f"Can't find broker registration for broker {broker_id}")
        self.generate_leader_and_isr_updates(
            image,
            "handleBrokerFenced",
            broker_id,
            NO_LEADER,
            records,
            self.partitions_with_broker_in_isr(image, broker_id),
        )
        records.append(self.cluster_control.fence_record(broker_id, registration.broker_epoch))

    def handle_broker_unregistered(
        self, image: ClusterMetadataImage, broker_id: int, broker_epoch: int, records: list[Record]
    ) -> None:
        """Remove the broker from every ISR and re-elect where it led, then unregister it."""
        for partitions in (
            self.partitions_with_broker_in_isr(image, broker_id),
            self.partitions_with_broker_in_elr(image, broker_id),
        ):
            self.generate_leader_and_isr_updates(
                image, "handleBrokerUnregistered", broker_id, NO_LEADER, records, partitions
            )
        records.append(("UnregisterBrokerRecord", 0, {"brokerId": broker_id, "brokerEpoch": broker_epoch}))

    def handle_broker_unclean_shutdown(
        self, image: ClusterMetadataImage, broker_id: int, records: list[Record]
    ) -> None:
        """A new incarnation that cannot show a clean shutdown of the last one (its previous broker
        epoch is not the registered one), with ELR on: it leaves every ISR and ELR, and leads nothing
        until it is back in an ISR (ReplicationControlManager.handleBrokerShutdown, unclean branch)."""
        if not image.elr_enabled:
            return
        for partitions in (
            self.partitions_with_broker_in_isr(image, broker_id),
            self.partitions_with_broker_in_elr(image, broker_id),
        ):
            self.generate_leader_and_isr_updates(
                image,
                "handleBrokerUncleanShutdown",
                NO_LEADER,
                NO_LEADER,
                records,
                partitions,
                broker_with_unclean_shutdown=broker_id,
            )

    def handle_broker_unfenced(
        self, image: ClusterMetadataImage, broker_id: int, broker_epoch: int, records: list[Record]
    ) -> None:
        """Unfence the broker, then give it the leaderless partitions whose ISR holds it."""
        records.append(self.cluster_control.fence_record(broker_id, broker_epoch, fenced=False))
        self.generate_leader_and_isr_updates(
            image,
            "handleBrokerUnfenced",
            NO_LEADER,
            broker_id,
            records,
            self.partitions_with_no_leader(image),
        )

    def handle_broker_in_controlled_shutdown(
        self, image: ClusterMetadataImage, broker_id: int, broker_epoch: int, records: list[Record]
    ) -> None:
        """Mark the registration in controlled shutdown, remove it from every ISR, move its leaderships."""
        registration = image.broker(broker_id)
        if registration is not None and not registration.in_controlled_shutdown:
            change = {"brokerId": broker_id, "brokerEpoch": broker_epoch, "inControlledShutdown": 1}
            records.append(("BrokerRegistrationChangeRecord", 1, change))
        self.generate_leader_and_isr_updates(
            image,
            f"enterControlledShutdown[{broker_id}]",
            broker_id,
            NO_LEADER,
            records,
            self.partitions_with_broker_in_isr(image, broker_id),
        )

    def generate_leader_and_isr_updates(
        self,
        image: ClusterMetadataImage,
        context: str,
        broker_to_remove: int,
        broker_to_add: int,
        records: list[Record],
        partitions: Iterable[tuple[TopicImage, int, PartitionRegistration]],
        broker_with_unclean_shutdown: int = NO_LEADER,
    ) -> None:
        """One PartitionChangeRecord per partition that changes when `broker_to_remove` leaves (never an
        acceptable leader, out of the ISR), `broker_to_add` arrives (acceptable even though the image
        still reads it fenced) or `broker_with_unclean_shutdown` came back from an unclean shutdown
        (not acceptable, out of the ISR and the ELR). Topics that allow it elect uncleanly."""

        def acceptable(broker: int) -> bool:
            return broker not in (broker_to_remove, broker_with_unclean_shutdown) and (
                broker == broker_to_add or self.cluster_control.is_active(image, broker)
            )

        leaving = (broker_to_remove, broker_with_unclean_shutdown)
        before = len(records)
        for topic, index, partition in partitions:
            builder = self._builder(image, partition, topic.topic_id, index, acceptable)
            if self.configuration_control.unclean_leader_election_enabled_for_topic(image, topic.name):
                builder.set_election(Election.UNCLEAN)
            if broker_with_unclean_shutdown != NO_LEADER:
                builder.set_unclean_shutdown_replicas([broker_with_unclean_shutdown])
            builder.set_target_isr([broker for broker in partition.isr if broker not in leaving])
            record = builder.build()
            if record is not None:
                records.append(record)
        if len(records) != before:
            log.info("%s: changing %d partition(s)", context, len(records) - before)

    @staticmethod
    def partitions_with_broker_in_isr(
        image: ClusterMetadataImage, broker_id: int
    ) -> list[tuple[TopicImage, int, PartitionRegistration]]:
        return _partitions_where(image, lambda partition: broker_id in partition.isr)

    @staticmethod
    def partitions_with_broker_in_elr(
        image: ClusterMetadataImage, broker_id: int
    ) -> list[tuple[TopicImage, int, PartitionRegistration]]:
        return _partitions_where(image, lambda partition: broker_id in partition.elr)

    @staticmethod
    def partitions_with_no_leader(
        image: ClusterMetadataImage,
    ) -> list[tuple[TopicImage, int, PartitionRegistration]]:
        return _partitions_where(image, lambda partition: partition.leader == NO_LEADER)

    @staticmethod
    def has_leaderships(image: ClusterMetadataImage, broker_id: int) -> bool:
        return any(
            partition.leader == broker_id
            for topic in image.topics_by_id.values()
            for partition in topic.partitions.values()
        )

    # --- periodic elections ------------------------------------------------------------------------------

    def maybe_balance_partition_leaders(self, image: ClusterMetadataImage) -> ControllerResult[bool]:
        """A PREFERRED election for imbalanced partitions (leader is not replicas[0]), up to
        MAX_ELECTIONS_PER_IMBALANCE; the answer says whether the cap was hit (run again at once)."""
        records: list[Record] = []
        for topic in image.topics_by_id.values():
            for index, partition in sorted(topic.partitions.items()):
                if len(records) >= MAX_ELECTIONS_PER_IMBALANCE:
                    return ControllerResult(records, True)
                if partition.leader == partition.replicas[0]:
                    continue
                record = (
                    self._builder(image, partition, topic.topic_id, index)
                    .set_election(Election.PREFERRED)
                    .build()
                )
                if record is not None:
                    records.append(record)
        return ControllerResult(records, len(records) >= MAX_ELECTIONS_PER_IMBALANCE)

    def maybe_elect_unclean_leaders(self, image: ClusterMetadataImage) -> ControllerResult[bool]:
        """An UNCLEAN election for leaderless partitions of topics that allow it, up to
        MAX_ELECTIONS_PER_IMBALANCE; the answer says whether the cap was hit."""
        records: list[Record] = []
        for topic, index, partition in self.partitions_with_no_leader(image):
            if len(records) >= MAX_ELECTIONS_PER_IMBALANCE:
                break
            if not self.configuration_control.unclean_leader_election_enabled_for_topic(image, topic.name):
                continue
            record = (
                self._builder(image, partition, topic.topic_id, index).set_election(Election.UNCLEAN).build()
            )
            if record is None:
                log.warning(
                    "Cannot trigger unclean leader election for offline partition %s-%d: %s",
                    topic.name,
                    index,
                    ErrorCode.eligible_leaders_not_available.name.upper(),
                )
                continue
            log.error("Triggering unclean leader election for offline partition %s-%d.", topic.name, index)
            records.append(record)
        return ControllerResult(records, len(records) >= MAX_ELECTIONS_PER_IMBALANCE)

    def _builder(
        self,
        image: ClusterMetadataImage,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        index: int,
        is_acceptable_leader: Callable[[int], bool] | None = None,
    ) -> PartitionChangeBuilder:
        """A builder for one partition; acceptable leaders are the active brokers unless told otherwise.
        It keeps eligible leader replicas when the cluster has them on, against the topic's effective
        min.insync.replicas."""
        return PartitionChangeBuilder(
            partition,
            topic_id,
            index,
            is_acceptable_leader or (lambda broker: self.cluster_control.is_active(image, broker)),
            image.metadata_version or MV_3_9_IV0,
            default_dir=lambda broker: self.cluster_control.default_dir(image, broker),
            # Only the ELR reads min ISR: a cluster without it skips the config lookups.
            min_isr=self.topic_effective_min_isr(image, image.topics_by_id[topic_id])
            if image.elr_enabled
            else 1,
            eligible_leader_replicas_enabled=image.elr_enabled,
        )

    def topic_effective_min_isr(self, image: ClusterMetadataImage, topic: TopicImage) -> int:
        """ReplicationControlManager.getTopicEffectiveMinIsr: the topic's min.insync.replicas (its
        override, else the dynamic broker configs, else the static one), at most its replication factor
        (that of partition 0)."""
        min_isr = self.configuration_control.min_insync_replicas_for_topic(image, topic.name)
        first = topic.partitions.get(0)
        return min_isr if first is None else min(min_isr, len(first.replicas))


def _altered(partition_cls: type, index: int, error: ErrorCode) -> Any:
    """An AlterPartition partition answer that carries only an error (the other fields at the schema's
    defaults, as Kafka leaves them)."""
    return build(
        partition_cls,
        partition_index=index,
        error_code=error,
        leader_id=0,
        leader_epoch=0,
        isr=(),
        leader_recovery_state=RECOVERED,
        partition_epoch=0,
    )


def _partitions_where(
    image: ClusterMetadataImage, keep: Callable[[PartitionRegistration], bool]
) -> list[tuple[TopicImage, int, PartitionRegistration]]:
    """(topic, index, partition) of every partition `keep` accepts, topic by topic, in index order."""
    return [
        (topic, index, partition)
        for topic in image.topics_by_id.values()
        for index, partition in sorted(topic.partitions.items())
        if keep(partition)
    ]
