"""The acting half of `kcli recover partitions --execute`: elect the chosen replica of a partition that
lost its whole ISR, after copying what the other replicas are about to lose, then say what is left to
do. Standard admin APIs only; every action is a line of the journal (fsynced) before it is done.

1. Quarantine: the records the other replicas will truncate (read beforehand, see `online`) are
   produced, acks=all, to `<topic>.recovered` (created with one partition and the broker's default
   replication factor if missing), with their original topic, partition, offset, leader epoch and
   replicas in `kcli.recovered.*` headers (and, for a transactional record, its producer id and whether
   its transaction committed, aborted or is still open in that log); key, value, timestamp and headers
   are kept. Control records (transaction markers) are not data and are not copied.
2. Election: Kafka's controller elects, unclean, the first acceptable replica in the partition's
   replica order (PartitionChangeBuilder.electAnyLeader). When that is not the candidate, a
   reassignment to the same replicas with the candidate first comes before: it changes no replica set,
   so the controller completes it at once, and it is undone once the candidate leads. (Dropping the
   other replicas instead would make them delete their logs, quarantine or not; the reorder leaves every
   log where it is.) Then ElectLeaders UNCLEAN, and a wait until Metadata shows the candidate leading.
3. Transactions: an open transaction on the new leader whose marker only the cut replicas had would
   hang for ever (the coordinator has finished it and sends no marker again), holding back the last
   stable offset and every read_committed consumer. Where a cut log holds that marker, the same
   result is written (WriteTxnMarkers, as `kafka-transactions.sh abort` does, with COMMIT where the
   transaction had committed, so its partitions stay atomic); where none does and the coordinator no
   longer holds the partition in the transaction, it is aborted; where the coordinator still holds it,
   its own markers come and nothing is written.
4. After: the new log end and the groups whose committed offset lies above it: they must reset, e.g.
   with `kcli groups reset-offsets --to-latest`.

A second run after a partial one copies no record twice: records already in the quarantine (the same
topic, partition, offset and leader epoch in their headers) are left out.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import orjson
from kio.schema.errors import ErrorCode

from formats.records import RecordSpec, build_batch
from kcli.client import ClientError
from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.protocol.messages import build, nested_type
from ops.elect import ElectionType, TopicPartition, elect_leaders
from ops.groups import fetch_committed, list_groups
from ops.recover.candidates import Candidate, PartitionRecovery
from ops.recover.online import (
    LostRecord,
    RecoverPartitionsError,
    lost_outcomes,
    lost_records,
    read_from_broker,
)
from ops.topics import create_topic
from ops.transactions import (
    ProducerState,
    abort_transaction,
    describe_producers,
    describe_transaction,
    list_transactions,
)

TRANSACTION_STATE = "__transaction_state"
PENDING_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_OFFSETS = 2
QUARANTINE_SUFFIX = ".recovered"
HEADER_PREFIX = "kcli.recovered."
BATCH_RECORDS = 500
POLL_S = 0.25


class Journal:
    """journal.jsonl: one fsynced JSON line per action, written before the action is taken."""

    def __init__(self, path: Path) -> None:
        """Check the path now (one sentence if it cannot be a file); create it, and its dir, only at the
        first action, so a run with nothing to do leaves nothing behind."""
        self.path = path
        self._file: Any = None
        self.check_path(path)

    @staticmethod
    def check_path(path: Path) -> None:
        """One sentence when `path` cannot become the journal file; creates nothing."""
        if path.is_dir():
            raise KcliError(f"--journal {path} is a directory: give a file path.")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise KcliError(f"--journal {path}: {parent} is not a directory.")
                if not os.access(parent, os.W_OK | os.X_OK):
                    raise KcliError(f"--journal {path}: {parent} is not writable.")
                break

    def write(self, action: str, **fields: Any) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        line = {
            "time": datetime.datetime.now(UTC).isoformat(timespec="milliseconds"),
            "unixMs": int(time.time() * 1000),
            "action": action,
            **fields,
        }
        self._file.write(orjson.dumps(line) + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def quarantine_topic(topic: str) -> str:
    return topic + QUARANTINE_SUFFIX


def controller_pick(plan: PartitionRecovery, live: set[int]) -> int | None:
    """The replica the controller's unclean election takes (PartitionChangeBuilder.electAnyLeader): a
    live ISR or ELR member, else, with ELR on, the last known leader when it is the one live last known
    ELR member (KIP-966's balanced recovery), else the first live one in replica order."""
    for replica in plan.replicas:
        if (replica in plan.isr or replica in plan.elr) and replica in live:
            return replica
    if len(plan.last_known_elr) == 1 and plan.last_known_elr[0] in live:
        return plan.last_known_elr[0]
    return next((r for r in plan.replicas if r in live), None)


def check_recoverable(
    plan: PartitionRecovery, candidate: Candidate, *, live: set[int], allow_unread: bool = False
) -> None:
    """Raise RecoverPartitionsError with one sentence when the partition cannot be recovered by electing
    `candidate` as asked; checked for every partition before anything is written (the journal too)."""
    tp = f"{plan.topic}-{plan.partition}"
    if plan.leader >= 0:
        raise RecoverPartitionsError(
            f"{tp} has a leader (broker {plan.leader}): there is nothing to recover."
        )
    if not candidate.electable:
        raise RecoverPartitionsError(
            f"{tp}: broker {candidate.broker} cannot be elected: {candidate.why_not}."
        )
    unread = {b: why for b, why in plan.unread.items() if any(loss.broker == b for loss in candidate.losses)}
    unread.update({b: "its log could not be read" for b in candidate.unknown})
    if unread and not allow_unread:
        detail = "; ".join(f"broker {b}: {why}" for b, why in sorted(unread.items()))
        raise RecoverPartitionsError(
            f"{tp}: what broker {candidate.broker} would make the others lose cannot all be copied "
            f"({detail}); give their --logdir or --allow-unread-loss."
        )
    pick = controller_pick(plan, live)
    if pick != candidate.broker and plan.last_known_elr == [pick]:
        raise RecoverPartitionsError(
            f"{tp}: with eligible leader replicas on, the controller's unclean election takes the last known "
            f"leader, broker {pick}, while it is alive, whatever the replica order: choose it, or stop it first."
        )


async def recover_partition(
    cluster: Cluster,
    plan: PartitionRecovery,
    candidate: Candidate,
    journal: Journal,
    *,
    live: set[int],
    allow_unread: bool = False,
    timeout_s: float = 60.0,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Quarantine, elect, and report for one partition; returns the outcome as a JSON-ready dict."""
    tp = f"{plan.topic}-{plan.partition}"
    check_recoverable(plan, candidate, live=live, allow_unread=allow_unread)
    pick = controller_pick(plan, live)
    journal.write(
        "begin", partition=tp, candidate=candidate.broker, losses=[_loss_json(x) for x in candidate.losses]
    )
    copied = await _quarantine(cluster, plan, candidate, journal, say)
    reordered = None
    if pick != candidate.broker:
        reordered = [candidate.broker, *(r for r in plan.replicas if r != candidate.broker)]
        journal.write("reorder_replicas", partition=tp, replicas=reordered, was=plan.replicas)
        say(
            f"{tp}: replicas reordered to {reordered} so the unclean election takes broker {candidate.broker}"
        )
        await _reassign(cluster, plan.topic, plan.partition, reordered)
        await _wait_metadata(
            cluster, plan.topic, plan.partition, lambda p: list(p.replica_nodes) == reordered, timeout_s,
            f"the replicas of {tp} to read {reordered}",
        )  # fmt: skip
    journal.write("elect_unclean", partition=tp, candidate=candidate.broker)
    report = await elect_leaders(
        cluster, ElectionType.UNCLEAN, [TopicPartition(plan.topic, plan.partition)], timeout_s=timeout_s
    )
    outcome = report.outcomes[0]
    if outcome.error not in (ErrorCode.none, ErrorCode.election_not_needed):
        journal.write("elect_failed", partition=tp, error=outcome.error.name.upper())
        raise RecoverPartitionsError(
            f"{tp}: the unclean election failed: {outcome.error.name.upper()}"
            + (f" ({outcome.message})" if outcome.message else "")
            + "."
        )
    state = await _wait_metadata(
        cluster, plan.topic, plan.partition, lambda p: p.leader_id >= 0, timeout_s, f"a leader of {tp}"
    )
    if state.leader_id != candidate.broker:
        journal.write("other_leader", partition=tp, leader=state.leader_id)
        raise RecoverPartitionsError(
            f"{tp}: broker {state.leader_id} leads it now, not broker {candidate.broker} (did it come back?)."
        )
    journal.write("leader_elected", partition=tp, leader=candidate.broker)
    say(f"{tp}: broker {candidate.broker} leads")
    if reordered is not None:
        journal.write("restore_replicas", partition=tp, replicas=plan.replicas)
        await _reassign(cluster, plan.topic, plan.partition, plan.replicas)
        await _wait_metadata(
            cluster, plan.topic, plan.partition, lambda p: list(p.replica_nodes) == plan.replicas, timeout_s,
            f"the replicas of {tp} to read {plan.replicas} again",
        )  # fmt: skip
    log_end = await _log_end(cluster, plan.topic, plan.partition, timeout_s)
    transactions = await _settle_transactions(cluster, plan, candidate, journal, say)
    if any(t.get("result") for t in transactions):
        log_end = await _log_end(cluster, plan.topic, plan.partition, timeout_s)
    groups = await _groups_above(cluster, plan.topic, plan.partition, log_end)
    result = {
        "type": "recovered",
        "topic": plan.topic,
        "partition": plan.partition,
        "leader": candidate.broker,
        "logEndOffset": log_end,
        "quarantined": copied,
        "quarantineTopic": quarantine_topic(plan.topic) if copied else None,
        "replicasReordered": reordered is not None,
        "openTransactions": transactions,
        "groupsAboveLogEnd": groups,
    }
    journal.write("done", **{k: v for k, v in result.items() if k != "type"})
    return result


# --- the quarantine --------------------------------------------------------------------------------


async def _quarantine(
    cluster: Cluster,
    plan: PartitionRecovery,
    candidate: Candidate,
    journal: Journal,
    say: Callable[[str], None],
) -> int:
    records = lost_records(plan, candidate)
    if not records:
        return 0
    name = quarantine_topic(plan.topic)
    journal.write("create_quarantine_topic", topic=name)
    await create_topic(cluster, name, partitions=1, if_not_exists=True)
    leader = await _wait_metadata(cluster, name, 0, lambda p: p.leader_id >= 0, 60.0, f"a leader for {name}")
    there = await _quarantined(cluster, plan, leader.leader_id)
    records = [(r, b) for r, b in records if (r.offset, r.leader_epoch) not in there]
    if there:
        say(f"{plan.topic}-{plan.partition}: {len(there)} records already in {name} are not copied again")
    if not records:
        return 0
    client = await cluster.node(leader.leader_id)
    framer = client.produce_framer(name, acks=-1, timeout_ms=30000)
    for k in range(0, len(records), BATCH_RECORDS):
        chunk = records[k : k + BATCH_RECORDS]
        journal.write(
            "quarantine",
            topic=name,
            partition=f"{plan.topic}-{plan.partition}",
            firstOffset=chunk[0][0].offset,
            lastOffset=chunk[-1][0].offset,
            records=len(chunk),
        )
        batch = build_batch([_spec(plan, record, brokers) for record, brokers in chunk])
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def answered(answer: Any, error: ClientError | None, done: asyncio.Future[Any] = done) -> None:
            if not done.done():
                done.set_result((answer, error))

        client.produce(framer, 0, batch, answered)
        answer, error = await asyncio.wait_for(done, cluster.request_timeout + 30)
        if error is not None:
            raise RecoverPartitionsError(f"cannot write to {name}: {error}")
        if answer.error_code != ErrorCode.none:
            raise RecoverPartitionsError(f"cannot write to {name}: {answer.error_code.name.upper()}.")
    say(f"{plan.topic}-{plan.partition}: {len(records)} records copied to {name}")
    return len(records)


def _spec(plan: PartitionRecovery, record: LostRecord, brokers: tuple[int, ...]) -> RecordSpec:
    headers = [
        *record.headers,
        (HEADER_PREFIX + "topic", plan.topic.encode()),
        (HEADER_PREFIX + "partition", str(plan.partition).encode()),
        (HEADER_PREFIX + "offset", str(record.offset).encode()),
        (HEADER_PREFIX + "leader.epoch", str(record.leader_epoch).encode()),
        (HEADER_PREFIX + "replicas", ",".join(map(str, brokers)).encode()),
    ]
    if record.transaction is not None:  # consumers of the quarantine must know aborted and open ones
        headers.append((HEADER_PREFIX + "producer.id", str(record.producer_id).encode()))
        headers.append((HEADER_PREFIX + "transaction", record.transaction.encode()))
    return RecordSpec(record.timestamp, record.key, record.value, headers)


# --- the cluster -----------------------------------------------------------------------------------


async def _reassign(cluster: Cluster, topic: str, partition: int, replicas: list[int]) -> None:
    client = cluster.bootstrap
    cls = client.request_type(ALTER_PARTITION_REASSIGNMENTS)
    topic_cls = nested_type(cls, "ReassignableTopic")
    partition_cls = nested_type(cls, "ReassignablePartition")
    request = build(
        cls,
        timeout=datetime.timedelta(seconds=30),
        allow_replication_factor_change=True,
        topics=(
            topic_cls(
                name=topic, partitions=(partition_cls(partition_index=partition, replicas=tuple(replicas)),)
            ),
        ),
    )
    response = await client.send(request)
    if response.error_code != ErrorCode.none:
        raise RecoverPartitionsError(
            f"the reassignment of {topic}-{partition} was refused: {response.error_code.name.upper()}"
            + (f" ({response.error_message})" if response.error_message else "")
            + "."
        )
    answer = response.responses[0].partitions[0]
    if answer.error_code != ErrorCode.none:
        raise RecoverPartitionsError(
            f"the reassignment of {topic}-{partition} was refused: {answer.error_code.name.upper()}"
            + (f" ({answer.error_message})" if answer.error_message else "")
            + "."
        )


async def _wait_metadata(
    cluster: Cluster, topic: str, partition: int, check: Callable[[Any], bool], timeout_s: float, what: str
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        response = await cluster.metadata_response([topic])
        for t in response.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition and check(p):
                    return p
        if time.monotonic() > deadline:
            raise RecoverPartitionsError(f"timed out after {timeout_s:g} s waiting for {what}.")
        await asyncio.sleep(POLL_S)


async def _log_end(cluster: Cluster, topic: str, partition: int, timeout_s: float) -> int:
    """The new leader's high watermark, once it answers (a new leader takes a moment to know it leads)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = await _wait_metadata(
            cluster, topic, partition, lambda p: p.leader_id >= 0, timeout_s, "a leader"
        )
        client = await cluster.node(state.leader_id)
        cls = client.request_type(LIST_OFFSETS)
        request = build(
            cls,
            replica_id=-1,
            isolation_level=0,
            topics=(
                nested_type(cls, "ListOffsetsTopic")(
                    name=topic,
                    partitions=(
                        build(
                            nested_type(cls, "ListOffsetsPartition"),
                            partition_index=partition,
                            current_leader_epoch=-1,
                            timestamp=-1,
                        ),
                    ),
                ),
            ),
            timeout=datetime.timedelta(seconds=30),
        )
        answer = (await client.send(request)).topics[0].partitions[0]
        if answer.error_code == ErrorCode.none:
            return answer.offset
        if time.monotonic() > deadline:
            raise RecoverPartitionsError(
                f"the new leader of {topic}-{partition} does not answer ListOffsets: {answer.error_code.name.upper()}."
            )
        await asyncio.sleep(POLL_S)


async def _quarantined(cluster: Cluster, plan: PartitionRecovery, leader: int) -> set[tuple[int, int]]:
    """(offset, leader epoch) of the records of this partition already in the quarantine topic: within
    one leader epoch an offset names one record."""
    name = quarantine_topic(plan.topic)
    end = await _log_end(cluster, name, 0, 60.0)
    if end == 0:
        return set()
    read = await read_from_broker(cluster, leader, (name, 0), 0, end)
    found = set()
    for record in read.records:
        headers = {k: v for k, v in record.headers if v is not None}
        topic = headers.get(HEADER_PREFIX + "topic", b"").decode(errors="replace")
        partition = headers.get(HEADER_PREFIX + "partition", b"")
        if topic == plan.topic and partition == str(plan.partition).encode():
            found.add((int(headers[HEADER_PREFIX + "offset"]), int(headers[HEADER_PREFIX + "leader.epoch"])))
    return found


async def _settle_transactions(
    cluster: Cluster,
    plan: PartitionRecovery,
    candidate: Candidate,
    journal: Journal,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """End each open transaction of the new leader that nobody else will end (see the module's doc)."""
    tp = f"{plan.topic}-{plan.partition}"
    try:
        states = [
            s
            for s in await describe_producers(cluster, [(plan.topic, plan.partition)])
            if s.current_txn_start_offset >= 0
        ]
    except Exception as exc:  # a report line, never a failed recovery: the election is done
        return [{"error": str(exc)}]
    settled = []
    for state in states:
        entry: dict[str, Any] = {
            "producerId": state.producer_id,
            "producerEpoch": state.producer_epoch,
            "startOffset": state.current_txn_start_offset,
        }
        outcomes = lost_outcomes(plan, candidate, state.producer_id, state.current_txn_start_offset)
        if len(set(outcomes.values())) == 1:
            result = next(iter(outcomes.values()))
            entry["why"] = f"its marker was on broker(s) {','.join(map(str, sorted(outcomes)))} only"
        else:
            view = await _coordinator_view(cluster, state)
            result = "aborted" if view == "ended" else None
            entry["why"] = {
                "ended": "its coordinator has ended it, its marker is lost with its outcome",
                "pending": "its coordinator still holds it: its markers will come",
            }.get(view, view)
        if result is not None:
            journal.write(
                "write_txn_marker",
                partition=tp,
                producerId=state.producer_id,
                startOffset=state.current_txn_start_offset,
                result=result,
            )
            await abort_transaction(
                cluster,
                plan.topic,
                plan.partition,
                start_offset=state.current_txn_start_offset,
                commit=result == "committed",
            )
            say(f"{tp}: the transaction of producer {state.producer_id} from offset "
                f"{state.current_txn_start_offset} {result} ({entry['why']})")  # fmt: skip
        entry["result"] = result
        settled.append(entry)
    return settled


async def _coordinator_view(cluster: Cluster, state: ProducerState) -> str:
    """Answers "pending" while the producer's coordinator holds the partition in its transaction, "ended" when it
    does not, else why it cannot be told."""
    tp = (state.topic, state.partition)
    try:
        listed = await list_transactions(cluster, producer_ids=(state.producer_id,))
        if not listed:
            offline = [p for (t, p), leader in (await cluster.metadata([TRANSACTION_STATE])).leaders.items()
                       if t == TRANSACTION_STATE and leader < 0]  # fmt: skip
            if offline:
                return f"its coordinator may be on a {TRANSACTION_STATE} partition without a leader"
            return "ended"
        description = await describe_transaction(cluster, listed[0].transactional_id)
    except Exception as exc:  # noqa: BLE001 - said in the report, never a failed recovery
        return f"its coordinator cannot be asked ({exc})"
    if description is None:
        return "ended"
    if (
        description.producer_id == state.producer_id
        and description.state in PENDING_STATES
        and tp in description.partitions
    ):
        return "pending"
    return "ended"


async def _groups_above(cluster: Cluster, topic: str, partition: int, log_end: int) -> list[dict[str, Any]]:
    """Groups whose committed offset of the partition lies above its new log end."""
    found = []
    for group in await list_groups(cluster):
        try:
            committed = await fetch_committed(cluster, group.group_id)
        except Exception:  # noqa: S112 - a group that cannot be read is not one to report
            continue
        offset = committed.get((topic, partition))
        if offset is not None and offset > log_end:
            found.append({"group": group.group_id, "committedOffset": offset, "logEndOffset": log_end})
    return found


def _loss_json(loss: Any) -> dict[str, Any]:
    return {
        "broker": loss.broker,
        "startOffset": loss.start,
        "endOffset": loss.end,
        "records": loss.records,
        "bytes": loss.bytes,
    }
