"""Figures of `kcli reassign execute`: time to move partitions between brokers, with and without a
throttle, and how well its progress predicts the end (ETA at 25/50/75% copied against the actual).

    python tests/bench/bench_reassign.py [--mib 1024] [--partitions 4] [--throttle-mib 0] [--base-port 43000]

Three kcli nodes on loopback. For each run, a fresh topic of --partitions partitions on broker 1 is filled
with --mib MiB in all (incompressible 100 KiB records, acks=all), then `kcli reassign execute -o json`
moves every partition to another broker and its JSON progress lines are kept. Run 1 has no throttle; run 2
has --throttle (default: a third of run 1's rate, so it visibly caps). Printed: seconds, MiB/s, and for run 2
the rate against the setting; per run the ETA the tool showed when 25%, 50% and 75% of the bytes were
copied, against the time it actually took from there.

Benchmarks print figures; nothing here is a timed assert. Every process it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from bench_cluster import Nodes  # noqa: E402

MIB = 1 << 20
RECORD = 100 * 1024


def fill(bootstrap: str, topic: str, partitions: int, mib: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics(
        [NewTopic(topic, partitions, replica_assignment=[[1]] * partitions)], operation_timeout=30
    )
    future[topic].result(60)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "compression.type": "none"}
    )
    payload = os.urandom(RECORD)
    for i in range(mib * MIB // RECORD):
        while True:
            try:
                producer.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(300) != 0:
        raise SystemExit("the records were not all acknowledged")


def move(
    bootstrap: str, topic: str, partitions: int, to: int, throttle: int, workdir: Path
) -> dict[str, Any]:
    """Run execute, return its duration and progress lines."""
    plan = workdir / f"{topic}.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": topic, "partition": p, "replicas": [to]} for p in range(partitions)],
            }
        )
    )
    command = [
        sys.executable, "-m", "kcli", "reassign", "execute", "--reassignment-json-file", str(plan),
        "--rollback-file", str(workdir / f"{topic}-rollback.json"), "--interval", "0.5", "-o", "json",
        "-b", bootstrap,
    ]  # fmt: skip
    if throttle > 0:
        command += ["--throttle", str(throttle)]
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=3600)
    took = time.monotonic() - began
    if result.returncode != 0:
        raise SystemExit(f"execute failed: {result.stderr}")
    events = [json.loads(line) for line in result.stdout.splitlines()]
    progress = [e for e in events if e["event"] == "progress"]
    return {"seconds": took, "progress": progress}


def eta_accuracy(progress: list[dict[str, Any]]) -> list[tuple[int, float | None, float]]:
    """(percent, ETA shown then, time it actually took from then) at the first poll past 25/50/75%."""
    if not progress:
        return []
    end = progress[-1]["elapsed_s"]
    rows = []
    for percent in (25, 50, 75):
        for e in progress:
            total = e["bytes_total"] or 1
            if e["bytes_copied"] * 100 >= percent * total:
                rows.append((percent, e["eta_s"], end - e["elapsed_s"]))
                break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="MiB to move per run (all partitions together)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--throttle-mib", type=float, default=0, help="throttle of run 2 in MiB/s (0: a third of run 1)"
    )
    parser.add_argument("--base-port", type=int, default=43000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kcli-bench-reassign-") as tmp:
        workdir = Path(tmp)
        nodes = Nodes(workdir / "cluster", 3, args.base_port, ["broker.session.timeout.ms=9000"])
        try:
            nodes.start(1, 2, 3)
            bootstrap = ",".join(nodes.address(n) for n in (1, 2, 3))
            runs = []
            for index, (topic, to) in enumerate((("bench-free", 2), ("bench-throttled", 3))):
                fill(bootstrap, topic, args.partitions, args.mib)
                throttle = 0
                if index == 1:
                    free_rate = args.mib * MIB / runs[0]["copy_seconds"]
                    throttle = int(args.throttle_mib * MIB) if args.throttle_mib else int(free_rate / 3)
                run = move(bootstrap, topic, args.partitions, to, throttle, workdir)
                progress = run["progress"]
                copy_seconds = progress[-1]["elapsed_s"] if progress else run["seconds"]
                run |= {"topic": topic, "throttle": throttle, "copy_seconds": copy_seconds}
                runs.append(run)
        except SystemExit:
            for node in nodes.layout.nodes:  # what a node that died said last, before its dir goes
                if node.log_file.exists():
                    print(
                        f"--- node {node.node_id}:", *node.log_file.read_text().splitlines()[-15:], sep="\n"
                    )
            raise
        finally:
            nodes.stop_all()

    print(
        f"kcli reassign execute: {args.mib} MiB in {args.partitions} partitions, broker 1 -> another, 3 nodes"
    )
    print(f"{'run':<12} {'throttle':>14} {'copy s':>8} {'command s':>10} {'MiB/s':>8}")
    for run in runs:
        rate = args.mib / run["copy_seconds"]
        throttle = f"{run['throttle'] / MIB:.1f} MiB/s" if run["throttle"] else "none"
        label = "throttled" if run["throttle"] else "unthrottled"
        print(f"{label:<12} {throttle:>14} {run['copy_seconds']:>8.1f} {run['seconds']:>10.1f} {rate:>8.1f}")
    throttled = runs[1]
    measured = args.mib * MIB / throttled["copy_seconds"]
    print(
        f"throttled copy rate {measured / MIB:.1f} MiB/s = {100 * measured / throttled['throttle']:.0f}% of the "
        f"setting (the leader and the follower throttle each side at the rate)"
    )
    print("progress accuracy (ETA shown when X% was copied vs. the time it then took):")
    for run in runs:
        label = "throttled" if run["throttle"] else "unthrottled"
        for percent, eta, actual in eta_accuracy(run["progress"]):
            shown = "-" if eta is None else f"{eta:.1f} s"
            error = "" if eta is None or actual <= 0 else f"  ({100 * (eta - actual) / actual:+.0f}%)"
            print(f"  {label:<12} {percent:>3}%  ETA {shown:>8}  actual {actual:.1f} s{error}")
    print(f"reproduce: python tests/bench/bench_reassign.py --mib {args.mib} --partitions {args.partitions}")


if __name__ == "__main__":
    main()
