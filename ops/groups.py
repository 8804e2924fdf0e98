"""Consumer groups as an operator sees them: listing, members and lag, offset resets, deletion.

Everything goes through the standard admin APIs (FindCoordinator, ListGroups, DescribeGroups,
OffsetFetch, ListOffsets, Fetch, OffsetCommit, DeleteGroups), so it works against Apache Kafka as
well as kcli's broker. The rules follow Kafka's `kafka-consumer-groups.sh` (ConsumerGroupCommand):
lag is the log end offset (high watermark) minus the committed offset; partitions are the union of
committed offsets and members' assignments; a reset applies only to an Empty or Dead group, and
requested offsets outside [log start, log end] are clamped to the nearer end.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from formats.errors import FormatError
from formats.internal import consumer_protocol_topics
from formats.segment import walk
from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.files import read_user_text
from kcli.protocol.messages import build, nested_type

LIST_GROUPS = 16
DESCRIBE_GROUPS = 15
OFFSET_FETCH = 9
OFFSET_COMMIT = 8
LIST_OFFSETS = 2
FETCH = 1
DELETE_GROUPS = 42
CONSUMER_GROUP_DESCRIBE = 69

LATEST = -1
EARLIEST = -2
LAG_SECONDS_FETCH_BYTES = 1 << 20

TopicPartition = tuple[str, int]


_T = TypeVar("_T")


class GroupError(KcliError):
    """A group operation the cluster refused (the sentence names the group and Kafka's error)."""


class _CoordinatorNotReady(GroupError):
    """The coordinator is loading, moved or not there yet: Kafka's admin client asks again."""


COORDINATOR_RETRY_SECONDS = 60.0
"""How long a group request is retried while its coordinator is not ready (default.api.timeout.ms)."""
RETRY_BACKOFF_SECONDS = 0.1
"""Pause between those retries (retry.backoff.ms)."""


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None
    coordinator: int

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group_id,
            "protocol_type": self.protocol_type,
            "state": self.state,
            "coordinator": self.coordinator,
        }


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, tuple[int, ...]]
    member_epoch: int | None = None
    """A consumer group's member (KIP-848): its epoch, the assignment the coordinator computed for it,
    and whether it speaks the consumer protocol (False: a classic member; None: unknown, as for a
    ConsumerGroupDescribe v0 answer). A classic group's members have none of these."""
    target_assignment: dict[str, tuple[int, ...]] | None = None
    upgraded: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "host": self.client_host,
            "assignment": _assignment_json(self.assignment),
            "member_epoch": self.member_epoch,
            "target_assignment": None
            if self.target_assignment is None
            else _assignment_json(self.target_assignment),
            "upgraded": self.upgraded,
        }


def _assignment_json(assignment: dict[str, tuple[int, ...]]) -> dict[str, list[int]]:
    return {topic: list(parts) for topic, parts in sorted(assignment.items())}


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end_offset: int | None
    member: Member | None
    lag_seconds: float | None = None
    """Age of the first unconsumed record (now minus its timestamp); 0 when caught up."""

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.committed, 0)

    def to_json(self) -> dict[str, Any]:
        m = self.member
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.committed,
            "log_end_offset": self.log_end_offset,
            "lag": self.lag,
            "lag_seconds": self.lag_seconds,
            "member_id": m.member_id if m else None,
            "host": m.client_host if m else None,
            "client_id": m.client_id if m else None,
        }


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: tuple[Member, ...]
    partitions: tuple[PartitionLag, ...]
    coordinator_address: str = ""
    """"host:port" of the coordinator, as kafka-consumer-groups.sh --state shows it."""
    group_epoch: int | None = None
    """A consumer group's epoch and the epoch of its target assignment (None for classic groups)."""
    target_assignment_epoch: int | None = None

    @property
    def exists(self) -> bool:
        return self.state != "Dead"

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def max_lag_seconds(self) -> float | None:
        ages = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None]
        return max(ages) if ages else None

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group_id,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "coordinator": self.coordinator,
            "coordinator_address": self.coordinator_address,
            "group_epoch": self.group_epoch,
            "target_assignment_epoch": self.target_assignment_epoch,
            "total_lag": self.total_lag,
            "max_lag_seconds": self.max_lag_seconds,
            "members": [m.to_json() for m in self.members],
            "partitions": [p.to_json() for p in self.partitions],
        }


