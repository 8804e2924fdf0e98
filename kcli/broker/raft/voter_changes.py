"""Voter changes (KIP-853) on the leader, as Kafka's internals AddVoterHandler, RemoveVoterHandler and
UpdateVoterHandler: each checks the request, writes a Voters record with the new set (which counts
at once) and answers, Add and Remove once that record is committed. UpdateVoterHandler also holds a
voter's own side: it announces its endpoints to the leader when its entry differs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.raft.raft_part import RaftClientState, RaftPart
from kcli.broker.raft.raft_util import (
    ADD_RAFT_VOTER,
    ADD_VOTER_CAUGHT_UP_MS,
    API_VERSIONS,
    NO_THROTTLE,
    REMOVE_RAFT_VOTER,
    UPDATE_RAFT_VOTER,
    NotLeaderError,
    endpoints_text,
    known_directory,
    time_ms,
)
from kcli.protocol.messages import build, nested_type, request_type, response_type
from kcli.voters import VoterNode

log = logging.getLogger("kcli.broker.raft")


class VoterChangeHandler(RaftPart):
    """What every voter change checks first on the leader, and its wait for the commit."""

    def _voter_change_refusal(self, what: str) -> tuple[ErrorCode, str | None] | None:
        """The checks every voter change passes first on the leader (Kafka's Add/Remove/UpdateVoterHandler,
        in their order); None when it may go on."""
        error = self.raft.check_fetch_epoch(self.raft.epoch)
        if error is not ErrorCode.none:
            return error, None
        state = self.raft.leader_state
        if self.raft.voter_change is not None:
            return ErrorCode.request_timed_out, (
                "Request timed out waiting for leader to handle previous voter change request"
            )
        if state is None or state.high_watermark < 0:
            return ErrorCode.request_timed_out, (
                "Request timed out waiting for leader to establish HWM and fence previous voter changes"
            )
        if self.raft.kraft_version < 1:
            return ErrorCode.unsupported_version, (
                f"Cluster doesn't support {what} voter because the kraft.version feature is {self.raft.kraft_version}"
            )
        entry = self.raft.history.last_entry()
        if entry is None or entry[0] >= self.raft.high_watermark:
            return ErrorCode.request_timed_out, (
                "Request timed out waiting for voters to commit the latest voter change at "
                f"{f'Optional[{entry[0]}]' if entry else 'Optional.empty'} with HWM {self.raft.high_watermark}"
            )
        return None

    def _cluster_id_refusal(self, cluster_id: str | None) -> str | None:
        if self.raft.check_cluster_id(cluster_id) is ErrorCode.none:
            return None
        return f'The given id "{cluster_id}" doesn\'t match the cluster id "{self.raft.cluster_id}"'

    async def _wait_voter_change(self, offset: int, timeout: float) -> tuple[ErrorCode, str | None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.raft.voter_change = (offset, future)
        if self.raft.high_watermark > offset:  # a quorum of one commits on its own flush
            self.raft.voter_change = None
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

    @staticmethod
    def _answer(cls: type, error: ErrorCode, message: str | None = None) -> Any:
        """AddRaftVoter's or RemoveRaftVoter's answer: an error code and its message."""
        return build(cls, throttle_time=NO_THROTTLE, error_code=error, error_message=message)

    def _voter_request(self, request: Any, epoch: int, kind: str) -> uuid.UUID | tuple[ErrorCode, str | None]:
        """What Add/Remove/UpdateRaftVoter check first, in Kafka's order: the cluster id, this node
        leading in `epoch`, a voter named by id and directory id. The voter's directory id, or the
        error and message to answer with."""
        message = self._cluster_id_refusal(request.cluster_id)
        if message is not None:
            return ErrorCode.inconsistent_cluster_id, message
        error = self.raft.check_fetch_epoch(epoch)
        if error is not ErrorCode.none:
            return error, None
        directory_id = known_directory(request.voter_directory_id)
        if request.voter_id < 0 or directory_id is None:
            return ErrorCode.invalid_request, f"{kind} voter request didn't include a valid voter"
        return directory_id


class AddVoterHandler(VoterChangeHandler):
    """AddRaftVoter: an observer that has caught up joins the voters."""

    async def handle(self, request: Any, version: int) -> Any:
        """AddRaftVoter (80) on the leader: the new voter (an observer that has caught up) joins the
        latest committed voter set in a new Voters record; answered once that is committed."""
        answer = functools.partial(self._answer, response_type(ADD_RAFT_VOTER, version))
        checked = self._voter_request(request, self.raft.epoch, "Add")
        if isinstance(checked, tuple):
            return answer(*checked)
        directory_id = checked
        listeners = {item.name: (item.host, item.port) for item in request.listeners}
        address = listeners.get(self.raft.listener_name)
        if address is None:
            return answer(
                ErrorCode.invalid_request,
                f"Add voter request didn't include the endpoint ({endpoints_text(listeners)}) for the default "
                f"listener {self.raft.listener_name}",
            )
        refusal = self._voter_change_refusal("adding")
        if refusal is not None:
            return answer(*refusal)
        entry = self.raft.history.last_entry()
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
        if not low <= self.raft.kraft_version <= high:
            return answer(
                ErrorCode.invalid_request,
                f"Aborted add voter operation for {key} since the kraft.version range (min: {low}, max: "
                f"{high} doesn't support the finalized version {self.raft.kraft_version}",
            )
        if not self._caught_up_observer(request.voter_id, directory_id):
            log.info("raft: not adding voter %s: it is lagging behind", key)
            return answer(
                ErrorCode.request_timed_out,
                f"Aborted add voter operation for {key} since it is lagging behind",
            )
        added = voters.add_voter(VoterNode(request.voter_id, directory_id, listeners, low, high))
        assert added is not None
        offset = self.raft.append_voters(added, now_ms=time_ms())
        log.info("raft: adding voter %s at offset %d", key, offset)
        if not getattr(request, "ack_when_committed", True):
            self.raft.voter_change = (offset, asyncio.get_running_loop().create_future())
            return answer(ErrorCode.none)
        timeout = request.timeout.total_seconds() if request.timeout.total_seconds() > 0 else 30.0
        return answer(*await self._wait_voter_change(offset, timeout))

    async def _kraft_version_range(self, node_id: int, address: tuple[str, int]) -> tuple[int, int] | None:
        """ApiVersions to a would-be voter: the kraft.version range it supports ((0, 0) when it names
        none), None when it cannot be reached. v4: below it a feature whose minimum is 0 is left out
        (KAFKA-17492), and kraft.version's minimum is 0."""
        cls = request_type(API_VERSIONS, 4)
        request = build(cls, client_software_name="kcli", client_software_version="1")
        timeout = self.raft.config.request_timeout_ms / 1000
        response = await self.raft.peers.send(-1000 - node_id, address, request, timeout=timeout)
        if response is None or response.error_code is not ErrorCode.none:
            return None
        for feature in getattr(response, "supported_features", ()) or ():
            if feature.name == "kraft.version":
                return feature.min_version, feature.max_version
        return 0, 0

    def _caught_up_observer(self, node_id: int, directory_id: uuid.UUID) -> bool:
        """LeaderState.isReplicaCaughtUp: an observer with that replica key that has caught up once and
        fetched within the last hour."""
        state = self.raft.leader_state
        progress = state.observers.get(node_id) if state is not None else None
        fetched_as = self.raft.live_replicas.directories.get(node_id, (None,))[0]
        if progress is None or fetched_as not in (None, directory_id):
            return False
        return (
            progress.last_caught_up_ms > 0
            and progress.last_fetch_ms > 0
            and progress.last_fetch_ms > time_ms() - ADD_VOTER_CAUGHT_UP_MS
        )


