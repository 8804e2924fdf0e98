"""Every client against a 3-node cluster with replication, one broker killed (kill -9) mid-way.

Three combined-mode nodes (tests/kraft_cluster.py runs them; the replication settings are
test_replication_cluster's), one cluster for the module: each test uses its own topics, group and
transactional id, starts again a node an earlier test left down and waits for full ISRs first. Data
topics of replication factor 3 with min.insync.replicas 2, __consumer_offsets and __transaction_state at
factor 3 (transactions' min ISR 2), as `kcli cluster start` writes them. The broker killed is the one FindCoordinator names for the group (it leads the
group's __consumer_offsets partition) and it leads a third of the data partitions too; it is not the
active controller, so what is measured is the group's failover, not a metadata election.

1. confluent-kafka, kafka-python and aiokafka: an idempotent acks=all producer and a consumer group
   (subscribe, explicit synchronous commits) on a 6-partition topic; the coordinator's broker is killed
   while records are in flight. The group goes on with the new leader of its __consumer_offsets
   partition, which loaded the group's offsets from its replica: every acknowledged record is consumed,
   a record is read again only if it was not committed when it was read again, and a new consumer of
   the group starts exactly at the committed offsets. kcat (confluent's test) then produces and
   consumes, as a group too, through the surviving brokers.
2. Transactions: a confluent-kafka consume-transform-produce loop (send_offsets_to_transaction) whose
   transaction coordinator's broker (leader of the transactional id's __transaction_state partition)
   is killed in the middle of a transaction (records written, offsets sent, no EndTxn yet). The producer
   recovers on the new coordinator, which loaded the transaction state from its replica; the group's
   offsets end at the end of the input and read_committed shows each input record's output exactly once
   and nothing of the aborted transactions. The group's coordinator is on a surviving broker: librdkafka
   caches the group coordinator of send_offsets_to_transaction and, once a dead broker has left
   Metadata (as a fenced one does, in Kafka too), waits on it past the call's timeout
   (confluentinc/librdkafka#5511, #5456).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pytest
from kraft_cluster import REPLICATION, LocalKraftCluster, admin, create_topic, wait_for

from formats.internal import offsets_partition_for, txn_partition_for
from kcli.client import KafkaClient

pytestmark = pytest.mark.timeout(180)

T = TypeVar("T")

OFFSETS_PARTITIONS = 6
TXN_PARTITIONS = 3
OVERRIDES = (
    *REPLICATION,
    f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}",
    f"transaction.state.log.num.partitions={TXN_PARTITIONS}",
    "group.initial.rebalance.delay.ms=500",
    "leader.imbalance.check.interval.seconds=1",
)
"""Fewer internal partitions than Kafka's 50: three Python brokers replicate every one of them. The
preferred-leader pass every second gives a returning broker its leaderships back at once."""
DATA_PARTITIONS = 6
ASSIGNMENT = [[1 + (p + k) % 3 for k in range(3)] for p in range(DATA_PARTITIONS)]
"""Each broker leads two data partitions and follows the four others."""
FIND_COORDINATOR = 10
CLIENT_SESSION_MS = 10_000
"""The consumers' session: longer than a broker's fencing (4 s), so a member outlives the failover."""


# --- the cluster -----------------------------------------------------------------------------------------


async def _find_coordinator(bootstrap: str, key_type: int, key: str) -> int | None:
    async with await KafkaClient.connect(bootstrap) as client:
        cls = client.request_type(FIND_COORDINATOR, 4)
        response = await client.send(cls(key_type=key_type, coordinator_keys=(key,)))
        [answer] = response.coordinators
        return answer.node_id if answer.error_code == 0 else None


def find_coordinator(cluster: LocalKraftCluster, key_type: int, key: str) -> int | None:
    """The node a live broker names as the coordinator of a group (0) or transactional id (1)."""
    for node in cluster.nodes.values():
        if node.running:
            try:
                return asyncio.run(_find_coordinator(node.bootstrap, key_type, key))
            except (TimeoutError, OSError):
                continue
    return None


def leaders(
    cluster: LocalKraftCluster, topic: str, partitions: int, full_isr: bool = False
) -> dict[int, int] | None:
    """Each partition's leader as Metadata shows it, or None while one has none (or, with `full_isr`,
    while one's ISR is not all three brokers)."""
    found = admin(cluster.live_bootstrap()).list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None or len(found.partitions) != partitions:
        return None
    infos = found.partitions.values()
    if any(i.leader < 0 or (full_isr and sorted(i.isrs) != [1, 2, 3]) for i in infos):
        return None
    return {p: i.leader for p, i in found.partitions.items()}


