"""MetadataLoader: folds committed metadata batches into the next image and publishes it.

As Kafka's MetadataLoader, it listens to the Raft client (kcli.broker.raft): each `handle_commit` (batches below the
high watermark, in log order) becomes one new `ClusterMetadataImage`, which every installed
`MetadataPublisher` receives in the order it was installed, a fixed order that the node states:
storage first (logs created or deleted, the replica manager), then the group and transaction
coordinators (which load from those logs), then the server's `BrokerState` (what request handlers
read). `image` is always the last image published, the broker's view of the cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence

from formats.internal import MetadataRecord, encode_metadata_record
from kcli.broker.metadata.image import ClusterMetadataImage, fold, topic_changes
from kcli.broker.metadata.image_writer import image_records
from kcli.broker.metadata.publisher import MetadataPublisher
from kcli.broker.raft import KafkaRaftClient, LeaderAndEpoch, LoggedBatch
from kcli.broker.raft.snapshots import SnapshotId

log = logging.getLogger("kcli.broker.metadata")


class MetadataLoader:
    """The committed image and the publishers it is handed to; snapshots of it when they are due.

    As Kafka's SnapshotGenerator (part of the loader), a snapshot of the image is written once the
    batches committed since the last one reach `max_bytes_between_snapshots`
    (metadata.log.max.record.bytes.between.snapshots) or `max_snapshot_interval_ms` has passed, one at
    a time, by the Raft client that owns the files.
    """

    def __init__(
        self,
        image: ClusterMetadataImage,
        *,
        raft: KafkaRaftClient | None = None,
        max_bytes_between_snapshots: int = 20 * 1024 * 1024,
        max_snapshot_interval_ms: int = 3600 * 1000,
    ) -> None:
        """Start from `image` (empty at start-up: the Raft client delivers the committed batches)."""
        self._image = image
        self._publishers: list[MetadataPublisher] = []
        self.leader = LeaderAndEpoch(-1, -1)
        self._raft = raft
        self._max_bytes = max_bytes_between_snapshots
        self._max_interval_ms = max_snapshot_interval_ms
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = int(time.time() * 1000)
        self._last_committed: tuple[int, int, int] | None = None  # (last offset, epoch, append time)
        self._snapshotting: asyncio.Task[None] | None = None

    @property
    def image(self) -> ClusterMetadataImage:
        """The last committed image, as published."""
        return self._image

    @property
    def publishers(self) -> tuple[MetadataPublisher, ...]:
        """The publishers, in the order each image reaches them."""
        return tuple(self._publishers)

    def install_publisher(self, publisher: MetadataPublisher) -> None:
        """Publish every later image to `publisher`, after the publishers installed before it."""
        self._publishers.append(publisher)
        log.debug("metadata publisher %d: %s", len(self._publishers), publisher.name)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """The quorum's leader (the active controller), for DescribeCluster and forwarding."""
        self.leader = leader

    def handle_commit(self, batches: Sequence[LoggedBatch]) -> None:
        """Fold newly committed batches into the next image, then publish it (the RaftClient listener)."""
        old = self._image
        self._image = new = fold(old, [record for batch in batches for record in batch.records])
        self._publish(old, new)
        last = batches[-1]
        self._last_committed = (last.last_offset, last.leader_epoch, last.append_time_ms)
        self._bytes_since_snapshot += sum(batch.size for batch in batches)
        self._maybe_snapshot()

    def handle_load_snapshot(self, snapshot_id: SnapshotId, records: Sequence[MetadataRecord]) -> None:
        """A snapshot replaces the image whole (start-up, or a follower that fell behind the leader's log)."""
        old = self._image
        empty = ClusterMetadataImage.empty(old.cluster_id, old.controller_id, old.listener_name)
        new = dataclasses.replace(fold(empty, records), offset=snapshot_id.end_offset - 1)
        self._image = new
        self._last_committed = None
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = int(time.time() * 1000)
        self._publish(old, new)

    def _publish(self, old: ClusterMetadataImage, new: ClusterMetadataImage) -> None:
        changes = topic_changes(old, new)
        for publisher in self._publishers:
            publisher.on_metadata_update(changes, old, new)

    def _maybe_snapshot(self) -> None:
        if self._raft is None or self._last_committed is None:
            return
        if self._snapshotting is not None and not self._snapshotting.done():
            return
        elapsed = int(time.time() * 1000) - self._last_snapshot_ms
        if self._bytes_since_snapshot < self._max_bytes and not (0 < self._max_interval_ms <= elapsed):
            return
        last_offset, epoch, append_time = self._last_committed
        snapshot_id = SnapshotId(last_offset + 1, epoch)
        values = [
            encode_metadata_record(name, version, data) for name, version, data in image_records(self._image)
        ]
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = int(time.time() * 1000)
        self._snapshotting = asyncio.ensure_future(self._write_snapshot(snapshot_id, values, append_time))

    async def _write_snapshot(self, snapshot_id: SnapshotId, values: list[bytes], append_time: int) -> None:
        assert self._raft is not None
        try:
            await self._raft.write_snapshot(snapshot_id, values, last_contained_timestamp=append_time)
        except (OSError, ValueError) as exc:
            log.error("cannot write metadata snapshot %s: %s", snapshot_id.file_name, exc)
