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

Eligible leader replicas (KIP-966 part 1), when the caller enables them (eligible.leader.replicas.version
1 on metadata.version 4.0-IV1 or later), as Kafka's builder keeps them:

- populateTargetElr: while the target ISR is below min ISR, the members that leave it join the ELR
  (the old ISR and ELR, less the target ISR and any replica that shut down uncleanly); once the ISR
  reaches min ISR the ELR and the last known ELR are cleared;
- valid = acceptable and in the target ISR, or, when the target ISR is empty, in the ELR; a leader
  elected from the ELR becomes the ISR alone and leaves the ELR;
- the ISR may become empty (the partition keeps its ELR instead of a dead last member);
- the last known ELR holds the last leader once the ISR empties (balanced recovery), is cleared when
  the partition has a leader again, and that leader is elected (as an unclean, RECOVERING election)
  when the ISR and the ELR are both empty and it is acceptable again (Kafka 4.1, KAFKA-19522);
- an unclean election clears the ELR and the last known ELR.

Set orders follow Java's HashSet iteration, as Kafka's records have them.
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
from kcli.features import MV_3_2_IV0, MV_3_6_IV0, MV_3_7_IV2
from kcli.features import partition_change_record_version as partition_change_record_version

log = logging.getLogger("kcli.broker.metadata")

# MV_3_2_IV0: leader recovery (KIP-704), an unclean election marks the leader RECOVERING.
# MV_3_6_IV0: from here an ISR shrink no longer needs a leader-epoch bump (KAFKA-15021 was fixed).
# MV_3_7_IV2: directory assignment (KIP-858), PartitionChangeRecord v1 carries directories.
# MV_4_0_IV1: ELR (KIP-966), PartitionChangeRecord v2 carries the ELR and the last known ELR.

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
        and record.get("eligibleLeaderReplicas") is None
        and record.get("lastKnownElr") is None
    )


