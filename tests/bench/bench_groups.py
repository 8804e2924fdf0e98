"""Benchmark the group coordinator with confluent-kafka consumers against a real `kcli broker start`.

    python tests/bench/bench_groups.py [--failover-runs 3] [--long-failover-runs 1] [--join-runs 3]

failover: two members (processes, heartbeat.interval.ms 3000 as librdkafka's default) share six
  partitions; one is killed with SIGKILL and a record is produced to each of its partitions at once;
  the figure is the time until the other member has consumed them all. Measured with session.timeout.ms
  6000 and with Kafka's default 45000.
join: ten consumers in one process subscribe to a 20-partition topic at the same moment; the figure
  is the time from subscribe() until every one of them has a non-empty assignment. Measured with
  group.initial.rebalance.delay.ms at Kafka's default (3000) and at 0; the first group on a fresh
  broker also pays for creating __consumer_offsets (50 partitions), reported apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from conftest import BrokerProcess, kcli_env, start_broker  # noqa: E402

MEMBER = REPO / "tests" / "group_member.py"
JOIN_CONSUMERS = 10
JOIN_PARTITIONS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--failover-runs", type=int, default=3, help="runs with session.timeout.ms 6000")
    parser.add_argument(
        "--long-failover-runs", type=int, default=1, help="runs with session.timeout.ms 45000"
    )
    parser.add_argument("--join-runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcli-bench-groups-") as tmp:
        broker = start_broker(Path(tmp) / "default")
        try:
            first = join_time(broker, f"first-{uuid.uuid4().hex[:6]}")
            print(
                f"join, first group on a fresh broker (creates __consumer_offsets), delay 3000: {first:.2f} s"
            )
            joins = [join_time(broker, f"join-{i}") for i in range(args.join_runs)]
            report("join, 10 consumers, group.initial.rebalance.delay.ms 3000", joins)
            for session_ms, runs in ((6000, args.failover_runs), (45000, args.long_failover_runs)):
                if runs:
                    report(
                        f"failover, session.timeout.ms {session_ms}", failover_times(broker, session_ms, runs)
                    )
        finally:
            broker.stop()
        broker = start_broker(Path(tmp) / "no-delay", overrides=["group.initial.rebalance.delay.ms=0"])
        try:
            join_time(broker, "warm-up")
            joins = [join_time(broker, f"join-{i}") for i in range(args.join_runs)]
            report("join, 10 consumers, group.initial.rebalance.delay.ms 0", joins)
        finally:
            broker.stop()
    print(
        f"reproduce: python {Path(__file__).relative_to(REPO)} --failover-runs {args.failover_runs} "
        f"--long-failover-runs {args.long_failover_runs} --join-runs {args.join_runs}"
    )


def report(label: str, seconds: list[float]) -> None:
    runs = ", ".join(f"{s:.2f}" for s in seconds)
    print(f"{label}: median {statistics.median(seconds):.2f} s (runs: {runs})")


# --- join time --------------------------------------------------------------------------------------------


def join_time(broker: BrokerProcess, group: str) -> float:
    topic = f"join-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, JOIN_PARTITIONS)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "session.timeout.ms": 45000,
                "auto.offset.reset": "earliest",
            }
        )
        for _ in range(JOIN_CONSUMERS)
    ]
    assigned = [threading.Event() for _ in consumers]
    stop = threading.Event()

    def run(consumer: Consumer, done: threading.Event) -> None:
        while not stop.is_set():
            consumer.poll(0.02)
            if consumer.assignment():
                done.set()

    threads = [
        threading.Thread(target=run, args=pair, daemon=True) for pair in zip(consumers, assigned, strict=True)
    ]
    started = time.monotonic()
    for consumer in consumers:
        consumer.subscribe([topic])
    for thread in threads:
        thread.start()
    for done in assigned:
        if not done.wait(120):
            raise SystemExit(f"group {group}: not every consumer was assigned within 120 s")
    elapsed = time.monotonic() - started
    stop.set()
    for thread in threads:
        thread.join()
    for consumer in consumers:
        consumer.close()
    return elapsed


# --- failover time ----------------------------------------------------------------------------------------


class Member:
    def __init__(self, broker: BrokerProcess, group: str, topic: str, session_ms: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER), "confluent", broker.bootstrap, group, topic]
            + ["--session-ms", str(session_ms), "--heartbeat-ms", "3000"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=kcli_env(),
        )
        self.assigned: list[int] = []
        self.consumed: set[tuple[int, int]] = set()
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self.changed:
                if "assigned" in event:
                    self.assigned = event["assigned"]
                else:
                    self.consumed.add(tuple(event["consumed"]))
                self.changed.notify_all()

    def wait(self, condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
        with self.changed:
            if not self.changed.wait_for(condition, timeout):
                raise SystemExit("a group member did not get there in time")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
            self.process.wait(30)


def failover_times(broker: BrokerProcess, session_ms: int, runs: int) -> list[float]:
    topic = f"failover-{session_ms}"
    group = f"failover-{session_ms}"
    create_topic(broker, topic, 6)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    survivor = Member(broker, group, topic, session_ms)
    survivor.wait(lambda: len(survivor.assigned) == 6, 60)
    next_offset = dict.fromkeys(range(6), 0)
    times = []
    for _ in range(runs):
        victim = Member(broker, group, topic, session_ms)
        victim.wait(lambda v=victim: len(v.assigned) == 3, 60)
        survivor.wait(lambda: len(survivor.assigned) == 3, 60)
        orphaned = list(victim.assigned)
        killed_at = time.monotonic()
        victim.kill()
        wanted = set()
        for partition in orphaned:
            producer.produce(topic, value=b"after the kill", partition=partition)
            wanted.add((partition, next_offset[partition]))
            next_offset[partition] += 1
        producer.flush(10)
        survivor.wait(lambda w=wanted: w <= survivor.consumed, session_ms / 1000 + 60)
        times.append(time.monotonic() - killed_at)
    survivor.stop()
    return times


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()


if __name__ == "__main__":
    main()
