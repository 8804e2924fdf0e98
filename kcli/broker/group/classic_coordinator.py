"""The classic rebalance protocol on the group coordinator: Kafka's GroupMetadataManager for classic
groups (classicGroupJoin, classicGroupSync, classicGroupHeartbeat, classicGroupLeave) and its timers.

JoinGroup and SyncGroup may have to wait for other members, so they return a future the handler awaits
(Kafka parks them in a purgatory); Heartbeat and LeaveGroup answer at once. Kafka's delayed operations
become `loop.call_later` handles, checked when they fire: a member's session deadline, a
MEMBER_ID_REQUIRED id's deadline, the join phase (the initial delayed join of an empty group, then the
rebalance timeout) and the pending-sync deadline. With one thread there are no group locks: a method
runs to its end before any timer or other request.

A group record is written as Kafka's storeGroup writes it: the call returns at once and a callback
gets the outcome when the high watermark has passed the record (or the write failed or timed out),
so the coordinator keeps answering other requests meanwhile. The callback re-checks what the wait may
have changed (the generation, a replaced static member) before applying anything.

The group coordinator (kcli.broker.group.coordinator) has validated the group id and this node's
ownership of it before any method here is called.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

from kcli.broker.group.consumer_coordinator import ConsumerGroupCoordinator, CoordinatorServices
from kcli.broker.group.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    SyncResult,
)
from kcli.broker.group.storage import OFFSETS_TOPIC
from kcli.broker.log.log import wall_clock_ms

log = logging.getLogger("kcli.broker.group")

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
"""How long a new member's first JoinGroup may stay parked (a constant in Kafka, not a config)."""


def run_guarded(callback, *args) -> None:  # type: ignore[no-untyped-def]
    """A timer that raises must not take the coordinator's other timers with it."""
    try:
        callback(*args)
    except Exception:
        log.exception("group coordinator timer %s failed", getattr(callback, "__name__", callback))


def resolved(result):  # type: ignore[no-untyped-def]
    """A future that already holds `result` (an answer that waits for nothing)."""
    future = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future


class ClassicGroupCoordinator:
    """Membership and rebalances of the classic groups whose partitions the group coordinator owns."""

    def __init__(self, owner: CoordinatorServices, consumer: ConsumerGroupCoordinator) -> None:
        config = owner.config
        self.owner = owner
        self.manager = owner.manager
        self.consumer = consumer
        self.min_session_timeout_ms = int(config["group.min.session.timeout.ms"])  # type: ignore[call-overload]
        self.max_session_timeout_ms = int(config["group.max.session.timeout.ms"])  # type: ignore[call-overload]
        self.initial_rebalance_delay_ms = int(config["group.initial.rebalance.delay.ms"])  # type: ignore[call-overload]
        self.max_group_size = int(config["group.max.size"])  # type: ignore[call-overload]

    def _call_later(self, delay_ms: int, callback, *args) -> asyncio.TimerHandle:  # type: ignore[no-untyped-def]
        return self.owner.call_later(delay_ms, callback, *args)

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
        error = self.validate_current_member(group, member_id, group_instance_id, "join-group")
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

    def validate_current_member(
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
        self.schedule_heartbeat_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
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
        self.schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
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
                            self.schedule_heartbeat_expiration(group, restored, restored.session_timeout_ms)
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
            self.manager.partition_for(group.group_id),
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
                self.manager.partition_for(group.group_id),
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
            self.manager.partition_for(group.group_id),
            group.size,
        )
        for member in list(group.members.values()):
            group.maybe_invoke_join(
                member,
                self._join_result(group, member.member_id, with_members=group.is_leader(member.member_id)),
            )
            self.schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
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
            self.schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
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
        error = self.validate_current_member(group, member_id, group_instance_id, "sync-group")
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
                self.schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

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
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self.validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.get(member_id)
        self.schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, instance id, reason) in `members`)."""
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
                member_error = self.validate_current_member(
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

    def schedule_heartbeat_expiration(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
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

    @staticmethod
    def _cancel(handle: object | None) -> None:
        if isinstance(handle, asyncio.TimerHandle):
            handle.cancel()

    # --- conversions with consumer groups (KIP-848) -----------------------------------------------

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        """A group downgraded from a consumer group rebalances at once, its members rejoining."""
        self._prepare_rebalance(group, reason)

    def release_members(self, group: ClassicGroup) -> None:
        """The classic side of an upgrade: parked JoinGroup and SyncGroup requests are answered
        REBALANCE_IN_PROGRESS (their members rejoin the consumer group), timers stop, and the group
        stays, member-less, as the holder of the offsets."""
        for member in list(group.members.values()):
            group.maybe_invoke_join(member, JoinResult(member.member_id, ErrorCode.rebalance_in_progress))
            group.maybe_invoke_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
            self._cancel_heartbeat(member)
        for member_id in list(group.pending_member_timers):
            self._cancel_pending_member_expiration(group, member_id)
        self._cancel(group.join_timer)
        group.join_timer = None
        self._remove_sync_expiration(group)
        group.clear_membership(wall_clock_ms())

    # --- group writes ----------------------------------------------------------------------------

    def _store_group(
        self, group: ClassicGroup, assignment: Mapping[str, bytes], callback: Callable[[ErrorCode], None]
    ) -> None:
        """storeGroup: write the group record; `callback` gets the outcome once it is committed or failed."""
        self.owner.spawn(self._store_group_then(group, assignment, callback))

    async def _store_group_then(
        self, group: ClassicGroup, assignment: Mapping[str, bytes], callback: Callable[[ErrorCode], None]
    ) -> None:
        try:
            error = await self.manager.store_group(group, assignment)
        except asyncio.CancelledError:  # shutdown: whoever waits for the write is sent elsewhere
            run_guarded(callback, ErrorCode.not_coordinator)
            raise
        except Exception:
            log.exception("Storing the metadata of group %s failed", group.group_id)
            error = ErrorCode.unknown_server_error
        run_guarded(callback, error)

    def on_group_loaded(self, group: ClassicGroup) -> None:
        log.info("Loading group metadata for %s with generation %d", group.group_id, group.generation_id)
        if group.size > self.max_group_size:
            self._prepare_rebalance(
                group,
                f"Freshly-loaded group is over capacity ({self.max_group_size}). Rebalancing in order to "
                "give a chance for consumers to commit offsets",
            )
        for member in group.members.values():
            self.schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

    def unload_group(self, group: ClassicGroup) -> None:
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
