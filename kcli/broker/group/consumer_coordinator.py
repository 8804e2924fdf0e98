"""The consumer rebalance protocol (KIP-848) on the group coordinator: Kafka's GroupMetadataManager
for consumer groups (consumerGroupHeartbeat, consumerGroupLeave, the session and rebalance timeouts).

A heartbeat is turned into records, as Kafka does: the member's subscription (type 5), the subscribed
topics' metadata (4) and the group epoch (3) when they change, the target assignment (7, then 6) when
the group epoch is ahead of it, and the member's current assignment (8) when reconciliation moves it.
The records are replayed into the cached group at once and written to __consumer_offsets as one batch;
the heartbeat is answered when the batch is committed. The coordinator, not the member, computes the
target assignment with the server assignor (`group.consumer.assignors`, the first is the default).
A subscribed regular expression is resolved against the metadata image at each heartbeat.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import re
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from formats.internal import encode_consumer_group_record
from kcli.broker.group.assignors import ASSIGNORS, MemberSubscription, configured_assignors
from kcli.broker.group.consumer_group import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_REGULAR_EXPRESSION,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    Record,
    TopicMetadata,
    assignment_to_record,
    member_key,
    replay_record,
)
from kcli.broker.group.metadata_hash import MetadataHasher
from kcli.broker.group.reconciliation import FencedMemberEpoch, OwnedPartitions, reconcile
from kcli.broker.group.storage import GroupMetadataManager
from kcli.broker.log.log import wall_clock_ms
from kcli.config import BrokerConfig

log = logging.getLogger("kcli.broker.group")

CLASSIC_GROUP_METADATA = 2
"""A classic group's GroupMetadata record among a conversion's records: key {"groupId", "record"},
"record" the encoded (key, value), value None; written with the batch, never replayed here."""

CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
"""ConsumerGroupHeartbeat v1 (KIP-1082): the client generates its member id."""


class GroupError(Exception):
    """An ApiException of the consumer group paths: the error code and Kafka's message."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat answer; `assignment` None when the member is not sent one."""

    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """The fields of ConsumerGroupHeartbeat (null/-1 meaning "unchanged since the last heartbeat")."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: OwnedPartitions
    client_id: str
    client_host: str
    api_version: int


class CoordinatorServices(Protocol):
    """What the consumer groups use of the group coordinator that owns them (GroupCoordinator)."""

    config: BrokerConfig
    manager: GroupMetadataManager

    def validate_consumer_group_status(self, group_id: str) -> ErrorCode | None: ...

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None: ...

    def call_later(self, delay_ms: int, callback: Callable[..., None], *args: Any) -> asyncio.TimerHandle: ...

    def revert_partition(self, partition: int) -> None: ...


class GroupConversions(Protocol):
    """What the consumer groups use of the conversions between classic and consumer groups
    (GroupMigration, which sits above both coordinators)."""

    def upgrade(self, group_id: str, records: list[Record]) -> ConsumerGroup: ...

    def maybe_downgrade(self, group: ConsumerGroup, leaving_member_id: str) -> list[Record] | None: ...

    def release_classic_group(self, group_id: str) -> None: ...


def new_member_id() -> str:
    """Uuid.randomUuid().toString(): 16 random bytes in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerGroupCoordinator:
    """Consumer groups of the partitions the group coordinator owns (their cache: manager.consumer_groups)."""

    def __init__(self, coordinator: CoordinatorServices) -> None:
        config = coordinator.config
        self.coordinator = coordinator
        self.manager = coordinator.manager
        self.session_timeout_ms = int(config["group.consumer.session.timeout.ms"])  # type: ignore[call-overload]
        self.heartbeat_interval_ms = int(config["group.consumer.heartbeat.interval.ms"])  # type: ignore[call-overload]
        self.max_size = int(config["group.consumer.max.size"])  # type: ignore[call-overload]
        self.assignors = configured_assignors(list(config["group.consumer.assignors"]))  # type: ignore[call-overload]
        self._pending_session: list[tuple[str, str]] = []
        self.hasher = MetadataHasher()
        self.migration: GroupConversions | None = None
        """Classic members in consumer groups and the conversions (set by the group coordinator)."""

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.manager.consumer_groups

    # --- ConsumerGroupHeartbeat -------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """consumerGroupHeartbeat: join, heartbeat, reconcile or leave; answered once written."""
        try:
            self._validate(request)
        except GroupError as e:
            log.debug(
                "[GroupId %s] Invalid ConsumerGroupHeartbeat %s: %s", request.group_id, request, e.message
            )
            return HeartbeatResult(e.error, e.message)
        status = self.coordinator.validate_consumer_group_status(request.group_id)
        if status is not None:
            return HeartbeatResult(status)
        try:
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                records, result = self._leave(request)
            else:
                records, result = self._heartbeat(request)
        except GroupError as e:
            return HeartbeatResult(e.error, e.message)
        except FencedMemberEpoch as e:
            return HeartbeatResult(ErrorCode.fenced_member_epoch, str(e))
        error = await self.append(request.group_id, records)
        if error is not ErrorCode.none:
            return HeartbeatResult(error)
        return result

    def _validate(self, request: HeartbeatRequest) -> None:
        """throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        invalid = ErrorCode.invalid_request
        if not request.group_id:
            raise GroupError(invalid, "GroupId can't be empty.")
        if request.instance_id == "":
            raise GroupError(invalid, "InstanceId can't be empty.")
        if request.rack_id == "":
            raise GroupError(invalid, "RackId can't be empty.")
        epoch = request.member_epoch
        if request.api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION and not request.member_id:
            raise GroupError(invalid, "MemberId can't be empty.")
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not request.member_id:
                raise GroupError(invalid, "MemberId can't be empty.")
        elif epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise GroupError(invalid, "RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or request.owned:
                raise GroupError(invalid, "TopicPartitions must be empty when (re-)joining.")
            if not request.subscribed_topic_names and not request.subscribed_topic_regex:
                raise GroupError(invalid, "SubscribedTopicNames must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not request.member_id:
                raise GroupError(invalid, "MemberId can't be empty.")
            if request.instance_id is None:
                raise GroupError(invalid, "InstanceId can't be null.")
        else:
            raise GroupError(invalid, "MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            raise GroupError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.assignors)}.",
            )

    def _heartbeat(self, request: HeartbeatRequest) -> tuple[list[Record], HeartbeatResult]:
        group_id = request.group_id
        records: list[Record] = []
        joining = request.member_epoch == 0
        group = self._group_for_heartbeat(group_id, joining, records)
        member_id = request.member_id or new_member_id()
        if len(group.members) >= self.max_size and (not request.member_id or member_id not in group.members):
            raise GroupError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {self.max_size} members.",
            )
        before = len(records)
        if request.instance_id is None:
            member = self._dynamic_member(group, member_id, request)
        else:
            member = self._static_member(group, member_id, request, records)
        existing = group.members.get(member.member_id)
        if existing is None and len(records) > before:
            existing = member  # a static member's new id: its records are written, it changes nothing
        requested = replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms
            if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=request.server_assignor
            if request.server_assignor is not None
            else member.server_assignor,
            subscribed_topic_names=tuple(request.subscribed_topic_names)
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            subscribed_topic_regex=(request.subscribed_topic_regex or None)  # "": no regex
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client_id=request.client_id,
            client_host=request.client_host,
        )
        updated = self.update_member(group, existing, requested, request.owned, records)
        self.schedule_session_timeout(group_id, member_id)
        full = request.member_epoch == 0 or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        changed = existing is None or existing.assigned_partitions != updated.assigned_partitions
        return records, HeartbeatResult(
            ErrorCode.none,
            member_id=member_id,
            member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            assignment=updated.assigned_partitions if full or changed else None,
        )

    def update_member(
        self,
        group: ConsumerGroup,
        existing: ConsumerGroupMember | None,
        updated: ConsumerGroupMember,
        owned: OwnedPartitions,
        records: list[Record],
    ) -> ConsumerGroupMember:
        """Steps 1-3 of a heartbeat or of a classic member's JoinGroup: write the member's subscription
        when it changed (bumping the group epoch when its topics did), the subscription metadata, the
        target assignment when the group epoch is ahead of it, then reconcile the member towards it."""
        group_id = group.group_id
        member_id = updated.member_id
        bump = False
        if existing is None or updated.subscription_fields() != existing.subscription_fields():
            records.append(
                (
                    CONSUMER_GROUP_MEMBER_METADATA,
                    member_key(group_id, member_id),
                    updated.subscription_fields(),
                )
            )
            if existing is None or set(updated.subscribed_topic_names) != set(
                existing.subscribed_topic_names
            ):
                bump = True
            if existing is None or updated.subscribed_topic_regex != existing.subscribed_topic_regex:
                if updated.subscribed_topic_regex is not None:
                    _compiled(updated.subscribed_topic_regex)  # throwIfRegularExpressionIsInvalid
                bump = True
        members = self._members_with(group, updated)
        resolved = self.resolve_regexes(members.values())
        records += self.regex_records(group, resolved)
        topics = self.topics_of(members.values(), resolved)
        metadata_hash = self.metadata_hash(topics)
        if metadata_hash != group.metadata_hash:
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append(epoch_record(group_id, group_epoch, metadata_hash))
        if group.has_subscription_metadata_record:  # Kafka 4.0's record of the topics, now the hash's
            records.append((CONSUMER_GROUP_PARTITION_METADATA, {"groupId": group_id}, None))
        if group_epoch > group.assignment_epoch:
            metadata = self.subscription_metadata(topics)
            target = self._update_target_assignment(group, group_epoch, members, metadata, updated, records)
            target_epoch = group_epoch
        else:
            target_epoch = group.assignment_epoch
            target = group.target_assignment.get(member_id)
            previous = group.static_members.get(updated.instance_id) if updated.instance_id else None
            if target is None and previous is not None:  # ConsumerGroup.targetAssignment(member, instance)
                target = group.target_assignment.get(previous)
            target = target or {}
        if not updated.is_reconciled_to(target_epoch):
            reconciled = reconcile(updated, target_epoch, target, group.current_partition_epoch, owned)
            if reconciled != updated and not reconciled.uses_classic_protocol:
                # Members of the classic protocol have a join and a sync deadline instead.
                # The rebalance timeout runs from the moment revocation is asked, not from each heartbeat.
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(
                        group_id, member_id, reconciled.member_epoch, reconciled.rebalance_timeout_ms
                    )
                else:
                    self._cancel(group.rebalance_timers.pop(member_id, None))
            updated = reconciled
        if existing is None or updated.assignment_fields() != existing.assignment_fields():
            records.append(
                (
                    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                    member_key(group_id, member_id),
                    updated.assignment_fields(),
                )
            )
        return updated

    def _group_for_heartbeat(self, group_id: str, joining: bool, records: list[Record]) -> ConsumerGroup:
        """getOrMaybeCreateConsumerGroup: a new group is only built here; its records create it."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if not joining:
            raise GroupError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        if not self.manager.release_classic_group(group_id):
            if self.migration is not None:
                return self.migration.upgrade(group_id, records)  # convertToConsumerGroup, or refused
            raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group")
        return ConsumerGroup(group_id)

    def _dynamic_member(
        self, group: ConsumerGroup, member_id: str, request: HeartbeatRequest
    ) -> ConsumerGroupMember:
        """getOrMaybeSubscribeDynamicConsumerGroupMember."""
        member = group.members.get(member_id)
        if request.member_epoch == 0:
            if member is None:
                log.info("[GroupId %s] Member %s joins the consumer group.", group.group_id, member_id)
                return ConsumerGroupMember(member_id)
            # Rejoining under its own id (KIP-1082): it starts over without partitions.
            return replace(
                member,
                member_epoch=0,
                previous_member_epoch=0,
                state=MemberState.STABLE,
                assigned_partitions={},
                partitions_pending_revocation={},
            )
        if member is None:
            raise GroupError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
            )
        _check_member_epoch(member, request.member_epoch, request.owned)
        return member

    def _static_member(
        self, group: ConsumerGroup, member_id: str, request: HeartbeatRequest, records: list[Record]
    ) -> ConsumerGroupMember:
        """getOrMaybeSubscribeStaticConsumerGroupMember: a static member may take over its instance id
        only once the previous one left with epoch -2."""
        instance_id = request.instance_id
        existing = group.static_member(instance_id)
        if request.member_epoch == 0:
            if existing is None:
                return ConsumerGroupMember(member_id, instance_id=instance_id)
            if (
                existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                and not existing.uses_classic_protocol
            ):
                raise GroupError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {existing.member_id} with instance id {instance_id} is not released yet.",
                )
            return self.replace_static_member(group, existing, member_id, records)
        if existing is None:
            raise GroupError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise GroupError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} is fenced by existing member "
                f"{existing.member_id}.",
            )
        _check_member_epoch(existing, request.member_epoch, request.owned)
        return existing

    def replace_static_member(
        self, group: ConsumerGroup, existing: ConsumerGroupMember, member_id: str, records: list[Record]
    ) -> ConsumerGroupMember:
        """replaceMember: the instance id's new member takes the old one's assignment, at epoch 0."""
        instance_id = existing.instance_id
        new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        gid = group.group_id
        records.extend(_member_tombstones(gid, existing.member_id))
        records.append(
            (CONSUMER_GROUP_MEMBER_METADATA, member_key(gid, member_id), new.subscription_fields())
        )
        records.append(
            (
                CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                member_key(gid, member_id),
                {
                    "topicPartitions": assignment_to_record(
                        group.target_assignment.get(existing.member_id, {})
                    )
                },
            )
        )
        records.append(
            (
                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                member_key(gid, member_id),
                new.assignment_fields(),
            )
        )
        self.cancel_timers(group, existing.member_id)
        log.info(
            "[GroupId %s] Static member with instance id %s re-joins the consumer group: %s replaces %s.",
            gid,
            instance_id,
            member_id,
            existing.member_id,
        )
        return new

    def _members_with(
        self, group: ConsumerGroup, updated: ConsumerGroupMember
    ) -> dict[str, ConsumerGroupMember]:
        """The members once `updated` is in (replacing the previous holder of its instance id)."""
        members = dict(group.members)
        previous = group.static_members.get(updated.instance_id) if updated.instance_id else None
        if previous is not None and previous != updated.member_id:
            members.pop(previous, None)
        members[updated.member_id] = updated
        return members

    def _update_target_assignment(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        members: Mapping[str, ConsumerGroupMember],
        metadata: Mapping[str, TopicMetadata],
        updated: ConsumerGroupMember,
        records: list[Record],
    ) -> Assignment:
        """updateTargetAssignment (TargetAssignmentBuilder): run the preferred assignor, write the members
        whose target changed, then the new assignment epoch."""
        counts: dict[str, int] = {}
        for member in members.values():
            if member.server_assignor is not None:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        name = min(counts, key=lambda n: (-counts[n], n)) if counts else self.assignors[0]
        subscriptions = {
            member_id: MemberSubscription(
                frozenset(metadata[n].topic_id for n in self.topics_of([m]) if n in metadata), m.rack_id
            )
            for member_id, m in members.items()
        }
        current = dict(group.target_assignment)
        previous = group.static_members.get(updated.instance_id) if updated.instance_id else None
        if previous is not None and previous != updated.member_id and previous in current:
            current[updated.member_id] = current.pop(previous)
        partition_counts = {t.topic_id: t.num_partitions for t in metadata.values()}
        assignment = ASSIGNORS[name](subscriptions, partition_counts, current)
        gid = group.group_id
        for member_id in sorted(assignment):
            new = {t: p for t, p in assignment[member_id].items() if p}
            if new != {t: p for t, p in current.get(member_id, {}).items() if p} or member_id not in current:
                records.append(
                    (
                        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                        member_key(gid, member_id),
                        {"topicPartitions": assignment_to_record(new)},
                    )
                )
        records.append(
            (CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, {"groupId": gid}, {"assignmentEpoch": group_epoch})
        )
        log.info(
            "[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor.",
            gid,
            group_epoch,
            name,
        )
        return assignment.get(updated.member_id, {})

    def topics_of(
        self,
        members: Iterable[ConsumerGroupMember],
        resolved: Mapping[str, frozenset[str]] | None = None,
    ) -> set[str]:
        """The topics the members subscribe to: their names, and the topics their regular expression
        matches whole (refreshRegularExpressions; resolved against the current image at each heartbeat
        rather than in the background, and with Python's `re` where Kafka has RE2/J). `resolved`: the
        members' `resolve_regexes`, when the caller has it already."""
        members = list(members)
        topics: set[str] = set()
        for member in members:
            topics.update(member.subscribed_topic_names)
        for matched in (self.resolve_regexes(members) if resolved is None else resolved).values():
            topics.update(matched)
        return topics

    def resolve_regexes(self, members: Iterable[ConsumerGroupMember]) -> dict[str, frozenset[str]]:
        """Each regular expression the members subscribe with, and the topics it matches whole."""
        regexes = {m.subscribed_topic_regex for m in members if m.subscribed_topic_regex}
        if not regexes:
            return {}
        names = list(self.manager.loader.image.topic_ids)
        resolved = {}
        for regex in regexes:
            try:
                pattern = _compiled(regex)
            except GroupError:
                continue  # kept from an older record; Kafka logs and ignores it too
            resolved[regex] = frozenset(name for name in names if pattern.fullmatch(name))
        return resolved

    def regex_records(self, group: ConsumerGroup, resolved: Mapping[str, frozenset[str]]) -> list[Record]:
        """The resolution records (type 16, Kafka 4.0+) of the regular expressions the members subscribe
        with (`resolved`, from resolve_regexes) that changed, and the tombstones of those no member
        subscribes with any more (maybeDeleteResolvedRegularExpressions). Kafka resolves in the background
        and writes what it found (its topics, the metadata offset resolved at, when); kcli resolves at
        each heartbeat and writes the same record when that changes."""
        records: list[Record] = []
        gid = group.group_id
        for regex in sorted(set(group.resolved_regexes) - set(resolved)):
            records.append(
                (CONSUMER_GROUP_REGULAR_EXPRESSION, {"groupId": gid, "regularExpression": regex}, None)
            )
        image = self.manager.loader.image
        for regex in sorted(resolved):
            if group.resolved_regexes.get(regex) != resolved[regex]:
                value = {
                    "topics": sorted(resolved[regex]),
                    "version": image.offset,
                    "timestamp": wall_clock_ms(),
                }
                records.append(
                    (CONSUMER_GROUP_REGULAR_EXPRESSION, {"groupId": gid, "regularExpression": regex}, value)
                )
        return records

    def metadata_hash(self, topic_names: Iterable[str]) -> int:
        """ModernGroup.computeMetadataHash: what the group's epoch record keeps of its topics (Kafka 4.1)."""
        return self.hasher.group_hash(self.manager.loader.image, topic_names)

    def subscription_metadata(self, topic_names: Iterable[str]) -> dict[str, TopicMetadata]:
        """The subscribed topics that exist, with id and partition count: what the assignors take."""
        image = self.manager.loader.image
        metadata = {}
        for name in sorted(topic_names):
            topic = image.topic_image(name)
            if topic is not None:
                metadata[name] = TopicMetadata(topic.topic_id, name, len(topic.partitions))
        return metadata

    # --- leaving and fencing ----------------------------------------------------------------------

    def _leave(self, request: HeartbeatRequest) -> tuple[list[Record], HeartbeatResult]:
        """consumerGroupLeave: epoch -1 leaves; a static member's -2 only steps away for its session."""
        group = self.groups.get(request.group_id)
        if group is None:
            raise GroupError(ErrorCode.group_id_not_found, f"Consumer group {request.group_id} not found.")
        result = HeartbeatResult(
            ErrorCode.none, member_id=request.member_id, member_epoch=request.member_epoch
        )
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise GroupError(
                    ErrorCode.unknown_member_id,
                    f"Member {request.member_id} is not a member of group {group.group_id}.",
                )
            log.info("[GroupId %s] Member %s left the consumer group.", group.group_id, request.member_id)
            return self.fence_records(group, member), result
        member = group.static_member(request.instance_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
        if member.member_id != request.member_id:
            raise GroupError(
                ErrorCode.fenced_instance_id,
                f"Static member {request.member_id} with instance id {request.instance_id} is fenced by "
                f"existing member {member.member_id}.",
            )
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            leaving = replace(
                member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation={}
            )
            record = (
                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                member_key(group.group_id, member.member_id),
                leaving.assignment_fields(),
            )
            return [record], HeartbeatResult(
                ErrorCode.none, member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
            )
        return self.fence_records(group, member), result

    def fence_records(self, group: ConsumerGroup, member: ConsumerGroupMember) -> list[Record]:
        """consumerGroupFenceMember: the member's tombstones, the subscription metadata without it, and
        a bumped group epoch so the others get its partitions. When it was the last member of the
        consumer protocol among classic ones, the group becomes a classic group instead (downgrade)."""
        if self.migration is not None:
            downgraded = self.migration.maybe_downgrade(group, member.member_id)
            if downgraded is not None:
                return downgraded
        records = _member_tombstones(group.group_id, member.member_id)
        others = [m for m in group.members.values() if m.member_id != member.member_id]
        resolved = self.resolve_regexes(others)
        records += self.regex_records(group, resolved)
        metadata_hash = self.metadata_hash(self.topics_of(others, resolved))
        records.append(epoch_record(group.group_id, group.group_epoch + 1, metadata_hash))
        self.cancel_timers(group, member.member_id)
        return records

    def schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        """(Re)start the member's session: group.consumer.session.timeout.ms, or the session timeout a
        member of the classic protocol sent in its JoinGroup."""
        group = self.groups.get(group_id)
        timers = group.session_timers if group is not None else None
        if group is None or timers is None:
            # A new group: its records are replayed right after; schedule on the cached group then.
            self._pending_session.append((group_id, member_id))
            return
        member = group.members.get(member_id)
        classic = None if member is None else member.classic_member_metadata
        timeout_ms = self.session_timeout_ms if classic is None else classic.session_timeout_ms
        self._cancel(timers.pop(member_id, None))
        timers[member_id] = self.coordinator.call_later(
            timeout_ms, self._fence_expired, group_id, member_id, "the member session expired."
        )

    def schedule_classic_timeout(self, group_id: str, member_id: str, *, join: bool, timeout_ms: int) -> None:
        """A classic member's join deadline (set once, when it is asked to rejoin) or sync deadline
        (set at each join): missing it fences the member."""
        group = self.groups.get(group_id)
        if group is None:
            return
        timers = group.join_timers if join else group.sync_timers
        if join and member_id in timers:
            return
        self._cancel(timers.pop(member_id, None))
        reason = (
            "the classic member failed to join within the rebalance timeout."
            if join
            else "the member failed to sync within timeout."
        )
        timers[member_id] = self.coordinator.call_later(
            timeout_ms, self._fence_expired, group_id, member_id, reason
        )

    def cancel_classic_timeout(self, group: ConsumerGroup, member_id: str, *, join: bool) -> None:
        self._cancel((group.join_timers if join else group.sync_timers).pop(member_id, None))

    def _schedule_rebalance_timeout(self, group_id: str, member_id: str, epoch: int, timeout_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None or timeout_ms < 0:
            return
        self._cancel(group.rebalance_timers.pop(member_id, None))
        group.rebalance_timers[member_id] = self.coordinator.call_later(
            timeout_ms, self._on_rebalance_timeout, group_id, member_id, epoch
        )

    def _on_rebalance_timeout(self, group_id: str, member_id: str, epoch: int) -> None:
        """The member did not revoke its partitions within its rebalance timeout: it is fenced."""
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if (
            member is not None
            and member.member_epoch == epoch
            and member.state is MemberState.UNREVOKED_PARTITIONS
        ):
            self._fence_expired(
                group_id, member_id, "the member failed to revoke partitions within its rebalance timeout."
            )

    def _fence_expired(self, group_id: str, member_id: str, reason: str) -> None:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        group.session_timers.pop(member_id, None)
        log.info("[GroupId %s] Member %s fenced from the group because %s", group_id, member_id, reason)
        self.apply_then_write(group_id, self.fence_records(group, member))

    def cancel_timers(self, group: ConsumerGroup, member_id: str) -> None:
        for timers in (group.session_timers, group.rebalance_timers, group.join_timers, group.sync_timers):
            self._cancel(timers.pop(member_id, None))

    def cancel_all(self, group: ConsumerGroup) -> None:
        for member_id in list(group.members):
            self.cancel_timers(group, member_id)

    @staticmethod
    def _cancel(handle: object | None) -> None:
        if isinstance(handle, asyncio.TimerHandle):
            handle.cancel()

    def on_loaded(self, group: ConsumerGroup) -> None:
        """A group replayed from the log: every member gets a fresh session (Kafka's onLoaded)."""
        for member_id, member in group.members.items():
            self.schedule_session_timeout(group.group_id, member_id)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(
                    group.group_id, member_id, member.member_epoch, member.rebalance_timeout_ms
                )

    # --- writes -----------------------------------------------------------------------------------

    def apply_then_write(self, group_id: str, records: list[Record]) -> None:
        """Replay `records` and append them now, without waiting for the commit (a timeout's or a
        deletion's records, which nobody answers): appended in the same step as the replay, they stay
        in the log in the order the cache took them."""
        self._replay(records)
        partition = self.manager.partition_for(group_id)
        self._written(
            group_id, partition, len(records), self.manager.append_now(partition, _encoded(records))
        )

    async def append(self, group_id: str, records: list[Record]) -> ErrorCode:
        """Replay `records` into the cache and write them as one batch; the error a heartbeat returns."""
        if not records:
            return ErrorCode.none
        self._replay(records)
        return await self._write(group_id, records)

    def _replay(self, records: list[Record]) -> None:
        for record_type, key, value in records:
            if record_type == CLASSIC_GROUP_METADATA:
                if self.migration is not None and key["record"][1] is None:
                    self.migration.release_classic_group(key["groupId"])  # upgraded: its members moved
                continue
            replay_record(self.groups, record_type, key, value)
        pending, self._pending_session = self._pending_session, []
        for gid, member_id in pending:
            if gid in self.groups:
                self.schedule_session_timeout(gid, member_id)

    async def _write(self, group_id: str, records: list[Record]) -> ErrorCode:
        # The append itself runs before the first suspension: in the log in the order of the replays.
        partition = self.manager.partition_for(group_id)
        error, _ = await self.manager.write(partition, _encoded(records))
        self._written(group_id, partition, len(records), error)
        return _APPEND_ERRORS.get(error, error)

    def _written(self, group_id: str, partition: int, count: int, error: ErrorCode) -> None:
        """A batch the log refused was replayed already: the partition's state goes back to what its
        log holds (CoordinatorRuntime reverts to the last written offset). A batch that was appended
        but not yet replicated stays, as in Kafka; a partition no longer led here is unloaded anyway."""
        if error is ErrorCode.none:
            return
        log.warning("[GroupId %s] Writing %d record(s) failed: %s", group_id, count, error.name)
        if error not in _APPENDED_OR_UNLOADED:
            self.coordinator.revert_partition(partition)

    # --- offsets and admin ------------------------------------------------------------------------

    def validate_offset_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int, transactional: bool
    ) -> ErrorCode | None:
        """ConsumerGroup.validateOffsetCommit: members commit with their current epoch."""
        if member_epoch < 0 and group.is_empty:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not transactional and not member.uses_classic_protocol and 0 <= api_version < 9:
            return ErrorCode.unsupported_version
        return _validate_member_epoch(member, member_epoch)

    @staticmethod
    def validate_offset_fetch(
        group: ConsumerGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """ConsumerGroup.validateOffsetFetch."""
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return _validate_member_epoch(member, member_epoch)

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """consumerGroupDescribe for one id: (error, message, group)."""
        status = self.coordinator.validate_consumer_group_status(group_id)
        if status is not None:
            return status, None, None
        group = self.groups.get(group_id)
        if group is None:
            message = f"Group {group_id} not found."
            if self.manager.get_group(group_id) is not None and not self.manager.is_simple_classic(group_id):
                message = f"Group {group_id} is not a consumer group."
            return ErrorCode.group_id_not_found, message, None
        return ErrorCode.none, None, group

    def default_assignor(self, group: ConsumerGroup) -> str:
        return group.preferred_server_assignor() or self.assignors[0]

    def delete(self, group: ConsumerGroup) -> None:
        """DeleteGroups of an empty consumer group: tombstones for every one of its records."""
        self.cancel_all(group)
        self.apply_then_write(group.group_id, group.tombstones())


@functools.lru_cache(maxsize=256)
def _compiled(regex: str) -> re.Pattern[str]:
    """The subscribed regex compiled, or INVALID_REGULAR_EXPRESSION."""
    try:
        return re.compile(regex)
    except re.error as e:
        raise GroupError(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.",
        ) from None


def _encoded(records: list[Record]) -> list[tuple[bytes, bytes | None]]:
    return [
        key["record"]
        if record_type == CLASSIC_GROUP_METADATA
        else encode_consumer_group_record(record_type, key, value)
        for record_type, key, value in records
    ]


def _check_member_epoch(member: ConsumerGroupMember, received: int, owned: OwnedPartitions) -> None:
    """throwIfConsumerGroupMemberEpochIsInvalid: the previous epoch is accepted when the member owns a
    subset of its assignment (the answer that bumped it may have been lost)."""
    if received > member.member_epoch:
        raise GroupError(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.member_epoch:
        if received != member.previous_member_epoch or not _is_subset(owned, member.assigned_partitions):
            raise GroupError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                "rejoin.",
            )


def _validate_member_epoch(member: ConsumerGroupMember, received: int) -> ErrorCode | None:
    """validateMemberEpoch: a classic member's generation is its member epoch (ILLEGAL_GENERATION)."""
    if received == member.member_epoch:
        return None
    return ErrorCode.illegal_generation if member.uses_classic_protocol else ErrorCode.stale_member_epoch


def _is_subset(owned: OwnedPartitions, target: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in target.get(topic_id, frozenset()) for topic_id, partitions in owned for p in partitions)


def _member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """removeMember: current assignment, target assignment, then subscription (the order matters)."""
    key = member_key(group_id, member_id)
    return [
        (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, key, None),
        (CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, key, None),
        (CONSUMER_GROUP_MEMBER_METADATA, key, None),
    ]


def epoch_record(group_id: str, group_epoch: int, metadata_hash: int) -> Record:
    """newConsumerGroupEpochRecord, and Kafka's line for it."""
    log.info(
        "[GroupId %s] Bumped group epoch to %d with metadata hash %d.", group_id, group_epoch, metadata_hash
    )
    return (
        CONSUMER_GROUP_METADATA,
        {"groupId": group_id},
        {"epoch": group_epoch, "metadataHash": metadata_hash},
    )


_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}
"""GroupCoordinatorService.normalizeException: what a failed write of the new coordinator answers."""

_APPENDED_OR_UNLOADED = frozenset(
    {
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
    }
)
"""Failed writes whose batch is in the log (not yet committed), or whose partition this node no longer
leads (its groups are unloaded on the metadata change): nothing to revert."""
