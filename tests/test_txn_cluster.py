"""Transactions across a 3-node KRaft cluster: the markers go to partition leaders on other brokers.

One combined-mode cluster of three real `kcli broker start` processes (laid out as `kcli cluster start`
does) serves the module. __transaction_state and __consumer_offsets have three partitions each (one per
broker, replication factor 1); the transactional id is picked so that its coordinator is one broker,
C, and every data partition is placed (explicit replica assignments) on the two others, so no marker
can be written in-process: each goes to another broker as WriteTxnMarkers. The group id is picked so
that its __consumer_offsets partition is not on C either (the offsets marker goes remote too), and so
the partitions' leaders also verify the producer's partitions remotely (AddPartitionsToTxn VerifyOnly).

1. A confluent-kafka transactional producer commits, aborts and commits again across every partition;
   a read_committed consumer sees exactly the committed records, in order, and none of the aborted.
2. Consume-transform-produce with send_offsets_to_transaction: an aborted round leaves the group's
   offsets where they were, a committed one moves them to the end, and the output holds one
   transformed record per input record.
3. The broker leading half the data partitions is killed (kill -9) after the records are written and
   before the commit: EndTxn answers, the markers for the live broker are written, and the others
   follow once it is back; the next transaction waits for that and then commits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kraft_cluster import LocalKraftCluster, wait_for

from formats.internal import offsets_partition_for, txn_partition_for
from kcli.client import KafkaClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(420)

INTERNAL_PARTITIONS = 3
OVERRIDES = (
    f"transaction.state.log.num.partitions={INTERNAL_PARTITIONS}",
    f"offsets.topic.num.partitions={INTERNAL_PARTITIONS}",
    "transaction.state.log.min.isr=1",
    "broker.session.timeout.ms=6000",
)
FIND_COORDINATOR = 10
TXN_TIMEOUT_MS = 120_000
"""Longer than any pause in these tests: no transaction may be aborted by the coordinator's timeout."""


class TxnCluster:
    """The running cluster, the transaction coordinator C and the two other brokers."""

    def __init__(self, cluster: LocalKraftCluster) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 20000})
        self.txn_leaders = self.leaders("__transaction_state")
        self.offsets_leaders = self.leaders("__consumer_offsets")
        ids = sorted(cluster.nodes)
        self.coordinator = self.txn_leaders[0]
        self.others = [n for n in ids if n != self.coordinator]

    def leaders(self, topic: str) -> dict[int, int]:
        def known() -> dict[int, int] | None:
            metadata = self.admin.list_topics(topic, timeout=20)
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or len(found.partitions) != INTERNAL_PARTITIONS:
                return None
            leaders = {p: info.leader for p, info in found.partitions.items()}
            return leaders if all(leader >= 0 for leader in leaders.values()) else None

        return wait_for(f"the leaders of {topic}", known, 60, interval=0.5)

    def transactional_id(self, prefix: str) -> str:
        """An id whose __transaction_state partition is led by C."""
        for i in range(10_000):
            candidate = f"{prefix}-{i}"
            if self.txn_leaders[txn_partition_for(candidate, INTERNAL_PARTITIONS)] == self.coordinator:
                return candidate
        raise AssertionError("no transactional id hashes to the coordinator's partition")

    def group_id(self, prefix: str) -> str:
        """A group whose __consumer_offsets partition is on another broker than C."""
        for i in range(10_000):
            candidate = f"{prefix}-{i}"
            if (
                self.offsets_leaders[offsets_partition_for(candidate, INTERNAL_PARTITIONS)]
                != self.coordinator
            ):
                return candidate
        raise AssertionError("no group id hashes off the coordinator")

    def create_topic(self, name: str, partitions: int) -> list[int]:
        """A topic whose partitions alternate between the two brokers that are not C; their leaders."""
        assignment = [[self.others[i % 2]] for i in range(partitions)]
        futures = self.admin.create_topics(
            [NewTopic(name, partitions, replica_assignment=assignment)], request_timeout=30
        )
        futures[name].result(40)

        def placed() -> bool:
            found = self.admin.list_topics(name, timeout=20).topics.get(name)
            return (
                found is not None
                and found.error is None
                and [found.partitions[p].leader for p in range(partitions)] == [a[0] for a in assignment]
            )

        wait_for(f"{name} to be led as assigned", placed, 60, interval=0.5)
        return [a[0] for a in assignment]


