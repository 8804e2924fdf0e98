"""Transactions as an operator sees them: list, describe, find hanging ones, abort (kafka-transactions.sh).

Over the standard APIs only (ListTransactions, FindCoordinator with key type 1, DescribeTransactions,
DescribeProducers, WriteTxnMarkers), so it works against Apache Kafka as well. The rules are Kafka's
TransactionsCommand: a transaction is *hanging* when a partition holds an open transaction whose producer
wrote last more than --max-transaction-timeout ago and its coordinator does not know it (no transactional
id lists that producer id, the id is not found, or its description does not name the partition); an
abort by start offset finds the producer whose open transaction starts there and writes an ABORT marker
with its epoch and coordinator epoch (0 when unknown).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.cluster import TRANSACTION_KEY, Cluster
from kcli.errors import KcliError
from kcli.protocol.messages import build, nested_type

WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
INT16_MAX = 32767

TopicPartition = tuple[str, int]


class TransactionError(KcliError):
    """A transaction operation the cluster refused (the sentence says what and Kafka's error)."""


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1 when no transaction is open
    partitions: tuple[TopicPartition, ...]

    def to_json(self) -> dict[str, Any]:
        values = asdict(self)
        values["partitions"] = [f"{t}-{p}" for t, p in self.partitions]
        return values


@dataclass(frozen=True, slots=True)
class ProducerState:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int  # -1 when unknown
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int  # -1 when no transaction is open

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- list and describe -----------------------------------------------------------------------------


async def list_transactions(
    cluster: Cluster,
    *,
    producer_ids: tuple[int, ...] = (),
    states: tuple[str, ...] = (),
    duration_ms: int = -1,
) -> list[TransactionListing]:
    """Every transactional id every broker coordinates (ListTransactions to each broker); with
    `duration_ms` >= 0 only transactions running longer than that (ListTransactions v1+)."""
    listings = []
    for node, client in await cluster.all_nodes():
        cls = client.request_type(LIST_TRANSACTIONS)
        if duration_ms >= 0 and cls.__version__ < 1:
            raise TransactionError(
                f"broker {node} cannot filter transactions by duration (ListTransactions v0)."
            )
        response = await client.send(
            build(cls, state_filters=states, producer_id_filters=producer_ids, duration_filter=duration_ms)
        )
        _check(response.error_code, f"list the transactions of broker {node}")
        for t in response.transaction_states:
            listings.append(TransactionListing(t.transactional_id, node, t.producer_id, t.transaction_state))
    return sorted(listings, key=lambda t: t.transactional_id)


async def describe_transaction(cluster: Cluster, transactional_id: str) -> TransactionDescription | None:
    """DescribeTransactions at the id's coordinator; None when the coordinator does not know the id."""
    node, client = await transaction_coordinator(cluster, transactional_id)
    cls = client.request_type(DESCRIBE_TRANSACTIONS)
    response = await client.send(build(cls, transactional_ids=(transactional_id,)))
    [state] = response.transaction_states
    if state.error_code == ErrorCode.transactional_id_not_found:
        return None
    _check(state.error_code, f"describe transactional id {transactional_id!r}")
    start = state.transaction_start_time
    return TransactionDescription(
        node,
        transactional_id,
        state.producer_id,
        state.producer_epoch,
        state.transaction_state,
        int(state.transaction_timeout.total_seconds() * 1000)
        if hasattr(state.transaction_timeout, "total_seconds")
        else int(state.transaction_timeout),
        _epoch_ms(start),
        tuple((t.topic, p) for t in state.topics for p in t.partitions),
    )


async def transaction_coordinator(cluster: Cluster, transactional_id: str) -> tuple[int, Any]:
    """(node id, connection) of the transaction coordinator of `transactional_id`."""
    return await cluster.coordinator(transactional_id, TRANSACTION_KEY)


# --- producers, hanging transactions, abort --------------------------------------------------------


async def describe_producers(cluster: Cluster, partitions: list[TopicPartition]) -> list[ProducerState]:
    """The active producers of each partition (DescribeProducers at its leader)."""
    by_leader = await cluster.by_leader(partitions)
    leaderless = by_leader.pop(-1, [])
    if leaderless:
        topic, partition = leaderless[0]
        raise TransactionError(f"partition {topic}-{partition} has no leader or does not exist.")
    states = []
    for leader, wanted in sorted(by_leader.items()):
        client = await cluster.node(leader)
        cls = client.request_type(DESCRIBE_PRODUCERS)
        topic_cls = nested_type(cls, "TopicRequest")
        topics = defaultdict(list)
        for topic, partition in wanted:
            topics[topic].append(partition)
        response = await client.send(
            cls(topics=tuple(topic_cls(name=t, partition_indexes=tuple(p)) for t, p in topics.items()))
        )
        for topic in response.topics:
            for p in topic.partitions:
                _check(p.error_code, f"describe the producers of {topic.name}-{p.partition_index}")
                states.extend(
                    ProducerState(
                        topic.name,
                        p.partition_index,
                        s.producer_id,
                        s.producer_epoch,
                        s.coordinator_epoch,
                        s.last_sequence,
                        s.last_timestamp,
                        s.current_txn_start_offset,
                    )
                    for s in p.active_producers
                )
    return states


async def find_hanging(
    cluster: Cluster,
    *,
    topic: str | None = None,
    partition: int | None = None,
    broker_id: int | None = None,
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN * 60_000,
    now_ms: int | None = None,
) -> list[ProducerState]:
    """Open transactions older than the timeout that their coordinator does not know (Kafka's rule)."""
    if topic is None and broker_id is None:
        raise TransactionError("find-hanging needs --topic or --broker-id to limit the search.")
    if partition is not None and topic is None:
        raise TransactionError("--partition needs --topic.")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if topic is not None and partition is not None:
        partitions = [(topic, partition)]
    else:
        metadata = await cluster.metadata([topic] if topic is not None else None)
        if topic is not None and topic in metadata.errors:
            _check(metadata.errors[topic], f"describe topic {topic!r}")
        if broker_id is not None and broker_id not in metadata.brokers:
            # Beyond Kafka's tool, which finds nothing and says nothing: a typo must not read as "none hang".
            raise TransactionError(f"broker {broker_id} is not in the cluster metadata.")
        partitions = [
            tp
            for tp, leader in sorted(metadata.leaders.items())
            if (topic is None or tp[0] == topic) and (broker_id is None or leader == broker_id)
        ]
    candidates = [
        s
        for s in await describe_producers(cluster, partitions)
        if s.current_txn_start_offset >= 0 and now_ms - s.last_timestamp > max_transaction_timeout_ms
    ]
    if not candidates:
        return []
    producer_ids = tuple(sorted({s.producer_id for s in candidates}))
    ids = {
        t.producer_id: t.transactional_id for t in await list_transactions(cluster, producer_ids=producer_ids)
    }
    hanging = []
    descriptions: dict[str, TransactionDescription | None] = {}
    for state in candidates:
        transactional_id = ids.get(state.producer_id)
        if transactional_id is None:
            hanging.append(state)
            continue
        if transactional_id not in descriptions:
            descriptions[transactional_id] = await describe_transaction(cluster, transactional_id)
        description = descriptions[transactional_id]
        if description is None or (state.topic, state.partition) not in description.partitions:
            hanging.append(state)
    return hanging


async def abort_transaction(
    cluster: Cluster,
    topic: str,
    partition: int,
    *,
    start_offset: int | None = None,
    producer_id: int | None = None,
    producer_epoch: int | None = None,
    coordinator_epoch: int | None = None,
    commit: bool = False,
) -> ProducerState:
    """Write an ABORT marker to one partition for the producer whose open transaction starts at
    `start_offset`, or for the producer given by id, epoch and coordinator epoch. (`commit` writes a
    COMMIT marker instead: `kcli recover` ends a transaction whose marker an unclean election lost as
    that marker had.)

    As Kafka's AbortTransactionCommand, a start offset must be that of an open transaction (a producer
    without one answers -1, which matches nothing), and a coordinator epoch below 0 becomes 0. Beyond
    it: given by id, the producer must be one DescribeProducers lists with an open transaction on the
    partition (when the leader offers DescribeProducers), since a marker for any other producer id is
    written all the same and ends nothing; and --start-offset cannot be mixed with the id options.
    """
    explicit = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is not None:
        if any(v is not None for v in explicit):
            raise TransactionError(
                "give --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch, not both."
            )
        if start_offset < 0:
            raise TransactionError(
                f"--start-offset must be the first offset of an open transaction (0 or more), not {start_offset}."
            )
        found = [
            s
            for s in await describe_producers(cluster, [(topic, partition)])
            if s.current_txn_start_offset >= 0 and s.current_txn_start_offset == start_offset
        ]
        if not found:
            raise TransactionError(
                f"Could not find any open transactions starting at offset {start_offset} on partition "
                f"{topic}-{partition}."
            )
        state = found[0]
        coordinator_epoch = max(state.coordinator_epoch, 0)
    elif producer_id is None or producer_epoch is None or coordinator_epoch is None:
        raise TransactionError(
            "abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch."
        )
    else:
        if producer_id < 0 or not 0 <= producer_epoch <= INT16_MAX:
            raise TransactionError(
                f"--producer-id must be 0 or more and --producer-epoch between 0 and {INT16_MAX}."
            )
        coordinator_epoch = max(coordinator_epoch, 0)
        await _require_open(cluster, topic, partition, producer_id)
        state = ProducerState(topic, partition, producer_id, producer_epoch, coordinator_epoch, -1, -1, -1)
    metadata = await cluster.metadata([topic])
    leader = metadata.leaders.get((topic, partition), -1)
    if leader < 0:
        raise TransactionError(f"partition {topic}-{partition} has no leader or does not exist.")
    client = await cluster.node(leader)
    cls = client.request_type(WRITE_TXN_MARKERS)
    marker = nested_type(cls, "WritableTxnMarker")
    marker_topic = nested_type(cls, "WritableTxnMarkerTopic")
    response = await client.send(
        cls(
            markers=(
                build(
                    marker,
                    producer_id=state.producer_id,
                    producer_epoch=state.producer_epoch,
                    transaction_result=commit,
                    topics=(marker_topic(name=topic, partition_indexes=(partition,)),),
                    coordinator_epoch=coordinator_epoch,
                ),
            )
        )
    )
    [result] = response.markers[0].topics[0].partitions
    verb = "commit" if commit else "abort"
    _check(
        result.error_code, f"{verb} the transaction of producer {state.producer_id} on {topic}-{partition}"
    )
    return state


async def _require_open(cluster: Cluster, topic: str, partition: int, producer_id: int) -> None:
    """Refuse a producer id the partition's leader does not list with an open transaction; a leader
    without DescribeProducers (Kafka before 2.8) cannot tell, so the marker goes as given."""
    metadata = await cluster.metadata([topic])
    leader = metadata.leaders.get((topic, partition), -1)
    if leader >= 0 and DESCRIBE_PRODUCERS not in (await cluster.node(leader)).broker_versions:
        return
    states = {s.producer_id: s for s in await describe_producers(cluster, [(topic, partition)])}
    found = states.get(producer_id)
    if found is None:
        raise TransactionError(
            f"producer {producer_id} is not an active producer of {topic}-{partition}: nothing to abort "
            "(`kcli transactions find-hanging` lists the open transactions)."
        )
    if found.current_txn_start_offset < 0:
        raise TransactionError(
            f"producer {producer_id} has no open transaction on {topic}-{partition}: nothing to abort."
        )


def _check(error: ErrorCode, what: str) -> None:
    if error != ErrorCode.none:
        raise TransactionError(f"cannot {what}: {error.name.upper()}.")


def _epoch_ms(value: Any) -> int:
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return int(value) if value is not None else -1
