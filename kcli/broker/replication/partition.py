"""One partition as this broker hosts it (Kafka's `Partition`): the local log and the controller's word on it.

The controller's registration says who leads, in which leader epoch, and which replicas are in sync;
this class holds the rules that follow from it, so that handlers, coordinators and fetchers never
re-derive them:
- only the leader takes appends, and acks=all needs an ISR of at least min(min.insync.replicas,
  replicas) (Kafka's effective minimum since 3.7);
- the leader learns each follower's log end from its fetches (`Replica`); the high watermark is the
  lowest log end in the maximal ISR and moves only forward, and only while the ISR has at least the
  effective minimum (Kafka 3.7's strict min ISR, KIP-966 part 1);
- the leader grows the ISR with a follower that caught up and shrinks it by the ones that lagged more
  than replica.lag.time.max.ms, through AlterPartition to the controller; while one is in flight the
  maximal ISR (the larger of the two) bounds the high watermark and acks;
- a follower appends what its fetcher brings, with the leader's offsets and epochs, and takes the
  leader's high watermark up to its own log end;
- consumers read up to the high watermark or the last stable offset, followers up to the log end, and
  a fetch naming a leader epoch or a last fetched epoch is checked against the log's (KIP-320).

Every change of the log end or high watermark is reported to the replica manager's purgatory, which
completes the delayed fetches and produces waiting on this partition (Kafka's DelayedOperations).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from kcli.broker.log import (
    AppendInfo,
    AppendOrigin,
    FetchSlice,
    Log,
    OffsetOutOfRange,
    UnexpectedAppendOffset,
)
from kcli.broker.log.log import TxnMarker
from kcli.broker.metadata.image import PartitionRegistration
from kcli.broker.replication.purgatory import Purgatory
from kcli.broker.replication.replica import Replica

CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
"""FetchRequest.DEBUGGING_CONSUMER_ID: a debugging read; in kcli it reads any replica to its log end."""
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000


def monotonic_ms() -> int:
    """The clock of followers' fetch and catch-up times (never the wall clock, which may jump)."""
    return time.monotonic_ns() // 1_000_000


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
    preferred_read_replica: int = -1
    """KIP-392: the replica the consumer should fetch from instead (then no records are read)."""


class PendingIsrChange(NamedTuple):
    """An AlterPartition in flight (Kafka's PendingExpandIsr / PendingShrinkIsr)."""

    isr: tuple[int, ...]
    """The ISR asked for."""
    maximal_isr: tuple[int, ...]
    """What bounds the HW and acks meanwhile: the larger of the committed and the asked-for ISR."""
    leader_epoch: int
    partition_epoch: int


AlterIsr = Callable[["Partition", PendingIsrChange], None]
"""Hands a partition's ISR change to the AlterPartitionManager."""
ReplicaEligible = Callable[[int, int], bool]
"""Whether a broker (id, broker epoch from its fetch) may join an ISR: registered, unfenced, not shutting down."""


