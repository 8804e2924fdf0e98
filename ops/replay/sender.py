"""The producer side of a replay: Produce requests to each partition's leader, one connection per leader.

Batches of a partition are sent in the order they were submitted, at most `max_in_flight` of them at
once (five with idempotence, the broker's de-duplication window) and MAX_BYTES_IN_FLIGHT in all; with
an idempotent producer (InitProducerId) each batch takes its partition's next sequence number. A batch
that fails with a retriable error is sent again, in order, once its partition's other batches are back;
an acknowledgement goes to the `on_ack` callback, in whatever order the leaders answer.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import ClientError, KafkaClient
from kcli.cluster import Cluster
from kcli.protocol.messages import build
from kcli.protocol.produce_codec import ProduceFramer, ProducePartitionAnswer
from ops.replay.batch import OutBatch
from ops.replay.options import MAX_IN_FLIGHT, ReplayError, ReplayOptions

INIT_PRODUCER_ID = 22
PRODUCE_VERSION_MAX = 12  # v13 names topics by id only; v12 is served by every Kafka since 3.7
MAX_BYTES_IN_FLIGHT = 64 << 20
RETRIES = 10
"""InitProducerId attempts before the replay stops."""
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
"""Kafka's retry.backoff.ms and retry.backoff.max.ms (KIP-580): the pause doubles up to the max."""
DELIVERY_TIMEOUT_S = 120.0
"""Kafka's delivery.timeout.ms: how long a failed batch is retried (a broker restart, a leader move)."""
TRANSACTION_TIMEOUT = datetime.timedelta(minutes=1)


