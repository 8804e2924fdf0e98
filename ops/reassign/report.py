"""The text kafka-reassign-partitions.sh prints, line for line, from the values ops computes.

Kept apart from the I/O so the shapes can be checked against ReassignPartitionsUnitTest's expected
strings; the CLI prints these for `--output text` and the JSON events for `--output json`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ops.reassign.assignment import TopicPartition, format_reassignment, partition_list
from ops.reassign.moves import OngoingReassignment

VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
    "throttle is removed."
)
EXISTING_REASSIGNMENT = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override "
    "this and create a new partition assignment in addition to the existing one. The --additional flag "
    "can also be used to change the throttle by resubmitting the current reassignment."
)


@dataclass(frozen=True, slots=True)
class PartitionReassignmentState:
    current: tuple[int, ...]
    target: tuple[int, ...]
    done: bool
    """No reassignment of the partition is under way."""

    @property
    def completed(self) -> bool:
        return self.done and self.current == self.target


def current_assignment(current: Mapping[TopicPartition, Iterable[int]]) -> str:
    """currentPartitionReplicaAssignmentToString (without its final newline)."""
    return (
        "Current partition replica assignment\n\n"
        + format_reassignment(current)
        + "\n\nSave this to use as the --reassignment-json-file option during rollback"
    )


def generated(
    current: Mapping[TopicPartition, Iterable[int]], proposed: Mapping[TopicPartition, Iterable[int]]
) -> str:
    """--generate's two blocks."""
    return (
        f"Current partition replica assignment\n{format_reassignment(current)}\n\n"
        f"Proposed partition reassignment configuration\n{format_reassignment(proposed)}"
    )


def started(partitions: Iterable[TopicPartition]) -> str:
    partitions = list(partitions)
    plural = "" if len(partitions) == 1 else "s"
    return f"Successfully started partition reassignment{plural} for {partition_list(partitions)}"


def cancelled(partitions: Iterable[TopicPartition]) -> str:
    partitions = list(partitions)
    if not partitions:
        return "None of the specified partition reassignments are active."
    plural = "" if len(partitions) == 1 else "s"
    return f"Successfully cancelled partition reassignment{plural} for: {partition_list(partitions)}"


def throttle_set(rate: int) -> str:
    return f"The inter-broker throttle limit was set to {rate} B/s"


def log_dir_throttle_set(rate: int) -> str:
    return f"The replica-alter-dir throttle limit was set to {rate} B/s"


def states(states: Mapping[TopicPartition, PartitionReassignmentState]) -> str:
    """partitionReassignmentStatesToString."""
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        state = states[tp]
        if not state.done:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif state.current == state.target:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp}, but replica set is "
                f"{_ids(state.current)} rather than {_ids(state.target)}."
            )
    return "\n".join(lines)


def throttles_cleared(brokers: Iterable[int], topics: Iterable[str]) -> str:
    """clearAllThrottles' two lines (brokers and topics sorted here; Kafka prints hash-set order)."""
    brokers, topics = sorted(set(brokers)), sorted(set(topics))
    return (
        f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} {_ids(brokers)}\n"
        f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}"
    )


def ongoing(reassignments: Mapping[TopicPartition, OngoingReassignment]) -> str:
    """curReassignmentsToString (--list)."""
    if not reassignments:
        return "No partition reassignments found."
    lines = ["Current partition reassignments:"]
    for tp in sorted(reassignments):
        r = reassignments[tp]
        adding = f" adding: {_ids(r.adding)}." if r.adding else ""
        removing = f" removing: {_ids(r.removing)}." if r.removing else ""
        lines.append(f"{tp}: replicas: {_ids(r.replicas)}.{adding}{removing}")
    return "\n".join(lines)


def _ids(ids: Iterable[int]) -> str:
    return ",".join(map(str, ids))
