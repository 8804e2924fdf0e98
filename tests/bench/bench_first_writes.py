"""What the first writes to many new partitions cost one broker: its CPU and the time they take.

    python tests/bench/bench_first_writes.py [--partitions 1000] [--rounds 3] [--record-kib 1] [--runs 2]

A real `kcli broker start` on loopback (the checkout this file is in, or `--tree DIR` for another
checkout, its `formats/_native` built); one topic of `--partitions` partitions (RF 1) is created, then a
confluent-kafka producer writes `--rounds` rounds of 5 records of `--record-kib` KiB to every partition,
flushing after each round. Every partition's second batch carries its segment's first index entries
(index.interval.bytes 4096), so this is what a fresh topic's first seconds of traffic, or a roll of every
segment, cost. Printed per run: the broker's CPU (user + system from /proc) and the wall time of the
creation and of the writes, and the broker's RSS after them. Figures only, no asserts.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def broker_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def run(tree: Path, partitions: int, rounds: int, record_kib: int) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="kcli-bench-first-") as data:
        env = dict(os.environ, PYTHONPATH=str(tree))
        broker = subprocess.Popen(
            [sys.executable, "-m", "kcli", "broker", "start", "--data-dir", data, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tree,
        )  # fmt: skip
        try:
            assert broker.stdout is not None
            for line in broker.stdout:
                ready = re.search(r"listening on (\S+):(\d+)", line)
                if ready:
                    bootstrap = f"{ready[1]}:{ready[2]}"
                    break
            else:
                raise SystemExit(f"the broker in {tree} did not start")
            cpu, wall = broker_cpu(broker.pid), time.monotonic()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic("first", partitions, 1)]).values():
                future.result(timeout=120)
            created_cpu, created_wall = broker_cpu(broker.pid) - cpu, time.monotonic() - wall
            cpu, wall = broker_cpu(broker.pid), time.monotonic()
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "logger": None})
            value = b"x" * (record_kib * 1024)
            for _ in range(rounds):
                for partition in range(partitions):
                    for _ in range(5):
                        producer.produce("first", value, partition=partition)
                if producer.flush(120):
                    raise SystemExit("records left unacknowledged")
            written_cpu, written_wall = broker_cpu(broker.pid) - cpu, time.monotonic() - wall
            return (
                f"{tree}: create {partitions} partitions {created_cpu:.2f} CPU-s ({created_wall:.2f} s); "
                f"{rounds} rounds of 5 x {record_kib} KiB to each {written_cpu:.2f} CPU-s ({written_wall:.2f} s); "
                f"RSS {rss_mib(broker.pid)} MiB"
            )
        finally:
            broker.send_signal(signal.SIGTERM)
            broker.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record-kib", type=int, default=1)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--tree", type=Path, action="append", help="a checkout to run (repeatable; alternated)"
    )
    args = parser.parse_args()
    trees = args.tree or [REPO]
    for _ in range(args.runs):
        for tree in trees:
            print(run(tree.resolve(), args.partitions, args.rounds, args.record_kib), flush=True)


if __name__ == "__main__":
    main()
