"""KRaft snapshot files: `bootstrap.checkpoint`, and `<offset>-<epoch>.checkpoint` under `__cluster_metadata-0`.

A snapshot is a run of magic v2 record batches, as Kafka's RecordsSnapshotWriter (and BatchFileWriter, which
writes the bootstrap file `kafka-storage format` leaves in the metadata log dir) lays them out:

- a control batch holding one SnapshotHeader control record (version 0, LastContainedLogTimestamp);
- data batches of metadata records: null key, the framed metadata record as value, every record at the
  batch's timestamp; a batch holds at most `MAX_BATCH_SIZE_BYTES`;
- a control batch holding one SnapshotFooter control record (version 0).

Offsets run on from the base offset (0 in the bootstrap file) across all three; every batch carries the
snapshot's epoch (0 in the bootstrap file) as its partition leader epoch, no producer, no compression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from formats.errors import CorruptRecordError
from formats.records import (
    RECORD_BATCH_OVERHEAD,
    Buffer,
    ControlType,
    RecordBatch,
    RecordSpec,
    SnapshotHeader,
    build_batch,
    build_kraft_control_batch,
    control_type,
    encode_snapshot_footer,
    encode_snapshot_header,
    snapshot_footer,
    snapshot_header,
)
from formats.segment import walk

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
"""The bootstrap snapshot's file name in the metadata log dir (Kafka's BootstrapDirectory)."""

MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024
"""KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the largest batch a snapshot writer builds."""

_RECORD_OVERHEAD = 16  # upper bound of a record's length, attributes, deltas, key and header-count varints


@dataclass(frozen=True, slots=True)
class KRaftSnapshot:
    """What a snapshot file holds: its header, its metadata records as (offset, value), its footer's
    version, and any other KRaft control records (KRaftVersion, KRaftVoters) as (offset, type, value)."""

    header: SnapshotHeader
    records: list[tuple[int, bytes]]
    footer_version: int
    control_records: list[tuple[int, ControlType, bytes]]


def build_snapshot(
    values: Sequence[bytes],
    *,
    timestamp: int,
    last_contained_log_timestamp: int = 0,
    base_offset: int = 0,
    epoch: int = 0,
    kraft_records: Sequence[tuple[ControlType, bytes]] = (),
) -> bytes:
    """The bytes of a snapshot holding `values` (encoded metadata records) between header and footer.

    `kraft_records` (KRaftVersion, then Voters, KIP-853) go into the header's control batch after the
    SnapshotHeader, as Kafka's RecordsSnapshotWriter writes them when kraft.version is 1."""
    header = build_kraft_control_batch(
        [
            (ControlType.SNAPSHOT_HEADER, encode_snapshot_header(last_contained_log_timestamp)),
            *kraft_records,
        ],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        timestamp=timestamp,
    )
    parts = [header]
    offset = base_offset + 1 + len(kraft_records)
    for chunk in _chunks(values):
        parts.append(
            build_batch(
                [RecordSpec(timestamp, None, value) for value in chunk],
                base_offset=offset,
                partition_leader_epoch=epoch,
            )
        )
        offset += len(chunk)
    footer = build_kraft_control_batch(
        [(ControlType.SNAPSHOT_FOOTER, encode_snapshot_footer())],
        base_offset=offset,
        partition_leader_epoch=epoch,
        timestamp=timestamp,
    )
    parts.append(footer)
    return b"".join(parts)


def read_snapshot(data: Buffer) -> KRaftSnapshot:
    """Parse a whole snapshot file; anything but header, data, footer in that order is a CorruptRecordError."""
    result = walk(data)
    problem = result.problem(data)
    if problem is not None:
        raise CorruptRecordError(f"{problem} (at position {result.stop})")
    if result.stop != len(memoryview(data)):
        raise CorruptRecordError(
            f"The snapshot ends with {len(memoryview(data)) - result.stop} bytes that are not a whole record batch"
        )
    header: SnapshotHeader | None = None
    footer: int | None = None
    records: list[tuple[int, bytes]] = []
    control: list[tuple[int, ControlType, bytes]] = []
    for batch in result.batches:
        if not isinstance(batch, RecordBatch):
            raise CorruptRecordError(
                f"Found a magic {batch.magic} message set at position {batch.position}; snapshots hold v2 batches only"
            )
        if batch.crc_valid is False:
            raise CorruptRecordError(f"The record batch at position {batch.position} fails its CRC check")
        if footer is not None:
            raise CorruptRecordError(
                f"Found a record batch after the SnapshotFooter, at position {batch.position}"
            )
        for record in batch.records(data):
            offset, key, value = record[0], record[2], record[3]
            if batch.is_control:
                kind = control_type(key)
                if kind is ControlType.SNAPSHOT_HEADER:
                    if header is not None or records or control:
                        raise CorruptRecordError(
                            f"Found a SnapshotHeader that is not the first record, at offset {offset}"
                        )
                    header = snapshot_header(value)
                elif kind is ControlType.SNAPSHOT_FOOTER:
                    footer = snapshot_footer(value)
                elif kind in (ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS):
                    control.append((offset, kind, bytes(value or b"")))
                else:
                    raise CorruptRecordError(
                        f"Unsupported control record type {kind.name} at offset {offset}"
                    )
            else:
                if value is None:
                    raise CorruptRecordError(f"The metadata record at offset {offset} has no value")
                records.append((offset, bytes(value)))
            if header is None:
                raise CorruptRecordError("The snapshot does not start with a SnapshotHeader control record")
    if header is None:
        raise CorruptRecordError("The snapshot is empty: it has no SnapshotHeader control record")
    if footer is None:
        raise CorruptRecordError("The snapshot does not end with a SnapshotFooter control record")
    return KRaftSnapshot(header, records, footer, control)


def _chunks(values: Sequence[bytes]) -> list[Sequence[bytes]]:
    """Split values into batches of at most MAX_BATCH_SIZE_BYTES, as Kafka's BatchAccumulator does."""
    chunks: list[Sequence[bytes]] = []
    start, size = 0, RECORD_BATCH_OVERHEAD
    for i, value in enumerate(values):
        needed = len(value) + _RECORD_OVERHEAD
        if i > start and size + needed > MAX_BATCH_SIZE_BYTES:
            chunks.append(values[start:i])
            start, size = i, RECORD_BATCH_OVERHEAD
        size += needed
    if start < len(values):
        chunks.append(values[start:])
    return chunks
