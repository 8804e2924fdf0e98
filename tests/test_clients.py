"""Stock clients produce to and consume from a real `kcli broker start`, with every codec they speak.

confluent-kafka (librdkafka 2.x wheel), kafka-python, aiokafka and Debian's kcat (librdkafka 2.0.2)
each write records with keys, null values, headers and explicit CreateTime timestamps in every
compression codec, read them back, and look offsets up by time; a LogAppendTime topic shows the
broker's clock on what they read. Without kcat the kcat test fails under CI=true, as the network
tests do.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, start_broker, stop_cleanly
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from formats.segment import walk

pytestmark = pytest.mark.timeout(120)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
COUNT = 40
LINGER_MS = 200
"""Long enough that the COUNT records go out in a few compressed batches (stored_codecs looks at batches
of more than one record) even when a loaded machine runs the producing loop slowly: at 5 ms, a loop
starved of CPU once sent each record alone. flush() sends at once whatever lingers."""
BASE_MS = int(time.time() * 1000) - 3_600_000  # an hour ago: CreateTime must keep it, LogAppendTime not


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("clients"))
    try:
        yield process
    finally:
        stop_cleanly(process)


def expected_records(
    count: int = COUNT,
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]:
    """(key, value, headers, timestamp): every 7th value null, every 5th key null (never both)."""
    return [
        (
            None if i % 5 == 4 and i % 7 != 3 else b"key-%d" % i,
            None if i % 7 == 3 else (b"value-%d-" % i) * (1 + i % 20),
            [("n", b"%d" % i), ("tag", b"x")],
            BASE_MS + i,
        )
        for i in range(count)
    ]


def test_confluent_kafka_every_codec(server: BrokerProcess) -> None:
    topics = create_topics(server, "ck", {})
    for codec, topic in topics.items():
        producer = Producer(
            {"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": LINGER_MS}
        )
        for key, value, headers, timestamp in expected_records():
            producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp)
        assert producer.flush(15) == 0
    assert {codec: stored_codecs(server, topic) for codec, topic in topics.items()} == {
        c: {c} for c in topics
    }
    consumer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "ck", "enable.auto.commit": False}
    )
    # Lookups go through a consumer that fetches nothing: a connection waits behind its long poll.
    lookup = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "ck", "enable.auto.commit": False})
    try:
        for topic in topics.values():
            consumer.assign([CkTopicPartition(topic, 0, 0)])
            got = []
            deadline = time.monotonic() + 15
            while len(got) < COUNT and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                kind, timestamp = message.timestamp()
                assert kind == TIMESTAMP_CREATE_TIME
                got.append((message.key(), message.value(), list(message.headers() or []), timestamp))
                assert message.offset() == len(got) - 1
            assert got == expected_records(), topic
            # ListOffsets by time: the first record at or after the timestamp.
            [found] = lookup.offsets_for_times([CkTopicPartition(topic, 0, BASE_MS + 17)], 10)
            assert found.offset == 17
            [found] = lookup.offsets_for_times([CkTopicPartition(topic, 0, BASE_MS + COUNT)], 10)
            assert found.offset == -1  # none: librdkafka's OFFSET_END
            assert lookup.get_watermark_offsets(CkTopicPartition(topic, 0), 10) == (0, COUNT)
    finally:
        consumer.close()
        lookup.close()


def test_kafka_python_every_codec(server: BrokerProcess) -> None:
    topics = create_topics(server, "kp", {})
    for codec, topic in topics.items():
        producer = KafkaProducer(
            bootstrap_servers=server.bootstrap,
            compression_type=None if codec == "none" else codec,
            enable_idempotence=False,  # InitProducerId belongs to the idempotence work
            linger_ms=LINGER_MS,
        )
        futures = [
            producer.send(topic, value=value, key=key, headers=headers, timestamp_ms=timestamp, partition=0)
            for key, value, headers, timestamp in expected_records()
        ]
        producer.flush(15)
        assert [f.get(5).offset for f in futures] == list(range(COUNT))
        producer.close(5)
    assert {codec: stored_codecs(server, topic) for codec, topic in topics.items()} == {
        c: {c} for c in topics
    }
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap, consumer_timeout_ms=5000, enable_auto_commit=False
    )
    try:
        for topic in topics.values():
            partition = KpTopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek_to_beginning(partition)
            got = []
            for message in consumer:
                assert message.timestamp_type == 0  # CreateTime
                got.append(
                    (message.key, message.value, [(k, v) for k, v in message.headers], message.timestamp)
                )
                if len(got) == COUNT:
                    break
            assert got == expected_records(), topic
            found = consumer.offsets_for_times({partition: BASE_MS + 17})[partition]
            assert (found.offset, found.timestamp) == (17, BASE_MS + 17)
            assert consumer.offsets_for_times({partition: BASE_MS + COUNT})[partition] is None
            assert consumer.end_offsets([partition])[partition] == COUNT
            assert consumer.beginning_offsets([partition])[partition] == 0
    finally:
        consumer.close()


def test_aiokafka_every_codec(server: BrokerProcess) -> None:
    topics = create_topics(server, "aio", {})

    async def run() -> None:
        for codec, topic in topics.items():
            producer = AIOKafkaProducer(
                bootstrap_servers=server.bootstrap,
                compression_type=None if codec == "none" else codec,
                linger_ms=LINGER_MS,
            )
            await producer.start()
            try:
                futures = [
                    await producer.send(
                        topic, value=value, key=key, headers=headers, timestamp_ms=timestamp, partition=0
                    )
                    for key, value, headers, timestamp in expected_records()
                ]
                assert [(await f).offset for f in futures] == list(range(COUNT))
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            for topic in topics.values():
                partition = AioTopicPartition(topic, 0)
                consumer.assign([partition])
                await consumer.seek_to_beginning(partition)
                got = []
                deadline = time.monotonic() + 15
                while len(got) < COUNT and time.monotonic() < deadline:
                    batch = await consumer.getmany(partition, timeout_ms=1000)
                    for message in batch.get(partition, []):
                        assert message.timestamp_type == 0
                        got.append((message.key, message.value, list(message.headers), message.timestamp))
                assert got == expected_records(), topic
                found = (await consumer.offsets_for_times({partition: BASE_MS + 17}))[partition]
                assert (found.offset, found.timestamp) == (17, BASE_MS + 17)
                assert (await consumer.end_offsets([partition]))[partition] == COUNT
        finally:
            await consumer.stop()

    asyncio.run(run())
    assert {codec: stored_codecs(server, topic) for codec, topic in topics.items()} == {
        c: {c} for c in topics
    }


def test_kcat_every_codec(server: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        message = "kcat is not on PATH (apt-get install -y kcat)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    topics = create_topics(server, "kcat", {})
    # kcat sends "key<TAB>value" lines; -Z turns an empty value into a null one.
    lines = [f"key-{i}\t{'' if i % 7 == 3 else f'value-{i}'}" for i in range(COUNT)]
    for codec, topic in topics.items():
        produced = subprocess.run(
            [kcat, "-P", "-b", server.bootstrap, "-t", topic, "-p", "0", "-K", "\t", "-Z", "-H", "source=kcat",
             "-X", f"compression.codec={codec}", "-X", f"linger.ms={LINGER_MS}"],
            input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
    assert {codec: stored_codecs(server, topic) for codec, topic in topics.items()} == {
        c: {c} for c in topics
    }
    for topic in topics.values():
        consumed = subprocess.run(
            [kcat, "-C", "-b", server.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-Z",
             "-f", "%o\t%k\t%s\t%h\t%T\n"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert consumed.returncode == 0, consumed.stderr
        rows = [line.split("\t") for line in consumed.stdout.splitlines()]
        assert [row[:4] for row in rows] == [
            [str(i), f"key-{i}", "NULL" if i % 7 == 3 else f"value-{i}", "source=kcat"] for i in range(COUNT)
        ]
        now = time.time() * 1000
        assert all(now - 120_000 < int(row[4]) <= now + 1000 for row in rows)  # kcat stamps CreateTime now
        # ListOffsets by time: kcat -Q asks for the offset of a timestamp.
        queried = subprocess.run(
            [kcat, "-Q", "-b", server.bootstrap, "-t", f"{topic}:0:{rows[5][4]}"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert queried.returncode == 0, queried.stderr
        first_at = min(i for i, row in enumerate(rows) if row[4] == rows[5][4])
        assert f"offset {first_at}" in queried.stdout


def test_log_append_time_topic_with_every_client(server: BrokerProcess) -> None:
    [topic] = create_topics(
        server, "lat", {"message.timestamp.type": "LogAppendTime"}, codecs=("lz4",)
    ).values()
    producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": "lz4"})
    before = int(time.time() * 1000)
    for key, value, headers, timestamp in expected_records(10):
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp)
    assert producer.flush(15) == 0
    after = int(time.time() * 1000)

    consumer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "lat", "enable.auto.commit": False}
    )
    try:
        consumer.assign([CkTopicPartition(topic, 0, 0)])
        seen = []
        deadline = time.monotonic() + 15
        while len(seen) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.timestamp())
        assert len(seen) == 10
        assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before - 5 <= ts <= after + 5 for kind, ts in seen)
    finally:
        consumer.close()
    lookup = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lat"})
    try:
        [found] = lookup.offsets_for_times([CkTopicPartition(topic, 0, BASE_MS)], 10)
        assert found.offset == 0  # every record is younger than the producer's hour-old stamps
        [found] = lookup.offsets_for_times([CkTopicPartition(topic, 0, seen[-1][1] + 1)], 10)
        assert found.offset == -1
    finally:
        lookup.close()

    kp = KafkaConsumer(bootstrap_servers=server.bootstrap, consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        partition = KpTopicPartition(topic, 0)
        kp.assign([partition])
        kp.seek_to_beginning(partition)
        stamps = [(m.timestamp_type, m.timestamp) for _, m in zip(range(10), kp, strict=False)]
        assert [kind for kind, _ in stamps] == [1] * 10
        assert [ts for _, ts in stamps] == [ts for _, ts in seen]
    finally:
        kp.close()

    async def aio() -> list[tuple[int, int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            partition = AioTopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            batch = await consumer.getmany(partition, timeout_ms=5000)
            return [(m.timestamp_type, m.timestamp) for m in batch[partition]]
        finally:
            await consumer.stop()

    assert asyncio.run(aio()) == [(1, ts) for _, ts in seen]


def stored_codecs(server: BrokerProcess, topic: str) -> set[str]:
    """The codecs of the batches of more than one record the broker wrote for partition 0 of `topic`,
    read from its segments. A client that quietly sent everything uncompressed (as librdkafka before
    2.11.1 did when a broker did not advertise Produce v0) shows up here and nowhere else; a batch of one
    record is left out, since librdkafka sends a batch uncompressed when compressing does not shrink it."""
    partition_dir = server.data_dir / f"{topic}-0"
    return {
        batch.compression.name.lower()
        for path in sorted(partition_dir.glob("*.log"))
        for batch in walk(path.read_bytes()).batches
        if batch.last_offset > batch.base_offset
    }


def create_topics(
    server: BrokerProcess, prefix: str, config: dict[str, str], codecs: tuple[str, ...] = CODECS
) -> dict[str, str]:
    """One single-partition topic per codec: codec -> topic name."""
    topics = {codec: f"{prefix}-{codec}" for codec in codecs}
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    futures = admin.create_topics([NewTopic(name, 1, 1, config=config) for name in topics.values()])
    for future in futures.values():
        future.result(15)
    return topics
