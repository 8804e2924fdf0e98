"""What security costs a kcli broker: SASL_SSL against PLAINTEXT in one run, and the machine's TLS floor.

    python tests/bench/bench_security.py [--mib 256] [--connections 1000] [--concurrency 32]
    python tests/bench/bench_security.py --quick     # 32 MiB and 200 connections, a CI-size run
    python tests/bench/bench_security.py --burst-only [--connections N] [--concurrency C] [--kafka]

One kcli node serves a PLAINTEXT and a SASL_SSL (SCRAM-SHA-512, `admin` bootstrapped by `storage format
--add-scram`, certificates from kcli.security.certs) listener. With confluent-kafka and 1 KiB records it
produces `--mib` into a topic over each listener (acks=1), then consumes each back from offset 0 over the
same listener, and prints MiB/s and the broker's CPU seconds (user + system, /proc) per GiB for each.

The floor is what this machine does with TLS and no Kafka at all: a bare asyncio TLS server (its own
process, as the broker is) sends the SASL_SSL topic's segment file as kcli sends a fetched file region
under TLS (os.pread in blocks of kcli's size, written through the TLS transport, waiting for it to
drain), and a TLS client reads every byte. Goals: consume over TLS >= 0.8x that floor, produce over TLS
>= 0.7x kcli's own PLAINTEXT produce.

Then `--connections` new SCRAM-SHA-512 connections in a burst (`--concurrency` opening at once, after a
warm-up burst of a tenth as many), each timed from connect to authenticated (TCP + TLS + SaslHandshake +
two SaslAuthenticate): p50/p99/max, failures, CPU per connection, and the broker's RSS before, at its
peak and after; with `--kafka` the same burst against one Apache Kafka node secured the same way. Goal: p99 < 50 ms, no failure. The machine
is shared: the figures are indicative.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import apache_kafka  # noqa: E402
from conftest import KCLI, free_port_range, kcli_env, start_with_config  # noqa: E402

RECORD = 1024
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process (the client: confluent-kafka's threads included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class RssPeak:
    """The peak RSS of `pid` while the block runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()

    def __enter__(self) -> RssPeak:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss(self.pid))

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def librdkafka_config(listener: str, bootstrap: str, security: apache_kafka.Security) -> dict[str, str]:
    """confluent-kafka's names for the same client settings as security.client_properties."""
    config = {"bootstrap.servers": bootstrap}
    if listener == "SASL_SSL":
        config |= {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": apache_kafka.ADMIN_USER,
            "sasl.password": apache_kafka.ADMIN_PASSWORD,
            "ssl.ca.location": str(security.pki.ca),
        }
    return config


def produce(config: dict[str, str], topic: str, count: int) -> float:
    """Seconds to produce `count` 1 KiB records, acks=1, all acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **config,
            "acks": "1",
            "linger.ms": "5",
            "batch.size": str(1 << 20),
            "queue.buffering.max.kbytes": "262144",
        }
    )
    value = os.urandom(RECORD)
    failed = []
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    seconds = time.perf_counter() - started
    if failed:
        raise SystemExit(f"{len(failed)} records failed: {failed[0]}")
    return seconds


def consume(config: dict[str, str], topic: str, count: int) -> float:
    """Seconds to read `count` records from offset 0 (no group: assigned)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {**config, "group.id": "bench", "enable.auto.commit": "false", "fetch.max.bytes": str(50 << 20),
         "max.partition.fetch.bytes": str(16 << 20), "queued.min.messages": "200000"}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = 0
    started = time.perf_counter()
    deadline = started + 300
    while seen < count and time.perf_counter() < deadline:
        seen += sum(1 for m in consumer.consume(10000, 1.0) if m.error() is None)
    seconds = time.perf_counter() - started
    consumer.close()
    if seen < count:
        raise SystemExit(f"consumed {seen} of {count} records from {topic}")
    return seconds


