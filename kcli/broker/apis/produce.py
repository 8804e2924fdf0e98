"""Produce (key 0): validate each partition's record batch, append it as leader, answer per partition.

Follows Kafka's `KafkaApis.handleProduceRequest`: decode and check the request, verify transactional
partitions with their coordinator, `ReplicaManager.append_records` (the appends, the errors per
partition, DelayedProduce), encode. What the answer says:
- a partition of a topic the metadata does not know is UNKNOWN_TOPIC_OR_PARTITION (v13+: an unknown
  topic id is UNKNOWN_TOPIC_ID); Produce never creates topics, only Metadata does;
- `ProduceRequest.validateRecords`: exactly one magic v2 batch per partition (INVALID_RECORD), no
  ZStandard before v7 (UNSUPPORTED_COMPRESSION_TYPE), a broken size or magic is CORRUPT_MESSAGE;
- acks other than 0, 1 and -1 is INVALID_REQUIRED_ACKS; acks -1 needs an ISR at least as large as
  min(min.insync.replicas, replicas), Kafka's effective minimum since 3.7 (NOT_ENOUGH_REPLICAS), so a
  one-replica topic accepts acks=all whatever min.insync.replicas says, as Kafka does;
- internal topics are written only by the admin client id (INVALID_TOPIC_EXCEPTION);
- with the StandardAuthorizer, transactional batches need WRITE on the transactional id (the whole request
  is TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and each topic WRITE (TOPIC_AUTHORIZATION_FAILED per partition);
- the log's checks (CRC, sizes, timestamps, keys) raise RecordError with Kafka's code, and nothing of
  the batch is written; record-level rejections carry record_errors and error_message (v8+);
- with acks=0 nothing is answered; if any partition failed the connection is closed, as Kafka does,
  so the producer refreshes its metadata.

Idempotent batches go through the partition's producer state (`kcli.broker.log.producer_state`): a
retried batch is answered with NONE and the offsets of the original (and, as Kafka does, its timestamp
as log_append_time), a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch
INVALID_PRODUCER_EPOCH; nothing of a refused batch is written. Transactional batches need a
transactional id (request level) and the transaction coordinator's word that the partition is in the
producer's ongoing transaction (KIP-890 part 1, asked of its coordinator wherever it runs, before the
appends); otherwise INVALID_TXN_STATE (v11+:
TRANSACTION_ABORTABLE), and a coordinator that is busy (CONCURRENT_TRANSACTIONS, loading) makes it the
retriable NOT_ENOUGH_REPLICAS, as Kafka maps it. From v12 on a cluster at transaction.version 2 (KIP-890
part 2) the producer sends no AddPartitionsToTxn: the coordinator is asked to add the partitions instead
(Kafka's `addPartition` supported operation; Kafka picks it by the request version alone, kcli also
needs the finalized level so that nothing changes below it).
acks=all waits in the replica manager's purgatory until the high watermark has passed the records
(DelayedProduce); with one replica the high watermark moves with every append, so it answers at once.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import sys
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from formats.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_UNIT_SIZE,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    SIZE_OFFSET,
    TRANSACTIONAL_BIT,
)
from kcli.broker.apis.context import FramedResponse, RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.log.validator import AppendOrigin
from kcli.broker.quota.quotas import record_produce, throttle
from kcli.broker.replication.manager import (
    PartitionResponse,
    is_transactional_data,
    is_valid_required_acks,
)
from kcli.features import supports_epoch_bump, transaction_version_level
from kcli.protocol.messages import kio_versions, response_type
from kcli.protocol.produce_codec import write_produce_response
from kcli.security.acl import AclOperation, ResourceType

API_KEY = 0
FIRST_TRANSACTIONS_V2_VERSION = 12
"""Produce v12: the broker adds a transactional batch's partition to the transaction (KIP-890 part 2)."""
ADMIN_CLIENT_ID = "__admin_client"
"""The only client id allowed to write to internal topics (Kafka's AdminUtils.ADMIN_CLIENT_ID)."""


