"""`__cluster_metadata-0` on disk: append whole record batches durably, replay them at start-up.

The partition is an ordinary `kcli.broker.log.Log` configured as Kafka's KafkaMetadataLog configures
its UnifiedLog: `metadata.log.segment.bytes` / `.ms`, 8 MiB batches, no time or size retention, and
a full recovery at every open (recovery point 0, never a clean shutdown), so a torn or corrupt tail
is cut exactly as Kafka's LogLoader cuts it and the loss is reported line by line. The files are
Kafka's: 20-digit segments with `.index` / `.timeindex`, `leader-epoch-checkpoint`,
`partition.metadata` with the metadata topic's fixed id (AAAAAAAAAAAAAAAAAAAAAQ), plus `quorum-state`.

Batches are v2, uncompressed, keys null, values framed metadata records, `partition_leader_epoch`
= the controller (Raft) epoch. Each append is one batch written with its offsets already assigned
(the Raft-leader path of `Log`) and fsynced before it returns, so an operation is either wholly on
disk or absent after `kill -9`. The log's high watermark is the committed offset: batches below it
are on a majority of the voters, and only those are handed on (see `raft_client`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from formats.checkpoints import EpochEntry, PartitionMetadata, write_partition_metadata
from formats.errors import FormatError
from formats.internal import MetadataRecord, decode_metadata_record
from formats.records import ControlType, RecordBatch, RecordSpec, build_batch, control_type
from kcli.broker.log import AppendOrigin, Log, LogConfig, LogStorageError, RecordError
from kcli.config import CLUSTER_METADATA_TOPIC, BrokerConfig
from kcli.errors import KcliError
from kcli.files import write_atomically
from kcli.logdir import SegmentReader

log = logging.getLogger("kcli.broker.metadata")

CLUSTER_METADATA_PARTITION_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
CLUSTER_METADATA_TOPIC_ID = uuid.UUID(int=1)  # Topic.CLUSTER_METADATA_TOPIC_ID, "AAAAAAAAAAAAAAAAAAAAAQ"
PARTITION_METADATA = "partition.metadata"
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024  # metadata.log.segment.bytes
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000  # metadata.log.segment.ms
MAX_BATCH_BYTES = 8 * 1024 * 1024  # KafkaRaftClient.MAX_BATCH_SIZE_BYTES, the log's max.message.bytes


class MetadataLogError(KcliError):
    """The metadata log cannot be opened, read or written; the broker cannot run without it."""


def metadata_log_dir(config: BrokerConfig) -> Path:
    """`<metadata.log.dir or the first log dir>/__cluster_metadata-0`, as Kafka places it."""
    base = config["metadata.log.dir"] or config.log_dirs[0]
    return Path(str(base)) / CLUSTER_METADATA_PARTITION_DIR


@dataclass(frozen=True, slots=True)
class LoggedBatch:
    """One batch as replayed: its offsets, epoch, append time and decoded records (control batches: none)."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    append_time_ms: int
    records: tuple[tuple[MetadataRecord, int], ...]
    size: int = 0
    """Bytes on disk, which decide when the next snapshot is due."""
    kraft_records: tuple[tuple[int, ControlType, bytes], ...] = ()
    """A control batch's KRaftVersion and Voters records (KIP-853) as (offset, type, value)."""


