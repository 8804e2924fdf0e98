"""Figures of replication against the partition count: one topic at a time of 1, 30, 1000 and 3000
partitions at replication factor 3 and then 1 on a 3-node kcli cluster (combined mode, one machine), and
with --kafka the same rows on a 3-node Apache Kafka 4.1.2 cluster (tests/apache_kafka.py) in the same run.

    python tests/bench/bench_partitions.py [--partitions 1,30,1000,3000] [--rf 3,1] [--kafka]
                                           [--producer librdkafka|java] [--mib 64] [--size 1024]
                                           [--linger-ms 5] [--idle-seconds 10] [--settle-seconds 15]
                                           [--base-port 24000] [--profile DIR]

For each replication factor and partition count: a topic with replicas spread over the three nodes
(min.insync.replicas 2, 1 at RF 1) is created and waited for until every partition has its full ISR,
and one record is written to each partition, not measured (each replica's first record writes its
leader-epoch checkpoint with an fsync, in Kafka too: a one-off left out of the figures). The brokers'
CPU seconds per second are measured over --idle-seconds with no traffic, --settle-seconds later: what
the followers' fetches of every partition cost by themselves. Then one idempotent confluent-kafka
producer (linger.ms --linger-ms) writes --mib MiB of --size-byte records with acks=all (each counted
once the ISR has it), round-robin over the partitions. Printed: records/s, MB/s, the CPU (user + system, from /proc) of the
three broker processes per GiB written (and the kernel's share of it: system time) and the producer's
own (this process, librdkafka's threads included); then whether every broker still runs and how many partitions lack a full ISR right after
the writes (a broker that missed its session timeout or a follower that fell out of the ISR shows
there). The topic is deleted before the next row, so each row replicates only its own partitions.
With --producer java the writer is Apache Kafka's Java producer instead (tests/java/KcliClients.java
`produce`, the same settings, its own batch.size of 16 KiB, full JIT), timed from its first send once
it has started and has the topic's metadata; its CPU is the JVM's over the same span. It carries every
partition a broker leads in one ProduceRequest, where librdkafka sends one partition per request
(confluentinc/librdkafka#1700), which at 1000 partitions is most of the difference.
With --kafka each row runs on kcli and on Kafka alternately (kcli first, then Kafka first on the next
row), so the machine's other load falls on both alike; Kafka's JVMs run with the harness's heap and
the default JIT, as bench_kafka.py's rf3 phase.

`--profile DIR` runs the kcli nodes under cProfile (node-<id>.prof, written when they stop).
Benchmarks print figures; nothing here is a timed assert. Loopback only; every process it starts is
stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "tests"))

from bench_replication import Nodes, admin, process_times, producer  # noqa: E402


def create_topic(bootstrap: str, name: str, partitions: int, rf: int = 3) -> None:
    from confluent_kafka.admin import NewTopic

    topic = NewTopic(name, partitions, rf, config={"min.insync.replicas": str(min(2, rf))})
    client = admin(bootstrap)  # kept until the result: a collected client ends its requests
    client.create_topics([topic])[name].result(120)
    wait_full_isr(bootstrap, name, partitions, rf)


def short_isr(bootstrap: str, topic: str, partitions: int, rf: int) -> int | None:
    """How many partitions of `topic` lack a leader or a full ISR now; None when the metadata is not there."""
    try:
        meta = admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions
    except Exception:  # the topic not known everywhere yet
        return None
    if len(meta) != partitions:
        return None
    return sum(1 for p in meta.values() if p.leader < 0 or len(p.isrs) < rf)


def wait_full_isr(bootstrap: str, topic: str, partitions: int, rf: int = 3, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if short_isr(bootstrap, topic, partitions, rf) == 0:
            return
        time.sleep(0.5)
    raise SystemExit(f"{topic}: not every partition has an ISR of {rf} within {timeout:g} s")


def delete_topic(bootstrap: str, name: str) -> None:
    client = admin(bootstrap)
    client.delete_topics([name])[name].result(60)
    time.sleep(3)  # the brokers drop the replicas and their fetches


def throughput(
    nodes: Nodes, topic: str, partitions: int, mib: int, size: int, linger_ms: int
) -> tuple[float, float, float, float]:
    """(records/s, MB/s, broker CPU seconds per GiB, the producer's CPU seconds per GiB: this process,
    librdkafka's threads included) of `mib` MiB acks=all into `topic`."""
    p = producer(nodes.bootstrap, **{"linger.ms": linger_ms})
    value = os.urandom(size)
    count = mib * 1024 * 1024 // size
    errors: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    cpu_before = nodes.cpu_seconds()
    own_before = sum(os.times()[:2])
    began = time.monotonic()
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=value, partition=i % partitions, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(600)
    took = time.monotonic() - began
    cpu = nodes.cpu_seconds() - cpu_before
    own = sum(os.times()[:2]) - own_before
    if errors:
        raise SystemExit(f"{topic}: {len(errors)} produce errors, first {errors[0]}")
    return count / took, count * size / took / 1e6, cpu / (mib / 1024), own / (mib / 1024)


def java_throughput(
    nodes: Nodes, topic: str, partitions: int, mib: int, size: int, linger_ms: int, workdir: Path
) -> tuple[float, float, float, float]:
    """throughput()'s figures with Apache Kafka's Java producer (KcliClients `produce`)."""
    import subprocess

    import apache_kafka

    count = mib * 1024 * 1024 // size
    classes = apache_kafka.compile_java(REPO / "tests" / "java" / "KcliClients.java")
    args = ["produce", nodes.bootstrap, topic, str(partitions), str(count), str(size), str(linger_ms)]
    command = apache_kafka.java_command(
        "KcliClients", args, log_path=workdir / f"{topic}-producer.log", heap=("-Xmx1g",),
        level="warn", classpath=[classes], c1_only=False,
    )  # fmt: skip
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as java:
        assert java.stdin is not None and java.stdout is not None
        lines = (json.loads(line) for line in java.stdout if line.startswith("{"))
        if next(lines, {}).get("event") != "ready":
            raise SystemExit(f"{topic}: the Java producer did not start (see {workdir})")
        cpu_before, own_before = nodes.cpu_seconds(), sum(process_times(java.pid))
        java.stdin.write("go\n")
        java.stdin.flush()
        result = next(lines, {})
        cpu, own = nodes.cpu_seconds() - cpu_before, sum(process_times(java.pid)) - own_before
        java.stdin.close()
        java.wait(120)
    if "seconds" not in result or result["errors"]:
        raise SystemExit(f"{topic}: the Java producer failed: {result or 'no result'} (see {workdir})")
    took = result["seconds"]
    return count / took, count * size / took / 1e6, cpu / (mib / 1024), own / (mib / 1024)


def warm_up(bootstrap: str, topic: str, partitions: int, size: int) -> None:
    """One record into every partition, not measured: a replica's first record writes its
    leader-epoch-checkpoint with an fsync (Kafka's LeaderEpochFileCache.assign too), a one-off that at
    thousands of partitions would otherwise dominate the first seconds of the measured writes."""
    p = producer(bootstrap)
    value = os.urandom(size)
    for i in range(partitions):
        p.produce(topic, value=value, partition=i)
    p.flush(600)


def idle_cpu(nodes: Nodes, seconds: float) -> float:
    """The brokers' CPU seconds per second while nothing is produced."""
    before = nodes.cpu_seconds()
    time.sleep(seconds)
    return (nodes.cpu_seconds() - before) / seconds


def measure_row(nodes: Nodes, args: argparse.Namespace, name: str, rf: int, count: int) -> dict[str, Any]:
    """One row on one cluster: create, settle, idle CPU, throughput, the cluster's state after, delete."""
    topic = f"p{count}-rf{rf}"
    create_topic(nodes.bootstrap, topic, count, rf)
    warm_up(nodes.bootstrap, topic, count, args.size)
    time.sleep(args.settle_seconds)
    idle = idle_cpu(nodes, args.idle_seconds)
    times_before = nodes.cpu_times()
    if args.producer == "java":
        workdir = Path(args.tmp) / "java"
        workdir.mkdir(exist_ok=True)
        rate, mb, cpu, producer_cpu = java_throughput(
            nodes, topic, count, args.mib, args.size, args.linger_ms, workdir
        )
    else:
        rate, mb, cpu, producer_cpu = throughput(nodes, topic, count, args.mib, args.size, args.linger_ms)
    user, system = (
        sum(t[k] - times_before[n][k] for n, t in nodes.cpu_times().items() if n in times_before)
        for k in (0, 1)
    )
    running = sum(1 for process in nodes.processes.values() if process.poll() is None)
    short = short_isr(nodes.bootstrap, topic, count, rf)
    delete_topic(nodes.bootstrap, topic)
    return {
        "target": name,
        "producer": args.producer,
        "rf": rf,
        "partitions": count,
        "msg_s": round(rate),
        "MB_s": round(mb, 1),
        "cpu_s_per_GiB": round(cpu, 1),
        "producer_cpu_s_per_GiB": round(producer_cpu, 1),
        "broker_system_share": round(system / (user + system), 2) if user + system else None,
        "idle_cpu_s_per_s": round(idle, 3),
        "brokers_running": running,
        "short_isr_after": short,
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1,30,1000,3000", help="comma-separated partition counts")
    parser.add_argument("--rf", default="3,1", help="comma-separated replication factors (at most 3)")
    parser.add_argument(
        "--kafka", action="store_true", help="the same rows on a 3-node Apache Kafka 4.1.2, alternating"
    )
    parser.add_argument(
        "--producer",
        choices=("librdkafka", "java"),
        default="librdkafka",
        help="the measured writer: confluent-kafka (one partition per request) or Kafka's Java producer",
    )
    parser.add_argument("--mib", type=int, default=64, help="MiB per throughput phase")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes")
    parser.add_argument(
        "--linger-ms",
        type=int,
        default=5,
        help="the producer's linger.ms (the goal at 1000 partitions was set with 500-byte records and 20)",
    )
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument(
        "--settle-seconds", type=float, default=15.0, help="wait after creating a topic before measuring"
    )
    parser.add_argument(
        "--base-port", type=int, default=24000, help="below Linux's ephemeral ports (32768-60999)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run the kcli nodes under cProfile, writing node-<id>.prof into this directory",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.partitions.split(",")]
    factors = [int(n) for n in args.rf.split(",")]
    if any(not 1 <= rf <= 3 for rf in factors):
        raise SystemExit("--rf: replication factors from 1 to 3 (the cluster has three nodes)")

    with tempfile.TemporaryDirectory(prefix="kcli-bench-partitions-") as tmp:
        args.tmp = tmp
        clusters: dict[str, Nodes] = {}
        try:
            if args.kafka:
                import bench_kafka
                from apache_kafka import start_cluster

                kcli = Nodes(Path(tmp) / "kcli", 3, args.base_port, list(bench_kafka.SAME_AS_HARNESS))
            else:
                kcli = Nodes(Path(tmp), 3, args.base_port, [])
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
                kcli.profile_dir = args.profile.resolve()
            clusters["kcli"] = kcli
            kcli.start(1, 2, 3)
            if args.kafka:
                clusters["kafka"] = bench_kafka.KafkaNodes(
                    start_cluster(Path(tmp) / "kafka", 3, args.base_port + 20, c1_only=False)
                )
            print(
                f"{args.producer}, acks=all, {args.mib} MiB of {args.size}-byte records,"
                f" linger.ms {args.linger_ms},"
                " round-robin over the partitions"
                f" (load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}):",
                flush=True,
            )
            row = 0
            for rf in factors:
                for count in counts:
                    names = list(clusters) if row % 2 == 0 else list(clusters)[::-1]
                    row += 1
                    for name in names:
                        r = measure_row(clusters[name], args, name, rf, count)
                        print(
                            f"  {name:5s} RF {rf} {count:5d} partitions: {r['msg_s']:9d} msg/s,"
                            f" {r['MB_s']:6.1f} MB/s, broker CPU {r['cpu_s_per_GiB']:6.1f} s/GiB"
                            f" (producer {r['producer_cpu_s_per_GiB']:.1f}; brokers' system time"
                            f" {r['broker_system_share']:.0%});"
                            f" idle {r['idle_cpu_s_per_s']:.3f} CPU-s/s; brokers running"
                            f" {r['brokers_running']}/3, partitions short of their ISR after"
                            f" {r['short_isr_after']}; load {r['load']}",
                            flush=True,
                        )
                        print(json.dumps(r), flush=True)
        finally:
            for nodes in clusters.values():
                nodes.stop_all()


if __name__ == "__main__":
    main()
