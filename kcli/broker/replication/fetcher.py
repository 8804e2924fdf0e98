"""Followers pull from leaders (Kafka's ReplicaFetcherManager and ReplicaFetcherThread).

One fetcher per source broker (num.replica.fetchers = 1) keeps a long-poll Fetch going for every
partition this broker follows there: fetch offset = the local log end, last fetched epoch = the local
log's latest epoch, the current leader epoch, and this broker's id and epoch in ReplicaState, so the
leader knows who fetched what. The fetch keeps an incremental fetch session with the leader (KIP-227,
fetch_session_handler.py): after the first, full, fetch a request names only the partitions whose fetch
changed (a new log end, epoch or log start) and the ones to forget, and the answer only the partitions
with news; the others keep their state here. What a fetch asks of each partition is kept from one
fetch to the next and made again only for the partitions an answer, a delay or the metadata touched
(and for all of them every FULL_BUILD_INTERVAL seconds, or at every fetch while some replica is
throttled), so a fetch costs the partitions that changed, not all it follows. The answer is read by hand (protocol.fetch_codec), its records left
as views of the response frame, so they reach the segment file with no copy in Python; it is
applied as Kafka's follower applies it:
- records are appended as they are (leader's offsets and epochs), then the leader's high watermark is
  taken up to the local log end, and its log start offset;
- a diverging epoch truncates the local log to where it agrees with the leader's (KIP-320/KIP-595), so
  a replica coming back from a lost leadership never keeps records the new leader does not have;
- OFFSET_OUT_OF_RANGE asks the leader for its log end (below ours: truncate, after an unclean election)
  and its log start (above ours: start over there);
- a partition listed in follower.replication.throttled.replicas and out of sync is left out of the
  fetch while this broker's follower replication rate is over follower.replication.throttled.rate
  (KIP-73, see quota.py);
- FENCED_LEADER_EPOCH parks the partition until the metadata names a newer epoch; UNKNOWN_LEADER_EPOCH
  and NOT_LEADER_OR_FOLLOWER (the leader our metadata names has not applied it yet) are retried after
  50 ms, doubling up to replica.fetch.backoff.ms: the leader catches up within a metadata round trip,
  and Kafka's whole backoff there was most of a failover's second after the fencing; other errors back
  off replica.fetch.backoff.ms.
A partition's fetch state is replaced whenever the metadata names a new leader or leader epoch, so an
answer to a request sent before that is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.log import LogStorageError, OffsetOutOfRange, RecordError
from kcli.broker.replication.fetch_session_handler import FetchSessionHandler, PartitionData
from kcli.broker.replication.partition import Partition
from kcli.broker.replication.purgatory import PartitionKey
from kcli.broker.replication.quota import ReplicationQuotaManager
from kcli.client import NodeConnections
from kcli.protocol.fetch_codec import read_fetch_response
from kcli.protocol.messages import nested_type, request_type
from kcli.security import PLAINTEXT, ClientSecurity, ReconfigurableSecurity

log = logging.getLogger("kcli.broker.replication")

FETCH = 1
FETCH_VERSION = 16
LIST_OFFSETS = 2
LIST_OFFSETS_VERSION = 7
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
_MIN_THROTTLE_WAIT = 0.001
"""A throttled partition is looked at again no sooner than this (no busy loop at the bound)."""
LAGGING_LEADER_RETRY_MS = 50
"""The first retry of a partition whose leader has not applied the metadata naming it yet."""
FULL_BUILD_INTERVAL = 10.0
"""Seconds between two looks at every followed partition's fetch (its log start moved by retention)."""


@dataclass(eq=False)
class PartitionFetchState:
    """What one followed partition's next fetch needs; replaced on every new leader epoch."""

    topic_id: uuid.UUID
    leader_id: int
    leader_epoch: int
    delayed_until: float = 0.0
    fenced: bool = False
    lag: int | None = None
    """The leader's high watermark minus our log end after the last answer; None before the first."""
    lagging_answers: int = 0
    """Answers in a row from a leader that has not applied the metadata naming it yet."""

    @property
    def is_replica_in_sync(self) -> bool:
        """PartitionFetchState.isReplicaInSync: caught up with the leader's high watermark."""
        return self.lag is not None and self.lag <= 0


