"""MetadataLoader: folds committed metadata batches into the next image and publishes it.

As Kafka's MetadataLoader, it listens to the Raft client (kcli.broker.raft): each `handle_commit` (batches below the
high watermark, in log order) becomes one new `ClusterMetadataImage`, which every installed
`MetadataPublisher` receives in the order it was installed, a fixed order that the node states:
storage first (logs created or deleted, the replica manager), then the group and transaction
coordinators (which load from those logs), then the server's `BrokerState` (what request handlers
read). `image` is always the last image published, the broker's view of the cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kcli.broker.metadata.image import ClusterMetadataImage, fold, topic_changes
from kcli.broker.metadata.publisher import MetadataPublisher
from kcli.broker.raft import LeaderAndEpoch, LoggedBatch

log = logging.getLogger("kcli.broker.metadata")


class MetadataLoader:
    """The committed image and the publishers it is handed to."""

    def __init__(self, image: ClusterMetadataImage) -> None:
        """Start from `image`, the committed image start-up replayed from the metadata log."""
        self._image = image
        self._publishers: list[MetadataPublisher] = []
        self.leader = LeaderAndEpoch(-1, -1)

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
        changes = topic_changes(old, new)
        for publisher in self._publishers:
            publisher.on_metadata_update(changes, old, new)
