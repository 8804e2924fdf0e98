"""Quota accuracy over time: a producer, then a consumer, trying 3x their byte-rate quota.

    python tests/bench/bench_quota.py [--quota 1000000] [--seconds 44] [--windows 11]
        [--client producer|consumer|both] [--batch-size N] [--bootstrap HOST:PORT]

It starts its own `kcli broker start` (quota.window.num as given, 1 s windows: Kafka's defaults), or
uses the broker at --bootstrap (Apache Kafka started with `python -m tests.apache_kafka start`, to
compare on the same machine), sets producer_byte_rate and consumer_byte_rate on the client id
`bench-throttled`, and for --seconds lets a confluent-kafka producer offer 3x the quota in 10 kB
records, then a consumer read a log holding 3x the quota per second of the run. It prints, per second
since the first acknowledged (or received) record, the bytes of that second and their ratio to the
quota, then the ratio over the first 20 s, over consecutive quota windows, over every quota window
and every 20 s span sliding by a second, and over the whole run.

Kafka's Rate lets a client's first windows - 1 seconds' worth through at once, and a client that
pushes at 3x then bursts again each time the samples of an earlier burst expire, so single seconds
swing between 0 and 3x. How close a span lands to the quota depends on the request size: a request is
recorded whole before the quota is checked, so one librdkafka batch (batch.size 1,000,000 by default,
filled while the connection is muted) is a whole second of a 1 MB/s quota. --batch-size 16384 is the
Java producer's default.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kcli.client import KafkaClient  # noqa: E402
from kcli.protocol.messages import nested_type  # noqa: E402

RECORD = 10_000
CLIENT_ID = "bench-throttled"
SPAN = 20
"""The issue's measure: the rate over 20 s."""


async def set_quotas(bootstrap: str, quota: int) -> None:
    async with await KafkaClient.connect(bootstrap) as client:
        cls = client.request_type(49)
        ops = tuple(
            nested_type(cls, "OpData")(key=key, value=float(quota), remove=False)
            for key in ("producer_byte_rate", "consumer_byte_rate")
        )
        entry = nested_type(cls, "EntryData")(
            entity=(nested_type(cls, "EntityData")(entity_type="client-id", entity_name=CLIENT_ID),),
            ops=ops,
        )
        response = await client.send(cls(entries=(entry,), validate_only=False))
        assert response.entries[0].error_code == 0, response


def start_broker(workdir: Path, windows: int) -> tuple[subprocess.Popen[bytes], str]:
    log = open(workdir / "broker.log", "wb")
    broker = subprocess.Popen(
        [sys.executable, "-m", "kcli", "broker", "start", "--listen", "127.0.0.1:0", "--data-dir",
         str(workdir / "data"), "--override", f"quota.window.num={windows}"],
        stdout=log, stderr=log, cwd=ROOT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"(127\.0\.0\.1:\d+)", (workdir / "broker.log").read_text(errors="replace"))
        if match:
            return broker, match.group(1)
        time.sleep(0.1)
    broker.terminate()
    sys.exit("the broker did not start: " + (workdir / "broker.log").read_text(errors="replace"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quota", type=int, default=1_000_000, help="bytes/s, both quotas")
    parser.add_argument("--seconds", type=float, default=44.0)
    parser.add_argument("--windows", type=int, default=11, help="quota.window.num of the broker started")
    parser.add_argument("--client", choices=("producer", "consumer", "both"), default="both")
    parser.add_argument("--batch-size", type=int, default=None, help="the producer's batch.size")
    parser.add_argument("--bootstrap", default=None, help="measure this broker instead of starting one")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-quota-"))
    broker = None
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker, bootstrap = start_broker(workdir, args.windows)
        suffix = str(int(time.time()))
        topics = {"producer": f"quota-bench-p-{suffix}", "consumer": f"quota-bench-c-{suffix}"}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics.values()]).values():
            future.result()
        del admin  # no reconnect attempts once the broker stops
        asyncio.run(set_quotas(bootstrap, args.quota))
        time.sleep(1)  # the quota reaches the broker's image
        where = f"against {args.bootstrap}" if args.bootstrap else f"kcli, quota.window.num {args.windows}"
        if args.client in ("producer", "both"):
            events = produce(bootstrap, topics["producer"], args.quota, args.seconds, args.batch_size)
            report(f"producer ({where}, batch.size {args.batch_size or 'default'})", events, args)
        if args.client in ("consumer", "both"):
            events = consume(bootstrap, topics["consumer"], args.quota, args.seconds)
            report(f"consumer ({where})", events, args)
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def produce(
    bootstrap: str, topic: str, quota: int, seconds: float, batch_size: int | None
) -> list[tuple[float, int]]:
    """Offer 3x the quota for `seconds`; (time, bytes) of each acknowledged record."""
    config = {"bootstrap.servers": bootstrap, "client.id": CLIENT_ID, "linger.ms": 5, "acks": 1}
    if batch_size:
        config["batch.size"] = batch_size
    producer = Producer(config)
    acked: list[tuple[float, int]] = []
    payload = b"x" * RECORD

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append((time.monotonic(), RECORD))

    start, offered = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        while offered < 3 * quota * (time.monotonic() - start):
            try:
                producer.produce(topic, payload, callback=delivered)
            except BufferError:
                break
            offered += RECORD
        producer.poll(0.005)
    producer.purge()  # what waits in the client is not part of the run
    producer.flush(60)
    return acked


