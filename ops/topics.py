"""Topics as an operator sees them: list, describe, create, add partitions, delete.

Through the standard admin APIs (Metadata, CreateTopics, CreatePartitions, DeleteTopics and, for a
topic's configs, DescribeConfigs; DescribeTopicPartitions for the ELR when the broker offers it), so
it works against Apache Kafka as well as kcli's broker. The rules
follow Kafka's `kafka-topics.sh` (TopicCommand): `--topic` is a regular expression that must match a
whole name, except when creating; internal topics are included unless excluded; a partition is
under-replicated when its ISR is smaller than its replica set, unavailable when it has no leader
or its leader is not a live broker, under min ISR when it has no leader or an ISR smaller than the
topic's min.insync.replicas, and at min ISR when its ISR is exactly that size.
"""

from __future__ import annotations

import base64
import datetime
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import ClientError
from kcli.cluster import Cluster
from kcli.config import INTERNAL_TOPICS
from kcli.errors import KcliError
from kcli.protocol.messages import build, nested_type
from ops.configs import ConfigError, ResourceType, describe_configs

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
DESCRIBE_TOPIC_PARTITIONS = 75
PARTITION_SIZE_LIMIT = 2000
"""TopicCommand's default --partition-size-limit-per-response."""

BROKER_DEFAULT = -1
"""On the wire, partitions or replication factor -1 mean the broker's num.partitions /
default.replication.factor (CreateTopics v4+); callers say None, so a -1 from the user stays an error."""
FIRST_DEFAULTS_VERSION = 4
TIMEOUT = datetime.timedelta(seconds=30)
NO_TOPIC_ID = uuid.UUID(int=0)
MIN_INSYNC_REPLICAS = "min.insync.replicas"


Confirm = Callable[[list[str]], None]
"""Shown the topics a regex matched before they are changed; raises to stop."""


class TopicError(KcliError):
    """A topic operation that cannot be done (no such topic, bad arguments, or the cluster's refusal)."""


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    """-1 when the partition has no leader."""
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    leader_is_live: bool
    """The leader is among the brokers the metadata lists (TopicCommand's "live brokers")."""
    min_isr: int | None = None
    """The topic's min.insync.replicas (its effective value, from DescribeConfigs); None if not known."""
    elr: tuple[int, ...] | None = None
    """Eligible leader replicas (KIP-966); None when the broker has no DescribeTopicPartitions."""
    last_known_elr: tuple[int, ...] | None = None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def unavailable(self) -> bool:
        return self.leader < 0 or not self.leader_is_live

    @property
    def under_min_isr(self) -> bool:
        """TopicCommand's isUnderMinIsr: a partition without a leader counts too."""
        return self.leader < 0 or (self.min_isr is not None and len(self.isr) < self.min_isr)

    @property
    def at_min_isr(self) -> bool:
        return self.min_isr is not None and len(self.isr) == self.min_isr

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "leader": self.leader if self.leader >= 0 else None,
            "leader_epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "offline_replicas": list(self.offline_replicas),
            "elr": None if self.elr is None else list(self.elr),
            "last_known_elr": None if self.last_known_elr is None else list(self.last_known_elr),
        }


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]
    configs: dict[str, str | None] | None
    """The configs not at their default (as kafka-topics.sh shows them); None when not asked for."""

    @property
    def replication_factor(self) -> int:
        """As TopicCommand: the replica count of the first partition."""
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def topic_id_text(self) -> str | None:
        """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
        if self.topic_id is None or self.topic_id == NO_TOPIC_ID:
            return None
        return base64.urlsafe_b64encode(self.topic_id.bytes).rstrip(b"=").decode()

    def to_json(self, partitions: Iterable[PartitionDescription] | None = None) -> dict[str, Any]:
        chosen = self.partitions if partitions is None else partitions
        return {
            "topic": self.name,
            "topic_id": self.topic_id_text,
            "internal": self.is_internal,
            "partition_count": len(self.partitions),
            "replication_factor": self.replication_factor,
            "configs": self.configs,
            "partitions": [p.to_json() for p in chosen],
        }


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    """-1 when the broker does not say (CreateTopics before v5)."""
    replication_factor: int
    created: bool
    """False when the topic existed and `if_not_exists` was given (or for a dry run)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.name,
            "created": self.created,
            "partitions": self.num_partitions if self.num_partitions >= 0 else None,
            "replication_factor": self.replication_factor if self.replication_factor >= 0 else None,
        }


# --- list and describe -----------------------------------------------------------------------------


