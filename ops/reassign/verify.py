"""`verify`, `cancel` and `list`: where a reassignment stands, stopping it, and what runs now.

verify (Kafka's verifyAssignment): each partition of the file is "still in progress" while
ListPartitionReassignments lists it, else completed when its replicas are the target, else "no active
reassignment ... but replica set is ...". Once no reassignment at all runs in the cluster, the throttles
are cleared (on every live broker and every topic of the file) unless --preserve-throttles.

Moves between log dirs (the file's "log_dirs") are verified from DescribeLogDirs and cancelled by moving
the replica back to its current dir (log_dirs.py).

cancel (cancelAssignment): AlterPartitionReassignments with no replicas for each partition of the file
(or, with `--all`, each one listed) that is adding or removing replicas; the controller reverts it to its
original replicas. Kafka's Java port cancels only partitions with no adding replicas or some removing
ones, a dropped `!` from the Scala original (`!adding.isEmpty || !removing.isEmpty`); kcli keeps the
Scala meaning. A partition whose original replicas are all down is not cancelled (the revert would
leave it without a leader) and is named instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcli.cluster import Cluster
from ops.reassign import report
from ops.reassign.assignment import (
    ReassignError,
    ReassignmentData,
    TopicPartition,
    TopicPartitionReplica,
    replica_order,
)
from ops.reassign.execute import Emit
from ops.reassign.log_dirs import (
    DEFAULT_TIMEOUT_MS,
    LogDirMoveState,
    announce_started,
    execute_moves,
    log_dir_move_states,
    status_event,
)
from ops.reassign.moves import OngoingReassignment
from ops.reassign.state import alter_reassignments, cluster_state, list_reassignments
from ops.reassign.throttle import clear_throttles


@dataclass
class VerifyResult:
    states: dict[TopicPartition, report.PartitionReassignmentState]
    any_ongoing: bool
    """Some reassignment (of this file or not) still runs in the cluster."""
    log_dir_moves: dict[TopicPartitionReplica, LogDirMoveState] = field(default_factory=dict)


@dataclass
class CancelResult:
    cancelled: list[TopicPartition] = field(default_factory=list)
    kept: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    """Partitions not cancelled because their original replicas are all down -> those replicas."""
    log_dir_moves: list[TopicPartitionReplica] = field(default_factory=list)
    """Moves between log dirs cancelled (moved back to the current dir)."""


async def verify(
    cluster: Cluster, data: ReassignmentData, *, preserve_throttles: bool, emit: Emit
) -> VerifyResult:
    ongoing = await list_reassignments(cluster)
    targets = data.partitions
    state = await cluster_state(cluster, {tp.topic for tp, _ in targets})
    # As ReassignPartitionsCommand (getReplicaAssignmentForPartitions): a partition neither moving nor
    # in the metadata is an error, before anything is reported or any throttle is cleared.
    missing = sorted(tp for tp, _ in targets if tp not in ongoing and tp not in state.replicas)
    if missing:
        raise ReassignError(f"Unable to find partition: {', '.join(map(str, missing))}.")
    states = {}
    for tp, target in targets:
        if tp in ongoing:
            states[tp] = report.PartitionReassignmentState(ongoing[tp].replicas, target, False)
        else:
            states[tp] = report.PartitionReassignmentState(state.replicas.get(tp, ()), target, True)
    emit(
        {
            "event": "status",
            "text": report.states(states),
            "partitions": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "replicas": list(s.current),
                    "target": list(s.target),
                    "in_progress": not s.done,
                    "completed": s.completed,
                }
                for tp, s in sorted(states.items())
            ],
        }
    )
    move_states = await log_dir_move_states(cluster, data.log_dirs)
    emit(status_event(move_states))
    moves_ongoing = not all(s.done for s in move_states.values())
    if not ongoing and not moves_ongoing and not preserve_throttles:
        brokers = set(state.brokers) | {b for _, replicas in targets for b in replicas}
        await _clear(cluster, brokers, {tp.topic for tp, _ in targets}, set(state.brokers), emit)
    return VerifyResult(states, bool(ongoing), move_states)


async def cancel(
    cluster: Cluster,
    data: ReassignmentData | None,
    *,
    preserve_throttles: bool,
    emit: Emit,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> CancelResult:
    """Cancel the reassignments of `data`'s partitions, or every ongoing one when `data` is None."""
    if data is not None:
        ongoing = await list_reassignments(cluster, {tp for tp, _ in data.partitions})
    else:
        ongoing = await list_reassignments(cluster)
    moving = {tp: r for tp, r in ongoing.items() if r.adding or r.removing}
    state = await cluster_state(cluster, {tp.topic for tp in moving} if moving else [])
    live = set(state.brokers)
    result = CancelResult()
    to_cancel, result.kept = cancellable(ongoing, live)
    refused = await alter_reassignments(cluster, dict.fromkeys(to_cancel))
    if refused:
        plural = "" if len(refused) == 1 else "s"
        detail = "; ".join(f"{tp}: {why}" for tp, why in sorted(refused.items()))
        raise ReassignError(f"Error cancelling partition reassignment{plural} for: {detail}.")
    result.cancelled = to_cancel
    emit(
        {
            "event": "cancelled",
            "text": report.cancelled(to_cancel),
            "partitions": [str(tp) for tp in to_cancel],
        }
    )
    if result.kept:
        emit(
            {
                "event": "not_cancelled",
                "text": "kcli: warning: not cancelled, as their original replicas are all down and a revert would "
                "leave them without a leader: "
                + ", ".join(f"{tp} (replicas {','.join(map(str, r))})" for tp, r in result.kept.items()),
                "partitions": {str(tp): list(r) for tp, r in result.kept.items()},
            }
        )
    move_states = await log_dir_move_states(cluster, data.log_dirs if data is not None else {})
    back = {r: s.current for r, s in move_states.items() if s.kind == "active" and s.current is not None}
    if back:
        await execute_moves(cluster, back, timeout_ms, announce_started(emit))
        result.log_dir_moves = sorted(back, key=replica_order)
    else:
        emit(
            {
                "event": "log_dir_moves_cancelled",
                "text": "None of the specified partition moves are active.",
                "replicas": [],
            }
        )
    if not preserve_throttles:
        if data is not None:
            topics = {tp.topic for tp, _ in data.partitions}
            brokers = live | {b for _, replicas in data.partitions for b in replicas}
        else:
            topics = {tp.topic for tp in moving}
            brokers = live | _brokers_of(moving.values())
        await _clear(cluster, brokers, topics, live, emit)
    return result


