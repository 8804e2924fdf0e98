"""`__cluster_metadata-0` on disk: append whole record batches durably, replay them at start-up.

The files are Kafka's: 20-digit `.log` segments of v2 batches whose records have null keys and
metadata-record values, `partition_leader_epoch` = the controller (Raft) epoch, a
`leader-epoch-checkpoint`, `partition.metadata` with the metadata topic's fixed id
(AAAAAAAAAAAAAAAAAAAAAQ) and a `quorum-state` file. Each append is one batch written and fsynced
before it returns, so an operation is either wholly on disk or not there after `kill -9`.

Opening the log recovers it as Kafka's LogLoader recovers a segment: every batch is framed and its
CRC checked; the first incomplete or invalid unit and everything after it (later segments too) is
truncated away, and the loss is logged with exact offsets and byte counts. Metadata is small, so
every open re-validates the whole log and rewrites each segment's `.index` and `.timeindex` from
it (Kafka's sparse-entry rule, `index.interval.bytes` = 4096); appends then extend them.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from formats.checkpoints import (
    EpochEntry,
    PartitionMetadata,
    read_leader_epoch_checkpoint,
    uuid_to_base64,
    write_leader_epoch_checkpoint,
    write_partition_metadata,
)
from formats.errors import FormatError
from formats.index import encode_offset_entry, encode_time_entry
from formats.internal import MetadataRecord, decode_metadata_record
from formats.records import RecordBatch, RecordSpec, build_batch, read_batch
from formats.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    IndexEntries,
    SegmentIndexer,
    base_offset_of,
    filename,
)
from kcli.config import CLUSTER_METADATA_TOPIC, BrokerConfig
from kcli.errors import KcliError
from ops.logdir import SegmentReader

log = logging.getLogger("kcli.broker.metadata")

CLUSTER_METADATA_PARTITION_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
CLUSTER_METADATA_TOPIC_ID = uuid.UUID(int=1)  # Topic.CLUSTER_METADATA_TOPIC_ID, "AAAAAAAAAAAAAAAAAAAAAQ"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
QUORUM_STATE = "quorum-state"
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024  # metadata.log.segment.bytes
INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes: KafkaMetadataLog keeps LogConfig's default


class MetadataLogError(KcliError):
    """The metadata log cannot be opened, read or written; the broker cannot run without it."""


def metadata_log_dir(config: BrokerConfig) -> Path:
    """`<metadata.log.dir or the first log dir>/__cluster_metadata-0`, as Kafka places it."""
    base = config["metadata.log.dir"] or config.log_dirs[0]
    return Path(str(base)) / CLUSTER_METADATA_PARTITION_DIR


@dataclass(frozen=True, slots=True)
class Truncation:
    """What start-up recovery cut off: from `offset` (the first offset lost), `bytes` in all."""

    segment: Path
    position: int
    offset: int
    bytes: int
    deleted_segments: tuple[Path, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class LoggedBatch:
    """One batch as replayed: its offsets, epoch, append time and decoded records (control batches: none)."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    append_time_ms: int
    records: tuple[tuple[MetadataRecord, int], ...]


@dataclass
class _Segment:
    """A segment and the sparse-index state of its appends (Kafka's LogSegment, minus the mmaps)."""

    base_offset: int
    path: Path
    size: int
    indexer: SegmentIndexer = field(default_factory=lambda: SegmentIndexer(INDEX_INTERVAL_BYTES))

    @property
    def index_path(self) -> Path:
        return self.path.with_name(filename(self.base_offset, INDEX_SUFFIX))

    @property
    def time_index_path(self) -> Path:
        return self.path.with_name(filename(self.base_offset, TIME_INDEX_SUFFIX))

    def add_index_entries(self, entries: IndexEntries) -> None:
        if entries.offset_entry is not None:
            _append(self.index_path, encode_offset_entry(self.base_offset, *entries.offset_entry))
        if entries.time_entry is not None:
            _append(self.time_index_path, encode_time_entry(self.base_offset, *entries.time_entry))

    def finish_time_index(self) -> None:
        """The time entry Kafka adds when a segment is rolled, closed or recovered."""
        entry = self.indexer.final_time_entry()
        if entry is not None:
            _append(self.time_index_path, encode_time_entry(self.base_offset, *entry))