class JavaHashSet:
    """The iteration order of a java.util.HashSet of Integers, which Kafka's ELR lists come out in.

    Elements sit in buckets by (h ^ h >>> 16) & (capacity - 1), in insertion order within a bucket;
    the table starts at the capacity `new HashSet<>(collection)` picks and doubles past 3/4 full
    (a split keeps each bucket's order). Buckets never get long enough here to become trees."""

    def __init__(self, initial: Sequence[int]) -> None:
        wanted = max(int(len(initial) / 0.75) + 1, 16)
        self.capacity = 1 << (wanted - 1).bit_length()
        self.items: list[int] = []
        for item in initial:
            self.add(item)

    def add(self, item: int) -> None:
        if item in self.items:
            return
        self.items.append(item)
        if len(self.items) > self.capacity * 3 // 4:
            self.capacity *= 2

    def __iter__(self):  # type: ignore[no-untyped-def]
        def bucket(item: int) -> int:
            h = item & 0xFFFFFFFF
            return (h ^ (h >> 16)) & (self.capacity - 1)

        return iter(sorted(self.items, key=bucket))  # stable: insertion order within a bucket


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
        min_isr: int = 1,
        eligible_leader_replicas_enabled: bool = False,
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.metadata_version = metadata_version
        self.default_dir = default_dir
        self.min_isr = min_isr
        """The topic's effective min.insync.replicas (at most its replication factor)."""
        self.eligible_leader_replicas_enabled = eligible_leader_replicas_enabled
        self.use_last_known_leader_in_balanced_recovery = True
        """Kafka's default: the last known ELR holds the last leader, electable when all else is gone."""
        self.unclean_shutdown_replicas: list[int] | None = None
        self.target_elr: list[int] = list(partition.elr)
        self.target_last_known_elr: list[int] = list(partition.last_known_elr)
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

    def set_eligible_leader_replicas_enabled(self, enabled: bool) -> PartitionChangeBuilder:
        self.eligible_leader_replicas_enabled = enabled
        return self

    def set_unclean_shutdown_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        """Replicas that came back from an unclean shutdown: never in the ELR."""
        self.unclean_shutdown_replicas = list(replicas)
        return self

    def set_use_last_known_leader_in_balanced_recovery(self, use: bool) -> PartitionChangeBuilder:
        self.use_last_known_leader_in_balanced_recovery = use
        return self

    # --- the election -------------------------------------------------------------------------------

    def is_valid_new_leader(self, replica: int) -> bool:
        """Acceptable, and in the target ISR, or in the ELR when the target ISR is empty."""
        return (
            replica in self.target_isr or (not self.target_isr and replica in self.target_elr)
        ) and self.is_acceptable_leader(replica)

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
        if self._can_elect_last_known_leader():
            return ElectionResult(self.partition.last_known_elr[0], True)
        return ElectionResult(NO_LEADER, False)

    def _elect_any_leader(self) -> ElectionResult:
        if self.is_valid_new_leader(self.partition.leader):
            return ElectionResult(self.partition.leader, False)
        for replica in self.target_replicas:
            if self.is_valid_new_leader(replica):
                return ElectionResult(replica, False)
        if self._can_elect_last_known_leader():
            return ElectionResult(self.partition.last_known_elr[0], True)
        if self.election is Election.UNCLEAN:
            for replica in self.target_replicas:
                if self.is_acceptable_leader(replica):
                    return ElectionResult(replica, True)
        return ElectionResult(NO_LEADER, False)

    def _can_elect_last_known_leader(self) -> bool:
        """Balanced recovery: with the ISR and the ELR both empty, the single last known leader, once it
        is acceptable again (Kafka 4.1's rule; before KAFKA-19522 a fenced one was elected too)."""
        if not self.eligible_leader_replicas_enabled or not self.use_last_known_leader_in_balanced_recovery:
            return False
        if self.target_elr or self.target_isr:
            return False
        if len(self.partition.last_known_elr) != 1:
            return False
        return self.is_acceptable_leader(self.partition.last_known_elr[0])

    def _try_election(self, record: dict[str, Any]) -> None:
        result = self.elect_leader()
        if result.node == self.partition.leader:
            return
        if result.node in self.target_elr:
            # Elected from the ELR: it is the whole ISR now, and no longer eligible-only.
            self.target_isr = [result.node]
            self.target_elr = [replica for replica in self.target_elr if replica != result.node]
        elif result.unclean:
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

    # --- eligible leader replicas (KIP-966) -------------------------------------------------------------

    def _maybe_populate_target_elr(self) -> None:
        """Below min ISR, who leaves the ISR joins the ELR; at or above it, both ELR lists are cleared."""
        if not self.eligible_leader_replicas_enabled:
            return
        if len(self.target_isr) >= self.min_isr:
            self.target_elr, self.target_last_known_elr = [], []
            return
        target_isr = set(self.target_isr)
        unclean = self.unclean_shutdown_replicas or ()
        candidates = JavaHashSet(self.target_elr)
        for replica in self.partition.isr:
            candidates.add(replica)
        self.target_elr = [r for r in candidates if r not in target_isr and r not in unclean]
        # The last known ELR: everyone who was in the ISR or the ELR since it went below min ISR,
        # less the target ISR and the ELR.
        for replica in self.target_last_known_elr:
            candidates.add(replica)
        self.target_last_known_elr = [
            r for r in candidates if r not in target_isr and r not in self.target_elr
        ]

    def _maybe_update_record_elr(self, record: dict[str, Any]) -> None:
        clean_election = "isr" not in record  # an unclean election has set the ISR already
        if not clean_election or not self.eligible_leader_replicas_enabled:
            self.target_elr, self.target_last_known_elr = [], []
        if tuple(self.target_elr) != self.partition.elr:
            record["eligibleLeaderReplicas"] = list(self.target_elr)
        leader = record.get("leader", NO_LEADER_CHANGE)
        if (
            self.use_last_known_leader_in_balanced_recovery
            and len(self.partition.last_known_elr) == 1
            and (leader == NO_LEADER or (leader == NO_LEADER_CHANGE and self.partition.leader == NO_LEADER))
        ):
            # The last known leader stays while the partition has no leader.
            self.target_last_known_elr = list(self.partition.last_known_elr)
        if self.use_last_known_leader_in_balanced_recovery:
            return  # the last known ELR holds the last leader: _maybe_update_last_known_leader sets it
        if tuple(self.target_last_known_elr) != self.partition.last_known_elr:
            record["lastKnownElr"] = list(self.target_last_known_elr)

    def _maybe_update_last_known_leader(self, record: dict[str, Any]) -> None:
        if not self.use_last_known_leader_in_balanced_recovery or not self.eligible_leader_replicas_enabled:
            return
        partition = self.partition
        leader = record.get("leader", NO_LEADER_CHANGE)
        if (
            record.get("isr") is not None
            and not record["isr"]
            and (len(partition.last_known_elr) != 1 or partition.last_known_elr[0] != partition.leader)
        ):
            # The first time the partition becomes leaderless: remember its last leader.
            record["lastKnownElr"] = [partition.leader]
        elif (
            leader >= 0 or (partition.leader != NO_LEADER and leader != NO_LEADER)
        ) and partition.last_known_elr:
            # It has, or keeps, a leader: there is nothing to recover.
            record["lastKnownElr"] = []

    # --- building -------------------------------------------------------------------------------------

    def build(self) -> Record | None:
        """The PartitionChangeRecord, or None when the partition would not change."""
        record: dict[str, Any] = {"partitionId": self.partition_id, "topicId": self.topic_id}
        self._complete_reassignment_if_needed()
        self._maybe_populate_target_elr()
        self._try_election(record)
        self._trigger_leader_epoch_bump_for_replica_reassignment(record)
        self._maybe_update_record_elr(record)
        # Without ELR an empty target ISR is not written: the last member stays, leader -1.
        if (
            "isr" not in record
            and (self.target_isr or self.eligible_leader_replicas_enabled)
            and tuple(self.target_isr) != self.partition.isr
        ):
            if not self.target_isr:
                log.debug("%s-%d will have an empty ISR", self.topic_id, self.partition_id)
            record["isr"] = list(self.target_isr)
        self._trigger_leader_epoch_bump_for_isr_shrink(record)
        self._maybe_update_last_known_leader(record)
        self._set_assignment_changes(record)
        if self.target_leader_recovery_state != self.partition.leader_recovery_state:
            record["leaderRecoveryState"] = self.target_leader_recovery_state
        if change_record_is_no_op(record):
            return None
        return ("PartitionChangeRecord", partition_change_record_version(self.metadata_version), record)