def consume_kcat(config: dict[str, str], topic: str, count: int) -> tuple[float, float]:
    """Seconds for kcat (librdkafka in C, records written to /dev/null) to read `count` records from
    offset 0 and exit at the end, and its CPU seconds: a consumer that is not the limit, unlike
    confluent-kafka's Python loop."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        return float("nan"), float("nan")
    args = [kcat, "-C", "-q", "-e", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(count), "-f", "%o\\n"]  # fmt: skip
    for key, value in {**config, "fetch.max.bytes": str(50 << 20), "max.partition.fetch.bytes": str(16 << 20),
                       "queued.min.messages": "200000", "fetch.wait.max.ms": "100"}.items():  # fmt: skip
        args += ["-b", value] if key == "bootstrap.servers" else ["-X", f"{key}={value}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, timeout=300)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = done.stdout.count(b"\n")
    if done.returncode != 0 or lines < count:
        raise SystemExit(f"kcat read {lines} of {count} records from {topic}: {done.stderr.decode()[-300:]}")
    return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


async def consume_raw(address: str, security: object, topic: str, count: int) -> tuple[float, int]:
    """Seconds for kcli's own KafkaClient to Fetch `count` records from offset 0 (64 MiB answers, 32 MiB
    per partition) without decoding them (the next offset from the last batch header), and the record
    bytes received: a consumer about as cheap as the floor's TLS client."""
    from kcli.client import KafkaClient
    from kcli.protocol.messages import build, nested_type

    client = await KafkaClient.connect(address, security=security)  # type: ignore[arg-type]
    cls = client.request_type(1, highest=12)
    topic_cls, partition_cls = nested_type(cls, "FetchTopic"), nested_type(cls, "FetchPartition")
    offset = received = 0
    started = time.perf_counter()
    try:
        while offset < count:
            partition = build(partition_cls, partition=0, current_leader_epoch=-1, fetch_offset=offset,
                              last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=32 << 20)  # fmt: skip
            request = build(cls, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500),
                            min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                            topics=(topic_cls(topic=topic, partitions=(partition,)),), forgotten_topics_data=(),
                            rack_id="")  # fmt: skip
            response = await client.send(request)
            records = response.responses[0].partitions[0].records or b""
            received += len(records)
            position = 0
            while position + 27 <= len(records):  # batch: base offset, length, ..., last offset delta at 23
                length = int.from_bytes(records[position + 8 : position + 12], "big")
                if position + 12 + length > len(records):
                    break  # a partial batch at the end of the answer
                base = int.from_bytes(records[position : position + 8], "big")
                offset = base + int.from_bytes(records[position + 23 : position + 27], "big") + 1
                position += 12 + length
    finally:
        await client.close()
    return time.perf_counter() - started, received


# --- the floor: TLS with no Kafka ------------------------------------------------------------------


def serve_file(path: Path, port: int, cert: Path, key: Path) -> None:
    """A bare asyncio TLS server: to each client, `path`'s bytes as kcli sends a file region under TLS."""
    from kcli.broker.connection import _COPY_BLOCK

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    class Sender(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.drained: asyncio.Future[None] | None = None
            self.paused = False
            asyncio.get_running_loop().create_task(self.send())

        def pause_writing(self) -> None:
            self.paused = True

        def resume_writing(self) -> None:
            self.paused = False
            if self.drained is not None and not self.drained.done():
                self.drained.set_result(None)

        async def send(self) -> None:
            with open(path, "rb") as file:
                fd, offset, size = file.fileno(), 0, os.fstat(file.fileno()).st_size
                while offset < size:
                    if self.paused:
                        self.drained = asyncio.get_running_loop().create_future()
                        await self.drained
                        continue
                    block = os.pread(fd, min(_COPY_BLOCK, size - offset), offset)
                    self.transport.write(block)  # type: ignore[attr-defined]
                    offset += len(block)
            self.transport.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Sender, "127.0.0.1", port, ssl=context)
        print("ready", flush=True)
        await server.serve_forever()

    asyncio.run(main())


def floor(segment: Path, security: apache_kafka.Security) -> tuple[float, float, float]:
    """(MiB/s, server and client CPU seconds per GiB) of the bare TLS server sending `segment` to a TLS client."""
    port = free_port_range(1)
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve-file", str(segment), str(port),
         str(security.pki.node["chain"]), str(security.pki.node["key"])],
        stdout=subprocess.PIPE, env=kcli_env(), cwd=REPO,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        context = ssl.create_default_context(cafile=str(security.pki.ca))
        before, client_before = cpu_seconds(server.pid), own_cpu_seconds()
        started = time.perf_counter()
        received = 0
        buffer = bytearray(1 << 20)
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                while n := tls.recv_into(buffer):
                    received += n
        seconds = time.perf_counter() - started
        cpu, client_cpu = cpu_seconds(server.pid) - before, own_cpu_seconds() - client_before
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait()
    assert received == segment.stat().st_size, (received, segment.stat().st_size)
    gib = received / 2**30
    return received / 2**20 / seconds, cpu / gib, client_cpu / gib