async def _find_coordinators(bootstrap: str) -> bool:
    """FindCoordinator for a group and a transactional id, so both internal topics get created."""
    async with await KafkaClient.connect(bootstrap) as client:
        cls = client.request_type(FIND_COORDINATOR, 4)
        answers = []
        for key_type, key in ((0, "warm-up-group"), (1, "warm-up-txn")):
            response = await client.send(cls(key_type=key_type, coordinator_keys=(key,)))
            answers.append(all(c.error_code == 0 for c in response.coordinators))
        return all(answers)


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxnCluster]:
    cluster = LocalKraftCluster(tmp_path_factory.mktemp("txn-cluster"), 3, OVERRIDES)
    try:
        cluster.start()
        cluster.status(timeout=60, what="a controller leader")
        wait_for(
            "the internal topics",
            lambda: asyncio.run(_find_coordinators(cluster[1].bootstrap)),
            90,
            interval=1.0,
        )
        yield TxnCluster(cluster)
        for node in cluster.nodes.values():
            assert "Traceback" not in node.log(), f"node {node.node_id} logged a traceback:\n{node.log()}"
    finally:
        cluster.kill_all()


def transactional_producer(bootstrap: str, transactional_id: str) -> Any:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "message.timeout.ms": 120_000,
            "socket.timeout.ms": 30_000,
        }
    )
    producer.init_transactions(90)
    return producer


def produce_round(producer: Any, topic: str, partitions: int, tag: str, per_partition: int) -> list[bytes]:
    values = []
    for partition in range(partitions):
        for i in range(per_partition):
            value = f"{tag}-{partition}-{i}".encode()
            producer.produce(topic, value=value, partition=partition)
            values.append(value)
    assert producer.flush(90) == 0, "records still unsent after 90 s"
    return values


