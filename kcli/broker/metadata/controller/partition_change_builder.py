"""PartitionChangeBuilder: the one place a partition's leader, ISR and assignment are changed.

Every controller path that touches an existing partition (AlterPartition, fencing, unfencing,
controlled shutdown, unregistration, ElectLeaders, the preferred-leader and unclean-election passes)
states the target (ISR, replicas, recovery state, election type) and asks this builder for the
PartitionChangeRecord that gets there, or None when nothing would change (Kafka writes no no-op
records). The rules are Kafka's:

- the election keeps a valid current leader; ONLINE takes the first valid replica in replica order;
  PREFERRED tries replicas[0] first; UNCLEAN falls back to any acceptable replica, even outside the
  ISR, and then forces ISR = [leader] and LeaderRecoveryState RECOVERING (data may be lost);
- valid = acceptable (the caller's predicate: registered, unfenced, not shutting down, not the
  departing broker) and in the target ISR;
- naming a leader (even the same one, or -1) bumps the leader epoch when the record is replayed, so
  a leader change, a partition going leaderless, and a replica leaving the assignment all bump it;
- without ELR the ISR never becomes empty: the last member stays, even when dead, with leader -1;
- a reassignment (adding/removing replicas, KIP-455) completes in whichever build first sees every
  target replica in the target ISR: the removing replicas leave replicas and ISR, and the election
  then moves the leadership off a removed leader to the first valid replica of the target.

Eligible leader replicas (KIP-966) are not implemented: they need metadata.version 4.0-IV1, and this
controller writes 3.9-IV0, where Kafka keeps them off too. The ELR fields of a record are never set.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kcli.broker.metadata.controller.controller_result import Record
from kcli.broker.metadata.controller.partition_reassignment import PartitionReassignmentReplicas
from kcli.broker.metadata.image import MV_3_9_IV0, NO_LEADER, NO_LEADER_CHANGE, PartitionRegistration

log = logging.getLogger("kcli.broker.metadata")

# metadata.version levels that change what the builder writes (MetadataVersion).
MV_3_2_IV0 = 3
"""Leader recovery (KIP-704): an unclean election marks the leader RECOVERING."""
MV_3_6_IV0 = 12
"""From here an ISR shrink no longer needs a leader-epoch bump (KAFKA-15021 was fixed)."""
MV_3_7_IV2 = 17
"""Directory assignment (KIP-858): PartitionChangeRecord v1 carries directories."""

RECOVERED = 0
RECOVERING = 1
NO_RECOVERY_CHANGE = -1


class Election(enum.Enum):
    """How a leader is chosen when the current one is not valid any more."""

    PREFERRED = "PREFERRED"
    """The preferred replica (replicas[0]) if it is valid, else as ONLINE."""
    ONLINE = "ONLINE"
    """Keep the partition online from the ISR only."""
    UNCLEAN = "UNCLEAN"
    """ONLINE first, then any acceptable replica even outside the ISR (may lose data)."""


@dataclass(frozen=True, slots=True)
class ElectionResult:
    node: int
    unclean: bool


def partition_change_record_version(metadata_version: int) -> int:
    """MetadataVersion.partitionChangeRecordVersion (ELR's v2 is never reached here)."""
    return 1 if metadata_version >= MV_3_7_IV2 else 0


def change_record_is_no_op(record: dict[str, Any]) -> bool:
    """True when the record would change nothing but the partition epoch."""
    return (
        record.get("isr") is None
        and record.get("leader", NO_LEADER_CHANGE) == NO_LEADER_CHANGE
        and record.get("replicas") is None
        and record.get("removingReplicas") is None
        and record.get("addingReplicas") is None
        and record.get("leaderRecoveryState", NO_RECOVERY_CHANGE) == NO_RECOVERY_CHANGE
        and record.get("directories") is None
    )


class PartitionChangeBuilder:
    """Builds the PartitionChangeRecord that moves `partition` to the targets set on it.

    `is_acceptable_leader` answers whether a broker may lead (the caller decides who is departing or
    arriving); the target ISR, replicas, adding/removing replicas and recovery state start as the
    partition's current ones.
    """

    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        metadata_version: int = MV_3_9_IV0,
        *,
        default_dir: Callable[[int], uuid.UUID] | None = None,
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.metadata_version = metadata_version
        self.default_dir = default_dir
        self.election = Election.ONLINE
        self.target_isr: list[int] = list(partition.isr)
        self.target_replicas: list[int] = list(partition.replicas)
        self.target_removing: list[int] = list(partition.removing_replicas)
        self.target_adding: list[int] = list(partition.adding_replicas)
        self.target_leader_recovery_state = partition.leader_recovery_state
        self.target_directories: dict[int, uuid.UUID] = dict(
            zip(partition.replicas, partition.directories, strict=False)
        )

    # --- targets ------------------------------------------------------------------------------------

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = list(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.target_replicas = list(replicas)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self.target_removing = list(removing)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self.target_adding = list(adding)
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    # --- the election -------------------------------------------------------------------------------

    def is_valid_new_leader(self, replica: int) -> bool:
        """In the target ISR and acceptable (without ELR there is no other way to be valid)."""
        return replica in self.target_isr and self.is_acceptable_leader(replica)

    def elect_leader(self) -> ElectionResult:
        """The leader the election type picks; NO_LEADER when none qualifies."""
        if self.election is Election.PREFERRED:
            return self._elect_preferred_leader()
        return self._elect_any_leader()

    def _elect_preferred_leader(self) -> ElectionResult:
        preferred = self.target_replicas[0]
        if self.is_valid_new_leader(preferred):
            return ElectionResult(preferred, False)
        if self.is_valid_new_leader(self.partition.leader):
            return ElectionResult(self.partition.leader, False)
        for replica in self.target_replicas[1:]:
            if self.is_valid_new_leader(replica):
                return ElectionResult(replica, False)
        return ElectionResult(NO_LEADER, False)

    def _elect_any_leader(self) -> ElectionResult:
        if self.is_valid_new_leader(self.partition.leader):
            return ElectionResult(self.partition.leader, False)
        for replica in self.target_replicas:
            if self.is_valid_new_leader(replica):
                return ElectionResult(replica, False)
        if self.election is Election.UNCLEAN:
            for replica in self.target_replicas:
                if self.is_acceptable_leader(replica):
                    return ElectionResult(replica, True)
        return ElectionResult(NO_LEADER, False)

    def _try_election(self, record: dict[str, Any]) -> None:
        result = self.elect_leader()
        if result.node == self.partition.leader:
            return
        if result.unclean:
            # Data loss is possible, so this one is always logged.
            log.info(
                "Setting new leader for topicId %s, partition %d to %d using an unclean election",
                self.topic_id,
                self.partition_id,
                result.node,
            )
        record["leader"] = result.node
        if result.unclean:
            # The new leader's log is the truth from now on: it is the whole ISR.
            record["isr"] = [result.node]
            if self.partition.leader_recovery_state != RECOVERING and self.metadata_version >= MV_3_2_IV0:
                record["leaderRecoveryState"] = RECOVERING

    # --- building -----------------------------------------------------------------------------------

    def _complete_reassignment_if_needed(self) -> None:
        """Once every target replica is in the target ISR, the removing replicas leave both lists and the
        adding and removing lists are cleared (the leader epoch bump follows from the removal)."""
        completed = PartitionReassignmentReplicas(
            self.target_removing, self.target_adding, self.target_replicas
        ).maybe_complete(self.target_isr)
        if completed is None:
            return
        self.target_isr, self.target_replicas = completed.isr, completed.replicas
        self.target_removing, self.target_adding = [], []

    def _trigger_leader_epoch_bump_for_replica_reassignment(self, record: dict[str, Any]) -> None:
        """A replica leaving the assignment must be fenced: re-set the leader to bump its epoch."""
        if record.get("leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE:
            return
        if not set(self.partition.replicas) <= set(self.target_replicas):
            record["leader"] = self.partition.leader

    def _trigger_leader_epoch_bump_for_isr_shrink(self, record: dict[str, Any]) -> None:
        """Before MV 3.6 brokers needed a leader-epoch bump on every ISR shrink (KAFKA-15021)."""
        if self.metadata_version >= MV_3_6_IV0:
            return
        if record.get("leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE or record.get("isr") is None:
            return
        if not set(self.partition.isr) <= set(record["isr"]):
            record["leader"] = self.partition.leader

    def _set_assignment_changes(self, record: dict[str, Any]) -> None:
        if self.target_replicas:
            if self.metadata_version >= MV_3_7_IV2:
                directories = []
                for replica in self.target_replicas:
                    directory = self.target_directories.get(replica)
                    if directory is None:
                        if self.default_dir is None:
                            raise RuntimeError("no default directory provider for a new replica")
                        directory = self.default_dir(replica)
                    directories.append(directory)
                if tuple(directories) != tuple(self.partition.directories):
                    record["directories"] = directories
            if tuple(self.target_replicas) != self.partition.replicas:
                record["replicas"] = list(self.target_replicas)
        if tuple(self.target_removing) != self.partition.removing_replicas:
            record["removingReplicas"] = list(self.target_removing)
        if tuple(self.target_adding) != self.partition.adding_replicas:
            record["addingReplicas"] = list(self.target_adding)

    def build(self) -> Record | None:
        """The PartitionChangeRecord, or None when the partition would not change."""
        record: dict[str, Any] = {"partitionId": self.partition_id, "topicId": self.topic_id}
        self._complete_reassignment_if_needed()
        self._try_election(record)
        self._trigger_leader_epoch_bump_for_replica_reassignment(record)
        # Without ELR an empty target ISR is not written: the last member stays, leader -1.
        if "isr" not in record and self.target_isr and tuple(self.target_isr) != self.partition.isr:
            record["isr"] = list(self.target_isr)
        self._trigger_leader_epoch_bump_for_isr_shrink(record)
        self._set_assignment_changes(record)
        if self.target_leader_recovery_state != self.partition.leader_recovery_state:
            record["leaderRecoveryState"] = self.target_leader_recovery_state
        if change_record_is_no_op(record):
            return None
        return ("PartitionChangeRecord", partition_change_record_version(self.metadata_version), record)
