"""Groups and offsets in __consumer_offsets (Kafka's GroupMetadataManager).

It owns the group cache, knows which __consumer_offsets partitions this node coordinates and which are
still loading, writes group and offset records (key and value schemas from `formats.internal`, one
batch per call, appended as the coordinator), loads partitions back at start-up, and turns expired
or deleted offsets and dead groups into tombstones.

Group and offset writes end when the high watermark has passed them (`coordinator_log.write_records`,
waiting at most offsets.commit.timeout.ms), where Kafka's storeGroup/storeOffsets answer from the
append's callback; the methods here are coroutines that return that outcome. Until then an offset
commit is only pending (UNSTABLE_OFFSET_COMMIT for RequireStable fetches, the old offset otherwise),
and a failed or timed-out write leaves nothing in the cache. Tombstones are written with acks=0 and
not waited for, as Kafka's cleanupGroupMetadata does: a lost one is written again on the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from formats.internal import (
    MemberMetadata,
    encode_group_metadata,
    encode_group_metadata_key,
    encode_offset_commit,
    encode_offset_commit_key,
    offsets_partition_for,
)
from kcli.broker.coordinator_log import append_records, replay_log, write_records
from kcli.broker.group.consumer_group import ConsumerGroup
from kcli.broker.group.group import ClassicGroup, CommitRecord, GroupState, OffsetAndMetadata
from kcli.broker.group.loader import PartitionReplay
from kcli.broker.log.log import wall_clock_ms
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.replication.manager import ReplicaManager
from kcli.config import BrokerConfig

log = logging.getLogger("kcli.broker.group")

OFFSETS_TOPIC = "__consumer_offsets"

TopicPartition = tuple[str, int]


class GroupMetadataManager:
    """The cache of groups this node coordinates, and their __consumer_offsets partitions."""

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
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        """Consumer groups (KIP-848); their committed offsets stay in a member-less ClassicGroup of `groups`."""
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self.max_metadata_size = int(config["offset.metadata.max.bytes"])  # type: ignore[call-overload]
        self.retention_ms = int(config["offsets.retention.minutes"]) * 60_000  # type: ignore[call-overload]
        self.commit_timeout_ms = int(config["offsets.commit.timeout.ms"])  # type: ignore[call-overload]
        self.shutting_down = False
        self.removed_consumer_groups: list[ConsumerGroup] = []
        """Consumer groups dropped with their partition, for the coordinator to stop their timers."""

    # --- placement --------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        """The real partition count of __consumer_offsets once it exists, else the configured one."""
        partitions = self.loader.image.partitions_of(OFFSETS_TOPIC)
        if partitions:
            return len(partitions)
        return int(self.config["offsets.topic.num.partitions"])  # type: ignore[call-overload]

    def partition_for(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.num_partitions)

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned_partitions

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading_partitions

    @property
    def is_loading(self) -> bool:
        return bool(self.loading_partitions)

    def led_partitions(self) -> list[int]:
        """The __consumer_offsets partitions this node leads and has a log for."""
        image = self.loader.image
        node_id = self.config.node_id
        return sorted(
            index
            for index, registration in (image.partitions_of(OFFSETS_TOPIC) or {}).items()
            if registration.leader == node_id and self.replicas.log(OFFSETS_TOPIC, index) is not None
        )

    # --- the cache --------------------------------------------------------------------------------

    def get_group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def add_group(self, group: ClassicGroup) -> ClassicGroup:
        """Add `group` unless one with its id is cached; return the cached one."""
        return self.groups.setdefault(group.group_id, group)

    def get_or_create_group(self, group_id: str, create: bool) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.add_group(ClassicGroup(group_id, GroupState.EMPTY, self.clock()))
        return group

    def current_groups(self) -> list[ClassicGroup]:
        return list(self.groups.values())

    # --- writes -----------------------------------------------------------------------------------

    async def store_group(self, group: ClassicGroup, assignment: Mapping[str, bytes]) -> ErrorCode:
        """Write the group record (what SyncGroup's leader and an emptied group persist).

        Returns NONE once it is committed, or the error the group APIs report for a failed append.
        The caller applies the outcome: the group may have moved on while the write waited.
        """
        key, value = group_metadata_record(group, assignment)
        error, _ = await self._write(self.partition_for(group.group_id), [(key, value)])
        if error is not ErrorCode.none:
            log.debug(
                "Metadata from group %s with generation %d failed when appending to log due to %s",
                group.group_id,
                group.generation_id,
                error.name,
            )
        return _GROUP_APPEND_ERRORS.get(error, error)

    async def store_offsets(
        self, group: ClassicGroup, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        """Write the valid commits as one batch; they are pending until it is committed, then the cache
        takes them (unless the group was unloaded meanwhile); a failed write only drops them."""
        results, valid = self._split_by_metadata_size(offsets)
        if not valid:
            return results
        records = _commit_records(group.group_id, valid, with_expire=True)
        group.prepare_offset_commit(valid)
        error, base_offset = await self._write(self.partition_for(group.group_id), records)
        if not group.is_(GroupState.DEAD):
            for key, committed in valid.items():
                if error is ErrorCode.none:
                    group.on_offset_commit_append(key, CommitRecord(base_offset, committed))
                else:
                    group.fail_pending_offset_write(key, committed)
        mapped = _OFFSET_APPEND_ERRORS.get(error, error)
        results.update(dict.fromkeys(valid, mapped))
        return results

    async def store_txn_offsets(
        self,
        group: ClassicGroup,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: one transactional batch stamped with the producer; the offsets stay pending
        for that producer until its COMMIT marker (on_transaction_completed), and vanish on ABORT or
        when the write fails."""
        results, valid = self._split_by_metadata_size(offsets)
        if not valid:
            return results
        records = _commit_records(group.group_id, valid, with_expire=False)
        group.prepare_txn_offset_commit(producer_id, valid)
        error, base_offset = await self._write(
            self.partition_for(group.group_id), records, producer=(producer_id, producer_epoch)
        )
        if not group.is_(GroupState.DEAD):
            for key, committed in valid.items():
                if error is ErrorCode.none:
                    group.on_txn_offset_commit_append(producer_id, key, CommitRecord(base_offset, committed))
                else:
                    group.fail_pending_txn_offset_commit(producer_id, key)
        mapped = _OFFSET_APPEND_ERRORS.get(error, error)
        results.update(dict.fromkeys(valid, mapped))
        return results

    def _split_by_metadata_size(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetAndMetadata]]:
        """(OFFSET_METADATA_TOO_LARGE for the commits over offset.metadata.max.bytes, the valid ones)."""
        too_large: dict[TopicPartition, ErrorCode] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        for key, committed in offsets.items():
            if _java_length(committed.metadata) > self.max_metadata_size:
                too_large[key] = ErrorCode.offset_metadata_too_large
            else:
                valid[key] = committed
        return too_large, valid

    def get_offsets(
        self, group_id: str, require_stable: bool, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[OffsetAndMetadata | None, ErrorCode]]:
        """Committed offsets (None: nothing committed); every partition when `partitions` is None."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return {} if partitions is None else {key: (None, ErrorCode.none) for key in partitions}
        keys = list(group.offsets) if partitions is None else list(partitions)
        answer: dict[TopicPartition, tuple[OffsetAndMetadata | None, ErrorCode]] = {}
        for key in keys:
            if require_stable and group.has_pending_offset_commits(*key):
                answer[key] = (None, ErrorCode.unstable_offset_commit)
            else:
                answer[key] = (group.offset(*key), ErrorCode.none)
        return answer

    def cleanup_group_metadata(
        self,
        groups: Iterable[ClassicGroup],
        selector: Callable[[ClassicGroup], Mapping[TopicPartition, OffsetAndMetadata]],
    ) -> int:
        """Remove what `selector` picks from each group, tombstone it; an Empty group left without
        offsets dies and, if it ever had a generation, gets a group tombstone too."""
        removed_count = 0
        now = self.clock()
        for group in list(groups):
            removed = selector(group)
            if group.is_(GroupState.EMPTY) and not group.has_offsets():
                log.info(
                    "Group %s transitioned to Dead in generation %d", group.group_id, group.generation_id
                )
                group.transition_to(GroupState.DEAD, now)
            tombstones = [
                (encode_offset_commit_key(group.group_id, topic, partition), None)
                for topic, partition in removed
            ]
            if group.is_(GroupState.DEAD) and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                if group.generation_id > 0:
                    tombstones.append((encode_group_metadata_key(group.group_id), None))
            if tombstones:
                # acks=0, as Kafka writes them: a lost tombstone is written again on the next pass.
                error = append_records(
                    self.replicas,
                    OFFSETS_TOPIC,
                    self.partition_for(group.group_id),
                    tombstones,
                    now_ms=self.clock(),
                )
                if error is not ErrorCode.none:
                    log.error(
                        "Failed to append %d tombstones for group %s: %s",
                        len(tombstones),
                        group.group_id,
                        error.name,
                    )
                else:
                    removed_count += len(removed)
        return removed_count

    # --- consumer groups beside classic ones -------------------------------------------------------

    def offsets_holder(self, group_id: str) -> ClassicGroup:
        """The member-less ClassicGroup that keeps a consumer group's committed offsets."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            self.groups.pop(group_id, None)
            group = self.add_group(ClassicGroup(group_id, GroupState.EMPTY, self.clock()))
        return group

    def is_simple_classic(self, group_id: str) -> bool:
        """ClassicGroup.isSimpleGroup: Empty and never had a protocol (it only holds offsets)."""
        group = self.groups.get(group_id)
        return group is None or (group.is_(GroupState.EMPTY) and group.protocol_type is None)

    def release_classic_group(self, group_id: str) -> bool:
        """A first consumer-protocol heartbeat for `group_id`: True when a consumer group may take the id.
        A simple group stays as the holder of the offsets; an Empty classic group is deleted
        (maybeDeleteEmptyClassicGroup: its metadata tombstoned, its offsets kept); one with members is
        not released here, so False (its online upgrade is GroupMigration.upgrade's)."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD) or self.is_simple_classic(group_id):
            return True
        if not group.is_(GroupState.EMPTY):
            return False
        had_generation = group.generation_id > 0
        group.generation_id = 0
        group.protocol_type = group.protocol_name = group.leader_id = None
        if had_generation:  # acks=0, as cleanup_group_metadata writes tombstones
            tombstone = [(encode_group_metadata_key(group_id), None)]
            append_records(
                self.replicas, OFFSETS_TOPIC, self.partition_for(group_id), tombstone, now_ms=self.clock()
            )
        return True

    def cleanup_expired_offsets(self) -> int:
        """One offsets.retention.check.interval.ms pass; a consumer group with members keeps its offsets."""
        now = self.clock()
        groups = [
            g
            for g in self.current_groups()
            if g.group_id not in self.consumer_groups or self.consumer_groups[g.group_id].is_empty
        ]
        removed = self.cleanup_group_metadata(
            groups, lambda group: group.remove_expired_offsets(now, self.retention_ms)
        )
        if removed:
            log.info("Removed %d expired offsets in %d milliseconds.", removed, self.clock() - now)
        return removed

    # --- loading ----------------------------------------------------------------------------------

    def remove_groups_for_partition(self, partition: int) -> list[ClassicGroup]:
        """This node no longer leads __consumer_offsets-`partition` (removeGroupsForPartition): stop
        coordinating it and drop its groups from the cache; the removed groups are returned to unload."""
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        removed = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        for group in removed:
            del self.groups[group.group_id]
        for group_id in [g for g in self.consumer_groups if self.partition_for(g) == partition]:
            self.removed_consumer_groups.append(self.consumer_groups.pop(group_id))
        return removed

    def own_if_empty(self, partition: int) -> bool:
        """Take over an empty partition without a load; False if it has records to replay."""
        partition_log = self.replicas.log(OFFSETS_TOPIC, partition)
        if partition_log is None or partition_log.log_end_offset != partition_log.log_start_offset:
            return False
        self.owned_partitions.add(partition)
        return True

    async def load_partition(
        self,
        partition: int,
        on_group_loaded: Callable[[ClassicGroup], None],
        on_consumer_group_loaded: Callable[[ConsumerGroup], None] = lambda group: None,
    ) -> None:
        """Replay __consumer_offsets-`partition` into the cache, yielding to the event loop between chunks.

        Requests for its groups get COORDINATOR_LOAD_IN_PROGRESS until this returns.
        """
        name = f"{OFFSETS_TOPIC}-{partition}"
        partition_log = self.replicas.log(OFFSETS_TOPIC, partition)
        if partition_log is None:
            log.warning("Attempted to load offsets and group metadata from %s, but found no log", name)
            self.loading_partitions.discard(partition)
            return
        started = self.clock()
        replay = PartitionReplay(name)
        await replay_log(partition_log, replay.replay, stopping=lambda: self.shutting_down)
        if self.shutting_down or partition not in self.loading_partitions:
            return  # stopped, or this node resigned the partition while it was loading
        now = self.clock()
        loaded = replay.groups(now)
        for group in loaded:
            current = self.add_group(group)
            if current is not group:
                log.debug("Attempt to load group %s from log failed: a cached group exists", group.group_id)
                continue
            if group.group_id in replay.consumer_groups and not group.members:
                continue  # a consumer group's offsets, held by an empty classic group: not a group of its own
            on_group_loaded(group)
        for group_id, consumer_group in replay.consumer_groups.items():
            if group_id not in self.consumer_groups:
                self.consumer_groups[group_id] = consumer_group
                on_consumer_group_loaded(consumer_group)
        self.loading_partitions.discard(partition)
        self.owned_partitions.add(partition)
        log.log(
            logging.INFO if loaded else logging.DEBUG,
            "Finished loading offsets and group metadata from %s in %d milliseconds: %d group(s), %d offset(s)",
            name,
            self.clock() - started,
            len({group.group_id for group in loaded} | replay.consumer_groups.keys()),
            len(replay.offsets),
        )

    # --- writes -----------------------------------------------------------------------------------

    def append_now(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append consumer-group records as one batch at once, not waiting for the commit (acks=0)."""
        return append_records(self.replicas, OFFSETS_TOPIC, partition, records, now_ms=self.clock())

    async def write(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> tuple[ErrorCode, int]:
        """Write consumer-group records as one batch and wait until committed: (error, base offset)."""
        return await self._write(partition, records)

    async def _write(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]] | list[tuple[bytes, bytes]],
        *,
        producer: tuple[int, int] | None = None,
    ) -> tuple[ErrorCode, int]:
        """Write one batch of (key, value) records to __consumer_offsets-`partition` and wait, at most
        offsets.commit.timeout.ms, until it is committed (appendForGroup); (error, base offset)."""
        return await write_records(
            self.replicas,
            OFFSETS_TOPIC,
            partition,
            records,
            now_ms=self.clock(),
            timeout_ms=self.commit_timeout_ms,
            producer=producer,
        )


