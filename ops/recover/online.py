"""The gathering half of `kcli recover partitions`: for a partition with no live in-sync replica, what
each of its replicas holds, asked of live brokers over the protocol and read from stopped brokers' log
dirs.

Live brokers, with the debugging replica id (-2, KIP-279's "debug consumer") that asks a replica about
its own log:
- ListOffsets LATEST and EARLIEST: the log end and log start offsets (Kafka answers these from any
  replica for -2: ReplicaManager.fetchOffset passes fetchOnlyFromLeader = replicaId != -2);
- OffsetForLeaderEpoch v3+, from the partition's leader epoch downward: the epoch history, one epoch
  per round trip. Kafka answers it from the leader only, so against Apache Kafka a follower's history
  needs its log dir (`--logdir`); kcli's broker answers from any replica for -2;
- DescribeLogDirs: the replica's size on disk;
- Fetch with replica id -2 of the last offset: the epoch of the last batch (where the epoch walk
  starts) and the replica's own high watermark, which its Fetch answer carries;
- Fetch with replica id -2 reads the records a replica is about to lose. kcli's broker reads a replica
  to its log end; Kafka serves -2 as a consumer (the leader's high watermark), so there the records
  past it need the log dir too.
Stopped brokers: `formats` on the partition directory (segments, leader-epoch-checkpoint, the high
watermark and log start checkpoints), read only.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from kio.schema.errors import ErrorCode

from formats import checkpoints
from formats.errors import FormatError
from formats.records import ControlType, control_type
from formats.segment import LOG_SUFFIX, base_offset_of, walk
from kcli.client import ClientError, KafkaClient
from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.protocol.messages import build, nested_type
from ops.recover.candidates import Candidate, EpochHistory, PartitionRecovery, ReplicaInfo, plan_candidates
from ops.topics import eligible_leader_replicas

LIST_OFFSETS = 2
FETCH = 1
OFFSET_FOR_LEADER_EPOCH = 23
DESCRIBE_LOG_DIRS = 35
DEBUGGING_REPLICA_ID = -2
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
FIRST_REPLICA_ID_VERSION = 3
"""OffsetForLeaderEpoch v3 added ReplicaId."""
MAX_EPOCH_ROUNDS = 10_000
FETCH_BYTES = 1 << 20
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"


class RecoverPartitionsError(KcliError):
    """A partition that cannot be recovered as asked, or a step that failed; one sentence, exit 1."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition as Metadata shows it."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966); none where ELR is off
    last_known_elr: tuple[int, ...] = ()  # the last leader once ISR and ELR are empty (KIP-966)


@dataclass(frozen=True, slots=True)
class LostRecord:
    """A record of a replica's log, with what identifies the batch that holds it."""

    offset: int
    leader_epoch: int
    batch_crc: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    transactional: bool
    transaction: str | None = None  # a transactional record: "committed", "aborted" or "open" in this log


@dataclass(frozen=True, slots=True)
class ReplicaRead:
    """A replica's batches from some offset on: (base offset, last offset, bytes, transactional producer
    id or -1) of each, and the data records among them (control records are not data)."""

    batches: tuple[tuple[int, int, int, int], ...]
    records: tuple[LostRecord, ...]
    complete: bool  # False when the source stopped short of the asked end
    last_epoch: int = -1  # the leader epoch of the last batch read
    high_watermark: int | None = None  # the replica's own, as its Fetch answer gave it
    markers: tuple[tuple[int, int, str], ...] = ()  # (offset, producer id, "committed" or "aborted")

    def since(self, offset: int) -> tuple[list[LostRecord], int, tuple[int, ...]]:
        """(records, bytes of the batches cut, transactional producers cut) from `offset` on: a cut
        removes the whole batch holding `offset`."""
        cut = [b for b in self.batches if b[1] >= offset]
        producers = tuple(sorted({b[3] for b in cut if b[3] >= 0}))
        return [r for r in self.records if r.offset >= offset], sum(b[2] for b in cut), producers


# --- which partitions -----------------------------------------------------------------------------


