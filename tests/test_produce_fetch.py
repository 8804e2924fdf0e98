"""Produce, Fetch, ListOffsets and OffsetForLeaderEpoch: Kafka's semantics, byte-exact responses, zero copy.

One real `kcli broker start` process serves the protocol tests (kcli's own client sends exactly the
requests a test needs, every version, and bad input no stock client would send). The Fetch response
encoder is checked byte for byte against kio's writer, and the zero-copy path is checked on a broker
in this process: a Fetch handler's answer holds the records only as file regions of segment files.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import io
import os
import struct
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, start_broker, stop_cleanly
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from formats.compression import Codec
from formats.records import RecordSpec, build_batch
from formats.segment import walk
from kcli.broker.apis import fetch as fetch_api
from kcli.broker.apis.context import ConnectionInfo, FileRegion, RequestContext
from kcli.broker.log.log import FetchSlice
from kcli.broker.replication.manager import FetchPartitionData
from kcli.broker.server import Broker
from kcli.client import ClientError, KafkaClient
from kcli.config import BrokerConfig
from kcli.protocol import fetch_codec
from kcli.protocol.messages import request_type, response_type

pytestmark = pytest.mark.timeout(60)

NOW_MS = int(time.time() * 1000)
LONG_AGO_MS = NOW_MS - 30 * 24 * 3600 * 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module; auto-creation off so a Produce to a missing topic stays missing."""
    process = start_broker(tmp_path_factory.mktemp("broker"), overrides=["auto.create.topics.enable=false"])
    try:
        yield process
    finally:
        stop_cleanly(process)


# ---------------------------------------------------------------------------------------------------
# Produce
# ---------------------------------------------------------------------------------------------------


def test_produce_answers_base_offset_log_start_and_append_time_in_every_version(
    server: BrokerProcess,
) -> None:
    create_topics(server, {"p-create": (1, {}), "p-append": (1, {"message.timestamp.type": "LogAppendTime"})})

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            topic_id = await topic_id_of(client, "p-create")
            expected = 0
            for version in range(3, 14):
                batch = build_batch([RecordSpec(NOW_MS, b"k", b"v%d" % i) for i in range(3)])
                response = await client.send(
                    produce_request(version, "p-create", 0, batch, topic_id=topic_id)
                )
                [topic] = response.responses
                assert (topic.topic_id if version >= 13 else topic.name) == (
                    topic_id if version >= 13 else "p-create"
                )
                [p] = topic.partition_responses
                assert (p.index, p.error_code, p.base_offset) == (0, ErrorCode.none, expected)
                assert p.log_append_time is None  # -1 on the wire: CreateTime topic
                if version >= 5:
                    assert p.log_start_offset == 0
                expected += 3
            before = time.time()
            response = await client.send(
                produce_request(9, "p-append", 0, build_batch([(NOW_MS - 5000, None, b"x")]))
            )
            [p] = response.responses[0].partition_responses
            assert p.error_code == ErrorCode.none
            assert before - 1 <= p.log_append_time.timestamp() <= time.time() + 1

    asyncio.run(run())


