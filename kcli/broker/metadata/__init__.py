"""Cluster metadata: the `__cluster_metadata-0` log, the image folded from it, its controller and loader.

One code path for one node and many: topics and partitions are KRaft metadata records in a metadata
log; admin operations reach it only through the `QuorumController`, whose control managers turn them
into records; the Raft client (`kcli.broker.raft`) replicates them and moves the committed offset (the
quorum's high watermark); the `MetadataLoader` folds committed batches into the broker's view
(`ClusterMetadataImage`) and publishes it to its `MetadataPublisher`s.
"""

from kcli.broker.metadata.controller import (
    ApiError,
    ConfigOp,
    CreateTopicResult,
    DeleteTopicResult,
    NewTopic,
    OpType,
    QuorumController,
)
from kcli.broker.metadata.image import (
    ClusterMetadataImage,
    MetadataDelta,
    PartitionRegistration,
    TopicChanges,
    topic_changes,
)
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.metadata.publisher import MetadataPublisher
from kcli.broker.raft.metadata_log import MetadataLog, MetadataLogError, metadata_log_dir

__all__ = [
    "ApiError",
    "ClusterMetadataImage",
    "ConfigOp",
    "CreateTopicResult",
    "DeleteTopicResult",
    "MetadataDelta",
    "MetadataLoader",
    "MetadataLog",
    "MetadataLogError",
    "MetadataPublisher",
    "NewTopic",
    "OpType",
    "PartitionRegistration",
    "QuorumController",
    "TopicChanges",
    "metadata_log_dir",
    "topic_changes",
]