@dataclass
class Setup:
    cluster: LocalKraftCluster
    controller: int
    offsets_leaders: dict[int, int]
    txn_leaders: dict[int, int]

    def group_led_off_the_controller(self, prefix: str) -> tuple[str, int]:
        """(group id, its coordinator) for a group whose coordinator is not the active controller."""
        for i in range(1000):
            group = f"{prefix}-{i}"
            leader = self.offsets_leaders[offsets_partition_for(group, OFFSETS_PARTITIONS)]
            if leader != self.controller:
                found = find_coordinator(self.cluster, 0, group)
                assert found == leader, f"FindCoordinator names {found} for {group}, Metadata {leader}"
                return group, leader
        raise AssertionError("no group id off the controller")

    def group_led_by(self, node_id: int, prefix: str) -> str:
        """A group id whose coordinator is `node_id`."""
        for i in range(1000):
            group = f"{prefix}-{i}"
            if self.offsets_leaders[offsets_partition_for(group, OFFSETS_PARTITIONS)] == node_id:
                assert find_coordinator(self.cluster, 0, group) == node_id
                return group
        raise AssertionError(f"no group id led by {node_id}")

    def data_topic(self, topic: str) -> None:
        create_topic(self.cluster.bootstrap, topic, ASSIGNMENT, **{"min.insync.replicas": "2"})
        wait_for(
            f"{topic} led as assigned with full ISRs",
            lambda: (
                leaders(self.cluster, topic, DATA_PARTITIONS, full_isr=True)
                == {p: a[0] for p, a in enumerate(ASSIGNMENT)}
            ),
            60,
            interval=0.25,
        )


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKraftCluster]:
    """The module's three nodes (a cluster of their own for each test cost a start and the internal
    topics' creation and replication each time); every node left running is killed by PID at the end."""
    cluster = LocalKraftCluster(tmp_path_factory.mktemp("cluster-clients"), 3, (*REPLICATION, *OVERRIDES))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()


def prepare(cluster: LocalKraftCluster) -> Setup:
    """Every node running (one an earlier test killed is started again), both internal topics created
    (FindCoordinator does it) and fully replicated."""
    down = [node for node in cluster.nodes.values() if not node.running]
    for node in down:
        node.start()
    for node in down:
        node.wait_ready()
    status = cluster.status(timeout=60, what="a controller leader")
    wait_for(
        "the internal topics",
        lambda: find_coordinator(cluster, 0, "warm-up") and find_coordinator(cluster, 1, "warm-up"),
        90,
        interval=0.5,
    )
    offsets_leaders = wait_for(
        "__consumer_offsets fully replicated",
        lambda: leaders(cluster, "__consumer_offsets", OFFSETS_PARTITIONS, full_isr=True),
        60,
        interval=0.5,
    )
    txn_leaders = wait_for(
        "__transaction_state fully replicated",
        lambda: leaders(cluster, "__transaction_state", TXN_PARTITIONS, full_isr=True),
        60,
        interval=0.5,
    )
    return Setup(cluster, status.leader_id, offsets_leaders, txn_leaders)


def kill(cluster: LocalKraftCluster, node_id: int) -> float:
    cluster[node_id].kill()
    return time.monotonic()


def assert_no_traceback(cluster: LocalKraftCluster) -> None:
    for node in cluster.nodes.values():
        assert "Traceback" not in node.log(), f"node {node.node_id} logged a traceback:\n{node.log()}"


# --- the clients, behind one shape ------------------------------------------------------------------------

