"""Figures of a kcli KRaft cluster: start time, metadata commit latency, controller failover.

    python tests/bench/bench_cluster.py [--topics 200] [--kills 20] [--base-port 41000]

1. Time to start a 3-node cluster with `kcli cluster start` (first start: format + start; restart of
   the same data dir), until it prints its bootstrap string.
2. Metadata commit latency: CreateTopics round trips (one topic of one partition each, sequential),
   p50/p99, against one node (a quorum of one) and against the active controller of 3 voters (the
   quorum's high watermark needs a second voter's Fetch), and through a broker that forwards.
3. Controller failover after kill -9: the active controller's process is killed; the time until a
   surviving node reports a new leader, and until CreateTopics works again; the killed node is restarted
   and caught up before the next kill. Median and max over --kills.

Benchmarks print figures; nothing here is a timed assert. Loopback only; every process it starts is
stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kcli.client import ClientError, KafkaClient  # noqa: E402
from kcli.protocol.messages import nested_type, request_type  # noqa: E402
from ops.local_cluster import READY_MARK, plan  # noqa: E402

CREATE_TOPICS = 19
DESCRIBE_QUORUM = 55


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def start_time(base_port: int) -> tuple[float, float]:
    """(first start, restart) seconds of `kcli cluster start --brokers 3` until the bootstrap line."""
    with tempfile.TemporaryDirectory(prefix="kcli-bench-cluster-") as tmp:
        times = []
        for _ in range(2):
            began = time.monotonic()
            runner = subprocess.Popen(
                [sys.executable, "-m", "kcli", "cluster", "start", "--brokers", "3", "--data-dir", tmp,
                 "--port", str(base_port)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO,
            )  # fmt: skip
            assert runner.stdout is not None
            line = runner.stdout.readline().decode()
            times.append(time.monotonic() - began)
            if not line.startswith("bootstrap:"):
                runner.kill()
                raise SystemExit(f"the cluster did not start: {line!r}")
            runner.send_signal(signal.SIGINT)
            runner.wait(120)
        return times[0], times[1]


class Nodes:
    """The nodes of a formatted layout, each a `kcli broker start` process started here."""

    def __init__(self, data_dir: Path, count: int, base_port: int, overrides: list[str]) -> None:
        self.layout = plan(data_dir, count, base_port, overrides)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.profile_dir: Path | None = None
        """When set, each node runs under cProfile and writes node-<id>.prof here when it stops."""

    def start(self, *node_ids: int) -> None:
        """Start the nodes together (a quorum needs a majority before any of them is ready), then wait."""
        sizes = {}
        for node_id in node_ids:
            node = self._node(node_id)
            sizes[node_id] = node.log_file.stat().st_size if node.log_file.exists() else 0
            with open(node.log_file, "ab") as log:
                profile = (
                    []
                    if self.profile_dir is None
                    else ["-m", "cProfile", "-o", str(self.profile_dir / f"node-{node_id}.prof")]
                )
                self.processes[node_id] = subprocess.Popen(
                    [sys.executable, *profile, "-m", "kcli", "broker", "start", "--config", str(node.properties)],
                    stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                )  # fmt: skip
        deadline = time.monotonic() + 120
        waiting = set(node_ids)
        while waiting and time.monotonic() < deadline:
            for node_id in list(waiting):
                node = self._node(node_id)
                with open(node.log_file, "rb") as f:
                    f.seek(sizes[node_id])
                    if READY_MARK.encode() in f.read():
                        waiting.discard(node_id)
                if self.processes[node_id].poll() is not None:
                    raise SystemExit(f"node {node_id} exited; see {node.log_file}")
            time.sleep(0.05)
        if waiting:
            raise SystemExit(f"node(s) {sorted(waiting)} did not start within 120 s")

    def _node(self, node_id: int):  # noqa: ANN202
        return next(n for n in self.layout.nodes if n.node_id == node_id)

    def kill(self, node_id: int) -> None:
        process = self.processes.pop(node_id)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()

    def address(self, node_id: int) -> str:
        return self._node(node_id).bootstrap


def create_topics_request(name: str) -> object:
    cls = request_type(CREATE_TOPICS, 7)
    topic_cls = nested_type(cls, "CreatableTopic")
    topic = topic_cls(name=name, num_partitions=1, replication_factor=1, assignments=(), configs=())
    return cls(topics=(topic,), timeout=timedelta(seconds=30), validate_only=False)


async def create_latencies(address: str, prefix: str, count: int) -> list[float]:
    """Milliseconds per CreateTopics round trip, one after another."""
    async with await KafkaClient.connect(address, request_timeout=60) as client:
        out = []
        for i in range(count):
            began = time.perf_counter()
            response = await client.send(create_topics_request(f"{prefix}-{i}"))
            out.append((time.perf_counter() - began) * 1000)
            error = response.topics[0].error_code
            if error.value != 0:
                raise SystemExit(f"CreateTopics {prefix}-{i} failed: {error.name}")
        return out


async def quorum_leader(address: str) -> int:
    """The leader DescribeQuorum reports through `address` (-1 when there is none or no answer)."""
    try:
        async with await KafkaClient.connect(address, request_timeout=2, connect_timeout=1) as client:
            cls = request_type(DESCRIBE_QUORUM, 1)
            topic_cls, partition_cls = nested_type(cls, "TopicData"), nested_type(cls, "PartitionData")
            request = cls(
                topics=(
                    topic_cls(
                        topic_name="__cluster_metadata", partitions=(partition_cls(partition_index=0),)
                    ),
                )
            )
            response = await client.send(request)
            partition = response.topics[0].partitions[0]
            return partition.leader_id if partition.error_code.value == 0 else -1
    except (ClientError, IndexError):
        return -1


def report(name: str, values: list[float]) -> None:
    print(
        f"  {name}: p50 {percentile(values, 0.5):.1f} ms, p99 {percentile(values, 0.99):.1f} ms, "
        f"mean {statistics.mean(values):.1f} ms ({len(values)} round trips)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=200, help="CreateTopics round trips per setup")
    parser.add_argument("--kills", type=int, default=20, help="controller kills for the failover figure")
    parser.add_argument("--base-port", type=int, default=41000)
    args = parser.parse_args()
    port = args.base_port

    first, again = start_time(port)
    print(f"start a 3-node cluster (kcli cluster start): first {first:.2f} s, restart {again:.2f} s")

    print("CreateTopics round trip (1 topic, 1 partition, sequential):")
    with tempfile.TemporaryDirectory(prefix="kcli-bench-one-") as tmp:
        one = Nodes(Path(tmp), 1, port + 20, [])
        try:
            one.start(1)
            report("1 voter", asyncio.run(create_latencies(one.address(1), "one", args.topics)))
        finally:
            one.stop_all()
    with tempfile.TemporaryDirectory(prefix="kcli-bench-three-") as tmp:
        overrides = ["broker.session.timeout.ms=18000"]
        nodes = Nodes(Path(tmp), 3, port + 40, overrides)
        try:
            nodes.start(1, 2, 3)
            leader = asyncio.run(quorum_leader(nodes.address(1)))
            other = next(n for n in (1, 2, 3) if n != leader)
            report(
                "3 voters, sent to the active controller",
                asyncio.run(create_latencies(nodes.address(leader), "three", args.topics)),
            )
            report(
                "3 voters, sent to another broker (forwarded)",
                asyncio.run(create_latencies(nodes.address(other), "forwarded", args.topics)),
            )

            elected, usable = [], []
            for kill in range(args.kills):
                leader = asyncio.run(quorum_leader(nodes.address(other)))
                survivors = [n for n in (1, 2, 3) if n != leader]
                began = time.monotonic()
                nodes.kill(leader)
                new_leader = -1
                while new_leader in (-1, leader) and time.monotonic() - began < 60:
                    new_leader = asyncio.run(quorum_leader(nodes.address(survivors[0])))
                    if new_leader in (-1, leader):
                        time.sleep(0.02)
                elected.append(time.monotonic() - began)
                while time.monotonic() - began < 120:
                    try:
                        asyncio.run(create_latencies(nodes.address(survivors[0]), f"after-kill-{kill}", 1))
                        break
                    except (ClientError, SystemExit):
                        time.sleep(0.02)
                usable.append(time.monotonic() - began)
                nodes.start(leader)
                other = survivors[0]
            print(f"controller failover after kill -9 ({args.kills} kills):")
            print(
                f"  new leader reported: median {statistics.median(elected):.2f} s, max {max(elected):.2f} s"
            )
            print(
                f"  CreateTopics works again: median {statistics.median(usable):.2f} s, max {max(usable):.2f} s"
            )
        finally:
            nodes.stop_all()


if __name__ == "__main__":
    main()
