"""Kafka's SocketServer: the listeners, their binding and TLS settings, accepting and closing connections.

Kafka's SocketServer has an Acceptor per listener and Processors that own the connections; here each
listener is an asyncio server, each connection a `kcli.broker.connection.Connection` (Kafka's
KafkaChannel with its Processor's reads and sends), and a TLS listener's connections start TLS through
`kcli.broker.transport` (Kafka's SslTransportLayer).

This module knows frames, not APIs: every frame goes to the `RequestHandler` the broker installs
(`kcli.broker.apis.dispatch.handle_request`), and what comes back is written. Nothing a client sends
can take down another connection or the process.

- Transport: a listener whose protocol is SSL or SASL_SSL has its context (`kcli.security.tls.
  server_context` from the listener's `ssl.*` settings) and its principal mapping made when it is bound;
  a renewed keystore replaces them for new connections (`reload_keystores`).
- Authentication state: on a SASL listener each connection gets its own `SaslServerAuthenticator`
  (`kcli.broker.authenticator`) from the listener's settings read here (`sasl_listeners`).
- Limits: a new connection is accepted through `kcli.broker.connection_quotas` (Kafka's ConnectionQuotas:
  max.connections, per IP, the creation rate); until then it is not read. With queued.max.request.bytes
  set, a connection about to read a new request waits while the request bytes buffered across
  connections reach it (Kafka's memory pool). A frame still incomplete after connections.max.idle.ms
  closes its connection however it trickles (`_close_idle_connections`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kcli.broker.authenticator import SaslListener
from kcli.broker.connection import Connection, RequestHandler
from kcli.broker.connection_quotas import ConnectionQuotas, TooManyConnectionsError
from kcli.broker.dynamic_keystore import listener_ssl_settings
from kcli.broker.transport import TlsServer
from kcli.config import BrokerConfig, ConfigError, Listener
from kcli.errors import KcliError
from kcli.security import tls
from kcli.security.principal import PrincipalMappingError, SslPrincipalMapper
from kcli.security.sasl.scram import CredentialLookup

log = logging.getLogger("kcli.broker")


def _no_credentials(mechanism: str, user: str) -> None:
    """No SCRAM user before the broker installs its lookup."""
    return None


class SocketServer:
    """The listeners' connections, the handler they hand frames to, and their closing.

    The broker binds its listeners through `bind`, installs `handle` once its handlers can answer,
    and decides when each listener stops accepting (`stop_accepting`): the controller listener goes
    on serving the quorum while the broker's clients are already turned away.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.max_request = int(config["socket.request.max.bytes"])  # type: ignore[call-overload]
        self.handle: RequestHandler | None = None
        """Installed by the broker before any listener serves."""
        self.connections: set[Connection] = set()
        self.controller_listener_name: str | None = None
        """Set by a broker that also has a controller listener: it stops accepting last."""
        self.sasl_listeners = {
            listener.name: SaslListener.from_config(config, listener.name)
            for listener in config["listeners"]  # type: ignore[attr-defined]
            if config.protocol_of(listener.name) in ("SASL_PLAINTEXT", "SASL_SSL")
        }
        """The SASL listeners' settings, by listener name."""
        self.scram_credentials: CredentialLookup = _no_credentials
        """(mechanism, user) -> ScramCredential | None: where SCRAM looks users up (see `authenticator`).
        Installed by the broker with `handle`: its metadata image's credentials."""
        self.client_quotas: Callable[[], Mapping[Any, Mapping[str, float]]] = dict
        """The metadata image's client quotas (per-IP connection rates); installed by the broker."""
        self._next_connection = 0
        self._stopping = False
        self._controller_stopping = False  # the controller listener serves until the node has stopped
        self._sweeper: asyncio.Task[None] | None = None
        self.bound: dict[str, asyncio.Server] = {}
        """Each bound listener's server, by listener name."""
        self._quotas: dict[bool, ConnectionQuotas] = {}
        """The connection counts and limits: the broker's listeners', and the controller listener's own."""
        self._accepting: dict[str, deque[Connection]] = {}
        """Connections made but not accepted yet (a connection limit or the creation rate), by listener."""
        self._accept_timers: dict[str, asyncio.TimerHandle] = {}
        self.queued_max_request_bytes = int(config["queued.max.request.bytes"])  # type: ignore[call-overload]
        """Kafka's memory pool for requests being read; <= 0: none (MemoryPool.NONE)."""
        self.queued_bytes = 0
        """Request bytes in the receive buffers of the connections that count towards the pool."""
        self._memory_waiters: list[Connection] = []
        self.tls_servers: dict[str, TlsServer] = {}
        """Each TLS listener's context and principal mapping, replaced when its keystore is renewed."""

    async def bind(self, listener: Listener) -> asyncio.Server:
        """Bind `listener` now (a busy port fails before any data is touched); serving starts later.

        An SSL listener's keystore and truststore are read here: a bad one stops start-up with its
        sentence. A PLAINTEXT listener on an address other hosts can reach is logged once."""
        protocol = self.config.protocol_of(listener.name)
        tls_server: TlsServer | None = None
        if protocol in ("SSL", "SASL_SSL"):  # SASL_SSL: TLS first, then the SASL authenticator
            settings = self.config.ssl_settings(listener.name)
            try:
                context = tls.server_context(settings, listener=listener.name)
                mapper = SslPrincipalMapper(settings.get("ssl.principal.mapping.rules", "DEFAULT"))
            except (tls.TlsError, PrincipalMappingError) as exc:  # unusable stores or rules: configuration
                raise ConfigError(str(exc)) from None
            tls_server = TlsServer(context, mapper)
        elif protocol == "PLAINTEXT" and not _is_loopback(listener.host):
            log.warning(
                "listener %s is PLAINTEXT on an address other hosts can reach: its traffic is not "
                "encrypted and its clients are not authenticated",
                listener,
            )
        if tls_server is not None:
            self.tls_servers[listener.name] = tls_server
        server = await _bind(listener, self.config, lambda: self.new_connection(listener.name))
        self.bound[listener.name] = server
        return server

    def new_connection(self, listener_name: str) -> Connection:
        self._next_connection += 1
        return Connection(self, self._next_connection, listener_name, self.tls_servers.get(listener_name))

    def reload_keystores(self, dynamic: Mapping[str, str]) -> None:
        """Each TLS listener's context made again with this broker's dynamic keystore configs (checked
        before they were stored): new connections get the new certificate, open ones keep theirs. A
        keystore that no longer loads (its file changed since) keeps the listener's current context."""
        for name, current in list(self.tls_servers.items()):
            settings = listener_ssl_settings(self.config, name, dynamic)
            try:
                context = tls.server_context(settings, listener=name)
                cert = tls.keystore_certificate(settings)
            except tls.TlsError as exc:
                log.error("listener %s keeps its keystore: the dynamic one cannot be loaded: %s", name, exc)
                continue
            self.tls_servers[name] = TlsServer(context, current.mapper)
            serial = f"{cert.serial_number:x}" if cert is not None else "none"
            log.info("listener %s: keystore loaded (certificate serial %s) for new connections", name, serial)

    def bound_port(self, listener_name: str) -> int:
        """The port a bound listener got (the one asked for, or the OS's pick for port 0)."""
        return int(self.bound[listener_name].sockets[0].getsockname()[1])

    def refuses(self, listener_name: str) -> bool:
        """Whether a new connection on this listener is closed at once (shutting down)."""
        if listener_name == self.controller_listener_name:
            return self._controller_stopping
        return self._stopping

    def stop_accepting(self, *, controller: bool = False) -> None:
        """Turn away new client connections (or, with `controller`, new controller-listener ones)."""
        if controller:
            self._controller_stopping = True
        else:
            self._stopping = True
        for listener_name in list(self._accepting):
            self._accept_waiting(listener_name)  # the waiting ones are refused now

    # --- ConnectionQuotas: accepting a connection -----------------------------------------------------

    def connection_quotas(self, listener_name: str) -> ConnectionQuotas:
        """The counts `listener_name` belongs to: the controller listener has its own (Kafka's
        controller runs a SocketServer of its own), the broker's listeners share theirs."""
        controller = listener_name == self.controller_listener_name
        quotas = self._quotas.get(controller)
        if quotas is None:
            names = [listener.name for listener in self.config["listeners"]]  # type: ignore[attr-defined]
            if controller:
                names, inter_broker = [listener_name], None
            else:
                names = [name for name in names if name != self.controller_listener_name]
                try:
                    inter_broker = self.config.inter_broker_listener_name
                except (IndexError, ConfigError):  # a controller-only node has no broker listener
                    inter_broker = None
            quotas = self._quotas[controller] = ConnectionQuotas(
                self.config, names, inter_broker, lambda: self.client_quotas()
            )
        return quotas

    def accept(self, conn: Connection) -> None:
        """Accept `conn` now, or once its listener is under its limits (Kafka's acceptor blocks there;
        here the connection waits, not reading, in the order connections came, at most the listen
        backlog of them)."""
        waiting = self._accepting.setdefault(conn.listener_name, deque())
        backlog = int(self.config["socket.listen.backlog.size"])  # type: ignore[call-overload]
        if len(waiting) >= backlog:
            log.debug(
                "closing connection from %s: %d connections wait to be accepted", conn.info.peer, backlog
            )
            conn.transport.close()  # type: ignore[union-attr]
            return
        waiting.append(conn)
        self._accept_waiting(conn.listener_name)

    def _accept_waiting(self, listener_name: str) -> None:
        """Kafka's ConnectionQuotas.inc for the connections waiting on `listener_name`, oldest first:
        the creation rate's throttle, then a free slot, then the per-IP count."""
        timer = self._accept_timers.pop(listener_name, None)
        if timer is not None:
            timer.cancel()
        waiting = self._accepting.get(listener_name)
        if not waiting:
            return
        quotas = self.connection_quotas(listener_name)
        loop = asyncio.get_running_loop()
        while waiting:
            conn = waiting[0]
            if conn.gone() or self.refuses(listener_name):
                waiting.popleft()
                conn.abort()
                continue
            now = loop.time()
            if conn.accept_at is None:  # the acceptor reaches it: its creation is recorded now
                throttle_ms = quotas.record_connection_and_get_throttle_time_ms(listener_name, now * 1000)
                conn.accept_at = now + throttle_ms / 1000
            if now < conn.accept_at:
                self._accept_timers[listener_name] = loop.call_at(
                    conn.accept_at, self._accept_waiting, listener_name
                )
                return
            if not quotas.connection_slot_available(listener_name):
                # a closing connection tries again at once; a raised limit (dynamic) within a second
                self._accept_timers[listener_name] = loop.call_later(1.0, self._accept_waiting, listener_name)
                return
            waiting.popleft()
            throttle_ms = quotas.record_ip_connection_and_get_throttle_time_ms(
                listener_name, conn.address, now * 1000
            )
            if throttle_ms:  # over its address's connection_creation_rate: closed once the throttle ends
                log.debug("Delaying closing of connection from %s for %d ms", conn.address, throttle_ms)
                loop.call_later(throttle_ms / 1000, conn.abort)
                continue
            conn.counted = True
            try:
                quotas.inc(listener_name, conn.address)
            except TooManyConnectionsError as exc:
                log.info("Rejected connection from %s, %s.", conn.address, exc)
                conn.abort()
                continue
            conn.accepted()
            self._close_excess_connections(quotas)

    def _close_excess_connections(self, quotas: ConnectionQuotas) -> None:
        """Kafka's closeExcessConnections: over max.connections (the protected inter-broker listener went
        over, or the limit was lowered), the least recently active connection of another listener goes."""
        if quotas.total_count <= quotas.broker_max_connections():
            return
        candidates = [
            conn
            for conn in self.connections
            if conn.counted
            and not conn.stopping()
            and conn.listener_name in quotas.listener_counts
            and quotas.max_connections_exceeded(conn.listener_name)
        ]
        if candidates:
            conn = min(candidates, key=lambda c: c.last_active)
            log.info("closing connection from %s: the broker is over max.connections", conn.info.peer)
            conn.stop()

    def connection_closed(self, conn: Connection) -> None:
        """A counted connection is gone: its slot frees, and connections waiting may be accepted."""
        quotas = self.connection_quotas(conn.listener_name)
        quotas.dec(conn.listener_name, conn.address)
        for listener_name in [name for name in self._accepting if name in quotas.listener_counts]:
            self._accept_waiting(listener_name)

    # --- the memory pool (queued.max.request.bytes) -------------------------------------------------

    def memory_exhausted(self) -> bool:
        """Kafka's MemoryPool.isOutOfMemory: no request bytes left to read a new request into."""
        return 0 < self.queued_max_request_bytes <= self.queued_bytes

    def pool_changed(self, delta: int) -> None:
        self.queued_bytes += delta
        if delta < 0 and self._memory_waiters and not self.memory_exhausted():
            waiters, self._memory_waiters = self._memory_waiters, []
            loop = asyncio.get_running_loop()
            for conn in waiters:
                loop.call_soon(conn.memory_available)

    def wait_for_memory(self, conn: Connection) -> None:
        self._memory_waiters.append(conn)

    def on_listener(self, listener_name: str | None, *, besides: bool = False) -> list[Connection]:
        """The open connections on `listener_name` (or, with `besides`, on every other listener)."""
        return [c for c in self.connections if (c.listener_name == listener_name) != besides]

    def start_idle_sweeper(self) -> None:
        """Kafka's connections.max.idle.ms, when positive."""
        idle_ms = int(self.config["connections.max.idle.ms"])  # type: ignore[call-overload]
        if idle_ms > 0:
            self._sweeper = asyncio.create_task(self._close_idle_connections(idle_ms / 1000))

    def stop_idle_sweeper(self) -> None:
        """Once the clients' listener is closed, connections leave by the shutdown's grace instead."""
        if self._sweeper is not None:
            self._sweeper.cancel()

    async def close_connections(self, connections: list[Connection], grace: float) -> None:
        """Let each connection's request in flight finish (up to `grace`), then close it."""
        for conn in connections:
            conn.stop()
        if connections:
            _, pending = await asyncio.wait([conn.closed for conn in connections], timeout=grace)
            if pending:
                log.warning("%d request(s) still running after %.0f s were abandoned", len(pending), grace)
                for conn in connections:
                    conn.abort()
                await asyncio.wait(pending, timeout=1.0)

    async def _close_idle_connections(self, idle_seconds: float) -> None:
        """Kafka's connections.max.idle.ms: close connections with no complete request for that long.

        Kafka's Selector counts from a connection's last read or write of any size; here the time runs
        from the last whole request (or answer), so a client trickling a frame's bytes, a few at a time,
        is closed all the same once the frame has taken longer than that."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle_seconds / 2, 30.0))
            now = loop.time()
            for conn in list(self.connections):
                if not conn.busy and now - conn.last_active > idle_seconds:
                    if conn.buffer:
                        log.info(
                            "closing connection from %s: %d bytes of a request, none complete for more than %s s",
                            conn.info.peer,
                            len(conn.buffer),
                            f"{idle_seconds:g}",
                        )
                    else:
                        log.info(
                            "closing connection from %s: idle for more than %s s",
                            conn.info.peer,
                            f"{idle_seconds:g}",
                        )
                    conn.buffer.clear()
                    conn.account()
                    conn.stop()
            for quotas in list(self._quotas.values()):
                self._close_excess_connections(quotas)


async def _bind(
    listener: Listener, config: BrokerConfig, new_connection: Callable[[], asyncio.Protocol]
) -> asyncio.Server:
    host = listener.host or None  # an empty host binds every interface, as in Kafka
    backlog = int(config["socket.listen.backlog.size"])  # type: ignore[call-overload]
    where = f"{listener.host or '0.0.0.0'}:{listener.port}"
    try:
        return await asyncio.get_running_loop().create_server(
            new_connection,
            host,
            listener.port,
            backlog=backlog,
            reuse_address=True,
            start_serving=False,  # bound now (a busy port fails before any data is touched), served once ready
        )
    except OSError as exc:
        # asyncio wraps the bind error's text; the errno alone gives the plain reason.
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise KcliError(f"cannot listen on {where}: {reason.lower()}.") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # an unset host binds every interface; a name may resolve anywhere
