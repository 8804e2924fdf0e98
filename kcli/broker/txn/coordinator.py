"""The transaction coordinator (Kafka's TransactionCoordinator, transaction versions 0 to 2), on the event loop.

Each transactional-id API calls one method here: InitProducerId, AddPartitionsToTxn (and its
verify-only form, which the Produce path uses in-process as KIP-890 part 1 does broker to broker),
AddOffsetsToTxn (through add_partitions with the group's __consumer_offsets partition), EndTxn,
ListTransactions and DescribeTransactions.

Every transition is answered once its __transaction_state record is committed (the high watermark
passed it; `TransactionStateManager.append_transaction_to_log`), so these methods are coroutines and
the loop answers other requests while a write waits. EndTxn answers once the PrepareCommit or
PrepareAbort record is committed, as Kafka does; the markers and the CompleteCommit/CompleteAbort
record follow in a task of their own, and a Complete* record the log could not take is written again.
Until then the id answers CONCURRENT_TRANSACTIONS, which clients retry. The markers go to each
partition's current leader through the marker channel (`marker_channel`: in-process for partitions
this node leads, WriteTxnMarkers to the other brokers); a COMMIT/ABORT in __consumer_offsets also
settles the group coordinator's pending transactional offsets on the broker that wrote it. Two sweeps
run on timers: Ongoing transactions past their timeout are aborted with a bumped epoch (fencing the
producer), and idle ids expire.

Transaction version 2 (KIP-890 part 2) is the client's choice per request, as in Kafka: EndTxn v5 and
the broker's implicit AddPartitionsToTxn (Produce v12, TxnOffsetCommit v5) run it. Its EndTxn bumps
the epoch in PrepareCommit/PrepareAbort and answers with the producer id and epoch the client goes
on with (a fresh producer id once the epoch is exhausted); a retried EndTxn is recognised by that
bumped epoch, and an abort may come from Empty or Complete* (the client cannot know whether a produce
added partitions). The coordinator's own aborts (fence, timeout) run at the cluster's version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from kcli.broker.log.log import TxnMarker, wall_clock_ms
from kcli.broker.metadata.image import ClusterMetadataImage, TopicChanges
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.producer_ids import ProducerIdManager, ProducerIdsUnavailable
from kcli.broker.replication.manager import ReplicaManager
from kcli.broker.txn.marker_channel import TransactionMarkerChannelManager
from kcli.broker.txn.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from kcli.broker.txn.state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager
from kcli.config import BrokerConfig
from kcli.features import supports_epoch_bump
from kcli.security import ReconfigurableSecurity

log = logging.getLogger("kcli.broker.txn")

TXN_LOG_APPEND_RETRY_BACKOFF_MS = 100
"""Pause before writing a Complete* record again after COORDINATOR_NOT_AVAILABLE (retry.backoff.ms)."""


class InitProducerIdResult(NamedTuple):
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class EndTxnResult(NamedTuple):
    """EndTxn's answer; v5 carries the producer id and epoch the client continues with."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionDescription(NamedTuple):
    """One DescribeTransactions entry."""

    error: ErrorCode
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    topic_partitions: tuple[TopicPartition, ...] = ()


