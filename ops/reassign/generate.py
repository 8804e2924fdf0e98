"""`generate`: a proposed reassignment, Kafka's way or one that moves the fewest bytes.

Kafka's way (generateAssignment): every partition of the topics to move laid out afresh over the
broker list with AdminUtils' placement, the replication factor of each topic's first partition kept.
The size-aware way (plan.py): partition sizes from DescribeLogDirs, only partitions that must or should
move, for a broker list, a broker being removed (decommission) or one being added (expansion).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from kcli.cluster import Cluster
from ops.reassign.assignment import ReassignError, TopicPartition, check_topics
from ops.reassign.placement import assign_replicas_to_brokers
from ops.reassign.plan import DEFAULT_TOLERANCE, Plan, plan_moves
from ops.reassign.state import ClusterState, cluster_state, partition_sizes, replica_sizes


@dataclass(frozen=True, slots=True)
class Generated:
    current: dict[TopicPartition, tuple[int, ...]]
    proposed: dict[TopicPartition, tuple[int, ...]]
    plan: Plan | None = None
    """The size-aware plan's figures (None for Kafka's way)."""


async def generate_assignment(
    cluster: Cluster,
    topics: list[str],
    broker_list: list[int],
    *,
    rack_aware: bool = True,
    fixed_start_index: int = -1,
    rng: random.Random | None = None,
) -> Generated:
    """ReassignPartitionsCommand.generateAssignment."""
    check_topics(topics)
    state = await _state_of(cluster, topics)
    brokers = state.broker_metadata(broker_list, rack_aware)
    proposed: dict[TopicPartition, tuple[int, ...]] = {}
    for topic in sorted(set(topics)):
        partitions = sorted(tp for tp in state.replicas if tp.topic == topic)
        if not partitions:
            continue
        replication_factor = len(state.replicas[partitions[0]])
        placed = assign_replicas_to_brokers(
            brokers, len(partitions), replication_factor, fixed_start_index, rng=rng
        )
        for partition, replicas in placed.items():
            proposed[TopicPartition(topic, partition)] = tuple(replicas)
    return Generated(dict(state.replicas), proposed)


async def generate_plan(
    cluster: Cluster,
    topics: list[str] | None,
    *,
    broker_list: list[int] | None = None,
    remove_brokers: Iterable[int] = (),
    add_brokers: Iterable[int] = (),
    rack_aware: bool = True,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Generated:
    """A size-aware plan over `topics` (None: every topic): onto `broker_list`, or off `remove_brokers`
    and onto `add_brokers` with the other live brokers."""
    remove, add = sorted(set(remove_brokers)), sorted(set(add_brokers))
    if topics is not None:
        check_topics(topics)
    state = await _state_of(cluster, topics)
    live = set(state.brokers)
    for broker in (*(broker_list or ()), *add):
        if broker not in live:
            raise ReassignError(f"Unknown broker id {broker}.")
    holders = {b for replicas in state.replicas.values() for b in replicas}
    for broker in remove:
        # A dead broker still holding replicas is what --remove-broker is for; an id that is neither
        # live nor holds anything is a typo, and a plan that moves nothing would hide it.
        if broker not in live and broker not in holders:
            raise ReassignError(
                f"Unknown broker id {broker}: it is not a live broker and holds no replica of "
                f"{'the topics given' if topics is not None else 'any topic'}."
            )
    overlap = set(remove) & set(add)
    if overlap:
        raise ReassignError(f"broker {min(overlap)} cannot be both removed and added.")
    if broker_list is not None:
        target_ids = [b for b in broker_list if b not in remove]
        receivers = None
    else:
        target_ids = [b for b in sorted(live) if b not in remove]
        receivers = add or None
    brokers = state.broker_metadata(target_ids, rack_aware)
    per_broker = await replica_sizes(cluster, live, state.replicas)
    sizes = partition_sizes(per_broker, state.leaders, state.replicas)
    balance = broker_list is not None or bool(add)
    plan = plan_moves(
        state.replicas,
        sizes,
        brokers,
        balance=balance,
        receivers=receivers,
        rack_aware=rack_aware,
        tolerance=tolerance,
    )
    current = {tp: state.replicas[tp] for tp in plan.proposed}
    return Generated(current, plan.proposed, plan)


async def _state_of(cluster: Cluster, topics: list[str] | None) -> ClusterState:
    state = await cluster_state(cluster, topics)
    if topics is not None:
        for topic in topics:
            if topic in state.missing_topics:
                raise ReassignError(f"Topic {topic} not found.")
    return state
