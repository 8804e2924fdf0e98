"""The partitions coordinators keep their state in (__consumer_offsets, __transaction_state).

Both coordinators write their records as one batch appended as the coordinator, and both rebuild
their caches at start-up by replaying a partition from its log start. Kafka shares this in its
CoordinatorRuntime/CoordinatorLoaderImpl; here it is these two functions.
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
from kcli.broker.log.errors import LogStorageError, OffsetOutOfRange, RecordError
from kcli.broker.log.log import Log
from kcli.broker.log.validator import AppendOrigin
from kcli.broker.replication.partition import Partition, PartitionError

log = logging.getLogger("kcli.broker")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024
"""offsets.load.buffer.size / transaction.state.log.load.buffer.size: read between two turns of the event loop."""


def append_records(
    partition: Partition | None,
    records: Sequence[tuple[bytes, bytes | None]],
    *,
    now_ms: int,
    producer: tuple[int, int] | None = None,
) -> tuple[ErrorCode, int]:
    """Append (key, value) records as one batch; (error, base offset), with the partition errors Kafka maps.

    `producer` (id, epoch) makes it a transactional batch (TxnOffsetCommit), verified by the
    transaction coordinator before the call. The append is committed once it returns: it went through
    the partition, which moved the high watermark (one replica).
    """
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, -1
    specs = [RecordSpec(now_ms, key, value) for key, value in records]
    if producer is None:
        batch = build_batch(specs)
    else:
        batch = build_batch(specs, producer_id=producer[0], producer_epoch=producer[1], is_transactional=True)
    try:
        info = partition.append_records_to_leader(
            batch,
            required_acks=-1,
            now_ms=now_ms,
            origin=AppendOrigin.COORDINATOR,
            transaction_verified=producer is not None,
        )
    except PartitionError as exc:
        return exc.error_code, -1
    except RecordError as exc:
        log.error("append to %s failed: %s", partition.log.name, exc.message)
        return exc.error_code, -1
    except (LogStorageError, OSError) as exc:
        log.error("append to %s failed: %s", partition.log.name, exc)
        return ErrorCode.kafka_storage_error, -1
    return ErrorCode.none, info.first_offset


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
