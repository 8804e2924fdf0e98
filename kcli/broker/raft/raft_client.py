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
import random
import shutil
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from formats.errors import FormatError
from formats.internal import decode_metadata_record
from formats.kraft_snapshot import read_snapshot
from formats.records import ControlType, build_kraft_control_batch, kraft_version_value, voters_value
from kcli.broker.log import AppendOrigin, LogStorageError, RecordError
from kcli.broker.raft.elections import Elections
from kcli.broker.raft.fetch_replication import FetchReplication
from kcli.broker.raft.leader_state import LeaderState, ReplicaProgress
from kcli.broker.raft.live_replicas import LiveReplicas
from kcli.broker.raft.metadata_log import LoggedBatch, MetadataLog, MetadataLogError
from kcli.broker.raft.quorum_config import RaftConfig
from kcli.broker.raft.quorum_state import NO_ID, QuorumState, RaftState
from kcli.broker.raft.raft_listener import LeaderAndEpoch, RaftListener
from kcli.broker.raft.raft_util import (
    DESCRIBE_QUORUM,
    MAX_EPOCH,
    NODE_ID_TAKEN,
    ZERO_UUID,
    NotLeaderError,
    any_error,
    single_partition,
    time_ms,
)
from kcli.broker.raft.snapshot_handler import SnapshotHandler
from kcli.broker.raft.snapshots import (
    BOOTSTRAP_SNAPSHOT,
    SnapshotId,
    list_snapshots,
    remove_partial_snapshots,
)
from kcli.broker.raft.voter_changes import AddVoterHandler, RemoveVoterHandler, UpdateVoterHandler
from kcli.broker.raft.voter_history import VoterSetHistory
from kcli.client import NodeConnections
from kcli.protocol.messages import build, nested_type, response_type
from kcli.security import PLAINTEXT, ClientSecurity
from kcli.voters import VoterNode, VoterSet

