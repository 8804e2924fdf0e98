"""One classic consumer group: its state machine, members and committed offsets (Kafka's GroupMetadata).

This module only keeps state and enforces Kafka's rules about it: which transitions are legal, who is
leader, which protocol the members agree on, what a JoinGroup answer lists. It starts no timers and
writes nothing; the coordinator drives it and the storage layer persists it. Parked JoinGroup and
SyncGroup requests are plain callbacks here, so every rule can be exercised without an event loop.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from formats.internal import consumer_protocol_topics

CONSUMER_PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""


class GroupState(enum.Enum):
    """The classic states, with the names DescribeGroups and ListGroups put on the wire."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset as OffsetCommit carries it and __consumer_offsets stores it."""

    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only commits that asked for a retention time (OffsetCommit v2-v4)


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """An offset plus the log offset of the batch that stored it (None while the append is pending).

    When a regular and a transactional commit race for a partition, the one appended later wins.
    """

    appended_batch_offset: int | None
    offset: OffsetAndMetadata

    def older_than(self, other: CommitRecord) -> bool:
        mine, theirs = self.appended_batch_offset, other.appended_batch_offset
        return (-1 if mine is None else mine) < (-1 if theirs is None else theirs)


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup response says; `members` only for the leader, each (id, instance id, metadata)."""

    member_id: str
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(eq=False)
class Member:
    """One member (Kafka's MemberMetadata). `protocols` keeps the member's order of preference."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    is_new: bool = False
    heartbeat_timer: object | None = field(default=None, repr=False)
    """The coordinator's handle of this member's session deadline."""

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def has_satisfied_heartbeat(self) -> bool:
        """At its session deadline, does the member count as alive?

        A member parked in JoinGroup or SyncGroup is alive, unless it is new: a new member's join may
        hang forever (its socket is muted), so it only lives until the new-member deadline.
        """
        return not self.is_new and (self.is_awaiting_join or self.is_awaiting_sync)

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same names, same order, byte-identical metadata."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of the candidate protocols")


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """DescribeGroups' view: metadata and assignments only while Stable, as Kafka shows them."""

    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


DEAD_GROUP = GroupSummary(GroupState.DEAD.value, "", "", ())


