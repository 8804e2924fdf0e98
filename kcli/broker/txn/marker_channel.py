"""Transaction markers to the partitions' leaders (Kafka's TransactionMarkerChannelManager and
TransactionMarkerRequestCompletionHandler).

When a transaction completes, each of its partitions gets a COMMIT or ABORT marker from that
partition's current leader. The coordinator hands the transaction over (`add_txn_markers_to_send`)
and waits; the partitions are grouped by leader into one queue per destination broker, and one sender
per destination drains its queue into one WriteTxnMarkers request (every waiting transaction's markers
at once). A partition this node leads is written in-process, as the WriteTxnMarkers handler would;
the others go over `kcli.client` with client id `broker-<node id>-txn-markers`, at the newest
WriteTxnMarkers version both brokers speak. Either way the answer comes once the marker is committed
(acks=-1, as Kafka's handler appends it).

Kafka's rules for the answers: NONE takes the partition off the transaction; NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT and
KAFKA_STORAGE_ERROR, a lost connection and a leader nobody knows wait for new metadata (or a backoff)
and go again to whoever leads then; a partition the metadata no longer has (its topic was deleted) is
dropped; INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED mean a newer epoch or coordinator
already closed the transaction, so sending stops; UNSUPPORTED_FOR_MESSAGE_FORMAT/UNSUPPORTED_VERSION
drop the partition. Before each answer is applied, the transaction must still be this coordinator's in
the same coordinator epoch; otherwise sending stops (whoever loads the partition finishes it). The
transaction is complete (the coordinator then writes CompleteCommit/CompleteAbort) only once every
partition has its marker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.log.errors import LogStorageError, RecordError
from kcli.broker.log.log import TxnMarker
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.replication.manager import ReplicaManager
from kcli.broker.replication.partition import PartitionError
from kcli.broker.txn.metadata import TopicPartition, TransactionMetadata
from kcli.broker.txn.state_manager import TransactionStateManager
from kcli.client import KafkaClient, NodeConnections
from kcli.config import BrokerConfig
from kcli.protocol.messages import nested_type
from kcli.security import ReconfigurableSecurity

log = logging.getLogger("kcli.broker.txn")

WRITE_TXN_MARKERS = 27
OFFSETS_TOPIC = "__consumer_offsets"
RETRY_BACKOFF_MS = 100
"""retry.backoff.ms: the first pause before markers that failed go again without a metadata change."""
RETRY_BACKOFF_MAX_MS = 1000
"""retry.backoff.max.ms: the pause doubles up to this while a transaction's markers keep failing."""

RETRIABLE_ERRORS = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
    }
)
FENCED_ERRORS = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
"""The producer's or the coordinator's epoch moved on: this transaction's markers can be forgotten."""
SKIPPED_ERRORS = frozenset({ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})
"""The producer could not have written to such a partition either: it needs no marker."""


# --- writing markers as the partitions' leader ------------------------------------------------------------


async def append_txn_markers(
    replicas: ReplicaManager,
    image: ClusterMetadataImage,
    markers: Sequence[tuple[TxnMarker, Iterable[TopicPartition]]],
    *,
    timeout: float,
    now_ms: int | None = None,
    on_offsets_marker: Callable[[int, bool], None] | None = None,
) -> list[dict[TopicPartition, ErrorCode]]:
    """Write each marker to its partitions as their leader and wait until they are committed (acks=-1,
    at most `timeout` seconds): one error per partition, per marker. What both the WriteTxnMarkers
    handler and the coordinator's in-process path do (KafkaApis.handleWriteTxnMarkersRequest).

    A marker committed to a __consumer_offsets partition settles the producer's transactional offsets
    through `on_offsets_marker(producer id, is commit)`, once per marker.
    """
    results: list[dict[TopicPartition, ErrorCode]] = []
    appended: list[tuple[TopicPartition, int]] = []
    for marker, partitions in markers:
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            errors[tp], last_offset = _append_marker(replicas, image, tp, marker, now_ms)
            if last_offset is not None:
                appended.append((tp, last_offset + 1))
        results.append(errors)
    committed = await replicas.delayed_produce(appended, timeout) if appended else {}
    for (marker, _), errors in zip(markers, results, strict=True):
        for tp in errors:
            if tp in committed:
                errors[tp] = committed[tp]
        if on_offsets_marker is not None and any(
            topic == OFFSETS_TOPIC and error is ErrorCode.none for (topic, _), error in errors.items()
        ):
            on_offsets_marker(marker.producer_id, marker.commit)
    return results


