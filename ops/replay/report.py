"""What a replay reports: its ReplayStats at the end, each PlannedBatch of a dry run, and its Progress.

Their JSON field names are the stable output of `kcli replay --output json`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from formats.compression import Codec


@dataclass
class ReplayStats:
    """What a replay did; records and bytes count what the destination acknowledged."""

    records: int = 0
    bytes: int = 0
    batches: int = 0
    raw_batches: int = 0
    rebuilt_batches: int = 0
    filtered_records: int = 0
    control_batches: int = 0
    aborted_records: int = 0
    corrupt_batches: int = 0
    corrupt_bytes: int = 0
    resumed_records: int = 0
    """Records skipped because an earlier run had them acknowledged (checkpoint or destination log end)."""
    source_bytes: int = 0
    idempotent: bool = False
    producer_id: int = -1
    elapsed: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class PlannedBatch:
    """One batch as it is (or, with --dry-run, would be) sent."""

    source: str
    first_offset: int
    last_offset: int
    partition: int
    records: int
    bytes: int
    raw: bool
    codec: Codec

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "batch",
            "source": self.source,
            "firstOffset": self.first_offset,
            "lastOffset": self.last_offset,
            "partition": self.partition,
            "records": self.records,
            "bytes": self.bytes,
            "mode": "raw" if self.raw else "record",
            "codec": self.codec.label,
        }

    def __str__(self) -> str:
        mode = "raw   " if self.raw else "record"
        return (
            f"{mode} {self.source} offsets {self.first_offset}..{self.last_offset} -> partition "
            f"{self.partition}: {self.records} records, {self.bytes} bytes, {self.codec.label}"
        )


Progress = Callable[[int, int, int], None]
"""(source bytes read, source bytes in total, records acknowledged)."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