class ClassicGroup:
    """A classic group (GroupMetadata). Not thread-safe: the broker's event loop is its lock."""

    def __init__(self, group_id: str, state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}
        self.subscribed_topics: set[str] | None = None
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], CommitRecord] = {}
        self.pending_offset_commits: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.pending_txn_offset_commits: dict[int, dict[tuple[str, int], CommitRecord]] = {}
        # Coordinator-owned timer handles (join phase and pending-sync deadline).
        self.join_timer: object | None = None
        self.join_timer_is_initial = False
        self.sync_timer: object | None = None
        self.pending_member_timers: dict[str, object] = {}

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
            f"{len(self.members)} member(s))"
        )

    # --- state ------------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[target]:
            raise RuntimeError(
                f"Group {self.group_id} should be in the "
                f"{','.join(sorted(s.value for s in _VALID_PREVIOUS_STATES[target]))} states before moving "
                f"to {target.value} state. Instead it is in {self.state.value} state"
            )
        self.state = target
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def in_states(self, lower_case_states: set[str]) -> bool:
        return self.state.value.lower() in lower_case_states

    # --- members ----------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def add(self, member: Member, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(
                    f"Static member with groupInstanceId={member.group_instance_id} cannot be added to "
                    f"group {self.group_id} since it is already a member"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        member.awaiting_join = callback
        if callback is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def clear_membership(self, now_ms: int) -> None:
        """Back to an Empty group that only holds offsets (its members became a consumer group's)."""
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()
        self.pending_sync_members.clear()
        self.num_members_awaiting_join = 0
        self.supported_protocols.clear()
        self.subscribed_topics = None
        self.new_member_added = False
        self.generation_id = 0
        self.protocol_type = self.protocol_name = self.leader_id = None
        self.state = GroupState.EMPTY
        self.current_state_timestamp = now_ms

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = callback

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """A static member restarted: re-key it under its new id, fencing whatever the old id had parked."""
        member = self.members.pop(old_member_id)
        self.maybe_invoke_join(member, JoinResult(old_member_id, ErrorCode.fenced_instance_id))
        self.maybe_invoke_sync(member, SyncResult(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else promote any member that did; False if nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    def maybe_invoke_join(self, member: Member, result: JoinResult) -> None:
        callback = member.awaiting_join
        if callback is not None:
            member.awaiting_join = None
            self.num_members_awaiting_join -= 1
            callback(result)

    def maybe_invoke_sync(self, member: Member, result: SyncResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        callback(result)
        return True

    # --- protocols --------------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == len(self.members) for name in names
        )

    def select_protocol(self) -> str:
        """The protocol with most first-choice votes among those every member supports.

        Kafka breaks ties in hash-map order; here the tie goes to the leader's preference order.
        """
        if not self.members:
            raise RuntimeError(f"Cannot select protocol for empty group {self.group_id}")
        candidates = {name for name, count in self.supported_protocols.items() if count == len(self.members)}
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name, _ in leader.protocols:
            if votes.get(name) == best:
                return name
        return max(votes, key=votes.__getitem__)

    def _count_protocols(self, member: Member, delta: int) -> None:
        for name, _ in member.protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + delta

    # --- generations ------------------------------------------------------------------------------

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """The leader's member list: every member with its metadata for the selected protocol."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE) or self.protocol_name is None:
            raise RuntimeError(f"Cannot obtain member metadata for group in state {self.state.value}")
        protocol = self.protocol_name
        return tuple((m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values())

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics of a "consumer" group, from each member's subscription; None when not known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = consumer_protocol_topics(member.metadata(self.protocol_name), subscription=True)
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Unknown subscriptions count as subscribed to everything, to be safe."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # --- views ------------------------------------------------------------------------------------

    def summary(self) -> GroupSummary:
        if self.is_(GroupState.STABLE) and self.protocol_name is not None:
            protocol = self.protocol_name
            members = tuple(
                MemberSummary(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(protocol),
                    m.assignment,
                )
                for m in self.members.values()
            )
            return GroupSummary(self.state.value, self.protocol_type or "", protocol, members)
        members = tuple(
            MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
            for m in self.members.values()
        )
        return GroupSummary(self.state.value, self.protocol_type or "", "", members)

    # --- offsets ----------------------------------------------------------------------------------

    def offset(self, topic: str, partition: int) -> OffsetAndMetadata | None:
        record = self.offsets.get((topic, partition))
        return None if record is None else record.offset

    def has_offsets(self) -> bool:
        return bool(self.offsets or self.pending_offset_commits or self.pending_txn_offset_commits)

    def has_pending_offset_commits(self, topic: str, partition: int) -> bool:
        key = (topic, partition)
        return key in self.pending_offset_commits or any(
            key in pending for pending in self.pending_txn_offset_commits.values()
        )

    def prepare_offset_commit(self, offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> None:
        """Regular commits whose write is under way: pending (UNSTABLE_OFFSET_COMMIT) until it ends."""
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, key: tuple[str, int], record: CommitRecord) -> None:
        """A regular commit is committed in the log: it becomes the committed offset unless a later one
        did, or its partition's offsets were removed (a deleted topic) while it was written."""
        if key in self.pending_offset_commits:
            current = self.offsets.get(key)
            if current is None or current.older_than(record):
                self.offsets[key] = record
        if self.pending_offset_commits.get(key) == record.offset:
            del self.pending_offset_commits[key]

    def fail_pending_offset_write(self, key: tuple[str, int], offset: OffsetAndMetadata) -> None:
        """The write failed or timed out: the commit is forgotten (a later pending one stays)."""
        if self.pending_offset_commits.get(key) == offset:
            del self.pending_offset_commits[key]

    def prepare_txn_offset_commit(
        self, producer_id: int, offsets: Mapping[tuple[str, int], OffsetAndMetadata]
    ) -> None:
        """Transactional commits whose write is under way: pending for the producer, not yet in the log."""
        pending = self.pending_txn_offset_commits.setdefault(producer_id, {})
        for key, offset in offsets.items():
            pending[key] = CommitRecord(None, offset)

    def on_txn_offset_commit_append(
        self, producer_id: int, key: tuple[str, int], record: CommitRecord
    ) -> None:
        """The transactional commit is committed in the log: it waits for the marker with its log offset."""
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None and key in pending and pending[key].offset == record.offset:
            pending[key] = record

    def fail_pending_txn_offset_commit(self, producer_id: int, key: tuple[str, int]) -> None:
        """The transactional commit's write failed or timed out: it is not pending any more."""
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None:
            pending.pop(key, None)
            if not pending:
                del self.pending_txn_offset_commits[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool) -> None:
        """A COMMIT marker moves the producer's offsets in (unless newer ones exist); ABORT drops them."""
        pending = self.pending_txn_offset_commits.pop(producer_id, None)
        if not is_commit or not pending:
            return
        for key, record in pending.items():
            current = self.offsets.get(key)
            if current is None or current.older_than(record):
                self.offsets[key] = record

    def remove_offsets(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], OffsetAndMetadata]:
        removed = {}
        for key in keys:
            self.pending_offset_commits.pop(key, None)
            for pending in self.pending_txn_offset_commits.values():
                pending.pop(key, None)
            record = self.offsets.pop(key, None)
            if record is not None:
                removed[key] = record.offset
        return removed

    def remove_all_offsets(self) -> dict[tuple[str, int], OffsetAndMetadata]:
        return self.remove_offsets(list(self.offsets))

    def remove_expired_offsets(
        self, now_ms: int, retention_ms: int
    ) -> dict[tuple[str, int], OffsetAndMetadata]:
        """GroupMetadata.removeExpiredOffsets: which offsets have outlived offsets.retention.minutes.

        Empty groups expire everything `retention_ms` after they became empty; Stable consumer groups
        expire only topics nobody subscribes to any more; commit-only groups expire each offset by its
        own commit time. An explicit expire timestamp (old commits) wins over all of that.
        """
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            state_ts = self.current_state_timestamp

            def base(record: CommitRecord) -> int:
                return state_ts if state_ts is not None else record.offset.commit_timestamp

            subscribed: set[str] = set()
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.is_(GroupState.STABLE)
        ):

            def base(record: CommitRecord) -> int:
                return record.offset.commit_timestamp

            subscribed = self.subscribed_topics
        elif self.protocol_type is None:

            def base(record: CommitRecord) -> int:
                return record.offset.commit_timestamp

            subscribed = set()
        else:
            return {}
        expired = {}
        for key, record in self.offsets.items():
            if key[0] in subscribed or key in self.pending_offset_commits:
                continue
            if record.offset.expire_timestamp >= 0:
                if now_ms >= record.offset.expire_timestamp:
                    expired[key] = record.offset
            elif now_ms - base(record) >= retention_ms:
                expired[key] = record.offset
        for key in expired:
            del self.offsets[key]
        return expired
