"""Benchmark `kcli broker start` against tansu (memory storage) with stock clients, in one alternating run.

    bash /work/shared/bench/setup-peers.sh && bash /work/shared/bench/peers.sh start mem
    python tests/bench/bench_broker.py [--rounds 3] [--messages 300000] [--rss-gib 10]
    bash /work/shared/bench/peers.sh stop

It starts its own kcli broker (a fresh data dir, page cache as Kafka uses it) and measures, for kcli
and tansu alternately (A,B then B,A ...), with 1 KiB messages on 3 partitions:

  * kcat path (kcat_bench.sh's flags, librdkafka 2.16): produce a file of lines (acks=1), then consume
    it back from offset 0 with kcat (no consumer group), each phase timed on its own;
  * kbench path (kbench.py on confluent-kafka, produce phases only: its consume phase needs consumer
    groups, which kcli does not have yet): acks=1 and acks=all, per codec;
  * latency: kbench at a fixed 5,000 msg/s, p50/p99/p999 of delivery latency;
  * memory (kcli only, with --rss-gib N): N GiB produced and consumed back, the broker's RSS sampled.

For every phase it prints one JSON line with msg/s, MiB/s and the broker's CPU seconds (user + system
from /proc) and RSS, then a table of medians with CPU seconds per GiB, the least noisy figure on this
shared 2-core machine. Topics are deleted after each run; the kcli broker and its data are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
SHARED_BENCH = Path("/work/shared/bench")
GIB = 1 << 30
MIB = 1 << 20
MESSAGE_BYTES = 1024
READY = re.compile(r"^kcli broker: listening on (\S+):(\d+)$", re.MULTILINE)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--peers-dir", default=os.environ.get("PEERS_DIR", str(Path.home() / ".cache/kcli-peers"))
    )
    parser.add_argument("--bench-dir", default=str(SHARED_BENCH), help="where kbench.py and mklines.py are")
    parser.add_argument("--tansu", default="127.0.0.1:19092", help="tansu's bootstrap (peers.sh start mem)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=300_000, help="messages per kcat run")
    parser.add_argument("--kbench-count", type=int, default=200_000, help="messages per kbench produce phase")
    parser.add_argument("--codecs", default="none,lz4", help="kbench codecs")
    parser.add_argument("--latency-seconds", type=float, default=6.0, help="length of each 5,000 msg/s phase")
    parser.add_argument(
        "--rss-gib", type=float, default=0, help="GiB to produce and consume for the RSS figure"
    )
    parser.add_argument("--skip", default="", help="comma list of kcat,kbench,latency to leave out")
    args = parser.parse_args()

    peers = Path(args.peers_dir)
    venv_python = peers / "venv/bin/python"
    skip = set(filter(None, args.skip.split(",")))
    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-broker-"))
    kcli = start_kcli(workdir)
    results: list[dict] = []
    try:
        targets = [("kcli", kcli["bootstrap"], kcli["pid"])]
        tansu_pid = read_pid(peers / "run/tansu-mem.pid")
        if tansu_pid and reachable(args.tansu):
            targets.append(("tansu", args.tansu, tansu_pid))
        else:
            log(f"tansu is not running at {args.tansu} (bash {SHARED_BENCH}/peers.sh start mem): kcli only")
        lines = workdir / "lines.txt"
        if "kcat" not in skip or args.rss_gib:
            run(
                [
                    sys.executable,
                    f"{args.bench_dir}/mklines.py",
                    str(lines),
                    str(args.messages),
                    str(MESSAGE_BYTES),
                ]
            )
        for round_no in range(args.rounds):
            order = targets if round_no % 2 == 0 else targets[::-1]
            if "kcat" not in skip:
                for name, bootstrap, pid in order:
                    results += kcat_round(peers, name, bootstrap, pid, lines, args.messages)
            if "kbench" not in skip:
                for codec in args.codecs.split(","):
                    for name, bootstrap, pid in order:
                        results += kbench(
                            venv_python, args, name, bootstrap, pid, codec, args.kbench_count, rate=0
                        )
        if "latency" not in skip:
            for name, bootstrap, pid in targets:
                count = int(5000 * args.latency_seconds)
                results += kbench(venv_python, args, name, bootstrap, pid, "none", count, rate=5000)
        if args.rss_gib:
            results += rss_run(peers, kcli, lines, args.messages, args.rss_gib)
    finally:
        stop_kcli(kcli)
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(results)


# --- the kcli broker under test ------------------------------------------------------------------


def start_kcli(workdir: Path, overrides: tuple[str, ...] = ()) -> dict:
    """A kcli broker on a free port with `overrides` (KEY=VALUE, as --override takes them)."""
    log_path = workdir / "broker.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kcli", "broker", "start", "--listen", "127.0.0.1:0", "--data-dir",
             str(workdir / "data"), *(f"--override={o}" for o in overrides)],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env, cwd=workdir,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = READY.search(log_path.read_text(errors="replace"))
        if match:
            return {"bootstrap": f"{match.group(1)}:{match.group(2)}", "pid": process.pid, "process": process}
        if process.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"kcli broker did not start:\n{log_path.read_text(errors='replace')}")


def stop_kcli(kcli: dict) -> None:
    process = kcli["process"]
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


# --- measurements --------------------------------------------------------------------------------


def kcat_round(peers: Path, name: str, bootstrap: str, pid: int, lines: Path, messages: int) -> list[dict]:
    """kcat_bench.sh's produce and consume, each phase timed and charged its broker CPU."""
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    admin = create_topic(bootstrap, topic)
    env = dict(os.environ, LD_LIBRARY_PATH=str(peers / "rdk"))
    size = lines.stat().st_size
    out = []
    try:
        before, started = cpu_rss(pid), time.perf_counter()
        run(
            ["kcat", "-b", bootstrap, "-P", "-t", topic, "-l", "-X", "acks=1", "-X", "linger.ms=5",
             "-X", "batch.size=1048576", "-X", "compression.type=none",
             "-X", "queue.buffering.max.messages=1000000", str(lines)],
            env=env,
        )  # fmt: skip
        out.append(phase(name, "kcat produce", messages, size, started, before, pid))
        before, started = cpu_rss(pid), time.perf_counter()
        consumed = run(
            ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
             "-X", "fetch.max.bytes=52428800", "-f", "%o\n"],
            env=env, capture=True,
        ).count(b"\n")  # fmt: skip
        out.append(phase(name, "kcat consume", consumed, size * consumed // messages, started, before, pid))
        if consumed != messages:
            out[-1]["error"] = f"consumed {consumed} of {messages}"
    finally:
        admin.delete_topics([topic])[topic].result(30)
    for line in out:
        print(json.dumps(line), flush=True)
    return out


def kbench(venv_python: Path, args: argparse.Namespace, name: str, bootstrap: str, pid: int, codec: str,
           count: int, rate: int) -> list[dict]:  # fmt: skip
    """kbench.py's produce phases (acks=1, acks=all) for one target and codec."""
    command = [str(venv_python), f"{args.bench_dir}/kbench.py", "--target", f"{name}={bootstrap}", "--pid",
               f"{name}={pid}", "--count", str(count), "--compression", codec, "--no-consume",
               "--seconds", "60"]  # fmt: skip
    if rate:
        command += ["--rate", str(rate)]
    report = json.loads(run(command, capture=True, check=False).splitlines()[0])
    out = []
    for acks, figures in report.get("produce", {}).items():
        label = f"kbench {'5k/s ' if rate else ''}produce {acks} {codec}"
        cpu = figures.get("broker_cpu_s")
        delivered = figures.get("delivered", 0)
        line = {
            "target": name, "phase": label, "messages": delivered, "msgs_s": figures.get("msgs_s"),
            "MiB_s": figures.get("MiB_s"), "broker_cpu_s": cpu,
            "cpu_s_per_GiB": round(cpu / (delivered * MESSAGE_BYTES / GIB), 2) if cpu and delivered else None,
            "rss_MiB": figures.get("broker_rss_MiB"), "p50_ms": figures.get("lat_ms_p50"),
            "p99_ms": figures.get("lat_ms_p99"), "p999_ms": figures.get("lat_ms_p999"),
        }  # fmt: skip
        if report.get("error") or figures.get("errors"):
            line["error"] = report.get("error") or figures.get("error_kinds")
        print(json.dumps(line), flush=True)
        out.append(line)
    return out


def rss_run(peers: Path, kcli: dict, lines: Path, messages: int, gib: float) -> list[dict]:
    """Produce and consume `gib` GiB through kcli, sampling its RSS every 0.2 s; memory must stay flat."""
    bootstrap, pid = kcli["bootstrap"], kcli["pid"]
    copies = max(1, round(gib * GIB / lines.stat().st_size))
    topic = f"rss-{uuid.uuid4().hex[:8]}"
    admin = create_topic(bootstrap, topic)
    env = dict(os.environ, LD_LIBRARY_PATH=str(peers / "rdk"))
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], cpu_rss(pid)[1])
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    total = messages * copies
    size = lines.stat().st_size * copies
    out = []
    try:
        before, started = cpu_rss(pid), time.perf_counter()
        for _ in range(copies):  # kcat takes one file in line mode: the same file again and again
            run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-l", "-X", "acks=1", "-X", "linger.ms=5",
                 "-X", "batch.size=1048576", "-X", "queue.buffering.max.messages=1000000", str(lines)],
                env=env)  # fmt: skip
        out.append(phase("kcli", f"{size / GIB:.1f} GiB produce", total, size, started, before, pid))
        out[-1]["peak_rss_MiB"] = round(peak[0] / MIB, 1)
        before, started = cpu_rss(pid), time.perf_counter()
        consumed = run(
            ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
             "-X", "fetch.max.bytes=52428800", "-f", "%o\n"],
            env=env, capture=True,
        ).count(b"\n")  # fmt: skip
        out.append(phase("kcli", f"{size / GIB:.1f} GiB consume", consumed, size, started, before, pid))
        out[-1]["peak_rss_MiB"] = round(peak[0] / MIB, 1)
        out[-1]["VmHWM_MiB"] = round(vm_hwm(pid) / MIB, 1)
    finally:
        stop.set()
        sampler.join()
        admin.delete_topics([topic])[topic].result(60)
    for line in out:
        print(json.dumps(line), flush=True)
    return out


