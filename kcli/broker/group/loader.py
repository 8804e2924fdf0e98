"""Replaying a __consumer_offsets partition into groups and offsets (GroupMetadataManager's load loop).

`PartitionReplay` is fed whole batches in log order and keeps what Kafka keeps while loading: the
latest value per offset key and per group key, tombstones removing them, transactional offsets parked
per producer until that producer's COMMIT marker (ABORT drops them). `groups()` then builds the
ClassicGroups the coordinator takes over: a group with members is Stable, one without is Empty, and a
group known only from its offsets is an Empty commit-only group. KIP-848 consumer groups (record
types 3-8 and 16) are rebuilt record by record (`consumer_group.replay_record`) into `consumer_groups`; their
offsets are kept like any group's. Reading the log is the caller's job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from formats.errors import FormatError
from formats.internal import (
    ConsumerGroupRecordKey,
    ConsumerGroupRecordValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownOffsetsKey,
    decode_offsets_key,
    decode_offsets_value,
)
from formats.records import ControlType, RecordBatch, control_type
from kcli.broker.group.consumer_group import ConsumerGroup, replay_record
from kcli.broker.group.group import (
    ClassicGroup,
    CommitRecord,
    GroupState,
    Member,
    OffsetAndMetadata,
)

log = logging.getLogger("kcli.broker.group")

GroupTopicPartition = tuple[str, str, int]


@dataclass
class PartitionReplay:
    """The state of one __consumer_offsets partition, folded from its batches."""

    name: str
    offsets: dict[GroupTopicPartition, CommitRecord] = field(default_factory=dict)
    pending: dict[int, dict[GroupTopicPartition, CommitRecord]] = field(default_factory=dict)
    group_values: dict[str, GroupMetadataValue] = field(default_factory=dict)
    removed_groups: set[str] = field(default_factory=set)
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    skipped_records: int = 0

    def replay(self, buf: memoryview, batch: RecordBatch) -> None:
        """Fold one batch (a v2 batch from the log; `buf` is what its position indexes)."""
        if batch.is_control:
            records = batch.records(buf)
            if records:
                if control_type(records[0].key) is ControlType.COMMIT:
                    for key, record in self.pending.get(batch.producer_id, {}).items():
                        current = self.offsets.get(key)
                        if current is None or current.older_than(record):
                            self.offsets[key] = record
                self.pending.pop(batch.producer_id, None)
            return
        transactional = batch.is_transactional
        for record in batch.records(buf):
            if record.key is None:
                self.skipped_records += 1
                continue
            try:
                key = decode_offsets_key(record.key)
                value = decode_offsets_value(key, record.value)
            except FormatError as exc:
                log.warning(
                    "skipping an unreadable record at offset %d of %s: %s", record.offset, self.name, exc
                )
                self.skipped_records += 1
                continue
            if isinstance(key, OffsetCommitKey):
                gtp = (key.group, key.topic, key.partition)
                target = self.pending.setdefault(batch.producer_id, {}) if transactional else self.offsets
                if value is None:
                    target.pop(gtp, None)
                else:
                    assert isinstance(value, OffsetCommitValue)
                    target[gtp] = CommitRecord(batch.base_offset, _offset_and_metadata(value))
            elif isinstance(key, GroupMetadataKey):
                if value is None:
                    self.group_values.pop(key.group, None)
                    self.removed_groups.add(key.group)
                else:
                    assert isinstance(value, GroupMetadataValue)
                    self.removed_groups.discard(key.group)
                    self.group_values[key.group] = value
            elif isinstance(key, UnknownOffsetsKey):
                log.warning(
                    "Unknown message key with version %d while loading offsets and group metadata from %s. "
                    "Ignoring it. It could be a left over from an aborted upgrade.",
                    key.record_type,
                    self.name,
                )
            elif isinstance(key, ConsumerGroupRecordKey):
                data = value.data if isinstance(value, ConsumerGroupRecordValue) else None
                replay_record(self.consumer_groups, key.record_type, key.data, data)

    def groups(self, now_ms: int) -> list[ClassicGroup]:
        """The groups this partition holds, offsets and pending transactional offsets attached."""
        groups: dict[str, ClassicGroup] = {}
        for group_id, value in self.group_values.items():
            groups[group_id] = group_from_record(group_id, value, now_ms)
        for (group_id, topic, partition), record in self.offsets.items():
            group = groups.get(group_id)
            if group is None:
                group = groups[group_id] = ClassicGroup(group_id, GroupState.EMPTY, now_ms)
            group.offsets[(topic, partition)] = record
        for producer_id, offsets in self.pending.items():
            for (group_id, topic, partition), record in offsets.items():
                group = groups.get(group_id)
                if group is None:
                    group = groups[group_id] = ClassicGroup(group_id, GroupState.EMPTY, now_ms)
                group.pending_txn_offset_commits.setdefault(producer_id, {})[(topic, partition)] = record
        return list(groups.values())


def group_from_record(group_id: str, value: GroupMetadataValue, now_ms: int) -> ClassicGroup:
    """GroupMetadata.loadGroup: Stable with the stored members, or Empty without any."""
    state = GroupState.STABLE if value.members else GroupState.EMPTY
    group = ClassicGroup(group_id, state, now_ms)
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    group.current_state_timestamp = (
        value.current_state_timestamp if value.current_state_timestamp >= 0 else None
    )
    for stored in value.members:
        protocols = [(value.protocol or "", stored.subscription)]
        member = Member(
            member_id=stored.member_id,
            group_instance_id=stored.group_instance_id,
            client_id=stored.client_id,
            client_host=stored.client_host,
            rebalance_timeout_ms=stored.rebalance_timeout
            if stored.rebalance_timeout >= 0
            else stored.session_timeout,
            session_timeout_ms=stored.session_timeout,
            protocol_type=value.protocol_type,
            protocols=protocols,
            assignment=stored.assignment,
        )
        group.add(member)
    group.leader_id = value.leader if value.leader in group.members else group.leader_id
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


def _offset_and_metadata(value: OffsetCommitValue) -> OffsetAndMetadata:
    return OffsetAndMetadata(
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp,
        expire_timestamp=value.expire_timestamp,
    )
