"""Plans that weigh partition sizes and racks and move the fewest bytes (beyond Kafka's --generate).

Kafka's --generate lays every partition of the chosen topics out afresh (placement.py), so most
replicas move even when a few would do. Here a replica moves only when it must or when it pays:

1. Forced moves: a replica on a broker outside the target set (a broker being removed) goes to the
   target broker carrying the fewest bytes that does not hold the partition and, with racks, whose rack
   holds no other replica of it (unless the partition already spans every rack: Kafka's rule). Biggest
   partitions are placed first, while the choice is widest.
2. Balancing (on request: expansion, or a size-aware plan for a broker list): while the most loaded
   broker carries more than `tolerance` of the mean above the least loaded receiver, move from it the
   replica whose size is closest to half the gap (the move that narrows it most), if one is smaller
   than the gap (so every move strictly helps) and the rack rule allows it.

A replica keeps its position in the list, so a moved preferred leader's successor leads. Sizes are
bytes (DescribeLogDirs); each replica also weighs one byte so that empty partitions spread by count.
Pure: no I/O, the same inputs give the same plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ops.reassign.assignment import ReassignError, TopicPartition
from ops.reassign.placement import BrokerMetadata

DEFAULT_TOLERANCE = 0.10
"""Balancing stops once the spread between brokers is within 10% of the mean load."""


@dataclass(frozen=True, slots=True)
class Plan:
    proposed: dict[TopicPartition, tuple[int, ...]]
    """Only the partitions whose replicas change."""
    bytes_to_move: int
    """Sum over added replicas of the partition's size."""
    load_before: dict[int, int]
    load_after: dict[int, int]
    """Bytes per target broker (removed brokers are not in either)."""


def plan_moves(
    current: Mapping[TopicPartition, Iterable[int]],
    sizes: Mapping[TopicPartition, int],
    brokers: Iterable[BrokerMetadata],
    *,
    balance: bool,
    receivers: Iterable[int] | None = None,
    rack_aware: bool = True,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Plan:
    """Move every replica off brokers not in `brokers`; with `balance`, even out bytes onto `receivers`
    (default: every target broker)."""
    targets = {b.id: b.rack for b in brokers}
    if not targets:
        raise ReassignError("give at least one broker to place replicas on.")
    racks = dict(targets) if rack_aware and all(r is not None for r in targets.values()) else {}
    if rack_aware and any(r is not None for r in targets.values()) and not racks:
        raise ReassignError(
            "Not all brokers have rack information. Add --disable-rack-aware in command line to make "
            "replica assignment without rack information."
        )
    chosen_receivers = set(targets) if receivers is None else set(receivers)
    unknown = chosen_receivers - set(targets)
    if unknown:
        raise ReassignError(f"Unknown broker id {min(unknown)}.")
    planner = _Planner(current, sizes, targets, racks)
    before = planner.sizes_per_broker()
    planner.move_forced()
    if balance:
        planner.balance(chosen_receivers, tolerance)
    proposed = {
        tp: tuple(replicas)
        for tp, replicas in planner.assignment.items()
        if tuple(replicas) != tuple(current[tp])
    }
    moved = sum(sizes.get(tp, 0) * len(set(replicas) - set(current[tp])) for tp, replicas in proposed.items())
    after = planner.sizes_per_broker()
    return Plan(proposed, moved, before, after)


class _Planner:
    def __init__(
        self,
        current: Mapping[TopicPartition, Iterable[int]],
        sizes: Mapping[TopicPartition, int],
        targets: dict[int, str | None],
        racks: dict[int, str | None],
    ) -> None:
        self.assignment = {tp: list(replicas) for tp, replicas in current.items()}
        self.sizes = sizes
        self.targets = targets
        self.racks = racks
        self.rack_count = len(set(racks.values()))
        self.load = dict.fromkeys(targets, 0)
        self.count = dict.fromkeys(targets, 0)
        for tp, replicas in self.assignment.items():
            if len(replicas) > len(targets):
                raise ReassignError(
                    f"Replication factor: {len(replicas)} larger than available brokers: {len(targets)}."
                )
            for b in replicas:
                if b in targets:
                    self._add(b, tp)

    def weight(self, tp: TopicPartition) -> int:
        return self.sizes.get(tp, 0) + 1

    def sizes_per_broker(self) -> dict[int, int]:
        """Bytes per broker, without the one-byte weight per replica."""
        return {b: self.load[b] - self.count[b] for b in self.targets}

    def move_forced(self) -> None:
        by_size = sorted(self.assignment, key=lambda tp: (-self.weight(tp), tp))
        for tp in by_size:
            replicas = self.assignment[tp]
            for index, broker in enumerate(replicas):
                if broker in self.targets:
                    continue
                others = [b for i, b in enumerate(replicas) if i != index]
                choices = self._allowed(tp, others, self.targets)
                if not choices:
                    raise ReassignError(
                        f"partition {tp} has no broker left to move its replica on broker {broker} to."
                    )
                destination = min(choices, key=lambda b: (self.load[b], self.count[b], b))
                replicas[index] = destination
                self._add(destination, tp)

    def balance(self, receivers: set[int], tolerance: float) -> None:
        total = sum(self.load.values())
        mean = total / len(self.targets)
        limit = len(self.assignment) * max(len(self.targets), 1) + 1  # each move narrows a gap: bounded
        for _ in range(limit):
            move = self._best_move(receivers, tolerance * mean)
            if move is None:
                return
            tp, index, destination = move
            source = self.assignment[tp][index]
            self.assignment[tp][index] = destination
            self._remove(source, tp)
            self._add(destination, tp)

    def _best_move(self, receivers: set[int], slack: float) -> tuple[TopicPartition, int, int] | None:
        """The move from the most loaded broker that narrows its gap to a receiver most, if any."""
        donors = sorted(self.targets, key=lambda b: (-self.load[b], b))
        takers = sorted(receivers, key=lambda b: (self.load[b], b))
        for donor in donors:
            for taker in takers:
                gap = self.load[donor] - self.load[taker]
                if donor == taker or gap <= max(slack, 1):
                    continue
                best: tuple[float, TopicPartition, int] | None = None
                for tp, replicas in self.assignment.items():
                    if donor not in replicas or taker in replicas:
                        continue
                    w = self.weight(tp)
                    if w >= gap:
                        continue
                    index = replicas.index(donor)
                    others = [b for i, b in enumerate(replicas) if i != index]
                    if not self._allowed(tp, others, [taker], strict=True):
                        continue
                    score = abs(gap / 2 - w)
                    if best is None or (score, tp) < (best[0], best[1]):
                        best = (score, tp, index)
                if best is not None:
                    return best[1], best[2], taker
            # nothing movable from the most loaded broker to any receiver: try the next donor
        return None

    def _allowed(
        self, tp: TopicPartition, others: list[int], candidates: Iterable[int], *, strict: bool = False
    ) -> list[int]:
        """Candidates not holding the partition and, with racks, on a rack none of `others` is on
        (unless those already span every rack); when none is, any free one unless `strict`."""
        free = [b for b in candidates if b not in others]
        if not self.racks:
            return free
        used = {self.racks.get(b) for b in others if b in self.racks}
        if len(used) >= self.rack_count:
            return free
        spread = [b for b in free if self.racks.get(b) not in used]
        return spread if spread or strict else free

    def _add(self, broker: int, tp: TopicPartition) -> None:
        self.load[broker] += self.weight(tp)
        self.count[broker] += 1

    def _remove(self, broker: int, tp: TopicPartition) -> None:
        self.load[broker] -= self.weight(tp)
        self.count[broker] -= 1
