"""The broker's network core against real clients and real bad input.

Every test talks to a real `kcli broker start` process (see conftest.py): confluent-kafka
(librdkafka 2.x wheel), Debian's kcat (librdkafka 2.0.2), kafka-python, aiokafka, kcli's own
client, and raw sockets for what no client would send.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import KCLI, BrokerProcess, kcli_env, start_broker, stop_cleanly
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i64Timedelta
from protocol_samples import non_nullable_paths, sample_entity

from kcli.broker.apis import api_versions as api_versions_module
from kcli.broker.apis import build_registry
from kcli.broker.apis import metadata as metadata_module
from kcli.broker.apis.api_versions import advertised_versions
from kcli.broker.apis.context import FileRegion, FramedResponse
from kcli.broker.apis.registry import ApiRegistry, ApiSpec
from kcli.broker.connection import ReceiveBuffer
from kcli.broker.server import SHUTDOWN_GRACE_SECONDS, Broker
from kcli.client import ClientError, KafkaClient
from kcli.config import BrokerConfig
from kcli.protocol.codec import encode
from kcli.protocol.guard import DeclaredSizeError, check_sizes, without_unknown_tags
from kcli.protocol.messages import api_name, kio_versions, request_type, response_type
from kcli.protocol.request_header import parse_request_header

pytestmark = pytest.mark.timeout(60)

st.register_type_strategy(Records, st.binary(max_size=64))
# kio's own strategy for int64 millisecond durations reaches values its reader cannot turn back into a
# timedelta ("timedelta milliseconds overflow", one run in ~15 of the property test below); keep them to
# the milliseconds a float-based timedelta holds exactly.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**53), 2**53).map(lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))),
)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that depend on no state another test could leave and read no log but
    what they made it write (ApiVersions, framing, bad input, each on connections of its own): a
    broker each cost a start and a stop per test. It is stopped, and its exit status checked, after the
    module; the tests that need an empty cluster or a log without errors keep a broker each."""
    process = start_broker(tmp_path_factory.mktemp("shared-broker"))
    try:
        yield process
    finally:
        stop_cleanly(process)


def _all_message_types() -> list[type]:
    """Every request and response class of every version kcli serves, and both request headers: loaded
    when the property test below first draws (importing kio's ~600 message modules costs ~1.4 s, which
    every xdist worker would otherwise pay at collection)."""
    return [
        *(
            make(key, version)
            for key, (low, high) in ((k, kio_versions(k)) for k in sorted(api_key_map))
            for version in range(low, high + 1)
            for make in (request_type, response_type)
        ),
        RequestHeaderV1,
        RequestHeaderV2,
    ]


# ---------------------------------------------------------------------------------------------------
# Stock clients
# ---------------------------------------------------------------------------------------------------


def test_confluent_kafka_lists_topics_and_describes_cluster(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    metadata = admin.list_topics(timeout=10)
    assert list(metadata.brokers) == [1]
    assert (metadata.brokers[1].host, metadata.brokers[1].port) == ("127.0.0.1", broker.port)
    assert metadata.controller_id == 1
    assert metadata.topics == {}
    assert len(metadata.cluster_id) == 22

    # librdkafka asks for auto-creation and auto.create.topics.enable defaults to true, as in Kafka
    created = admin.list_topics(topic="auto-created", timeout=10).topics["auto-created"]
    assert created.error is None and list(created.partitions) == [0]
    assert created.partitions[0].leader == 1 and created.partitions[0].isrs == [1]

    cluster = admin.describe_cluster(request_timeout=10).result()
    assert cluster.cluster_id == metadata.cluster_id
    assert cluster.controller.id == 1
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", broker.port)]


def test_missing_topic_without_auto_creation(broker_factory) -> None:
    from confluent_kafka.admin import AdminClient

    broker = broker_factory(overrides=["auto.create.topics.enable=false"])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    missing = admin.list_topics(topic="no-such-topic", timeout=10).topics["no-such-topic"]
    assert missing.error is not None and missing.error.code() == ErrorCode.unknown_topic_or_partition


def test_kafka_python_admin_and_consumer(broker: BrokerProcess) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        assert consumer.topics() == set()
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        assert admin.list_topics() == []
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
            (1, "127.0.0.1", broker.port)
        ]
    finally:
        admin.close()


def test_aiokafka_bootstraps_and_reads_metadata(broker: BrokerProcess) -> None:
    from aiokafka.client import AIOKafkaClient

    async def run() -> None:
        client = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
        await client.bootstrap()
        try:
            assert [(b.nodeId, b.host, b.port) for b in client.cluster.brokers()] == [
                (1, "127.0.0.1", broker.port)
            ]
            assert client.cluster.controller.nodeId == 1
            assert client.cluster.topics() == set()
            await client.force_metadata_update()
        finally:
            await client.close()

    asyncio.run(run())


