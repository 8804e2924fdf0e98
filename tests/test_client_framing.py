"""KafkaClient's framing over a real loopback socket: responses cut at every byte boundary a network can
cut them, several in one read, and frames larger than the receive buffer (a follower's fetch), arrive
whole and in order. The server is a plain asyncio server that writes real response frames in chosen
pieces; the client is kcli's own. NodeConnections, a broker's one connection per peer, is checked through a
counting proxy in front of a real broker."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from conftest import BrokerProcess
from kio.schema.errors import ErrorCode

from kcli.client import (
    RECEIVE_BUFFER_BYTES,
    RECEIVE_MESSAGE_MAX_BYTES,
    ClientError,
    KafkaClient,
    NodeConnections,
    split_bootstrap,
)
from kcli.protocol.codec import entity_write
from kcli.protocol.messages import nested_type, request_type, response_type

pytestmark = pytest.mark.timeout(60)

API_VERSIONS, FETCH = 18, 1
T = TypeVar("T")
Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def fetch_response(records: bytes) -> object:
    cls = response_type(FETCH, 4)
    partition = nested_type(cls, "PartitionData")(
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=1,
        last_stable_offset=1,
        aborted_transactions=(),
        records=records,
    )
    topic = nested_type(cls, "FetchableTopicResponse")(topic="t", partitions=(partition,))
    return cls(throttle_time=timedelta(0), responses=(topic,))


def frame(correlation_id: int, response: object) -> bytes:
    body = bytearray(struct.pack(">i", correlation_id))
    entity_write(type(response))(body, response)
    return struct.pack(">i", len(body)) + bytes(body)


async def _against(serve: Serve, use: Callable[[KafkaClient], Awaitable[T]]) -> T:
    """`use` a client connected (without ApiVersions) to a plain asyncio server running `serve`."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        client = await KafkaClient.connect(f"127.0.0.1:{port}", negotiate=False, request_timeout=30)
        try:
            return await use(client)
        finally:
            await client.close()
    finally:
        server.close()
        await server.wait_closed()


def fetch_request() -> object:
    cls = request_type(FETCH, 4)
    return cls(replica_id=-1, max_wait=timedelta(0), min_bytes=0, max_bytes=1, isolation_level=0, topics=())


@pytest.mark.parametrize("pieces", [[1], [3, 5, 7], [4096], [RECEIVE_BUFFER_BYTES - 3], [1 << 22]])
def test_responses_cut_anywhere_arrive_whole_and_in_order(pieces: list[int]) -> None:
    sizes = [0, 10, RECEIVE_BUFFER_BYTES - 40, RECEIVE_BUFFER_BYTES + 1, 3 << 20, 7]
    if max(pieces) < 64:
        sizes.remove(3 << 20)  # byte-sized cuts of 3 MiB take seconds and prove no more than of 256 KiB
    payloads = [bytes((i * 7 + k) % 251 for k in range(n)) for i, n in enumerate(sizes)]

    async def run() -> list[bytes]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ids = []
            for _ in payloads:  # every request first, then the answers as one stream cut into pieces
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                request = await reader.readexactly(size)
                ids.append(struct.unpack_from(">i", request, 4)[0])
            stream = b"".join(frame(i, fetch_response(p)) for i, p in zip(ids, payloads, strict=True))
            position, k = 0, 0
            while position < len(stream):
                step = pieces[k % len(pieces)]
                writer.write(stream[position : position + step])
                await writer.drain()
                position, k = position + step, k + 1
            await reader.read()  # until the client goes
            writer.close()

        async def use(client: KafkaClient) -> list[Any]:
            futures = [client.send_nowait(fetch_request()) for _ in payloads]
            return await asyncio.wait_for(asyncio.gather(*futures), 30)

        responses = await _against(serve, use)
        return [bytes(r.responses[0].partitions[0].records) for r in responses]

    assert asyncio.run(run()) == payloads


NOT_KAFKA = {
    "closes": b"",
    "http 400, stays open": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    "http 400, closes": b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n",
    "small frame, unknown correlation id": b"\x00\x00\x00\x06garbag",
}


@pytest.mark.parametrize("answer", NOT_KAFKA.values(), ids=NOT_KAFKA.keys())
def test_a_listener_that_is_not_kafka_fails_the_connect_at_once(answer: bytes) -> None:
    """The ApiVersions answer is the first frame: a close or bytes that cannot be it end the connect
    with one sentence, not after the 30 s request timeout."""

    async def run() -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(4096)
            if answer:
                writer.write(answer)
                await writer.drain()
            if not answer or b"close" in answer:
                writer.close()
            else:
                await reader.read()  # keeps the connection open until the client goes

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with pytest.raises(ClientError) as caught:
                await asyncio.wait_for(KafkaClient.connect(f"127.0.0.1:{port}"), 5)
        return str(caught.value)

    message = asyncio.run(run())
    assert message.endswith(  # a connection closed with no answer: perhaps a TLS listener
        (
            "is it a Kafka listener?",
            "is it a Kafka listener (a TLS one wants security.protocol SSL or SASL_SSL)?",
        )
    ), message
    assert message.startswith("127.0.0.1:"), message


