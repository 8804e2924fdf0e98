"""The JSON files of kafka-reassign-partitions.sh: the topics-to-move file and the reassignment file.

A reassignment file is `{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..],
"log_dirs":[..]}]}`; `log_dirs` is optional and "any" means no particular log dir. Parsing keeps the
entries in file order and does not deduplicate, so that the checks Kafka's ReassignPartitionsCommand
makes before executing (no empty list, no partition twice, no broker twice in one replica list) can
be made and told in the same words. Output is Kafka's compact JSON, partitions sorted by topic then
partition, log dirs "any" unless a replica has one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from kcli.errors import KcliError

ANY_LOG_DIR = "any"
EARLIEST_VERSION = 1
"""The only version of both files; a file without "version" is version 1."""


class ReassignError(KcliError):
    """A reassignment that cannot be planned, started, verified or cancelled, in one sentence."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        """Kafka's TopicPartition.toString: "foo-0"."""
        return f"{self.topic}-{self.partition}"


class TopicPartitionReplica(NamedTuple):
    topic: str
    partition: int
    broker_id: int

    def __str__(self) -> str:
        """Kafka's TopicPartitionReplica.toString: "foo-0-1" (broker last)."""
        return f"{self.topic}-{self.partition}-{self.broker_id}"


def replica_order(r: TopicPartitionReplica) -> tuple[int, str, int]:
    """Kafka's compareTopicPartitionReplicas: broker first, then topic and partition."""
    return (r.broker_id, r.topic, r.partition)


@dataclass(frozen=True, slots=True)
class ReassignmentData:
    """A parsed reassignment file, entries in file order (duplicates kept for the checks)."""

    partitions: tuple[tuple[TopicPartition, tuple[int, ...]], ...]
    log_dirs: dict[TopicPartitionReplica, str]
    """Replicas given a log dir other than "any"."""

    def targets(self) -> dict[TopicPartition, tuple[int, ...]]:
        return dict(self.partitions)


# --- reading ---------------------------------------------------------------------------------------


def parse_topics_to_move(text: str) -> list[str]:
    """The topics of a topics-to-move file (`{"topics":[{"topic":"foo"}],"version":1}`), in file order."""
    document = _load(text, "the topics-to-move file")
    _check_version(document)
    topics = document.get("topics", [])
    if not isinstance(topics, list):
        raise ReassignError('"topics" in the topics-to-move file must be a list.')
    names = []
    for index, entry in enumerate(topics):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ReassignError(f'entry {index} of "topics" has no string "topic".')
        names.append(entry["topic"])
    if not names:  # beyond Kafka, which proposes an empty plan: a file naming no topic is a mistake
        raise ReassignError('the topics-to-move file names no topic in "topics": nothing to move.')
    return names


def parse_reassignment(text: str) -> ReassignmentData:
    """A reassignment file, checked for shape (what --verify and --cancel read).

    Beyond Kafka, whose --verify and --cancel take an empty list and then clear every broker's
    throttles: an empty list is refused for them as --execute refuses it.
    """
    document = _load(text, "the reassignment file")
    _check_version(document)
    entries = document.get("partitions", [])
    if not isinstance(entries, list):
        raise ReassignError('"partitions" in the reassignment file must be a list.')
    if not entries:
        raise ReassignError("Partition reassignment list cannot be empty.")
    partitions: list[tuple[TopicPartition, tuple[int, ...]]] = []
    log_dirs: dict[TopicPartitionReplica, str] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ReassignError(f'entry {index} of "partitions" is not an object.')
        topic = entry.get("topic")
        partition = entry.get("partition")
        replicas = entry.get("replicas")
        if not isinstance(topic, str):
            raise ReassignError(f'entry {index} of "partitions" has no string "topic".')
        if not _is_int(partition):
            raise ReassignError(f'entry {index} of "partitions" has no integer "partition".')
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise ReassignError(f'entry {index} of "partitions" has no "replicas" list of broker ids.')
        tp = TopicPartition(topic, partition)
        dirs = entry.get("log_dirs")
        if dirs is None:
            dirs = [ANY_LOG_DIR] * len(replicas)
        elif not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise ReassignError(f'"log_dirs" of partition {tp} must be a list of strings.')
        if len(dirs) != len(replicas):
            raise ReassignError(
                f"Size of replicas list {_java_list(replicas)} is different from size of log dirs list "
                f"{_java_list(dirs)} for partition {tp}."
            )
        partitions.append((tp, tuple(replicas)))
        for broker, log_dir in zip(replicas, dirs, strict=True):
            if log_dir != ANY_LOG_DIR:
                log_dirs[TopicPartitionReplica(topic, partition, broker)] = log_dir
    return ReassignmentData(tuple(partitions), log_dirs)


