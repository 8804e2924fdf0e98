"""Incremental fetch sessions (KIP-227) by Kafka's rules, on real `kcli broker` processes.

kcli's own client sends the raw Fetch requests a rule needs: a full fetch (epoch 0) opens a session,
incremental fetches add, update and forget partitions and are answered with only the partitions that
have something to say, a wrong epoch is INVALID_FETCH_SESSION_EPOCH, an unknown id
FETCH_SESSION_ID_NOT_FOUND, a version that names topics otherwise than the session
FETCH_SESSION_TOPIC_ID_ERROR, and a full cache evicts by Kafka's rules. Stock clients (kafka-python
and Kafka's Java consumer, which keep a session, the Java one closing it on close, and librdkafka, which
fetches without one) consume many partitions whole; three nodes replicate a topic of many partitions at
replication factor 3 through the followers' sessions, and a topic of 1000 keeps every acknowledged
record through a node's kill -9.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kio.schema.errors import ErrorCode
from kraft_cluster import LocalKraftCluster, wait_for

from formats.records import RecordSpec, build_batch
from formats.segment import walk
from kcli.broker.replication.fetch_session import FetchSessionCache
from kcli.client import KafkaClient
from kcli.protocol.messages import request_type

pytestmark = pytest.mark.timeout(120)

NOW_MS = int(time.time() * 1000)
Partition = tuple[str, int, int]
"""(topic, partition, fetch offset)"""


def create_topics(bootstrap: str, topics: dict[str, int], replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, n, replication_factor) for name, n in topics.items()])
    for future in futures.values():
        future.result(30)


async def topic_ids(client: KafkaClient, names: list[str]) -> dict[str, uuid.UUID]:
    cls = request_type(3, 12)
    topic_cls = sys.modules[cls.__module__].MetadataRequestTopic
    response = await client.send(
        cls(
            topics=tuple(topic_cls(name=n, topic_id=None) for n in names),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return {t.name: t.topic_id for t in response.topics}


def fetch(
    version: int,
    partitions: list[Partition],
    *,
    ids: dict[str, uuid.UUID] | None = None,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: list[tuple[str, int]] = (),  # type: ignore[assignment]
    replica_id: int = -1,
    max_wait_ms: int = 0,
    max_bytes: int = 50 << 20,
) -> Any:
    """A Fetch of `partitions`, grouped by topic in order; topics by id from v13 (`ids`)."""
    cls = request_type(1, version)
    module = sys.modules[cls.__module__]
    ids = ids or {}
    by_topic: dict[str, list[Any]] = {}
    for topic, index, offset in partitions:
        by_topic.setdefault(topic, []).append(
            module.FetchPartition(
                partition=index,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
        )
    forgotten_by_topic: dict[str, list[int]] = {}
    for topic, index in forgotten:
        forgotten_by_topic.setdefault(topic, []).append(index)

    def name_or_id(topic: str) -> dict[str, Any]:
        return {"topic_id": ids[topic]} if version >= 13 else {"topic": topic}

    fields: dict[str, Any] = dict(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(module.FetchTopic(**name_or_id(t), partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=tuple(
            module.ForgottenTopic(**name_or_id(t), partitions=tuple(ps))
            for t, ps in forgotten_by_topic.items()
        ),
        rack_id="",
    )
    if version >= 15:
        fields["replica_state"] = module.ReplicaState(replica_id=replica_id, replica_epoch=-1)
    else:
        fields["replica_id"] = replica_id
    return cls(**fields)


def answered(response: Any, names: dict[uuid.UUID, str] | None = None) -> dict[tuple[str, int], Any]:
    """The partitions of an answer by (topic, partition); topics by id are named through `names`."""
    return {
        ((names or {}).get(t.topic_id) if hasattr(t, "topic_id") else t.topic, p.partition_index): p
        for t in response.responses
        for p in t.partitions
    }


def offsets(records: bytes | None) -> list[int]:
    return [r.offset for b in walk(records or b"", check_crc=True).batches for r in b.records(records)]


async def produce(client: KafkaClient, topic: str, index: int, count: int) -> None:
    cls = request_type(0, 9)
    module = sys.modules[cls.__module__]
    batch = build_batch([RecordSpec(NOW_MS, None, b"v%d" % i) for i in range(count)])
    data = module.TopicProduceData(
        name=topic, partition_data=(module.PartitionProduceData(index=index, records=batch),)
    )
    response = await client.send(
        cls(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(data,))
    )
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_a_session_by_kafkas_rules(broker: BrokerProcess) -> None:
    server = broker
    create_topics(server.bootstrap, {"s-a": 3, "s-b": 1})

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            ids = await topic_ids(client, ["s-a", "s-b"])
            names = {v: k for k, v in ids.items()}
            await produce(client, "s-a", 0, 3)
            await produce(client, "s-a", 1, 2)

            # A full fetch with epoch 0 opens a session and answers every partition.
            first = await client.send(
                fetch(13, [("s-a", 0, 0), ("s-a", 1, 0), ("s-a", 2, 0)], ids=ids, session_epoch=0)
            )
            session = first.session_id
            assert first.error_code == ErrorCode.none and session != 0
            got = answered(first, names)
            assert list(got) == [("s-a", 0), ("s-a", 1), ("s-a", 2)]
            assert [offsets(got[("s-a", i)].records) for i in range(3)] == [[0, 1, 2], [0, 1], []]

            # Epoch 1 moves two fetch offsets on: nothing new anywhere, so nothing is answered.
            response = await client.send(
                fetch(13, [("s-a", 0, 3), ("s-a", 1, 2)], ids=ids, session_id=session, session_epoch=1)
            )
            assert (response.error_code, response.session_id, answered(response)) == (
                ErrorCode.none,
                session,
                {},
            )
            # Epoch 2 names no partition: the session's are read, and only the one with records answers.
            await produce(client, "s-a", 2, 4)
            response = await client.send(fetch(13, [], ids=ids, session_id=session, session_epoch=2))
            got = answered(response, names)
            assert list(got) == [("s-a", 2)]
            assert offsets(got[("s-a", 2)].records) == [0, 1, 2, 3]
            assert got[("s-a", 2)].high_watermark == 4

            # Epoch 3 adds s-b-0 and forgets s-a-2: the new partition is answered (its high watermark is
            # news), the forgotten one is not, although it has records at its fetch offset.
            response = await client.send(
                fetch(
                    13, [("s-b", 0, 0)], ids=ids, session_id=session, session_epoch=3, forgotten=[("s-a", 2)]
                )
            )
            got = answered(response, names)
            assert list(got) == [("s-b", 0)] and got[("s-b", 0)].high_watermark == 0

            # The same epoch again: INVALID_FETCH_SESSION_EPOCH, no partitions; the session goes on.
            response = await client.send(fetch(13, [], ids=ids, session_id=session, session_epoch=3))
            assert (response.error_code, response.session_id, response.responses) == (
                ErrorCode.invalid_fetch_session_epoch,
                0,
                (),
            )
            await produce(client, "s-a", 0, 1)
            response = await client.send(fetch(13, [], ids=ids, session_id=session, session_epoch=4))
            got = answered(response, names)
            assert list(got) == [("s-a", 0)] and offsets(got[("s-a", 0)].records) == [3]

            # A version naming topics by name cannot go on with a session by id.
            response = await client.send(fetch(12, [], session_id=session, session_epoch=5))
            assert response.error_code == ErrorCode.fetch_session_topic_id_error
            # An id no session has: FETCH_SESSION_ID_NOT_FOUND.
            response = await client.send(fetch(13, [], ids=ids, session_id=session + 1, session_epoch=1))
            assert (response.error_code, response.session_id) == (ErrorCode.fetch_session_id_not_found, 0)
            # Odd fields a stock client never sends: an epoch below -1 is incremental (no session with id
            # 0 or -3), one past the session's is the wrong epoch, forgetting a stranger is nothing.
            for session_id, epoch, error in (
                (0, -7, ErrorCode.fetch_session_id_not_found),
                (-3, 1, ErrorCode.fetch_session_id_not_found),
                (session, 2**31 - 1, ErrorCode.invalid_fetch_session_epoch),
            ):
                response = await client.send(
                    fetch(13, [], ids=ids, session_id=session_id, session_epoch=epoch)
                )
                assert (response.error_code, response.responses) == (error, ())
            response = await client.send(
                fetch(13, [], ids={**ids, "gone": uuid.uuid4()}, session_id=session, session_epoch=5,
                      forgotten=[("gone", 3)])
            )  # fmt: skip
            assert (response.error_code, response.session_id) == (ErrorCode.none, session)

            # Forgetting every partition closes the session: answered sessionless.
            response = await client.send(
                fetch(13, [], ids=ids, session_id=session, session_epoch=6,
                      forgotten=[("s-a", 0), ("s-a", 1), ("s-b", 0)])
            )  # fmt: skip
            assert (response.error_code, response.session_id) == (ErrorCode.none, 0)
            response = await client.send(fetch(13, [], ids=ids, session_id=session, session_epoch=7))
            assert response.error_code == ErrorCode.fetch_session_id_not_found

            # Sessions by name (v7-v12), closed with epoch -1 (FINAL_EPOCH): a fetch outside any session.
            response = await client.send(fetch(12, [("s-a", 0, 0)], session_epoch=0))
            by_name = response.session_id
            assert by_name != 0 and offsets(answered(response)[("s-a", 0)].records) == [0, 1, 2, 3]
            response = await client.send(fetch(12, [("s-a", 0, 4)], session_id=by_name, session_epoch=1))
            assert (response.error_code, answered(response)) == (ErrorCode.none, {})
            response = await client.send(fetch(12, [("s-a", 0, 0)], session_id=by_name, session_epoch=-1))
            assert (response.session_id, list(answered(response))) == (0, [("s-a", 0)])
            response = await client.send(fetch(12, [], session_id=by_name, session_epoch=2))
            assert response.error_code == ErrorCode.fetch_session_id_not_found

            # A topic id the broker does not know stays in the session and is answered with its error.
            stranger = uuid.uuid4()
            both = {**ids, "stranger": stranger}
            response = await client.send(
                fetch(13, [("s-a", 1, 2), ("stranger", 0, 0)], ids=both, session_epoch=0)
            )
            session = response.session_id
            got = answered(response, names)
            assert got[(None, 0)].error_code == ErrorCode.unknown_topic_id and session != 0
            response = await client.send(fetch(13, [], ids=both, session_id=session, session_epoch=1))
            assert [(p.partition_index, p.error_code) for p in answered(response).values()] == [
                (0, ErrorCode.unknown_topic_id)
            ]
            # A wait in an incremental fetch ends with the first append to a partition of the session.
            pending = asyncio.ensure_future(
                client.send(fetch(13, [], ids=both, session_id=session, session_epoch=2, max_wait_ms=5000))
            )
            await asyncio.sleep(0.3)
            async with await KafkaClient.connect(server.bootstrap) as producer:
                await produce(producer, "s-a", 1, 1)
            got = answered(await asyncio.wait_for(pending, 4), names)
            assert offsets(got[("s-a", 1)].records) == [2]
            assert "Traceback" not in server.log()

    asyncio.run(run())


def test_an_incremental_fetch_reads_what_changed_and_what_it_left_unread(broker: BrokerProcess) -> None:
    """The leader reads only the partitions of a session that changed since its last fetch, plus those
    whose last read did not reach their end; the answers are Kafka's, which reads them all."""
    server = broker
    create_topics(server.bootstrap, {"d-a": 4})
    admin = AdminClient({"bootstrap.servers": server.bootstrap})

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            ids = await topic_ids(client, ["d-a"])
            names = {v: k for k, v in ids.items()}
            for i in range(4):
                await produce(client, "d-a", i, 3)
            all_at = [("d-a", i, 3) for i in range(4)]
            first = await client.send(fetch(13, all_at, ids=ids, session_epoch=0))
            session = first.session_id
            assert session != 0 and [p.high_watermark for p in answered(first).values()] == [3] * 4
            epoch = 1
            response = await client.send(fetch(13, [], ids=ids, session_id=session, session_epoch=epoch))
            assert answered(response) == {}

            # Two records each, read with a budget of one byte: the first partition's batch comes whole
            # (minOneMessage), the others only say their new high watermark. The next fetch names only
            # the first partition's new offset, yet the others' records come: their last read was short.
            for i in range(4):
                await produce(client, "d-a", i, 2)
            epoch += 1
            response = await client.send(
                fetch(13, [], ids=ids, session_id=session, session_epoch=epoch, max_bytes=1)
            )
            got = answered(response, names)
            assert [(k[1], offsets(p.records), p.high_watermark) for k, p in got.items()] == [
                (0, [3, 4], 5),
                (1, [], 5),
                (2, [], 5),
                (3, [], 5),
            ]
            epoch += 1
            response = await client.send(
                fetch(13, [("d-a", 0, 5)], ids=ids, session_id=session, session_epoch=epoch)
            )
            got = answered(response, names)
            assert {k[1]: offsets(p.records) for k, p in got.items()} == {1: [3, 4], 2: [3, 4], 3: [3, 4]}
            epoch += 1
            caught_up = [("d-a", i, 5) for i in (1, 2, 3)]
            response = await client.send(
                fetch(13, caught_up, ids=ids, session_id=session, session_epoch=epoch)
            )
            assert answered(response) == {}

            # A log start offset moved by DeleteRecords is news without a record appended.
            deleted = admin.delete_records([CkTopicPartition("d-a", 2, 4)])
            for future in deleted.values():
                future.result(10)
            epoch += 1
            response = await client.send(fetch(13, [], ids=ids, session_id=session, session_epoch=epoch))
            got = answered(response, names)
            assert [(k[1], p.log_start_offset) for k, p in got.items()] == [(2, 4)]

            # A long poll of the session wakes on an append to a partition it did not name, and an append
            # between two fetches is answered by the next one without waiting.
            epoch += 1
            pending = asyncio.ensure_future(
                client.send(fetch(13, [], ids=ids, session_id=session, session_epoch=epoch, max_wait_ms=5000))
            )
            await asyncio.sleep(0.3)
            async with await KafkaClient.connect(server.bootstrap) as producer:
                await produce(producer, "d-a", 3, 1)
            got = answered(await asyncio.wait_for(pending, 4), names)
            assert {k[1]: offsets(p.records) for k, p in got.items()} == {3: [5]}
            await produce(client, "d-a", 1, 1)
            epoch += 1
            began = time.monotonic()
            response = await client.send(
                fetch(13, [("d-a", 3, 6)], ids=ids, session_id=session, session_epoch=epoch, max_wait_ms=5000)
            )
            got = answered(response, names)
            assert {k[1]: offsets(p.records) for k, p in got.items()} == {1: [5]}
            assert time.monotonic() - began < 4
            assert "Traceback" not in server.log()

    asyncio.run(run())