def test_bad_produce_input_gets_kafkas_error_and_writes_nothing(server: BrokerProcess) -> None:
    create_topics(
        server,
        {
            "p-bad": (1, {"max.message.bytes": "2000", "message.timestamp.before.max.ms": "3600000"}),
            "p-ok": (1, {}),
            "p-compact": (1, {"cleanup.policy": "compact"}),
            "p-tiny-segments": (1, {"segment.bytes": "1024"}),
        },
    )
    good = build_batch([RecordSpec(NOW_MS, None, b"good")])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # the CRC covers the record bytes
    legacy = legacy_v1_batch(b"old")
    cases = [
        (9, "p-bad", bytes(corrupt), ErrorCode.corrupt_message),
        (9, "p-bad", build_batch([RecordSpec(NOW_MS, None, os.urandom(4000))]), ErrorCode.message_too_large),
        (9, "p-bad", good + good, ErrorCode.invalid_record),  # exactly one batch per partition
        (9, "p-bad", legacy, ErrorCode.invalid_record),  # magic v2 only from Produce v3
        (9, "p-bad", b"", ErrorCode.invalid_record),
        (9, "p-bad", good[:40], ErrorCode.invalid_record),  # no whole batch
        (9, "p-bad", good[:8] + struct.pack(">i", 5) + good[12:], ErrorCode.corrupt_message),
        (
            6,
            "p-bad",
            build_batch([RecordSpec(NOW_MS, None, b"z")], codec=Codec.ZSTD),
            ErrorCode.unsupported_compression_type,
        ),
        (9, "missing-topic", good, ErrorCode.unknown_topic_or_partition),
    ]

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            for version, topic, records, error in cases:
                response = await client.send(produce_request(version, topic, 0, records))
                [p] = response.responses[0].partition_responses
                assert (p.error_code, p.base_offset, p.log_start_offset) == (error, -1, -1), (topic, error)

            # A record-level rejection: the message and the record errors (v8+), the log start offset.
            stale = build_batch([RecordSpec(NOW_MS, None, b"a"), RecordSpec(LONG_AGO_MS, None, b"b")])
            response = await client.send(produce_request(9, "p-bad", 0, stale))
            [p] = response.responses[0].partition_responses
            assert (p.error_code, p.base_offset, p.log_start_offset) == (ErrorCode.invalid_timestamp, -1, 0)
            assert p.error_message == "One or more records have been rejected due to invalid timestamp"
            assert [e.batch_index for e in p.record_errors] == [1]
            assert f"Timestamp {LONG_AGO_MS} of message with offset 1 is out of range" in (
                p.record_errors[0].batch_index_error_message
            )

            # A compacted topic needs keys: INVALID_RECORD with the records at fault.
            keyless = build_batch([RecordSpec(NOW_MS, b"k", b"a"), RecordSpec(NOW_MS, None, b"b")])
            response = await client.send(produce_request(9, "p-compact", 0, keyless))
            [p] = response.responses[0].partition_responses
            assert (p.error_code, p.base_offset, p.log_start_offset) == (ErrorCode.invalid_record, -1, 0)
            assert [e.batch_index for e in p.record_errors] == [1]
            assert (
                "Compacted topic cannot accept message without key"
                in p.record_errors[0].batch_index_error_message
            )
            # A batch larger than a whole segment: RECORD_LIST_TOO_LARGE.
            big = build_batch([RecordSpec(NOW_MS, b"k", os.urandom(1500))])
            response = await client.send(produce_request(9, "p-tiny-segments", 0, big))
            [p] = response.responses[0].partition_responses
            assert (p.error_code, p.base_offset, p.log_start_offset) == (
                ErrorCode.record_list_too_large,
                -1,
                -1,
            )

            # Request-level rules: acks, transactional batches without a transactional id.
            response = await client.send(produce_request(9, "p-ok", 0, good, acks=2))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks
            transactional = build_batch(
                [RecordSpec(NOW_MS, None, b"t")],
                producer_id=7,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
            response = await client.send(produce_request(9, "p-ok", 0, transactional))
            assert (
                response.responses[0].partition_responses[0].error_code
                == ErrorCode.transactional_id_authorization_failed
            )

            # Nothing of any of it was written; the topic still takes good input, as do other clients.
            for topic in ("p-bad", "p-ok", "p-compact", "p-tiny-segments"):
                assert await latest_offset(client, topic) == 0, topic
            async with await KafkaClient.connect(server.bootstrap) as other:
                response = await other.send(produce_request(9, "p-bad", 0, good))
                assert response.responses[0].partition_responses[0].base_offset == 0
            # A transactional batch outside an ongoing transaction: Kafka's INVALID_TXN_STATE.
            response = await client.send(produce_request(9, "p-ok", 0, transactional, transactional_id="tx"))
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.invalid_txn_state
            assert await latest_offset(client, "missing-topic") is None  # Produce never creates topics

    asyncio.run(run())


def test_acks_zero_and_acks_all(server: BrokerProcess) -> None:
    create_topics(server, {"p-acks": (1, {"min.insync.replicas": "2"})})

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            batch = build_batch([RecordSpec(NOW_MS, None, b"quiet")])
            await client.send_without_response(produce_request(9, "p-acks", 0, batch, acks=0))
            # The connection still answers, in order, and the record is there.
            assert await latest_offset(client, "p-acks") == 1
            # acks=all on a one-replica topic: Kafka's effective min ISR is min(2, replicas) = 1.
            response = await client.send(produce_request(9, "p-acks", 0, batch, acks=-1))
            assert response.responses[0].partition_responses[0].base_offset == 1
            # A failing acks=0 request closes the connection, as Kafka does.
            await client.send_without_response(produce_request(9, "p-acks", 0, batch[:-3], acks=0))
            with pytest.raises(ClientError):
                await client.send(list_offsets_request(7, "p-acks", 0, -1))
        async with await KafkaClient.connect(server.bootstrap) as client:
            assert await latest_offset(client, "p-acks") == 2

    asyncio.run(run())
    assert "produce request with acks=0" in server.log()


# ---------------------------------------------------------------------------------------------------
# Fetch
# ---------------------------------------------------------------------------------------------------


def test_fetch_returns_whole_batches_within_the_limits(server: BrokerProcess) -> None:
    create_topics(server, {"f-limits": (2, {})})
    batches = [build_batch([RecordSpec(NOW_MS, b"k", bytes([i]) * 3000)]) for i in range(4)]
    size = len(batches[0])

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            for partition in (0, 1):
                for batch in batches:
                    await client.send(produce_request(9, "f-limits", partition, batch))
            ids = {"f-limits": await topic_id_of(client, "f-limits")}
            for version in (4, 7, 11, 12, 15, 18):
                # Partition limits: whole batches only, but the first batch even when it is larger.
                response = await client.send(
                    fetch_request(
                        version, [("f-limits", 1, 1, 10), ("f-limits", 0, 0, 2 * size + 10)], topic_ids=ids
                    )
                )
                (p1, p0) = partitions_of(response)
                assert (p0.error_code, p0.high_watermark, p0.last_stable_offset) == (ErrorCode.none, 4, 4)
                assert offsets_of(p1.records) == [1]  # larger than its 10 bytes, but the first: minOneMessage
                assert offsets_of(p0.records) == [0, 1]
                if version >= 5:
                    assert p0.log_start_offset == 0
                assert p0.aborted_transactions is None  # read_uncommitted
                # The response limit: once a partition returned data, the others get what is left.
                response = await client.send(
                    fetch_request(
                        version,
                        [("f-limits", 0, 0, 10**6), ("f-limits", 1, 0, 10**6)],
                        max_bytes=size + 1,
                        topic_ids=ids,
                    )
                )
                (p0, p1) = partitions_of(response)
                assert offsets_of(p0.records) == [0] and p1.records == b""

    asyncio.run(run())


def test_fetch_long_poll_waits_for_appends_not_for_the_clock(server: BrokerProcess) -> None:
    create_topics(server, {"f-poll": (1, {})})
    batch = build_batch([RecordSpec(NOW_MS, None, b"x" * 100)])

    async def run() -> None:
        async with (
            await KafkaClient.connect(server.bootstrap) as consumer,
            await KafkaClient.connect(server.bootstrap) as producer,
        ):
            # Nothing to read: the answer comes when max_wait is up, empty.
            started = time.monotonic()
            response = await consumer.send(fetch_request(12, [("f-poll", 0, 0, 10**6)], max_wait_ms=300))
            assert 0.25 <= time.monotonic() - started < 2
            assert partitions_of(response)[0].records == b""

            # An append wakes the poll long before its 20 s are up.
            started = time.monotonic()
            pending = consumer.send_nowait(fetch_request(12, [("f-poll", 0, 0, 10**6)], max_wait_ms=20000))
            await asyncio.sleep(0.3)
            assert not pending.done()
            await producer.send(produce_request(9, "f-poll", 0, batch))
            response = await asyncio.wait_for(pending, 5)
            assert 0.3 <= time.monotonic() - started < 3
            assert offsets_of(partitions_of(response)[0].records) == [0]

            # min_bytes: one batch is not enough for two batches' worth; the second append completes it.
            pending = consumer.send_nowait(
                fetch_request(12, [("f-poll", 0, 1, 10**6)], max_wait_ms=20000, min_bytes=len(batch) + 1)
            )
            await producer.send(produce_request(9, "f-poll", 0, batch))
            await asyncio.sleep(0.3)
            assert not pending.done()
            await producer.send(produce_request(9, "f-poll", 0, batch))
            response = await asyncio.wait_for(pending, 5)
            assert offsets_of(partitions_of(response)[0].records) == [1, 2]

    asyncio.run(run())


def test_fetch_errors_sessions_and_isolation(server: BrokerProcess) -> None:
    create_topics(server, {"f-errors": (2, {})})
    batch = build_batch([RecordSpec(NOW_MS, None, b"e")])

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            for _ in range(3):
                await client.send(produce_request(9, "f-errors", 0, batch))
                await client.send(produce_request(9, "f-errors", 1, batch))
            response = await client.send(
                fetch_request(
                    12,
                    [("f-errors", 0, 9, 1000), ("f-errors", 7, 0, 1000), ("f-errors", 1, 0, 1000)],
                    max_wait_ms=5000,
                )
            )
            # Read errors answer at once, in request order; unknown partitions come last (null records).
            out_of_range, ok, unknown = partitions_of(response)
            assert (out_of_range.error_code, out_of_range.high_watermark, out_of_range.records) == (
                ErrorCode.offset_out_of_range,
                -1,
                b"",
            )
            assert offsets_of(ok.records) == [0, 1, 2]
            assert (unknown.partition_index, unknown.error_code, unknown.high_watermark, unknown.records) == (
                7,
                ErrorCode.unknown_topic_or_partition,
                -1,
                None,
            )
            assert response.session_id == 0 and response.error_code == ErrorCode.none

            # Topic ids (v13+): an unknown one is UNKNOWN_TOPIC_ID.
            stranger = uuid.uuid4()
            request = fetch_request(13, [("f-errors", 0, 0, 1000)], topic_ids={"f-errors": stranger})
            [p] = partitions_of(await client.send(request))
            assert p.error_code == ErrorCode.unknown_topic_id
            # The zero id (kio reads it as None) too: the fuzzer found it answered UNKNOWN_SERVER_ERROR
            # after an AttributeError in the encoder, logged with a traceback.
            request = fetch_request(13, [("f-errors", 0, 0, 1000)], topic_ids={"f-errors": uuid.UUID(int=0)})
            response = await client.send(request)
            [p] = partitions_of(response)
            assert (response.responses[0].topic_id, p.error_code) == (None, ErrorCode.unknown_topic_id)
            assert "Traceback" not in server.log()

            # Leader epochs: a future one is UNKNOWN_LEADER_EPOCH; a last fetched epoch that ends before
            # the fetch offset is a diverging epoch.
            [p] = partitions_of(
                await client.send(fetch_request(12, [("f-errors", 0, 0, 1000)], leader_epoch=5))
            )
            assert p.error_code == ErrorCode.unknown_leader_epoch
            request = fetch_request(12, [("f-errors", 0, 0, 1000)], last_fetched_epoch=0)
            [p] = partitions_of(await client.send(request))
            assert offsets_of(p.records) == [0, 1, 2] and p.diverging_epoch.epoch == -1
            request = fetch_request(12, [("f-errors", 0, 3, 1000)], last_fetched_epoch=3)
            [p] = partitions_of(await client.send(request))
            assert p.error_code == ErrorCode.offset_out_of_range  # epoch 3 is unknown to the log

            # Sessions: an incremental fetch finds no session; read_committed reads to the LSO.
            response = await client.send(fetch_request(12, [], session_id=42, session_epoch=1))
            assert (response.error_code, response.session_id, response.responses) == (
                ErrorCode.fetch_session_id_not_found,
                0,
                (),
            )
            [p] = partitions_of(
                await client.send(fetch_request(12, [("f-errors", 0, 0, 1000)], isolation_level=1))
            )
            assert (p.last_stable_offset, p.aborted_transactions, offsets_of(p.records)) == (3, (), [0, 1, 2])

    asyncio.run(run())


def test_fetch_sends_records_only_as_file_regions(tmp_path: Path) -> None:
    """The zero-copy contract: what the handler gives the network layer holds no record bytes."""

    async def run() -> None:
        config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data")})
        broker = Broker(config)
        await broker.start()
        try:
            from kcli.broker.metadata.controller import NewTopic as ControllerTopic

            await broker.node.controller.create_topics([ControllerTopic("zc", 3, 1)])
            now = int(time.time() * 1000)
            for partition in range(3):
                leader = broker.node.replicas.partition("zc", partition)  # appends go through the partition
                for _ in range(20):
                    leader.append_records_to_leader(
                        build_batch([RecordSpec(now, None, os.urandom(1000)) for _ in range(50)]),
                        required_acks=1,
                        now_ms=now,
                    )
            ctx = RequestContext(1, 16, 1, "t", ConnectionInfo("c", "p"), broker.state)
            ids = {"zc": broker.state.image.topic_ids["zc"]}
            request = fetch_request(
                16, [("zc", p, 0, 10**7) for p in range(3)], max_bytes=10**8, topic_ids=ids
            )
            framed = await fetch_api.handle_fetch(ctx, request)
            regions = [part for part in framed.parts if isinstance(part, FileRegion)]
            inline = sum(len(part) for part in framed.parts if isinstance(part, bytes))
            assert len(regions) == 3
            assert sum(r.count for r in regions) == sum(
                broker.node.logs.get_log("zc", p).size_bytes() for p in range(3)
            )
            assert inline < 200  # headers and offsets only
            fds = {broker.node.logs.get_log("zc", p).active_segment.fd for p in range(3)}
            assert {r.file.fileno() for r in regions} == fds
        finally:
            await broker.shutdown(grace=2)

    asyncio.run(run())


FETCH_VERSIONS = st.integers(4, 18)


@st.composite
def fetch_responses(draw: st.DrawFn) -> tuple[int, list, tuple, int, ErrorCode]:
    version = draw(FETCH_VERSIONS)
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        partitions = []
        for index in range(draw(st.integers(0, 3))):
            error = draw(
                st.sampled_from(
                    [ErrorCode.none, ErrorCode.offset_out_of_range, ErrorCode.not_leader_or_follower]
                )
            )
            has_records = draw(st.sampled_from(["region", "empty", "null"]))
            partitions.append(
                {
                    "index": index,
                    "error": error,
                    "hw": draw(st.integers(-1, 2**40)),
                    "lso": draw(st.integers(-1, 2**40)),
                    "start": draw(st.integers(-1, 2**40)),
                    "aborted": draw(
                        st.none()
                        | st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=2).map(
                            tuple
                        )
                    ),
                    "records": has_records,
                    "region": (draw(st.integers(0, 4000)), draw(st.integers(1, 3000))),
                    "diverging": draw(st.none() | st.tuples(st.integers(0, 100), st.integers(0, 2**40))),
                    "leader": draw(st.none() | st.tuples(st.integers(0, 5), st.integers(0, 100))),
                    "preferred": draw(st.integers(-1, 5)),
                }
            )
        topics.append(
            (
                draw(st.text(min_size=1, max_size=20)),
                uuid.UUID(int=draw(st.integers(1, 2**128 - 1))),
                partitions,
            )
        )
    endpoints = tuple(
        draw(
            st.lists(
                st.tuples(
                    st.integers(0, 9),
                    st.text(max_size=10),
                    st.integers(1, 65535),
                    st.none() | st.text(max_size=5),
                ),
                max_size=2,
            )
        )
    )
    return (
        version,
        topics,
        endpoints,
        draw(st.integers(0, 2**31 - 1)),
        draw(st.sampled_from([ErrorCode.none, ErrorCode.fetch_session_id_not_found])),
    )


