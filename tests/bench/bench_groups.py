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

    python tests/bench/bench_groups.py --compare-protocols [--runs 3] [--kafka]

The classic protocol (librdkafka's default eager `range,roundrobin`) against the consumer protocol
(KIP-848, `group.protocol=consumer`, the broker's `uniform` assignor), on a broker with
group.initial.rebalance.delay.ms 0, session timeouts of 6000 ms and heartbeat intervals of 3000 ms for
both (classic: the consumers' session.timeout.ms and heartbeat.interval.ms; consumer: the broker's
group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms), and with --kafka the same
against Apache Kafka 4.1.2 (tests/apache_kafka.py, the same settings):
join: ten consumers subscribe to a 20-partition topic at once: until every one has partitions, and
  until every one has its final two;
failover: as above, a SIGKILLed member's partitions consumed by the other member;
stall: three consumers read 12 partitions, a record is produced to each every 20 ms; a fourth member
  joins; the figure is the longest time a partition that keeps its owner goes without a record being
  consumed, from the join until the group is balanced again plus 2 s (against the same measure in the
  2 s before the join: the polling's own gaps), and the longest for the partitions that move; then
  the same with one of the three members busy for 2 s after each poll (processing its records), the
  gap counted on the partitions the two others keep.
--figures join,failover,stall picks some of them.
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
    parser.add_argument(
        "--compare-protocols", action="store_true", help="classic against consumer protocol (only)"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each figure with --compare-protocols")
    parser.add_argument("--kafka", action="store_true", help="also against Apache Kafka 4.1.2")
    parser.add_argument("--figures", default="join,failover,stall", help="with --compare-protocols")
    args = parser.parse_args()
    if args.compare_protocols:
        compare_protocols(args.runs, args.kafka, set(args.figures.split(",")))
        return
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


# --- classic against consumer protocol -------------------------------------------------------------------

SESSION_MS = 6000
HEARTBEAT_MS = 3000
KCLI_PROTOCOL_SETTINGS = [
    "group.initial.rebalance.delay.ms=0",
    "offsets.topic.num.partitions=3",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    f"group.consumer.min.session.timeout.ms={SESSION_MS}",
    f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
    f"group.consumer.min.heartbeat.interval.ms={HEARTBEAT_MS}",
]
PROTOCOLS = ("classic", "consumer")


class Target:
    """A broker to measure: kcli's `kcli broker start` or Apache Kafka's (one combined node)."""

    def __init__(self, name: str, bootstrap: str, stop) -> None:  # type: ignore[no-untyped-def]
        self.name = name
        self.bootstrap = bootstrap
        self.stop = stop


def compare_protocols(runs: int, kafka: bool, figures: set[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="kcli-bench-protocols-") as tmp:
        targets = [lambda: _kcli_target(Path(tmp) / "kcli")]
        if kafka:
            targets.append(lambda: _kafka_target(Path(tmp) / "kafka"))
        for make in targets:
            target = make()
            try:
                join_time(target, "warm-up", "classic")  # creates __consumer_offsets
                for protocol in PROTOCOLS if "join" in figures else ():
                    assigned, balanced = [], []
                    for i in range(runs):
                        first, last = join_times(target, f"join-{protocol}-{i}", protocol)
                        assigned.append(first)
                        balanced.append(last)
                    report(f"{target.name} {protocol}: 10 consumers join, all assigned", assigned)
                    report(f"{target.name} {protocol}: 10 consumers join, all balanced", balanced)
                for protocol in PROTOCOLS if "failover" in figures else ():
                    report(
                        f"{target.name} {protocol}: killed member's partitions consumed",
                        failover_times(target, SESSION_MS, runs, protocol),
                    )
                for protocol, busy in (
                    [(p, b) for b in (0.0, 2.0) for p in PROTOCOLS] if "stall" in figures else ()
                ):
                    stalls = [
                        stall(target, f"stall-{protocol}-{busy}-{i}", protocol, busy) for i in range(runs)
                    ]
                    kept = [s[0] for s in stalls]
                    print(
                        f"{target.name} {protocol}: a 4th member joins 3"
                        + (f" (one busy {busy:.0f} s after each poll)" if busy else "")
                        + ": longest gap of a partition that "
                        f"keeps its owner: median {statistics.median(kept):.2f} s "
                        f"(runs: {', '.join(f'{k:.2f}' for k in kept)}); of one that moves: "
                        f"{', '.join(f'{s[1]:.2f}' for s in stalls)} s; before the join: "
                        f"{', '.join(f'{s[2]:.2f}' for s in stalls)} s"
                    )
            finally:
                target.stop()
    print(
        f"reproduce: python {Path(__file__).relative_to(REPO)} --compare-protocols --runs {runs}"
        + (" --kafka" if kafka else "")
        + f" --figures {','.join(sorted(figures))}"
    )


def _kcli_target(directory: Path) -> Target:
    broker = start_broker(directory, overrides=KCLI_PROTOCOL_SETTINGS)
    return Target("kcli", broker.bootstrap, broker.stop)


def _kafka_target(directory: Path) -> Target:
    import apache_kafka
    from conftest import free_port_range

    extra: dict[str, object] = dict(setting.split("=", 1) for setting in KCLI_PROTOCOL_SETTINGS)  # type: ignore[misc]
    cluster = apache_kafka.start_cluster(directory, 1, free_port_range(4), c1_only=False, extra=extra)
    return Target(f"Apache Kafka {apache_kafka.VERSION}", cluster.bootstrap, cluster.stop)


def _consumer_config(bootstrap: str, group: str, protocol: str) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config |= {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
    return config


def join_times(target: Target, group: str, protocol: str) -> tuple[float, float]:
    """(seconds until every consumer has partitions, until every one has its final share)."""
    topic = f"join-{uuid.uuid4().hex[:8]}"
    create_topic(target, topic, JOIN_PARTITIONS)
    consumers = [Consumer(_consumer_config(target.bootstrap, group, protocol)) for _ in range(JOIN_CONSUMERS)]
    share = JOIN_PARTITIONS // JOIN_CONSUMERS
    sizes = [0] * len(consumers)
    stop = threading.Event()

    def run(index: int, consumer: Consumer) -> None:
        while not stop.is_set():
            consumer.poll(0.02)
            sizes[index] = len(consumer.assignment())

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(consumers)]
    started = time.monotonic()
    for consumer in consumers:
        consumer.subscribe([topic])
    for thread in threads:
        thread.start()
    first = last = None
    deadline = started + 120
    while last is None and time.monotonic() < deadline:
        now = time.monotonic()
        if first is None and all(sizes):
            first = now - started
        if all(size == share for size in sizes):
            last = now - started
        time.sleep(0.005)
    stop.set()
    for thread in threads:
        thread.join()
    for consumer in consumers:
        consumer.close()
    if first is None or last is None:
        raise SystemExit(f"group {group}: not balanced within 120 s: {sizes}")
    return first, last


def stall(target: Target, group: str, protocol: str, busy: float = 0.0) -> tuple[float, float, float]:
    """(longest gap of a partition that keeps its owner, of one that moves, before the join); with
    `busy`, the first member sleeps that long after each poll and its partitions are not counted."""
    partitions = 12
    topic = f"stall-{uuid.uuid4().hex[:8]}"
    create_topic(target, topic, partitions)
    received: dict[int, list[float]] = {p: [] for p in range(partitions)}
    lock = threading.Lock()
    stop = threading.Event()
    consumers: list[Consumer] = []
    owners: list[set[int]] = []

    def consume(index: int, consumer: Consumer) -> None:
        while not stop.is_set():
            message = consumer.poll(0.01)
            owners[index] = {tp.partition for tp in consumer.assignment()}
            if message is not None and message.error() is None:
                with lock:
                    received[message.partition()].append(time.monotonic())
            if busy and index == 0:
                time.sleep(busy)

    def produce() -> None:
        producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 0})
        while not stop.is_set():
            for partition in range(partitions):
                producer.produce(topic, b"x", partition=partition)
            producer.poll(0)
            time.sleep(0.02)
        producer.flush(10)

    threads = []

    def add_member() -> None:
        consumer = Consumer(_consumer_config(target.bootstrap, group, protocol))
        consumer.subscribe([topic])
        consumers.append(consumer)
        owners.append(set())
        thread = threading.Thread(target=consume, args=(len(consumers) - 1, consumer), daemon=True)
        threads.append(thread)
        thread.start()

    def wait_balanced(sizes: list[int]) -> None:
        deadline = time.monotonic() + 120
        while sorted(len(o) for o in owners) != sizes:
            if time.monotonic() > deadline:
                raise SystemExit(f"group {group}: not {sizes} within 120 s: {owners}")
            time.sleep(0.005)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    for _ in range(3):
        add_member()
    wait_balanced([4, 4, 4])
    time.sleep(4)  # every partition flowing
    before = [set(o) for o in owners]
    joined_at = time.monotonic()
    add_member()
    wait_balanced([3, 3, 3, 3])
    time.sleep(2)
    until = time.monotonic()
    after = [set(o) for o in owners[:3]]
    stop.set()
    for thread in [*threads, producer]:
        thread.join()
    for consumer in consumers:
        consumer.close()
    kept = {p for b, a in zip(before, after, strict=True) for p in b & a}
    moved = set(range(partitions)) - kept
    if busy:  # the busy member's own partitions lag by design
        kept -= before[0] | after[0]
        moved -= before[0] | after[0]

    def longest_gap(partition: int, start: float, end: float) -> float:
        times = [start] + [t for t in received[partition] if start <= t <= end] + [end]
        return max(b - a for a, b in zip(times, times[1:], strict=False))

    return (
        max(longest_gap(p, joined_at, until) for p in kept) if kept else float("nan"),
        max(longest_gap(p, joined_at, until) for p in moved) if moved else float("nan"),
        max(
            longest_gap(p, joined_at - 2, joined_at)
            for p in range(partitions)
            if not busy or p not in before[0]
        ),
    )


def report(label: str, seconds: list[float]) -> None:
    runs = ", ".join(f"{s:.2f}" for s in seconds)
    print(f"{label}: median {statistics.median(seconds):.2f} s (runs: {runs})")


# --- join time --------------------------------------------------------------------------------------------


def join_time(broker: BrokerProcess | Target, group: str, protocol: str = "classic") -> float:
    topic = f"join-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, JOIN_PARTITIONS)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
            }
            | ({"group.protocol": "consumer"} if protocol == "consumer" else {"session.timeout.ms": 45000})
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
    def __init__(
        self,
        broker: BrokerProcess | Target,
        group: str,
        topic: str,
        session_ms: int,
        protocol: str = "classic",
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER), "confluent", broker.bootstrap, group, topic]
            + ["--session-ms", str(session_ms), "--heartbeat-ms", "3000", "--protocol", protocol],
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


def failover_times(
    broker: BrokerProcess | Target, session_ms: int, runs: int, protocol: str = "classic"
) -> list[float]:
    topic = f"failover-{session_ms}-{protocol}"
    group = f"failover-{session_ms}-{protocol}"
    create_topic(broker, topic, 6)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    survivor = Member(broker, group, topic, session_ms, protocol)
    survivor.wait(lambda: len(survivor.assigned) == 6, 60)
    next_offset = dict.fromkeys(range(6), 0)
    times = []
    for _ in range(runs):
        victim = Member(broker, group, topic, session_ms, protocol)
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


def create_topic(broker: BrokerProcess | Target, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()


if __name__ == "__main__":
    main()