@pytest.mark.parametrize(
    "address", ["127.0.0.1:70000", "127.0.0.1:0", "127.0.0.1", ":9092", "host:x", "host:9²"]
)
def test_a_bootstrap_address_outside_host_port_is_one_sentence(address: str) -> None:
    with pytest.raises(ClientError, match=r"host:port|between 1 and 65535"):
        split_bootstrap(f"127.0.0.1:9092,{address}")


def test_a_request_that_cannot_be_encoded_leaves_no_future_behind() -> None:
    """A value beyond its protocol field is a ClientError from send, and the connection stays usable."""

    async def run() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = await KafkaClient.connect(f"127.0.0.1:{port}", negotiate=False)
            request = request_type(FETCH, 4)(
                replica_id=-1,
                max_wait=timedelta(0),
                min_bytes=0,
                max_bytes=1 << 40,
                isolation_level=0,
                topics=(),
            )
            with pytest.raises(ClientError, match="cannot encode the Fetch request"):
                client.send_nowait(request)
            assert not client._pending
            await client.close()

    asyncio.run(run())


def test_an_oversized_response_ends_the_connection_with_one_sentence_before_any_allocation() -> None:
    """A server announcing 2 GB (a broken or hostile one) fails the request at once; nothing that size
    is reserved (librdkafka's receive.message.max.bytes)."""

    async def run() -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            request = await reader.readexactly(size)
            writer.write(
                struct.pack(">ii", 2_000_000_000, struct.unpack_from(">i", request, 4)[0]) + bytes(100)
            )
            await writer.drain()
            await reader.read()  # until the client goes
            writer.close()

        async def use(client: KafkaClient) -> str:
            with pytest.raises(ClientError) as failure:
                await client.send(fetch_request())
            return str(failure.value)

        return await _against(serve, use)

    sentence = asyncio.run(run())
    assert sentence == (
        f"127.0.0.1:{sentence.split(':')[1].split(' ')[0]} announced a response of 2000000000 bytes, more than "
        f"the {RECEIVE_MESSAGE_MAX_BYTES} a client accepts (receive.message.max.bytes)."
    )


def test_node_connections_open_one_connection_for_sends_that_race(broker: BrokerProcess) -> None:
    """Sends to a node with no connection yet share one connect; before, each opened its own, and all but
    the last stayed open, unreferenced, for the life of the broker holding them. Through a loopback
    proxy to a real broker that counts the connections it is asked for."""

    async def run() -> tuple[int, list[object]]:
        accepted = 0

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            upstream_reader, upstream_writer = await asyncio.open_connection(broker.host, broker.port)
            await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

        server = await asyncio.start_server(proxy, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()[:2]
        connections = NodeConnections("test-node-connections")
        try:
            answers = await asyncio.gather(
                *(connections.send(1, address, fetch_request(), timeout=30) for _ in range(5))
            )
        finally:
            await connections.close()
            server.close()
        return accepted, answers

    accepted, answers = asyncio.run(run())
    assert all(answer is not None for answer in answers)
    assert accepted == 1


def test_a_cancel_that_meets_the_response_is_not_lost() -> None:
    """A task cancelled (Ctrl-C) just as its response arrives ends cancelled: Python 3.11's wait_for
    returned the response and dropped the cancellation, so `reassign execute` once ran on after a
    Ctrl-C. The cancel here runs after the response is set and before the waiting task resumes."""

    async def run() -> asyncio.Task[Any]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            request = await reader.readexactly(size)
            writer.write(frame(struct.unpack_from(">i", request, 4)[0], fetch_response(b"")))
            await writer.drain()
            await reader.read()

        async def use(client: KafkaClient) -> asyncio.Task[Any]:
            task = asyncio.create_task(client.send(fetch_request()))
            while not client._pending:  # the request is out: its response future is there
                await asyncio.sleep(0)
            [(_, _, future)] = client._pending.values()
            future.add_done_callback(lambda _: task.cancel())  # after the waiter's own callback
            await asyncio.wait([task], timeout=10)
            return task

        return await _against(serve, use)

    task = asyncio.run(run())
    assert task.done()
    assert task.cancelled() or task.cancelling() == 0, "the task ran on with its cancellation dropped"