@dataclass
class MetadataLog:
    """The metadata partition; construct with `MetadataLog.open`.

    `recovery_report` holds the storage layer's lines about what start-up recovery repaired
    (truncated bytes with offsets, deleted segments); it is empty after a clean open.
    """

    log: Log
    recovery_report: list[str] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segment_ms: int = DEFAULT_SEGMENT_MS,
    ) -> MetadataLog:
        """Create or load the partition directory, recovering every segment."""
        path = Path(directory)
        config = LogConfig.from_values(
            {
                "segment.bytes": segment_bytes,
                "segment.ms": segment_ms,
                "max.message.bytes": MAX_BATCH_BYTES,
                "retention.ms": -1,
                "retention.bytes": -1,
            }
        )
        report: list[str] = []
        try:
            if path.is_dir():
                partition_log = Log.load(
                    path, config, recovery_point_checkpoint=0, had_clean_shutdown=False, report=report.append
                )
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                partition_log = Log.create(path, config, CLUSTER_METADATA_TOPIC_ID)
            if not (path / PARTITION_METADATA).exists():
                text = write_partition_metadata(PartitionMetadata(0, CLUSTER_METADATA_TOPIC_ID))
                write_atomically(path / PARTITION_METADATA, text.encode())
        except (OSError, LogStorageError, FormatError) as exc:
            raise MetadataLogError(f"cannot open the metadata log in {path}: {_reason(exc)}.") from None
        for line in report:
            log.warning("metadata log recovery: %s", line)
        return cls(partition_log, report)

    @property
    def directory(self) -> Path:
        return self.log.dir

    @property
    def next_offset(self) -> int:
        """The log end offset: where the next batch goes."""
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        """The committed offset: every batch below it is on a majority of the voters."""
        return self.log.high_watermark

    def update_high_watermark(self, offset: int) -> int:
        """Move the committed offset (kept within the log); returns where it now is."""
        return self.log.update_high_watermark(offset)

    @property
    def segments(self) -> list[Path]:
        return [segment.log_path for segment in self.log.segments]

    @property
    def epochs(self) -> list[EpochEntry]:
        """(epoch, start offset) of every leader epoch in the log, as in leader-epoch-checkpoint."""
        return self.log.epoch_cache.entries()

    def batches(self, from_offset: int = 0) -> Iterator[LoggedBatch]:
        """Every batch from `from_offset`, records decoded; raises MetadataLogError on an undecodable record."""
        segments = list(self.log.segments)
        for k, segment in enumerate(segments):
            if k + 1 < len(segments) and segments[k + 1].base_offset <= from_offset:
                continue  # wholly below: not even read
            reader = SegmentReader(segment.log_path, check_crc=False, max_bytes=segment.size)
            for chunk in reader.chunks():
                for batch in chunk.batches:
                    if batch.last_offset >= from_offset:
                        yield logged_batch(segment.log_path, chunk.view, batch)  # type: ignore[arg-type]

    def records(self) -> Iterator[tuple[MetadataRecord, int]]:
        """(record, offset) of every metadata record in log order."""
        for batch in self.batches():
            yield from batch.records

    def append(
        self, values: Sequence[bytes], *, leader_epoch: int, now_ms: int, flush: bool = True
    ) -> tuple[int, int]:
        """Write `values` (encoded metadata records) as one batch; returns (base, last) offset.

        With `flush` the batch is fsynced before this returns; the Raft leader flushes on a worker thread.
        """
        if not values:
            raise ValueError("a metadata batch needs at least one record")
        batch = build_batch(
            [RecordSpec(now_ms, None, value) for value in values],
            base_offset=self.log.log_end_offset,
            partition_leader_epoch=leader_epoch,
        )
        try:
            info = self.log.append_as_leader(
                batch, leader_epoch=leader_epoch, now_ms=now_ms, origin=AppendOrigin.RAFT_LEADER
            )
            if flush:
                self.log.flush()
        except (OSError, LogStorageError, RecordError) as exc:
            raise MetadataLogError(
                f"cannot append to the metadata log in {self.directory}: {_reason(exc)}."
            ) from None
        return info.first_offset, info.last_offset

    def close(self) -> None:
        """fsync and close every segment (trimmed indexes, final time-index entries)."""
        self.log.flush_all()
        self.log.close()


def logged_batch(path: Path, view: memoryview, batch: RecordBatch) -> LoggedBatch:
    records: tuple[tuple[MetadataRecord, int], ...] = ()
    kraft: list[tuple[int, ControlType, bytes]] = []
    if batch.is_control:
        try:
            for record in batch.records(view):
                kind = control_type(record.key)
                if kind in (ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS):
                    kraft.append((record.offset, kind, bytes(record.value or b"")))
        except FormatError as exc:
            raise MetadataLogError(
                f"cannot replay the batch at offset {batch.base_offset} of {path}: {str(exc).rstrip('.')}."
            ) from None
    else:
        try:
            records = tuple(
                (decode_metadata_record(record.value), record.offset) for record in batch.records(view)
            )
        except FormatError as exc:
            raise MetadataLogError(
                f"cannot replay the batch at offset {batch.base_offset} of {path}: {str(exc).rstrip('.')}."
            ) from None
    return LoggedBatch(
        batch.base_offset,
        batch.last_offset,
        batch.partition_leader_epoch,
        batch.max_timestamp,
        records,
        batch.size,
        tuple(kraft),
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc).rstrip(".")