def topic_pattern(text: str) -> re.Pattern[str]:
    """Kafka's IncludeList: commas mean "or", spaces and surrounding quotes go, the match is whole-name."""
    regex = _normalised(text)
    try:
        return re.compile(regex)
    except re.error as exc:
        raise TopicError(f"{regex!r} is not a valid regular expression: {exc}.") from None


async def list_topics(
    cluster: Cluster, pattern: str | None = None, *, exclude_internal: bool = False
) -> list[str]:
    """Topic names in order, those matching `pattern` when given."""
    response = await cluster.metadata_response(None)
    return _matching(response.topics, pattern, exclude_internal)


async def describe_topics(
    cluster: Cluster,
    pattern: str | None = None,
    *,
    exclude_internal: bool = False,
    if_exists: bool = False,
    with_configs: bool = True,
) -> list[TopicDescription]:
    """Partitions (leader, replicas, ISR, the topic's min ISR) and non-default configs of each topic
    matching `pattern`; the configs are always read, as TopicCommand reads them, for the min ISR."""
    response = await cluster.metadata_response(None)
    names = _matching(response.topics, pattern, exclude_internal)
    _require_some(names, pattern, if_exists)
    live = {b.node_id for b in response.brokers}
    by_name = {t.name: t for t in response.topics}
    configs: dict[str, dict[str, str | None]] = {}
    min_isr: dict[str, int] = {}
    if names:
        try:
            described = await describe_configs(
                cluster, [(ResourceType.TOPIC, n) for n in names], include_synonyms=False, broker_order=True
            )
        except ConfigError as exc:  # deleted between the two requests, typically
            raise TopicError(str(exc)) from None
        configs = {d.name: {e.name: e.value for e in d.entries if not e.is_default} for d in described}
        for d in described:
            for e in d.entries:
                if e.name == MIN_INSYNC_REPLICAS and e.value is not None:
                    min_isr[d.name] = int(e.value)
    elr = await eligible_leader_replicas(cluster, names)
    return [
        _description(by_name[n], live, configs.get(n) if with_configs else None, min_isr.get(n), elr)
        for n in names
    ]


async def eligible_leader_replicas(
    cluster: Cluster, names: list[str]
) -> dict[tuple[str, int], tuple[Any, Any]]:
    """(ELR, last known ELR) per partition, from DescribeTopicPartitions page by page (NextCursor).

    Empty when the broker does not offer the API: Metadata has no ELR, so kafka-topics.sh prints N/A.
    """
    found: dict[tuple[str, int], tuple[Any, Any]] = {}
    client = cluster.bootstrap
    if not names or DESCRIBE_TOPIC_PARTITIONS not in client.broker_versions:
        return found
    try:
        cls = client.request_type(DESCRIBE_TOPIC_PARTITIONS)
    except ClientError:  # no version in common
        return found
    topic_cls, cursor_cls = nested_type(cls, "TopicRequest"), nested_type(cls, "Cursor")
    topics = tuple(build(topic_cls, name=n) for n in sorted(names))
    cursor = None
    while True:
        response = await client.send(
            build(cls, topics=topics, response_partition_limit=PARTITION_SIZE_LIMIT, cursor=cursor)
        )
        for topic in response.topics:
            for p in topic.partitions:  # a topic in error (deleted meanwhile) has none: N/A
                found[(topic.name, p.partition_index)] = (p.eligible_leader_replicas, p.last_known_elr)
        if response.next_cursor is None:
            return found
        cursor = build(
            cursor_cls,
            topic_name=response.next_cursor.topic_name,
            partition_index=response.next_cursor.partition_index,
        )


def _description(
    topic: Any,
    live: set[int],
    configs: dict[str, str | None] | None,
    min_isr: int | None = None,
    elr: dict[tuple[str, int], tuple[Any, Any]] | None = None,
) -> TopicDescription:
    elr = elr or {}
    partitions = tuple(
        sorted(
            (
                PartitionDescription(
                    p.partition_index,
                    p.leader_id,
                    getattr(p, "leader_epoch", -1),
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    tuple(getattr(p, "offline_replicas", ())),
                    p.leader_id in live,
                    min_isr,
                    *_elr_pair(elr.get((topic.name, p.partition_index))),
                )
                for p in topic.partitions
            ),
            key=lambda p: p.partition,
        )
    )
    return TopicDescription(
        topic.name,
        getattr(topic, "topic_id", None),
        bool(getattr(topic, "is_internal", False)),
        partitions,
        configs,
    )


def _elr_pair(pair: tuple[Any, Any] | None) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    if pair is None:
        return None, None
    return tuple(
        None if replicas is None else tuple(replicas)  # a null list stays N/A, as in TopicCommand
        for replicas in pair
    )  # type: ignore[return-value]


# --- create ----------------------------------------------------------------------------------------