async def leaderless_partitions(
    cluster: Cluster, topics: list[str] | None, partitions: list[int] | None
) -> tuple[list[PartitionState], set[int]]:
    """The partitions to recover (those named, or every one with no leader) and the live broker ids."""
    response = await cluster.metadata_response(topics or None)
    live = {b.node_id for b in response.brokers}
    found = []
    for topic in response.topics:
        if topic.error_code != ErrorCode.none:
            if topics:
                raise RecoverPartitionsError(
                    f"topic {topic.name!r}: {topic.error_code.name.upper()} (does it exist?)."
                )
            continue
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            if partitions and p.partition_index not in partitions:
                continue
            if not topics and not partitions and p.leader_id >= 0:
                continue
            found.append(
                PartitionState(
                    topic.name,
                    p.partition_index,
                    p.leader_id,
                    getattr(p, "leader_epoch", -1),
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                )
            )
    if partitions and topics:
        missing = sorted(set(partitions) - {s.partition for s in found})
        if missing:
            raise RecoverPartitionsError(
                f"{', '.join(topics)} has no partition {', '.join(map(str, missing))}."
            )
    elr = await eligible_leader_replicas(cluster, sorted({s.topic for s in found}))
    found = [
        replace(s, elr=tuple(pair[0] or ()), last_known_elr=tuple(pair[1] or ()))
        for s in found
        for pair in [elr.get((s.topic, s.partition), (None, None))]
    ]
    return sorted(found, key=lambda s: (s.topic, s.partition)), live


# --- live replicas ---------------------------------------------------------------------------------


async def replica_from_broker(
    cluster: Cluster, broker: int, state: PartitionState, live: set[int]
) -> ReplicaInfo:
    """What broker `broker` says of its own replica of the partition (source "none" with the reason
    when it cannot tell)."""
    tp = (state.topic, state.partition)
    in_isr = broker in state.isr
    try:
        client = await cluster.node(broker)
        log_end = await _list_offset(client, tp, LATEST_TIMESTAMP)
        log_start = await _list_offset(client, tp, EARLIEST_TIMESTAMP)
        latest, high_watermark = await _last_batch(cluster, broker, tp, log_start, log_end)
        if latest is None:  # no replica has an epoch above the partition's
            latest = state.leader_epoch if state.leader_epoch >= 0 else MAX_EPOCH_ROUNDS - 1
        entries = await _epoch_history(client, tp, latest, log_start, log_end)
        size = await _replica_size(client, tp)
    except (ClientError, RecoverPartitionsError) as exc:
        return ReplicaInfo(
            broker,
            broker in live,
            "none",
            None,
            in_isr=in_isr,
            in_elr=broker in state.elr,
            error=str(exc).rstrip("."),
        )
    history = EpochHistory(entries, log_end) if entries is not None else None
    error = None
    if history is None:
        error = "its broker does not tell a follower's epoch history (Apache Kafka): give its --logdir"
    return ReplicaInfo(
        broker, True, "broker", history, log_start, high_watermark, size, in_isr=in_isr, error=error
    )


async def _list_offset(client: KafkaClient, tp: tuple[str, int], timestamp: int) -> int:
    cls = client.request_type(LIST_OFFSETS)
    topic_cls = nested_type(cls, "ListOffsetsTopic")
    partition_cls = nested_type(cls, "ListOffsetsPartition")
    request = build(
        cls,
        replica_id=DEBUGGING_REPLICA_ID,
        isolation_level=0,
        topics=(
            topic_cls(
                name=tp[0],
                partitions=(
                    build(partition_cls, partition_index=tp[1], current_leader_epoch=-1, timestamp=timestamp),
                ),
            ),
        ),
        timeout=datetime.timedelta(seconds=30),
    )
    response = await client.send(request)
    answer = response.topics[0].partitions[0]
    if answer.error_code != ErrorCode.none:
        raise RecoverPartitionsError(
            f"ListOffsets of {tp[0]}-{tp[1]} on {client.address}: {answer.error_code.name.upper()}"
        )
    return answer.offset


async def _last_batch(
    cluster: Cluster, broker: int, tp: tuple[str, int], log_start: int, log_end: int
) -> tuple[int | None, int | None]:
    """(leader epoch of the replica's last batch, its high watermark), from a Fetch -2 of its last
    offset: the epoch walk starts there. (None, None) when it cannot be read (Apache Kafka)."""
    if log_end <= log_start:
        return -1, None
    try:
        read = await read_from_broker(cluster, broker, tp, log_end - 1, log_end)
    except (ClientError, RecoverPartitionsError):
        return None, None
    return (read.last_epoch if read.batches else None), read.high_watermark


