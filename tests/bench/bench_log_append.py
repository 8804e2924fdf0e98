"""Benchmark the broker's append path: `Partition.append_records_to_leader` of 16 KiB batches of 1 KiB records.

    python tests/bench/bench_log_append.py [--dir /tmp/kcli-bench-log] [--gib 2] [--seconds 30] [--keep]

Producer batches are built up front (16 records of 1 KiB random values, uncompressed, as a producer with
batch.size 16384 sends them; 64 distinct ones reused round-robin), so only the broker's side is timed:
validation (one header scan with CRC-32C), offset and epoch stamping, rolls, the pwritev into the page
cache and index entries, through a LogManager with its defaults (1 GiB segments, flushed in the
background on roll, page cache otherwise). The clock stops after the last append; the background fsync
of rolled segments is reported apart. Printed for each run:

  * log:  append_as_leader throughput (MB/s of batch bytes) and CPU seconds per GiB (user + system of
          the whole process, the background flusher included), plus append latency percentiles;
  * bare: the same bytes written with os.pwrite to one file: the floor set by the kernel's copy (on a VM,
          first-touch page-cache pages cost most of it).

The issue's bar is at least tansu's ~300 MB/s produce throughput at no more CPU per GiB. The directory
is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from formats.records import RecordSpec, build_batch  # noqa: E402
from kcli.broker.log import LogConfig, LogManager  # noqa: E402
from kcli.broker.metadata.image import PartitionRegistration  # noqa: E402
from kcli.broker.replication.partition import Partition  # noqa: E402
from kcli.broker.replication.purgatory import Purgatory  # noqa: E402
from kcli.config import BrokerConfig  # noqa: E402

GIB = 1 << 30
RECORD_BYTES = 1024
RECORDS_PER_BATCH = 16
DISTINCT_BATCHES = 64


def producer_batches() -> list[bytes]:
    now = time.time_ns() // 1_000_000
    return [
        build_batch([RecordSpec(now, None, os.urandom(RECORD_BYTES)) for _ in range(RECORDS_PER_BATCH)])
        for _ in range(DISTINCT_BATCHES)
    ]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_log(root: Path, batches: list[bytes], total: int, seconds: float) -> dict:
    config = BrokerConfig({"log.dirs": str(root / "log")})
    manager = LogManager(config)
    manager.startup()
    log = manager.create_log("bench", 0, uuid.uuid4(), LogConfig.from_broker(config))
    partition = Partition(log, 1, Purgatory())  # the broker appends through its partition
    partition.apply_registration(
        PartitionRegistration((1,), (1,), leader=1, leader_epoch=0, partition_epoch=0)
    )
    append = partition.append_records_to_leader
    n = len(batches)
    latencies = []
    written = count = 0
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    deadline = wall0 + seconds
    while written < total:
        data = batches[count % n]
        now_ms = time.time_ns() // 1_000_000
        t = time.perf_counter_ns()
        append(data, required_acks=1, now_ms=now_ms)
        latencies.append(time.perf_counter_ns() - t)
        written += len(data)
        count += 1
        if count % 4096 == 0 and time.perf_counter() > deadline:
            break
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    flush0 = time.perf_counter()
    manager.wait_for_flushes()
    flush_wait = time.perf_counter() - flush0
    segments = len(log.segments)
    manager.shutdown()
    latencies.sort()
    return {
        "bytes": written,
        "batches": count,
        "wall": wall,
        "cpu": cpu,
        "segments": segments,
        "flush_wait": flush_wait,
        "p50_us": latencies[len(latencies) // 2] / 1000,
        "p99_us": latencies[int(len(latencies) * 0.99)] / 1000,
        "max_us": latencies[-1] / 1000,
    }


def bench_bare(root: Path, batches: list[bytes], total: int) -> dict:
    path = root / "bare.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    n = len(batches)
    position = count = 0
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    while position < total:
        data = batches[count % n]
        os.pwrite(fd, data, position)
        position += len(data)
        count += 1
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    os.close(fd)
    path.unlink()
    return {"bytes": position, "wall": wall, "cpu": cpu}


def line(name: str, result: dict) -> str:
    gib = result["bytes"] / GIB
    text = (
        f"{name:5} {result['bytes'] / 1e6 / result['wall']:8.0f} MB/s  {result['cpu'] / gib:6.3f} CPU s/GiB  "
        f"({result['bytes'] / 1e6:.0f} MB in {result['wall']:.2f} s)"
    )
    if "p50_us" in result:
        text += (
            f"  append p50 {result['p50_us']:.1f} us, p99 {result['p99_us']:.1f} us, max {result['max_us']:.0f} us, "
            f"{result['segments']} segments; background fsync of rolled segments done {result['flush_wait']:.1f} s "
            "after the last append"
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kcli-bench-log"))
    parser.add_argument("--gib", type=float, default=2.0, help="bytes to append per run")
    parser.add_argument("--seconds", type=float, default=30.0, help="stop a run early after this long")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    total = int(args.gib * GIB)
    batches = producer_batches()
    print(
        f"{len(batches[0])}-byte batches of {RECORDS_PER_BATCH} x {RECORD_BYTES}-byte records, {args.gib:g} GiB "
        f"per run, {args.runs} runs (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)"
    )
    results = []
    try:
        for run in range(args.runs):
            root = args.dir / f"run-{run}"
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            os.sync()
            bare = bench_bare(root, batches, total)
            os.sync()
            result = bench_log(root, batches, total, args.seconds)
            results.append(result)
            print(line("bare", bare))
            print(line("log", result))
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    mbs = statistics.median(r["bytes"] / 1e6 / r["wall"] for r in results)
    cpu = statistics.median(r["cpu"] / (r["bytes"] / GIB) for r in results)
    print(f"median: {mbs:.0f} MB/s, {cpu:.3f} CPU s/GiB")
    print("reproduce: python tests/bench/bench_log_append.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