log = logging.getLogger("kcli.broker.raft")


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
        security: ClientSecurity = PLAINTEXT,
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
        self.endpoints: dict[int, tuple[str, int]] = {}
        """Leaders' endpoints learned from answers (NodeEndpoints) and BeginQuorumEpoch."""
        self.announced: dict[int, tuple[int, tuple[str, int]]] = {}
        """Per leader id, the epoch it announced itself in and the endpoint it announced (BeginQuorumEpoch's
        LeaderEndpoints, its Fetch answers' NodeEndpoints). Kafka's follower fetches from the endpoints
        that told it of the leader (FollowerState.leaderEndpoints), the voter set's only when the message
        carried none: the two differ when this node's voter set comes from a log that diverged from the
        leader's (a Voters record it has yet to truncate)."""
        self.voter_change: tuple[int, asyncio.Future[None]] | None = None
        """The leader's one voter change in flight (KIP-853): the offset of its Voters record, and
        what completes when the high watermark passes it."""
        self.cluster_id = cluster_id
        self.config = config or RaftConfig()
        self.quorum = QuorumState(metadata_log.directory, node_id, frozenset(voters))
        self.leader_state: LeaderState | None = None
        self.high_watermark = -1
        self.latest_snapshot: SnapshotId | None = None
        self.created_log_dir = False
        """This start made `__cluster_metadata-0`: a start that fails before any record leaves no trace."""
        self.raft_listeners: list[RaftListener] = []
        self.uncommitted: deque[LoggedBatch] = deque()
        self._commit_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self.caught_up = asyncio.Event()
        self.changed = asyncio.Event()
        self.appended = asyncio.Event()  # wakes parked leader Fetches
        self.security = security
        """How the voters' controller listeners are dialed (BrokerConfig.controller_security)."""
        self.peers = NodeConnections(f"raft-client-{node_id}", security)
        self._task: asyncio.Task[None] | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._fired_leader: LeaderAndEpoch | None = None
        self.election_deadline = 0.0
        # EndQuorumEpoch from the leader: (its epoch, its id, when this follower stops waiting for it)
        self.fetch_deadline_override: tuple[int, int, float] | None = None
        self.fetched_from_leader = False
        self._voter_refusals_logged: set[tuple[int, ErrorCode]] = set()
        self.shutting_down = False
        self.fatal_error: Exception | None = None
        """What stopped this client for good (Kafka's fatal faults): see `_fail`."""
        self.fatal_fault_handler: Callable[[Exception], None] | None = None
        """Told once, soon after, of the error that stopped this client: the process's way out (Kafka's
        KafkaRaftManager hands KafkaRaftClientDriver SharedServer's raft fault handler, a
        ProcessTerminatingFaultHandler). Before the node has caught up, `wait_caught_up` raises it too."""
        self.rng = random.Random()
        # Kafka's parts of one Raft client, each given this client's state
        self.elections = Elections(self)
        self.fetch_replication = FetchReplication(self)
        self.snapshots = SnapshotHandler(self)
        self.live_replicas = LiveReplicas(self)
        self.add_voter = AddVoterHandler(self)
        self.remove_voter = RemoveVoterHandler(self)
        self.update_voter = UpdateVoterHandler(self)

    # --- lifecycle ---------------------------------------------------------------------------------

    @property
    def is_only_voter(self) -> bool:
        return set(self.voter_addresses) == {self.node_id}

    def register(self, listener: RaftListener) -> None:
        """Hand every batch committed from now on to `listener`, after the listeners registered before."""
        self.raft_listeners.append(listener)

    async def start(self) -> None:
        """Read quorum-state and the log, then run the protocol in the background."""
        directory = self.log.directory
        remove_partial_snapshots(directory)
        snapshots = list_snapshots(directory)
        self.latest_snapshot = snapshot = snapshots[-1] if snapshots else None
        start = 0
        if self.dynamic and snapshot is None:
            self.load_kraft_records(BOOTSTRAP_SNAPSHOT)
        if snapshot is not None:
            if self.log.next_offset < snapshot.end_offset:  # the log lost what the snapshot holds
                self.log.log.truncate_fully_and_start_at(snapshot.end_offset)
            start = snapshot.end_offset
            self.snapshots.load_snapshot(snapshot)
        self.log.update_high_watermark(0)  # learned again from the quorum, never trusted from disk
        for batch in self.log.batches(start):
            self.uncommitted.append(batch)
            if self.dynamic and batch.kraft_records:
                self.history.apply(batch.kraft_records)
        self.voters_changed()
        last_epoch = self.last_offset_and_epoch()[1]
        self.quorum.initialize(last_epoch)
        if self.quorum.is_voter and self.is_only_voter and self.quorum.state is not RaftState.CANDIDATE:
            self.quorum.become_candidate()
        self.reset_election_timer()
        if self.quorum.state is RaftState.CANDIDATE and self.is_only_voter:
            self.elections.become_leader()
        self._task = asyncio.create_task(self._run(), name="kcli-raft")

    async def wait_caught_up(self) -> None:
        """Until this node has the batches committed when it first heard from the leader (or led).

        Raises what stopped the client if a committed batch could not be applied.
        """
        await self.caught_up.wait()
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
        self.shutting_down = True
        self.caught_up.set()
        self._fail_commit_waiters()
        handler = self.fatal_fault_handler
        if handler is not None:
            asyncio.get_running_loop().call_soon(handler, exc)

    def discard_if_untouched(self) -> None:
        """After a failed first start: remove the metadata log this start created, if it holds nothing."""
        if self.created_log_dir and self.log.next_offset == 0:
            shutil.rmtree(self.log.directory, ignore_errors=True)

    async def shutdown(self) -> None:
        """Resign leadership (EndQuorumEpoch to the voters) and stay until a successor leads, stop,
        flush and close the log. After a fatal fault there is no resignation: the node has left the
        quorum (Kafka halts), the voters elect another leader once their fetch timeout passes."""
        self.shutting_down = True
        successors: set[int] | None = None  # the voters told, when this node resigns
        resigned_epoch = self.epoch
        if self.quorum.is_leader and not self.is_only_voter and self.fatal_error is None:
            self.quorum.become_resigned()
            successors = await self.elections.send_end_quorum_epoch(
                timeout=min(self.config.request_timeout_ms / 1000, 1.0)
            )
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if successors is not None and len(successors) + 1 > len(self.voter_addresses) // 2:
            await self._await_successor(resigned_epoch)
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
        self._fail_commit_waiters()
        await self.peers.close()

    async def _await_successor(self, resigned_epoch: int) -> None:
        """Kafka's GracefulShutdown of a leader: stay resigned until another voter leads a later epoch,
        answering pre-votes and votes (the controller listener still serves), up to the fetch timeout,
        after which the voters would campaign without it. A majority may need this node's vote: a
        voter that still counts the old leader as live refuses pre-votes, and one whose log is behind
        cannot win, so without it the election waits for a fetch timeout."""
        deadline = time.monotonic() + self.config.fetch_timeout_ms / 1000
        while self.epoch == resigned_epoch or self.quorum.leader_id in (NO_ID, self.node_id):
            self.changed.clear()
            if not await self.wait_changed(deadline - time.monotonic()):
                log.info("raft: no successor led within %d ms of resigning", self.config.fetch_timeout_ms)
                return
        # Two Fetches: one brings the successor's LeaderChange, the next says it is held here, which
        # commits it, and with it what this node wrote before resigning but had not committed (the
        # fence of its own broker, say): the successor's controller sees its peers as they left.
        for _ in range(2):
            if not await self.fetch_replication.fetch_from(self.quorum.leader_id, deadline):
                break
        log.info("raft: node %d leads epoch %d; leaving the quorum", self.quorum.leader_id, self.epoch)

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
        announced = self.announced.get(node_id)
        if announced is not None and announced[0] == self.epoch and node_id == self.quorum.leader_id:
            return announced[1]
        address = self.voter_addresses.get(node_id)
        if address is None and self.dynamic:
            address = self.endpoints.get(node_id)
            if address is None and node_id <= -2 and -2 - node_id < len(self.bootstrap_servers):
                address = self.bootstrap_servers[-2 - node_id]
        return address

    def voters_changed(self) -> None:
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
        self.voter_addresses = {i: addresses.get(i, self.endpoints.get(i, ("", 0))) for i in sorted(ids)}
        self.quorum.voters = frozenset(ids)
        if self.leader_state is not None:
            self.leader_state.set_voters(frozenset(ids))

    def load_kraft_records(self, snapshot_id: SnapshotId) -> None:
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

    def start_of_epoch_kraft_records(self) -> list[tuple[ControlType, bytes]]:
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
        if not self.quorum.is_leader or self.shutting_down:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {self.epoch}")
        offset = self.log.next_offset
        value = voters_value(voters.to_records())
        batch = build_kraft_control_batch(
            [(ControlType.KRAFT_VOTERS, value)],
            base_offset=offset,
            partition_leader_epoch=self.epoch,
            timestamp=now_ms,
        )
        self.append_control_batch(batch, offset, ((offset, ControlType.KRAFT_VOTERS, value),), now_ms)
        self.on_leader_append()
        return offset

    def append_control_batch(
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
        self.uncommitted.append(LoggedBatch(start, last, self.epoch, now_ms, (), 0, kraft))
        if kraft:
            self.history.apply(kraft)
            self.voters_changed()

    def note_endpoints(self, endpoints: Any) -> None:
        """Leaders' endpoints an answer carries (NodeEndpoints, v16+ Fetch and the other KRaft RPCs)."""
        for endpoint in endpoints or ():
            self.endpoints[endpoint.node_id] = (endpoint.host, endpoint.port)

    def leader_endpoints_field(self, cls: type) -> tuple[Any, ...]:
        """BeginQuorumEpoch / EndQuorumEpoch v1 LeaderEndpoints: this leader's listeners (dynamic only)."""
        if not self.dynamic:
            return ()
        endpoint_cls = nested_type(cls, "LeaderEndpoint")
        return tuple(
            build(endpoint_cls, name=name, host=host, port=port)
            for name, (host, port) in self.local_listeners.items()
        )

    def local_address(self) -> tuple[str, int] | None:
        return self.local_listeners.get(self.listener_name) or self.voter_addresses.get(self.node_id)

    def leader_node_endpoints(self, cls: type) -> tuple[Any, ...]:
        """The known leader's endpoint for an answer's NodeEndpoints, as Kafka's QuorumState.leaderEndpoints
        gives it to every answer: this node's own when it leads, where the leader is reached otherwise
        (a voter that lost an election learns the winner from its Vote answer). Dynamic quorums only:
        static voters know each other from controller.quorum.voters."""
        leader = self.quorum.leader_id
        if not self.dynamic or leader == NO_ID:
            return ()
        address = self.local_address() if self.quorum.is_leader else self.address_of(leader)
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
        if not self.quorum.is_leader or self.shutting_down:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {self.epoch}")
        base_offset, last_offset = self.log.append(
            values, leader_epoch=self.epoch, now_ms=now_ms, flush=False
        )
        records = tuple((decode_metadata_record(value), base_offset + i) for i, value in enumerate(values))
        size = 61 + sum(len(value) + 10 for value in values)  # the v2 batch header and per-record framing
        batch = LoggedBatch(base_offset, last_offset, self.epoch, now_ms, records, size)
        self.uncommitted.append(batch)
        self.on_leader_append()
        return batch

    async def wait_committed(self, offset: int) -> None:
        """Until the high watermark passes `offset`; NotLeaderError if this epoch ends before."""
        if self.high_watermark > offset:
            return
        if not self.quorum.is_leader or self.shutting_down:  # only this leader's epoch commits it
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {self.epoch}")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit_waiters.append((offset, self.epoch, future))
        await future

    # --- the driver --------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self.shutting_down:
            self.changed.clear()
            try:
                state = self.quorum.state
                if state is RaftState.LEADER:
                    await self.elections.lead()
                elif state is RaftState.FOLLOWER:
                    await self.fetch_replication.follow()
                elif state is RaftState.PROSPECTIVE:
                    await self.elections.pre_vote()
                elif state is RaftState.CANDIDATE:
                    await self.elections.campaign()
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

    async def wait_changed(self, seconds: float) -> bool:
        """Sleep up to `seconds` or until the state changes; True when it changed."""
        try:
            await asyncio.wait_for(self.changed.wait(), max(seconds, 0.0))
            return True
        except TimeoutError:
            return False

    def transitioned(self) -> None:
        self.changed.set()
        self.appended.set()  # parked fetches answer with the new epoch
        self.appended = asyncio.Event()
        leader = self.leader
        if self.quorum.state is not RaftState.LEADER:
            self.leader_state = None
            self._fail_commit_waiters()
            change, self.voter_change = self.voter_change, None
            if change is not None and not change[1].done():
                change[1].set_exception(NotLeaderError(f"epoch {self.epoch} ended before the voter change"))
            self._fire_leader_change(leader)

    def reset_election_timer(self, backoff_ms: float | None = None) -> None:
        timeout = self.config.election_timeout_ms
        delay = backoff_ms if backoff_ms is not None else timeout + self.rng.random() * timeout
        self.election_deadline = time.monotonic() + delay / 1000

    async def _wait_for_leader(self) -> None:
        """Unattached or Resigned: wait for a leader to show up; a voter campaigns after its timeout."""
        if not self.quorum.is_voter:
            await self._discover_leader()
            return
        if await self.wait_changed(self.election_deadline - time.monotonic()):
            return
        if self.quorum.state is RaftState.RESIGNED:
            self.quorum.become_unattached(self.epoch + 1)
            self.transitioned()
        self.quorum.become_prospective()
        self.changed.set()

    async def _discover_leader(self) -> None:
        """An observer without a leader asks the voters in turn (a dynamic quorum: the bootstrap servers,
        in random order, as Kafka's RequestManager picks them); any answer names the leader."""
        targets = sorted(self.voter_addresses)
        if self.dynamic and self.bootstrap_servers:
            targets = [-2 - i for i in range(len(self.bootstrap_servers))]
        for node_id in self.rng.sample(targets, len(targets)):
            await self.fetch_replication.fetch_from(node_id)
            if self.quorum.state is RaftState.FOLLOWER:
                return
        await self.wait_changed(self.config.retry_backoff_ms / 1000 * 10)

    def last_offset_and_epoch(self) -> tuple[int, int]:
        """(log end offset, epoch of the last record): the snapshot's epoch when the log starts empty at it."""
        epoch = self.log.log.latest_epoch()
        if epoch is None:
            snapshot = self.latest_snapshot
            epoch = (
                snapshot.epoch if snapshot is not None and snapshot.end_offset == self.log.next_offset else 0
            )
        return self.log.next_offset, epoch

    # --- the leader's flushes ---------------------------------------------------------------------

    def on_leader_append(self) -> None:
        """Flush what was appended on the worker thread; the leader counts it once durable."""
        waiters, self.appended = self.appended, asyncio.Event()
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
            if state.update_local(end, time_ms()):
                self.update_high_watermark(state.high_watermark)
            if self.log.next_offset == end:
                return

    # --- the high watermark and listeners ------------------------------------------------------------

    def update_high_watermark(self, high_watermark: int) -> None:
        if high_watermark <= self.high_watermark:
            return
        self.high_watermark = self.log.update_high_watermark(high_watermark)
        committed = []
        while self.uncommitted and self.uncommitted[0].last_offset < self.high_watermark:
            committed.append(self.uncommitted.popleft())
        if committed:
            for listener in self.raft_listeners:
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
            self.caught_up.set()
            self._fire_leader_change(self.leader)
        change = self.voter_change
        if change is not None and self.high_watermark > change[0]:
            self.voter_change = None
            if not change[1].done():
                change[1].set_result(None)
            if self.dynamic and self.quorum.is_leader and self.node_id not in self.quorum.voters:
                # RemoveVoterHandler.highWatermarkUpdated: not in the committed voter set, resign
                log.info("raft: leader %d is not in the committed voter set; resigning", self.node_id)
                self.quorum.become_resigned()
                self.reset_election_timer()
                self.transitioned()
                asyncio.ensure_future(
                    self.elections.send_end_quorum_epoch(timeout=self.config.request_timeout_ms / 1000)
                )
        waiters_event, self.appended = self.appended, asyncio.Event()
        waiters_event.set()

    def _fire_leader_change(self, leader: LeaderAndEpoch) -> None:
        if leader == self._fired_leader:
            return
        self._fired_leader = leader
        for listener in self.raft_listeners:
            listener.handle_leader_change(leader)

    def _fail_commit_waiters(self) -> None:
        waiters, self._commit_waiters = self._commit_waiters, []
        for _, epoch, future in waiters:
            if not future.done():
                future.set_exception(NotLeaderError(f"epoch {epoch} ended before the write was committed"))

    # --- responses: what every answer says about epochs -------------------------------------------------

    def handle_epoch_info(self, error: ErrorCode, leader_id: int, leader_epoch: int) -> bool:
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
            self.reset_election_timer()
            self.transitioned()
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
            self.transitioned()
        return False

    def leads(self, epoch: int) -> bool:
        return self.quorum.is_leader and self.epoch == epoch

    # --- requests this node answers: each goes to the part of the client that owns it --------------

    def handle_vote(self, request: Any, version: int) -> Any:
        return self.elections.handle_vote(request, version)

    def handle_begin_quorum_epoch(self, request: Any, version: int) -> Any:
        return self.elections.handle_begin_quorum_epoch(request, version)

    def handle_end_quorum_epoch(self, request: Any, version: int) -> Any:
        return self.elections.handle_end_quorum_epoch(request, version)

    async def handle_fetch(self, request: Any, version: int) -> Any:
        return await self.fetch_replication.handle_fetch(request, version)

    def handle_fetch_snapshot(self, request: Any, version: int) -> Any:
        return self.snapshots.handle_fetch_snapshot(request, version)

    async def handle_add_raft_voter(self, request: Any, version: int) -> Any:
        return await self.add_voter.handle(request, version)

    async def handle_remove_raft_voter(self, request: Any, version: int) -> Any:
        return await self.remove_voter.handle(request, version)

    async def handle_update_raft_voter(self, request: Any, version: int) -> Any:
        return await self.update_voter.handle(request, version)

    async def write_snapshot(
        self, snapshot_id: SnapshotId, values: Sequence[bytes], *, last_contained_timestamp: int
    ) -> bool:
        """Write a snapshot of the committed state as of `snapshot_id`; see `SnapshotHandler.write_snapshot`."""
        return await self.snapshots.write_snapshot(
            snapshot_id, values, last_contained_timestamp=last_contained_timestamp
        )

    def check_fetch_epoch(self, requested: int) -> ErrorCode:
        if requested < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if requested > self.epoch:
            return ErrorCode.unknown_leader_epoch
        if not self.quorum.is_leader:
            return ErrorCode.not_leader_or_follower
        if self.shutting_down:
            return ErrorCode.broker_not_available
        return ErrorCode.none

    def describe_quorum(self, version: int) -> Any:
        """DescribeQuorum as the leader answers it; NOT_LEADER_OR_FOLLOWER elsewhere."""
        cls = response_type(DESCRIBE_QUORUM, version)
        replica_cls = nested_type(cls, "ReplicaState")
        state = self.leader_state
        now_ms = time_ms()

        def replica(replica_id: int, progress: ReplicaProgress) -> Any:
            is_self = replica_id == self.node_id
            directory_id = (
                self.directory_id if is_self else self.live_replicas.directories.get(replica_id, (None,))[0]
            )
            voters = self.history.last_voter_set() if self.dynamic else None
            if voters is not None and replica_id in voters.voters and not is_self:
                directory_id = voters.voters[replica_id].directory_id or directory_id
            return build(
                replica_cls,
                replica_id=replica_id,
                replica_directory_id=ZERO_UUID if directory_id is None else directory_id,
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
        return single_partition(cls, partition, error_code=ErrorCode.none, error_message=None, nodes=nodes)

    def check_cluster_id(self, cluster_id: str | None) -> ErrorCode:
        if cluster_id is None or cluster_id == self.cluster_id:
            return ErrorCode.none
        return ErrorCode.inconsistent_cluster_id

    # --- the network ----------------------------------------------------------------------------------

    async def send(self, node_id: int, request: Any, *, timeout: float | None = None) -> Any | None:
        """One request to a voter's controller listener; None when it cannot be reached in time."""
        limit = timeout if timeout is not None else self.config.request_timeout_ms / 1000
        address = self.address_of(node_id)
        if address is None:
            return None
        response = await self.peers.send(node_id, address, request, timeout=limit)
        if response is not None and any_error(response, ErrorCode.inconsistent_cluster_id):
            self._refused_by_voter(
                node_id,
                ErrorCode.inconsistent_cluster_id,
                f"voter {node_id} at {address[0]}:{address[1]} belongs to another cluster than this node's "
                f"log dirs ({self.cluster_id}): format them with the cluster's id, or fix "
                "controller.quorum.voters",
            )
            return None
        if response is not None and any_error(response, NODE_ID_TAKEN):
            await self.live_replicas.stop_as_taken(node_id)
            return None
        if response is not None and any_error(response, ErrorCode.invalid_voter_key):
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
        if not self.caught_up.is_set():
            self.fail_config(sentence)
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

    def fail_config(self, sentence: str) -> None:
        """A quorum this node cannot be part of: stop with one sentence (start-up fails with it)."""
        if self.fatal_error is None:
            self._fail(MetadataLogError(sentence + "."))

    # --- this replica's key -----------------------------------------------------------------------

    @property
    def own_directory(self) -> uuid.UUID:
        return ZERO_UUID if self.directory_id is None else self.directory_id
