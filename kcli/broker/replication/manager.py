"""The partitions this broker hosts and what requests do with them (Kafka's `ReplicaManager`).

Handlers and coordinators reach partitions only through here: a produce appends to the leader and, with
acks=all, waits in the purgatory until the high watermark has passed its records (DelayedProduce); a
fetch reads from the leader and, short of min_bytes, waits there for the partitions to change
(DelayedFetch). Each metadata image is applied to the hosted partitions (`apply_image`): new partitions
are hosted, deleted ones dropped, and a registration naming this node leader in a new epoch makes it
the leader (Partition.makeLeader).
"""

from __future__ import annotations

from collections.abc import Iterator

from kio.schema.errors import ErrorCode

from kcli.broker.log import Log, LogManager
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.broker.replication.partition import Partition, PartitionError, PartitionRead
from kcli.broker.replication.purgatory import PartitionKey, Purgatory


class ReplicaManager:
    def __init__(self, node_id: int, logs: LogManager) -> None:
        self.node_id = node_id
        self.logs = logs
        self.purgatory = Purgatory()
        self._partitions: dict[PartitionKey, Partition] = {}

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
        deletes the logs first): host each local log the image names, apply its registration, drop the rest.
        Requests waiting on a dropped partition are woken to answer its error (stopReplicas)."""
        for key in [k for k in self._partitions if self.logs.get_log(*k) is None]:
            del self._partitions[key]
            self.purgatory.check_and_complete(key)
        for partition_log in self.logs.logs():
            registration = image.partition(partition_log.topic, partition_log.partition)
            if registration is None:
                continue
            key = (partition_log.topic, partition_log.partition)
            partition = self._partitions.get(key)
            if partition is None or partition.log is not partition_log:
                partition = self._partitions[key] = Partition(partition_log, self.node_id, self.purgatory)
            partition.apply_registration(registration)

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
        if partition is None or not partition.is_leader:
            return ErrorCode.not_leader_or_follower
        if partition.high_watermark < required_offset:
            return ErrorCode.request_timed_out
        return ErrorCode.none

    # --- fetch ---------------------------------------------------------------------------------------

    def read_from_leader(
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
    ) -> PartitionRead:
        """readFromLog for one partition: consumers up to the high watermark or last stable offset, a
        follower (replica_id >= 0, one of the replicas) up to the log end. Raises PartitionError,
        OffsetOutOfRange or the log's LogStorageError."""
        if image.partition(topic, index) is None:
            raise PartitionError(ErrorCode.unknown_topic_or_partition)
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        return partition.read_records(
            fetch_offset,
            max_bytes,
            replica_id=replica_id,
            read_committed=read_committed,
            min_one_batch=min_one_batch,
            current_leader_epoch=current_leader_epoch,
            last_fetched_epoch=last_fetched_epoch,
        )