async def create_topic(
    cluster: Cluster,
    name: str,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    assignment: dict[int, list[int]] | None = None,
    configs: dict[str, str] | None = None,
    if_not_exists: bool = False,
    validate_only: bool = False,
) -> CreatedTopic:
    """CreateTopics of one topic; None partitions or replication factor means the broker's default.

    As kafka-topics.sh, -1 from the user is refused like 0: only leaving the option out asks for the
    broker's default.
    """
    if assignment and (partitions is not None or replication_factor is not None):
        raise TopicError("give either a replica assignment or partitions and a replication factor, not both.")
    if partitions is not None and partitions < 1:
        raise TopicError("the number of partitions must be at least 1.")
    if replication_factor is not None and not 1 <= replication_factor <= 32767:
        raise TopicError("the replication factor must be between 1 and 32767.")
    partitions = BROKER_DEFAULT if partitions is None else partitions
    replication_factor = BROKER_DEFAULT if replication_factor is None else replication_factor
    client = cluster.bootstrap
    cls = client.request_type(CREATE_TOPICS)
    if (
        not assignment
        and cls.__version__ < FIRST_DEFAULTS_VERSION
        and BROKER_DEFAULT
        in (
            partitions,
            replication_factor,
        )
    ):
        raise TopicError(
            f"{client.address} takes CreateTopics v{cls.__version__}, which has no broker defaults: "
            "give the partitions and the replication factor."
        )
    assignment_cls = nested_type(cls, "CreatableReplicaAssignment")
    config_cls = nested_type(cls, "CreatableTopicConfig")
    topic = nested_type(cls, "CreatableTopic")(
        name=name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        assignments=tuple(
            assignment_cls(partition_index=p, broker_ids=tuple(brokers))
            for p, brokers in sorted((assignment or {}).items())
        ),
        configs=tuple(config_cls(name=k, value=v) for k, v in (configs or {}).items()),
    )
    response = await client.send(build(cls, topics=(topic,), timeout=TIMEOUT, validate_only=validate_only))
    result = response.topics[0]
    if result.error_code == ErrorCode.topic_already_exists and if_not_exists:
        return CreatedTopic(name, None, -1, -1, created=False)
    if result.error_code != ErrorCode.none:
        raise TopicError(_refusal(f"create topic {name!r}", result))
    return CreatedTopic(
        name,
        getattr(result, "topic_id", None),
        getattr(result, "num_partitions", -1),
        getattr(result, "replication_factor", -1),
        created=not validate_only,
    )


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """kafka-topics.sh's --replica-assignment: "1:2,2:3" is partition 0 on brokers 1 and 2, partition 1 on 2 and 3."""
    assignment: dict[int, list[int]] = {}
    for partition, replicas in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in replicas.split(":")]
        except ValueError:
            raise TopicError(
                f"--replica-assignment {text!r} is not broker ids joined by ':' per partition, "
                "partitions joined by ','."
            ) from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise TopicError(
                f"partition {partition} lists broker {','.join(map(str, duplicates))} more than once."
            )
        if assignment and len(brokers) != len(assignment[0]):
            raise TopicError(f"partition {partition} has a different replication factor: {replicas}.")
        assignment[partition] = brokers
    return assignment


# --- add partitions --------------------------------------------------------------------------------


async def create_partitions(
    cluster: Cluster,
    pattern: str,
    count: int,
    *,
    assignment: dict[int, list[int]] | None = None,
    if_exists: bool = False,
    confirm: Confirm | None = None,
) -> list[str]:
    """Grow each topic matching `pattern` to `count` partitions (CreatePartitions); the topics altered.

    With a replica assignment, as kafka-topics.sh: its entries from the topic's current partition count
    on are the new partitions' replicas. `confirm` sees the topics first when the regex matched names
    it does not spell out (see `needs_confirmation`).
    """
    if count < 1:
        raise TopicError("the number of partitions must be at least 1.")
    response = await cluster.metadata_response(None)
    names = _matching(response.topics, pattern, exclude_internal=False)
    _require_some(names, pattern, if_exists)
    if not names:
        return []
    internal = [n for n in names if n in INTERNAL_TOPICS]
    if internal:  # beyond kafka-topics.sh: a group's or a transaction's partition is a hash modulo the count
        raise TopicError(
            f"{_these_topics(internal)} {'is an internal topic' if len(internal) == 1 else 'are internal topics'}: "
            f"adding partitions would move its groups' or transactions' state{_matched_by(pattern, names)}."
        )
    if confirm is not None and needs_confirmation(pattern, names):
        confirm(names)
    current = {t.name: len(t.partitions) for t in response.topics}
    client = cluster.bootstrap
    cls = client.request_type(CREATE_PARTITIONS)
    assignment_cls = nested_type(cls, "CreatePartitionsAssignment")
    topic_cls = nested_type(cls, "CreatePartitionsTopic")
    topics = []
    for name in names:
        new = None
        if assignment:
            new = tuple(
                assignment_cls(broker_ids=tuple(brokers))
                for p, brokers in sorted(assignment.items())
                if p >= current[name]
            )
        topics.append(topic_cls(name=name, count=count, assignments=new))
    answer = await client.send(build(cls, topics=tuple(topics), timeout=TIMEOUT, validate_only=False))
    for result in answer.results:
        if result.error_code != ErrorCode.none:
            raise TopicError(_refusal(f"add partitions to topic {result.name!r}", result))
    return names


