"""Multi-node KRaft clusters of real `kcli broker start` processes on loopback, for the tests that need one.

A cluster is laid out and formatted once by `ops.local_cluster.plan` (what `kcli cluster start` does),
then its nodes run as `kcli broker start --config node-<k>/server.properties`, each a process of ours
with its own PID, so one can be killed (SIGKILL) or stopped (SIGTERM) and started again on the same
dirs and ports. Ports are a free range of this worker's slice (conftest.free_port_range), below the
kernel's ephemeral range. `cluster_runner` runs `kcli cluster start` itself; `replicated_cluster`
starts three nodes with the replication settings (REPLICATION) that the partition tests share. The
fixtures reach every test file through conftest.py's pytest_plugins.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import forkserver
import pytest
from cli_in_process import run_kcli
from conftest import KCLI, READY, free_port_range, kcli_env
from waiting import wait_for

from formats.records import ControlType, control_type
from formats.segment import walk
from ops.local_cluster import ClusterLayout, LocalNode, plan

__all__ = [
    "IsolatedCluster",
    "wait_partition",
    "replicated_cluster",
    "partition_state",
    "partition_batches",
    "create_topic",
    "admin",
    "Writer",
    "REPLICATION",
    "LAG_TIME_MS",
    "ELECTION_TIMEOUT_S",
    "FETCH_TIMEOUT_S",
    "HEARTBEAT_INTERVAL_S",
    "QUORUM_TIMEOUTS",
    "READY_TIMEOUT_S",
    "SESSION",
    "SESSION_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "ClusterRunner",
    "DiskBatch",
    "LocalKraftCluster",
    "NodeProcess",
    "Status",
    "below",
    "children_of",
    "cluster_factory",
    "cluster_runner",
    "cluster_status",
    "kcli",
    "read_metadata_log",
    "read_quorum_state",
    "still_ours",
    "try_status",
    "wait_all_caught_up",
    "wait_for",
]

# On two shared cores a Python node can stall for a second: Kafka's defaults (election 1000 ms, fetch
# 2000 ms) make leaders resign under load, so the tests give the quorum more room, never less logic.
QUORUM_TIMEOUTS = (
    "controller.quorum.election.timeout.ms=1500",
    "controller.quorum.fetch.timeout.ms=3000",
    "controller.quorum.request.timeout.ms=3000",
)
ELECTION_TIMEOUT_S = 1.5
FETCH_TIMEOUT_S = 3.0
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


# --- ports, processes, the cluster ---------------------------------------------------------------------


@dataclass
class NodeProcess:
    """One node of the layout, run as `kcli broker start --config`, its output appended to broker.log."""

    node: LocalNode
    process: forkserver.Process | None = None
    log_mark: int = 0
    exits: list[int] = field(default_factory=list)

    @property
    def node_id(self) -> int:
        return self.node.node_id

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        assert not self.running, f"node {self.node_id} is already running"
        self.log_mark = self.node.log_file.stat().st_size if self.node.log_file.exists() else 0
        with open(self.node.log_file, "ab") as log:
            self.process = forkserver.popen(
                ["broker", "start", "--config", str(self.node.properties)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.node.directory,
                env=kcli_env(),
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """What this incarnation wrote so far."""
        try:
            with open(self.node.log_file, "rb") as f:
                f.seek(self.log_mark)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                pytest.fail(
                    f"node {self.node_id} exited with {self.process.returncode} before it was ready:\n{self.log()}"
                )
            return READY.search(self.log()) is not None

        wait_for(f"node {self.node_id} to listen", ready, timeout)

    def kill(self) -> None:
        """kill -9, by PID."""
        assert self.process is not None and self.running
        os.kill(self.process.pid, signal.SIGKILL)
        self.exits.append(self.process.wait(STOP_TIMEOUT_S))

    def terminate(self, timeout: float = STOP_TIMEOUT_S, *, send: bool = True) -> int:
        """SIGTERM by PID (`send` False: it was sent already; a second one is not a stop but an abort)
        and wait; SIGKILL by PID when it outlives `timeout`. The exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            if send:
                os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.exits.append(self.process.returncode)
        return self.process.returncode


