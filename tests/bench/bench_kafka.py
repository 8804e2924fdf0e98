"""kcli against Apache Kafka 4.1.2 (tests/apache_kafka.py) on the same machine, in one alternating run.

    python tests/bench/bench_kafka.py [--quick] [--skip single,latency,create,startup,rf3,failover]
        [--rounds 2] [--messages 300000] [--latency-seconds 10] [--topics 100] [--mib 128]
        [--failovers 2] [--startups 2] [--kafka-c1] [--base-port PORT]

Each pair of phases runs kcli and Kafka alternately (A,B then B,A ...), so the machine's other load
falls on both alike. Kafka's JVMs run with bin/kafka-run-class.sh's flags and the harness's small heap;
its servers for throughput, latency and failover use the JVM's default JIT (C1-only start-up flags
would slow their steady state; --kafka-c1 keeps them), its start-up figure the harness's C1-only flags.
The JVM clients (ProducerPerformance, ConsumerPerformance) run with the default JIT against both.

  single    one kcli broker and one combined Kafka node, 1 KiB messages, 3 partitions, acks=1:
            Kafka's ProducerPerformance then ConsumerPerformance (the tools' own msg/s), and
            bench_broker's kcat produce and consume (librdkafka); the broker's CPU seconds (/proc) per GiB
  latency   bench_broker's kbench at 5,000 msg/s: p99 produce latency, acks=1 and acks=all; then each
            broker's peak RSS (VmHWM) over everything so far
  create    bench_cluster's sequential CreateTopics round trips on the single nodes: p50, p99
  startup   `kcli cluster start --brokers 3` until its bootstrap line (bench_cluster.start_time)
            against Kafka's 3 nodes formatted and started until each logs "Kafka Server started"
  rf3       3-node kcli cluster against 3-node Kafka cluster: bench_replication's acks=all idempotent
            producer into a 1-partition RF 3 topic (min.insync.replicas 2), MiB/s and all brokers' CPU/GiB
  failover  bench_replication's failovers on each 3-node cluster: after kill -9 and after SIGTERM of the
            partition's leader, the time until a fresh producer is acknowledged by the new leader

Benchmarks print figures; nothing here is a timed assert. Everything binds 127.0.0.1, every process it
starts is stopped by PID, and the data dirs are removed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_broker
import bench_cluster
import bench_replication
from bench_replication import Nodes

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

import apache_kafka  # noqa: E402
from apache_kafka import KafkaCluster  # noqa: E402
from conftest import free_port_range  # noqa: E402

PHASES = ("single", "latency", "create", "startup", "rf3", "failover")
PERF_RESULT = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")
SAME_AS_HARNESS = (
    "group.initial.rebalance.delay.ms=0",
    "offsets.topic.num.partitions=3",
    "transaction.state.log.num.partitions=3",
)
"""What apache_kafka.server_properties sets unlike Kafka's defaults and a client sees: kcli gets the same."""
FULL = {
    "rounds": 2,
    "messages": 300_000,
    "latency_seconds": 10.0,
    "topics": 100,
    "mib": 128,
    "failovers": 2,
    "startups": 2,
}
QUICK = {
    "rounds": 2,
    "messages": 100_000,
    "latency_seconds": 4.0,
    "topics": 40,
    "mib": 48,
    "failovers": 1,
    "startups": 1,
}


