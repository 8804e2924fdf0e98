"""Benchmark formats._native: the verify pass (scan + CRC) and record decoding.

    python tests/bench/bench_native.py [--size-mib 512] [--seconds 1.0]

1. Verify: a temporary file of ~16 KiB uncompressed v2 batches, memory-mapped; the `crc32c` package
   over the whole file (a bare single-process pass, the ceiling) against scan(check_crc=True), which
   frames every batch and checks every batch's CRC. The file is deleted afterwards.
2. Decode: 100-byte records (key 10 bytes, value 100 bytes, no headers) in ~16 KiB batches; records/s
   of decode_records against aiokafka's Cython reader and kafka-python's pure-Python reader, each
   reading offset, timestamp, key, value and headers of every record.

Figures are printed, nothing about time is asserted. Each figure is the best of a few timed rounds, so
other load on the machine shows up as noise rather than as a slower result.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import struct
import tempfile
import time
from collections.abc import Callable

import crc32c
from aiokafka.record._crecords import DefaultRecordBatch as AiokafkaBatch
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder

from formats import _native

BATCH_BYTES = 16 * 1024
_HEADER = struct.Struct(">qiibIhiqqqhii")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512, help="size of the verify file (MiB)")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per decode measurement round")
    args = parser.parse_args()
    print(f"formats._native CRC implementation: {_native.crc32c_implementation}")
    bench_verify(args.size_mib << 20)
    bench_decode(args.seconds)


# --- verify ---------------------------------------------------------------------------------------------


def bench_verify(size: int) -> None:
    templates = [build_batch(seed) for seed in range(16)]
    fd, path = tempfile.mkstemp(prefix="kcli-bench-", suffix=".log", dir="/tmp")
    try:
        batches = write_log(fd, templates, size)
        os.close(fd)
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                crc32c.crc32c(view)  # fault every page in before timing anything
                whole = best_of(3, lambda: crc32c.crc32c(view))
                ours = best_of(3, lambda: _native.crc32c(view))
                found, stop, reason = _native.scan(view, 0, len(view), True)
                assert len(found) == batches and stop == len(view) and reason == 0
                assert all(batch[14] for batch in found)
                del found
                checked = best_of(3, lambda: _native.scan(view, 0, len(view), True))
                framed = best_of(3, lambda: _native.scan(view, 0, len(view), False))
                gb = len(view) / 1e9
            finally:
                view.release()
    finally:
        os.unlink(path)
    print(
        f"\nverify: {size >> 20} MiB, {batches} batches of ~{BATCH_BYTES >> 10} KiB (mmap of a file in /tmp)"
    )
    print(f"  {'crc32c package, whole file':34} {gb / whole:6.2f} GB/s")
    print(f"  {'formats._native.crc32c, whole file':34} {gb / ours:6.2f} GB/s   {whole / ours:4.2f} x crc32c")
    print(f"  {'scan(check_crc=True)':34} {gb / checked:6.2f} GB/s   {whole / checked:4.2f} x crc32c")
    print(
        f"  {'scan(check_crc=False)':34} {gb / framed:6.2f} GB/s   {batches / framed / 1e6:5.2f} M batches/s"
    )


def build_batch(seed: int) -> bytes:
    """One ~16 KiB uncompressed batch of 100-byte records, written by kafka-python (an independent writer)."""
    rng = random.Random(seed)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=BATCH_BYTES,
    )
    offset = 0
    while builder.append(
        offset,
        timestamp=1_700_000_000_000 + offset,
        key=rng.randbytes(10),
        value=rng.randbytes(100),
        headers=[],
    ):
        offset += 1
    return bytes(builder.build())


def write_log(fd: int, templates: list[bytes], size: int) -> int:
    """Write batches cycling through the templates until `size` bytes; base offsets are consecutive."""
    written = batches = next_offset = 0
    chunk = bytearray()
    while written + len(chunk) < size:
        batch = bytearray(templates[batches % len(templates)])
        struct.pack_into(">q", batch, 0, next_offset)  # the base offset is outside the CRC
        next_offset += _HEADER.unpack_from(batch)[12]
        chunk += batch
        batches += 1
        if len(chunk) >= 8 << 20:
            written += os.write(fd, chunk)
            chunk = bytearray()
    os.write(fd, chunk)
    return batches


# --- decode ---------------------------------------------------------------------------------------------


def bench_decode(seconds: float) -> None:
    batches = [build_batch(1000 + seed) for seed in range(64)]
    records = sum(_HEADER.unpack_from(b)[12] for b in batches)
    headers = [_HEADER.unpack_from(b) for b in batches]
    views = [memoryview(b)[61:] for b in batches]

    def ours() -> None:
        for header, view in zip(headers, views, strict=True):
            for r in _native.decode_records(view, header[12], header[0], header[7], -1):
                r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018

    def aiokafka() -> None:
        for b in batches:
            for r in AiokafkaBatch(b):
                r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018

    def kafka_python() -> None:
        for b in batches:
            for r in KafkaPythonBatch(b):
                r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018

    readers = [
        ("formats._native.decode_records", ours),
        ("aiokafka _crecords (Cython)", aiokafka),
        ("kafka-python (pure Python)", kafka_python),
    ]
    rates = {name: records / per_pass(fn, seconds) for name, fn in readers}
    base = rates["aiokafka _crecords (Cython)"]
    print(f"\ndecode: {len(batches)} batches, {records} records of key 10 B + value 100 B, no headers")
    for name, rate in rates.items():
        print(f"  {name:34} {rate / 1e6:6.2f} M records/s   {rate / base:4.2f} x aiokafka")


# --- timing ---------------------------------------------------------------------------------------------


def best_of(rounds: int, fn: Callable[[], object]) -> float:
    """Best wall time of `rounds` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def per_pass(fn: Callable[[], None], seconds: float) -> float:
    """Best seconds per call over three rounds of about `seconds` each."""
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    passes = max(1, int(seconds / max(once, 1e-9)))
    return min(best_of(1, lambda: [fn() for _ in range(passes)]) / passes for _ in range(3))


if __name__ == "__main__":
    main()
