"""Benchmark the idempotent producer against plain acks=all on the same kcli broker (confluent-kafka).

    python tests/bench/bench_idempotence.py [--records 200000] [--size 200] [--runs 3] [--partitions 1]

One `kcli broker start` process on loopback, fresh data dir. Each run produces `--records` records of
`--size` random bytes to a new topic with librdkafka's defaults except for the setting under test:
  * plain:       acks=all, enable.idempotence=false;
  * idempotent:  enable.idempotence=true (which implies acks=all and max 5 requests in flight).
Runs alternate (plain, idempotent, plain, ...) so drift affects both alike. The clock runs from the first
produce() to the end of flush(); the broker's CPU seconds (from /proc) are measured over the same span.
Printed: per-run MB/s, records/s and broker CPU s per GiB, the medians, and idempotent/plain ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
READY = re.compile(r"^kcli broker: listening on (\S+):(\d+)$", re.MULTILINE)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-idempotence-"))
    broker, bootstrap = start_broker(workdir)
    try:
        payloads = [os.urandom(args.size) for _ in range(1024)]
        results: dict[str, list[tuple[float, float]]] = {"plain": [], "idempotent": []}
        for run in range(args.runs):
            for mode in ("plain", "idempotent"):
                topic = f"bench-{mode}-{run}"
                create_topic(bootstrap, topic, args.partitions)
                seconds, cpu = produce(bootstrap, topic, mode, payloads, args.records, broker.pid)
                mb = args.records * args.size / 1e6
                cpu_per_gib = cpu / (args.records * args.size / 2**30)
                results[mode].append((mb / seconds, cpu_per_gib))
                print(
                    f"run {run + 1} {mode:>10}: {mb / seconds:7.1f} MB/s  {args.records / seconds:9.0f} rec/s  "
                    f"broker CPU {cpu_per_gib:6.1f} s/GiB",
                    flush=True,
                )
        plain = statistics.median(r[0] for r in results["plain"])
        idempotent = statistics.median(r[0] for r in results["idempotent"])
        plain_cpu = statistics.median(r[1] for r in results["plain"])
        idempotent_cpu = statistics.median(r[1] for r in results["idempotent"])
        print(
            f"median: plain {plain:.1f} MB/s ({plain_cpu:.1f} CPU s/GiB), idempotent {idempotent:.1f} MB/s "
            f"({idempotent_cpu:.1f} CPU s/GiB); idempotent/plain throughput = {idempotent / plain:.2f}"
        )
        print(
            f"command: python tests/bench/bench_idempotence.py --records {args.records} --size {args.size} "
            f"--runs {args.runs} --partitions {args.partitions}"
        )
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    log_path = workdir / "broker.log"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kcli",
                "broker",
                "start",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                str(workdir / "data"),
            ],
            stdout=log_file,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=workdir,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = READY.search(log_path.read_text(errors="replace"))
        if match:
            return process, f"{match.group(1)}:{match.group(2)}"
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise SystemExit(f"the broker did not start:\n{log_path.read_text(errors='replace')}")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=15)


def produce(
    bootstrap: str, topic: str, mode: str, payloads: list[bytes], records: int, broker_pid: int
) -> tuple[float, float]:
    """(seconds from first produce to flushed, broker CPU seconds over that span)."""
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if mode == "idempotent":
        config["enable.idempotence"] = True
    else:
        config["acks"] = "all"
        config["enable.idempotence"] = False
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)  # connected and metadata known before the clock starts
    failures: list[str] = []

    def on_delivery(error: object, message: object) -> None:
        if error is not None:
            failures.append(str(error))

    cpu_before = broker_cpu_seconds(broker_pid)
    start = time.perf_counter()
    count = len(payloads)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payloads[i % count], on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise SystemExit(f"{mode}: records left undelivered after 120 s")
    seconds = time.perf_counter() - start
    cpu = broker_cpu_seconds(broker_pid) - cpu_before
    if failures:
        raise SystemExit(f"{mode}: {len(failures)} records failed, first: {failures[0]}")
    return seconds, cpu


def broker_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
