"""The partitions this broker hosts and what requests do with them (Kafka's `ReplicaManager`).

Handlers and coordinators reach partitions through Kafka's two calls. `append_records` appends to the
leader logs and, with acks=all, waits in the purgatory until the high watermark has passed the records
(DelayedProduce), answering each partition with its error or offsets. `fetch_messages` reads from the
leader (or, for a consumer with client metadata, a follower) and, short of min_bytes, waits there for
the partitions to change (DelayedFetch); it adds the aborted transactions of read_committed reads,
holds back throttled followers (the leader quota), and a follower's fetch tells the leader how far that
follower got. The answers keep the record bytes as file slices for sendfile. Each metadata image
is applied to the hosted partitions (`apply_image`): the partitions with a replica here are hosted,
deleted ones dropped; a registration naming this node leader in a new epoch makes it the leader
(Partition.makeLeader), one naming another broker makes it a follower whose fetcher pulls from that
leader (makeFollower). ISR changes go to the controller through the AlterPartitionManager, and the
isr-expiration task shrinks ISRs by the followers that stopped keeping up.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from formats.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_BIT,
)
from kcli.broker.log import Log, LogManager, LogStorageError, OffsetOutOfRange, RecordError
from kcli.broker.log.log import wall_clock_ms
from kcli.broker.log.validator import AppendOrigin
from kcli.broker.metadata.image import ClusterMetadataImage, PartitionRegistration
from kcli.broker.replication.alter_partition_manager import AlterPartitionManager
from kcli.broker.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from kcli.broker.replication.partition import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    Partition,
    PartitionError,
    monotonic_ms,
)
from kcli.broker.replication.purgatory import PartitionKey, Purgatory
from kcli.broker.replication.quota import ReplicationQuotaManager
from kcli.broker.replication.replica_selector import (
    ClientMetadata,
    PartitionView,
    ReplicaSelector,
    ReplicaView,
)
from kcli.config import INTERNAL_TOPICS
from kcli.protocol.fetch_codec import PartitionResult

log = logging.getLogger("kcli.broker.replication")

CONSUMER_REPLICA_ID = -1
"""FetchRequest.CONSUMER_REPLICA_ID; -2 and below are debugging or future replicas."""
_MIN_THROTTLE_WAIT = 0.001
"""A throttled follower fetch looks at the rate again no sooner than this."""


class PartitionResponse(NamedTuple):
    """One partition's answer to `append_records` (Kafka's ProduceResponse.PartitionResponse)."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None
    """(leader id, leader epoch) from the metadata, when this node does not lead the partition."""


class FetchParams(NamedTuple):
    """What a Fetch asks of every partition (Kafka's FetchParams)."""

    replica_id: int
    """CONSUMER_REPLICA_ID for a consumer, the follower's broker id for a follower."""
    replica_epoch: int
    max_wait: float
    """Seconds the request may wait for min_bytes (max_wait_ms)."""
    min_bytes: int
    max_bytes: int
    """The response budget: min(the request's max_bytes, fetch.max.bytes)."""
    read_committed: bool
    client_metadata: ClientMetadata | None
    """v11+: the consumer's rack; from then on a consumer may be sent to, and read from, a follower."""


class FetchTarget(NamedTuple):
    """One partition of a Fetch (Kafka's TopicIdPartition with its FetchRequest.PartitionData)."""

    topic: str
    topic_id: Any
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int


FetchPartitionData = PartitionResult
"""One partition of a FetchResponse (Kafka's FetchPartitionData): the protocol writer's own shape, so a
read's answer goes to the wire as it is; `records` is a FetchSlice of a segment file."""


class PartitionChanges(Protocol):
    """An incremental fetch session's view of its partitions, for a fetch that read only the changed ones."""

    async def wait_for_changes(self, deadline: float) -> set[PartitionKey]:
        """The session's partitions that changed until the waiter ran again, or none at `deadline`
        (the event loop's clock)."""
        ...

    def target(self, key: PartitionKey) -> FetchTarget | None:
        """What the session asks of `key`, or None when it is no longer in the session."""
        ...


def _readable(results: list[FetchPartitionData]) -> dict[PartitionKey, int]:
    """The bytes each partition's read returned (what a DelayedFetch has until its partitions change)."""
    return {
        (r.topic, r.partition_index): r.records.size  # type: ignore[misc]
        for r in results
        if r.records is not None and r.records.size
    }


def _same_topics(old: ClusterMetadataImage, new: ClusterMetadataImage) -> bool:
    """Whether two images hold the same topic objects (images share what a delta does not change)."""
    old_topics, new_topics = old.topics_by_id, new.topics_by_id
    if len(old_topics) != len(new_topics):
        return False
    return all(old_topics.get(topic_id) is topic for topic_id, topic in new_topics.items())