@settings(max_examples=150, deadline=None)
@given(fetch_responses())
def test_fetch_response_encoding_is_byte_for_byte_kios(case: tuple) -> None:
    version, topics, endpoints, session_id, error = case
    content = bytes(range(256)) * 30
    fd = 99  # the encoder never reads its regions: a descriptor number stands for the segment file
    ours = []
    kio_topics = []
    response_cls = response_type(1, version)
    module = sys.modules[response_cls.__module__]
    for name, topic_id, partitions in topics:
        results, kio_partitions = [], []
        for p in partitions:
            position, size = p["region"]
            records = {"region": FetchSlice(fd, position, size, 0), "empty": None, "null": None}[p["records"]]
            results.append(
                FetchPartitionData(
                    name,
                    topic_id,
                    p["index"],
                    p["error"],
                    p["hw"],
                    p["lso"],
                    p["start"],
                    p["aborted"],
                    records,
                    p["records"] == "empty",
                    p["diverging"],
                    p["leader"],
                    p["preferred"] if version >= 11 else -1,
                )
            )
            inline = {"region": content[position : position + size], "empty": b"", "null": None}[p["records"]]
            values = dict(
                partition_index=p["index"],
                error_code=p["error"],
                high_watermark=p["hw"],
                last_stable_offset=p["lso"],
                log_start_offset=p["start"],
                aborted_transactions=None
                if p["aborted"] is None
                else tuple(module.AbortedTransaction(producer_id=a, first_offset=b) for a, b in p["aborted"]),
                records=inline,
            )
            if version >= 11:
                values["preferred_read_replica"] = p["preferred"]
            if version >= 12 and p["diverging"] is not None:
                values["diverging_epoch"] = module.EpochEndOffset(
                    epoch=p["diverging"][0], end_offset=p["diverging"][1]
                )
            if version >= 12 and p["leader"] is not None:
                values["current_leader"] = module.LeaderIdAndEpoch(
                    leader_id=p["leader"][0], leader_epoch=p["leader"][1]
                )
            kio_partitions.append(build_entity(module.PartitionData, values))
        ours.append((name, topic_id, results))
        kio_topics.append(
            build_entity(
                module.FetchableTopicResponse,
                dict(topic=name, topic_id=topic_id, partitions=tuple(kio_partitions)),
            )
        )
    if version < 12:
        for _, _, results in ours:
            results[:] = [r._replace(diverging_epoch=None, current_leader=None) for r in results]
    framed = fetch_api.encode_response(
        version, error if version >= 7 else ErrorCode.none, ours, endpoints, session_id if version >= 7 else 0
    )
    wire = b"".join(
        content[part.offset : part.offset + part.count] if isinstance(part, FileRegion) else part
        for part in framed.parts
    )
    expected = build_entity(
        response_cls,
        dict(
            throttle_time=datetime.timedelta(0),
            error_code=error if version >= 7 else ErrorCode.none,
            session_id=session_id if version >= 7 else 0,
            responses=tuple(kio_topics),
            node_endpoints=tuple(
                module.NodeEndpoint(node_id=n, host=h, port=port, rack=r) for n, h, port, r in endpoints
            )
            if version >= 16
            else (),
        ),
    )
    buffer = io.BytesIO()
    entity_writer(response_cls)(buffer, expected)
    assert wire == buffer.getvalue()
    assert framed.size == len(wire)
    assert all(part.file.fileno() == fd for part in framed.parts if isinstance(part, FileRegion))
    if version >= fetch_codec.FIRST_VERSION:
        assert_read_by_hand_as_kio(response_cls, bytearray(wire), version)


