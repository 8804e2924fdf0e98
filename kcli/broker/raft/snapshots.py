"""Metadata snapshots on disk: `<end offset>-<epoch>.checkpoint` files in `__cluster_metadata-0`.

A snapshot holds the image as of its end offset (the offset after the last record it includes) in
Kafka's snapshot format: a SnapshotHeader control batch, the records, a SnapshotFooter. It is written
as `.checkpoint.part`, fsynced, then renamed, so a file without that suffix is always whole; a stray
`.part` (a crash while writing, or a download cut short) is removed at start-up. The bootstrap snapshot
(`00000000000000000000-0000000000.checkpoint`, KIP-853) is never one of these.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from formats.errors import FormatError
from formats.internal import MetadataRecord, decode_metadata_record
from formats.kraft_snapshot import read_snapshot
from kcli.files import fsync_dir

SUFFIX = ".checkpoint"
PART_SUFFIX = ".checkpoint.part"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """Kafka's OffsetAndEpoch of a snapshot: the end offset and the epoch of its last record."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


BOOTSTRAP_SNAPSHOT = SnapshotId(0, 0)


def list_snapshots(directory: Path) -> list[SnapshotId]:
    """The whole snapshots in `directory`, oldest first (the bootstrap snapshot left out)."""
    found = []
    for name in os.listdir(directory):
        match = _NAME.match(name)
        if match:
            snapshot_id = SnapshotId(int(match[1]), int(match[2]))
            if snapshot_id != BOOTSTRAP_SNAPSHOT:
                found.append(snapshot_id)
    return sorted(found)


def remove_partial_snapshots(directory: Path) -> None:
    for name in os.listdir(directory):
        if name.endswith(PART_SUFFIX):
            (directory / name).unlink(missing_ok=True)


def write_snapshot(directory: Path, snapshot_id: SnapshotId, data: bytes) -> Path:
    """Write `.part`, fsync, rename to the final name, fsync the directory."""
    part = directory / (snapshot_id.file_name.removesuffix(SUFFIX) + PART_SUFFIX)
    final = directory / snapshot_id.file_name
    with open(part, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, final)
    fsync_dir(directory)
    return final


def read_snapshot_records(directory: Path, snapshot_id: SnapshotId) -> list[MetadataRecord]:
    """The metadata records of a snapshot; FormatError when it is not a whole, readable snapshot."""
    data = (directory / snapshot_id.file_name).read_bytes()
    snapshot = read_snapshot(data)
    try:
        return [decode_metadata_record(value) for _, value in snapshot.records]
    except FormatError as exc:
        raise FormatError(f"{snapshot_id.file_name}: {str(exc).rstrip('.')}.") from None


def delete_snapshot(directory: Path, snapshot_id: SnapshotId) -> None:
    (directory / snapshot_id.file_name).unlink(missing_ok=True)