def is_valid_required_acks(acks: int) -> bool:
    """ReplicaManager.isValidRequiredAcks: 0, 1 or -1 (all)."""
    return acks in _VALID_REQUIRED_ACKS


_VALID_REQUIRED_ACKS = frozenset({0, 1, -1})


def is_transactional_data(records: bytes | memoryview) -> bool:
    """A whole magic v2 transactional batch that is not a control batch: what must be verified with the
    transaction coordinator before it is appended (KIP-890 part 1)."""
    return (
        len(records) >= RECORD_BATCH_OVERHEAD
        and records[MAGIC_OFFSET] == 2
        and records[ATTRIBUTES_OFFSET + 1] & (TRANSACTIONAL_BIT | CONTROL_BIT) == TRANSACTIONAL_BIT
    )


_NOTHING_VERIFIED: Mapping[PartitionKey, ErrorCode | None] = {}
_INVALID_REQUIRED_ACKS = PartitionResponse(ErrorCode.invalid_required_acks)
_INVALID_TOPIC = PartitionResponse(ErrorCode.invalid_topic_exception)
_STORAGE_ERROR = PartitionResponse(ErrorCode.kafka_storage_error)
_METADATA_ERRORS = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id})
_NO_TOPIC_ID = uuid.UUID(int=0)
"""A Fetch before v13 names topics, not ids."""
_RECORDS_ERRORS_WITHOUT_OFFSETS = frozenset(
    {ErrorCode.corrupt_message, ErrorCode.message_too_large, ErrorCode.record_list_too_large}
)
"""Kafka answers these append errors (corrupt data, a batch too large) without the log start offset."""


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        *,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        fetcher_config: FetcherConfig | None = None,
        replica_selector: ReplicaSelector | None = None,
        quota_samples: int = 11,
        quota_window_seconds: int = 1,
    ) -> None:
        self.node_id = node_id
        self.replica_selector = replica_selector
        """`replica.selector.class`: None sends every consumer to the leader."""
        self.logs = logs
        self.purgatory = Purgatory()
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.fetcher_config = fetcher_config or FetcherConfig()
        self.image: ClusterMetadataImage | None = None
        self._partitions: dict[PartitionKey, Partition] = {}
        self._registrations: dict[PartitionKey, PartitionRegistration] = {}
        self._applied_generation = -1
        """The log manager's generation when an image was last applied partition by partition."""
        self.alter_partition_manager: AlterPartitionManager | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.leader_quota = ReplicationQuotaManager(
            "LeaderReplication", samples=quota_samples, window_seconds=quota_window_seconds
        )
        """What this broker sends as leader to throttled followers (QuotaFactory's quotas.leader)."""
        self.follower_quota = ReplicationQuotaManager(
            "FollowerReplication", samples=quota_samples, window_seconds=quota_window_seconds
        )
        """What this broker's fetchers take for throttled partitions (quotas.follower)."""

    def start_replication(
        self, send_to_controller: Callable[[Any], Awaitable[Any]], broker_epoch: Callable[[], int]
    ) -> None:
        """From registration on: ISR changes go to the controller, followed partitions are fetched."""
        self.alter_partition_manager = AlterPartitionManager(
            self.node_id, send_to_controller, broker_epoch, self._topic_id
        )
        self.fetchers = ReplicaFetcherManager(
            self.node_id,
            self.fetcher_config,
            broker_epoch,
            partition=self.partition,
            broker_address=self.broker_address,
            quota=self.follower_quota,
        )
        for partition in self._partitions.values():
            partition.alter_isr = self.alter_partition_manager.submit
        if self.image is not None:
            self._registrations.clear()
            self._applied_generation = -1  # walked again whole: now with fetchers
            self.apply_image(self.image)

    async def shutdown(self) -> None:
        if self.fetchers is not None:
            await self.fetchers.shutdown()
        if self.alter_partition_manager is not None:
            await self.alter_partition_manager.shutdown()

    async def run_isr_expiration(self) -> None:
        """Kafka's isr-expiration task: every replica.lag.time.max.ms / 2, shrink lagging ISRs."""
        while True:
            await asyncio.sleep(self.replica_lag_time_max_ms / 2000)
            for partition in list(self._partitions.values()):
                partition.maybe_shrink_isr()

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        return None if self.image is None else self.image.topic_id(topic)

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """Where another broker listens (our listener name), from the current metadata."""
        if self.image is None:
            return None
        registration = self.image.broker(broker_id)
        endpoint = None if registration is None else registration.endpoint(self.image.listener_name)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def replica_eligible(self, broker_id: int, broker_epoch: int) -> bool:
        """May this broker join an ISR: registered, unfenced, not shutting down, and the incarnation
        that fetched (its broker epoch, -1 if it did not say) is the registered one."""
        registration = None if self.image is None else self.image.broker(broker_id)
        return (
            registration is not None
            and not registration.fenced
            and not registration.in_controlled_shutdown
            and broker_epoch in (-1, registration.broker_epoch)
        )

    # --- hosted partitions ---------------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def log(self, topic: str, index: int) -> Log | None:
        partition = self._partitions.get((topic, index))
        return None if partition is None else partition.log

    def leader_partition(self, image: ClusterMetadataImage, topic: str, index: int) -> Partition:
        """The partition when this node leads it (getPartitionOrException): else PartitionError with
        UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not know, NOT_LEADER_OR_FOLLOWER
        for one led elsewhere or not hosted here."""
        registration = image.partition(topic, index)
        if registration is None:
            raise PartitionError(ErrorCode.unknown_topic_or_partition)
        partition = self._partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        return partition

    def apply_image(self, image: ClusterMetadataImage) -> None:
        """Bring the hosted partitions in line with `image` and the logs on disk (the node creates and
        deletes the logs first): host each local log of a partition with a replica here, apply its
        registration, drop the rest. Requests waiting on a dropped partition are woken to answer its
        error (stopReplicas); a partition this node now follows in a new leader epoch gets its fetcher.
        An image whose topics are the very objects of the last one applied (a metadata commit of no
        partition change: a NoOpRecord, a broker heartbeat's registration) over the same logs changes
        nothing here, and is not walked partition by partition."""
        previous = self.image
        self.image = image
        generation = self.logs.generation
        if previous is not None and generation == self._applied_generation and _same_topics(previous, image):
            return
        self._applied_generation = generation
        for key in [k for k in self._partitions if self.logs.get_log(*k) is None]:
            del self._partitions[key]
            self._registrations.pop(key, None)
            if self.fetchers is not None:
                self.fetchers.stop_following(key)
            self.purgatory.check_and_complete(key)
        for partition_log in self.logs.logs():
            key = (partition_log.topic, partition_log.partition)
            registration = image.partition(*key)
            if registration is None or self.node_id not in registration.replicas:
                continue
            partition = self._partitions.get(key)
            if partition is None or partition.log is not partition_log:
                partition = self._partitions[key] = Partition(
                    partition_log,
                    self.node_id,
                    self.purgatory,
                    alter_isr=None
                    if self.alter_partition_manager is None
                    else self.alter_partition_manager.submit,
                    replica_eligible=self.replica_eligible,
                    replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                )
            elif self._registrations.get(key) is registration:
                continue  # unchanged since the last image: images share what they do not change
            self._registrations[key] = registration
            partition.apply_registration(registration)
            if self.fetchers is None:
                continue
            if partition.is_leader or partition.leader_id < 0:
                self.fetchers.stop_following(key)
                continue
            state = self.fetchers.fetch_state(key)
            if state is None or (state.leader_id, state.leader_epoch) != (
                partition.leader_id,
                partition.leader_epoch,
            ):
                topic_id = image.topic_id(key[0])
                if topic_id is not None:
                    self.fetchers.follow(partition, topic_id)

    # --- produce -------------------------------------------------------------------------------------

    async def append_records(
        self,
        entries: Sequence[tuple[PartitionKey, bytes | memoryview]],
        acks: int,
        origin: AppendOrigin,
        timeout: float,
        *,
        internal_topics_allowed: bool = False,
        transaction_verification: Mapping[PartitionKey, ErrorCode | None] = _NOTHING_VERIFIED,
        now_ms: int | None = None,
    ) -> list[PartitionResponse]:
        """ReplicaManager.appendRecords: append each partition's records as its leader, and with acks=-1
        wait (DelayedProduce, at most `timeout` seconds) until the high watermark of every partition
        written has passed its records; a partition still short is then REQUEST_TIMED_OUT, one no longer
        led here NOT_LEADER_OR_FOLLOWER. The answers are in the order of `entries`.

        `transaction_verification`: for a transactional batch, None when the transaction coordinator
        verified the partition is in the producer's ongoing transaction, else the error to answer
        (a partition it does not name is INVALID_TXN_STATE)."""
        if acks not in _VALID_REQUIRED_ACKS:
            return [_INVALID_REQUIRED_ACKS] * len(entries)
        uncommitted: list[tuple[PartitionKey, int]] | None = [] if acks == -1 else None
        if now_ms is None:
            now_ms = wall_clock_ms()
        responses: list[PartitionResponse] = []
        for key, records in entries:  # a loop, not a comprehension: one call less per produce
            responses.append(
                self._append_to_leader(
                    key, records, acks, origin, internal_topics_allowed, transaction_verification, now_ms,
                    uncommitted,
                )
            )  # fmt: skip
        if uncommitted and not self.acks_reached(uncommitted):
            errors = await self.delayed_produce(uncommitted, timeout)
            for slot, (key, _) in enumerate(entries):
                error = errors.get(key, ErrorCode.none)
                if error is not ErrorCode.none:
                    log_start_offset = responses[slot].log_start_offset
                    responses[slot] = PartitionResponse(error, log_start_offset=log_start_offset)
        return responses

    async def delayed_produce(
        self, uncommitted: list[tuple[PartitionKey, int]], timeout: float
    ) -> dict[PartitionKey, ErrorCode]:
        """Kafka's DelayedProduce: wait in the purgatory until the high watermark of each partition has
        passed its offset (`acks_reached`) or `timeout` seconds; then each partition's answer
        (checkEnoughReplicasReachOffset): NONE, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND or
        NOT_LEADER_OR_FOLLOWER. `append_records` waits here; so do transaction markers, which are
        written by Partition.write_txn_markers rather than as a batch of records."""
        if not self.acks_reached(uncommitted):
            await self.wait_for_acks(uncommitted, timeout)
        return {key: self.acks_error(key, required) for key, required in dict(uncommitted).items()}

    def append_to_local_log(
        self,
        entries: Sequence[tuple[PartitionKey, bytes | memoryview]],
        acks: int,
        origin: AppendOrigin,
        *,
        internal_topics_allowed: bool,
        now_ms: int,
        transaction_verification: Mapping[PartitionKey, ErrorCode | None] = _NOTHING_VERIFIED,
    ) -> list[PartitionResponse]:
        """ReplicaManager.appendToLocalLog: the appends alone, with no wait, for a coordinator's acks=0
        writes from code that cannot wait (`append_records` is the call otherwise)."""
        append = self._append_to_leader
        return [
            append(
                key, records, acks, origin, internal_topics_allowed, transaction_verification, now_ms, None
            )
            for key, records in entries
        ]

    def _append_to_leader(
        self,
        key: PartitionKey,
        records: bytes | memoryview,
        acks: int,
        origin: AppendOrigin,
        internal_topics_allowed: bool,
        transaction_verification: Mapping[PartitionKey, ErrorCode | None],
        now_ms: int,
        uncommitted: list[tuple[PartitionKey, int]] | None,
    ) -> PartitionResponse:
        """One partition of appendToLocalLog: Partition.appendRecordsToLeader and the errors Kafka maps."""
        topic, index = key
        if topic in INTERNAL_TOPICS and not internal_topics_allowed:
            return _INVALID_TOPIC
        partition = self._partitions.get(key)
        if partition is None or not partition.is_leader:
            registration = None if self.image is None else self.image.partition(topic, index)
            leader = None if registration is None else (registration.leader, registration.leader_epoch)
            return PartitionResponse(ErrorCode.not_leader_or_follower, current_leader=leader)
        partition_log = partition.log
        verified = False
        try:
            if is_transactional_data(records):
                partition.check_enough_replicas(acks)
                error = transaction_verification.get(key, ErrorCode.invalid_txn_state)
                if error is not None:
                    return PartitionResponse(error, log_start_offset=partition_log.log_start_offset)
                verified = True
            info = partition.append_records_to_leader(
                records, required_acks=acks, now_ms=now_ms, origin=origin, transaction_verified=verified
            )
        except PartitionError as e:
            return PartitionResponse(e.error_code, log_start_offset=partition_log.log_start_offset)
        except RecordError as e:
            if e.error_code in _RECORDS_ERRORS_WITHOUT_OFFSETS:
                return PartitionResponse(e.error_code)
            if e.record_errors:  # Kafka's RecordValidationException: the message and the records
                return PartitionResponse(
                    e.error_code,
                    log_start_offset=partition_log.log_start_offset,
                    record_errors=e.record_errors,
                    error_message=e.message,
                )
            return PartitionResponse(e.error_code, log_start_offset=partition_log.log_start_offset)
        except (LogStorageError, OSError) as e:  # Kafka's KafkaStorageException (an IOException in the log)
            log.error("append to %s-%d failed: %s", topic, index, e)
            return _STORAGE_ERROR
        except Exception:
            log.exception("error processing append operation on partition %s-%d", topic, index)
            return PartitionResponse(
                ErrorCode.unknown_server_error, log_start_offset=partition_log.log_start_offset
            )
        if uncommitted is not None and partition_log.high_watermark <= info.last_offset:
            uncommitted.append((key, info.last_offset + 1))
        return PartitionResponse(
            ErrorCode.none, info.first_offset, info.log_append_time, info.log_start_offset
        )

    def acks_reached(self, appended: list[tuple[PartitionKey, int]]) -> bool:
        """DelayedProduce's condition: every partition's high watermark has passed its required offset,
        or the partition is no longer led here (its answer is then the error, see `acks_error`)."""
        for key, required_offset in appended:
            partition = self._partitions.get(key)
            if partition is not None and partition.is_leader and partition.high_watermark < required_offset:
                return False
        return True

    async def wait_for_acks(self, appended: list[tuple[PartitionKey, int]], timeout: float) -> bool:
        """Wait (DelayedProduce) until `acks_reached` or `timeout` seconds; whether it was reached. A
        change of a partition looks at that partition alone: the request completes when the last of
        its partitions short of its offset gets there (a produce to a thousand partitions is not
        looked at whole on each of their thousand high watermark moves)."""
        required = dict(appended)
        short = {key for key, offset in required.items() if not self._ack_reached(key, offset)}
        if not short:
            return True
        loop = asyncio.get_running_loop()
        reached: asyncio.Future[bool] = loop.create_future()

        def wake(key: PartitionKey) -> None:
            if key in short and self._ack_reached(key, required[key]):
                short.discard(key)
                if not short and not reached.done():
                    reached.set_result(True)

        purgatory = self.purgatory
        watched = list(short)
        for key in watched:
            purgatory.watch(key, wake)
        timer = loop.call_at(loop.time() + timeout, lambda: reached.done() or reached.set_result(False))
        try:
            return await reached
        finally:
            timer.cancel()
            for key in watched:
                purgatory.unwatch(key, wake)

    def _ack_reached(self, key: PartitionKey, required_offset: int) -> bool:
        """`acks_reached` of one partition."""
        partition = self._partitions.get(key)
        return partition is None or not partition.is_leader or partition.high_watermark >= required_offset

    def acks_error(self, key: PartitionKey, required_offset: int) -> ErrorCode:
        """The answer for a partition of a completed DelayedProduce (checkEnoughReplicasReachOffset)."""
        partition = self._partitions.get(key)
        if partition is None:
            return ErrorCode.not_leader_or_follower
        return partition.acks_error(required_offset)

    # --- fetch ---------------------------------------------------------------------------------------

    async def fetch_messages(
        self,
        params: FetchParams,
        targets: Sequence[FetchTarget],
        changes: PartitionChanges | None = None,
    ) -> list[FetchPartitionData]:
        """ReplicaManager.fetchMessages: read the partitions in request order (readFromLog); answer
        at once when max_wait is 0, no partition passed the metadata checks, min_bytes are readable or
        a partition failed, diverged or has a preferred read replica; otherwise wait (DelayedFetch) for
        the partitions read to change until min_bytes are readable or max_wait has passed, then read
        again. A follower's answer has passed the leader quota: its throttled bytes are counted then.
        The answers to partitions the metadata does not know come last.

        `changes`: an incremental fetch session's partitions, when `targets` are only the ones that
        changed since its last fetch; the wait is then on any partition of the session, and one that
        changes is read too."""
        results, readable, failed, watched, interesting = self.read_from_log(params, targets)
        if (
            params.max_wait > 0
            and (interesting or changes is not None)
            and readable < params.min_bytes
            and not failed
        ):
            results = await self._delayed_fetch(params, list(targets), watched, results, changes)
        if params.replica_id >= 0:
            # KafkaApis: a follower's answer has passed the quota check; its throttled bytes count now
            self.record_leader_replication(
                (r.topic, r.partition_index, r.records.size)
                for r in results
                if r.records is not None and r.topic
            )
        return results

    async def _delayed_fetch(
        self,
        params: FetchParams,
        targets: list[FetchTarget],
        watched: list[PartitionKey],
        results: list[FetchPartitionData],
        changes: PartitionChanges | None,
    ) -> list[FetchPartitionData]:
        """Kafka's DelayedFetch: wait in the purgatory for the partitions read to change (or for any of
        the session's, with `changes`), until min_bytes are readable or max_wait has passed. A change is
        looked at on its partition alone (tryComplete); everything is read again once that says the
        fetch can complete."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.max_wait
        purgatory = self.purgatory
        by_key = {(t.topic, t.partition): t for t in targets}
        readable = _readable(results)
        returned_records = bool(readable)
        changed_since_read: set[PartitionKey] = set()
        while True:
            wake_up = min(deadline, self._throttle_wake_up(params, targets, loop.time()))
            if changes is None:
                changed = await purgatory.wait_for_changes(watched, wake_up)
            else:
                changed = await changes.wait_for_changes(wake_up)
                for key in changed:
                    if key not in by_key:  # a partition of the session that was not read: read it too
                        target = changes.target(key)
                        if target is not None:
                            by_key[key] = target
                            targets.append(target)
            changed_since_read |= changed
            if changed and loop.time() < deadline:
                complete = False
                for key in changed:
                    target = by_key.get(key)
                    size = None if target is None else self._bytes_available(params, target)
                    if size is None:
                        complete = True
                        break
                    readable[key] = size
                if not complete and sum(readable.values()) < params.min_bytes:
                    continue
            if changed and not returned_records:
                # the other partitions returned nothing and did not change: only the changed are read
                results, readable_bytes, failed = self._read_again(
                    params, targets, results, changed_since_read
                )
            else:
                results, readable_bytes, failed, watched, _ = self.read_from_log(params, targets)
            if readable_bytes >= params.min_bytes or failed or loop.time() >= deadline:
                return results
            readable = _readable(results)
            returned_records = bool(readable)
            changed_since_read.clear()

    def _read_again(
        self,
        params: FetchParams,
        targets: Sequence[FetchTarget],
        results: list[FetchPartitionData],
        changed: set[PartitionKey],
    ) -> tuple[list[FetchPartitionData], int, bool]:
        """What read_from_log would answer now when only the partitions in `changed` changed since
        `results` and none returned records (so none took from the response budget): those are read
        again (added after the others when they were not read before), the others keep their answer.
        (results, bytes readable, whether one failed)."""
        fresh = self.read_from_log(params, [t for t in targets if (t.topic, t.partition) in changed])[0]
        by_key = {(r.topic, r.partition_index): r for r in fresh}
        merged = [by_key.pop((r.topic, r.partition_index), r) for r in results]
        merged += by_key.values()
        ordered = [r for r in merged if r.error_code not in _METADATA_ERRORS]
        ordered += [r for r in merged if r.error_code in _METADATA_ERRORS]
        readable = 0
        failed = False
        for r in ordered:
            if r.records is not None:
                readable += r.records.size
            if r.error_code in _METADATA_ERRORS:
                continue
            if (
                r.error_code is not ErrorCode.none
                or r.diverging_epoch is not None
                or r.preferred_read_replica >= 0
            ):
                failed = True
        return ordered, readable, failed

    def at_fetch_end(self, params: FetchParams, target: FetchTarget) -> bool:
        """Whether a read of `target` would answer nothing until the partition changes (Partition.at_fetch_end),
        and, for a follower, it is in the ISR (else each of its fetches may grow the ISR); a consumer's
        fetch with a replica selector is read each time, since the selector's choice moves with the
        followers."""
        partition = self._partitions.get((target.topic, target.partition))
        if partition is None:
            return False
        replica_id = params.replica_id
        if replica_id >= 0:
            if replica_id not in partition.isr:
                return False
        elif params.client_metadata is not None and self.replica_selector is not None:
            return False
        return partition.at_fetch_end(
            target.fetch_offset,
            replica_id=replica_id,
            read_committed=params.read_committed,
            current_leader_epoch=target.current_leader_epoch,
            last_fetched_epoch=target.last_fetched_epoch,
        )

    def _bytes_available(self, params: FetchParams, target: FetchTarget) -> int | None:
        """DelayedFetch.tryComplete's look at one changed partition: the bytes a read would now return
        there, or None when the fetch must complete at once (the partition gone, led elsewhere, in
        another leader epoch, truncated below the fetch offset, or maybe diverged)."""
        partition = self._partitions.get((target.topic, target.partition))
        if partition is None:
            return None
        replica_id = params.replica_id
        if not partition.is_leader and (replica_id >= 0 or params.client_metadata is None):
            return None
        if 0 <= target.current_leader_epoch != partition.leader_epoch:
            return None
        log_ = partition.log
        if replica_id >= 0:
            end = log_.log_end_offset
        else:
            end = log_.last_stable_offset if params.read_committed else log_.high_watermark
        fetch_offset = target.fetch_offset
        if end < fetch_offset:
            return None
        if end == fetch_offset:
            return 0
        if 0 <= target.last_fetched_epoch != log_.latest_epoch():
            return None
        if replica_id >= 0 and self.should_leader_throttle(partition, replica_id):
            return 0
        try:
            records = log_.read(fetch_offset, target.partition_max_bytes, upper_bound=end, min_one_batch=True)
        except (OffsetOutOfRange, LogStorageError):
            return None
        return 0 if records is None else records.size

    def _throttle_wake_up(self, params: FetchParams, targets: Sequence[FetchTarget], now: float) -> float:
        """When a follower's throttled partitions may be read again: the leader's replication rate back
        at its bound. (Kafka's DelayedFetch looks again only on a change or at max_wait; looking when
        the rate allows makes the copy follow the bound to within a fetch rather than half a second.)"""
        quota = self.leader_quota
        if (
            params.replica_id < 0
            or not quota.throttles_any
            or not any(quota.is_throttled(t.topic, t.partition) for t in targets)
        ):
            return math.inf
        pause = quota.seconds_until_within()
        return now + max(pause, _MIN_THROTTLE_WAIT) if pause > 0 else math.inf

    def read_from_log(
        self, params: FetchParams, targets: Sequence[FetchTarget]
    ) -> tuple[list[FetchPartitionData], int, bool, list[PartitionKey], int]:
        """ReplicaManager.readFromLog: (results in request order with the partitions the metadata does
        not know last, bytes readable, whether a partition failed, the partitions a DelayedFetch waits on,
        how many partitions passed the metadata checks). Each partition's budget is min(its
        partition_max_bytes, what is left); until one partition returned data the first batch is
        returned whole (minOneMessage)."""
        results: list[FetchPartitionData] = []
        erroneous: list[FetchPartitionData] = []
        limit = params.max_bytes
        min_one_batch = True
        readable = 0
        failed = False
        watched: list[PartitionKey] = []
        image = self.image
        now_ms = monotonic_ms()
        for target in targets:
            result, watch = self._read_partition(
                image, params, target, min(target.partition_max_bytes, limit), min_one_batch, now_ms
            )
            if watch:
                watched.append((target.topic, target.partition))
            if result.error_code in _METADATA_ERRORS:
                erroneous.append(result)
                continue
            results.append(result)
            if result.error_code is not ErrorCode.none:
                failed = True
            elif result.diverging_epoch is not None or result.preferred_read_replica >= 0:
                failed = True  # Kafka answers a diverging epoch or a preferred read replica at once
            size = result.records.size if result.records is not None else 0
            if size:
                min_one_batch = False
                limit = max(0, limit - size)
                readable += size
        interesting = len(results)
        return results + erroneous, readable, failed, watched, interesting

    def _read_partition(
        self,
        image: ClusterMetadataImage,
        params: FetchParams,
        target: FetchTarget,
        max_bytes: int,
        min_one_batch: bool,
        now_ms: int,
    ) -> tuple[FetchPartitionData, bool]:
        """readFromLog's read of one partition: consumers up to the high watermark or last stable offset,
        a follower (replica_id >= 0, one of the replicas) up to the log end. A consumer that sent its
        client metadata (Fetch v11+) may read from a follower, and the leader may send it to a replica of
        its rack instead (a read with `preferred_read_replica` and no records). Errors become the
        partition's answer; read_committed consumers get the aborted transactions. (result, whether the
        partition is one a DelayedFetch waits on)."""
        (
            topic,
            topic_id,
            index,
            fetch_offset,
            _,
            current_leader_epoch,
            last_fetched_epoch,
            follower_log_start_offset,
        ) = target
        replica_id, replica_epoch, _, _, _, read_committed, client_metadata = params
        try:
            if image.partition(topic, index) is None:
                raise PartitionError(ErrorCode.unknown_topic_or_partition)
            partition = self._partitions.get((topic, index))
            if partition is None:
                raise PartitionError(ErrorCode.not_leader_or_follower)
            if topic_id not in (None, _NO_TOPIC_ID) and partition.log.topic_id not in (None, topic_id):
                # A fetch session's partition named by the id of a topic deleted since, while a new
                # topic of the same name has the log now (ReplicaManager.readFromLog's check).
                raise PartitionError(ErrorCode.inconsistent_topic_id)
            # a preferred read replica is looked for only for a consumer's fetch (v11+) with a selector
            if client_metadata is not None and replica_id < 0 and self.replica_selector is not None:
                preferred = self.find_preferred_read_replica(
                    partition, client_metadata, replica_id, fetch_offset, now_ms
                )
                read = (
                    None
                    if preferred is None
                    else partition.fetch_offset_snapshot(current_leader_epoch)._replace(
                        preferred_read_replica=preferred
                    )
                )
            else:
                read = partition.caught_up_read(
                    fetch_offset,
                    replica_id=replica_id,
                    read_committed=read_committed,
                    current_leader_epoch=current_leader_epoch,
                    last_fetched_epoch=last_fetched_epoch,
                    follower_log_start_offset=follower_log_start_offset,
                    replica_epoch=replica_epoch,
                    now_ms=now_ms,
                )
            if read is None:
                read = partition.read_records(
                    fetch_offset,
                    max_bytes,
                    replica_id=replica_id,
                    read_committed=read_committed,
                    min_one_batch=min_one_batch,
                    current_leader_epoch=current_leader_epoch,
                    last_fetched_epoch=last_fetched_epoch,
                    follower_log_start_offset=follower_log_start_offset,
                    replica_epoch=replica_epoch,
                    # FetchParams.fetchOnlyLeader: followers always, consumers without client metadata (< v11)
                    fetch_only_from_leader=replica_id >= 0
                    or (replica_id == CONSUMER_REPLICA_ID and client_metadata is None),
                )
                if (
                    replica_id >= 0
                    and read.records is not None
                    and self.should_leader_throttle(partition, replica_id)
                ):
                    read = read._replace(records=None)  # a throttled replica gets no records
        except PartitionError as e:
            error = e.error_code
            if error is ErrorCode.unknown_topic_or_partition:
                return FetchPartitionData(topic, topic_id, index, error), False
            return FetchPartitionData(topic, topic_id, index, error, empty_records=True), False
        except OffsetOutOfRange:
            return FetchPartitionData(
                topic, topic_id, index, ErrorCode.offset_out_of_range, empty_records=True
            ), True
        except LogStorageError:
            return FetchPartitionData(
                topic, topic_id, index, ErrorCode.kafka_storage_error, empty_records=True
            ), True
        aborted = () if read_committed and replica_id < 0 else None
        records = read.records
        if records is not None and aborted is not None:
            # Kafka's LocalLog.addAbortedTransactions: the aborts overlapping the returned batches.
            partition_log = partition.log
            upper = partition_log.fetch_upper_bound_offset(records)
            aborted = tuple(
                (txn.producer_id, txn.first_offset)
                for txn in partition_log.collect_aborted_transactions(fetch_offset, upper)
            )
        result = FetchPartitionData(
            topic,
            topic_id,
            index,
            ErrorCode.none,
            read.high_watermark,
            read.last_stable_offset,
            read.log_start_offset,
            aborted,
            records=records,
            empty_records=True,
            diverging_epoch=read.diverging_epoch,
            preferred_read_replica=read.preferred_read_replica,
        )
        return result, True

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool:
        """ReplicaManager.shouldLeaderThrottle: a replica out of the ISR, listed in the topic's
        leader.replication.throttled.replicas, while the leader's replication rate is over its bound
        (an in-sync follower is never held back, so a throttle cannot shrink the ISR)."""
        quota = self.leader_quota
        return (
            replica_id not in partition.isr
            and quota.is_throttled(partition.topic, partition.index)
            and quota.is_quota_exceeded()
        )

    def record_leader_replication(self, sizes: Iterable[tuple[str, int, int]]) -> None:
        """The bytes a follower's fetch answer carries for throttled partitions, in-sync ones too
        (KafkaApis.sizeOfThrottledPartitions): (topic, partition, size) per partition."""
        quota = self.leader_quota
        quota.record(sum(size for topic, index, size in sizes if quota.is_throttled(topic, index)))

    def find_preferred_read_replica(
        self,
        partition: Partition,
        client_metadata: ClientMetadata,
        replica_id: int,
        fetch_offset: int,
        now_ms: int,
    ) -> int | None:
        """ReplicaManager.findPreferredReadReplica: on the leader, for a consumer, what the replica selector
        picks among the leader and the in-sync followers that hold `fetch_offset`; None for the leader."""
        if not partition.is_leader or replica_id >= 0 or self.replica_selector is None or self.image is None:
            return None
        image = self.image

        def view(broker_id: int, log_end_offset: int, since_caught_up_ms: int) -> ReplicaView:
            # getPartitionReplicaEndpoints: registered, unfenced brokers with this listener
            registration = image.broker(broker_id)
            reachable = (
                registration is not None
                and not registration.fenced
                and registration.endpoint(image.listener_name) is not None
            )
            rack = registration.rack if reachable and registration is not None else None
            return ReplicaView(broker_id, rack, reachable, log_end_offset, since_caught_up_ms)

        followers = [
            view(replica.broker_id, replica.log_end_offset, now_ms - replica.last_caught_up_time_ms)
            for replica in partition.remote_replicas.values()
            if replica.broker_id in partition.isr
            and replica.log_end_offset >= fetch_offset
            and replica.log_start_offset <= fetch_offset
        ]
        leader = view(self.node_id, partition.log.log_end_offset, 0)
        selected = self.replica_selector.select(client_metadata, PartitionView((*followers, leader), leader))
        if selected is None or not selected.has_endpoint or selected == leader:
            return None
        return selected.broker_id
