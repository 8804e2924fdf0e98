"""`execute`: start a reassignment, and (unless told not to wait) see it through.

Kafka's executeAssignment first: refuse when reassignments are under way unless --additional, check
every broker is known and every partition exists, print the current assignment for a rollback, set the
throttles, send AlterPartitionReassignments. Then, where Kafka's tool exits and leaves the throttles to
a later --verify, kcli by default stays:

- the rollback file (the current assignment as a reassignment JSON) is written before anything is sent;
- the plan goes out in batches, at most `max_moves_per_broker` moves per broker at once (batches.py);
- each poll measures every running move (progress.py) and reports it;
- when the last move is done the throttles are cleared; on Ctrl-C the moves this run started and that
  are still running are cancelled (reverted by the controller) and the throttles cleared, so nothing is
  left half-way and unthrottled or throttled forever.

With `wait=False` it is Kafka's tool: the whole plan in one request, throttles left for `verify`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.files import write_atomically
from ops.reassign import report
from ops.reassign.assignment import (
    ReassignError,
    ReassignmentData,
    TopicPartition,
    TopicPartitionReplica,
    format_reassignment,
)
from ops.reassign.batches import DEFAULT_MAX_MOVES_PER_BROKER, PlannedMove, next_batch, planned_moves
from ops.reassign.log_dirs import (
    DEFAULT_TIMEOUT_MS,
    announce_started,
    execute_moves,
    log_dir_move_states,
    status_event,
)
from ops.reassign.moves import OngoingReassignment, proposed_move_map, reassigning_brokers
from ops.reassign.progress import MoveProgress, Snapshot, Tracker, measure
from ops.reassign.state import (
    alter_reassignments,
    cluster_state,
    list_reassignments,
    partition_sizes,
    replica_sizes,
)
from ops.reassign.throttle import clear_throttles, set_log_dir_throttle, set_replication_throttle

Emit = Callable[[dict[str, Any]], None]
DEFAULT_POLL_INTERVAL = 1.0
FINAL_STATE_WAIT = 5.0


@dataclass(frozen=True, slots=True)
class ExecuteOptions:
    additional: bool = False
    throttle: int = -1
    """Inter-broker rate in bytes/s; negative: no throttle."""
    log_dir_throttle: int = -1
    rollback_path: Path | None = None
    wait: bool = True
    max_moves_per_broker: int = DEFAULT_MAX_MOVES_PER_BROKER
    poll_interval: float = DEFAULT_POLL_INTERVAL
    timeout: float | None = None
    """Give up waiting (cancelling what runs, clearing throttles) after this many seconds; None: never."""
    log_dir_timeout_ms: int = DEFAULT_TIMEOUT_MS
    """Kafka's --timeout: how long log dir moves may take to start."""


@dataclass
class ExecuteResult:
    started: list[TopicPartition] = field(default_factory=list)
    completed: list[TopicPartition] = field(default_factory=list)
    refused: dict[TopicPartition, str] = field(default_factory=dict)
    cancelled: list[TopicPartition] = field(default_factory=list)
    last: Snapshot | None = None