@dataclass(frozen=True, slots=True)
class OffsetReset:
    topic: str
    partition: int
    current: int | None
    new: int
    requested: int | None = None
    """The offset asked for when it lay outside the log and `new` is the nearer end (else None)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.current,
            "new_offset": self.new,
            "requested_offset": self.requested,
        }

    @property
    def clamp_warning(self) -> str | None:
        """Kafka's checkOffsetsRange warning, when the offset asked for was moved into the log."""
        if self.requested is None:
            return None
        where = "higher than latest" if self.requested > self.new else "lower than earliest"
        return (
            f"New offset ({self.requested}) is {where} offset for topic partition {self.topic}-{self.partition}. "
            f"Value will be set to {self.new}"
        )


@dataclass(frozen=True)
class ResetSpec:
    """One of Kafka's reset scenarios; exactly one field is set."""

    to_earliest: bool = False
    to_latest: bool = False
    to_current: bool = False
    to_offset: int | None = None
    shift_by: int | None = None
    to_datetime: int | None = None
    """Milliseconds since the epoch (parsed from the command line by `parse_datetime`)."""
    by_duration: float | None = None
    """Seconds back from now (parsed by `parse_duration`)."""
    from_file: dict[TopicPartition, int] | None = field(default=None)


# --- list ------------------------------------------------------------------------------------------


GROUP_STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
)
"""Kafka's ConsumerGroupState names but Unknown, which kafka-consumer-groups.sh refuses too."""


def parse_states(values: Iterable[str]) -> tuple[str, ...]:
    """--state values as kafka-consumer-groups.sh reads them: ','-separated, any case, each a known
    state; an unknown one is an error, not a filter that silently matches nothing."""
    by_upper = {s.upper(): s for s in GROUP_STATES}
    given = [part.strip() for value in values for part in value.split(",")]
    unknown = [g for g in given if g.upper() not in by_upper]
    if unknown:
        raise GroupError(
            f"invalid state list '{','.join(given)}': {', '.join(map(repr, unknown))} "
            f"{'is not a group state' if len(unknown) == 1 else 'are not group states'}; "
            f"valid states are {', '.join(GROUP_STATES)}."
        )
    return tuple(dict.fromkeys(by_upper[g.upper()] for g in given))


async def list_groups(cluster: Cluster, states: Iterable[str] = ()) -> list[GroupListing]:
    """Every group of every broker (each broker answers for the groups it coordinates)."""
    wanted = parse_states(states)
    listings: list[GroupListing] = []
    for node, client in await cluster.all_nodes():
        cls = client.request_type(LIST_GROUPS)
        response = await client.send(build(cls, states_filter=wanted, types_filter=()))
        _check(response.error_code, "list the groups of broker " + client.address)
        for g in response.groups:
            state = getattr(g, "group_state", None)
            if wanted and cls.__version__ < 4 and state not in wanted:
                continue
            listings.append(GroupListing(g.group_id, g.protocol_type, state, node))
    return sorted(listings, key=lambda g: g.group_id)


# --- describe --------------------------------------------------------------------------------------


async def describe_groups(
    cluster: Cluster, group_ids: Iterable[str], *, lag_seconds: bool = True, now_ms: int | None = None
) -> list[GroupDescription]:
    """Members, committed offsets and lag of each group (a group that does not exist is state Dead)."""
    return [await describe_group(cluster, g, lag_seconds=lag_seconds, now_ms=now_ms) for g in group_ids]