Record = tuple[int, int, bytes]  # partition, offset, value


class WriteSide(Protocol):
    acked: dict[tuple[int, int], bytes]
    failed: list[tuple[bytes, str]]
    sent: int

    def send(self, topic: str, partition: int, value: bytes) -> None: ...
    def pending(self) -> int: ...
    def close(self) -> None: ...


class ReadSide(Protocol):
    def poll(self, timeout: float) -> list[Record]: ...
    def commit(self, topic: str, positions: dict[int, int]) -> str | None: ...
    def close(self) -> None: ...


@dataclass
class Acks:
    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)
    failed: list[tuple[bytes, str]] = field(default_factory=list)
    sent: int = 0


class ConfluentWriter(Acks):
    def __init__(self, bootstrap: str) -> None:
        super().__init__()
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )

    def send(self, topic: str, partition: int, value: bytes) -> None:
        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.acked[msg.partition(), msg.offset()] = msg.value()
            else:
                self.failed.append((msg.value(), err.name()))

        self.producer.produce(topic, value=value, partition=partition, on_delivery=done)
        self.sent += 1
        self.producer.poll(0)

    def pending(self) -> int:
        self.producer.poll(0)
        return self.sent - len(self.acked) - len(self.failed)

    def close(self) -> None:
        assert self.producer.flush(30) == 0


class ConfluentReader:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": CLIENT_SESSION_MS,
                "heartbeat.interval.ms": 1000,
            }
        )
        self.consumer.subscribe([topic])

    def poll(self, timeout: float) -> list[Record]:
        return [
            (m.partition(), m.offset(), m.value())
            for m in self.consumer.consume(500, timeout)
            if m.error() is None
        ]

    def commit(self, topic: str, positions: dict[int, int]) -> str | None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            answer = self.consumer.commit(
                offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False
            )
        except KafkaException as exc:
            return str(exc)
        errors = [str(tp.error) for tp in answer or () if tp.error is not None]
        return "; ".join(errors) or None

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonWriter(Acks):
    def __init__(self, bootstrap: str) -> None:
        super().__init__()
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=30_000,
            delivery_timeout_ms=120_000,
        )

    def send(self, topic: str, partition: int, value: bytes) -> None:
        future = self.producer.send(topic, value=value, partition=partition)
        self.sent += 1
        future.add_callback(lambda meta: self.acked.__setitem__((meta.partition, meta.offset), value))
        future.add_errback(lambda exc: self.failed.append((value, repr(exc))))

    def pending(self) -> int:
        return self.sent - len(self.acked) - len(self.failed)

    def close(self) -> None:
        self.producer.flush(30)
        self.producer.close(10)


class KafkaPythonReader:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=CLIENT_SESSION_MS,
            heartbeat_interval_ms=1000,
            request_timeout_ms=30_000,
        )

    def poll(self, timeout: float) -> list[Record]:
        batches = self.consumer.poll(timeout_ms=int(timeout * 1000))
        return [(tp.partition, m.offset, m.value) for tp, messages in batches.items() for m in messages]

    def commit(self, topic: str, positions: dict[int, int]) -> str | None:
        from kafka import OffsetAndMetadata, TopicPartition
        from kafka.errors import KafkaError

        try:
            self.consumer.commit(
                {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()}
            )
        except KafkaError as exc:
            return repr(exc)
        return None

    def close(self) -> None:
        self.consumer.close()


