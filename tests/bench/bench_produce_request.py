"""Benchmark the broker's cost per Produce request, in-process: the `SocketServer`'s request handler with no sockets.

    python tests/bench/bench_produce_request.py [--requests 5000] [--batch-kib 16] [--runs 5] [--profile]

A broker is started in this process on a temporary log dir; an idempotent producer id is taken, and
`--requests` Produce v9 frames (acks=all, one partition, one batch of 1 KiB records each, sequences in
order) are built up front. The timed loop hands each frame to the broker's dispatch as the connection
loop would: header parsing, kio decoding, the produce handler, validation, producer state, the segment
write and index entries, and the encoded answer. What is left out is the network and asyncio's stream
machinery; `tests/bench/bench_replay.py` prints the whole cost ("broker CPU per batch"), so the difference
between the two is what the sockets and the event loop cost. `--profile` prints cProfile's top entries.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import os
import pstats
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from formats.records import RecordSpec, build_batch  # noqa: E402
from kcli.broker.apis.context import ConnectionInfo  # noqa: E402
from kcli.broker.server import Broker  # noqa: E402
from kcli.client import KafkaClient  # noqa: E402
from kcli.config import BrokerConfig  # noqa: E402
from kcli.protocol.messages import build, request_type  # noqa: E402

RECORD_BYTES = 1024
PRODUCE_VERSION = 9


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kcli-bench-produce-") as data_dir:
        config = BrokerConfig.load(settings={"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data_dir})
        broker = Broker(config)
        host, port = await broker.start()
        try:
            client = await KafkaClient.connect(f"{host}:{port}")
            try:
                frames = await prepare(client, args)
            finally:
                await client.close()
            connection = ConnectionInfo("bench", "bench")
            handle = broker.network.handle
            assert handle is not None
            per_request = []
            user_per_request = []
            for run_index in range(args.runs):
                chunk = frames[run_index * args.requests : (run_index + 1) * args.requests]
                profile = cProfile.Profile() if args.profile and run_index == args.runs - 1 else None
                started = time.process_time()
                user_started = resource.getrusage(resource.RUSAGE_SELF).ru_utime
                if profile:
                    profile.enable()
                for frame in chunk:
                    await handle(connection, frame)
                if profile:
                    profile.disable()
                per_request.append((time.process_time() - started) / len(chunk) * 1e6)
                user_per_request.append(
                    (resource.getrusage(resource.RUSAGE_SELF).ru_utime - user_started) / len(chunk) * 1e6
                )
                print(
                    f"run {run_index + 1}: {per_request[-1]:.1f} us CPU per request "
                    f"({user_per_request[-1]:.1f} us of it in user space)"
                )
                if profile:
                    pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            batch = round(len(frames[0]) / 1024)
            print(
                f"median: {statistics.median(per_request):.1f} us CPU per {batch} KiB Produce request, "
                f"{statistics.median(user_per_request):.1f} us in user space (the rest is the kernel: the write)"
            )
        finally:
            broker.request_stop()
            await broker.shutdown()


async def prepare(client: KafkaClient, args: argparse.Namespace) -> list[bytes]:
    create = request_type(19, 5)
    topics = sys.modules[create.__module__]
    topic = topics.CreatableTopic(
        name="bench", num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    await client.send(create(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False))
    init = await client.send(
        build(
            request_type(22, 4),
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
    )
    per_batch = max(1, (args.batch_kib << 10) // (RECORD_BYTES + 24))
    value = os.urandom(RECORD_BYTES - 16)
    produce = request_type(0, PRODUCE_VERSION)
    module = sys.modules[produce.__module__]
    frames = []
    for n in range(args.requests * args.runs):
        specs = [RecordSpec(1_700_000_000_000 + i, b"key-%012d" % i, value) for i in range(per_batch)]
        records = build_batch(
            specs,
            producer_id=init.producer_id,
            producer_epoch=init.producer_epoch,
            base_sequence=n * per_batch,
        )
        data = module.PartitionProduceData(index=0, records=records)
        request = produce(
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(module.TopicProduceData(name="bench", partition_data=(data,)),),
        )
        frames.append(bytes(client._encode(request, n + 1))[4:])  # the size prefix is the reader's
    return frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests per run")
    parser.add_argument("--batch-kib", type=int, default=16)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args))
    print(f"reproduce: python tests/bench/bench_produce_request.py --requests {args.requests} "
          f"--batch-kib {args.batch_kib} --runs {args.runs}")  # fmt: skip


if __name__ == "__main__":
    main()
