"""Figures of partition replication on a 3-node kcli cluster (combined mode, one machine).

    python tests/bench/bench_replication.py [--mib 128] [--size 1024] [--rate 5000] [--seconds 20]
                                            [--failovers 5] [--base-port 43000]

1. acks=all throughput and broker CPU per GiB at replication factor 3 against 1, in the same run: one
   idempotent confluent-kafka producer writes --mib MiB of --size-byte records to a topic of one
   partition led by node 1, with replicas [1] and then [1, 2, 3] (min.insync.replicas 2); the CPU is
   the user+system time of the three broker processes (from /proc) over each phase. Two rounds, the
   better of each is kept.
2. acks=all produce latency at --rate records/s for --seconds at replication factor 3: p50, p99, max,
   from send to delivery report.
3. Leader failover, while a producer sends 1000 records/s with acks=all: after kill -9 of the
   partition's leader and after SIGTERM (controlled shutdown moves the leadership first), the longest
   gap between acknowledgements from a second before the signal until a record sent after it is
   acknowledged, and SIGTERM's produce errors. A kill -9 that also takes the active controller is
   reported apart: the new controller restarts every broker's session, so fencing the dead leader
   takes an election plus a session timeout. The node is restarted and back in the ISR before the next one.
   Median and max over --failovers of each. Next to it, the cluster's own failover after kill -9: from
   the signal until a surviving broker's Metadata names a new leader and a fresh producer's acks=all
   record to it is acknowledged (the steady producer's gap adds librdkafka's own: it asks for the leader
   of a partition whose broker is down on its 1 s topic scan, and decommissioning the dead broker, which
   Metadata no longer lists once fenced, parks the partition on its internal broker until the next scan).
4. The machine's floor for item 1's CPU ratio: the same bytes moved with no broker, at the rates item 1
   measured, by plain processes over loopback in 1 MiB pieces. RF 1: a client sends, a leader receives and writes (pwrite) them. RF 3:
   the leader also sendfiles each piece from its file to two followers, which receive and write it and
   answer with 8 bytes before the leader takes the next piece. Only the kernel's work is left (page cache
   writes, loopback TCP, sendfile): what any broker on this machine pays at least.

Benchmarks print figures; nothing here is a timed assert. Loopback only; every process it starts is
stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench_cluster import Nodes as ClusterNodes  # noqa: E402
from bench_cluster import quorum_leader  # noqa: E402

SESSION_TIMEOUT_MS = 9000  # Kafka's broker.session.timeout.ms
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


class Nodes(ClusterNodes):
    """bench_cluster's nodes, plus what this benchmark asks of them: CPU time and a signal by id."""

    def signal(self, node_id: int, signum: int) -> None:
        process = self.processes.pop(node_id)
        os.kill(process.pid, signum)
        process.wait(120)

    def cpu_seconds(self) -> float:
        """User + system time of every running node so far."""
        return sum(user + system for user, system in self.cpu_times().values())

    def cpu_times(self) -> dict[int, tuple[float, float]]:
        """Each running node's (user, system) CPU seconds so far."""
        return {node_id: process_times(process.pid) for node_id, process in self.processes.items()}

    @property
    def bootstrap(self) -> str:
        return self.layout.bootstrap_servers


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, replicas: list[int]) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    topic = NewTopic(
        name, 1, replica_assignment=[replicas], config={"min.insync.replicas": str(min(2, len(replicas)))}
    )
    client.create_topics([topic])[name].result(30)
    wait_isr(bootstrap, name, len(replicas))


def partition_state(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    info = admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0]
    return info.leader, sorted(info.isrs)