def test_kcat_lists_metadata(broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        message = "kcat is not on PATH (apt-get install -y kcat)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    listing = subprocess.run(
        [kcat, "-L", "-J", "-b", broker.bootstrap, "-m", "10"], capture_output=True, text=True, timeout=30
    )
    assert listing.returncode == 0, listing.stderr
    metadata = json.loads(listing.stdout)
    assert metadata["controllerid"] == 1
    assert metadata["brokers"] == [{"id": 1, "name": f"127.0.0.1:{broker.port}"}]
    assert metadata["topics"] == []

    one = subprocess.run(
        [kcat, "-L", "-J", "-b", broker.bootstrap, "-t", "missing", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert one.returncode == 0, one.stderr
    [topic] = json.loads(one.stdout)["topics"]  # auto-created: librdkafka asks, the broker allows
    assert topic["topic"] == "missing" and "error" not in topic
    assert [p["partition"] for p in topic["partitions"]] == [0]


# ---------------------------------------------------------------------------------------------------
# ApiVersions and Metadata semantics, with kcli's own client
# ---------------------------------------------------------------------------------------------------


def test_api_versions_every_version_and_the_unsupported_fallback(shared_broker: BrokerProcess) -> None:
    async def run() -> None:
        async with await KafkaClient.connect(shared_broker.bootstrap) as client:
            advertised = dict(client.broker_versions)
            # what the registry holds: an API is advertised when (and as far as) it is handled, but
            # Produce from v0, as Kafka 4.0 does for librdkafka's compression check (KAFKA-18659); EndTxn
            # and TxnOffsetCommit v5 since the cluster is at transaction.version 2 (Kafka 4.1's default),
            # without them below it
            handled = {spec.api_key: (spec.min_version, spec.max_version) for spec in build_registry()}
            expected = {**handled, 0: (0, handled[0][1])}
            assert handled[26] == (0, 5) and handled[28] == (0, 5)
            assert advertised == expected == advertised_versions(build_registry(), {"transaction.version": 2})
            assert advertised_versions(build_registry()) == {**expected, 26: (0, 4), 28: (0, 4)}
            assert handled[0][0] == 3
            assert {18, 3, 60} <= advertised.keys()
            for version in range(kio_versions(18)[1] + 1):
                cls = request_type(18, version)
                fields = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
                response = await client.send(cls(**fields))
                assert response.error_code == ErrorCode.none
                assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == {
                    (key, low, high) for key, (low, high) in advertised.items()
                }
            bad_name = request_type(18, 3)(client_software_name="-bad-", client_software_version="1")
            response = await client.send(bad_name)
            assert response.error_code == ErrorCode.invalid_request and response.api_keys == ()

    asyncio.run(run())
    # A version from the future, with a body we cannot parse: v0-shaped UNSUPPORTED_VERSION, header v0.
    with _connect(shared_broker) as sock:
        sock.sendall(_frame(_header(18, 99, 7, flexible=True) + b"\x99garbage"))
        correlation_id, body = _read_response(sock)
        assert correlation_id == 7
        response, size = entity_reader(response_type(18, 0))(body, 0)
        assert size == len(body)
        assert response.error_code == ErrorCode.unsupported_version
        assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
            (18, *kio_versions(18))
        ]
    # Produce v0-v2 are advertised, not handled: such a request closes the connection, as in Kafka 4.0.
    with _connect(shared_broker) as sock:
        sock.sendall(_frame(_header(0, 2, 8, flexible=False) + b"\xff\xff\x00\x00\x00\x00"))
        assert _closed_by_broker(sock)


def test_metadata_topics_by_version(broker: BrokerProcess) -> None:
    async def run() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            for version in range(kio_versions(3)[0], kio_versions(3)[1] + 1):
                cls = request_type(3, version)
                topic_cls = _nested(cls, "MetadataRequestTopic")
                names = ["orders", "bad name!", "orders"]
                topics = tuple(_make(topic_cls, name=n, topic_id=None) for n in names)
                response = await client.send(_make(cls, topics=topics, allow_auto_topic_creation=True))
                assert [(t.name, t.error_code) for t in response.topics] == [
                    ("orders", ErrorCode.none),  # auto-created by the first request, then found
                    ("bad name!", ErrorCode.invalid_topic_exception),
                ], version
                assert [(b.node_id, b.host, b.port) for b in response.brokers] == [
                    (1, "127.0.0.1", broker.port)
                ]
                everything = None if version >= 1 else ()
                response = await client.send(_make(cls, topics=everything, allow_auto_topic_creation=False))
                assert [t.name for t in response.topics] == ["orders"]
                if version >= 2:
                    assert response.cluster_id and len(response.cluster_id) == 22
                if version >= 1:
                    assert response.controller_id == 1

    asyncio.run(run())


def test_describe_cluster_endpoint_types(shared_broker: BrokerProcess) -> None:
    async def run() -> None:
        async with await KafkaClient.connect(shared_broker.bootstrap) as client:
            cls = request_type(60, 1)
            ok = await client.send(cls(include_cluster_authorized_operations=True, endpoint_type=1))
            assert ok.error_code == ErrorCode.none and ok.controller_id == 1
            assert ok.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
            wrong = await client.send(cls(include_cluster_authorized_operations=False, endpoint_type=2))
            assert wrong.error_code == ErrorCode.mismatched_endpoint_type
            unknown = await client.send(cls(include_cluster_authorized_operations=False, endpoint_type=9))
            assert unknown.error_code == ErrorCode.unsupported_endpoint_type

    asyncio.run(run())


def test_pipelined_requests_are_answered_in_order(shared_broker: BrokerProcess) -> None:
    frames = []
    for correlation_id in range(1, 61):
        api_key, version = ((18, 2), (3, 12), (60, 0))[correlation_id % 3]
        body = _minimal_request(api_key, version)
        flexible = request_type(api_key, version).__flexible__
        frames.append(_frame(_header(api_key, version, correlation_id, flexible) + body))
    with _connect(shared_broker) as sock:
        sock.sendall(b"".join(frames))
        assert [_read_response(sock)[0] for _ in frames] == list(range(1, 61))


def test_requests_split_at_odd_places_are_answered_in_order(shared_broker: BrokerProcess) -> None:
    """Frames cut anywhere (inside a size prefix, a header, a body) and glued to the next, then one
    request larger than the receive block, all answered in order on one connection."""
    frames = [_frame(_header(18, 2, cid, False) + _minimal_request(18, 2)) for cid in range(1, 41)]
    metadata = request_type(3, 12)
    topic = _make(_nested(metadata, "MetadataRequestTopic"), name="t" * 300_000)  # larger than a block
    big = _make(metadata, topics=(topic,), allow_auto_topic_creation=False)
    frames.append(_frame(_header(3, 12, 41, True) + _encode(big)))
    data = b"".join(frames) * 3
    cuts = [1, 2, 3, 5, 7, 11, 64, 1000, 4096, 65_537]
    with _connect(shared_broker) as sock:
        position, step = 0, 0
        while position < len(data):
            size = cuts[step % len(cuts)]
            sock.sendall(data[position : position + size])
            position += size
            step += 1
        answered = [_read_response(sock)[0] for _ in range(3 * len(frames))]
    assert answered == list(range(1, 42)) * 3


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 5, 300, 16_000, 70_000, 600_000]), min_size=1, max_size=6),
    reads=st.lists(st.integers(1, 200_000), min_size=1, max_size=20),
)
def test_receive_buffer_gives_back_each_frame_whole(sizes: list[int], reads: list[int]) -> None:
    # Reads of a few bytes across 600 KB frames walk the same mid-frame path a million times (20 s of
    # the suite for one example); tiny reads still meet every frame boundary on the smaller streams.
    assume(sum(sizes) <= 50_000 * sum(reads) / len(reads))
    frames = [os.urandom(8) * (size // 8) + os.urandom(size % 8) for size in sizes]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    buffer = ReceiveBuffer(max_frame=1 << 20)
    out, position, turn = [], 0, 0
    while position < len(stream) or len(buffer):
        space = buffer.free_space()
        assert len(space) >= ReceiveBuffer.MIN_READ
        count = min(len(space), reads[turn % len(reads)], len(stream) - position)
        turn += 1
        space[:count] = stream[position : position + count]
        buffer.end += count
        position += count
        while (size := buffer.next_size()) is not None and (frame := buffer.take(size)) is not None:
            out.append(frame)
        if position == len(stream) and len(buffer) == 0:
            break
    assert out == frames
    largest = 4 + max(sizes)
    assert len(buffer.data) <= max(
        ReceiveBuffer.BLOCK, largest + ReceiveBuffer.MIN_READ
    )  # no more than needed


def test_receive_buffer_grows_with_a_frame_as_it_arrives_and_shrinks_only_past_its_keep_size() -> None:
    buffer = ReceiveBuffer(max_frame=64 << 20)
    for size in (3 << 20, 12 << 20):
        buffer.free_space()[:4] = struct.pack(">i", size)
        buffer.end += 4
        assert len(buffer.data) < size  # the size prefix alone allocates nothing for the frame
        grown = 0
        while len(buffer) < 4 + size:
            space = buffer.free_space()
            assert len(space) >= ReceiveBuffer.MIN_READ
            count = min(len(space), 4 + size - len(buffer))
            buffer.end += count
            if len(buffer.data) > grown:
                grown = len(buffer.data)
                assert grown <= max(ReceiveBuffer.BLOCK, 2 * len(buffer) + ReceiveBuffer.MIN_READ)
        assert buffer.take(buffer.next_size()) == bytes(size)
        assert len(buffer.data) <= 4 + size + ReceiveBuffer.MIN_READ
        buffer.free_space()
        if size >= ReceiveBuffer.KEEP:
            assert len(buffer.data) == ReceiveBuffer.BLOCK
    buffer.free_space()[:4] = struct.pack(">i", 2**31 - 1)  # refused by the connection, never allocated
    buffer.end += 4
    assert len(buffer.free_space()) < 1 << 20
    buffer.clear()
    buffer.free_space()[:14] = struct.pack(">i", 50 << 20) + bytes(10)  # announced, barely begun
    buffer.end += 14
    buffer.free_space()
    assert len(buffer.data) == ReceiveBuffer.BLOCK


def test_requests_before_a_bad_frame_are_answered_before_the_connection_closes(
    shared_broker: BrokerProcess,
) -> None:
    good = [_frame(_header(18, 2, cid, False) + _minimal_request(18, 2)) for cid in range(1, 11)]
    with _connect(shared_broker) as sock:
        sock.sendall(b"".join(good) + struct.pack(">i", -1) + b"\0" * 16)  # then a negative length
        assert [_read_response(sock)[0] for _ in good] == list(range(1, 11))
        assert _closed_by_broker(sock)


# ---------------------------------------------------------------------------------------------------
# Bad input: a Kafka-shaped answer or a closed connection, and nobody else notices
# ---------------------------------------------------------------------------------------------------


def test_bad_input_closes_only_that_connection(shared_broker: BrokerProcess) -> None:
    logged_before = len(shared_broker.log())
    bystander = _Bystander(shared_broker)
    try:
        bystander.check()
        cases = {
            "an HTTP request": b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n",
            "a 2 GiB declared length": struct.pack(">i", 2**31 - 1) + b"\0" * 64,
            "a negative length": struct.pack(">i", -1) + b"\0" * 16,
            "a frame too short for a header": _frame(b"\x00\x03"),
            "garbage in a well-sized frame": _frame(b"\xff\x7f\x13\x37" + bytes(range(40))),
            "an unknown API key": _frame(_header(9999, 0, 5, flexible=False)),
            "a version we do not handle": _frame(_header(3, 99, 5, flexible=True)),
            "a body that does not parse": _frame(_header(3, 12, 5, flexible=True) + b"\x05\xff"),
            "a truncated header": _frame(struct.pack(">hhi", 3, 1, 5) + b"\x00"),
            # kio would allocate the declared array before reading it and abort the process.
            "a four-billion-entry compact array": _frame(
                _header(3, 12, 5, True) + b"\xff\xff\xff\xff\x0f\x00\x00"
            ),
            "a two-billion-entry array": _frame(_header(3, 4, 5, False) + b"\x7f\xff\xff\xff\x00"),
            "a tagged field larger than the frame": _frame(
                _header(18, 3, 5, True) + b"\x02a\x021" + b"\x01\x00\xff\xff\xff\x0f"
            ),
        }
        for what, data in cases.items():
            with _connect(shared_broker) as sock:
                sock.sendall(data)
                assert _closed_by_broker(sock), f"{what}: the broker kept the connection open"
            bystander.check()
        # A frame that never completes: the broker waits, then drops it when we give up.
        with _connect(shared_broker) as sock:
            sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)
            sock.shutdown(socket.SHUT_WR)
            assert _closed_by_broker(sock)
        bystander.check()
        assert shared_broker.is_running()
    finally:
        bystander.close()
    log = shared_broker.log()[logged_before:]  # what this test's requests made the broker write
    assert "invalid request size 1195725856" in log
    assert "unknown API key 9999" in log
    assert "Metadata v99" in log
    assert "Tried to allocate a collection of size 4294967294, but there are only 2 bytes remaining" in log


def test_an_api_we_do_not_implement_gets_unsupported_version_and_the_connection_stays(
    shared_broker: BrokerProcess,
) -> None:
    registry = build_registry()
    unimplemented = [key for key in sorted(api_key_map) if key not in registry][:4]
    assert len(unimplemented) == 4
    with _connect(shared_broker) as sock:
        for correlation_id, api_key in enumerate(unimplemented, start=1):
            version = kio_versions(api_key)[1]
            request = _default_request(api_key, version)
            sock.sendall(
                _frame(_header(api_key, version, correlation_id, request.__flexible__) + _encode(request))
            )
            got_id, body = _read_response(sock, flexible=response_type(api_key, version).__flexible__)
            assert got_id == correlation_id
            response, size = entity_reader(response_type(api_key, version))(body, 0)
            assert size == len(body)
            if hasattr(response, "error_code"):
                assert response.error_code == ErrorCode.unsupported_version
        # Still the same connection, still served.
        sock.sendall(_frame(_header(18, 2, 99, flexible=False)))
        assert _read_response(sock)[0] == 99
    assert shared_broker.is_running()


def test_unknown_tagged_fields_are_skipped_as_kafka_does(shared_broker: BrokerProcess) -> None:
    unknown_tag = b"\x01\x63\x03xyz"  # one tagged field, tag 99, 3 bytes
    header = _header(3, 12, 1, True)[:-1] + unknown_tag  # header v2 with a tag Kafka does not define
    topic = b"\x00" * 16 + b"\x07orders" + unknown_tag  # topic_id zero, name, an unknown tag
    body = b"\x02" + topic + b"\x01\x00" + unknown_tag  # one topic, auto-create, no operations
    with _connect(shared_broker) as sock:
        sock.sendall(_frame(header + body))
        correlation_id, payload = _read_response(sock, flexible=True)
        response, _ = entity_reader(response_type(3, 12))(payload, 0)
    assert correlation_id == 1
    assert [(t.name, t.error_code) for t in response.topics] == [("orders", ErrorCode.none)]  # auto-created


def test_random_bodies_never_hurt_the_broker(broker: BrokerProcess) -> None:
    keys = sorted(k for k in api_key_map if k != 18)
    bystander = _Bystander(broker)
    sent = 0

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(keys), st.data(), st.binary(max_size=48))
    def throw(api_key: int, data: st.DataObject, body: bytes) -> None:
        nonlocal sent
        low, high = kio_versions(api_key)
        version = data.draw(st.integers(low, high))
        flexible = request_type(api_key, version).__flexible__
        with _connect(broker) as sock:
            sock.sendall(_frame(_header(api_key, version, 1, flexible) + body))
            sock.settimeout(5)
            try:
                sock.recv(65536)  # an error response, or the connection closed
            except ConnectionResetError:
                pass
        sent += 1

    try:
        throw()
        bystander.check()
    finally:
        bystander.close()
    assert sent >= 150 and broker.is_running()


