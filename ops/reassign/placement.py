"""Kafka's replica placement for `--generate` (server-common's AdminUtils.assignReplicasToBrokers).

Rack-unaware: the first replica of each partition round-robin from a start index, the others at an
increasing shift, the shift growing by one after every full round of brokers. Rack-aware (every
broker has a rack): the same over a rack-alternated broker list, each further replica skipping brokers
on racks that already hold one (until every rack does) and brokers that already hold one (until every
broker does). Start index and shift are random unless fixed, as in Kafka; Kafka's tests fix them, and
so do ours, to check that the same inputs give the same assignment.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from ops.reassign.assignment import ReassignError


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    id: int
    rack: str | None = None


def assign_replicas_to_brokers(
    brokers: Iterable[BrokerMetadata],
    partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica broker ids, as AdminUtils.assignReplicasToBrokers."""
    brokers = list(brokers)
    if partitions <= 0:
        raise ReassignError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise ReassignError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise ReassignError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
        )
    rng = rng or random.Random()
    if all(b.rack is None for b in brokers):
        return _rack_unaware(
            partitions,
            replication_factor,
            [b.id for b in brokers],
            fixed_start_index,
            start_partition_id,
            rng,
        )
    if any(b.rack is None for b in brokers):
        raise ReassignError("Not all brokers have rack information for replica rack aware assignment.")
    racks = {b.id: b.rack for b in brokers if b.rack is not None}
    return _rack_aware(partitions, replication_factor, racks, fixed_start_index, start_partition_id, rng)


def rack_alternated_brokers(racks: dict[int, str]) -> list[int]:
    """Brokers taken one per rack in turn (racks sorted, brokers of a rack by id): AdminUtils'
    getRackAlternatedBrokerList, e.g. rack1: 0,1,2  rack2: 3,4,5 -> 0,3,1,4,2,5."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[r], reverse=True) for r in sorted(by_rack)]
    result: list[int] = []
    index = 0
    while len(result) < len(racks):
        queue = queues[index]
        if queue:
            result.append(queue.pop())
        index = (index + 1) % len(queues)
    return result


def _replica_index(first: int, shift: int, replica: int, brokers: int) -> int:
    return (first + 1 + (shift + replica) % (brokers - 1)) % brokers


def _starts(count: int, fixed_start_index: int, rng: random.Random) -> tuple[int, int]:
    """(start index, first replica shift): both the fixed index, or two random draws (Kafka's order)."""
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    return rng.randrange(count), rng.randrange(count)


def _rack_unaware(
    partitions: int,
    replication_factor: int,
    brokers: list[int],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    n = len(brokers)
    start, shift = _starts(n, fixed_start_index, rng)
    assignment: dict[int, list[int]] = {}
    partition = max(0, start_partition_id)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [brokers[first]]
        replicas += [brokers[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        assignment[partition] = replicas
        partition += 1
    return assignment


def _rack_aware(
    partitions: int,
    replication_factor: int,
    racks: dict[int, str],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    rack_count = len(set(racks.values()))
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    start, shift = _starts(n, fixed_start_index, rng)
    assignment: dict[int, list[int]] = {}
    partition = max(0, start_partition_id)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            # bounded: within n * rack_count steps every broker (and rack) has been offered
            for _ in range(n * max(rack_count, 1) * 2 + n):
                broker = arranged[_replica_index(first, shift * rack_count, k, n)]
                rack = racks[broker]
                k += 1
                if (rack not in racks_used or len(racks_used) == rack_count) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        assignment[partition] = replicas
        partition += 1
    return assignment