def assert_read_by_hand_as_kio(response_cls: type, wire: bytearray, version: int) -> None:
    """The follower's FetchResponse reader (records left in the frame) reads what kio reads."""
    theirs, _ = entity_reader(response_cls)(bytes(wire), 0)
    ours = fetch_codec.read_fetch_response(wire, 0, version)
    assert (ours.error_code, ours.session_id) == (theirs.error_code, theirs.session_id)
    assert ours.throttle_time_ms == theirs.throttle_time.total_seconds() * 1000
    assert len(ours.responses) == len(theirs.responses)
    for topic, kio_topic in zip(ours.responses, theirs.responses, strict=True):
        assert (topic.topic, topic.topic_id) == (
            getattr(kio_topic, "topic", None),
            getattr(kio_topic, "topic_id", None),
        )
        assert len(topic.partitions) == len(kio_topic.partitions)
        for p, k in zip(topic.partitions, kio_topic.partitions, strict=True):
            fields = (
                "partition_index",
                "error_code",
                "high_watermark",
                "last_stable_offset",
                "log_start_offset",
            )
            assert [getattr(p, f) for f in fields] == [getattr(k, f) for f in fields]
            assert p.preferred_read_replica == k.preferred_read_replica
            assert (None if p.records is None else bytes(p.records)) == k.records
            assert isinstance(p.records, memoryview | None)  # a view of the frame, not a copy
            aborted = k.aborted_transactions
            assert p.aborted_transactions == (
                None if aborted is None else tuple((a.producer_id, a.first_offset) for a in aborted)
            )
            assert tuple(p.diverging_epoch) == (k.diverging_epoch.epoch, k.diverging_epoch.end_offset)
            assert tuple(p.current_leader) == (k.current_leader.leader_id, k.current_leader.leader_epoch)
    assert [tuple(e) for e in ours.node_endpoints] == [
        (e.node_id, e.host, e.port, e.rack) for e in getattr(theirs, "node_endpoints", ())
    ]


