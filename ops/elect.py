"""Leader elections as an operator asks for them: preferred or unclean, per partition or everywhere.

Through the standard admin APIs only (ElectLeaders, KIP-460; Metadata for what the cluster looks
like), so it works against Apache Kafka as well as kcli's broker. The rules follow Kafka's
`kafka-leader-election.sh` (LeaderElectionCommand): its JSON file of partitions, its report lines
(elected, "Valid replica already elected" for ELECTION_NOT_NEEDED, one error line per failed
partition with the Java exception Kafka's admin client would raise) and exit status 1 when any
partition failed.

With every partition asked for (a null list) a KRaft controller leaves out those that need no
election, and the report, as Kafka's, names only what it answered. Beyond Kafka's tool, a dry run
predicts, from Metadata alone, what the controller's PartitionChangeBuilder would do (preferred: the
first replica if it is alive and in the ISR, else a leaderless partition takes the next live ISR
member; unclean: a live ISR member first, else the first live replica, out of sync), lists every
partition, and sends no ElectLeaders.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import ClientError
from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.output import java_hash_order
from kcli.protocol.messages import build, nested_type
from kcli.security import PLAINTEXT, ClientSecurity
from kcli.security.client_config import load_client_config

ELECT_LEADERS = 43
FIRST_ELECTION_TYPE_VERSION = 1
"""ElectLeaders v0 has no ElectionType: preferred elections only."""
DEFAULT_API_TIMEOUT_MS = 30000
INT32_MAX = (1 << 31) - 1
"""LeaderElectionCommand's default.api.timeout.ms when the admin config does not set it."""
NO_LEADER = -1
INT32 = (-(2**31), 2**31 - 1)
NOT_CONTROLLER_RETRIES = 5
NOT_CONTROLLER_BACKOFF_S = 0.5


class ElectionError(KcliError):
    """A leader election that cannot be asked for (bad arguments, bad file) or that failed."""


class ElectionType(enum.IntEnum):
    """Kafka's ElectionType: its byte on the wire, its name in the report lines."""

    PREFERRED = 0
    UNCLEAN = 1


def parse_election_type(text: str) -> ElectionType:
    """joptsimple's EnumConverter, as the Java tool uses it: the name in any case."""
    try:
        return ElectionType[text.strip().upper()]
    except KeyError:
        raise ElectionError(f"--election-type must be preferred or unclean, not {text!r}.") from None


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        """Kafka's TopicPartition.toString."""
        return f"{self.topic}-{self.partition}"


# --- the JSON file ---------------------------------------------------------------------------------


def parse_election_json(text: str) -> list[TopicPartition]:
    """The partitions of a --path-to-json-file: {"partitions": [{"topic": "t", "partition": 0}, ...]}.

    Kafka's rules: text that is not JSON counts as empty data; "partitions" must be there and be a
    list of objects with a string "topic" and a 32-bit integer "partition" (other keys are ignored);
    a partition named twice is refused. Beyond Kafka, which elects nothing and says nothing for an
    empty list, an empty list is refused: a file that names no partition is a mistake, not a request.
    """
    try:
        data = json.loads(text)
    except ValueError:
        raise ElectionError("Replica election data is empty (the file is not JSON).") from None
    if not isinstance(data, dict):
        raise ElectionError(f"Replica election data must be a JSON object, not {_json_kind(data)}.")
    if "partitions" not in data:
        raise ElectionError('Replica election data is missing "partitions" field.')
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise ElectionError(
            f'Replica election data\'s "partitions" must be a list, not {_json_kind(entries)}.'
        )
    if not entries:
        raise ElectionError(
            'Replica election data\'s "partitions" list is empty: name at least one partition.'
        )
    found: list[TopicPartition] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ElectionError(f'"partitions" entry {index} must be an object, not {_json_kind(entry)}.')
        topic, partition = entry.get("topic"), entry.get("partition")
        if not isinstance(topic, str):
            raise ElectionError(
                f'"partitions" entry {index} needs a string "topic", not {_json_kind(topic)}.'
            )
        if not _is_int32(partition):
            raise ElectionError(
                f'"partitions" entry {index} needs an integer "partition", not {_json_kind(partition)}.'
            )
        found.append(TopicPartition(topic, partition))
    duplicates = sorted({tp for tp in found if found.count(tp) > 1})
    if duplicates:
        raise ElectionError(
            "Replica election data contains duplicate partitions: " + ", ".join(map(str, duplicates)) + "."
        )
    return found