class KafkaNodes(Nodes):
    """A started Kafka cluster behind bench_replication's Nodes interface (CPU times, signal, restart by id)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.processes = {node.node_id: node.process for node in cluster.nodes}

    def _node(self, node_id: int) -> apache_kafka.KafkaNode:
        return next(n for n in self.cluster.nodes if n.node_id == node_id)

    def start(self, *node_ids: int) -> None:
        began = time.monotonic()
        for node_id in node_ids:
            node = self._node(node_id)
            apache_kafka.launch(node, node.workdir / "server.properties")
        for node_id in node_ids:
            node = self._node(node_id)
            apache_kafka.wait_ready(node, began)
            self.processes[node_id] = node.process

    def stop_all(self) -> None:
        self.cluster.stop()
        self.processes.clear()

    def address(self, node_id: int) -> str:
        return self._node(node_id).bootstrap

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap


class Figures:
    """Values per (figure, target), printed as one table of medians."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, list[float]]] = {}
        self.units: dict[str, str] = {}

    def add(self, figure: str, target: str, value: float | None, unit: str) -> None:
        if value is None:
            return
        self.values.setdefault(figure, {}).setdefault(target, []).append(value)
        self.units[figure] = unit

    def cell(self, figure: str, target: str) -> str:
        values = self.values[figure].get(target)
        if not values:
            return "-"
        unit = self.units[figure]
        spread = f" ({number(min(values))}-{number(max(values))})" if len(values) > 1 else ""
        return f"{number(statistics.median(values))} {unit}{spread}"

    def print(self) -> None:
        print("\n| figure | kcli | Apache Kafka | Kafka / kcli |")
        print("|---|---|---|---|")
        for figure, by_target in self.values.items():
            ratio = "-"
            if by_target.get("kcli") and by_target.get("kafka"):
                ratio = f"{statistics.median(by_target['kafka']) / statistics.median(by_target['kcli']):.2f}x"
            print(f"| {figure} | {self.cell(figure, 'kcli')} | {self.cell(figure, 'kafka')} | {ratio} |")


def number(value: float) -> str:
    """Counts in thousands, small figures to three significant digits."""
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.3g}"


def load() -> str:
    """The 1/5/15-minute load averages: the machine is shared, so figures are read beside them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def log(message: str) -> None:
    print(f"[bench_kafka {time.strftime('%H:%M:%S')}, load {load()}] {message}", file=sys.stderr, flush=True)


def alternate(targets: list, rounds: int) -> list:
    """A,B then B,A ...: each round's order reversed from the last."""
    return [t for r in range(rounds) for t in (targets if r % 2 == 0 else targets[::-1])]


def tool(main_class: str, args: list[str], workdir: Path) -> str:
    """Run one of Kafka's tools with the default JIT (the client is the same for both brokers)."""
    command = apache_kafka.java_command(
        main_class,
        args,
        log_path=workdir / f"{main_class.rsplit('.', 1)[-1]}.log",
        level="warn",
        c1_only=False,
    )
    return bench_broker.run(command, capture=True).decode(errors="replace")


def perf_round(name: str, bootstrap: str, pid: int, messages: int, workdir: Path) -> list[dict]:
    """ProducerPerformance (acks=1, kcat_round's batching) then ConsumerPerformance over the same topic,
    each charged its broker's CPU; msg/s are the tools' own figures (their JVM start-up left out)."""
    topic = f"perf-{os.urandom(4).hex()}"
    admin = bench_broker.create_topic(bootstrap, topic)
    size = messages * bench_broker.MESSAGE_BYTES
    out = []
    try:
        before, started = bench_broker.cpu_rss(pid), time.perf_counter()
        text = tool(
            "org.apache.kafka.tools.ProducerPerformance",
            ["--topic", topic, "--num-records", str(messages), "--record-size", str(bench_broker.MESSAGE_BYTES),
             "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
             "linger.ms=5", "batch.size=1048576", "compression.type=none"],
            workdir,
        )  # fmt: skip
        line = bench_broker.phase(name, "ProducerPerformance", messages, size, started, before, pid)
        match = PERF_RESULT.findall(text)
        if match:
            line["msgs_s"] = round(float(match[-1][1]))
            line["MiB_s"] = round(float(match[-1][1]) * bench_broker.MESSAGE_BYTES / bench_broker.MIB, 1)
        else:
            line["error"] = f"no result line: {text[-300:]!r}"
        out.append(line)
        before, started = bench_broker.cpu_rss(pid), time.perf_counter()
        text = tool(
            "org.apache.kafka.tools.ConsumerPerformance",
            ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(messages), "--timeout", "30000"],
            workdir,
        )  # fmt: skip
        line = bench_broker.phase(name, "ConsumerPerformance", messages, size, started, before, pid)
        rows = [
            r.split(",") for r in text.splitlines() if r.count(",") >= 9 and not r.startswith("start.time")
        ]
        if rows:
            consumed = int(float(rows[-1][4]))
            line["msgs_s"] = round(float(rows[-1][5]))
            line["MiB_s"] = float(rows[-1][3])
            line["fetch_msgs_s"] = round(float(rows[-1][9]))  # the group join left out
            if consumed < messages:
                line["error"] = f"consumed {consumed} of {messages}"
        else:
            line["error"] = f"no result line: {text[-300:]!r}"
        out.append(line)
    finally:
        admin.delete_topics([topic])[topic].result(30)
    for line in out:
        print(json.dumps(line), flush=True)
    return out