def _append_marker(
    replicas: ReplicaManager,
    image: ClusterMetadataImage,
    tp: TopicPartition,
    marker: TxnMarker,
    now_ms: int | None,
) -> tuple[ErrorCode, int | None]:
    """(error, last offset written or None) for one marker on one partition this node should lead."""
    topic, index = tp
    try:
        partition = replicas.leader_partition(image, topic, index)
        infos = partition.write_txn_markers([marker], now_ms=now_ms)
    except PartitionError as exc:
        return exc.error_code, None
    except RecordError as exc:
        log.info("Marker to %s-%d for producer %d refused: %s", topic, index, marker.producer_id, exc.message)
        return exc.error_code, None
    except (LogStorageError, OSError) as exc:
        log.error("Marker to %s-%d for producer %d failed: %s", topic, index, marker.producer_id, exc)
        return ErrorCode.kafka_storage_error, None
    return ErrorCode.none, (infos[-1].last_offset if infos else None)


# --- the channel ------------------------------------------------------------------------------------


@dataclass(eq=False)
class PendingCompleteTxn:
    """A transaction whose markers are being written; `partitions` are those still without one."""

    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    marker: TxnMarker
    partitions: set[TopicPartition]
    done: asyncio.Future[bool]
    backoff_ms: int = RETRY_BACKOFF_MS

    def finish(self, written: bool) -> None:
        if not self.done.done():
            self.done.set_result(written)


Entry = tuple[PendingCompleteTxn, frozenset[TopicPartition]]


