"""Benchmark `kcli verify` against a bare CRC-32C pass over the same files (the issue's bar: at least half).

    python tests/bench/bench_verify.py [--dir /tmp/kcli-bench-verify] [--gib 4] [--runs 5] [--keep]

Writes a partition dir of 1 GiB segments of ~16 KiB uncompressed v2 batches (reused when present, deleted
at the end unless --keep), with .index/.timeindex by Kafka's sparse rule and a leader-epoch-checkpoint.
Then times, as whole processes with the files in page cache, a warm-up and `--runs` runs of each of:

  * bare:   one Python process reading every .log in 8 MiB chunks and crc32c-ing each (the crc32c package);
  * mmap:   the same with each whole file memory-mapped (no copy, no bound on memory): the fastest bare pass;
  * verify: `kcli verify <partition dir>` (header walk + CRC-32C of every batch + index/epoch checks);

and prints the median wall time and throughput of each, their ratio, and the peak RSS (the kernel's
ru_maxrss of the child) of `kcli verify` over a single 1 GiB segment.

Every child runs from cached bytecode, as an installed kcli does (pip compiles it at install time): with
PYTHONDONTWRITEBYTECODE set, as in some sandboxes, each `kcli verify` would first recompile the project's
modules (~30 ms here). The cache goes to <dir>/pycache (PYTHONPYCACHEPREFIX), never into the source
tree, and the warm-up round fills it; --no-bytecode-cache measures the recompiling start-up instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from formats import _native, checkpoints  # noqa: E402
from formats.index import encode_offset_entry, encode_time_entry  # noqa: E402
from formats.records import RecordSpec, build_batch  # noqa: E402
from formats.segment import SegmentIndexer, filename  # noqa: E402

SEGMENT_BYTES = 1 << 30
RECORDS_PER_BATCH = 160  # 160 records of ~100 bytes: a 16 KiB batch, as a producer's default batch.size
T0 = 1_700_000_000_000
GIB = 1 << 30

BARE_CRC = """
import sys, crc32c
buf = bytearray(8 << 20)
view = memoryview(buf)
for path in sys.argv[1:]:
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc32c.crc32c(view[:n])
"""
BARE_MMAP = """
import mmap, sys, crc32c
for path in sys.argv[1:]:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        crc32c.crc32c(m)
"""
VERIFY = [sys.executable, "-c", "import kcli.cli.verify; from kcli.cli.main import main; main()", "verify"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kcli-bench-verify"))
    parser.add_argument(
        "--gib", type=int, default=4, help="size of the partition dir in GiB (1 GiB segments)"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the generated files for the next run")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as it is (every kcli start recompiles when it is set)",
    )
    args = parser.parse_args()
    partition = args.dir / "orders-0"
    try:
        generate(partition, args.gib)
        logs = sorted(str(p) for p in partition.glob("*.log"))
        total = sum(os.path.getsize(p) for p in logs)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(args.dir / "pycache")
        bare = [sys.executable, "-c", BARE_CRC, *logs]
        bare_mmap = [sys.executable, "-c", BARE_MMAP, *logs]
        verify = [*VERIFY, str(partition)]
        check = subprocess.run(verify, capture_output=True, text=True, env=env)
        print(check.stdout.strip().splitlines()[-1])
        if check.returncode != 0:
            sys.exit(f"kcli verify reported findings on the generated dir:\n{check.stdout}{check.stderr}")
        bare_times, mmap_times, verify_times = [], [], []
        for run in range(args.runs + 1):  # the first round warms the page cache and is not counted
            b, _ = timed(bare, env)
            m, _ = timed(bare_mmap, env)
            v, _ = timed(verify, env)
            if run:
                bare_times.append(b)
                mmap_times.append(m)
                verify_times.append(v)
        one_segment = [*VERIFY, logs[0]]
        _, rss_kib = timed(one_segment, env)
        bare_s, verify_s = statistics.median(bare_times), statistics.median(verify_times)
        ratios = sorted(b / v for b, v in zip(bare_times, verify_times, strict=True))
        mmap_s = statistics.median(mmap_times)
        mmap_ratios = sorted(m / v for m, v in zip(mmap_times, verify_times, strict=True))
        print(
            f"data: {len(logs)} segments, {total / GIB:.2f} GiB, {RECORDS_PER_BATCH}-record batches of ~16 KiB; "
            + ("modules recompiled at every start" if args.no_bytecode_cache else "bytecode cached")
        )
        print(
            f"bare crc32c pass : median {bare_s:.3f} s  {total / bare_s / 1e9:.2f} GB/s  ({args.runs} runs)"
        )
        print(
            f"bare crc32c, mmap: median {mmap_s:.3f} s  {total / mmap_s / 1e9:.2f} GB/s  (whole file mapped, no bound on memory)"
        )
        print(
            f"kcli verify      : median {verify_s:.3f} s  {total / verify_s / 1e9:.2f} GB/s  ({args.runs} runs)"
        )
        print(
            f"verify / bare throughput: median {statistics.median(ratios):.2f} "
            f"(min {ratios[0]:.2f}, max {ratios[-1]:.2f}; bar >= 0.50)"
        )
        print(
            f"verify / mmap throughput: median {statistics.median(mmap_ratios):.2f} "
            f"(min {mmap_ratios[0]:.2f}, max {mmap_ratios[-1]:.2f}; bar >= 0.50)"
        )
        print(
            f"peak RSS, kcli verify of one {os.path.getsize(logs[0]) / GIB:.2f} GiB segment: {rss_kib / 1024:.1f} MiB"
        )
        print(
            f"reproduce: python {Path(__file__).relative_to(REPO)} --dir {args.dir} --gib {args.gib} --runs {args.runs}"
            + (" --no-bytecode-cache" if args.no_bytecode_cache else "")
        )
    finally:
        if not args.keep:
            shutil.rmtree(partition, ignore_errors=True)
            shutil.rmtree(args.dir / "pycache", ignore_errors=True)
            if args.dir.is_dir() and not any(args.dir.iterdir()):
                args.dir.rmdir()


def timed(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and the child's peak RSS in KiB (its own ru_maxrss, from wait4)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss


def generate(partition: Path, gib: int) -> None:
    """Write `gib` segments of up to 1 GiB; reuse them when a previous run left the same layout."""
    stamp = partition / ".bench-layout"
    layout = f"{gib} x {SEGMENT_BYTES} bytes, {RECORDS_PER_BATCH} records per batch\n"
    if stamp.is_file() and stamp.read_text() == layout:
        return
    shutil.rmtree(partition, ignore_errors=True)
    partition.mkdir(parents=True)
    started = time.perf_counter()
    specs = [RecordSpec(T0 + i, b"key-%06d" % i, bytes(range(80))) for i in range(RECORDS_PER_BATCH)]
    template = bytearray(build_batch(specs))
    view = memoryview(template)
    size = len(template)
    offset = 0
    epochs = []
    for segment in range(gib):
        epoch = segment // 2
        if segment % 2 == 0:
            epochs.append(checkpoints.EpochEntry(epoch, offset))
        base = offset
        indexer = SegmentIndexer(4096)
        index, time_index = bytearray(), bytearray()
        with open(partition / filename(base, ".log"), "wb") as log:
            chunk = bytearray()
            position = 0
            while position + size <= SEGMENT_BYTES:
                timestamp = T0 + offset * 10
                # base offset and leader epoch sit outside the CRC; the timestamps are inside it
                struct.pack_into(">qii", template, 0, offset, size - 12, epoch)
                struct.pack_into(">qq", template, 27, timestamp, timestamp + RECORDS_PER_BATCH - 1)
                struct.pack_into(">I", template, 17, _native.crc32c(view[21:]))
                last_offset = offset + RECORDS_PER_BATCH - 1
                entries = indexer.append(position, last_offset, timestamp + RECORDS_PER_BATCH - 1, size)
                if entries.offset_entry:
                    index += encode_offset_entry(base, *entries.offset_entry)
                if entries.time_entry:
                    time_index += encode_time_entry(base, *entries.time_entry)
                chunk += template
                if len(chunk) >= 8 << 20:
                    log.write(chunk)
                    chunk.clear()
                position += size
                offset = last_offset + 1
            log.write(chunk)
        final = indexer.final_time_entry()
        if final:
            time_index += encode_time_entry(base, *final)
        (partition / filename(base, ".index")).write_bytes(index)
        (partition / filename(base, ".timeindex")).write_bytes(time_index)
    (partition / "leader-epoch-checkpoint").write_text(checkpoints.write_leader_epoch_checkpoint(epochs))
    stamp.write_text(layout)
    print(f"generated {partition} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