async def _epoch_history(
    client: KafkaClient, tp: tuple[str, int], latest_epoch: int, log_start: int, log_end: int
) -> tuple[tuple[int, int], ...] | None:
    """(epoch, start offset) ascending, walked down from `latest_epoch` (or the first epoch at or below
    it the log has) one OffsetForLeaderEpoch at a time; None when the broker answers for leaders only
    (NOT_LEADER_OR_FOLLOWER, as Apache Kafka does)."""
    cls = client.request_type(OFFSET_FOR_LEADER_EPOCH)
    if cls.__version__ < FIRST_REPLICA_ID_VERSION:
        return None
    topic_cls = nested_type(cls, "OffsetForLeaderTopic")
    partition_cls = nested_type(cls, "OffsetForLeaderPartition")

    async def ask(epoch: int) -> tuple[int, int]:
        request = cls(
            replica_id=DEBUGGING_REPLICA_ID,
            topics=(
                topic_cls(
                    topic=tp[0],
                    partitions=(partition_cls(partition=tp[1], current_leader_epoch=-1, leader_epoch=epoch),),
                ),
            ),
        )
        answer = (await client.send(request)).topics[0].partitions[0]
        if answer.error_code == ErrorCode.not_leader_or_follower:
            raise _LeaderOnly
        if answer.error_code != ErrorCode.none:
            raise RecoverPartitionsError(
                f"OffsetForLeaderEpoch of {tp[0]}-{tp[1]} on {client.address}: {answer.error_code.name.upper()}"
            )
        return answer.leader_epoch, answer.end_offset

    if log_end <= log_start:
        return ()
    try:
        return await walk_epoch_history(ask, latest_epoch, log_start)
    except _LeaderOnly:
        return None


async def walk_epoch_history(
    ask: Callable[[int], Awaitable[tuple[int, int]]], latest_epoch: int, log_start: int
) -> tuple[tuple[int, int], ...]:
    """A log's (epoch, start offset) entries, ascending, from OffsetForLeaderEpoch answers `ask(epoch)`
    -> (largest epoch at or below it, its end offset), walked down from `latest_epoch`: one round trip
    per epoch the log has (and one per epoch above its latest)."""
    answers: list[tuple[int, int]] = []  # (epoch, end offset), epochs descending
    floor = log_start  # where the lowest epoch found starts
    epoch = latest_epoch
    for _ in range(MAX_EPOCH_ROUNDS):
        if epoch < 0:
            break
        found, end = await ask(epoch)
        if found < 0:
            if answers:  # below the first epoch of a log without one there
                break
            epoch -= 1  # above the log's latest epoch: step down to it
            continue
        if answers and end >= answers[-1][1]:
            # Below the first epoch Kafka answers the asked epoch with the first epoch's start,
            # again and again: the previous answer was one of those, and only tells that start.
            floor = answers.pop()[1]
            break
        answers.append((found, end))
        if end <= log_start:
            break
        epoch = found - 1
    entries = []
    for k, (found, end) in enumerate(answers):
        start = max(answers[k + 1][1] if k + 1 < len(answers) else floor, log_start)
        if start < end:
            entries.append((found, start))
    return tuple(reversed(entries))


class _LeaderOnly(Exception):
    pass


async def _replica_size(client: KafkaClient, tp: tuple[str, int]) -> int | None:
    cls = client.request_type(DESCRIBE_LOG_DIRS)
    topic_cls = nested_type(cls, "DescribableLogDirTopic")
    request = cls(topics=(topic_cls(topic=tp[0], partitions=(tp[1],)),))
    response = await client.send(request)
    for result in response.results:
        for topic in result.topics:
            for p in topic.partitions:
                if topic.name == tp[0] and p.partition_index == tp[1] and not p.is_future_key:
                    return p.partition_size
    return None


