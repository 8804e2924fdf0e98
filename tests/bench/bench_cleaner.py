"""Benchmark the log cleaner: MB/s of log compacted, on a log written by `Log.append_as_leader`.

    python tests/bench/bench_cleaner.py [--mib 256] [--keys 100000] [--value-bytes 100] [--codec none]
                                        [--records-per-batch 100] [--segment-mib 64] [--dedupe-mib 128]

It writes `--mib` MiB of batches whose keys are drawn uniformly from `--keys` keys (values half random,
half zeros) into a fresh compacted log (in a temporary dir), rolls it so everything is cleanable, and
runs one clean in this
thread (`LogCleaner.clean_now`): the offset map over the whole log, then the rewrite of every segment.
It prints one JSON line and a summary: MB/s of log compacted (bytes read by the rewrite over the whole
clean's wall time, Kafka's "MB of log processed"), the map pass and the rewrite pass on their own, the
size and record reductions, and the CPU seconds. The log is removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from formats.compression import Codec  # noqa: E402
from formats.records import RecordSpec, build_batch  # noqa: E402
from kcli.broker.log import Log, LogConfig  # noqa: E402
from kcli.broker.log.cleaner import CleanerConfig  # noqa: E402
from kcli.broker.log.log_cleaner import LogCleaner  # noqa: E402

MIB = 1 << 20
CODECS = {
    "none": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=256, help="size of the log to compact")
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--codec", choices=sorted(CODECS), default="none")
    parser.add_argument("--records-per-batch", type=int, default=100)
    parser.add_argument("--segment-mib", type=int, default=64, help="segment.bytes")
    parser.add_argument("--dedupe-mib", type=int, default=128, help="log.cleaner.dedupe.buffer.size")
    parser.add_argument("--dir", default=None, help="where the log is written (default: a temporary dir)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="kcli-bench-cleaner-", dir=args.dir))
    try:
        figures = run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures))
    print(
        f"compacted {figures['log_mib']:.0f} MiB ({figures['records_read']:,} records, {args.keys:,} keys, "
        f"{args.value_bytes}-byte values, {args.codec}) in {figures['clean_s']:.2f} s: "
        f"{figures['mb_per_s']:.1f} MB/s of log compacted (map pass {figures['map_mb_per_s']:.1f} MB/s, "
        f"rewrite {figures['rewrite_mb_per_s']:.1f} MB/s), {figures['size_reduction_pct']:.1f}% smaller, "
        f"CPU {figures['cpu_s']:.2f} s"
    )
    print("command: python " + " ".join([str(Path(__file__).relative_to(REPO)), *sys.argv[1:]]))


def run(root: Path, args: argparse.Namespace) -> dict[str, object]:
    now = int(time.time() * 1000)
    config = LogConfig.from_values(
        {
            "cleanup.policy": ["compact"],
            "segment.bytes": args.segment_mib * MIB,
            "file.delete.delay.ms": 0,
            "min.cleanable.dirty.ratio": 0.0,
        }
    )
    log = Log.create(root / "bench-0", config, uuid.uuid4(), clock=lambda: now)
    rng = random.Random(42)
    half = args.value_bytes // 2  # half random, half zeros: values compress about 2:1, as text often does
    zeros = bytes(args.value_bytes - half)
    codec = CODECS[args.codec]
    target = args.mib * MIB
    started = time.perf_counter()
    while log.size_bytes() < target:
        specs = [
            RecordSpec(now, b"key-%08d" % rng.randrange(args.keys), rng.randbytes(half) + zeros)
            for _ in range(args.records_per_batch)
        ]
        log.append_as_leader(build_batch(specs, codec=codec), leader_epoch=0, now_ms=now)
    log.update_high_watermark(log.log_end_offset)  # committed, as the only replica's partition makes it
    log.roll(now_ms=now)
    log.flush()
    written_s = time.perf_counter() - started
    size = log.size_bytes()

    cleaner = LogCleaner(
        CleanerConfig(dedupe_buffer_size=args.dedupe_mib * MIB), [root], logs=lambda: [log], clock=lambda: now
    )
    cleaner.startup()
    cpu = os.times()
    wall = time.perf_counter()
    result = cleaner.clean_now(now)
    clean_s = time.perf_counter() - wall
    cpu_after = os.times()
    assert result is not None
    _, stats = result
    index_s = max(stats.elapsed_index_secs, 1e-9)
    rewrite_s = max(clean_s - index_s, 1e-9)
    figures = {
        "log_mib": size / MIB,
        "write_s": round(written_s, 2),
        "clean_s": round(clean_s, 3),
        "mb_per_s": round(stats.bytes_read / MIB / clean_s, 1),
        "map_mb_per_s": round(stats.map_bytes_read / MIB / index_s, 1),
        "rewrite_mb_per_s": round(stats.bytes_read / MIB / rewrite_s, 1),
        "records_read": stats.messages_read,
        "records_written": stats.messages_written,
        "size_reduction_pct": round(100 * (1 - stats.bytes_written / stats.bytes_read), 1),
        "map_utilization_pct": round(100 * stats.buffer_utilization, 1),
        "cpu_s": round(
            (cpu_after.user - cpu.user) + (cpu_after.system - cpu.system),
            2,
        ),
        "keys": args.keys,
        "value_bytes": args.value_bytes,
        "codec": args.codec,
    }
    log.close()
    return figures


if __name__ == "__main__":
    main()
