"""Replicas moved to a particular log dir of their broker (the "log_dirs" of a reassignment file).

As ReassignPartitionsCommand: AlterReplicaLogDirs is sent to the replica's broker, retried while it
answers REPLICA_NOT_AVAILABLE (the replica is not on that broker yet: a reassignment is still adding
it) until a timeout; any other error fails the command. Where a move stands comes from DescribeLogDirs
on the broker (Kafka's describeReplicaLogDirs): the dir of the replica's current log and of its future
log while one is being copied. A move is active while there is a future log, completed when the current
log is in the target dir, cancelled when it is elsewhere with no future log; a replica the broker does
not report, or reports in no live dir, is missing. Cancelling an active move is a move back to the
current dir.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import ClientError
from kcli.cluster import Cluster
from kcli.protocol.messages import build, nested_type
from ops.reassign.assignment import ReassignError, TopicPartitionReplica, replica_order

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
DEFAULT_TIMEOUT_MS = 10_000
RETRY_S = 0.1


@dataclass(frozen=True, slots=True)
class LogDirMoveState:
    kind: str
    """"active", "completed", "cancelled", "missing_log_dir" or "missing_replica"."""
    target: str
    current: str | None = None
    future: str | None = None

    @property
    def done(self) -> bool:
        """Kafka's LogDirMoveState.done: only completed and cancelled moves are."""
        return self.kind in ("completed", "cancelled")


async def replica_log_dirs(
    cluster: Cluster, replicas: Iterable[TopicPartitionReplica]
) -> dict[TopicPartitionReplica, tuple[str | None, str | None]]:
    """Replica -> (current log dir, future log dir) for each replica its broker reports."""
    by_broker: dict[int, list[TopicPartitionReplica]] = {}
    for r in replicas:
        by_broker.setdefault(r.broker_id, []).append(r)
    found: dict[TopicPartitionReplica, tuple[str | None, str | None]] = {}
    for broker, wanted in sorted(by_broker.items()):
        try:
            client = await cluster.node(broker)
        except ClientError:
            continue  # a broker that is down reports nothing: its replicas are missing
        cls = client.request_type(DESCRIBE_LOG_DIRS)
        topic_cls = nested_type(cls, "DescribableLogDirTopic")
        topics: dict[str, list[int]] = {}
        for r in wanted:
            topics.setdefault(r.topic, []).append(r.partition)
        request = build(
            cls, topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in topics.items())
        )
        response = await client.send(request)
        for result in response.results:
            if result.error_code != ErrorCode.none:
                continue
            for topic in result.topics:
                for p in topic.partitions:
                    replica = TopicPartitionReplica(topic.name, p.partition_index, broker)
                    current, future = found.get(replica, (None, None))
                    if p.is_future_key:
                        future = result.log_dir
                    else:
                        current = result.log_dir
                    found[replica] = (current, future)
    return found


async def log_dir_move_states(
    cluster: Cluster, targets: Mapping[TopicPartitionReplica, str]
) -> dict[TopicPartitionReplica, LogDirMoveState]:
    """findLogDirMoveStates."""
    dirs = await replica_log_dirs(cluster, targets)
    states = {}
    for replica, target in targets.items():
        if replica not in dirs:
            states[replica] = LogDirMoveState("missing_replica", target)
            continue
        current, future = dirs[replica]
        if current is None:
            states[replica] = LogDirMoveState("missing_log_dir", target)
        elif future is None:
            states[replica] = LogDirMoveState(
                "completed" if current == target else "cancelled", target, current
            )
        else:
            states[replica] = LogDirMoveState("active", target, current, future)
    return states


def move_states_text(states: Mapping[TopicPartitionReplica, LogDirMoveState]) -> str:
    """replicaMoveStatesToString (an empty string when there are no moves, so Kafka's blank line)."""
    lines = []
    for r in sorted(states, key=replica_order):
        s = states[r]
        where = f"{r.topic}-{r.partition}"
        if s.kind == "missing_log_dir":
            lines.append(
                f"Partition {where} is not found in any live log dir on broker {r.broker_id}. There is likely an "
                "offline log directory on the broker."
            )
        elif s.kind == "missing_replica":
            lines.append(
                f"Partition {where} cannot be found in any live log directory on broker {r.broker_id}."
            )
        elif s.kind == "active" and s.future == s.target:
            lines.append(f"Reassignment of replica {r} is still in progress.")
        elif s.kind == "active":
            lines.append(
                f"Partition {where} on broker {r.broker_id} is being moved to log dir {s.future} instead of "
                f"{s.target}."
            )
        elif s.kind == "cancelled":
            lines.append(
                f"Partition {where} on broker {r.broker_id} is not being moved from log dir {s.current} to "
                f"{s.target}."
            )
        else:
            lines.append(f"Reassignment of replica {r} completed successfully.")
    return "\n".join(lines)