class LoopThread:
    """An event loop on a thread of its own, so aiokafka's heartbeats and sends go on between calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class AiokafkaWriter(Acks):
    def __init__(self, loop: LoopThread, bootstrap: str) -> None:
        super().__init__()
        from aiokafka import AIOKafkaProducer

        async def make() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                acks="all",
                enable_idempotence=True,
                linger_ms=5,
                request_timeout_ms=60_000,
            )
            await producer.start()
            return producer

        self.loop = loop
        self.producer = loop.run(make())

    def send(self, topic: str, partition: int, value: bytes) -> None:
        async def send() -> None:
            future = await self.producer.send(topic, value=value, partition=partition)

            def done(f: asyncio.Future[Any]) -> None:
                if f.exception() is None:
                    meta = f.result()
                    self.acked[meta.partition, meta.offset] = value
                else:
                    self.failed.append((value, repr(f.exception())))

            future.add_done_callback(done)

        self.loop.run(send())
        self.sent += 1

    def pending(self) -> int:
        return self.sent - len(self.acked) - len(self.failed)

    def close(self) -> None:
        self.loop.run(self.producer.stop())


class AiokafkaReader:
    def __init__(self, loop: LoopThread, bootstrap: str, group: str, topic: str) -> None:
        from aiokafka import AIOKafkaConsumer

        async def make() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=CLIENT_SESSION_MS,
                heartbeat_interval_ms=1000,
                request_timeout_ms=30_000,
            )
            await consumer.start()
            return consumer

        self.loop = loop
        self.consumer = loop.run(make())

    def poll(self, timeout: float) -> list[Record]:
        batches = self.loop.run(self.consumer.getmany(timeout_ms=int(timeout * 1000)))
        return [(tp.partition, m.offset, m.value) for tp, messages in batches.items() for m in messages]

    def commit(self, topic: str, positions: dict[int, int]) -> str | None:
        from aiokafka import TopicPartition
        from aiokafka.errors import KafkaError

        try:
            self.loop.run(self.consumer.commit({TopicPartition(topic, p): o for p, o in positions.items()}))
        except KafkaError as exc:
            return repr(exc)
        return None

    def close(self) -> None:
        try:
            self.loop.run(self.consumer.stop())
        except concurrent.futures.CancelledError:
            pass  # aiokafka's stop() cancels its own coordinator requests and may let that escape; it stopped


@dataclass
class ClientKind:
    writer: Callable[[str], WriteSide]
    reader: Callable[[str, str, str], ReadSide]
    stop: Callable[[], None] = lambda: None


def client_kind(name: str) -> ClientKind:
    if name == "confluent_kafka":
        pytest.importorskip("confluent_kafka")
        return ClientKind(ConfluentWriter, ConfluentReader)
    if name == "kafka-python":
        pytest.importorskip("kafka")
        return ClientKind(KafkaPythonWriter, KafkaPythonReader)
    pytest.importorskip("aiokafka")
    loop = LoopThread()
    return ClientKind(
        lambda bootstrap: AiokafkaWriter(loop, bootstrap),
        lambda bootstrap, group, topic: AiokafkaReader(loop, bootstrap, group, topic),
        loop.stop,
    )


# --- 1. a consumer group across the death of its coordinator ----------------------------------------------


@dataclass
class GroupRun:
    """One consumer of the group: what it read, what it committed, and when."""

    topic: str
    reader: ReadSide
    positions: dict[int, int] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)
    reads: Counter[tuple[int, int]] = field(default_factory=Counter)
    values: dict[tuple[int, int], bytes] = field(default_factory=dict)
    commit_times: list[float] = field(default_factory=list)
    commit_errors: list[str] = field(default_factory=list)
    read_times: list[float] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def step(self) -> None:
        for partition, offset, value in self.reader.poll(0.5):
            key = (partition, offset)
            if self.reads[key] and offset < self.committed.get(partition, 0):
                # Read again: only a record the group had not committed when it was read again.
                self.violations.append(f"{self.topic}-{partition}@{offset} read again below {self.committed}")
            self.reads[key] += 1
            self.values[key] = value
            self.positions[partition] = offset + 1
            self.read_times.append(time.monotonic())
        if self.positions and self.positions != self.committed:
            error = self.reader.commit(self.topic, dict(self.positions))
            if error is None:
                self.committed = dict(self.positions)
                self.commit_times.append(time.monotonic())
            else:
                self.commit_errors.append(error)

    def has(self, acked: dict[tuple[int, int], bytes]) -> bool:
        """Every acknowledged record read, and the group's commits at the end of each partition."""
        ends: dict[int, int] = {}
        for partition, offset in acked:
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        return all(k in self.values for k in acked) and all(
            self.committed.get(p, 0) >= end for p, end in ends.items()
        )


