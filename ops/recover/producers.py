"""Producer state rebuilt from a partition's batches, as Kafka's loader rebuilds it at an unclean start
(UnifiedLog.rebuildProducerState: the latest snapshot, then every batch after it, taken as replicated
batches are, without checks), for the producer snapshots and transaction indexes `kcli recover logdir`
writes. A snapshot file keeps one batch per producer, so that is all a `ProducerFold` keeps."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from formats.errors import FormatError
from formats.index import AbortedTxn
from formats.records import ControlType, RecordBatch, control_type, end_txn_marker
from formats.snapshot import ProducerSnapshotEntry, write_snapshot

PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""producer.id.expiration.ms's default: a snapshot's producers idle longer are not loaded again."""


@dataclass
class ProducerFold:
    """Producers by id, from a snapshot's entries on, with each batch fed in offset order."""

    producers: dict[int, ProducerSnapshotEntry]

    @classmethod
    def from_snapshot(cls, entries: Iterable[ProducerSnapshotEntry], now_ms: int) -> ProducerFold:
        """The state a snapshot loads to: producers idle past the expiration are left out (Kafka's
        loadFromSnapshot)."""
        return cls({e.producer_id: e for e in entries if now_ms - e.timestamp < PRODUCER_ID_EXPIRATION_MS})

    def feed(self, batch: RecordBatch, data: bytes | memoryview) -> AbortedTxn | None:
        """Take one v2 batch; returns the aborted transaction its ABORT marker completes (for .txnindex)."""
        if batch.magic != 2 or batch.producer_id < 0:
            return None
        known = self.producers.get(batch.producer_id)
        if batch.is_control:  # a control batch: a transaction marker ends the open transaction
            return self._marker(batch, data, known)
        txn_first = known.current_txn_first_offset if known is not None else -1
        if batch.is_transactional and txn_first < 0:
            txn_first = batch.base_offset
        self.producers[batch.producer_id] = ProducerSnapshotEntry(
            batch.producer_id,
            batch.producer_epoch,
            batch.last_sequence if batch.base_sequence >= 0 else -1,
            batch.last_offset,
            batch.last_offset_delta,
            batch.max_timestamp,
            known.coordinator_epoch if known is not None else -1,
            txn_first,
        )
        return None

    def _marker(
        self, batch: RecordBatch, data: bytes | memoryview, known: ProducerSnapshotEntry | None
    ) -> AbortedTxn | None:
        try:
            record = next(iter(batch.records(data)), None)
            kind = control_type(record.key) if record is not None else None
            coordinator_epoch = end_txn_marker(record.value).coordinator_epoch if record is not None else -1
        except FormatError:
            return None
        if record is None or kind not in (ControlType.COMMIT, ControlType.ABORT):
            return None
        if known is None or known.epoch != batch.producer_epoch:  # a new epoch forgets the last batch
            known = ProducerSnapshotEntry(batch.producer_id, batch.producer_epoch, -1, -1, 0, -1, -1,
                                          known.current_txn_first_offset if known is not None else -1)  # fmt: skip
        first = known.current_txn_first_offset if known.current_txn_first_offset >= 0 else batch.base_offset
        self.producers[batch.producer_id] = replace(
            known,
            coordinator_epoch=coordinator_epoch,
            current_txn_first_offset=-1,
            timestamp=record.timestamp,  # the marker's own, as Kafka's appendEndTxnMarker takes it
        )
        if kind != ControlType.ABORT:
            return None
        others = [
            p.current_txn_first_offset for p in self.producers.values() if p.current_txn_first_offset >= 0
        ]
        return AbortedTxn(
            0, batch.producer_id, first, batch.base_offset, min(others, default=batch.base_offset + 1)
        )

    def snapshot(self) -> bytes:
        """The `.snapshot` file of the state so far, producers by id."""
        return write_snapshot(self.producers[p] for p in sorted(self.producers))

    @property
    def open_transactions(self) -> int:
        return sum(1 for p in self.producers.values() if p.current_txn_first_offset >= 0)