@dataclass
class Status:
    """`kcli cluster status -o json`, parsed."""

    leader_id: int
    epoch: int
    high_watermark: int
    fenced: dict[int, bool]
    voters: dict[int, tuple[int, int]]  # node id -> (log end offset, lag)
    text: str = ""

    @property
    def caught_up(self) -> bool:
        """Every voter at the leader's log end, and the high watermark there too."""
        ends = {end for end, _ in self.voters.values()}
        return (
            len(ends) == 1
            and all(lag == 0 for _, lag in self.voters.values())
            and (self.high_watermark == ends.pop())
        )


def kcli(*args: str, timeout: float = 30.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*KCLI, *args], capture_output=True, text=True, timeout=timeout, env=kcli_env(), cwd=cwd
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def cluster_status(bootstrap: str) -> Status:
    """The cluster as `kcli cluster status -o json` shows it; AssertionError when the command fails.

    It runs through kcli's entry point in this process (tests/cli_in_process.py): the waits poll it
    every quarter second, and a process each time cost half a second or more per answer. The text
    form in the first test stays a real `python -m kcli cluster status` process."""
    result = run_kcli("cluster", "status", "-b", bootstrap, "-o", "json")
    assert result.returncode == 0, result.stderr
    items = [json.loads(line) for line in result.stdout.splitlines()]
    [cluster] = [i for i in items if i["type"] == "cluster"]
    return Status(
        cluster["leaderId"],
        cluster["leaderEpoch"],
        cluster["highWatermark"],
        {i["nodeId"]: i["fenced"] for i in items if i["type"] == "broker"},
        {i["nodeId"]: (i["logEndOffset"], i["lag"]) for i in items if i["type"] == "voter"},
        result.stdout,
    )


def try_status(bootstrap: str) -> Status | None:
    """The status, or None when the command fails: an error exit, or an exception kcli's main does
    not turn into a sentence (which, as a process, was a traceback and a failed command too)."""
    try:
        return cluster_status(bootstrap)
    except Exception:  # a node mid-restart: ask again, or another node
        return None


class LocalKraftCluster:
    """A formatted layout in `root` and one `NodeProcess` per node."""

    def __init__(
        self,
        root: Path,
        brokers: int = 3,
        overrides: Sequence[str] = (),
        add_scram: Sequence[str] = (),
        release: int | None = None,
        security: str | None = None,
    ) -> None:
        """`release`: the --release-version level the nodes are formatted at (None: kcli's default);
        `security`: `kcli cluster start --security` (None: plaintext)."""
        base = free_port_range(2 * brokers)
        self.layout: ClusterLayout = plan(
            root,
            brokers,
            base,
            [*QUORUM_TIMEOUTS, *overrides],
            add_scram=add_scram,
            release=release,
            security=security,
        )
        self.nodes = {n.node_id: NodeProcess(n) for n in self.layout.nodes}

    def __getitem__(self, node_id: int) -> NodeProcess:
        return self.nodes[node_id]

    @property
    def bootstrap(self) -> str:
        return self.layout.bootstrap_servers

    def live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.running)

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()
        for node in self.nodes.values():
            node.wait_ready()

    def status(self, timeout: float = 30.0, what: str = "an answer from the cluster") -> Status:
        """The status through a live broker, once one answers (a leader is known)."""

        def ask() -> Status | None:
            for node in self.nodes.values():
                if node.running:
                    status = try_status(node.bootstrap)
                    if status is not None and status.leader_id >= 0:
                        return status
            return None

        return wait_for(what, ask, timeout, interval=0.2)

    def wait_status(self, what: str, check: Callable[[Status], bool], timeout: float = 30.0) -> Status:
        def ask() -> Status | None:
            for node in self.nodes.values():
                if node.running:
                    status = try_status(node.bootstrap)
                    if status is not None and status.leader_id >= 0:
                        return status if check(status) else None
            return None

        return wait_for(what, ask, timeout, interval=0.25)

    def kill_all(self) -> None:
        for node in self.nodes.values():
            if node.running:
                node.kill()

    def metadata_dir(self, node_id: int) -> Path:
        return self.nodes[node_id].node.directory / "data" / "__cluster_metadata-0"


