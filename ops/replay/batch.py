"""The unit of a replay: an OutBatch, which the source walk makes, the sender sends and the replayer
accounts for once acknowledged; and SourceDone, which the walk puts after a source partition's last one.
"""

from __future__ import annotations

from formats.compression import Codec
from formats.records import Record, build_batch, set_producer_state
from ops.replay.report import PlannedBatch


class OutBatch:
    """One batch for the destination: raw bytes of a source batch, or records to build."""

    __slots__ = (
        "partition",
        "index",
        "source_index",
        "source",
        "raw",
        "specs",
        "codec",
        "count",
        "size",
        "runs",
        "payload",
        "attempts",
        "failed_at",
    )

    def __init__(self, partition: int, source_index: int, source: str) -> None:
        self.partition = partition
        self.index = -1  # this batch's number among its partition's batches, in generation order
        self.source_index = source_index
        self.source = source
        self.raw: bytearray | bytes | None = None  # a copy of the source batch, stamped in place by encode()
        self.specs: list[Record] = []
        self.codec = Codec.NONE
        self.count = 0
        self.size = 0
        self.runs: list[list[int]] = []  # [source offset, index in batch, count] of consecutive offsets
        self.payload: bytes | bytearray = b""
        self.attempts = 0
        self.failed_at: float | None = None
        """When (event-loop time) its first send failed: retries stop DELIVERY_TIMEOUT_S later."""

    def encode(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        if self.raw is not None:
            set_producer_state(
                self.raw, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
            )
            self.payload = self.raw
        else:
            self.payload = build_batch(
                self.specs,
                codec=self.codec,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
            )
        self.specs = []

    def planned(self) -> PlannedBatch:
        first = self.runs[0][0]
        last = self.runs[-1][0] + self.runs[-1][2] - 1
        size = len(self.raw) if self.raw is not None else len(self.payload) or self.size
        return PlannedBatch(
            self.source, first, last, self.partition, self.count, size, self.raw is not None, self.codec
        )


class SourceDone:
    """The end of a source partition's batches."""

    __slots__ = ("source_index",)

    def __init__(self, source_index: int) -> None:
        self.source_index = source_index