class TransactionCoordinator:
    """Transactions of the ids whose __transaction_state partitions this node leads."""

    name = "TransactionCoordinator"

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        loader: MetadataLoader,
        producer_ids: ProducerIdManager,
        *,
        on_offsets_marker: Callable[[int, bool], None] | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        inter_broker_security: ReconfigurableSecurity | None = None,
    ) -> None:
        """`inter_broker_security`: what the marker channel dials with (reconfigured with the keystore)."""
        self.config = config
        self.replicas = replicas
        self.loader = loader
        self.producer_ids = producer_ids
        self.on_offsets_marker = on_offsets_marker
        """Called with (producer id, is commit) after a marker reached a __consumer_offsets partition."""
        self.clock = clock
        self.state_manager = TransactionStateManager(config, replicas, loader, clock=clock)
        self.markers = TransactionMarkerChannelManager(
            config,
            replicas,
            loader,
            self.state_manager,
            on_offsets_marker=on_offsets_marker,
            clock=clock,
            security=inter_broker_security,
        )
        self.max_timeout_ms = int(config["transaction.max.timeout.ms"])  # type: ignore[call-overload]
        self.abort_interval_ms = int(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"])  # type: ignore[call-overload]
        self.expiry_interval_ms = int(config["transaction.remove.expired.transaction.cleanup.interval.ms"])  # type: ignore[call-overload]
        self.active = False
        self._tasks: set[asyncio.Task[None]] = set()

    # --- lifecycle --------------------------------------------------------------------------------

    def startup(self) -> None:
        """Load the __transaction_state partitions this node leads; start the timeout and expiry sweeps.
        Once: a second sweep would race the first one to abort the same timed-out transaction."""
        if self.active:
            return
        self.active = True
        self._load(self.state_manager.led_partitions())
        self._spawn(self._every(self.abort_interval_ms, self.abort_timed_out_transactions))
        self._spawn(self._every(self.expiry_interval_ms, self.remove_expired_transactional_ids))

    async def shutdown(self) -> None:
        self.active = False
        self.state_manager.shutting_down = True
        for task in list(self._tasks):
            task.cancel()
        await self.markers.shutdown()

    def _spawn(self, coroutine) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _every(self, interval_ms: int, sweep: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await sweep()
            except Exception:
                log.exception("transaction coordinator sweep %s failed", getattr(sweep, "__name__", sweep))

    def _load(self, partitions: Iterable[int]) -> None:
        manager = self.state_manager
        todo = [
            p
            for p in partitions
            if p not in manager.transactions
            and p not in manager.loading_partitions
            and not manager.own_if_empty(p)
        ]
        if todo:
            manager.loading_partitions.update(todo)
            self._spawn(self._load_partitions(todo))

    async def _load_partitions(self, partitions: list[int]) -> None:
        for partition in partitions:
            pending = await self.state_manager.load_partition(partition)
            for metadata in pending:  # PrepareCommit/PrepareAbort left by a crash: finish them
                log.info(
                    "Completing %s of transactional id %s after loading",
                    metadata.state.state_name,
                    metadata.transactional_id,
                )
                self._schedule_completion(metadata)

    # --- metadata -------------------------------------------------------------------------------------

    def on_metadata_update(
        self, changes: TopicChanges, old: ClusterMetadataImage, new: ClusterMetadataImage
    ) -> None:
        """The MetadataPublisher step: load the __transaction_state partitions this node now leads, forget
        those it no longer leads (and a deleted topic's), and load again those whose leader epoch (the
        coordinator epoch) moved while this node kept leading them."""
        if not self.active:
            return
        manager = self.state_manager
        if new.partitions_of(TRANSACTION_STATE_TOPIC) is not None:
            led = manager.led_partitions()
            for partition in sorted((set(manager.transactions) | manager.loading_partitions) - set(led)):
                dropped = manager.remove_transactions_for_partition(partition)
                log.info(
                    "Unloaded %d transaction(s) of %s-%d: this node no longer leads it",
                    dropped, TRANSACTION_STATE_TOPIC, partition,
                )  # fmt: skip
            for partition in manager.stale_partitions():
                dropped = manager.remove_transactions_for_partition(partition)
                log.info(
                    "Unloaded %d transaction(s) of %s-%d to load them again at coordinator epoch %d",
                    dropped, TRANSACTION_STATE_TOPIC, partition, manager.coordinator_epoch(partition),
                )  # fmt: skip
            self._load(led)
        if any(topic == TRANSACTION_STATE_TOPIC for topic, _, _ in changes.deleted):
            self.state_manager.transactions.clear()
            self.state_manager.loading_partitions.clear()
        self.markers.on_metadata_update()  # markers waiting for a leader go again

    # --- placement --------------------------------------------------------------------------------

    @property
    def has_transaction_log(self) -> bool:
        """Whether this node coordinates (or is loading) any __transaction_state partition."""
        return bool(self.state_manager.transactions or self.state_manager.loading_partitions)

    def partition_for(self, transactional_id: str) -> int:
        return self.state_manager.partition_for(transactional_id)

    def _lookup(self, transactional_id: str) -> ErrorCode | TransactionMetadata | None:
        if not self.active or self.loader.image.topic(TRANSACTION_STATE_TOPIC) is None:
            return ErrorCode.coordinator_not_available  # not started, or the internal topic is missing
        return self.state_manager.get_transaction_state(transactional_id)

    # --- InitProducerId ---------------------------------------------------------------------------

    async def handle_init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer; `expected` is its (pid, epoch) from v3."""
        result = await self.init_producer_id(transactional_id, transaction_timeout_ms, expected)
        return result.error, result.producer_id, result.producer_epoch

    async def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitProducerIdResult:
        if transactional_id == "":
            return InitProducerIdResult(ErrorCode.invalid_request)
        if not 0 < transaction_timeout_ms <= self.max_timeout_ms:
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        found = self._lookup(transactional_id)
        if isinstance(found, ErrorCode):
            return InitProducerIdResult(found)
        metadata = found
        if metadata is None:
            try:
                producer_id = await self.producer_ids.generate_producer_id()
            except ProducerIdsUnavailable as exc:
                log.error("InitProducerId for %s: %s", transactional_id, exc)
                return InitProducerIdResult(ErrorCode.coordinator_load_in_progress)
            metadata = self.state_manager.put_if_absent(
                TransactionMetadata(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    last_producer_id=NO_PRODUCER_ID,
                    producer_epoch=NO_PRODUCER_EPOCH,
                    last_producer_epoch=NO_PRODUCER_EPOCH,
                    txn_timeout_ms=transaction_timeout_ms,
                    state=TransactionState.EMPTY,
                    txn_last_update_timestamp=self.clock(),
                )
            )
        if metadata.pending_transition_in_progress:
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if expected is not None and not metadata.is_producer_id_and_epoch_accepted(*expected):
            return InitProducerIdResult(ErrorCode.producer_fenced)
        state = metadata.state
        if state.is_prepare:
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if state is TransactionState.ONGOING:
            # Another instance is mid-transaction: fence it by aborting with a bumped epoch; the new
            # producer retries on CONCURRENT_TRANSACTIONS and bumps once more after CompleteAbort.
            error = await self._fence_and_abort(metadata)
            return InitProducerIdResult(
                ErrorCode.concurrent_transactions if error is ErrorCode.none else error
            )
        now = self.clock()
        expected_epoch = None if expected is None else expected[1]
        transit: ErrorCode | TxnTransitMetadata
        if metadata.is_producer_epoch_exhausted and expected_epoch in (None, metadata.producer_epoch):
            try:
                new_id = await self.producer_ids.generate_producer_id()
            except ProducerIdsUnavailable as exc:
                log.error("InitProducerId for %s: %s", transactional_id, exc)
                return InitProducerIdResult(ErrorCode.coordinator_load_in_progress)
            transit = metadata.prepare_producer_id_rotation(
                new_id, transaction_timeout_ms, now, record_last_epoch=expected is not None
            )
        else:
            transit = metadata.prepare_increment_producer_epoch(transaction_timeout_ms, expected_epoch, now)
        if isinstance(transit, ErrorCode):
            return InitProducerIdResult(transit)
        error = await self.state_manager.append_transaction_to_log(metadata, transit)
        if error is not ErrorCode.none:
            return InitProducerIdResult(error)
        log.info(
            "Initialized transactional id %s with producer id %d and epoch %d",
            transactional_id,
            metadata.producer_id,
            metadata.producer_epoch,
        )
        return InitProducerIdResult(ErrorCode.none, metadata.producer_id, metadata.producer_epoch)

    # --- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------

    async def add_partitions(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        client_transaction_version: int = 0,
    ) -> ErrorCode:
        """AddPartitionsToTxn for partitions that passed the topic checks; one error for all of them.
        `client_transaction_version` 2: the broker adds them on the producer's behalf (KIP-890 part 2)."""
        partitions = set(partitions)
        found = self._checked(transactional_id, producer_id, producer_epoch)
        if isinstance(found, ErrorCode):
            return found
        metadata = found
        if metadata.state.is_prepare:
            return ErrorCode.concurrent_transactions
        if metadata.state is TransactionState.ONGOING and partitions <= metadata.topic_partitions:
            return ErrorCode.none  # nothing new: no record
        transit = metadata.prepare_add_partitions(partitions, self.clock(), client_transaction_version)
        return await self.state_manager.append_transaction_to_log(metadata, transit)

    def verify_partitions(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn with VerifyOnly: is each partition part of the ongoing transaction?"""
        partitions = list(partitions)
        found = self._checked(transactional_id, producer_id, producer_epoch)
        if isinstance(found, ErrorCode):
            return dict.fromkeys(partitions, found)
        metadata = found
        if metadata.state.is_prepare:
            return dict.fromkeys(partitions, ErrorCode.concurrent_transactions)
        ongoing = metadata.state is TransactionState.ONGOING
        return {
            tp: ErrorCode.none
            if ongoing and tp in metadata.topic_partitions
            else ErrorCode.transaction_abortable
            for tp in partitions
        }

    def _checked(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int
    ) -> ErrorCode | TransactionMetadata:
        """The checks AddPartitions, verification and EndTxn share, in Kafka's order."""
        if not transactional_id:
            return ErrorCode.invalid_request
        found = self._lookup(transactional_id)
        if isinstance(found, ErrorCode):
            return found
        if found is None or found.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if found.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if found.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        return found

    # --- EndTxn -----------------------------------------------------------------------------------

    async def end_transaction(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_transaction_version: int = 0,
    ) -> EndTxnResult:
        """EndTxn from a client: PrepareCommit/PrepareAbort, answered once committed; markers and
        Complete* right after. Version 2 answers with the producer id and epoch to continue with."""
        if supports_epoch_bump(client_transaction_version):
            return await self._end_transaction_v2(transactional_id, producer_id, producer_epoch, commit)
        found = self._checked(transactional_id, producer_id, producer_epoch)
        if isinstance(found, ErrorCode):
            return EndTxnResult(found)
        metadata = found
        state = metadata.state
        if state is TransactionState.ONGOING:
            target = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
            transit = metadata.prepare_abort_or_commit(target, self.clock())
            return await self._write_prepare(metadata, transit)
        if state is TransactionState.COMPLETE_COMMIT:
            error = ErrorCode.none if commit else ErrorCode.invalid_txn_state
        elif state is TransactionState.COMPLETE_ABORT:
            error = ErrorCode.invalid_txn_state if commit else ErrorCode.none
        elif state is TransactionState.PREPARE_COMMIT:
            error = ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
        elif state is TransactionState.PREPARE_ABORT:
            error = ErrorCode.invalid_txn_state if commit else ErrorCode.concurrent_transactions
        else:
            error = ErrorCode.invalid_txn_state  # Empty (Dead and PrepareEpochFence are never seen here)
        if error is ErrorCode.none:
            return EndTxnResult(error, metadata.producer_id, metadata.producer_epoch)
        return EndTxnResult(error)

    async def _end_transaction_v2(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        """Kafka 4.1's endTransaction for transaction version 2. The epoch of a finished transaction is
        already one higher than the client's: that is how a retry is told from the next EndTxn."""
        if not transactional_id:
            return EndTxnResult(ErrorCode.invalid_request)
        found = self._lookup(transactional_id)
        if isinstance(found, ErrorCode):
            return EndTxnResult(found)
        if found is None:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        metadata = found
        state = metadata.state
        retry_on_overflow = (
            metadata.last_producer_id == producer_id
            and producer_epoch == MAX_PRODUCER_EPOCH - 1
            and metadata.producer_epoch == 0
        )
        retry_on_epoch_bump = metadata.producer_epoch == producer_epoch + 1
        is_retry = retry_on_epoch_bump or retry_on_overflow
        if state.is_prepare:
            valid_epoch = retry_on_epoch_bump
        elif state.is_complete:
            valid_epoch = is_retry or producer_epoch == metadata.producer_epoch
        else:
            valid_epoch = producer_epoch == metadata.producer_epoch
        if metadata.pending_transition_in_progress:
            return EndTxnResult(ErrorCode.concurrent_transactions)
        if metadata.producer_id != producer_id and not retry_on_overflow:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        if not valid_epoch:
            return EndTxnResult(ErrorCode.producer_fenced)
        current = EndTxnResult(ErrorCode.none, metadata.producer_id, metadata.producer_epoch)
        if state is TransactionState.ONGOING:
            target = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
            return await self._prepare_v2(metadata, target, no_partition_added=False)
        if state is TransactionState.COMPLETE_COMMIT:
            if commit:
                return current if is_retry else EndTxnResult(ErrorCode.invalid_txn_state)
            if is_retry:
                return EndTxnResult(ErrorCode.invalid_txn_state)
            return await self._prepare_v2(metadata, TransactionState.PREPARE_ABORT, no_partition_added=True)
        if state is TransactionState.COMPLETE_ABORT:
            if commit:
                return EndTxnResult(ErrorCode.invalid_txn_state)
            if is_retry:
                return current
            return await self._prepare_v2(metadata, TransactionState.PREPARE_ABORT, no_partition_added=True)
        if state is TransactionState.PREPARE_COMMIT:
            return EndTxnResult(ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state)
        if state is TransactionState.PREPARE_ABORT:
            return EndTxnResult(ErrorCode.invalid_txn_state if commit else ErrorCode.concurrent_transactions)
        if state is TransactionState.EMPTY and not commit:
            return await self._prepare_v2(metadata, TransactionState.PREPARE_ABORT, no_partition_added=True)
        return EndTxnResult(ErrorCode.invalid_txn_state)

    async def _prepare_v2(
        self, metadata: TransactionMetadata, target: TransactionState, *, no_partition_added: bool
    ) -> EndTxnResult:
        """PrepareCommit/PrepareAbort with the epoch bumped; a fresh producer id waits in it when the bump
        exhausts the epoch."""
        next_producer_id = NO_PRODUCER_ID
        if metadata.is_producer_epoch_exhausted:
            before = (metadata.state, metadata.producer_id, metadata.producer_epoch)
            try:
                next_producer_id = await self.producer_ids.generate_producer_id()
            except ProducerIdsUnavailable as exc:
                log.error("EndTxn for %s: %s", metadata.transactional_id, exc)
                return EndTxnResult(ErrorCode.coordinator_load_in_progress)
            after = (metadata.state, metadata.producer_id, metadata.producer_epoch)
            current = self.state_manager.get_transaction_state(metadata.transactional_id)
            if metadata.pending_transition_in_progress or after != before or current is not metadata:
                return EndTxnResult(ErrorCode.concurrent_transactions)  # something else got in meanwhile
        transit = metadata.prepare_abort_or_commit(
            target, self.clock(), 2, next_producer_id, no_partition_added=no_partition_added
        )
        return await self._write_prepare(metadata, transit)

    async def _write_prepare(
        self, metadata: TransactionMetadata, transit: TxnTransitMetadata
    ) -> EndTxnResult:
        """Write PrepareCommit/PrepareAbort; once committed, start completing and answer with the producer
        id and epoch the Complete record will hold (what a version 2 client continues with)."""
        error = await self.state_manager.append_transaction_to_log(metadata, transit)
        if error is not ErrorCode.none:
            return EndTxnResult(error)
        complete = self._schedule_completion(metadata)
        return EndTxnResult(ErrorCode.none, complete.producer_id, complete.producer_epoch)

    async def _fence_and_abort(self, metadata: TransactionMetadata) -> ErrorCode:
        """Bump the epoch of an Ongoing transaction and abort it with that epoch (InitProducerId's fence
        and the timeout sweep): PrepareEpochFence in memory, PrepareAbort written, markers, CompleteAbort."""
        transaction_version = self.state_manager.transaction_version()
        if supports_epoch_bump(transaction_version):
            # Version 2 (Kafka 4.1): PrepareAbort itself carries the bumped epoch, written with markers of
            # that epoch; nothing is bumped in memory before the record is durable.
            transit = metadata.prepare_abort_or_commit(
                TransactionState.PREPARE_ABORT, self.clock(), transaction_version
            )
            error = await self.state_manager.append_transaction_to_log(metadata, transit)
            if error is ErrorCode.none:
                self._schedule_completion(metadata)
            return error
        fence = metadata.prepare_fence_producer_epoch()
        # As Kafka's endTransaction does for a fence: the bumped epoch goes into memory at once (so the
        # old producer is fenced even if the write fails) and PrepareAbort is prepared from Ongoing.
        metadata.pending_state = None
        metadata.producer_epoch = fence.producer_epoch
        metadata.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = metadata.prepare_abort_or_commit(TransactionState.PREPARE_ABORT, self.clock())
        error = await self.state_manager.append_transaction_to_log(metadata, transit)
        if error is not ErrorCode.none:
            metadata.has_failed_epoch_fence = True
            return error
        metadata.has_failed_epoch_fence = False
        self._schedule_completion(metadata)
        return ErrorCode.none

    # --- markers ----------------------------------------------------------------------------------

    def _schedule_completion(self, metadata: TransactionMetadata) -> TxnTransitMetadata:
        """prepareComplete at once (nothing else may happen to the id until it completes), then the
        markers and the Complete record in a task of their own, after the response."""
        transit = metadata.prepare_complete(self.clock())
        self._spawn(self._complete_scheduled(metadata, transit))
        return transit

    async def _complete_scheduled(self, metadata: TransactionMetadata, transit: TxnTransitMetadata) -> None:
        try:
            await self._complete_transaction(metadata, transit)
        except Exception:
            log.exception("completing the transaction of %s failed", metadata.transactional_id)

    async def _complete_transaction(self, metadata: TransactionMetadata, transit: TxnTransitMetadata) -> None:
        """A marker to the leader of every partition of a PrepareCommit/PrepareAbort transaction (the
        marker channel), then Complete*, written again while the log is not available for it (Kafka's
        txnLogAppendRetryQueue). If sending stops (no longer the coordinator, fenced), nothing is written."""
        commit = metadata.state is TransactionState.PREPARE_COMMIT
        partition = self.state_manager.partition_for(metadata.transactional_id)
        if partition not in self.state_manager.transactions:
            return  # no longer the coordinator
        coordinator_epoch = self.state_manager.coordinator_epoch(partition)
        marker = TxnMarker(
            metadata.producer_id,
            metadata.producer_epoch,
            coordinator_epoch,
            commit,
            metadata.client_transaction_version if metadata.is_transactions_v2 else 0,
        )
        written = await self.markers.add_txn_markers_to_send(metadata, marker, coordinator_epoch)
        if not written:
            if self.state_manager.get_transaction_state(metadata.transactional_id) is metadata and (
                self.state_manager.coordinator_epoch(partition) == coordinator_epoch
            ):
                metadata.abandon_transition()  # still ours: a later load or EndTxn retry may finish it
            log.info(
                "Not completing %s of %s: its markers were not all written",
                metadata.state.state_name,
                metadata.transactional_id,
            )
            return
        while True:
            error = await self.state_manager.append_transaction_to_log(
                metadata, transit, retry_on_error=_retry_complete
            )
            if not (_retry_complete(error) and self.active):
                break
            log.info(
                "Not available to append %s of %s; retry appending",
                transit.state.state_name,
                metadata.transactional_id,
            )
            await asyncio.sleep(TXN_LOG_APPEND_RETRY_BACKOFF_MS / 1000)
        if error is not ErrorCode.none:
            log.error(
                "Failed to write %s for transactional id %s: %s",
                transit.state.state_name,
                metadata.transactional_id,
                error.name,
            )
            return
        log.debug("Completed %s for %s", metadata.state.state_name, metadata.transactional_id)

    # --- sweeps -----------------------------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> int:
        """Abort (with a bumped epoch, fencing the producer) every Ongoing transaction past its timeout;
        the writes wait side by side."""
        if not self.active:
            return 0
        timed_out = self.state_manager.timed_out_transactions(self.clock())
        for metadata in timed_out:
            log.info(
                "Aborting transaction of %s (producer id %d, epoch %d): it timed out",
                metadata.transactional_id,
                metadata.producer_id,
                metadata.producer_epoch,
            )
        errors = await asyncio.gather(*(self._fence_and_abort(m) for m in timed_out))
        return sum(1 for error in errors if error is ErrorCode.none)

    async def remove_expired_transactional_ids(self) -> int:
        """Tombstone and forget ids idle for transactional.id.expiration.ms; the writes wait side by side."""
        if not self.active:
            return 0
        expired = self.state_manager.expired_transactional_ids(self.clock())
        errors = await asyncio.gather(
            *(self.state_manager.append_transaction_to_log(m, m.prepare_dead()) for m in expired)
        )
        for metadata, error in zip(expired, errors, strict=True):
            if error is ErrorCode.none:
                log.info("Removed expired transactional id %s", metadata.transactional_id)
        return sum(1 for error in errors if error is ErrorCode.none)

    # --- introspection ----------------------------------------------------------------------------

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int = -1
    ) -> tuple[ErrorCode, list[str], list[tuple[str, int, str]]]:
        """(error, unknown state filters, [(id, producer id, state name)]), as TransactionStateManager.
        listTransactionStates: nothing while a partition loads, Dead ids never, and a state filter of
        unknown names only matches nothing. The duration filter keeps ids whose `now - start` exceeds
        it, which (as in Kafka) includes ids with no transaction (start -1)."""
        if not self.active:
            return ErrorCode.coordinator_not_available, [], []
        if self.state_manager.is_loading:
            return ErrorCode.coordinator_load_in_progress, [], []
        state_names = list(states)
        wanted: set[TransactionState] = set()
        unknown: list[str] = []
        for name in state_names:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted.add(state)
        pids = set(producer_ids)
        now = self.clock()
        listed = [
            (m.transactional_id, m.producer_id, m.state.state_name)
            for m in self.state_manager.all_transactions()
            if m.state is not TransactionState.DEAD
            and (not pids or m.producer_id in pids)
            and (not state_names or m.state in wanted)
            and (duration_ms < 0 or now - m.txn_start_timestamp > duration_ms)
        ]
        return ErrorCode.none, unknown, sorted(listed)

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            return TransactionDescription(ErrorCode.invalid_request, transactional_id)
        found = self._lookup(transactional_id)
        if isinstance(found, ErrorCode):
            return TransactionDescription(found, transactional_id)
        if found is None or found.state is TransactionState.DEAD:
            return TransactionDescription(ErrorCode.transactional_id_not_found, transactional_id)
        return TransactionDescription(
            ErrorCode.none,
            transactional_id,
            found.state.state_name,
            found.txn_timeout_ms,
            found.txn_start_timestamp,
            found.producer_id,
            found.producer_epoch,
            tuple(sorted(found.topic_partitions)),
        )


def _retry_complete(error: ErrorCode) -> bool:
    """A Complete* record is written again after COORDINATOR_NOT_AVAILABLE (the log could not take it
    or it was not committed in time); any other error ends the attempt."""
    return error is ErrorCode.coordinator_not_available
