"""The partitions coordinators keep their state in (__consumer_offsets, __transaction_state).

Both coordinators write their records as one batch appended as the coordinator, and both rebuild
their caches at start-up by replaying a partition from its log start. Kafka shares this in its
CoordinatorRuntime/CoordinatorLoaderImpl; here it is these functions.

A coordinator write is done when it is committed, not when it is appended: Kafka's coordinators go
through ReplicaManager.appendRecords with acks=-1 and answer from the DelayedProduce's callback, once
the partition's high watermark has passed the batch. `write_records` does the same through the replica
manager's purgatory, the path acks=all produces take; `append_records` alone is for the writes Kafka
makes with acks=0 (tombstones of expired or deleted offsets and groups), which nobody waits for.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from formats.errors import FormatError
from formats.records import RecordBatch, RecordSpec, build_batch
from formats.segment import StopReason, walk
from kcli.broker.log.errors import LogStorageError, OffsetOutOfRange, RecordError
from kcli.broker.log.log import Log
from kcli.broker.log.validator import AppendOrigin
from kcli.broker.replication.manager import ReplicaManager
from kcli.broker.replication.partition import Partition, PartitionError

log = logging.getLogger("kcli.broker")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024
"""offsets.load.buffer.size / transaction.state.log.load.buffer.size: read between two turns of the event loop."""


class Appended(NamedTuple):
    """What one coordinator append did: the error, or where the batch went and in which leader epoch."""

    error: ErrorCode
    base_offset: int = -1
    next_offset: int = -1
    """The batch's last offset + 1: the batch is committed once the high watermark reaches it."""
    leader_epoch: int = -1


def append_records(
    partition: Partition | None,
    records: Sequence[tuple[bytes, bytes | None]],
    *,
    now_ms: int,
    producer: tuple[int, int] | None = None,
    required_acks: int = -1,
) -> Appended:
    """Append (key, value) records as one batch to the leader, with the partition errors Kafka maps.

    `producer` (id, epoch) makes it a transactional batch (TxnOffsetCommit), verified by the
    transaction coordinator before the call. The batch is in the log when this returns, not yet
    committed: `write_records` waits for that.
    """
    if partition is None:
        return Appended(ErrorCode.unknown_topic_or_partition)
    specs = [RecordSpec(now_ms, key, value) for key, value in records]
    if producer is None:
        batch = build_batch(specs)
    else:
        batch = build_batch(specs, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)
    leader_epoch = partition.leader_epoch
    try:
        info = partition.append_records_to_leader(
            batch,
            required_acks=required_acks,
            now_ms=now_ms,
            origin=AppendOrigin.COORDINATOR,
            transaction_verified=producer is not None,
        )
    except PartitionError as exc:
        return Appended(exc.error_code)
    except RecordError as exc:
        log.error("append to %s failed: %s", partition.log.name, exc.message)
        return Appended(exc.error_code)
    except (LogStorageError, OSError) as exc:
        log.error("append to %s failed: %s", partition.log.name, exc)
        return Appended(ErrorCode.kafka_storage_error)
    return Appended(ErrorCode.none, info.first_offset, info.last_offset + 1, leader_epoch)


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

    The wait is Kafka's DelayedProduce (`ReplicaManager.wait_for_acks`): woken by every change of the
    partition, it ends when the high watermark passes the batch, or after `timeout_ms` with
    REQUEST_TIMED_OUT, or when this node no longer leads the partition (NOT_LEADER_OR_FOLLOWER). A
    leader epoch that changed during the wait is NOT_LEADER_OR_FOLLOWER too, even if the node leads
    again: the batch may have been truncated away, and the coordinator's cache was reloaded since
    (Kafka's coordinator-epoch check).
    """
    appended = append_records(replicas.partition(topic, index), records, now_ms=now_ms, producer=producer)
    if appended.error is not ErrorCode.none:
        return appended.error, -1
    key = (topic, index)
    required = [(key, appended.next_offset)]
    if not replicas.acks_reached(required):
        await replicas.wait_for_acks(required, timeout_ms / 1000)
    error = replicas.acks_error(key, appended.next_offset)
    partition = replicas.partition(topic, index)
    if error is ErrorCode.none and (partition is None or partition.leader_epoch != appended.leader_epoch):
        error = ErrorCode.not_leader_or_follower
    return error, appended.base_offset


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