def wait_isr(bootstrap: str, topic: str, size: int, timeout: float = 120.0) -> int:
    """Until the partition has a leader and an ISR of `size`; the leader."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            leader, isr = partition_state(bootstrap, topic)
            if leader >= 0 and len(isr) == size:
                return leader
        except Exception:  # a broker going away mid-request: ask again
            pass
        time.sleep(0.2)
    raise SystemExit(f"{topic}: no full ISR of {size} within {timeout:g} s")


def producer(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            **extra,
        }
    )


def throughput(
    nodes: Nodes, topic: str, mib: int, size: int
) -> tuple[float, float, dict[int, tuple[float, float]]]:
    """(MiB/s, broker CPU seconds per GiB, each node's (user, system) CPU seconds per GiB) for `mib`
    MiB acks=all into `topic`."""
    p = producer(nodes.bootstrap)
    value = os.urandom(size)
    count = mib * 1024 * 1024 // size
    errors = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    times_before = nodes.cpu_times()
    began = time.monotonic()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value=value, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(300)
    took = time.monotonic() - began
    gib = mib / 1024
    per_node = {
        n: ((user - times_before[n][0]) / gib, (system - times_before[n][1]) / gib)
        for n, (user, system) in nodes.cpu_times().items()
    }
    if errors:
        raise SystemExit(f"{topic}: {len(errors)} produce errors, first {errors[0]}")
    return mib / took, sum(u + s for u, s in per_node.values()), per_node


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    """Milliseconds from send to delivery report at `rate` records/s."""
    p = producer(bootstrap, **{"linger.ms": 1})
    p.produce(topic, value=b"warm-up", partition=0)  # producer id and metadata before the clock starts
    p.flush(30)
    latencies: list[float] = []
    value = os.urandom(512)
    interval = 1 / rate
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < seconds:
        due = began + n * interval
        now = time.monotonic()
        if due > now:
            p.poll(due - now)
            continue
        sent = time.perf_counter()
        p.produce(
            topic,
            value=value,
            partition=0,
            on_delivery=lambda err, _m, sent=sent: (
                err is None and latencies.append((time.perf_counter() - sent) * 1000)
            ),
        )
        n += 1
        p.poll(0)
    p.flush(60)
    return latencies


class SteadyProducer:
    """1000 records/s with acks=all in a thread, recording when each acknowledgement came."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.p = producer(bootstrap, **{"linger.ms": 1, "message.timeout.ms": 60000})
        self.topic = topic
        self.acks: list[float] = []
        self.errors: list[str] = []
        self.last_sent_acked = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        began = time.monotonic()
        while not self._stop.is_set():
            due = began + n / 1000
            now = time.monotonic()
            if due > now:
                self.p.poll(due - now)
                continue
            sent = time.monotonic()
            self.p.produce(
                self.topic,
                value=b"x" * 100,
                partition=0,
                on_delivery=lambda err, msg, sent=sent: self._done(err, sent),
            )
            n += 1
            self.p.poll(0)
        self.p.flush(60)

    def _done(self, err: Any, sent: float) -> None:
        if err is None:
            now = time.monotonic()
            self.acks.append(now)
            self.last_sent_acked = max(self.last_sent_acked, sent)
        else:
            self.errors.append(err.name())

    def wait_resumed(self, after: float, timeout: float = 60.0) -> bool:
        """Until a record sent after `after` is acknowledged: only the new leader can have done that (an
        acknowledgement of an older record may be the old leader's answer arriving late)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.last_sent_acked > after:
                return True
            time.sleep(0.01)
        return False

    def longest_gap(self, since: float) -> float:
        window = [t for t in self.acks if t >= since]
        return max((b - a for a, b in zip(window, window[1:], strict=False)), default=float("inf"))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)


def cluster_failover(nodes: Nodes, topic: str, dead: int, at: float, timeout: float = 60.0) -> float:
    """Seconds from `at` until a survivor's Metadata names a leader other than `dead` and an acks=all
    record sent to it by a fresh producer is acknowledged."""
    survivors = ",".join(nodes.address(n) for n in nodes.processes)
    client = admin(survivors)
    deadline = at + timeout
    while time.monotonic() < deadline:
        try:
            leader = client.list_topics(topic, timeout=2).topics[topic].partitions[0].leader
        except Exception:  # a broker going away mid-request: ask again
            leader = -1
        if leader not in (-1, dead):
            break
        time.sleep(0.02)
    p = producer(survivors, **{"linger.ms": 0})
    acked: list[float] = []
    while time.monotonic() < deadline and not acked:
        p.produce(topic, value=b"failover", partition=0,
                  on_delivery=lambda err, _m: err is None and acked.append(time.monotonic()))  # fmt: skip
        p.flush(max(0.0, deadline - time.monotonic()))
    return acked[0] - at if acked else float("inf")


def failovers(
    nodes: Nodes, topic: str, count: int
) -> tuple[list[tuple[float, bool, float]], list[tuple[float, float]], int]:
    """The outage each fault causes, as the longest gap between acknowledgements from a second before
    the signal until a record sent after it is acknowledged (kill -9, then SIGTERM), each with the
    cluster's failover (cluster_failover), and the SIGTERM rounds' produce errors. A kill -9 outage comes with whether the leader was also the active
    controller: then a new controller is elected first and restarts every broker's session, so the
    dead broker is fenced a session timeout after that (Kafka's controller does the same)."""
    after_kill: list[tuple[float, bool, float]] = []
    term_gaps: list[tuple[float, float]] = []
    term_errors = 0
    steady = SteadyProducer(nodes.bootstrap, topic)
    try:
        for _ in range(count):
            for signum in (signal.SIGKILL, signal.SIGTERM):
                leader = wait_isr(nodes.bootstrap, topic, 3)
                time.sleep(2)
                errors_before = len(steady.errors)
                controller = asyncio.run(quorum_leader(nodes.bootstrap.split(",")[0]))
                at = time.monotonic()
                nodes.signal(leader, signum)
                cluster = cluster_failover(nodes, topic, leader, at)
                resumed = steady.wait_resumed(at)
                gap = steady.longest_gap(at - 1) if resumed else float("inf")
                if signum == signal.SIGKILL:
                    after_kill.append((gap, controller == leader, cluster))
                else:
                    term_gaps.append((gap, cluster))
                    term_errors += len(steady.errors) - errors_before
                nodes.start(leader)
    finally:
        steady.stop()
    return after_kill, term_gaps, term_errors


PIECE = 1 << 20


def _cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _receive_exactly(sock: socket.socket, buffer: memoryview) -> None:
    got = 0
    while got < len(buffer):
        n = sock.recv_into(buffer[got:], 0, socket.MSG_WAITALL)
        if not n:
            raise ConnectionError("peer closed mid-piece")
        got += n


def _floor_connect(port: int, role: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(role)
    return sock


def _floor_client(port: int, pieces: int, rate: float) -> None:
    """Send `pieces` MiB at `rate` MiB/s."""
    data = os.urandom(PIECE)
    with _floor_connect(port, b"C") as sock:
        began = time.monotonic()
        for i in range(pieces):
            time.sleep(max(0.0, began + i / rate - time.monotonic()))
            sock.sendall(data)
        sock.recv(1)  # the leader's end: everything is written


def _floor_follower(port: int, path: str, pieces: int, cpu: Any) -> None:
    with _floor_connect(port, b"F") as sock:
        buffer = memoryview(bytearray(PIECE))
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
        began = _cpu_now()
        for i in range(pieces):
            _receive_exactly(sock, buffer)
            os.pwrite(fd, buffer, i * PIECE)
            sock.sendall(i.to_bytes(8, "big"))  # the next fetch's offset
        cpu.put(_cpu_now() - began)
        os.close(fd)


def _floor_leader(path: str, pieces: int, followers: int, ports: Any, cpu: Any) -> None:
    """Write each piece the client sends, sendfile it to every follower, wait for their answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        ports.put(server.getsockname()[1])
        peers, clients = [], []
        for _ in range(followers + 1):
            sock = server.accept()[0]
            (peers if sock.recv(1) == b"F" else clients).append(sock)
    (client,) = clients
    buffer = memoryview(bytearray(PIECE))
    answer = memoryview(bytearray(8))
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC)
    began = _cpu_now()
    for i in range(pieces):
        _receive_exactly(client, buffer)
        os.pwrite(fd, buffer, i * PIECE)
        for peer in peers:
            sent = 0
            while sent < PIECE:
                sent += os.sendfile(peer.fileno(), fd, i * PIECE + sent, PIECE - sent)
        for peer in peers:
            _receive_exactly(peer, answer)
    cpu.put(_cpu_now() - began)
    client.sendall(b"!")
    os.close(fd)
    for sock in (client, *peers):
        sock.close()


def kernel_floor(directory: Path, mib: int, followers: int, rate: float) -> float:
    """CPU seconds per GiB of a leader and `followers` followers moving `mib` MiB at `rate` MiB/s (the
    broker's own rate in the phase it is set beside: faster costs more per GiB here) with no broker. The files
    stay (as a broker's segments do): deleting them would hand the next phase freshly freed pages, which
    cost less here than pages long free (see the README)."""
    spawn = multiprocessing.get_context("spawn")  # no fork of a process holding librdkafka's threads
    ports, cpu = spawn.Queue(), spawn.Queue()
    files = Path(tempfile.mkdtemp(prefix=f"floor-rf{followers + 1}-", dir=directory))
    leader = spawn.Process(target=_floor_leader, args=(str(files / "leader"), mib, followers, ports, cpu))
    leader.start()
    port = ports.get(timeout=60)
    others = [
        spawn.Process(target=_floor_follower, args=(port, str(files / f"follower-{n}"), mib, cpu))
        for n in range(followers)
    ]
    others.append(spawn.Process(target=_floor_client, args=(port, mib, rate)))
    for process in others:
        process.start()
    total = sum(cpu.get(timeout=300) for _ in range(1 + followers))
    for process in (leader, *others):
        process.join(60)
    return total / (mib / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=128, help="MiB per throughput phase")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes")
    parser.add_argument("--rate", type=int, default=5000, help="records/s for the latency phase")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the latency phase")
    parser.add_argument("--failovers", type=int, default=5, help="kill -9 and SIGTERM rounds")
    parser.add_argument("--base-port", type=int, default=43000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kcli-bench-replication-") as tmp:
        nodes = Nodes(Path(tmp), 3, args.base_port, ["leader.imbalance.check.interval.seconds=5"])
        try:
            nodes.start(1, 2, 3)
            create_topic(nodes.bootstrap, "rf1", [1])
            create_topic(nodes.bootstrap, "rf3", [1, 2, 3])
            results: dict[str, list[tuple[float, float, dict[int, tuple[float, float]]]]] = {
                "rf1": [],
                "rf3": [],
            }
            for _ in range(2):
                for topic in ("rf1", "rf3"):
                    results[topic].append(throughput(nodes, topic, args.mib, args.size))
            print(f"acks=all, {args.mib} MiB of {args.size}-byte records, one partition, 2 rounds (best):")
            best = {}
            for topic in ("rf1", "rf3"):
                rate = max(r[0] for r in results[topic])
                _, cpu, per_node = min(results[topic], key=lambda r: r[1])
                best[topic] = (rate, cpu)
                nodes_text = ", ".join(
                    f"node {n} {u + s:.2f} (sys {s:.2f})" for n, (u, s) in sorted(per_node.items())
                )
                print(f"  RF {topic[2:]}: {rate:.1f} MiB/s, broker CPU {cpu:.1f} s/GiB: {nodes_text}")
            (rate1, cpu1), (rate3, cpu3) = best["rf1"], best["rf3"]
            print(f"  RF 3 / RF 1: throughput {rate3 / rate1:.2f}x, CPU per GiB {cpu3 / cpu1:.2f}x")
            floor1 = min(kernel_floor(Path(tmp), args.mib, 0, rate1) for _ in range(2))
            floor3 = min(kernel_floor(Path(tmp), args.mib, 2, rate3) for _ in range(2))
            print(
                f"  the machine's floor, no broker (the same MiB moved at those rates, best of 2): RF 1 {floor1:.1f}, "
                f"RF 3 {floor3:.1f} CPU-s/GiB: {floor3 / floor1:.2f}x"
            )

            ms = latency(nodes.bootstrap, "rf3", args.rate, args.seconds)
            ordered = sorted(ms)
            print(
                f"acks=all RF 3 at {args.rate} records/s for {args.seconds:g} s: p50 {statistics.median(ms):.1f} ms, "
                f"p99 {ordered[int(0.99 * len(ordered))]:.1f} ms, max {ordered[-1]:.1f} ms ({len(ms)} records)"
            )

            if not args.failovers:
                return
            killed, gaps, errors = failovers(nodes, "rf3", args.failovers)
            print(f"leader failover at 1000 records/s, acks=all, {args.failovers} rounds:")
            for label, was_controller in (("leader only", False), ("leader and active controller", True)):
                gaps_of = [gap for gap, c, _ in killed if c == was_controller]
                cluster_of = [t for _, c, t in killed if c == was_controller]
                if gaps_of:
                    print(
                        f"  kill -9 of the {label} ({len(gaps_of)}): longest gap between acks median "
                        f"{statistics.median(gaps_of):.2f} s, max {max(gaps_of):.2f} s; the cluster's "
                        f"failover (new leader acknowledging a fresh producer) median "
                        f"{statistics.median(cluster_of):.2f} s, max {max(cluster_of):.2f} s "
                        f"(broker.session.timeout.ms {SESSION_TIMEOUT_MS})"
                    )
            term = [gap for gap, _ in gaps]
            print(
                f"  SIGTERM: longest gap between acks median {statistics.median(term):.2f} s, max {max(term):.2f} s; "
                f"produce errors {errors}"
            )
        finally:
            nodes.stop_all()


if __name__ == "__main__":
    main()
