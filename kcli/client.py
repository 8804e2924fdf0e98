"""A small asyncio Kafka protocol client on kio, for ops, replay, bench and tests.

One `KafkaClient` is one connection to one broker. Requests are kio entities (their class says
API key and version); responses come back as kio entities. Any number of requests may be in
flight at once (pipelining): each is matched to its response by correlation id.

    async with await KafkaClient.connect("127.0.0.1:9092") as client:
        Metadata = client.request_type(3)
        response = await client.send(Metadata(topics=None, ...))
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import ssl
import struct
from collections.abc import Callable
from types import TracebackType
from typing import Any

from formats._native import uninitialized_bytearray
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader

from kcli import __version__
from kcli.errors import KcliError
from kcli.protocol.codec import entity_write
from kcli.protocol.guard import check_sizes, skip_tagged_fields, without_unknown_tags
from kcli.protocol.messages import api_name, kio_versions, request_type, response_type
from kcli.protocol.produce_codec import (
    FIRST_TOPIC_ID_VERSION,
    PRODUCE,
    ProduceFramer,
    ProducePartitionAnswer,
    answer_from_response,
)
from kcli.security import PLAINTEXT, ClientSecurity, ReconfigurableSecurity, tls
from kcli.security.sasl import SaslClientMechanism, SaslError
from kcli.security.sasl.client import client_mechanism, needs_io

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
REAUTH_WINDOW = (0.85, 0.95)
"""When a client re-authenticates, as a share of the session's lifetime (Kafka's SaslClientAuthenticator)."""
DEFAULT_REQUEST_TIMEOUT = 30.0

OnAnswer = Callable[[Any, "ClientError | None"], object]
ResponseReader = Callable[[bytes | bytearray, int, int], Any]
"""(frame, offset of the body, version) -> the response."""
_FUTURE = asyncio.Future  # the type loop.create_future() returns (the C one)


log = logging.getLogger("kcli.client")


class ClientError(KcliError):
    """Cannot connect, the connection broke, a request timed out, or no common API version."""


class AuthenticationError(ClientError):
    """SASL authentication failed (the broker refused the credentials, or its answers did not prove
    it knows them): as with Kafka's AuthenticationException, no other broker is tried."""


