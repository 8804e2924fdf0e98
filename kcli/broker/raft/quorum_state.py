"""Where one node stands in the metadata quorum: its Raft state, epoch, leader and vote.

Kafka's QuorumState. The election part (epoch, leader id, the voted replica's id and directory id) is
durable in `__cluster_metadata-0/quorum-state` (data_version 1, written atomically) and is written
before any answer that depends on it leaves the node, so a node never votes twice in one epoch, even
across `kill -9`, nor for two processes that claim one node id (KIP-853's replica key: the id and the
directory id). Prospective and Resigned are not written: they change nothing a restart must keep.

Start-up follows Kafka's rules: a file whose epoch is behind the log's last epoch is ignored; a node
that was leader comes back Resigned (it must not append again in that epoch, its unflushed tail may be
gone); one that voted for itself comes back Candidate; one that voted for another stays Unattached
with that vote; one that knew a leader follows it.
"""

from __future__ import annotations

import enum
import json
import logging
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from formats.checkpoints import uuid_from_base64, uuid_to_base64
from formats.errors import CheckpointError
from kcli.errors import KcliError
from kcli.files import write_atomically

log = logging.getLogger("kcli.broker.raft")

QUORUM_STATE = "quorum-state"
NO_ID = -1


class RaftState(enum.Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The durable part: the epoch, its leader (-1: unknown) and this node's vote in it (-1: none), with
    the directory id the voted candidate sent (None: none sent, or no vote)."""

    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    voted_directory_id: uuid.UUID | None = None


class QuorumStateError(KcliError):
    """quorum-state cannot be read or written."""


def read_quorum_state(path: Path) -> ElectionState | None:
    """The stored election state, None when there is no file (a node that never took part)."""
    try:
        data = json.loads(path.read_bytes())
        voted_directory = data.get("votedDirectoryId")  # data_version 0 has none
        directory_id = uuid_from_base64(voted_directory) if voted_directory else None
        return ElectionState(
            int(data["leaderEpoch"]),
            int(data["leaderId"]),
            int(data["votedId"]),
            directory_id if directory_id is not None and directory_id.int != 0 else None,
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, CheckpointError) as exc:
        raise QuorumStateError(f"cannot read {path}: {str(exc).rstrip('.') or type(exc).__name__}.") from None


def write_quorum_state(path: Path, election: ElectionState) -> None:
    """quorum-state as Kafka 3.8+ writes it (data_version 1; the zero id when no directory id was voted for)."""
    state = {
        "leaderId": election.leader_id,
        "leaderEpoch": election.epoch,
        "votedId": election.voted_id,
        "votedDirectoryId": uuid_to_base64(election.voted_directory_id or uuid.UUID(int=0)),
        "data_version": 1,
    }
    try:
        write_atomically(path, json.dumps(state, separators=(",", ":")).encode())
    except OSError as exc:
        raise QuorumStateError(f"cannot write {path}: {(exc.strerror or str(exc)).lower()}.") from None


class QuorumState:
    """This node's state; every transition that Kafka persists is written before it returns."""

    def __init__(self, directory: Path, node_id: int, voters: frozenset[int]) -> None:
        self.path = directory / QUORUM_STATE
        self.node_id = node_id
        self.voters = voters
        self.state = RaftState.UNATTACHED
        self.election = ElectionState(0)

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def epoch(self) -> int:
        return self.election.epoch

    @property
    def leader_id(self) -> int:
        return self.election.leader_id

    @property
    def voted_id(self) -> int:
        return self.election.voted_id

    @property
    def voted_directory_id(self) -> uuid.UUID | None:
        return self.election.voted_directory_id

    @property
    def is_leader(self) -> bool:
        return self.state is RaftState.LEADER

    def initialize(self, log_end_epoch: int) -> None:
        """Kafka's QuorumState.initialize: the state to start in, from the file and the log's last epoch."""
        stored = read_quorum_state(self.path)
        if stored is None or stored.epoch < log_end_epoch:
            self.state, self.election = RaftState.UNATTACHED, ElectionState(max(log_end_epoch, 0))
            self._persist()
        elif stored.leader_id == self.node_id and self.is_voter:
            self.state, self.election = RaftState.RESIGNED, stored
        elif stored.voted_id == self.node_id and self.is_voter:
            self.state, self.election = RaftState.CANDIDATE, stored
        elif stored.leader_id != NO_ID:
            self.state, self.election = RaftState.FOLLOWER, stored
        else:
            self.state, self.election = RaftState.UNATTACHED, stored
        log.info("raft: starting as %s in epoch %d", self.describe(), self.epoch)

    def describe(self) -> str:
        parts = [self.state.value]
        if self.leader_id != NO_ID:
            parts.append(f"leader {self.leader_id}")
        if self.voted_id != NO_ID:
            parts.append(f"voted for {self.voted_id}")
        return ", ".join(parts)

    # --- transitions ---------------------------------------------------------------------------------

    def become_unattached(
        self,
        epoch: int,
        *,
        voted_id: int = NO_ID,
        voted_directory_id: uuid.UUID | None = None,
        leader_id: int = NO_ID,
    ) -> None:
        self._go(RaftState.UNATTACHED, ElectionState(epoch, leader_id, voted_id, voted_directory_id))

    def become_follower(self, epoch: int, leader_id: int) -> None:
        if epoch == self.epoch:
            voted, voted_directory = self.voted_id, self.voted_directory_id
        else:
            voted, voted_directory = NO_ID, None
        self._go(RaftState.FOLLOWER, ElectionState(epoch, leader_id, voted, voted_directory))

    def become_prospective(self) -> None:
        """Pre-vote (KIP-996): ask without bumping the epoch; nothing durable changes."""
        self.state = RaftState.PROSPECTIVE
        log.info("raft: %s in epoch %d, asking for pre-votes", self.describe(), self.epoch)

    def become_candidate(self) -> None:
        self._go(RaftState.CANDIDATE, ElectionState(self.epoch + 1, NO_ID, self.node_id))

    def become_leader(self) -> None:
        self._go(
            RaftState.LEADER, ElectionState(self.epoch, self.node_id)
        )  # Kafka keeps no vote for a leader

    def become_resigned(self) -> None:
        self.state = RaftState.RESIGNED
        log.info("raft: resigned as leader of epoch %d", self.epoch)

    def grant_vote(self, candidate_id: int, directory_id: uuid.UUID | None) -> None:
        """Vote for the candidate's key, its id and (when it sent one) its directory id."""
        if directory_id is not None and directory_id.int == 0:
            directory_id = None  # Kafka's ReplicaKey.NO_DIRECTORY_ID
        election = replace(self.election, voted_id=candidate_id, voted_directory_id=directory_id)
        self._go(RaftState.UNATTACHED, election)

    def _go(self, state: RaftState, election: ElectionState) -> None:
        changed = (state, election) != (self.state, self.election)
        self.state, self.election = state, election
        self._persist()
        if changed:
            log.info("raft: %s in epoch %d", self.describe(), self.epoch)

    def _persist(self) -> None:
        write_quorum_state(self.path, self.election)