def read_committed(
    bootstrap: str, topic: str, partitions: list[int], expected: int, timeout: float = 90.0
) -> dict[int, list[bytes]]:
    """Every record a read_committed consumer gets from the start of `partitions`, once it has at least
    `expected` of them and has reached the end (the last stable offset) of each partition, and then
    the high watermark of each: no open transaction holds records back that could still show."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "socket.timeout.ms": 30_000,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    got: dict[int, list[bytes]] = {p: [] for p in partitions}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
            else:
                got[message.partition()].append(message.value())
                at_end.discard(message.partition())
            if sum(len(v) for v in got.values()) >= expected and at_end >= set(partitions):
                break
        # Records past the expected count could only come from above the last stable offset: read on
        # until every partition's position (past aborted records and markers too) is its high
        # watermark, where nothing is left to show. (This was a last poll of 2 s for any record.)
        tps = [TopicPartition(topic, p) for p in partitions]
        while time.monotonic() < deadline:
            if {tp.partition: tp.offset for tp in consumer.position(tps)} == high_watermarks(
                bootstrap, topic, partitions
            ):
                break
            while (message := consumer.poll(0.2)) is not None:
                if not message.error():
                    got[message.partition()].append(message.value())
    finally:
        consumer.close()
    return got


def high_watermarks(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int | None]:
    """Each partition's high watermark (ListOffsets latest, read_uncommitted) through kcli's client. A
    read_committed consumer's own query answers the last stable offset instead, and waits behind its
    fetch."""
    from kcli.cluster import Cluster
    from ops.groups import list_offsets

    async def ask() -> dict[int, int | None]:
        async with await Cluster.connect(bootstrap, request_timeout=10.0) as cluster:
            found = await list_offsets(cluster, [(topic, p) for p in partitions], -1)
        return {p: found.get((topic, p)) for p in partitions}

    return asyncio.run(ask())


def by_partition(values: list[bytes]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for value in values:
        partition = int(value.split(b"-")[-2])
        out.setdefault(partition, []).append(value)
    return out


# --- 1. commit and abort across every partition ----------------------------------------------------------


def test_commit_and_abort_across_brokers_read_committed(txn_cluster: TxnCluster) -> None:
    topic, partitions = "txn-spread", 4
    leaders = txn_cluster.create_topic(topic, partitions)
    assert txn_cluster.coordinator not in leaders
    producer = transactional_producer(txn_cluster.bootstrap, txn_cluster.transactional_id("spread"))

    producer.begin_transaction()
    first = produce_round(producer, topic, partitions, "c1", 5)
    producer.commit_transaction(90)

    producer.begin_transaction()
    aborted = produce_round(producer, topic, partitions, "a1", 5)
    producer.abort_transaction(90)

    producer.begin_transaction()
    second = produce_round(producer, topic, partitions, "c2", 5)
    producer.commit_transaction(90)

    committed = first + second
    got = read_committed(txn_cluster.bootstrap, topic, list(range(partitions)), len(committed))
    expected = by_partition(committed)
    assert got == {p: expected[p] for p in range(partitions)}
    seen = {v for values in got.values() for v in values}
    assert not seen & set(aborted), "a read_committed consumer saw aborted records"


# --- 2. consume-transform-produce ------------------------------------------------------------------------


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=60)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in answer}


def test_consume_transform_produce_commits_offsets_in_the_transaction(txn_cluster: TxnCluster) -> None:
    source, sink, partitions, per_partition = "ctp-in", "ctp-out", 2, 10
    txn_cluster.create_topic(source, partitions)
    txn_cluster.create_topic(sink, partitions)
    group = txn_cluster.group_id("ctp-group")
    plain = Producer({"bootstrap.servers": txn_cluster.bootstrap, "acks": "all"})
    inputs = produce_round(plain, source, partitions, "in", per_partition)

    consumer = Consumer(
        {
            "bootstrap.servers": txn_cluster.bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "socket.timeout.ms": 30_000,
        }
    )
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    producer = transactional_producer(txn_cluster.bootstrap, txn_cluster.transactional_id("ctp"))

    def consume(count: int) -> list[Any]:
        messages: list[Any] = []
        deadline = time.monotonic() + 90
        while len(messages) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(messages), 1.0):
                if not message.error():
                    messages.append(message)
        assert len(messages) == count, f"consumed {len(messages)} of {count} records"
        return messages

    def transform(messages: list[Any]) -> None:
        for message in messages:
            producer.produce(sink, value=b"out-" + message.value(), partition=message.partition())
        positions = consumer.position([TopicPartition(source, p) for p in range(partitions)])
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 90)

    # An aborted round: its output vanishes and the group's offsets do not move.
    producer.begin_transaction()
    transform(consume(len(inputs)))
    producer.abort_transaction(90)
    assert committed_offsets(txn_cluster.bootstrap, group, source, partitions) == dict.fromkeys(
        range(partitions),
        -1001,  # OFFSET_INVALID: nothing committed
    )

    # Then the same records again, committed.
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    producer.begin_transaction()
    transform(consume(len(inputs)))
    producer.commit_transaction(90)
    consumer.close()

    wait_for(
        "the committed offsets at the end of the input",
        lambda: (
            committed_offsets(txn_cluster.bootstrap, group, source, partitions)
            == dict.fromkeys(range(partitions), per_partition)
        ),
        60,
        interval=1.0,
    )
    got = read_committed(txn_cluster.bootstrap, sink, list(range(partitions)), len(inputs))
    expected = by_partition(inputs)
    assert got == {p: [b"out-" + v for v in expected[p]] for p in range(partitions)}


# --- 3. a data partition's broker restarts mid-transaction -------------------------------------------------


def test_commit_completes_after_a_data_broker_restarts(txn_cluster: TxnCluster) -> None:
    topic, partitions = "txn-restart", 4
    leaders = txn_cluster.create_topic(topic, partitions)
    down, up = txn_cluster.others
    producer = transactional_producer(txn_cluster.bootstrap, txn_cluster.transactional_id("restart"))

    producer.begin_transaction()
    values = produce_round(producer, topic, partitions, "r1", 5)
    node = txn_cluster.cluster[down]
    node.kill()  # kill -9 after the records are written, before the commit
    producer.commit_transaction(90)  # EndTxn answers once PrepareCommit is written

    expected = by_partition(values)
    live = [p for p in range(partitions) if leaders[p] == up]
    got = read_committed(txn_cluster.bootstrap, topic, live, sum(len(expected[p]) for p in live))
    assert got == {p: expected[p] for p in live}, "the live broker's partitions did not get their marker"

    node.start()
    node.wait_ready()
    got = read_committed(txn_cluster.bootstrap, topic, list(range(partitions)), len(values), timeout=150)
    assert got == {p: expected[p] for p in range(partitions)}

    # The next transaction starts once the last one is complete, and commits everywhere.
    producer.begin_transaction()
    more = produce_round(producer, topic, partitions, "r2", 3)
    producer.commit_transaction(90)
    expected = by_partition(values + more)
    got = read_committed(txn_cluster.bootstrap, topic, list(range(partitions)), len(values + more))
    assert got == {p: expected[p] for p in range(partitions)}
    coordinator_log = txn_cluster.cluster[txn_cluster.coordinator].log()
    assert "Traceback" not in coordinator_log
