"""Benchmark `kcli replay` as a whole process into a local kcli broker.

    python tests/bench/bench_replay.py [--raw-mib 1024] [--batch-kib 16] [--record-count 300000] [--keep]
        [--partitioner same|key|round-robin] [--partitions 1]

raw: one segment of v2 batches of 1 KiB records (~`--batch-kib` per batch, uncompressed) replayed in raw
mode (MB/s of segment bytes); `--batch-kib 16,64,256` runs one raw replay per batch size, since raw mode
sends each source batch in its own Produce request and the batch size sets how many requests a MB takes. record: a segment of 1 KiB records replayed with --mode record (records/s),
spread by --partitioner over a topic of --partitions partitions. Each run gets a fresh broker and topic;
the figures are wall time of the replay process, with the CPU seconds the replay process and the broker
spent (the broker's kernel share apart; after each raw run, the kernel CPU of a plain writer of the same
batches shows what the page-cache writes alone cost on this machine at that moment). On a shared machine the CPU seconds are the steadier figure: the 1-minute load average is printed
first, and when other work holds a core, wall time comes near the sum of the two processes' CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench_broker import start_kcli, stop_kcli  # noqa: E402  (tests/bench is sys.path[0])

from formats.records import RecordSpec, build_batch  # noqa: E402

RECORD_BYTES = 1024
T0 = 1_700_000_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kcli-bench-replay"))
    parser.add_argument("--raw-mib", type=int, default=1024)
    parser.add_argument("--batch-kib", default="16", help="one size, or several comma-separated (raw only)")
    parser.add_argument("--record-count", type=int, default=300_000)
    parser.add_argument("--only", choices=("raw", "record"), default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-idempotence", action="store_true")
    parser.add_argument("--partitioner", choices=("same", "key", "round-robin"), default="same")
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    batch_kibs = [int(k) for k in str(args.batch_kib).split(",")]
    per_batch = max(1, (batch_kibs[0] << 10) // (RECORD_BYTES + 24))
    try:
        for batch_kib in batch_kibs if args.only in (None, "raw") else []:
            in_batch = max(1, (batch_kib << 10) // (RECORD_BYTES + 24))
            source = args.dir / "raw" / "src-0"
            records = generate(source / "00000000000000000000.log", args.raw_mib << 20, in_batch)
            size = (source / "00000000000000000000.log").stat().st_size
            wall, cpu, (broker_user, broker_kernel) = run_replay(
                args, source, ["--mode", "raw"], partitions=1
            )
            broker_cpu = broker_user + broker_kernel
            batches = records // in_batch
            print(
                f"raw   : {size / (1 << 20):.0f} MiB segment, {records:,} records in batches of {in_batch} "
                f"(~{batch_kib} KiB): {wall:.2f} s, {size / wall / 1e6:.0f} MB/s ({size / wall / (1 << 20):.0f} MiB/s); "
                f"replay CPU {cpu:.2f} s, broker CPU {broker_cpu:.2f} s ({broker_cpu / batches * 1e6:.0f} us per batch, "
                f"{broker_kernel / batches * 1e6:.0f} us of it in the kernel)"
            )
            kernel = write_cost(source / "00000000000000000000.log", args.dir / "raw" / "copy.log")
            print(
                f"        the kernel's cost of writing the same batches to a new file here: {kernel:.0f} us per batch"
            )
            shutil.rmtree(args.dir / "raw", ignore_errors=True)
        if args.only in (None, "record"):
            source = args.dir / "record" / "src-0"
            size_wanted = args.record_count * (RECORD_BYTES + 24)
            records = generate(source / "00000000000000000000.log", size_wanted, per_batch)
            mode = ["--mode", "record", "--partitioner", args.partitioner]
            size = (source / "00000000000000000000.log").stat().st_size
            wall, cpu, broker_times = run_replay(args, source, mode, partitions=args.partitions)
            broker_cpu = sum(broker_times)
            spread = (
                "" if args.partitions == 1 else f" by {args.partitioner} over {args.partitions} partitions"
            )
            print(
                f"record: {records:,} records of 1 KiB in batches of {per_batch}{spread}: {wall:.2f} s, "
                f"{records / wall / 1e3:.0f} k records/s ({size / wall / 1e6:.0f} MB/s); replay CPU {cpu:.2f} s, "
                f"broker CPU {broker_cpu:.2f} s"
            )
        flags = f" --raw-mib {args.raw_mib} --batch-kib {args.batch_kib} --record-count {args.record_count}"
        if args.partitions != 1:
            flags += f" --partitioner {args.partitioner} --partitions {args.partitions}"
        print(f"reproduce: python {Path(__file__).relative_to(REPO)}{flags}")
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


def generate(path: Path, size: int, per_batch: int) -> int:
    """Batches of `per_batch` 1 KiB records with distinct keys, stamped with consecutive offsets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    value = os.urandom(RECORD_BYTES - 16)
    offset = 0
    with open(path, "wb") as f:
        written = 0
        while written < size:
            specs = [
                RecordSpec(T0 + offset + i, b"key-%012d" % (offset + i), value, (("h", b"1"),))
                for i in range(per_batch)
            ]
            batch = build_batch(specs, base_offset=offset, partition_leader_epoch=0)
            f.write(batch)
            written += len(batch)
            offset += per_batch
    return offset


def write_cost(source: Path, target: Path) -> float:
    """Kernel CPU per batch of writing the source's batches, one pwrite each, to a new file: the floor
    under the broker's kernel time. On a VM that hands freed memory back to its host (virtio-balloon free
    page reporting, as here) most of it is the host faulting the new page-cache pages in again, so it
    varies from run to run with what memory the guest gets."""
    data = memoryview(source.read_bytes())
    ends = [end for _, end in batch_spans(data)]
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        before = os.times().system
        start = 0
        for end in ends:
            os.pwrite(fd, data[start:end], start)
            start = end
        return (os.times().system - before) / len(ends) * 1e6
    finally:
        os.close(fd)
        target.unlink()


def batch_spans(data: memoryview) -> Iterator[tuple[int, int]]:
    """(start, end) of each batch in a segment's bytes, from the size field of each header."""
    position = 0
    while position + 12 <= len(data):
        end = position + 12 + int.from_bytes(data[position + 8 : position + 12], "big")
        yield position, end
        position = end


def run_replay(
    args: argparse.Namespace, source: Path, extra: list[str], *, partitions: int
) -> tuple[float, float, tuple[float, float]]:
    workdir = source.parent / "broker"
    workdir.mkdir(parents=True, exist_ok=True)
    broker = start_kcli(workdir)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker["bootstrap"]})
        admin.create_topics([NewTopic("replayed", partitions, 1)])["replayed"].result(30)
        command = [
            sys.executable, "-m", "kcli", "replay", str(source), "-b", broker["bootstrap"], "-t", "replayed", *extra,
        ]  # fmt: skip
        if args.no_idempotence:
            command.append("--no-idempotence")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        broker_before = cpu_seconds(broker["pid"])
        started = time.monotonic()
        before = os.times()
        subprocess.run(command, check=True, env=env, stdout=sys.stderr)
        wall = time.monotonic() - started
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        broker_after = cpu_seconds(broker["pid"])
        return wall, cpu, (broker_after[0] - broker_before[0], broker_after[1] - broker_before[1])
    finally:
        stop_kcli(broker)
        shutil.rmtree(workdir, ignore_errors=True)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, kernel) CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


if __name__ == "__main__":
    main()