async def describe_group(
    cluster: Cluster, group_id: str, *, lag_seconds: bool = True, now_ms: int | None = None
) -> GroupDescription:
    async def describe(coordinator: Any) -> Any:
        cls = coordinator.request_type(DESCRIBE_GROUPS)
        response = await coordinator.send(build(cls, groups=(group_id,), include_authorized_operations=False))
        described = response.groups[0]
        if described.error_code != ErrorCode.group_id_not_found:  # v6+; older versions answer state Dead
            _check(described.error_code, f"describe group {group_id!r}")
        if described.error_code == ErrorCode.group_id_not_found or described.group_state == "Dead":
            return await _describe_consumer_group(coordinator, group_id) or described
        return described

    node_id, described = await _at_coordinator(cluster, group_id, describe)
    if described.error_code == ErrorCode.group_id_not_found:
        return GroupDescription(group_id, "Dead", "", "", node_id, (), (), cluster.address(node_id) or "")
    epochs: tuple[int | None, int | None] = (None, None)
    if hasattr(described, "group_epoch"):  # a consumer group (KIP-848), from ConsumerGroupDescribe
        members = tuple(
            Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                _topic_partitions(m.assignment),
                m.member_epoch,
                _topic_partitions(m.target_assignment),
                {CONSUMER_MEMBER_TYPE: True, CLASSIC_MEMBER_TYPE: False}.get(getattr(m, "member_type", -1)),
            )
            for m in described.members
        )
        protocol_type, protocol_data = "consumer", described.assignor_name
        epochs = (described.group_epoch, described.assignment_epoch)
    else:
        members = tuple(
            Member(
                m.member_id,
                getattr(m, "group_instance_id", None),
                m.client_id,
                m.client_host,
                (consumer_protocol_topics(m.member_assignment, subscription=False) or {})
                if described.protocol_type == "consumer"
                else {},
            )
            for m in described.members
        )
        protocol_type, protocol_data = described.protocol_type, described.protocol_data
    committed = await fetch_committed(cluster, group_id)
    owner = {(t, p): m for m in members for t, parts in m.assignment.items() for p in parts}
    partitions = sorted(set(committed) | set(owner))
    ends = await list_offsets(cluster, partitions, LATEST)
    ages: dict[TopicPartition, float] = {}
    if lag_seconds:
        behind = {
            tp: committed[tp] for tp in partitions if tp in committed and ends.get(tp, -1) > committed[tp]
        }
        ages = await record_ages(cluster, behind, now_ms if now_ms is not None else _now_ms())
    rows = tuple(
        PartitionLag(
            t,
            p,
            committed.get((t, p)),
            ends.get((t, p)),
            owner.get((t, p)),
            ages.get((t, p), 0.0 if (t, p) in committed and (t, p) in ends else None)
            if lag_seconds
            else None,
        )
        for t, p in partitions
    )
    return GroupDescription(
        group_id,
        described.group_state,
        protocol_type,
        protocol_data,
        node_id,
        members,
        rows,
        cluster.address(node_id) or "",
        *epochs,
    )


def _topic_partitions(assignment: Any) -> dict[str, tuple[int, ...]]:
    """A ConsumerGroupDescribe Assignment as topic -> sorted partitions."""
    return {tp.topic_name: tuple(sorted(tp.partitions)) for tp in assignment.topic_partitions}


CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1
"""ConsumerGroupDescribe v1's MemberType (KIP-1099): Kafka's Admin reports it as MemberDescription.upgraded."""


async def _describe_consumer_group(coordinator: Any, group_id: str) -> Any | None:
    """ConsumerGroupDescribe of a group DescribeGroups does not know (as Kafka's Admin asks it first):
    the described group, or None where the broker has no consumer groups (group.version 0) or none
    by that id."""
    if CONSUMER_GROUP_DESCRIBE not in coordinator.broker_versions:
        return None
    cls = coordinator.request_type(CONSUMER_GROUP_DESCRIBE)
    response = await coordinator.send(build(cls, group_ids=(group_id,), include_authorized_operations=False))
    described = response.groups[0]
    return described if described.error_code == ErrorCode.none else None


