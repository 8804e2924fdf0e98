"""KRaft: the metadata quorum's Raft, as Kafka's KafkaRaftClient runs it on `__cluster_metadata-0`.

Pull-based Raft. Voters elect a leader (pre-vote, then vote, KIP-595 and KIP-996); the leader writes a
LeaderChange control batch at the start of its epoch and then the active controller's batches;
followers and observers (broker-only nodes) send it Fetch requests, which carry their log end and
last fetched epoch, so the leader learns how far each voter's log reaches and answers a diverging
epoch when a follower's tail is not in its log (the follower truncates it). The high watermark is the
end offset a majority of voters holds, and only batches below it are handed to listeners, in log
order, exactly once: the controller and the MetadataLoader of every node.

Everything runs on the event loop but the fsyncs, which run on a worker thread: a voter's Fetch
offset must mean "durable on this voter", so a follower flushes before its next Fetch and the leader
counts its own log end only once flushed.

A quorum of one (kcli's default node) takes the same path: it elects itself at start-up (a new epoch
each start, as Kafka does), and its high watermark follows its own flushes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from formats.checkpoints import uuid_to_base64
from formats.errors import FormatError
from formats.internal import MetadataRecord, decode_metadata_record
from formats.kraft_snapshot import build_snapshot, read_snapshot
from formats.records import (
    ControlType,
    build_kraft_control_batch,
    build_leader_change_batch,
    control_type,
    kraft_version_value,
    leader_change_value,
    read_batch,
    read_leader_change,
    voters_value,
)
from formats.segment import StopReason, walk
from kcli.broker.log import AppendOrigin, LogStorageError, OffsetOutOfRange, RecordError
from kcli.broker.raft.metadata_log import (
    CLUSTER_METADATA_TOPIC_ID,
    MAX_BATCH_BYTES,
    LoggedBatch,
    MetadataLog,
    MetadataLogError,
    logged_batch,
)
from kcli.broker.raft.quorum_state import NO_ID, QuorumState, RaftState
from kcli.broker.raft.snapshots import (
    BOOTSTRAP_SNAPSHOT,
    SnapshotId,
    delete_snapshot,
    list_snapshots,
    read_snapshot_records,
    remove_partial_snapshots,
    write_snapshot,
)
from kcli.broker.raft.voter_history import VoterSetHistory
from kcli.client import NodeConnections
from kcli.config import CLUSTER_METADATA_TOPIC
from kcli.protocol.messages import build, nested_type, request_type, response_type
from kcli.voters import VoterNode, VoterSet

log = logging.getLogger("kcli.broker.raft")

FETCH = 1
VOTE = 52
BEGIN_QUORUM_EPOCH = 53
END_QUORUM_EPOCH = 54
DESCRIBE_QUORUM = 55
FETCH_SNAPSHOT = 59
API_VERSIONS = 18
ADD_RAFT_VOTER = 80
REMOVE_RAFT_VOTER = 81
UPDATE_RAFT_VOTER = 82
ADD_VOTER_CAUGHT_UP_MS = 3600 * 1000
"""LeaderState.isReplicaCaughtUp: a new voter has caught up once and fetched within the last hour."""
FETCH_SNAPSHOT_VERSION = 1
FETCH_MAX_WAIT_MS = 500  # KafkaRaftClient's fetch max wait
MAX_EPOCH = 2**31 - 1 - 2**20
"""The highest epoch this node moves to: each election adds one to an int32, so a request claiming an
epoch near 2**31 (a bug, a corrupt or a forged frame) would leave the quorum unable to elect and the
epoch impossible to write. A million elections of headroom; Kafka has no such guard."""
FETCH_VERSION = 17
VOTE_VERSION = 2
QUORUM_EPOCH_VERSION = 1
DESCRIBE_QUORUM_VERSION = 2
NODE_ID_TAKEN = ErrorCode.duplicate_broker_registration
"""The top-level answer to a Fetch, FetchSnapshot or Vote whose replica id a live process with another
directory id holds. Kafka's own code for a node id already in use ("This broker ID is already in use"),
which its controller answers a BrokerRegistration with while the id's last incarnation is still alive;
no Raft answer uses it otherwise, so a node cannot read it as anything else, and a stock Kafka node
logs it by that name."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Kafka's `controller.quorum.*` timeouts, in milliseconds."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    retention_bytes: int = 100 * 1024 * 1024  # metadata.max.retention.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # metadata.max.retention.ms

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> RaftConfig:
        """From `controller.quorum.<name>` settings; missing ones keep Kafka's defaults."""
        names = {
            "election_timeout_ms": "controller.quorum.election.timeout.ms",
            "fetch_timeout_ms": "controller.quorum.fetch.timeout.ms",
            "election_backoff_max_ms": "controller.quorum.election.backoff.max.ms",
            "request_timeout_ms": "controller.quorum.request.timeout.ms",
            "retry_backoff_ms": "controller.quorum.retry.backoff.ms",
            "retention_bytes": "metadata.max.retention.bytes",
            "retention_ms": "metadata.max.retention.ms",
        }
        return cls(**{attr: int(values[key]) for attr, key in names.items() if values.get(key) is not None})


class LeaderAndEpoch(NamedTuple):
    leader_id: int
    epoch: int


class RaftListener(Protocol):
    """Kafka's RaftClient.Listener."""

    def handle_commit(self, batches: Sequence[LoggedBatch]) -> None:
        """Batches below the high watermark, in log order, each exactly once."""

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """A new epoch or leader; for this node as leader, only once it has every batch before its epoch."""

    def handle_load_snapshot(self, snapshot_id: SnapshotId, records: Sequence[MetadataRecord]) -> None:
        """The whole state as of the snapshot's end offset: replace what was loaded before."""


class NotLeaderError(Exception):
    """An append or a wait for commit on a node that is not (or no longer) the leader of that epoch."""


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica, for the high watermark and DescribeQuorum."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    leader_end_at_last_fetch: int = -1
    high_watermark_sent: int = -1  # the high watermark of the last Fetch answer it got

    def update(self, end_offset: int, now_ms: int, leader_end_offset: int) -> None:
        """Kafka's caught-up rule: reached the leader's end now, or the end it had at the previous fetch."""
        if end_offset >= leader_end_offset:
            self.last_caught_up_ms = now_ms
        elif end_offset >= self.leader_end_at_last_fetch >= 0:
            self.last_caught_up_ms = self.last_fetch_ms
        self.end_offset, self.last_fetch_ms, self.leader_end_at_last_fetch = (
            end_offset,
            now_ms,
            leader_end_offset,
        )


