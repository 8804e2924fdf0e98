"""A consumer group of the consumer rebalance protocol (KIP-848): Kafka's ConsumerGroup and
ConsumerGroupMember, as the records of __consumer_offsets (types 3-8 and 16) build them.

The state changes only by `replay`: the coordinator turns a heartbeat into records, replays them here
and writes them, and loading a partition replays the same records, so a restarted or failed-over
coordinator rebuilds exactly what the old one had. Assignments are by topic id, as in the records.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id (Kafka's Map<Uuid, Set<Integer>>)."""

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Record = tuple[int, dict[str, Any], dict[str, Any] | None]
"""(record type, key fields, value fields or None for a tombstone), camelCase as in the schemas."""


class MemberState(enum.IntEnum):
    """MemberState: where a member is in reconciling towards its target assignment."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        return cls(value) if value in (0, 1, 2) else cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One subscribed topic as the group last saw it (ConsumerGroupPartitionMetadataValue)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member of the classic protocol sent in its JoinGroup (ConsumerGroupMemberMetadataValue's
    tagged ClassicMemberMetadata): its session timeout and its protocols, in its order of preference."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]

    def as_record(self) -> dict[str, Any]:
        return {
            "sessionTimeoutMs": self.session_timeout_ms,
            "supportedProtocols": [{"name": n, "metadata": m} for n, m in self.supported_protocols],
        }

    @classmethod
    def from_record(cls, value: Mapping[str, Any] | None) -> ClassicMemberMetadata | None:
        if value is None:
            return None
        return cls(
            value["sessionTimeoutMs"],
            tuple((p["name"], bytes(p["metadata"])) for p in value["supportedProtocols"]),
        )


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """ConsumerGroupMember: immutable; a change is a new member (Kafka's Builder)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)
    classic_member_metadata: ClassicMemberMetadata | None = None
    """Set for a member of the classic protocol (JoinGroup/SyncGroup/Heartbeat) in a consumer group."""

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_member_metadata is not None

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    def with_epoch(self, member_epoch: int) -> ConsumerGroupMember:
        """Builder.updateMemberEpoch: the current epoch becomes the previous one."""
        return replace(self, member_epoch=member_epoch, previous_member_epoch=self.member_epoch)

    def subscription_fields(self) -> dict[str, Any]:
        """The ConsumerGroupMemberMetadataValue of this member."""
        return {
            "instanceId": self.instance_id,
            "rackId": self.rack_id,
            "clientId": self.client_id,
            "clientHost": self.client_host,
            "subscribedTopicNames": list(self.subscribed_topic_names),
            "subscribedTopicRegex": self.subscribed_topic_regex,
            "rebalanceTimeoutMs": self.rebalance_timeout_ms,
            "serverAssignor": self.server_assignor,
            "classicMemberMetadata": None
            if self.classic_member_metadata is None
            else self.classic_member_metadata.as_record(),
        }

    def assignment_fields(self) -> dict[str, Any]:
        """The ConsumerGroupCurrentMemberAssignmentValue of this member."""
        return {
            "memberEpoch": self.member_epoch,
            "previousMemberEpoch": self.previous_member_epoch,
            "state": int(self.state),
            "assignedPartitions": assignment_to_record(self.assigned_partitions),
            "partitionsPendingRevocation": assignment_to_record(self.partitions_pending_revocation),
        }


class ConsumerGroup:
    """The state of one consumer group, changed only by replaying its records."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.metadata_hash = 0
        """The hash of the subscribed topics' metadata its epoch record keeps (Kafka 4.1, KIP-1101)."""
        self.has_subscription_metadata_record = False
        """Whether the log holds a subscription-metadata record (type 4, Kafka 4.0's) the next
        heartbeat's update removes."""
        self.resolved_regexes: dict[str, frozenset[str]] = {}
        """Each subscribed regular expression and the topics its last resolution record (type 16,
        Kafka 4.0+) holds."""
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.session_timers: dict[str, Any] = {}
        self.rebalance_timers: dict[str, Any] = {}
        self.join_timers: dict[str, Any] = {}
        self.sync_timers: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.group_id!r}, epoch={self.group_epoch}, state={self.state.value})"

    @property
    def state(self) -> ConsumerGroupState:
        """maybeUpdateGroupState, computed when asked."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member owning the partition, -1 when it is free."""
        return self.partition_epochs.get((topic_id, partition), -1)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = None if instance_id is None else self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    @property
    def num_classic_protocol_members(self) -> int:
        return sum(1 for m in self.members.values() if m.uses_classic_protocol)

    def all_members_use_classic_protocol_except(self, member_id: str) -> bool:
        """True when `member_id` is the group's only member of the consumer protocol."""
        member = self.members.get(member_id)
        return (
            member is not None
            and not member.uses_classic_protocol
            and self.num_classic_protocol_members == len(self.members) - 1
        )

    def supports_classic_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        """A joining classic member must name a protocol every classic member supports."""
        if protocol_type != "consumer":
            return False
        classic = [m.classic_member_metadata for m in self.members.values() if m.classic_member_metadata]
        if not self.members or not classic:
            return bool(protocols)
        return any(all(name in {n for n, _ in c.supported_protocols} for c in classic) for name in protocols)

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """The member has target partitions another member still owns."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target_assignment.get(member.member_id, {}).items():
            assigned = member.assigned_partitions.get(topic_id, frozenset())
            for partition in partitions:
                if partition not in assigned and self.current_partition_epoch(topic_id, partition) != -1:
                    return True
        return False

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}

    def preferred_server_assignor(self) -> str | None:
        """computePreferredServerAssignor: the assignor most members name (ties: the smallest name)."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor is not None:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return None
        return min(counts, key=lambda name: (-counts[name], name))

    # --- replay -----------------------------------------------------------------------------------

    def replay(self, record_type: int, key: Mapping[str, Any], value: Mapping[str, Any] | None) -> None:
        """Apply one record of this group (GroupMetadataManager.replay)."""
        if record_type == CONSUMER_GROUP_METADATA:
            if value is not None:
                self.group_epoch = value["epoch"]
                self.metadata_hash = value.get("metadataHash", 0)
        elif record_type == CONSUMER_GROUP_PARTITION_METADATA:
            self.has_subscription_metadata_record = value is not None
        elif record_type == CONSUMER_GROUP_REGULAR_EXPRESSION:
            if value is None:
                self.resolved_regexes.pop(key["regularExpression"], None)
            else:
                self.resolved_regexes[key["regularExpression"]] = frozenset(value["topics"])
        elif record_type == CONSUMER_GROUP_MEMBER_METADATA:
            member_id = key["memberId"]
            if value is None:
                self._remove_member(member_id)
            else:
                old = self.members.get(member_id) or ConsumerGroupMember(member_id)
                self._update_member(
                    replace(
                        old,
                        instance_id=value["instanceId"],
                        rack_id=value["rackId"],
                        client_id=value["clientId"],
                        client_host=value["clientHost"],
                        subscribed_topic_names=tuple(value["subscribedTopicNames"]),
                        subscribed_topic_regex=value["subscribedTopicRegex"],
                        rebalance_timeout_ms=value["rebalanceTimeoutMs"],
                        server_assignor=value["serverAssignor"],
                        classic_member_metadata=ClassicMemberMetadata.from_record(
                            value.get("classicMemberMetadata")
                        ),
                    )
                )
        elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            self.assignment_epoch = value["assignmentEpoch"] if value is not None else -1
        elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target_assignment.pop(key["memberId"], None)
            else:
                self.target_assignment[key["memberId"]] = assignment_from_record(value["topicPartitions"])
        elif record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            old = self.members.get(key["memberId"])
            if old is None:
                return  # Kafka throws here; a lone assignment record of a removed member changes nothing
            if value is None:
                self._update_member(
                    replace(
                        old,
                        member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        assigned_partitions={},
                        partitions_pending_revocation={},
                    )
                )
            else:
                self._update_member(
                    replace(
                        old,
                        member_epoch=value["memberEpoch"],
                        previous_member_epoch=value["previousMemberEpoch"],
                        state=MemberState.from_value(value["state"]),
                        assigned_partitions=assignment_from_record(value["assignedPartitions"]),
                        partitions_pending_revocation=assignment_from_record(
                            value["partitionsPendingRevocation"]
                        ),
                    )
                )

    def _update_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        self._remove_partition_epochs(old)
        self.members[member.member_id] = member
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    self.partition_epochs[(topic_id, partition)] = member.member_epoch
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def _remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        self._remove_partition_epochs(old)
        if old is not None and old.instance_id is not None:
            if self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]

    def _remove_partition_epochs(self, member: ConsumerGroupMember | None) -> None:
        if member is None:
            return
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    if self.partition_epochs.get((topic_id, partition)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, partition)]

    def tombstones(self) -> list[Record]:
        """createGroupTombstoneRecords: every record of the group deleted, in Kafka's order."""
        gid = self.group_id
        records: list[Record] = []
        for member_id in self.members:
            records.append((CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member_key(gid, member_id), None))
        for member_id in self.members:
            records.append((CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, member_key(gid, member_id), None))
        records.append((CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, {"groupId": gid}, None))
        for member_id in self.members:
            records.append((CONSUMER_GROUP_MEMBER_METADATA, member_key(gid, member_id), None))
        for regex in sorted(self.resolved_regexes):
            records.append(
                (CONSUMER_GROUP_REGULAR_EXPRESSION, {"groupId": gid, "regularExpression": regex}, None)
            )
        records.append((CONSUMER_GROUP_PARTITION_METADATA, {"groupId": gid}, None))
        records.append((CONSUMER_GROUP_METADATA, {"groupId": gid}, None))
        return records


def member_key(group_id: str, member_id: str) -> dict[str, Any]:
    return {"groupId": group_id, "memberId": member_id}


def assignment_to_record(assignment: Assignment) -> list[dict[str, Any]]:
    return [
        {"topicId": topic_id, "partitions": sorted(partitions)}
        for topic_id, partitions in assignment.items()
        if partitions
    ]


def assignment_from_record(entries: Any) -> dict[uuid.UUID, frozenset[int]]:
    return {entry["topicId"]: frozenset(entry["partitions"]) for entry in entries if entry["partitions"]}


def replay_record(
    groups: dict[str, ConsumerGroup],
    record_type: int,
    key: Mapping[str, Any],
    value: Mapping[str, Any] | None,
) -> None:
    """Replay one record into `groups`: the group is created by its first record and dropped by the
    tombstone of its ConsumerGroupMetadata record (the last one its deletion writes)."""
    group_id = key["groupId"]
    group = groups.get(group_id)
    if group is None:
        if value is None:
            return
        group = groups[group_id] = ConsumerGroup(group_id)
    group.replay(record_type, key, value)
    if record_type == CONSUMER_GROUP_METADATA and value is None:
        del groups[group_id]
