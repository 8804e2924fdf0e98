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
import itertools
import struct
from types import TracebackType
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader

from kcli import __version__
from kcli.broker.apis import api_name, kio_versions, request_type, response_type
from kcli.broker.apis.codec import entity_write
from kcli.broker.apis.guard import check_sizes, skip_tagged_fields, without_unknown_tags
from kcli.errors import KcliError

API_VERSIONS = 18
DEFAULT_REQUEST_TIMEOUT = 30.0


class ClientError(KcliError):
    """Cannot connect, the connection broke, a request timed out, or no common API version."""


class KafkaClient:
    """One connection to one broker, with ApiVersions negotiation and pipelined requests."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        address: str,
        client_id: str = "kcli",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._reader = reader
        self._writer = writer
        self._correlation_ids = itertools.count(1)
        self._pending: dict[int, tuple[type, asyncio.Future[Any]]] = {}
        self._closed_error: ClientError | None = None
        self._read_task = asyncio.create_task(self._read_responses())

    @classmethod
    async def connect(
        cls,
        bootstrap: str,
        *,
        client_id: str = "kcli",
        connect_timeout: float = 10.0,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        negotiate: bool = True,
    ) -> KafkaClient:
        """Connect to "host:port" and, unless told not to, learn the broker's API versions."""
        host, port = split_address(bootstrap)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=1 << 20), connect_timeout
            )
        except TimeoutError:
            raise ClientError(
                f"cannot connect to {bootstrap}: timed out after {connect_timeout:g} s."
            ) from None
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise ClientError(f"cannot connect to {bootstrap}: {reason}.") from None
        client = cls(reader, writer, address=bootstrap, client_id=client_id, request_timeout=request_timeout)
        if negotiate:
            try:
                await client.negotiate_versions()
            except BaseException:
                await client.close()
                raise
        return client

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

    async def send(self, request: Any, *, timeout: float | None = None) -> Any:
        """Send one request and wait for its response."""
        future = self.send_nowait(request)
        limit = self.request_timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(future, limit)
        except TimeoutError:
            name = api_name(request.__api_key__)
            raise ClientError(f"{name} request to {self.address} timed out after {limit:g} s.") from None

    def send_nowait(self, request: Any) -> asyncio.Future[Any]:
        """Write a request now and return the future of its response (for pipelining)."""
        self._check_open()
        correlation_id = next(self._correlation_ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (response_type(request.__api_key__, request.__version__), future)
        self._writer.write(self._encode(request, correlation_id))
        return future

    async def send_without_response(self, request: Any) -> None:
        """For requests the broker does not answer (Produce with acks=0)."""
        self._check_open()
        self._writer.write(self._encode(request, next(self._correlation_ids)))
        await self._writer.drain()

    async def close(self) -> None:
        if self._closed_error is None:
            self._closed_error = ClientError(f"the connection to {self.address} is closed.")
        self._writer.close()
        self._read_task.cancel()
        try:
            await self._read_task
        except (asyncio.CancelledError, Exception):
            pass
        try:
            await self._writer.wait_closed()
        except OSError:
            pass
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
        entity_write(header_type)(out, header)
        entity_write(type(request))(out, request)
        _INT32.pack_into(out, 0, len(out) - 4)
        return out

    async def _read_responses(self) -> None:
        try:
            while True:
                (size,) = _INT32.unpack(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _INT32.unpack_from(frame)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue  # the caller timed out and went away
                response_cls, future = entry
                if future.done():
                    continue
                try:
                    future.set_result(_decode_response(response_cls, frame))
                except Exception as exc:
                    future.set_exception(ClientError(f"cannot decode a response from {self.address}: {exc}."))
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, OSError) as exc:
            reason = "closed by the broker" if isinstance(exc, asyncio.IncompleteReadError) else str(exc)
            self._closed_error = ClientError(f"the connection to {self.address} was {reason}.")
            self._fail_pending(self._closed_error)

    def _fail_pending(self, error: ClientError) -> None:
        pending, self._pending = self._pending, {}
        for _, future in pending.values():
            if not future.done():
                future.set_exception(error)

    def _check_open(self) -> None:
        if self._closed_error is not None:
            raise self._closed_error


def split_address(address: str) -> tuple[str, int]:
    """ "host:port" or "[v6]:port" -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ClientError(f"{address!r} is not of the form host:port.")
    return host.strip("[]"), int(port)


_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")


def _api_versions_request(version: int) -> Any:
    cls = request_type(API_VERSIONS, version)
    if version >= 3:
        return cls(client_software_name="kcli", client_software_version=__version__)
    return cls()


def _decode_response(response_cls: type, frame: bytes) -> Any:
    """Skip the response header (v0 = correlation id; v1 adds tagged fields) and decode the body.

    ApiVersions always has a v0 header, and an UNSUPPORTED_VERSION answer is in the v0 format
    whatever version we asked for, so we look at its error code first.
    """
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
