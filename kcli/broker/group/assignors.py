"""Server-side partition assignors of consumer groups (`group.consumer.assignors`): uniform and range.

An assignor maps each member to the partitions it should own (the group's target assignment); the
coordinator then moves members towards it (kcli.broker.group.reconciliation). Both see the members'
subscriptions as topic ids and the subscribed topics' partition counts.

- `uniform` (Kafka's UniformAssignor, the default): as few partition moves as possible while every
  member ends within one partition of the others that share its topics. kcli reaches that balance
  with its own sticky pass (keep what is still valid up to the member's share, hand out the rest to
  the least-loaded eligible member, then move single partitions from the most to the least loaded),
  not with Kafka's two builders, so the exact partition a member gets may differ from Kafka's.
- `range` (Kafka's RangeAssignor): per topic, the subscribed members in member-id order each get a
  contiguous range, the first `partitions % members` one partition more.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kcli.broker.group.consumer_group import Assignment


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of a member: its subscribed topic ids and its rack."""

    topic_ids: frozenset[uuid.UUID]
    rack_id: str | None = None


class PartitionAssignorError(Exception):
    """PartitionAssignorException: the coordinator answers UNKNOWN_SERVER_ERROR."""


def assign_uniform(
    members: Mapping[str, MemberSubscription],
    partition_counts: Mapping[uuid.UUID, int],
    current: Mapping[str, Assignment],
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """UniformAssignor.assign: balanced and sticky."""
    if not members:
        return {}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    load = dict.fromkeys(members, 0)
    eligible: dict[uuid.UUID, list[str]] = {}
    for member_id in sorted(members):
        for topic_id in members[member_id].topic_ids:
            if topic_id in partition_counts:
                eligible.setdefault(topic_id, []).append(member_id)
    all_partitions = sorted(
        ((topic_id, p) for topic_id in eligible for p in range(partition_counts[topic_id])),
        key=lambda tp: (str(tp[0]), tp[1]),
    )
    share = _shares(members, eligible, partition_counts)
    # Keep what each member still may own, up to its share (the ones it held first).
    for member_id in sorted(members):
        kept = 0
        for topic_id, partitions in sorted(current.get(member_id, {}).items(), key=lambda e: str(e[0])):
            if member_id not in eligible.get(topic_id, ()):
                continue
            for partition in sorted(partitions):
                key = (topic_id, partition)
                if partition < partition_counts[topic_id] and key not in owner and kept < share[member_id]:
                    owner[key] = member_id
                    kept += 1
        load[member_id] = kept
    # The rest to the least-loaded eligible member.
    for key in all_partitions:
        if key not in owner:
            member_id = min(eligible[key[0]], key=lambda m: (load[m], m))
            owner[key] = member_id
            load[member_id] += 1
    _balance(owner, load, eligible)
    result: dict[str, dict[uuid.UUID, set[int]]] = {member_id: {} for member_id in members}
    for (topic_id, partition), member_id in owner.items():
        result[member_id].setdefault(topic_id, set()).add(partition)
    return {m: {t: frozenset(p) for t, p in a.items()} for m, a in result.items()}


def _shares(
    members: Mapping[str, MemberSubscription],
    eligible: Mapping[uuid.UUID, list[str]],
    partition_counts: Mapping[uuid.UUID, int],
) -> dict[str, int]:
    """Each member's fair share: its topics' partitions spread over the members that share them,
    rounded up (exact for a homogeneous group, an upper bound otherwise; the balancing pass corrects)."""
    share: dict[str, int] = {}
    for member_id, subscription in members.items():
        total = 0.0
        for topic_id in subscription.topic_ids:
            if topic_id in eligible:
                total += partition_counts[topic_id] / len(eligible[topic_id])
        share[member_id] = -int(-total // 1)
    return share


def _balance(
    owner: dict[tuple[uuid.UUID, int], str],
    load: dict[str, int],
    eligible: Mapping[uuid.UUID, list[str]],
) -> None:
    """Move one partition at a time from a member to an eligible one with at least two fewer."""
    moved = True
    while moved:
        moved = False
        for key in sorted(owner, key=lambda tp: (str(tp[0]), -tp[1])):
            source = owner[key]
            target = min(eligible[key[0]], key=lambda m: (load[m], m))
            if load[target] + 1 < load[source]:
                owner[key] = target
                load[source] -= 1
                load[target] += 1
                moved = True


def assign_range(
    members: Mapping[str, MemberSubscription],
    partition_counts: Mapping[uuid.UUID, int],
    current: Mapping[str, Assignment],
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """RangeAssignor.assign: contiguous ranges per topic."""
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {member_id: {} for member_id in members}
    for topic_id, count in partition_counts.items():
        subscribed = sorted(m for m, s in members.items() if topic_id in s.topic_ids)
        if not subscribed:
            continue
        quota, extra = divmod(count, len(subscribed))
        start = 0
        for index, member_id in enumerate(subscribed):
            size = quota + (1 if index < extra else 0)
            if size:
                result[member_id][topic_id] = frozenset(range(start, start + size))
            start += size
    return result


ASSIGNORS = {"uniform": assign_uniform, "range": assign_range}
"""The assignors by name; Kafka's full class names map to the same ones."""

ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def configured_assignors(names: list[str]) -> list[str]:
    """`group.consumer.assignors` as assignor names, in order; unknown names are refused."""
    resolved = []
    for name in names:
        short = ASSIGNOR_CLASSES.get(name, name)
        if short not in ASSIGNORS:
            raise ValueError(f"Unknown server assignor {name}; kcli has {', '.join(ASSIGNORS)}")
        resolved.append(short)
    return resolved