async def alter_replica_log_dirs(
    cluster: Cluster, assignment: Mapping[TopicPartitionReplica, str]
) -> set[TopicPartitionReplica]:
    """The replicas whose move was accepted; REPLICA_NOT_AVAILABLE ones are left for a retry."""
    accepted: set[TopicPartitionReplica] = set()
    by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
    for r, path in assignment.items():
        by_broker.setdefault(r.broker_id, {}).setdefault(path, {}).setdefault(r.topic, []).append(r.partition)
    for broker, dirs in sorted(by_broker.items()):
        try:
            client = await cluster.node(broker)
        except ClientError as exc:
            raise ReassignError(
                f"cannot reach broker {broker} to move replicas between its log dirs: {exc}"
            ) from None
        cls = client.request_type(ALTER_REPLICA_LOG_DIRS)
        dir_cls, topic_cls = (
            nested_type(cls, "AlterReplicaLogDir"),
            nested_type(cls, "AlterReplicaLogDirTopic"),
        )
        request = cls(
            dirs=tuple(
                dir_cls(
                    path=path,
                    topics=tuple(
                        topic_cls(name=t, partitions=tuple(sorted(ps))) for t, ps in sorted(topics.items())
                    ),
                )
                for path, topics in sorted(dirs.items())
            )
        )
        response = await client.send(request)
        for topic in response.results:
            for p in topic.partitions:
                replica = TopicPartitionReplica(topic.topic_name, p.partition_index, broker)
                if p.error_code == ErrorCode.none:
                    accepted.add(replica)
                elif p.error_code != ErrorCode.replica_not_available:
                    raise ReassignError(
                        f"Failed to alter dir for {replica}: {ErrorCode(p.error_code).name.upper()}."
                    )
    return accepted


async def execute_moves(
    cluster: Cluster,
    moves: Mapping[TopicPartitionReplica, str],
    timeout_ms: int,
    started: Callable[[TopicPartitionReplica, str], None],
) -> None:
    """executeMoves: AlterReplicaLogDirs until every move has started, `started(replica, dir)` for each."""
    pending = dict(moves)
    deadline = time.monotonic() + timeout_ms / 1000
    while pending:
        accepted = await alter_replica_log_dirs(cluster, pending)
        for replica in sorted(accepted, key=replica_order):
            started(replica, pending.pop(replica))
        if not pending:
            return
        if time.monotonic() >= deadline:
            plural = "" if len(pending) == 1 else "s"
            raise ReassignError(
                f"Timed out before log directory move{plural} could be started for: "
                + ",".join(str(r) for r in sorted(pending, key=replica_order))
                + "."
            )
        await asyncio.sleep(RETRY_S)


def announce_started(emit: Callable[[dict[str, Any]], None]) -> Callable[[TopicPartitionReplica, str], None]:
    def started(replica: TopicPartitionReplica, log_dir: str) -> None:
        emit(
            {
                "event": "log_dir_move_started",
                "text": f"Successfully started moving log directory to {log_dir} for replica "
                f"{replica.topic}-{replica.partition} with broker {replica.broker_id} ",
                "replica": str(replica),
                "log_dir": log_dir,
            }
        )

    return started


def status_event(states: Mapping[TopicPartitionReplica, LogDirMoveState]) -> dict[str, Any]:
    """The replica move lines (empty text when none: Kafka's blank line after the partition lines)."""
    return {
        "event": "log_dir_status",
        "text": move_states_text(states),
        "replicas": [
            {"replica": str(r), "state": s.kind, "target": s.target, "current": s.current, "future": s.future}
            for r, s in sorted(states.items(), key=lambda item: replica_order(item[0]))
        ],
    }