def test_a_null_in_a_non_nullable_field_is_refused_before_any_handler(broker: BrokerProcess) -> None:
    """Every non-nullable array, string and bytes field of every request version the broker handles,
    sent as null (-1): one WARNING in Kafka's words, the connection closed, no handler reached. kio
    reads a null array as None whatever the schema says; the fuzzer found Produce, ListOffsets and
    AddPartitionsToTxn handlers failing on it ("'NoneType' object is not iterable")."""
    registry = build_registry()
    cases = [
        (spec.api_key, version, path)
        for spec in registry
        for version in range(spec.min_version, spec.max_version + 1)
        for path in non_nullable_paths(request_type(spec.api_key, version))
    ]
    assert len(cases) > 500  # 276 array and 293 string/bytes fields in 199 request versions today
    api_versions_request = _frame(_header(18, 2, 1, False) + _minimal_request(18, 2))
    bystander = _Bystander(broker)
    try:
        for number, (api_key, version, path) in enumerate(cases):
            request_cls = request_type(api_key, version)
            good, bad = encode(sample_entity(request_cls)), encode(sample_entity(request_cls, path))
            assert entity_reader(request_cls)(good, 0)[1] == len(good)  # only the null differs
            header = _header(api_key, version, 2, request_cls.__flexible__)
            with _connect(broker) as sock:
                sock.sendall(api_versions_request + _frame(header + bad) + api_versions_request)
                assert _read_response(sock)[0] == 1, (api_key, version, path)
                assert _closed_by_broker(sock), f"{api_name(api_key)} v{version} {path}: not refused"
            if number % 100 == 0:
                bystander.check()
        bystander.check()
    finally:
        bystander.close()
    log = _log_without_errors(broker)
    refusals = [line for line in log.splitlines() if "was serialized as null" in line]
    assert len(refusals) == len(cases)
    assert all(" WARNING kcli.broker: closing connection from " in line for line in refusals)
    for (api_key, version, path), line in zip(cases, refusals, strict=True):
        assert f"malformed {api_name(api_key)} v{version} request: non-nullable field {path[-1]}" in line


