"""The TLS transport of a server connection (Kafka's SslTransportLayer): the listener's context and
principal mapping, and the handshake started on an accepted connection.

What goes through the TLS transport once it is up, and why file regions are copied rather than
sendfile'd under it, is `kcli.broker.connection`'s.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from typing import NamedTuple

from kcli.security.principal import SslPrincipalMapper


class TlsServer(NamedTuple):
    """What a TLS listener's connections share: the server context and the principal mapping."""

    context: ssl.SSLContext
    mapper: SslPrincipalMapper


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


async def start_server_tls(
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
