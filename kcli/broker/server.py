"""The Broker's lifecycle: start (log dirs, listeners, the node, registration), serve, and shut down.

The connections themselves are the network layer's (`kcli.broker.network`, Kafka's SocketServer);
each request frame goes through `kcli.broker.apis.dispatch` to its handler. This module decides the
order of things: which listener serves when, controlled shutdown before clients leave, the controller
listener last, and what a fatal fault of the Raft client stops.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import signal
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from kcli.broker.apis import build_controller_registry, build_registry
from kcli.broker.apis.context import BrokerState
from kcli.broker.apis.dispatch import handle_request
from kcli.broker.apis.registry import ApiRegistry
from kcli.broker.network import SocketServer
from kcli.broker.node import ControllerNode, Node, fatal_error_sentence
from kcli.config import BrokerConfig, Listener
from kcli.dirlock import release
from kcli.errors import KcliError
from kcli.storage import ensure_meta_properties

log = logging.getLogger("kcli.broker")

SHUTDOWN_GRACE_SECONDS = 10.0
"""How long in-flight requests may take to finish after SIGTERM before their connections are cut."""
FATAL_GRACE_SECONDS = 1.0
"""After a fatal fault, how long a quorum request in flight (a leader's parked Fetch) may take to finish."""


async def serve(
    config: BrokerConfig, on_ready: Callable[[str, int], None], *, release: int | None = None
) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut down gracefully; or until a fatal fault.

    `on_ready(host, port)` is called once the socket is bound, with the real port when port 0 was
    asked for. Start-up problems (port in use, unusable data dir) raise KcliError; so does a fatal
    fault after start-up (the Raft client stopped for good), once the node has shut down. `release` is
    the metadata.version level a node formatted on the spot starts at (None: kcli's default).
    """
    keep_freed_memory()
    broker = Broker(config, release=release)
    host, port = await broker.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    try:
        on_ready(host, port)
        await broker.wait_for_stop_request()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await broker.shutdown()
    broker.raise_fatal_fault()


def keep_freed_memory() -> None:
    """Ask glibc's malloc to keep freed memory for reuse instead of handing it back to the kernel.

    Every produce request is copied out of the receive buffer and its records out of the request: a few
    MB a request for clients that send 1 MB batches. With glibc's defaults that memory goes back to the
    kernel when it is freed (blocks above the mmap threshold, or a heap top above the trim threshold), so
    the next request page-faults all of it in again, zeroed; that was a third of the broker's CPU for
    kcat's 1 MB batches. Requests up to MMAP_THRESHOLD now come from the heap, and up to
    TRIM_THRESHOLD of free heap is kept. Elsewhere than glibc this does nothing.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 16 << 20
_TRIM_THRESHOLD = 32 << 20


class Broker:
    """One node: its listeners (through the `SocketServer`), the shared `BrokerState`, the node."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        registry: ApiRegistry | None = None,
        cluster_id: str | None = None,
        release: int | None = None,
    ) -> None:
        self.config = config
        self.registry = registry or build_registry()
        self.cluster_id = cluster_id
        self.release = release
        """The --release-version of a node formatted on the spot (ensure_meta_properties)."""
        self.state: BrokerState | None = None
        self._server: asyncio.Server | None = None
        """The first client listener's server (among `_servers`)."""
        self._servers: list[asyncio.Server] = []
        """Every client listener's server, in the order of `listeners`."""
        self._controller_server: asyncio.Server | None = None
        self.network = SocketServer(config)
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self.fatal_fault: KcliError | None = None
        """What stopped this node's Raft client after start-up (see `_handle_fatal_fault`)."""
        self._failed = asyncio.Event()
        self._periodic: asyncio.Task[None] | None = None
        self.node: Node | ControllerNode | None = None
        self._locks: list[Path] = []
        """The `.lock` files of this node's log dirs and metadata dir, held from start to shutdown."""

    async def start(self) -> tuple[str, int]:
        """Prepare the log dirs, join the metadata quorum, register, and serve; the bound (host, port).

        The controller listener (when there is one) serves from the start: the quorum needs this
        node's votes and Fetches answered before the node can catch up and serve clients.
        """
        try:
            cluster_id = ensure_meta_properties(
                self.config, self.cluster_id, locks=self._locks, release=self.release
            )
            if not self.config.is_broker:
                return await self._start_controller_only(cluster_id)
            return await self._start_broker(cluster_id)
        except BaseException:
            release(self._locks)
            self._locks.clear()
            raise

    async def _start_broker(self, cluster_id: str) -> tuple[str, int]:
        """A broker (combined or broker-only): its listeners, the node, registration, then serving.

        Every client listener is bound (and its TLS settings read) before anything else; the first is
        the one `serve` reports, the others are logged."""
        listeners = self.config.client_listeners
        controller_listener = self.config.controller_listener
        network = self.network
        for each in listeners:
            try:
                self._servers.append(await network.bind(each))
            except BaseException:
                for server in self._servers:
                    server.close()
                raise
        self._server = self._servers[0]
        try:
            if controller_listener is not None:
                network.controller_listener_name = controller_listener.name
                self._controller_server = await network.bind(controller_listener)
            self.node = node = Node(self.config, cluster_id)
            node.raft.fatal_fault_handler = self._handle_fatal_fault
            node.dynamic_configs.on_keystore_change(network.reload_keystores)
            self.state = state = BrokerState(
                self.config,
                self.registry,
                node.loader.image,
                auto_create_topics=node.auto_create_topics,
                node=node,
                controller_registry=build_controller_registry() if controller_listener is not None else None,
                controller_listener_name=controller_listener.name
                if controller_listener is not None
                else None,
                forward_to_controller=node.channel.forward,
            )
            network.handle = partial(handle_request, state)
            # Kafka's BrokerServer: SCRAM logins read the credentials of the image the broker publishes
            network.scram_credentials = state.scram_credential
            network.client_quotas = lambda: state.image.client_quotas  # per-IP connection rates
            if self._controller_server is not None:
                await self._controller_server.start_serving()
            await node.start()
        except BaseException:
            for server in self._servers:
                server.close()
            if self._controller_server is not None:
                self._controller_server.close()
            raise
        state.image = node.image
        node.loader.install_publisher(
            state
        )  # last: handlers see an image once storage and coordinators have it
        bound_host, bound_port = self._server.sockets[0].getsockname()[:2]
        advertised = [
            self.config.advertised_listener(network.bound_port(each.name), name=each.name)
            for each in listeners
        ]
        # Registration also starts the coordinators (loading what this node leads) before requests are served.
        await self._unless_fatal(node.register(advertised, self.config["broker.rack"]))  # type: ignore[arg-type]
        self._periodic = asyncio.create_task(node.run_periodic())
        for server in self._servers:
            await server.start_serving()
        network.start_idle_sweeper()
        for key in self.config.ignored_keys():
            log.info("configuration %s is accepted for compatibility and not used by kcli", key)
        serving = [
            Listener(each.name, *server.sockets[0].getsockname()[:2])
            for each, server in zip(listeners, self._servers, strict=True)
        ]
        log.info(
            "node %d of cluster %s serving %s, advertised as %s, log dirs %s",
            self.config.node_id,
            cluster_id,
            ",".join(f"{x} ({self.config.protocol_of(x.name)})" for x in serving),
            ",".join(str(x) for x in advertised),
            ", ".join(self.config.log_dirs),
        )
        return bound_host, bound_port

    async def _start_controller_only(self, cluster_id: str) -> tuple[str, int]:
        """process.roles=controller: the controller listener alone, serving the quorum and the brokers."""
        listener = self.config.controller_listener
        if listener is None:
            raise KcliError("a controller needs a listener named in controller.listener.names.")
        self._controller_server = server = await self.network.bind(listener)
        try:
            self.node = node = ControllerNode(self.config, cluster_id)
            node.raft.fatal_fault_handler = self._handle_fatal_fault
            # Kafka's ControllerServer registers itself for dynamic config changes: a renewed keystore
            # of the controller listener serves its new connections
            node.dynamic_configs.on_keystore_change(self.network.reload_keystores)
            self.state = state = BrokerState(
                self.config,
                self.registry,
                node.image,
                node=node,  # type: ignore[arg-type]
                controller_registry=build_controller_registry(),
                controller_listener_name=listener.name,
            )
            self.network.handle = partial(handle_request, state)
            # Kafka's ControllerServer keeps its own credential cache from the controller's image; kcli
            # serves a controller listener PLAINTEXT only (BrokerConfig), so no SCRAM login reaches it,
            # yet the lookup reads the image the loader holds now, never a stale one
            self.network.scram_credentials = lambda mechanism, user: node.image.scram_credential(
                mechanism, user
            )
            await server.start_serving()
            await node.start()
        except BaseException:
            server.close()
            raise
        host, port = server.sockets[0].getsockname()[:2]
        log.info("controller %d of cluster %s serving %s", self.config.node_id, cluster_id, listener)
        return host, port

    def request_stop(self) -> None:
        self._stop_requested.set()

    def _handle_fatal_fault(self, exc: Exception) -> None:
        """The Raft client stopped for good: the node has left the metadata quorum, and must not go on
        serving clients metadata it no longer follows. Kafka's SharedServer gives KafkaRaftManager a
        ProcessTerminatingFaultHandler, which halts the JVM; this node shuts down instead, as far as it
        can without the quorum (`shutdown`), and `serve` raises the sentence. A fault before the node
        has caught up is start-up's (`Node.start` raises it); after, this stops the node."""
        if self.fatal_fault is not None or self.node is None:
            return
        self.fatal_fault = fatal_error_sentence(self.node.raft, exc)
        log.critical("stopping node %d: %s", self.config.node_id, self.fatal_fault)
        self._failed.set()
        self._stop_requested.set()

    def raise_fatal_fault(self) -> None:
        """After `shutdown`: the fatal fault that stopped the node, as its one sentence, if any."""
        if self.fatal_fault is not None:
            raise self.fatal_fault

    async def _unless_fatal(self, step: Coroutine[Any, Any, None]) -> None:
        """A start-up step that needs the quorum (registration waits for the controller to unfence
        this broker): cut short by a fatal fault, after which the node shuts down and this raises."""
        task = asyncio.ensure_future(step)
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait((task, failed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            failed.cancel()
        if self.fatal_fault is None:
            await task
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self.shutdown()
        self.raise_fatal_fault()

    async def wait_for_stop_request(self) -> None:
        await self._stop_requested.wait()

    async def shutdown(self, grace: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Controlled shutdown first (leaderships move while clients are still served), then stop
        accepting clients, let in-flight requests finish and answer, close their connections; then
        stop the node, and only then the controller listener.

        As in Kafka's combined mode, the controller keeps serving the quorum (Fetch, Vote, heartbeats)
        while this node's broker goes through its controlled shutdown: when this node leads the
        quorum, the record that fences its broker must still reach a majority of the voters.
        """
        if self._stopping:
            return
        self._stopping = True
        network = self.network
        network.stop_accepting()
        fatal = self.fatal_fault is not None
        log.info("shutting down: %d connection(s) open", len(network.connections))
        if fatal:
            # The node has left the quorum: nothing to ask it (no controlled shutdown), nothing to answer
            # it (the controller listener closes first: a voter that stopped must not vote or serve
            # Fetches while its logs are closed), and clients leave as on any shutdown.
            network.stop_accepting(controller=True)
            if self._controller_server is not None:
                self._controller_server.close()
            quorum = network.on_listener(network.controller_listener_name)
            await network.close_connections(quorum, FATAL_GRACE_SECONDS)
        elif isinstance(self.node, Node):
            await self.node.controlled_shutdown()
        for server in self._servers:
            server.close()
        network.stop_idle_sweeper()
        if isinstance(
            self.node, Node
        ):  # parked JoinGroups are answered NOT_COORDINATOR now, not after the grace
            self.node.groups.shutdown()
        clients = network.on_listener(network.controller_listener_name, besides=True)
        await network.close_connections(clients, grace)
        for server in self._servers:
            await server.wait_closed()
        if self._periodic is not None:
            self._periodic.cancel()
        if self.node is not None:
            await self.node.shutdown(controlled=not fatal)
        network.stop_accepting(controller=True)
        if self._controller_server is not None:
            self._controller_server.close()
            await network.close_connections(list(network.connections), grace)
        release(self._locks)  # last: the logs are closed, another process may open the dirs now
        self._locks.clear()
        log.info("shutdown complete")
