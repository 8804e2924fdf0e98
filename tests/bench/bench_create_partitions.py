"""How long one CreateTopics of many partitions holds the broker's other clients.

    python tests/bench/bench_create_partitions.py [--partitions 4995] [--per-topic 999] [--runs 1]

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
    args = parser.parse_args()
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="kcli-bench-create-") as root:
            broker = start_broker(Path(root) / "broker")
            try:
                figures, elapsed = create_partitions(
                    broker, "bench-", args.partitions, per_topic=args.per_topic
                )
                deleted, delete_s = delete_topics(broker, "bench-")
            finally:
                started = time.monotonic()
                status = broker.stop(timeout=600)
                stop_s = time.monotonic() - started
        rounded = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
        print(
            json.dumps(
                {
                    "run": run,
                    "partitions": args.partitions,
                    "created_s": round(elapsed, 3),
                    **rounded,
                    "deleted_s": round(delete_s, 3),
                    "delete_max_s": round(deleted["max_s"], 4),
                    "delete_p99_s": round(deleted["p99_s"], 4),
                    "stop_s": round(stop_s, 2),
                    "exit": status,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
