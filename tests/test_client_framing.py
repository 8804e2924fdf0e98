"""KafkaClient's framing over a real loopback socket: responses cut at every byte boundary a network can
cut them, several in one read, and frames larger than the receive buffer (a follower's fetch), arrive
whole and in order. The server is a plain asyncio server that writes real response frames in chosen
pieces; the client is kcli's own."""

from __future__ import annotations

import asyncio
import struct
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from kcli.client import RECEIVE_BUFFER_BYTES, KafkaClient
from kcli.protocol.codec import entity_write
from kcli.protocol.messages import nested_type, request_type, response_type

pytestmark = pytest.mark.timeout(60)

API_VERSIONS, FETCH = 18, 1


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

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            client = await KafkaClient.connect(f"127.0.0.1:{port}", negotiate=False, request_timeout=30)
            try:
                futures = [client.send_nowait(fetch_request()) for _ in payloads]
                responses = await asyncio.wait_for(asyncio.gather(*futures), 30)
            finally:
                await client.close()
        finally:
            server.close()
            await server.wait_closed()
        return [bytes(r.responses[0].partitions[0].records) for r in responses]

    assert asyncio.run(run()) == payloads
