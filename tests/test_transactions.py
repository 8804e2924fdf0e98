"""Transactions against a real broker with confluent-kafka's transactional producer.

Committed records reach read_committed consumers, aborted ones only read_uncommitted ones;
consume-transform-produce commits the group's offsets with the output; a second producer with the
same transactional.id fences the first; a producer killed mid-transaction is aborted by the timeout
sweep (and fenced); coordinator state survives a clean restart and kill -9, and a transaction left
open by the crash is aborted by the next producer's InitProducerId.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, kcli_env, start_broker
from kio.schema.errors import ErrorCode
from waiting import wait_for

from kcli.client import KafkaClient
from kcli.protocol.messages import build, request_type

FAST = [
    "transaction.state.log.num.partitions=3",
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
]
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=15)


def transactional_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **extra})
    producer.init_transactions(30)
    return producer


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every record a consumer with `isolation` gets before EOF on every partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_eof: set[int] = set()
    deadline = time.monotonic() + 20
    try:
        while len(at_eof) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_eof.add(message.partition())
                continue
            at_eof.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    assert len(at_eof) == partitions, f"no EOF on every partition of {topic} ({isolation})"
    return values


async def describe(bootstrap: str, transactional_id: str) -> Any:
    async with await KafkaClient.connect(bootstrap) as client:
        request = build(request_type(DESCRIBE_TRANSACTIONS, 0), transactional_ids=(transactional_id,))
        response = await client.send(request)
        return response.transaction_states[0]


async def list_transactions(bootstrap: str, states: tuple[str, ...] = ()) -> Any:
    async with await KafkaClient.connect(bootstrap) as client:
        request = build(
            request_type(LIST_TRANSACTIONS, 1),
            state_filters=states,
            producer_id_filters=(),
            duration_filter=-1,
        )
        return await client.send(request)


def wait_for_state(bootstrap: str, transactional_id: str, state: str, timeout: float = 20) -> Any:
    """DescribeTransactions until `transactional_id` is in `state`; the failure names the last answer."""
    seen: list[Any] = []

    def reached() -> Any:
        seen.append(asyncio.run(describe(bootstrap, transactional_id)))
        return seen[-1] if seen[-1].transaction_state == state else None

    return wait_for(
        f"{transactional_id} in {state}", reached, timeout, interval=0.2, explain=lambda: f"last: {seen[-1:]}"
    )


def test_commit_and_abort_seen_by_each_isolation_level(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "orders")
    producer = transactional_producer(broker.bootstrap, "orders-tx")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("orders", f"committed-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("orders", f"aborted-{i}".encode(), partition=i % 2)
    producer.flush(30)  # on the broker before the abort (abort_transaction purges what is still queued)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("orders", f"late-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)

    committed = consume_all(broker.bootstrap, "orders", 2, "read_committed")
    assert sorted(committed) == sorted(
        [f"committed-{i}".encode() for i in range(10)] + [f"late-{i}".encode() for i in range(3)]
    )
    everything = consume_all(broker.bootstrap, "orders", 2, "read_uncommitted")
    assert sorted(v for v in everything if v.startswith(b"aborted")) == sorted(
        f"aborted-{i}".encode() for i in range(10)
    )
    assert len(everything) == 23

    described = asyncio.run(describe(broker.bootstrap, "orders-tx"))
    assert (described.error_code, described.transaction_state, described.producer_epoch) == (
        ErrorCode.none,
        "CompleteCommit",
        0,
    )
    assert described.topics == ()
    listed = asyncio.run(list_transactions(broker.bootstrap, ("CompleteCommit", "NoSuchState")))
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
        ("orders-tx", "CompleteCommit")
    ]
    assert listed.unknown_state_filters == ("NoSuchState",)
    unknown = asyncio.run(describe(broker.bootstrap, "nobody"))
    assert unknown.error_code == ErrorCode.transactional_id_not_found


def test_open_transaction_holds_back_read_committed_and_describe_shows_partitions(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "held", 1)
    producer = transactional_producer(broker.bootstrap, "held-tx")
    producer.begin_transaction()
    producer.produce("held", b"pending", partition=0)
    producer.flush(30)
    described = asyncio.run(describe(broker.bootstrap, "held-tx"))
    assert described.transaction_state == "Ongoing"
    assert [(t.topic, t.partitions) for t in described.topics] == [("held", (0,))]
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "w", "isolation.level": "read_committed"}
    )
    low, high = consumer.get_watermark_offsets(TopicPartition("held", 0), timeout=10)
    assert (low, high) == (0, 0)  # the last stable offset: the open transaction's first offset
    producer.commit_transaction(30)
    # EndTxn answers once PrepareCommit is written; the markers follow (Kafka's order), then the LSO moves.
    high = wait_for(
        "the last stable offset past the COMMIT marker",
        lambda: (h := consumer.get_watermark_offsets(TopicPartition("held", 0), timeout=10)[1]) >= 2 and h,
        10,
        0.05,
    )
    assert high == 2  # the record and its COMMIT marker
    consumer.close()


def test_consume_transform_produce_commits_offsets_with_the_output(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "input", 1)
    create_topic(broker.bootstrap, "output", 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        plain.produce("input", f"{i}".encode(), partition=0)
    plain.flush(30)

    def run_once(commit: bool) -> int:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "transformer",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe(["input"])
        producer = transactional_producer(broker.bootstrap, "transformer-tx")
        batch = []
        deadline = time.monotonic() + 20
        while len(batch) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                batch.append(message)
        assert len(batch) == 10
        producer.begin_transaction()
        for message in batch:
            producer.produce("output", str(int(message.value()) * 10).encode(), partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition("input", 0, batch[-1].offset() + 1)], consumer.consumer_group_metadata(), 30
        )
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
        first = int(batch[0].value())
        consumer.close()
        return first

    assert run_once(commit=True) == 0
    assert run_once(commit=False) == 10  # the committed offsets moved the group on
    assert run_once(commit=True) == 10  # the aborted offsets did not
    output = consume_all(broker.bootstrap, "output", 1, "read_committed")
    assert output == [str(i * 10).encode() for i in range(20)]
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "transformer"})
    [committed] = check.committed([TopicPartition("input", 0)], timeout=10)
    assert committed.offset == 20
    check.close()


def test_second_producer_with_the_same_id_fences_the_first(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "fenced", 1)
    first = transactional_producer(broker.bootstrap, "shared-tx")
    first.begin_transaction()
    first.produce("fenced", b"zombie", partition=0)
    first.flush(30)
    second = transactional_producer(broker.bootstrap, "shared-tx")  # aborts the first's transaction
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].code() == KafkaError._FENCED
    second.begin_transaction()
    second.produce("fenced", b"survivor", partition=0)
    second.commit_transaction(30)
    assert consume_all(broker.bootstrap, "fenced", 1, "read_committed") == [b"survivor"]
    described = asyncio.run(describe(broker.bootstrap, "shared-tx"))
    assert described.producer_epoch == 2  # the fence bumped once, the second producer's init once more


PRODUCE_AND_HANG = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "doomed-tx",
                     "transaction.timeout.ms": 2000})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(5):
    producer.produce("stuck", b"never-committed", partition=0)
producer.flush(30)
print("in transaction", flush=True)
time.sleep(600)
"""


