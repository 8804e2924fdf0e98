"""One partition as this broker hosts it (Kafka's `Partition`): the local log and the controller's word on it.

The controller's registration says who leads, in which leader epoch, and which replicas are in sync;
this class holds the rules that follow from it, so that handlers and coordinators never re-derive them:
- only the leader takes appends, and acks=all needs an ISR of at least min(min.insync.replicas,
  replicas) (Kafka's effective minimum since 3.7);
- the high watermark is the lowest log end offset in the ISR and only moves forward
  (`maybe_increment_high_watermark`); with this broker the only replica it reaches the log end on every
  append, through the same call that followers' fetches will drive;
- consumers read up to the high watermark or the last stable offset, followers up to the log end, and
  a fetch naming a leader epoch or a last fetched epoch is checked against the log's (KIP-320).

Every change of the log end or high watermark is reported to the replica manager's purgatory, which
completes the delayed fetches and produces waiting on this partition (Kafka's DelayedOperations).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from kcli.broker.log import AppendInfo, AppendOrigin, FetchSlice, Log, OffsetOutOfRange
from kcli.broker.log.log import TxnMarker
from kcli.broker.metadata.image import PartitionRegistration
from kcli.broker.replication.purgatory import Purgatory


class PartitionError(Exception):
    """A request on this partition fails with `error_code` (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...)."""

    def __init__(self, error_code: ErrorCode) -> None:
        super().__init__(error_code.name)
        self.error_code = error_code


class FetchIsolation(Enum):
    """How far a fetch may read (Kafka's FetchIsolation)."""

    LOG_END = 0  # followers
    HIGH_WATERMARK = 1  # read_uncommitted consumers
    TXN_COMMITTED = 2  # read_committed consumers


class PartitionRead(NamedTuple):
    """A fetch's read of one partition: the offsets the answer carries and the records, if any."""

    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FetchSlice | None = None
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end offset) when the fetcher's last fetched epoch ends before its fetch offset."""