@dataclass
class LeaderState:
    """Kafka's LeaderState: the epoch start, each replica's progress, the high watermark."""

    node_id: int
    epoch: int
    epoch_start_offset: int
    voters: dict[int, ReplicaProgress]
    granting_voters: frozenset[int]
    observers: dict[int, ReplicaProgress] = field(default_factory=dict)
    high_watermark: int = -1
    acknowledged: set[int] = field(default_factory=set)
    check_quorum_fetched: set[int] = field(default_factory=set)

    def update_local(self, flushed_end_offset: int, now_ms: int) -> bool:
        self.voters[self.node_id].update(flushed_end_offset, now_ms, flushed_end_offset)
        return self._maybe_update_high_watermark()

    def update_replica(self, replica_id: int, end_offset: int, now_ms: int, leader_end_offset: int) -> bool:
        """A Fetch from `replica_id` at `end_offset`; True when the high watermark moved."""
        if replica_id in self.voters:
            self.voters[replica_id].update(end_offset, now_ms, leader_end_offset)
            self.acknowledged.add(replica_id)
            self.check_quorum_fetched.add(replica_id)
            return self._maybe_update_high_watermark()
        if replica_id >= 0:
            self.observers.setdefault(replica_id, ReplicaProgress()).update(
                end_offset, now_ms, leader_end_offset
            )
        return False

    def progress(self, replica_id: int) -> ReplicaProgress | None:
        return self.voters.get(replica_id) or self.observers.get(replica_id)

    def set_voters(self, voter_ids: frozenset[int]) -> None:
        """A new voter set (KIP-853), committed or not: replicas move between voters and observers with
        their progress (Kafka's LeaderState.updateVoterAndObserverStates)."""
        for replica_id in [v for v in self.voters if v not in voter_ids]:
            progress = self.voters.pop(replica_id)
            if replica_id != self.node_id:
                self.observers[replica_id] = progress
        for replica_id in voter_ids:
            if replica_id not in self.voters:
                self.voters[replica_id] = self.observers.pop(replica_id, None) or ReplicaProgress()
        self.acknowledged &= set(voter_ids) | {self.node_id}

    def _maybe_update_high_watermark(self) -> bool:
        """The end offset of the voter at index voters/2 when sorted high to low, once past the epoch start."""
        ends = sorted((p.end_offset for p in self.voters.values()), reverse=True)
        if not ends:
            return False
        candidate = ends[len(ends) // 2]
        if candidate > self.epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False


class KafkaRaftClient:
    """One node's Raft client: a voter when its id is among `voters`, else an observer."""

    def __init__(
        self,
        metadata_log: MetadataLog,
        node_id: int,
        voters: dict[int, tuple[str, int]],
        *,
        cluster_id: str,
        config: RaftConfig | None = None,
        directory_id: uuid.UUID | None = None,
        dynamic: bool = False,
        listener_name: str = "CONTROLLER",
        local_listeners: dict[str, tuple[str, int]] | None = None,
        bootstrap_servers: Sequence[tuple[str, int]] = (),
    ) -> None:
        self.log = metadata_log
        self.node_id = node_id
        self.directory_id = directory_id
        """The metadata log dir's directory.id (meta.properties): this process's half of its replica key
        (KIP-853), sent with its Fetch, FetchSnapshot and Vote requests; None when the dir has none."""
        self.dynamic = dynamic
        """A dynamic quorum (KIP-853, controller.quorum.bootstrap.servers): the voters come from the
        KRaftVersion and Voters records of the log and snapshots, by offset. Else the static
        `voters` (controller.quorum.voters), exactly as before KIP-853."""
        self.listener_name = listener_name
        self.local_listeners = dict(local_listeners or {})
        """This node's controller endpoints as the voters reach it ({listener name: (host, port)})."""
        self.history = VoterSetHistory(None if dynamic else VoterSet.static(voters, listener_name))
        self.voter_addresses: dict[int, tuple[str, int]] = {} if dynamic else dict(voters)
        self.bootstrap_servers = list(bootstrap_servers)
        """controller.quorum.bootstrap.servers: asked, as ids -2, -3, ..., for the leader (Kafka's
        QuorumConfig gives bootstrap servers such negative ids)."""
        self._endpoints: dict[int, tuple[str, int]] = {}
        """Leaders' endpoints learned from answers (NodeEndpoints) and BeginQuorumEpoch."""
        self._announced: dict[int, tuple[int, tuple[str, int]]] = {}
        """Per leader id, the epoch it announced itself in and the endpoint it announced (BeginQuorumEpoch's
        LeaderEndpoints, its Fetch answers' NodeEndpoints). Kafka's follower fetches from the endpoints
        that told it of the leader (FollowerState.leaderEndpoints), the voter set's only when the message
        carried none: the two differ when this node's voter set comes from a log that diverged from the
        leader's (a Voters record it has yet to truncate)."""
        self._voter_change: tuple[int, asyncio.Future[None]] | None = None
        """The leader's one voter change in flight (KIP-853): the offset of its Voters record, and
        what completes when the high watermark passes it."""
        self._voter_update: tuple[int, float] = (-1, 0.0)
        """(epoch, monotonic time) of this voter's last UpdateRaftVoter; see `_update_voter_due`."""
        self.cluster_id = cluster_id
        self.config = config or RaftConfig()
        self.quorum = QuorumState(metadata_log.directory, node_id, frozenset(voters))
        self.leader_state: LeaderState | None = None
        self.high_watermark = -1
        self.latest_snapshot: SnapshotId | None = None
        self.created_log_dir = False
        """This start made `__cluster_metadata-0`: a start that fails before any record leaves no trace."""
        self._listeners: list[RaftListener] = []
        self._uncommitted: deque[LoggedBatch] = deque()
        self._commit_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._caught_up = asyncio.Event()
        self._changed = asyncio.Event()
        self._appended = asyncio.Event()  # wakes parked leader Fetches
        self._peers = NodeConnections(f"raft-client-{node_id}")
        self._task: asyncio.Task[None] | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._fired_leader: LeaderAndEpoch | None = None
        self._election_deadline = 0.0
        # EndQuorumEpoch from the leader: (its epoch, its id, when this follower stops waiting for it)
        self._fetch_deadline_override: tuple[int, int, float] | None = None
        self._fetched_from_leader = False
        self._election_retries = 0
        self._live_directories: dict[int, tuple[uuid.UUID | None, float]] = {}
        """Per replica id, the directory id of the last Fetch or FetchSnapshot this node served it as
        leader, and when (monotonic): the process that holds the id while it fetched within
        controller.quorum.fetch.timeout.ms."""
        # the last epoch an answer said this node's id leads (_another_leads_as_this_node)
        self._probed_epoch = -1
        self._refusals_logged: set[tuple[int, uuid.UUID | None]] = set()
        self._voter_refusals_logged: set[tuple[int, ErrorCode]] = set()
        self._shutting_down = False
        self.fatal_error: Exception | None = None
        """What stopped this client for good (Kafka's fatal faults): see `_fail`."""
        self.fatal_fault_handler: Callable[[Exception], None] | None = None
        """Told once, soon after, of the error that stopped this client: the process's way out (Kafka's
        KafkaRaftManager hands KafkaRaftClientDriver SharedServer's raft fault handler, a
        ProcessTerminatingFaultHandler). Before the node has caught up, `wait_caught_up` raises it too."""
        self._rng = random.Random()

    # --- lifecycle ---------------------------------------------------------------------------------

    @property
    def is_only_voter(self) -> bool:
        return set(self.voter_addresses) == {self.node_id}

    def register(self, listener: RaftListener) -> None:
        """Hand every batch committed from now on to `listener`, after the listeners registered before."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Read quorum-state and the log, then run the protocol in the background."""
        directory = self.log.directory
        remove_partial_snapshots(directory)
        snapshots = list_snapshots(directory)
        self.latest_snapshot = snapshot = snapshots[-1] if snapshots else None
        start = 0
        if self.dynamic and snapshot is None:
            self._load_kraft_records(BOOTSTRAP_SNAPSHOT)
        if snapshot is not None:
            if self.log.next_offset < snapshot.end_offset:  # the log lost what the snapshot holds
                self.log.log.truncate_fully_and_start_at(snapshot.end_offset)
            start = snapshot.end_offset
            self._load_snapshot(snapshot)
        self.log.update_high_watermark(0)  # learned again from the quorum, never trusted from disk
        for batch in self.log.batches(start):
            self._uncommitted.append(batch)
            if self.dynamic and batch.kraft_records:
                self.history.apply(batch.kraft_records)
        self._voters_changed()
        last_epoch = self._last_offset_and_epoch()[1]
        self.quorum.initialize(last_epoch)
        if self.quorum.is_voter and self.is_only_voter and self.quorum.state is not RaftState.CANDIDATE:
            self.quorum.become_candidate()
        self._reset_election_timer()
        if self.quorum.state is RaftState.CANDIDATE and self.is_only_voter:
            self._become_leader()
        self._task = asyncio.create_task(self._run(), name="kcli-raft")

    async def wait_caught_up(self) -> None:
        """Until this node has the batches committed when it first heard from the leader (or led).

        Raises what stopped the client if a committed batch could not be applied.
        """
        await self._caught_up.wait()
        if self.fatal_error is not None:
            raise self.fatal_error

    def _fail(self, exc: Exception) -> None:
        """A fatal fault: a committed batch that cannot be applied, a metadata log that cannot be
        written, a quorum that refuses this node. The client stops for good (no more Fetch, Vote or
        elections; writes and waits for commit fail) and the fault handler is told, once: as in Kafka,
        where KafkaRaftClientDriver hands any error of the Raft I/O thread to a fault handler that ends
        the process, a node must not go on serving metadata it can no longer follow."""
        if self.fatal_error is not None:
            return
        log.critical("raft: stopping: %s", exc)
        self.fatal_error = exc
        self._shutting_down = True
        self._caught_up.set()
        self._fail_commit_waiters()
        handler = self.fatal_fault_handler
        if handler is not None:
            asyncio.get_running_loop().call_soon(handler, exc)

    def discard_if_untouched(self) -> None:
        """After a failed first start: remove the metadata log this start created, if it holds nothing."""
        if self.created_log_dir and self.log.next_offset == 0:
            shutil.rmtree(self.log.directory, ignore_errors=True)

    async def shutdown(self) -> None:
        """Resign leadership (EndQuorumEpoch to the voters), stop, flush and close the log. After a fatal
        fault there is no resignation: the node has left the quorum (Kafka halts), the voters elect
        another leader once their fetch timeout passes."""
        self._shutting_down = True
        if self.quorum.is_leader and not self.is_only_voter and self.fatal_error is None:
            self.quorum.become_resigned()
            await self._send_end_quorum_epoch(timeout=min(self.config.request_timeout_ms / 1000, 1.0))
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
        self._fail_commit_waiters()
        await self._peers.close()

    # --- the voter set (KIP-853) ---------------------------------------------------------------------

    @property
    def kraft_version(self) -> int:
        return self.history.kraft_version

    @property
    def voter_set(self) -> VoterSet | None:
        """The latest voter set, committed or not."""
        return self.history.last_voter_set()

    def local_voter_node(self) -> VoterNode:
        """This replica as a voter: its key, its controller endpoints, the kraft.version range it supports."""
        return VoterNode(self.node_id, self.directory_id, dict(self.local_listeners), 0, 1)

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where to reach `node_id`: the current leader where it announced itself in this epoch, a
        voter's endpoint, a leader's from an answer, a bootstrap server."""
        announced = self._announced.get(node_id)
        if announced is not None and announced[0] == self.epoch and node_id == self.quorum.leader_id:
            return announced[1]
        address = self.voter_addresses.get(node_id)
        if address is None and self.dynamic:
            address = self._endpoints.get(node_id)
            if address is None and node_id <= -2 and -2 - node_id < len(self.bootstrap_servers):
                address = self.bootstrap_servers[-2 - node_id]
        return address

    def _voters_changed(self) -> None:
        """Take the latest voter set of the history into the quorum: who votes, where they listen, and
        the leader's quorum math (Kafka counts an uncommitted voter set at once)."""
        if not self.dynamic:
            return
        voters = self.history.last_voter_set()
        ids = set(voters.ids) if voters is not None else set()
        if (
            voters is not None
            and self.node_id in ids
            and not voters.is_voter(self.node_id, self.directory_id)
        ):
            ids.discard(self.node_id)  # this id votes with another directory: not this replica
        addresses = voters.addresses(self.listener_name) if voters is not None else {}
        self.voter_addresses = {i: addresses.get(i, self._endpoints.get(i, ("", 0))) for i in sorted(ids)}
        self.quorum.voters = frozenset(ids)
        if self.leader_state is not None:
            self.leader_state.set_voters(frozenset(ids))

    def _load_kraft_records(self, snapshot_id: SnapshotId) -> None:
        """The KRaftVersion and Voters records of a snapshot, at its end offset - 1 (the bootstrap
        snapshot's at -1); nothing when there is no such file."""
        path = self.log.directory / snapshot_id.file_name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise MetadataLogError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}.") from None
        try:
            control = read_snapshot(data).control_records
            self.history.apply(control, at=snapshot_id.end_offset - 1)
        except (FormatError, ValueError) as exc:
            raise MetadataLogError(f"cannot read {path}: {str(exc).rstrip('.')}.") from None

    def _start_of_epoch_kraft_records(self) -> list[tuple[ControlType, bytes]]:
        """LeaderState.appendStartOfEpochControlRecords: with kraft.version 1, KRaftVersion and Voters
        after the LeaderChange when the voter set is not in the log yet (only in the bootstrap
        snapshot) or this leader's endpoints differ from its entry."""
        voters, entry = self.history.last_voter_set(), self.history.last_entry()
        if self.kraft_version < 1 or voters is None or entry is None:
            return []
        local = self.local_voter_node()
        own = voters.voters.get(self.node_id)
        needs_update = own is not None and bool(local.listeners) and dict(own.listeners) != local.listeners
        if entry[0] >= 0 and not needs_update:
            return []
        updated = (voters.update_voter(local) if needs_update else None) or voters
        return [
            (ControlType.KRAFT_VERSION, kraft_version_value(self.kraft_version)),
            (ControlType.KRAFT_VOTERS, voters_value(updated.to_records())),
        ]

    def append_voters(self, voters: VoterSet, *, now_ms: int) -> int:
        """LeaderState.appendVotersRecord: a control batch with a Voters record in this leader's epoch;
        the new set counts at once. Returns the record's offset."""
        if not self.quorum.is_leader or self._shutting_down:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {self.epoch}")
        offset = self.log.next_offset
        value = voters_value(voters.to_records())
        batch = build_kraft_control_batch(
            [(ControlType.KRAFT_VOTERS, value)],
            base_offset=offset,
            partition_leader_epoch=self.epoch,
            timestamp=now_ms,
        )
        self._append_control_batch(batch, offset, ((offset, ControlType.KRAFT_VOTERS, value),), now_ms)
        self._on_leader_append()
        return offset

    def _append_control_batch(
        self, batch: bytes, start: int, kraft: tuple[tuple[int, ControlType, Any], ...], now_ms: int
    ) -> None:
        """Append a control batch of this leader's epoch starting at `start`, uncommitted; its KRaft
        records (offset, type, value), if any, change the voter set at once (KIP-853)."""
        try:
            self.log.log.append_as_leader(
                batch, leader_epoch=self.epoch, now_ms=now_ms, origin=AppendOrigin.RAFT_LEADER
            )
        except (OSError, LogStorageError, RecordError) as exc:
            raise MetadataLogError(f"cannot append to the metadata log: {exc}") from None
        last = kraft[-1][0] if kraft else start
        self._uncommitted.append(LoggedBatch(start, last, self.epoch, now_ms, (), 0, kraft))
        if kraft:
            self.history.apply(kraft)
            self._voters_changed()

    def _note_endpoints(self, endpoints: Any) -> None:
        """Leaders' endpoints an answer carries (NodeEndpoints, v16+ Fetch and the other KRaft RPCs)."""
        for endpoint in endpoints or ():
            self._endpoints[endpoint.node_id] = (endpoint.host, endpoint.port)

    def _leader_endpoints_field(self, cls: type) -> tuple[Any, ...]:
        """BeginQuorumEpoch / EndQuorumEpoch v1 LeaderEndpoints: this leader's listeners (dynamic only)."""
        if not self.dynamic:
            return ()
        endpoint_cls = nested_type(cls, "LeaderEndpoint")
        return tuple(
            build(endpoint_cls, name=name, host=host, port=port)
            for name, (host, port) in self.local_listeners.items()
        )

    def _local_address(self) -> tuple[str, int] | None:
        return self.local_listeners.get(self.listener_name) or self.voter_addresses.get(self.node_id)

    def _leader_node_endpoints(self, cls: type) -> tuple[Any, ...]:
        """The known leader's endpoint for an answer's NodeEndpoints, as Kafka's QuorumState.leaderEndpoints
        gives it to every answer: this node's own when it leads, where the leader is reached otherwise
        (a voter that lost an election learns the winner from its Vote answer). Dynamic quorums only:
        static voters know each other from controller.quorum.voters."""
        leader = self.quorum.leader_id
        if not self.dynamic or leader == NO_ID:
            return ()
        address = self._local_address() if self.quorum.is_leader else self.address_of(leader)
        if address is None:
            return ()
        try:
            endpoint_cls = nested_type(cls, "NodeEndpoint")
        except (AttributeError, KeyError, LookupError):
            return ()
        return (build(endpoint_cls, node_id=leader, host=address[0], port=address[1], rack=None),)

    # --- the leader's API --------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.quorum.leader_id, self.quorum.epoch)

    @property
    def log_end_offset(self) -> int:
        return self.log.next_offset

    def append(self, values: Sequence[bytes], *, now_ms: int) -> LoggedBatch:
        """Append one batch of encoded metadata records in this leader's epoch; committed later."""
        if not self.quorum.is_leader or self._shutting_down:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {self.epoch}")
        base_offset, last_offset = self.log.append(
            values, leader_epoch=self.epoch, now_ms=now_ms, flush=False
        )
        records = tuple((decode_metadata_record(value), base_offset + i) for i, value in enumerate(values))
        size = 61 + sum(len(value) + 10 for value in values)  # the v2 batch header and per-record framing
        batch = LoggedBatch(base_offset, last_offset, self.epoch, now_ms, records, size)
        self._uncommitted.append(batch)
        self._on_leader_append()
        return batch

    async def wait_committed(self, offset: int) -> None:
        """Until the high watermark passes `offset`; NotLeaderError if this epoch ends before."""
        if self.high_watermark > offset:
            return
        if not self.quorum.is_leader or self._shutting_down:  # only this leader's epoch commits it
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {self.epoch}")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit_waiters.append((offset, self.epoch, future))
        await future

    # --- the driver --------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._shutting_down:
            self._changed.clear()
            try:
                state = self.quorum.state
                if state is RaftState.LEADER:
                    await self._lead()
                elif state is RaftState.FOLLOWER:
                    await self._follow()
                elif state is RaftState.PROSPECTIVE:
                    await self._pre_vote()
                elif state is RaftState.CANDIDATE:
                    await self._campaign()
                else:  # UNATTACHED, RESIGNED
                    await self._wait_for_leader()
            except asyncio.CancelledError:
                raise
            except MetadataLogError as exc:  # KafkaRaftClientDriver.doWork: fatal
                self._fail(exc)
                return
            except Exception:
                if self.fatal_error is not None:
                    return
                log.exception("raft: unexpected error in state %s", self.quorum.state.value)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def _wait_changed(self, seconds: float) -> bool:
        """Sleep up to `seconds` or until the state changes; True when it changed."""
        try:
            await asyncio.wait_for(self._changed.wait(), max(seconds, 0.0))
            return True
        except TimeoutError:
            return False

    def _transitioned(self) -> None:
        self._changed.set()
        self._appended.set()  # parked fetches answer with the new epoch
        self._appended = asyncio.Event()
        leader = self.leader
        if self.quorum.state is not RaftState.LEADER:
            self.leader_state = None
            self._fail_commit_waiters()
            change, self._voter_change = self._voter_change, None
            if change is not None and not change[1].done():
                change[1].set_exception(NotLeaderError(f"epoch {self.epoch} ended before the voter change"))
            self._fire_leader_change(leader)

    def _reset_election_timer(self, backoff_ms: float | None = None) -> None:
        timeout = self.config.election_timeout_ms
        delay = backoff_ms if backoff_ms is not None else timeout + self._rng.random() * timeout
        self._election_deadline = time.monotonic() + delay / 1000

    async def _wait_for_leader(self) -> None:
        """Unattached or Resigned: wait for a leader to show up; a voter campaigns after its timeout."""
        if not self.quorum.is_voter:
            await self._discover_leader()
            return
        if await self._wait_changed(self._election_deadline - time.monotonic()):
            return
        if self.quorum.state is RaftState.RESIGNED:
            self.quorum.become_unattached(self.epoch + 1)
            self._transitioned()
        self.quorum.become_prospective()
        self._changed.set()

    async def _discover_leader(self) -> None:
        """An observer without a leader asks the voters in turn (a dynamic quorum: the bootstrap servers,
        in random order, as Kafka's RequestManager picks them); any answer names the leader."""
        targets = sorted(self.voter_addresses)
        if self.dynamic and self.bootstrap_servers:
            targets = [-2 - i for i in range(len(self.bootstrap_servers))]
        for node_id in self._rng.sample(targets, len(targets)):
            await self._fetch_from(node_id)
            if self.quorum.state is RaftState.FOLLOWER:
                return
        await self._wait_changed(self.config.retry_backoff_ms / 1000 * 10)

    # --- elections ---------------------------------------------------------------------------------

    def _last_offset_and_epoch(self) -> tuple[int, int]:
        """(log end offset, epoch of the last record): the snapshot's epoch when the log starts empty at it."""
        epoch = self.log.log.latest_epoch()
        if epoch is None:
            snapshot = self.latest_snapshot
            epoch = (
                snapshot.epoch if snapshot is not None and snapshot.end_offset == self.log.next_offset else 0
            )
        return self.log.next_offset, epoch

    async def _ask_votes(self, pre_vote: bool) -> tuple[set[int], set[int]]:
        """Send Vote (or PreVote) to every other voter; (granted, rejected) including this node."""
        granted, rejected = {self.node_id}, set()
        majority = len(self.voter_addresses) // 2 + 1
        end_offset, last_epoch = self._last_offset_and_epoch()
        epoch = self.epoch
        requests = {
            voter_id: self._send(
                voter_id, self._vote_request(voter_id, epoch, end_offset, last_epoch, pre_vote)
            )
            for voter_id in self.voter_addresses
            if voter_id != self.node_id
        }
        tasks = {asyncio.ensure_future(coro): voter_id for voter_id, coro in requests.items()}
        try:
            pending = set(tasks)
            while (
                pending and len(granted) < majority and len(self.voter_addresses) - len(rejected) >= majority
            ):
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    response = task.result()
                    if self.fatal_error is not None:
                        return granted, rejected
                    if response is None:
                        rejected.add(tasks[task])
                        continue
                    partition = _only_partition(response)
                    error = partition.error_code if partition is not None else response.error_code
                    self._note_endpoints(getattr(response, "node_endpoints", ()))  # the leader it knows of
                    if partition is not None and await self._another_leads_as_this_node(
                        partition.leader_id, partition.leader_epoch
                    ):
                        return granted, rejected
                    if partition is not None and self._handle_epoch_info(
                        error, partition.leader_id, partition.leader_epoch
                    ):
                        return granted, rejected
                    if error is ErrorCode.none and partition is not None and partition.vote_granted:
                        granted.add(tasks[task])
                    else:
                        rejected.add(tasks[task])
        finally:
            for task in tasks:
                task.cancel()
        return granted, rejected

    def _vote_request(
        self, voter_id: int, epoch: int, end_offset: int, last_epoch: int, pre_vote: bool
    ) -> Any:
        """Vote v2: a pre-vote carries the current epoch, a vote the one it campaigns in."""
        partition = {
            "partition_index": 0,
            "replica_epoch": epoch,
            "replica_id": self.node_id,
            "replica_directory_id": self._own_directory,
            "voter_directory_id": _ZERO_UUID,
            "last_offset_epoch": last_epoch,
            "last_offset": end_offset,
            "pre_vote": pre_vote,
        }
        cls = request_type(VOTE, VOTE_VERSION)
        return _single_partition(cls, partition, cluster_id=self.cluster_id, voter_id=voter_id)

    async def _pre_vote(self) -> None:
        """Prospective (KIP-996): a majority of pre-votes lets this voter start a real election."""
        epoch = self.epoch
        granted, _ = await self._ask_votes(pre_vote=True)
        if self.quorum.state is not RaftState.PROSPECTIVE or self.epoch != epoch:
            return
        if len(granted) > len(self.voter_addresses) // 2:
            self.quorum.become_candidate()
            self._transitioned()
            return
        backoff = self._election_backoff_ms()
        if self.quorum.leader_id != NO_ID:
            self.quorum.become_follower(self.epoch, self.quorum.leader_id)
        else:
            self.quorum.become_unattached(
                self.epoch, voted_id=self.quorum.voted_id, voted_directory_id=self.quorum.voted_directory_id
            )
        self._reset_election_timer(backoff)
        self._transitioned()

    async def _campaign(self) -> None:
        """Candidate: a majority of votes in this epoch makes this node the leader."""
        epoch = self.epoch
        if len(self.voter_addresses) == 1:
            self._become_leader()
            return
        self._reset_election_timer()
        granted, _ = await self._ask_votes(pre_vote=False)
        if self.quorum.state is not RaftState.CANDIDATE or self.epoch != epoch:
            return
        if len(granted) > len(self.voter_addresses) // 2:
            self._election_retries = 0
            self._become_leader()
            return
        backoff = self._election_backoff_ms()
        if not await self._wait_changed(backoff / 1000):
            self.quorum.become_prospective()
            self._changed.set()

    def _election_backoff_ms(self) -> float:
        self._election_retries += 1
        ceiling = 100 * (1 << min(self._election_retries, 10))
        return min(self._rng.random() * ceiling, self.config.election_backoff_max_ms)

    def _become_leader(self) -> None:
        """Win: write the state, then the LeaderChange batch that starts the epoch."""
        self.quorum.become_leader()
        now_ms = _now_ms()
        start = self.log.next_offset
        voters = {voter_id: ReplicaProgress() for voter_id in self.voter_addresses}
        self.leader_state = LeaderState(self.node_id, self.epoch, start, voters, frozenset({self.node_id}))
        self.leader_state.acknowledged.add(self.node_id)
        granting = sorted(self.voter_addresses) if self.is_only_voter else [self.node_id]
        kraft = self._start_of_epoch_kraft_records() if self.dynamic else []
        if kraft:
            value = leader_change_value(self.node_id, sorted(self.voter_addresses), granting)
            batch = build_kraft_control_batch(
                [(ControlType.LEADER_CHANGE, value), *kraft],
                base_offset=start,
                partition_leader_epoch=self.epoch,
                timestamp=now_ms,
            )
        else:
            batch = build_leader_change_batch(
                self.node_id,
                sorted(self.voter_addresses),
                granting,
                base_offset=start,
                leader_epoch=self.epoch,
                timestamp=now_ms,
            )
        records = tuple((start + 1 + i, kind, value) for i, (kind, value) in enumerate(kraft))
        self._append_control_batch(batch, start, records, now_ms)
        log.info("raft: node %d is the leader of epoch %d from offset %d", self.node_id, self.epoch, start)
        self._transitioned()
        self._on_leader_append()

    # --- leading ----------------------------------------------------------------------------------

    async def _lead(self) -> None:
        """Re-send BeginQuorumEpoch to voters that have not acknowledged; resign without a majority."""
        state = self.leader_state
        assert state is not None
        fetch_timeout = self.config.fetch_timeout_ms / 1000
        check_deadline = time.monotonic() + 1.5 * fetch_timeout
        while self.quorum.is_leader and not self._shutting_down:
            waiting = [v for v in self.voter_addresses if v not in state.acknowledged]
            for voter_id in waiting:
                asyncio.ensure_future(self._begin_quorum_epoch(voter_id))
            if await self._wait_changed(fetch_timeout / 2):
                return
            if time.monotonic() >= check_deadline and not self.is_only_voter:
                fetched = len(state.check_quorum_fetched | {self.node_id})
                if fetched <= len(self.voter_addresses) // 2:
                    log.warning(
                        "raft: resigning: no Fetch from a majority of voters for %.1f s", 1.5 * fetch_timeout
                    )
                    self.quorum.become_resigned()
                    self._reset_election_timer()
                    self._transitioned()
                    await self._send_end_quorum_epoch(timeout=fetch_timeout / 2)
                    return
                state.check_quorum_fetched.clear()
                check_deadline = time.monotonic() + 1.5 * fetch_timeout

    async def _begin_quorum_epoch(self, voter_id: int) -> None:
        partition = {
            "partition_index": 0,
            "voter_directory_id": _ZERO_UUID,
            "leader_id": self.node_id,
            "leader_epoch": self.epoch,
        }
        cls = request_type(BEGIN_QUORUM_EPOCH, QUORUM_EPOCH_VERSION)
        request = _single_partition(
            cls,
            partition,
            cluster_id=self.cluster_id,
            voter_id=voter_id,
            leader_endpoints=self._leader_endpoints_field(cls),
        )
        response = await self._send(voter_id, request)
        if response is None:
            return
        partition = _only_partition(response)
        if partition is None:
            return
        if self._handle_epoch_info(partition.error_code, partition.leader_id, partition.leader_epoch):
            return
        if partition.error_code is ErrorCode.none and self.leader_state is not None:
            self.leader_state.acknowledged.add(voter_id)

    async def _send_end_quorum_epoch(self, *, timeout: float) -> None:
        """Tell the other voters this leader is gone, most caught-up first as preferred successors."""
        state = self.leader_state
        progress = state.voters if state is not None else {}
        others = [v for v in self.voter_addresses if v != self.node_id]
        preferred = sorted(others, key=lambda v: -(progress[v].end_offset if v in progress else -1))
        cls = request_type(END_QUORUM_EPOCH, QUORUM_EPOCH_VERSION)
        candidate_cls = nested_type(cls, "ReplicaInfo")
        partition = {
            "partition_index": 0,
            "leader_id": self.node_id,
            "leader_epoch": self.epoch,
            "preferred_candidates": tuple(
                candidate_cls(candidate_id=v, candidate_directory_id=_ZERO_UUID) for v in preferred
            ),
        }
        request = _single_partition(
            cls, partition, cluster_id=self.cluster_id, leader_endpoints=self._leader_endpoints_field(cls)
        )
        await asyncio.gather(
            *(self._send(v, request, timeout=timeout) for v in others), return_exceptions=True
        )

    def _on_leader_append(self) -> None:
        """Flush what was appended on the worker thread; the leader counts it once durable."""
        waiters, self._appended = self._appended, asyncio.Event()
        waiters.set()
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush_leader())

    async def _flush_leader(self) -> None:
        while True:
            end = self.log.next_offset
            try:
                await asyncio.to_thread(self.log.log.flush, end)
            except (OSError, LogStorageError) as exc:
                log.error("raft: cannot flush the metadata log: %s", exc)
                return
            state = self.leader_state
            if state is None or not self.quorum.is_leader:
                return
            if state.update_local(end, _now_ms()):
                self._update_high_watermark(state.high_watermark)
            if self.log.next_offset == end:
                return

    # --- following ----------------------------------------------------------------------------------

    async def _follow(self) -> None:
        """Fetch from the leader; a voter that hears nothing for fetch.timeout.ms asks for pre-votes."""
        epoch, leader_id = self.epoch, self.quorum.leader_id
        deadline = time.monotonic() + self.config.fetch_timeout_ms / 1000
        self._fetched_from_leader = False
        resigned = False
        while self.quorum.state is RaftState.FOLLOWER and self.epoch == epoch and not self._shutting_down:
            override, self._fetch_deadline_override = self._fetch_deadline_override, None
            if override is not None and override[:2] == (epoch, leader_id):  # overrideFetchTimeout
                deadline, self._election_deadline, resigned = override[2], 0.0, True
            if time.monotonic() >= max(deadline, self._election_deadline):
                if resigned:
                    log.info("raft: leader %d resigned from epoch %d", leader_id, epoch)
                else:
                    log.info(
                        "raft: no answer from leader %d for %d ms", leader_id, self.config.fetch_timeout_ms
                    )
                if self.quorum.is_voter:
                    self.quorum.become_prospective()
                    self._changed.set()
                else:  # an observer looks for the leader again among the voters
                    self.quorum.become_unattached(self.epoch)
                    self._transitioned()
                return
            if await self._fetch_from(leader_id, max(deadline, self._election_deadline)) and not resigned:
                deadline = time.monotonic() + self.config.fetch_timeout_ms / 1000
                self._election_deadline = 0.0
                self._fetched_from_leader = True
                if self.dynamic and self.quorum.is_voter and self._update_voter_due():
                    asyncio.ensure_future(self._maybe_update_voter(leader_id))
            elif self.quorum.state is RaftState.FOLLOWER and self.epoch == epoch:
                left = max(deadline, self._election_deadline) - time.monotonic()
                await self._wait_changed(min(self.config.retry_backoff_ms / 1000 * 5, max(left, 0.0)))

    def _fetch_request(self, epoch: int, max_wait_ms: int) -> Any:
        """Fetch v17 of `__cluster_metadata-0` from this node's log end, with its replica key."""
        end_offset, last_epoch = self._last_offset_and_epoch()
        cls = request_type(FETCH, FETCH_VERSION)
        partition = {
            "partition": 0,
            "current_leader_epoch": epoch,
            "fetch_offset": end_offset,
            "last_fetched_epoch": last_epoch,
            "log_start_offset": -1,
            "partition_max_bytes": MAX_BATCH_BYTES,
            "replica_directory_id": self._own_directory,
        }
        return _single_partition(
            cls,
            partition,
            topic="FetchTopic",
            part="FetchPartition",
            topic_key=("topic_id", CLUSTER_METADATA_TOPIC_ID),
            cluster_id=self.cluster_id,
            replica_state=nested_type(cls, "ReplicaState")(replica_id=self.node_id, replica_epoch=-1),
            max_wait=timedelta(milliseconds=max_wait_ms),
            min_bytes=0,
            max_bytes=MAX_BATCH_BYTES,
            forgotten_topics_data=(),
        )

    async def _fetch_from(self, node_id: int, deadline: float | None = None) -> bool:
        """One Fetch round trip; True when the leader answered with data or an empty, valid fetch. The
        wait ends at the fetch deadline too (Kafka's fetch timer runs whatever is in flight): a leader
        that stopped answering is given up at fetch.timeout.ms, not at the request timeout after it."""
        request = self._fetch_request(self.epoch, FETCH_MAX_WAIT_MS)
        timeout = (FETCH_MAX_WAIT_MS + self.config.request_timeout_ms) / 1000
        if deadline is not None:
            timeout = min(timeout, max(deadline - time.monotonic(), 0.05))
        response = await self._send(node_id, request, timeout=timeout)
        if response is None:
            return False
        if self.dynamic:
            endpoints = getattr(response, "node_endpoints", ()) or ()
            self._note_endpoints(endpoints)
            for endpoint in endpoints:  # the leader's own, in its answer to this epoch's Fetch
                if endpoint.node_id == node_id == self.quorum.leader_id:
                    self._announced[node_id] = (self.epoch, (endpoint.host, endpoint.port))
        partition = _only_partition(response, "responses")
        if partition is None:
            return False
        error = partition.error_code if partition.error_code is not ErrorCode.none else response.error_code
        leader = partition.current_leader
        if self._handle_epoch_info(error, leader.leader_id, leader.leader_epoch):
            return False
        if error is not ErrorCode.none or self.quorum.state is not RaftState.FOLLOWER:
            return False
        if self.quorum.leader_id != node_id:
            return False
        if partition.diverging_epoch.epoch >= 0 or partition.diverging_epoch.end_offset >= 0:
            self._truncate_to_diverging(partition.diverging_epoch.epoch, partition.diverging_epoch.end_offset)
            return True
        if partition.snapshot_id.end_offset >= 0:
            snapshot_id = SnapshotId(partition.snapshot_id.end_offset, partition.snapshot_id.epoch)
            return await self._fetch_snapshot(node_id, snapshot_id)
        records = bytes(partition.records or b"")
        if records:
            await self._append_as_follower(records)
        self._update_high_watermark(min(partition.high_watermark, self.log.next_offset))
        # -1: the leader has not committed in its epoch yet, so what is committed is not known (Kafka's
        # follower keeps an empty high watermark then). Taken for caught up, a node restarting with
        # its peers would load a metadata image without the topics and set their logs aside as stray.
        if (
            not self._caught_up.is_set()
            and partition.high_watermark >= 0
            and self.log.next_offset >= partition.high_watermark
        ):
            self._caught_up.set()
        return True

    # --- snapshots ------------------------------------------------------------------------------------

    def _load_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Hand a snapshot's records to every listener (start-up, or one fetched from the leader)."""
        try:
            records = read_snapshot_records(self.log.directory, snapshot_id)
        except (OSError, FormatError) as exc:
            raise MetadataLogError(
                f"cannot read snapshot {snapshot_id.file_name} in {self.log.directory}: {str(exc).rstrip('.')}."
            ) from None
        if self.dynamic:
            self.history.clear()
            self._load_kraft_records(snapshot_id)
            self._voters_changed()
        log.info("raft: loading snapshot %s (%d records)", snapshot_id.file_name, len(records))
        for listener in self._listeners:
            listener.handle_load_snapshot(snapshot_id, records)

    async def write_snapshot(
        self, snapshot_id: SnapshotId, values: Sequence[bytes], *, last_contained_timestamp: int
    ) -> bool:
        """Write a snapshot of the committed state as of `snapshot_id` (Kafka's createSnapshot + freeze),
        then let retention drop the log below it. False when one as new exists already."""
        if self.latest_snapshot is not None and snapshot_id <= self.latest_snapshot:
            return False
        if snapshot_id.end_offset > self.high_watermark:
            raise ValueError(f"snapshot {snapshot_id} is past the high watermark {self.high_watermark}")
        kraft: list[tuple[ControlType, bytes]] = []
        voters = self.history.voter_set_at(snapshot_id.end_offset - 1)
        if (
            self.dynamic
            and voters is not None
            and self.history.kraft_version_at(snapshot_id.end_offset - 1) >= 1
        ):
            # KafkaRaftClient.createSnapshot: the kraft.version and voter set as of the snapshot
            kraft = [
                (
                    ControlType.KRAFT_VERSION,
                    kraft_version_value(self.history.kraft_version_at(snapshot_id.end_offset - 1)),
                ),
                (ControlType.KRAFT_VOTERS, voters_value(voters.to_records())),
            ]
        data = build_snapshot(
            values,
            timestamp=_now_ms(),
            last_contained_log_timestamp=last_contained_timestamp,
            epoch=snapshot_id.epoch,
            kraft_records=kraft,
        )
        await asyncio.to_thread(write_snapshot, self.log.directory, snapshot_id, data)
        if self.latest_snapshot is None or snapshot_id > self.latest_snapshot:
            self.latest_snapshot = snapshot_id
        log.info(
            "raft: wrote snapshot %s (%d records, %d bytes)", snapshot_id.file_name, len(values), len(data)
        )
        self._clean_log()
        return True

    def _clean_log(self) -> None:
        """Kafka's KafkaMetadataLog.maybeClean: past metadata.max.retention.bytes or .ms, the log starts at
        the latest snapshot; segments wholly below it and the older snapshots go."""
        snapshot = self.latest_snapshot
        partition_log = self.log.log
        if snapshot is None or snapshot.end_offset <= partition_log.log_start_offset:
            return
        oldest = partition_log.segments[0]
        too_big = partition_log.size_bytes() > self.config.retention_bytes
        too_old = _now_ms() - oldest.largest_timestamp > self.config.retention_ms
        if not (too_big or too_old):
            return
        new_start = min(snapshot.end_offset, self.high_watermark)
        if partition_log.maybe_increment_log_start_offset(new_start):
            deleted = partition_log.enforce_retention(_now_ms())
            log.info("raft: the metadata log now starts at %d (%d bytes deleted)", new_start, deleted)
        for older in list_snapshots(self.log.directory):
            if older < snapshot:
                delete_snapshot(self.log.directory, older)

    async def _fetch_snapshot(self, leader_id: int, snapshot_id: SnapshotId) -> bool:
        """Download the leader's snapshot with FetchSnapshot, then install it: the log restarts at its end."""
        cls = request_type(FETCH_SNAPSHOT, FETCH_SNAPSHOT_VERSION)
        wanted = nested_type(cls, "SnapshotId")(end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch)
        data = bytearray()
        while True:
            partition = {
                "partition": 0,
                "current_leader_epoch": self.epoch,
                "snapshot_id": wanted,
                "position": len(data),
                "replica_directory_id": self._own_directory,
            }
            request = _single_partition(
                cls,
                partition,
                topic="TopicSnapshot",
                part="PartitionSnapshot",
                topic_key=("name", CLUSTER_METADATA_TOPIC),
                cluster_id=self.cluster_id,
                replica_id=self.node_id,
                max_bytes=MAX_BATCH_BYTES,
            )
            response = await self._send(leader_id, request, timeout=self.config.request_timeout_ms / 1000)
            if response is None:
                return False
            partition = _only_partition(response)
            if partition is None:
                return False
            error = (
                partition.error_code if partition.error_code is not ErrorCode.none else response.error_code
            )
            leader = partition.current_leader
            if (
                self._handle_epoch_info(error, leader.leader_id, leader.leader_epoch)
                or error is not ErrorCode.none
            ):
                log.info("raft: snapshot %s not fetched: %s", snapshot_id.file_name, error.name)
                return False
            data += bytes(partition.unaligned_records or b"")
            if len(data) >= partition.size:
                break
        self._install_snapshot(snapshot_id, bytes(data))
        return True

    def _install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        write_snapshot(self.log.directory, snapshot_id, data)
        self.log.log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._uncommitted.clear()
        self.latest_snapshot = snapshot_id
        self._load_snapshot(snapshot_id)
        self.high_watermark = self.log.update_high_watermark(snapshot_id.end_offset)
        log.info("raft: installed snapshot %s from the leader", snapshot_id.file_name)

    def handle_fetch_snapshot(self, request: Any, version: int) -> Any:
        """The leader serves its snapshot file in pieces (FetchSnapshot, KIP-630)."""
        cls = response_type(FETCH_SNAPSHOT, version)
        id_cls, leader_cls = nested_type(cls, "SnapshotId"), nested_type(cls, "LeaderIdAndEpoch")
        error = self._check_cluster_id(request.cluster_id)
        partition = _only_partition(request)
        if error is not ErrorCode.none or partition is None:
            return build(
                cls, throttle_time=_NO_THROTTLE, error_code=error or ErrorCode.invalid_request, topics=()
            )

        def answer(error: ErrorCode, *, size: int = 0, position: int = 0, chunk: bytes = b"") -> Any:
            wanted = partition.snapshot_id
            fields = {
                "index": 0,
                "error_code": error,
                "snapshot_id": id_cls(end_offset=wanted.end_offset, epoch=wanted.epoch),
                "current_leader": leader_cls(leader_id=self.quorum.leader_id, leader_epoch=self.epoch),
                "size": size,
                "position": position,
                "unaligned_records": chunk,
            }
            return _single_partition(
                cls,
                fields,
                topic="TopicSnapshot",
                part="PartitionSnapshot",
                topic_key=("name", CLUSTER_METADATA_TOPIC),
                throttle_time=_NO_THROTTLE,
                error_code=ErrorCode.none,
            )

        epoch_error = self._check_fetch_epoch(partition.current_leader_epoch)
        if epoch_error is not ErrorCode.none:
            return answer(epoch_error)
        if not self._serves_replica("FetchSnapshot", request.replica_id, partition.replica_directory_id):
            return build(cls, throttle_time=_NO_THROTTLE, error_code=NODE_ID_TAKEN, topics=())
        snapshot_id = SnapshotId(partition.snapshot_id.end_offset, partition.snapshot_id.epoch)
        path = self.log.directory / snapshot_id.file_name
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if partition.position < 0 or partition.position >= size:
                    return answer(ErrorCode.position_out_of_range, size=size)
                f.seek(partition.position)
                chunk = f.read(min(request.max_bytes, MAX_BATCH_BYTES))
        except FileNotFoundError:
            return answer(ErrorCode.snapshot_not_found)
        if self.leader_state is not None:
            self.leader_state.check_quorum_fetched.add(request.replica_id)
        return answer(ErrorCode.none, size=size, position=partition.position, chunk=chunk)

    def _check_leader_change(self, view: memoryview, batch: Any) -> None:
        """A leader's LeaderChange record names its voters; a voter with another list must not take part."""
        for record in batch.records(view):
            if control_type(record.key) is not ControlType.LEADER_CHANGE or record.value is None:
                continue
            leader_id, voters, _ = read_leader_change(record.value)
            if set(voters) != set(self.voter_addresses):
                self._fail_config(
                    f"leader {leader_id} counts voters {sorted(voters)}, controller.quorum.voters here "
                    f"{sorted(self.voter_addresses)}: the voter lists of the nodes disagree"
                )

    def _truncate_to_diverging(self, epoch: int, end_offset: int) -> None:
        local_epoch, local_end = self.log.log.end_offset_for_epoch(epoch)
        target = end_offset if local_end < 0 else min(end_offset, local_end)
        if epoch == 0:
            target = min(end_offset, self.log.next_offset)
        if target < self.high_watermark:
            log.error(
                "raft: refusing to truncate below the high watermark %d (to %d)", self.high_watermark, target
            )
            return
        if self.log.log.truncate_to(target):
            log.warning("raft: truncated the metadata log to %d, diverging at epoch %d", target, epoch)
        while self._uncommitted and self._uncommitted[-1].base_offset >= target:
            self._uncommitted.pop()
        if self.dynamic and self.history.truncate_new_entries(target):
            self._voters_changed()

    async def _append_as_follower(self, records: bytes) -> None:
        try:
            self.log.log.append_as_follower(records, now_ms=_now_ms())
        except (OSError, LogStorageError, RecordError) as exc:
            raise MetadataLogError(f"cannot append fetched batches to the metadata log: {exc}") from None
        view = memoryview(records)
        result = walk(view, 0, len(view), check_crc=False)
        if result.reason is not StopReason.END:
            log.warning("raft: fetched records end in a partial batch")
        changed = False
        for batch in result.batches:
            header = read_batch(view, batch.position)
            if header.is_control and self.quorum.is_voter and not self.dynamic:
                self._check_leader_change(view, header)
            logged = logged_batch(self.log.directory, view, header)
            self._uncommitted.append(logged)
            if self.dynamic and logged.kraft_records:
                changed = self.history.apply(logged.kraft_records) or changed
        if changed:
            self._voters_changed()
        if self.quorum.is_voter:
            await asyncio.to_thread(self.log.log.flush)

    # --- the high watermark and listeners ------------------------------------------------------------

    def _update_high_watermark(self, high_watermark: int) -> None:
        if high_watermark <= self.high_watermark:
            return
        self.high_watermark = self.log.update_high_watermark(high_watermark)
        committed = []
        while self._uncommitted and self._uncommitted[0].last_offset < self.high_watermark:
            committed.append(self._uncommitted.popleft())
        if committed:
            for listener in self._listeners:
                try:
                    listener.handle_commit(committed)
                except (
                    Exception
                ) as exc:  # Kafka's fault handler: a batch that cannot be applied stops the node
                    self._fail(exc)
                    raise
        waiters, self._commit_waiters = self._commit_waiters, []
        for offset, epoch, future in waiters:
            if self.high_watermark > offset:
                if not future.done():
                    future.set_result(None)
            else:
                self._commit_waiters.append((offset, epoch, future))
        state = self.leader_state
        if state is not None and self.high_watermark > state.epoch_start_offset:
            self._caught_up.set()
            self._fire_leader_change(self.leader)
        change = self._voter_change
        if change is not None and self.high_watermark > change[0]:
            self._voter_change = None
            if not change[1].done():
                change[1].set_result(None)
            if self.dynamic and self.quorum.is_leader and self.node_id not in self.quorum.voters:
                # RemoveVoterHandler.highWatermarkUpdated: not in the committed voter set, resign
                log.info("raft: leader %d is not in the committed voter set; resigning", self.node_id)
                self.quorum.become_resigned()
                self._reset_election_timer()
                self._transitioned()
                asyncio.ensure_future(
                    self._send_end_quorum_epoch(timeout=self.config.request_timeout_ms / 1000)
                )
        waiters_event, self._appended = self._appended, asyncio.Event()
        waiters_event.set()

    def _fire_leader_change(self, leader: LeaderAndEpoch) -> None:
        if leader == self._fired_leader:
            return
        self._fired_leader = leader
        for listener in self._listeners:
            listener.handle_leader_change(leader)

    def _fail_commit_waiters(self) -> None:
        waiters, self._commit_waiters = self._commit_waiters, []
        for _, epoch, future in waiters:
            if not future.done():
                future.set_exception(NotLeaderError(f"epoch {epoch} ended before the write was committed"))

    # --- responses: what every answer says about epochs -------------------------------------------------

    def _handle_epoch_info(self, error: ErrorCode, leader_id: int, leader_epoch: int) -> bool:
        """Kafka's maybeHandleCommonResponse: True when the answer moved this node to another epoch."""
        if leader_id not in self.voter_addresses and (not self.dynamic or self.address_of(leader_id) is None):
            leader_id = NO_ID  # a leader this node cannot reach is no leader (disagreeing voter lists)
        if leader_epoch > MAX_EPOCH:
            log.warning("raft: ignoring an answer in epoch %d, beyond %d", leader_epoch, MAX_EPOCH)
            return True
        if leader_epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self.quorum.become_follower(leader_epoch, leader_id)
            else:
                self.quorum.become_unattached(leader_epoch)
            self._reset_election_timer()
            self._transitioned()
            return True
        if leader_epoch < self.epoch or error is ErrorCode.unknown_leader_epoch:
            return False
        if (
            leader_id >= 0
            and leader_id != self.node_id
            and self.quorum.leader_id == NO_ID
            and self.quorum.state in (RaftState.UNATTACHED, RaftState.PROSPECTIVE)
        ):
            self.quorum.become_follower(leader_epoch, leader_id)
            self._transitioned()
        return False

    # --- requests this node answers -------------------------------------------------------------------

    def handle_vote(self, request: Any, version: int) -> Any:
        """Vote and PreVote (v2's `pre_vote`), with Kafka's rules per state."""
        cls = response_type(VOTE, version)
        error = self._check_cluster_id(request.cluster_id)
        partition = _only_partition(request)
        if error is not ErrorCode.none or partition is None:
            return cls(error_code=error or ErrorCode.invalid_request, topics=(), node_endpoints=())
        pre_vote = bool(getattr(partition, "pre_vote", False))
        epoch = partition.replica_epoch if version >= 2 else partition.candidate_epoch
        candidate = partition.replica_id if version >= 2 else partition.candidate_id
        directory_id = getattr(
            partition, "replica_directory_id" if version >= 2 else "candidate_directory_id", None
        )
        holder = self._live_holder(candidate, directory_id)
        if holder is not None:  # before any epoch moves: another process with that id cannot be elected
            self._log_taken("pre-vote" if pre_vote else "vote", candidate, directory_id, holder)
            return cls(error_code=NODE_ID_TAKEN, topics=(), node_endpoints=())
        granted = False
        error = ErrorCode.none
        if partition.last_offset < 0 or partition.last_offset_epoch < 0 or _beyond_max_epoch(epoch):
            error = ErrorCode.invalid_request
        elif (not pre_vote and partition.last_offset_epoch >= epoch) or (
            pre_vote and partition.last_offset_epoch > epoch
        ):
            error = ErrorCode.invalid_request
        elif getattr(request, "voter_id", -1) not in (-1, self.node_id):
            log.error(
                "raft: node %d sent a vote request meant for voter %d to this node (%d): the voter lists "
                "of the nodes disagree",
                candidate,
                request.voter_id,
                self.node_id,
            )
            error = ErrorCode.invalid_voter_key
        elif candidate not in self.voter_addresses or not self.quorum.is_voter:
            log.error(
                "raft: node %d asks for a vote but is not in controller.quorum.voters %s (or this node is "
                "not): the voter lists of the nodes disagree",
                candidate,
                sorted(self.voter_addresses),
            )
            error = ErrorCode.invalid_voter_key
        elif epoch < self.epoch:
            error = ErrorCode.fenced_leader_epoch
        else:
            if not pre_vote and epoch > self.epoch:
                self.quorum.become_unattached(epoch)
                self._reset_election_timer()  # a fresh randomized timeout in the new epoch, as Kafka
                self._transitioned()
            up_to_date = (partition.last_offset_epoch, partition.last_offset) >= tuple(
                reversed(self._last_offset_and_epoch())
            )
            granted = self._can_grant(candidate, directory_id, up_to_date, pre_vote)
            if granted and not pre_vote:
                self.quorum.grant_vote(candidate, directory_id)
                self._reset_election_timer()
                self._transitioned()
        log.info(
            "raft: %s from %d in epoch %d: %s",
            "pre-vote" if pre_vote else "vote",
            candidate,
            epoch,
            "granted"
            if granted
            else f"rejected ({error.name if error is not ErrorCode.none else self.quorum.describe()})",
        )
        return self._quorum_epoch_response(cls, error, vote_granted=granted)

    def _can_grant(
        self, candidate: int, directory_id: uuid.UUID | None, up_to_date: bool, pre_vote: bool
    ) -> bool:
        state = self.quorum.state
        if state in (RaftState.LEADER, RaftState.CANDIDATE, RaftState.RESIGNED):
            return False
        if candidate == self.node_id:  # Kafka's QuorumState never votes for itself on a request
            return False
        if state is RaftState.FOLLOWER:
            return pre_vote and not self._fetched_from_leader and up_to_date
        if pre_vote:
            return up_to_date
        if self.quorum.voted_id != NO_ID:  # the same replica key: id, and directory id when one was voted for
            voted_directory = self.quorum.voted_directory_id
            return self.quorum.voted_id == candidate and voted_directory in (None, directory_id)
        if self.quorum.leader_id != NO_ID:
            return False
        return up_to_date

    def handle_begin_quorum_epoch(self, request: Any, version: int) -> Any:
        """A new leader announces itself: follow it."""
        cls = response_type(BEGIN_QUORUM_EPOCH, version)
        partition = _only_partition(request)
        error = self._check_cluster_id(request.cluster_id)
        if error is ErrorCode.none and (partition is None or _beyond_max_epoch(partition.leader_epoch)):
            error = ErrorCode.invalid_request
        if error is ErrorCode.none and self.dynamic:
            for endpoint in getattr(request, "leader_endpoints", ()) or ():
                if endpoint.name == self.listener_name:
                    address = (endpoint.host, endpoint.port)
                    self._endpoints[partition.leader_id] = address
                    self._announced[partition.leader_id] = (partition.leader_epoch, address)
        if (
            error is ErrorCode.none
            and partition.leader_id not in self.voter_addresses
            and (not self.dynamic or self.address_of(partition.leader_id) is None)
        ):
            log.error(
                "raft: node %d claims the leadership of epoch %d but is not in controller.quorum.voters %s: "
                "the voter lists of the nodes disagree",
                partition.leader_id,
                partition.leader_epoch,
                sorted(self.voter_addresses),
            )
            return self._quorum_epoch_response(cls, ErrorCode.inconsistent_voter_set)
        if error is ErrorCode.none:
            if partition.leader_epoch < self.epoch:
                return self._quorum_epoch_response(cls, ErrorCode.fenced_leader_epoch)
            if partition.leader_id == self.node_id:
                if self._leads(partition.leader_epoch):
                    return self._quorum_epoch_response(cls, ErrorCode.none)
                return self._names_this_node(cls, "BeginQuorumEpoch", partition.leader_epoch)
            if partition.leader_epoch == self.epoch and self.quorum.leader_id not in (
                NO_ID,
                partition.leader_id,
            ):
                # one leader per epoch: a second one in the epoch this node knows a leader of is a bug
                log.warning(
                    "raft: node %d claims epoch %d, whose leader is %d; refused",
                    partition.leader_id,
                    self.epoch,
                    self.quorum.leader_id,
                )
                return self._quorum_epoch_response(cls, ErrorCode.invalid_request)
            if (self.quorum.state, self.quorum.leader_id, self.epoch) != (
                RaftState.FOLLOWER,
                partition.leader_id,
                partition.leader_epoch,
            ):
                self.quorum.become_follower(partition.leader_epoch, partition.leader_id)
                self._transitioned()
            return self._quorum_epoch_response(cls, ErrorCode.none)
        return cls(error_code=error, topics=(), node_endpoints=())

    def handle_end_quorum_epoch(self, request: Any, version: int) -> Any:
        """The leader resigned: the most caught-up preferred successor campaigns first."""
        cls = response_type(END_QUORUM_EPOCH, version)
        partition = _only_partition(request)
        error = self._check_cluster_id(request.cluster_id)
        if error is not ErrorCode.none or partition is None:
            return cls(error_code=error or ErrorCode.invalid_request, topics=(), node_endpoints=())
        if _beyond_max_epoch(partition.leader_epoch):
            return self._quorum_epoch_response(cls, ErrorCode.invalid_request)
        if partition.leader_id not in self.voter_addresses:
            return self._quorum_epoch_response(cls, ErrorCode.inconsistent_voter_set)
        if partition.leader_epoch < self.epoch:
            return self._quorum_epoch_response(cls, ErrorCode.fenced_leader_epoch)
        if partition.leader_id == self.node_id and not self._leads(partition.leader_epoch):
            return self._names_this_node(cls, "EndQuorumEpoch", partition.leader_epoch)
        if partition.leader_epoch > self.epoch:
            self.quorum.become_follower(partition.leader_epoch, partition.leader_id)
            self._transitioned()
        if self.quorum.state is RaftState.FOLLOWER and self.quorum.leader_id == partition.leader_id:
            preferred = [c.candidate_id for c in getattr(partition, "preferred_candidates", ())] or list(
                getattr(partition, "preferred_successors", ())
            )
            self._reset_election_timer(self._successor_backoff_ms(preferred))
            self._fetch_deadline_override = (self.epoch, partition.leader_id, self._election_deadline)
            self._changed.set()
        return self._quorum_epoch_response(cls, ErrorCode.none)

    def _leads(self, epoch: int) -> bool:
        return self.quorum.is_leader and self.epoch == epoch

    def _names_this_node(self, cls: type, name: str, epoch: int) -> Any:
        """A request naming this node the leader of an epoch it does not lead: refused, nothing moves
        (Kafka's QuorumState never follows itself; following itself, this node would also have told its
        controller it was active while its Raft client could not append)."""
        log.warning(
            "raft: %s names this node (%d) the leader of epoch %d, which it is not (%s in epoch %d); "
            "refused: does another node have node.id %d?",
            name,
            self.node_id,
            epoch,
            self.quorum.describe(),
            self.epoch,
            self.node_id,
        )
        return self._quorum_epoch_response(cls, ErrorCode.invalid_request)

    def _successor_backoff_ms(self, preferred: list[int]) -> int:
        ceiling = self.config.election_backoff_max_ms
        if self.node_id not in preferred:
            return ceiling
        position = preferred.index(self.node_id)
        if position == 0:
            return 0
        return min(ceiling, (ceiling >> (len(preferred) - 1)) << (position - 1))

    def _quorum_epoch_response(self, cls: type, error: ErrorCode, **extra: Any) -> Any:
        """Vote, BeginQuorumEpoch and EndQuorumEpoch answers: the error, this node's leader and epoch."""
        partition = {
            "partition_index": 0,
            "error_code": error,
            "leader_id": self.quorum.leader_id,
            "leader_epoch": self.epoch,
            **extra,
        }
        return _single_partition(
            cls, partition, error_code=ErrorCode.none, node_endpoints=self._leader_node_endpoints(cls)
        )

    async def handle_fetch(self, request: Any, version: int) -> Any:
        """A follower's or observer's Fetch of `__cluster_metadata-0`, parked up to MaxWaitMs when empty."""
        cls = response_type(FETCH, version)
        topic = request.topics[0] if len(request.topics) == 1 else None
        partition = topic.partitions[0] if topic is not None and len(topic.partitions) == 1 else None
        error = self._check_cluster_id(request.cluster_id)
        if error is not ErrorCode.none:
            return cls(throttle_time=_NO_THROTTLE, error_code=error, responses=(), node_endpoints=())
        if partition is None or topic.topic_id != CLUSTER_METADATA_TOPIC_ID:
            return cls(
                throttle_time=_NO_THROTTLE,
                error_code=ErrorCode.invalid_request,
                responses=(),
                node_endpoints=(),
            )
        replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
        if (
            request.max_wait.total_seconds() < 0
            or partition.fetch_offset < 0
            or partition.last_fetched_epoch < 0
            or partition.last_fetched_epoch > partition.current_leader_epoch
        ):
            return self._fetch_response(cls, ErrorCode.invalid_request)
        epoch_error = self._check_fetch_epoch(partition.current_leader_epoch)
        if epoch_error is not ErrorCode.none:
            return self._fetch_response(cls, epoch_error)
        if not self._serves_replica("Fetch", replica_id, getattr(partition, "replica_directory_id", None)):
            return cls(throttle_time=_NO_THROTTLE, error_code=NODE_ID_TAKEN, responses=(), node_endpoints=())
        snapshot = self.latest_snapshot
        if snapshot is not None and (
            partition.fetch_offset == 0
            or partition.fetch_offset < self.log.log.log_start_offset
            or (
                partition.fetch_offset == self.log.log.log_start_offset
                and self.log.log.log_start_offset == snapshot.end_offset
                and partition.last_fetched_epoch != snapshot.epoch
            )
        ):
            return self._fetch_response(cls, ErrorCode.none, snapshot=snapshot)
        local_epoch, local_end = self.log.log.end_offset_for_epoch(partition.last_fetched_epoch)
        if local_epoch < 0 and partition.last_fetched_epoch == 0 and partition.fetch_offset == 0:
            local_epoch, local_end = 0, 0
        if local_epoch != partition.last_fetched_epoch or local_end < partition.fetch_offset:
            if local_epoch < 0:
                local_epoch, local_end = partition.last_fetched_epoch, self.log.next_offset
            return self._fetch_response(cls, ErrorCode.none, diverging=(local_epoch, local_end))
        state = self.leader_state
        assert state is not None
        if state.update_replica(replica_id, partition.fetch_offset, _now_ms(), self.log.next_offset):
            self._update_high_watermark(state.high_watermark)
        records = self._read(partition.fetch_offset, min(partition.partition_max_bytes, request.max_bytes))
        wait = request.max_wait.total_seconds()
        # A replica that has not been told the high watermark yet is answered at once (KIP-1166's rule,
        # kept here on the leader's side): parked, a follower would learn a commit only with the next
        # append or after the whole wait, and a broker its new leadership half a second late.
        progress = state.progress(replica_id)
        if progress is not None and progress.high_watermark_sent < self.high_watermark:
            wait = 0
        if not records and wait > 0:
            appended = self._appended
            try:
                await asyncio.wait_for(appended.wait(), wait)
            except TimeoutError:
                pass
            epoch_error = self._check_fetch_epoch(partition.current_leader_epoch)
            if epoch_error is not ErrorCode.none:
                return self._fetch_response(cls, epoch_error)
            records = self._read(
                partition.fetch_offset, min(partition.partition_max_bytes, request.max_bytes)
            )
        if progress is not None:
            progress.high_watermark_sent = self.high_watermark
        return self._fetch_response(cls, ErrorCode.none, records=records)

    # --- voter changes (KIP-853): AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter on the leader -------

    def _voter_change_refusal(self, what: str) -> tuple[ErrorCode, str | None] | None:
        """The checks every voter change passes first on the leader (Kafka's Add/Remove/UpdateVoterHandler,
        in their order); None when it may go on."""
        error = self._check_fetch_epoch(self.epoch)
        if error is not ErrorCode.none:
            return error, None
        state = self.leader_state
        if self._voter_change is not None:
            return ErrorCode.request_timed_out, (
                "Request timed out waiting for leader to handle previous voter change request"
            )
        if state is None or state.high_watermark < 0:
            return ErrorCode.request_timed_out, (
                "Request timed out waiting for leader to establish HWM and fence previous voter changes"
            )
        if self.kraft_version < 1:
            return ErrorCode.unsupported_version, (
                f"Cluster doesn't support {what} voter because the kraft.version feature is {self.kraft_version}"
            )
        entry = self.history.last_entry()
        if entry is None or entry[0] >= self.high_watermark:
            return ErrorCode.request_timed_out, (
                "Request timed out waiting for voters to commit the latest voter change at "
                f"{f'Optional[{entry[0]}]' if entry else 'Optional.empty'} with HWM {self.high_watermark}"
            )
        return None

    def _cluster_id_refusal(self, cluster_id: str | None) -> str | None:
        if self._check_cluster_id(cluster_id) is ErrorCode.none:
            return None
        return f'The given id "{cluster_id}" doesn\'t match the cluster id "{self.cluster_id}"'

    async def _wait_voter_change(self, offset: int, timeout: float) -> tuple[ErrorCode, str | None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._voter_change = (offset, future)
        if self.high_watermark > offset:  # a quorum of one commits on its own flush
            self._voter_change = None
            return ErrorCode.none, None
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return (
                ErrorCode.request_timed_out,
                f"Timed out waiting for the voter change at {offset} to commit",
            )
        except NotLeaderError:
            return ErrorCode.not_leader_or_follower, None
        return ErrorCode.none, None

    def _voter_request(self, request: Any, epoch: int, kind: str) -> uuid.UUID | tuple[ErrorCode, str | None]:
        """What Add/Remove/UpdateRaftVoter check first, in Kafka's order: the cluster id, this node
        leading in `epoch`, a voter named by id and directory id. The voter's directory id, or the
        error and message to answer with."""
        message = self._cluster_id_refusal(request.cluster_id)
        if message is not None:
            return ErrorCode.inconsistent_cluster_id, message
        error = self._check_fetch_epoch(epoch)
        if error is not ErrorCode.none:
            return error, None
        directory_id = _known(request.voter_directory_id)
        if request.voter_id < 0 or directory_id is None:
            return ErrorCode.invalid_request, f"{kind} voter request didn't include a valid voter"
        return directory_id

    async def handle_add_raft_voter(self, request: Any, version: int) -> Any:
        """AddRaftVoter (80) on the leader: the new voter (an observer that has caught up) joins the
        latest committed voter set in a new Voters record; answered once that is committed."""
        cls = response_type(ADD_RAFT_VOTER, version)

        def answer(error: ErrorCode, message: str | None = None) -> Any:
            return build(cls, throttle_time=_NO_THROTTLE, error_code=error, error_message=message)

        checked = self._voter_request(request, self.epoch, "Add")
        if isinstance(checked, tuple):
            return answer(*checked)
        directory_id = checked
        listeners = {item.name: (item.host, item.port) for item in request.listeners}
        address = listeners.get(self.listener_name)
        if address is None:
            return answer(
                ErrorCode.invalid_request,
                f"Add voter request didn't include the endpoint ({_endpoints_text(listeners)}) for the default "
                f"listener {self.listener_name}",
            )
        refusal = self._voter_change_refusal("adding")
        if refusal is not None:
            return answer(*refusal)
        entry = self.history.last_entry()
        assert entry is not None
        voters = entry[1]
        key = VoterNode(request.voter_id, directory_id).key_text
        if request.voter_id in voters.ids:
            return answer(
                ErrorCode.duplicate_voter,
                f"The voter id for {key} is already part of the set of voters {voters.key_texts()}.",
            )
        supported = await self._kraft_version_range(request.voter_id, address)
        refusal = self._voter_change_refusal("adding")  # the world may have moved while asking
        if refusal is not None:
            return answer(*refusal)
        if supported is None:
            return answer(ErrorCode.request_timed_out, f"New voter {key} is not ready to receive requests")
        low, high = supported
        if not low <= self.kraft_version <= high:
            return answer(
                ErrorCode.invalid_request,
                f"Aborted add voter operation for {key} since the kraft.version range (min: {low}, max: "
                f"{high} doesn't support the finalized version {self.kraft_version}",
            )
        if not self._caught_up_observer(request.voter_id, directory_id):
            log.info("raft: not adding voter %s: it is lagging behind", key)
            return answer(
                ErrorCode.request_timed_out,
                f"Aborted add voter operation for {key} since it is lagging behind",
            )
        added = voters.add_voter(VoterNode(request.voter_id, directory_id, listeners, low, high))
        assert added is not None
        offset = self.append_voters(added, now_ms=_now_ms())
        log.info("raft: adding voter %s at offset %d", key, offset)
        if not getattr(request, "ack_when_committed", True):
            self._voter_change = (offset, asyncio.get_running_loop().create_future())
            return answer(ErrorCode.none)
        timeout = request.timeout.total_seconds() if request.timeout.total_seconds() > 0 else 30.0
        return answer(*await self._wait_voter_change(offset, timeout))

    async def handle_remove_raft_voter(self, request: Any, version: int) -> Any:
        """RemoveRaftVoter (81) on the leader: a Voters record without that replica key; a leader that
        removed itself resigns once it is committed."""
        cls = response_type(REMOVE_RAFT_VOTER, version)

        def answer(error: ErrorCode, message: str | None = None) -> Any:
            return build(cls, throttle_time=_NO_THROTTLE, error_code=error, error_message=message)

        checked = self._voter_request(request, self.epoch, "Remove")
        if isinstance(checked, tuple):
            return answer(*checked)
        directory_id = checked
        refusal = self._voter_change_refusal("removing")
        if refusal is not None:
            return answer(*refusal)
        entry = self.history.last_entry()
        assert entry is not None
        removed = entry[1].remove_voter(request.voter_id, directory_id)
        key = VoterNode(request.voter_id, directory_id).key_text
        if removed is None:
            return answer(
                ErrorCode.voter_not_found,
                f"Cannot remove voter {key} from the set of voters {entry[1].key_texts()}",
            )
        offset = self.append_voters(removed, now_ms=_now_ms())
        log.info("raft: removing voter %s at offset %d", key, offset)
        return answer(*await self._wait_voter_change(offset, self.config.request_timeout_ms / 1000))

    async def handle_update_raft_voter(self, request: Any, version: int) -> Any:
        """UpdateRaftVoter (82) on the leader: a voter's new endpoints and kraft.version range."""
        cls = response_type(UPDATE_RAFT_VOTER, version)
        leader_cls = nested_type(cls, "CurrentLeader")

        def answer(error: ErrorCode) -> Any:
            address = self._local_address() if self.quorum.is_leader else None
            leader = leader_cls(
                leader_id=self.quorum.leader_id,
                leader_epoch=self.epoch,
                host=address[0] if address else "",
                port=address[1] if address else -1,
            )
            return build(cls, throttle_time=_NO_THROTTLE, error_code=error, current_leader=leader)

        checked = self._voter_request(request, request.current_leader_epoch, "Update")
        if isinstance(checked, tuple):
            return answer(checked[0])  # UpdateRaftVoter's answer carries no message
        directory_id = checked
        refusal = self._voter_change_refusal("updating")
        if refusal is not None:
            return answer(refusal[0])
        feature = request.k_raft_version_feature
        if not feature.min_supported_version <= self.kraft_version <= feature.max_supported_version:
            return answer(ErrorCode.invalid_request)
        listeners = {item.name: (item.host, item.port) for item in request.listeners}
        if self.listener_name not in listeners:
            return answer(ErrorCode.invalid_request)
        entry = self.history.last_entry()
        assert entry is not None
        node = VoterNode(
            request.voter_id,
            directory_id,
            listeners,
            feature.min_supported_version,
            feature.max_supported_version,
        )
        updated = entry[1].update_voter(node)
        if updated is None:
            return answer(ErrorCode.voter_not_found)
        if updated != entry[1]:
            self.append_voters(updated, now_ms=_now_ms())
            log.info("raft: updated voter %s: %s", node.key_text, _endpoints_text(listeners))
        return answer(ErrorCode.none)

    async def _kraft_version_range(self, node_id: int, address: tuple[str, int]) -> tuple[int, int] | None:
        """ApiVersions to a would-be voter: the kraft.version range it supports ((0, 0) when it names
        none), None when it cannot be reached. v4: below it a feature whose minimum is 0 is left out
        (KAFKA-17492), and kraft.version's minimum is 0."""
        cls = request_type(API_VERSIONS, 4)
        request = build(cls, client_software_name="kcli", client_software_version="1")
        timeout = self.config.request_timeout_ms / 1000
        response = await self._peers.send(-1000 - node_id, address, request, timeout=timeout)
        if response is None or response.error_code is not ErrorCode.none:
            return None
        for feature in getattr(response, "supported_features", ()) or ():
            if feature.name == "kraft.version":
                return feature.min_version, feature.max_version
        return 0, 0

    def _caught_up_observer(self, node_id: int, directory_id: uuid.UUID) -> bool:
        """LeaderState.isReplicaCaughtUp: an observer with that replica key that has caught up once and
        fetched within the last hour."""
        state = self.leader_state
        progress = state.observers.get(node_id) if state is not None else None
        fetched_as = self._live_directories.get(node_id, (None,))[0]
        if progress is None or fetched_as not in (None, directory_id):
            return False
        return (
            progress.last_caught_up_ms > 0
            and progress.last_fetch_ms > 0
            and progress.last_fetch_ms > _now_ms() - ADD_VOTER_CAUGHT_UP_MS
        )

    def _update_voter_due(self) -> bool:
        """Whether this voter may send UpdateRaftVoter now: first in an epoch once it has fetched from
        the leader (Kafka waits an update period first), then again every 3 fetch timeouts while its
        entry still differs (FollowerState.updateVoterPeriodMs; the leader may have refused it, with a
        voter change in flight, or the answer was lost)."""
        epoch, sent = self._voter_update
        period = 3 * self.config.fetch_timeout_ms / 1000
        return epoch != self.epoch or time.monotonic() - sent >= period

    async def _maybe_update_voter(self, leader_id: int) -> None:
        """Kafka 4's voters announce their own endpoints: a voter whose entry in the voter set differs
        from its listeners sends UpdateRaftVoter to the leader (KafkaRaftClient.pollFollowerAsVoter,
        VoterSet.voterNodeNeedsUpdate)."""
        voters = self.history.last_voter_set()
        own = voters.voters.get(self.node_id) if voters is not None else None
        if (
            not self.dynamic
            or self.kraft_version < 1
            or own is None
            or own.directory_id != self.directory_id
            or not self.local_listeners
            or dict(own.listeners) == self.local_listeners
            or not self._update_voter_due()
        ):
            return
        self._voter_update = (self.epoch, time.monotonic())
        cls = request_type(UPDATE_RAFT_VOTER, 0)
        listener_cls, feature_cls = nested_type(cls, "Listener"), nested_type(cls, "KRaftVersionFeature")
        request = build(
            cls,
            cluster_id=self.cluster_id,
            current_leader_epoch=self.epoch,
            voter_id=self.node_id,
            voter_directory_id=self._own_directory,
            listeners=tuple(
                listener_cls(name=n, host=h, port=p) for n, (h, p) in self.local_listeners.items()
            ),
            k_raft_version_feature=feature_cls(min_supported_version=0, max_supported_version=1),
        )
        response = await self._send(leader_id, request)
        if response is not None:
            log.info("raft: UpdateRaftVoter to leader %d: %s", leader_id, response.error_code.name)

    def _check_fetch_epoch(self, requested: int) -> ErrorCode:
        if requested < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if requested > self.epoch:
            return ErrorCode.unknown_leader_epoch
        if not self.quorum.is_leader:
            return ErrorCode.not_leader_or_follower
        if self._shutting_down:
            return ErrorCode.broker_not_available
        return ErrorCode.none

    def _read(self, offset: int, max_bytes: int) -> bytes:
        try:
            fetched = self.log.log.read(
                offset, max_bytes, upper_bound=self.log.next_offset, min_one_batch=True
            )
        except OffsetOutOfRange:
            return b""
        if fetched is None:
            return b""
        return os.pread(fetched.fd, fetched.size, fetched.position)

    def _fetch_response(
        self,
        cls: type,
        error: ErrorCode,
        *,
        records: bytes = b"",
        diverging: tuple[int, int] | None = None,
        snapshot: SnapshotId | None = None,
    ) -> Any:
        state = self.leader_state
        partition: dict[str, Any] = {
            "partition_index": 0,
            "error_code": error,
            # A leader's high watermark is unknown (-1, as Kafka's LeaderState) until it commits in its
            # own epoch, whatever it had learned before as a follower or read from disk.
            "high_watermark": state.high_watermark if state is not None else max(self.high_watermark, 0),
            "log_start_offset": self.log.log.log_start_offset,
            "current_leader": nested_type(cls, "LeaderIdAndEpoch")(
                leader_id=self.quorum.leader_id, leader_epoch=self.epoch
            ),
            "aborted_transactions": None,
            "records": records,
        }
        if diverging is not None:
            epoch, end_offset = diverging
            partition["diverging_epoch"] = nested_type(cls, "EpochEndOffset")(
                epoch=epoch, end_offset=end_offset
            )
        if snapshot is not None:
            snapshot_cls = nested_type(cls, "SnapshotId")
            partition["snapshot_id"] = snapshot_cls(end_offset=snapshot.end_offset, epoch=snapshot.epoch)
        return _single_partition(
            cls,
            partition,
            topic="FetchableTopicResponse",
            topics_field="responses",
            topic_key=("topic_id", CLUSTER_METADATA_TOPIC_ID),
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.none,
            node_endpoints=self._leader_node_endpoints(cls),
        )

    def describe_quorum(self, version: int) -> Any:
        """DescribeQuorum as the leader answers it; NOT_LEADER_OR_FOLLOWER elsewhere."""
        cls = response_type(DESCRIBE_QUORUM, version)
        replica_cls = nested_type(cls, "ReplicaState")
        state = self.leader_state
        now_ms = _now_ms()

        def replica(replica_id: int, progress: ReplicaProgress) -> Any:
            is_self = replica_id == self.node_id
            directory_id = (
                self.directory_id if is_self else self._live_directories.get(replica_id, (None,))[0]
            )
            voters = self.history.last_voter_set() if self.dynamic else None
            if voters is not None and replica_id in voters.voters and not is_self:
                directory_id = voters.voters[replica_id].directory_id or directory_id
            return build(
                replica_cls,
                replica_id=replica_id,
                replica_directory_id=_ZERO_UUID if directory_id is None else directory_id,
                log_end_offset=self.log.next_offset if is_self else progress.end_offset,
                last_fetch_timestamp=now_ms if is_self else progress.last_fetch_ms,
                last_caught_up_timestamp=now_ms if is_self else progress.last_caught_up_ms,
            )

        leading = state is not None and self.quorum.is_leader
        partition = {
            "partition_index": 0,
            "error_code": ErrorCode.none if leading else ErrorCode.not_leader_or_follower,
            "error_message": None,
            "leader_id": self.quorum.leader_id,
            "leader_epoch": self.epoch,
            # Kafka's LeaderState.highWatermark: unknown (-1) until this leader has committed in its
            # epoch; what it knew as a follower may be behind what the previous leader had committed
            "high_watermark": state.high_watermark if leading else -1,
            "current_voters": tuple(replica(v, p) for v, p in sorted(state.voters.items()))
            if leading
            else (),
            "observers": tuple(replica(o, p) for o, p in sorted(state.observers.items())) if leading else (),
        }
        nodes = ()
        if version >= 2:
            node_cls, listener_cls = nested_type(cls, "Node"), nested_type(cls, "Listener")
            voters = self.history.last_voter_set() if self.dynamic else None
            if voters is not None:  # KIP-853: each voter's endpoints from the Voters record
                nodes = tuple(
                    node_cls(
                        node_id=v,
                        listeners=tuple(
                            listener_cls(name=name, host=host, port=port)
                            for name, (host, port) in node.listeners.items()
                        ),
                    )
                    for v, node in voters.voters.items()
                )
            else:
                nodes = tuple(
                    node_cls(node_id=v, listeners=(listener_cls(name="CONTROLLER", host=host, port=port),))
                    for v, (host, port) in sorted(self.voter_addresses.items())
                )
        return _single_partition(cls, partition, error_code=ErrorCode.none, error_message=None, nodes=nodes)

    def _check_cluster_id(self, cluster_id: str | None) -> ErrorCode:
        if cluster_id is None or cluster_id == self.cluster_id:
            return ErrorCode.none
        return ErrorCode.inconsistent_cluster_id

    # --- the network ----------------------------------------------------------------------------------

    async def _send(self, node_id: int, request: Any, *, timeout: float | None = None) -> Any | None:
        """One request to a voter's controller listener; None when it cannot be reached in time."""
        limit = timeout if timeout is not None else self.config.request_timeout_ms / 1000
        address = self.address_of(node_id)
        if address is None:
            return None
        response = await self._peers.send(node_id, address, request, timeout=limit)
        if response is not None and _any_error(response, ErrorCode.inconsistent_cluster_id):
            self._refused_by_voter(
                node_id,
                ErrorCode.inconsistent_cluster_id,
                f"voter {node_id} at {address[0]}:{address[1]} belongs to another cluster than this node's "
                f"log dirs ({self.cluster_id}): format them with the cluster's id, or fix "
                "controller.quorum.voters",
            )
            return None
        if response is not None and _any_error(response, NODE_ID_TAKEN):
            await self._stop_as_taken(node_id)
            return None
        if response is not None and _any_error(response, ErrorCode.invalid_voter_key):
            self._refused_by_voter(
                node_id,
                ErrorCode.invalid_voter_key,
                f"the node at {address[0]}:{address[1]} does not take this node for a voter, or is not node "
                f"{node_id} as controller.quorum.voters here says: the voter lists of the nodes disagree",
            )
            return None
        return response

    def _refused_by_voter(self, node_id: int, error: ErrorCode, sentence: str) -> None:
        """A voter that refuses this node's requests for another cluster id or another voter list. A node
        still joining the quorum is the odd one out: it stops with `sentence`. One that has caught up
        with the quorum is not (that voter is: a node started on another cluster's dirs, or with other
        voters); it goes on without that voter, as Kafka does, with one ERROR line per voter and code."""
        if not self._caught_up.is_set():
            self._fail_config(sentence)
            return
        if (node_id, error) in self._voter_refusals_logged:
            return
        self._voter_refusals_logged.add((node_id, error))
        address = self.address_of(node_id) or ("?", 0)
        log.error(
            "raft: voter %d at %s:%d answers %s (another cluster's dirs or another voter list there); this "
            "node has joined the quorum and goes on without it",
            node_id,
            address[0],
            address[1],
            error.name,
        )

    def _fail_config(self, sentence: str) -> None:
        """A quorum this node cannot be part of: stop with one sentence (start-up fails with it)."""
        if self.fatal_error is None:
            self._fail(MetadataLogError(sentence + "."))

    # --- one live process per node id ---------------------------------------------------------------
    #
    # Two processes started with one node.id (a copied config, a node brought back while its
    # replacement runs) would each fetch, vote and campaign as that replica. Addresses cannot tell them
    # apart (a node may be reached through a proxy, and advertise other ports than its voter entry),
    # but their directory ids can: each formatted metadata log dir has its own (KIP-853's replica key is
    # the pair). The leader notes the directory id of every replica it serves, and refuses another one
    # for that id while the noted one fetched within controller.quorum.fetch.timeout.ms; a restart (the
    # same dir) or a dir formatted again after its node died (not seen for that long) is served as
    # before. The refused process stops with one sentence, before it follows anyone in that epoch.

    @property
    def _own_directory(self) -> uuid.UUID:
        return _ZERO_UUID if self.directory_id is None else self.directory_id

    def _live_holder(self, replica_id: int, directory_id: uuid.UUID | None) -> uuid.UUID | None:
        """The directory id of another live process holding `replica_id`, when a request sent with
        `directory_id` claims that id: this node's own, or the one it last served as leader if that was
        within the fetch timeout. None when there is none, or either directory id is unknown (Kafka's
        replica key without one matches any)."""
        directory_id = _known(directory_id)
        if directory_id is None or replica_id < 0:
            return None
        if replica_id == self.node_id:
            holder, seen = self.directory_id, time.monotonic()
        else:
            holder, seen = self._live_directories.get(replica_id, (None, 0.0))
        if holder is None or holder == directory_id:
            return None
        if time.monotonic() - seen > self.config.fetch_timeout_ms / 1000:
            return None
        return holder

    def _serves_replica(self, what: str, replica_id: int, directory_id: uuid.UUID | None) -> bool:
        """The leader takes a Fetch or FetchSnapshot from `replica_id`, noting its directory id and the
        time, or refuses it: from this node's own id (a leader never fetches from itself; Kafka's
        LeaderState throws), or from an id another live directory holds."""
        if replica_id == self.node_id:
            self._log_taken(what, replica_id, directory_id, self.directory_id)
            return False
        holder = self._live_holder(replica_id, directory_id)
        if holder is not None:
            self._log_taken(what, replica_id, directory_id, holder)
            return False
        if replica_id >= 0:
            self._live_directories[replica_id] = (_known(directory_id), time.monotonic())
        return True

    def _log_taken(
        self, what: str, replica_id: int, directory_id: uuid.UUID | None, holder: uuid.UUID | None
    ) -> None:
        """A WARNING the first time a process is refused, DEBUG for its retries (a stock Kafka node
        retries for ever)."""
        key = (replica_id, _known(directory_id))
        level = logging.DEBUG if key in self._refusals_logged else logging.WARNING
        self._refusals_logged.add(key)
        log.log(
            level,
            "raft: refused a %s from node %d with directory id %s: %s node %d, with directory id %s; is "
            "node.id %d configured twice?",
            what,
            replica_id,
            _directory_text(directory_id),
            "this node is" if replica_id == self.node_id else "a live process is",
            replica_id,
            _directory_text(holder),
            replica_id,
        )

    async def _another_leads_as_this_node(self, leader_id: int, epoch: int) -> bool:
        """An answer names this node's id the leader of `epoch`, an epoch this process does not lead
        (Kafka's QuorumState throws rather than follow itself). Ask that leader, at the address the
        voters reach it by, with a Fetch as this replica: another live process with this id refuses it,
        and this node stops before it moves to that epoch (True). Once per epoch; an unreachable node,
        or this very one (its earlier incarnation led, and a voter still remembers it), changes
        nothing."""
        if (
            leader_id != self.node_id
            or epoch < self.epoch
            or epoch > MAX_EPOCH
            or epoch == self._probed_epoch
            or self._leads(epoch)
        ):
            return False
        self._probed_epoch = epoch
        log.info(
            "raft: a voter names node %d the leader of epoch %d, which this node does not lead; asking it",
            self.node_id,
            epoch,
        )
        await self._send(self.node_id, self._fetch_request(epoch, max_wait_ms=0))
        return self.fatal_error is not None

    async def _stop_as_taken(self, node_id: int) -> None:
        """`node_id` refused this node's request: another live process holds this node.id. Its
        directory id comes from `node_id`'s DescribeQuorum (v2 gives each replica's); then stop with
        one sentence."""
        cls = request_type(DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION)
        request = _single_partition(cls, {"partition_index": 0})
        timeout = self.config.request_timeout_ms / 1000
        address = self.address_of(node_id)
        answer = None
        if address is not None:
            answer = await self._peers.send(node_id, address, request, timeout=timeout)
        partition = _only_partition(answer) if answer is not None else None
        holder = None
        if (
            partition is not None
            and answer.error_code is ErrorCode.none
            and partition.error_code is ErrorCode.none
        ):
            for replica in (*partition.current_voters, *partition.observers):
                if replica.replica_id == self.node_id:
                    holder = _known(replica.replica_directory_id) or holder
        own = _directory_text(self.directory_id)
        if holder is None:
            theirs = "another directory.id"
        elif holder == self.directory_id:
            theirs = f"this node's own directory.id {own} (a copy of its log dir?)"
        else:
            theirs = f"directory.id {_directory_text(holder)}"
        if node_id == self.node_id:
            host, port = self.address_of(node_id) or ("?", 0)
            who = f"the voter {node_id} at {host}:{port} is a live node {node_id} with {theirs}"
        else:
            who = f"node {node_id} has a live node {self.node_id} with {theirs} fetching from it"
        meta = self.log.directory.parent / "meta.properties"
        self._fail_config(
            f"node.id {self.node_id} is taken: {who}, and this node's directory.id is {own} ({meta}); "
            "stop that node, or give this one another node.id"
        )


_ZERO_UUID = CLUSTER_METADATA_TOPIC_ID.__class__(int=0)


def _endpoints_text(listeners: dict[str, tuple[str, int]]) -> str:
    """Endpoints as Kafka's Endpoints.toString shows them."""
    inner = ", ".join(f"{name}=/{host}:{port}" for name, (host, port) in listeners.items())
    return f"Endpoints(endpoints={{{inner}}})"


_NO_THROTTLE = timedelta(0)


def _known(directory_id: uuid.UUID | None) -> uuid.UUID | None:
    """A directory id, None for none (Kafka's ReplicaKey.NO_DIRECTORY_ID is the zero UUID)."""
    return None if directory_id is None or directory_id.int == 0 else directory_id


def _directory_text(directory_id: uuid.UUID | None) -> str:
    """A directory id as meta.properties writes it (Kafka's Uuid.toString), "none" when unknown."""
    directory_id = _known(directory_id)
    return "none" if directory_id is None else uuid_to_base64(directory_id)


def _any_error(message: Any, code: ErrorCode) -> bool:
    """The top-level error of a KRaft answer, or its one partition's, is `code`."""
    if getattr(message, "error_code", None) is code:
        return True
    for name in ("topics", "responses"):
        for topic in getattr(message, name, ()) or ():
            if any(getattr(p, "error_code", None) is code for p in getattr(topic, "partitions", ())):
                return True
    return False


def _beyond_max_epoch(epoch: int) -> bool:
    if epoch <= MAX_EPOCH:
        return False
    log.warning("raft: refusing a request in epoch %d, beyond %d", epoch, MAX_EPOCH)
    return True


def _single_partition(
    cls: type,
    partition: dict[str, Any],
    *,
    topic: str = "TopicData",
    part: str = "PartitionData",
    topics_field: str = "topics",
    topic_key: tuple[str, Any] = ("topic_name", CLUSTER_METADATA_TOPIC),
    **fields: Any,
) -> Any:
    """A Raft message: `fields` around one topic (`__cluster_metadata`) of one partition, the envelope
    every KRaft RPC has; fields a version lacks are left out."""
    topic_cls, partition_cls = nested_type(cls, topic), nested_type(cls, part)
    name_field, name = topic_key
    entry = topic_cls(**{name_field: name, "partitions": (build(partition_cls, **partition),)})
    return build(cls, **fields, **{topics_field: (entry,)})


def _only_partition(message: Any, topics_field: str = "topics") -> Any | None:
    topics = getattr(message, topics_field, ())
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        return None
    return topics[0].partitions[0]


def _now_ms() -> int:
    return int(time.time() * 1000)