async def execute(
    cluster: Cluster, data: ReassignmentData, options: ExecuteOptions, emit: Emit
) -> ExecuteResult:
    if options.max_moves_per_broker < 1:
        raise ReassignError("--max-moves-per-broker must be at least 1.")
    proposed = data.targets()
    ongoing = await list_reassignments(cluster)
    if ongoing and not options.additional:
        raise ReassignError(report.EXISTING_REASSIGNMENT)
    state = await cluster_state(cluster, {tp.topic for tp in proposed})
    for topic in sorted({tp.topic for tp in proposed}):
        if topic in state.missing_topics:
            raise ReassignError(f"Topic {topic} not found.")
    unknown = sorted({b for replicas in proposed.values() for b in replicas} - set(state.brokers))
    if unknown:
        raise ReassignError(f"Unknown broker id {unknown[0]}.")
    missing = sorted(tp for tp in proposed if tp not in state.replicas)
    if missing:
        raise ReassignError(f"Unable to find partition: {', '.join(map(str, missing))}.")
    current = {tp: state.replicas[tp] for tp in proposed}
    emit({"event": "current", "text": report.current_assignment(current), "current": _json(current)})
    if options.rollback_path is not None:
        write_atomically(options.rollback_path, format_reassignment(current) + "\n")
        emit({"event": "rollback_file", "path": str(options.rollback_path)})

    live = set(state.brokers)
    throttled_brokers: set[int] = set()
    try:
        outcome = await _start(cluster, data, options, emit, ongoing, current, live, throttled_brokers)
    except BaseException:  # nothing (or not all) was started: no throttle is left behind for it
        if options.throttle >= 0 or options.log_dir_throttle >= 0:
            await asyncio.shield(
                _clear(cluster, throttled_brokers, {tp.topic for tp in proposed}, emit, failing=True)
            )
        raise
    if not options.wait:
        return outcome

    per_broker = await replica_sizes(cluster, live, proposed)
    sizes = partition_sizes(per_broker, state.leaders, proposed)
    moves = planned_moves(proposed, current, state.leaders, sizes)
    runner = _Runner(cluster, moves, options, emit, outcome)
    failing = True
    try:
        await runner.run()
        moves_done = True
        if data.log_dirs:  # the replicas are on their brokers now: their dirs can be chosen
            await execute_moves(cluster, data.log_dirs, options.log_dir_timeout_ms, announce_started(emit))
            moves_done = await _wait_log_dir_moves(cluster, data.log_dirs, options, runner.deadline)
        states = await _final_states(
            cluster, {tp: t for tp, t in proposed.items() if tp not in outcome.refused}
        )
        outcome.completed = sorted(tp for tp, s in states.items() if s.completed)
        emit({"event": "status", "text": report.states(states), "partitions": _state_json(states)})
        if data.log_dirs:
            emit(status_event(await log_dir_move_states(cluster, data.log_dirs)))
            if not moves_done:
                raise WaitTimeout(f"the log dir moves did not finish within {options.timeout:g} s.")
        failing = False
    except BaseException as exc:  # Ctrl-C (the task is cancelled), a timeout or a failure: stop cleanly
        await asyncio.shield(runner.stop(_why(exc)))
        raise
    finally:
        if options.throttle >= 0 or options.log_dir_throttle >= 0:
            await asyncio.shield(
                _clear(cluster, throttled_brokers, {tp.topic for tp in proposed}, emit, failing=failing)
            )
    if outcome.refused:
        raise ReassignError(_refusal("Error reassigning partition(s)", outcome.refused))
    astray = sorted(set(proposed) - set(outcome.completed))
    if astray:
        raise ReassignError(
            f"partition{'s' if len(astray) > 1 else ''} {', '.join(map(str, astray))} did not end on the target "
            "replicas (cancelled or changed by someone else?)."
        )
    return outcome


async def _start(
    cluster: Cluster,
    data: ReassignmentData,
    options: ExecuteOptions,
    emit: Emit,
    ongoing: Mapping[TopicPartition, OngoingReassignment],
    current: Mapping[TopicPartition, tuple[int, ...]],
    live: set[int],
    throttled_brokers: set[int],
) -> ExecuteResult:
    """The throttles (`throttled_brokers` collects where they went), then, without waiting, the whole plan."""
    proposed = data.targets()
    if options.throttle >= 0 or options.log_dir_throttle >= 0:
        if not options.wait:
            emit({"event": "warning", "text": report.VERIFY_WARNING})
        if options.throttle >= 0:
            moves = proposed_move_map(ongoing, proposed, current)
            result = await set_replication_throttle(cluster, moves, options.throttle, live)
            throttled_brokers |= set(reassigning_brokers(moves))
            emit(
                {
                    "event": "throttle_set",
                    "text": report.throttle_set(options.throttle),
                    "rate": options.throttle,
                    "brokers": list(result.brokers),
                    "skipped_brokers": list(result.skipped),
                    "topics": list(result.topics),
                }
            )
        if options.log_dir_throttle >= 0:
            moving = {r.broker_id for r in data.log_dirs}
            result = await set_log_dir_throttle(cluster, moving, options.log_dir_throttle, live)
            throttled_brokers |= moving
            emit(
                {
                    "event": "log_dir_throttle_set",
                    "text": report.log_dir_throttle_set(options.log_dir_throttle),
                    "rate": options.log_dir_throttle,
                    "brokers": list(result.brokers),
                    "skipped_brokers": list(result.skipped),
                }
            )
    outcome = ExecuteResult()
    if not options.wait:  # Kafka's way: everything at once
        refused = await alter_reassignments(cluster, proposed)
        if refused:
            raise ReassignError(_refusal("Error reassigning partition(s)", refused))
        outcome.started = sorted(proposed)
        emit({"event": "started", "text": report.started(proposed), "partitions": _names(proposed)})
        if data.log_dirs:
            await execute_moves(cluster, data.log_dirs, options.log_dir_timeout_ms, announce_started(emit))
    return outcome


