"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28),
DescribeTransactions (65) and ListTransactions (66). InitProducerId reaches the same coordinator through
`node.transaction_coordinator` (kcli.broker.apis.producer_id); FindCoordinator key type 1 is in groups.py.

As Kafka's KafkaApis: AddPartitionsToTxn fails the whole request if any partition is unknown (those
get UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED); v4+ is the broker-to-broker
batched form with VerifyOnly. Versions before PRODUCER_FENCED existed get INVALID_PRODUCER_EPOCH
instead (AddPartitions < v2, AddOffsets and EndTxn < v2), TxnOffsetCommit v0-1 gets
COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS, and TRANSACTION_ABORTABLE becomes
INVALID_TXN_STATE where it is not allowed.

Transaction version 2 (KIP-890 part 2) is chosen by the request version, as Kafka's
TransactionVersion.transactionVersionForEndTxn / ForAddPartitionsToTxn do: EndTxn v5 (which answers
with the producer id and epoch to continue with), a broker's AddPartitionsToTxn v4+ that is not
VerifyOnly (the implicit add of Produce v12), and TxnOffsetCommit v5 (whose group partition is added
to the transaction by the broker, as the client sends no AddOffsetsToTxn). ApiVersions offers EndTxn
v5 and TxnOffsetCommit v5 only at the cluster's transaction.version 2.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.group.group import OffsetAndMetadata
from kcli.broker.log.log import wall_clock_ms
from kcli.broker.txn.coordinator import EndTxnResult, TransactionCoordinator
from kcli.protocol.messages import build, nested_type, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