def group_metadata_record(group: ClassicGroup, assignment: Mapping[str, bytes]) -> tuple[bytes, bytes]:
    """The GroupMetadata record of `group` with each member's `assignment` (storeGroup's record)."""
    protocol = group.protocol_name
    members = [
        MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata(protocol) if protocol is not None else b"",
            assignment=assignment.get(m.member_id, b""),
        )
        for m in group.members.values()
    ]
    key, value = encode_group_metadata(
        group.group_id,
        group.protocol_type or "",
        group.generation_id,
        protocol,
        group.leader_id,
        group.current_state_timestamp if group.current_state_timestamp is not None else -1,
        members,
    )
    return key, value


def _commit_records(
    group_id: str, valid: Mapping[TopicPartition, OffsetAndMetadata], *, with_expire: bool
) -> list[tuple[bytes, bytes]]:
    """The OffsetCommit records of `valid`; transactional commits never carry an expire timestamp."""
    return [
        encode_offset_commit(
            group_id,
            topic,
            partition,
            committed.offset,
            committed.leader_epoch,
            committed.metadata,
            committed.commit_timestamp,
            committed.expire_timestamp if with_expire and committed.expire_timestamp >= 0 else None,
        )
        for (topic, partition), committed in valid.items()
    ]


def _java_length(text: str) -> int:
    """String.length(): UTF-16 code units, so a character outside the BMP counts twice."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


_GROUP_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.request_timed_out: ErrorCode.rebalance_in_progress,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}
"""GroupMetadataManager.storeGroup's mapping of append errors to what JoinGroup/SyncGroup return
(the classic coordinator's: a timed-out write asks the members to rebalance; anything else is kept)."""

_OFFSET_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.invalid_fetch_size: ErrorCode.invalid_commit_offset_size,
}
"""GroupMetadataManager.storeOffsets' mapping (Kafka's maybeConvertOffsetCommitError); anything else,
REQUEST_TIMED_OUT for a commit that outlived offsets.commit.timeout.ms among them, is returned as it is."""
