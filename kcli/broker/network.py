"""Kafka's SocketServer: listeners, connections, size-prefixed frames, and the send paths.

Per connection, requests are read and answered strictly one at a time, in order, as Kafka's
SocketServer does by muting a channel while its request is in flight; pipelining clients
(librdkafka) just find their next request waiting in the socket buffer, and the answers to requests
handled back to back leave in one write. A Fetch answer's records leave with os.sendfile (zero copy),
corked with its header and trailing bytes.

This module knows frames, not APIs: every frame goes to the `RequestHandler` the broker installs
(`kcli.broker.apis.dispatch.handle_request`), and what comes back is written. A negative frame size or
one above `socket.request.max.bytes` closes the connection; so does an `InvalidRequestError` from the
handler. Nothing a client sends can take down another connection or the process.

Secure connections (Kafka's SslTransportLayer and SaslServerAuthenticator):
- Transport: on a listener whose protocol is SSL or SASL_SSL each connection starts TLS itself (as
  `loop.start_tls` does, with the context `kcli.security.tls.server_context` makes from the listener's
  `ssl.*` settings) and serves through the TLS transport once the handshake is done. A failed handshake
  (a plaintext client, a refused certificate) sends OpenSSL's alert, as Kafka does, so the client can
  name the reason, and closes the connection with one INFO line, as Kafka's "Failed authentication with
  ... (SSL handshake failed)"; nothing else notices it. `Connection` speaks to a transport only through
  `transport.write` and, for file regions, `_sendfile_now` / `loop.sendfile` on the plain socket, in
  `_send_framed_now` and `_send_parts` alone. A TLS transport still reports the TCP socket underneath,
  which must never see a sendfile: under TLS a file region is read in large blocks and written through
  the transport (`_copy_now`; Kafka, too, copies under TLS), and corking does not apply.
- Authentication state: each connection takes its `handle` when it is made. On a SASL listener a
  per-connection `SaslServerAuthenticator` (`kcli.broker.authenticator`) stands in that place,
  answering ApiVersions and the SASL requests and refusing the rest, then hands the frames to the
  broker's handler; until then frames are bounded by `sasl.server.max.receive.size`.
- Limits: a new connection is accepted through `kcli.broker.connection_quotas` (Kafka's ConnectionQuotas:
  max.connections, per IP, the creation rate); until then it is not read. With queued.max.request.bytes
  set, a connection about to read a new request waits while the request bytes buffered across
  connections reach it (Kafka's memory pool). A frame's buffer grows as its bytes arrive, never from
  the size prefix alone, and a frame still incomplete after connections.max.idle.ms closes its
  connection however it trickles (`_close_idle_connections`).
- Principal: `ConnectionInfo.principal`, which every handler receives, is `User:ANONYMOUS` unless the
  client presented a certificate, whose subject `ssl.principal.mapping.rules` maps to the name
  (`kcli.security.principal`), or SASL authenticated a user (`User:<name>`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import ssl
import struct
from asyncio import sslproto
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, NamedTuple

from kcli.broker.apis.context import ConnectionInfo, FileRegion
from kcli.broker.apis.dispatch import Answer, FramedSend
from kcli.broker.authenticator import SaslListener, SaslServerAuthenticator
from kcli.broker.connection_quotas import ConnectionQuotas, TooManyConnectionsError, normal_address
from kcli.broker.dynamic_keystore import listener_ssl_settings
from kcli.config import BrokerConfig, ConfigError, Listener
from kcli.errors import KcliError
from kcli.protocol.request_header import InvalidRequestError
from kcli.protocol.response_header import response_header
from kcli.security import tls
from kcli.security.principal import PrincipalMappingError, SslPrincipalMapper
from kcli.security.sasl.scram import CredentialLookup

log = logging.getLogger("kcli.broker")

RequestHandler = Callable[[ConnectionInfo, bytes], Coroutine[Any, Any, Answer]]
"""One request frame (after its size prefix) from a connection -> its answer (`apis.dispatch`)."""


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
        self.tls_servers: dict[str, _TlsServer] = {}
        """Each TLS listener's context and principal mapping, replaced when its keystore is renewed."""

    async def bind(self, listener: Listener) -> asyncio.Server:
        """Bind `listener` now (a busy port fails before any data is touched); serving starts later.

        An SSL listener's keystore and truststore are read here: a bad one stops start-up with its
        sentence. A PLAINTEXT listener on an address other hosts can reach is logged once."""
        protocol = self.config.protocol_of(listener.name)
        tls_server: _TlsServer | None = None
        if protocol in ("SSL", "SASL_SSL"):  # SASL_SSL: TLS first, then the SASL authenticator
            settings = self.config.ssl_settings(listener.name)
            try:
                context = tls.server_context(settings, listener=listener.name)
                mapper = SslPrincipalMapper(settings.get("ssl.principal.mapping.rules", "DEFAULT"))
            except (tls.TlsError, PrincipalMappingError) as exc:  # unusable stores or rules: configuration
                raise ConfigError(str(exc)) from None
            tls_server = _TlsServer(context, mapper)
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
            self.tls_servers[name] = _TlsServer(context, current.mapper)
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


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames are cut from the receive buffer and answered in order, one at a time.

    Handlers start right in the read callback (`buffer_updated`). Most answer without waiting (a Produce
    to a local log, Metadata, offset commits): no task is made, and the answers to every request that
    arrived together leave in one write, which wakes a pipelining client once. A handler that has to wait
    (a long-poll Fetch, a parked JoinGroup) or a response with file regions to send goes on in a task,
    and the connection is muted until it has answered, as Kafka's SocketServer mutes a channel while its
    request is in flight. Measured on 16 KiB produce requests, against a reader task on asyncio streams:
    ~12% less broker CPU per request (`tests/bench/bench_replay.py --only raw`).
    """

    READ_AHEAD = 1 << 20
    """Bytes of further requests buffered while a request is in flight, before reading pauses."""

    def __init__(
        self, server: SocketServer, number: int, listener_name: str, tls_server: _TlsServer | None = None
    ) -> None:
        assert server.handle is not None, "a listener serves once the broker has installed its handler"
        self.server = server
        self.handle: RequestHandler = server.handle
        """Where this connection's frames go: the broker's handler, or its SASL authenticator (module doc)."""
        self.buffer = ReceiveBuffer(server.max_request)
        self.max_frame_key = "socket.request.max.bytes"
        sasl = server.sasl_listeners.get(listener_name)
        if sasl is not None:
            self.handle = SaslServerAuthenticator(
                self, sasl, lambda: server.scram_credentials, server.handle
            ).handle
        self.number = number
        self.listener_name = listener_name
        self.loop = asyncio.get_running_loop()
        self.info = ConnectionInfo(f"unknown-{number}", "unknown", listener=listener_name)
        self.transport: asyncio.Transport | None = None
        self.tls_server = tls_server
        """The listener's TLS context and principal mapping; None on a PLAINTEXT listener."""
        self.tls = False
        """Whether the transport is TLS: file regions are then copied through it, never sendfile'd."""
        self._handshaking = False
        """TLS is being started: what arrives meanwhile waits in the buffer, nothing is written."""
        self._handshake: asyncio.Task[None] | None = None
        self.held: list[bytes] = []
        self.current: asyncio.Task[object] | None = None
        self.busy = False
        self.last_active = self.loop.time()
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self._stopping = False
        self._eof = False
        self._lost = False
        self._write_paused = False
        self._read_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._unmute_at = 0.0
        self.address = "unknown"
        """The peer's IP address, as ConnectionQuotas counts it."""
        self.accept_at: float | None = None
        """When the creation rate lets this connection be accepted (None: not reached yet)."""
        self.counted = False
        """Whether ConnectionQuotas counts this connection (its close then frees the slot)."""
        self._pooled = 0
        """The buffered bytes counted in the server's memory pool."""
        self._memory_paused = False
        """Reading waits for the memory pool (queued.max.request.bytes) to have room for a request."""

    @property
    def max_frame(self) -> int:
        """The largest frame taken now: socket.request.max.bytes, or sasl.server.max.receive.size
        before authentication (the buffer then never grows for a larger one)."""
        return self.buffer.max_frame

    @max_frame.setter
    def max_frame(self, size: int) -> None:
        self.buffer.max_frame = size

    # --- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = _format_address(transport.get_extra_info("peername"))
        self.info = ConnectionInfo(
            f"{peer}-{self.number}", peer, listener=self.listener_name, mute_for=self.mute_for
        )
        if self.server.refuses(self.listener_name):
            transport.close()
            return
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple) and peername:
            self.address = normal_address(str(peername[0]))
        transport.pause_reading()  # type: ignore[attr-defined]  # nothing is read before it is accepted
        self.server.accept(self)

    def accepted(self) -> None:
        """ConnectionQuotas let the connection in: serve it."""
        transport = self.transport
        assert transport is not None
        self.server.connections.add(self)
        self.last_active = self.loop.time()
        _apply_socket_options(transport.get_extra_info("socket"), self.server.config)
        if self.tls_server is not None:
            self._handshaking = True
            self._handshake = self.loop.create_task(self._start_tls(transport, self.tls_server))
        else:
            transport.resume_reading()

    def gone(self) -> bool:
        """Closed before it was accepted (the client gave up waiting)."""
        return self._lost or self._closing()

    def stopping(self) -> bool:
        return self._stopping

    async def _start_tls(self, raw: asyncio.BaseTransport, tls_server: _TlsServer) -> None:
        """The TLS handshake, then the principal (`ssl.principal.mapping.rules`), then the requests
        that arrived meanwhile. A failure closes the connection with one line."""
        transport: asyncio.BaseTransport | None = None
        try:
            transport = await _start_server_tls(self.loop, raw, self, tls_server.context)
            der = transport.get_extra_info("ssl_object").getpeercert(binary_form=True)
            self.info.principal = tls_server.mapper.principal(der)
        except ssl.SSLError as exc:
            reason = (exc.reason or str(exc)).lower().replace("_", " ")
            log.info(
                "closing connection from %s: TLS handshake failed on listener %s (%s)",
                self.info.peer,
                self.listener_name,
                reason,
            )
            self._handshake_failed(raw)
            return
        except KcliError as exc:  # no rule of ssl.principal.mapping.rules applies
            log.warning("closing TLS connection from %s: %s", self.info.peer, str(exc).rstrip("."))
            if transport is not None:
                transport.close()
            self._handshake_failed(raw)
            return
        except (OSError, TimeoutError, asyncio.CancelledError) as exc:  # gone, too slow, or shut down
            log.debug("TLS handshake with %s ended: %s", self.info.peer, exc or type(exc).__name__)
            self._handshake_failed(raw)
            return
        self.transport = transport  # type: ignore[assignment]
        self.tls = True
        self._handshaking = False
        if self._stopping:
            self.stop()
        elif (self.buffer or self._eof) and not self._memory_paused:
            self._process()

    def _handshake_failed(self, raw: asyncio.BaseTransport) -> None:
        """asyncio tells the protocol nothing of a TLS connection that never started: close it here."""
        raw.close()
        if not self._lost:
            self.connection_lost(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer.free_space()

    def buffer_updated(self, nbytes: int) -> None:
        if self._stopping:
            self.buffer.clear()
            self.account()
            return
        new_request = self.buffer.start == self.buffer.end
        self.buffer.end += nbytes
        if self.server.queued_max_request_bytes > 0:
            if new_request and not self._memory_paused and self.server.memory_exhausted():
                self._wait_for_memory()  # Kafka's channel muted "due to memory pressure"
            self.account()
        if self._handshaking or self._memory_paused:
            return  # served once `_start_tls` has the TLS transport, or once the pool has room
        if self.current is None and not self._write_paused:
            self._process()
        elif len(self.buffer) > self.READ_AHEAD and not self._read_paused and not self._closing():
            self._read_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        self._eof = True
        if self._handshaking:
            return False
        if self.current is None and not self._write_paused:
            self._process()  # answers what is buffered, then closes
        # A TCP transport stays open until the answers are out; a TLS one cannot stay half-open
        # (asyncio warns when asked to) and closes once what is written is flushed.
        return not self.tls

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("connection from %s dropped: %s", self.info.peer, exc)
        self._lost = True
        self.server.connections.discard(self)
        self.buffer.clear()
        self._memory_paused = False
        self.account()
        if self.counted:
            self.counted = False
            self.server.connection_closed(self)
        self.held.clear()
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(ConnectionResetError("the connection closed"))
        self._finish_closed()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self.current is None:
            self._process()

    # --- control from the server --------------------------------------------------------------------

    def stop(self) -> None:
        """Read no further requests; close now when idle, else once the request in flight is answered."""
        self._stopping = True
        if self._handshaking and self.transport is not None:
            self.transport.close()  # the handshake fails, and `_start_tls` finishes the connection
            return
        if self.current is None and self.transport is not None:
            self._flush()
            self.transport.close()

    def close_after_answer(self) -> None:
        """Read no further requests and close once the answer being made is sent (a failed authentication)."""
        self._stopping = True

    def abort(self) -> None:
        """Give up on the request in flight (shutdown grace over) and close."""
        if self.current is not None:
            self.current.cancel()
        if self.transport is not None:
            self.transport.close()

    def account(self) -> None:
        """Bring the memory pool's count of this connection's buffered bytes up to date. A connection
        waiting for room is not counted: its few bytes read must not keep the pool full."""
        if self.server.queued_max_request_bytes <= 0 or self._memory_paused:
            return
        delta = len(self.buffer) - self._pooled
        if delta:
            self._pooled += delta
            self.server.pool_changed(delta)

    def _wait_for_memory(self) -> None:
        """Stop reading until the pool has room: a new request waits, the ones being read go on."""
        self.account()  # what was counted before this read stays counted until it leaves the buffer
        self._memory_paused = True
        if not self._closing():
            self.transport.pause_reading()  # type: ignore[union-attr]
        self.server.wait_for_memory(self)

    def memory_available(self) -> None:
        """The pool has room again: read and answer what waited."""
        if not self._memory_paused or self._lost:
            return
        if self.server.memory_exhausted():
            self.server.wait_for_memory(self)
            return
        self._memory_paused = False
        self.account()
        if not self._closing() and not self._read_paused:
            self.transport.resume_reading()  # type: ignore[union-attr]
        if self.current is None and not self._write_paused and not self._handshaking:
            self._process()

    def mute_for(self, seconds: float) -> None:
        """A quota's throttle (KIP-219): the answer in hand still goes out, then no further request is
        read or handled until `seconds` have passed (Kafka's ThrottledChannel)."""
        self._unmute_at = max(self._unmute_at, self.loop.time() + seconds)

    def _muted(self) -> bool:
        """While a throttle lasts, wait it out as the request in flight, with reading paused."""
        delay = self._unmute_at - self.loop.time()
        if delay <= 0:
            return False
        if not self._read_paused and not self._closing():
            self._read_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
        self._run(asyncio.sleep(delay))
        return True

    # --- requests -----------------------------------------------------------------------------------

    def _process(self) -> None:
        """Answer every whole request in the buffer, in order, until one has to wait."""
        try:
            while (
                self.current is None and not self._write_paused and not self._stopping and not self._closing()
            ):
                if self._unmute_at and self._muted():
                    break
                frame = self._next_frame()
                if frame is None:
                    break
                self.busy = True
                self.last_active = self.loop.time()
                handling = self.handle(self.info, frame)
                try:
                    waiting = handling.send(None)
                except StopIteration as done:
                    self._respond(done.value)
                else:
                    self._run(_resume(handling, waiting))
        except Exception as exc:
            self._fail(exc)
            return
        self._flush()
        self.account()
        if self.current is None:
            if (
                self.busy
            ):  # a request was answered: the idle time starts over (a partial frame's bytes do not)
                self.busy = False
                self.last_active = self.loop.time()
            if self._eof and not self._write_paused:
                self._warn_partial_frame()
                self.stop()
            elif self._stopping:
                self.stop()
            elif self._read_paused and not self._closing():
                self._read_paused = False
                if not self._memory_paused:
                    self.transport.resume_reading()  # type: ignore[union-attr]

    def _warn_partial_frame(self) -> None:
        if not self.buffer:
            return
        size = self.buffer.next_size()
        if size is None:
            reason = "connection closed inside a frame's size prefix"
        else:
            reason = f"connection closed after {len(self.buffer) - 4} of {size} frame bytes"
        log.warning("closing connection from %s: %s", self.info.peer, reason)
        self.buffer.clear()

    def _next_frame(self) -> bytes | None:
        buffer = self.buffer
        size = buffer.next_size()
        if size is None:
            return None
        max_request = buffer.max_frame
        if size < 0 or size > max_request:
            if not self.tls and tls.is_tls_record(buffer.view[buffer.start : buffer.start + 3].tobytes()):
                raise _CloseConnection(f"it speaks TLS to the PLAINTEXT listener {self.listener_name}")
            raise InvalidRequestError(f"invalid request size {size} ({self.max_frame_key} is {max_request})")
        return buffer.take(size)

    def _respond(self, response: Answer) -> None:
        if isinstance(response, bytes):
            self.held.append(response)
        elif response is not None:
            self._flush()
            rest = self._send_framed_now(response)
            if rest is not None:
                self._run(self._send_rest(*rest))

    def _run(self, coroutine: Coroutine[Any, Any, object]) -> None:
        self.current = task = self.loop.create_task(coroutine)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[object]) -> None:
        self.current = None
        if task.cancelled():
            if self.transport is not None:
                self.transport.close()
            self._finish_closed()
            return
        exc = task.exception()
        if exc is not None:
            self._fail(exc)
            return
        if self._closing():
            self._finish_closed()
            return
        try:
            self._respond(task.result())  # type: ignore[arg-type]
        except Exception as exc:
            self._fail(exc)
            return
        self._process()

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, (InvalidRequestError, _CloseConnection)):
            log.warning("closing connection from %s: %s", self.info.peer, exc)
        elif isinstance(exc, (ConnectionError, OSError)):
            log.debug("connection from %s dropped: %s", self.info.peer, exc)
        else:
            log.error("closing connection from %s after an unexpected error", self.info.peer, exc_info=exc)
        self._flush()  # answers to the requests before a bad one
        self.buffer.clear()  # nothing more to say of it (a TLS transport still reports the peer's EOF)
        self.account()
        if self.transport is not None:
            self.transport.close()
        self._finish_closed()

    def _finish_closed(self) -> None:
        """`closed` is done once the socket is gone and no request is left running."""
        if self._lost and self.current is None and not self.closed.done():
            self.closed.set_result(None)

    def _flush(self) -> None:
        """Send the held answers in one write."""
        held = self.held
        if not held:
            return
        data = held[0] if len(held) == 1 else b"".join(held)
        held.clear()
        if not self._closing():
            self.transport.write(data)  # type: ignore[union-attr]

    def _closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def _send_framed_now(self, send: FramedSend) -> tuple[list[bytes | FileRegion], bool] | None:
        """Write size and header, then each part, as far as the socket takes them now; file regions go
        out with os.sendfile. None when all is sent; else what is left (the rest of a file region
        first) and whether the socket is corked, for `_send_rest` to finish once the socket drains.

        A Fetch answer is header, records and a few trailing bytes: with TCP_CORK they leave in full
        segments, not as three packets that each wake the reader, and the whole answer is usually
        written here, without a task or a turn of the event loop.
        """
        transport = self.transport
        if transport is None or self._closing():
            return None
        header = response_header(send.correlation_id, send.api_key, send.response.response_type)
        parts = list(send.response.parts)
        head = [_INT32.pack(len(header) + send.response.size), header]
        while parts and not isinstance(parts[0], FileRegion):
            head.append(parts.pop(0))  # type: ignore[arg-type]
        corked = _cork(transport, True) if parts and not self.tls else False
        transport.write(b"".join(head))
        for i, part in enumerate(parts):
            if self._closing():
                log.debug("connection from %s closed while its answer was being sent", self.info.peer)
                return None
            if isinstance(part, FileRegion):
                sent = self._copy_now(transport, part) if self.tls else _sendfile_now(transport, part)
                if sent < part.count:
                    rest = FileRegion(part.file, part.offset + sent, part.count - sent)
                    return [rest, *parts[i + 1 :]], corked
            else:
                transport.write(part)
        if corked:
            _cork(transport, False)
        return None

    async def _send_rest(self, parts: list[bytes | FileRegion], corked: bool) -> None:
        """The rest of an answer `_send_framed_now` began, once the socket takes more.

        The client may go away while its answer is being written (sendfile first waits for the socket
        to drain): then the rest is not sent, and it is no fault of the broker's. asyncio reports a
        vanished client in two ways that look like faults: loop.sendfile on a closing transport raises
        RuntimeError, and an os.sendfile that fails before its first byte (ECONNRESET, EPIPE) is taken
        for "sendfile not available" and retried as a read-and-write copy, which a segment's file
        (a bare descriptor) cannot do. No copy is wanted: a segment is a regular file and the socket
        plain TCP, so os.sendfile failing means the socket or the file failed.
        """
        transport = self.transport
        assert transport is not None
        try:
            await self._send_parts(transport, parts)
        finally:
            if corked and not self._closing():
                _cork(transport, False)
        while self._write_paused and not self._closing():
            self._drained = self.loop.create_future()
            await self._drained

    def _copy_now(self, transport: asyncio.Transport, region: FileRegion) -> int:
        """Under TLS: read `region` in large blocks and write them through the transport until it asks
        to pause (its buffer is full); what was written. Each block is one pread, encrypted by OpenSSL
        straight from it; the records are never copied one by one."""
        fd = region.file.fileno()
        sent = 0
        while sent < region.count and not self._write_paused and not self._closing():
            block = os.pread(fd, min(_COPY_BLOCK, region.count - sent), region.offset + sent)
            if not block:
                raise _CloseConnection(
                    f"the file ended {region.count - sent} bytes early while sending a response"
                )
            transport.write(block)
            sent += len(block)
        return sent

    async def _copy_region(self, transport: asyncio.Transport, region: FileRegion) -> None:
        """A whole file region through a TLS transport, waiting for it to drain between blocks."""
        sent = 0
        while sent < region.count:
            if self._closing():
                raise ConnectionResetError("the client went away while its answer was being sent")
            if self._write_paused:
                self._drained = self.loop.create_future()
                await self._drained
                continue
            sent += self._copy_now(
                transport, FileRegion(region.file, region.offset + sent, region.count - sent)
            )

    async def _send_parts(self, transport: asyncio.Transport, parts: list[bytes | FileRegion]) -> None:
        for part in parts:
            if self._closing():
                log.debug("connection from %s closed while its answer was being sent", self.info.peer)
                return
            if isinstance(part, FileRegion) and self.tls:
                await self._copy_region(transport, part)
            elif isinstance(part, FileRegion):
                sent = _sendfile_now(transport, part)
                if sent < part.count:  # the socket is full (or failed): asyncio waits and reports
                    try:
                        sent += await self.loop.sendfile(
                            transport, part.file, part.offset + sent, part.count - sent, fallback=False
                        )
                    except asyncio.SendfileNotAvailableError:
                        if _connection_is_gone(transport):
                            raise ConnectionResetError("the client went away during os.sendfile") from None
                        raise
                if sent != part.count:
                    raise _CloseConnection(
                        f"the file ended {part.count - sent} bytes early while sending a response"
                    )
            else:
                transport.write(part)