class Partition:
    def __init__(self, log: Log, node_id: int, purgatory: Purgatory) -> None:
        self.log = log
        self.topic = log.topic
        self.index = log.partition
        self.key = (log.topic, log.partition)
        self.node_id = node_id
        self.purgatory = purgatory
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self._sole_in_sync_replica = False

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, leader={self.leader_id}, epoch={self.leader_epoch}, "
            f"isr={list(self.isr)}, hw={self.log.high_watermark}, leo={self.log.log_end_offset})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    # --- the controller's word -----------------------------------------------------------------------

    def apply_registration(self, registration: PartitionRegistration) -> None:
        """Partition.makeLeader when this node leads in a new epoch; the high watermark follows any ISR
        change, and requests waiting on the partition re-check (a lost leadership fails them)."""
        becomes_leader = registration.leader == self.node_id and (
            self.leader_id != self.node_id or registration.leader_epoch != self.leader_epoch
        )
        changed = (registration.leader, registration.leader_epoch, registration.isr) != (
            self.leader_id,
            self.leader_epoch,
            self.isr,
        )
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = registration.replicas
        self.isr = registration.isr
        self._sole_in_sync_replica = self.isr == (self.node_id,)
        if becomes_leader:  # the new epoch starts at the log end
            self.log.assign_epoch_start_offset(registration.leader_epoch, self.log.log_end_offset)
        if self.maybe_increment_high_watermark() or changed:
            self.purgatory.check_and_complete(self.key)

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the lowest log end offset of the ISR, if that is higher.

        Only this broker's log end is known until followers fetch, so the ISR is this broker alone.
        """
        log = self.log
        if not (self._sole_in_sync_replica and self.leader_id == self.node_id):
            return False
        new_high_watermark = log.log_end_offset
        if new_high_watermark <= log.high_watermark:
            return False
        log.update_high_watermark(new_high_watermark)
        return True

    # --- leader appends ------------------------------------------------------------------------------

    def append_records_to_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        required_acks: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transaction_verified: bool = False,
    ) -> AppendInfo:
        """Append as leader, then move the high watermark. Raises PartitionError or the log's RecordError."""
        if self.leader_id != self.node_id:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        if required_acks == -1:
            self.check_enough_replicas(required_acks)
        log = self.log
        info = log.append_as_leader(
            records,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
            origin=origin,
            transaction_verified=transaction_verified,
        )
        if self._sole_in_sync_replica:  # maybe_increment_high_watermark, inlined on the produce path
            log.update_high_watermark(log.log_end_offset)
        self.purgatory.check_and_complete(self.key)
        return info

    def check_enough_replicas(self, required_acks: int) -> None:
        """acks=all needs an ISR of at least min(min.insync.replicas, replicas): NOT_ENOUGH_REPLICAS."""
        if required_acks == -1 and len(self.isr) < min(
            self.log.config.min_insync_replicas, len(self.replicas)
        ):
            raise PartitionError(ErrorCode.not_enough_replicas)

    def write_txn_markers(self, markers: list[TxnMarker], *, now_ms: int | None = None) -> list[AppendInfo]:
        """Transaction markers as leader (WriteTxnMarkers): they move the last stable offset."""
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        try:
            return self.log.write_txn_markers(markers, leader_epoch=self.leader_epoch, now_ms=now_ms)
        finally:  # markers before a refused one stay written
            self.maybe_increment_high_watermark()
            self.purgatory.check_and_complete(self.key)

    # --- reads -----------------------------------------------------------------------------------------

    def check_leader_epoch(self, requested: int) -> None:
        """Partition.checkCurrentLeaderEpoch: -1 means the client does not say."""
        if requested < 0 or requested == self.leader_epoch:
            return
        if self.leader_epoch > requested:
            raise PartitionError(ErrorCode.fenced_leader_epoch)
        raise PartitionError(ErrorCode.unknown_leader_epoch)

    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        replica_id: int = -1,
        read_committed: bool = False,
        min_one_batch: bool,
        current_leader_epoch: int = -1,
        last_fetched_epoch: int = -1,
    ) -> PartitionRead:
        """Partition.fetchRecords/readRecords for the leader: consumers (replica_id -1) read up to the high
        watermark or, read_committed, the last stable offset; a follower (one of the other replicas) up
        to the log end. Raises PartitionError, OffsetOutOfRange or the log's LogStorageError."""
        self.check_leader_epoch(current_leader_epoch)
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        if replica_id >= 0:
            if replica_id == self.node_id or replica_id not in self.replicas:
                raise PartitionError(
                    ErrorCode.unknown_leader_epoch
                    if current_leader_epoch >= 0
                    else ErrorCode.not_leader_or_follower
                )
            isolation = FetchIsolation.LOG_END
        elif read_committed:
            isolation = FetchIsolation.TXN_COMMITTED
        else:
            isolation = FetchIsolation.HIGH_WATERMARK
        log = self.log
        high_watermark = log.high_watermark
        last_stable_offset = log.last_stable_offset
        log_start_offset = log.log_start_offset
        if last_fetched_epoch >= 0:
            epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < 0 or end_offset < 0 or fetch_offset < log_start_offset:
                raise OffsetOutOfRange(f"offset {fetch_offset} with last fetched epoch is out of range")
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                return PartitionRead(
                    high_watermark, last_stable_offset, log_start_offset, diverging_epoch=(epoch, end_offset)
                )
        if isolation is FetchIsolation.LOG_END:
            upper_bound = log.log_end_offset
        elif isolation is FetchIsolation.TXN_COMMITTED:
            upper_bound = last_stable_offset
        else:
            upper_bound = high_watermark
        records = log.read(fetch_offset, max_bytes, upper_bound=upper_bound, min_one_batch=min_one_batch)
        return PartitionRead(high_watermark, last_stable_offset, log_start_offset, records)
