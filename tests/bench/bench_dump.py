"""Benchmark `kcli dump-segment --deep-iteration` (JSON and text) as a whole process.

    python tests/bench/bench_dump.py [--mib 256] [--runs 3] [--keep]

Writes one segment of 130-record batches (10-byte keys, 100-byte values, as ~16 KiB producer batches) into
/tmp/kcli-bench-dump, then times each output mode as a whole process writing to /dev/null, warm page cache,
and prints the median wall time, records/s and the peak RSS the kernel counted for the child.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from formats.records import RecordSpec, build_batch  # noqa: E402

RECORDS_PER_BATCH = 130
KCLI = [sys.executable, "-m", "kcli", "dump-segment", "--deep-iteration"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kcli-bench-dump"))
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    path = args.dir / "00000000000000000000.log"
    try:
        records = generate(path, args.mib << 20)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        print(f"segment: {path.stat().st_size / (1 << 20):.0f} MiB, {records:,} records of ~110 bytes")
        for label, extra in (("json", ["--output", "json"]), ("text", [])):
            command = [*KCLI, *extra, str(path)]
            timed(command, env)  # warm-up
            runs = [timed(command, env) for _ in range(args.runs)]
            wall = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            print(
                f"{label:5}: median {wall:.3f} s  {records / wall / 1e6:.2f} M records/s  peak RSS {rss / 1024:.0f} MiB"
            )
        print(f"reproduce: python {Path(__file__).relative_to(REPO)} --mib {args.mib} --runs {args.runs}")
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


def generate(path: Path, size: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    records, offset = 0, 0
    specs = [
        RecordSpec(1_700_000_000_000 + i, b"key-%06d" % i, os.urandom(50).hex().encode())
        for i in range(RECORDS_PER_BATCH)
    ]
    if path.exists() and path.stat().st_size >= size:
        return path.stat().st_size // len(build_batch(specs)) * RECORDS_PER_BATCH
    with open(path, "wb") as out:
        written = 0
        while written < size:
            batch = build_batch(specs, base_offset=offset)
            out.write(batch)
            written += len(batch)
            offset += RECORDS_PER_BATCH
            records += RECORDS_PER_BATCH
    return records


def timed(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss


if __name__ == "__main__":
    main()