class ReceiveBuffer:
    """Where a connection's reads land: one block reused for every recv_into, so reading a request
    allocates nothing and touches no fresh memory; each request is copied out whole.

    A request larger than the block grows the block as its bytes arrive, doubling up to the request's
    declared size, never allocating that size from the prefix alone (Kafka allocates the declared size,
    bounded by socket.request.max.bytes): a client announcing 100 MiB and sending ten bytes holds one
    block, not 100 MiB. The block stays as large for the next requests, up to KEEP bytes: a client
    sending 1 MiB batches does not pay for fresh zeroed pages on every request.
    """

    BLOCK = 1 << 18
    MIN_READ = 1 << 16
    KEEP = 1 << 23

    __slots__ = ("data", "view", "start", "end", "max_frame")

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self.data = bytearray(self.BLOCK)
        self.view = memoryview(self.data)
        self.start = 0
        self.end = 0

    def __len__(self) -> int:
        return self.end - self.start

    def clear(self) -> None:
        self.start = self.end = 0

    def free_space(self) -> memoryview:
        """The space after the buffered bytes: at least MIN_READ, and room for the whole next frame."""
        if self.start == self.end:
            self.start = self.end = 0
            if len(self.data) > self.KEEP:
                self._replace(self.BLOCK, 0)
            return self.view
        pending = self.end - self.start
        wanted = pending + self.MIN_READ
        size = self.next_size()
        if size is not None and 0 <= size <= self.max_frame:  # other sizes are refused, not read
            wanted = max(wanted, min(4 + size, 2 * pending))
        if len(self.data) - self.start < wanted:
            self._replace(max(wanted, len(self.data)), pending)
        elif len(self.data) - self.end < self.MIN_READ:
            self._replace(len(self.data), pending)
        return self.view[self.end :]

    def _replace(self, capacity: int, pending: int) -> None:
        """Move the pending bytes to the front of a block of `capacity` (the same block if it fits)."""
        if capacity == len(self.data):
            data, view = self.data, self.view
        else:
            data = bytearray(capacity)
            view = memoryview(data)
        view[:pending] = self.view[self.start : self.end]
        self.data, self.view, self.start, self.end = data, view, 0, pending

    def next_size(self) -> int | None:
        """The size prefix of the next frame, None until its four bytes are here."""
        if self.end - self.start < 4:
            return None
        return _INT32.unpack_from(self.data, self.start)[0]  # type: ignore[no-any-return]

    def take(self, size: int) -> bytes | None:
        """The next frame (after its size prefix) as bytes, None until all of it is here."""
        begin = self.start + 4
        end = begin + size
        if end > self.end:
            return None
        self.start = end
        return self.view[begin:end].tobytes()


