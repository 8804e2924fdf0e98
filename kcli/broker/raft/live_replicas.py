"""One live process per node id: a replica key's directory id tells two processes with one node.id apart.

Two processes started with one node.id (a copied config, a node brought back while its replacement
runs) would each fetch, vote and campaign as that replica. Addresses cannot tell them apart (a node
may be reached through a proxy, and advertise other ports than its voter entry), but their directory
ids can: each formatted metadata log dir has its own (KIP-853's replica key is the pair). The leader
notes the directory id of every replica it serves, and refuses another one for that id while the
noted one fetched within controller.quorum.fetch.timeout.ms; a restart (the same dir) or a dir
formatted again after its node died (not seen for that long) is served as before. The refused process
stops with one sentence, before it follows anyone in that epoch. Kafka has no such guard.
"""

from __future__ import annotations

import logging
import time
import uuid

from kio.schema.errors import ErrorCode

from kcli.broker.raft.raft_part import RaftClientState, RaftPart
from kcli.broker.raft.raft_util import (
    DESCRIBE_QUORUM,
    DESCRIBE_QUORUM_VERSION,
    MAX_EPOCH,
    directory_text,
    known_directory,
    only_partition,
    single_partition,
)
from kcli.protocol.messages import request_type

log = logging.getLogger("kcli.broker.raft")


class LiveReplicas(RaftPart):
    """The directory ids of the replicas this node served, and the checks made with them."""

    def __init__(self, raft: RaftClientState) -> None:
        super().__init__(raft)
        self.directories: dict[int, tuple[uuid.UUID | None, float]] = {}
        """Per replica id, the directory id of the last Fetch or FetchSnapshot this node served it as
        leader, and when (monotonic): the process that holds the id while it fetched within
        controller.quorum.fetch.timeout.ms."""
        self._probed_epoch = -1
        """The last epoch an answer said this node's id leads (`another_leads_as_this_node`)."""
        self._refusals_logged: set[tuple[int, uuid.UUID | None]] = set()

    def live_holder(self, replica_id: int, directory_id: uuid.UUID | None) -> uuid.UUID | None:
        """The directory id of another live process holding `replica_id`, when a request sent with
        `directory_id` claims that id: this node's own, or the one it last served as leader if that was
        within the fetch timeout. None when there is none, or either directory id is unknown (Kafka's
        replica key without one matches any)."""
        directory_id = known_directory(directory_id)
        if directory_id is None or replica_id < 0:
            return None
        if replica_id == self.raft.node_id:
            holder, seen = self.raft.directory_id, time.monotonic()
        else:
            holder, seen = self.directories.get(replica_id, (None, 0.0))
        if holder is None or holder == directory_id:
            return None
        if time.monotonic() - seen > self.raft.config.fetch_timeout_ms / 1000:
            return None
        return holder

    def serves_replica(self, what: str, replica_id: int, directory_id: uuid.UUID | None) -> bool:
        """The leader takes a Fetch or FetchSnapshot from `replica_id`, noting its directory id and the
        time, or refuses it: from this node's own id (a leader never fetches from itself; Kafka's
        LeaderState throws), or from an id another live directory holds."""
        if replica_id == self.raft.node_id:
            self.log_taken(what, replica_id, directory_id, self.raft.directory_id)
            return False
        holder = self.live_holder(replica_id, directory_id)
        if holder is not None:
            self.log_taken(what, replica_id, directory_id, holder)
            return False
        if replica_id >= 0:
            self.directories[replica_id] = (known_directory(directory_id), time.monotonic())
        return True

    def log_taken(
        self, what: str, replica_id: int, directory_id: uuid.UUID | None, holder: uuid.UUID | None
    ) -> None:
        """A WARNING the first time a process is refused, DEBUG for its retries (a stock Kafka node
        retries for ever)."""
        key = (replica_id, known_directory(directory_id))
        level = logging.DEBUG if key in self._refusals_logged else logging.WARNING
        self._refusals_logged.add(key)
        log.log(
            level,
            "raft: refused a %s from node %d with directory id %s: %s node %d, with directory id %s; is "
            "node.id %d configured twice?",
            what,
            replica_id,
            directory_text(directory_id),
            "this node is" if replica_id == self.raft.node_id else "a live process is",
            replica_id,
            directory_text(holder),
            replica_id,
        )

    async def another_leads_as_this_node(self, leader_id: int, epoch: int) -> bool:
        """An answer names this node's id the leader of `epoch`, an epoch this process does not lead
        (Kafka's QuorumState throws rather than follow itself). Ask that leader, at the address the
        voters reach it by, with a Fetch as this replica: another live process with this id refuses it,
        and this node stops before it moves to that epoch (True). Once per epoch; an unreachable node,
        or this very one (its earlier incarnation led, and a voter still remembers it), changes
        nothing."""
        if (
            leader_id != self.raft.node_id
            or epoch < self.raft.epoch
            or epoch > MAX_EPOCH
            or epoch == self._probed_epoch
            or self.raft.leads(epoch)
        ):
            return False
        self._probed_epoch = epoch
        log.info(
            "raft: a voter names node %d the leader of epoch %d, which this node does not lead; asking it",
            self.raft.node_id,
            epoch,
        )
        await self.raft.send(
            self.raft.node_id, self.raft.fetch_replication.fetch_request(epoch, max_wait_ms=0)
        )
        return self.raft.fatal_error is not None

    async def stop_as_taken(self, node_id: int) -> None:
        """`node_id` refused this node's request: another live process holds this node.id. Its
        directory id comes from `node_id`'s DescribeQuorum (v2 gives each replica's); then stop with
        one sentence."""
        cls = request_type(DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION)
        request = single_partition(cls, {"partition_index": 0})
        timeout = self.raft.config.request_timeout_ms / 1000
        address = self.raft.address_of(node_id)
        answer = None
        if address is not None:
            answer = await self.raft.peers.send(node_id, address, request, timeout=timeout)
        partition = only_partition(answer) if answer is not None else None
        holder = None
        if (
            partition is not None
            and answer.error_code is ErrorCode.none
            and partition.error_code is ErrorCode.none
        ):
            for replica in (*partition.current_voters, *partition.observers):
                if replica.replica_id == self.raft.node_id:
                    holder = known_directory(replica.replica_directory_id) or holder
        own = directory_text(self.raft.directory_id)
        if holder is None:
            theirs = "another directory.id"
        elif holder == self.raft.directory_id:
            theirs = f"this node's own directory.id {own} (a copy of its log dir?)"
        else:
            theirs = f"directory.id {directory_text(holder)}"
        if node_id == self.raft.node_id:
            host, port = self.raft.address_of(node_id) or ("?", 0)
            who = f"the voter {node_id} at {host}:{port} is a live node {node_id} with {theirs}"
        else:
            who = f"node {node_id} has a live node {self.raft.node_id} with {theirs} fetching from it"
        meta = self.raft.log.directory.parent / "meta.properties"
        self.raft.fail_config(
            f"node.id {self.raft.node_id} is taken: {who}, and this node's directory.id is {own} ({meta}); "
            "stop that node, or give this one another node.id"
        )