class IsolatedCluster(LocalKraftCluster):
    """Node 1 a controller alone, nodes 2-4 brokers (Kafka's isolated mode): `kcli cluster start
    --controllers 1` as a LocalKraftCluster."""

    def __init__(self, root: Path, overrides: tuple[str, ...]) -> None:
        base = free_port_range(2 * 4)
        self.layout = plan(root, 3, base, [*QUORUM_TIMEOUTS, *overrides], controllers=1)
        self.nodes = {n.node_id: NodeProcess(n) for n in self.layout.nodes}

    def brokers(self, *ids: int) -> str:
        return ",".join(self.nodes[i].bootstrap for i in ids)

    def data(self, node_id: int) -> Path:
        return self.nodes[node_id].node.directory / "data"


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., LocalKraftCluster]]:
    """`factory(brokers=3, overrides=[...], add_scram=[...])` -> a formatted, not yet started cluster
    (`add_scram`: `storage format --add-scram` arguments); every node left running at teardown is
    killed by PID (the data is thrown away)."""
    made: list[LocalKraftCluster] = []

    def factory(
        brokers: int = 3, overrides: Sequence[str] = (), add_scram: Sequence[str] = ()
    ) -> LocalKraftCluster:
        cluster = LocalKraftCluster(tmp_path / f"cluster-{len(made)}", brokers, overrides, add_scram)
        made.append(cluster)
        return cluster

    try:
        yield factory
    finally:
        for cluster in made:
            cluster.kill_all()


# --- the metadata log on disk --------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskBatch:
    base_offset: int
    last_offset: int
    epoch: int
    crc: int
    is_control: bool
    crc_valid: bool
    data: bytes
    leader_change: int | None  # the LeaderChange record's leader id


def read_metadata_log(directory: Path) -> list[DiskBatch]:
    """Every whole batch of `__cluster_metadata-0` in `directory`, in offset order (a torn tail is left out)."""
    batches = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for batch in walk(data, check_crc=True).batches:
            leader = None
            raw = data[batch.position : batch.position + batch.size]
            if batch.is_control:
                for record in batch.records(data):
                    if control_type(record[2]) is ControlType.LEADER_CHANGE:
                        leader = struct.unpack_from(">hi", record[3])[1]  # version int16, LeaderId int32
            batches.append(
                DiskBatch(
                    batch.base_offset,
                    batch.last_offset,
                    batch.partition_leader_epoch,
                    batch.crc,
                    batch.is_control,
                    bool(batch.crc_valid),
                    raw,
                    leader,
                )
            )
    return batches


def below(batches: list[DiskBatch], offset: int) -> list[DiskBatch]:
    return [b for b in batches if b.last_offset < offset]


def read_quorum_state(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / "quorum-state").read_bytes())
    except (FileNotFoundError, ValueError):
        return None


# --- `kcli cluster start` as a process ----------------------------------------------------------------


@dataclass
class ClusterRunner:
    """`kcli cluster start` as a process of ours; `children` are its node processes (by PID)."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    stdout_path: Path
    stderr_path: Path
    children: list[int] = field(default_factory=list)

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def children_of(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def still_ours(pid: int, marker: Path) -> bool:
    """Whether `pid` is still a live process whose command line names `marker` (not a reused PID)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return str(marker).encode() in cmdline and state != "Z"


@pytest.fixture
def cluster_runner(tmp_path: Path) -> Iterator[Callable[..., ClusterRunner]]:
    runners: list[ClusterRunner] = []

    def run(brokers: int, port: int, overrides: Sequence[str] = ()) -> ClusterRunner:
        data_dir = tmp_path / "runner"
        out, err = tmp_path / "runner.out", tmp_path / "runner.err"
        args = [*KCLI, "cluster", "start", "--brokers", str(brokers), "--data-dir", str(data_dir)]
        args += ["--port", str(port)]
        for item in overrides:
            args += ["--override", item]
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=kcli_env(), cwd=tmp_path
            )
        runner = ClusterRunner(process, data_dir, out, err)
        runners.append(runner)
        return runner

    try:
        yield run
    finally:
        for runner in runners:
            if runner.process.poll() is None:
                runner.process.send_signal(signal.SIGTERM)
                try:
                    runner.process.wait(STOP_TIMEOUT_S + 30)
                except subprocess.TimeoutExpired:
                    runner.process.kill()
                    runner.process.wait()
            for pid in runner.children:  # only if the runner could not stop them itself
                if still_ours(pid, runner.data_dir):
                    os.kill(pid, signal.SIGKILL)