def test_a_session_never_reads_a_deleted_topics_successor_under_the_old_id(broker: BrokerProcess) -> None:
    """A session holds a partition by its topic's id; the topic is deleted and made again under the same
    name. The session's next fetch answers INCONSISTENT_TOPIC_ID for it, as Kafka's readFromLog does,
    never the new topic's records under the old id (the client then refreshes its metadata)."""
    create_topics(broker.bootstrap, {"d-re": 1})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    async def run() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            old = await topic_ids(client, ["d-re"])
            await produce(client, "d-re", 0, 2)
            first = await client.send(fetch(13, [("d-re", 0, 0)], ids=old, session_epoch=0))
            assert offsets(answered(first, {old["d-re"]: "d-re"})[("d-re", 0)].records) == [0, 1]
            admin.delete_topics(["d-re"])["d-re"].result(30)
            deadline = time.monotonic() + 30
            while True:
                try:
                    admin.create_topics([NewTopic("d-re", 1, 1)])["d-re"].result(30)
                    break
                except Exception:  # the deletion is still going on: TOPIC_ALREADY_EXISTS
                    assert time.monotonic() < deadline, "the topic could not be made again"
                    await asyncio.sleep(0.2)
            new = await topic_ids(client, ["d-re"])
            assert new["d-re"] != old["d-re"]
            while True:
                try:
                    await produce(client, "d-re", 0, 3)
                    break
                except AssertionError:  # its leader is not elected yet
                    assert time.monotonic() < deadline, "the new topic took no records"
                    await asyncio.sleep(0.2)
            again = await client.send(fetch(13, [], ids=old, session_id=first.session_id, session_epoch=1))
            assert again.error_code == ErrorCode.none
            answer = answered(again, {old["d-re"]: "d-re"})[("d-re", 0)]
            assert answer.error_code == ErrorCode.inconsistent_topic_id
            assert not offsets(answer.records)

    asyncio.run(run())


