"""Crashes and audits of a real broker: kill -9 under load, torn tails, `kcli verify` after rolls.

- A confluent-kafka producer streams with acks=all while the broker is killed with SIGKILL; after a
  restart on the same data dir every acknowledged record is served at the offset it was given and
  the offsets of each partition run without a gap.
- A torn batch written by hand at the end of the last segment is cut at start-up, and the broker's
  log names the file, the byte, the bytes dropped and the log end offset.
- After a run with many rolls (a small segment.bytes) `python -m kcli verify` finds nothing in the
  data dir, and kafka-python's own record reader decodes every segment to what kcli's reader sees.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, start_broker, stop_cleanly
from kafka.record import MemoryRecords

from formats.records import RecordSpec, build_batch
from formats.segment import walk

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


def test_kill_9_under_acks_all_loses_nothing_acknowledged_and_torn_tails_are_cut(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_broker(tmp_path / "first", data_dir=data_dir, overrides=["log.segment.bytes=262144"])
    try:
        create_topic(first, "stream", {})
        acked = stream_until_killed(first, "stream")
    finally:
        if first.is_running():
            first.process.kill()
        first.process.wait()
    assert first.process.returncode == -signal.SIGKILL
    assert len(acked) >= 2000

    # A torn append at the end of partition 0's last segment: a batch header and part of its records.
    # SIGKILL can itself stop the broker's write at a page boundary (Linux checks for a fatal signal
    # between pages), or land just after a roll: start from the last whole batch of the segment.
    partition_dir = data_dir / "stream-0"
    last_segment = sorted(partition_dir.glob("*.log"))[-1]
    kept, log_end = whole_batches_end(last_segment)
    os.truncate(last_segment, kept)
    torn = build_batch([RecordSpec(0, None, b"x" * 100) for _ in range(10)], base_offset=log_end)[:300]
    with open(last_segment, "ab") as f:
        f.write(torn)

    second = start_broker(tmp_path / "second", data_dir=data_dir)
    try:
        log = second.log()
        assert f"{data_dir}: no clean shutdown marker, recovering {PARTITIONS} logs" in log
        assert (
            f"stream-0: truncated {last_segment.name} at byte {kept}, dropping 300 bytes (log end offset now "
            f"{log_end}; the first dropped batch claims offsets {log_end}..{log_end + 9})"
        ) in log
        served = consume_all(second, "stream")
        for partition in range(PARTITIONS):
            offsets = [offset for p, offset in served if p == partition]
            assert offsets == list(range(len(offsets))), f"partition {partition} has gaps"
        missing = {key for key, value in acked.items() if served.get(key) != value}
        assert not missing, f"{len(missing)} acknowledged records are not served, e.g. {sorted(missing)[:3]}"
    finally:
        stop_cleanly(second)


def test_verify_finds_nothing_after_rolls_and_kafka_python_reads_the_same(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "broker")
    try:
        create_topic(broker, "rolled", {"segment.bytes": "65536", "index.interval.bytes": "1024"})
        sent: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            producer = Producer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "compression.type": codec,
                    "linger.ms": 2,
                    "batch.size": 8192,
                }
            )
            for i in range(600):
                key, value = b"%s-%d" % (codec.encode(), i), os.urandom(300) + (b"%d" % i) * 20
                producer.produce(
                    "rolled", value=value, key=key, partition=i % PARTITIONS, headers=[("c", codec.encode())]
                )
                sent[i % PARTITIONS].append((key, value))
            assert producer.flush(20) == 0
    finally:
        stop_cleanly(broker)

    result = run_kcli("verify", str(broker.data_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("no findings"), result.stdout

    for partition in range(PARTITIONS):
        segments = sorted((broker.data_dir / f"rolled-{partition}").glob("*.log"))
        assert len(segments) > 3, "the run should have rolled several segments"
        ours, theirs = [], []
        for segment in segments:
            data = segment.read_bytes()
            view = memoryview(data)
            for batch in walk(view, 0, len(view), check_crc=True).batches:
                for r in batch.records(view):
                    ours.append((r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]))
            records = MemoryRecords(data)
            while records.has_next():
                batch = records.next_batch()
                assert batch.validate_crc()
                for r in batch:
                    theirs.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
        assert ours == theirs
        assert [offset for offset, *_ in ours] == list(range(len(sent[partition])))
        assert [(key, value) for _, _, key, value, _ in ours] == sent[partition]


# ---------------------------------------------------------------------------------------------------


def create_topic(broker: BrokerProcess, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config=config)])[name].result(15)


def stream_until_killed(broker: BrokerProcess, topic: str) -> dict[tuple[int, int], bytes]:
    """Produce 1 KiB records with acks=all; SIGKILL the broker mid-stream. Returns what was acknowledged."""
    acked: dict[tuple[int, int], bytes] = {}

    def delivered(error: object, message: object) -> None:
        if error is None:
            acked[(message.partition(), message.offset())] = message.value()  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 1,
            "batch.size": 32768,
            "message.timeout.ms": 3000,
            "retries": 0,
        }
    )
    deadline = time.monotonic() + 20
    killed_at = None
    i = 0
    while time.monotonic() < deadline:
        try:
            producer.produce(
                topic, value=b"%08d" % i + b"." * 1016, partition=i % PARTITIONS, on_delivery=delivered
            )
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
        if killed_at is None and len(acked) >= 3000:
            os.kill(broker.pid, signal.SIGKILL)  # with produce requests in flight
            killed_at = time.monotonic()
        if killed_at is not None and time.monotonic() - killed_at > 0.5:
            break
    assert killed_at is not None, "the broker never acknowledged enough records"
    producer.flush(4)
    producer.purge()
    return acked


def consume_all(broker: BrokerProcess, topic: str) -> dict[tuple[int, int], bytes]:
    """Every record of every partition, from offset 0 to the end, as (partition, offset) -> value."""
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "audit", "enable.auto.commit": False}
    )
    served: dict[tuple[int, int], bytes] = {}
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while len(served) < sum(ends.values()) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                served[(message.partition(), message.offset())] = message.value()
        assert len(served) == sum(ends.values())
    finally:
        consumer.close()
    return dict(sorted(served.items()))


def whole_batches_end(segment: Path) -> tuple[int, int]:
    """(bytes of whole batches from the start, the offset after them) of a segment."""
    view = memoryview(segment.read_bytes())
    result = walk(view, 0, len(view), check_crc=True)
    if not result.batches:
        return 0, int(segment.stem)
    return result.stop, result.batches[-1].next_offset