async def handle_produce(ctx: RequestContext, request: Any) -> object | None:
    version = ctx.api_version
    state = ctx.state
    image = state.image
    by_id = version >= 13
    acks = request.acks
    topic_data = request.topic_data

    error = _transactional_request_error(request)
    if error is None and state.authorizer is not None:
        error = _authorization_error(ctx, request)
    if error is not None:
        return _whole_request_error(version, request, error)
    writable: dict[str, bool] | None = {} if state.authorizer is not None else None

    results: list[tuple[Any, list[tuple[int, PartitionResponse]]]] = []
    entries: list[tuple[tuple[str, int], bytes]] = []
    slots: list[tuple[list[tuple[int, PartitionResponse]], int]] = []
    for topic in topic_data:
        outcomes: list[tuple[int, PartitionResponse]] = []
        if by_id:
            topic_image = image.topics_by_id.get(topic.topic_id)
            results.append((topic.topic_id, outcomes))
            if topic_image is None:
                outcomes.extend((p.index, _UNKNOWN_TOPIC_ID) for p in topic.partition_data)
                continue
            name = topic_image.name
        else:
            name = topic.name
            results.append((name, outcomes))
            topic_image = image.topic_image(name)
        if writable is not None:
            allowed = writable.get(name)
            if allowed is None:
                allowed = writable[name] = ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)
            if not allowed:
                outcomes.extend((p.index, _TOPIC_AUTHORIZATION_FAILED) for p in topic.partition_data)
                continue
        for partition in topic.partition_data:
            index = partition.index
            if topic_image is None or index not in topic_image.partitions:
                outcomes.append((index, _UNKNOWN_TOPIC_OR_PARTITION))
                continue
            records = partition.records or b""
            invalid = check_records(version, records)
            if invalid is not None:
                outcomes.append((index, PartitionResponse(invalid)))
                continue
            outcomes.append((index, _UNSET))
            entries.append(((name, index), records))
            slots.append((outcomes, len(outcomes) - 1))

    if entries:
        verification = (
            await _verify_transactions(ctx, request.transactional_id, entries, version)
            if request.transactional_id and is_valid_required_acks(acks)
            else _NOTHING_TO_VERIFY
        )
        responses = await ctx.replicas.append_records(
            entries,
            acks,
            AppendOrigin.CLIENT,
            request.timeout.total_seconds(),
            internal_topics_allowed=ctx.client_id == ADMIN_CLIENT_ID,
            transaction_verification=verification,
        )
        for (outcomes, slot), response in zip(slots, responses, strict=True):
            if response.current_leader is not None and version < 10:
                response = response._replace(current_leader=None)  # ProduceResponse v10 added it
            outcomes[slot] = (outcomes[slot][0], response)

    throttle_ms = record_produce(ctx) if image.client_quotas else 0
    throttle(ctx, throttle_ms)  # KIP-219: answer now, then read nothing more for that long
    if acks == 0:
        failed = [
            f"{topic}-{index}: {outcome.error.name}"
            for topic, outcomes in results
            for index, outcome in outcomes
            if outcome.error is not ErrorCode.none
        ]
        if failed:
            # Kafka closes the connection so the producer notices and refreshes its metadata.
            raise ConnectionAbortedError(
                f"produce request with acks=0 (correlation id {ctx.correlation_id}, client id "
                f"{ctx.client_id!r}) failed: {', '.join(failed)}"
            )
        return None
    if throttle_ms:
        return _response(version, results, image, by_id, datetime.timedelta(milliseconds=throttle_ms))
    body = write_produce_response(version, results)
    if body is not None:
        return FramedResponse(_classes(version)[0], (body,))
    return _response(version, results, ctx.image, by_id)


def check_records(version: int, records: bytes) -> ErrorCode | None:
    """Kafka's ProduceRequest.validateRecords on the raw bytes (v3+): the error, or None when fine.

    Walks batch headers the way Kafka's batch iterator does: a tail too short to hold a header or its
    declared size ends the walk quietly, a declared size below 14 or a magic above 2 is corrupt.
    """
    first = _next_batch(records, 0)
    if isinstance(first, ErrorCode):
        return first
    if first is None:
        return ErrorCode.invalid_record  # "must have at least one record batch per partition"
    if records[MAGIC_OFFSET] != 2:
        return ErrorCode.invalid_record  # "only allowed to contain record batches with magic version 2"
    if (
        version < 7
        and len(records) > ATTRIBUTES_OFFSET + 1
        and records[ATTRIBUTES_OFFSET + 1] & 0x07 == _ZSTD
    ):
        return ErrorCode.unsupported_compression_type
    second = _next_batch(records, first)
    if isinstance(second, ErrorCode):
        return second
    if second is not None:
        return ErrorCode.invalid_record  # "only allowed to contain exactly one record batch per partition"
    return None