def test_a_client_that_goes_away_mid_answer_is_not_an_error(broker: BrokerProcess) -> None:
    """Pipelined Fetch (answered with sendfile) and Metadata requests, then a reset (SO_LINGER 0) at
    once: the broker is often still writing the answers when the socket goes. The fuzzer saw 514
    "RuntimeError: Transport is closing" tracebacks at ERROR for this; a vanished client is no error."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(400):
        producer.produce("gone", value=os.urandom(2000), partition=i % 4)
    assert producer.flush(15) == 0
    fetch_type = request_type(1, 12)
    fetch_module = _module_of(fetch_type)
    partitions = tuple(
        _make(fetch_module.FetchPartition, partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
        for p in range(4)
    )
    fetch = _make(
        fetch_type,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=50 << 20,
        session_epoch=-1,
        topics=(_make(fetch_module.FetchTopic, topic="gone", partitions=partitions),),
        forgotten_topics_data=(),
        rack_id="",
    )
    fetch_frame = _frame(_header(1, 12, 1, True) + _encode(fetch))
    metadata_frame = _frame(_header(3, 12, 2, True) + _encode(_default_request(3, 12)))
    pipelined = (fetch_frame + metadata_frame) * 4
    bystander = _Bystander(broker)
    try:
        for round_number in range(300):
            with _connect(broker) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.sendall(pipelined)
                if round_number % 3 == 1:
                    sock.recv(100)  # the answers have started to come
                elif round_number % 3 == 2:
                    time.sleep(0.001)
            # closed with a reset: no FIN, queued answers dropped
        bystander.check()
    finally:
        bystander.close()
    _log_without_errors(broker)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.deferred(lambda: st.sampled_from(_all_message_types())).flatmap(st.from_type))
def test_fast_encoder_and_size_guard_agree_with_kio_on_every_message_type(entity: object) -> None:
    data = _encode(entity)  # kio's own writer
    assert encode(entity) == data
    end, edits = check_sizes(type(entity), data)
    assert end == len(data) and edits == []
    assert entity_reader(type(entity))(data, 0)[1] == len(data)
    if len(data) > 1:
        with pytest.raises(DeclaredSizeError):
            check_sizes(type(entity), data[: len(data) // 2])


def test_fast_encoder_writes_a_null_integer_array() -> None:
    """A reassignment cancel (replicas null) once went down the packed-integers path and raised."""
    cls = request_type(45, 0)
    topic_cls, partition_cls = _nested(cls, "ReassignableTopic"), _nested(cls, "ReassignablePartition")
    for replicas in (None, (), (1, 2, 3)):
        partition = partition_cls(partition_index=7, replicas=replicas)
        entity = cls(
            timeout=datetime.timedelta(seconds=60), topics=(topic_cls(name="t", partitions=(partition,)),)
        )
        assert encode(entity) == _encode(entity)


def test_size_guard_walks_a_nullable_integer_array() -> None:
    """A nullable array of integers (a reassignment's replicas, null to cancel; a DescribeTopicPartitions
    answer's eligible leader replicas) was taken for one int32 field, so such a message was refused as
    malformed (found by the property test above, before the broker took reassignments)."""
    for version in (0, 1):
        cls = request_type(45, version)
        topic_cls, partition_cls = _nested(cls, "ReassignableTopic"), _nested(cls, "ReassignablePartition")
        for replicas in (None, (), (1, 2, 3)):
            partition = partition_cls(partition_index=7, replicas=replicas)
            topic = topic_cls(name="t", partitions=(partition, partition))
            entity = _make(cls, timeout=datetime.timedelta(seconds=60), topics=(topic,))
            data = _encode(entity)
            assert check_sizes(cls, data) == (len(data), []), (version, replicas)


@pytest.mark.parametrize("header_type", [RequestHeaderV1, RequestHeaderV2])
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "é" * 300])
def test_request_headers_encode_and_check_like_kio(header_type: type, client_id: str | None) -> None:
    header = header_type(request_api_key=3, request_api_version=12, correlation_id=-5, client_id=client_id)
    data = _encode(header)
    assert encode(header) == data
    assert check_sizes(header_type, data) == (len(data), [])
    flexible = header_type is RequestHeaderV2
    assert parse_request_header(data, flexible) == (-5, client_id or "", len(data))


def test_size_guard_looks_inside_known_tagged_fields() -> None:
    heartbeat = request_type(63, 1)  # BrokerHeartbeat v1: tag 0 is an array of log dir ids
    fixed = b"\x00" * 22
    ok = fixed + b"\x01\x00\x11\x02" + b"\x07" * 16
    assert check_sizes(heartbeat, ok) == (len(ok), [])
    huge = fixed + b"\x01\x00\x05\xff\xff\xff\xff\x0f"
    with pytest.raises(DeclaredSizeError, match="Tried to allocate a collection of size 4294967294"):
        check_sizes(heartbeat, huge)
    unknown = fixed + b"\x02\x00\x11\x02" + b"\x07" * 16 + b"\x09\x02zz"
    end, edits = check_sizes(heartbeat, unknown)
    cleaned = without_unknown_tags(unknown, edits)
    assert end == len(unknown) and cleaned == ok
    assert entity_reader(heartbeat)(cleaned, 0)[0].offline_log_dirs == (uuid.UUID(bytes=b"\x07" * 16),)


# ---------------------------------------------------------------------------------------------------
# Process life cycle
# ---------------------------------------------------------------------------------------------------


def test_sigterm_exits_zero_quickly_with_connections_open(broker: BrokerProcess) -> None:
    with _connect(broker) as idle, _connect(broker) as mid_frame:
        mid_frame.sendall(struct.pack(">i", 50) + b"\x00\x03")
        time.sleep(0.1)
        started = time.monotonic()
        os.kill(broker.pid, signal.SIGTERM)
        status = broker.process.wait(SHUTDOWN_GRACE_SECONDS + 20)
        elapsed = time.monotonic() - started
        assert _closed_by_broker(idle)
    assert status == 0, broker.log()
    # Neither connection held the shutdown: none was left to the grace (the broker says when one was), and
    # the whole stop took less than that grace. A bound of 3 s was a loaded machine's time (4.9 s once).
    assert "were abandoned" not in broker.log()
    assert elapsed < SHUTDOWN_GRACE_SECONDS, elapsed
    assert "shutdown complete" in broker.log()


def test_restart_keeps_cluster_id_and_refuses_a_foreign_log_dir(broker_factory, tmp_path: Path) -> None:
    data = tmp_path / "shared-data"
    first = broker_factory(data_dir=data)
    meta = (data / "meta.properties").read_text()
    cluster_id = _cluster_id_of(first)
    assert f"cluster.id={cluster_id}" in meta and "node.id=1" in meta and "version=1" in meta
    assert first.stop() == 0
    second = broker_factory(data_dir=data)
    assert _cluster_id_of(second) == cluster_id
    assert second.stop() == 0

    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAQ\n")
    result = _run_kcli(
        tmp_path, "broker", "start", "--listen", "127.0.0.1:0", "--override", f"log.dirs={data},{other}"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kcli: Invalid cluster.id in: {other}/meta.properties. Expected {cluster_id}, but read AAAAAAAAAAAAAAAAAAAAAQ."
    ]
    result = _run_kcli(
        tmp_path,
        "broker",
        "start",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data),
        "--override",
        "node.id=7",
    )
    assert (
        result.returncode == 2 and "Stored node id 1 doesn't match the configured node.id 7" in result.stderr
    )


def test_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_kcli(
            tmp_path, "broker", "start", "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "d")
        )
    assert result.returncode == 2
    assert _error_lines(result) == [f"kcli: cannot listen on 127.0.0.1:{port}: address already in use."]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--override", "num.partition=3"],
            "kcli: unknown configuration key 'num.partition' in --override; did you mean 'num.partitions'?",
        ),
        (
            ["--override", "num.partitions=0"],
            "kcli: invalid value '0' for configuration num.partitions: value must be at least 1.",
        ),
        (["--override", "nonsense"], "kcli: override 'nonsense' is not of the form key=value."),
        (
            ["--listen", "localhost"],
            "kcli: --listen 'localhost' is not of the form HOST:PORT (port 0-65535).",
        ),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(tmp_path: Path, args: list[str], expected: str) -> None:
    result = _run_kcli(tmp_path, "broker", "start", "--data-dir", str(tmp_path / "d"), *args)
    assert result.returncode == 2
    assert _error_lines(result) == [expected]


def test_unusable_data_dir_and_config_file_are_one_line_and_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = _run_kcli(
        tmp_path, "broker", "start", "--listen", "127.0.0.1:0", "--data-dir", str(blocker / "data")
    )
    assert result.returncode == 2
    assert _error_lines(result) == [f"kcli: data dir {blocker / 'data'} is not usable: not a directory."]
    result = _run_kcli(tmp_path, "broker", "start", "--config", str(tmp_path / "missing.properties"))
    assert result.returncode == 2
    assert _error_lines(result) == [
        f"kcli: cannot read config file {tmp_path / 'missing.properties'}: no such file or directory."
    ]


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


class _Bystander:
    """A well-behaved client on its own connection that must keep working throughout."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(KafkaClient.connect(broker.bootstrap, request_timeout=5))
        self.port = broker.port

    def check(self) -> None:
        cls = self.client.request_type(3)
        response = self.loop.run_until_complete(
            self.client.send(_make(cls, topics=None, allow_auto_topic_creation=False))
        )
        assert [(b.host, b.port) for b in response.brokers] == [("127.0.0.1", self.port)]

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


def _log_without_errors(broker: BrokerProcess) -> str:
    """The log of a broker that is still running and has logged no ERROR, traceback or asyncio
    complaint (asyncio's lines bypass kcli's format)."""
    assert broker.is_running()
    log = broker.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    assert "socket.send() raised exception" not in log
    return log


def _connect(broker: BrokerProcess) -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=5)
    return sock