class KafkaClient:
    """One connection to one broker, with ApiVersions negotiation and pipelined requests.

    The connection is an asyncio Protocol rather than a stream pair: responses are cut from what each
    recv() brought and handed to their futures (or callbacks) directly, with no reader task to wake per
    response. Each request is written at once, not held to leave with the next ones: with only a few
    requests in flight (five for an idempotent producer), a broker that gets them in bursts idles while
    the client prepares the next burst (kcli replay: 25% less throughput, for 15% less client CPU).
    """

    def __init__(
        self,
        transport: asyncio.Transport,
        protocol: _Connection,
        *,
        address: str,
        client_id: str = "kcli",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self.api_versions: Any = None
        """The broker's ApiVersions response (its features, from v3)."""
        self._transport = transport
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._correlation_ids = itertools.count(1)
        # correlation id -> (decode, its first argument, where the result goes); decode(argument, frame)
        # gives the result, which goes to a future, or to a callback as (result, None) / (None, error)
        self._pending: dict[int, tuple[Callable[[Any, bytes], Any], Any, asyncio.Future[Any] | OnAnswer]] = {}
        self._closed_error: ClientError | None = None
        self.security: ClientSecurity = PLAINTEXT
        self._held: list[bytes | bytearray] | None = None
        """Frames written while a re-authentication runs; None when none runs (KIP-368)."""
        self._held_ids: set[int] = set()
        self.authentications = 0
        """SASL authentications completed on this connection (re-authentications count too)."""
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        self.tls = False
        """Whether the connection is TLS (a close before the first answer then reads differently)."""
        protocol.attach(self)

    @classmethod
    async def connect(
        cls,
        bootstrap: str,
        *,
        client_id: str = "kcli",
        connect_timeout: float = 10.0,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        negotiate: bool = True,
        security: ClientSecurity = PLAINTEXT,
        local_address: str | None = None,
    ) -> KafkaClient:
        """Connect to "host:port" and, unless told not to, learn the broker's API versions.
        `local_address` binds the connection's own end (a loopback alias such as 127.0.0.2 makes a
        client from another host as ACL host patterns see it).

        With SSL or SASL_SSL the TLS handshake comes first (`kcli.security.tls`), then the host name
        is checked against the broker's certificate (`ssl.endpoint.identification.algorithm`); each
        failure is one sentence. With SASL_PLAINTEXT or SASL_SSL, ApiVersions is followed by SaslHandshake
        and SaslAuthenticate (`authenticate`), as Kafka's SaslClientAuthenticator does."""
        host, port = split_address(bootstrap)
        if security.protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ClientError(
                f"security.protocol {security.protocol} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL."
            )
        context = _tls_context(security) if security.uses_tls else None
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await _wait(
                loop.create_connection(
                    lambda: _Connection(bootstrap),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                    ssl_handshake_timeout=connect_timeout if context is not None else None,
                    local_addr=(local_address, 0) if local_address is not None else None,
                ),
                connect_timeout,
            )
        except TimeoutError:
            raise ClientError(
                f"cannot connect to {bootstrap}: timed out after {connect_timeout:g} s."
            ) from None
        except (OSError, EOFError) as exc:
            if context is not None and isinstance(exc, _HANDSHAKE_FAILURES):
                raise ClientError(
                    f"cannot connect to {bootstrap} with TLS: {tls.handshake_failure(exc, bootstrap)}"
                ) from None
            reason = (getattr(exc, "strerror", None) or str(exc)).lower()
            raise ClientError(f"cannot connect to {bootstrap}: {reason}.") from None
        if context is not None:
            try:
                if tls.checks_host_name(security.ssl):
                    tls.check_host_name(transport.get_extra_info("ssl_object"), host, bootstrap)
            except tls.TlsError as exc:
                transport.close()
                raise ClientError(f"cannot connect to {bootstrap} with TLS: {exc}") from None
            except ValueError:  # TLSv1.3: the broker's alert (a refused certificate) ended it already
                transport.close()
                with contextlib.suppress(TimeoutError):  # the alert is the connection's lost error
                    await asyncio.wait_for(protocol.wait_closed(), 1.0)
                sentence = tls.closed_before_answering(protocol._lost_error, bootstrap)
                raise ClientError(f"cannot connect to {bootstrap} with TLS: {sentence}") from None
        client = cls(
            transport, protocol, address=bootstrap, client_id=client_id, request_timeout=request_timeout
        )
        client.security = security
        client.tls = context is not None
        protocol.negotiated = not negotiate
        if negotiate or security.uses_sasl:
            try:
                await client.negotiate_versions()
                if security.uses_sasl:
                    await client.authenticate()
            except BaseException:
                await client.close()
                raise
        return client

    async def authenticate(self) -> None:
        """SaslHandshake v1 and SaslAuthenticate until the mechanism completes (Kafka's
        SaslClientAuthenticator); with a session lifetime, re-authentication is scheduled."""
        try:
            if needs_io(self.security):
                mechanism = await asyncio.to_thread(client_mechanism, self.security)
            else:
                mechanism = client_mechanism(self.security)
        except SaslError as exc:
            raise ClientError(str(exc)) from None
        if self.version(SASL_HANDSHAKE) < 1:
            raise ClientError(
                f"{self.address} speaks only SaslHandshake v0; kcli needs v1 (Kafka 1.0 or later)."
            )
        handshake = await self._send_direct(request_type(SASL_HANDSHAKE, 1)(mechanism=mechanism.mechanism))
        if handshake.error_code == ErrorCode.unsupported_sasl_mechanism:
            offered = ", ".join(handshake.mechanisms) or "none"
            raise ClientError(
                f"{self.address} does not offer SASL mechanism {mechanism.mechanism} (it offers {offered})."
            )
        if handshake.error_code == ErrorCode.illegal_sasl_state:
            raise ClientError(
                f"{self.address} refused SaslHandshake (ILLEGAL_SASL_STATE): it is not a SASL listener."
            )
        if handshake.error_code != ErrorCode.none:
            raise ClientError(f"{self.address} answered SaslHandshake with {handshake.error_code.name}.")
        lifetime_ms = await self._exchange(mechanism)
        self.authentications += 1
        if lifetime_ms > 0:
            delay = lifetime_ms / 1000 * random.uniform(*REAUTH_WINDOW)
            self._reauth_timer = self._loop.call_later(delay, self._start_reauthentication)

    async def _exchange(self, mechanism: SaslClientMechanism) -> int:
        """The SaslAuthenticate round trips; the session lifetime in ms (0: none)."""
        authenticate = request_type(SASL_AUTHENTICATE, self.version(SASL_AUTHENTICATE))
        token: bytes | None = mechanism.initial_response()
        while True:
            answer = await self._send_direct(authenticate(auth_bytes=token or b""))
            if answer.error_code != ErrorCode.none:
                reason = (answer.error_message or answer.error_code.name).rstrip(".")
                raise AuthenticationError(
                    f"SASL/{mechanism.mechanism} authentication with {self.address} failed: {reason}."
                )
            try:
                token = mechanism.evaluate_challenge(answer.auth_bytes)
            except SaslError as exc:
                reason = str(exc).rstrip(".")
                raise AuthenticationError(
                    f"SASL/{mechanism.mechanism} authentication with {self.address} failed: {reason}."
                ) from None
            if token is None and mechanism.complete:
                lifetime = getattr(answer, "session_lifetime", None)
                return int(lifetime.total_seconds() * 1000) if lifetime is not None else 0
            if token is None:
                raise ClientError(
                    f"SASL/{mechanism.mechanism} with {self.address} ended before it completed."
                )

    def _start_reauthentication(self) -> None:
        self._reauth_timer = None
        if self._closed_error is None:
            self._reauth_task = self._loop.create_task(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        """KIP-368: hold new requests, wait until none is in flight, authenticate again, send the held ones."""
        self._held = []
        try:
            while set(self._pending) - self._held_ids and self._closed_error is None:
                await asyncio.sleep(0.005)
            if self._closed_error is not None:
                return
            await self.authenticate()
            log.debug("re-authenticated with %s", self.address)
        except ClientError as exc:
            log.warning("re-authentication with %s failed: %s", self.address, exc)
            self._closed_error = ClientError(
                f"re-authentication with {self.address} failed: {str(exc).rstrip('.')}."
            )
            self._transport.close()
        finally:
            held, self._held = self._held or [], None
            self._held_ids.clear()
            if self._closed_error is None:
                for frame in held:
                    self._transport.write(frame)

    async def negotiate_versions(self) -> None:
        """ApiVersions from our newest version down, as clients do (KIP-511 fallback)."""
        _, version = kio_versions(API_VERSIONS)  # type: ignore[misc]
        for _ in range(3):
            request = _api_versions_request(version)
            response = await self.send(request)
            if response.error_code == ErrorCode.unsupported_version:
                offered = [k.max_version for k in response.api_keys if k.api_key == API_VERSIONS]
                if not offered or offered[0] >= version:
                    break
                version = offered[0]
                continue
            if response.error_code != ErrorCode.none:
                raise ClientError(f"{self.address} answered ApiVersions with {response.error_code.name}.")
            self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            self.api_versions = response
            self._protocol.negotiated = True
            return
        raise ClientError(f"{self.address} and kcli share no ApiVersions version.")

    def version(self, api_key: int, highest: int | None = None) -> int:
        """The newest version both the broker and kio speak (capped at `highest` if given)."""
        ours = kio_versions(api_key)
        theirs = self.broker_versions.get(api_key)
        if ours is None or theirs is None:
            raise ClientError(f"{self.address} does not support {api_name(api_key)}.")
        top = min(ours[1], theirs[1], highest if highest is not None else ours[1])
        if top < max(ours[0], theirs[0]):
            raise ClientError(f"{self.address} and kcli share no {api_name(api_key)} version.")
        return top

    def request_type(self, api_key: int, highest: int | None = None) -> type:
        """The kio request class at the negotiated version."""
        return request_type(api_key, self.version(api_key, highest))

    async def send(
        self, request: Any, *, timeout: float | None = None, reader: ResponseReader | None = None
    ) -> Any:
        """Send one request and wait for its response (read by `reader` when given, else by kio)."""
        future = self.send_nowait(request, reader)
        limit = self.request_timeout if timeout is None else timeout
        try:
            return await _wait(future, limit)
        except TimeoutError:
            name = api_name(request.__api_key__)
            raise ClientError(f"{name} request to {self.address} timed out after {limit:g} s.") from None

    def send_nowait(self, request: Any, reader: ResponseReader | None = None) -> asyncio.Future[Any]:
        """Write a request now and return the future of its response (for pipelining).

        `reader(frame, offset, version)` reads the response body at `offset` of its frame in place of
        kio (a follower's FetchResponse, whose records it leaves in the frame)."""
        self._check_open()
        correlation_id = next(self._correlation_ids)
        # encoded first: a request that cannot be encoded leaves no future behind
        frame = self._encode(request, correlation_id)
        future: asyncio.Future[Any] = self._loop.create_future()
        response_cls = response_type(request.__api_key__, request.__version__)
        if reader is None:
            self._pending[correlation_id] = (_decode_response, response_cls, future)
        else:
            self._pending[correlation_id] = (_read_by_hand, (response_cls, reader), future)
        self._write(frame, correlation_id)
        return future

    async def _send_direct(self, request: Any) -> Any:
        """A SASL request: written now even while other requests are held for a re-authentication."""
        held, self._held = self._held, None
        try:
            future = self.send_nowait(request)
        finally:
            self._held = held
        try:
            return await _wait(future, self.request_timeout)
        except TimeoutError:
            name = api_name(request.__api_key__)
            raise ClientError(
                f"{name} request to {self.address} timed out after {self.request_timeout:g} s."
            ) from None

    def _write(self, frame: bytes | bytearray, correlation_id: int | None = None) -> None:
        if self._held is None:
            self._transport.write(frame)
            return
        self._held.append(frame)
        if correlation_id is not None:
            self._held_ids.add(correlation_id)

    async def send_without_response(self, request: Any) -> None:
        """For requests the broker does not answer (Produce with acks=0)."""
        self._check_open()
        self._write(self._encode(request, next(self._correlation_ids)))
        await self._protocol.drain()

    @property
    def closed(self) -> bool:
        """True once the connection was closed or lost; a new one must be made."""
        return self._closed_error is not None

    def produce_framer(
        self,
        topic: str,
        *,
        acks: int,
        timeout_ms: int,
        topic_id: Any = None,
        transactional_id: str | None = None,
        highest: int | None = None,
    ) -> ProduceFramer:
        """Produce requests to `topic` at the negotiated version (below v13 unless the topic id is given)."""
        if topic_id is None:
            cap = FIRST_TOPIC_ID_VERSION - 1
            highest = cap if highest is None else min(highest, cap)
        return ProduceFramer(
            self.version(PRODUCE, highest),
            client_id=self.client_id,
            acks=acks,
            timeout_ms=timeout_ms,
            topic=topic,
            topic_id=topic_id,
            transactional_id=transactional_id,
        )

    def produce(
        self,
        framer: ProduceFramer,
        partition: int,
        records: bytes | bytearray | memoryview,
        on_answer: Callable[[ProducePartitionAnswer | None, ClientError | None], object],
    ) -> None:
        """Produce `records` (whole batches, not copied) to one partition; `on_answer` gets the answer.

        For pipelines that keep many requests going: no future per request, `on_answer(answer, None)`
        or `on_answer(None, error)` is called from the event loop as the response is read (or the
        connection fails), so it must be quick and not raise. The usual one-partition answer is read
        by hand, any other by kio. Not for acks=0, which the broker does not answer.
        """
        if self._closed_error is not None:
            raise self._closed_error
        correlation_id = next(self._correlation_ids)
        self._pending[correlation_id] = (_produce_answer, framer, on_answer)
        prefix = framer.prefix(correlation_id, partition, len(records))
        self._write(b"".join((prefix, records, framer.suffix)), correlation_id)

    async def close(self) -> None:
        if self._closed_error is None:
            self._closed_error = ClientError(f"the connection to {self.address} is closed.")
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
        task = self._reauth_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
        self._transport.close()
        await self._protocol.wait_closed()
        self._fail_pending(self._closed_error)

    async def __aenter__(self) -> KafkaClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ---------------------------------------------------------------------------------------------

    def _encode(self, request: Any, correlation_id: int) -> bytearray:
        """The whole frame; handed to the transport as is (not copied into bytes: it is never reused)."""
        header_type = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
        header = header_type(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=correlation_id,
            client_id=self.client_id,
        )
        out = bytearray(b"\0\0\0\0")
        try:
            entity_write(header_type)(out, header)
            entity_write(type(request))(out, request)
        except struct.error as exc:  # a value beyond its protocol field; the CLI refuses these first
            name = api_name(request.__api_key__)
            raise ClientError(f"cannot encode the {name} request: {exc}.") from None
        _INT32.pack_into(out, 0, len(out) - 4)
        return out

    def _received(self, frames: list[bytes | bytearray]) -> None:
        """Answer the requests whose whole response frames arrived."""
        pending = self._pending
        for frame in frames:
            (correlation_id,) = _INT32.unpack_from(frame)
            entry = pending.pop(correlation_id, None)
            if entry is None:
                if not self._protocol.negotiated:  # the first answer must be ApiVersions'
                    raise ClientError(
                        f"{self.address} answered {bytes(frame[:12])!r}..., not a Kafka response: "
                        "is it a Kafka listener?"
                    )
                continue  # the caller timed out and went away
            decode, argument, target = entry
            if type(target) is _FUTURE:
                if target.done():  # type: ignore[union-attr]
                    continue
                try:
                    target.set_result(decode(argument, frame))  # type: ignore[union-attr]
                except Exception as exc:
                    target.set_exception(self._undecodable(exc))  # type: ignore[union-attr]
                continue
            try:
                result = decode(argument, frame)
            except Exception as exc:
                target(None, self._undecodable(exc))  # type: ignore[operator]
            else:
                target(result, None)  # type: ignore[operator]

    def _undecodable(self, exc: Exception) -> ClientError:
        return ClientError(f"cannot decode a response from {self.address}: {exc}.")

    def _lost(self, exc: Exception | None) -> None:
        if self._closed_error is None:
            if not self._protocol.negotiated and self.tls:  # TLS 1.3: a refused client certificate shows here
                sentence = tls.closed_before_answering(exc, self.address)
                self._closed_error = ClientError(f"cannot connect to {self.address} with TLS: {sentence}")
            elif not self._protocol.negotiated:  # not one answer yet: whatever listens there is not Kafka
                reason = "" if exc is None else f" ({str(exc).rstrip('.').lower()})"
                self._closed_error = ClientError(
                    f"{self.address} closed the connection{reason}: is it a Kafka listener (a TLS one "
                    "wants security.protocol SSL or SASL_SSL)?"
                )
            else:
                reason = "closed by the broker" if exc is None else str(exc)
                self._closed_error = ClientError(f"the connection to {self.address} was {reason}.")
        self._fail_pending(self._closed_error)

    def _fail_pending(self, error: ClientError) -> None:
        pending, self._pending = self._pending, {}
        for _, _, target in pending.values():
            if type(target) is not _FUTURE:
                target(None, error)  # type: ignore[operator]
            elif not target.done():  # type: ignore[union-attr]
                target.set_exception(error)  # type: ignore[union-attr]
                # whoever awaits it still gets the error; one nobody awaits any more (its caller
                # failed first) must not print "Future exception was never retrieved" at exit
                target.exception()  # type: ignore[union-attr]

    def _check_open(self) -> None:
        if self._closed_error is not None:
            raise self._closed_error


class _Connection(asyncio.BufferedProtocol):
    """The socket side of a KafkaClient: cuts size-prefixed frames, pauses writers, reports the end.

    Bytes arrive in a reused buffer; a frame larger than it (a follower's or a consumer's fetch) is
    received straight into its own buffer, which is handed on as it is (never copied): each frame is
    copied at most once, from the shared buffer into the bytes handed on.
    """

    def __init__(self, address: str) -> None:
        self.address = address
        self.negotiated = False
        """True once ApiVersions was answered: until then a frame must look like its answer."""
        self._client: KafkaClient | None = None
        self._buffer = bytearray(RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buffer)
        self._start = 0  # the first byte not yet cut into a frame
        self._end = 0  # the end of what arrived
        self._frame: bytearray | None = None  # a large frame arriving in place
        self._filled = 0  # its bytes so far
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed = asyncio.get_running_loop().create_future()
        self._lost_error: Exception | None = None

    def attach(self, client: KafkaClient) -> None:
        self._client = client
        if self._closed.done():  # the broker closed the connection before the client was made
            client._lost(self._lost_error)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        if self._end == len(self._buffer):  # full of a frame's start: move it to the front
            self._compact()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        assert self._client is not None
        try:
            frames = self._frames(nbytes)
            if frames:
                self._client._received(frames)
        except ClientError as exc:
            self._client._closed_error = exc
            self._client._transport.close()

    def _frames(self, nbytes: int) -> list[bytes | bytearray]:
        """The whole frames (without their size) the last `nbytes` complete, in order."""
        frames: list[bytes | bytearray] = []
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < len(self._frame):
                return frames
            frames.append(self._frame)  # its own buffer, dropped here: no copy
            self._frame = None
            return frames
        self._end += nbytes
        buffer, position, end = self._buffer, self._start, self._end
        view = self._view
        while end - position >= 4:
            (size,) = _INT32.unpack_from(buffer, position)
            if not self.negotiated and not 4 <= size <= MAX_API_VERSIONS_RESPONSE_BYTES:
                start = bytes(view[position : min(end, position + 12)])
                raise ClientError(
                    f"{self.address} answered {start!r}..., not a Kafka response: is it a Kafka listener?"
                )
            if size < 0:
                raise ClientError(f"the broker sent a frame of size {size}.")
            if size > RECEIVE_MESSAGE_MAX_BYTES:
                raise ClientError(
                    f"{self.address} announced a response of {size} bytes, more than the "
                    f"{RECEIVE_MESSAGE_MAX_BYTES} a client accepts (receive.message.max.bytes)."
                )
            if end - position - 4 >= size:
                frames.append(view[position + 4 : position + 4 + size].tobytes())  # one copy, not two
                position += 4 + size
                continue
            if 4 + size > len(buffer):  # receive the rest in place: no copy of what is to come
                frame = self._frame = uninitialized_bytearray(size)  # filled whole before it is read
                arrived = end - position - 4
                frame[:arrived] = view[position + 4 : end]
                self._filled = arrived
                position = end
            break
        self._start = position
        if position == end:
            self._start = self._end = 0
        return frames

    def _compact(self) -> None:
        buffer, start, end = self._buffer, self._start, self._end
        buffer[: end - start] = buffer[start:end]
        self._start, self._end = 0, end - start

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost_error = exc
        if self._client is not None:
            self._client._lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)
        self._wake_drain_waiters()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain_waiters()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._paused and not self._closed.done():
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
        if self._client is not None:
            self._client._check_open()

    async def wait_closed(self) -> None:
        await self._closed

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


def split_address(address: str) -> tuple[str, int]:
    """ "host:port" or "[v6]:port" -> (host, port), the port in 1-65535 (a socket refuses others with
    an OverflowError, or connects port 0 to nothing)."""
    host, sep, port = address.rpartition(":")
    if (
        not sep or not host.strip("[]") or not (port.isascii() and port.isdigit())
    ):  # not "²", which int() refuses
        raise ClientError(f"{address!r} is not of the form host:port.")
    if not 1 <= int(port) <= 65535:
        raise ClientError(f"{address!r} has port {int(port)}: a port is between 1 and 65535.")
    return host.strip("[]"), int(port)


def split_bootstrap(servers: str) -> list[str]:
    """The "host:port" entries of a comma-separated bootstrap list, each checked by split_address."""
    addresses = [a.strip() for a in servers.split(",") if a.strip()]
    if not addresses:
        raise ClientError("give at least one bootstrap server as host:port.")
    for address in addresses:
        split_address(address)
    return addresses


_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
RECEIVE_BUFFER_BYTES = 256 * 1024
MAX_API_VERSIONS_RESPONSE_BYTES = 1024 * 1024
RECEIVE_MESSAGE_MAX_BYTES = 100_000_000 + 512
"""librdkafka's receive.message.max.bytes (100000000) plus its 512 bytes of protocol overhead: a larger
announced response closes the connection before anything is allocated for it, so a broken or hostile
server cannot make a kcli tool reserve gigabytes."""
"""Far above any broker's ApiVersions answer (a few KiB); b"HTTP" read as a size is 1.2 GB."""
"""What one read may bring (asyncio's own read size); larger frames get a buffer of their own."""


def _api_versions_request(version: int) -> Any:
    cls = request_type(API_VERSIONS, version)
    if version >= 3:
        return cls(client_software_name="kcli", client_software_version=__version__)
    return cls()


def _produce_answer(framer: ProduceFramer, frame: bytes | bytearray) -> ProducePartitionAnswer:
    """By hand for the usual answer; kio reads any other (several partitions, record errors)."""
    frame = bytes(frame) if type(frame) is not bytes else frame
    answer = framer.read_answer(frame)
    if answer is None:
        answer = answer_from_response(_decode_response(response_type(PRODUCE, framer.version), frame))
    return answer


def _decode_response(response_cls: type, frame: bytes | bytearray) -> Any:
    """Skip the response header (v0 = correlation id; v1 adds tagged fields) and decode the body.

    ApiVersions always has a v0 header, and an UNSUPPORTED_VERSION answer is in the v0 format
    whatever version we asked for, so we look at its error code first.
    """
    if type(frame) is not bytes:
        frame = bytes(frame)  # kio reads bytes
    if response_cls.__api_key__ == API_VERSIONS:  # type: ignore[attr-defined]
        if _INT16.unpack_from(frame, 4)[0] == ErrorCode.unsupported_version:
            response_cls = response_type(API_VERSIONS, 0)
        offset = 4
    elif response_cls.__flexible__:  # type: ignore[attr-defined]
        offset = skip_tagged_fields(frame, 4, len(frame))
    else:
        offset = 4
    _, edits = check_sizes(response_cls, frame, offset)  # kio would abort on a huge declared array
    if edits:
        frame = without_unknown_tags(frame, edits)
    response, _ = entity_reader(response_cls)(frame, offset)
    return response


def _read_by_hand(argument: tuple[type, ResponseReader], frame: bytes | bytearray) -> Any:
    """A response read by the caller's reader after its header (v1: correlation id, tagged fields)."""
    response_cls, reader = argument
    offset = skip_tagged_fields(frame, 4, len(frame)) if response_cls.__flexible__ else 4  # type: ignore[attr-defined]
    return reader(frame, offset, response_cls.__version__)  # type: ignore[attr-defined]


_HANDSHAKE_FAILURES = (ssl.SSLError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError, EOFError)
"""What a failed TLS handshake raises: refused, or the listener closed the connection during it."""
_TLS_CONTEXTS: dict[int, tuple[ClientSecurity, ssl.SSLContext]] = {}


def _tls_context(security: ClientSecurity) -> ssl.SSLContext:
    """The SSL context of `security`, made once per ClientSecurity value (a broker's fetchers
    reconnect with the same one); a bad setting is the ClientError of its sentence."""
    cached = _TLS_CONTEXTS.get(id(security))
    if cached is not None and cached[0] is security:
        return cached[1]
    try:
        context = tls.client_context(security.ssl)
        tls.checks_host_name(security.ssl)
    except tls.TlsError as exc:
        raise ClientError(str(exc)) from None
    if len(_TLS_CONTEXTS) > 64:
        _TLS_CONTEXTS.clear()
    _TLS_CONTEXTS[id(security)] = (security, context)
    return context


async def _wait(awaitable: Any, timeout: float) -> Any:
    """`awaitable`'s result, or TimeoutError after `timeout` seconds.

    In a task, asyncio.timeout's wait rather than wait_for's: Python 3.11's wait_for returns a result
    that arrives as the waiting task is cancelled and drops the cancellation, so a Ctrl-C could be lost
    and a long run (`reassign execute`, `groups --watch`) go on to its end. A broker's request handlers
    are stepped outside tasks, where asyncio.timeout cannot be used: they keep wait_for."""
    if asyncio.current_task() is None:
        return await asyncio.wait_for(awaitable, timeout)
    async with asyncio.timeout(timeout):
        return await awaitable


class NodeConnections:
    """One connection per node, opened on first use and dropped when it fails: what a broker keeps to
    its peers (Raft voters, the active controller)."""

    def __init__(self, client_id: str, security: ClientSecurity | ReconfigurableSecurity = PLAINTEXT) -> None:
        """`security`: a ReconfigurableSecurity for a broker's own clients, whose renewed keystore or
        truststore the next connection takes (the open ones keep theirs)."""
        self.client_id = client_id
        self._security = security
        self._clients: dict[int, KafkaClient] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    @property
    def security(self) -> ClientSecurity:
        """What the next connection is opened with."""
        security = self._security
        return security.current if isinstance(security, ReconfigurableSecurity) else security

    async def send(
        self,
        node_id: int,
        address: tuple[str, int],
        request: Any | Callable[[KafkaClient], Any],
        *,
        timeout: float,
        reader: ResponseReader | None = None,
    ) -> Any | None:
        """`request` to `node_id` at `address`; None when it cannot be reached or answer within `timeout`.

        `request` may be a function of the connection that builds it, for a request sent at the newest
        version both sides speak (`client.version(api_key)`); a ClientError it raises counts as unreachable.
        A failure closes the connection it happened on (Kafka's NetworkClient disconnects on a request
        timeout), not one another send has opened since.
        """
        client = None
        try:
            client = await self._connection(node_id, address, timeout)
            if callable(request):
                request = request(client)
            return await client.send(request, timeout=timeout, reader=reader)
        except ClientError as exc:
            log.debug("%s: %s", self.client_id, exc)
            if client is not None:
                if self._clients.get(node_id) is client:
                    del self._clients[node_id]
                await client.close()
            return None

    async def _connection(self, node_id: int, address: tuple[str, int], timeout: float) -> KafkaClient:
        """The open connection to `node_id`, or a new one: sends that find none wait for one connect
        rather than each opening its own (only the last would be kept, the others never closed)."""
        client = self._clients.get(node_id)
        if client is not None and not client.closed:
            return client
        lock = self._connecting.setdefault(node_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(node_id)
            if client is None or client.closed:
                client = await KafkaClient.connect(
                    f"{address[0]}:{address[1]}",
                    client_id=self.client_id,
                    connect_timeout=timeout,
                    request_timeout=timeout,
                    security=self.security,
                )
                self._clients[node_id] = client
            return client

    async def drop(self, node_id: int) -> None:
        """Close the connection to `node_id` (its requests in flight fail); the next send reconnects."""
        client = self._clients.pop(node_id, None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
