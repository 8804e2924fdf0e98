"""Scan throughput of `kcli spark-audit gaps` over a generated multi-GiB archive (warm page cache).

    python tests/bench/bench_spark_audit.py [--gib 3] [--dir /tmp/kcli-spark-bench] [--cores 1,2]

Prints: `cat` over the files, a single-process header scan with CRC (the scanner alone), then the gaps
job on local[N] for each N (Spark start-up reported apart), with GB/s, batches/s, records/s, peak RSS
and the rows collected to the driver; and a projection for 10 TB on E executor cores.

Each job also pays a fixed cost whatever the archive's size (Python planner workers for schema() and
partitions(), task scheduling): it is measured apart, on a 1 MiB archive, and the scan rate is
given both for the whole job and net of that cost, which is what a multi-TB job sees per core.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import struct
import subprocess
import time
from pathlib import Path

from formats.records import RecordSpec, build_batch
from ops.spark.archive import ByteRange, RangeReader, discover

SEGMENT_BYTES = 1 << 30
RECORDS_PER_BATCH = 16
RECORD_BYTES = 1000  # 16 records of ~1 KB: ~16 KiB batches, as in the feasibility study


def generate(root: Path, gib: float) -> tuple[int, int]:
    """Partitions of 1 GiB segments (the last ones smaller); returns (batches, records)."""
    if root.exists():
        shutil.rmtree(root)
    template = build_batch(
        [
            RecordSpec(1_700_000_000_000 + i, b"key-%d" % i, bytes(RECORD_BYTES))
            for i in range(RECORDS_PER_BATCH)
        ],
        base_offset=0,
        partition_leader_epoch=0,
    )
    per_block = (1 << 20) // len(template)
    block = bytearray(template * per_block)
    total = int(gib * (1 << 30))
    batches = 0
    partition = 0
    while total > 0:
        d = root / "broker-1" / f"bench-{partition}"
        d.mkdir(parents=True)
        size = min(total, 2 * SEGMENT_BYTES)
        offset = 0
        for seg in range(-(-size // SEGMENT_BYTES)):
            seg_bytes = min(SEGMENT_BYTES, size - seg * SEGMENT_BYTES)
            with open(d / f"{offset:020d}.log", "wb") as f:
                for _ in range(seg_bytes // len(block)):
                    for i in range(per_block):  # base offset lies outside the CRC: stamp it, keep the CRC
                        struct.pack_into(">q", block, i * len(template), offset)
                        offset += RECORDS_PER_BATCH
                    f.write(block)
                    batches += per_block
        total -= size
        partition += 1
    return batches, batches * RECORDS_PER_BATCH


def single_process_scan(root: Path) -> tuple[float, int]:
    started = time.perf_counter()
    n = 0
    for f in discover(root):
        for chunk in RangeReader(ByteRange(f, 0, f.size), check_crc=True).chunks():
            n += len(chunk.batches)
    return time.perf_counter() - started, n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=3.0)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kcli-spark-bench"))
    parser.add_argument("--cores", default="1,2")
    parser.add_argument("--executors", type=int, default=64, help="executor cores for the 10 TB projection")
    args = parser.parse_args()
    started = time.perf_counter()
    batches, records = generate(args.dir, args.gib)
    files = sorted(args.dir.rglob("*.log"))
    size = sum(f.stat().st_size for f in files)
    print(f"archive: {size / 1e9:.2f} GB, {len(files)} segments, {batches} batches, {records} records "
          f"(generated in {time.perf_counter() - started:.1f} s)")  # fmt: skip
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    started = time.perf_counter()
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    cat = time.perf_counter() - started
    print(f"cat (warm): {cat:.3f} s, {size / cat / 1e9:.1f} GB/s")
    seconds, n = single_process_scan(args.dir)
    assert n == batches
    single = size / seconds
    print(
        f"single process header scan + CRC: {seconds:.3f} s, {single / 1e9:.2f} GB/s, {n / seconds:,.0f} batches/s"
    )

    from ops.spark import jobs

    tiny = args.dir.with_name(args.dir.name + "-tiny")
    generate(tiny, 1 / 1024)  # one segment of 1 MiB
    per_core = {}
    for cores in (int(c) for c in args.cores.split(",")):
        t = time.perf_counter()
        spark = jobs.session(f"local[{cores}]")
        startup = time.perf_counter() - t
        jobs.run(spark, "gaps", str(args.dir))  # first query: Python workers and planner warm up
        fixed = min(jobs.run(spark, "gaps", str(tiny)).stats["seconds"] for _ in range(3))
        best = None
        for _ in range(3):
            report = jobs.run(spark, "gaps", str(args.dir))
            assert report.stats["batches"] == batches and not report.findings
            best = min(best or 1e9, report.stats["seconds"])
        peaks = _descendants_peak_rss()  # before stop(): the JVM and Python workers are still alive
        spark.stop()
        rate = size / best
        net = size / max(best - fixed, 1e-3)
        per_core[cores] = net / cores
        print(
            f"spark-audit gaps local[{cores}]: start-up {startup:.1f} s; job {best:.3f} s (best of 3): "
            f"{rate / 1e9:.2f} GB/s, {batches / best:,.0f} batches/s, {records / best:,.0f} records/s, "
            f"{rate / cores / single:.2f}x single process per core; {report.stats['ranges']} ranges, "
            f"{report.stats['collected_bytes']} bytes collected to the driver\n"
            f"  fixed cost per job (1 MiB archive, best of 3) {fixed:.3f} s; net of it "
            f"{net / 1e9:.2f} GB/s, {net / cores / single:.2f}x single process per core"
        )
        self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"  peak RSS: driver (python) {self_rss:.0f} MiB, "
            + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in sorted(peaks.items()))
        )
    rate = max(per_core.values())  # net of the fixed cost: a 10 TB job pays it once
    tb = 10e12
    print(
        f"projection for 10 TB: {tb / rate / 3600:.1f} core-hours at {rate / 1e9:.2f} GB/s per core; "
        f"{tb / rate / args.executors / 60:.1f} min on {args.executors} executor cores (warm, CPU bound; "
        f"I/O bandwidth bounds it on cold storage); driver receives ~"
        f"{report.stats['collected_bytes'] / report.stats['ranges'] * tb / (1 << 30) / 1e6:.1f} MB (no shuffle)"
    )


def _descendants_peak_rss() -> dict[str, float]:
    """The largest peak RSS (VmHWM) among this process's live descendants, by kind: JVM or Python worker."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    peaks: dict[str, float] = {}
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        hwm = next(
            (int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM")), 0
        )
        kind = "JVM" if exe.endswith("java") else "Python worker"
        peaks[kind] = max(peaks.get(kind, 0.0), hwm)
    return peaks


if __name__ == "__main__":
    main()
