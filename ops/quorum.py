"""`kcli cluster status`: the brokers (fenced or not, rack) and the controller quorum, over standard APIs.

DescribeCluster (v1+, fenced brokers included from v2, KIP-1073) lists the brokers; DescribeQuorum,
which a broker forwards to the quorum's leader, gives the leader, its epoch, the high watermark and each
voter's and observer's log end offset and fetch times, as `kafka-metadata-quorum.sh describe` prints them.
The same requests work against Apache Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcli.cluster import Cluster, ClusterError
from kcli.protocol.messages import nested_type

DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    node_id: int
    host: str
    port: int
    rack: str | None
    fenced: bool


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    node_id: int
    log_end_offset: int
    lag: int
    last_fetch_ms: int
    last_caught_up_ms: int
    is_voter: bool


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_id: str
    brokers: list[BrokerStatus]
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: list[ReplicaStatus]


async def describe_cluster_status(cluster: Cluster) -> ClusterStatus:
    """Brokers and quorum of the cluster `cluster` is connected to."""
    client = cluster.bootstrap
    cls = client.request_type(DESCRIBE_CLUSTER)
    fields = {"include_cluster_authorized_operations": False}
    if client.version(DESCRIBE_CLUSTER) >= 1:
        fields["endpoint_type"] = 1
    if client.version(DESCRIBE_CLUSTER) >= 2:
        fields["include_fenced_brokers"] = True
    described = await client.send(cls(**fields))
    if described.error_code is not ErrorCode.none:
        raise ClusterError(f"DescribeCluster failed: {described.error_code.name}.")
    brokers = sorted(
        (
            BrokerStatus(b.broker_id, b.host, b.port, b.rack, bool(getattr(b, "is_fenced", False)))
            for b in described.brokers
        ),
        key=lambda b: b.node_id,
    )
    cls = client.request_type(DESCRIBE_QUORUM)
    topic_cls, partition_cls = nested_type(cls, "TopicData"), nested_type(cls, "PartitionData")
    request = cls(
        topics=(topic_cls(topic_name=METADATA_TOPIC, partitions=(partition_cls(partition_index=0),)),)
    )
    quorum = await client.send(request)
    if quorum.error_code is not ErrorCode.none:
        raise ClusterError(f"DescribeQuorum failed: {quorum.error_code.name}.")
    partition = quorum.topics[0].partitions[0]
    if partition.error_code is not ErrorCode.none:
        raise ClusterError(f"DescribeQuorum failed: {partition.error_code.name}.")
    leader_end = max((v.log_end_offset for v in partition.current_voters), default=-1)
    for voter in partition.current_voters:
        if voter.replica_id == partition.leader_id:
            leader_end = voter.log_end_offset

    def replica(state: object, is_voter: bool) -> ReplicaStatus:
        end = state.log_end_offset  # type: ignore[attr-defined]
        return ReplicaStatus(
            state.replica_id,  # type: ignore[attr-defined]
            end,
            max(leader_end - end, 0) if end >= 0 else -1,
            getattr(state, "last_fetch_timestamp", -1),
            getattr(state, "last_caught_up_timestamp", -1),
            is_voter,
        )

    replicas = [replica(v, True) for v in partition.current_voters] + [
        replica(o, False) for o in partition.observers
    ]
    return ClusterStatus(
        described.cluster_id,
        brokers,
        partition.leader_id,
        partition.leader_epoch,
        partition.high_watermark,
        replicas,
    )
