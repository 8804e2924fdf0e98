"""Quota accuracy over time: a producer offering 3x its producer_byte_rate against `kcli broker start`.

    python tests/bench/bench_quota.py [--quota 1000000] [--seconds 30] [--windows 11]

It starts its own broker (quota.window.num as given, 1 s windows: Kafka's defaults), sets the quota on
the producer's client id, and offers 3x the quota in 10 kB records for --seconds. It prints, for each
second since the first acknowledgement, the bytes acknowledged in that second and their ratio to the
quota, then the ratio over consecutive quota windows (windows x 1 s), over every window sliding by a
second, and over the whole run. Kafka's rate is measured over the window, so a single second swings (a
burst of windows - 1 seconds' worth at the start, then pauses, and bursts again as old samples
expire), while a whole window holds the quota give or take the requests in flight when the throttle
starts and the one sample by which Kafka's window may overlap its span.
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

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kcli.client import KafkaClient  # noqa: E402
from kcli.protocol.messages import nested_type  # noqa: E402

RECORD = 10_000


async def set_quota(bootstrap: str, client_id: str, quota: int) -> None:
    async with await KafkaClient.connect(bootstrap) as client:
        cls = client.request_type(49)
        entry = nested_type(cls, "EntryData")(
            entity=(nested_type(cls, "EntityData")(entity_type="client-id", entity_name=client_id),),
            ops=(nested_type(cls, "OpData")(key="producer_byte_rate", value=float(quota), remove=False),),
        )
        response = await client.send(cls(entries=(entry,), validate_only=False))
        assert response.entries[0].error_code == 0, response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quota", type=int, default=1_000_000, help="producer_byte_rate, bytes/s")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--windows", type=int, default=11, help="quota.window.num")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-quota-"))
    log = open(workdir / "broker.log", "wb")
    broker = subprocess.Popen(
        [sys.executable, "-m", "kcli", "broker", "start", "--listen", "127.0.0.1:0", "--data-dir",
         str(workdir / "data"), "--override", f"quota.window.num={args.windows}"],
        stdout=log, stderr=log, cwd=ROOT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        bootstrap = None
        while bootstrap is None and time.monotonic() < deadline:
            match = re.search(r"(127\.0\.0\.1:\d+)", (workdir / "broker.log").read_text(errors="replace"))
            bootstrap = match.group(1) if match else None
            time.sleep(0.1)
        if bootstrap is None:
            sys.exit("the broker did not start: " + (workdir / "broker.log").read_text(errors="replace"))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("quota-bench", 1, 1)])["quota-bench"].result()
        asyncio.run(set_quota(bootstrap, "bench-throttled", args.quota))
        run(bootstrap, args.quota, args.seconds, args.windows)
    finally:
        broker.terminate()
        broker.wait(30)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def run(bootstrap: str, quota: int, seconds: float, windows: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": "bench-throttled", "linger.ms": 5, "acks": 1}
    )
    acked: list[tuple[float, int]] = []
    payload = b"x" * RECORD

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append((time.monotonic(), RECORD))

    start, offered = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        while offered < 3 * quota * (time.monotonic() - start):
            try:
                producer.produce("quota-bench", payload, callback=delivered)
            except BufferError:
                break
            offered += RECORD
        producer.poll(0.005)
    producer.flush(60)
    first = acked[0][0]
    per_second = [0] * int(seconds)
    for t, n in acked:
        index = int(t - first)
        if index < len(per_second):
            per_second[index] += n
    print(f"quota {quota} B/s, offered {3 * quota} B/s, quota.window.num {windows} x 1 s")
    print("second  bytes/s    / quota")
    for index, value in enumerate(per_second):
        print(f"{index:6d}  {value:9d}  {value / quota:6.2f}")
    for begin in range(0, len(per_second) - windows + 1, windows):
        window = sum(per_second[begin : begin + windows])
        print(f"window {begin:2d}-{begin + windows:2d} s: {window / windows / quota:.3f} x quota")
    sliding = [
        sum(per_second[begin : begin + windows]) / windows / quota
        for begin in range(len(per_second) - windows + 1)
    ]
    if sliding:
        ordered = sorted(sliding)
        print(
            f"every {windows} s window (sliding by 1 s, {len(sliding)} of them): min {ordered[0]:.3f}, "
            f"median {ordered[len(ordered) // 2]:.3f}, max {ordered[-1]:.3f} x quota"
        )
    whole = sum(per_second)
    print(f"whole run ({len(per_second)} s): {whole / len(per_second) / quota:.3f} x quota")


if __name__ == "__main__":
    main()