async def _resume(coroutine: Coroutine[Any, Any, object], waiting: Any) -> object:
    """Go on, inside a task, with a coroutine started outside one that is now waiting on `waiting`.

    This is what a task does for the coroutine it steps (Python 3.12 calls it an eager start): wait for
    the future the coroutine yielded (None means a bare yield, as asyncio.sleep(0) makes), then send
    into the coroutine again, whose own await of the future then gives its result or raises its
    exception. Cancelling the task cancels that future and throws CancelledError in. The future is
    awaited directly (asyncio.wait would add a set, a future and two callbacks to every wait).
    """
    while True:
        cancelled = False
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False
                try:
                    await waiting
                except asyncio.CancelledError:
                    raise
                except BaseException:  # the coroutine's own await raises it
                    pass
        except asyncio.CancelledError:
            if waiting is not None:
                waiting.cancel()
            cancelled = True
        try:
            waiting = coroutine.throw(asyncio.CancelledError()) if cancelled else coroutine.send(None)
        except StopIteration as done:
            return done.value


class _TlsServer(NamedTuple):
    """What a TLS listener's connections share: the server context and the principal mapping."""

    context: ssl.SSLContext
    mapper: SslPrincipalMapper


class _CloseConnection(Exception):
    """A connection that cannot go on (a segment file shorter than its answer): closed, reason logged."""


