"""AssignReplicasToDirs (73) on the controller: a broker says which of its log dirs holds a replica.

KIP-858, as Kafka's ReplicationControlManager.handleAssignReplicasToDirs: from metadata.version
3.7-IV2 on, each partition record carries one directory id per replica. A broker with several log dirs
tells the controller where it placed a new replica (the controller wrote UNASSIGNED) and where a replica
moved to (AlterReplicaLogDirs); the controller writes a PartitionChangeRecord with the new directory.

Per partition, as Kafka: UNKNOWN_TOPIC_ID for a topic the controller does not know,
UNKNOWN_TOPIC_OR_PARTITION for a missing partition, NOT_LEADER_OR_FOLLOWER when the broker is not one
of its replicas. A stale broker epoch fails the whole request (STALE_BROKER_EPOCH), as does an unknown
broker (BROKER_ID_NOT_REGISTERED) or a metadata.version without directories (UNSUPPORTED_VERSION).
kcli brokers never report a log dir offline, so the leader and ISR updates Kafka makes for an
assignment to an offline dir do not arise.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import ApiException, ControllerResult, Record
from kcli.broker.metadata.controller.partition_change_builder import MV_3_7_IV2
from kcli.broker.metadata.image import MV_3_9_IV0, ClusterMetadataImage
from kcli.protocol.messages import build, nested_type, response_type

if TYPE_CHECKING:
    from kcli.broker.metadata.controller.replication_control_manager import ReplicationControlManager

log = logging.getLogger("kcli.broker.metadata")

ASSIGN_REPLICAS_TO_DIRS = 73
_NO_THROTTLE = datetime.timedelta(0)


def assign_replicas_to_dirs(
    replication: ReplicationControlManager, image: ClusterMetadataImage, request: Any
) -> ControllerResult[Any]:
    """The PartitionChangeRecords that set each named replica's directory, and the response."""
    response_cls = response_type(ASSIGN_REPLICAS_TO_DIRS, request.__version__)
    dir_cls = nested_type(response_cls, "DirectoryData")
    topic_cls = nested_type(response_cls, "TopicData")
    partition_cls = nested_type(response_cls, "PartitionData")
    broker_id = request.broker_id
    try:
        if (image.metadata_version or MV_3_9_IV0) < MV_3_7_IV2:
            raise ApiException(ErrorCode.unsupported_version, "Directory assignment is not supported yet.")
        replication.cluster_control.check_broker_epoch(image, broker_id, request.broker_epoch)
    except ApiException as exc:
        return ControllerResult(
            [], build(response_cls, throttle_time=_NO_THROTTLE, error_code=exc.error.code, directories=())
        )
    records: list[Record] = []
    directories = []
    for directory in request.directories:
        topics = []
        for topic_data in directory.topics:
            topic = image.topics_by_id.get(topic_data.topic_id)
            partitions = []
            for partition_data in topic_data.partitions:
                index = partition_data.partition_index
                error = ErrorCode.none
                registration = None if topic is None else topic.partitions.get(index)
                if topic is None:
                    log.warning(
                        "AssignReplicasToDirsRequest from broker %d references unknown topic ID %s",
                        broker_id,
                        topic_data.topic_id,
                    )
                    error = ErrorCode.unknown_topic_id
                elif registration is None:
                    error = ErrorCode.unknown_topic_or_partition
                elif broker_id not in registration.replicas:
                    error = ErrorCode.not_leader_or_follower
                else:
                    builder = replication._builder(image, registration, topic.topic_id, index)
                    builder.target_directories[broker_id] = directory.id_
                    record = builder.build()
                    if record is not None:
                        records.append(record)
                    log.info(
                        "broker %d assigned partition %s-%d to dir %s",
                        broker_id,
                        topic.name,
                        index,
                        directory.id_,
                    )
                partitions.append(partition_cls(partition_index=index, error_code=error))
            topics.append(topic_cls(topic_id=topic_data.topic_id, partitions=tuple(partitions)))
        directories.append(dir_cls(id_=directory.id_, topics=tuple(topics)))
    return ControllerResult(
        records,
        build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.none,
            directories=tuple(directories),
        ),
    )