def test_a_full_cache_evicts_by_kafkas_rules(broker_factory: Any) -> None:
    """One slot: a consumer's young session is not evicted by another consumer's, a follower's evicts it,
    and no consumer's can evict the follower's; with no slots no session is ever made."""
    server = broker_factory(
        overrides=["auto.create.topics.enable=false", "max.incremental.fetch.session.cache.slots=1"]
    )
    create_topics(server.bootstrap, {"ev": 2})

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            ids = await topic_ids(client, ["ev"])
            one, two = [("ev", 0, 0)], [("ev", 0, 0), ("ev", 1, 0)]
            consumer = (await client.send(fetch(13, one, ids=ids, session_epoch=0))).session_id
            assert consumer != 0
            # another consumer's session, even a larger one: the first is younger than 120 s
            assert (await client.send(fetch(13, two, ids=ids, session_epoch=0))).session_id == 0
            # a follower's (privileged) session evicts a consumer's of any age
            follower = await client.send(fetch(15, one, ids=ids, session_epoch=0, replica_id=7))
            assert follower.session_id not in (0, consumer)
            response = await client.send(fetch(13, [], ids=ids, session_id=consumer, session_epoch=1))
            assert response.error_code == ErrorCode.fetch_session_id_not_found
            assert (await client.send(fetch(13, two, ids=ids, session_epoch=0))).session_id == 0
            response = await client.send(
                fetch(15, [], ids=ids, session_id=follower.session_id, session_epoch=1, replica_id=7)
            )
            assert (response.error_code, response.session_id) == (ErrorCode.none, follower.session_id)

    asyncio.run(run())

    none = broker_factory(overrides=["max.incremental.fetch.session.cache.slots=0"])
    create_topics(none.bootstrap, {"ev0": 1})

    async def run_without_slots() -> None:
        async with await KafkaClient.connect(none.bootstrap) as client:
            ids = await topic_ids(client, ["ev0"])
            response = await client.send(fetch(13, [("ev0", 0, 0)], ids=ids, session_epoch=0))
            assert (response.error_code, response.session_id) == (ErrorCode.none, 0)
            assert [len(t.partitions) for t in response.responses] == [1]

    asyncio.run(run_without_slots())