class Sender:
    """Produce requests to partition leaders, in order per partition, with idempotence when offered."""

    def __init__(
        self,
        cluster: Cluster,
        metadata: Any,
        options: ReplayOptions,
        on_ack: Callable[[OutBatch, int], None],
        warn: Callable[[str], object],
    ) -> None:
        self.cluster = cluster
        self.replaced: list[Cluster] = []  # bootstrap connections given up after an error, closed at the end
        self.options = options
        self.topic = options.topic
        self.on_ack = on_ack
        self.warn = warn
        self.leaders = {p: metadata.leaders[(self.topic, p)] for p in metadata.partitions(self.topic)}
        self.brokers: dict[int, str] = dict(metadata.brokers)
        self.clients: dict[int, KafkaClient] = {}
        self.parts = {p: _PartitionState() for p in self.leaders}
        self.idempotent = False
        self.producer_id = -1
        self.producer_epoch = -1
        self.failure: BaseException | None = None
        self.changed = asyncio.Event()
        self.bytes_in_flight = 0
        self.sent_bytes = 0
        self.started = time.monotonic()
        self.tasks: set[asyncio.Task[None]] = set()
        self.max_in_flight = options.max_in_flight
        self.framers: dict[KafkaClient, ProduceFramer] = {}  # Produce requests at each connection's version
        self.timeout_ms = round(options.request_timeout * 1000)
        self.rate = options.rate
        self.closing = False

    async def start(self) -> None:
        wanted = self.options.idempotence
        if wanted is False:
            return
        bootstrap = self.cluster.bootstrap
        if INIT_PRODUCER_ID not in bootstrap.broker_versions:
            if wanted:
                raise ReplayError(
                    f"{self.options.bootstrap_servers} does not support idempotence (no InitProducerId): "
                    "run with --no-idempotence."
                )
            self.warn(
                f"kcli replay: warning: {self.options.bootstrap_servers} does not support idempotence "
                "(no InitProducerId): going on without it, so a retried batch may be written twice."
            )
            return
        cls = bootstrap.request_type(INIT_PRODUCER_ID)
        request = build(
            cls,
            transactional_id=None,
            transaction_timeout=TRANSACTION_TIMEOUT,
            producer_id=-1,
            producer_epoch=-1,
        )
        for attempt in range(RETRIES):
            response = await bootstrap.send(request)
            if response.error_code == ErrorCode.none:
                self.idempotent = True
                self.producer_id = response.producer_id
                self.producer_epoch = response.producer_epoch
                self.max_in_flight = min(self.max_in_flight, MAX_IN_FLIGHT)
                return
            if not response.error_code.retriable or attempt == RETRIES - 1:
                raise ReplayError(
                    f"{self.options.bootstrap_servers} answered InitProducerId with "
                    f"{response.error_code.name.upper()}."
                )
            await asyncio.sleep(RETRY_BACKOFF_S * (attempt + 1))

    async def submit(self, out: OutBatch) -> None:
        """Send `out` once its partition has room; raises what stopped the replay.

        The batch takes its sequence number here, since submit() is called in generation order; while it
        waits for room, a failed batch of its partition may be sent again first, but never one after it.
        """
        state = self.parts[out.partition]
        if self.idempotent:
            out.encode(self.producer_id, self.producer_epoch, state.next_sequence)
            state.next_sequence = (state.next_sequence + out.count) % (1 << 31)
        else:
            out.encode(-1, -1, -1)
        if out.raw is not None:
            out.raw = b""  # the payload holds the bytes now
        size = len(out.payload)
        if self.rate:
            await self._pace(size)
        while (
            state.retrying
            or state.in_flight >= self.max_in_flight
            or self.bytes_in_flight >= MAX_BYTES_IN_FLIGHT
        ) and self.failure is None:
            self.changed.clear()
            await self.changed.wait()
        if self.failure is not None:
            raise self.failure
        state.in_flight += 1
        self.bytes_in_flight += size
        client = self.clients.get(self.leaders.get(out.partition, -1))
        if client is None:
            try:
                client = await self._leader(out.partition)
            except ClientError as e:  # the leader is away: retried like a request that failed
                self._failed(out, None, e)
                return
        self._send(client, out)

    async def drain(self) -> None:
        """Wait until every batch is acknowledged (or raise what failed)."""
        while True:
            if self.failure is not None:
                raise self.failure
            if all(s.in_flight == 0 and not s.retrying for s in self.parts.values()):
                return
            self.changed.clear()
            await self.changed.wait()

    async def close(self) -> None:
        self.closing = True  # what the connections fail as they close is not retried
        for task in list(self.tasks):
            task.cancel()
        clients = list(self.clients.values())  # a failed request's callback may drop its client meanwhile
        self.clients.clear()
        for client in clients:
            await client.close()
        for cluster in self.replaced[1:]:  # the first is the caller's
            await cluster.close()
        if self.replaced:
            await self.cluster.close()

    async def _pace(self, size: int) -> None:
        rate = self.rate
        assert rate
        self.sent_bytes += size
        ahead = self.sent_bytes / rate - (time.monotonic() - self.started)
        if ahead > 0:
            await asyncio.sleep(ahead)

    async def _leader(self, partition: int) -> KafkaClient:
        node = self.leaders.get(partition, -1)
        if node < 0:
            await self._refresh()
            node = self.leaders.get(partition, -1)
            if node < 0:
                raise ClientError(f"{self.topic}-{partition} has no leader.")
        client = self.clients.get(node)
        if client is None:
            address = self.brokers.get(node)
            if address is None:
                raise ClientError(f"broker {node} is not in the cluster metadata.")
            client = await KafkaClient.connect(
                address,
                client_id=self.options.client_id,
                request_timeout=self.options.request_timeout,
                security=self.options.security,
                connect_timeout=self.options.connect_timeout,
            )
            self.clients[node] = client
        return client

    async def _refresh(self) -> None:
        """Leaders again from the metadata; a broken bootstrap connection is replaced (a broker restarted)."""
        try:
            metadata = await self.cluster.metadata([self.topic])
        except ClientError:
            self.replaced.append(self.cluster)
            self.cluster = await Cluster.connect(
                self.options.bootstrap_servers,
                client_id=self.options.client_id,
                request_timeout=self.options.request_timeout,
                security=self.options.security,
                connect_timeout=self.options.connect_timeout,
            )
            metadata = await self.cluster.metadata([self.topic])
        self.brokers = dict(metadata.brokers)
        for p in self.parts:
            self.leaders[p] = metadata.leaders.get((self.topic, p), -1)

    def _send(self, client: KafkaClient, out: OutBatch) -> None:
        framer = self.framers.get(client)
        try:
            if framer is None:
                framer = self.framers[client] = client.produce_framer(
                    self.topic,
                    acks=self.options.acks,
                    timeout_ms=self.timeout_ms,
                    highest=PRODUCE_VERSION_MAX,
                )
            client.produce(
                framer, out.partition, out.payload, functools.partial(self._completed, out, client)
            )
        except ClientError as e:
            self._failed(out, client, e)

    def _completed(
        self,
        out: OutBatch,
        client: KafkaClient,
        answer: ProducePartitionAnswer | None,
        error: ClientError | None,
    ) -> None:
        if self.closing:
            return
        if answer is None:
            self._failed(out, client, error)
            return
        code = answer.error_code
        if code is ErrorCode.none or code is ErrorCode.duplicate_sequence_number:
            self._finished(out)
            try:
                self.on_ack(out, answer.base_offset)
            except BaseException as e:  # raised again from submit() or drain()
                self._fail(e)
        elif code.retriable or (
            code is ErrorCode.out_of_order_sequence_number and self.parts[out.partition].retry
        ):
            self._failed(out, client, None, code)
        else:
            self._fail(self._refusal(out, code, answer))

    def _failed(
        self,
        out: OutBatch,
        client: KafkaClient | None,
        error: BaseException | None,
        code: ErrorCode | None = None,
    ) -> None:
        """A batch to send again once its partition's in-flight batches are back."""
        state = self.parts[out.partition]
        why = str(error) if error is not None else (code.name.upper() if code is not None else "an error")
        if self._gives_up(out, why):
            return
        if error is not None and client is not None:
            self._drop_client(client)
        state.in_flight -= 1
        self.bytes_in_flight -= len(out.payload)
        state.retry.append(out)
        state.retrying = True
        self._maybe_resend(out.partition)
        self.changed.set()

    def _gives_up(self, out: OutBatch, why: str) -> bool:
        """Count a failed attempt; past Kafka's delivery timeout the replay stops with `why`."""
        now = asyncio.get_running_loop().time()
        out.attempts += 1
        if out.failed_at is None:
            out.failed_at = now
        if now - out.failed_at <= DELIVERY_TIMEOUT_S:
            return False
        self._fail(
            ReplayError(
                f"gave up on {self.topic}-{out.partition} after {out.attempts} attempts in "
                f"{DELIVERY_TIMEOUT_S:g} s (Kafka's delivery.timeout.ms): {why}"
            )
        )
        return True

    def _maybe_resend(self, partition: int) -> None:
        """Failed batches go again once nothing of their partition is in flight (so order holds)."""
        state = self.parts[partition]
        if state.retry and state.in_flight == 0 and not state.resending:
            state.resending = True
            task = asyncio.get_running_loop().create_task(self._resend(partition))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _resend(self, partition: int) -> None:
        """Send a partition's failed batches again, in order, one at a time, after a growing pause."""
        state = self.parts[partition]
        try:
            while state.retry and self.failure is None:
                out = min(state.retry, key=lambda b: b.index)
                await asyncio.sleep(min(RETRY_BACKOFF_S * 2 ** (out.attempts - 1), RETRY_BACKOFF_MAX_S))
                try:
                    await self._refresh()
                    client = await self._leader(partition)
                except ClientError as e:  # the leader is not back yet: that counts as an attempt
                    if self._gives_up(out, str(e)):
                        return
                    continue
                state.retry.remove(out)
                state.in_flight += 1
                self.bytes_in_flight += len(out.payload)
                self._send(client, out)
                while state.in_flight and self.failure is None:
                    self.changed.clear()
                    await self.changed.wait()
        except ReplayError as e:
            self._fail(e)
        finally:
            state.resending = False
            state.retrying = bool(state.retry) and self.failure is None
            self.changed.set()

    def _finished(self, out: OutBatch) -> None:
        state = self.parts[out.partition]
        state.in_flight -= 1
        self.bytes_in_flight -= len(out.payload)
        out.payload = b""
        if state.retry:
            self._maybe_resend(out.partition)
        self.changed.set()

    def _drop_client(self, client: KafkaClient) -> None:
        self.framers.pop(client, None)
        for node, known in list(self.clients.items()):
            if known is client:
                del self.clients[node]
                task = asyncio.get_running_loop().create_task(client.close())
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    def _refusal(self, out: OutBatch, code: ErrorCode, answer: ProducePartitionAnswer) -> ReplayError:
        first = out.runs[0][0]
        message = answer.error_message
        detail = f" ({message})" if message else ""
        advice = ""
        if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
            advice = "; lower --batch-bytes, or use --mode record for batches larger than max.message.bytes"
        return ReplayError(
            f"{self.topic}-{out.partition} refused the batch from {out.source} offset {first} with "
            f"{code.name.upper()}{detail}{advice}."
        )

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
        self.changed.set()


class _PartitionState:
    __slots__ = ("in_flight", "next_sequence", "retry", "retrying", "resending")

    def __init__(self) -> None:
        self.in_flight = 0
        self.next_sequence = 0
        self.retry: list[OutBatch] = []
        self.retrying = False  # new batches wait until the failed ones are through
        self.resending = False