def cancellable(
    ongoing: Mapping[TopicPartition, OngoingReassignment], live: Iterable[int]
) -> tuple[list[TopicPartition], dict[TopicPartition, tuple[int, ...]]]:
    """(partitions to cancel, partitions kept -> their original replicas): those adding or removing
    replicas (the Scala tool's rule), except where no original replica is live, as the revert would leave
    the partition without a leader."""
    alive = set(live)
    to_cancel, kept = [], {}
    for tp, r in sorted(ongoing.items()):
        if not (r.adding or r.removing):
            continue
        if any(b in alive for b in r.original):
            to_cancel.append(tp)
        else:
            kept[tp] = r.original
    return to_cancel, kept


async def list_ongoing(cluster: Cluster) -> dict[TopicPartition, OngoingReassignment]:
    return await list_reassignments(cluster)


def _brokers_of(reassignments: Iterable[OngoingReassignment]) -> set[int]:
    return {b for r in reassignments for b in r.replicas}


async def _clear(cluster: Cluster, brokers: set[int], topics: set[str], live: set[int], emit: Emit) -> None:
    result = await clear_throttles(cluster, brokers, topics, live)
    event: dict[str, Any] = {
        "event": "throttles_cleared",
        "text": report.throttles_cleared(result.brokers, result.topics),
        "brokers": list(result.brokers),
        "skipped_brokers": list(result.skipped),
        "topics": list(result.topics),
    }
    emit(event)