FIRST_TRANSACTIONS_V2_END_TXN = 5
FIRST_TRANSACTIONS_V2_TXN_OFFSET_COMMIT = 5
OFFSETS_TOPIC = "__consumer_offsets"
_NO_THROTTLE = datetime.timedelta(0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def transaction_coordinator(ctx: RequestContext) -> TransactionCoordinator | None:
    node = ctx.state.node
    return None if node is None else getattr(node, "transaction_coordinator", None)


def fenced_for(version: int, fenced_from: int, error: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED as older versions know it: INVALID_PRODUCER_EPOCH."""
    if error is ErrorCode.producer_fenced and version < fenced_from:
        return ErrorCode.invalid_producer_epoch
    return error


# --- AddPartitionsToTxn ---------------------------------------------------------------------------------


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(ADD_PARTITIONS_TO_TXN, version)
    topic_cls = nested_type(response_cls, "AddPartitionsToTxnTopicResult")
    partition_cls = nested_type(response_cls, "AddPartitionsToTxnPartitionResult")

    def topic_results(results: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in results.items():
            by_topic.setdefault(topic, []).append(
                partition_cls(partition_index=partition, partition_error_code=error)
            )
        return tuple(topic_cls(name=t, results_by_partition=tuple(ps)) for t, ps in by_topic.items())

    if version <= 3:
        denied = _add_partitions_denied(
            ctx,
            request.v3_and_below_transactional_id,
            [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions],
        )
        if denied is not None:
            return build(
                response_cls, throttle_time=_NO_THROTTLE, results_by_topic_v3_and_below=topic_results(denied)
            )
        results = await _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions],
            verify_only=False,
        )
        results = {tp: fenced_for(version, 2, e) for tp, e in results.items()}
        return build(
            response_cls, throttle_time=_NO_THROTTLE, results_by_topic_v3_and_below=topic_results(results)
        )
    result_cls = nested_type(response_cls, "AddPartitionsToTxnResult")
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        # v4+ comes from brokers verifying a transaction (KIP-890), never from a client
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    answers = []
    for txn in request.transactions:
        results = await _add_partitions(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            [(t.name, p) for t in txn.topics for p in t.partitions],
            verify_only=txn.verify_only,
        )
        if version < 5:
            results = {
                tp: ErrorCode.invalid_txn_state if e is ErrorCode.transaction_abortable else e
                for tp, e in results.items()
            }
        answers.append(
            result_cls(transactional_id=txn.transactional_id, topic_results=topic_results(results))
        )
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(answers),
    )


def _add_partitions_denied(
    ctx: RequestContext, transactional_id: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], ErrorCode] | None:
    """KafkaApis.handleAddPartitionsToTxnRequest (v3 and below): WRITE on the transactional id, then on
    each topic (the other partitions are OPERATION_NOT_ATTEMPTED); None when all is allowed."""
    if ctx.state.authorizer is None:
        return None
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    writable = {
        t: ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, t) for t in {t for t, _ in partitions}
    }
    if all(writable.values()):
        return None
    return {
        tp: ErrorCode.operation_not_attempted if writable[tp[0]] else ErrorCode.topic_authorization_failed
        for tp in partitions
    }


async def _add_partitions(
    ctx: RequestContext,
    transactional_id: str | None,
    producer_id: int,
    producer_epoch: int,
    partitions: list[tuple[str, int]],
    *,
    verify_only: bool,
) -> dict[tuple[str, int], ErrorCode]:
    coordinator = transaction_coordinator(ctx)
    if coordinator is None:
        return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
    unknown = {tp for tp in partitions if ctx.state.image.partition(*tp) is None}
    if unknown:
        return {
            tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
            for tp in partitions
        }
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    error = await coordinator.add_partitions(
        transactional_id,
        producer_id,
        producer_epoch,
        partitions,
        client_transaction_version=2 if ctx.api_version >= 4 else 0,
    )
    return dict.fromkeys(partitions, error)


# --- AddOffsetsToTxn ------------------------------------------------------------------------------------


async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    coordinator = transaction_coordinator(ctx)
    groups = getattr(ctx.state.node, "groups", None)
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif coordinator is None or groups is None:
        error = ErrorCode.coordinator_not_available
    else:
        offsets_partition = (OFFSETS_TOPIC, groups.partition_for(request.group_id))
        error = await coordinator.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [offsets_partition]
        )
    error = fenced_for(version, 2, error)
    return build(response_type(ADD_OFFSETS_TO_TXN, version), throttle_time=_NO_THROTTLE, error_code=error)


# --- EndTxn ---------------------------------------------------------------------------------------------


async def handle_end_txn(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    coordinator = transaction_coordinator(ctx)
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        result = EndTxnResult(ErrorCode.transactional_id_authorization_failed)
    elif coordinator is None:
        result = EndTxnResult(ErrorCode.coordinator_not_available)
    else:
        result = await coordinator.end_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            client_transaction_version=2 if version >= FIRST_TRANSACTIONS_V2_END_TXN else 0,
        )
    error = fenced_for(version, 2, result.error)
    if version < 4 and error is ErrorCode.transaction_abortable:
        error = ErrorCode.invalid_txn_state
    extra: dict[str, int] = {}
    if version >= FIRST_TRANSACTIONS_V2_END_TXN:
        extra = {"producer_id": result.producer_id, "producer_epoch": result.producer_epoch}
    return build(response_type(END_TXN, version), throttle_time=_NO_THROTTLE, error_code=error, **extra)


# --- TxnOffsetCommit ------------------------------------------------------------------------------------


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(TXN_OFFSET_COMMIT, version)
    topic_cls = nested_type(response_cls, "TxnOffsetCommitResponseTopic")
    partition_cls = nested_type(response_cls, "TxnOffsetCommitResponsePartition")
    now = wall_clock_ms()
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    refused = _txn_offset_commit_refusal(ctx, request)
    for topic in request.topics:
        topic_refused = refused
        if topic_refused is None and not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name):
            topic_refused = ErrorCode.topic_authorization_failed
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if topic_refused is not None:
                errors[key] = topic_refused
                continue
            if ctx.state.image.partition(*key) is None:
                errors[key] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[key] = OffsetAndMetadata(
                partition.committed_offset,
                getattr(partition, "committed_leader_epoch", -1),
                partition.committed_metadata or "",
                now,
                -1,
            )
    if offsets:
        errors.update(await _txn_commit(ctx, request, version, offsets))
    by_topic: dict[str, list[Any]] = {}
    for (name, index), error in errors.items():
        if version < 2 and error is ErrorCode.coordinator_load_in_progress:
            error = ErrorCode.coordinator_not_available
        if version < 4 and error is ErrorCode.transaction_abortable:
            error = ErrorCode.invalid_txn_state
        by_topic.setdefault(name, []).append(partition_cls(partition_index=index, error_code=error))
    topics = tuple(topic_cls(name=name, partitions=tuple(ps)) for name, ps in by_topic.items())
    return build(response_cls, throttle_time=_NO_THROTTLE, topics=topics)


def _txn_offset_commit_refusal(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """KafkaApis.handleTxnOffsetCommitRequest: WRITE on the transactional id, READ on the group."""
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed
    return None


async def _txn_commit(
    ctx: RequestContext, request: Any, version: int, offsets: dict[tuple[str, int], OffsetAndMetadata]
) -> dict[tuple[str, int], ErrorCode]:
    node = ctx.state.node
    verifier = getattr(node, "add_partitions_to_txn", None)
    groups = getattr(node, "groups", None)
    if verifier is None or groups is None:
        return dict.fromkeys(offsets, ErrorCode.coordinator_not_available)
    # KIP-890 part 1: the group's offsets partition must be in the producer's transaction (AddOffsetsToTxn),
    # as its transaction coordinator says, wherever that runs. Part 2 (v5): the broker adds it itself.
    offsets_partition = (OFFSETS_TOPIC, groups.partition_for(request.group_id))
    ask = (
        verifier.add_partitions
        if version >= FIRST_TRANSACTIONS_V2_TXN_OFFSET_COMMIT
        else verifier.verify_transaction
    )
    verified = (
        await ask(request.transactional_id, request.producer_id, request.producer_epoch, [offsets_partition])
    )[offsets_partition]
    if verified is not ErrorCode.none:
        if verified is ErrorCode.producer_fenced:
            verified = ErrorCode.invalid_producer_epoch
        elif verified in (ErrorCode.network_exception, ErrorCode.not_coordinator):
            # About the transaction coordinator, not the group's: the client must not look for another
            # group coordinator, only retry (Kafka's storeOffsets makes these COORDINATOR_NOT_AVAILABLE).
            verified = ErrorCode.coordinator_not_available
        return dict.fromkeys(offsets, verified)
    return await groups.txn_commit_offsets(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
        getattr(request, "generation_id", -1),
        offsets,
    )


# --- DescribeTransactions / ListTransactions ------------------------------------------------------------


async def handle_describe_transactions(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(DESCRIBE_TRANSACTIONS, version)
    state_cls = nested_type(response_cls, "TransactionState")
    topic_cls = nested_type(response_cls, "TopicData")
    coordinator = transaction_coordinator(ctx)
    states = []
    for transactional_id in request.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            error, description = ErrorCode.transactional_id_authorization_failed, None
        elif coordinator is None:
            error, description = ErrorCode.coordinator_not_available, None
        else:
            description = coordinator.describe_transaction(transactional_id)
            error = description.error
        by_topic: dict[str, list[int]] = {}
        if description is not None:
            for topic, partition in description.topic_partitions:
                if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic, log_if_denied=False):
                    by_topic.setdefault(topic, []).append(partition)  # Kafka leaves out the others
        ok = description is not None and error is ErrorCode.none
        states.append(
            state_cls(
                error_code=error,
                transactional_id=transactional_id,
                transaction_state=description.state if ok else "",  # type: ignore[union-attr]
                transaction_timeout=datetime.timedelta(milliseconds=description.timeout_ms if ok else 0),  # type: ignore[union-attr]
                transaction_start_time=_timestamp(description.start_time_ms if ok else -1),  # type: ignore[union-attr]
                producer_id=description.producer_id if ok else -1,  # type: ignore[union-attr]
                producer_epoch=description.producer_epoch if ok else -1,  # type: ignore[union-attr]
                topics=tuple(topic_cls(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )
        )
    return build(response_cls, throttle_time=_NO_THROTTLE, transaction_states=tuple(states))


def _timestamp(ms: int) -> datetime.datetime | None:
    """TransactionStartTimeMs: None is written as -1, Kafka's value when no transaction is open."""
    return None if ms < 0 else _EPOCH + datetime.timedelta(milliseconds=ms)


async def handle_list_transactions(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    response_cls = response_type(LIST_TRANSACTIONS, version)
    state_cls = nested_type(response_cls, "TransactionState")
    coordinator = transaction_coordinator(ctx)
    if coordinator is None:
        return build(
            response_cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.coordinator_not_available,
            unknown_state_filters=(),
            transaction_states=(),
        )
    error, unknown, listed = coordinator.list_transactions(
        request.state_filters, request.producer_id_filters, getattr(request, "duration_filter", -1)
    )
    pattern = getattr(request, "transactional_id_pattern", None)
    if pattern:
        try:
            compiled = re.compile(pattern)
        except re.error:
            return build(
                response_cls,
                throttle_time=_NO_THROTTLE,
                error_code=ErrorCode.invalid_regular_expression,
                unknown_state_filters=(),
                transaction_states=(),
            )
        listed = [entry for entry in listed if compiled.fullmatch(entry[0])]
    if ctx.state.authorizer is not None:  # only the transactional ids the principal may DESCRIBE
        listed = [
            entry
            for entry in listed
            if ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, entry[0], log_if_denied=False
            )
        ]
    return build(
        response_cls,
        throttle_time=_NO_THROTTLE,
        error_code=error,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            state_cls(transactional_id=t, producer_id=p, transaction_state=s) for t, p, s in listed
        ),
    )


APIS = [
    ApiSpec(ADD_PARTITIONS_TO_TXN, 0, 5, handle_add_partitions_to_txn),
    ApiSpec(ADD_OFFSETS_TO_TXN, 0, 4, handle_add_offsets_to_txn),
    ApiSpec(END_TXN, 0, 5, handle_end_txn),
    ApiSpec(TXN_OFFSET_COMMIT, 0, 5, handle_txn_offset_commit),
    ApiSpec(DESCRIBE_TRANSACTIONS, 0, 0, handle_describe_transactions),
    ApiSpec(LIST_TRANSACTIONS, 0, 2, handle_list_transactions),
]