def test_producer_killed_mid_transaction_is_aborted_by_timeout(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(
        overrides=[*FAST, "transaction.abort.timed.out.transaction.cleanup.interval.ms=300"]
    )
    create_topic(broker.bootstrap, "stuck", 1)
    child = subprocess.Popen(
        [sys.executable, "-c", PRODUCE_AND_HANG, broker.bootstrap],
        stdout=subprocess.PIPE,
        env=kcli_env(),
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"in transaction\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    described = wait_for_state(broker.bootstrap, "doomed-tx", "CompleteAbort")
    assert described.transaction_state == "CompleteAbort"
    assert described.producer_epoch == 1  # bumped: the dead producer is fenced
    assert consume_all(broker.bootstrap, "stuck", 1, "read_committed") == []
    assert consume_all(broker.bootstrap, "stuck", 1, "read_uncommitted") == [b"never-committed"] * 5


def test_state_survives_restart_and_kill_9(broker_factory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # Not the factory's broker: this one is killed.
    broker = start_broker(tmp_path / "killed", overrides=FAST, data_dir=data_dir)
    create_topic(broker.bootstrap, "durable", 1)
    producer = transactional_producer(broker.bootstrap, "durable-tx")
    producer.begin_transaction()
    producer.produce("durable", b"one", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("durable", b"open", partition=0)
    producer.flush(30)
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait()
    del producer

    restarted: BrokerProcess = broker_factory(overrides=FAST, data_dir=data_dir)
    described = wait_for_state(restarted.bootstrap, "durable-tx", "Ongoing")
    assert (described.transaction_state, described.producer_epoch) == ("Ongoing", 0)
    # A new instance fences the transaction the crash left open, then works normally.
    again = transactional_producer(restarted.bootstrap, "durable-tx")
    again.begin_transaction()
    again.produce("durable", b"two", partition=0)
    again.commit_transaction(30)
    assert consume_all(restarted.bootstrap, "durable", 1, "read_committed") == [b"one", b"two"]
    restarted.stop()

    third: BrokerProcess = broker_factory(overrides=FAST, data_dir=data_dir)
    described = wait_for_state(third.bootstrap, "durable-tx", "CompleteCommit")
    assert (described.transaction_state, described.producer_epoch) == ("CompleteCommit", 2)
    assert consume_all(third.bootstrap, "durable", 1, "read_committed") == [b"one", b"two"]
