"""Elections: Vote and PreVote (KIP-595, KIP-996) both ways, BeginQuorumEpoch and EndQuorumEpoch.

A prospective voter asks for pre-votes, a candidate for votes; the winner writes the LeaderChange batch
that starts its epoch and announces itself with BeginQuorumEpoch until each voter has acknowledged it,
resigning (EndQuorumEpoch) when a majority stops fetching. The answers to the same requests follow
Kafka's rules per state (KafkaRaftClient.handleVoteRequest, handleBeginQuorumEpochRequest,
handleEndQuorumEpochRequest; the election states of QuorumState).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from formats.records import (
    ControlType,
    build_kraft_control_batch,
    build_leader_change_batch,
    leader_change_value,
)
from kcli.broker.raft.leader_state import LeaderState, ReplicaProgress
from kcli.broker.raft.quorum_state import NO_ID, RaftState
from kcli.broker.raft.raft_part import RaftPart
from kcli.broker.raft.raft_util import (
    BEGIN_QUORUM_EPOCH,
    END_QUORUM_EPOCH,
    NODE_ID_TAKEN,
    QUORUM_EPOCH_VERSION,
    VOTE,
    VOTE_VERSION,
    ZERO_UUID,
    beyond_max_epoch,
    only_partition,
    single_partition,
    time_ms,
)
from kcli.protocol.messages import nested_type, request_type, response_type

log = logging.getLogger("kcli.broker.raft")


class Elections(RaftPart):
    """One node's side of elections; the quorum state it moves is the client's."""

    _election_retries = 0
    """Elections lost in a row since the last one won: the backoff doubles with each."""

    async def _ask_votes(self, pre_vote: bool) -> tuple[set[int], set[int]]:
        """Send Vote (or PreVote) to every other voter; (granted, rejected) including this node."""
        granted, rejected = {self.raft.node_id}, set()
        majority = len(self.raft.voter_addresses) // 2 + 1
        end_offset, last_epoch = self.raft.last_offset_and_epoch()
        epoch = self.raft.epoch
        requests = {
            voter_id: self.raft.send(
                voter_id, self.vote_request(voter_id, epoch, end_offset, last_epoch, pre_vote)
            )
            for voter_id in self.raft.voter_addresses
            if voter_id != self.raft.node_id
        }
        tasks = {asyncio.ensure_future(coro): voter_id for voter_id, coro in requests.items()}
        try:
            pending = set(tasks)
            while (
                pending
                and len(granted) < majority
                and len(self.raft.voter_addresses) - len(rejected) >= majority
            ):
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    response = task.result()
                    if self.raft.fatal_error is not None:
                        return granted, rejected
                    if response is None:
                        rejected.add(tasks[task])
                        continue
                    partition = only_partition(response)
                    error = partition.error_code if partition is not None else response.error_code
                    self.raft.note_endpoints(
                        getattr(response, "node_endpoints", ())
                    )  # the leader it knows of
                    if partition is not None and await self.raft.live_replicas.another_leads_as_this_node(
                        partition.leader_id, partition.leader_epoch
                    ):
                        return granted, rejected
                    if partition is not None and self.raft.handle_epoch_info(
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

    def vote_request(
        self, voter_id: int, epoch: int, end_offset: int, last_epoch: int, pre_vote: bool
    ) -> Any:
        """Vote v2: a pre-vote carries the current epoch, a vote the one it campaigns in."""
        partition = {
            "partition_index": 0,
            "replica_epoch": epoch,
            "replica_id": self.raft.node_id,
            "replica_directory_id": self.raft.own_directory,
            "voter_directory_id": ZERO_UUID,
            "last_offset_epoch": last_epoch,
            "last_offset": end_offset,
            "pre_vote": pre_vote,
        }
        cls = request_type(VOTE, VOTE_VERSION)
        return single_partition(cls, partition, cluster_id=self.raft.cluster_id, voter_id=voter_id)

    async def pre_vote(self) -> None:
        """Prospective (KIP-996): a majority of pre-votes lets this voter start a real election."""
        epoch = self.raft.epoch
        granted, _ = await self._ask_votes(pre_vote=True)
        if self.raft.quorum.state is not RaftState.PROSPECTIVE or self.raft.epoch != epoch:
            return
        if len(granted) > len(self.raft.voter_addresses) // 2:
            self.raft.quorum.become_candidate()
            self.raft.transitioned()
            return
        backoff = self._election_backoff_ms()
        if self.raft.quorum.leader_id != NO_ID:
            self.raft.quorum.become_follower(self.raft.epoch, self.raft.quorum.leader_id)
        else:
            self.raft.quorum.become_unattached(
                self.raft.epoch,
                voted_id=self.raft.quorum.voted_id,
                voted_directory_id=self.raft.quorum.voted_directory_id,
            )
        self.raft.reset_election_timer(backoff)
        self.raft.transitioned()

    async def campaign(self) -> None:
        """Candidate: a majority of votes in this epoch makes this node the leader."""
        epoch = self.raft.epoch
        if len(self.raft.voter_addresses) == 1:
            self.become_leader()
            return
        self.raft.reset_election_timer()
        granted, _ = await self._ask_votes(pre_vote=False)
        if self.raft.quorum.state is not RaftState.CANDIDATE or self.raft.epoch != epoch:
            return
        if len(granted) > len(self.raft.voter_addresses) // 2:
            self._election_retries = 0
            self.become_leader()
            return
        backoff = self._election_backoff_ms()
        if not await self.raft.wait_changed(backoff / 1000):
            self.raft.quorum.become_prospective()
            self.raft.changed.set()

    def _election_backoff_ms(self) -> float:
        self._election_retries += 1
        ceiling = 100 * (1 << min(self._election_retries, 10))
        return min(self.raft.rng.random() * ceiling, self.raft.config.election_backoff_max_ms)

    def become_leader(self) -> None:
        """Win: write the state, then the LeaderChange batch that starts the epoch."""
        self.raft.quorum.become_leader()
        now_ms = time_ms()
        start = self.raft.log.next_offset
        voters = {voter_id: ReplicaProgress() for voter_id in self.raft.voter_addresses}
        self.raft.leader_state = LeaderState(
            self.raft.node_id, self.raft.epoch, start, voters, frozenset({self.raft.node_id})
        )
        self.raft.leader_state.acknowledged.add(self.raft.node_id)
        granting = sorted(self.raft.voter_addresses) if self.raft.is_only_voter else [self.raft.node_id]
        kraft = self.raft.start_of_epoch_kraft_records() if self.raft.dynamic else []
        if kraft:
            value = leader_change_value(self.raft.node_id, sorted(self.raft.voter_addresses), granting)
            batch = build_kraft_control_batch(
                [(ControlType.LEADER_CHANGE, value), *kraft],
                base_offset=start,
                partition_leader_epoch=self.raft.epoch,
                timestamp=now_ms,
            )
        else:
            batch = build_leader_change_batch(
                self.raft.node_id,
                sorted(self.raft.voter_addresses),
                granting,
                base_offset=start,
                leader_epoch=self.raft.epoch,
                timestamp=now_ms,
            )
        records = tuple((start + 1 + i, kind, value) for i, (kind, value) in enumerate(kraft))
        self.raft.append_control_batch(batch, start, records, now_ms)
        log.info(
            "raft: node %d is the leader of epoch %d from offset %d",
            self.raft.node_id,
            self.raft.epoch,
            start,
        )
        self.raft.transitioned()
        self.raft.on_leader_append()

    async def lead(self) -> None:
        """Re-send BeginQuorumEpoch to voters that have not acknowledged; resign without a majority."""
        state = self.raft.leader_state
        assert state is not None
        fetch_timeout = self.raft.config.fetch_timeout_ms / 1000
        check_deadline = time.monotonic() + 1.5 * fetch_timeout
        while self.raft.quorum.is_leader and not self.raft.shutting_down:
            waiting = [v for v in self.raft.voter_addresses if v not in state.acknowledged]
            for voter_id in waiting:
                asyncio.ensure_future(self._begin_quorum_epoch(voter_id))
            if await self.raft.wait_changed(fetch_timeout / 2):
                return
            if time.monotonic() >= check_deadline and not self.raft.is_only_voter:
                fetched = len(state.check_quorum_fetched | {self.raft.node_id})
                if fetched <= len(self.raft.voter_addresses) // 2:
                    log.warning(
                        "raft: resigning: no Fetch from a majority of voters for %.1f s", 1.5 * fetch_timeout
                    )
                    self.raft.quorum.become_resigned()
                    self.raft.reset_election_timer()
                    self.raft.transitioned()
                    await self.send_end_quorum_epoch(timeout=fetch_timeout / 2)
                    return
                state.check_quorum_fetched.clear()
                check_deadline = time.monotonic() + 1.5 * fetch_timeout

    async def _begin_quorum_epoch(self, voter_id: int) -> None:
        partition = {
            "partition_index": 0,
            "voter_directory_id": ZERO_UUID,
            "leader_id": self.raft.node_id,
            "leader_epoch": self.raft.epoch,
        }
        cls = request_type(BEGIN_QUORUM_EPOCH, QUORUM_EPOCH_VERSION)
        request = single_partition(
            cls,
            partition,
            cluster_id=self.raft.cluster_id,
            voter_id=voter_id,
            leader_endpoints=self.raft.leader_endpoints_field(cls),
        )
        response = await self.raft.send(voter_id, request)
        if response is None:
            return
        partition = only_partition(response)
        if partition is None:
            return
        if self.raft.handle_epoch_info(partition.error_code, partition.leader_id, partition.leader_epoch):
            return
        if partition.error_code is ErrorCode.none and self.raft.leader_state is not None:
            self.raft.leader_state.acknowledged.add(voter_id)

    async def send_end_quorum_epoch(self, *, timeout: float) -> set[int]:
        """Tell the other voters this leader is gone, most caught-up first as preferred successors; the
        voters that answered."""
        state = self.raft.leader_state
        progress = state.voters if state is not None else {}
        others = [v for v in self.raft.voter_addresses if v != self.raft.node_id]
        preferred = sorted(others, key=lambda v: -(progress[v].end_offset if v in progress else -1))
        cls = request_type(END_QUORUM_EPOCH, QUORUM_EPOCH_VERSION)
        candidate_cls = nested_type(cls, "ReplicaInfo")
        partition = {
            "partition_index": 0,
            "leader_id": self.raft.node_id,
            "leader_epoch": self.raft.epoch,
            "preferred_candidates": tuple(
                candidate_cls(candidate_id=v, candidate_directory_id=ZERO_UUID) for v in preferred
            ),
        }
        request = single_partition(
            cls,
            partition,
            cluster_id=self.raft.cluster_id,
            leader_endpoints=self.raft.leader_endpoints_field(cls),
        )
        answers = await asyncio.gather(
            *(self.raft.send(v, request, timeout=timeout) for v in others), return_exceptions=True
        )
        return {
            v
            for v, answer in zip(others, answers, strict=True)
            if answer is not None and not isinstance(answer, BaseException)
        }

    def handle_vote(self, request: Any, version: int) -> Any:
        """Vote and PreVote (v2's `pre_vote`), with Kafka's rules per state."""
        cls = response_type(VOTE, version)
        error = self.raft.check_cluster_id(request.cluster_id)
        partition = only_partition(request)
        if error is not ErrorCode.none or partition is None:
            return cls(error_code=error or ErrorCode.invalid_request, topics=(), node_endpoints=())
        pre_vote = bool(getattr(partition, "pre_vote", False))
        epoch = partition.replica_epoch if version >= 2 else partition.candidate_epoch
        candidate = partition.replica_id if version >= 2 else partition.candidate_id
        directory_id = getattr(
            partition, "replica_directory_id" if version >= 2 else "candidate_directory_id", None
        )
        holder = self.raft.live_replicas.live_holder(candidate, directory_id)
        if holder is not None:  # before any epoch moves: another process with that id cannot be elected
            self.raft.live_replicas.log_taken(
                "pre-vote" if pre_vote else "vote", candidate, directory_id, holder
            )
            return cls(error_code=NODE_ID_TAKEN, topics=(), node_endpoints=())
        granted = False
        error = ErrorCode.none
        if partition.last_offset < 0 or partition.last_offset_epoch < 0 or beyond_max_epoch(epoch):
            error = ErrorCode.invalid_request
        elif (not pre_vote and partition.last_offset_epoch >= epoch) or (
            pre_vote and partition.last_offset_epoch > epoch
        ):
            error = ErrorCode.invalid_request
        elif getattr(request, "voter_id", -1) not in (-1, self.raft.node_id):
            log.error(
                "raft: node %d sent a vote request meant for voter %d to this node (%d): the voter lists "
                "of the nodes disagree",
                candidate,
                request.voter_id,
                self.raft.node_id,
            )
            error = ErrorCode.invalid_voter_key
        elif candidate not in self.raft.voter_addresses or not self.raft.quorum.is_voter:
            log.error(
                "raft: node %d asks for a vote but is not in controller.quorum.voters %s (or this node is "
                "not): the voter lists of the nodes disagree",
                candidate,
                sorted(self.raft.voter_addresses),
            )
            error = ErrorCode.invalid_voter_key
        elif epoch < self.raft.epoch:
            error = ErrorCode.fenced_leader_epoch
        else:
            if not pre_vote and epoch > self.raft.epoch:
                self.raft.quorum.become_unattached(epoch)
                self.raft.reset_election_timer()  # a fresh randomized timeout in the new epoch, as Kafka
                self.raft.transitioned()
            up_to_date = (partition.last_offset_epoch, partition.last_offset) >= tuple(
                reversed(self.raft.last_offset_and_epoch())
            )
            granted = self._can_grant(candidate, directory_id, up_to_date, pre_vote)
            if granted and not pre_vote:
                self.raft.quorum.grant_vote(candidate, directory_id)
                self.raft.reset_election_timer()
                self.raft.transitioned()
        log.info(
            "raft: %s from %d in epoch %d: %s",
            "pre-vote" if pre_vote else "vote",
            candidate,
            epoch,
            "granted"
            if granted
            else f"rejected ({error.name if error is not ErrorCode.none else self.raft.quorum.describe()})",
        )
        return self._quorum_epoch_response(cls, error, vote_granted=granted)

    def _can_grant(
        self, candidate: int, directory_id: uuid.UUID | None, up_to_date: bool, pre_vote: bool
    ) -> bool:
        state = self.raft.quorum.state
        if state in (RaftState.LEADER, RaftState.CANDIDATE):
            return False
        if candidate == self.raft.node_id:  # Kafka's QuorumState never votes for itself on a request
            return False
        if state is RaftState.RESIGNED:  # Kafka's ResignedState: helps elect its successor
            return pre_vote and up_to_date
        if state is RaftState.FOLLOWER:
            return pre_vote and not self.raft.fetched_from_leader and up_to_date
        if pre_vote:
            return up_to_date
        if (
            self.raft.quorum.voted_id != NO_ID
        ):  # the same replica key: id, and directory id when one was voted for
            voted_directory = self.raft.quorum.voted_directory_id
            return self.raft.quorum.voted_id == candidate and voted_directory in (None, directory_id)
        if self.raft.quorum.leader_id != NO_ID:
            return False
        return up_to_date

    def handle_begin_quorum_epoch(self, request: Any, version: int) -> Any:
        """A new leader announces itself: follow it."""
        cls = response_type(BEGIN_QUORUM_EPOCH, version)
        partition = only_partition(request)
        error = self.raft.check_cluster_id(request.cluster_id)
        if error is ErrorCode.none and (partition is None or beyond_max_epoch(partition.leader_epoch)):
            error = ErrorCode.invalid_request
        if error is ErrorCode.none and self.raft.dynamic:
            for endpoint in getattr(request, "leader_endpoints", ()) or ():
                if endpoint.name == self.raft.listener_name:
                    address = (endpoint.host, endpoint.port)
                    self.raft.endpoints[partition.leader_id] = address
                    self.raft.announced[partition.leader_id] = (partition.leader_epoch, address)
        if (
            error is ErrorCode.none
            and partition.leader_id not in self.raft.voter_addresses
            and (not self.raft.dynamic or self.raft.address_of(partition.leader_id) is None)
        ):
            log.error(
                "raft: node %d claims the leadership of epoch %d but is not in controller.quorum.voters %s: "
                "the voter lists of the nodes disagree",
                partition.leader_id,
                partition.leader_epoch,
                sorted(self.raft.voter_addresses),
            )
            return self._quorum_epoch_response(cls, ErrorCode.inconsistent_voter_set)
        if error is ErrorCode.none:
            if partition.leader_epoch < self.raft.epoch:
                return self._quorum_epoch_response(cls, ErrorCode.fenced_leader_epoch)
            if partition.leader_id == self.raft.node_id:
                if self.raft.leads(partition.leader_epoch):
                    return self._quorum_epoch_response(cls, ErrorCode.none)
                return self._names_this_node(cls, "BeginQuorumEpoch", partition.leader_epoch)
            if partition.leader_epoch == self.raft.epoch and self.raft.quorum.leader_id not in (
                NO_ID,
                partition.leader_id,
            ):
                # one leader per epoch: a second one in the epoch this node knows a leader of is a bug
                log.warning(
                    "raft: node %d claims epoch %d, whose leader is %d; refused",
                    partition.leader_id,
                    self.raft.epoch,
                    self.raft.quorum.leader_id,
                )
                return self._quorum_epoch_response(cls, ErrorCode.invalid_request)
            if (self.raft.quorum.state, self.raft.quorum.leader_id, self.raft.epoch) != (
                RaftState.FOLLOWER,
                partition.leader_id,
                partition.leader_epoch,
            ):
                self.raft.quorum.become_follower(partition.leader_epoch, partition.leader_id)
                self.raft.transitioned()
            return self._quorum_epoch_response(cls, ErrorCode.none)
        return cls(error_code=error, topics=(), node_endpoints=())

    def handle_end_quorum_epoch(self, request: Any, version: int) -> Any:
        """The leader resigned: the most caught-up preferred successor campaigns first."""
        cls = response_type(END_QUORUM_EPOCH, version)
        partition = only_partition(request)
        error = self.raft.check_cluster_id(request.cluster_id)
        if error is not ErrorCode.none or partition is None:
            return cls(error_code=error or ErrorCode.invalid_request, topics=(), node_endpoints=())
        if beyond_max_epoch(partition.leader_epoch):
            return self._quorum_epoch_response(cls, ErrorCode.invalid_request)
        if partition.leader_id not in self.raft.voter_addresses:
            return self._quorum_epoch_response(cls, ErrorCode.inconsistent_voter_set)
        if partition.leader_epoch < self.raft.epoch:
            return self._quorum_epoch_response(cls, ErrorCode.fenced_leader_epoch)
        if partition.leader_id == self.raft.node_id and not self.raft.leads(partition.leader_epoch):
            return self._names_this_node(cls, "EndQuorumEpoch", partition.leader_epoch)
        if partition.leader_epoch > self.raft.epoch:
            self.raft.quorum.become_follower(partition.leader_epoch, partition.leader_id)
            self.raft.transitioned()
        if self.raft.quorum.state is RaftState.FOLLOWER and self.raft.quorum.leader_id == partition.leader_id:
            preferred = [c.candidate_id for c in getattr(partition, "preferred_candidates", ())] or list(
                getattr(partition, "preferred_successors", ())
            )
            self.raft.reset_election_timer(self._successor_backoff_ms(preferred))
            self.raft.fetch_deadline_override = (
                self.raft.epoch,
                partition.leader_id,
                self.raft.election_deadline,
            )
            self.raft.changed.set()
        return self._quorum_epoch_response(cls, ErrorCode.none)

    def _names_this_node(self, cls: type, name: str, epoch: int) -> Any:
        """A request naming this node the leader of an epoch it does not lead: refused, nothing moves
        (Kafka's QuorumState never follows itself; following itself, this node would also have told its
        controller it was active while its Raft client could not append)."""
        log.warning(
            "raft: %s names this node (%d) the leader of epoch %d, which it is not (%s in epoch %d); "
            "refused: does another node have node.id %d?",
            name,
            self.raft.node_id,
            epoch,
            self.raft.quorum.describe(),
            self.raft.epoch,
            self.raft.node_id,
        )
        return self._quorum_epoch_response(cls, ErrorCode.invalid_request)

    def _successor_backoff_ms(self, preferred: list[int]) -> int:
        ceiling = self.raft.config.election_backoff_max_ms
        if self.raft.node_id not in preferred:
            return ceiling
        position = preferred.index(self.raft.node_id)
        if position == 0:
            return 0
        return min(ceiling, (ceiling >> (len(preferred) - 1)) << (position - 1))

    def _quorum_epoch_response(self, cls: type, error: ErrorCode, **extra: Any) -> Any:
        """Vote, BeginQuorumEpoch and EndQuorumEpoch answers: the error, this node's leader and epoch."""
        partition = {
            "partition_index": 0,
            "error_code": error,
            "leader_id": self.raft.quorum.leader_id,
            "leader_epoch": self.raft.epoch,
            **extra,
        }
        return single_partition(
            cls, partition, error_code=ErrorCode.none, node_endpoints=self.raft.leader_node_endpoints(cls)
        )
