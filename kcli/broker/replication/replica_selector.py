"""Which replica a consumer should fetch from (KIP-392, Kafka's org.apache.kafka.common.replica).

The leader asks the `replica.selector.class` for each consumer fetch (Fetch v11+) of a partition it
leads; when the answer is another replica, the fetch is answered with that `preferred_read_replica`
and no records, and the consumer fetches from there until it is told otherwise or the follower cannot
serve it. Without a selector (Kafka's default) consumers always read from the leader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
"""The one ReplicaSelector Kafka ships, and the one `replica.selector.class` accepts."""


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What the selector knows of the consumer: the `rack_id` of its Fetch request (client.rack)."""

    rack_id: str
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica. `rack` is None and `has_endpoint` False for a broker clients cannot reach
    on this listener (fenced, unregistered, or without it): Kafka's Node.noNode()."""

    broker_id: int
    rack: str | None
    has_endpoint: bool
    log_end_offset: int
    time_since_last_caught_up_ms: int


@dataclass(frozen=True, slots=True)
class PartitionView:
    replicas: tuple[ReplicaView, ...]
    """The in-sync followers that hold the fetch offset, and the leader."""
    leader: ReplicaView


class ReplicaSelector(Protocol):
    def select(
        self, client_metadata: ClientMetadata, partition_view: PartitionView
    ) -> ReplicaView | None: ...


def _most_caught_up(replica: ReplicaView) -> tuple[int, int, int]:
    """ReplicaView.comparator: the highest log end, then the most recently caught up, then the highest id."""
    return (replica.log_end_offset, -replica.time_since_last_caught_up_ms, replica.broker_id)


class RackAwareReplicaSelector:
    """The leader when it shares the consumer's rack or no replica does; else the most caught-up
    replica in the consumer's rack."""

    def select(self, client_metadata: ClientMetadata, partition_view: PartitionView) -> ReplicaView | None:
        rack = client_metadata.rack_id
        if not rack:
            return partition_view.leader
        same_rack = [r for r in partition_view.replicas if r.rack == rack]
        if not same_rack or partition_view.leader in same_rack:
            return partition_view.leader
        return max(same_rack, key=_most_caught_up)


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector `replica.selector.class` names; None (leader only) when it is not set."""
    if not class_name:
        return None
    if class_name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    raise ValueError(f"Class {class_name} cannot be found")