class Partition:
    def __init__(
        self,
        log: Log,
        node_id: int,
        purgatory: Purgatory,
        *,
        alter_isr: AlterIsr | None = None,
        replica_eligible: ReplicaEligible | None = None,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    ) -> None:
        self.log = log
        self.topic = log.topic
        self.index = log.partition
        self.key = (log.topic, log.partition)
        self.node_id = node_id
        self.purgatory = purgatory
        self.alter_isr = alter_isr
        self.replica_eligible = replica_eligible or (lambda broker_id, broker_epoch: True)
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.leader_epoch_start_offset = -1
        self.replicas: tuple[int, ...] = ()
        self.adding_replicas: tuple[int, ...] = ()
        self.removing_replicas: tuple[int, ...] = ()
        """A reassignment under way (KIP-455): `replicas` holds both lists, so the adding replicas are
        followers like the others (fetching, counted for the high watermark once caught up, able to
        join the ISR) and the removing ones stay followers until the reassignment completes."""
        self.isr: tuple[int, ...] = ()
        self.pending_isr: PendingIsrChange | None = None
        self.remote_replicas: dict[int, Replica] = {}
        self._sole_replica = False
        """This broker is the only replica: every append is committed at once (the produce fast path)."""

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, leader={self.leader_id}, epoch={self.leader_epoch}, "
            f"isr={list(self.isr)}, hw={self.log.high_watermark}, leo={self.log.log_end_offset})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def is_adding_replica(self, broker_id: int) -> bool:
        return broker_id in self.adding_replicas

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR, or while an AlterPartition is in flight, the larger of it and the new one."""
        return self.isr if self.pending_isr is None else self.pending_isr.maximal_isr

    @property
    def effective_min_isr(self) -> int:
        return min(self.log.config.min_insync_replicas, len(self.replicas))

    # --- the controller's word -----------------------------------------------------------------------

    def apply_registration(self, registration: PartitionRegistration) -> bool:
        """Partition.makeLeader / makeFollower. Returns True when this broker follows a new leader or
        leader epoch, so its fetcher must (re)start; an ISR-only change does not disturb a follower.

        A registration older than what this partition holds (a lower partition epoch) is ignored. A new
        leader epoch starts at the log end; a leader that is new forgets what it knew of followers.
        """
        if (
            registration.partition_epoch < self.partition_epoch
            and registration.leader_epoch <= self.leader_epoch
        ):
            return False
        new_leadership = (
            registration.leader != self.leader_id or registration.leader_epoch != self.leader_epoch
        )
        if (
            not new_leadership
            and registration.partition_epoch == self.partition_epoch
            and registration.replicas == self.replicas
        ):
            return False
        was_leader = self.is_leader
        now_ms = monotonic_ms()
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = registration.replicas
        self.adding_replicas = registration.adding_replicas
        self.removing_replicas = registration.removing_replicas
        self.isr = registration.isr
        self.pending_isr = None
        self._sole_replica = self.replicas == (self.node_id,) and self.isr == (self.node_id,)
        for gone in [r for r in self.remote_replicas if r not in self.replicas]:
            del self.remote_replicas[gone]
        for broker_id in self.replicas:
            if broker_id != self.node_id and broker_id not in self.remote_replicas:
                self.remote_replicas[broker_id] = Replica(broker_id)
        if self.is_leader:
            if new_leadership:  # the new epoch starts at the log end
                self.leader_epoch_start_offset = self.log.log_end_offset
                self.log.assign_epoch_start_offset(registration.leader_epoch, self.leader_epoch_start_offset)
                for replica in self.remote_replicas.values():
                    replica.reset(now_ms, in_isr=replica.broker_id in self.isr, keep_log_end=was_leader)
            self.maybe_increment_high_watermark()
        else:
            self.leader_epoch_start_offset = -1
        self.purgatory.check_and_complete(self.key)
        return new_leadership and not self.is_leader and self.leader_id >= 0

    # --- the leader: followers, ISR and high watermark ----------------------------------------------

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, leader_end_offset: int,
        now_ms: int, broker_epoch: int = -1,
    ) -> None:  # fmt: skip
        """A follower fetched from `fetch_offset`: that is its log end. Then maybe grow the ISR and move
        the high watermark (Partition.updateFollowerFetchState)."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return
        previous = replica.log_end_offset
        replica.update_fetch_state(fetch_offset, log_start_offset, leader_end_offset, now_ms, broker_epoch)
        self.maybe_expand_isr(replica, now_ms)
        if replica.log_end_offset != previous and self.maybe_increment_high_watermark(now_ms):
            self.purgatory.check_and_complete(self.key)

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Partition.maybeIncrementLeaderHW: the lowest log end among the maximal ISR and the followers
        about to join it; only forward, and not at all while the ISR is short of the effective minimum."""
        if not self.is_leader:
            return False
        log = self.log
        if len(self.isr) < self.effective_min_isr:
            return False
        leader_end = log.log_end_offset
        candidate = leader_end
        maximal = self.maximal_isr
        now_ms = monotonic_ms() if now_ms is None else now_ms
        for replica in self.remote_replicas.values():
            if replica.log_end_offset >= candidate:
                continue
            if replica.broker_id in maximal or (
                replica.is_caught_up(leader_end, now_ms, self.replica_lag_time_max_ms)
                and self.replica_eligible(replica.broker_id, replica.broker_epoch)
            ):
                candidate = replica.log_end_offset
        if candidate <= log.high_watermark:
            return False
        log.update_high_watermark(candidate)
        return True

    def maybe_expand_isr(self, replica: Replica, now_ms: int) -> None:
        """Partition.maybeExpandIsr: a follower holding everything up to the HW and the current leader
        epoch's start joins the ISR, asked of the controller; none while another change is in flight."""
        if self.pending_isr is not None or self.alter_isr is None or replica.broker_id in self.isr:
            return
        end = replica.log_end_offset
        if (
            end < self.log.high_watermark
            or end < self.leader_epoch_start_offset
            or self.leader_epoch_start_offset < 0
        ):
            return
        if not self.replica_eligible(replica.broker_id, replica.broker_epoch):
            return
        new_isr = (*self.isr, replica.broker_id)
        self._submit(PendingIsrChange(new_isr, new_isr, self.leader_epoch, self.partition_epoch))

    def maybe_shrink_isr(self, now_ms: int | None = None) -> None:
        """Partition.maybeShrinkIsr: drop followers that lagged more than replica.lag.time.max.ms; the HW
        stays bound by the old ISR until the controller has committed the smaller one."""
        if not self.is_leader or self.pending_isr is not None or self.alter_isr is None:
            return
        leader_end = self.log.log_end_offset
        now_ms = monotonic_ms() if now_ms is None else now_ms
        lagging = {
            broker_id
            for broker_id in self.isr
            if broker_id != self.node_id and not self._caught_up(broker_id, leader_end, now_ms)
        }
        if not lagging:
            return
        new_isr = tuple(b for b in self.isr if b not in lagging)
        self._submit(PendingIsrChange(new_isr, self.isr, self.leader_epoch, self.partition_epoch))

    def _caught_up(self, broker_id: int, leader_end: int, now_ms: int) -> bool:
        replica = self.remote_replicas.get(broker_id)
        return replica is not None and replica.is_caught_up(leader_end, now_ms, self.replica_lag_time_max_ms)

    def _submit(self, change: PendingIsrChange) -> None:
        self.pending_isr = change
        assert self.alter_isr is not None
        self.alter_isr(self, change)

    def complete_isr_change(
        self, change: PendingIsrChange, error: ErrorCode, isr: tuple[int, ...], leader_epoch: int,
        partition_epoch: int,
    ) -> bool:  # fmt: skip
        """The controller's answer to `change` (Partition.handleAlterPartitionUpdate/Error). Returns
        True when the change must be sent again (an error worth retrying)."""
        if self.pending_isr is not change:
            return False  # the partition moved on (new metadata, or another change)
        if error is ErrorCode.none:
            if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
                return False  # stale: stays pending until the metadata catches up
            self.isr = isr
            self.partition_epoch = partition_epoch
            self.pending_isr = None
            self._sole_replica = self.replicas == (self.node_id,) and self.isr == (self.node_id,)
            self.maybe_increment_high_watermark()
            self.purgatory.check_and_complete(self.key)
            return False
        if error in (ErrorCode.ineligible_replica, ErrorCode.operation_not_attempted):
            self.pending_isr = None  # definitely not applied: back to the committed state
            return False
        if error in (
            ErrorCode.fenced_leader_epoch,
            ErrorCode.invalid_update_version,
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.unknown_topic_id,
            ErrorCode.invalid_request,
            ErrorCode.new_leader_elected,
        ):
            return False  # pending until new metadata arrives
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
        if self._sole_replica:  # maybe_increment_high_watermark, inlined on the produce path
            log.update_high_watermark(log.log_end_offset)
        else:
            self.maybe_increment_high_watermark()
        self.purgatory.check_and_complete(self.key)
        return info

    def check_enough_replicas(self, required_acks: int) -> None:
        """acks=all needs an ISR of at least min(min.insync.replicas, replicas): NOT_ENOUGH_REPLICAS."""
        if required_acks == -1 and len(self.isr) < self.effective_min_isr:
            raise PartitionError(ErrorCode.not_enough_replicas)

    def acks_error(self, required_offset: int) -> ErrorCode:
        """A completed acks=all wait (DelayedProduce, checkEnoughReplicasReachOffset): the HW passed the
        records with enough replicas, passed them with too few (written, maybe visible), or not yet."""
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if self.log.high_watermark < required_offset:
            return ErrorCode.request_timed_out
        if len(self.maximal_isr) < self.effective_min_isr:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def write_txn_markers(self, markers: list[TxnMarker], *, now_ms: int | None = None) -> list[AppendInfo]:
        """Transaction markers as leader (WriteTxnMarkers): they move the last stable offset."""
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        try:
            return self.log.write_txn_markers(markers, leader_epoch=self.leader_epoch, now_ms=now_ms)
        finally:  # markers before a refused one stay written
            self.maybe_increment_high_watermark()
            self.purgatory.check_and_complete(self.key)

    # --- follower appends ----------------------------------------------------------------------------

    def append_records_as_follower(
        self,
        records: bytes | memoryview,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        now_ms: int,
    ) -> AppendInfo | None:
        """What a fetch from the leader brought: the batches as the leader wrote them, then the leader's
        high watermark up to this log's end and its log start offset (ReplicaFetcherThread.processPartitionData)."""
        log = self.log
        info = None
        if records:
            try:
                info = log.append_as_follower(records, now_ms=now_ms)
            except UnexpectedAppendOffset as exc:
                # The leader's log start is inside a batch (DeleteRecords): an empty follower (a new
                # replica) starts its log at that batch's base offset, then takes the leader's log start
                # below (Partition.appendRecordsToFollowerOrFutureReplica).
                end = log.log_end_offset
                if not (end == log.log_start_offset and exc.first_offset < end <= exc.last_offset):
                    raise
                log.truncate_fully_and_start_at(exc.first_offset)
                info = log.append_as_follower(records, now_ms=now_ms)
        self.update_follower_high_watermark(leader_high_watermark, leader_log_start_offset)
        return info

    def update_follower_high_watermark(
        self, leader_high_watermark: int, leader_log_start_offset: int
    ) -> None:
        log = self.log
        high_watermark = min(leader_high_watermark, log.log_end_offset)
        if high_watermark > log.high_watermark:
            log.update_high_watermark(high_watermark)
        if leader_log_start_offset > log.log_start_offset:
            log.maybe_increment_log_start_offset(min(leader_log_start_offset, high_watermark))
        self.purgatory.check_and_complete(self.key)

    # --- reads -----------------------------------------------------------------------------------------

    def check_leader_epoch(self, requested: int) -> None:
        """Partition.checkCurrentLeaderEpoch: -1 means the client does not say."""
        if requested < 0 or requested == self.leader_epoch:
            return
        if self.leader_epoch > requested:
            raise PartitionError(ErrorCode.fenced_leader_epoch)
        raise PartitionError(ErrorCode.unknown_leader_epoch)

    def fetch_offset_snapshot(self, current_leader_epoch: int) -> PartitionRead:
        """Partition.fetchOffsetSnapshot (from any replica): the offsets a fetch answer carries, no records."""
        self.check_leader_epoch(current_leader_epoch)
        log = self.log
        return PartitionRead(log.high_watermark, log.last_stable_offset, log.log_start_offset)

    def caught_up_read(
        self,
        fetch_offset: int,
        *,
        replica_id: int,
        read_committed: bool,
        current_leader_epoch: int,
        last_fetched_epoch: int,
        follower_log_start_offset: int,
        replica_epoch: int,
        now_ms: int,
    ) -> PartitionRead | None:
        """What `read_records` answers a fetch at the end of what it may read (a caught-up follower at the
        log end, a consumer at the high watermark or last stable offset: most partitions of most
        fetches at a thousand partitions), without its reads: a follower's fetch state is updated, no
        records. None when the leader's whole read is needed (an epoch to check, records, an error)."""
        if not self.at_fetch_end(
            fetch_offset,
            replica_id=replica_id,
            read_committed=read_committed,
            current_leader_epoch=current_leader_epoch,
            last_fetched_epoch=last_fetched_epoch,
        ):
            return None
        log = self.log
        if replica_id >= 0:
            self.update_follower_fetch_state(
                replica_id, fetch_offset, follower_log_start_offset, fetch_offset, now_ms, replica_epoch
            )
        return PartitionRead(log.high_watermark, log.last_stable_offset, log.log_start_offset)

    def at_fetch_end(
        self,
        fetch_offset: int,
        *,
        replica_id: int,
        read_committed: bool,
        current_leader_epoch: int,
        last_fetched_epoch: int,
    ) -> bool:
        """Whether this leader would answer a fetch at `fetch_offset` with no records and no error: a
        follower (one of the replicas) at the log end, a consumer at the high watermark or last stable
        offset, in the current leader epoch and the leader's latest epoch. Nothing is updated."""
        if self.leader_id != self.node_id or (
            current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch
        ):
            return False
        log = self.log
        if last_fetched_epoch >= 0 and last_fetched_epoch != log.latest_epoch():
            return False
        if replica_id >= 0:
            return (
                fetch_offset == log.log_end_offset
                and replica_id != self.node_id
                and replica_id in self.replicas
            )
        return replica_id == CONSUMER_REPLICA_ID and fetch_offset == (
            log.last_stable_offset if read_committed else log.high_watermark
        )

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
        follower_log_start_offset: int = -1,
        replica_epoch: int = -1,
        fetch_only_from_leader: bool = True,
    ) -> PartitionRead:
        """Partition.fetchRecords/readRecords: consumers (replica_id -1) read up to the high watermark or,
        read_committed, the last stable offset; a follower (one of the other replicas) up to the log
        end, and its fetch offset is its log end from then on. Only the leader serves followers; a
        consumer may read from a follower (its own high watermark, KIP-392) unless
        `fetch_only_from_leader`. A kcli extension: the debugging id (-2) reads any replica's own log up
        to its end, as Kafka's old debug consumer read followers, so `kcli recover partitions` can copy
        what a replica is about to lose (Kafka stops it at the high watermark of the leader alone).
        Raises PartitionError, OffsetOutOfRange or the log's LogStorageError."""
        self.check_leader_epoch(current_leader_epoch)
        if replica_id == DEBUGGING_REPLICA_ID:
            log = self.log
            records = log.read(
                fetch_offset, max_bytes, upper_bound=log.log_end_offset, min_one_batch=min_one_batch
            )
            return PartitionRead(log.high_watermark, log.last_stable_offset, log.log_start_offset, records)
        if not self.is_leader and (fetch_only_from_leader or replica_id >= 0):
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
            leader_end = log.log_end_offset
            records = log.read(fetch_offset, max_bytes, upper_bound=leader_end, min_one_batch=min_one_batch)
            self.update_follower_fetch_state(
                replica_id, fetch_offset, follower_log_start_offset, leader_end, monotonic_ms(), replica_epoch
            )
            return PartitionRead(log.high_watermark, log.last_stable_offset, log_start_offset, records)
        upper_bound = last_stable_offset if isolation is FetchIsolation.TXN_COMMITTED else high_watermark
        records = log.read(fetch_offset, max_bytes, upper_bound=upper_bound, min_one_batch=min_one_batch)
        return PartitionRead(high_watermark, last_stable_offset, log_start_offset, records)
