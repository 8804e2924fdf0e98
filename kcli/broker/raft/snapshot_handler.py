"""The Raft client's snapshots (KIP-630): loaded at start, written when asked, fetched from the leader,
served to followers, and the log cleaned below them (Kafka's KafkaRaftClient.createSnapshot,
handleFetchSnapshotRequest / Response, KafkaMetadataLog.maybeClean). The files are `snapshots`'.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from formats.errors import FormatError
from formats.kraft_snapshot import build_snapshot
from formats.records import ControlType, kraft_version_value, voters_value
from kcli.broker.raft.metadata_log import MAX_BATCH_BYTES, MetadataLogError
from kcli.broker.raft.raft_part import RaftPart
from kcli.broker.raft.raft_util import (
    FETCH_SNAPSHOT,
    FETCH_SNAPSHOT_VERSION,
    NO_THROTTLE,
    NODE_ID_TAKEN,
    SNAPSHOT_TOPIC,
    only_partition,
    single_partition,
    time_ms,
)
from kcli.broker.raft.snapshots import (
    SnapshotId,
    delete_snapshot,
    list_snapshots,
    read_snapshot_records,
    write_snapshot,
)
from kcli.protocol.messages import build, nested_type, request_type, response_type

log = logging.getLogger("kcli.broker.raft")


class SnapshotHandler(RaftPart):
    """One node's snapshots as its Raft client sees them."""

    def load_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Hand a snapshot's records to every listener (start-up, or one fetched from the leader)."""
        try:
            records = read_snapshot_records(self.raft.log.directory, snapshot_id)
        except (OSError, FormatError) as exc:
            raise MetadataLogError(
                f"cannot read snapshot {snapshot_id.file_name} in {self.raft.log.directory}: {str(exc).rstrip('.')}."
            ) from None
        if self.raft.dynamic:
            self.raft.history.clear()
            self.raft.load_kraft_records(snapshot_id)
            self.raft.voters_changed()
        log.info("raft: loading snapshot %s (%d records)", snapshot_id.file_name, len(records))
        for listener in self.raft.raft_listeners:
            listener.handle_load_snapshot(snapshot_id, records)

    async def write_snapshot(
        self, snapshot_id: SnapshotId, values: Sequence[bytes], *, last_contained_timestamp: int
    ) -> bool:
        """Write a snapshot of the committed state as of `snapshot_id` (Kafka's createSnapshot + freeze),
        then let retention drop the log below it. False when one as new exists already."""
        if self.raft.latest_snapshot is not None and snapshot_id <= self.raft.latest_snapshot:
            return False
        if snapshot_id.end_offset > self.raft.high_watermark:
            raise ValueError(f"snapshot {snapshot_id} is past the high watermark {self.raft.high_watermark}")
        kraft: list[tuple[ControlType, bytes]] = []
        voters = self.raft.history.voter_set_at(snapshot_id.end_offset - 1)
        if (
            self.raft.dynamic
            and voters is not None
            and self.raft.history.kraft_version_at(snapshot_id.end_offset - 1) >= 1
        ):
            # KafkaRaftClient.createSnapshot: the kraft.version and voter set as of the snapshot
            kraft = [
                (
                    ControlType.KRAFT_VERSION,
                    kraft_version_value(self.raft.history.kraft_version_at(snapshot_id.end_offset - 1)),
                ),
                (ControlType.KRAFT_VOTERS, voters_value(voters.to_records())),
            ]
        data = build_snapshot(
            values,
            timestamp=time_ms(),
            last_contained_log_timestamp=last_contained_timestamp,
            epoch=snapshot_id.epoch,
            kraft_records=kraft,
        )
        await asyncio.to_thread(write_snapshot, self.raft.log.directory, snapshot_id, data)
        if self.raft.latest_snapshot is None or snapshot_id > self.raft.latest_snapshot:
            self.raft.latest_snapshot = snapshot_id
        log.info(
            "raft: wrote snapshot %s (%d records, %d bytes)", snapshot_id.file_name, len(values), len(data)
        )
        self._clean_log()
        return True

    def _clean_log(self) -> None:
        """Kafka's KafkaMetadataLog.maybeClean: past metadata.max.retention.bytes or .ms, the log starts at
        the latest snapshot; segments wholly below it and the older snapshots go."""
        snapshot = self.raft.latest_snapshot
        partition_log = self.raft.log.log
        if snapshot is None or snapshot.end_offset <= partition_log.log_start_offset:
            return
        oldest = partition_log.segments[0]
        too_big = partition_log.size_bytes() > self.raft.config.retention_bytes
        too_old = time_ms() - oldest.largest_timestamp > self.raft.config.retention_ms
        if not (too_big or too_old):
            return
        new_start = min(snapshot.end_offset, self.raft.high_watermark)
        if partition_log.maybe_increment_log_start_offset(new_start):
            deleted = partition_log.enforce_retention(time_ms())
            log.info("raft: the metadata log now starts at %d (%d bytes deleted)", new_start, deleted)
        for older in list_snapshots(self.raft.log.directory):
            if older < snapshot:
                delete_snapshot(self.raft.log.directory, older)

    async def fetch_snapshot(self, leader_id: int, snapshot_id: SnapshotId) -> bool:
        """Download the leader's snapshot with FetchSnapshot, then install it: the log restarts at its end."""
        cls = request_type(FETCH_SNAPSHOT, FETCH_SNAPSHOT_VERSION)
        wanted = nested_type(cls, "SnapshotId")(end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch)
        data = bytearray()
        while True:
            partition = {
                "partition": 0,
                "current_leader_epoch": self.raft.epoch,
                "snapshot_id": wanted,
                "position": len(data),
                "replica_directory_id": self.raft.own_directory,
            }
            request = single_partition(
                cls,
                partition,
                **SNAPSHOT_TOPIC,
                cluster_id=self.raft.cluster_id,
                replica_id=self.raft.node_id,
                max_bytes=MAX_BATCH_BYTES,
            )
            response = await self.raft.send(
                leader_id, request, timeout=self.raft.config.request_timeout_ms / 1000
            )
            if response is None:
                return False
            partition = only_partition(response)
            if partition is None:
                return False
            error = (
                partition.error_code if partition.error_code is not ErrorCode.none else response.error_code
            )
            leader = partition.current_leader
            if (
                self.raft.handle_epoch_info(error, leader.leader_id, leader.leader_epoch)
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
        write_snapshot(self.raft.log.directory, snapshot_id, data)
        self.raft.log.log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self.raft.uncommitted.clear()
        self.raft.latest_snapshot = snapshot_id
        self.load_snapshot(snapshot_id)
        self.raft.high_watermark = self.raft.log.update_high_watermark(snapshot_id.end_offset)
        log.info("raft: installed snapshot %s from the leader", snapshot_id.file_name)

    def handle_fetch_snapshot(self, request: Any, version: int) -> Any:
        """The leader serves its snapshot file in pieces (FetchSnapshot, KIP-630)."""
        cls = response_type(FETCH_SNAPSHOT, version)
        id_cls, leader_cls = nested_type(cls, "SnapshotId"), nested_type(cls, "LeaderIdAndEpoch")
        error = self.raft.check_cluster_id(request.cluster_id)
        partition = only_partition(request)
        if error is not ErrorCode.none or partition is None:
            return build(
                cls, throttle_time=NO_THROTTLE, error_code=error or ErrorCode.invalid_request, topics=()
            )

        def answer(error: ErrorCode, *, size: int = 0, position: int = 0, chunk: bytes = b"") -> Any:
            wanted = partition.snapshot_id
            fields = {
                "index": 0,
                "error_code": error,
                "snapshot_id": id_cls(end_offset=wanted.end_offset, epoch=wanted.epoch),
                "current_leader": leader_cls(
                    leader_id=self.raft.quorum.leader_id, leader_epoch=self.raft.epoch
                ),
                "size": size,
                "position": position,
                "unaligned_records": chunk,
            }
            return single_partition(
                cls,
                fields,
                **SNAPSHOT_TOPIC,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none,
            )

        epoch_error = self.raft.check_fetch_epoch(partition.current_leader_epoch)
        if epoch_error is not ErrorCode.none:
            return answer(epoch_error)
        if not self.raft.live_replicas.serves_replica(
            "FetchSnapshot", request.replica_id, partition.replica_directory_id
        ):
            return build(cls, throttle_time=NO_THROTTLE, error_code=NODE_ID_TAKEN, topics=())
        snapshot_id = SnapshotId(partition.snapshot_id.end_offset, partition.snapshot_id.epoch)
        path = self.raft.log.directory / snapshot_id.file_name
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if partition.position < 0 or partition.position >= size:
                    return answer(ErrorCode.position_out_of_range, size=size)
                f.seek(partition.position)
                chunk = f.read(min(request.max_bytes, MAX_BATCH_BYTES))
        except FileNotFoundError:
            return answer(ErrorCode.snapshot_not_found)
        if self.raft.leader_state is not None:
            self.raft.leader_state.check_quorum_fetched.add(request.replica_id)
        return answer(ErrorCode.none, size=size, position=partition.position, chunk=chunk)