def phase(name: str, label: str, messages: int, size: int, started: float, before: tuple, pid: int) -> dict:
    elapsed = time.perf_counter() - started
    after = cpu_rss(pid)
    cpu = after[0] - before[0]
    return {
        "target": name, "phase": label, "messages": messages, "seconds": round(elapsed, 3),
        "msgs_s": round(messages / elapsed), "MiB_s": round(size / elapsed / MIB, 1),
        "broker_cpu_s": round(cpu, 2), "cpu_s_per_GiB": round(cpu / (size / GIB), 2),
        "rss_MiB": round(after[1] / MIB, 1),
    }  # fmt: skip


def print_table(results: list[dict]) -> None:
    groups: dict[tuple[str, str], list[dict]] = {}
    for line in results:
        groups.setdefault((line["phase"], line["target"]), []).append(line)
    print("\n| phase | target | runs | msg/s | MiB/s | broker CPU s/GiB | p99 ms | RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for (label, target), lines in sorted(groups.items()):
        good = [x for x in lines if not x.get("error")] or lines

        def median(key: str, good: list[dict] = good) -> str:
            values = [x[key] for x in good if x.get(key) is not None]
            return f"{statistics.median(values):g}" if values else "-"

        rss = max((x.get("peak_rss_MiB") or x.get("rss_MiB") or 0) for x in good)
        errors = sum(1 for x in lines if x.get("error"))
        print(
            f"| {label} | {target} | {len(lines)}{f' ({errors} failed)' if errors else ''} | {median('msgs_s')} "
            f"| {median('MiB_s')} | {median('cpu_s_per_GiB')} | {median('p99_ms')} | {rss:g} |"
        )


# --- helpers -------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    return admin


def cpu_rss(pid: int) -> tuple[float, int]:
    """(user + system CPU seconds, RSS bytes) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[21]) * os.sysconf(
        "SC_PAGE_SIZE"
    )


def vm_hwm(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def reachable(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    except OSError:
        return False


def run(command: list[str], env: dict | None = None, capture: bool = False, check: bool = True) -> bytes:
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            stderr=subprocess.PIPE, timeout=900)  # fmt: skip
    if check and result.returncode != 0:
        raise SystemExit(
            f"{' '.join(command[:4])} ... failed ({result.returncode}): {result.stderr.decode()[-2000:]}"
        )
    return result.stdout or b""


def log(message: str) -> None:
    print(f"[bench_broker] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
