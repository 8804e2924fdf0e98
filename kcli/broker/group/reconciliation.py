"""Incremental reconciliation of a member towards its target assignment (Kafka's CurrentAssignmentBuilder).

A partition moves in two steps so no two members ever own it at once: the coordinator first asks
its owner to revoke it (UNREVOKED_PARTITIONS, the member keeps its epoch until the heartbeat's owned
partitions no longer list it), and only then hands it to the new member, which waits for it in
UNRELEASED_PARTITIONS while the partition's epoch still belongs to someone else.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from kcli.broker.group.consumer_group import Assignment, ConsumerGroupMember, MemberState

OwnedPartitions = list[tuple[uuid.UUID, Iterable[int]]] | None
"""The heartbeat's TopicPartitions: None when the member did not send them."""


class FencedMemberEpoch(Exception):
    """FENCED_MEMBER_EPOCH: the member must abandon its partitions and rejoin."""


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    current_partition_epoch: Callable[[uuid.UUID, int], int],
    owned: OwnedPartitions,
) -> ConsumerGroupMember:
    """CurrentAssignmentBuilder.build: the member's next state, or the member itself if unchanged."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(
                member, member.member_epoch, target_epoch, target, current_partition_epoch, owned
            )
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next_assignment(
            member, member.member_epoch + 1, target_epoch, target, current_partition_epoch, owned
        )
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(
            member, member.member_epoch, target_epoch, target, current_partition_epoch, owned
        )
    if owned is None or owned:
        raise FencedMemberEpoch(
            "The consumer group member is in a unknown state. The member must abandon all its "
            "partitions and rejoin."
        )
    return _next_assignment(member, target_epoch, target_epoch, target, current_partition_epoch, owned)


def _owns_any(owned: OwnedPartitions, assignment: Assignment) -> bool:
    """ownsRevokedPartitions: unknown owned partitions count as still owned."""
    if owned is None:
        return True
    return any(
        partition in assignment.get(topic_id, frozenset())
        for topic_id, partitions in owned
        for partition in partitions
    )


def _next_assignment(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    current_partition_epoch: Callable[[uuid.UUID, int], int],
    owned: OwnedPartitions,
) -> ConsumerGroupMember:
    """computeNextAssignment."""
    has_unreleased = False
    assigned: dict[uuid.UUID, set[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, set[int]] = {}
    current = member.assigned_partitions
    for topic_id in set(target) | set(current):
        wanted = target.get(topic_id, frozenset())
        held = current.get(topic_id, frozenset())
        kept = held & wanted
        to_revoke = held - kept
        to_assign = set(wanted - kept)
        unreleased = {p for p in to_assign if current_partition_epoch(topic_id, p) != -1}
        if unreleased:
            has_unreleased = True
            to_assign -= unreleased
        if kept:
            assigned[topic_id] = set(kept)
        if to_revoke:
            revoking[topic_id] = frozenset(to_revoke)
        if to_assign:
            pending[topic_id] = to_assign
    if revoking and _owns_any(owned, revoking):
        return replace(
            member.with_epoch(member_epoch),
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=_frozen(assigned),
            partitions_pending_revocation=revoking,
        )
    for topic_id, partitions in pending.items():
        assigned.setdefault(topic_id, set()).update(partitions)
    state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
    return replace(
        member.with_epoch(target_epoch),
        state=state,
        assigned_partitions=_frozen(assigned),
        partitions_pending_revocation={},
    )


def _frozen(assignment: Mapping[uuid.UUID, set[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id: frozenset(p) for topic_id, p in assignment.items() if p}