def run_until(
    what: str, run: GroupRun, writer: WriteSide, timeout: float, only: Callable[[bytes], bool] = bool
) -> None:
    """Step the consumer until the writer has nothing in flight and every acknowledged record whose
    value passes `only` is read and committed."""

    def done() -> bool:
        run.step()
        return writer.pending() == 0 and run.has({k: v for k, v in writer.acked.items() if only(v)})

    wait_for(what, done, timeout, interval=0)
    assert not run.violations, run.violations[:5]


@pytest.mark.parametrize("client", ["confluent_kafka", "kafka-python", "aiokafka"])
def test_a_group_survives_its_coordinators_broker_being_killed(
    shared: LocalKraftCluster,
    client: str,
) -> None:
    kind = client_kind(client)
    setup = prepare(shared)
    cluster = setup.cluster
    topic = f"{client.replace('_', '-')}-data"
    setup.data_topic(topic)
    group, victim = setup.group_led_off_the_controller(f"{topic}-group")
    assert victim in [a[0] for a in ASSIGNMENT], "the victim leads data partitions"
    survivors = [n for n in cluster.nodes if n != victim]
    writer = kind.writer(cluster.bootstrap)
    run = GroupRun(topic, kind.reader(cluster.bootstrap, group, topic))
    try:
        # Before: half the records produced, read and committed.
        for i in range(300):
            writer.send(topic, i % DATA_PARTITIONS, f"before-{i}".encode())
        run_until("the first half read and committed", run, writer, 90)
        committed_before = dict(run.committed)

        # The coordinator's broker dies with records in flight; the group goes on.
        killed_at = 0.0
        for i in range(300):
            writer.send(topic, i % DATA_PARTITIONS, f"after-{i}".encode())
            if i == 150:
                killed_at = kill(cluster, victim)
        run_until("every acknowledged record read and committed after the kill", run, writer, 150)
        resumed = min(t for t in run.commit_times if t > killed_at) - killed_at
        print(f"{client}: first commit {resumed:.1f} s after the kill; refused: {run.commit_errors}")
        assert not writer.failed, writer.failed[:5]
        assert len(writer.acked) == writer.sent == 600
        assert {run.values[k] for k in writer.acked} == set(writer.acked.values())
        for (partition, offset), count in run.reads.items():
            if offset < committed_before[partition]:
                assert count == 1, (
                    f"{topic}-{partition}@{offset}, committed before the kill, read {count} times"
                )
        final = dict(run.committed)
        assert all(final[p] >= committed_before[p] for p in committed_before)
    finally:
        run.reader.close()

    # The group's coordinator is now the new leader of its __consumer_offsets partition.
    new_coordinator = wait_for(
        "a new coordinator", lambda: find_coordinator(cluster, 0, group), 30, interval=0.25
    )
    offsets_leader = leaders(cluster, "__consumer_offsets", OFFSETS_PARTITIONS)
    assert offsets_leader is not None
    assert new_coordinator in survivors
    assert new_coordinator == offsets_leader[offsets_partition_for(group, OFFSETS_PARTITIONS)]

    # A new consumer of the group starts exactly at the committed offsets: it reads only what comes next.
    live = cluster.live_bootstrap()
    for i in range(DATA_PARTITIONS * 3):
        writer.send(topic, i % DATA_PARTITIONS, f"later-{i}".encode())
    wait_for("the later records acknowledged", lambda: writer.pending() == 0, 60, interval=0.1)
    later = {k: v for k, v in writer.acked.items() if v.startswith(b"later-")}
    assert len(later) == DATA_PARTITIONS * 3
    assert {p: min(o for q, o in later if q == p) for p in range(DATA_PARTITIONS)} == final
    resumed_run = GroupRun(topic, kind.reader(live, group, topic), committed=dict(final))
    try:
        run_until(
            "the new consumer at the later records",
            resumed_run,
            writer,
            90,
            only=lambda v: v.startswith(b"later-"),
        )
        assert dict(resumed_run.values) == later, "the new consumer read something committed before it"
        if client == "confluent_kafka":
            kcat_through_survivors(cluster, topic, writer.acked, f"{group}-kcat")

        # The killed broker returns and, preferred again, takes the partition back: the interim
        # coordinator unloads the group, the returning one loads it, and the member goes on there.
        cluster[victim].start()
        cluster[victim].wait_ready()
        restarted = time.monotonic()
        wait_for(
            "the group's coordinator back on its preferred broker",
            lambda: find_coordinator(cluster, 0, group) == victim,
            60,
            interval=0.25,
        )
        print(
            f"{client}: coordinator back on node {victim} {time.monotonic() - restarted:.1f} s after it started"
        )
        for i in range(DATA_PARTITIONS * 3):
            writer.send(topic, i % DATA_PARTITIONS, f"back-{i}".encode())
        run_until(
            "the consumer at the records after the move back",
            resumed_run,
            writer,
            90,
            only=lambda v: v.startswith(b"back-"),
        )
    finally:
        resumed_run.reader.close()
        writer.close()
        kind.stop()
    assert_no_traceback(cluster)