@dataclass(frozen=True)
class FetcherConfig:
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    request_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    security: ClientSecurity | ReconfigurableSecurity = PLAINTEXT
    """How to reach the leaders: the inter-broker listener's protocol, its ssl.* settings and the
    inter-broker SASL mechanism's credentials (BrokerConfig.inter_broker_security); a broker's is
    reconfigured when its keystore or truststore is renewed."""


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader it follows partitions on.

    It is given what it uses of the replica manager (the hosted partitions, the brokers' addresses,
    the follower quota) rather than the manager itself, so the manager's module is the only one that
    knows both."""

    def __init__(
        self,
        node_id: int,
        config: FetcherConfig,
        broker_epoch: Callable[[], int],
        *,
        partition: Callable[[str, int], Partition | None],
        broker_address: Callable[[int], tuple[str, int] | None],
        quota: ReplicationQuotaManager,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.broker_epoch = broker_epoch
        self.partition = partition
        """The hosted partition, or None (ReplicaManager.partition)."""
        self.broker_address = broker_address
        """Where a broker listens, from the current metadata (ReplicaManager.broker_address)."""
        self.quota = quota
        """This broker's follower replication quota (QuotaFactory's quotas.follower)."""
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._follows: dict[PartitionKey, int] = {}  # partition -> source broker

    def follow(self, partition: Partition, topic_id: uuid.UUID) -> None:
        """(Re)start fetching `partition` from its leader in its current leader epoch."""
        self.stop_following(partition.key)
        fetcher = self._fetchers.get(partition.leader_id)
        if fetcher is None:
            fetcher = self._fetchers[partition.leader_id] = ReplicaFetcher(self, partition.leader_id)
        _truncate_without_epochs(partition)
        fetcher.add(partition.key, PartitionFetchState(topic_id, partition.leader_id, partition.leader_epoch))
        self._follows[partition.key] = partition.leader_id

    def stop_following(self, key: PartitionKey) -> None:
        source = self._follows.pop(key, None)
        if source is not None:
            fetcher = self._fetchers.get(source)
            if fetcher is not None:
                fetcher.remove(key)

    def fetch_state(self, key: PartitionKey) -> PartitionFetchState | None:
        source = self._follows.get(key)
        fetcher = self._fetchers.get(source) if source is not None else None
        return None if fetcher is None else fetcher.partitions.get(key)

    async def shutdown(self) -> None:
        for fetcher in self._fetchers.values():
            await fetcher.shutdown()
        self._fetchers.clear()
        self._follows.clear()


def _truncate_without_epochs(partition: Partition) -> None:
    """A follower whose log has no leader epochs cannot ask where it diverged: it keeps only what was
    committed (Kafka's truncation to the high watermark before the first fetch)."""
    log_ = partition.log
    if log_.latest_epoch() is None and log_.log_end_offset > log_.high_watermark:
        log_.truncate_to(log_.high_watermark)


class ReplicaFetcher:
    """The fetch loop towards one source broker."""

    def __init__(self, manager: ReplicaFetcherManager, source_id: int) -> None:
        self.manager = manager
        self.source_id = source_id
        self.partitions: dict[PartitionKey, PartitionFetchState] = {}
        self._changed = asyncio.Event()
        self._connections = NodeConnections(
            f"broker-{manager.node_id}-fetcher-{source_id}", manager.config.security
        )
        self.session = FetchSessionHandler()
        """This fetcher's incremental fetch session with the source broker (KIP-227)."""
        self._topic_names: dict[uuid.UUID, str] = {}
        """The names of the topics this fetcher asked for, by id: how an answer's partitions are found."""
        self._wanted: dict[PartitionKey, PartitionData] = {}
        """What the next fetch asks of each partition that may be fetched now."""
        self._wanted_states: dict[PartitionKey, PartitionFetchState] = {}
        """The fetch state each entry of `_wanted` was made for."""
        self._stale: set[PartitionKey] = set()
        """Partitions whose entry in `_wanted` is made again before the next fetch."""
        self._delayed: set[PartitionKey] = set()
        """Partitions left out of the fetches until their delayed_until."""
        self._next_full_build = 0.0
        self._task: asyncio.Task[None] | None = None

    def add(self, key: PartitionKey, state: PartitionFetchState) -> None:
        self.partitions[key] = state
        self._stale.add(key)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, key: PartitionKey) -> None:
        self.partitions.pop(key, None)
        self._stale.add(key)

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._connections.close()

    async def _run(self) -> None:
        while self.partitions:
            now = time.monotonic()
            changed = self._build_wanted(now)
            if not self._wanted:
                self._changed.clear()
                delays = [
                    state.delayed_until - now
                    for state in map(self.partitions.get, self._delayed)
                    if state is not None and not state.fenced
                ]
                try:
                    await asyncio.wait_for(self._changed.wait(), min(delays) if delays else None)
                except TimeoutError:
                    pass
                continue
            try:
                await self._fetch_once(changed)
            except Exception:  # a bug must not stop replication of every other partition for good
                log.exception("replica fetcher for broker %d failed; backing off", self.source_id)
                self.session.handle_error()
                self._delay(self._wanted_states)

    def _delay(self, states: dict[PartitionKey, PartitionFetchState]) -> None:
        until = time.monotonic() + self.manager.config.backoff_ms / 1000
        for key, state in list(states.items()):
            state.delayed_until = until
            self._stale.add(key)

    def _build_wanted(self, now: float) -> set[PartitionKey] | None:
        """Bring `_wanted` up to date with the partitions' logs and fetch states: the stale partitions and
        those whose delay is over, or all of them when a full look is due (every FULL_BUILD_INTERVAL
        seconds, or each time while some replica is throttled). The partitions looked at, None for all."""
        manager = self.manager
        config = manager.config
        quota = manager.quota
        partitions = self.partitions
        wanted = self._wanted
        wanted_states = self._wanted_states
        delayed = self._delayed
        full = now >= self._next_full_build or quota.throttles_any
        if full:
            self._next_full_build = now + FULL_BUILD_INTERVAL
            keys: set[PartitionKey] | list[PartitionKey] = [
                *partitions,
                *(k for k in wanted if k not in partitions),
            ]
            delayed.clear()
        else:
            keys = self._stale
            for key in list(delayed):
                state = partitions.get(key)
                if state is None or state.delayed_until <= now:
                    delayed.discard(key)
                    keys.add(key)
        self._stale = set()
        held_until = None
        for key in keys:
            state = partitions.get(key)
            data = None
            if state is not None and not state.fenced:
                partition = manager.partition(*key)
                if state.delayed_until > now:
                    delayed.add(key)
                elif partition is not None:
                    if _should_follower_throttle(quota, key, state):
                        # not asked for until the rate is back under the bound (at most
                        # replica.fetch.backoff.ms, Kafka's wait when a fetcher has nothing to ask for)
                        if held_until is None:
                            held_until = max(
                                now + min(quota.seconds_until_within(), config.backoff_ms / 1000),
                                now + _MIN_THROTTLE_WAIT,
                            )
                        state.delayed_until = held_until
                        delayed.add(key)
                    else:
                        log_ = partition.log
                        last_epoch = log_.latest_epoch()
                        data = PartitionData(
                            state.topic_id,
                            log_.log_end_offset,
                            log_.log_start_offset,
                            config.partition_max_bytes,
                            state.leader_epoch,
                            -1 if last_epoch is None else last_epoch,
                        )
            if data is None:
                wanted.pop(key, None)
                wanted_states.pop(key, None)
            else:
                wanted[key] = data
                wanted_states[key] = state  # type: ignore[assignment]
        return None if full else set(keys)

    async def _fetch_once(self, changed: set[PartitionKey] | None) -> None:
        manager = self.manager
        config = manager.config
        address = manager.broker_address(self.source_id)
        if address is None:
            self._delay(self._wanted_states)
            return
        cls = request_type(FETCH, FETCH_VERSION)
        session = self.session
        data = session.build(self._wanted, changed)
        if not data.session_partitions and not data.to_forget:
            return
        session_partitions = data.session_partitions
        topic_names = self._topic_names
        for key, d in data.to_send.items():
            topic_names[d.topic_id] = key[0]
        request = cls(
            cluster_id=None,
            replica_state=nested_type(cls, "ReplicaState")(
                replica_id=manager.node_id, replica_epoch=manager.broker_epoch()
            ),
            max_wait=timedelta(milliseconds=config.max_wait_ms),
            min_bytes=config.min_bytes,
            max_bytes=config.max_bytes,
            isolation_level=0,
            session_id=data.session_id,
            session_epoch=data.epoch,
            topics=_fetch_topics(cls, data.to_send),
            forgotten_topics_data=_forgotten_topics(cls, data.to_forget),
            rack_id="",
        )
        timeout = (config.max_wait_ms + config.request_timeout_ms) / 1000
        response = await self._connections.send(
            self.source_id, address, request, timeout=timeout, reader=read_fetch_response
        )
        if response is None:
            session.handle_error()
            self._delay(self._wanted_states)
            return
        if not session.handle_response(response.error_code, response.session_id):
            if response.error_code in _SESSION_ERRORS:
                return  # the next fetch is a full one, at once
            log.info("fetch from broker %d failed: %s", self.source_id, response.error_code.name)
            self._delay(self._wanted_states)
            return
        sent_states = self._wanted_states  # as when the request was made: only `_build_wanted` changes it
        stale = self._stale
        for topic in response.responses:
            name = topic_names.get(topic.topic_id)  # type: ignore[arg-type]
            for partition_data in topic.partitions:
                key = (name, partition_data.partition_index)
                sent = session_partitions.get(key)  # type: ignore[arg-type]
                if sent is None or sent.topic_id != topic.topic_id:
                    continue  # not asked for in this session
                state = sent_states.get(key)  # type: ignore[arg-type]
                if state is None or self.partitions.get(key) is not state:  # type: ignore[arg-type]
                    continue  # a new leader epoch since this request went out
                stale.add(key)  # type: ignore[arg-type]
                await self._process(key, state, partition_data)  # type: ignore[arg-type]

    async def _process(self, key: PartitionKey, state: PartitionFetchState, data: Any) -> None:
        partition = self.manager.partition(*key)
        if partition is None:
            return
        error = data.error_code
        if error is ErrorCode.none:
            diverging = data.diverging_epoch
            if diverging.epoch >= 0 or diverging.end_offset >= 0:
                _truncate_to_diverging(partition, diverging.epoch, diverging.end_offset)
                return
            records = data.records or b""  # a torn last batch is left out by the append's walk
            try:
                partition.append_records_as_follower(
                    records,
                    leader_high_watermark=data.high_watermark,
                    leader_log_start_offset=data.log_start_offset,
                    now_ms=int(time.time() * 1000),
                )
            except (RecordError, LogStorageError) as exc:
                log.error("%s: cannot append what the leader sent: %s", partition.log.name, exc)
                self._delay({key: state})
                return
            state.lag = max(0, data.high_watermark - partition.log.log_end_offset)
            state.lagging_answers = 0
            quota = self.manager.quota
            if records and quota.is_throttled(*key):
                quota.record(len(records))  # in-sync replicas' bytes count too, as in Kafka
            return
        if error is ErrorCode.offset_out_of_range:
            await self._handle_out_of_range(partition, state)
            return
        if error is ErrorCode.fenced_leader_epoch:
            state.fenced = True  # until the metadata names a newer leader epoch
            return
        if error in (ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower):
            delay_ms = min(self.manager.config.backoff_ms, LAGGING_LEADER_RETRY_MS << state.lagging_answers)
            state.lagging_answers += 1
            state.delayed_until = time.monotonic() + delay_ms / 1000
            return
        self._delay({key: state})

    async def _handle_out_of_range(self, partition: Partition, state: PartitionFetchState) -> None:
        """The leader does not have our fetch offset: follow its log end or its log start."""
        latest = await self._leader_offset(partition, state, LATEST_TIMESTAMP)
        log_ = partition.log
        if latest is None:
            self._delay({partition.key: state})
            return
        if latest < log_.log_end_offset:
            log.warning(
                "%s: truncating to the leader's log end %d (an unclean leader election lost records %d..%d)",
                log_.name,
                latest,
                latest,
                log_.log_end_offset - 1,
            )
            try:
                log_.truncate_to(latest)
                return
            except OffsetOutOfRange:
                pass  # below our log start: start over at the leader's
        earliest = await self._leader_offset(partition, state, EARLIEST_TIMESTAMP)
        if earliest is None:
            self._delay({partition.key: state})
            return
        if earliest > log_.log_end_offset or latest < log_.log_start_offset:
            log.info("%s: starting over at the leader's log start %d", log_.name, earliest)
            log_.truncate_fully_and_start_at(earliest)

    async def _leader_offset(
        self, partition: Partition, state: PartitionFetchState, timestamp: int
    ) -> int | None:
        address = self.manager.broker_address(self.source_id)
        if address is None:
            return None
        cls = request_type(LIST_OFFSETS, LIST_OFFSETS_VERSION)
        request = cls(
            replica_id=self.manager.node_id,
            isolation_level=0,
            topics=(
                nested_type(cls, "ListOffsetsTopic")(
                    name=partition.topic,
                    partitions=(
                        nested_type(cls, "ListOffsetsPartition")(
                            partition_index=partition.index,
                            current_leader_epoch=state.leader_epoch,
                            timestamp=timestamp,
                        ),
                    ),
                ),
            ),
        )
        timeout = self.manager.config.request_timeout_ms / 1000
        response = await self._connections.send(self.source_id, address, request, timeout=timeout)
        if response is None:
            return None
        for topic in response.topics:
            for data in topic.partitions:
                if data.error_code is ErrorCode.none:
                    return data.offset
        return None