def _closed_by_broker(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the broker closes the connection (EOF or reset) without sending anything."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _header(api_key: int, version: int, correlation_id: int, flexible: bool) -> bytes:
    header_type = RequestHeaderV2 if flexible else RequestHeaderV1
    buffer = io.BytesIO()
    entity_writer(header_type)(
        buffer,
        header_type(
            request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="t"
        ),
    )
    return buffer.getvalue()


def _encode(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AssertionError(f"connection closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def _read_response(sock: socket.socket, flexible: bool = False) -> tuple[int, bytes]:
    """(correlation id, body) of the next response; skips the v1 header's tagged fields."""
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    frame = _read_exactly(sock, size)
    (correlation_id,) = struct.unpack_from(">i", frame)
    offset = 4
    if flexible:
        assert frame[4] == 0, "a response header with tagged fields"
        offset = 5
    return correlation_id, frame[offset:]


def _nested(payload_type: type, name: str) -> type:
    return getattr(_module_of(payload_type), name)


def _module_of(payload_type: type) -> types.ModuleType:
    """The kio schema module of a message class, where its nested entity classes live."""
    return sys.modules[payload_type.__module__]


def _make(entity_type: type, **values: object) -> object:
    """Build a kio entity from the values its version has; others fall back to schema defaults."""

    names = {f.name: f for f in dataclasses.fields(entity_type)}
    kwargs = {k: v for k, v in values.items() if k in names}
    for name, f in names.items():
        if name not in kwargs and f.default is dataclasses.MISSING:
            kwargs[name] = False if f.metadata.get("kafka_type") == "bool" else None
    return entity_type(**kwargs)


def _minimal_request(api_key: int, version: int) -> bytes:
    return _encode(_default_request(api_key, version))


def _default_request(api_key: int, version: int) -> object:
    """A well-formed request with empty lists and zero values, from the kio schema."""
    from kcli.protocol.messages import default_entity

    return default_entity(request_type(api_key, version), ErrorCode.none, None)


def _cluster_id_of(process: BrokerProcess) -> str:
    async def run() -> str:
        async with await KafkaClient.connect(process.bootstrap) as client:
            cls = request_type(60, 0)
            return (await client.send(cls(include_cluster_authorized_operations=False))).cluster_id

    return asyncio.run(run())


def _run_kcli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KCLI, *args], cwd=cwd, env=kcli_env(), capture_output=True, text=True, timeout=30)


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return result.stderr.strip().splitlines()


# ---------------------------------------------------------------------------------------------------
# In-process broker: the plug-in points (metadata image, auto-creation hook, zero-copy responses,
# handler failures) and graceful shutdown, over real sockets with kcli's client
# ---------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _in_process_broker(tmp_path: Path, registry: ApiRegistry | None = None):
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data")})
    broker = Broker(config, registry=registry)
    host, port = await broker.start()
    try:
        yield broker, f"{host}:{port}"
    finally:
        await broker.shutdown(grace=5)


def test_metadata_reads_the_image_and_auto_creates_through_the_controller(tmp_path: Path) -> None:
    from kcli.broker.metadata.controller import NewTopic

    async def run() -> None:
        async with _in_process_broker(tmp_path) as (broker, bootstrap):
            [result] = await broker.node.controller.create_topics([NewTopic("orders", 2, 1)])
            assert not result.error.is_failure
            orders_id = broker.state.image.topic("orders").topic_id
            async with await KafkaClient.connect(bootstrap) as client:
                cls = request_type(3, 12)
                topic_cls = _nested(cls, "MetadataRequestTopic")

                def ask(*names: str, auto: bool = True, ops: bool = False, ids: tuple = ()) -> object:
                    topics = tuple(topic_cls(name=n, topic_id=None) for n in names)
                    topics += tuple(topic_cls(name=None, topic_id=i) for i in ids)
                    return cls(
                        topics=topics, allow_auto_topic_creation=auto, include_topic_authorized_operations=ops
                    )

                response = await client.send(ask("orders", "fresh"))
                by_name = {t.name: t for t in response.topics}
                assert by_name["orders"].error_code == ErrorCode.none
                assert by_name["orders"].topic_id == orders_id
                assert [
                    (p.partition_index, p.leader_id, p.leader_epoch, p.isr_nodes)
                    for p in by_name["orders"].partitions
                ] == [(0, 1, 0, (1,)), (1, 1, 0, (1,))]
                assert by_name["fresh"].error_code == ErrorCode.none and len(by_name["fresh"].partitions) == 1
                assert broker.node.logs.get_log("fresh", 0) is not None  # the controller made its log

                response = await client.send(ask("later", auto=False))
                assert [(t.name, t.error_code) for t in response.topics] == [
                    ("later", ErrorCode.unknown_topic_or_partition)
                ]

                response = await client.send(ask("__consumer_offsets", auto=False))
                assert response.topics[0].is_internal

                response = await client.send(ask(ids=(orders_id, uuid.UUID(int=7)), ops=True))
                assert [(t.name, t.error_code) for t in response.topics] == [
                    ("orders", ErrorCode.none),
                    (None, ErrorCode.unknown_topic_id),
                ]
                assert response.topics[0].topic_authorized_operations == sum(
                    1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11)
                )

                everything = await client.send(
                    cls(
                        topics=None,
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    )
                )
                assert sorted(t.name for t in everything.topics) == ["fresh", "orders"]

    asyncio.run(run())


