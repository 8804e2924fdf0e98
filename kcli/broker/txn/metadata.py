"""One transactional id's state (Kafka's TransactionMetadata) and the transitions between its states.

Every change goes in two steps, as in Kafka: `prepare_*` checks the transition and returns the target
(`TxnTransitMetadata`, also what is written to __transaction_state) while marking it pending; once
the record is durable `complete_transition_to` applies it. A pending transition makes every other
request for the id answer CONCURRENT_TRANSACTIONS. Nothing here does I/O or reads a clock: the
caller passes `now_ms`.

Transaction version 2 (KIP-890 part 2, `client_transaction_version` 2, set by EndTxn v5 and the
broker's implicit AddPartitionsToTxn v5): PrepareCommit/PrepareAbort carry the producer epoch plus one,
which the markers are written with, so a late produce of the old epoch is fenced on every partition;
when that bump would exhaust the epoch, `next_producer_id` holds a fresh producer id the Complete record
switches to (epoch 0).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from formats.internal import TxnLogValue, TxnPartitions
from kcli.features import supports_epoch_bump, transaction_log_value_version

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767
"""Short.MaxValue; an epoch of MAX_PRODUCER_EPOCH - 1 or more is exhausted and the id rotates."""

TopicPartition = tuple[str, int]


class TransactionState(enum.Enum):
    """Kafka's TransactionState: the persisted id and the name operators see."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, state_name: str) -> None:
        self.state_id = state_id
        self.state_name = state_name

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.state_id == state_id:
                return state
        raise ValueError(f"Unexpected transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return next((s for s in cls if s.state_name == name), None)

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def is_expiration_allowed(self) -> bool:
        return self in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        )