# --- delete ----------------------------------------------------------------------------------------


async def delete_topics(
    cluster: Cluster, pattern: str, *, if_exists: bool = False, confirm: Confirm | None = None
) -> list[str]:
    """DeleteTopics of every topic matching `pattern`; the topics deleted.

    Internal topics are refused before anything is sent: deleting __consumer_offsets or
    __transaction_state loses every group's offsets or every open transaction. `confirm` sees the
    topics first when the regex matched names it does not spell out.
    """
    response = await cluster.metadata_response(None)
    names = _matching(response.topics, pattern, exclude_internal=False)
    _require_some(names, pattern, if_exists)
    if not names:
        return []
    internal = [n for n in names if n in INTERNAL_TOPICS]
    if internal:
        raise TopicError(
            f"{_these_topics(internal)} {'is an internal topic' if len(internal) == 1 else 'are internal topics'} "
            f"and cannot be deleted{_matched_by(pattern, names)}."
        )
    if confirm is not None and needs_confirmation(pattern, names):
        confirm(names)
    client = cluster.bootstrap
    cls = client.request_type(DELETE_TOPICS)
    if cls.__version__ >= 6:
        state_cls = nested_type(cls, "DeleteTopicState")
        request = cls(topics=tuple(state_cls(name=n, topic_id=NO_TOPIC_ID) for n in names), timeout=TIMEOUT)
    else:
        request = build(cls, topic_names=tuple(names), timeout=TIMEOUT)
    answer = await client.send(request)
    for result in answer.responses:
        if result.error_code != ErrorCode.none:
            raise TopicError(_refusal(f"delete topic {result.name!r}", result))
    return names


# ---------------------------------------------------------------------------------------------------


def needs_confirmation(pattern: str, names: Iterable[str]) -> bool:
    """True when `pattern` matched a topic it does not name: a name given as one of its ','-separated
    parts, as written or with its regex metacharacters escaped ('orders\\.eu'), needs no asking."""
    given = set(_normalised(pattern).split("|"))
    return any(n not in given and re.escape(n) not in given for n in names)


def _normalised(text: str) -> str:
    """The regex kafka-topics.sh builds from --topic (Kafka's IncludeList)."""
    return re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", text.strip().replace(",", "|").replace(" ", "")))


def _these_topics(names: list[str]) -> str:
    return ("topic " if len(names) == 1 else "topics ") + ", ".join(names)


def _matched_by(pattern: str, names: list[str]) -> str:
    return f" (--topic {pattern!r} matches {', '.join(names)})" if needs_confirmation(pattern, names) else ""


def _matching(topics: Iterable[Any], pattern: str | None, exclude_internal: bool) -> list[str]:
    regex = topic_pattern(pattern) if pattern is not None else None
    return sorted(
        t.name
        for t in topics
        if t.error_code == ErrorCode.none
        and not (exclude_internal and t.is_internal)
        and (regex is None or regex.fullmatch(t.name))
    )


def _require_some(names: list[str], pattern: str | None, if_exists: bool) -> None:
    """TopicCommand.ensureTopicExists: a --topic that matches nothing is an error unless --if-exists."""
    if pattern == "" and not if_exists:  # Kafka's tool skips its check for '' and acts on nothing
        raise TopicError("--topic is empty: give a topic name or a regular expression.")
    if pattern and not names and not if_exists:
        raise TopicError(f"topic {pattern!r} does not exist.")


def _refusal(what: str, result: Any) -> str:
    """One sentence with the broker's message, or Kafka's error name when it sent none."""
    code = ErrorCode(result.error_code)
    if code == ErrorCode.unknown_topic_or_partition:
        return f"topic {result.name!r} does not exist."
    if code == ErrorCode.topic_already_exists:
        return f"topic {result.name!r} already exists."
    reason = getattr(result, "error_message", None) or code.name.upper()
    return f"cannot {what}: {reason.rstrip('.')}."