def test_framed_responses_send_file_regions_with_sendfile(tmp_path: Path) -> None:
    """The zero-copy path Fetch will use: kio-encoded parts around records sent from a file."""
    segment = tmp_path / "00000000000000000000.log"
    payload = bytes(range(256)) * 300
    segment.write_bytes(payload)
    first, second = payload[100:5100], payload[20000:70000]
    fetch_response = response_type(1, 4)
    topic_cls, partition_cls = (
        _nested(fetch_response, "FetchableTopicResponse"),
        _nested(fetch_response, "PartitionData"),
    )
    expected = fetch_response(
        throttle_time=datetime.timedelta(0),
        responses=(
            topic_cls(
                topic="t",
                partitions=tuple(
                    partition_cls(
                        partition_index=i,
                        error_code=ErrorCode.none,
                        high_watermark=10,
                        last_stable_offset=10,
                        aborted_transactions=(),
                        records=records,
                    )
                    for i, records in enumerate((first, second))
                ),
            ),
        ),
    )
    body = _encode(expected)
    start_1, start_2 = body.index(first), body.index(second)

    async def handle_fetch(ctx, request):
        handle = open(segment, "rb")  # noqa: SIM115 - closed after the response is sent
        ctx_files.append(handle)
        return FramedResponse(
            fetch_response,
            (
                body[:start_1],
                FileRegion(handle, 100, len(first)),
                body[start_1 + len(first) : start_2],
                FileRegion(handle, 20000, len(second)),
                body[start_2 + len(second) :],
            ),
        )

    ctx_files: list = []
    registry = ApiRegistry([*api_versions_module.APIS, ApiSpec(1, 4, 4, handle_fetch)])

    async def run() -> None:
        async with _in_process_broker(tmp_path, registry) as (_, bootstrap):
            async with await KafkaClient.connect(bootstrap) as client:
                assert client.broker_versions[1] == (4, 4)
                fetch = client.request_type(1)
                request = fetch(max_wait=datetime.timedelta(0), min_bytes=1, topics=())
                responses = await asyncio.gather(*[client.send(request) for _ in range(5)])
                assert all(r == expected for r in responses)

    try:
        asyncio.run(run())
    finally:
        for handle in ctx_files:
            handle.close()


