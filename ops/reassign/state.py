"""What the cluster says now, over standard admin APIs: live brokers and racks, replica assignment and
leaders (Metadata), partition sizes per broker (DescribeLogDirs), ongoing reassignments
(ListPartitionReassignments), and the AlterPartitionReassignments that starts or cancels moves.

A broker "down" is one the metadata does not list (not registered or fenced): nothing is ever sent to
it, its sizes are unknown, and a plan may not put a replica on it.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import ClientError
from kcli.cluster import Cluster
from kcli.protocol.messages import build, nested_type
from ops.reassign.assignment import ReassignError, TopicPartition
from ops.reassign.moves import OngoingReassignment
from ops.reassign.placement import BrokerMetadata

DESCRIBE_LOG_DIRS = 35
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
TIMEOUT = datetime.timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class ClusterState:
    brokers: dict[int, str | None]
    """Live broker id -> rack (None when it has none)."""
    replicas: dict[TopicPartition, tuple[int, ...]]
    leaders: dict[TopicPartition, int]
    missing_topics: frozenset[str]
    """Topics asked for that the cluster does not have."""

    def broker_metadata(self, ids: Iterable[int], rack_aware: bool) -> list[BrokerMetadata]:
        """ReassignPartitionsCommand.getBrokerMetadata: the live ones of `ids` (in cluster order), with
        racks when asked; a mix of brokers with and without racks is refused."""
        wanted = set(ids)
        found = [
            BrokerMetadata(b, rack if rack_aware else None)
            for b, rack in sorted(self.brokers.items())
            if b in wanted
        ]
        rackless = sum(1 for b in found if b.rack is None)
        if rack_aware and rackless not in (0, len(found)):
            raise ReassignError(
                "Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                "replica assignment without rack information."
            )
        return found


async def cluster_state(cluster: Cluster, topics: Iterable[str] | None = None) -> ClusterState:
    """Live brokers and the replicas and leaders of `topics` (None: every topic)."""
    names = None if topics is None else sorted(set(topics))
    response = await cluster.metadata_response(names)
    brokers = {b.node_id: getattr(b, "rack", None) for b in response.brokers}
    replicas: dict[TopicPartition, tuple[int, ...]] = {}
    leaders: dict[TopicPartition, int] = {}
    missing = set()
    for topic in response.topics:
        if topic.error_code != ErrorCode.none:
            missing.add(topic.name)
            continue
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            replicas[tp] = tuple(p.replica_nodes)
            leaders[tp] = p.leader_id
    return ClusterState(brokers, replicas, leaders, frozenset(missing))


async def replica_sizes(
    cluster: Cluster, brokers: Iterable[int], partitions: Iterable[TopicPartition] | None
) -> dict[int, dict[TopicPartition, int]]:
    """Broker -> partition -> bytes of its replica there (DescribeLogDirs; future logs left out).

    Only live brokers are asked; one that cannot answer is left out rather than failing the whole plan.
    """
    wanted = None if partitions is None else sorted(set(partitions))
    found: dict[int, dict[TopicPartition, int]] = {}
    for broker in sorted(set(brokers)):
        try:
            client = await cluster.node(broker)
            cls = client.request_type(DESCRIBE_LOG_DIRS)
        except ClientError:
            continue
        topic_cls = nested_type(cls, "DescribableLogDirTopic")
        topics = None
        if wanted is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in wanted:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())
        try:
            response = await client.send(build(cls, topics=topics))
        except ClientError:
            continue
        sizes: dict[TopicPartition, int] = {}
        for result in response.results:
            if result.error_code != ErrorCode.none:
                continue
            for topic in result.topics:
                for p in topic.partitions:
                    if not p.is_future_key:
                        tp = TopicPartition(topic.name, p.partition_index)
                        sizes[tp] = sizes.get(tp, 0) + p.partition_size
        found[broker] = sizes
    return found


def partition_sizes(
    per_broker: Mapping[int, Mapping[TopicPartition, int]],
    leaders: Mapping[TopicPartition, int],
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, int]:
    """A partition's size: its leader's replica, or the largest replica known when the leader's is not."""
    sizes = {}
    for tp in partitions:
        leader = leaders.get(tp, -1)
        if tp in per_broker.get(leader, {}):
            sizes[tp] = per_broker[leader][tp]
        else:
            sizes[tp] = max((s[tp] for s in per_broker.values() if tp in s), default=0)
    return sizes


async def list_reassignments(
    cluster: Cluster, partitions: Iterable[TopicPartition] | None = None
) -> dict[TopicPartition, OngoingReassignment]:
    """ListPartitionReassignments of `partitions` (None: every ongoing one)."""
    client = cluster.bootstrap
    cls = _request_type(cluster, LIST_PARTITION_REASSIGNMENTS)
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(set(partitions)):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topic_cls = nested_type(cls, "ListPartitionReassignmentsTopics")
        topics = tuple(topic_cls(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
    response = await client.send(build(cls, timeout=TIMEOUT, topics=topics))
    if response.error_code != ErrorCode.none:
        raise ReassignError(f"cannot list partition reassignments: {_reason(response)}.")
    return {
        TopicPartition(topic.name, p.partition_index): OngoingReassignment(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)
        )
        for topic in response.topics
        for p in topic.partitions
    }


async def alter_reassignments(
    cluster: Cluster, targets: Mapping[TopicPartition, Iterable[int] | None]
) -> dict[TopicPartition, str]:
    """AlterPartitionReassignments: each partition to its target replicas, or cancelled (None).

    Returns the partitions the controller refused, with its reason; the others were accepted.
    """
    if not targets:
        return {}
    client = cluster.bootstrap
    cls = _request_type(cluster, ALTER_PARTITION_REASSIGNMENTS)
    topic_cls = nested_type(cls, "ReassignableTopic")
    partition_cls = nested_type(cls, "ReassignablePartition")
    by_topic: dict[str, list[Any]] = {}
    for tp in sorted(targets):
        replicas = targets[tp]
        by_topic.setdefault(tp.topic, []).append(
            partition_cls(
                partition_index=tp.partition, replicas=None if replicas is None else tuple(replicas)
            )
        )
    request = build(
        cls,
        timeout=TIMEOUT,
        allow_replication_factor_change=True,
        topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )
    response = await client.send(request)
    if response.error_code != ErrorCode.none:
        reason = _reason(response)
        return dict.fromkeys(targets, reason)
    errors = {}
    for topic in response.responses:
        for p in topic.partitions:
            if p.error_code != ErrorCode.none:
                errors[TopicPartition(topic.name, p.partition_index)] = _reason(p)
    return errors


def _request_type(cluster: Cluster, api_key: int) -> type:
    client = cluster.bootstrap
    if api_key not in client.broker_versions:
        from kcli.protocol.messages import api_name

        raise ReassignError(
            f"{client.address} does not offer {api_name(api_key)}, which partition reassignment needs."
        )
    return client.request_type(api_key)


def _reason(answer: Any) -> str:
    message = getattr(answer, "error_message", None)
    return (message or ErrorCode(answer.error_code).name.upper()).rstrip(".")
