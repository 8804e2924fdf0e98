"""What a part of the Raft client (elections, Fetch replication, snapshots, live replicas, the voter
change handlers) may read and call of the client: `RaftClientState`, a Protocol below the parts, so
no part names KafkaRaftClient and the client alone imports them (as Kafka's handlers get the
collaborators they use, not the client)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import deque
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from formats.records import ControlType
from kcli.broker.raft.leader_state import LeaderState
from kcli.broker.raft.metadata_log import LoggedBatch, MetadataLog
from kcli.broker.raft.quorum_config import RaftConfig
from kcli.broker.raft.quorum_state import QuorumState
from kcli.broker.raft.raft_listener import RaftListener
from kcli.broker.raft.snapshots import SnapshotId
from kcli.broker.raft.voter_history import VoterSetHistory
from kcli.client import NodeConnections
from kcli.voters import VoterSet


class FetchRequests(Protocol):
    """Fetch replication, as the live-replica probe uses it."""

    def fetch_request(self, epoch: int, max_wait_ms: int) -> Any: ...


class SnapshotFetches(Protocol):
    """Snapshots, as a follower's Fetch uses them."""

    async def fetch_snapshot(self, leader_id: int, snapshot_id: SnapshotId) -> bool: ...


class ReplicaKeys(Protocol):
    """The live replicas (which directory holds each replica id), as elections, Fetch, FetchSnapshot
    and AddRaftVoter check them."""

    directories: dict[int, tuple[uuid.UUID | None, float]]

    def live_holder(self, replica_id: int, directory_id: uuid.UUID | None) -> uuid.UUID | None: ...

    def serves_replica(self, what: str, replica_id: int, directory_id: uuid.UUID | None) -> bool: ...

    def log_taken(
        self, what: str, replica_id: int, directory_id: uuid.UUID | None, holder: uuid.UUID | None
    ) -> None: ...

    async def another_leads_as_this_node(self, leader_id: int, epoch: int) -> bool: ...


class VoterUpdates(Protocol):
    """The UpdateRaftVoter sender, as a follower's Fetch loop drives it."""

    def update_voter_due(self) -> bool: ...

    async def maybe_update_voter(self, leader_id: int) -> None: ...


class RaftClientState(Protocol):
    """The client's state and the calls its parts share; KafkaRaftClient is the one implementation."""

    node_id: int
    directory_id: uuid.UUID | None
    cluster_id: str
    dynamic: bool
    listener_name: str
    local_listeners: dict[str, tuple[str, int]]
    config: RaftConfig
    log: MetadataLog
    quorum: QuorumState
    history: VoterSetHistory
    voter_addresses: dict[int, tuple[str, int]]
    endpoints: dict[int, tuple[str, int]]
    announced: dict[int, tuple[int, tuple[str, int]]]
    voter_change: tuple[int, asyncio.Future[None]] | None
    leader_state: LeaderState | None
    high_watermark: int
    latest_snapshot: SnapshotId | None
    raft_listeners: list[RaftListener]
    uncommitted: deque[LoggedBatch]
    caught_up: asyncio.Event
    changed: asyncio.Event
    appended: asyncio.Event
    peers: NodeConnections
    election_deadline: float
    fetch_deadline_override: tuple[int, int, float] | None
    fetched_from_leader: bool
    shutting_down: bool
    fatal_error: Exception | None
    rng: random.Random
    fetch_replication: FetchRequests
    snapshots: SnapshotFetches
    live_replicas: ReplicaKeys
    update_voter: VoterUpdates

    @property
    def epoch(self) -> int: ...

    @property
    def is_only_voter(self) -> bool: ...

    @property
    def kraft_version(self) -> int: ...

    @property
    def own_directory(self) -> uuid.UUID: ...

    async def send(self, node_id: int, request: Any, *, timeout: float | None = None) -> Any | None: ...

    async def wait_changed(self, seconds: float) -> bool: ...

    def transitioned(self) -> None: ...

    def reset_election_timer(self, backoff_ms: float | None = None) -> None: ...

    def leads(self, epoch: int) -> bool: ...

    def handle_epoch_info(self, error: ErrorCode, leader_id: int, leader_epoch: int) -> bool: ...

    def check_cluster_id(self, cluster_id: str | None) -> ErrorCode: ...

    def check_fetch_epoch(self, requested: int) -> ErrorCode: ...

    def fail_config(self, sentence: str) -> None: ...

    def address_of(self, node_id: int) -> tuple[str, int] | None: ...

    def local_address(self) -> tuple[str, int] | None: ...

    def note_endpoints(self, endpoints: Any) -> None: ...

    def leader_endpoints_field(self, cls: type) -> tuple[Any, ...]: ...

    def leader_node_endpoints(self, cls: type) -> tuple[Any, ...]: ...

    def last_offset_and_epoch(self) -> tuple[int, int]: ...

    def on_leader_append(self) -> None: ...

    def update_high_watermark(self, high_watermark: int) -> None: ...

    def voters_changed(self) -> None: ...

    def load_kraft_records(self, snapshot_id: SnapshotId) -> None: ...

    def start_of_epoch_kraft_records(self) -> list[tuple[ControlType, bytes]]: ...

    def append_control_batch(
        self, batch: bytes, start: int, kraft: tuple[tuple[int, ControlType, Any], ...], now_ms: int
    ) -> None: ...

    def append_voters(self, voters: VoterSet, *, now_ms: int) -> int: ...


class RaftPart:
    """A part of one node's KafkaRaftClient (elections, Fetch replication, snapshots, a voter change
    handler ...): it reads and moves the client's state, which the client alone holds."""

    def __init__(self, raft: RaftClientState) -> None:
        self.raft = raft
