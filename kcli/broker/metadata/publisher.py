"""MetadataPublisher: a part of the broker that acts on each committed metadata image.

Kafka's MetadataLoader hands every publisher (the replica manager's BrokerMetadataPublisher, the
metadata cache, the coordinators) the delta and the new image; nothing reads the controller. Here
the delta is `TopicChanges` (partitions created, topics deleted, topics reconfigured), computed once
per image for all publishers, with the image before and the image after.
"""

from __future__ import annotations

from typing import Protocol

from kcli.broker.metadata.image import ClusterMetadataImage, TopicChanges


class MetadataPublisher(Protocol):
    """Installed on the MetadataLoader; told about every committed image, in installation order."""

    @property
    def name(self) -> str:
        """Who this is, for logs and for the stated publishing order."""
        ...

    def on_metadata_update(
        self, changes: TopicChanges, old: ClusterMetadataImage, new: ClusterMetadataImage
    ) -> None:
        """Act on `new`; `changes` are the topic changes from `old` to `new`."""
        ...
