"""The group coordinator (Kafka 4's GroupCoordinatorService), on the broker's event loop.

Every group request handler calls one method here. The facade checks what Kafka's service and its
runtime check before a shard sees a request (the group id, an active coordinator, a loaded partition
this node leads), then hands it to the part that owns it, along Kafka 4's lines:

- `ClassicGroupCoordinator` (classic_coordinator): JoinGroup, SyncGroup, Heartbeat, LeaveGroup;
- `ConsumerGroupCoordinator` (consumer_coordinator): the consumer rebalance protocol (KIP-848);
- `OffsetMetadataManager` (offsets): OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete.

Groups and offsets live in __consumer_offsets through `GroupMetadataManager` (storage), which loads
the partitions this node leads at start-up (COORDINATOR_LOAD_IN_PROGRESS until done) and when the
topic is created; the facade follows leadership (onElection, onResignation), runs offset retention
every `offsets.retention.check.interval.ms`, owns the timers and tasks the parts schedule (cancelled
at shutdown) and answers the admin APIs, which see both kinds of group.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Iterable, Mapping

from kio.schema.errors import ErrorCode

from kcli.broker.group.classic_coordinator import ClassicGroupCoordinator, resolved, run_guarded
from kcli.broker.group.consumer_coordinator import ConsumerGroupCoordinator
from kcli.broker.group.group import (
    DEAD_GROUP,
    ClassicGroup,
    GroupState,
    GroupSummary,
    JoinResult,
    OffsetAndMetadata,
    SyncResult,
)
from kcli.broker.group.migration import GroupMigration
from kcli.broker.group.offsets import OffsetMetadataManager
from kcli.broker.group.storage import OFFSETS_TOPIC, GroupMetadataManager, TopicPartition
from kcli.broker.log.log import wall_clock_ms
from kcli.broker.metadata.image import ClusterMetadataImage, TopicChanges
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.replication.manager import ReplicaManager
from kcli.config import BrokerConfig

log = logging.getLogger("kcli.broker.group")


class GroupApi(enum.Enum):
    """The APIs whose group id rules differ: "" is a valid id only for the ones marked True."""

    JOIN_GROUP = False
    SYNC_GROUP = False
    HEARTBEAT = False
    LEAVE_GROUP = False
    OFFSET_DELETE = False
    OFFSET_COMMIT = True
    OFFSET_FETCH = True
    DESCRIBE_GROUPS = True
    DELETE_GROUPS = True
    CONSUMER_GROUP_HEARTBEAT = False

    def __init__(self, empty_id_allowed: bool) -> None:
        self.empty_id_allowed = empty_id_allowed


class GroupCoordinator:
    """The groups (classic and consumer) and offsets of the __consumer_offsets partitions this node leads."""

    name = "GroupCoordinator"

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, loader: MetadataLoader) -> None:
        self.config = config
        self.manager = GroupMetadataManager(config, replicas, loader)
        self.retention_check_interval_ms = int(config["offsets.retention.check.interval.ms"])  # type: ignore[call-overload]
        self.active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.consumer = ConsumerGroupCoordinator(self)
        """The consumer rebalance protocol (KIP-848): its groups live beside the classic ones."""
        self.classic = ClassicGroupCoordinator(self, self.consumer)
        self.offsets = OffsetMetadataManager(self.manager, self.classic, self.consumer)
        self.migration = GroupMigration(config, self.consumer, self.classic)
        """Classic members of consumer groups, and the conversions (`group.consumer.migration.policy`)."""

    # --- lifecycle --------------------------------------------------------------------------------

    def startup(self) -> None:
        """Start serving: load every __consumer_offsets partition this node leads, start offset expiry.
        Once: the expiry task must not run twice."""
        if self.active:
            return
        self._loop = asyncio.get_running_loop()
        self.active = True
        self._load(self.manager.led_partitions())
        self._spawn(self._expire_offsets_periodically())

    def shutdown(self) -> None:
        """Stop timers and loading; answer parked requests with NOT_COORDINATOR, as on resignation."""
        self.active = False
        self.manager.shutting_down = True
        for task in list(self._tasks):
            task.cancel()
        for group in self.manager.current_groups():
            self.classic.unload_group(group)
        for consumer_group in self.manager.consumer_groups.values():
            self.consumer.cancel_all(consumer_group)

    def revert_partition(self, partition: int) -> None:
        """A batch of consumer-group records was replayed into the cache and then refused by the log
        (NOT_ENOUGH_REPLICAS, a storage error): Kafka's CoordinatorRuntime reverts the partition's state
        to its last written offset. Here the partition's groups are dropped, as on resignation, and
        loaded again from its log, which never held the batch; meanwhile their requests get
        COORDINATOR_LOAD_IN_PROGRESS."""
        if not self.active or partition not in self.manager.owned_partitions:
            return
        self._unload(partition)
        self._load([partition])
        log.warning(
            "Reloading %s-%d: a write was refused after its records were applied", OFFSETS_TOPIC, partition
        )

    def _unload(self, partition: int) -> list[ClassicGroup]:
        removed = self.manager.remove_groups_for_partition(partition)
        for group in removed:
            self.classic.unload_group(group)
        for consumer_group in self.manager.removed_consumer_groups:
            self.consumer.cancel_all(consumer_group)
        self.manager.removed_consumer_groups.clear()
        return removed

    def spawn(self, coroutine) -> None:  # type: ignore[no-untyped-def]
        """Run `coroutine` as one of the coordinator's tasks (cancelled at shutdown)."""
        self._spawn(coroutine)

    def call_later(self, delay_ms: int, callback, *args) -> asyncio.TimerHandle:  # type: ignore[no-untyped-def]
        """Run `callback(*args)` in `delay_ms`; one that raises is logged and leaves the others running."""
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(delay_ms, 0) / 1000, run_guarded, callback, *args)

    def _spawn(self, coroutine) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _load(self, partitions: Iterable[int]) -> None:
        todo = [
            p
            for p in partitions
            if p not in self.manager.owned_partitions and p not in self.manager.loading_partitions
        ]
        # A partition with nothing in it (one just created) is coordinated at once: there is nothing to
        # replay, and its first JoinGroup must not meet COORDINATOR_LOAD_IN_PROGRESS.
        todo = [p for p in todo if not self.manager.own_if_empty(p)]
        if not todo:
            return
        self.manager.loading_partitions.update(todo)
        self._spawn(self._load_partitions(todo))

    async def _load_partitions(self, partitions: list[int]) -> None:
        for partition in partitions:
            await self.manager.load_partition(
                partition, self.classic.on_group_loaded, self.consumer.on_loaded
            )

    async def _expire_offsets_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_interval_ms / 1000)
            try:
                self.manager.cleanup_expired_offsets()
            except Exception:
                log.exception("offset expiration failed")

    # --- metadata -------------------------------------------------------------------------------------

    def on_metadata_update(
        self, changes: TopicChanges, old: ClusterMetadataImage, new: ClusterMetadataImage
    ) -> None:
        """The MetadataPublisher step: coordinate the __consumer_offsets partitions this node now leads
        (onElection) and stop coordinating those it no longer leads (onResignation); drop deleted topics'
        offsets."""
        if self.active and new.partitions_of(OFFSETS_TOPIC) is not None:
            led = self.manager.led_partitions()
            manager = self.manager
            for partition in sorted((manager.owned_partitions | manager.loading_partitions) - set(led)):
                removed = self._unload(partition)
                log.info(
                    "Unloaded %d group(s) of %s-%d: this node no longer leads it",
                    len(removed),
                    OFFSETS_TOPIC,
                    partition,
                )
            self._load(led)
        deleted = [(topic, p) for topic, _, partitions in changes.deleted for p in partitions]
        if deleted and self.active:
            if any(topic == OFFSETS_TOPIC for topic, _ in deleted):
                for group in self.manager.current_groups():
                    self.classic.unload_group(group)
                self.manager.groups.clear()
                self.manager.owned_partitions.clear()
                self.manager.loading_partitions.clear()
            deleted_set = set(deleted)
            removed = self.manager.cleanup_group_metadata(
                self.manager.current_groups(),
                lambda group: group.remove_offsets([key for key in group.offsets if key in deleted_set]),
            )
            if removed:
                log.info("Removed %d offsets associated with deleted partitions.", removed)

    # --- placement --------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    def validate_group_status(self, group_id: str | None, api: GroupApi) -> ErrorCode | None:
        """Kafka's order: an invalid id, an inactive coordinator, a loading partition, another coordinator."""
        if group_id is None or (not group_id and not api.empty_id_allowed):
            return ErrorCode.invalid_group_id
        if not self.active:
            return ErrorCode.coordinator_not_available
        if self.manager.is_group_loading(group_id):
            return ErrorCode.coordinator_load_in_progress
        if not self.manager.is_group_local(group_id):
            return ErrorCode.not_coordinator
        return None

    def validate_consumer_group_status(self, group_id: str) -> ErrorCode | None:
        """validate_group_status for ConsumerGroupHeartbeat and ConsumerGroupDescribe ("" is invalid)."""
        return self.validate_group_status(group_id, GroupApi.CONSUMER_GROUP_HEARTBEAT)

    # --- the classic protocol ---------------------------------------------------------------------

    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        *,
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        reason: str | None = None,
    ) -> asyncio.Future[JoinResult]:
        """The join result, at once or when the join phase completes."""
        error = self.validate_group_status(group_id, GroupApi.JOIN_GROUP)
        if error is not None:
            return resolved(JoinResult(member_id, error))
        if self.migration.serves(group_id) is not None:
            classic = self.classic
            if not classic.min_session_timeout_ms <= session_timeout_ms <= classic.max_session_timeout_ms:
                return resolved(JoinResult(member_id, ErrorCode.invalid_session_timeout))
            return asyncio.ensure_future(
                self.migration.join(
                    group_id,
                    member_id,
                    group_instance_id,
                    require_known_member_id=require_known_member_id,
                    supports_skip_assignment=supports_skip_assignment,
                    client_id=client_id,
                    client_host=client_host,
                    rebalance_timeout_ms=rebalance_timeout_ms,
                    session_timeout_ms=session_timeout_ms,
                    protocol_type=protocol_type,
                    protocols=protocols,
                    reason=reason,
                )
            )
        return self.classic.join_group(
            group_id,
            member_id,
            group_instance_id,
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            reason=reason,
        )

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
        assignments: Mapping[str, bytes],
    ) -> asyncio.Future[SyncResult]:
        """The member's assignment, at once in a Stable group, else when the leader's arrives."""
        error = self.validate_group_status(group_id, GroupApi.SYNC_GROUP)
        if error is ErrorCode.coordinator_load_in_progress:
            # The rebalance state is lost anyway; older clients only know to rejoin on this error.
            return resolved(SyncResult(ErrorCode.rebalance_in_progress))
        if error is not None:
            return resolved(SyncResult(error))
        consumer_group = self.migration.serves(group_id)
        if consumer_group is not None:
            return resolved(
                self.migration.sync(
                    consumer_group, generation_id, member_id, protocol_type, protocol_name, group_instance_id
                )
            )
        return self.classic.sync_group(
            group_id, generation_id, member_id, protocol_type, protocol_name, group_instance_id, assignments
        )

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self.validate_group_status(group_id, GroupApi.HEARTBEAT)
        if error is ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # answered blindly while loading, as Kafka does
        if error is not None:
            return error
        consumer_group = self.migration.serves(group_id)
        if consumer_group is not None:
            return self.migration.heartbeat(consumer_group, member_id, group_instance_id, generation_id)
        return self.classic.heartbeat(group_id, member_id, group_instance_id, generation_id)

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, instance id, reason) in `members`)."""
        error = self.validate_group_status(group_id, GroupApi.LEAVE_GROUP)
        if error is not None:
            return error, []
        consumer_group = self.migration.serves(group_id)
        if consumer_group is not None:
            return self.migration.leave(consumer_group, members)
        return self.classic.leave_group(group_id, members)

    # --- offsets ----------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        api_version: int = -1,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit for partitions that passed the topic checks; answered once committed."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_COMMIT)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return await self.offsets.commit_offsets(
            group_id, member_id, group_instance_id, generation_id, offsets, api_version=api_version
        )

    def fetch_offsets(
        self,
        group_id: str,
        require_stable: bool,
        partitions: Iterable[TopicPartition] | None,
        member: tuple[str | None, int] | None = None,
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[OffsetAndMetadata | None, ErrorCode]]]:
        """Committed offsets in any group state; `member`: OffsetFetch v9+'s member id and epoch."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_FETCH)
        if error is not None:
            return error, {}
        return self.offsets.fetch_offsets(group_id, require_stable, partitions, member)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: (group error, per-partition errors)."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_DELETE)
        if error is not None:
            return error, {}
        return self.offsets.delete_offsets(group_id, partitions)

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: pending until the transaction's marker (the transaction coordinator's hook)."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_COMMIT)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return await self.offsets.txn_commit_offsets(
            group_id, producer_id, producer_epoch, member_id, group_instance_id, generation_id, offsets
        )

    def on_transaction_completed(self, producer_id: int, is_commit: bool) -> None:
        """A COMMIT or ABORT marker for `producer_id` reached __consumer_offsets: settle its offsets."""
        self.offsets.on_transaction_completed(producer_id, is_commit)

    # --- admin --------------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary | None]:
        """(error, summary); an unknown group, or a consumer group, is described as Dead, with no error."""
        error = self.validate_group_status(group_id, GroupApi.DESCRIBE_GROUPS)
        if error is not None:
            return error, None
        group = self.manager.get_group(group_id)
        if group is None or group_id in self.manager.consumer_groups:
            return ErrorCode.none, DEAD_GROUP
        return ErrorCode.none, group.summary()

    def list_groups(
        self, states: Iterable[str], types: Iterable[str]
    ) -> tuple[ErrorCode, list[tuple[str, str, str, str]]]:
        """(error, [(group id, protocol type, state, type)]); filters are case-insensitive, empty = all."""
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        error = ErrorCode.coordinator_load_in_progress if self.manager.is_loading else ErrorCode.none
        state_filter = {s.lower() for s in states}
        type_filter = {t.lower() for t in types}
        consumer_groups = self.manager.consumer_groups
        groups = []
        if not type_filter or "classic" in type_filter:
            groups = [
                (g.group_id, g.protocol_type or "", g.state.value, "classic")
                for g in self.manager.current_groups()
                if g.group_id not in consumer_groups and (not state_filter or g.in_states(state_filter))
            ]
        if not type_filter or "consumer" in type_filter:
            groups += [
                (g.group_id, "consumer", g.state.value, "consumer")
                for g in consumer_groups.values()
                if not state_filter or g.state.value.lower() in state_filter
            ]
        return error, groups

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: only Empty groups go, with tombstones for their offsets and metadata."""
        errors: dict[str, ErrorCode] = {}
        eligible: list[ClassicGroup] = []
        for group_id in group_ids:
            error = self.validate_group_status(group_id, GroupApi.DELETE_GROUPS)
            if error is not None:
                errors[group_id] = error
                continue
            group = self.manager.get_group(group_id)
            consumer_group = self.manager.consumer_groups.get(group_id)
            if consumer_group is not None:
                if not consumer_group.is_empty:
                    errors[group_id] = ErrorCode.non_empty_group
                    continue
                self.consumer.delete(consumer_group)
                group = self.manager.offsets_holder(group_id)
            if group is None or group.is_(GroupState.DEAD):
                errors[group_id] = ErrorCode.group_id_not_found
            elif group.is_(GroupState.EMPTY):
                group.transition_to(GroupState.DEAD, wall_clock_ms())
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.non_empty_group
        if eligible:
            removed = self.manager.cleanup_group_metadata(eligible, lambda g: g.remove_all_offsets())
            errors.update({g.group_id: ErrorCode.none for g in eligible})
            log.info(
                "The following groups were deleted: %s. A total of %d offsets were removed.",
                ", ".join(g.group_id for g in eligible),
                removed,
            )
        return errors
