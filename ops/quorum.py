"""`kcli cluster status`: the brokers (fenced or not, rack) and the controller quorum, over standard APIs.

DescribeCluster (v1+, fenced brokers included from v2, KIP-1073) lists the brokers; DescribeQuorum,
which a broker forwards to the quorum's leader, gives the leader, its epoch, the high watermark and each
voter's and observer's log end offset and fetch times, as `kafka-metadata-quorum.sh describe` prints them.
The same requests work against Apache Kafka.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.cluster import DESCRIBE_CLUSTER, ENDPOINT_CONTROLLERS, Cluster, ClusterError
from kcli.protocol.messages import build, nested_type

DESCRIBE_QUORUM = 55
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
    directory_id: uuid.UUID = uuid.UUID(int=0)
    """DescribeQuorum v2's ReplicaDirectoryId (KIP-853); zero before v2 or when the replica sent none."""


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_id: str
    brokers: list[BrokerStatus]
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: list[ReplicaStatus]
    endpoints: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Each voter's controller endpoints as "LISTENER://host:port" (DescribeQuorum v2's Nodes; none before)."""


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
    quorum_client = client
    if described.error_code is ErrorCode.mismatched_endpoint_type:  # a controller (--bootstrap-controller)
        fields["endpoint_type"] = ENDPOINT_CONTROLLERS
        described = await client.send(cls(**fields))
        if described.error_code is ErrorCode.none:
            # only the active controller answers DescribeQuorum: Kafka's admin client sends it there
            quorum_client = await cluster.active_controller()
        described = dataclasses.replace(described, brokers=())  # the controllers are not brokers
    if described.error_code is not ErrorCode.none:
        raise ClusterError(f"DescribeCluster failed: {described.error_code.name}.")
    return await _describe_quorum(quorum_client, described)


async def _describe_quorum(client: Any, described: Any) -> ClusterStatus:
    """DescribeQuorum to `client` (a broker forwards it; a controller must be the active one), with the
    brokers of `described` (DescribeCluster's answer)."""
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
            getattr(state, "replica_directory_id", None) or uuid.UUID(int=0),
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
        {
            node.node_id: tuple(f"{lst.name}://{lst.host}:{lst.port}" for lst in node.listeners)
            for node in getattr(quorum, "nodes", ())
        },
    )


# --- controller membership (KIP-853): kafka-metadata-quorum.sh add-controller / remove-controller ---------

ADD_RAFT_VOTER = 80
REMOVE_RAFT_VOTER = 81


async def add_raft_voter(
    cluster: Cluster,
    voter_id: int,
    directory_id: uuid.UUID,
    endpoints: list[tuple[str, str, int]],
) -> None:
    """AddRaftVoter (80) with the new controller's replica key and endpoints, to the bootstrap broker
    (which forwards it) or from controllers the active one; ClusterError on refusal."""
    client = await cluster.least_loaded_or_active_controller()
    cls = client.request_type(ADD_RAFT_VOTER)
    listener_cls = nested_type(cls, "Listener")
    fields: dict[str, Any] = {
        "cluster_id": None,
        "timeout": timedelta(seconds=cluster.request_timeout),
        "voter_id": voter_id,
        "voter_directory_id": directory_id,
        "listeners": tuple(listener_cls(name=n, host=h, port=p) for n, h, p in endpoints),
    }
    if client.version(ADD_RAFT_VOTER) >= 1:
        fields["ack_when_committed"] = True
    response = await client.send(build(cls, **fields))
    _raise_on_error("AddRaftVoter", response)


async def remove_raft_voter(cluster: Cluster, voter_id: int, directory_id: uuid.UUID) -> None:
    """RemoveRaftVoter (81), sent as AddRaftVoter is; ClusterError on refusal."""
    client = await cluster.least_loaded_or_active_controller()
    cls = client.request_type(REMOVE_RAFT_VOTER)
    response = await client.send(
        build(cls, cluster_id=None, voter_id=voter_id, voter_directory_id=directory_id)
    )
    _raise_on_error("RemoveRaftVoter", response)


def _raise_on_error(what: str, response: Any) -> None:
    if response.error_code is not ErrorCode.none:
        message = getattr(response, "error_message", None)
        detail = f": {message.rstrip('.')}" if message else ""
        raise ClusterError(f"{what} failed with {response.error_code.name.upper()}{detail}.")


def controller_identity(config_file: Path) -> tuple[int, uuid.UUID, list[tuple[str, str, int]]]:
    """What add-controller reads from the joining controller's configuration (MetadataQuorumCommand):
    node.id, the directory.id in its metadata log dir's meta.properties, and for each
    controller.listener.names entry its advertised (else bound) endpoint; an unset host is localhost."""
    from formats.checkpoints import uuid_from_base64
    from kcli.config import BrokerConfig
    from kcli.storage import load_meta_properties

    config = BrokerConfig.load(config_file=config_file, overrides=[])
    if not config.is_set("node.id"):
        raise ClusterError(
            "node.id not found in configuration file. Is this a valid controller configuration file?"
        )
    if not config.is_controller:
        raise ClusterError(
            "process.roles did not contain 'controller' in configuration file. Is this a valid controller "
            "configuration file?"
        )
    directory = config.metadata_log_dir
    meta = load_meta_properties([directory]).get(directory)
    if meta is None:
        raise ClusterError(f"Unable to read meta.properties from {directory}")
    if not meta.directory_id:
        raise ClusterError(f"No directory id found in {directory}")
    listeners = {item.name: item for item in config["listeners"]}  # type: ignore[attr-defined]
    for item in config["advertised.listeners"] or []:  # type: ignore[attr-defined]
        listeners[item.name] = item
    endpoints = []
    for name in config["controller.listener.names"] or []:  # type: ignore[attr-defined]
        found = listeners.get(name)
        if found is None:
            raise ClusterError(f"Cannot find information about controller listener name: {name}")
        endpoints.append((name, found.host or "localhost", found.port))
    return config.node_id, uuid_from_base64(meta.directory_id), endpoints
