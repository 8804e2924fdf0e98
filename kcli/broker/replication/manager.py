"""The partitions this broker hosts and what requests do with them (Kafka's `ReplicaManager`).

Handlers and coordinators reach partitions only through here: a produce appends to the leader and, with
acks=all, waits in the purgatory until the high watermark has passed its records (DelayedProduce); a
fetch reads from the leader and, short of min_bytes, waits there for the partitions to change
(DelayedFetch); a follower's fetch also tells the leader how far that follower got. Each metadata image
is applied to the hosted partitions (`apply_image`): the partitions with a replica here are hosted,
deleted ones dropped; a registration naming this node leader in a new epoch makes it the leader
(Partition.makeLeader), one naming another broker makes it a follower whose fetcher pulls from that
leader (makeFollower). ISR changes go to the controller through the AlterPartitionManager, and the
isr-expiration task shrinks ISRs by the followers that stopped keeping up.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.log import Log, LogManager
from kcli.broker.metadata.image import ClusterMetadataImage, PartitionRegistration
from kcli.broker.replication.alter_partition_manager import AlterPartitionManager
from kcli.broker.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from kcli.broker.replication.partition import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    Partition,
    PartitionError,
    PartitionRead,
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

log = logging.getLogger("kcli.broker.replication")

CONSUMER_REPLICA_ID = -1
"""FetchRequest.CONSUMER_REPLICA_ID; -2 and below are debugging or future replicas."""


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
        error (stopReplicas); a partition this node now follows in a new leader epoch gets its fetcher."""
        self.image = image
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

    def acks_reached(self, appended: list[tuple[PartitionKey, int]]) -> bool:
        """DelayedProduce's condition: every partition's high watermark has passed its required offset,
        or the partition is no longer led here (its answer is then the error, see `acks_error`)."""
        for key, required_offset in appended:
            partition = self._partitions.get(key)
            if partition is not None and partition.is_leader and partition.high_watermark < required_offset:
                return False
        return True

    async def wait_for_acks(self, appended: list[tuple[PartitionKey, int]], timeout: float) -> bool:
        """Wait (DelayedProduce) until `acks_reached` or `timeout` seconds; whether it was reached."""
        return await self.purgatory.wait_until(
            [key for key, _ in appended], lambda: self.acks_reached(appended), timeout
        )

    def acks_error(self, key: PartitionKey, required_offset: int) -> ErrorCode:
        """The answer for a partition of a completed DelayedProduce (checkEnoughReplicasReachOffset)."""
        partition = self._partitions.get(key)
        if partition is None:
            return ErrorCode.not_leader_or_follower
        return partition.acks_error(required_offset)

    # --- fetch ---------------------------------------------------------------------------------------

    def read_from_log(
        self,
        image: ClusterMetadataImage,
        topic: str,
        index: int,
        fetch_offset: int,
        max_bytes: int,
        *,
        replica_id: int,
        read_committed: bool,
        min_one_batch: bool,
        current_leader_epoch: int,
        last_fetched_epoch: int,
        follower_log_start_offset: int = -1,
        replica_epoch: int = -1,
        client_metadata: ClientMetadata | None = None,
    ) -> PartitionRead:
        """ReplicaManager.readFromLog's read of one partition: consumers up to the high watermark or last
        stable offset, a follower (replica_id >= 0, one of the replicas) up to the log end. A consumer
        that sent its client metadata (Fetch v11+) may read from a follower, and the leader may send it
        to a replica of its rack instead (a read with `preferred_read_replica` and no records). Raises
        PartitionError, OffsetOutOfRange or the log's LogStorageError."""
        if image.partition(topic, index) is None:
            raise PartitionError(ErrorCode.unknown_topic_or_partition)
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        if client_metadata is not None:
            preferred = self.find_preferred_read_replica(
                partition, client_metadata, replica_id, fetch_offset, monotonic_ms()
            )
            if preferred is not None:
                return partition.fetch_offset_snapshot(current_leader_epoch)._replace(
                    preferred_read_replica=preferred
                )
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
            return read._replace(records=None)  # readFromLog: a throttled replica gets no records
        return read

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
