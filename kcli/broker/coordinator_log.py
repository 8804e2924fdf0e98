"""The partitions coordinators keep their state in (__consumer_offsets, __transaction_state).

Both coordinators write their records as one batch appended as the coordinator, and both rebuild
their caches at start-up by replaying a partition from its log start. Kafka shares this in its
CoordinatorRuntime/CoordinatorLoaderImpl; here it is these functions.

A coordinator write is done when it is committed, not when it is appended: Kafka's coordinators go
through ReplicaManager.appendRecords with acks=-1 and answer from the DelayedProduce's callback, once
the partition's high watermark has passed the batch. `write_records` does the same through
`ReplicaManager.append_records`, the call acks=all produces make; `append_records` here is for the
writes Kafka makes with acks=0 (tombstones of expired or deleted offsets and groups), which nobody
waits for.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from formats.errors import FormatError
from formats.records import RecordBatch, RecordSpec, build_batch
from formats.segment import StopReason, walk
from kcli.broker.log.errors import LogStorageError, OffsetOutOfRange
from kcli.broker.log.log import Log
from kcli.broker.log.validator import AppendOrigin
from kcli.broker.replication.manager import ReplicaManager

log = logging.getLogger("kcli.broker")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024
"""offsets.load.buffer.size / transaction.state.log.load.buffer.size: read between two turns of the event loop."""


def append_records(
    replicas: ReplicaManager,
    topic: str,
    index: int,
    records: Sequence[tuple[bytes, bytes | None]],
    *,
    now_ms: int,
) -> ErrorCode:
    """Append (key, value) records as one batch to the leader with acks=0, for the writes nobody waits
    for (ReplicaManager.appendToLocalLog with the coordinator origin); the error Kafka maps, if any."""
    if replicas.partition(topic, index) is None:
        return ErrorCode.unknown_topic_or_partition
    [response] = replicas.append_to_local_log(
        [((topic, index), _batch(records, now_ms, None))],
        0,
        AppendOrigin.COORDINATOR,
        internal_topics_allowed=True,
        now_ms=now_ms,
    )
    _log_failure(topic, index, response.error)
    return response.error


async def write_records(
    replicas: ReplicaManager,
    topic: str,
    index: int,
    records: Sequence[tuple[bytes, bytes | None]],
    *,
    now_ms: int,
    timeout_ms: int,
    producer: tuple[int, int] | None = None,
) -> tuple[ErrorCode, int]:
    """Append as one batch with acks=all and wait until it is committed; (error, base offset).

    The append is `ReplicaManager.append_records`, the call Produce makes, with the coordinator origin;
    its wait is Kafka's DelayedProduce: woken by every change of the partition, it ends when the high
    watermark passes the batch, or after `timeout_ms` with REQUEST_TIMED_OUT, or when this node no
    longer leads the partition (NOT_LEADER_OR_FOLLOWER). A leader epoch that changed during the wait is
    NOT_LEADER_OR_FOLLOWER too, even if the node leads again: the batch may have been truncated away,
    and the coordinator's cache was reloaded since (Kafka's coordinator-epoch check).

    `producer` (id, epoch) makes it a transactional batch (TxnOffsetCommit), verified by the
    transaction coordinator before the call.
    """
    partition = replicas.partition(topic, index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, -1
    leader_epoch = partition.leader_epoch
    key = (topic, index)
    [response] = await replicas.append_records(
        [(key, _batch(records, now_ms, producer))],
        -1,
        AppendOrigin.COORDINATOR,
        timeout_ms / 1000,
        internal_topics_allowed=True,
        transaction_verification={} if producer is None else {key: None},  # verified before the call
        now_ms=now_ms,
    )
    error = response.error
    _log_failure(topic, index, error)
    partition = replicas.partition(topic, index)
    if error is ErrorCode.none and (partition is None or partition.leader_epoch != leader_epoch):
        error = ErrorCode.not_leader_or_follower
    return error, response.base_offset


def _batch(
    records: Sequence[tuple[bytes, bytes | None]], now_ms: int, producer: tuple[int, int] | None
) -> bytes:
    specs = [RecordSpec(now_ms, key, value) for key, value in records]
    if producer is None:
        return build_batch(specs)
    return build_batch(specs, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)


def _log_failure(topic: str, index: int, error: ErrorCode) -> None:
    """A refused batch or a storage failure is the coordinator's bug or a broken disk: say so."""
    if error not in _EXPECTED_ERRORS:
        log.error("append to %s-%d failed: %s", topic, index, error.name)


_EXPECTED_ERRORS = frozenset(
    {
        ErrorCode.none,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    }
)
"""Errors of leadership and replication: the coordinators answer them, nothing is broken."""


async def replay_log(
    partition_log: Log,
    on_batch: Callable[[memoryview, RecordBatch], None],
    *,
    stopping: Callable[[], bool],
) -> None:
    """Hand every v2 batch from the log start to the end to `on_batch`, yielding between chunks.

    A batch is handed over with the chunk it lies in (its records decode from it). Corrupt data
    stops the replay with an error in the log, as Kafka's loader does; what was replayed stays.
    """
    offset = partition_log.log_start_offset
    try:
        while offset < partition_log.log_end_offset and not stopping():
            chunk = partition_log.read(
                offset, LOAD_CHUNK_BYTES, upper_bound=partition_log.log_end_offset, min_one_batch=True
            )
            if chunk is None:
                break
            data = memoryview(os.pread(chunk.fd, chunk.size, chunk.position))
            result = walk(data, 0, len(data), check_crc=False)
            if not result.batches:
                break
            for batch in result.batches:
                if isinstance(batch, RecordBatch) and batch.last_offset >= offset:
                    on_batch(data, batch)
                offset = batch.next_offset
            if result.reason is not StopReason.END:
                log.error(
                    "stopped loading %s at offset %d: %s", partition_log.name, offset, result.problem(data)
                )
                break
            await asyncio.sleep(0)
    except (OSError, OffsetOutOfRange, FormatError, LogStorageError) as exc:
        log.error("loading %s stopped at offset %d: %s", partition_log.name, offset, exc)