@dataclass(eq=False)
class _Retry:
    """Markers that failed in a way new metadata may cure: sent again on the next image or after a pause."""

    entries: list[Entry] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class TransactionMarkerChannelManager:
    """Markers of completing transactions to the partitions' leaders, one queue per destination broker."""

    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        loader: MetadataLoader,
        state_manager: TransactionStateManager,
        *,
        on_offsets_marker: Callable[[int, bool], None] | None = None,
        clock: Callable[[], int],
        security: ReconfigurableSecurity | None = None,
    ) -> None:
        """`security`: the broker's inter-broker client security, reconfigured with its keystore."""
        self.node_id = config.node_id
        self.replicas = replicas
        self.loader = loader
        self.state_manager = state_manager
        self.on_offsets_marker = on_offsets_marker
        self.clock = clock
        self.listener_name = config.inter_broker_listener_name
        self.request_timeout = int(config["request.timeout.ms"]) / 1000  # type: ignore[call-overload]
        self.connections = NodeConnections(
            f"broker-{config.node_id}-txn-markers", security or config.inter_broker_security()
        )
        self._queues: dict[int, list[Entry]] = {}
        """Destination broker -> markers waiting to go (this node's id: written in-process)."""
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._retry = _Retry()
        self._pending: dict[str, PendingCompleteTxn] = {}
        """transactionsWithPendingMarkers: transactional id -> its transaction being completed."""
        self._closed = False

    # --- what the coordinator calls ------------------------------------------------------------------

    async def add_txn_markers_to_send(
        self, metadata: TransactionMetadata, marker: TxnMarker, coordinator_epoch: int
    ) -> bool:
        """Write `marker` to every partition of `metadata`'s transaction; True once all have it, False
        when sending stopped (no longer the coordinator, fenced, shutting down)."""
        loop = asyncio.get_running_loop()
        pending = PendingCompleteTxn(
            metadata.transactional_id,
            coordinator_epoch,
            metadata,
            marker,
            set(metadata.topic_partitions),
            loop.create_future(),
        )
        previous = self._pending.get(pending.transactional_id)
        if previous is not None:
            log.info("Replacing the pending markers of %s", pending.transactional_id)
            previous.finish(False)
        self._pending[pending.transactional_id] = pending
        try:
            if self._closed:
                return False
            self._enqueue(pending, frozenset(pending.partitions))
            self._maybe_complete(pending)
            return await pending.done
        finally:
            if self._pending.get(pending.transactional_id) is pending:
                del self._pending[pending.transactional_id]

    def on_metadata_update(self) -> None:
        """New metadata: markers waiting for a leader, or for another one, go again."""
        self._resend_retries()

    async def shutdown(self) -> None:
        self._closed = True
        if self._retry.timer is not None:
            self._retry.timer.cancel()
        for task in list(self._senders.values()):
            task.cancel()
        await asyncio.gather(*self._senders.values(), return_exceptions=True)
        for pending in list(self._pending.values()):
            pending.finish(False)
        self._queues.clear()
        self._retry.entries.clear()
        await self.connections.close()

    @property
    def num_txns_with_pending_markers(self) -> int:
        return len(self._pending)

    # --- queues ----------------------------------------------------------------------------------------

    def _enqueue(self, pending: PendingCompleteTxn, partitions: frozenset[TopicPartition]) -> None:
        """addTxnMarkersToBrokerQueue: group by the current leader; a partition the metadata no longer
        has is dropped, one whose leader is not known waits for new metadata."""
        if pending.done.done() or self._closed:
            return
        image = self.loader.image
        by_destination: dict[int, set[TopicPartition]] = {}
        unknown: set[TopicPartition] = set()
        for tp in partitions:
            registration = image.partition(*tp)
            if registration is None:
                log.info(
                    "Partition %s-%d is gone; skipping the %s marker of %s for it",
                    tp[0], tp[1], _result(pending.marker), pending.transactional_id,
                )  # fmt: skip
                self._remove_partition(pending, tp)
                continue
            leader = registration.leader
            if leader == self.node_id or self._address(image, leader) is not None:
                by_destination.setdefault(leader, set()).add(tp)
            else:
                unknown.add(tp)
        if unknown:
            self._park(pending, frozenset(unknown))
        for destination, tps in by_destination.items():
            self._queues.setdefault(destination, []).append((pending, frozenset(tps)))
            if destination not in self._senders:
                task = asyncio.get_running_loop().create_task(
                    self._send_loop(destination), name=f"kcli-txn-markers-to-{destination}"
                )
                self._senders[destination] = task
        self._maybe_complete(pending)

    def _address(self, image: ClusterMetadataImage, broker_id: int) -> tuple[str, int] | None:
        """getPartitionLeaderEndpoint on the inter-broker listener; None for no leader or no such listener."""
        registration = image.broker(broker_id) if broker_id >= 0 else None
        endpoint = None if registration is None else registration.endpoint(self.listener_name)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def _park(self, pending: PendingCompleteTxn, partitions: frozenset[TopicPartition]) -> None:
        """Hold markers until the next image, or a backoff that doubles for this transaction."""
        retry = self._retry
        retry.entries.append((pending, partitions))
        delay = pending.backoff_ms
        pending.backoff_ms = min(pending.backoff_ms * 2, RETRY_BACKOFF_MAX_MS)
        loop = asyncio.get_running_loop()
        if retry.timer is None or retry.timer.when() > loop.time() + delay / 1000:
            if retry.timer is not None:
                retry.timer.cancel()
            retry.timer = loop.call_later(delay / 1000, self._resend_retries)

    def _resend_retries(self) -> None:
        retry = self._retry
        if retry.timer is not None:
            retry.timer.cancel()
            retry.timer = None
        entries, retry.entries = retry.entries, []
        for pending, partitions in entries:
            if self._still_current(pending):
                self._enqueue(pending, partitions & pending.partitions)

    # --- sending ---------------------------------------------------------------------------------------

    async def _send_loop(self, destination: int) -> None:
        """Drain one destination's queue into one request at a time (InterBrokerSendThread)."""
        try:
            while self._queues.get(destination):
                entries = [e for e in self._queues.pop(destination) if not e[0].done.done()]
                if not entries:
                    continue
                if destination == self.node_id:
                    answers = await self._write_local(entries)
                else:
                    answers = await self._send_remote(destination, entries)
                if answers is None:  # disconnected: try again, perhaps elsewhere, after a pause
                    for pending, partitions in entries:
                        if self._still_current(pending):
                            self._park(pending, partitions)
                    continue
                for (pending, partitions), errors in zip(entries, answers, strict=True):
                    self._on_answer(destination, pending, partitions, errors)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sending transaction markers to broker %d failed", destination)
            for pending, _ in self._queues.pop(destination, []):
                pending.finish(False)
        finally:
            self._senders.pop(destination, None)
            if self._queues.get(destination) and not self._closed:  # queued while the loop was ending
                self._senders[destination] = asyncio.get_running_loop().create_task(
                    self._send_loop(destination), name=f"kcli-txn-markers-to-{destination}"
                )

    async def _write_local(self, entries: list[Entry]) -> list[dict[TopicPartition, ErrorCode]]:
        return await append_txn_markers(
            self.replicas,
            self.loader.image,
            [(pending.marker, partitions) for pending, partitions in entries],
            timeout=self.request_timeout,
            now_ms=self.clock(),
            on_offsets_marker=self.on_offsets_marker,
        )

    async def _send_remote(
        self, destination: int, entries: list[Entry]
    ) -> list[dict[TopicPartition, ErrorCode]] | None:
        """One WriteTxnMarkers with every entry's marker; per entry its partitions' errors, None when
        the broker could not be reached or did not answer."""
        address = self._address(self.loader.image, destination)
        if address is None:
            return None

        def build(client: KafkaClient) -> Any:
            cls = client.request_type(WRITE_TXN_MARKERS)
            marker_cls = nested_type(cls, "WritableTxnMarker")
            topic_cls = nested_type(cls, "WritableTxnMarkerTopic")
            markers = []
            for pending, partitions in entries:
                by_topic: dict[str, list[int]] = {}
                for topic, index in sorted(partitions):
                    by_topic.setdefault(topic, []).append(index)
                markers.append(
                    marker_cls(
                        producer_id=pending.marker.producer_id,
                        producer_epoch=pending.marker.producer_epoch,
                        transaction_result=pending.marker.commit,
                        topics=tuple(
                            topic_cls(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
                        ),
                        coordinator_epoch=pending.marker.coordinator_epoch,
                        **(
                            {"transaction_version": pending.marker.transaction_version}
                            if cls.__version__ >= 2
                            else {}
                        ),
                    )
                )
            return cls(markers=tuple(markers))

        # The leader answers once the markers are committed or after its request.timeout.ms: wait a
        # little longer than that for its answer before calling the broker unreachable.
        response = await self.connections.send(destination, address, build, timeout=self.request_timeout + 5)
        if response is None:
            log.info("Broker %d did not answer WriteTxnMarkers; sending those markers again", destination)
            return None
        by_producer: dict[int, dict[TopicPartition, ErrorCode]] = {}
        for answer in response.markers:
            errors = by_producer.setdefault(answer.producer_id, {})
            for topic in answer.topics:
                for partition in topic.partitions:
                    errors[(topic.name, partition.partition_index)] = partition.error_code
        return [
            {
                tp: by_producer.get(pending.marker.producer_id, {}).get(tp, ErrorCode.unknown_server_error)
                for tp in partitions
            }
            for pending, partitions in entries
        ]

    # --- answers ----------------------------------------------------------------------------------------

    def _on_answer(
        self,
        destination: int,
        pending: PendingCompleteTxn,
        partitions: frozenset[TopicPartition],
        errors: dict[TopicPartition, ErrorCode],
    ) -> None:
        """TransactionMarkerRequestCompletionHandler.onComplete for one transaction's markers."""
        if not self._still_current(pending):
            return
        retry: set[TopicPartition] = set()
        for tp in partitions:
            error = errors[tp]
            if error is ErrorCode.none:
                self._remove_partition(pending, tp)
            elif error in RETRIABLE_ERRORS:
                log.info(
                    "The %s marker of %s for %s-%d failed on broker %d with %s; retrying",
                    _result(pending.marker), pending.transactional_id, tp[0], tp[1], destination, error.name,
                )  # fmt: skip
                retry.add(tp)
            elif error in FENCED_ERRORS:
                log.info(
                    "The %s marker of %s for %s-%d failed for good with %s; no more markers for it",
                    _result(pending.marker), pending.transactional_id, tp[0], tp[1], error.name,
                )  # fmt: skip
                pending.finish(False)
                return
            elif error in SKIPPED_ERRORS:
                log.info(
                    "The %s marker of %s for %s-%d failed with %s; that partition needs none",
                    _result(pending.marker), pending.transactional_id, tp[0], tp[1], error.name,
                )  # fmt: skip
                self._remove_partition(pending, tp)
            else:  # CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...: Kafka's IllegalStateException
                log.error(
                    "Unexpected error %s writing the %s marker of %s to %s-%d on broker %d",
                    error.name, _result(pending.marker), pending.transactional_id, tp[0], tp[1], destination,
                )  # fmt: skip
                pending.finish(False)
                return
        if retry:
            self._park(pending, frozenset(retry))
        self._maybe_complete(pending)

    def _still_current(self, pending: PendingCompleteTxn) -> bool:
        """Whether this node still coordinates the transaction in the epoch its markers carry; if not,
        sending stops (removeMarkersForTxn): whoever loads its partition completes it."""
        if pending.done.done():
            return False
        found = self.state_manager.get_transaction_state(pending.transactional_id)
        if isinstance(found, ErrorCode) or found is not pending.metadata:
            reason = found.name if isinstance(found, ErrorCode) else "its metadata changed"
            log.info("No more markers for %s: %s", pending.transactional_id, reason)
            pending.finish(False)
            return False
        epoch = self.state_manager.coordinator_epoch(
            self.state_manager.partition_for(pending.transactional_id)
        )
        if epoch != pending.coordinator_epoch:
            log.info(
                "No more markers for %s: the coordinator epoch moved from %d to %d",
                pending.transactional_id, pending.coordinator_epoch, epoch,
            )  # fmt: skip
            pending.finish(False)
            return False
        return True

    @staticmethod
    def _remove_partition(pending: PendingCompleteTxn, tp: TopicPartition) -> None:
        pending.partitions.discard(tp)
        pending.metadata.topic_partitions.discard(tp)  # removePartition: what DescribeTransactions shows

    @staticmethod
    def _maybe_complete(pending: PendingCompleteTxn) -> None:
        if not pending.partitions:
            pending.finish(True)


def _result(marker: TxnMarker) -> str:
    return "COMMIT" if marker.commit else "ABORT"
