"""Transactions with kafka-python's and aiokafka's transactional producers against a real broker.

Each library's producer commits and aborts; read_committed consumers of both libraries see exactly
the committed records, a read_uncommitted one sees everything. Consume-transform-produce commits the
group's offsets with the output through each library's send_offsets_to_transaction (aiokafka by
group id, kafka-python with the consumer's group metadata, so TxnOffsetCommit v3 carries the member
and generation); an aborted round leaves neither output nor offsets.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from conftest import BrokerProcess
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata
from test_transactions import FAST, create_topic

pytestmark = pytest.mark.timeout(90)


def committed_and_aborted() -> tuple[list[bytes], list[bytes]]:
    committed = [f"first-{i}".encode() for i in range(6)] + [f"third-{i}".encode() for i in range(6)]
    return committed, [f"second-{i}".encode() for i in range(6)]


def produce_with_kafka_python(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-kp")
    try:
        producer.init_transactions()
        for name, commit in (("first", True), ("second", False), ("third", True)):
            producer.begin_transaction()
            for i in range(6):
                producer.send(topic, f"{name}-{i}".encode(), partition=i % 2)
            producer.flush(15)  # on the broker before the abort
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(10)


async def produce_with_aiokafka(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-aio")
    await producer.start()
    try:
        for name, commit in (("first", True), ("second", False), ("third", True)):
            await producer.begin_transaction()
            for i in range(6):
                await producer.send_and_wait(topic, f"{name}-{i}".encode(), partition=i % 2)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()


def read_with_kafka_python(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every record up to each partition's end (the LSO for read_committed)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        consumer_timeout_ms=500,
    )
    try:
        tps = [KpTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, {tp: (consumer.position(tp), ends[tp]) for tp in tps}
            for records in consumer.poll(500).values():
                values.extend(r.value for r in records)
        return values
    finally:
        consumer.close()


async def read_with_aiokafka(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [AioTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline
            for records in (await consumer.getmany(*tps, timeout_ms=500)).values():
                values.extend(r.value for r in records)
        return values
    finally:
        await consumer.stop()


@pytest.mark.parametrize("library", ["kafka-python", "aiokafka"])
def test_commit_and_abort_seen_by_read_committed_consumers_of_each_library(
    broker_factory, library: str
) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    topic = f"tx-{library}"
    create_topic(broker.bootstrap, topic)
    if library == "kafka-python":
        produce_with_kafka_python(broker.bootstrap, topic)
    else:
        asyncio.run(produce_with_aiokafka(broker.bootstrap, topic))

    committed, aborted = committed_and_aborted()
    assert sorted(read_with_kafka_python(broker.bootstrap, topic, "read_committed")) == sorted(committed)
    assert sorted(asyncio.run(read_with_aiokafka(broker.bootstrap, topic, "read_committed"))) == sorted(
        committed
    )
    everything = sorted(committed + aborted)
    assert sorted(read_with_kafka_python(broker.bootstrap, topic, "read_uncommitted")) == everything
    assert sorted(asyncio.run(read_with_aiokafka(broker.bootstrap, topic, "read_uncommitted"))) == everything


def fill_input(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(count):
        producer.send(topic, f"in-{i}".encode(), partition=0)
    producer.flush(15)
    producer.close(5)


def test_aiokafka_consume_transform_produce_with_send_offsets_to_transaction(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "ctp-in", 1)
    create_topic(broker.bootstrap, "ctp-out", 1)
    fill_input(broker.bootstrap, "ctp-in", 10)
    source = AioTopicPartition("ctp-in", 0)

    async def body() -> int:
        consumer = AIOKafkaConsumer(
            "ctp-in",
            bootstrap_servers=broker.bootstrap,
            group_id="ctp",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="ctp-aio")
        await consumer.start()
        await producer.start()
        try:
            seen = 0
            round_number = 0
            while seen < 10:
                batch = (await consumer.getmany(source, timeout_ms=1000, max_records=4)).get(source, [])
                if not batch:
                    continue
                round_number += 1
                async with producer.transaction():
                    for record in batch:
                        await producer.send_and_wait(
                            "ctp-out", record.value.replace(b"in", b"out"), partition=0
                        )
                    next_offset = batch[-1].offset + 1
                    await producer.send_offsets_to_transaction({source: next_offset}, "ctp")
                seen += len(batch)
            # A round that is aborted: its output and its offsets are both dropped.
            await producer.begin_transaction()
            await producer.send_and_wait("ctp-out", b"never", partition=0)
            await producer.send_offsets_to_transaction({source: 99}, "ctp")
            await producer.abort_transaction()
            return round_number
        finally:
            await producer.stop()
            await consumer.stop()

    assert asyncio.run(body()) >= 3
    expected = [f"out-{i}".encode() for i in range(10)]
    assert asyncio.run(read_with_aiokafka(broker.bootstrap, "ctp-out", "read_committed", 1)) == expected
    assert read_with_kafka_python(broker.bootstrap, "ctp-out", "read_uncommitted", 1) == [*expected, b"never"]
    assert committed_offset(broker.bootstrap, "ctp", "ctp-in") == 10


def committed_offset(bootstrap: str, group: str, topic: str) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(KpTopicPartition(topic, 0))
    finally:
        consumer.close()


def test_kafka_python_send_offsets_with_group_metadata(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "kp-in", 1)
    create_topic(broker.bootstrap, "kp-out", 1)
    fill_input(broker.bootstrap, "kp-in", 6)
    source = KpTopicPartition("kp-in", 0)
    consumer = KafkaConsumer(
        "kp-in",
        bootstrap_servers=broker.bootstrap,
        group_id="kp-ctp",
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="ctp-kp")
    try:
        producer.init_transactions()
        records = []
        deadline = time.monotonic() + 20
        while len(records) < 6:
            assert time.monotonic() < deadline
            records.extend(consumer.poll(500).get(source, []))
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 1 and metadata.member_id  # a real member: v3 checks apply
        producer.begin_transaction()
        for record in records:
            producer.send("kp-out", record.value.replace(b"in", b"out"), partition=0)
        producer.send_offsets_to_transaction({source: KpOffsetAndMetadata(6, "", -1)}, metadata)
        producer.commit_transaction()
    finally:
        producer.close(10)
        consumer.close()
    assert read_with_kafka_python(broker.bootstrap, "kp-out", "read_committed", 1) == [
        f"out-{i}".encode() for i in range(6)
    ]
    assert committed_offset(broker.bootstrap, "kp-ctp", "kp-in") == 6
