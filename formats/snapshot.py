"""Producer state snapshots: the ``<offset>.snapshot`` files of a partition directory.

A snapshot is what lets a broker restore idempotent-producer and transaction state without
replaying the whole log. Layout (Kafka's ``ProducerSnapshot`` schema, version 1, unchanged since
0.11): ``int16 version``, ``uint32 CRC-32C of bytes [6, EOF)``, ``int32 count``, then ``count``
entries of 46 bytes. Reading follows ``ProducerStateManager.readSnapshot``: version first, then
the structure, then the CRC, with Kafka's messages.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from formats._native import crc32c
from formats.errors import CorruptSnapshotError

__all__ = [
    "SNAPSHOT_ENTRY_SIZE",
    "SNAPSHOT_VERSION",
    "ProducerSnapshotEntry",
    "decrement_sequence",
    "format_snapshot_entry",
    "read_snapshot",
    "write_snapshot",
]

SNAPSHOT_VERSION = 1
SNAPSHOT_ENTRY_SIZE = 46

_HEADER = struct.Struct(">hIi")  # version, crc, number of entries
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_OFFSET = 2
_ENTRIES_OFFSET = 6  # the CRC covers everything from here to the end of the file

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's state, field for field as stored (``ProducerSnapshot.ProducerEntry``).

    ``last_offset < 0`` means the producer has no batch metadata (for example only markers);
    ``current_txn_first_offset`` is -1 when no transaction is open.
    """

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int

    @property
    def has_batch_metadata(self) -> bool:
        """Whether the entry carries the last batch's metadata (Kafka reads it only then)."""
        return self.last_offset >= 0

    @property
    def first_sequence(self) -> int:
        """First sequence of the last batch; sequences wrap from Int32.MAX to 0."""
        return decrement_sequence(self.last_sequence, self.offset_delta)

    @property
    def first_offset(self) -> int:
        """First offset of the last batch."""
        return _wrap64(self.last_offset - self.offset_delta)


def read_snapshot(data: bytes | bytearray | memoryview) -> list[ProducerSnapshotEntry]:
    """The producer entries of a ``.snapshot`` file; raises ``CorruptSnapshotError``."""
    view = memoryview(data).cast("B")
    if len(view) < 2:
        raise _schema_error(f"the file has {len(view)} bytes, too few for the version")
    (version,) = struct.unpack_from(">h", view, 0)
    if version != SNAPSHOT_VERSION:
        raise _schema_error(f"Snapshot contained an unknown file version {version}")
    if len(view) < _HEADER.size:
        raise _schema_error(f"the file has {len(view)} bytes, too few for the CRC and entry count")
    _, stored_crc, count = _HEADER.unpack_from(view, 0)
    remaining = len(view) - _HEADER.size
    if count < 0:
        raise _schema_error("non-nullable field producerEntries was serialized as null")
    if count * SNAPSHOT_ENTRY_SIZE > remaining:
        raise _schema_error(
            f"{count} entries need {count * SNAPSHOT_ENTRY_SIZE} bytes but only {remaining} bytes remain"
        )

    computed_crc = crc32c(view[_ENTRIES_OFFSET:])
    if stored_crc != computed_crc:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored_crc}. "
            f"Computed crc: {computed_crc}"
        )
    # Bytes after the last entry are covered by the CRC and ignored, as Kafka's reader does.
    entries_end = _HEADER.size + count * SNAPSHOT_ENTRY_SIZE
    return [ProducerSnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(view[_HEADER.size : entries_end])]


def write_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The bytes of a version 1 ``.snapshot`` file holding ``entries`` in the given order."""
    body = bytearray(_HEADER.size)
    count = 0
    for entry in entries:
        try:
            body += _ENTRY.pack(
                entry.producer_id,
                entry.epoch,
                entry.last_sequence,
                entry.last_offset,
                entry.offset_delta,
                entry.timestamp,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
        except struct.error as e:
            raise ValueError(f"{entry} has a field out of range for its type") from e
        count += 1
    struct.pack_into(">h", body, 0, SNAPSHOT_VERSION)
    struct.pack_into(">i", body, _ENTRIES_OFFSET, count)
    struct.pack_into(">I", body, _CRC_OFFSET, crc32c(memoryview(body)[_ENTRIES_OFFSET:]))
    return bytes(body)


def format_snapshot_entry(entry: ProducerSnapshotEntry) -> str:
    """The line ``kafka-dump-log`` (3.5+) prints for one producer.

    The batch part is printed only when the entry has batch metadata; without it the line ends
    with the space that follows ``lastTimestamp``, as Kafka's does.
    """
    if entry.current_txn_first_offset >= 0:
        current_txn_first_offset = f"OptionalLong[{entry.current_txn_first_offset}]"
    else:
        current_txn_first_offset = "OptionalLong.empty"
    line = (
        f"producerId: {entry.producer_id} producerEpoch: {entry.epoch} "
        f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: {current_txn_first_offset} "
        f"lastTimestamp: {entry.timestamp} "
    )
    if entry.has_batch_metadata:
        line += (
            f"firstSequence: {entry.first_sequence} lastSequence: {entry.last_sequence} "
            f"lastOffset: {entry.last_offset} offsetDelta: {entry.offset_delta} timestamp: {entry.timestamp}"
        )
    return line


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on Kafka's sequence ring, which wraps from Int32.MAX to 0.

    Kafka's ``DefaultRecordBatch.decrementSequence``, with Java's int overflow kept so garbage
    entries print the same numbers Kafka's tools print.
    """
    if sequence < decrement:
        return _wrap32(_wrap32(_INT32_MAX - _wrap32(decrement - sequence)) + 1)
    return _wrap32(sequence - decrement)


def _schema_error(detail: str) -> CorruptSnapshotError:
    """Kafka wraps every structural problem (the unknown version too) in this one sentence."""
    return CorruptSnapshotError(f"Snapshot failed schema validation: {detail}")


def _wrap32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def _wrap64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63