# ---------------------------------------------------------------------------------------------------
# ListOffsets and OffsetForLeaderEpoch
# ---------------------------------------------------------------------------------------------------


def test_list_offsets_earliest_latest_max_timestamp_and_by_time(server: BrokerProcess) -> None:
    create_topics(server, {"lo": (1, {})})
    # Timestamps out of order inside and across batches; the max (NOW+50) is first seen at offset 3.
    batches = [
        [NOW_MS + 10, NOW_MS, NOW_MS + 20],
        [NOW_MS + 50, NOW_MS + 30, NOW_MS + 50],
        [NOW_MS + 40],
    ]

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            for timestamps in batches:
                batch = build_batch([RecordSpec(ts, None, b"v") for ts in timestamps])
                await client.send(produce_request(9, "lo", 0, batch))
            for version in range(1, 12):
                ask = functools.partial(ask_list_offsets, client, version, "lo", 0)
                epoch = 0 if version >= 4 else None
                assert answer(await ask(-2)) == (ErrorCode.none, -1, 0, epoch)
                assert answer(await ask(-1)) == (ErrorCode.none, -1, 7, epoch)
                assert answer(await ask(NOW_MS + 15)) == (ErrorCode.none, NOW_MS + 20, 2, epoch)
                assert answer(await ask(NOW_MS + 35)) == (ErrorCode.none, NOW_MS + 50, 3, epoch)
                assert answer(await ask(NOW_MS + 41)) == (ErrorCode.none, NOW_MS + 50, 3, epoch)
                assert answer(await ask(NOW_MS + 51)) == (
                    ErrorCode.none,
                    -1,
                    -1,
                    -1 if epoch is not None else None,
                )
                if version >= 7:
                    assert answer(await ask(-3)) == (ErrorCode.none, NOW_MS + 50, 3, epoch)
                else:
                    assert answer(await ask(-3))[0] == ErrorCode.unsupported_version
                assert answer(await ask(-4))[0] == (
                    ErrorCode.none if version >= 8 else ErrorCode.unsupported_version
                )
                if version >= 9:
                    assert answer(await ask(-5)) == (ErrorCode.none, -1, -1, -1)
                assert answer(await ask(-6))[0] == (
                    ErrorCode.none if version >= 11 else ErrorCode.unsupported_version
                )
                assert answer(await ask(-7))[0] == ErrorCode.unsupported_version
            assert (
                answer(await client.send(list_offsets_request(7, "nope", 0, -1)))[0]
                == ErrorCode.unknown_topic_or_partition
            )
            assert (
                answer(await client.send(list_offsets_request(7, "lo", 0, -1, leader_epoch=3)))[0]
                == ErrorCode.unknown_leader_epoch
            )
            # A partition asked for twice is answered once, with INVALID_REQUEST.
            request = list_offsets_request(7, "lo", 0, -1)
            topic = request.topics[0]
            doubled = dataclasses.replace(
                request, topics=(dataclasses.replace(topic, partitions=topic.partitions * 2),)
            )
            response = await client.send(doubled)
            assert [p.error_code for p in response.topics[0].partitions] == [ErrorCode.invalid_request]

    asyncio.run(run())