async def read_from_broker(
    cluster: Cluster, broker: int, tp: tuple[str, int], start: int, end: int
) -> ReplicaRead:
    """The replica's records in [start, end) through Fetch with the debugging replica id."""
    client = await cluster.node(broker)
    cls = client.request_type(FETCH, highest=12)  # v13 names topics by id
    topic_cls = nested_type(cls, "FetchTopic")
    partition_cls = nested_type(cls, "FetchPartition")
    reader = _BatchReader(start, end)
    offset = start
    for _ in range(1 + (end - start)):
        if offset >= end:
            break
        request = build(
            cls,
            cluster_id=None,
            replica_id=DEBUGGING_REPLICA_ID,
            max_wait=datetime.timedelta(0),
            min_bytes=0,
            max_bytes=FETCH_BYTES,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                topic_cls(
                    topic=tp[0],
                    partitions=(
                        build(
                            partition_cls,
                            partition=tp[1],
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=FETCH_BYTES,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        answer = (await client.send(request)).responses[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            raise RecoverPartitionsError(
                f"Fetch of {tp[0]}-{tp[1]} from broker {broker}: {answer.error_code.name.upper()}"
            )
        reader.high_watermark = answer.high_watermark
        if not answer.records:
            break
        after = reader.feed(bytes(answer.records))
        if after <= offset:
            break
        offset = after
    return reader.result(offset >= end)


# --- stopped replicas: their log dirs --------------------------------------------------------------


def replica_from_log_dir(broker: int, log_dir: Path, state: PartitionState, live: set[int]) -> ReplicaInfo:
    """A replica read from a log dir (its broker stopped, or the files reachable from here)."""
    directory = log_dir / f"{state.topic}-{state.partition}"
    in_isr = broker in state.isr
    if not directory.is_dir():
        return ReplicaInfo(
            broker, broker in live, "none", None, in_isr=in_isr, error=f"{directory} does not exist"
        )
    segments = _segments(directory)
    try:
        log_start, log_end, size = _log_range(segments)
        text = (directory / LEADER_EPOCH_CHECKPOINT).read_text("utf-8")
        epochs = checkpoints.read_leader_epoch_checkpoint(text)
    except FileNotFoundError:
        epochs = []
    except (OSError, FormatError, UnicodeDecodeError) as exc:
        return ReplicaInfo(broker, broker in live, "none", None, in_isr=in_isr, error=f"{directory}: {exc}")
    log_start = _checkpoint(log_dir / LOG_START_CHECKPOINT, state) or log_start
    entries = tuple((e.epoch, e.start_offset) for e in epochs if e.start_offset < log_end)
    return ReplicaInfo(
        broker,
        broker in live,
        "logdir",
        EpochHistory(entries, log_end),
        log_start,
        _checkpoint(log_dir / REPLICATION_CHECKPOINT, state),
        size,
        in_isr=in_isr,
        in_elr=broker in state.elr,
    )


def read_from_log_dir(log_dir: Path, tp: tuple[str, int], start: int, end: int) -> ReplicaRead:
    """The replica's records in [start, end) from its segment files."""
    reader = _BatchReader(start, end)
    for base, path in _segments(log_dir / f"{tp[0]}-{tp[1]}"):
        if base >= end:
            break
        reader.feed(path.read_bytes())
    return reader.result(True)


def _segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for name in os.listdir(directory):
        base = base_offset_of(name)
        if base is not None and name.endswith(LOG_SUFFIX) and name.count(".") == 1:
            found.append((base, directory / name))
    return sorted(found)


def _log_range(segments: list[tuple[int, Path]]) -> tuple[int, int, int]:
    """(first base offset, log end offset, bytes) of the segments as they frame."""
    if not segments:
        return 0, 0, 0
    size = sum(path.stat().st_size for _, path in segments)
    end = segments[-1][0]
    for base, path in reversed(segments):
        batches = walk(path.read_bytes(), check_crc=False).batches
        if batches:
            end = batches[-1].next_offset
            break
        end = base
    return segments[0][0], end, size


def _checkpoint(path: Path, state: PartitionState) -> int | None:
    try:
        entries = checkpoints.read_offset_checkpoint(path.read_text("utf-8"))
    except (OSError, FormatError, UnicodeDecodeError):
        return None
    return entries.get((state.topic, state.partition))


class _BatchReader:
    """Batches fed in offset order; keeps what lies in [start, end)."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.records: dict[int, LostRecord] = {}
        self.batches: dict[int, tuple[int, int, int, int]] = {}
        self.last_epoch = -1
        self.high_watermark: int | None = None
        self.markers: dict[int, tuple[int, int, str]] = {}  # offset -> (offset, producer id, outcome)

    def feed(self, data: bytes) -> int:
        """Take the batches of `data`; returns the offset after the last whole one."""
        after = self.start
        for batch in walk(data, check_crc=False).batches:
            after = max(after, batch.next_offset)
            if batch.last_offset < self.start or batch.magic != 2:
                continue
            if batch.is_control and batch.is_transactional:  # past `end` too: it settles records before
                for record in batch.records(data):
                    kind = _marker_kind(record.key)
                    if kind is not None:
                        self.markers[record.offset] = (record.offset, batch.producer_id, kind)
            if batch.base_offset >= self.end or batch.base_offset in self.batches:
                continue
            self.last_epoch = batch.partition_leader_epoch
            producer = batch.producer_id if batch.is_transactional else -1
            self.batches[batch.base_offset] = (batch.base_offset, batch.last_offset, batch.size, producer)
            if batch.is_control:
                continue
            for record in batch.records(data):
                if self.start <= record.offset < self.end:
                    self.records[record.offset] = LostRecord(
                        record.offset,
                        batch.partition_leader_epoch,
                        batch.crc,
                        record.timestamp,
                        record.key,
                        record.value,
                        tuple(record.headers),
                        batch.producer_id,
                        batch.is_transactional,
                    )
        return after

    def result(self, complete: bool) -> ReplicaRead:
        """What was read; each transactional record with the outcome of its transaction in this log
        (the first marker of its producer after it; "open" when none follows)."""
        markers = sorted(self.markers.values())
        records = []
        for offset in sorted(self.records):
            record = self.records[offset]
            if record.transactional:
                outcome = next((k for o, p, k in markers if p == record.producer_id and o > offset), "open")
                record = replace(record, transaction=outcome)
            records.append(record)
        return ReplicaRead(
            tuple(self.batches[b] for b in sorted(self.batches)),
            tuple(records),
            complete,
            self.last_epoch,
            self.high_watermark,
            tuple(markers),
        )


def _marker_kind(key: bytes | None) -> str | None:
    try:
        kind = control_type(key)
    except FormatError:
        return None
    return {ControlType.COMMIT: "committed", ControlType.ABORT: "aborted"}.get(kind)


def parse_log_dirs(values: Iterable[str]) -> dict[int, list[Path]]:
    """`--logdir BROKER=PATH` values: broker id -> its log dirs (a broker with several log.dirs is
    named once per dir)."""
    found: dict[int, list[Path]] = {}
    for value in values:
        broker, sep, path = value.partition("=")
        if not sep or not broker.strip().isdecimal() or not path:
            raise KcliError(f"--logdir takes BROKER=PATH (e.g. 2=/var/lib/kafka), not {value!r}.")
        directory = Path(path)
        if not directory.is_dir():
            raise KcliError(f"--logdir {value}: {directory} is not a directory.")
        found.setdefault(int(broker), []).append(directory)
    return found


def log_dir_of(dirs: list[Path], tp: tuple[str, int]) -> Path:
    """The one of a broker's log dirs that holds the partition (the first when none does)."""
    return next((d for d in dirs if (d / f"{tp[0]}-{tp[1]}").is_dir()), dirs[0])


# --- the whole picture -----------------------------------------------------------------------------


async def plan_partitions(
    cluster: Cluster,
    *,
    topics: list[str] | None = None,
    partitions: list[int] | None = None,
    log_dirs: dict[int, list[Path]] | None = None,
    read_data: bool = True,
) -> list[PartitionRecovery]:
    """Every partition to recover with its replicas, ranked candidates and, per candidate, the loss of
    every other replica counted in records and bytes (when `read_data` and its log can be read)."""
    log_dirs = log_dirs or {}
    states, live = await leaderless_partitions(cluster, topics, partitions)
    plans = []
    for state in states:
        tp = (state.topic, state.partition)
        found = []
        for broker in state.replicas:
            if broker in live:
                info = await replica_from_broker(cluster, broker, state, live)
                if info.history is None and broker in log_dirs:
                    disk = replica_from_log_dir(broker, log_dir_of(log_dirs[broker], tp), state, live)
                    info = replace(disk, live=True, size_bytes=info.size_bytes or disk.size_bytes)
            elif broker in log_dirs:
                info = replica_from_log_dir(broker, log_dir_of(log_dirs[broker], tp), state, live)
            else:
                info = ReplicaInfo(
                    broker, False, "none", None, in_isr=broker in state.isr,
                    error="its broker is down and no --logdir was given for it",
                )  # fmt: skip
            found.append(replace(info, in_elr=broker in state.elr))
        plan = PartitionRecovery(
            state.topic, state.partition, state.leader, list(state.replicas), list(state.isr),
            leader_epoch=state.leader_epoch, elr=list(state.elr), last_known_elr=list(state.last_known_elr),
            found=found,
        )  # fmt: skip
        plan.candidates = plan_candidates(found, state.leader_epoch)
        if read_data:
            await _read_losses(cluster, plan, log_dirs, live)
        plans.append(plan)
    return plans


async def _read_losses(
    cluster: Cluster, plan: PartitionRecovery, log_dirs: dict[int, list[Path]], live: set[int]
) -> None:
    """Read, once per replica, everything any candidate would cut from it, and count each loss."""
    tp = (plan.topic, plan.partition)
    lowest: dict[int, tuple[int, int]] = {}
    for candidate in plan.candidates:
        for loss in candidate.losses:
            start, end = lowest.get(loss.broker, (loss.start, loss.end))
            lowest[loss.broker] = (min(start, loss.start), max(end, loss.end))
    for broker, (start, end) in sorted(lowest.items()):
        read = None
        if broker in live:
            try:
                read = await read_from_broker(cluster, broker, tp, start, end)
            except (ClientError, RecoverPartitionsError) as exc:
                plan.unread[broker] = str(exc).rstrip(".")
        if (read is None or not read.complete) and broker in log_dirs:
            read = read_from_log_dir(log_dir_of(log_dirs[broker], tp), tp, start, end)
        if read is None or not read.complete:
            plan.unread.setdefault(
                broker,
                "its records past the high watermark are not served over the protocol: give its --logdir"
                if read is not None
                else "its broker is down and no --logdir was given for it",
            )
            continue
        plan.reads[broker] = read
    for k, candidate in enumerate(plan.candidates):
        losses = []
        for loss in candidate.losses:
            read = plan.reads.get(loss.broker)
            if read is None:
                losses.append(loss)
                continue
            records, size, producers = read.since(loss.start)
            losses.append(replace(loss, records=len(records), bytes=size, transactional_producers=producers))
        plan.candidates[k] = replace(candidate, losses=tuple(losses))


def lost_records(plan: PartitionRecovery, candidate: Candidate) -> list[tuple[LostRecord, tuple[int, ...]]]:
    """The distinct records `candidate` makes the other replicas lose, each with the replicas that held
    it (the same offset, epoch and batch checksum on several replicas is one record), by offset."""
    merged: dict[tuple[int, int, int], tuple[LostRecord, list[int]]] = {}
    for loss in candidate.losses:
        read = plan.reads.get(loss.broker)
        if read is None:
            continue
        for record in read.since(loss.start)[0]:
            key = (record.offset, record.leader_epoch, record.batch_crc)
            merged.setdefault(key, (record, []))[1].append(loss.broker)
    return [
        (record, tuple(brokers))
        for record, brokers in sorted(merged.values(), key=lambda v: (v[0].offset, v[0].leader_epoch))
    ]


def lost_outcomes(
    plan: PartitionRecovery, candidate: Candidate, producer_id: int, start: int
) -> dict[int, str]:
    """How the transaction `producer_id` opened at `start` ended in the logs `candidate` makes the others
    cut: {broker: "committed" or "aborted"} from the first marker of that producer after `start` in the
    part of each replica that is cut. Empty when no cut part holds one."""
    found = {}
    for loss in candidate.losses:
        read = plan.reads.get(loss.broker)
        if read is None:
            continue
        after = [(o, k) for o, p, k in read.markers if p == producer_id and o > start]
        if after and min(after)[0] >= loss.start:
            found[loss.broker] = min(after)[1]
    return found
