"""Classic and consumer groups side by side (KIP-848's migration), as Kafka 4's GroupMetadataManager
does it: classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup,
classicGroupHeartbeatToConsumerGroup, classicGroupLeaveToConsumerGroup, convertToConsumerGroup and
convertToClassicGroup.

A consumer group may hold members of the classic protocol: their JoinGroup is a heartbeat of the
consumer protocol in another form (the subscription read from the "consumer" protocol metadata, the
member epoch returned as the generation), their SyncGroup returns the member's current assignment
from the coordinator's target assignment, and Heartbeat answers REBALANCE_IN_PROGRESS when the member
has to rejoin to move on. They have no rebalance timeout but a join deadline and a sync deadline.

`group.consumer.migration.policy` (Kafka 4.1's default `bidirectional`) allows the two conversions:
the first consumer-protocol member joining a classic group with members turns it into a consumer group
(upgrade: the classic group's tombstone, then the consumer group's records), and the last
consumer-protocol member leaving a group of classic members turns it back (downgrade: the consumer
group's tombstones, then the classic group's record with each member's target assignment, and a
rebalance). Offsets stay where they are: in the classic group that holds them (`offsets_holder`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from formats.internal import (
    consumer_protocol_subscription,
    consumer_protocol_topics,
    consumer_protocol_version,
    encode_consumer_protocol_assignment,
    encode_group_metadata_key,
)
from kcli.broker.group.classic_coordinator import ClassicGroupCoordinator
from kcli.broker.group.consumer_coordinator import (
    CLASSIC_GROUP_METADATA,
    ConsumerGroupCoordinator,
    GroupError,
    epoch_record,
    new_member_id,
)
from kcli.broker.group.consumer_group import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    Record,
    assignment_to_record,
    member_key,
)
from kcli.broker.group.group import (
    CONSUMER_PROTOCOL_TYPE,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from kcli.broker.group.storage import group_metadata_record
from kcli.broker.log.log import wall_clock_ms
from kcli.config import BrokerConfig

log = logging.getLogger("kcli.broker.group")

MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


class GroupMigration:
    """Classic members of consumer groups, and the conversions between the two kinds of group."""

    def __init__(
        self, config: BrokerConfig, consumer: ConsumerGroupCoordinator, classic: ClassicGroupCoordinator
    ) -> None:
        self.policy = str(config["group.consumer.migration.policy"]).lower()  # type: ignore[call-overload]
        self.consumer = consumer
        self.classic = classic
        self.manager = consumer.manager
        consumer.migration = self

    @property
    def upgrade_enabled(self) -> bool:
        return self.policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.policy in ("downgrade", "bidirectional")

    def serves(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group the classic APIs of `group_id` go to: one with members."""
        group = self.manager.consumer_groups.get(group_id)
        return None if group is None or group.is_empty else group

    # --- JoinGroup ----------------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        *,
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        reason: str | None,
    ) -> JoinResult:
        """classicGroupJoinToConsumerGroup: answered once the member's records are committed. The group
        is looked up, changed and its records replayed in one step of the event loop (no other request
        between); if it is no longer a consumer group with members, the classic path takes the join."""
        group = self.serves(group_id)
        if group is None:
            return await self.classic.join_group(
                group_id,
                member_id,
                instance_id,
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
        try:
            result, records = self._join(
                group,
                member_id,
                instance_id,
                require_known_member_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
        except GroupError as e:
            log.info("[GroupId %s] JoinGroup of member %s refused: %s", group.group_id, member_id, e.message)
            return JoinResult(member_id, e.error)
        if result.error is not ErrorCode.none:
            return result
        error = await self.consumer.append(group_id, records)
        if error is not ErrorCode.none:
            return JoinResult(member_id, error)
        current = self.manager.consumer_groups.get(group_id)
        if current is not None and result.member_id in current.members:
            self.consumer.cancel_classic_timeout(current, result.member_id, join=True)
            self.consumer.schedule_session_timeout(group_id, result.member_id)
            self.consumer.schedule_classic_timeout(
                group_id, result.member_id, join=False, timeout_ms=rebalance_timeout_ms
            )
        return result

    def _join(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> tuple[JoinResult, list[Record]]:
        group_id = group.group_id
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        if is_unknown:
            member_id = new_member_id()
        if len(group.members) >= self.consumer.max_size and member_id not in group.members:
            raise GroupError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {self.consumer.max_size} members.",
            )
        if not group.supports_classic_protocols(protocol_type, {name for name, _ in protocols}):
            raise GroupError(
                ErrorCode.inconsistent_group_protocol, f"Member {member_id}'s protocols are not supported."
            )
        if require_known_member_id and is_unknown and instance_id is None:
            log.info(
                "[GroupId %s] Dynamic member with unknown member id joins the consumer group. Created a new "
                "member id %s and requesting the member to rejoin with this id.",
                group_id,
                member_id,
            )
            return JoinResult(member_id, ErrorCode.member_id_required), []
        subscription = consumer_protocol_subscription(protocols[0][1])
        if subscription is None:
            raise GroupError(
                ErrorCode.inconsistent_group_protocol,
                f"Member {member_id}'s embedded consumer protocol subscription is malformed.",
            )
        records: list[Record] = []
        member = self._member(group, member_id, instance_id, is_unknown, records)
        existing = group.members.get(member.member_id)
        if existing is None and records:
            existing = member  # a static member's new id: its records are written already
        requested = replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms
            if rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics,
            client_id=client_id,
            client_host=client_host,
            classic_member_metadata=ClassicMemberMetadata(session_timeout_ms, tuple(protocols)),
        )
        owned = self._by_topic_id(subscription.owned_partitions)
        updated = self.consumer.update_member(
            group, existing, requested, [(t, list(p)) for t, p in owned.items()], records
        )
        replaced = group.static_members.get(instance_id) if instance_id is not None else None
        if (
            replaced is not None
            and replaced != updated.member_id
            and self._may_downgrade(group, replaced, len(group.members))
        ):
            # The last consumer-protocol member, static, is replaced by this classic one: the group turns
            # classic with it in its place, holding its assignment (no rebalance).
            records += _tombstones_replacing(group, replaced, updated.member_id)
            self._downgrade(group, replaced, updated, records)
        return (
            JoinResult(
                member_id=updated.member_id,
                error=ErrorCode.none,
                generation_id=updated.member_epoch,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=protocols[0][0],
            ),
            records,
        )

    def _member(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        is_unknown: bool,
        records: list[Record],
    ) -> ConsumerGroupMember:
        """getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember for a classic member."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                log.info(
                    "[GroupId %s] Member %s joins the consumer group using the classic protocol.",
                    group.group_id,
                    member_id,
                )
                return ConsumerGroupMember(member_id)
            return member
        existing = group.static_member(instance_id)
        if is_unknown:
            if existing is None:
                log.info(
                    "[GroupId %s] Static member %s with instance id %s joins the consumer group using the "
                    "classic protocol.",
                    group.group_id,
                    member_id,
                    instance_id,
                )
                return ConsumerGroupMember(member_id, instance_id=instance_id)
            return self.consumer.replace_static_member(group, existing, member_id, records)
        if existing is None:
            raise GroupError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise GroupError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} is fenced by existing member "
                f"{existing.member_id}.",
            )
        return existing

    # --- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------------

    def sync(
        self,
        group: ConsumerGroup,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        instance_id: str | None,
    ) -> SyncResult:
        """classicGroupSyncToConsumerGroup: the member's current assignment, as ConsumerProtocol bytes."""
        try:
            member = self._classic_member(group, member_id, instance_id)
            if member.member_epoch != generation_id:
                raise GroupError(ErrorCode.illegal_generation)
            classic = member.classic_member_metadata
            assert classic is not None
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise GroupError(ErrorCode.inconsistent_group_protocol)
            if protocol_name is not None and protocol_name != classic.supported_protocols[0][0]:
                raise GroupError(ErrorCode.inconsistent_group_protocol)
            if (
                group.group_epoch > member.member_epoch
                and member.state is not MemberState.UNREVOKED_PARTITIONS
            ):
                # A new rebalance started: the member rejoins to catch up.
                self.consumer.schedule_classic_timeout(
                    group.group_id, member.member_id, join=True, timeout_ms=member.rebalance_timeout_ms
                )
                raise GroupError(ErrorCode.rebalance_in_progress)
        except GroupError as e:
            return SyncResult(e.error)
        self.consumer.cancel_classic_timeout(group, member.member_id, join=False)
        self.consumer.schedule_session_timeout(group.group_id, member.member_id)
        return SyncResult(ErrorCode.none, protocol_type, protocol_name, self._assignment_bytes(member))

    def heartbeat(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS when the member must rejoin (the
        group epoch moved on, it has partitions to revoke, or the partitions it waits for are free)."""
        try:
            member = self._classic_member(group, member_id, instance_id)
        except GroupError as e:
            return e.error
        if member.member_epoch != generation_id:
            return ErrorCode.illegal_generation
        self.consumer.schedule_session_timeout(group.group_id, member.member_id)
        if (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not group.waiting_on_unreleased_partition(member)
            )
        ):
            self.consumer.schedule_classic_timeout(
                group.group_id, member.member_id, join=True, timeout_ms=member.rebalance_timeout_ms
            )
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self, group: ConsumerGroup, members: list[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """classicGroupLeaveToConsumerGroup: the leaving members' tombstones, the subscription metadata
        without them and a bumped group epoch, in one batch."""
        group_id = group.group_id
        errors: list[ErrorCode] = []
        records: list[Record] = []
        leaving: set[str] = set()
        for member_id, instance_id, reason in members:
            why = reason or "not provided"
            try:
                if instance_id is None:
                    member = self._classic_member(group, member_id, None)
                else:
                    member = group.static_member(instance_id)  # type: ignore[assignment]
                    if member is None:
                        raise GroupError(ErrorCode.unknown_member_id)
                    if member_id != UNKNOWN_MEMBER_ID and member.member_id != member_id:
                        raise GroupError(ErrorCode.fenced_instance_id)
                    if not member.uses_classic_protocol:
                        raise GroupError(ErrorCode.unknown_member_id)
            except GroupError as e:
                errors.append(e.error)
                continue
            log.info(
                "[Group %s] Member %s has left group through explicit `LeaveGroup` request; client reason: %s",
                group_id,
                member.member_id,
                why,
            )
            if member.member_id not in leaving:
                leaving.add(member.member_id)
                key = member_key(group_id, member.member_id)
                records += [
                    (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, key, None),
                    (CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, key, None),
                    (CONSUMER_GROUP_MEMBER_METADATA, key, None),
                ]
                self.consumer.cancel_timers(group, member.member_id)
            errors.append(ErrorCode.none)
        if records:
            others = [m for m in group.members.values() if m.member_id not in leaving]
            resolved = self.consumer.resolve_regexes(others)
            records += self.consumer.regex_records(group, resolved)
            metadata_hash = self.consumer.metadata_hash(self.consumer.topics_of(others, resolved))
            records.append(epoch_record(group_id, group.group_epoch + 1, metadata_hash))
            self.consumer.apply_then_write(group_id, records)
        return ErrorCode.none, errors

    def _classic_member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember:
        """validateConsumerGroupMember, then throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise GroupError(ErrorCode.unknown_member_id)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise GroupError(ErrorCode.unknown_member_id)
            if member.member_id != member_id:
                raise GroupError(ErrorCode.fenced_instance_id)
        if not member.uses_classic_protocol:
            raise GroupError(ErrorCode.unknown_member_id)
        return member

    # --- upgrade ------------------------------------------------------------------------------------

    def upgrade(self, group_id: str, records: list[Record]) -> ConsumerGroup:
        """convertToConsumerGroup: the classic group with members that a consumer-protocol member joins
        becomes a consumer group at its generation, each member Stable with its current assignment as
        its target; refused (GROUP_ID_NOT_FOUND) when the policy, the protocol type or the size forbid."""
        classic = self.manager.get_group(group_id)
        refused = GroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group")
        if classic is None:
            raise refused
        if not self.upgrade_enabled:
            log.info(
                "Cannot upgrade classic group %s to consumer group because the online upgrade is disabled.",
                group_id,
            )
            raise refused
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info(
                "Cannot upgrade classic group %s to consumer group because the group does not use the "
                "consumer embedded protocol.",
                group_id,
            )
            raise refused
        if classic.size > self.consumer.max_size:
            log.info(
                "Cannot upgrade classic group %s to consumer group because the group size exceeds the "
                "consumer group maximum size.",
                group_id,
            )
            raise refused
        group = ConsumerGroup(group_id)
        group.group_epoch = group.assignment_epoch = classic.generation_id
        members = []
        for m in classic.members.values():
            protocol = classic.protocol_name or (m.protocols[0][0] if m.protocols else "")
            subscription = consumer_protocol_subscription(m.metadata(protocol)) if m.protocols else None
            assigned = consumer_protocol_topics(m.assignment, subscription=False) if m.assignment else {}
            if subscription is None or assigned is None:
                raise GroupError(
                    ErrorCode.group_id_not_found,
                    f"Cannot upgrade the classic group {group_id} to consumer group because the embedded "
                    "consumer protocol is malformed.",
                )
            assignment = self._by_topic_id(assigned)
            members.append(
                ConsumerGroupMember(
                    m.member_id,
                    member_epoch=classic.generation_id,
                    previous_member_epoch=classic.generation_id,
                    state=MemberState.STABLE,
                    instance_id=m.group_instance_id,
                    rack_id=subscription.rack_id,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=subscription.topics,
                    assigned_partitions=assignment,
                    classic_member_metadata=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)),
                )
            )
        for member in members:
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
            group.target_assignment[member.member_id] = member.assigned_partitions
            for topic_id, partitions in member.assigned_partitions.items():
                for partition in partitions:
                    group.partition_epochs[(topic_id, partition)] = member.member_epoch
        # createGroupTombstoneRecords of the classic group, then createConsumerGroupRecords.
        records.append(
            (
                CLASSIC_GROUP_METADATA,
                {"groupId": group_id, "record": (encode_group_metadata_key(group_id), None)},
                None,
            )
        )
        for member in members:
            records.append(
                (
                    CONSUMER_GROUP_MEMBER_METADATA,
                    member_key(group_id, member.member_id),
                    member.subscription_fields(),
                )
            )
        group.metadata_hash = self.consumer.metadata_hash(self.consumer.topics_of(members))
        records.append(
            (
                CONSUMER_GROUP_METADATA,
                {"groupId": group_id},
                {"epoch": group.group_epoch, "metadataHash": group.metadata_hash},
            )
        )
        for member in members:
            records.append(
                (
                    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                    member_key(group_id, member.member_id),
                    {"topicPartitions": assignment_to_record(member.assigned_partitions)},
                )
            )
        records.append(
            (
                CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                {"groupId": group_id},
                {"assignmentEpoch": group.group_epoch},
            )
        )
        for member in members:
            records.append(
                (
                    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                    member_key(group_id, member.member_id),
                    member.assignment_fields(),
                )
            )
            self.consumer.schedule_session_timeout(group_id, member.member_id)  # once replayed
        log.info(
            "[GroupId %s] Converting the classic group (generation %d, %d member(s)) to a consumer group.",
            group_id,
            classic.generation_id,
            classic.size,
        )
        return group

    def release_classic_group(self, group_id: str) -> None:
        """The upgrade's records were replayed: the classic group's members now belong to the consumer
        group; parked requests are answered REBALANCE_IN_PROGRESS and the group only keeps offsets."""
        classic = self.manager.get_group(group_id)
        if classic is not None and classic.members:
            self.classic.release_members(classic)

    # --- downgrade ----------------------------------------------------------------------------------

    def maybe_downgrade(self, group: ConsumerGroup, leaving_member_id: str) -> list[Record] | None:
        """convertToClassicGroup when `leaving_member_id` is fenced or leaves: None unless it is the last
        consumer-protocol member among classic ones and the policy and the classic size allow it. The
        classic group takes over at once (its members' sessions running, a rebalance prepared); the
        records returned are the consumer group's tombstones then the classic group's record."""
        if len(group.members) <= 1:
            return None
        if not self._may_downgrade(group, leaving_member_id, len(group.members) - 1):
            return None
        records = group.tombstones()
        self._downgrade(group, leaving_member_id, None, records)
        return records

    def _may_downgrade(self, group: ConsumerGroup, leaving_member_id: str, size: int) -> bool:
        """validateOnlineDowngradeWith{FencedMember,ReplacedMemberId}."""
        group_id = group.group_id
        if not group.all_members_use_classic_protocol_except(leaving_member_id):
            return False
        if not self.downgrade_enabled:
            log.info(
                "Cannot downgrade consumer group %s to classic group because the online downgrade is disabled.",
                group_id,
            )
            return False
        if size > self.classic.max_group_size:
            log.info(
                "Cannot downgrade consumer group %s to classic group because its group size is greater than "
                "classic group max size.",
                group_id,
            )
            return False
        classic = self.manager.get_group(group_id)
        return classic is None or not classic.members  # the holder of the offsets has no members

    def _downgrade(
        self,
        group: ConsumerGroup,
        leaving_member_id: str,
        joining: ConsumerGroupMember | None,
        records: list[Record],
    ) -> ClassicGroup:
        """convertToClassicGroup, after the checks: the classic group is built and installed at once;
        its record goes after the consumer group's tombstones in `records`. A member that leaves is
        followed by a rebalance; a static member replacing it takes its assignment instead."""
        group_id = group.group_id
        now = wall_clock_ms()
        classic = self.manager.offsets_holder(group_id)
        remaining = [m for m in group.members.values() if m.member_id != leaving_member_id]
        if joining is not None:
            remaining.append(joining)
        for m in remaining:
            meta = m.classic_member_metadata
            assert meta is not None
            classic.add(
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=meta.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=list(meta.supported_protocols),
                )
            )
        classic.state = GroupState.STABLE
        classic.current_state_timestamp = now
        classic.generation_id = group.group_epoch
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        assignments: dict[str, bytes] = {}
        for member in classic.members.values():
            owner = (
                leaving_member_id if joining is not None and member.member_id == joining.member_id else None
            )
            target = group.target_assignment.get(owner or member.member_id, {})
            version = consumer_protocol_version(member.metadata(classic.protocol_name))
            member.assignment = encode_consumer_protocol_assignment(self._by_topic_name(target), version)
            assignments[member.member_id] = member.assignment
        records.append(
            (
                CLASSIC_GROUP_METADATA,
                {"groupId": group_id, "record": group_metadata_record(classic, assignments)},
                None,
            )
        )
        self.consumer.cancel_all(group)
        del self.manager.consumer_groups[group_id]
        for member in classic.members.values():
            self.classic.schedule_heartbeat_expiration(classic, member, member.session_timeout_ms)
        log.info(
            "[GroupId %s] Converting the consumer group (epoch %d) to a classic group with %d member(s).",
            group_id,
            group.group_epoch,
            classic.size,
        )
        if joining is None:
            self.classic.prepare_rebalance(classic, f"Downgrade group {group_id} from consumer to classic.")
        return classic

    # --- helpers ------------------------------------------------------------------------------------

    def _assignment_bytes(self, member: ConsumerGroupMember) -> bytes:
        """prepareAssignment: the member's assigned partitions in the version of its subscription."""
        classic = member.classic_member_metadata
        assert classic is not None
        version = consumer_protocol_version(classic.supported_protocols[0][1])
        return encode_consumer_protocol_assignment(self._by_topic_name(member.assigned_partitions), version)

    def _by_topic_id(self, partitions: dict[str, tuple[int, ...]]) -> dict[uuid.UUID, frozenset[int]]:
        """Partitions by topic name to partitions by topic id; topics not in the image are dropped."""
        topic_ids = self.manager.loader.image.topic_ids
        return {topic_ids[name]: frozenset(p) for name, p in partitions.items() if name in topic_ids and p}

    def _by_topic_name(self, assignment: Assignment) -> dict[str, frozenset[int]]:
        topics = self.manager.loader.image.topics_by_id
        return {topics[t].name: p for t, p in assignment.items() if t in topics and p}


def _tombstones_replacing(
    group: ConsumerGroup, leaving_member_id: str, joining_member_id: str
) -> list[Record]:
    """createGroupTombstoneRecordsWithReplacedMember: the group's tombstones, the joining member's id in
    place of the leaving one's (its records were just written under the new id). The subscription
    metadata and group epoch are tombstoned too, so that a reload finds no consumer group."""
    records = []
    for record in group.tombstones():
        key = record[1]
        if key.get("memberId") == leaving_member_id:
            key = {**key, "memberId": joining_member_id}
        records.append((record[0], key, None))
    return records