def test_offset_for_leader_epoch(server: BrokerProcess) -> None:
    create_topics(server, {"ofle": (1, {})})

    async def run() -> None:
        async with await KafkaClient.connect(server.bootstrap) as client:
            for _ in range(2):
                await client.send(
                    produce_request(9, "ofle", 0, build_batch([RecordSpec(NOW_MS, None, b"v")]))
                )
            for version in (2, 3, 4):
                ask = functools.partial(ask_offset_for_leader_epoch, client, version)

                def result(response: Any) -> tuple:
                    [p] = response.topics[0].partitions
                    return p.error_code, p.leader_epoch, p.end_offset

                assert result(await ask("ofle", 0)) == (ErrorCode.none, 0, 2)
                assert result(await ask("ofle", 4)) == (ErrorCode.none, -1, -1)
                assert result(await ask("ofle", 0, current=2)) == (ErrorCode.unknown_leader_epoch, -1, -1)
                assert result(await ask("nope", 0)) == (ErrorCode.unknown_topic_or_partition, -1, -1)

    asyncio.run(run())


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


def create_topics(server: BrokerProcess, topics: dict[str, tuple[int, dict[str, str]]]) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, n, 1, config=config) for name, (n, config) in topics.items()]
    )
    for future in futures.values():
        future.result(15)


