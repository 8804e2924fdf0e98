"""Cluster metadata: the `__cluster_metadata-0` log, the image folded from it, and its controller.

One code path for one node and many: topics and partitions are KRaft metadata records in a metadata
log; the broker's view (`ClusterMetadataImage`) is a fold over that log; admin operations reach it
only through the `QuorumController`, which turns them into records. Today the quorum has one voter.
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
from kcli.broker.metadata.metadata_log import MetadataLog, MetadataLogError, metadata_log_dir

__all__ = [
    "ApiError",
    "ClusterMetadataImage",
    "ConfigOp",
    "CreateTopicResult",
    "DeleteTopicResult",
    "MetadataDelta",
    "MetadataLog",
    "MetadataLogError",
    "NewTopic",
    "OpType",
    "PartitionRegistration",
    "QuorumController",
    "TopicChanges",
    "metadata_log_dir",
    "topic_changes",
]
