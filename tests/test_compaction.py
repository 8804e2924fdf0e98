"""Compaction in a real broker process, with confluent-kafka producing and consuming.

- A compacted topic with many updates per key (small segments, a low min.cleanable.dirty.ratio, a short
  log.cleaner.backoff.ms): once the cleaner has run, a consumer reading from the beginning gets exactly
  one record per key, the latest, at the offset it was written at; `kcli verify` calls the offset gaps
  compaction.
- A broker killed with SIGKILL while it cleans (several times, at different moments) restarts into a
  complete log: every key's latest value is served, nothing is served twice or out of order, and the
  `.cleaned`/`.swap` files the kills left are gone.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, start_broker, stop_cleanly
from waiting import WaitTimeout, wait_for

from formats.checkpoints import read_offset_checkpoint

pytestmark = pytest.mark.timeout(180)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
FAST_CLEANER = ["log.cleaner.backoff.ms=50"]


def test_a_consumer_from_the_beginning_sees_exactly_the_latest_value_per_key(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "broker", overrides=FAST_CLEANER)
    try:
        create_topic(broker, "prices", {"segment.bytes": "16384", "segment.ms": "500"})
        updates = [(b"key-%d" % (i % 50), b"value-%d" % i) for i in range(6000)]
        produce(broker, "prices", updates)
        time.sleep(0.6)  # segment.ms: the next record rolls, and everything before it becomes cleanable
        produce(broker, "prices", [(b"last", b"x")])
        wait_for(
            "prices-0 cleaned up to the last record",
            lambda: cleaner_checkpoint(broker).get(("prices", 0)) == 6000,
            30,
            interval=0.02,
        )

        latest = {key: (offset, value) for offset, (key, value) in enumerate([*updates, (b"last", b"x")])}
        expected = sorted((offset, key, value) for key, (offset, value) in latest.items())
        assert consume_from_beginning(broker, "prices") == expected
        assert "Log cleaner thread 0 cleaned log prices-0" in broker.log()
    finally:
        stop_cleanly(broker)

    result = run_kcli("verify", "--deep", "-o", "json", str(broker.data_dir / "prices-0"))
    assert result.returncode == 0, result.stdout + result.stderr
    findings = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert {f["kind"] for f in findings if f.get("type") == "finding"} == {"offset_gap_compaction"}


def test_kill_9_during_cleaning_then_restart_leaves_a_complete_log(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    writer = start_broker(tmp_path / "writer", data_dir=data_dir, overrides=["log.cleaner.enable=false"])
    try:  # small records, so that a clean takes long enough (about a second) to be killed in
        create_topic(writer, "big", {"segment.bytes": str(256 * 1024)})
        updates = [(b"key-%d" % (i % 5000), b"%08d" % i) for i in range(100_000)]
        produce(writer, "big", updates)
    finally:
        stop_cleanly(writer)
    produced = {(offset, key, value) for offset, (key, value) in enumerate(updates)}
    latest = {key: (offset, value) for offset, (key, value) in enumerate(updates)}
    partition_dir = data_dir / "big-0"

    def files_ending(*suffixes: str) -> list[str]:
        return [p.name for p in partition_dir.iterdir() if p.name.endswith(suffixes)]

    # Kill as soon as a group is written (.cleaned), once one is swapped in (.deleted), then blindly.
    triggers = [
        lambda: files_ending(".cleaned"),
        lambda: files_ending(".deleted"),
        lambda: time.sleep(0.1) or True,
        lambda: time.sleep(0.2) or True,
    ]
    leftovers = []
    for round, trigger in enumerate(triggers):
        broker = start_broker(tmp_path / f"round-{round}", data_dir=data_dir, overrides=FAST_CLEANER)
        try:
            began = within(5, lambda b=broker: "Beginning cleaning of log big-0" in b.log(), "the clean")
            within(5, trigger, "the kill point", interval=0.001)  # or kill anyway: the clean may be over
        finally:
            broker.process.send_signal(signal.SIGKILL)
            broker.process.wait()
        assert broker.process.returncode == -signal.SIGKILL
        leftovers += files_ending(".cleaned", ".swap")
        if not began:  # an earlier round's clean finished: nothing is left to clean
            break

    broker = start_broker(tmp_path / "last", data_dir=data_dir, overrides=FAST_CLEANER)
    try:
        assert not [p for p in partition_dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
        wait_for(
            "big-0 cleaned", lambda: cleaner_checkpoint(broker).get(("big", 0), 0) > 0, 30, interval=0.02
        )
        served = consume_from_beginning(broker, "big")
    finally:
        stop_cleanly(broker)
    assert leftovers, "no kill landed while a clean had files on disk; make the log larger"
    offsets = [offset for offset, _, _ in served]
    assert offsets == sorted(set(offsets)), "served twice or out of order"
    assert set(served) <= produced
    assert {key: (offset, value) for offset, key, value in served} == latest
    assert len(served) < len(updates) / 10  # the last clean did compact
    assert "interrupted compaction" in "".join(p.read_text() for p in tmp_path.glob("*/broker-*.log"))


# --- helpers ---------------------------------------------------------------------------------------------


def create_topic(broker: BrokerProcess, name: str, config: dict[str, str]) -> None:
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", **config}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(15)


def produce(broker: BrokerProcess, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 8192}
    )
    failures = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            failures.append(error)

    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not failures, failures[:3]


def consume_from_beginning(broker: BrokerProcess, topic: str) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "compaction-audit",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    served = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return served
                raise KafkaException(message.error())
            served.append((message.offset(), message.key(), message.value()))
        raise AssertionError(f"no end of partition after {len(served)} records")
    finally:
        consumer.close()


def within(timeout: float, check: Callable[[], object], what: str, interval: float = 0.02) -> bool:
    """Whether `check` came true within `timeout` s: for the kill rounds, where an event that does not
    come (the clean already finished) is an answer, not a failure."""
    try:
        wait_for(what, check, timeout, interval)
    except WaitTimeout:
        return False
    return True


def cleaner_checkpoint(broker: BrokerProcess) -> dict[tuple[str, int], int]:
    path = broker.data_dir / CLEANER_CHECKPOINT
    return read_offset_checkpoint(path.read_text()) if path.exists() else {}


def test_consumer_offsets_is_compacted_and_commits_survive(tmp_path: Path) -> None:
    """__consumer_offsets is a compacted topic the same cleaner works on: many commits of one group end
    as one record per key, and the committed offsets read back the same after a restart."""
    import asyncio

    from kcli.cluster import Cluster
    from ops.groups import OffsetReset, commit_offsets, fetch_committed

    overrides = [
        *FAST_CLEANER,
        "offsets.topic.num.partitions=1",
        "offsets.topic.segment.bytes=8192",
        "log.cleaner.min.cleanable.ratio=0.01",
        "log.roll.ms=500",
    ]
    data_dir = tmp_path / "data"
    broker = start_broker(tmp_path / "first", data_dir=data_dir, overrides=overrides)

    async def commit_rounds(bootstrap: str, rounds: int) -> dict[tuple[str, int], int]:
        async with await Cluster.connect(bootstrap) as cluster:
            for n in range(rounds):
                await commit_offsets(
                    cluster, "busy", [OffsetReset("orders", p, None, n * 10 + p) for p in range(3)]
                )
            return await fetch_committed(cluster, "busy")

    async def committed(bootstrap: str) -> dict[tuple[str, int], int]:
        async with await Cluster.connect(bootstrap) as cluster:
            return await fetch_committed(cluster, "busy")

    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(15)
        expected = {("orders", p): 3990 + p for p in range(3)}
        assert asyncio.run(commit_rounds(broker.bootstrap, 400)) == expected
        time.sleep(0.6)  # log.roll.ms: the next commit rolls, and everything before it becomes cleanable
        assert asyncio.run(commit_rounds(broker.bootstrap, 400)) == expected
        wait_for(
            "__consumer_offsets-0 cleaned",
            lambda: ("__consumer_offsets", 0) in cleaner_checkpoint(broker),
            30,
            interval=0.02,
        )
        assert "Log cleaner thread 0 cleaned log __consumer_offsets-0" in broker.log()
    finally:
        stop_cleanly(broker)
    cleaned_up_to = cleaner_checkpoint(broker)[("__consumer_offsets", 0)]  # after the last clean

    segments = sorted((data_dir / "__consumer_offsets-0").glob("*.log"))
    done = run_kcli("dump-segment", "--offsets-decoder", *map(str, segments[:-1]))
    assert done.returncode == 0, done.stderr
    dumped = done.stdout
    offsets = [
        int(line.split("offset: ")[1].split()[0]) for line in dumped.splitlines() if '"group":"busy"' in line
    ]
    cleaned = [offset for offset in offsets if offset < cleaned_up_to]
    # At most one commit per key in the cleaned section: none when a later clean, whose checkpoint the
    # shutdown overtook, kept each key's newer commit above it (the checkpoint follows the swap, as in Kafka).
    assert cleaned_up_to > 0 and len(cleaned) <= 3, "more than one commit per key left in the cleaned section"

    second = start_broker(tmp_path / "second", data_dir=data_dir, overrides=overrides)
    try:
        assert asyncio.run(committed(second.bootstrap)) == expected
    finally:
        stop_cleanly(second)
