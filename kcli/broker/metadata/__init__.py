"""Cluster metadata: the `__cluster_metadata-0` log, the image folded from it, its controller and loader.

One code path for one node and many: topics and partitions are KRaft metadata records in a metadata
log; admin operations reach it only through the `QuorumController`, whose control managers turn them
into records; the `RaftClient` appends them and moves the committed offset (the log's high
watermark); the `MetadataLoader` folds committed batches into the broker's view
(`ClusterMetadataImage`) and publishes it to its `MetadataPublisher`s. Today the quorum has one voter.
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
from kcli.broker.metadata.metadata_log import MetadataLog, MetadataLogError, metadata_log_dir
from kcli.broker.metadata.publisher import MetadataPublisher
from kcli.broker.metadata.raft_client import RaftClient

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
    "RaftClient",
    "TopicChanges",
    "metadata_log_dir",
    "topic_changes",
]
