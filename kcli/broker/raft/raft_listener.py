"""What the Raft client tells those who read the metadata log (Kafka's RaftClient.Listener and
LeaderAndEpoch): below the client, so its parts and its listeners need not name the client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from formats.internal import MetadataRecord
from kcli.broker.raft.metadata_log import LoggedBatch
from kcli.broker.raft.snapshots import SnapshotId


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