async def _wait_log_dir_moves(
    cluster: Cluster,
    moves: Mapping[TopicPartitionReplica, str],
    options: ExecuteOptions,
    deadline: float | None,
) -> bool:
    """Poll until no move between log dirs is active (the others do not change by themselves)."""
    while True:
        states = await log_dir_move_states(cluster, moves)
        if not any(s.kind == "active" for s in states.values()):
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        await asyncio.sleep(options.poll_interval)


async def _final_states(
    cluster: Cluster, targets: Mapping[TopicPartition, Iterable[int]], settle: float = FINAL_STATE_WAIT
) -> dict[TopicPartition, report.PartitionReassignmentState]:
    """Each finished partition's replicas against its target, from Metadata; a broker's metadata may lag the
    controller's a moment, so this asks again (for up to `settle` seconds) while some do not match yet."""
    deadline = time.monotonic() + settle
    while True:
        final = await cluster_state(cluster, {tp.topic for tp in targets})
        states = {
            tp: report.PartitionReassignmentState(final.replicas.get(tp, ()), tuple(target), True)
            for tp, target in targets.items()
        }
        if all(s.completed for s in states.values()) or time.monotonic() > deadline:
            return states
        await asyncio.sleep(0.2)


def _raise_if_cancel_was_lost() -> None:
    """Ctrl-C cancels the running task (asyncio.run's SIGINT handler); Python 3.11's wait_for returns an
    answer that arrives at that moment and drops the cancellation, so the moves would run on to the end.
    The task still counts the request (Task.cancelling), which is what stops the run here."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class WaitTimeout(ReassignError):
    """The reassignment outlasted ExecuteOptions.timeout."""


class _Runner:
    """The batches, the polls, and stopping part-way."""

    def __init__(
        self,
        cluster: Cluster,
        moves: list[PlannedMove],
        options: ExecuteOptions,
        emit: Emit,
        outcome: ExecuteResult,
    ) -> None:
        self.cluster = cluster
        self.options = options
        self.emit = emit
        self.outcome = outcome
        self.pending = list(moves)
        self.running: dict[TopicPartition, PlannedMove] = {}
        now = time.monotonic()
        self.tracker = Tracker.for_moves(((m.partition, m.adding, m.size) for m in moves), now)
        self.deadline = None if options.timeout is None else now + options.timeout

    async def run(self) -> None:
        while self.pending or self.running:
            _raise_if_cancel_was_lost()
            await self._start_next()
            if not self.pending and not self.running:
                break
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise WaitTimeout(
                    f"the reassignment did not finish within {self.options.timeout:g} s; "
                    "the moves still running were cancelled."
                )
            await asyncio.sleep(self.options.poll_interval)
            await self._poll()
            _raise_if_cancel_was_lost()

    async def _start_next(self) -> None:
        batch = next_batch(self.pending, self.running.values(), self.options.max_moves_per_broker)
        if not batch:
            return
        refused = await alter_reassignments(self.cluster, {m.partition: m.target for m in batch})
        for move in batch:
            self.pending.remove(move)
            if move.partition in refused:
                self.outcome.refused[move.partition] = refused[move.partition]
                self.tracker.planned.pop(move.partition, None)
            else:
                self.running[move.partition] = move
        started = [m.partition for m in batch if m.partition not in refused]
        self.outcome.started += started
        if started:
            self.emit({"event": "started", "text": report.started(started), "partitions": _names(started)})
        if refused:
            self.emit(
                {
                    "event": "refused",
                    "text": _refusal("Error reassigning partition(s)", refused),
                    "partitions": {str(tp): why for tp, why in sorted(refused.items())},
                }
            )

    async def _poll(self) -> None:
        if not self.running:
            return
        ongoing = await list_reassignments(self.cluster, self.running)
        finished = [tp for tp in self.running if tp not in ongoing]
        still = {tp: m for tp, m in self.running.items() if tp in ongoing}
        measured = await _measure(self.cluster, still)
        snapshot = self.tracker.observe(time.monotonic(), measured, finished)
        self.outcome.last = snapshot
        for tp in finished:
            del self.running[tp]
        self.emit({**snapshot.to_json(), "snapshot": snapshot})

    async def stop(self, why: str) -> None:
        """Cancel the moves this run started that still run; the rest of the plan is never sent."""
        if not self.running:
            return
        ongoing = await list_reassignments(self.cluster, self.running)
        to_cancel = sorted(tp for tp in self.running if tp in ongoing)
        refused = await alter_reassignments(self.cluster, dict.fromkeys(to_cancel))
        cancelled = [tp for tp in to_cancel if tp not in refused]
        self.outcome.cancelled = cancelled
        self.emit(
            {
                "event": "cancelled",
                "reason": why,
                "text": f"Stopping ({why}): "
                + report.cancelled(cancelled)
                + (f"; {len(self.pending)} not started" if self.pending else ""),
                "partitions": _names(cancelled),
                "not_started": _names(m.partition for m in self.pending),
            }
        )


async def _measure(cluster: Cluster, running: Mapping[TopicPartition, PlannedMove]) -> list[MoveProgress]:
    """Each running move's copied bytes: adding replicas' sizes against the leader's now."""
    if not running:
        return []
    state = await cluster_state(cluster, {tp.topic for tp in running})
    involved = {state.leaders.get(tp, -1) for tp in running} | {b for m in running.values() for b in m.adding}
    per_broker = await replica_sizes(cluster, involved & set(state.brokers), running)
    measured = []
    for tp, move in running.items():
        leader = state.leaders.get(tp, -1)
        leader_size = per_broker.get(leader, {}).get(tp, move.size)
        sizes = {b: per_broker.get(b, {}).get(tp, 0) for b in move.adding}
        measured.append(measure(tp, move.adding, leader_size, sizes))
    return measured