async def topic_id_of(client: KafkaClient, name: str) -> uuid.UUID:
    cls = request_type(3, 12)
    topic = sys.modules[cls.__module__].MetadataRequestTopic(name=name, topic_id=None)
    response = await client.send(
        cls(topics=(topic,), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    return response.topics[0].topic_id


def build_entity(entity_type: type, values: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(entity_type)}
    return entity_type(**{k: v for k, v in values.items() if k in names})


def produce_request(
    version: int,
    topic: str,
    partition: int,
    records: bytes,
    *,
    acks: int = 1,
    topic_id: uuid.UUID | None = None,
    transactional_id: str | None = None,
) -> Any:
    cls = request_type(0, version)
    module = sys.modules[cls.__module__]
    data = module.PartitionProduceData(index=partition, records=records)
    topic_data = build_entity(
        module.TopicProduceData, dict(name=topic, topic_id=topic_id, partition_data=(data,))
    )
    return cls(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(topic_data,),
    )


def fetch_request(
    version: int,
    partitions: list[tuple[str, int, int, int]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 2**20,
    isolation_level: int = 0,
    session_id: int = 0,
    session_epoch: int = -1,
    leader_epoch: int = -1,
    last_fetched_epoch: int = -1,
    topic_ids: dict[str, uuid.UUID] | None = None,
) -> Any:
    """Partitions as (topic, partition, fetch offset, partition max bytes), grouped by topic in order."""
    cls = request_type(1, version)
    module = sys.modules[cls.__module__]
    topics: list[tuple[str, list]] = []
    for topic, partition, offset, limit in partitions:
        entry = build_entity(
            module.FetchPartition,
            dict(
                partition=partition,
                current_leader_epoch=leader_epoch,
                fetch_offset=offset,
                last_fetched_epoch=last_fetched_epoch,
                log_start_offset=-1,
                partition_max_bytes=limit,
            ),
        )
        if topics and topics[-1][0] == topic:
            topics[-1][1].append(entry)
        else:
            topics.append((topic, [entry]))
    ids = topic_ids or {}
    return build_entity(
        cls,
        dict(
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=session_id,
            session_epoch=session_epoch,
            topics=tuple(
                build_entity(
                    module.FetchTopic,
                    dict(topic=name, topic_id=ids.get(name), partitions=tuple(entries)),
                )
                for name, entries in topics
            ),
            forgotten_topics_data=(),
            rack_id="",
        ),
    )


def list_offsets_request(
    version: int, topic: str, partition: int, timestamp: int, *, leader_epoch: int = -1
) -> Any:
    cls = request_type(2, version)
    module = sys.modules[cls.__module__]
    entry = build_entity(
        module.ListOffsetsPartition,
        dict(partition_index=partition, current_leader_epoch=leader_epoch, timestamp=timestamp),
    )
    return build_entity(
        cls,
        dict(
            replica_id=-1,
            isolation_level=0,
            topics=(module.ListOffsetsTopic(name=topic, partitions=(entry,)),),
            timeout=datetime.timedelta(seconds=5),
        ),
    )


async def ask_list_offsets(
    client: KafkaClient, version: int, topic: str, partition: int, timestamp: int, **kwargs: Any
) -> Any:
    return await client.send(list_offsets_request(version, topic, partition, timestamp, **kwargs))


async def ask_offset_for_leader_epoch(
    client: KafkaClient, version: int, topic: str, epoch: int, current: int = -1
) -> Any:
    cls = request_type(23, version)
    module = sys.modules[cls.__module__]
    partition = module.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch)
    topics = (module.OffsetForLeaderTopic(topic=topic, partitions=(partition,)),)
    return await client.send(build_entity(cls, dict(replica_id=-1, topics=topics)))


def answer(response: Any) -> tuple:
    [p] = response.topics[0].partitions
    return p.error_code, p.timestamp, p.offset, getattr(p, "leader_epoch", None)


async def latest_offset(client: KafkaClient, topic: str) -> int | None:
    error, _, offset, _ = answer(await client.send(list_offsets_request(7, topic, 0, -1)))
    return offset if error == ErrorCode.none else None


def partitions_of(response: Any) -> list[Any]:
    return [p for topic in response.responses for p in topic.partitions]


def offsets_of(records: bytes | None) -> list[int]:
    """The offset of every record in fetched bytes (whole batches, CRCs checked)."""
    view = memoryview(records or b"")
    result = walk(view, 0, len(view), check_crc=True)
    assert all(batch.crc_valid for batch in result.batches)
    return [record.offset for batch in result.batches for record in batch.records(view)]


def legacy_v1_batch(value: bytes) -> bytes:
    """One magic v1 message (offset 0), uncompressed, with its CRC-32."""
    body = struct.pack(">bbq", 1, 0, NOW_MS) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body)
    message = struct.pack(">I", crc) + body
    return struct.pack(">qi", 0, len(message)) + message
