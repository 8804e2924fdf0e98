"""What librdkafka's fetch.queue.backoff.ms does to a Python consumer that is slower than the broker.

    python tests/bench/bench_consumer_backoff.py [--messages 1000000] [--runs 2] [--backoffs default,10]
                                                 [--work json|none]

librdkafka prefetches into a local queue and, once that queue holds `queued.min.messages` (100,000) or
`queued.max.messages.kbytes` (64 MiB), stops fetching the partition for `fetch.queue.backoff.ms` (1000 ms
by default; a fixed 1 s before librdkafka 2.2, so Debian's kcat with 2.0.2 cannot change it). A broker
that answers a 1 MiB fetch in a few ms fills the queue quickly; a consumer loop that does a little work
per message then drains it in well under a second and waits out the rest of the backoff in poll().
This prints, per setting: messages/s, and the pauses (gaps of >= 100 ms between two messages) the loop
saw. Apache Kafka would do the same; the figure is the client's, not the broker's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from conftest import start_broker  # noqa: E402

PAUSE = 0.1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2, help="alternating runs per setting")
    parser.add_argument(
        "--backoffs",
        default="default,10",
        help="fetch.queue.backoff.ms values to compare ('default' = unset)",
    )
    parser.add_argument(
        "--work",
        choices=("json", "none"),
        default="json",
        help="per message: parse its JSON value, or nothing",
    )
    args = parser.parse_args()
    backoffs = [None if b == "default" else int(b) for b in args.backoffs.split(",")]
    with tempfile.TemporaryDirectory(prefix="kcli-bench-backoff-") as tmp:
        broker = start_broker(Path(tmp))
        try:
            topic = f"backoff-{uuid.uuid4().hex[:6]}"
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            produce(broker.bootstrap, topic, args.messages)
            results: dict[int | None, list[dict]] = {b: [] for b in backoffs}
            for _ in range(args.runs):
                for backoff in backoffs:
                    results[backoff].append(
                        consume(broker.bootstrap, topic, args.messages, backoff, args.work)
                    )
        finally:
            broker.stop()
    for backoff, runs in results.items():
        label = "default (1000)" if backoff is None else str(backoff)
        rates = ", ".join(f"{r['rate'] / 1000:.0f}k" for r in runs)
        pauses = ", ".join(
            f"{r['pauses']} ({r['paused']:.1f} s, max {r['max_pause'] * 1000:.0f} ms)" for r in runs
        )
        print(
            f"fetch.queue.backoff.ms {label}: median {statistics.median(r['rate'] for r in runs) / 1000:.0f}k msg/s "
            f"(runs: {rates}); pauses >= {PAUSE * 1000:.0f} ms: {pauses}"
        )
    print(
        f"reproduce: python {Path(__file__).relative_to(REPO)} --messages {args.messages} --runs {args.runs} "
        f"--backoffs {args.backoffs} --work {args.work}"
    )


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000})
    for i in range(count):
        value = orjson.dumps({"id": i, "user": f"u{i % 1000}", "amount": i % 997, "note": "x" * 40})
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def consume(bootstrap: str, topic: str, count: int, backoff: int | None, work: str) -> dict:
    """A plain poll() loop; with work "json" it parses each value and adds up a field, a little work per message."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
    }
    if backoff is not None:
        config["fetch.queue.backoff.ms"] = backoff
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    total = seen = pauses = 0
    paused = max_pause = 0.0
    first = last = None
    try:
        while seen < count:
            message = consumer.poll(5.0)
            if message is None or message.error():
                continue
            now = time.perf_counter()
            if last is not None and now - last >= PAUSE:
                pauses += 1
                paused += now - last
                max_pause = max(max_pause, now - last)
            first = first or now
            last = now
            if work == "json":
                total += orjson.loads(message.value())["amount"]
            seen += 1
    finally:
        consumer.close()
    return {"rate": seen / (last - first), "pauses": pauses, "paused": paused, "max_pause": max_pause}


if __name__ == "__main__":
    main()
