"""How long one CreateTopics of many partitions holds the broker's other clients.

    python tests/bench/bench_create_partitions.py [--partitions 4995] [--per-topic 999] [--runs 1] [--no-delete]

A real `kcli broker start` on loopback; one client sends ApiVersions every 10 ms (a round trip each)
while another sends one CreateTopics of `--partitions` partitions (topics of `--per-topic`; 10 topics
of 999 are Kafka's bound of 10,000 records in one operation; each partition holds 3 open files, so
9,990 partitions need a `ulimit -n` above 30,000: the default of 4,995 fits a limit of 20,000). Prints, per run, the
seconds until every partition directory exists, the ApiVersions round trips (max and p99 stall,
median); then the same while one DeleteTopics removes them all; and how long the broker then takes to
stop (SIGTERM, flushing every log). Figures only, no asserts: run it in two checkouts to compare them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import start_broker  # noqa: E402
from test_create_partitions_stall import create_partitions, delete_topics  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4995)
    parser.add_argument("--per-topic", type=int, default=999)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-delete", action="store_true", help="measure the creation only")
    args = parser.parse_args()
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="kcli-bench-create-") as root:
            broker = start_broker(Path(root) / "broker")
            try:
                figures, elapsed = create_partitions(
                    broker, "bench-", args.partitions, per_topic=args.per_topic
                )
                report(run, "create", args.partitions, elapsed, figures)
                if not args.no_delete:
                    figures, elapsed = delete_topics(broker, "bench-")
                    report(run, "delete", args.partitions, elapsed, figures)
            finally:
                started = time.monotonic()
                status = broker.stop(timeout=600)
                print(
                    json.dumps({"run": run, "stop_s": round(time.monotonic() - started, 2), "exit": status})
                )


def report(run: int, step: str, partitions: int, elapsed: float, figures: dict[str, float]) -> None:
    """One JSON line: the step's seconds until done and the ApiVersions round trips meanwhile."""
    rounded = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
    line = {"run": run, "step": step, "partitions": partitions, "seconds": round(elapsed, 3), **rounded}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
