"""The controller, split as Kafka splits it: a thin QuorumController over one control manager per concept.

- `quorum_controller`: runs an operation (ask the manager, then commit its records) — QuorumController
- `cluster_control_manager`: broker registration, fencing, listeners, broker epochs
- `topic_control_manager`: which topics and partitions exist and where replicas go; CreateTopics,
  DeleteTopics, CreatePartitions, replica placement (Kafka does these in ReplicationControlManager)
- `replication_control_manager`: changes to existing partitions; AlterPartition, ElectLeaders,
  reassignments, elections on broker state changes, preferred-leader and unclean election passes
- `partition_reassignment`: a reassignment's replica sets (PartitionReassignmentReplicas, ...Revert)
- `partition_change_builder`: the PartitionChangeRecord for a partition's new leader, ISR, assignment
- `configuration_control_manager`: topic config overrides; IncrementalAlterConfigs, AlterConfigs
- `producer_id_control_manager`: AllocateProducerIds blocks
- `feature_control_manager`: metadata.version
- `scram_control_manager`: SCRAM credentials; AlterUserScramCredentials
- `client_quota_control_manager`: client quotas; AlterClientQuotas
- `controller_result`: what a manager returns (records + response) and Kafka's ApiError
- `topic`: the topic name rules
"""

from kcli.broker.metadata.controller.cluster_control_manager import (
    BrokerHeartbeat,
    ClusterControlManager,
    HeartbeatReply,
)
from kcli.broker.metadata.controller.configuration_control_manager import (
    ConfigOp,
    ConfigurationControlManager,
    OpType,
)
from kcli.broker.metadata.controller.controller_result import (
    ApiError,
    ApiException,
    ControllerResult,
)
from kcli.broker.metadata.controller.feature_control_manager import FeatureControlManager
from kcli.broker.metadata.controller.producer_id_control_manager import ProducerIdControlManager
from kcli.broker.metadata.controller.quorum_controller import NotControllerError, QuorumController
from kcli.broker.metadata.controller.replication_control_manager import ReplicationControlManager
from kcli.broker.metadata.controller.topic import topic_name_error
from kcli.broker.metadata.controller.topic_control_manager import (
    MAX_RECORDS_PER_USER_OP,
    CreateTopicResult,
    DeleteTopicResult,
    NewTopic,
    TopicControlManager,
)

__all__ = [
    "MAX_RECORDS_PER_USER_OP",
    "ApiError",
    "ApiException",
    "BrokerHeartbeat",
    "ClusterControlManager",
    "ConfigOp",
    "ConfigurationControlManager",
    "ControllerResult",
    "CreateTopicResult",
    "DeleteTopicResult",
    "FeatureControlManager",
    "HeartbeatReply",
    "NewTopic",
    "NotControllerError",
    "OpType",
    "ProducerIdControlManager",
    "QuorumController",
    "ReplicationControlManager",
    "TopicControlManager",
    "topic_name_error",
]
