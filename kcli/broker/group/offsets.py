"""Committed offsets on the group coordinator: Kafka's OffsetMetadataManager (commitOffset,
commitTransactionalOffset, fetchOffsets, deleteOffsets, replayEndTransactionMarker).

The offsets of every group, classic or consumer, live in the classic group's offset cache of
`GroupMetadataManager` (a consumer group's through `offsets_holder`); the checks differ: a classic
group's member and generation, a consumer group's member epoch. The group coordinator
(kcli.broker.group.coordinator) has validated the group id and this node's ownership of it first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kio.schema.errors import ErrorCode

from kcli.broker.group.classic_coordinator import ClassicGroupCoordinator
from kcli.broker.group.consumer_coordinator import ConsumerGroupCoordinator
from kcli.broker.group.group import UNKNOWN_MEMBER_ID, ClassicGroup, GroupState, OffsetAndMetadata
from kcli.broker.group.storage import GroupMetadataManager, TopicPartition
from kcli.broker.log.log import wall_clock_ms

log = logging.getLogger("kcli.broker.group")


class OffsetMetadataManager:
    """OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete for both kinds of group."""

    def __init__(
        self,
        manager: GroupMetadataManager,
        classic: ClassicGroupCoordinator,
        consumer: ConsumerGroupCoordinator,
    ) -> None:
        self.manager = manager
        self.classic = classic
        self.consumer = consumer

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
        error = self._validate_classic_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet: it must finish the rebalance.
            return dict.fromkeys(offsets, ErrorCode.rebalance_in_progress)
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # Allowed while preparing, so a consumer can commit in its revocation callback.
            member = group.get(member_id)
            self.classic.schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        return await self.manager.store_offsets(group, offsets)

    def _validate_classic_offset_commit(
        self, group: ClassicGroup, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # an admin client or a consumer that manages its own partitions
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self.classic.validate_current_member(group, member_id, group_instance_id, "offset-commit")
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
            subscribed = self.consumer.topics_of(consumer_group.members.values())
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
            error = self.classic.validate_current_member(
                group, member_id, group_instance_id, "txn-offset-commit"
            )
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