def parse_execute(text: str) -> ReassignmentData:
    """A reassignment file for --execute, with ReassignPartitionsCommand's checks (parseExecuteAssignmentArgs)."""
    data = parse_reassignment(text)
    if not data.partitions:
        raise ReassignError("Partition reassignment list cannot be empty.")
    if any(not replicas for _, replicas in data.partitions):
        raise ReassignError("Partition replica list cannot be empty.")
    twice = _duplicates(tp for tp, _ in data.partitions)
    if twice:
        raise ReassignError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(str(tp) for tp in sorted(twice))
            + "."
        )
    repeated = [(tp, _duplicates(replicas)) for tp, replicas in data.partitions]
    repeated = [(tp, brokers) for tp, brokers in repeated if brokers]
    if repeated:
        detail = ". ".join(
            f"{tp} contains multiple entries for {','.join(map(str, sorted(brokers)))}"
            for tp, brokers in repeated
        )
        raise ReassignError(f"Partition replica lists may not contain duplicate entries: {detail}.")
    return data


def parse_broker_list(text: str) -> list[int]:
    """--broker-list "1,2,3", in the order given; duplicates refused as in parseGenerateAssignmentArgs."""
    try:
        brokers = [int(b.strip()) for b in text.split(",")]
    except ValueError:
        raise ReassignError(f"--broker-list {text!r} is not broker ids joined by ','.") from None
    twice = _duplicates(brokers)
    if twice:
        raise ReassignError(f"Broker list contains duplicate entries: {', '.join(map(str, sorted(twice)))}.")
    return brokers


def check_topics(topics: list[str]) -> None:
    twice = _duplicates(topics)
    if twice:
        raise ReassignError(
            f"List of topics to reassign contains duplicate entries: {', '.join(sorted(twice))}."
        )


# --- writing ---------------------------------------------------------------------------------------


def format_reassignment(
    assignment: Mapping[TopicPartition, Iterable[int]],
    log_dirs: Mapping[TopicPartitionReplica, str] | None = None,
) -> str:
    """Kafka's formatAsReassignmentJson: version 1, partitions sorted, log dirs "any" unless given."""
    log_dirs = log_dirs or {}
    partitions = []
    for tp in sorted(assignment):
        replicas = list(assignment[tp])
        partitions.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "replicas": replicas,
                "log_dirs": [
                    log_dirs.get(TopicPartitionReplica(tp.topic, tp.partition, r), ANY_LOG_DIR)
                    for r in replicas
                ],
            }
        )
    return orjson.dumps({"version": EARLIEST_VERSION, "partitions": partitions}).decode()


def format_topics_to_move(topics: Iterable[str]) -> str:
    return orjson.dumps({"topics": [{"topic": t} for t in topics], "version": EARLIEST_VERSION}).decode()


def partition_list(partitions: Iterable[TopicPartition]) -> str:
    """Partitions sorted and joined by ',' as the tool prints them ("foo-0,foo-1")."""
    return ",".join(str(tp) for tp in sorted(partitions))


# ---------------------------------------------------------------------------------------------------


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ReassignError(f"{what} is not valid JSON: {str(exc).rstrip('.')}.") from None
    if not isinstance(document, dict):
        raise ReassignError(f"{what} must hold a JSON object.")
    return document


def _check_version(document: dict[str, Any]) -> None:
    version = document.get("version", EARLIEST_VERSION)
    if version != EARLIEST_VERSION or not _is_int(version):
        raise ReassignError(f"Not supported version field value {orjson.dumps(version).decode()}.")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _duplicates(items: Iterable[Any]) -> set[Any]:
    return {item for item, count in Counter(items).items() if count > 1}


def _java_list(items: Iterable[object]) -> str:
    """How Java prints a List: "[1, 2]"."""
    return "[" + ", ".join(str(i) for i in items) + "]"
