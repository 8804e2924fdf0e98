"""What the test suite's tool host saves: Kafka's command-line tools against one kcli broker, each in a JVM
of its own (as kafka-run-class.sh runs them) and one after another in tests/java/ToolHost.java's JVM.

    python tests/bench/bench_tool_host.py [--rounds 3]

Each round runs TopicCommand --list, ConfigCommand --describe of a topic, ConsumerGroupCommand --list and
FeatureCommand describe once. Printed for each way: the runs, their wall time, and the CPU seconds of the
JVMs (the own JVMs' from this process's reaped children, the host's from /proc before it is stopped).
Needs java, javac and the pinned Kafka jars (`python -m tests.apache_kafka resolve`). Loopback only; the
broker and the JVMs it starts are stopped by PID.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import apache_kafka  # noqa: E402
from conftest import start_broker, stop_cleanly  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcli-bench-tool-host-") as tmp:
        workdir = Path(tmp)
        broker = start_broker(workdir / "broker")
        try:
            b = broker.bootstrap
            calls = [
                (apache_kafka.TOPIC_COMMAND, ["--bootstrap-server", b, "--create", "--topic", "bench"]),
            ]
            round_calls = [
                (apache_kafka.TOPIC_COMMAND, ["--bootstrap-server", b, "--list"]),
                (apache_kafka.CONFIG_COMMAND, ["--bootstrap-server", b, "--describe", "--entity-type", "topics",
                                               "--entity-name", "bench"]),
                (apache_kafka.CONSUMER_GROUP_COMMAND, ["--bootstrap-server", b, "--list"]),
                (apache_kafka.FEATURE_COMMAND, ["--bootstrap-server", b, "describe"]),
            ]  # fmt: skip
            os.environ["KCLI_TOOL_HOST"] = "0"  # run_tool: each tool in a JVM of its own
            host = apache_kafka.ToolHost(workdir / "host")
            for way in ("own JVMs", "tool host"):
                cpu_before = children_cpu()
                began = time.monotonic()
                for main_class, tool_args in [*calls, *round_calls * args.rounds]:
                    if way == "own JVMs":
                        done = apache_kafka.run_tool(main_class, tool_args, workdir=workdir / "tools")
                    else:
                        done = host.run(main_class, tool_args, stdin=None, timeout=120)
                    if done.returncode != 0 and "already exists" not in done.stdout + done.stderr:
                        raise SystemExit(f"{main_class} exited {done.returncode}: {done.stderr.strip()}")
                took = time.monotonic() - began
                cpu = children_cpu() - cpu_before
                if host.pid is not None:  # read before it is stopped (and reaped into the children's)
                    cpu += process_cpu(host.pid)
                    host.close()
                runs = 1 + len(round_calls) * args.rounds
                print(f"{way:10s} {runs:3d} runs: {took:6.2f} s, {cpu:6.2f} CPU-s ({cpu / runs:.3f} a run)")
                calls = []  # the topic exists now
        finally:
            stop_cleanly(broker)


if __name__ == "__main__":
    main()
