"""Transaction metadata in __transaction_state (Kafka's TransactionStateManager).

It owns the cache of transactional ids per __transaction_state partition, knows which partitions this
node coordinates and which are still loading, writes one record per transition (key = transactional
id, value = TransactionLogValue v0, a tombstone for an expired id) and replays a partition at start-up:
the last value per key wins. The coordinator epoch of a partition is its leader epoch, so it never
goes down.

A transition is applied only once its record is committed (`coordinator_log.write_records`: the high
watermark has passed it), waiting at most the transaction's timeout (request.timeout.ms for an
expired id's tombstone), as Kafka's appendTransactionToLog does. Meanwhile the transition is pending
and other requests for the id answer CONCURRENT_TRANSACTIONS; a write that fails or times out drops
it, and one that ends after the partition left this node or changed leader epoch applies nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from formats.errors import FormatError
from formats.internal import (
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_log,
    txn_partition_for,
)
from formats.records import RecordBatch
from kcli.broker.coordinator_log import replay_log, write_records
from kcli.broker.log.log import wall_clock_ms
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.replication.manager import ReplicaManager
from kcli.broker.txn.metadata import TransactionMetadata, TransactionState, TxnTransitMetadata
from kcli.config import BrokerConfig
from kcli.features import transaction_version_level

log = logging.getLogger("kcli.broker.txn")

TRANSACTION_STATE_TOPIC = "__transaction_state"


class TransactionStateManager:
    """The transactional ids whose __transaction_state partitions this node leads."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        loader: MetadataLoader,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.loader = loader
        self.clock = clock
        self.transactions: dict[int, dict[str, TransactionMetadata]] = {}
        """Partition -> transactional id -> metadata, for owned partitions only."""
        self.loading_partitions: set[int] = set()
        self.loaded_epochs: dict[int, int] = {}
        """Partition -> the coordinator epoch its cache was loaded at (Kafka keys its cache entries by it)."""
        self.shutting_down = False
        self.expiration_ms = int(config["transactional.id.expiration.ms"])  # type: ignore[call-overload]
        self.request_timeout_ms = int(config["request.timeout.ms"])  # type: ignore[call-overload]

    # --- placement --------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        """The real partition count of __transaction_state once it exists, else the configured one."""
        partitions = self.loader.image.partitions_of(TRANSACTION_STATE_TOPIC)
        if partitions:
            return len(partitions)
        return int(self.config["transaction.state.log.num.partitions"])  # type: ignore[call-overload]

    def partition_for(self, transactional_id: str) -> int:
        return txn_partition_for(transactional_id, self.num_partitions)

    def transaction_version(self) -> int:
        """transactionVersionLevel: the cluster's finalized transaction.version, which picks the
        __transaction_state value version and the version a coordinator-made abort runs at."""
        return transaction_version_level(self.loader.image.features)

    def led_partitions(self) -> list[int]:
        image = self.loader.image
        return sorted(
            index
            for index, registration in (image.partitions_of(TRANSACTION_STATE_TOPIC) or {}).items()
            if registration.leader == self.config.node_id
            and self.replicas.log(TRANSACTION_STATE_TOPIC, index) is not None
        )

    def remove_transactions_for_partition(self, partition: int) -> int:
        """This node no longer leads __transaction_state-`partition` (removeTransactionsForTxnTopicPartition):
        forget its transactions; requests for them get NOT_COORDINATOR. Returns how many were dropped."""
        self.loading_partitions.discard(partition)
        self.loaded_epochs.pop(partition, None)
        return len(self.transactions.pop(partition, {}))

    def stale_partitions(self) -> list[int]:
        """Loaded partitions whose coordinator epoch moved while this node kept leading them: Kafka's
        onElection loads them again at the new epoch (loadTransactionsForTxnTopicPartition), so that
        a PrepareCommit/PrepareAbort whose markers stopped at the old epoch is completed at the new one."""
        return sorted(p for p, epoch in self.loaded_epochs.items() if epoch != self.coordinator_epoch(p))

    def coordinator_epoch(self, partition: int) -> int:
        registration = self.loader.image.partition(TRANSACTION_STATE_TOPIC, partition)
        return 0 if registration is None else max(registration.leader_epoch, 0)

    @property
    def is_loading(self) -> bool:
        return bool(self.loading_partitions)

    # --- the cache --------------------------------------------------------------------------------

    def get_transaction_state(self, transactional_id: str) -> ErrorCode | TransactionMetadata | None:
        """The id's metadata, None if unknown here, or the coordinator error (loading, not coordinator)."""
        partition = self.partition_for(transactional_id)
        if partition in self.loading_partitions:
            return ErrorCode.coordinator_load_in_progress
        cache = self.transactions.get(partition)
        if cache is None:
            return ErrorCode.not_coordinator
        return cache.get(transactional_id)

    def put_if_absent(self, metadata: TransactionMetadata) -> TransactionMetadata:
        cache = self.transactions[self.partition_for(metadata.transactional_id)]
        return cache.setdefault(metadata.transactional_id, metadata)

    def all_transactions(self) -> list[TransactionMetadata]:
        return [m for cache in self.transactions.values() for m in cache.values()]

    # --- writes -----------------------------------------------------------------------------------

    async def append_transaction_to_log(
        self,
        metadata: TransactionMetadata,
        transit: TxnTransitMetadata,
        *,
        retry_on_error: Callable[[ErrorCode], bool] = lambda error: False,
    ) -> ErrorCode:
        """Write `transit` and, once it is committed, apply it (completeTransitionTo).

        Returns NONE or the error the transaction APIs report (Kafka's mapping of append errors). On
        failure the pending transition is dropped, unless `retry_on_error` says the caller writes it
        again (the Complete* record after the markers). If the id's partition left this node, loads
        again or changed coordinator epoch during the write, nothing is applied: NOT_COORDINATOR (or
        COORDINATOR_LOAD_IN_PROGRESS), and the client finds the coordinator again.
        """
        transactional_id = metadata.transactional_id
        partition = self.partition_for(transactional_id)
        coordinator_epoch = self.coordinator_epoch(partition)
        if transit.state is TransactionState.DEAD:
            records = [(encode_txn_key(transactional_id), None)]
            timeout_ms = self.request_timeout_ms
        else:
            records = [encode_txn_log(transactional_id, transit.to_log_value(self.transaction_version()))]
            timeout_ms = transit.txn_timeout_ms
        error, _ = await write_records(
            self.replicas,
            TRANSACTION_STATE_TOPIC,
            partition,
            records,
            now_ms=self.clock(),
            timeout_ms=timeout_ms,
        )
        if error is not ErrorCode.none:
            error = _APPEND_ERRORS.get(error, error)
            log.warning(
                "Appending %s's new metadata %s failed due to %s",
                transactional_id,
                transit.state.state_name,
                error.name,
            )
            if self._current(metadata, coordinator_epoch) is ErrorCode.none and not retry_on_error(error):
                metadata.abandon_transition()
            return error
        current = self._current(metadata, coordinator_epoch)
        if current is not ErrorCode.none:
            log.info(
                "The cached metadata of %s changed while its new metadata %s was written; not applying it (%s)",
                transactional_id,
                transit.state.state_name,
                current.name,
            )
            return current
        metadata.complete_transition_to(transit)
        if transit.state is TransactionState.DEAD:
            self.transactions[partition].pop(transactional_id, None)
        return ErrorCode.none

    def _current(self, metadata: TransactionMetadata, coordinator_epoch: int) -> ErrorCode:
        """NONE while `metadata` is still the cached entry of its id in `coordinator_epoch`; else the
        error a write that started then answers (its partition is loading again, or left this node)."""
        found = self.get_transaction_state(metadata.transactional_id)
        if isinstance(found, ErrorCode):
            return found
        partition = self.partition_for(metadata.transactional_id)
        if found is not metadata or self.coordinator_epoch(partition) != coordinator_epoch:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # --- loading ----------------------------------------------------------------------------------

    def own_if_empty(self, partition: int) -> bool:
        """Take over an empty partition at once: nothing to replay."""
        partition_log = self.replicas.log(TRANSACTION_STATE_TOPIC, partition)
        if partition_log is None or partition_log.log_end_offset != partition_log.log_start_offset:
            return False
        self.transactions.setdefault(partition, {})
        self.loaded_epochs.setdefault(partition, self.coordinator_epoch(partition))
        return True

    async def load_partition(self, partition: int) -> list[TransactionMetadata]:
        """Replay __transaction_state-`partition`; returns the transactions left in PrepareCommit/PrepareAbort.

        Requests for its ids get COORDINATOR_LOAD_IN_PROGRESS until this returns.
        """
        name = f"{TRANSACTION_STATE_TOPIC}-{partition}"
        partition_log = self.replicas.log(TRANSACTION_STATE_TOPIC, partition)
        if partition_log is None:
            self.loading_partitions.discard(partition)
            return []
        started = self.clock()
        loaded: dict[str, TransactionMetadata] = {}

        def replay(data: memoryview, batch: RecordBatch) -> None:
            if batch.is_control:
                return
            for record in batch.records(data):
                if record.key is not None:
                    self._replay(name, loaded, record.key, record.value)

        await replay_log(partition_log, replay, stopping=lambda: self.shutting_down)
        if self.shutting_down or partition not in self.loading_partitions:
            return []  # stopped, or this node resigned the partition while it was loading
        self.transactions[partition] = loaded
        self.loaded_epochs[partition] = self.coordinator_epoch(partition)
        self.loading_partitions.discard(partition)
        log.info(
            "Finished loading %d transaction metadata from %s in %d milliseconds",
            len(loaded),
            name,
            self.clock() - started,
        )
        return [m for m in loaded.values() if m.state.is_prepare]

    @staticmethod
    def _replay(name: str, loaded: dict[str, TransactionMetadata], key: bytes, value: bytes | None) -> None:
        try:
            transactional_id = decode_txn_key(key)
            decoded = decode_txn_value(value)
        except FormatError as exc:
            log.warning("skipping an unreadable record in %s: %s", name, exc)
            return
        if decoded is None:
            loaded.pop(transactional_id, None)
        else:
            loaded[transactional_id] = TransactionMetadata.from_log_value(transactional_id, decoded)

    # --- sweeps -----------------------------------------------------------------------------------

    def timed_out_transactions(self, now_ms: int) -> list[TransactionMetadata]:
        """Ongoing transactions past their timeout with nothing pending (the abort sweep's work)."""
        return [
            m
            for m in self.all_transactions()
            if m.state is TransactionState.ONGOING
            and m.pending_state is None
            and m.txn_start_timestamp + m.txn_timeout_ms < now_ms
        ]

    def expired_transactional_ids(self, now_ms: int) -> list[TransactionMetadata]:
        """Ids idle for transactional.id.expiration.ms in Empty, CompleteCommit or CompleteAbort."""
        return [
            m
            for m in self.all_transactions()
            if m.state.is_expiration_allowed
            and m.pending_state is None
            and m.txn_last_update_timestamp <= now_ms - self.expiration_ms
        ]


_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,  # so that the client retries
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}
"""TransactionStateManager.appendTransactionToLog's mapping; anything else is returned as it is."""