def single_node(args: argparse.Namespace, workdir: Path, figures: Figures) -> None:
    """The single-broker phases: throughput, latency, RSS, CreateTopics."""
    (workdir / "kcli-single").mkdir()
    kcli = bench_broker.start_kcli(workdir / "kcli-single", SAME_AS_HARNESS)
    kafka = None
    try:
        began = time.monotonic()
        kafka = apache_kafka.start_cluster(workdir / "kafka-single", 1, args.base_port, c1_only=args.kafka_c1)
        log(f"Kafka single node ready in {time.monotonic() - began:.1f} s (pid {kafka.nodes[0].pid})")
        targets = [("kcli", kcli["bootstrap"], kcli["pid"]), ("kafka", kafka.bootstrap, kafka.nodes[0].pid)]
        if "single" not in args.skip:
            rdk = (
                workdir / "rdk"
            )  # kcat with the confluent-kafka wheel's librdkafka, as setup-peers.sh links it
            rdk.mkdir(exist_ok=True)
            import confluent_kafka

            libs = Path(confluent_kafka.__file__).parents[1] / "confluent_kafka.libs"
            (rdk / "librdkafka.so.1").symlink_to(next(libs.glob("librdkafka-*.so.1")))
            lines = workdir / "lines.txt"
            bench_broker.run([sys.executable, f"{args.bench_dir}/mklines.py", str(lines), str(args.messages),
                              str(bench_broker.MESSAGE_BYTES)])  # fmt: skip
            for name, bootstrap, pid in targets:  # untimed: warms the JIT of Kafka's server before any figure
                bench_broker.kcat_round(workdir, name, bootstrap, pid, lines, args.messages)
            for name, bootstrap, pid in alternate(targets, args.rounds):
                log(f"throughput: {name}")
                results = perf_round(name, bootstrap, pid, args.messages, workdir)
                results += bench_broker.kcat_round(workdir, name, bootstrap, pid, lines, args.messages)
                for line in results:
                    if line.get("error"):
                        log(f"{name} {line['phase']}: {line['error']}")
                        continue
                    what = (
                        "produce, acks=1"
                        if "Producer" in line["phase"] or "produce" in line["phase"]
                        else "consume"
                    )
                    figures.add(f"{line['phase']} msg/s (1 KiB, {what})", name, line["msgs_s"], "msg/s")
                    if "fetch_msgs_s" in line:
                        figures.add(
                            "ConsumerPerformance fetch msg/s (join left out)",
                            name,
                            line["fetch_msgs_s"],
                            "msg/s",
                        )
                    figures.add(
                        f"{line['phase']} broker CPU per GiB", name, line["cpu_s_per_GiB"], "CPU-s/GiB"
                    )
        if "latency" not in args.skip:
            count = int(5000 * args.latency_seconds)
            for name, bootstrap, pid in alternate(targets, args.rounds):
                log(f"latency at 5,000 msg/s: {name}")
                for line in bench_broker.kbench(
                    Path(sys.executable), args, name, bootstrap, pid, "none", count, rate=5000
                ):
                    if line.get("error"):
                        log(f"{name} {line['phase']}: {line['error']}")
                    acks = "acks=all" if "all" in line["phase"] else "acks=1"
                    figures.add(f"p99 produce latency at 5,000 msg/s, {acks}", name, line.get("p99_ms"), "ms")
            for name, _, pid in targets:
                figures.add("broker peak RSS (VmHWM) after the phases above", name,
                            bench_broker.vm_hwm(pid) / bench_broker.MIB, "MiB")  # fmt: skip
        if "create" not in args.skip:
            for name, bootstrap, _ in alternate(targets, args.rounds):
                log(f"CreateTopics: {name}")
                ms = asyncio.run(
                    bench_cluster.create_latencies(bootstrap, f"create-{os.urandom(3).hex()}", args.topics)
                )
                figures.add("CreateTopics round trip p50 (1 node, sequential)", name,
                            bench_cluster.percentile(ms, 0.5), "ms")  # fmt: skip
                figures.add("CreateTopics round trip p99 (1 node, sequential)", name,
                            bench_cluster.percentile(ms, 0.99), "ms")  # fmt: skip
    finally:
        bench_broker.stop_kcli(kcli)
        if kafka is not None:
            kafka.stop()