_INT32 = struct.Struct(">i")
_COPY_BLOCK = 1 << 20
"""Bytes of a file region read and written through TLS at a time (OpenSSL cuts 16 KiB records)."""


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


_HANDSHAKE_SECONDS = 10.0
"""How long a TLS client may take to finish its handshake before the connection is closed."""


class _AlertingSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol, except that a failed handshake sends OpenSSL's alert before closing.

    asyncio drops the alert (it closes the socket at once), so a refused client (no common TLS version,
    a missing or untrusted certificate) sees only a closed connection; Kafka's brokers send the alert,
    and clients name the reason from it. This touches asyncio internals (`_outgoing`, `_transport`,
    `_on_handshake_complete`): where they are missing, nothing is sent and the connection just closes.
    """

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        if handshake_exc is not None:
            try:
                alert = self._outgoing.read()  # type: ignore[attr-defined]
                if alert and self._transport is not None:  # type: ignore[attr-defined]
                    self._transport.write(alert)  # type: ignore[attr-defined]  # a few bytes: sent at once
            except Exception:  # noqa: BLE001 - the alert is a courtesy; the close below is what matters
                pass
        super()._on_handshake_complete(handshake_exc)  # type: ignore[misc]


async def _start_server_tls(
    loop: asyncio.AbstractEventLoop,
    raw: asyncio.BaseTransport,
    protocol: asyncio.BaseProtocol,
    context: ssl.SSLContext,
) -> asyncio.Transport:
    """loop.start_tls for a server connection, with `_AlertingSSLProtocol` (the same steps as
    asyncio's base_events.start_tls); asyncio's own start_tls where its internals differ."""
    if not hasattr(sslproto.SSLProtocol, "_on_handshake_complete") or not getattr(
        raw, "_start_tls_compatible", False
    ):
        started = await loop.start_tls(
            raw,  # type: ignore[arg-type]
            protocol,
            context,
            server_side=True,
            ssl_handshake_timeout=_HANDSHAKE_SECONDS,
        )
        assert started is not None
        return started
    waiter: asyncio.Future[None] = loop.create_future()
    ssl_protocol = _AlertingSSLProtocol(
        loop,
        protocol,
        context,
        waiter,
        True,
        None,
        ssl_handshake_timeout=_HANDSHAKE_SECONDS,
        call_connection_made=False,
    )
    raw.pause_reading()  # type: ignore[attr-defined]
    raw.set_protocol(ssl_protocol)
    made = loop.call_soon(ssl_protocol.connection_made, raw)
    resumed = loop.call_soon(raw.resume_reading)  # type: ignore[attr-defined]
    try:
        await waiter
    except BaseException:
        raw.close()
        made.cancel()
        resumed.cancel()
        raise
    return ssl_protocol._app_transport  # type: ignore[attr-defined, no-any-return]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # an unset host binds every interface; a name may resolve anywhere


def _apply_socket_options(sock: socket.socket | None, config: BrokerConfig) -> None:
    """socket.send/receive.buffer.bytes when set explicitly; by default the kernel autotunes."""
    if sock is None:
        return
    for key, option in (
        ("socket.send.buffer.bytes", socket.SO_SNDBUF),
        ("socket.receive.buffer.bytes", socket.SO_RCVBUF),
    ):
        value = int(config[key])  # type: ignore[call-overload]
        if config.is_set(key) and value > 0:
            sock.setsockopt(socket.SOL_SOCKET, option, value)


def _sendfile_now(transport: asyncio.Transport, region: FileRegion) -> int:
    """One os.sendfile of `region` straight away, when nothing waits in the transport's buffer: what
    it sent (0 when the socket is full or failed; loop.sendfile then does the rest and the reporting).
    A follower's answer usually fits the socket's buffer whole, and loop.sendfile would spend a turn
    of the event loop, four epoll_ctl calls and an lseek on it besides."""
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_write_buffer_size():
        return 0
    try:
        return os.sendfile(sock.fileno(), region.file.fileno(), region.offset, region.count)
    except OSError:  # EAGAIN, or a failure loop.sendfile will meet again and report
        return 0


def _cork(transport: asyncio.Transport, on: bool) -> bool:
    """TCP_CORK on or off: a Fetch answer's header, records (sendfile) and trailing bytes leave as full
    segments rather than three packets, each waking the reader. Whether it was set."""
    sock = transport.get_extra_info("socket")
    if sock is None or not hasattr(socket, "TCP_CORK"):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1 if on else 0)
    except OSError:
        return False
    return True


def _connection_is_gone(transport: asyncio.BaseTransport) -> bool:
    """After a failed os.sendfile: whether the TCP connection is closed (the peer reset it), which the
    transport learns only at its next read. Without TCP_INFO (not Linux) a failure counts as gone."""
    sock = transport.get_extra_info("socket")
    tcp_info = getattr(socket, "TCP_INFO", None)
    if sock is None or tcp_info is None:
        return True
    try:
        state = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, 1)[0]
    except OSError:
        return True
    return state == _TCP_CLOSE


_TCP_CLOSE = 7
"""tcpi_state of a closed connection (Linux's include/net/tcp_states.h)."""


def _format_address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)