def test_a_failing_handler_answers_unknown_server_error_and_keeps_serving(tmp_path: Path) -> None:
    calls = []

    async def broken(ctx, request):
        calls.append(ctx.correlation_id)
        raise RuntimeError("a bug in a handler")

    registry = ApiRegistry([*api_versions_module.APIS, ApiSpec(60, 0, 2, broken)])

    async def run() -> None:
        async with _in_process_broker(tmp_path, registry) as (_, bootstrap):
            async with await KafkaClient.connect(bootstrap) as client:
                cls = client.request_type(60)
                for _ in range(2):
                    response = await client.send(
                        cls(include_cluster_authorized_operations=False, include_fenced_brokers=False)
                    )
                    assert response.error_code == ErrorCode.unknown_server_error
                assert len(calls) == 2

    asyncio.run(run())


def test_shutdown_answers_the_request_in_flight_then_closes(tmp_path: Path) -> None:
    arrived = asyncio.Event()  # the handler runs: the request is in flight when the shutdown begins

    async def slow_metadata(ctx, request):
        arrived.set()
        await asyncio.sleep(0.3)
        return await metadata_module.handle_metadata(ctx, request)

    registry = ApiRegistry([*api_versions_module.APIS, ApiSpec(3, 0, 13, slow_metadata)])

    async def run() -> None:
        async with _in_process_broker(tmp_path, registry) as (broker, bootstrap):
            client = await KafkaClient.connect(bootstrap)
            idle = await KafkaClient.connect(bootstrap)
            cls = client.request_type(3)
            in_flight = asyncio.ensure_future(
                client.send(_make(cls, topics=None, allow_auto_topic_creation=False))
            )
            await asyncio.wait_for(arrived.wait(), 10)
            started = time.monotonic()
            await broker.shutdown(grace=5)
            assert time.monotonic() - started < 2
            response = await in_flight
            # answered whole; its broker list may already be empty: the controlled shutdown, which comes
            # first, fenced the only broker, and Metadata lists unfenced brokers only
            assert response.cluster_id and response.controller_id == 1
            for closed in (client, idle):
                with pytest.raises(ClientError, match="closed by the broker"):
                    await closed.send(_make(cls, topics=None, allow_auto_topic_creation=False))
                await closed.close()
            with pytest.raises(ClientError, match="cannot connect"):
                await KafkaClient.connect(bootstrap, connect_timeout=2)

    asyncio.run(run())