def kcat_through_survivors(
    cluster: LocalKraftCluster, topic: str, acked: dict[tuple[int, int], bytes], group: str
) -> None:
    """kcat produces (acks=all) and reads back every partition through the live brokers, and a kcat
    group consumer reads everything with offsets the new coordinator stores."""
    kcat = "kcat"
    live = cluster.live_bootstrap()
    listed = subprocess.run([kcat, "-L", "-J", "-b", live], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0, listed.stderr
    assert sorted(b["id"] for b in json.loads(listed.stdout)["brokers"]) == sorted(
        n for n, node in cluster.nodes.items() if node.running
    )
    expected = {p: [v for (q, _), v in sorted(acked.items()) if q == p] for p in range(DATA_PARTITIONS)}
    for p in range(DATA_PARTITIONS):
        lines = [f"kcat-{p}-{i}" for i in range(5)]
        produced = subprocess.run(
            [kcat, "-P", "-b", live, "-t", topic, "-p", str(p), "-X", "acks=all", "-X", "enable.idempotence=true"],
            input="".join(f"{line}\n" for line in lines), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        expected[p] += [line.encode() for line in lines]
    for p in range(DATA_PARTITIONS):
        consumed = subprocess.run(
            [kcat, "-C", "-b", live, "-t", topic, "-p", str(p), "-o", "beginning", "-e", "-f", "%s\n"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert consumed.returncode == 0, consumed.stderr
        assert [line.encode() for line in consumed.stdout.splitlines()] == expected[p], f"partition {p}"
    total = sum(map(len, expected.values()))
    grouped = subprocess.run(
        [kcat, "-G", group, "-b", live, "-X", "auto.offset.reset=earliest", "-c", str(total), "-f", "%p %s\n", topic],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert grouped.returncode == 0, grouped.stderr
    got: dict[int, list[bytes]] = {p: [] for p in range(DATA_PARTITIONS)}
    for line in grouped.stdout.splitlines():
        partition, _, value = line.partition(" ")
        got[int(partition)].append(value.encode())
    assert got == expected


# --- 2. consume-transform-produce across the death of the transaction coordinator -------------------------


def test_transactions_survive_their_coordinators_broker_being_killed(
    shared: LocalKraftCluster,
) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    setup = prepare(shared)
    cluster = setup.cluster
    source, sink = "ctp-in", "ctp-out"
    setup.data_topic(source)
    setup.data_topic(sink)
    for i in range(1000):
        transactional_id = f"ctp-{i}"
        victim = setup.txn_leaders[txn_partition_for(transactional_id, TXN_PARTITIONS)]
        if victim != setup.controller:
            break
    assert find_coordinator(cluster, 1, transactional_id) == victim
    group = setup.group_led_by(next(n for n in cluster.nodes if n != victim), "ctp-group")

    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    inputs = [f"in-{i}".encode() for i in range(600)]
    for i, value in enumerate(inputs):
        plain.produce(source, value=value, partition=i % DATA_PARTITIONS)
    assert plain.flush(60) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": CLIENT_SESSION_MS,
            "heartbeat.interval.ms": 1000,
        }
    )
    consumer.subscribe([source])
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 120_000,
            "message.timeout.ms": 120_000,
        }
    )
    producer.init_transactions(90)
    aborted: set[bytes] = set()
    commits = aborts = 0
    killed_at = recovered_at = 0.0

    def rewind() -> None:
        """After an abort: back to the group's committed offsets (what the aborted round read is redone)."""
        assignment = consumer.assignment()
        for tp in consumer.committed(assignment, timeout=60):
            consumer.seek(TopicPartition(source, tp.partition, tp.offset if tp.offset >= 0 else 0))

    def one_round(kill_mid_way: bool, abort: bool) -> None:
        nonlocal commits, aborts, killed_at, recovered_at
        messages = [m for m in consumer.consume(100, 2.0) if m.error() is None]
        if not messages:
            return
        producer.begin_transaction()
        outputs = [b"out-" + m.value() for m in messages]
        for m, out in zip(messages, outputs, strict=True):
            producer.produce(sink, value=out, partition=m.partition())
        try:
            if abort:
                raise _Abort
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 120
            )
            if kill_mid_way:
                # The records and the pending offsets are in the logs; the coordinator dies before EndTxn.
                assert producer.flush(60) == 0
                killed_at = kill(cluster, victim)
            producer.commit_transaction(120)
            commits += 1
            if kill_mid_way:
                recovered_at = time.monotonic()
        except (KafkaException, _Abort) as exc:
            error = exc.args[0] if isinstance(exc, KafkaException) else None
            assert error is None or error.txn_requires_abort() or error.retriable(), error
            assert error is None or not error.fatal(), error
            producer.abort_transaction(120)
            aborted.update(outputs)
            aborts += 1
            if kill_mid_way:
                recovered_at = time.monotonic()
            rewind()

    def committed() -> dict[int, int]:
        assignment = consumer.assignment()
        return (
            {tp.partition: tp.offset for tp in consumer.committed(assignment, timeout=60)}
            if assignment
            else {}
        )

    # A committed round, one aborted on purpose, another committed, then the coordinator dies in one.
    done = dict.fromkeys(range(DATA_PARTITIONS), len(inputs) // DATA_PARTITIONS)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and committed() != done:
        one_round(
            kill_mid_way=not killed_at and commits >= 2,
            abort=not aborts and commits == 1,
        )
    assert committed() == done, "the group's offsets at the end of the input"
    consumer.close()
    print(
        f"transactions: {commits} committed, {aborts} aborted; recovered {recovered_at - killed_at:.1f} s after the kill"
    )
    assert killed_at and recovered_at, "the coordinator was never killed mid-transaction"
    assert aborts >= 1 and aborted

    new_coordinator = wait_for(
        "a new transaction coordinator",
        lambda: find_coordinator(cluster, 1, transactional_id),
        30,
        interval=0.25,
    )
    assert new_coordinator != victim
    # The producer goes on with the new coordinator: one more committed transaction.
    producer.begin_transaction()
    producer.produce(sink, value=b"out-last", partition=0)
    producer.commit_transaction(90)

    expected = sorted([b"out-" + v for v in inputs] + [b"out-last"])
    got = read_committed_all(cluster.live_bootstrap(), sink, len(expected))
    assert sorted(got) == expected, "each input's output exactly once, nothing aborted"
    assert_no_traceback(cluster)


class _Abort(Exception):
    """A round the test aborts on purpose."""


def read_committed_all(bootstrap: str, topic: str, expected: int, timeout: float = 90.0) -> list[bytes]:
    """Every record of `topic` a read_committed consumer sees, once every partition is at its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(DATA_PARTITIONS)])
    got: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
            elif message is not None:
                got.append(message.value())
                at_end.discard(message.partition())
            if len(got) >= expected and len(at_end) == DATA_PARTITIONS:
                break
    finally:
        consumer.close()
    return got
