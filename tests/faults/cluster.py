"""Three combined-mode `kcli broker start` processes whose every connection passes through a proxy.

Each node binds its real listeners (PLAINTEXT, CONTROLLER) on 127.0.0.1 and advertises the ports of
its proxies (`advertised.listeners`, `controller.quorum.voters`), so node-to-node traffic and clients
alike reach it through `ProxySet`, which can cut links between nodes. The properties come from
`ops.local_cluster` (what `kcli cluster start` writes) and each node is formatted with
`kcli.storage.format_storage` (what `kcli storage format` runs); the processes are ours, by PID, so a
fault can SIGKILL, SIGTERM, SIGSTOP or SIGCONT one node.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conftest import free_port_range, kcli_env
from waiting import WaitTimeout, wait_for

from faults.proxy import ProxySet
from kcli.config import BROKER_CONFIGS, BrokerConfig
from kcli.storage import format_storage, random_uuid
from ops.local_cluster import READY_MARK, LocalNode, node_properties

# Two shared cores run three Python nodes, the proxies and the clients: a node can stall for a second
# or two, so the timeouts are raised (never the checks weakened). Keys this kcli does not know yet
# (the replica fetcher's, until replication lands) are left out rather than refused at start-up.
TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "2000",
    "controller.quorum.fetch.timeout.ms": "4000",
    "controller.quorum.request.timeout.ms": "4000",
    "broker.session.timeout.ms": "12000",
    "broker.heartbeat.interval.ms": "2000",
    "replica.lag.time.max.ms": "15000",
    "replica.fetch.wait.max.ms": "500",
    "replica.socket.timeout.ms": "10000",
    "request.timeout.ms": "15000",
    "transaction.state.log.replication.factor": "1",
}
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_READY = re.compile(re.escape(READY_MARK))


# A bounded wait on the cluster that ran out; run.py recovers from some by name. A check that raises it
# (a node that exited before it was ready) ends the wait at once.
ClusterTimeout = WaitTimeout


@dataclass
class Node:
    """One combined-mode node: its real ports, the ports of its proxies, its process."""

    node_id: int
    port: int
    controller_port: int
    proxy_port: int
    proxy_controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    log_mark: int = 0
    exits: list[int] = field(default_factory=list)

    @property
    def properties(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    @property
    def log_dir(self) -> Path:
        return self.directory / "data"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        assert not self.running, f"node {self.node_id} is already running"
        self.log_mark = self.log_file.stat().st_size if self.log_file.exists() else 0
        self.paused = False
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kcli", "broker", "start", "--config", str(self.properties)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=kcli_env(),
                start_new_session=True,  # a Ctrl-C of the test reaches us, and we stop the nodes by PID
            )

    def log(self) -> str:
        """What this incarnation wrote so far."""
        try:
            with open(self.log_file, "rb") as f:
                f.seek(self.log_mark)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def is_ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise ClusterTimeout(
                f"node {self.node_id} exited with {self.process.returncode}:\n{self.log()[-3000:]}"
            )
        return _READY.search(self.log()) is not None

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to our process, by PID."""
        assert self.process is not None and self.running, f"node {self.node_id} is not running"
        os.kill(self.process.pid, sig)
        if sig is signal.SIGSTOP:
            self.paused = True
        elif sig is signal.SIGCONT:
            self.paused = False

    def kill(self) -> None:
        """SIGKILL, then reap."""
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.exits.append(self.process.wait(STOP_TIMEOUT_S))
        self.paused = False

    def terminate(self, timeout: float = STOP_TIMEOUT_S, *, send: bool = True) -> int:
        """SIGTERM (a paused node is continued first; `send` False: it was sent already) and wait;
        SIGKILL when it outlives `timeout`. The exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            if self.paused:
                self.signal(signal.SIGCONT)
            if send:
                os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.exits.append(self.process.returncode)
        return self.process.returncode


class FaultCluster:
    """Three (by default) formatted combined-mode nodes and their proxies, in `root`."""

    def __init__(self, root: Path, nodes: int = 3, overrides: Sequence[str] = ()) -> None:
        base = free_port_range(4 * nodes)
        self.root = root
        self.cluster_id = random_uuid()
        self.nodes: dict[int, Node] = {}
        for k in range(nodes):
            node_id = k + 1
            ports = [base + 4 * k + i for i in range(4)]
            self.nodes[node_id] = Node(node_id, *ports, directory=root / f"node-{node_id}")
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.proxy_controller_port}" for n in self.nodes.values())
        settings = [f"{k}={v}" for k, v in TIMEOUTS.items() if k in BROKER_CONFIGS]
        for node in self.nodes.values():
            node.directory.mkdir(parents=True, exist_ok=True)
            advertised = (
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.proxy_port},"
                f"CONTROLLER://127.0.0.1:{node.proxy_controller_port}"
            )
            local = LocalNode(node.node_id, node.port, node.controller_port, node.directory)
            node.properties.write_text(
                node_properties(local, voters, nodes, [*settings, advertised, *overrides])
            )
            config = BrokerConfig.load(config_file=node.properties)
            # 3.9-IV0 (ELR off): a run's --release-version upgrades from there, as an operator would
            format_storage(config, self.cluster_id, metadata_version=21, now_ms=int(time.time() * 1000))
        routes = []
        for n in self.nodes.values():
            routes += [
                (n.node_id, n.proxy_port, n.port),
                (n.node_id, n.proxy_controller_port, n.controller_port),
            ]
        self.proxies = ProxySet(routes)

    @property
    def bootstrap(self) -> str:
        """Every node through its proxy: what clients use."""
        return ",".join(f"127.0.0.1:{n.proxy_port}" for n in self.nodes.values())

    def start(self) -> None:
        """The proxies, then every node together (a quorum needs a majority before any is ready)."""
        self.proxies.start()
        for node in self.nodes.values():
            node.start()
        for node in self.nodes.values():
            wait_for(f"node {node.node_id} to listen", node.is_ready, READY_TIMEOUT_S, interval=0.05)

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.start()
        wait_for(f"node {node_id} to listen again", node.is_ready, READY_TIMEOUT_S, interval=0.05)

    def stop(self) -> dict[int, int]:
        """SIGTERM every running node (controlled shutdown) and wait: {node id: exit status}."""
        for node in self.nodes.values():
            if node.running:
                if node.paused:
                    node.signal(signal.SIGCONT)
                os.kill(node.pid, signal.SIGTERM)
        return {
            node.node_id: node.terminate(send=False)
            for node in self.nodes.values()
            if node.process is not None
        }

    def kill_all(self) -> None:
        """Last resort at teardown: SIGKILL what is still running, stop the proxies."""
        for node in self.nodes.values():
            if node.running:
                node.kill()
        self.proxies.stop()

    def describe(self, timeout: float = 5.0) -> ClusterView | None:
        """Brokers (fenced or not) and the quorum leader through any running node; None without an answer."""
        from kcli.cluster import Cluster
        from ops.quorum import describe_cluster_status

        async def ask(bootstrap: str) -> ClusterView:
            async with await Cluster.connect(bootstrap, request_timeout=timeout) as cluster:
                status = await describe_cluster_status(cluster)
                return ClusterView(
                    status.leader_id, status.leader_epoch, {b.node_id: b.fenced for b in status.brokers}
                )

        for node in self.nodes.values():
            if node.running and not node.paused:
                try:
                    return asyncio.run(asyncio.wait_for(ask(f"127.0.0.1:{node.proxy_port}"), timeout * 2))
                except Exception:  # a node mid-restart or cut off: ask the next one
                    continue
        return None


@dataclass(frozen=True)
class ClusterView:
    """The quorum leader (the active controller), its epoch, and {broker id: fenced}."""

    controller: int
    epoch: int
    fenced: dict[int, bool]