S = TransactionState
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset(
        {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    ),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
"""TransactionState.validPreviousStates: a transition from any other state is a coordinator bug. PrepareAbort
from Empty or Complete* is transaction version 2's abort of a transaction whose partitions the client
cannot know were added (Kafka 4.1)."""


class IllegalTransition(Exception):
    """A transition Kafka's state machine forbids; it means a bug in the coordinator, not a bad request."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The state a transition leads to: exactly what one __transaction_state record holds."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def to_log_value(self, transaction_version: int = 0) -> TxnLogValue:
        """TransactionLog.valueToBytes: v0, or the flexible v1 from the cluster's transaction.version 1
        (with the client's transaction version and the producer ids an epoch overflow moves between);
        partitions are null when Empty, sorted otherwise."""
        partitions: tuple[TxnPartitions, ...] | None = None
        if self.state is not TransactionState.EMPTY:
            partitions = group_by_topic(self.topic_partitions)
        version = transaction_log_value_version(transaction_version)
        flexible = version >= 1  # v0 has none of the tagged fields: what it cannot hold is left out
        return TxnLogValue(
            version=version,
            previous_producer_id=self.last_producer_id if flexible else NO_PRODUCER_ID,
            next_producer_id=self.next_producer_id if flexible else NO_PRODUCER_ID,
            client_transaction_version=self.client_transaction_version if flexible else 0,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=self.state.state_id,
            transaction_partitions=partitions,
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
        )


def group_by_topic(partitions: Iterable[TopicPartition]) -> tuple[TxnPartitions, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return tuple(
        TxnPartitions(topic=topic, partition_ids=tuple(sorted(ids)))
        for topic, ids in sorted(by_topic.items())
    )


@dataclass(slots=True)
class TransactionMetadata:
    """What the coordinator knows about one transactional id."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    has_failed_epoch_fence: bool = False
    next_producer_id: int = NO_PRODUCER_ID
    """The producer id a transaction-version-2 Complete record moves to when the epoch is exhausted."""
    client_transaction_version: int = 0
    """The transaction version the client used for the last transition (EndTxn v5: 2)."""

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
        """TransactionLog.readTxnRecordValue: the last epoch is not stored (-1); v1 keeps the previous and
        next producer ids and the client's transaction version."""
        partitions = {
            (p.topic, partition) for p in value.transaction_partitions or () for partition in p.partition_ids
        }
        return cls(
            transactional_id=transactional_id,
            producer_id=value.producer_id,
            last_producer_id=value.previous_producer_id,
            producer_epoch=value.producer_epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=value.transaction_timeout_ms,
            state=TransactionState.from_id(value.transaction_status),
            topic_partitions=partitions,
            txn_start_timestamp=value.transaction_start_timestamp_ms,
            txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
            next_producer_id=value.next_producer_id,
            client_transaction_version=value.client_transaction_version,
        )

    # --- questions --------------------------------------------------------------------------------

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_PRODUCER_EPOCH - 1

    @property
    def is_transactions_v2(self) -> bool:
        """Whether the last transition came from a transaction-version-2 client (supportsEpochBump)."""
        return supports_epoch_bump(self.client_transaction_version)

    def is_producer_id_and_epoch_accepted(self, producer_id: int, producer_epoch: int) -> bool:
        """InitProducerId v3+ with a known (pid, epoch): KIP-360's rules for whom a bump may serve."""
        if self.producer_epoch == NO_PRODUCER_EPOCH or producer_id == self.producer_id:
            return True
        return producer_id == self.last_producer_id and producer_epoch >= MAX_PRODUCER_EPOCH - 1

    # --- preparing transitions -----------------------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current state, unchanged (a retried bump that already succeeded)."""
        return self._transit(self.state)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Bump the epoch of an Ongoing transaction so the old producer is fenced; never persisted.

        If the last fence's write failed the epoch was already bumped in memory, so it is not bumped again.
        """
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransition(
                "Cannot fence producer with epoch equal to Short.MaxValue since this would overflow"
            )
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._transit(
            TransactionState.PREPARE_EPOCH_FENCE, producer_epoch=bumped, last_producer_epoch=NO_PRODUCER_EPOCH
        )

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> ErrorCode | TxnTransitMetadata:
        """InitProducerId on an Empty or Complete id: bump the epoch (KIP-360's retry rules), or PRODUCER_FENCED."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(
                f"Cannot allocate any more producer epochs for producerId {self.producer_id}"
            )
        if expected_epoch is None:
            epoch, last_epoch = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch  # a retry of this very bump
        else:
            return ErrorCode.producer_fenced
        return self._transit(
            TransactionState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """A new producer id with epoch 0 once the epoch is exhausted; the old id is remembered for retries."""
        if self.pending_transition_in_progress:
            raise IllegalTransition("Cannot rotate producer ids while a transaction is still pending")
        return self._transit(
            TransactionState.EMPTY,
            producer_id=new_producer_id,
            last_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_add_partitions(
        self, partitions: Iterable[TopicPartition], now_ms: int, client_transaction_version: int = 0
    ) -> TxnTransitMetadata:
        """Ongoing with the union of partitions; a transaction starts its clock when it leaves Empty/Complete."""
        start = self.txn_start_timestamp
        if self.state in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        ):
            start = now_ms
        return self._transit(
            TransactionState.ONGOING,
            topic_partitions=frozenset(self.topic_partitions | set(partitions)),
            txn_start_timestamp=start,
            txn_last_update_timestamp=now_ms,
            client_transaction_version=client_transaction_version,
        )

    def prepare_abort_or_commit(
        self,
        new_state: TransactionState,
        now_ms: int,
        client_transaction_version: int = 0,
        next_producer_id: int = NO_PRODUCER_ID,
        *,
        no_partition_added: bool = False,
    ) -> TxnTransitMetadata:
        """PrepareCommit/PrepareAbort. Transaction version 2 bumps the epoch here; when that exhausts it
        the caller passes `next_producer_id`, which the Complete record moves to. An epoch already at
        Short.MaxValue (a version 2 fence of an exhausted epoch) stays there rather than overflow, and
        InitProducerId moves to a new producer id. `no_partition_added`: version 2's abort from Empty or
        Complete*, a transaction that starts and ends now."""
        epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        if supports_epoch_bump(client_transaction_version) and self.producer_epoch < MAX_PRODUCER_EPOCH:
            epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        return self._transit(
            new_state,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_start_timestamp=now_ms if no_partition_added else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
            next_producer_id=next_producer_id,
            client_transaction_version=client_transaction_version,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """CompleteCommit/CompleteAbort once every marker is written; the partition set empties. With
        transaction version 2 an exhausted epoch moves to `next_producer_id` at epoch 0 here."""
        new_state = (
            TransactionState.COMPLETE_COMMIT
            if self.state is TransactionState.PREPARE_COMMIT
            else TransactionState.COMPLETE_ABORT
        )
        self.has_failed_epoch_fence = False
        producer_id, last_producer_id = self.producer_id, self.last_producer_id
        epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        if self.is_transactions_v2:
            last_epoch = self.producer_epoch
            if self.next_producer_id != NO_PRODUCER_ID:
                producer_id, last_producer_id, epoch = self.next_producer_id, self.producer_id, 0
        return self._transit(
            new_state,
            producer_id=producer_id,
            last_producer_id=last_producer_id,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            topic_partitions=frozenset(),
            txn_last_update_timestamp=now_ms,
            client_transaction_version=self.client_transaction_version,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        """An expired id: written as a tombstone, then dropped from the cache."""
        return self._transit(TransactionState.DEAD, topic_partitions=frozenset())

    def _transit(self, new_state: TransactionState, **changes: object) -> TxnTransitMetadata:
        """prepareTransitionTo: check the move is legal and mark it pending."""
        if self.pending_state is not None:
            raise IllegalTransition(
                f"TransactionalId {self.transactional_id} is already in pending state {self.pending_state.state_name} "
                f"while trying to transit to {new_state.state_name}"
            )
        if self.state not in VALID_PREVIOUS_STATES[new_state]:
            raise IllegalTransition(
                f"TransactionalId {self.transactional_id} failed transition to state {new_state.state_name} "
                f"from {self.state.state_name}"
            )
        values: dict[str, object] = {
            "producer_id": self.producer_id,
            "last_producer_id": self.last_producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch,
            "txn_timeout_ms": self.txn_timeout_ms,
            "state": new_state,
            "topic_partitions": frozenset(self.topic_partitions),
            "txn_start_timestamp": self.txn_start_timestamp,
            "txn_last_update_timestamp": self.txn_last_update_timestamp,
            "next_producer_id": NO_PRODUCER_ID,
            "client_transaction_version": 0,
        }
        values.update(changes)
        self.pending_state = new_state
        return TxnTransitMetadata(**values)  # type: ignore[arg-type]

    # --- applying and abandoning ---------------------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Apply a transition whose record is durable (or, for PrepareEpochFence, that needs none)."""
        if self.pending_state is not transit.state:
            raise IllegalTransition(
                f"TransactionalId {self.transactional_id} completes transition to {transit.state.state_name} "
                f"but its pending state is {self.pending_state.state_name if self.pending_state else None}"
            )
        if self.state not in VALID_PREVIOUS_STATES[transit.state]:
            raise IllegalTransition(
                f"TransactionalId {self.transactional_id} cannot move from {self.state.state_name} "
                f"to {transit.state.state_name}"
            )
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.next_producer_id = transit.next_producer_id
        self.client_transaction_version = transit.client_transaction_version
        self.state = transit.state
        self.pending_state = None

    def abandon_transition(self) -> None:
        """The record could not be written: forget the pending transition (Kafka resets pendingState)."""
        self.pending_state = None
