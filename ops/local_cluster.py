"""`kcli cluster start`: several `kcli broker start` processes on loopback, one KRaft cluster.

Each node is a combined broker and controller (Kafka's combined mode) with two loopback listeners:
one for clients at `base + 2k` (PLAINTEXT, or SSL / SASL_SSL with `--security`) and a CONTROLLER at
`base + 2k + 1` secured the same way (see ops.local_security). The layout lives in the data
dir, so a second start finds the same ids, ports, cluster id and data:

    <data-dir>/cluster.json              cluster id, node ids, ports, overrides, security
    <data-dir>/node-<id>/server.properties
    <data-dir>/node-<id>/data/           log.dirs (meta.properties, __cluster_metadata-0, topics)
    <data-dir>/node-<id>/broker.log      the node's output
    <data-dir>/client.properties         with --security ssl or sasl_ssl (see ops.local_security)

Every node is formatted once with one cluster id (`kcli storage format`), then started; the runner
waits for each to say it is listening, prints the bootstrap string, and on SIGINT/SIGTERM stops
every node with SIGTERM (controlled shutdown), waiting for each. A node that stops on its own (a fatal
fault: a non-zero exit status) stops the others the same way, and the runner fails with its sentence;
a node killed by a signal or by SIGTERM is reported, and the others go on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kcli.config import BrokerConfig
from kcli.errors import KcliError
from kcli.features import release_version
from kcli.storage import CLUSTER_METADATA_DIR, format_storage, random_uuid, read_bootstrap_metadata
from ops.local_security import SECURITY_CHOICES, ClusterSecurity, cluster_security, write_private

CLUSTER_FILE = "cluster.json"
DEFAULT_PORT = 9092
READY_MARK = "kcli broker: listening on"
START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 60.0


class LocalClusterError(KcliError):
    """The cluster cannot be laid out, formatted or started."""


@dataclass(frozen=True, slots=True)
class LocalNode:
    """One process: a broker (`port`), a controller voter (`controller_port`), or both (combined)."""

    node_id: int
    port: int | None
    controller_port: int | None
    directory: Path

    @property
    def roles(self) -> str:
        return ",".join(r for r, p in (("broker", self.port), ("controller", self.controller_port)) if p)

    @property
    def properties(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port or self.controller_port}"


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    cluster_id: str
    nodes: tuple[LocalNode, ...]
    security: str = "plaintext"
    """`--security`: plaintext, ssl or sasl_ssl (see ops.local_security)."""

    @property
    def data_dir(self) -> Path:
        return self.nodes[0].directory.parent

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes if node.port)

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(f"127.0.0.1:{node.controller_port}" for node in self.nodes if node.controller_port)


def plan(
    data_dir: Path,
    brokers: int,
    base_port: int | None,
    overrides: list[str],
    *,
    controllers: int | None = None,
    add_scram: Sequence[str] = (),
    security: str | None = None,
    release: int | None = None,
) -> ClusterLayout:
    """The layout in `data_dir`: the stored one (the same ids and ports), or a new one, formatted.

    With `controllers` 0 (or None) every node is combined (broker and voter); else nodes 1..controllers
    are controller-only voters and the next `brokers` nodes broker-only (Kafka's isolated mode). None
    for a stored cluster is its own number.
    `base_port` None is DEFAULT_PORT for a new cluster and the stored ports for a stored one.
    `add_scram` (`kcli storage format --add-scram` arguments) bootstraps SCRAM credentials into the
    nodes it formats. `security` (plaintext, ssl, sasl_ssl) None is plaintext for a new cluster and
    the stored one for a stored cluster; another one is refused, since it is what the data, the
    certificates and the SCRAM credentials were made with. `release` (`--release-version`'s
    metadata.version level) None formats a new cluster at kcli's default feature levels (Kafka 4.1's);
    a stored cluster formatted at another one is refused: `kcli features` changes a running one.

    A stored cluster's ports and overrides are its nodes' server.properties: a --port or --override
    that differs is honoured while no node has ever started (a failed first start: the layout is
    written again, the cluster id kept), and refused with one sentence once one has (the ports are
    the quorum's voters, the overrides what the data was written with), never silently ignored.
    """
    security = security.lower() if security is not None else None  # Kafka's protocol names are upper case
    if security is not None and security not in SECURITY_CHOICES:
        raise LocalClusterError(f"--security {security!r} is not one of {', '.join(SECURITY_CHOICES)}.")
    stored = data_dir / CLUSTER_FILE
    if stored.exists():
        layout, stored_overrides = _read_layout(data_dir)
        if security is not None and security != layout.security:
            raise LocalClusterError(
                f"{data_dir} holds a cluster made with --security {layout.security}, so kcli cluster start "
                f"cannot make it {security}; start it with --security {layout.security} or use another --data-dir."
            )
        found = sum(1 for n in layout.nodes if n.port)
        if brokers and brokers != found:
            raise LocalClusterError(
                f"{data_dir} holds a cluster of {found} brokers, not {brokers}; "
                "use another --data-dir for a cluster of another shape."
            )
        stored_controllers = sum(1 for n in layout.nodes if not n.port)
        if controllers is not None and controllers != stored_controllers:
            raise LocalClusterError(
                f"{data_dir} holds a cluster of {stored_controllers} controller-only nodes, not {controllers}; "
                "use another --data-dir for a cluster of another shape."
            )
        if release is not None:
            formatted = read_bootstrap_metadata(
                BrokerConfig.load(config_file=layout.nodes[0].properties).metadata_log_dir
            )
            if formatted is not None and formatted.metadata_version != release:
                raise LocalClusterError(
                    f"{data_dir} holds a cluster formatted with --release-version "
                    f"{release_version(formatted.metadata_version)}, so kcli cluster start cannot make it "
                    f"{release_version(release)}; start it without --release-version (`kcli features "
                    "upgrade` moves a running cluster) or use another --data-dir."
                )
        first = layout.nodes[0]
        stored_port = first.port if first.port else (first.controller_port or 1) - 1
        other_port = base_port is not None and base_port != stored_port
        other_overrides = bool(overrides) and overrides != stored_overrides
        if not other_port and not other_overrides:
            return layout
        if _has_started(layout):
            what = (
                f"--port {base_port}: its first client port is {stored_port}"
                if other_port
                else f"--override {' '.join(overrides)}: its nodes were configured with "
                + (
                    f"--override {' '.join(stored_overrides)}"
                    if stored_overrides
                    else ("no --override" if stored_overrides is not None else "overrides it did not record")
                )
            )
            raise LocalClusterError(
                f"{data_dir} holds a cluster that has already run, so kcli cluster start cannot apply {what}; "
                "start it as it is (edit node-N/server.properties to change a node) or use another --data-dir."
            )
        return _new_layout(
            data_dir,
            found,
            stored_port if base_port is None else base_port,
            overrides or stored_overrides or [],
            controllers=stored_controllers,
            cluster_id=layout.cluster_id,
            add_scram=add_scram,
            security=layout.security,
            release=release,
        )
    return _new_layout(
        data_dir,
        brokers,
        DEFAULT_PORT if base_port is None else base_port,
        overrides,
        controllers=controllers or 0,
        add_scram=add_scram,
        security=security or "plaintext",
        release=release,
    )


def _has_started(layout: ClusterLayout) -> bool:
    """Whether any node of the layout ever ran: its metadata log exists (a first start that failed is
    rolled back to none, see `join_quorum`)."""
    for node in layout.nodes:
        try:
            config = BrokerConfig.load(config_file=node.properties)
        except KcliError:
            return True  # unreadable: assume the worst, rewrite nothing
        if (Path(config.metadata_log_dir) / CLUSTER_METADATA_DIR).exists():
            return True
    return False


def _new_layout(
    data_dir: Path,
    brokers: int,
    base_port: int,
    overrides: list[str],
    *,
    controllers: int,
    cluster_id: str | None = None,
    add_scram: Sequence[str] = (),
    security: str = "plaintext",
    release: int | None = None,
) -> ClusterLayout:
    """Lay out, configure and format the nodes (dirs already formatted with `cluster_id` are kept), and
    write client.properties for a secured cluster."""
    if brokers < 1:
        raise LocalClusterError("--brokers must be at least 1.")
    if controllers < 0:
        raise LocalClusterError("--controllers cannot be negative.")
    total = brokers + controllers
    if not 0 < base_port <= 65535 - 2 * total:
        raise LocalClusterError(f"port {base_port} leaves no room for {total} nodes of two ports each.")
    nodes = []
    for k in range(total):
        client = base_port + 2 * k
        is_broker = controllers == 0 or k >= controllers
        is_controller = controllers == 0 or k < controllers
        directory = data_dir / f"node-{k + 1}"
        nodes.append(
            LocalNode(k + 1, client if is_broker else None, client + 1 if is_controller else None, directory)
        )
    layout = ClusterLayout(cluster_id or random_uuid(), tuple(nodes), security)
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes if n.controller_port)
    secured = cluster_security(security, data_dir)
    properties = [node_properties(node, voters, brokers, overrides, secured) for node in nodes]  # all checked
    for node, text in zip(nodes, properties, strict=True):
        node.directory.mkdir(parents=True, exist_ok=True)
        if secured.password:  # admin's password is in the JAAS lines
            write_private(node.properties, text)
        else:
            node.properties.write_text(text)
        config = BrokerConfig.load(config_file=node.properties)
        format_storage(
            config,
            layout.cluster_id,
            metadata_version=release,
            ignore_formatted=cluster_id is not None,
            add_scram=[*secured.add_scram(), *add_scram],
            now_ms=int(time.time() * 1000),
        )
    if security != "plaintext":
        write_private(secured.client_properties, secured.client_properties_text(layout.bootstrap_servers))
    (data_dir / CLUSTER_FILE).write_text(
        json.dumps(
            {
                "cluster_id": layout.cluster_id,
                "nodes": [
                    {"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port}
                    for n in nodes
                ],
                "overrides": list(overrides),
                "security": security,
            },
            indent=2,
        )
        + "\n"
    )
    return layout


def _read_layout(data_dir: Path) -> tuple[ClusterLayout, list[str] | None]:
    """The stored layout and the overrides it was made with (None: a layout stored before they were)."""
    path = data_dir / CLUSTER_FILE
    try:
        data = json.loads(path.read_text())
        nodes = tuple(
            LocalNode(n["node_id"], n["port"], n["controller_port"], data_dir / f"node-{n['node_id']}")
            for n in data["nodes"]
        )
        overrides = data.get("overrides")
        security = str(data.get("security", "plaintext"))
        if security not in SECURITY_CHOICES:
            raise ValueError(f"security {security!r} is not one of {', '.join(SECURITY_CHOICES)}")
        return ClusterLayout(data["cluster_id"], nodes, security), (
            [str(o) for o in overrides] if isinstance(overrides, list) else None
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LocalClusterError(f"cannot read {path}: {str(exc).rstrip('.')}.") from None


def node_properties(
    node: LocalNode, voters: str, brokers: int, overrides: list[str], security: ClusterSecurity | None = None
) -> str:
    """A node's server.properties. The internal topics are replicated as Kafka's defaults replicate
    them (factor 3, transactions' min ISR 2) where the cluster has the brokers for it, else on all.
    The client listener is named after its security protocol (PLAINTEXT, SSL, SASL_SSL)."""
    internal_factor = min(3, brokers)
    protocol = security.protocol if security is not None else "PLAINTEXT"
    listeners = []
    if node.port:
        listeners.append(f"{protocol}://127.0.0.1:{node.port}")
    if node.controller_port:
        listeners.append(f"CONTROLLER://127.0.0.1:{node.controller_port}")
    lines = {
        "process.roles": node.roles,
        "node.id": str(node.node_id),
        "listeners": ",".join(listeners),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"{protocol}:{protocol},CONTROLLER:{protocol}",
        "controller.quorum.voters": voters,
        "log.dirs": str(node.directory / "data"),
        "offsets.topic.replication.factor": str(internal_factor),
        "transaction.state.log.replication.factor": str(internal_factor),
        "transaction.state.log.min.isr": str(min(2, internal_factor)),
        **(security.broker_properties(broker=bool(node.port)) if security is not None else {}),
    }
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise LocalClusterError(f"--override {item!r} is not of the form KEY=VALUE.")
        lines[key.strip()] = value.strip()
    return "".join(f"{key}={value}\n" for key, value in lines.items())


class LocalCluster:
    """The node processes of one layout."""

    def __init__(self, layout: ClusterLayout) -> None:
        self.layout = layout
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self._log_offsets: dict[int, int] = {}  # where each node's broker.log was when it started

    def start(self, on_ready: Callable[[LocalNode], None] = lambda node: None) -> None:
        """Start every node, then wait until each listens; a node that dies stops them all.

        Every port is checked first: a node that cannot listen must not leave the others started
        (and writing to their data dirs) before it fails.
        """
        for node in self.layout.nodes:
            for port in (node.port, node.controller_port):
                if port:
                    _check_port_free(node.node_id, port)
        offsets = self._log_offsets
        for node in self.layout.nodes:
            offsets[node.node_id] = node.log_file.stat().st_size if node.log_file.exists() else 0
            self.processes[node.node_id] = self._spawn(node)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        waiting = list(self.layout.nodes)
        while waiting:
            for node in list(waiting):
                process = self.processes[node.node_id]
                if process.poll() is not None:
                    self.stop()
                    raise LocalClusterError(
                        f"node {node.node_id} did not start: "
                        f"{_last_error(node.log_file, since=offsets[node.node_id])}"
                    )
                if READY_MARK in _tail(node.log_file, since=offsets[node.node_id]):
                    waiting.remove(node)
                    on_ready(node)
            if waiting and time.monotonic() > deadline:
                self.stop()
                ids = ", ".join(str(n.node_id) for n in waiting)
                raise LocalClusterError(f"node(s) {ids} did not start within {START_TIMEOUT_SECONDS:g} s.")
            time.sleep(0.1)

    def _spawn(self, node: LocalNode) -> subprocess.Popen[bytes]:
        log = open(node.log_file, "ab")  # noqa: SIM115 - the child owns it
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "kcli", "broker", "start", "--config", str(node.properties)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the runner, which stops the nodes in order
            )
        finally:
            log.close()

    def exited(self) -> dict[int, int]:
        """Nodes whose process has ended, with their exit codes."""
        return {i: p.returncode for i, p in self.processes.items() if p.poll() is not None}

    def failure(self) -> LocalClusterError | None:
        """A node that stopped on its own (a non-zero exit status: a fatal fault, such as a quorum that
        refused it, or a crash), named with its last `kcli:` sentence; None while there is none. A node
        killed by a signal, or stopped by SIGTERM (status 0), was stopped by someone, not failed."""
        for node in self.layout.nodes:
            process = self.processes.get(node.node_id)
            if process is not None and process.poll() is not None and process.returncode > 0:
                reason = _last_error(node.log_file, since=self._log_offsets.get(node.node_id, 0))
                return LocalClusterError(
                    f"node {node.node_id} stopped with exit status {process.returncode}: {reason}"
                )
        return None

    def stop(self) -> None:
        """SIGTERM every node (controlled shutdown), then wait; SIGKILL what outlives the timeout."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in self.processes.values():
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()


def _check_port_free(node_id: int, port: int) -> None:
    """Bind the port as the node's listener will (SO_REUSEADDR, as asyncio does), then let it go."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise LocalClusterError(
                f"node {node_id} cannot listen on 127.0.0.1:{port}: {reason}; no node was started."
            ) from None


def _tail(path: Path, size: int = 65536, *, since: int = 0) -> str:
    """The last `size` bytes of the file written after offset `since` (output of earlier runs left out)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - size, since))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_error(path: Path, *, since: int = 0) -> str:
    lines = [line for line in _tail(path, since=since).splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("kcli:"):
            return line.removeprefix("kcli:").strip()
    return lines[-1].strip() if lines else f"no output (see {path})."
