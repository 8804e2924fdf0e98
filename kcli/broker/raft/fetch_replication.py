"""Fetch replication of `__cluster_metadata-0`: a follower's Fetch loop and the leader's answers.

A follower (or observer) fetches from the leader's end of its log, truncates where the leader answers a
diverging epoch, fetches a snapshot when told to, appends and flushes what came, and takes the high
watermark the leader sends; the leader answers from its log, noting each replica's progress in its
LeaderState (which moves the high watermark), and parks an empty Fetch until an append or a new epoch
(Kafka's FollowerState and KafkaRaftClient.handleFetchRequest / handleFetchResponse).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from formats.records import ControlType, control_type, read_batch, read_leader_change
from formats.segment import StopReason, walk
from kcli.broker.log import LogStorageError, OffsetOutOfRange, RecordError
from kcli.broker.raft.metadata_log import (
    CLUSTER_METADATA_TOPIC_ID,
    MAX_BATCH_BYTES,
    MetadataLogError,
    logged_batch,
)
from kcli.broker.raft.quorum_state import RaftState
from kcli.broker.raft.raft_part import RaftPart
from kcli.broker.raft.raft_util import (
    FETCH,
    FETCH_MAX_WAIT_MS,
    FETCH_REQUEST_TOPIC,
    FETCH_RESPONSE_TOPIC,
    FETCH_VERSION,
    NO_THROTTLE,
    NODE_ID_TAKEN,
    only_partition,
    single_partition,
    time_ms,
)
from kcli.broker.raft.snapshots import SnapshotId
from kcli.protocol.messages import nested_type, request_type, response_type

log = logging.getLogger("kcli.broker.raft")


class FetchReplication(RaftPart):
    """Both sides of Fetch for one node's Raft client."""

    async def follow(self) -> None:
        """Fetch from the leader; a voter that hears nothing for fetch.timeout.ms asks for pre-votes."""
        epoch, leader_id = self.raft.epoch, self.raft.quorum.leader_id
        deadline = time.monotonic() + self.raft.config.fetch_timeout_ms / 1000
        self.raft.fetched_from_leader = False
        resigned = False
        while (
            self.raft.quorum.state is RaftState.FOLLOWER
            and self.raft.epoch == epoch
            and not self.raft.shutting_down
        ):
            override, self.raft.fetch_deadline_override = self.raft.fetch_deadline_override, None
            if override is not None and override[:2] == (epoch, leader_id):  # overrideFetchTimeout
                deadline, self.raft.election_deadline, resigned = override[2], 0.0, True
            if time.monotonic() >= max(deadline, self.raft.election_deadline):
                if resigned:
                    log.info("raft: leader %d resigned from epoch %d", leader_id, epoch)
                else:
                    log.info(
                        "raft: no answer from leader %d for %d ms",
                        leader_id,
                        self.raft.config.fetch_timeout_ms,
                    )
                if self.raft.quorum.is_voter:
                    self.raft.quorum.become_prospective()
                    self.raft.changed.set()
                else:  # an observer looks for the leader again among the voters
                    self.raft.quorum.become_unattached(self.raft.epoch)
                    self.raft.transitioned()
                return
            if await self.fetch_from(leader_id, max(deadline, self.raft.election_deadline)) and not resigned:
                deadline = time.monotonic() + self.raft.config.fetch_timeout_ms / 1000
                self.raft.election_deadline = 0.0
                self.raft.fetched_from_leader = True
                if (
                    self.raft.dynamic
                    and self.raft.quorum.is_voter
                    and self.raft.update_voter.update_voter_due()
                ):
                    asyncio.ensure_future(self.raft.update_voter.maybe_update_voter(leader_id))
            elif self.raft.quorum.state is RaftState.FOLLOWER and self.raft.epoch == epoch:
                left = max(deadline, self.raft.election_deadline) - time.monotonic()
                await self.raft.wait_changed(
                    min(self.raft.config.retry_backoff_ms / 1000 * 5, max(left, 0.0))
                )

    def fetch_request(self, epoch: int, max_wait_ms: int) -> Any:
        """Fetch v17 of `__cluster_metadata-0` from this node's log end, with its replica key."""
        end_offset, last_epoch = self.raft.last_offset_and_epoch()
        cls = request_type(FETCH, FETCH_VERSION)
        partition = {
            "partition": 0,
            "current_leader_epoch": epoch,
            "fetch_offset": end_offset,
            "last_fetched_epoch": last_epoch,
            "log_start_offset": -1,
            "partition_max_bytes": MAX_BATCH_BYTES,
            "replica_directory_id": self.raft.own_directory,
        }
        return single_partition(
            cls,
            partition,
            **FETCH_REQUEST_TOPIC,
            cluster_id=self.raft.cluster_id,
            replica_state=nested_type(cls, "ReplicaState")(replica_id=self.raft.node_id, replica_epoch=-1),
            max_wait=timedelta(milliseconds=max_wait_ms),
            min_bytes=0,
            max_bytes=MAX_BATCH_BYTES,
            forgotten_topics_data=(),
        )

    async def fetch_from(self, node_id: int, deadline: float | None = None) -> bool:
        """One Fetch round trip; True when the leader answered with data or an empty, valid fetch. The
        wait ends at the fetch deadline too (Kafka's fetch timer runs whatever is in flight): a leader
        that stopped answering is given up at fetch.timeout.ms, not at the request timeout after it."""
        request = self.fetch_request(self.raft.epoch, FETCH_MAX_WAIT_MS)
        timeout = (FETCH_MAX_WAIT_MS + self.raft.config.request_timeout_ms) / 1000
        if deadline is not None:
            timeout = min(timeout, max(deadline - time.monotonic(), 0.05))
        response = await self.raft.send(node_id, request, timeout=timeout)
        if response is None:
            return False
        if self.raft.dynamic:
            endpoints = getattr(response, "node_endpoints", ()) or ()
            self.raft.note_endpoints(endpoints)
            for endpoint in endpoints:  # the leader's own, in its answer to this epoch's Fetch
                if endpoint.node_id == node_id == self.raft.quorum.leader_id:
                    self.raft.announced[node_id] = (self.raft.epoch, (endpoint.host, endpoint.port))
        partition = only_partition(response, "responses")
        if partition is None:
            return False
        error = partition.error_code if partition.error_code is not ErrorCode.none else response.error_code
        leader = partition.current_leader
        if self.raft.handle_epoch_info(error, leader.leader_id, leader.leader_epoch):
            return False
        if error is not ErrorCode.none or self.raft.quorum.state is not RaftState.FOLLOWER:
            return False
        if self.raft.quorum.leader_id != node_id:
            return False
        if partition.diverging_epoch.epoch >= 0 or partition.diverging_epoch.end_offset >= 0:
            self._truncate_to_diverging(partition.diverging_epoch.epoch, partition.diverging_epoch.end_offset)
            return True
        if partition.snapshot_id.end_offset >= 0:
            snapshot_id = SnapshotId(partition.snapshot_id.end_offset, partition.snapshot_id.epoch)
            return await self.raft.snapshots.fetch_snapshot(node_id, snapshot_id)
        records = bytes(partition.records or b"")
        if records:
            await self._append_as_follower(records)
        self.raft.update_high_watermark(min(partition.high_watermark, self.raft.log.next_offset))
        # -1: the leader has not committed in its epoch yet, so what is committed is not known (Kafka's
        # follower keeps an empty high watermark then). Taken for caught up, a node restarting with
        # its peers would load a metadata image without the topics and set their logs aside as stray.
        if (
            not self.raft.caught_up.is_set()
            and partition.high_watermark >= 0
            and self.raft.log.next_offset >= partition.high_watermark
        ):
            self.raft.caught_up.set()
        return True

    def _check_leader_change(self, view: memoryview, batch: Any) -> None:
        """A leader's LeaderChange record names its voters; a voter with another list must not take part."""
        for record in batch.records(view):
            if control_type(record.key) is not ControlType.LEADER_CHANGE or record.value is None:
                continue
            leader_id, voters, _ = read_leader_change(record.value)
            if set(voters) != set(self.raft.voter_addresses):
                self.raft.fail_config(
                    f"leader {leader_id} counts voters {sorted(voters)}, controller.quorum.voters here "
                    f"{sorted(self.raft.voter_addresses)}: the voter lists of the nodes disagree"
                )

    def _truncate_to_diverging(self, epoch: int, end_offset: int) -> None:
        local_epoch, local_end = self.raft.log.log.end_offset_for_epoch(epoch)
        target = end_offset if local_end < 0 else min(end_offset, local_end)
        if epoch == 0:
            target = min(end_offset, self.raft.log.next_offset)
        if target < self.raft.high_watermark:
            log.error(
                "raft: refusing to truncate below the high watermark %d (to %d)",
                self.raft.high_watermark,
                target,
            )
            return
        if self.raft.log.log.truncate_to(target):
            log.warning("raft: truncated the metadata log to %d, diverging at epoch %d", target, epoch)
        while self.raft.uncommitted and self.raft.uncommitted[-1].base_offset >= target:
            self.raft.uncommitted.pop()
        if self.raft.dynamic and self.raft.history.truncate_new_entries(target):
            self.raft.voters_changed()

    async def _append_as_follower(self, records: bytes) -> None:
        try:
            self.raft.log.log.append_as_follower(records, now_ms=time_ms())
        except (OSError, LogStorageError, RecordError) as exc:
            raise MetadataLogError(f"cannot append fetched batches to the metadata log: {exc}") from None
        view = memoryview(records)
        result = walk(view, 0, len(view), check_crc=False)
        if result.reason is not StopReason.END:
            log.warning("raft: fetched records end in a partial batch")
        changed = False
        for batch in result.batches:
            header = read_batch(view, batch.position)
            if header.is_control and self.raft.quorum.is_voter and not self.raft.dynamic:
                self._check_leader_change(view, header)
            logged = logged_batch(self.raft.log.directory, view, header)
            self.raft.uncommitted.append(logged)
            if self.raft.dynamic and logged.kraft_records:
                changed = self.raft.history.apply(logged.kraft_records) or changed
        if changed:
            self.raft.voters_changed()
        if self.raft.quorum.is_voter:
            await asyncio.to_thread(self.raft.log.log.flush)

    async def handle_fetch(self, request: Any, version: int) -> Any:
        """A follower's or observer's Fetch of `__cluster_metadata-0`, parked up to MaxWaitMs when empty."""
        cls = response_type(FETCH, version)
        topic = request.topics[0] if len(request.topics) == 1 else None
        partition = topic.partitions[0] if topic is not None and len(topic.partitions) == 1 else None
        error = self.raft.check_cluster_id(request.cluster_id)
        if error is not ErrorCode.none:
            return cls(throttle_time=NO_THROTTLE, error_code=error, responses=(), node_endpoints=())
        if partition is None or topic.topic_id != CLUSTER_METADATA_TOPIC_ID:
            return cls(
                throttle_time=NO_THROTTLE,
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
        epoch_error = self.raft.check_fetch_epoch(partition.current_leader_epoch)
        if epoch_error is not ErrorCode.none:
            return self._fetch_response(cls, epoch_error)
        if not self.raft.live_replicas.serves_replica(
            "Fetch", replica_id, getattr(partition, "replica_directory_id", None)
        ):
            return cls(throttle_time=NO_THROTTLE, error_code=NODE_ID_TAKEN, responses=(), node_endpoints=())
        snapshot = self.raft.latest_snapshot
        if snapshot is not None and (
            partition.fetch_offset == 0
            or partition.fetch_offset < self.raft.log.log.log_start_offset
            or (
                partition.fetch_offset == self.raft.log.log.log_start_offset
                and self.raft.log.log.log_start_offset == snapshot.end_offset
                and partition.last_fetched_epoch != snapshot.epoch
            )
        ):
            return self._fetch_response(cls, ErrorCode.none, snapshot=snapshot)
        local_epoch, local_end = self.raft.log.log.end_offset_for_epoch(partition.last_fetched_epoch)
        if local_epoch < 0 and partition.last_fetched_epoch == 0 and partition.fetch_offset == 0:
            local_epoch, local_end = 0, 0
        if local_epoch != partition.last_fetched_epoch or local_end < partition.fetch_offset:
            if local_epoch < 0:
                local_epoch, local_end = partition.last_fetched_epoch, self.raft.log.next_offset
            return self._fetch_response(cls, ErrorCode.none, diverging=(local_epoch, local_end))
        state = self.raft.leader_state
        assert state is not None
        if state.update_replica(replica_id, partition.fetch_offset, time_ms(), self.raft.log.next_offset):
            self.raft.update_high_watermark(state.high_watermark)
        records = self._read(partition.fetch_offset, min(partition.partition_max_bytes, request.max_bytes))
        wait = request.max_wait.total_seconds()
        # A replica that has not been told the high watermark yet is answered at once (KIP-1166's rule,
        # kept here on the leader's side): parked, a follower would learn a commit only with the next
        # append or after the whole wait, and a broker its new leadership half a second late.
        progress = state.progress(replica_id)
        if progress is not None and progress.high_watermark_sent < self.raft.high_watermark:
            wait = 0
        if not records and wait > 0:
            appended = self.raft.appended
            try:
                await asyncio.wait_for(appended.wait(), wait)
            except TimeoutError:
                pass
            epoch_error = self.raft.check_fetch_epoch(partition.current_leader_epoch)
            if epoch_error is not ErrorCode.none:
                return self._fetch_response(cls, epoch_error)
            records = self._read(
                partition.fetch_offset, min(partition.partition_max_bytes, request.max_bytes)
            )
        if progress is not None:
            progress.high_watermark_sent = self.raft.high_watermark
        return self._fetch_response(cls, ErrorCode.none, records=records)

    def _read(self, offset: int, max_bytes: int) -> bytes:
        try:
            fetched = self.raft.log.log.read(
                offset, max_bytes, upper_bound=self.raft.log.next_offset, min_one_batch=True
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
        state = self.raft.leader_state
        partition: dict[str, Any] = {
            "partition_index": 0,
            "error_code": error,
            # A leader's high watermark is unknown (-1, as Kafka's LeaderState) until it commits in its
            # own epoch, whatever it had learned before as a follower or read from disk.
            "high_watermark": state.high_watermark if state is not None else max(self.raft.high_watermark, 0),
            "log_start_offset": self.raft.log.log.log_start_offset,
            "current_leader": nested_type(cls, "LeaderIdAndEpoch")(
                leader_id=self.raft.quorum.leader_id, leader_epoch=self.raft.epoch
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
        return single_partition(
            cls,
            partition,
            **FETCH_RESPONSE_TOPIC,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            node_endpoints=self.raft.leader_node_endpoints(cls),
        )
