"""Replica placement for new partitions: Kafka's StripedReplicaPlacer (org.apache.kafka.metadata.placement).

Racks are visited round-robin and brokers round-robin within each rack, so that the replicas of a
partition land on as many racks as possible and leaderships spread evenly. Fenced brokers get
replicas only when the unfenced ones run out, and never a leadership. A partition's leader rack
starts one rack later than the previous partition's (the "stripes"); once every unfenced broker has
led once, the racks and brokers are shuffled so the same assignments do not simply repeat.

The random source needs only `randrange(n)` and `shuffle(list)`; tests pass one that draws as
java.util.Random does, to get Kafka's own placements.
"""

from __future__ import annotations

import random as _random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class InvalidReplicationFactorException(Exception):
    """The placement cannot be done (Kafka's InvalidReplicationFactorException); the message is Kafka's."""


class PlacementRandom(Protocol):
    def randrange(self, stop: int, /) -> int: ...

    def shuffle(self, x: list[int] | list[str | None], /) -> None: ...


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker replicas may go to: registered and not in controlled shutdown."""

    id: int
    rack: str | None
    fenced: bool


@dataclass(frozen=True, slots=True)
class PlacementSpec:
    start_partition: int
    num_partitions: int
    num_replicas: int


class BrokerList:
    """The brokers of one rack (fenced or unfenced), handed out at most once each per iteration epoch."""

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.index = 0
        self.offset = 0
        """Where this epoch's walk starts; it moves one along every epoch."""
        self.epoch = 0

    def add(self, broker: int) -> BrokerList:
        self.brokers.append(broker)
        return self

    def initialize(self, random: PlacementRandom) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = random.randrange(len(self.brokers))

    def shuffle(self, random: PlacementRandom) -> None:
        random.shuffle(self.brokers)

    def size(self) -> int:
        return len(self.brokers)

    def next(self, epoch: int) -> int:
        """The next broker of this epoch, or -1 when every broker has been handed out in it."""
        if not self.brokers:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return -1
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


class Rack:
    """One rack's brokers: unfenced ones are preferred, fenced ones used only once those run out."""

    def __init__(self) -> None:
        self.fenced = BrokerList()
        self.unfenced = BrokerList()

    def initialize(self, random: PlacementRandom) -> None:
        self.fenced.initialize(random)
        self.unfenced.initialize(random)

    def shuffle(self, random: PlacementRandom) -> None:
        self.fenced.shuffle(random)
        self.unfenced.shuffle(random)

    def next_unfenced(self, epoch: int) -> int:
        return self.unfenced.next(epoch)

    def next(self, epoch: int) -> int:
        result = self.unfenced.next(epoch)
        if result >= 0:
            return result
        return self.fenced.next(epoch)


def _rack_order(name: str | None) -> tuple[bool, str]:
    """OptionalStringComparator: no rack sorts first, then racks by name."""
    return (name is not None, name or "")


class RackList:
    """The racks of one placement, with the iteration state shared by all of its partitions."""

    def __init__(self, random: PlacementRandom, brokers: Iterable[UsableBroker]) -> None:
        self.random = random
        self.racks: dict[str | None, Rack] = {}
        self.num_total_brokers = 0
        self.num_unfenced_brokers = 0
        for broker in brokers:
            rack = self.racks.setdefault(broker.rack, Rack())
            if broker.fenced:
                rack.fenced.add(broker.id)
            else:
                self.num_unfenced_brokers += 1
                rack.unfenced.add(broker.id)
            self.num_total_brokers += 1
        # Kafka walks its HashMap of racks here; the sorted order is deterministic and is the same
        # order for the short rack names of Kafka's tests.
        for name in self._racks_in_order():
            self.racks[name].initialize(random)
        self.rack_names: list[str | None] = self._racks_in_order()
        self.epoch = 0
        self.offset = random.randrange(len(self.rack_names)) if self.rack_names else 0

    def _racks_in_order(self) -> list[str | None]:
        return sorted(self.racks, key=_rack_order)

    def place(self, replication_factor: int) -> list[int]:
        """The replicas of one partition, leader first."""
        _check_positive(replication_factor)
        _check_enough_brokers(replication_factor, self.num_total_brokers)
        _check_any_unfenced(self.num_unfenced_brokers)
        # Every unfenced broker has led once this epoch: reshuffle so the next round differs. Not
        # with a single unfenced broker, which would reset forever.
        if self.epoch == self.num_unfenced_brokers and self.num_unfenced_brokers > 1:
            self.shuffle()
            self.epoch = 0
        if self.offset == len(self.rack_names):
            self.offset = 0
        brokers: list[int] = []
        # The leader: the first rack from the offset with an unfenced broker left this epoch.
        first_rack_index = self.offset
        while True:
            result = self.racks[self.rack_names[first_rack_index]].next_unfenced(self.epoch)
            if result >= 0:
                brokers.append(result)
                break
            first_rack_index = (first_rack_index + 1) % len(self.rack_names)
        # The followers: racks from the offset again, passing over the leader's rack once.
        rack_index = self.offset
        for _ in range(1, replication_factor):
            result = -1
            while result < 0:
                if rack_index == first_rack_index:
                    first_rack_index = -1
                else:
                    result = self.racks[self.rack_names[rack_index]].next(self.epoch)
                rack_index = (rack_index + 1) % len(self.rack_names)
            brokers.append(result)
        self.epoch += 1
        self.offset += 1
        return brokers

    def shuffle(self) -> None:
        self.random.shuffle(self.rack_names)
        for name in self._racks_in_order():
            self.racks[name].shuffle(self.random)


def _check_positive(replication_factor: int) -> None:
    if replication_factor <= 0:
        raise InvalidReplicationFactorException(
            f"Invalid replication factor {replication_factor}: the replication factor must be positive."
        )


def _check_any_unfenced(num_unfenced: int) -> None:
    if num_unfenced == 0:
        raise InvalidReplicationFactorException("All brokers are currently fenced.")


def _check_enough_brokers(replication_factor: int, num_total_brokers: int) -> None:
    if replication_factor > num_total_brokers:
        raise InvalidReplicationFactorException(
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{num_total_brokers} broker(s) are registered."
        )


class StripedReplicaPlacer:
    """ReplicaPlacer of the KRaft controller; one per controller, its random shared by every placement."""

    def __init__(self, random: PlacementRandom | None = None) -> None:
        self.random: PlacementRandom = random if random is not None else _random.Random()

    def place(self, placement: PlacementSpec, usable_brokers: Iterable[UsableBroker]) -> list[list[int]]:
        """Replicas for `placement.num_partitions` new partitions, each list leader first."""
        rack_list = RackList(self.random, usable_brokers)
        _check_positive(placement.num_replicas)
        _check_any_unfenced(rack_list.num_unfenced_brokers)
        _check_enough_brokers(placement.num_replicas, rack_list.num_total_brokers)
        return [rack_list.place(placement.num_replicas) for _ in range(placement.num_partitions)]
