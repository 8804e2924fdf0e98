"""Idempotent producers against a real broker: real clients, cut connections, kill -9, snapshots on disk.

- confluent-kafka with enable.idempotence=true writes through a loopback proxy that drops produce
  responses and closes both sockets mid-stream, so appended batches are retried: the partitions end
  up with every record exactly once, in order.
- kafka-python 3.x, whose producer is idempotent by default, produces and its records carry a producer id.
- InitProducerId hands out ids from blocks the controller records, so a restart never repeats one.
- After kill -9 and a restart, a retry of a batch written before the crash (sent with the raw
  kcli client) is answered with its original offset; snapshots exist per roll and at clean shutdown,
  and `kcli dump-segment` prints them as kafka-dump-log does.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cli_in_process import run_kcli
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, start_broker, stop_cleanly
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from formats.records import RecordSpec, build_batch
from formats.segment import walk
from kcli.client import KafkaClient
from kcli.protocol.messages import request_type

NOW_MS = 1_700_000_000_000


# --- a proxy that loses answers ---------------------------------------------------------------------


class CuttingProxy:
    """A loopback TCP proxy to one broker that reads Kafka's framing. While `cutting`, it now and then
    swallows a Produce response (so the batch was appended but the producer never hears of it) and
    closes both sockets, as a network failure would: the producer must retry into the broker's
    duplicate detection. Other responses always pass, so the client keeps its metadata and ids."""

    def __init__(self, seed: int = 5, cut_one_in: int = 6) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.target_port = 0
        self.cutting = False
        self.cuts = 0
        self._random = random.Random(seed)
        self._cut_one_in = cut_one_in
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, target_port: int) -> None:
        self.target_port = target_port
        self._spawn(self._accept)

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)
        for thread in self._threads:
            thread.join(timeout=2)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                _close(client)
                continue
            for sock in (client, upstream):
                sock.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            produce_ids: set[int] = set()
            self._spawn(self._pump, client, upstream, produce_ids, False)
            self._spawn(self._pump, upstream, client, produce_ids, True)

    def _pump(
        self, source: socket.socket, sink: socket.socket, produce_ids: set[int], from_broker: bool
    ) -> None:
        """Forward whole frames; requests note Produce correlation ids, responses may be cut."""
        try:
            while not self._stop.is_set():
                frame = _read_frame(source)
                if frame is None:
                    break
                if from_broker:
                    (correlation_id,) = struct.unpack_from(">i", frame, 4)
                    if correlation_id in produce_ids and self._should_cut():
                        break
                else:
                    api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
                    if api_key == 0:
                        produce_ids.add(correlation_id)
                sink.sendall(frame)
        except OSError:
            pass
        _close(source)
        _close(sink)

    def _should_cut(self) -> bool:
        with self._lock:
            if not self.cutting or self._random.randrange(self._cut_one_in):
                return False
            self.cuts += 1
            return True


def _read_frame(sock: socket.socket) -> bytes | None:
    header = _read_exactly(sock, 4)
    if header is None:
        return None
    body = _read_exactly(sock, struct.unpack(">i", header)[0])
    return None if body is None else header + body


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


# --- real clients -----------------------------------------------------------------------------------


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)
    futures[name].result(timeout=15)


def consume(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    """Every record of the topic's partitions, in offset order, with their offsets checked contiguous."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "idempotence-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 30
    try:
        while sum(map(len, values.values())) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error():
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    continue
                values[message.partition()].append(message.value())
                offsets[message.partition()].append(message.offset())
    finally:
        consumer.close()
    for p, seen in offsets.items():
        assert seen == list(range(len(seen))), f"partition {p}: offsets are not contiguous from 0"
    return values