class RemoveVoterHandler(VoterChangeHandler):
    """RemoveRaftVoter: a replica key leaves the voters."""

    async def handle(self, request: Any, version: int) -> Any:
        """RemoveRaftVoter (81) on the leader: a Voters record without that replica key; a leader that
        removed itself resigns once it is committed."""
        answer = functools.partial(self._answer, response_type(REMOVE_RAFT_VOTER, version))
        checked = self._voter_request(request, self.raft.epoch, "Remove")
        if isinstance(checked, tuple):
            return answer(*checked)
        directory_id = checked
        refusal = self._voter_change_refusal("removing")
        if refusal is not None:
            return answer(*refusal)
        entry = self.raft.history.last_entry()
        assert entry is not None
        removed = entry[1].remove_voter(request.voter_id, directory_id)
        key = VoterNode(request.voter_id, directory_id).key_text
        if removed is None:
            return answer(
                ErrorCode.voter_not_found,
                f"Cannot remove voter {key} from the set of voters {entry[1].key_texts()}",
            )
        offset = self.raft.append_voters(removed, now_ms=time_ms())
        log.info("raft: removing voter %s at offset %d", key, offset)
        return answer(*await self._wait_voter_change(offset, self.raft.config.request_timeout_ms / 1000))


class UpdateVoterHandler(VoterChangeHandler):
    """UpdateRaftVoter: a voter's new endpoints and kraft.version range, on both sides."""

    def __init__(self, raft: RaftClientState) -> None:
        super().__init__(raft)
        self._voter_update: tuple[int, float] = (-1, 0.0)
        """(epoch, monotonic time) of this voter's last UpdateRaftVoter; see `update_voter_due`."""

    async def handle(self, request: Any, version: int) -> Any:
        """UpdateRaftVoter (82) on the leader: a voter's new endpoints and kraft.version range."""
        cls = response_type(UPDATE_RAFT_VOTER, version)
        leader_cls = nested_type(cls, "CurrentLeader")

        def answer(error: ErrorCode) -> Any:
            address = self.raft.local_address() if self.raft.quorum.is_leader else None
            leader = leader_cls(
                leader_id=self.raft.quorum.leader_id,
                leader_epoch=self.raft.epoch,
                host=address[0] if address else "",
                port=address[1] if address else -1,
            )
            return build(cls, throttle_time=NO_THROTTLE, error_code=error, current_leader=leader)

        checked = self._voter_request(request, request.current_leader_epoch, "Update")
        if isinstance(checked, tuple):
            return answer(checked[0])  # UpdateRaftVoter's answer carries no message
        directory_id = checked
        refusal = self._voter_change_refusal("updating")
        if refusal is not None:
            return answer(refusal[0])
        feature = request.k_raft_version_feature
        if not feature.min_supported_version <= self.raft.kraft_version <= feature.max_supported_version:
            return answer(ErrorCode.invalid_request)
        listeners = {item.name: (item.host, item.port) for item in request.listeners}
        if self.raft.listener_name not in listeners:
            return answer(ErrorCode.invalid_request)
        entry = self.raft.history.last_entry()
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
            self.raft.append_voters(updated, now_ms=time_ms())
            log.info("raft: updated voter %s: %s", node.key_text, endpoints_text(listeners))
        return answer(ErrorCode.none)

    def update_voter_due(self) -> bool:
        """Whether this voter may send UpdateRaftVoter now: first in an epoch once it has fetched from
        the leader (Kafka waits an update period first), then again every 3 fetch timeouts while its
        entry still differs (FollowerState.updateVoterPeriodMs; the leader may have refused it, with a
        voter change in flight, or the answer was lost)."""
        epoch, sent = self._voter_update
        period = 3 * self.raft.config.fetch_timeout_ms / 1000
        return epoch != self.raft.epoch or time.monotonic() - sent >= period

    async def maybe_update_voter(self, leader_id: int) -> None:
        """Kafka 4's voters announce their own endpoints: a voter whose entry in the voter set differs
        from its listeners sends UpdateRaftVoter to the leader (KafkaRaftClient.pollFollowerAsVoter,
        VoterSet.voterNodeNeedsUpdate)."""
        voters = self.raft.history.last_voter_set()
        own = voters.voters.get(self.raft.node_id) if voters is not None else None
        if (
            not self.raft.dynamic
            or self.raft.kraft_version < 1
            or own is None
            or own.directory_id != self.raft.directory_id
            or not self.raft.local_listeners
            or dict(own.listeners) == self.raft.local_listeners
            or not self.update_voter_due()
        ):
            return
        self._voter_update = (self.raft.epoch, time.monotonic())
        cls = request_type(UPDATE_RAFT_VOTER, 0)
        listener_cls, feature_cls = nested_type(cls, "Listener"), nested_type(cls, "KRaftVersionFeature")
        request = build(
            cls,
            cluster_id=self.raft.cluster_id,
            current_leader_epoch=self.raft.epoch,
            voter_id=self.raft.node_id,
            voter_directory_id=self.raft.own_directory,
            listeners=tuple(
                listener_cls(name=n, host=h, port=p) for n, (h, p) in self.raft.local_listeners.items()
            ),
            k_raft_version_feature=feature_cls(min_supported_version=0, max_supported_version=1),
        )
        response = await self.raft.send(leader_id, request)
        if response is not None:
            log.info("raft: UpdateRaftVoter to leader %d: %s", leader_id, response.error_code.name)
