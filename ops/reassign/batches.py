"""Sending a plan in batches, with a cap on the moves each broker takes part in at once.

Kafka's tool sends the whole plan in one AlterPartitionReassignments, so a big plan makes every broker
copy everything at once (Cruise Control caps concurrent moves per broker for that reason, 5 by
default, which is kcli's default too). A move takes one slot on each broker that gains a replica (it
fetches the data) and one on the partition's leader (it serves it). A move that only drops or reorders
replicas copies nothing and takes no slot. Largest moves go first, so the long ones are not left for
the end; a move whose brokers are busy waits while smaller ones that fit go ahead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ops.reassign.assignment import TopicPartition

DEFAULT_MAX_MOVES_PER_BROKER = 5


@dataclass(frozen=True, slots=True)
class PlannedMove:
    partition: TopicPartition
    current: tuple[int, ...]
    target: tuple[int, ...]
    leader: int
    """The leader when planned (-1: none)."""
    size: int
    """Bytes each added replica copies (the partition's size on its leader)."""

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.target if b not in self.current)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(b for b in self.current if b not in self.target)

    @property
    def slots(self) -> frozenset[int]:
        """The brokers this move keeps busy while it runs."""
        adding = self.adding
        if not adding:
            return frozenset()
        return frozenset(adding) | ({self.leader} if self.leader >= 0 else set())

    @property
    def bytes_to_copy(self) -> int:
        return self.size * len(self.adding)


def order(moves: Iterable[PlannedMove]) -> list[PlannedMove]:
    """Largest copy first; equal ones by topic and partition."""
    return sorted(moves, key=lambda m: (-m.bytes_to_copy, m.partition))


def next_batch(
    pending: Iterable[PlannedMove], running: Iterable[PlannedMove], max_moves_per_broker: int
) -> list[PlannedMove]:
    """The pending moves (in order) that can start now without any broker exceeding the cap."""
    if max_moves_per_broker < 1:
        raise ValueError("max_moves_per_broker must be at least 1")
    busy: Counter[int] = Counter(b for m in running for b in m.slots)
    chosen = []
    for move in pending:
        if all(busy[b] < max_moves_per_broker for b in move.slots):
            chosen.append(move)
            busy.update(move.slots)
    return chosen


def planned_moves(
    targets: Mapping[TopicPartition, Iterable[int]],
    current: Mapping[TopicPartition, Iterable[int]],
    leaders: Mapping[TopicPartition, int],
    sizes: Mapping[TopicPartition, int],
) -> list[PlannedMove]:
    """One PlannedMove per target partition, in sending order."""
    return order(
        PlannedMove(
            tp,
            tuple(current.get(tp, ())),
            tuple(replicas),
            leaders.get(tp, -1),
            sizes.get(tp, 0),
        )
        for tp, replicas in targets.items()
    )