def _fetch_topics(cls: type, partitions: dict[PartitionKey, PartitionData]) -> tuple[Any, ...]:
    """The request's topics (by id) with their partitions, in the order given."""
    topic_cls, partition_cls = nested_type(cls, "FetchTopic"), nested_type(cls, "FetchPartition")
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for key, d in partitions.items():
        by_topic.setdefault(d.topic_id, []).append(
            partition_cls(
                partition=key[1],
                current_leader_epoch=d.current_leader_epoch,
                fetch_offset=d.fetch_offset,
                last_fetched_epoch=d.last_fetched_epoch,
                log_start_offset=d.log_start_offset,
                partition_max_bytes=d.max_bytes,
            )
        )
    return tuple(topic_cls(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items())


def _forgotten_topics(cls: type, partitions: list[tuple[uuid.UUID, int]]) -> tuple[Any, ...]:
    forgotten_cls = nested_type(cls, "ForgottenTopic")
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, index in partitions:
        by_topic.setdefault(topic_id, []).append(index)
    return tuple(forgotten_cls(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items())


_SESSION_ERRORS = frozenset(
    {
        ErrorCode.fetch_session_id_not_found,
        ErrorCode.invalid_fetch_session_epoch,
        ErrorCode.fetch_session_topic_id_error,
    }
)


def _should_follower_throttle(
    quota: ReplicationQuotaManager, key: PartitionKey, state: PartitionFetchState
) -> bool:
    """RemoteLeaderEndPoint.shouldFollowerThrottle: out of sync, throttled here, and over the bound."""
    return not state.is_replica_in_sync and quota.is_throttled(*key) and quota.is_quota_exceeded()


def _truncate_to_diverging(partition: Partition, epoch: int, end_offset: int) -> None:
    """The leader's epoch `epoch` ends at `end_offset` while ours went further: cut where the logs agree.
    When we never had that epoch, the cut is at the end of our last epoch before it, and the next
    fetch (with an older last fetched epoch) narrows it down further (KIP-279)."""
    log_ = partition.log
    leo = log_.log_end_offset
    if log_.latest_epoch() is None:
        target = min(end_offset, leo)
    else:
        local_epoch, local_end = log_.end_offset_for_epoch(epoch)
        if local_epoch < 0 or local_end < 0:
            target = min(end_offset, leo)
        elif local_epoch == epoch:
            target = min(local_end, end_offset, leo)
        else:
            target = min(local_end, leo)
    target = max(target, log_.log_start_offset)
    if log_.truncate_to(target):
        log.info(
            "%s: truncated to %d after a diverging epoch %d ending at %d from the leader",
            log_.name,
            target,
            epoch,
            end_offset,
        )
