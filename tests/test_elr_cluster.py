"""Eligible Leader Replicas (KIP-966) on real processes: a controller and three brokers (isolated mode),
the cluster upgraded to 4.1 with `kcli features upgrade`, one partition on brokers [3, 4] with
min.insync.replicas 2 and unclean.leader.election.enable false; broker 2 stays up to answer.

Broker 4 is killed (kill -9): fenced at its session's end, it leaves the ISR, which is now below min ISR, so
it becomes eligible. Broker 3, the leader, stops cleanly: the ISR empties and both are eligible, the
partition has no leader. Broker 4 comes back: killed, it may have lost what it acknowledged, so it leaves
the ELR on registering and is not elected. Broker 3 comes back: it leads again, with every record that was
acknowledged, and broker 4 catches up and rejoins the ISR. Without ELR the last ISR member (3) would have
stayed in the ISR; the in-process cases are in test_elr.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_in_process import run_kcli
from kraft_cluster import SESSION, IsolatedCluster, wait_for

TOPIC = "elr"
RECORDS = 20


def describe(bootstrap: str) -> dict[str, Any]:
    """The partition as `kcli topics describe -o json` shows it (DescribeTopicPartitions)."""
    result = run_kcli("topics", "describe", "--topic", TOPIC, "-o", "json", "-b", bootstrap)
    assert result.returncode == 0, result.stderr
    [topic] = [json.loads(line) for line in result.stdout.splitlines()]
    [partition] = topic["partitions"]
    return partition


def wait_partition(bootstrap: str, what: str, check: Any, timeout: float = 30.0) -> dict[str, Any]:
    return wait_for(what, lambda: (lambda p: p if check(p) else None)(describe(bootstrap)), timeout, 0.25)


def produce(bootstrap: str) -> dict[int, bytes]:
    """RECORDS records, acks=all: {offset: value} of the acknowledged ones (all of them)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    acked: dict[int, bytes] = {}
    for i in range(RECORDS):
        producer.produce(
            TOPIC,
            value=f"r-{i}".encode(),
            on_delivery=lambda err, msg: err is None and acked.__setitem__(msg.offset(), msg.value()),
        )
    assert producer.flush(60) == 0 and len(acked) == RECORDS, acked
    return acked


def consume(bootstrap: str, count: int) -> dict[int, bytes]:
    """{offset: value} of the first `count` records of the partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "elr-check", "enable.auto.commit": False}
    )
    got: dict[int, bytes] = {}

    def more() -> bool:
        for message in consumer.consume(count, 0.5):
            assert message.error() is None, message.error()
            got[message.offset()] = message.value()
        return len(got) >= count

    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        wait_for(f"{count} records of {TOPIC}", more, 30, 0.0)
    finally:
        consumer.close()
    return got


def test_an_elr_member_leads_after_the_isr_emptied_and_a_killed_one_does_not(tmp_path: Path) -> None:
    cluster = IsolatedCluster(tmp_path, SESSION)
    try:
        cluster.start()
        observer = cluster.brokers(2)
        upgraded = run_kcli("features", "upgrade", "--release-version", "4.1", "-b", observer)
        assert upgraded.returncode == 0, upgraded.stderr
        created = run_kcli(
            "topics", "create", "--topic", TOPIC, "--replica-assignment", "3:4",
            "--config", "min.insync.replicas=2", "-b", observer,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        wait_partition(observer, "a full ISR", lambda p: p["leader"] == 3 and sorted(p["isr"]) == [3, 4])
        acked = produce(cluster.brokers(3, 4))

        cluster[4].kill()
        p = wait_partition(observer, "broker 4 out of the ISR", lambda p: p["isr"] == [3])
        assert (p["leader"], p["elr"]) == (3, [4])  # below min ISR: the one that left is eligible

        assert cluster[3].terminate() == 0  # controlled shutdown: the ISR may empty with ELR
        p = wait_partition(observer, "an empty ISR", lambda p: p["isr"] == [])
        assert (p["leader"], sorted(p["elr"]), p["last_known_elr"]) == (None, [3, 4], [3])

        cluster[4].start()  # killed, so maybe short of what it acknowledged: no longer eligible
        cluster[4].wait_ready()
        p = wait_partition(observer, "broker 4 out of the ELR", lambda p: p["elr"] == [3])
        assert (p["leader"], p["isr"]) == (None, [])

        cluster[3].start()
        cluster[3].wait_ready()
        wait_partition(
            observer,
            "broker 3 leading and 4 back in the ISR",
            lambda p: p["leader"] == 3 and sorted(p["isr"]) == [3, 4],
        )
        assert consume(observer, RECORDS) == acked
    finally:
        cluster.kill_all()
