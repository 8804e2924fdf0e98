"""Which replicas move where, as ReassignPartitionsCommand works it out for its throttles.

A partition's move has sources (the replicas it has now, or, for one already being reassigned, the
replicas that are not being added) and destinations (target replicas that are not sources). The leader
throttle covers every source ("partition:broker" in `leader.replication.throttled.replicas`, since any of
them may lead), the follower throttle every destination (`follower.replication.throttled.replicas`),
and the broker rates go on every broker that is a source or a destination.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ops.reassign.assignment import ReassignError, TopicPartition


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """One entry of ListPartitionReassignments: the full replica set during the move."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        """What the replica set will be once the move completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """What a cancel reverts to."""
        return tuple(r for r in self.replicas if r not in self.adding)


@dataclass(frozen=True, slots=True)
class PartitionMove:
    sources: frozenset[int]
    destinations: frozenset[int]


MoveMap = dict[str, dict[int, PartitionMove]]


def current_move_map(ongoing: Mapping[TopicPartition, OngoingReassignment]) -> MoveMap:
    """calculateCurrentMoveMap: the moves already under way."""
    moves: MoveMap = {}
    for tp, r in ongoing.items():
        moves.setdefault(tp.topic, {})[tp.partition] = PartitionMove(
            frozenset(r.replicas) - frozenset(r.adding), frozenset(r.adding)
        )
    return moves


def proposed_move_map(
    ongoing: Mapping[TopicPartition, OngoingReassignment],
    proposed: Mapping[TopicPartition, Iterable[int]],
    current: Mapping[TopicPartition, Iterable[int]],
) -> MoveMap:
    """calculateProposedMoveMap: ongoing moves, overridden by the proposed ones (whose sources are the
    ongoing move's sources when there is one, the current replicas otherwise)."""
    moves = current_move_map(ongoing)
    for tp, replicas in proposed.items():
        by_partition = moves.setdefault(tp.topic, {})
        if tp.partition in by_partition:
            sources = by_partition[tp.partition].sources
        elif tp in current:
            sources = frozenset(current[tp])
        else:
            raise ReassignError(f"Trying to reassign a topic partition {tp} with 0 replicas.")
        by_partition[tp.partition] = PartitionMove(sources, frozenset(replicas) - sources)
    return moves


def leader_throttles(moves: MoveMap) -> dict[str, str]:
    """Topic -> `leader.replication.throttled.replicas`: every source, "partition:broker" sorted as text."""
    return {
        topic: ",".join(sorted({f"{p}:{b}" for p, move in by_partition.items() for b in move.sources}))
        for topic, by_partition in moves.items()
    }


def follower_throttles(moves: MoveMap) -> dict[str, str]:
    """Topic -> `follower.replication.throttled.replicas`: every destination that is not a source."""
    return {
        topic: ",".join(
            sorted(
                {
                    f"{p}:{b}"
                    for p, move in by_partition.items()
                    for b in move.destinations
                    if b not in move.sources
                }
            )
        )
        for topic, by_partition in moves.items()
    }


def reassigning_brokers(moves: MoveMap) -> set[int]:
    """Every source and destination: the brokers that get the rate throttles."""
    return {
        b
        for by_partition in moves.values()
        for m in by_partition.values()
        for b in m.sources | m.destinations
    }