# --- the connection burst --------------------------------------------------------------------------


async def burst(
    address: str, properties: Path, connections: int, concurrency: int
) -> tuple[list[float], list[str]]:
    """Handshake seconds of each new authenticated connection, and the failures (one sentence each)."""
    from kcli.client import KafkaClient
    from kcli.security.client_config import load_client_config

    security = load_client_config(properties).security
    gate = asyncio.Semaphore(concurrency)
    times: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        async with gate:
            started = time.perf_counter()
            try:
                client = await KafkaClient.connect(address, security=security, negotiate=False)
            except Exception as exc:  # noqa: BLE001 - a failure is a figure here
                failures.append(f"{type(exc).__name__}: {exc}")
                return
            times.append(time.perf_counter() - started)
            await client.close()

    await asyncio.gather(*(one() for _ in range(connections)))
    return times, failures


def measured_burst(
    address: str, properties: Path, pid: int, connections: int, concurrency: int
) -> dict[str, float | list[str]]:
    """One burst against the server process `pid` at `address`, after a warm-up burst of a tenth of it
    (a JVM's JIT, the broker's first allocations): milliseconds p50/p99/max, seconds, failures, CPU ms
    per connection of the server and of this client, the server's RSS before, at its peak and after."""
    asyncio.run(burst(address, properties, max(1, connections // 10), concurrency))
    rss_before = rss(pid)
    server_cpu, client_cpu = cpu_seconds(pid), own_cpu_seconds()
    with RssPeak(pid) as peak:
        started = time.perf_counter()
        times, failures = asyncio.run(burst(address, properties, connections, concurrency))
        seconds = time.perf_counter() - started
    server_cpu, client_cpu = cpu_seconds(pid) - server_cpu, own_cpu_seconds() - client_cpu
    time.sleep(1)
    ms = [t * 1000 for t in times]
    return {
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms, default=float("nan")),
        "seconds": seconds,
        "failures": failures,
        "server_cpu_ms": server_cpu / connections * 1000,
        "client_cpu_ms": client_cpu / connections * 1000,
        "rss_before_mib": rss_before / 2**20,
        "rss_peak_mib": peak.peak / 2**20,
        "rss_after_mib": rss(pid) / 2**20,
    }


def print_burst(name: str, figures: dict[str, Any], connections: int, concurrency: int) -> None:
    failures = figures["failures"]
    print(
        f"{name} burst: {connections} SCRAM-SHA-512 connections over SASL_SSL, {concurrency} at once, "
        f"{figures['seconds']:.1f} s: p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
        f"max {figures['max_ms']:.1f} ms (goal p99 < 50), failures {len(failures)}"
        + (f" ({failures[0]})" if failures else "")
    )
    print(
        f"       CPU per connection: broker {figures['server_cpu_ms']:.2f} ms, "
        f"client {figures['client_cpu_ms']:.2f} ms"
    )
    print(
        f"       broker RSS: {figures['rss_before_mib']:.0f} MiB before the burst, "
        f"peak {figures['rss_peak_mib']:.0f} MiB, {figures['rss_after_mib']:.0f} MiB after"
    )


def kafka_burst(workdir: Path, connections: int, concurrency: int) -> dict[str, Any]:
    """The same burst against one Apache Kafka node (the pinned version, default JIT) secured as the
    kcli node is: SASL_SSL, SCRAM-SHA-512 with the same admin credential and iterations."""
    cluster = apache_kafka.start_cluster(workdir, 1, free_port_range(2), c1_only=False, security="sasl_ssl")
    try:
        assert cluster.client_properties is not None
        node = cluster.nodes[0]
        return measured_burst(node.bootstrap, cluster.client_properties, node.pid, connections, concurrency)
    finally:
        cluster.stop()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


# --- the run ---------------------------------------------------------------------------------------


def kcli(*args: str) -> str:
    """stdout of `python -m kcli ARGS`, which must succeed (else its one-sentence error ends the run)."""
    done = subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env())
    if done.returncode != 0:
        raise SystemExit(f"kcli {args[0]} {args[1]}: {done.stderr.strip()}")
    return done.stdout


def main() -> None:
    from kcli.security import PLAINTEXT
    from kcli.security.client_config import load_client_config

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=256, help="MiB produced and consumed per listener")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32, help="connections opening at once")
    parser.add_argument("--quick", action="store_true", help="32 MiB and 200 connections")
    parser.add_argument("--burst-only", action="store_true", help="only the burst of new connections")
    parser.add_argument("--kafka", action="store_true", help="the burst against Apache Kafka too")
    parser.add_argument(
        "--serve-file", nargs=4, metavar=("FILE", "PORT", "CERT", "KEY"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve_file:
        file, port, cert, key = args.serve_file
        serve_file(Path(file), int(port), Path(cert), Path(key))
        return
    if args.quick:
        args.mib, args.connections = 32, 200
    count = args.mib * 2**20 // RECORD
    with tempfile.TemporaryDirectory(prefix="kcli-bench-security-") as tmp:
        workdir = Path(tmp)
        security = apache_kafka.make_security("sasl_ssl", workdir)
        plain, secured, controller = (free_port_range(1) for _ in range(3))
        config = workdir / "server.properties"
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secured},"
            f"CONTROLLER://127.0.0.1:{controller}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.num.partitions": "1",
            **security.server_properties(),
        }
        config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        cluster_id = kcli("storage", "random-uuid").strip()
        kcli("storage", "format", "-c", str(config), "-t", cluster_id, *security.add_scram)
        broker = start_with_config(workdir, config)
        results: dict[str, dict[str, float]] = {}
        try:
            pid = broker.pid
            if not args.burst_only:  # throughput: confluent-kafka, kcat, raw Fetch, the floor
                for listener, port in (
                    ("PLAINTEXT", plain),
                    ("SASL_SSL", secured),
                ):  # warm: metadata, offsets topic
                    client = librdkafka_config(listener, f"127.0.0.1:{port}", security)
                    produce(client, f"warm-{listener.lower()}", 1000)
                    consume(client, f"warm-{listener.lower()}", 1000)
                for listener, port in (("PLAINTEXT", plain), ("SASL_SSL", secured)):
                    client = librdkafka_config(listener, f"127.0.0.1:{port}", security)
                    topic = f"bench-{listener.lower()}"
                    gib = count * RECORD / 2**30
                    before, client_before = cpu_seconds(pid), own_cpu_seconds()
                    seconds = produce(client, topic, count)
                    produced, client_produced = cpu_seconds(pid) - before, own_cpu_seconds() - client_before
                    before, client_before = cpu_seconds(pid), own_cpu_seconds()
                    read = consume(client, topic, count)
                    consumed, client_consumed = cpu_seconds(pid) - before, own_cpu_seconds() - client_before
                    before = cpu_seconds(pid)
                    kcat_read, kcat_cpu = consume_kcat(client, topic, count)
                    kcat_consumed = cpu_seconds(pid) - before
                    client_security = (
                        None
                        if listener == "PLAINTEXT"
                        else load_client_config(security.client_properties).security
                    )
                    before, client_before = cpu_seconds(pid), own_cpu_seconds()
                    raw_read, raw_bytes = asyncio.run(
                        consume_raw(f"127.0.0.1:{port}", client_security or PLAINTEXT, topic, count)
                    )
                    raw_consumed, raw_client = cpu_seconds(pid) - before, own_cpu_seconds() - client_before
                    raw_gib = raw_bytes / 2**30
                    results[listener] = {
                        "raw_consume_mib_s": raw_bytes / 2**20 / raw_read,
                        "raw_consume_cpu_s_per_gib": raw_consumed / raw_gib,
                        "raw_client_cpu_s_per_gib": raw_client / raw_gib,
                        "kcat_consume_mib_s": args.mib / kcat_read,
                        "kcat_consume_cpu_s_per_gib": kcat_consumed / gib,
                        "kcat_client_cpu_s_per_gib": kcat_cpu / gib,
                        "produce_mib_s": args.mib / seconds,
                        "produce_cpu_s_per_gib": produced / gib,
                        "consume_mib_s": args.mib / read,
                        "consume_cpu_s_per_gib": consumed / gib,
                        "client_produce_cpu_s_per_gib": client_produced / gib,
                        "client_consume_cpu_s_per_gib": client_consumed / gib,
                    }
                    print(
                        json.dumps(
                            {"listener": listener, **{k: round(v, 2) for k, v in results[listener].items()}}
                        )
                    )
                segments = sorted(
                    (workdir / "data" / "bench-sasl_ssl-0").glob("*.log"), key=lambda p: p.stat().st_size
                )
                floor_mib_s, floor_cpu, floor_client_cpu = floor(segments[-1], security)
                print(json.dumps({"floor": "asyncio TLS server, no Kafka", "mib_s": round(floor_mib_s, 1),
                                  "server_cpu_s_per_gib": round(floor_cpu, 2),
                        "client_cpu_s_per_gib": round(floor_client_cpu, 2),
                                  "file_mib": round(segments[-1].stat().st_size / 2**20, 1)}))  # fmt: skip
            kcli_figures = measured_burst(
                f"127.0.0.1:{secured}", security.client_properties, pid, args.connections, args.concurrency
            )
        finally:
            broker.stop()
        kafka_figures = (
            kafka_burst(workdir / "kafka", args.connections, args.concurrency) if args.kafka else None
        )
    if results:
        plain_r, tls_r = results["PLAINTEXT"], results["SASL_SSL"]
        print()
        print(
            f"records: {count:,} x {RECORD} B per listener ({args.mib} MiB), confluent-kafka, acks=1, one partition"
        )
        print(f"{'':24}{'PLAINTEXT':>12}{'SASL_SSL':>12}{'ratio':>8}")
        for key, label in (("produce_mib_s", "produce MiB/s"), ("produce_cpu_s_per_gib", "produce CPU-s/GiB"),
                           ("consume_mib_s", "consume MiB/s"), ("consume_cpu_s_per_gib", "consume CPU-s/GiB"),
                           ("client_produce_cpu_s_per_gib", "client produce CPU-s/GiB"),
                           ("client_consume_cpu_s_per_gib", "client consume CPU-s/GiB"),
                           ("kcat_consume_mib_s", "kcat consume MiB/s"),
                           ("kcat_consume_cpu_s_per_gib", "kcat consume CPU-s/GiB"),
                           ("kcat_client_cpu_s_per_gib", "kcat client CPU-s/GiB"),
                           ("raw_consume_mib_s", "raw Fetch MiB/s"),
                           ("raw_consume_cpu_s_per_gib", "raw Fetch CPU-s/GiB"),
                           ("raw_client_cpu_s_per_gib", "raw client CPU-s/GiB")):  # fmt: skip
            ratio = (
                tls_r[key] / plain_r[key] if plain_r[key] else float("nan")
            )  # a tiny --mib may read 0 CPU-s
            print(f"{label:24}{plain_r[key]:>12.1f}{tls_r[key]:>12.1f}{ratio:>8.2f}")
        print(
            f"TLS floor (no Kafka):   {floor_mib_s:.1f} MiB/s, server {floor_cpu:.2f} CPU-s/GiB, "
            f"client {floor_client_cpu:.2f} CPU-s/GiB"
        )
        print(
            f"consume over TLS / floor: confluent-kafka {tls_r['consume_mib_s'] / floor_mib_s:.2f}, "
            f"kcat {tls_r['kcat_consume_mib_s'] / floor_mib_s:.2f}, raw Fetch {tls_r['raw_consume_mib_s'] / floor_mib_s:.2f} "
            "(goal >= 0.8); "
            f"produce over TLS / PLAINTEXT: {tls_r['produce_mib_s'] / plain_r['produce_mib_s']:.2f} (goal >= 0.7)"
        )
    print_burst("kcli", kcli_figures, args.connections, args.concurrency)
    if kafka_figures is not None:
        print_burst(f"Apache Kafka {apache_kafka.VERSION}", kafka_figures, args.connections, args.concurrency)
    print("(a shared 2-core machine: indicative figures)")


if __name__ == "__main__":
    main()
