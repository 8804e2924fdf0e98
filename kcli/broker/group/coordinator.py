"""The classic group coordinator (Kafka's GroupCoordinator), on the broker's event loop.

Every request handler calls one method here. JoinGroup and SyncGroup may have to wait for other
members, so they return a future the handler awaits (Kafka parks them in a purgatory); OffsetCommit
and TxnOffsetCommit are coroutines that end when their records are committed; everything else
answers at once. Kafka's delayed operations become `loop.call_later` handles, checked when they
fire: a member's session deadline, a MEMBER_ID_REQUIRED id's deadline, the join phase (the initial
delayed join of an empty group, then the rebalance timeout) and the pending-sync deadline. With one
thread there are no group locks: a method runs to its end before any timer or other request.

A group record is written as Kafka's storeGroup writes it: the call returns at once and a callback
gets the outcome when the high watermark has passed the record (or the write failed or timed out),
so the coordinator keeps answering other requests meanwhile. The callback re-checks what the wait may
have changed (the generation, a replaced static member) before applying anything.

Groups and offsets live in __consumer_offsets through `GroupMetadataManager`, which loads the
partitions this node leads at start-up (COORDINATOR_LOAD_IN_PROGRESS until done) and when the topic
is created. Offset retention runs every `offsets.retention.check.interval.ms`.

Consumer groups of the KIP-848 protocol (`group.version` 1) are `self.consumer`
(kcli.broker.group.consumer_coordinator); here only where the two kinds meet: a group id is one or
the other, the offset APIs check a consumer group's member epoch, and the admin APIs list both.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from kcli.broker.group.consumer_coordinator import ConsumerGroupCoordinator
from kcli.broker.group.group import (
    DEAD_GROUP,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    GroupSummary,
    JoinCallback,
    JoinResult,
    Member,
    OffsetAndMetadata,
    SyncResult,
)
from kcli.broker.group.storage import OFFSETS_TOPIC, GroupMetadataManager, TopicPartition
from kcli.broker.log.log import wall_clock_ms
from kcli.broker.metadata.image import ClusterMetadataImage, TopicChanges
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.replication.manager import ReplicaManager
from kcli.config import BrokerConfig

log = logging.getLogger("kcli.broker.group")

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
"""How long a new member's first JoinGroup may stay parked (a constant in Kafka, not a config)."""


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
    """Membership, rebalances and offsets of the classic groups whose partitions this node leads."""

    name = "GroupCoordinator"

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, loader: MetadataLoader) -> None:
        self.config = config
        self.manager = GroupMetadataManager(config, replicas, loader)
        self.min_session_timeout_ms = int(config["group.min.session.timeout.ms"])  # type: ignore[call-overload]
        self.max_session_timeout_ms = int(config["group.max.session.timeout.ms"])  # type: ignore[call-overload]
        self.initial_rebalance_delay_ms = int(config["group.initial.rebalance.delay.ms"])  # type: ignore[call-overload]
        self.max_group_size = int(config["group.max.size"])  # type: ignore[call-overload]
        self.retention_check_interval_ms = int(config["offsets.retention.check.interval.ms"])  # type: ignore[call-overload]
        self.active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.consumer = ConsumerGroupCoordinator(self)
        """The consumer rebalance protocol (KIP-848): its groups live beside the classic ones."""

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
            self._unload_group(group)
        for consumer_group in self.manager.consumer_groups.values():
            self.consumer.cancel_all(consumer_group)

    def spawn(self, coroutine) -> None:  # type: ignore[no-untyped-def]
        """Run `coroutine` as one of the coordinator's tasks (cancelled at shutdown)."""
        self._spawn(coroutine)

    def call_later(self, delay_ms: int, callback, *args) -> asyncio.TimerHandle:  # type: ignore[no-untyped-def]
        return self._call_later(delay_ms, callback, *args)

    def _spawn(self, coroutine) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _store_group(
        self, group: ClassicGroup, assignment: Mapping[str, bytes], callback: Callable[[ErrorCode], None]
    ) -> None:
        """storeGroup: write the group record; `callback` gets the outcome once it is committed or failed."""
        self._spawn(self._store_group_then(group, assignment, callback))

    async def _store_group_then(
        self, group: ClassicGroup, assignment: Mapping[str, bytes], callback: Callable[[ErrorCode], None]
    ) -> None:
        try:
            error = await self.manager.store_group(group, assignment)
        except asyncio.CancelledError:  # shutdown: whoever waits for the write is sent elsewhere
            self._guarded(callback, ErrorCode.not_coordinator)
            raise
        except Exception:
            log.exception("Storing the metadata of group %s failed", group.group_id)
            error = ErrorCode.unknown_server_error
        self._guarded(callback, error)

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
            await self.manager.load_partition(partition, self._on_group_loaded, self.consumer.on_loaded)

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
                removed = manager.remove_groups_for_partition(partition)
                for group in removed:
                    self._unload_group(group)
                for consumer_group in manager.removed_consumer_groups:
                    self.consumer.cancel_all(consumer_group)
                manager.removed_consumer_groups.clear()
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
                    self._unload_group(group)
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

    # --- JoinGroup --------------------------------------------------------------------------------

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
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()

        def respond(result: JoinResult) -> None:
            if not future.done():
                future.set_result(result)

        error = self.validate_group_status(group_id, GroupApi.JOIN_GROUP)
        if error is not None:
            respond(JoinResult(member_id, error))
            return future
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            respond(JoinResult(member_id, ErrorCode.invalid_session_timeout))
            return future
        consumer_group = self.manager.consumer_groups.get(group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty:
                # Classic members in a consumer group (KIP-848's upgrade path) are not served here.
                respond(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
                return future
            self.consumer.delete(consumer_group)  # an empty consumer group becomes a classic one
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_or_create_group(group_id, create=is_unknown_member)
        if group is None:
            respond(JoinResult(member_id, ErrorCode.unknown_member_id))
            return future
        why = reason or "not provided"
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            respond(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown_member:
            self._new_member_join(
                group,
                group_instance_id,
                require_known_member_id,
                supports_skip_assignment,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                respond,
                why,
            )
        else:
            self._current_member_join(
                group,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                respond,
                why,
            )
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        return future

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (
                member is not None and member.is_awaiting_join
            ) or group.num_members_awaiting_join < self.max_group_size
        return group.has(member_id) or group.size < self.max_group_size

    def _new_member_join(
        self,
        group: ClassicGroup,
        group_instance_id: str | None,
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        respond: JoinCallback,
        reason: str,
    ) -> None:
        if group.is_(GroupState.DEAD):
            respond(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(protocol_type, (name for name, _ in protocols)):
            respond(JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                log.info(
                    "Static member with groupInstanceId=%s and unknown member id joins group %s in %s state. "
                    "Replacing previously mapped member %s with this groupInstanceId.",
                    group_instance_id,
                    group.group_id,
                    group.state.value,
                    old_member_id,
                )
                self._update_static_member_and_rebalance(
                    group,
                    old_member_id,
                    new_member_id,
                    group_instance_id,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    respond,
                    reason,
                    supports_skip_assignment,
                )
            else:
                self._add_member_and_rebalance(
                    group,
                    new_member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    protocol_type,
                    protocols,
                    respond,
                    reason,
                )
        elif require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out and retries does not leave a
            # defunct member behind for every attempt.
            group.pending_members.add(new_member_id)
            self._schedule_pending_member_expiration(group, new_member_id, session_timeout_ms)
            respond(JoinResult(new_member_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(
                group,
                new_member_id,
                None,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                respond,
                reason,
            )

    def _current_member_join(
        self,
        group: ClassicGroup,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        respond: JoinCallback,
        reason: str,
    ) -> None:
        if group.is_(GroupState.DEAD):
            respond(JoinResult(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(protocol_type, (name for name, _ in protocols)):
            respond(JoinResult(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(
                group,
                member_id,
                None,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                respond,
                reason,
            )
            return
        error = self._validate_current_member(group, member_id, group_instance_id, "join-group")
        if error is not None:
            respond(JoinResult(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, respond
            )
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The same metadata: the member most likely lost its JoinGroup response.
                respond(self._join_result(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, respond
                )
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # A leader's JoinGroup always rebalances: that is how it asks for one after a change
                # the metadata does not show (new partitions of a subscribed topic, say).
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, respond
                )
            else:
                respond(self._join_result(group, member_id, with_members=False))
        else:
            log.warning(
                "Attempt to add rejoining member %s of group %s in unexpected group state %s",
                member_id,
                group.group_id,
                state.value,
            )
            respond(JoinResult(member_id, ErrorCode.unknown_member_id))

    def _join_result(self, group: ClassicGroup, member_id: str, *, with_members: bool) -> JoinResult:
        return JoinResult(
            member_id=member_id,
            error=ErrorCode.none,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if with_members else (),
        )

    def _validate_current_member(
        self, group: ClassicGroup, member_id: str, group_instance_id: str | None, operation: str
    ) -> ErrorCode | None:
        """An instance id must exist and map to `member_id`; the member must exist."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                log.info(
                    "Request memberId=%s for static member with groupInstanceId=%s is fenced by current "
                    "memberId=%s during operation %s",
                    member_id,
                    group_instance_id,
                    current,
                    operation,
                )
                return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    def _add_member_and_rebalance(
        self,
        group: ClassicGroup,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        respond: JoinCallback,
        reason: str,
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            is_new=True,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        self._cancel_pending_member_expiration(group, member_id)
        group.add(member, respond)
        # A new member cannot heartbeat before its first JoinGroup response, and its socket is muted while
        # the join is parked: only the new-member deadline removes it if its client went away.
        self._schedule_heartbeat_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group,
            f"Adding new member {member_id} with group instance id {group_instance_id}; client reason: {reason}",
        )

    def _update_member_and_rebalance(
        self,
        group: ClassicGroup,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        respond: JoinCallback,
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, respond)
        self._maybe_prepare_rebalance(group, f"Updating metadata for member {member.member_id}")

    def _update_static_member_and_rebalance(
        self,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        respond: JoinCallback,
        reason: str,
        supports_skip_assignment: bool,
    ) -> None:
        current_leader = group.leader_id or ""
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        old_protocols = member.protocols
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, respond)
        state = group.state
        if state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                # Nothing the assignment depends on changed: persist the new member id, no rebalance.
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def on_stored(error: ErrorCode) -> None:
                    if error is not ErrorCode.none:
                        log.warning("Failed to persist metadata for group %s: %s", group.group_id, error.name)
                        if group.members.get(new_member_id) is member:  # not replaced again meanwhile
                            group.update_member(
                                member, old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms, None
                            )
                            restored = group.replace_static_member(
                                group_instance_id, new_member_id, old_member_id
                            )
                            self._schedule_heartbeat_expiration(group, restored, restored.session_timeout_ms)
                        respond(
                            JoinResult(
                                member_id=UNKNOWN_MEMBER_ID,
                                error=error,
                                generation_id=group.generation_id,
                                protocol_type=group.protocol_type,
                                protocol_name=group.protocol_name,
                                leader_id=current_leader,
                            )
                        )
                    elif supports_skip_assignment:
                        # JoinGroup v9+: the leader learns it leads but must not run the assignor again.
                        is_leader = group.is_leader(new_member_id)
                        group.maybe_invoke_join(
                            member,
                            JoinResult(
                                member_id=new_member_id,
                                error=ErrorCode.none,
                                generation_id=group.generation_id,
                                protocol_type=group.protocol_type,
                                protocol_name=group.protocol_name,
                                leader_id=group.leader_id or "",
                                members=group.current_member_metadata() if is_leader else (),
                                skip_assignment=is_leader,
                            ),
                        )
                    else:
                        # Before v9: show the old leader id, so a restarted static leader does not see
                        # itself as leader and run a trivial assignment a Stable group would never broadcast.
                        group.maybe_invoke_join(
                            member,
                            JoinResult(
                                member_id=new_member_id,
                                error=ErrorCode.none,
                                generation_id=group.generation_id,
                                protocol_type=group.protocol_type,
                                protocol_name=group.protocol_name,
                                leader_id=current_leader,
                            ),
                        )

                self._store_group(group, assignment, on_stored)
            else:
                self._maybe_prepare_rebalance(
                    group,
                    f"Group's selectedProtocol will change because static member {new_member_id} with "
                    f"instance id {group_instance_id} joined with change of protocol; client reason: {reason}",
                )
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may already have been given the old member id; only a new rebalance is consistent.
            self._prepare_rebalance(
                group,
                f"Updating metadata for static member {new_member_id} with instance id {group_instance_id}",
            )
        # PreparingRebalance: the member waits for the join phase like everyone else.

    # --- rebalance --------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        was_empty = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, wall_clock_ms())
        log.info(
            "Preparing to rebalance group %s in state %s with old generation %d (%s-%d) (reason: %s)",
            group.group_id,
            group.state.value,
            group.generation_id,
            OFFSETS_TOPIC,
            self.partition_for(group.group_id),
            reason,
        )
        if was_empty:
            delay = self.initial_rebalance_delay_ms
            self._schedule_initial_join(group, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            self._schedule_join(group, group.rebalance_timeout_ms)

    def _schedule_join(self, group: ClassicGroup, timeout_ms: int) -> None:
        """DelayedJoin: completes when every member has rejoined, or at the rebalance timeout."""
        self._cancel(group.join_timer)
        group.join_timer_is_initial = False
        group.join_timer = self._call_later(timeout_ms, self._on_join_timeout, group)
        self._try_complete_join(group)

    def _schedule_initial_join(self, group: ClassicGroup, delay_ms: int, remaining_ms: int) -> None:
        """InitialDelayedJoin: wait `delay_ms` for more members; never completes early."""
        self._cancel(group.join_timer)
        group.join_timer_is_initial = True
        group.join_timer = self._call_later(
            delay_ms, self._on_initial_join_timeout, group, delay_ms, remaining_ms
        )

    def _on_initial_join_timeout(self, group: ClassicGroup, delay_ms: int, remaining_ms: int) -> None:
        group.join_timer = None
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            next_delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            self._schedule_initial_join(group, next_delay, max(remaining_ms - delay_ms, 0))
        else:
            self._on_complete_join(group)

    def _on_join_timeout(self, group: ClassicGroup) -> None:
        group.join_timer = None
        self._on_complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        """Kafka's checkAndComplete on the group's join operation."""
        if group.join_timer is None or group.join_timer_is_initial:
            return
        if group.has_all_members_joined():
            self._cancel(group.join_timer)
            group.join_timer = None
            self._on_complete_join(group)

    def _on_complete_join(self, group: ClassicGroup) -> None:
        for failed in [m for m in group.not_yet_rejoined_members() if not m.is_static]:
            log.info(
                "Group %s removed dynamic member %s who has not rejoined", group.group_id, failed.member_id
            )
            group.remove(failed.member_id)
            self._cancel_heartbeat(failed)
        if group.is_(GroupState.DEAD):
            log.info("Group %s is dead, skipping rebalance stage", group.group_id)
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them (or for their sessions).
            log.error("Group %s could not complete rebalance because no members rejoined", group.group_id)
            self._schedule_join(group, group.rebalance_timeout_ms)
            return
        group.init_next_generation(wall_clock_ms())
        if group.is_(GroupState.EMPTY):
            log.info(
                "Group %s with generation %d is now empty (%s-%d)",
                group.group_id,
                group.generation_id,
                OFFSETS_TOPIC,
                self.partition_for(group.group_id),
            )

            def on_stored(error: ErrorCode) -> None:
                # The previous generation becomes active again only if this node fails before the next
                # rebalance; an empty generation has no members to mislead, so a warning is enough.
                if error is not ErrorCode.none:
                    log.warning("Failed to write empty metadata for group %s: %s", group.group_id, error.name)

            self._store_group(group, {}, on_stored)
            return
        log.info(
            "Stabilized group %s generation %d (%s-%d) with %d members",
            group.group_id,
            group.generation_id,
            OFFSETS_TOPIC,
            self.partition_for(group.group_id),
            group.size,
        )
        for member in list(group.members.values()):
            group.maybe_invoke_join(
                member,
                self._join_result(group, member.member_id, with_members=group.is_leader(member.member_id)),
            )
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    # --- SyncGroup --------------------------------------------------------------------------------

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
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()

        def respond(result: SyncResult) -> None:
            if not future.done():
                future.set_result(result)

        error = self.validate_group_status(group_id, GroupApi.SYNC_GROUP)
        if error is ErrorCode.coordinator_load_in_progress:
            # The rebalance state is lost anyway; older clients only know to rejoin on this error.
            respond(SyncResult(ErrorCode.rebalance_in_progress))
            return future
        if error is not None:
            respond(SyncResult(error))
            return future
        group = self.manager.get_group(group_id)
        if group is None:
            respond(SyncResult(ErrorCode.unknown_member_id))
            return future
        error = self._validate_sync(
            group, generation_id, member_id, protocol_type, protocol_name, group_instance_id
        )
        if error is not None:
            respond(SyncResult(error))
            return future
        state = group.state
        if state is GroupState.EMPTY:
            respond(SyncResult(ErrorCode.unknown_member_id))
        elif state is GroupState.PREPARING_REBALANCE:
            respond(SyncResult(ErrorCode.rebalance_in_progress))
        elif state is GroupState.COMPLETING_REBALANCE:
            group.get(member_id).awaiting_sync = respond
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                log.info(
                    "Assignment received from leader %s for group %s for generation %d. The group has %d "
                    "members, %d of which are static.",
                    member_id,
                    group.group_id,
                    group.generation_id,
                    group.size,
                    len(group.static_members),
                )
                assignment = {m: assignments.get(m, b"") for m in group.members}
                missing = [m for m in group.members if m not in assignments]
                if missing:
                    log.warning(
                        "Setting empty assignments for members %s of %s for generation %d",
                        missing,
                        group.group_id,
                        group.generation_id,
                    )

                def on_stored(error: ErrorCode) -> None:
                    # Members may have joined or left while the write waited: only the same generation,
                    # still completing its rebalance, takes the outcome.
                    if not (
                        group.is_(GroupState.COMPLETING_REBALANCE) and generation_id == group.generation_id
                    ):
                        return
                    if error is not ErrorCode.none:
                        self._reset_and_propagate_assignment_error(group, error)
                        self._maybe_prepare_rebalance(
                            group, f"Error {error.name} when storing group assignment during SyncGroup"
                        )
                    else:
                        for member in group.members.values():
                            member.assignment = assignment[member.member_id]
                        self._propagate_assignment(group, ErrorCode.none)
                        group.transition_to(GroupState.STABLE, wall_clock_ms())

                self._store_group(group, assignment, on_stored)
        elif state is GroupState.STABLE:
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            respond(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        return future

    def _validate_sync(
        self,
        group: ClassicGroup,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
    ) -> ErrorCode | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id, "sync-group")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return None

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in list(group.members.values()):
            result = SyncResult(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment,
            )
            if group.maybe_invoke_sync(member, result):
                # Its session may have run out while it waited for the leader or the append.
                self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        self._cancel(group.sync_timer)
        group.sync_timer = self._call_later(
            group.rebalance_timeout_ms, self._on_pending_sync_expired, group, group.generation_id
        )

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel(group.sync_timer)
            group.sync_timer = None

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self._cancel(group.sync_timer)
        group.sync_timer = None

    def _on_pending_sync_expired(self, group: ClassicGroup, generation_id: int) -> None:
        group.sync_timer = None
        if generation_id != group.generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync_members:
            return
        pending = sorted(group.pending_sync_members)
        for member_id in pending:
            member = group.members.get(member_id)
            group.remove(member_id)
            if member is not None:
                self._cancel_heartbeat(member)
        log.info("Group %s removed members who haven't sent their sync request: %s", group.group_id, pending)
        self._prepare_rebalance(group, f"Removing {pending} on pending sync request expiration")

    # --- Heartbeat and LeaveGroup -----------------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self.validate_group_status(group_id, GroupApi.HEARTBEAT)
        if error is ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # answered blindly while loading, as Kafka does
        if error is not None:
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.get(member_id)
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, instance id, reason) in `members`)."""
        error = self.validate_group_status(group_id, GroupApi.LEAVE_GROUP)
        if error is not None:
            return error, []
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, []
        errors = []
        for member_id, group_instance_id, reason in members:
            why = reason or "not provided"
            if member_id == UNKNOWN_MEMBER_ID:
                # Removal by instance id alone (an admin's RemoveMembersFromConsumerGroup).
                current = (
                    None if group_instance_id is None else group.current_static_member_id(group_instance_id)
                )
                if current is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                self._remove_current_member(group, current, why)
                errors.append(ErrorCode.none)
            elif member_id in group.pending_members:
                self._cancel_pending_member_expiration(group, member_id)
                self._remove_pending_member_and_update_group(group, member_id)
                log.info(
                    "Pending member with memberId=%s has left group %s through explicit `LeaveGroup` request",
                    member_id,
                    group_id,
                )
                errors.append(ErrorCode.none)
            else:
                member_error = self._validate_current_member(
                    group, member_id, group_instance_id, "leave-group"
                )
                if member_error is None:
                    self._remove_current_member(group, member_id, why)
                    errors.append(ErrorCode.none)
                else:
                    errors.append(member_error)
        return ErrorCode.none, errors

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        self._remove_member_and_update_group(
            group, member, f"Removing member {member_id} on LeaveGroup; client reason: {reason}"
        )
        self._cancel_heartbeat(member)
        log.info(
            "Member %s has left group %s through explicit `LeaveGroup`; client reason: %s",
            member_id,
            group.group_id,
            reason,
        )

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        # A new member may time out while its JoinGroup is parked: answer it so its client rejoins.
        group.maybe_invoke_join(member, JoinResult(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_pending_member_and_update_group(self, group: ClassicGroup, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # --- liveness timers --------------------------------------------------------------------------

    def _schedule_heartbeat_expiration(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        """Complete the member's current deadline and set the next one `timeout_ms` from now."""
        self._cancel(member.heartbeat_timer)
        member.heartbeat_timer = self._call_later(timeout_ms, self._on_heartbeat_expired, group, member)

    def _cancel_heartbeat(self, member: Member) -> None:
        self._cancel(member.heartbeat_timer)
        member.heartbeat_timer = None

    def _on_heartbeat_expired(self, group: ClassicGroup, member: Member) -> None:
        member.heartbeat_timer = None
        if group.is_(GroupState.DEAD) or group.members.get(member.member_id) is not member:
            return
        if not member.has_satisfied_heartbeat():
            log.info(
                "Member %s in group %s has failed, removing it from the group",
                member.member_id,
                group.group_id,
            )
            self._remove_member_and_update_group(
                group, member, f"removing member {member.member_id} on heartbeat expiration"
            )

    def _schedule_pending_member_expiration(
        self, group: ClassicGroup, member_id: str, timeout_ms: int
    ) -> None:
        self._cancel_pending_member_expiration(group, member_id)
        group.pending_member_timers[member_id] = self._call_later(
            timeout_ms, self._on_pending_member_expired, group, member_id
        )

    def _cancel_pending_member_expiration(self, group: ClassicGroup, member_id: str) -> None:
        self._cancel(group.pending_member_timers.pop(member_id, None))

    def _on_pending_member_expired(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_member_timers.pop(member_id, None)
        if group.is_(GroupState.DEAD) or member_id not in group.pending_members:
            return
        log.info(
            "Pending member %s in group %s has been removed after session timeout expiration.",
            member_id,
            group.group_id,
        )
        self._remove_pending_member_and_update_group(group, member_id)

    def _call_later(self, delay_ms: int, callback, *args) -> asyncio.TimerHandle:  # type: ignore[no-untyped-def]
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(delay_ms, 0) / 1000, self._guarded, callback, *args)

    @staticmethod
    def _guarded(callback, *args) -> None:  # type: ignore[no-untyped-def]
        """A timer that raises must not take the coordinator's other timers with it."""
        try:
            callback(*args)
        except Exception:
            log.exception("group coordinator timer %s failed", getattr(callback, "__name__", callback))

    @staticmethod
    def _cancel(handle: object | None) -> None:
        if isinstance(handle, asyncio.TimerHandle):
            handle.cancel()

    # --- loading and unloading --------------------------------------------------------------------

    def _on_group_loaded(self, group: ClassicGroup) -> None:
        log.info("Loading group metadata for %s with generation %d", group.group_id, group.generation_id)
        if group.size > self.max_group_size:
            self._prepare_rebalance(
                group,
                f"Freshly-loaded group is over capacity ({self.max_group_size}). Rebalancing in order to "
                "give a chance for consumers to commit offsets",
            )
        for member in group.members.values():
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

    def _unload_group(self, group: ClassicGroup) -> None:
        previous = group.state
        group.transition_to(GroupState.DEAD, wall_clock_ms())
        for member in list(group.members.values()):
            if previous is GroupState.PREPARING_REBALANCE:
                group.maybe_invoke_join(member, JoinResult(member.member_id, ErrorCode.not_coordinator))
            group.maybe_invoke_sync(member, SyncResult(ErrorCode.not_coordinator))
            self._cancel_heartbeat(member)
        for member_id in list(group.pending_member_timers):
            self._cancel_pending_member_expiration(group, member_id)
        self._cancel(group.join_timer)
        group.join_timer = None
        self._remove_sync_expiration(group)

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
        """OffsetCommit for partitions that passed the topic checks; answered once the commit is
        committed in __consumer_offsets (or its write failed or timed out). A consumer group's member
        commits with its member epoch as the generation (OffsetCommit v9+)."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_COMMIT)
        if error is not None:
            return dict.fromkeys(offsets, error)
        consumer_group = self.manager.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_offset_commit(
                consumer_group, member_id, generation_id, api_version, transactional=False
            )
            if error is not None:
                return dict.fromkeys(offsets, error)
            return await self.manager.store_offsets(self.manager.offsets_holder(group_id), offsets)
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:  # a member of a generation this coordinator never had
                return dict.fromkeys(offsets, ErrorCode.illegal_generation)
            log.info("Creating simple consumer group %s via manual offset commit.", group_id)
            group = self.manager.add_group(ClassicGroup(group_id, GroupState.EMPTY, wall_clock_ms()))
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet: it must finish the rebalance.
            return dict.fromkeys(offsets, ErrorCode.rebalance_in_progress)
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # Allowed while preparing, so a consumer can commit in its revocation callback.
            member = group.get(member_id)
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        return await self.manager.store_offsets(group, offsets)

    def _validate_offset_commit(
        self, group: ClassicGroup, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # an admin client or a consumer that manages its own partitions
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id, "offset-commit")
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if not group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id  # only members may commit to a live group
        return None

    def fetch_offsets(
        self,
        group_id: str,
        require_stable: bool,
        partitions: Iterable[TopicPartition] | None,
        member: tuple[str | None, int] | None = None,
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[OffsetAndMetadata | None, ErrorCode]]]:
        """Committed offsets in any group state (a group may use Kafka only to store offsets). `member`:
        OffsetFetch v9+'s member id and epoch, checked against a consumer group."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_FETCH)
        if error is not None:
            return error, {}
        consumer_group = self.manager.consumer_groups.get(group_id)
        if consumer_group is not None and member is not None:
            error = self.consumer.validate_offset_fetch(consumer_group, *member)
            if error is not None:
                return error, {}
        return ErrorCode.none, self.manager.get_offsets(group_id, require_stable, partitions)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: (group error, per-partition errors); partitions a live consumer group subscribes
        to are refused with GROUP_SUBSCRIBED_TO_TOPIC."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_DELETE)
        if error is not None:
            return error, {}
        consumer_group = self.manager.consumer_groups.get(group_id)
        group = (
            self.manager.get_group(group_id)
            if consumer_group is None
            else self.manager.offsets_holder(group_id)
        )
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        results: dict[TopicPartition, ErrorCode] = {}
        if consumer_group is not None:  # ConsumerGroup.isSubscribedToTopic
            subscribed = consumer_group.subscription_metadata
            eligible = [tp for tp in partitions if tp[0] not in subscribed]
            results.update(
                {tp: ErrorCode.group_subscribed_to_topic for tp in partitions if tp not in eligible}
            )
        elif group.is_(GroupState.EMPTY):
            eligible = partitions
        elif group.is_consumer_group():
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
            results.update(
                {tp: ErrorCode.group_subscribed_to_topic for tp in partitions if tp not in eligible}
            )
        else:
            return ErrorCode.non_empty_group, {}
        if eligible:
            removed = self.manager.cleanup_group_metadata([group], lambda g: g.remove_offsets(eligible))
            results.update(dict.fromkeys(eligible, ErrorCode.none))
            log.info(
                "The following offsets of the group %s were deleted: %s (%d removed)",
                group_id,
                eligible,
                removed,
            )
        return ErrorCode.none, results

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

    # --- transactions (the transaction coordinator's hooks) -------------------------------------------

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
        """TxnOffsetCommit: like OffsetCommit, but a member-less commit (generation -1) is accepted in any
        group state and the offsets stay pending until the transaction's marker."""
        error = self.validate_group_status(group_id, GroupApi.OFFSET_COMMIT)
        if error is not None:
            return dict.fromkeys(offsets, error)
        consumer_group = self.manager.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_offset_commit(
                consumer_group, member_id, generation_id, -1, transactional=True
            )
            if error is not None:
                return dict.fromkeys(offsets, error)
            holder = self.manager.offsets_holder(group_id)
            return await self.manager.store_txn_offsets(holder, producer_id, producer_epoch, offsets)
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, ErrorCode.illegal_generation)
            group = self.manager.add_group(ClassicGroup(group_id, GroupState.EMPTY, wall_clock_ms()))
        if group.is_(GroupState.DEAD):
            return dict.fromkeys(offsets, ErrorCode.coordinator_not_available)
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id, "txn-offset-commit")
            if error is not None:
                return dict.fromkeys(offsets, error)
            if generation_id != group.generation_id:
                return dict.fromkeys(offsets, ErrorCode.illegal_generation)
        return await self.manager.store_txn_offsets(group, producer_id, producer_epoch, offsets)

    def on_transaction_completed(self, producer_id: int, is_commit: bool) -> None:
        """A COMMIT or ABORT marker for `producer_id` reached __consumer_offsets: settle its offsets."""
        for group in self.manager.current_groups():
            if producer_id in group.pending_txn_offset_commits:
                group.complete_pending_txn_offset_commit(producer_id, is_commit)