async def _clear(
    cluster: Cluster, brokers: Iterable[int], topics: Iterable[str], emit: Emit, *, failing: bool = False
) -> None:
    """Clear the throttles; while the command is failing anyway, a failure to clear is told, not raised
    (the first error is the one to see)."""
    try:
        state = await cluster_state(cluster, [])
        live = set(state.brokers)
        result = await clear_throttles(cluster, live | set(brokers), topics, live)
    except KcliError as exc:
        if not failing:
            raise
        reason = str(exc).rstrip(".")
        emit(
            {
                "event": "clear_failed",
                "text": f"kcli: warning: the throttles could not be cleared ({reason}); run verify to clear them.",
                "reason": reason,
            }
        )
        return
    emit(
        {
            "event": "throttles_cleared",
            "text": report.throttles_cleared(result.brokers, result.topics),
            "brokers": list(result.brokers),
            "skipped_brokers": list(result.skipped),
            "topics": list(result.topics),
        }
    )


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, WaitTimeout):
        return "timed out"
    return "failed"


def _refusal(what: str, refused: Mapping[TopicPartition, str]) -> str:
    return f"{what}: " + "; ".join(f"{tp}: {why}" for tp, why in sorted(refused.items())) + "."


def _names(partitions: Iterable[TopicPartition]) -> list[str]:
    return [str(tp) for tp in sorted(partitions)]


def _json(assignment: Mapping[TopicPartition, Iterable[int]]) -> list[dict[str, Any]]:
    return [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)}
        for tp, r in sorted(assignment.items())
    ]


def _state_json(states: Mapping[TopicPartition, report.PartitionReassignmentState]) -> list[dict[str, Any]]:
    return [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(s.current),
            "target": list(s.target),
            "in_progress": not s.done,
            "completed": s.completed,
        }
        for tp, s in sorted(states.items())
    ]
