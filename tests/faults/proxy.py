"""Per-link loopback proxies: every connection to a node passes through its proxy, which can cut links.

One `NodeProxy` per destination node and listener (client, controller). The source of a connection is
read from the client id of its first Kafka request: kcli's node-to-node connections say who they are
(`broker-<id>-...`: the lifecycle's `broker-<id>-to-controller`, the replica fetchers'
`broker-<id>-fetcher-<n>`; `raft-client-<id>`), anything else is a client and is never cut.

Cutting link A->B closes the open connections A made to B and blackholes new ones (accepted, read,
never forwarded) until the link is healed: what a dropped route looks like to A, a request that gets no
answer until its timeout, rather than a refused connection that would fail at once.
"""

from __future__ import annotations

import asyncio
import re
import struct
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

FIRST_FRAME_TIMEOUT_S = 10.0
MAX_FIRST_FRAME = 1 << 20
_NODE_CLIENT_ID = re.compile(r"^(?:broker-(\d+)-|raft-client-(\d+)$)")


def source_node(client_id: str | None) -> int | None:
    """The node a kcli node-to-node connection comes from, by its client id; None for a client."""
    if not client_id:
        return None
    match = _NODE_CLIENT_ID.match(client_id)
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def client_id_of(frame: bytes) -> str | None:
    """The client id of a request frame (int32 size, int16 api key, int16 version, int32 correlation id,
    int16-length string); None when the header has none (request header v0) or it is cut short."""
    if len(frame) < 14:
        return None
    (length,) = struct.unpack_from(">h", frame, 12)
    if length < 0 or len(frame) < 14 + length:
        return None
    return frame[14 : 14 + length].decode("utf-8", "replace")


@dataclass(eq=False)
class _Connection:
    """One proxied connection (hashed by identity, kept in a set while open)."""

    source: int | None
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class NodeProxy:
    """Listens on `listen_port` and forwards to `target_port` (both on 127.0.0.1) for node `node_id`."""

    def __init__(self, links: LinkTable, node_id: int, listen_port: int, target_port: int) -> None:
        self.links = links
        self.node_id = node_id
        self.listen_port = listen_port
        self.target_port = target_port
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()

    def close_from(self, source: int) -> int:
        """Close every open connection `source` made to this node; how many."""
        closing = [c for c in self.connections if c.source == source]
        for connection in closing:
            connection.close()
        return len(closing)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(None, [writer])
        self.connections.add(connection)
        try:
            first = await asyncio.wait_for(_read_frame(reader), FIRST_FRAME_TIMEOUT_S)
            if first is None:
                return
            connection.source = source_node(client_id_of(first))
            self.links.count_connection(connection.source, self.node_id)
            if self.links.is_cut(connection.source, self.node_id):
                await _blackhole(reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return  # the node is down: the source sees its connection closed, as it would
            connection.writers.append(up_writer)
            up_writer.write(first)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.connections.discard(connection)
            connection.close()


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    head = await reader.readexactly(4)
    (size,) = struct.unpack(">i", head)
    if not 0 <= size <= MAX_FIRST_FRAME:
        return None
    return head + await reader.readexactly(size)


async def _blackhole(reader: asyncio.StreamReader) -> None:
    """Read and drop until the peer goes away or the connection is closed (a cut, then a heal)."""
    while await reader.read(65536):
        pass


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


class LinkTable:
    """Which links (source node -> destination node) are cut; counts of the connections seen per link."""

    def __init__(self) -> None:
        self.cut: set[tuple[int, int]] = set()
        self.connections: dict[tuple[int | None, int], int] = {}

    def is_cut(self, source: int | None, destination: int) -> bool:
        return source is not None and (source, destination) in self.cut

    def count_connection(self, source: int | None, destination: int) -> None:
        self.connections[(source, destination)] = self.connections.get((source, destination), 0) + 1


class ProxySet:
    """The proxies of a cluster, on an event loop in a thread of their own; cut and heal from any thread."""

    def __init__(self, routes: Iterable[tuple[int, int, int]]) -> None:
        """`routes`: (node id, proxy port, node port) for every listener of every node."""
        self.links = LinkTable()
        self.proxies = [NodeProxy(self.links, n, listen, target) for n, listen, target in routes]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faults-proxies", daemon=True)

    def start(self) -> None:
        self._thread.start()
        for proxy in self.proxies:
            self._call(proxy.start())

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        for proxy in self.proxies:
            self._call(proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def cut(self, links: Iterable[tuple[int, int]]) -> None:
        """Cut each (source, destination) link: its open connections close, new ones are blackholed."""
        self._call(self._cut(list(links)))

    def heal(self) -> None:
        """Heal every cut link; the blackholed connections are closed so their sources reconnect."""
        self._call(self._heal())

    @property
    def cut_links(self) -> set[tuple[int, int]]:
        return set(self.links.cut)

    async def _cut(self, links: list[tuple[int, int]]) -> None:
        for source, destination in links:
            self.links.cut.add((source, destination))
            for proxy in self.proxies:
                if proxy.node_id == destination:
                    proxy.close_from(source)

    async def _heal(self) -> None:
        healed = set(self.links.cut)
        self.links.cut.clear()
        for source, destination in healed:
            for proxy in self.proxies:
                if proxy.node_id == destination:
                    proxy.close_from(source)

    def _call(self, coroutine: Any, timeout: float = 10.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout)
