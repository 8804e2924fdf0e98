"""DescribeProducers (key 61) and WriteTxnMarkers (key 27): the partition side of transactions.

DescribeProducers follows `KafkaApis.handleDescribeProducersRequest` and `UnifiedLog.activeProducers`:
every producer the partition's producer state holds, with its epoch, last sequence, last timestamp,
coordinator epoch and the first offset of its open transaction (-1 when none). Any replica answers
from its own log, a follower too (`Partition.activeProducerState`): `kafka-transactions.sh find-hanging
--broker-id N` asks broker N about every partition it hosts, and Kafka's Admin gives up on the whole
call at the first NOT_LEADER_OR_FOLLOWER when a broker id is set. `describe-producers` reads it too.

WriteTxnMarkers follows `KafkaApis.handleWriteTxnMarkersRequest`: a transaction coordinator on any
broker (and an operator's `abortTransaction`) asks the leader of each partition to append a COMMIT or
ABORT control batch for a producer, and is answered once the markers are committed (acks=-1, at most
request.timeout.ms). Per partition: UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not
have, NOT_LEADER_OR_FOLLOWER where this node does not lead it, the append's own error otherwise
(INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...). A marker written to a __consumer_offsets
partition settles the producer's pending transactional offset commits in this node's group
coordinator, as Kafka's `GroupCoordinator.onTransactionCompleted`. The writing itself is
`kcli.broker.txn.marker_channel.append_txn_markers`, which the coordinator's in-process path shares.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.log import Log
from kcli.broker.log.log import TxnMarker
from kcli.broker.txn.marker_channel import append_txn_markers
from kcli.protocol.messages import kio_versions, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger("kcli.broker")

DESCRIBE_PRODUCERS = 61
WRITE_TXN_MARKERS = 27
_NO_THROTTLE = datetime.timedelta(0)


async def handle_describe_producers(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(DESCRIBE_PRODUCERS, ctx.api_version)
    topic_cls = nested_type(response_cls, "TopicResponse")
    partition_cls = nested_type(response_cls, "PartitionResponse")
    state_cls = nested_type(response_cls, "ProducerState")
    topics = []
    for topic in request.topics:
        partitions = []
        readable = ctx.authorize(
            AclOperation.READ, ResourceType.TOPIC, topic.name
        )  # KafkaApis: READ the topic
        for index in topic.partition_indexes:
            error, partition_log = (
                _local_log(ctx, topic.name, index)
                if readable
                else (ErrorCode.topic_authorization_failed, None)
            )
            producers: tuple = ()
            if partition_log is not None:
                producers = tuple(
                    state_cls(
                        producer_id=entry.producer_id,
                        producer_epoch=entry.producer_epoch,
                        last_sequence=entry.last_seq,
                        last_timestamp=entry.last_timestamp,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=(
                            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
                        ),
                    )
                    for entry in list(partition_log.producer_state.producers.values())
                )
            partitions.append(
                partition_cls(
                    partition_index=index, error_code=error, error_message=None, active_producers=producers
                )
            )
        topics.append(topic_cls(name=topic.name, partitions=tuple(partitions)))
    return response_cls(throttle_time=_NO_THROTTLE, topics=tuple(topics))


async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> object:
    response_cls = response_type(WRITE_TXN_MARKERS, ctx.api_version)
    marker_cls = nested_type(response_cls, "WritableTxnMarkerResult")
    topic_cls = nested_type(response_cls, "WritableTxnMarkerTopicResult")
    partition_cls = nested_type(response_cls, "WritableTxnMarkerPartitionResult")
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        # KafkaApis: every partition of every marker is CLUSTER_AUTHORIZATION_FAILED
        return response_cls(
            markers=tuple(
                marker_cls(
                    producer_id=marker.producer_id,
                    topics=tuple(
                        topic_cls(
                            name=topic.name,
                            partitions=tuple(
                                partition_cls(
                                    partition_index=i, error_code=ErrorCode.cluster_authorization_failed
                                )
                                for i in topic.partition_indexes
                            ),
                        )
                        for topic in marker.topics
                    ),
                )
                for marker in request.markers
            )
        )
    groups = getattr(ctx.state.node, "groups", None)
    timeout = int(ctx.state.config["request.timeout.ms"]) / 1000  # type: ignore[call-overload]
    wanted = [
        (
            TxnMarker(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.transaction_result,
                getattr(marker, "transaction_version", 0),
            ),
            [(topic.name, index) for topic in marker.topics for index in topic.partition_indexes],
        )
        for marker in request.markers
    ]
    answers = await append_txn_markers(
        ctx.replicas,
        ctx.state.image,
        wanted,
        timeout=timeout,
        on_offsets_marker=None if groups is None else groups.on_transaction_completed,
    )
    results = []
    for marker, errors in zip(request.markers, answers, strict=True):
        topics = [
            topic_cls(
                name=topic.name,
                partitions=tuple(
                    partition_cls(partition_index=index, error_code=errors[(topic.name, index)])
                    for index in topic.partition_indexes
                ),
            )
            for topic in marker.topics
        ]
        results.append(marker_cls(producer_id=marker.producer_id, topics=tuple(topics)))
    return response_cls(markers=tuple(results))


def _local_log(ctx: RequestContext, topic: str, index: int) -> tuple[ErrorCode, Log | None]:
    """The log of this node's replica of the partition, leader or follower, else the error Kafka's
    getPartitionOrError gives: UNKNOWN_TOPIC_OR_PARTITION when the metadata lacks the partition,
    NOT_LEADER_OR_FOLLOWER when it is not hosted here."""
    if ctx.state.image.partition(topic, index) is None:
        return ErrorCode.unknown_topic_or_partition, None
    partition_log = ctx.replicas.log(topic, index)
    if partition_log is None:
        return ErrorCode.not_leader_or_follower, None
    return ErrorCode.none, partition_log


APIS = [
    ApiSpec(DESCRIBE_PRODUCERS, *kio_versions(DESCRIBE_PRODUCERS), handle_describe_producers),  # type: ignore[misc]
    ApiSpec(WRITE_TXN_MARKERS, *kio_versions(WRITE_TXN_MARKERS), handle_write_txn_markers),  # type: ignore[misc]
]