@dataclass
class MetadataLog:
    """The metadata partition's directory; construct with `MetadataLog.open`."""

    directory: Path
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    truncation: Truncation | None = None
    _segments: list[_Segment] = field(default_factory=list)
    _epochs: list[EpochEntry] = field(default_factory=list)
    _next_offset: int = 0
    _file: object = None

    @classmethod
    def open(cls, directory: str | os.PathLike, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> MetadataLog:
        """Create or open the directory, recover its segments and position at the end."""
        path = Path(directory)
        try:
            path.mkdir(parents=True, exist_ok=True)
            metadata_log = cls(path, segment_bytes=segment_bytes)
            metadata_log._recover()
            metadata_log._write_partition_metadata()
        except OSError as exc:
            raise MetadataLogError(
                f"cannot open the metadata log in {path}: {(exc.strerror or str(exc)).lower()}."
            ) from None
        return metadata_log

    @property
    def next_offset(self) -> int:
        """The log end offset: where the next batch goes."""
        return self._next_offset

    @property
    def is_empty(self) -> bool:
        return self._next_offset == 0

    @property
    def segments(self) -> list[Path]:
        return [segment.path for segment in self._segments]

    @property
    def epochs(self) -> list[EpochEntry]:
        """(epoch, start offset) of every leader epoch in the log, as in leader-epoch-checkpoint."""
        return list(self._epochs)

    def batches(self) -> Iterator[LoggedBatch]:
        """Every batch from the start, records decoded; raises MetadataLogError on an undecodable record."""
        for segment in list(self._segments):
            reader = SegmentReader(segment.path, check_crc=False, max_bytes=segment.size)
            for chunk in reader.chunks():
                for batch in chunk.batches:
                    yield _logged_batch(segment.path, chunk.view, batch)

    def records(self) -> Iterator[tuple[MetadataRecord, int]]:
        """(record, offset) of every metadata record in log order."""
        for batch in self.batches():
            yield from batch.records

    def append(self, values: Sequence[bytes], *, leader_epoch: int, now_ms: int) -> tuple[int, int]:
        """Write `values` (encoded metadata records) as one batch and fsync it; returns (base, last) offset."""
        if not values:
            raise ValueError("a metadata batch needs at least one record")
        base_offset = self._next_offset
        batch = build_batch(
            [RecordSpec(now_ms, None, value) for value in values],
            base_offset=base_offset,
            partition_leader_epoch=leader_epoch,
        )
        try:
            self._write(batch, base_offset)
            if not self._epochs or leader_epoch > self._epochs[-1].epoch:
                self._epochs.append(EpochEntry(leader_epoch, base_offset))
                self._write_epoch_checkpoint()
        except OSError as exc:
            raise MetadataLogError(
                f"cannot append to the metadata log in {self.directory}: {(exc.strerror or str(exc)).lower()}."
            ) from None
        self._next_offset = base_offset + len(values)
        return base_offset, self._next_offset - 1

    def write_quorum_state(self, leader_id: int, leader_epoch: int) -> None:
        """Record this node as the elected leader of `leader_epoch` (quorum-state data_version 1)."""
        state = {
            "leaderId": leader_id,
            "leaderEpoch": leader_epoch,
            "votedId": -1,
            "votedDirectoryId": uuid_to_base64(uuid.UUID(int=0)),
            "data_version": 1,
        }
        _write_atomically(self.directory / QUORUM_STATE, json.dumps(state, separators=(",", ":")).encode())

    def close(self) -> None:
        """Close the active segment (with its final time-index entry, as Kafka closes one)."""
        self._close_file()
        if self._segments:
            self._segments[-1].finish_time_index()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()  # type: ignore[attr-defined]
            self._file = None

    # --- recovery ---------------------------------------------------------------------------------

    def _recover(self) -> None:
        found = sorted(
            (base, entry)
            for entry in self.directory.iterdir()
            if entry.name.endswith(LOG_SUFFIX) and (base := base_offset_of(entry.name)) is not None
        )
        segments: list[_Segment] = []
        epochs: list[EpochEntry] = []
        next_offset = 0
        for index, (base, path) in enumerate(found):
            segment = _Segment(base, path, 0)
            valid, next_offset, stop = _recover_segment(segment, epochs)
            size = path.stat().st_size
            segments.append(segment)
            if valid < size:
                later = tuple(p for _, p in found[index + 1 :])
                self._truncate(path, valid, next_offset, size - valid, later, stop)
                break
        self._segments = segments
        self._epochs = epochs
        self._next_offset = next_offset if segments else 0
        self._sync_epoch_checkpoint()

    def _truncate(
        self, path: Path, position: int, offset: int, dropped: int, later: tuple[Path, ...], reason: str
    ) -> None:
        later_bytes = sum(p.stat().st_size for p in later)
        with open(path, "r+b") as f:
            f.truncate(position)
            os.fsync(f.fileno())
        for extra in later:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                extra.with_suffix(suffix).unlink(missing_ok=True)
            extra.unlink()
        _fsync_dir(self.directory)
        self.truncation = Truncation(path, position, offset, dropped + later_bytes, later, reason)
        log.warning(
            "metadata log recovery: %s at byte %d of %s; truncated %d byte(s) from offset %d%s",
            reason,
            position,
            path.name,
            dropped,
            offset,
            f" and deleted {len(later)} later segment(s) ({later_bytes} bytes)" if later else "",
        )

    def _sync_epoch_checkpoint(self) -> None:
        """Make leader-epoch-checkpoint say what the batches say (Kafka truncates its cache the same way)."""
        path = self.directory / LEADER_EPOCH_CHECKPOINT
        try:
            current = read_leader_epoch_checkpoint(path.read_text())
        except (OSError, FormatError):
            current = None
        if current != self._epochs:
            self._write_epoch_checkpoint()

    def _write_epoch_checkpoint(self) -> None:
        text = write_leader_epoch_checkpoint(self._epochs)
        _write_atomically(self.directory / LEADER_EPOCH_CHECKPOINT, text.encode())

    def _write_partition_metadata(self) -> None:
        path = self.directory / PARTITION_METADATA
        if not path.exists():
            text = write_partition_metadata(PartitionMetadata(0, CLUSTER_METADATA_TOPIC_ID))
            _write_atomically(path, text.encode())

    # --- appending --------------------------------------------------------------------------------

    def _write(self, batch: bytes, base_offset: int) -> None:
        active = self._segments[-1] if self._segments else None
        if active is None or (active.size > 0 and active.size + len(batch) > self.segment_bytes):
            self._roll(base_offset)
            active = self._segments[-1]
        f = self._active_file(active)
        try:
            f.write(batch)
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            # Leave no partial batch behind: the next append must start on a batch boundary.
            self._close_file()
            with open(active.path, "r+b") as raw:
                raw.truncate(active.size)
            raise
        header = read_batch(batch)
        active.add_index_entries(
            active.indexer.append(active.size, header.last_offset, header.max_timestamp, len(batch))
        )
        active.size += len(batch)

    def _roll(self, base_offset: int) -> None:
        self.close()
        segment = _Segment(base_offset, self.directory / filename(base_offset, LOG_SUFFIX), 0)
        for path in (segment.path, segment.index_path, segment.time_index_path):
            path.write_bytes(b"")
        _fsync_dir(self.directory)
        self._segments.append(segment)

    def _active_file(self, active: _Segment):  # noqa: ANN202 - a binary file object
        if self._file is None:
            self._file = open(active.path, "ab")  # noqa: SIM115 - kept open between appends
        return self._file


def _recover_segment(segment: _Segment, epochs: list[EpochEntry]) -> tuple[int, int, str]:
    """LogSegment.recover: walk the batches, rebuild both indexes from them, stop at the first bad one.

    Returns (valid bytes, next offset after them, why the walk stopped early or "").
    """
    reader = SegmentReader(segment.path, check_crc=True)
    valid, next_offset, stop = 0, segment.base_offset, ""
    offset_index, time_index = bytearray(), bytearray()
    indexer = segment.indexer
    for chunk in reader.chunks():
        for batch in chunk.batches:
            if not isinstance(batch, RecordBatch):
                stop = f"a magic v{batch.magic} message (the metadata log is v2 only)"
                break
            if not batch.crc_valid:
                stop = f"a batch at offset {batch.base_offset} failed its CRC check"
                break
            epoch = batch.partition_leader_epoch
            if epoch >= 0 and (not epochs or epoch > epochs[-1].epoch):
                epochs.append(EpochEntry(epoch, batch.base_offset))
            entries = indexer.append(valid, batch.last_offset, batch.max_timestamp, batch.size)
            if entries.offset_entry is not None:
                offset_index += encode_offset_entry(segment.base_offset, *entries.offset_entry)
            if entries.time_entry is not None:
                time_index += encode_time_entry(segment.base_offset, *entries.time_entry)
            valid = chunk.base + batch.position + batch.size
            next_offset = batch.next_offset
        if stop:
            break
    end = reader.end
    if not stop and end is not None and end.position < end.file_size:
        stop = end.problem or "an incomplete batch (torn write)"
    final = indexer.final_time_entry()
    if final is not None:
        time_index += encode_time_entry(segment.base_offset, *final)
    segment.index_path.write_bytes(bytes(offset_index))
    segment.time_index_path.write_bytes(bytes(time_index))
    segment.size = valid
    return valid, next_offset, stop


def _logged_batch(path: Path, view: memoryview, batch: RecordBatch) -> LoggedBatch:
    records: tuple[tuple[MetadataRecord, int], ...] = ()
    if not batch.is_control:
        try:
            records = tuple(
                (decode_metadata_record(record.value), record.offset) for record in batch.records(view)
            )
        except FormatError as exc:
            raise MetadataLogError(
                f"cannot replay the batch at offset {batch.base_offset} of {path}: {str(exc).rstrip('.')}."
            ) from None
    return LoggedBatch(
        batch.base_offset, batch.last_offset, batch.partition_leader_epoch, batch.max_timestamp, records
    )


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write a sibling temp file, fsync it, rename it over `path` (Kafka's checkpoint discipline)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