def produce_many(
    bootstrap: str, topic: str, partitions: int, per_partition: int
) -> dict[tuple[int, int], bytes]:
    """acks=all records round-robin over the partitions; what was acknowledged, by (partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: dict[tuple[int, int], bytes] = {}

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = msg.value()

    for i in range(partitions * per_partition):
        producer.produce(topic, value=b"r-%d" % i, partition=i % partitions, on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0
    return acked


def slot_taken(bootstrap: str, topic: str) -> bool:
    """Whether the broker's session slots are all held by sessions a consumer cannot evict (young
    consumers' or followers'): then a new consumer's full fetch gets no session."""

    async def ask() -> bool:
        async with await KafkaClient.connect(bootstrap) as client:
            ids = await topic_ids(client, [topic])
            return (await client.send(fetch(13, [(topic, 0, 0)], ids=ids, session_epoch=0))).session_id == 0

    return asyncio.run(ask())


PARTITIONS = 60
PER_PARTITION = 20


def test_stock_consumers_read_many_partitions_whole(broker_factory: Any) -> None:
    server = broker_factory(overrides=["max.incremental.fetch.session.cache.slots=1"])
    create_topics(server.bootstrap, {"many-kp": PARTITIONS, "many-ck": PARTITIONS})
    expected = {
        topic: produce_many(server.bootstrap, topic, PARTITIONS, PER_PARTITION)
        for topic in ("many-kp", "many-ck")
    }

    # kafka-python keeps a session (its FetchSessionHandler): the one slot is taken while it reads.
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    try:
        consumer.assign([KpTopicPartition("many-kp", p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        got: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(expected["many-kp"]) and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                for r in records:
                    assert (r.partition, r.offset) not in got
                    got[(r.partition, r.offset)] = r.value
        assert got == expected["many-kp"]
        consumer.poll(300)
        assert slot_taken(server.bootstrap, "many-kp")
    finally:
        consumer.close()

    # librdkafka (2.x) sends sessionless fetches (id 0, epoch -1): every record once all the same.
    ck = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "many-ck", "enable.auto.commit": False})
    try:
        ck.assign([CkTopicPartition("many-ck", p, 0) for p in range(PARTITIONS)])
        got = {}
        deadline = time.monotonic() + 60
        while len(got) < len(expected["many-ck"]) and time.monotonic() < deadline:
            message = ck.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            key = (message.partition(), message.offset())
            assert key not in got
            got[key] = message.value()
        assert got == expected["many-ck"]
    finally:
        ck.close()
    assert "Traceback" not in server.log()


def test_kafkas_java_consumer_holds_a_session_and_closes_it(broker_factory: Any, tmp_path: Path) -> None:
    """Apache Kafka's Java consumer keeps a session (its FetchSessionHandler) while it reads many
    partitions whole, and its close() ends the session with a FINAL_EPOCH fetch, freeing the one slot."""
    import apache_kafka
    import test_java_clients

    test_java_clients.require_apache_kafka()
    test_java_clients.require_javac()
    classes = test_java_clients.compile_clients()
    server = broker_factory(overrides=["max.incremental.fetch.session.cache.slots=1"])
    create_topics(server.bootstrap, {"many-java": PARTITIONS})
    expected = produce_many(server.bootstrap, "many-java", PARTITIONS, PER_PARTITION)
    # no probe before the consumer: a consumer's session is evicted only by a follower or when idle 2 min

    args = ["sessionReader", server.bootstrap, "many-java", str(PARTITIONS), str(len(expected))]
    command = apache_kafka.java_command(
        test_java_clients.MAIN, args, log_path=tmp_path / "java.log", level="warn", classpath=[classes]
    )
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path
    ) as java:
        assert java.stdin is not None and java.stdout is not None
        lines = (json.loads(line) for line in java.stdout if line.startswith("{"))
        try:
            read = next(lines, {})
            assert {(p, o): v.encode() for p, o, v in read.get("records", [])} == expected, read
            assert next(lines, {}) == {"event": "read"}
            assert slot_taken(server.bootstrap, "many-java"), "the Java consumer holds no session"
            java.stdin.write("close\n")
            java.stdin.flush()
            assert next(lines, {}) == {"event": "closed"}
        finally:
            java.stdin.close()
            java.wait(60)
    assert java.returncode == 0
    assert not slot_taken(server.bootstrap, "many-java"), "the session outlived the consumer's close"
    assert "Traceback" not in server.log()