def startup(args: argparse.Namespace, workdir: Path, figures: Figures) -> None:
    """3-node start-up, format included: kcli's `cluster start` against Kafka's storage tool and servers."""
    for round_no, name in enumerate(alternate(["kcli", "kafka"], args.startups)):
        log(f"3-node start-up: {name}")
        if name == "kcli":
            first, again = bench_cluster.start_time(args.base_port + 20)
            figures.add("3-node cluster start, format + start to ready", name, first, "s")
            figures.add("3-node cluster restart to ready", name, again, "s")
            continue
        began = time.monotonic()
        cluster = apache_kafka.start_cluster(workdir / f"kafka-start-{round_no}", 3, args.base_port + 40)
        took = time.monotonic() - began
        figures.add("3-node cluster start, format + start to ready", name, took, "s")
        log(
            f"Kafka formatted in {cluster.format_seconds:.1f} s, all ready {took:.1f} s after the format began"
        )
        cluster.stop()
        began = time.monotonic()
        nodes = KafkaNodes(cluster)  # the same formatted dirs, started again
        try:
            nodes.start(1, 2, 3)
            figures.add("3-node cluster restart to ready", name, time.monotonic() - began, "s")
        finally:
            nodes.stop_all()
        shutil.rmtree(workdir / f"kafka-start-{round_no}", ignore_errors=True)