def load_election_json(path: str | Path) -> list[TopicPartition]:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ElectionError(f"cannot read {path}: it is not UTF-8 text.") from None
    except OSError as exc:
        raise ElectionError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}.") from None
    try:
        return parse_election_json(text)
    except ElectionError as exc:
        raise ElectionError(f"{path}: {exc}") from None


def _is_int32(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and INT32[0] <= value <= INT32[1]


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return f"{value} (out of the 32-bit range)" if not _is_int32(value) else "an integer"
    kinds = {str: "a string", float: "a number with a fraction", list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


# --- the admin config ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """What kcli's client takes from an --admin.config properties file."""

    bootstrap_servers: str | None = None
    client_id: str = "kcli"
    request_timeout_s: float = DEFAULT_API_TIMEOUT_MS / 2000
    """request.timeout.ms: LeaderElectionCommand's default is half the API timeout."""
    api_timeout_s: float = DEFAULT_API_TIMEOUT_MS / 1000
    """default.api.timeout.ms: how long the controller may take (ElectLeaders' TimeoutMs)."""
    connect_timeout_s: float = 10.0
    """socket.connection.setup.timeout.ms."""
    security: ClientSecurity = PLAINTEXT
    ignored: tuple[str, ...] = ()
    """Producer or consumer settings given, which an admin client does not use."""


def load_admin_config(path: str | Path) -> AdminConfig:
    """An admin client properties file, read as every command's --command-config is (security
    settings included; what kcli cannot honour is refused), with LeaderElectionCommand's timeouts."""
    config = load_client_config(path)
    api_timeout = config.timeouts_ms.get("default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS)
    request_timeout = config.timeouts_ms.get("request.timeout.ms", max(1, api_timeout // 2))
    return AdminConfig(
        bootstrap_servers=config.bootstrap_servers,
        client_id=config.client_id or "kcli",
        request_timeout_s=request_timeout / 1000,
        api_timeout_s=api_timeout / 1000,
        connect_timeout_s=config.timeout_s("socket.connection.setup.timeout.ms", 10.0),
        security=config.security,
        ignored=config.unused,
    )


# --- outcomes --------------------------------------------------------------------------------------


class Result(enum.StrEnum):
    ELECTED = "elected"
    NOT_NEEDED = "not_needed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition as Metadata shows it."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """One partition's answer (or, in a dry run, the predicted one)."""

    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None
    leader: int | None = None
    """The leader before the election, from Metadata (None: leaderless or not known)."""
    new_leader: int | None = None
    """Dry run only: the replica the controller would elect."""
    unclean: bool = False
    """Dry run only: the new leader is out of the ISR, so records may be lost."""

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def result(self) -> Result:
        if self.error is ErrorCode.none:
            return Result.ELECTED
        if self.error is ErrorCode.election_not_needed:
            return Result.NOT_NEEDED
        return Result.FAILED

    def to_json(self, election_type: ElectionType, dry_run: bool) -> dict[str, Any]:
        failed = self.result is Result.FAILED
        return {
            "topic": self.topic,
            "partition": self.partition,
            "election_type": election_type.name,
            "result": self.result.value,
            "error": self.error.name.upper() if failed else None,
            "message": error_message(self.error, self.message) if failed else None,
            "leader": self.leader,
            "new_leader": self.new_leader,
            "unclean": self.unclean,
            "dry_run": dry_run,
        }


@dataclass(frozen=True, slots=True)
class ElectionReport:
    election_type: ElectionType
    outcomes: tuple[ElectionOutcome, ...]
    dry_run: bool = False

    def by_result(self, result: Result) -> list[ElectionOutcome]:
        return sorted((o for o in self.outcomes if o.result is result), key=lambda o: o.topic_partition)

    @property
    def failed(self) -> list[ElectionOutcome]:
        return self.by_result(Result.FAILED)

    def lines(self) -> list[str]:
        """LeaderElectionCommand's report: the elected partitions, those that needed no election, then
        one line per failure, each set in the order of its Java HashSet (or HashMap). A dry run says
        "Would" and shows each planned leader change."""
        kind = self.election_type.name
        lines = []
        elected = self._java_order(Result.ELECTED)
        if elected:
            if self.dry_run:
                lines.append(
                    f"Would complete leader election ({kind}) for partitions "
                    + ", ".join(_planned(o) for o in elected)
                )
            else:
                lines.append(
                    f"Successfully completed leader election ({kind}) for partitions "
                    + ", ".join(str(o.topic_partition) for o in elected)
                )
        noop = self._java_order(Result.NOT_NEEDED)
        if noop:
            lines.append(
                "Valid replica already elected for partitions "
                + ", ".join(str(o.topic_partition) for o in noop)
            )
        verb = "Would fail" if self.dry_run else "Error completing"
        lines += [
            f"{verb} leader election ({kind}) for partition: {o.topic_partition}: "
            f"{java_exception(o.error, o.message)}"
            for o in self._java_order(Result.FAILED)
        ]
        return lines

    def _java_order(self, result: Result) -> list[ElectionOutcome]:
        """The Java tool's order; a dry run (kcli's own) keeps topic-partition order."""
        if self.dry_run:
            return self.by_result(result)
        by_tp = {(o.topic, o.partition): o for o in self.by_result(result)}
        return [by_tp[tp] for tp in java_hash_order(by_tp)]

    def to_json(self) -> list[dict[str, Any]]:
        return [
            o.to_json(self.election_type, self.dry_run)
            for o in sorted(self.outcomes, key=lambda o: o.topic_partition)
        ]


def _planned(outcome: ElectionOutcome) -> str:
    before = "none" if outcome.leader is None else str(outcome.leader)
    unclean = ", out of sync: records may be lost" if outcome.unclean else ""
    return f"{outcome.topic_partition} (leader {before} -> {outcome.new_leader}{unclean})"


# Kafka's Errors: the exception class its admin client raises for a code, where it is not the code's
# name in CamelCase followed by "Exception".
_IRREGULAR_EXCEPTIONS = {
    ErrorCode.unknown_server_error: "UnknownServerException",
    ErrorCode.request_timed_out: "TimeoutException",
    ErrorCode.invalid_topic_exception: "InvalidTopicException",
    ErrorCode.topic_authorization_failed: "TopicAuthorizationException",
    ErrorCode.cluster_authorization_failed: "ClusterAuthorizationException",
    ErrorCode.stale_controller_epoch: "ControllerMovedException",
    ErrorCode.network_exception: "NetworkException",
    ErrorCode.invalid_config: "InvalidConfigurationException",
    ErrorCode.message_too_large: "RecordTooLargeException",
    ErrorCode.throttling_quota_exceeded: "ThrottlingQuotaExceededException",
}
# Errors' default messages, used when the response carries none (ApiError.exception(null)).
_DEFAULT_MESSAGES = {
    ErrorCode.unknown_server_error: "The server experienced an unexpected error when processing the request.",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.request_timed_out: "The request timed out.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.invalid_topic_exception: "The request attempted to perform an operation on an invalid topic.",
    ErrorCode.not_controller: "This is not the correct controller for this cluster.",
    ErrorCode.unsupported_version: "The version of API is not supported.",
    ErrorCode.preferred_leader_not_available: "The preferred leader was not available.",
    ErrorCode.eligible_leaders_not_available: "Eligible topic partition leaders are not available.",
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
}


def error_message(error: ErrorCode, message: str | None) -> str | None:
    return message or _DEFAULT_MESSAGES.get(error)


def java_exception(error: ErrorCode, message: str | None) -> str:
    """The exception as LeaderElectionCommand prints it (Throwable.toString: class, ": ", message)."""
    name = (
        _IRREGULAR_EXCEPTIONS.get(error)
        or "".join(w.capitalize() for w in error.name.split("_")) + "Exception"
    )
    text = error_message(error, message)
    return f"org.apache.kafka.common.errors.{name}" + (f": {text}" if text else "")


# --- the dry run -----------------------------------------------------------------------------------


def predict(election_type: ElectionType, state: PartitionState, live: set[int]) -> ElectionOutcome:
    """What the controller would answer for one partition, from its Metadata and the live brokers.

    Kafka's ReplicationControlManager.electLeader and PartitionChangeBuilder: ELECTION_NOT_NEEDED
    when the preferred replica leads (preferred) or any replica leads (unclean); a valid new leader
    is alive and in the ISR. Preferred: the first replica if valid; else the current leader stays if
    valid (nothing changes: PREFERRED_LEADER_NOT_AVAILABLE); else the next valid replica. Unclean:
    the first valid replica, else the first live one (out of sync); none: ELIGIBLE_LEADERS_NOT_AVAILABLE.
    Brokers in controlled shutdown still show in Metadata, so they count as alive here.
    """
    leader = state.leader if state.leader >= 0 else None

    def outcome(error: ErrorCode, new_leader: int | None = None, unclean: bool = False) -> ElectionOutcome:
        return ElectionOutcome(state.topic, state.partition, error, None, leader, new_leader, unclean)

    def valid(replica: int) -> bool:
        return replica in state.isr and replica in live

    if not state.replicas:
        return outcome(ErrorCode.unknown_topic_or_partition)
    if election_type is ElectionType.PREFERRED:
        preferred = state.replicas[0]
        if state.leader == preferred:
            return outcome(ErrorCode.election_not_needed)
        if valid(preferred):
            return outcome(ErrorCode.none, preferred)
        if leader is not None and valid(leader):
            return outcome(ErrorCode.preferred_leader_not_available)
        fallback = next((r for r in state.replicas[1:] if valid(r)), None)
        if fallback is None:
            return outcome(ErrorCode.preferred_leader_not_available)
        return outcome(ErrorCode.none, fallback)
    if leader is not None:
        return outcome(ErrorCode.election_not_needed)
    clean = next((r for r in state.replicas if valid(r)), None)
    if clean is not None:
        return outcome(ErrorCode.none, clean)
    alive = next((r for r in state.replicas if r in live), None)
    if alive is not None:
        return outcome(ErrorCode.none, alive, unclean=True)
    return outcome(ErrorCode.eligible_leaders_not_available)


async def cluster_partitions(
    cluster: Cluster, partitions: Sequence[TopicPartition] | None
) -> tuple[dict[TopicPartition, PartitionState], set[int]]:
    """Metadata of the named partitions (None: every partition), and the live brokers' ids."""
    topics = None if partitions is None else sorted({tp.topic for tp in partitions})
    response = await cluster.metadata_response(topics)
    states = {}
    for topic in response.topics:
        if topic.error_code != ErrorCode.none and not topic.partitions:
            continue
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            states[tp] = PartitionState(
                topic.name, p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)
            )
    return states, {b.node_id for b in response.brokers}


async def plan_elections(
    cluster: Cluster, election_type: ElectionType, partitions: Sequence[TopicPartition] | None
) -> ElectionReport:
    """A dry run: the predicted answer per partition, with no ElectLeaders sent."""
    states, live = await cluster_partitions(cluster, partitions)
    outcomes = []
    for tp in sorted(states) if partitions is None else partitions:
        state = states.get(tp)
        if state is None:
            outcomes.append(
                ElectionOutcome(
                    tp.topic, tp.partition, ErrorCode.unknown_topic_or_partition, _unknown(tp, states)
                )
            )
        else:
            outcomes.append(predict(election_type, state, live))
    return ElectionReport(election_type, tuple(outcomes), dry_run=True)


def _unknown(tp: TopicPartition, states: dict[TopicPartition, PartitionState]) -> str:
    """The controller's words for a partition it does not have."""
    if any(known.topic == tp.topic for known in states):
        return f"No such partition as {tp}"
    return f"No such topic as {tp.topic}"


# --- the election ----------------------------------------------------------------------------------


class ElectionRequestFailed(ElectionError):
    """The whole request failed; for a timeout and a refused authorization LeaderElectionCommand
    prints its own line on stdout (`report_line`) before failing."""

    def __init__(self, message: str, report_line: str | None = None) -> None:
        super().__init__(message, exit_code=1)
        self.report_line = report_line


TIMEOUT_LINE = "Timeout waiting for election results"
NOT_AUTHORIZED_LINE = "Not authorized to perform leader election"


async def elect_leaders(
    cluster: Cluster,
    election_type: ElectionType,
    partitions: Sequence[TopicPartition] | None,
    *,
    timeout_s: float = DEFAULT_API_TIMEOUT_MS / 1000,
) -> ElectionReport:
    """ElectLeaders for `partitions` (None: every partition, as --all-topic-partitions), answered
    per partition by the active controller (a broker forwards the request to it)."""
    states, _ = await cluster_partitions(cluster, partitions)
    client = cluster.bootstrap
    cls = client.request_type(ELECT_LEADERS)
    if election_type is not ElectionType.PREFERRED and cls.__version__ < FIRST_ELECTION_TYPE_VERSION:
        raise ElectionError(
            f"{client.address} takes ElectLeaders v{cls.__version__} only, which has preferred elections only."
        )
    request = build(
        cls,
        election_type=int(election_type),
        topic_partitions=None if partitions is None else _request_topics(cls, partitions),
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    response = None
    for attempt in range(NOT_CONTROLLER_RETRIES):
        try:
            response = await client.send(request, timeout=timeout_s + cluster.request_timeout)
        except ClientError as exc:
            if "timed out" in str(exc):
                raise ElectionRequestFailed(f"{exc}", TIMEOUT_LINE) from None
            raise
        top = getattr(response, "error_code", ErrorCode.none)
        if top is not ErrorCode.not_controller or attempt == NOT_CONTROLLER_RETRIES - 1:
            break
        await asyncio.sleep(NOT_CONTROLLER_BACKOFF_S)  # a new controller is being elected
    assert response is not None
    _check_top_level(response)
    outcomes = []
    for topic in response.replica_election_results:
        for p in topic.partition_result:
            tp = TopicPartition(topic.topic, p.partition_id)
            state = states.get(tp)
            leader = state.leader if state is not None and state.leader >= 0 else None
            outcomes.append(ElectionOutcome(tp.topic, tp.partition, p.error_code, p.error_message, leader))
    # With partitions None the controller leaves out every partition that needed no election, and
    # LeaderElectionCommand reports only what it answered: so does this report.
    return ElectionReport(election_type, tuple(outcomes))


def _request_topics(cls: type, partitions: Iterable[TopicPartition]) -> tuple[Any, ...]:
    topic_cls = nested_type(cls, "TopicPartitions")
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())


def _check_top_level(response: Any) -> None:
    """A whole-request error (v1+): Kafka's admin client fails every partition with it; the command
    prints its own line for a timeout or a refused authorization."""
    error = getattr(response, "error_code", ErrorCode.none)
    if error is ErrorCode.none:
        return
    if error is ErrorCode.request_timed_out:
        raise ElectionRequestFailed("the controller timed out electing leaders.", TIMEOUT_LINE)
    if error is ErrorCode.cluster_authorization_failed:
        raise ElectionRequestFailed(
            "the cluster refused leader elections to this client (CLUSTER_AUTHORIZATION_FAILED).",
            NOT_AUTHORIZED_LINE,
        )
    message = next(
        (
            p.error_message
            for t in response.replica_election_results
            for p in t.partition_result
            if p.error_message
        ),
        None,
    )
    raise ElectionRequestFailed(f"ElectLeaders failed: {java_exception(error, message)}")
