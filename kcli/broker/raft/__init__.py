"""KRaft: the metadata quorum's Raft client and the `__cluster_metadata-0` log it replicates.

- `metadata_log`: the partition on disk (Kafka's KafkaMetadataLog)
- `quorum_state`: this node's Raft state, durable in `quorum-state` (Kafka's QuorumState)
- `raft_client`: the client (KafkaRaftClient): start and shutdown, the driver that runs each state,
  appends and commits, the high watermark handed to listeners, the voter set, the network; it owns the
  state and gives it to its parts, one concept each:
  - `elections`: Vote and PreVote both ways, BeginQuorumEpoch, EndQuorumEpoch, the leader's check quorum
  - `fetch_replication`: a follower's Fetch loop and the leader's Fetch answers (FollowerState)
  - `leader_state`: each replica's progress and the high watermark (LeaderState)
  - `snapshot_handler`: snapshots loaded, written, fetched (FetchSnapshot), served; the log cleaned
  - `voter_changes`: KIP-853's AddVoterHandler, RemoveVoterHandler, UpdateVoterHandler
  - `live_replicas`: one live process per node id (replica keys' directory ids)
  - `raft_util`: the KRaft RPCs' keys, versions and one-partition envelope (RaftUtil)
  - `raft_part`: what the parts may read and call of the client (a Protocol), so none names it
- `quorum_config`: the client's timeouts and metadata-log retention (QuorumConfig)
- `raft_listener`: what the client tells its listeners (RaftClient.Listener, LeaderAndEpoch)
- `snapshots`: snapshot files (names, writes, reads)
- `voter_history`: a dynamic quorum's voter set and kraft.version by offset (VoterSetHistory)

A static quorum (controller.quorum.voters) has its voters from the configuration; a dynamic one
(controller.quorum.bootstrap.servers, KIP-853) from the KRaftVersion and Voters records of the bootstrap
snapshot `kcli storage format` wrote, the log and the snapshots.
"""

from __future__ import annotations

import uuid

from formats.checkpoints import uuid_from_base64
from kcli.broker.raft.metadata_log import LoggedBatch, MetadataLog, MetadataLogError, metadata_log_dir
from kcli.broker.raft.quorum_config import RaftConfig
from kcli.broker.raft.raft_client import KafkaRaftClient
from kcli.broker.raft.raft_listener import LeaderAndEpoch, RaftListener
from kcli.broker.raft.raft_util import NotLeaderError
from kcli.config import BrokerConfig
from kcli.storage import load_meta_properties


def open_raft_client(config: BrokerConfig, cluster_id: str) -> KafkaRaftClient:
    """Open (recover) the metadata log and make this node's Raft client over it (not yet started)."""
    created = not metadata_log_dir(config).exists()
    metadata_log = MetadataLog.open(
        metadata_log_dir(config),
        segment_bytes=int(config["metadata.log.segment.bytes"]),  # type: ignore[call-overload]
        segment_ms=int(config["metadata.log.segment.ms"]),  # type: ignore[call-overload]
    )
    dynamic = bool(config["controller.quorum.bootstrap.servers"]) and not config["controller.quorum.voters"]
    if dynamic:  # KIP-853: the voters are in the log (and the bootstrap snapshot `kcli storage format` wrote)
        voters: dict[int, tuple[str, int]] = {}
    else:
        voters = config.quorum_voters or {config.node_id: ("127.0.0.1", 0)}  # no listener: a quorum of one
    names = config["controller.listener.names"] or ["CONTROLLER"]  # type: ignore[index]
    own = config.advertised_controller_listener
    settings = {key: config[key] for key in RAFT_SETTINGS}
    raft = KafkaRaftClient(
        metadata_log,
        config.node_id,
        voters,
        cluster_id=cluster_id,
        config=RaftConfig.from_values(settings),
        directory_id=metadata_directory_id(config),
        dynamic=dynamic,
        listener_name=names[0],  # type: ignore[index]
        local_listeners={own.name: (own.host, own.port)} if own is not None else None,
        bootstrap_servers=config.quorum_bootstrap_servers if dynamic else (),
        security=config.controller_security(),
    )
    raft.created_log_dir = created
    return raft


def metadata_directory_id(config: BrokerConfig) -> uuid.UUID | None:
    """The directory.id of the metadata log dir's meta.properties: with node.id, this node's replica key
    (KIP-853), as Kafka's KafkaRaftManager takes it; None when that dir has none."""
    meta = load_meta_properties([config.metadata_log_dir]).get(config.metadata_log_dir)
    if meta is None or not meta.directory_id:
        return None
    return uuid_from_base64(meta.directory_id)


RAFT_SETTINGS = (
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "controller.quorum.election.backoff.max.ms",
    "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms",
    "metadata.max.retention.bytes",
    "metadata.max.retention.ms",
)

__all__ = [
    "KafkaRaftClient",
    "LeaderAndEpoch",
    "LoggedBatch",
    "MetadataLog",
    "MetadataLogError",
    "NotLeaderError",
    "RaftConfig",
    "RaftListener",
    "open_raft_client",
]