_SHUTDOWN_ENDING = re.compile(r"controlled shutdown (complete|given up|not acknowledged|refused)")


def shutdown_ending(log: str) -> str | None:
    """How the last controlled shutdown in a node's log ended: complete, given up, not acknowledged,
    refused; None when it has none."""
    found = _SHUTDOWN_ENDING.findall(log)
    return found[-1] if found else None


def wait_all_caught_up(cluster: LocalKraftCluster, timeout: float = 45.0) -> Status:
    """Until every voter is at the leader's log end, the high watermark there, every broker unfenced."""
    return cluster.wait_status(
        "every voter caught up and every broker unfenced",
        lambda s: (
            s.caught_up
            and sorted(s.voters) == sorted(cluster.nodes)
            and not any(s.fenced.values())
            and sorted(s.fenced) == sorted(cluster.nodes)
        ),
        timeout,
    )


SESSION_TIMEOUT_S = 4.0
HEARTBEAT_INTERVAL_S = 0.5
SESSION = (
    f"broker.session.timeout.ms={SESSION_TIMEOUT_S * 1000:.0f}",
    f"broker.heartbeat.interval.ms={HEARTBEAT_INTERVAL_S * 1000:.0f}",
)


# --- three nodes with replication settings, and their partitions -----------------------------------------

LAG_TIME_MS = 3000
REPLICATION = (*SESSION, f"replica.lag.time.max.ms={LAG_TIME_MS}", "replica.fetch.backoff.ms=200")


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalKraftCluster]]:
    """`replicated_cluster(*overrides, release=None)` -> three running nodes with the replication settings,
    formatted at `release` (None: kcli's default); every node left running at teardown is killed by PID."""
    made: list[LocalKraftCluster] = []

    def start(*overrides: str, release: int | None = None) -> LocalKraftCluster:
        cluster = LocalKraftCluster(
            tmp_path / f"cluster-{len(made)}", 3, (*REPLICATION, *overrides), release=release
        )
        made.append(cluster)
        cluster.start()
        return cluster

    try:
        yield start
    finally:
        for cluster in made:
            cluster.kill_all()


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, assignment: list[list[int]], **configs: str) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)  # kept: the futures die with their client
    future = client.create_topics(
        [NewTopic(topic, len(assignment), replica_assignment=assignment, config=configs)],
        operation_timeout=30,
    )[topic]
    future.result(30)


def partition_state(
    cluster: LocalKraftCluster, topic: str, partition: int = 0, via: str | None = None
) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) as Metadata from a live broker (or the one at `via`) shows them."""
    metadata = admin(via or cluster.live_bootstrap()).list_topics(topic, timeout=10)
    info = metadata.topics[topic].partitions[partition]
    return info.leader, list(info.replicas), list(info.isrs)


def wait_partition(
    cluster: LocalKraftCluster, topic: str, what: str, check: Callable[[int, list[int], list[int]], bool],
    timeout: float = 40.0, via: str | None = None,
) -> tuple[int, list[int], list[int]]:  # fmt: skip
    def ask() -> tuple[int, list[int], list[int]] | None:
        state = partition_state(cluster, topic, via=via)
        return state if check(*state) else None

    return wait_for(f"{topic}: {what}", ask, timeout, interval=0.25)


class Writer:
    """An idempotent acks=all producer that records what was acknowledged, by offset."""

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 60000,
                **extra,
            }
        )
        self.acked: dict[int, bytes] = {}
        self.failed: list[tuple[bytes, str]] = []

    def send(self, topic: str, values: list[bytes]) -> None:
        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.acked[msg.offset()] = msg.value()
            else:
                self.failed.append((msg.value(), err.name()))

        for value in values:
            self.producer.produce(topic, value=value, partition=0, on_delivery=done)
            self.producer.poll(0)

    def flush(self, timeout: float = 60.0) -> None:
        assert self.producer.flush(timeout) == 0


def partition_batches(cluster: LocalKraftCluster, node_id: int, topic: str) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every whole batch of `topic`-0 on node `node_id`'s disk."""
    directory = cluster[node_id].node.directory / "data" / f"{topic}-0"
    batches = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for batch in walk(data, check_crc=True).batches:
            batches.append((batch.base_offset, data[batch.position : batch.position + batch.size]))
    return batches
