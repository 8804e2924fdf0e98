"""Figures of replication against the partition count: one topic of 1, 30 and then 1000 partitions at
replication factor 3 on a 3-node kcli cluster (combined mode, one machine).

    python tests/bench/bench_partitions.py [--partitions 1,30,1000] [--mib 64] [--size 1024]
                                           [--idle-seconds 10] [--settle-seconds 15] [--base-port 24000]

For each partition count: a topic with replicas spread over the three nodes (min.insync.replicas 2) is
created and waited for until every partition has its full ISR. The brokers' CPU seconds per second are
measured over --idle-seconds with no traffic, --settle-seconds after the ISR was full (the new
replicas' first fetches and checkpoints take about ten seconds at 1000 partitions): what the followers'
fetches of every partition cost by themselves. Then one idempotent confluent-kafka producer writes
--mib MiB of --size-byte records with acks=all (each counted once the ISR has it), round-robin over the
partitions. Printed: records/s, MB/s and the CPU (user + system, from /proc) of the three broker
processes per GiB written. The topic is deleted before the next count, so each phase replicates only
its own partitions.

Benchmarks print figures; nothing here is a timed assert. Loopback only; every process it starts is
stopped by PID.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replication import Nodes, admin, producer  # noqa: E402


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    topic = NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})
    client = admin(bootstrap)  # kept until the result: a collected client ends its requests
    client.create_topics([topic])[name].result(60)
    wait_full_isr(bootstrap, name, partitions)


def wait_full_isr(bootstrap: str, topic: str, partitions: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            meta = admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions
            if len(meta) == partitions and all(p.leader >= 0 and len(p.isrs) == 3 for p in meta.values()):
                return
        except Exception:  # the topic not known everywhere yet: ask again
            pass
        time.sleep(0.5)
    raise SystemExit(f"{topic}: not every partition has an ISR of 3 within {timeout:g} s")


def delete_topic(bootstrap: str, name: str) -> None:
    client = admin(bootstrap)
    client.delete_topics([name])[name].result(60)
    time.sleep(3)  # the brokers drop the replicas and their fetches


def throughput(nodes: Nodes, topic: str, partitions: int, mib: int, size: int) -> tuple[float, float, float]:
    """(records/s, MB/s, broker CPU seconds per GiB) of `mib` MiB acks=all into `topic`."""
    p = producer(nodes.bootstrap)
    value = os.urandom(size)
    count = mib * 1024 * 1024 // size
    errors: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    cpu_before = nodes.cpu_seconds()
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
    if errors:
        raise SystemExit(f"{topic}: {len(errors)} produce errors, first {errors[0]}")
    return count / took, count * size / took / 1e6, cpu / (mib / 1024)


def idle_cpu(nodes: Nodes, seconds: float) -> float:
    """The brokers' CPU seconds per second while nothing is produced."""
    before = nodes.cpu_seconds()
    time.sleep(seconds)
    return (nodes.cpu_seconds() - before) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1,30,1000", help="comma-separated partition counts")
    parser.add_argument("--mib", type=int, default=64, help="MiB per throughput phase")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument(
        "--settle-seconds", type=float, default=15.0, help="wait after creating a topic before measuring"
    )
    parser.add_argument(
        "--base-port", type=int, default=24000, help="below Linux's ephemeral ports (32768-60999)"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.partitions.split(",")]

    with tempfile.TemporaryDirectory(prefix="kcli-bench-partitions-") as tmp:
        nodes = Nodes(Path(tmp), 3, args.base_port, [])
        try:
            nodes.start(1, 2, 3)
            print(
                f"acks=all RF 3, {args.mib} MiB of {args.size}-byte records, round-robin over the partitions:"
            )
            for count in counts:
                topic = f"p{count}"
                create_topic(nodes.bootstrap, topic, count)
                time.sleep(args.settle_seconds)
                idle = idle_cpu(nodes, args.idle_seconds)
                rate, mb, cpu = throughput(nodes, topic, count, args.mib, args.size)
                print(
                    f"  {count:5d} partitions: {rate:9.0f} msg/s, {mb:6.1f} MB/s, broker CPU {cpu:6.1f} s/GiB;"
                    f" idle {idle:.3f} CPU-s/s",
                    flush=True,
                )
                delete_topic(nodes.bootstrap, topic)
        finally:
            nodes.stop_all()


if __name__ == "__main__":
    main()