def test_a_waiting_request_holds_back_the_ones_behind_it_and_all_are_answered_in_order(
    tmp_path: Path,
) -> None:
    """A handler that waits goes on in a task; requests pipelined behind it wait their turn (Kafka mutes
    the channel), then are answered in order from the buffer."""

    async def slow_metadata(ctx, request):
        await asyncio.sleep(0.3)
        return await metadata_module.handle_metadata(ctx, request)

    registry = ApiRegistry([*api_versions_module.APIS, ApiSpec(3, 0, 13, slow_metadata)])
    frames = [_frame(_header(18, 2, 1, False) + _minimal_request(18, 2))]
    frames.append(_frame(_header(3, 4, 2, False) + _minimal_request(3, 4)))
    frames += [_frame(_header(18, 2, cid, False) + _minimal_request(18, 2)) for cid in range(3, 8)]

    async def run() -> None:
        async with _in_process_broker(tmp_path, registry) as (_, bootstrap):
            host, port = bootstrap.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            started = time.monotonic()
            writer.write(b"".join(frames))
            answered = []
            for _ in frames:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                body = await reader.readexactly(size)
                answered.append((struct.unpack_from(">i", body)[0], time.monotonic()))
            writer.close()
            assert [cid for cid, _ in answered] == list(range(1, 8))
            assert answered[0][1] - started < 0.25  # before the slow one
            assert all(at - started >= 0.3 for _, at in answered[1:])  # after it

    asyncio.run(run())


def test_shutdown_abandons_a_request_still_running_after_the_grace(tmp_path: Path, caplog) -> None:
    arrived = asyncio.Event()  # the handler runs: the request is in flight when the shutdown begins

    async def stuck_metadata(ctx, request):
        arrived.set()
        await asyncio.sleep(60)

    registry = ApiRegistry([*api_versions_module.APIS, ApiSpec(3, 0, 13, stuck_metadata)])

    async def run() -> None:
        async with _in_process_broker(tmp_path, registry) as (broker, bootstrap):
            client = await KafkaClient.connect(bootstrap)
            cls = client.request_type(3)
            stuck = asyncio.ensure_future(
                client.send(_make(cls, topics=None, allow_auto_topic_creation=False))
            )
            await asyncio.wait_for(arrived.wait(), 10)
            started = time.monotonic()
            await broker.shutdown(grace=0.3)
            assert time.monotonic() - started < 2
            with pytest.raises(ClientError, match="closed by the broker"):
                await stuck
            await client.close()

    asyncio.run(run())
    assert "1 request(s) still running after 0 s were abandoned" in caplog.text


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory) -> None:
    process = broker_factory(overrides=["connections.max.idle.ms=300"])
    with _connect(process) as idle:
        assert _closed_by_broker(idle, timeout=5)
    assert "idle for more than" in process.log()