def replication(args: argparse.Namespace, workdir: Path, figures: Figures) -> None:
    """RF 3 acks=all throughput and failovers, a 3-node kcli cluster against a 3-node Kafka cluster."""
    kcli = Nodes(workdir / "kcli-rf3", 3, args.base_port + 60, list(SAME_AS_HARNESS))
    kafka: KafkaNodes | None = None
    try:
        kcli.start(1, 2, 3)
        began = time.monotonic()
        kafka = KafkaNodes(
            apache_kafka.start_cluster(workdir / "kafka-rf3", 3, args.base_port + 80, c1_only=args.kafka_c1)
        )
        log(f"Kafka 3 nodes ready in {time.monotonic() - began:.1f} s")
        clusters = {"kcli": kcli, "kafka": kafka}
        for nodes in clusters.values():
            bench_replication.create_topic(nodes.bootstrap, "rf3", [1, 2, 3])
        if "rf3" not in args.skip:
            for name in alternate(list(clusters), args.rounds):
                log(f"RF 3 acks=all throughput: {name}")
                rate, cpu, _ = bench_replication.throughput(
                    clusters[name], "rf3", args.mib, bench_broker.MESSAGE_BYTES
                )
                print(json.dumps({"target": name, "phase": "rf3 acks=all", "MiB_s": round(rate, 1),
                                  "cpu_s_per_GiB": round(cpu, 2)}), flush=True)  # fmt: skip
                figures.add(
                    "RF 3 acks=all msg/s (1 KiB, 1 partition, idempotent)", name, rate * 1024, "msg/s"
                )
                figures.add("RF 3 acks=all CPU per GiB, 3 brokers together", name, cpu, "CPU-s/GiB")
        if "failover" not in args.skip:
            for name in alternate(list(clusters), 1):
                log(f"leader failover x{args.failovers}: {name}")
                killed, termed, errors = bench_replication.failovers(clusters[name], "rf3", args.failovers)
                for gap, was_controller, cluster in killed:
                    print(json.dumps({"target": name, "phase": "kill -9", "failover_s": round(cluster, 2),
                                      "ack_gap_s": round(gap, 2), "was_controller": was_controller}))  # fmt: skip
                    also = ", the leader also the active controller" if was_controller else ""
                    figures.add(
                        f"leader failover after kill -9{also} (fresh producer acked)", name, cluster, "s"
                    )
                for gap, cluster in termed:
                    print(json.dumps({"target": name, "phase": "SIGTERM", "failover_s": round(cluster, 2),
                                      "ack_gap_s": round(gap, 2)}))  # fmt: skip
                    figures.add("leader failover after SIGTERM (fresh producer acked)", name, cluster, "s")
                    figures.add("longest ack gap of a 1000 msg/s producer, SIGTERM", name, gap, "s")
                print(json.dumps({"target": name, "phase": "SIGTERM produce errors", "errors": errors}))
    finally:
        kcli.stop_all()
        if kafka is not None:
            kafka.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short settings (4-5 minutes here)")
    parser.add_argument("--skip", default="", help=f"comma list of {','.join(PHASES)}")
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"rounds of A,B (then B,A) per phase (default {FULL['rounds']}, --quick {QUICK['rounds']})",
    )
    parser.add_argument(
        "--messages",
        type=int,
        help=f"1 KiB messages per throughput run (default {FULL['messages']}, --quick {QUICK['messages']})",
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        help=f"length of each 5,000 msg/s run (default {FULL['latency_seconds']}, --quick {QUICK['latency_seconds']})",
    )
    parser.add_argument(
        "--topics",
        type=int,
        help=f"CreateTopics round trips per run (default {FULL['topics']}, --quick {QUICK['topics']})",
    )
    parser.add_argument(
        "--mib", type=int, help=f"MiB per RF 3 throughput run (default {FULL['mib']}, --quick {QUICK['mib']})"
    )
    parser.add_argument(
        "--failovers",
        type=int,
        help=f"kill -9 and SIGTERM rounds per cluster (default {FULL['failovers']}, --quick {QUICK['failovers']})",
    )
    parser.add_argument(
        "--startups",
        type=int,
        help=f"3-node start-ups per system (default {FULL['startups']}, --quick {QUICK['startups']})",
    )
    parser.add_argument("--kafka-c1", action="store_true", help="run Kafka's measured servers C1-only too")
    parser.add_argument("--bench-dir", default=str(bench_broker.SHARED_BENCH), help="kbench.py, mklines.py")
    parser.add_argument(
        "--base-port",
        type=int,
        help="ports base .. base+99 on 127.0.0.1 (default: a free range below the ephemeral ports)",
    )
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else FULL).items():  # a flag given wins over --quick
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.base_port is None:  # above 32768 a client connection or a port-0 listener may take a node's port
        args.base_port = free_port_range(100)
    args.skip = set(filter(None, args.skip.split(",")))
    if unknown := args.skip - set(PHASES):
        parser.error(f"unknown phase(s) {sorted(unknown)}; phases: {','.join(PHASES)}")
    if missing := apache_kafka.missing_tools():
        raise SystemExit(f"Apache Kafka needs {', '.join(missing)} on PATH")
    apache_kafka.resolve()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    print(f"# kcli ({commit.stdout.strip()}) against Apache Kafka {apache_kafka.VERSION}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load {load()}")  # fmt: skip
    server_flags = apache_kafka.JVM_FLAGS if args.kafka_c1 else apache_kafka.KAFKA_JVM_FLAGS
    print(f"# Kafka servers measured: {' '.join(apache_kafka.SERVER_HEAP + server_flags)}")
    print(f"# Kafka start-up figure: {' '.join(apache_kafka.SERVER_HEAP + apache_kafka.JVM_FLAGS)}")
    print(f"# JVM clients: {' '.join(apache_kafka.TOOL_HEAP + apache_kafka.KAFKA_JVM_FLAGS)}")
    figures = Figures()
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-kafka-"))
    try:
        if not {"single", "latency", "create"} <= args.skip:
            single_node(args, workdir, figures)
        if "startup" not in args.skip:
            startup(args, workdir, figures)
        if not {"rf3", "failover"} <= args.skip:
            replication(args, workdir, figures)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        figures.print()
        print(f"\nload {load()} at the end; {time.monotonic() - began:.0f} s in all")
        print(f"reproduce: cd {REPO} && python tests/bench/bench_kafka.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