async def fetch_committed(cluster: Cluster, group_id: str) -> dict[TopicPartition, int]:
    """The group's committed offsets (OffsetFetch of every partition; -1 means none)."""

    async def fetch(coordinator: Any) -> Any:
        cls = coordinator.request_type(OFFSET_FETCH, highest=9)  # v10 names topics by id
        if cls.__version__ >= 8:
            group_cls = nested_type(cls, "OffsetFetchRequestGroup")
            group = build(group_cls, group_id=group_id, member_id=None, member_epoch=-1, topics=None)
            response = await coordinator.send(cls(groups=(group,), require_stable=True))
            answer: Any = response.groups[0]
        else:
            answer = await coordinator.send(build(cls, group_id=group_id, topics=None, require_stable=True))
        _check(getattr(answer, "error_code", ErrorCode.none), f"fetch the offsets of group {group_id!r}")
        return answer

    _, answer = await _at_coordinator(cluster, group_id, fetch)
    committed: dict[TopicPartition, int] = {}
    for topic in answer.topics:
        for p in topic.partitions:
            if p.error_code == ErrorCode.none and p.committed_offset >= 0:
                committed[(topic.name, p.partition_index)] = p.committed_offset
    return committed


# --- offsets of partitions -------------------------------------------------------------------------


async def list_offsets(
    cluster: Cluster, partitions: Iterable[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    """ListOffsets at each partition's leader; partitions that error (or have no offset) are left out."""
    wanted = list(partitions)
    if not wanted:
        return {}
    by_leader = await _by_leader(cluster, wanted)
    answers = await asyncio.gather(
        *(_list_offsets_at(cluster, node, tps, timestamp) for node, tps in by_leader.items())
    )
    return {tp: offset for answer in answers for tp, offset in answer.items()}


async def _list_offsets_at(
    cluster: Cluster, node: int, partitions: list[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    client = await cluster.node(node)
    cls = client.request_type(LIST_OFFSETS)
    topic_cls = nested_type(cls, "ListOffsetsTopic")
    partition_cls = nested_type(cls, "ListOffsetsPartition")
    topics = tuple(
        topic_cls(
            name=topic,
            partitions=tuple(
                build(
                    partition_cls,
                    partition_index=p,
                    current_leader_epoch=-1,
                    timestamp=timestamp,
                    max_num_offsets=1,
                )
                for p in parts
            ),
        )
        for topic, parts in _group_by_topic(partitions).items()
    )
    response = await client.send(
        build(cls, replica_id=-1, isolation_level=0, topics=topics, timeout=datetime.timedelta(seconds=30))
    )
    found: dict[TopicPartition, int] = {}
    for topic in response.topics:
        for p in topic.partitions:
            offset = p.offset if hasattr(p, "offset") else (p.old_style_offsets or (-1,))[0]
            if p.error_code == ErrorCode.none and offset >= 0:
                found[(topic.name, p.partition_index)] = offset
    return found


async def record_ages(
    cluster: Cluster, positions: dict[TopicPartition, int], now_ms: int
) -> dict[TopicPartition, float]:
    """Seconds since the timestamp of the record at each position (the first one a group has not consumed)."""
    if not positions:
        return {}
    by_leader = await _by_leader(cluster, list(positions))
    answers = await asyncio.gather(
        *(
            _record_timestamps_at(cluster, node, {tp: positions[tp] for tp in tps})
            for node, tps in by_leader.items()
        )
    )
    return {tp: max(now_ms - ts, 0) / 1000 for answer in answers for tp, ts in answer.items()}


async def _record_timestamps_at(
    cluster: Cluster, node: int, positions: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    client = await cluster.node(node)
    cls = client.request_type(FETCH, highest=12)  # v13 names topics by id
    topic_cls = nested_type(cls, "FetchTopic")
    partition_cls = nested_type(cls, "FetchPartition")
    topics = tuple(
        topic_cls(
            topic=topic,
            partitions=tuple(
                build(
                    partition_cls,
                    partition=p,
                    current_leader_epoch=-1,
                    fetch_offset=positions[(topic, p)],
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=LAG_SECONDS_FETCH_BYTES,
                )
                for p in parts
            ),
        )
        for topic, parts in _group_by_topic(positions).items()
    )
    request = build(
        cls,
        cluster_id=None,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=LAG_SECONDS_FETCH_BYTES * 4,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )
    response = await client.send(request)
    found: dict[TopicPartition, int] = {}
    for topic in response.responses:
        for p in topic.partitions:
            if p.error_code != ErrorCode.none or not p.records:
                continue
            timestamp = _first_timestamp_from(p.records, positions[(topic.topic, p.partition_index)])
            if timestamp is not None:
                found[(topic.topic, p.partition_index)] = timestamp
    return found


def _first_timestamp_from(records: bytes, offset: int) -> int | None:
    """The timestamp of the first data record at or after `offset` in fetched batches."""
    try:
        for batch in walk(records, check_crc=False).batches:
            if batch.next_offset <= offset or getattr(batch, "is_control", False):
                continue
            for record in batch.records(records):
                if record.offset >= offset and record.timestamp >= 0:
                    return record.timestamp
    except FormatError:
        return None
    return None


# --- reset -----------------------------------------------------------------------------------------


async def reset_offsets(
    cluster: Cluster,
    group_id: str,
    spec: ResetSpec,
    scope: list[TopicPartition | str] | None,
    *,
    execute: bool = False,
) -> list[OffsetReset]:
    """Plan the new offsets of an inactive group and, with `execute`, commit them.

    Kafka's tool refuses a group with members even for a dry run; so does this.
    """
    await require_inactive(cluster, group_id)
    plan = await plan_reset(cluster, group_id, spec, scope)
    if execute and plan:
        await commit_offsets(cluster, group_id, plan)
    return plan


async def plan_reset(
    cluster: Cluster, group_id: str, spec: ResetSpec, scope: list[TopicPartition | str] | None
) -> list[OffsetReset]:
    """The new offset of every partition in scope (None: every partition with a committed offset)."""
    committed = await fetch_committed(cluster, group_id)
    if spec.from_file is not None and scope is None:
        # the file's partitions, each checked as --topic T:P is: a missing one is named, not "no offset"
        partitions = await _scope_partitions(cluster, committed, sorted(spec.from_file))
    else:
        partitions = await _scope_partitions(cluster, committed, scope)
    if not partitions:
        return []
    requested: dict[TopicPartition, int]
    if spec.to_earliest:
        requested = await _required_offsets(cluster, partitions, EARLIEST, "starting")
    elif spec.to_latest:
        requested = await _required_offsets(cluster, partitions, LATEST, "ending")
    elif spec.to_current:
        missing = [tp for tp in partitions if tp not in committed]
        requested = {tp: committed[tp] for tp in partitions if tp in committed}
        requested |= await _required_offsets(cluster, missing, LATEST, "ending")
    elif spec.to_datetime is not None or spec.by_duration is not None:
        when = spec.to_datetime if spec.to_datetime is not None else _now_ms() - int(spec.by_duration * 1000)  # type: ignore[operator]
        requested = await list_offsets(cluster, partitions, when)
        empty = [tp for tp in partitions if tp not in requested]  # nothing at or after the time: log end
        requested |= await _required_offsets(cluster, empty, LATEST, "ending")
    else:
        if spec.to_offset is not None:
            wanted = {tp: spec.to_offset for tp in partitions}
        elif spec.shift_by is not None:
            for tp in partitions:
                if tp not in committed:
                    raise GroupError(
                        f"cannot shift the offset of {tp[0]}-{tp[1]}: group {group_id!r} has no committed offset there."
                    )
            wanted = {tp: committed[tp] + spec.shift_by for tp in partitions}
        elif spec.from_file is not None:
            wanted = {tp: spec.from_file[tp] for tp in partitions if tp in spec.from_file}
        else:
            raise GroupError(
                "give one reset scenario: --to-earliest, --to-latest, --to-current, "
                "--to-offset, --shift-by, --to-datetime, --by-duration or --from-file."
            )
        requested = await _clamp(cluster, wanted)
        return [
            OffsetReset(t, p, committed.get((t, p)), new, None if new == wanted[(t, p)] else wanted[(t, p)])
            for (t, p), new in sorted(requested.items())
        ]
    return [OffsetReset(t, p, committed.get((t, p)), requested[(t, p)]) for t, p in sorted(requested)]


async def commit_offsets(cluster: Cluster, group_id: str, plan: list[OffsetReset]) -> None:
    """Commit the plan's offsets as the admin client does (generation -1, no member: only an empty group accepts)."""
    await _at_coordinator(cluster, group_id, lambda coordinator: _commit_at(coordinator, group_id, plan))


async def _commit_at(coordinator: Any, group_id: str, plan: list[OffsetReset]) -> None:
    cls = coordinator.request_type(OFFSET_COMMIT, highest=9)  # v10 names topics by id
    topic_cls = nested_type(cls, "OffsetCommitRequestTopic")
    partition_cls = nested_type(cls, "OffsetCommitRequestPartition")
    by_topic: dict[str, list[OffsetReset]] = defaultdict(list)
    for reset in plan:
        by_topic[reset.topic].append(reset)
    topics = tuple(
        topic_cls(
            name=topic,
            partitions=tuple(
                build(
                    partition_cls,
                    partition_index=r.partition,
                    committed_offset=r.new,
                    committed_leader_epoch=-1,
                    commit_timestamp=-1,
                    committed_metadata="",
                )
                for r in resets
            ),
        )
        for topic, resets in by_topic.items()
    )
    request = build(
        cls,
        group_id=group_id,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=topics,
    )
    response = await coordinator.send(request)
    for topic in response.topics:
        for p in topic.partitions:
            _check(
                p.error_code,
                f"commit the new offset of {topic.name}-{p.partition_index} for group {group_id!r}",
            )


async def require_inactive(cluster: Cluster, group_id: str) -> None:
    """Kafka's rule: offsets are reset only while the group is Empty or Dead."""
    description = await describe_group(cluster, group_id, lag_seconds=False)
    if description.state not in ("Empty", "Dead"):
        raise GroupError(
            f"Assignments can only be reset if the group '{group_id}' is inactive, "
            f"but the current state is {description.state}."
        )


async def _scope_partitions(
    cluster: Cluster, committed: dict[TopicPartition, int], scope: list[TopicPartition | str] | None
) -> list[TopicPartition]:
    if scope is None:
        return sorted(committed)
    topics = sorted({s if isinstance(s, str) else s[0] for s in scope})
    metadata = await cluster.metadata(topics)
    partitions: list[TopicPartition] = []
    for item in scope:
        topic = item if isinstance(item, str) else item[0]
        if topic in metadata.errors or not metadata.partitions(topic):
            raise GroupError(f"topic {topic!r} does not exist.")
        if isinstance(item, str):
            partitions.extend((topic, p) for p in metadata.partitions(topic))
        elif item[1] not in metadata.partitions(topic):
            raise GroupError(f"topic {topic!r} has no partition {item[1]}.")
        else:
            partitions.append(item)
    return sorted(set(partitions))


async def _required_offsets(
    cluster: Cluster, partitions: list[TopicPartition], timestamp: int, what: str
) -> dict[TopicPartition, int]:
    found = await list_offsets(cluster, partitions, timestamp)
    for topic, partition in partitions:
        if (topic, partition) not in found:
            raise GroupError(f"cannot get the {what} offset of {topic}-{partition}.")
    return found


async def _clamp(cluster: Cluster, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """checkOffsetsRange: above the log end -> log end; below the log start -> log start."""
    partitions = list(wanted)
    starts = await _required_offsets(cluster, partitions, EARLIEST, "starting")
    ends = await _required_offsets(cluster, partitions, LATEST, "ending")
    return {tp: min(max(offset, starts[tp]), ends[tp]) for tp, offset in wanted.items()}


# --- delete ----------------------------------------------------------------------------------------


async def delete_groups(cluster: Cluster, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
    """DeleteGroups at each group's coordinator; the error per group (none = deleted)."""
    results: dict[str, ErrorCode] = {}
    for group_id in group_ids:

        async def delete(coordinator: Any, group_id: str = group_id) -> Any:
            cls = coordinator.request_type(DELETE_GROUPS)
            response = await coordinator.send(build(cls, groups_names=(group_id,)))
            for result in response.results:
                if result.error_code in _COORDINATOR_NOT_READY:
                    _check(result.error_code, f"delete group {group_id!r}")
            return response

        _, response = await _at_coordinator(cluster, group_id, delete)
        for result in response.results:
            results[result.group_id] = result.error_code
    return results


# --- parsing of reset arguments --------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_ISO_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds, from Kafka's ISO-8601 form (PT1H30M, P1DT2H) or the short form (1h30m, 90s, 2d)."""
    iso = _ISO_DURATION.fullmatch(text.strip())
    if iso and any(iso.groups()):
        days, hours, minutes, seconds = (float(g) if g else 0.0 for g in iso.groups())
        return days * 86400 + hours * 3600 + minutes * 60 + seconds
    parts = _DURATION_PART.findall(text.strip().lower())
    if parts and "".join(n + u for n, u in parts) == text.strip().lower():
        unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}
        return sum(float(n) * unit[u] for n, u in parts)
    raise GroupError(f"{text!r} is not a duration (e.g. PT1H30M or 1h30m).")


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 date-time; no zone means local time, as Kafka's tool."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise GroupError(
            f"{text!r} is not a date-time (e.g. 2024-05-01T12:00:00 or 2024-05-01T12:00:00Z)."
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def parse_scope(topics: list[str]) -> list[TopicPartition | str]:
    """`--topic orders` (every partition) or `--topic orders:0,2` (those partitions)."""
    scope: list[TopicPartition | str] = []
    for item in topics:
        name, sep, parts = item.rpartition(":") if ":" in item else (item, "", "")
        if not sep:
            scope.append(item)
            continue
        try:
            scope.extend((name, int(p)) for p in parts.split(","))
        except ValueError:
            raise GroupError(f"{item!r} is not TOPIC or TOPIC:PARTITION[,PARTITION...].") from None
    return scope


def read_reset_file(path: Path, group_id: str) -> dict[TopicPartition, int]:
    """Kafka's CSV export: `topic,partition,offset` lines, or `group,topic,partition,offset` for several groups."""
    plan: dict[TopicPartition, int] = {}
    for number, line in enumerate(read_user_text(path).splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) == 3:
                plan[(fields[0], int(fields[1]))] = int(fields[2])
            elif len(fields) == 4 and fields[0] == group_id:
                plan[(fields[1], int(fields[2]))] = int(fields[3])
            elif len(fields) != 4:
                raise ValueError
        except ValueError:
            raise GroupError(f"{path}:{number}: expected topic,partition,offset, not {line!r}.") from None
    return plan


# ---------------------------------------------------------------------------------------------------


def _check(error: ErrorCode, what: str) -> None:
    if error != ErrorCode.none:
        kind = _CoordinatorNotReady if error in _COORDINATOR_NOT_READY else GroupError
        raise kind(f"cannot {what}: {error.name.upper()}.")


_COORDINATOR_NOT_READY = frozenset(
    {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator}
)


async def _at_coordinator(
    cluster: Cluster, group_id: str, request: Callable[[Any], Awaitable[_T]]
) -> tuple[int, _T]:
    """(coordinator's node id, what `request` returns), sent to the group's coordinator and sent again,
    after looking the coordinator up anew, while it answers that it is loading, moving or not there,
    as Kafka's admin client does (so a tool run just after a broker restart waits for the load)."""
    deadline = time.monotonic() + COORDINATOR_RETRY_SECONDS
    while True:
        node_id, coordinator = await cluster.coordinator(group_id)
        try:
            return node_id, await request(coordinator)
        except _CoordinatorNotReady:
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(RETRY_BACKOFF_SECONDS)


async def _by_leader(cluster: Cluster, partitions: list[TopicPartition]) -> dict[int, list[TopicPartition]]:
    """Leaders' partitions; leaderless ones are left out (their offsets show as unknown, as Kafka's tool)."""
    by_leader = await cluster.by_leader(partitions)
    by_leader.pop(-1, None)
    return by_leader


def _group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        topics[topic].append(partition)
    return topics


def _now_ms() -> int:
    return int(time.time() * 1000)