def consume(bootstrap: str, topic: str, quota: int, seconds: float) -> list[tuple[float, int]]:
    """Read a log holding 3x the quota per second of the run; (time, bytes) of each record received."""
    filler = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1, "client.id": "bench-filler"}
    )
    payload = b"y" * RECORD
    for _ in range(int(3 * quota * (seconds + 2)) // RECORD):
        while True:
            try:
                filler.produce(topic, payload)
                break
            except BufferError:
                filler.poll(0.05)
    assert filler.flush(120) == 0, "the log was not filled"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-quota-{topic}",
            "client.id": CLIENT_ID,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received: list[tuple[float, int]] = []
    deadline = time.monotonic() + seconds + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                received.append((time.monotonic(), len(msg.value())))
            if received and time.monotonic() - received[0][0] > seconds:
                break
    finally:
        consumer.close()
    return received


def report(title: str, events: list[tuple[float, int]], args: argparse.Namespace) -> None:
    quota, windows = args.quota, args.windows
    if not events:
        print(f"{title}: nothing got through")
        return
    first = events[0][0]
    per_second = [0] * int(args.seconds)
    for t, n in events:
        index = int(t - first)
        if index < len(per_second):
            per_second[index] += n
    print(f"{title}: quota {quota} B/s, offered {3 * quota} B/s")
    print("second  bytes/s    / quota")
    for index, value in enumerate(per_second):
        print(f"{index:6d}  {value:9d}  {value / quota:6.2f}")
    if len(per_second) >= SPAN:
        print(f"first {SPAN} s: {sum(per_second[:SPAN]) / SPAN / quota:.3f} x quota")
    for begin in range(0, len(per_second) - windows + 1, windows):
        window = sum(per_second[begin : begin + windows])
        print(f"window {begin:2d}-{begin + windows:2d} s: {window / windows / quota:.3f} x quota")
    for span in sorted({windows, SPAN}):
        sliding = sorted(
            sum(per_second[begin : begin + span]) / span / quota
            for begin in range(len(per_second) - span + 1)
        )
        if sliding:
            print(
                f"every {span} s span (sliding by 1 s, {len(sliding)} of them): min {sliding[0]:.3f}, "
                f"median {sliding[len(sliding) // 2]:.3f}, max {sliding[-1]:.3f} x quota"
            )
    print(f"whole run ({len(per_second)} s): {sum(per_second) / len(per_second) / quota:.3f} x quota")
    print()


if __name__ == "__main__":
    main()