# ---------------------------------------------------------------------------------------------------

_NO_THROTTLE = datetime.timedelta(0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT16 = struct.Struct(">h")
_ZSTD = 4
_UNSET = PartitionResponse(ErrorCode.unknown_server_error)
_UNKNOWN_TOPIC_ID = PartitionResponse(ErrorCode.unknown_topic_id)
_UNKNOWN_TOPIC_OR_PARTITION = PartitionResponse(ErrorCode.unknown_topic_or_partition)
_TOPIC_AUTHORIZATION_FAILED = PartitionResponse(ErrorCode.topic_authorization_failed)


def _next_batch(records: bytes, position: int) -> int | ErrorCode | None:
    """The end of the batch starting at `position`, None when no whole batch is there, or CORRUPT_MESSAGE."""
    remaining = len(records) - position
    if remaining < LOG_OVERHEAD:
        return None
    (size,) = _INT32.unpack_from(records, position + SIZE_OFFSET)
    if size < MIN_UNIT_SIZE:
        return ErrorCode.corrupt_message
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return None
    magic = records[position + MAGIC_OFFSET]
    if magic > 2:  # a negative magic reads as 128..255 here
        return ErrorCode.corrupt_message
    if remaining < size + LOG_OVERHEAD:
        return None
    return position + size + LOG_OVERHEAD


def _is_v2_batch(records: bytes | None) -> bool:
    """Whether the records start with a whole magic v2 batch header."""
    return records is not None and len(records) >= RECORD_BATCH_OVERHEAD and records[MAGIC_OFFSET] == 2


def _authorization_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """KafkaApis.handleProduceRequest: transactional batches need WRITE on their transactional id
    (checked for the whole request before any topic); None when that is not needed or allowed."""
    transactional_id = request.transactional_id
    if transactional_id is None:
        return None
    has_transactional = any(
        _is_v2_batch(p.records) and p.records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_BIT
        for topic in request.topic_data
        for p in topic.partition_data
    )
    if has_transactional and not ctx.authorize(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        return ErrorCode.transactional_id_authorization_failed
    return None


def _transactional_request_error(request: Any) -> ErrorCode | None:
    """Kafka's request-level checks on transactional batches, in one pass over the partitions' first
    batches: any of them with no transactional id is TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    (RequestUtils.hasTransactionalRecords), more than one (producer id, epoch) among them
    INVALID_PRODUCER_ID_MAPPING."""
    seen = None
    for topic in request.topic_data:
        for partition in topic.partition_data:
            records = partition.records
            if _is_v2_batch(records) and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_BIT:
                if request.transactional_id is None:
                    return ErrorCode.transactional_id_authorization_failed
                (producer_id,) = _INT64.unpack_from(records, PRODUCER_ID_OFFSET)
                if producer_id >= 0:
                    seen = seen or set()
                    seen.add(bytes(records[PRODUCER_ID_OFFSET : PRODUCER_ID_OFFSET + 10]))
    if seen is not None and len(seen) > 1:
        return ErrorCode.invalid_producer_id_mapping
    return None


async def _verify_transactions(
    ctx: RequestContext,
    transactional_id: str | None,
    entries: list[tuple[tuple[str, int], bytes]],
    version: int,
) -> dict[tuple[str, int], ErrorCode | None]:
    """KIP-890 part 1: a transactional batch is written only to a partition its producer added to its
    ongoing transaction (AddPartitionsToTxn), as the transaction coordinator says, wherever it runs
    (`AddPartitionsToTxnManager`). For each partition with a transactional batch: None when verified,
    else the produce error, mapped as Kafka's ReplicaManager maps the coordinator's answer."""
    wanted: list[tuple[str, int]] = []
    producer: tuple[int, int] | None = None
    for key, records in entries:
        if is_transactional_data(records):
            wanted.append(key)
            if producer is None:  # one (producer id, epoch) per request: _transactional_request_error
                (producer_id,) = _INT64.unpack_from(records, PRODUCER_ID_OFFSET)
                (producer_epoch,) = _INT16.unpack_from(records, PRODUCER_ID_OFFSET + 8)
                producer = (producer_id, producer_epoch)
    if producer is None:
        return {}
    node = ctx.state.node
    manager = None if node is None else getattr(node, "add_partitions_to_txn", None)
    if manager is None or not manager.has_transaction_log():
        return dict.fromkeys(wanted, ErrorCode.invalid_txn_state)  # no __transaction_state: no transaction
    implicit_add = version >= FIRST_TRANSACTIONS_V2_VERSION and supports_epoch_bump(
        transaction_version_level(ctx.state.image.features)
    )
    ask = manager.add_partitions if implicit_add else manager.verify_transaction
    answers = await ask(transactional_id, *producer, wanted)
    return {tp: _verification_error(answers[tp], version) for tp in wanted}


def _verification_error(error: ErrorCode, version: int) -> ErrorCode | None:
    if error is ErrorCode.none:
        return None
    if error in _RETRIABLE_VERIFICATION_ERRORS:
        return ErrorCode.not_enough_replicas  # retriable, and the producer keeps its metadata
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error is ErrorCode.transaction_abortable and version < 11:
        return ErrorCode.invalid_txn_state
    if error is ErrorCode.invalid_request:  # a null or empty transactional id
        return ErrorCode.invalid_txn_state
    return error


_NOTHING_TO_VERIFY: dict[tuple[str, int], ErrorCode | None] = {}
_RETRIABLE_VERIFICATION_ERRORS = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


def _whole_request_error(version: int, request: Any, error: ErrorCode) -> object:
    """A request-level failure (Kafka's sendErrorResponseMaybeThrottle): every partition gets `error`."""
    by_id = version >= 13
    results = [
        (
            topic.topic_id if by_id else topic.name,
            [(p.index, PartitionResponse(error)) for p in topic.partition_data],
        )
        for topic in request.topic_data
    ]
    if request.acks == 0:
        raise ConnectionAbortedError(f"produce request with acks=0 failed: {error.name}")
    return _response(version, results, None, by_id)


def _response(
    version: int,
    results: list[tuple[Any, list[tuple[int, PartitionResponse]]]],
    image: Any,
    by_id: bool,
    throttle_time: datetime.timedelta = datetime.timedelta(0),
) -> object:
    classes = _classes(version)
    response_cls, topic_cls, partition_cls, record_error_cls, leader_cls, endpoint_cls = classes
    fields = _partition_fields(version)
    leaders: set[int] = set()
    topics = []
    for key, outcomes in results:
        partitions = []
        for index, outcome in outcomes:
            values: dict[str, Any] = {
                "index": index,
                "error_code": outcome.error,
                "base_offset": outcome.base_offset,
            }
            if "log_append_time" in fields:
                values["log_append_time"] = (
                    None
                    if outcome.log_append_time < 0
                    else _EPOCH + datetime.timedelta(milliseconds=outcome.log_append_time)
                )
            if "log_start_offset" in fields:
                values["log_start_offset"] = outcome.log_start_offset
            if "record_errors" in fields:
                values["record_errors"] = tuple(
                    record_error_cls(batch_index=i, batch_index_error_message=m)
                    for i, m in outcome.record_errors
                )
                values["error_message"] = outcome.error_message
            if outcome.current_leader is not None and "current_leader" in fields:
                leader_id, leader_epoch = outcome.current_leader
                values["current_leader"] = leader_cls(leader_id=leader_id, leader_epoch=leader_epoch)
                if leader_id >= 0:
                    leaders.add(leader_id)
            partitions.append(partition_cls(**values))
        if by_id:
            topics.append(topic_cls(topic_id=key, partition_responses=tuple(partitions)))
        else:
            topics.append(topic_cls(name=key, partition_responses=tuple(partitions)))
    if leaders and endpoint_cls is not None and image is not None:
        endpoints = tuple(
            endpoint_cls(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in image.brokers()
            if b.node_id in leaders
        )
        return response_cls(responses=tuple(topics), throttle_time=throttle_time, node_endpoints=endpoints)
    return response_cls(responses=tuple(topics), throttle_time=throttle_time)


@cache
def _classes(version: int) -> tuple[Any, ...]:
    """The response class and its nested classes for `version` (None where the version has none)."""
    response_cls = response_type(API_KEY, version)
    module = sys.modules[response_cls.__module__]
    return (
        response_cls,
        module.TopicProduceResponse,
        module.PartitionProduceResponse,
        getattr(module, "BatchIndexAndErrorMessage", None),
        getattr(module, "LeaderIdAndEpoch", None),
        getattr(module, "NodeEndpoint", None),
    )


@cache
def _partition_fields(version: int) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(_classes(version)[2]))


APIS = [ApiSpec(API_KEY, 3, kio_versions(API_KEY)[1], handle_produce)]  # type: ignore[index]