def test_confluent_idempotent_producer_through_cut_connections_no_duplicates_no_gaps(broker_factory) -> None:
    proxy = CuttingProxy()
    try:
        broker = broker_factory(overrides=[f"advertised.listeners=PLAINTEXT://{proxy.address}"])
        proxy.start(broker.port)
        create_topic(proxy.address, "idem", partitions=2)
        per_partition = 6000
        errors: list[str] = []
        delivered = [0]

        def on_delivery(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(str(error))
            else:
                delivered[0] += 1

        producer = Producer(
            {
                "bootstrap.servers": proxy.address,
                "enable.idempotence": True,
                "linger.ms": 2,
                "batch.num.messages": 200,
                "reconnect.backoff.ms": 10,
                "reconnect.backoff.max.ms": 50,
                "retry.backoff.ms": 10,
                "message.timeout.ms": 60000,
            }
        )
        proxy.cutting = True
        for seq in range(per_partition):
            for partition in (0, 1):
                value = f"{partition}:{seq:06d}".encode()
                while True:
                    try:
                        producer.produce("idem", value=value, partition=partition, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.05)
            if seq % 100 == 0:
                producer.poll(0)
                time.sleep(0.03)  # spread the stream over many requests, and so over many cuts
        assert producer.flush(60) == 0
        proxy.cutting = False
        assert errors == []
        assert delivered[0] == 2 * per_partition
        assert proxy.cuts >= 10, f"only {proxy.cuts} connections were cut: the test proved nothing"

        values = consume(proxy.address, "idem", 2, 2 * per_partition)
        for partition in (0, 1):
            expected = [f"{partition}:{seq:06d}".encode() for seq in range(per_partition)]
            assert values[partition] == expected, f"partition {partition}: duplicates, gaps or reordering"
    finally:
        proxy.close()


def test_kafka_python_default_idempotent_producer(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    futures = [producer.send("kp", key=b"k", value=f"v{i}".encode(), partition=0) for i in range(300)]
    producer.flush(timeout=30)
    assert [f.get(timeout=10).offset for f in futures] == list(range(300))
    producer.close(timeout=10)
    values = consume(broker.bootstrap, "kp", 1, 300)
    assert values[0] == [f"v{i}".encode() for i in range(300)]
    segment = next((broker.data_dir / "kp-0").glob("*.log")).read_bytes()
    producer_ids = {(b.producer_id, b.producer_epoch) for b in walk(segment).batches}
    assert len(producer_ids) == 1 and next(iter(producer_ids))[0] >= 0, producer_ids


# --- raw protocol: ids, restarts, snapshots ----------------------------------------------------------


async def init_producer_id(client: KafkaClient, transactional_id: str | None = None, **fields: int) -> Any:
    cls = request_type(22, 4)
    request = cls(
        transactional_id=transactional_id,
        transaction_timeout=datetime.timedelta(milliseconds=fields.pop("timeout_ms", 60000)),
        producer_id=fields.pop("producer_id", -1),
        producer_epoch=fields.pop("producer_epoch", -1),
    )
    return await client.send(request)


async def produce(client: KafkaClient, topic: str, records: bytes) -> Any:
    cls = request_type(0, 9)
    module = sys.modules[cls.__module__]
    data = module.PartitionProduceData(index=0, records=records)
    request = cls(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(module.TopicProduceData(name=topic, partition_data=(data,)),),
    )
    response = await client.send(request)
    [partition] = response.responses[0].partition_responses
    return partition


def idempotent_batch(producer_id: int, base_sequence: int, count: int = 3) -> bytes:
    specs = [RecordSpec(NOW_MS + base_sequence + i, b"k", bytes(300)) for i in range(count)]
    return build_batch(specs, producer_id=producer_id, producer_epoch=0, base_sequence=base_sequence)


def test_init_producer_id_blocks_survive_restarts_and_transactional_ids_wait(
    broker_factory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"

    async def ids(broker: BrokerProcess, count: int) -> list[tuple[int, int, ErrorCode]]:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            out = []
            for _ in range(count):
                r = await init_producer_id(client)
                out.append((r.producer_id, r.producer_epoch, r.error_code))
            return out

    first = start_broker(tmp_path / "first", data_dir=data_dir)
    before = asyncio.run(ids(first, 3))
    assert before == [(0, 0, ErrorCode.none), (1, 0, ErrorCode.none), (2, 0, ErrorCode.none)]

    async def edge_cases() -> None:
        async with await KafkaClient.connect(first.bootstrap) as client:
            # v3+: an id and epoch from before are ignored without a transactional id: a fresh id, epoch 0.
            r = await init_producer_id(client, producer_id=1, producer_epoch=7)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.none, 3, 0)
            r = await init_producer_id(client, producer_id=1)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.invalid_request, -1, -1)
            r = await init_producer_id(client, "")
            assert r.error_code == ErrorCode.invalid_request
            r = await init_producer_id(client, "tx", timeout_ms=16 * 60 * 1000)
            assert r.error_code == ErrorCode.invalid_transaction_timeout
            r = await init_producer_id(client, "tx")
            assert (r.error_code, r.producer_id) == (ErrorCode.coordinator_not_available, -1)

    try:
        asyncio.run(edge_cases())
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    second = broker_factory(data_dir=data_dir)
    after = asyncio.run(ids(second, 2))
    # The first block [0, 1000) was recorded before any id was handed out; a restart takes the next one.
    assert after == [(1000, 0, ErrorCode.none), (1001, 0, ErrorCode.none)]


def test_kill_9_restart_keeps_deduplicating_and_snapshots_follow_kafka(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_broker(tmp_path / "first", data_dir=data_dir)
    partition_dir = data_dir / "snap-0"

    async def before_crash() -> int:
        async with await KafkaClient.connect(first.bootstrap) as client:
            producer_id = (await init_producer_id(client)).producer_id
            for seq in range(0, 30, 3):
                answer = await produce(client, "snap", idempotent_batch(producer_id, seq))
                assert (answer.error_code, answer.base_offset) == (ErrorCode.none, seq)
            return producer_id

    try:
        create_topic(first.bootstrap, "snap", config={"segment.bytes": "2100"})
        producer_id = asyncio.run(before_crash())
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    bases = sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))
    snapshots = sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.snapshot"))
    assert len(bases) >= 3 and snapshots == bases[1:]  # one per roll, named after the new segment

    second = start_broker(tmp_path / "second", data_dir=data_dir)

    async def after_crash() -> None:
        async with await KafkaClient.connect(second.bootstrap) as client:
            for seq in (27, 24, 18):  # retries of batches written before the crash
                answer = await produce(client, "snap", idempotent_batch(producer_id, seq))
                assert (answer.error_code, answer.base_offset) == (ErrorCode.none, seq)
            too_old = await produce(client, "snap", idempotent_batch(producer_id, 9))
            assert too_old.error_code == ErrorCode.out_of_order_sequence_number
            gap = await produce(client, "snap", idempotent_batch(producer_id, 33))
            assert gap.error_code == ErrorCode.out_of_order_sequence_number
            answer = await produce(client, "snap", idempotent_batch(producer_id, 30))
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 30)

    try:
        asyncio.run(after_crash())
    finally:
        stop_cleanly(second)
    log_end = 33
    snapshot = partition_dir / f"{log_end:020d}.snapshot"
    assert snapshot.exists(), sorted(p.name for p in partition_dir.iterdir())
    dumped = run_kcli("dump-segment", str(snapshot))
    assert dumped.returncode == 0, dumped.stderr
    timestamp = NOW_MS + 30 + 2
    assert (
        f"producerId: {producer_id} producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {timestamp} firstSequence: 30 lastSequence: 32 lastOffset: 32 "
        f"offsetDelta: 2 timestamp: {timestamp}"
    ) in dumped.stdout.splitlines()
    assert re.search(r"Dumping .*\.snapshot", dumped.stdout)