def replica_records(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, dict[int, bytes]]]:
    """Each partition's (high watermark, records by offset) as this broker's replica holds them, through a
    Fetch with the debugging replica id (it reads followers too, to their log end)."""

    async def read() -> dict[int, tuple[int, dict[int, bytes]]]:
        async with await KafkaClient.connect(bootstrap) as client:
            response = await client.send(fetch(12, [(topic, p, 0) for p in range(partitions)], replica_id=-2))
        held = {}
        for p in answered(response).values():
            assert p.error_code == ErrorCode.none, p
            records = p.records or b""
            held[p.partition_index] = (
                p.high_watermark,
                {
                    r.offset: r.value
                    for b in walk(records, check_crc=True).batches
                    for r in b.records(records)
                },
            )
        return held

    return asyncio.run(read())


def test_three_nodes_replicate_many_partitions_through_sessions(replicated_cluster: Any) -> None:
    """RF 3 over many partitions: every acknowledged record on every replica, each replica's high
    watermark at the end (a follower learns it from an answer that carries nothing else), ISR full,
    and every node's session slots held by the other nodes' fetchers."""
    # two slots a node: the two other nodes' fetchers hold them, so a consumer gets no session there
    cluster: LocalKraftCluster = replicated_cluster("max.incremental.fetch.session.cache.slots=2")
    partitions = 120
    create_topics(cluster.bootstrap, {"rf3-many": partitions}, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def isr_full() -> bool:
        meta = admin.list_topics("rf3-many", timeout=10).topics["rf3-many"].partitions
        return len(meta) == partitions and all(len(p.isrs) == 3 for p in meta.values())

    wait_for("every ISR full", isr_full, 60, interval=0.5)
    acked = produce_many(cluster.bootstrap, "rf3-many", partitions, 25)
    ends = {p: 1 + max(o for q, o in acked if q == p) for p in range(partitions)}
    assert len(acked) == partitions * 25

    def caught_up(node_id: int) -> dict[int, tuple[int, dict[int, bytes]]] | None:
        held = replica_records(cluster[node_id].bootstrap, "rf3-many", partitions)
        return held if all(held[p][0] == ends[p] for p in range(partitions)) else None

    for node_id in cluster.nodes:
        held = wait_for(f"node {node_id}'s high watermarks", lambda n=node_id: caught_up(n), 30, interval=0.5)
        for (partition, offset), value in acked.items():
            assert held[partition][1].get(offset) == value, (node_id, partition, offset)
    wait_for("every ISR full", isr_full, 30, interval=0.5)
    for node in cluster.nodes.values():
        assert slot_taken(node.bootstrap, "rf3-many"), f"node {node.node_id}: a slot no follower holds"
        assert "Traceback" not in node.log()


SCALE_PARTITIONS = 1000


@pytest.mark.timeout(300)
def test_a_thousand_partitions_keep_every_acknowledged_record_through_a_kill(replicated_cluster: Any) -> None:
    """RF 3 at a thousand partitions, briefly through a fault: a node killed -9 while an idempotent
    acks=all producer writes to every partition, the writes go on on the other two (min.insync.replicas
    2), and once the node is back every replica of every partition holds every acknowledged record and
    every ISR is full again."""
    cluster: LocalKraftCluster = replicated_cluster()
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic("rf3-thousand", SCALE_PARTITIONS, 3, config={"min.insync.replicas": "2"})
    client.create_topics([topic])["rf3-thousand"].result(60)

    def isr_full() -> bool:
        meta = client.list_topics("rf3-thousand", timeout=10).topics["rf3-thousand"].partitions
        return len(meta) == SCALE_PARTITIONS and all(len(p.isrs) == 3 for p in meta.values())

    wait_for("every ISR full", isr_full, 120, interval=1)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "message.timeout.ms": 120000,
        }
    )
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[str] = []

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            failed.append(f"{msg.partition()}: {err}")

    def write(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(
                "rf3-thousand", value=b"r-%d" % i, partition=i % SCALE_PARTITIONS, on_delivery=done
            )
            producer.poll(0)

    per_round = 5 * SCALE_PARTITIONS
    write(0, per_round)

    def some_acknowledged() -> bool:
        producer.poll(0.1)
        return len(acked) > 1000

    wait_for("some records acknowledged", some_acknowledged, 60)
    cluster[2].kill()  # mid-way: a third of the partitions lose their leader, the rest a follower
    write(per_round, per_round)
    assert producer.flush(180) == 0
    assert not failed, failed[:5]
    assert len(acked) == 2 * per_round

    cluster[2].start()
    cluster[2].wait_ready()
    wait_for("every ISR full again", isr_full, 120, interval=1)
    ends: dict[int, int] = {}
    for partition, offset in acked:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    for node_id in cluster.nodes:

        def caught_up(n: int = node_id) -> dict[int, tuple[int, dict[int, bytes]]] | None:
            held = replica_records(cluster[n].bootstrap, "rf3-thousand", SCALE_PARTITIONS)
            return held if all(held[p][0] == ends[p] for p in range(SCALE_PARTITIONS)) else None

        held = wait_for(f"node {node_id}'s high watermarks", caught_up, 60, interval=1)
        for (partition, offset), value in acked.items():
            assert held[partition][1].get(offset) == value, (node_id, partition, offset)
    for node in cluster.nodes.values():
        assert "Traceback" not in node.log()


def test_the_cache_evicts_stale_sessions_then_the_least_valuable() -> None:
    """FetchSessionCacheShard's rules on the cache itself, its times given (120 s are not waited out):
    a session unused for 120 s goes first; else, among those evictable, the least by (privileged,
    partitions, id) when the new session is worth as much."""
    cache = FetchSessionCache(2)
    minute = 60_000

    def create(now_ms: int, privileged: bool, size: int) -> int:
        return cache.maybe_create_session(now_ms, privileged, size, True, lambda: dict.fromkeys(range(size)))  # type: ignore[arg-type]

    small = create(0, False, 1)
    large = create(0, False, 5)
    assert create(minute, False, 9) == 0  # both young: a consumer evicts none
    cache.touch(cache.get(small), 3 * minute)  # type: ignore[arg-type]
    cache.touch(cache.get(large), 3 * minute)  # type: ignore[arg-type]
    # both now over 120 s old and just used: the smaller goes for a larger one, not for a smaller one
    assert create(3 * minute, False, 1) == 0
    larger = create(3 * minute, False, 6)
    assert larger != 0 and cache.get(small) is None and cache.get(large) is not None
    # a follower's session evicts a consumer's however young it is
    follower = create(3 * minute, True, 1)
    assert follower != 0 and len(cache) == 2 and cache.get(large) is None
    # unused for over 120 s: evicted for anything, whatever its worth
    assert create(6 * minute, False, 1) != 0 and len(cache) == 2
    assert cache.evictions == 3
