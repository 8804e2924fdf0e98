"""Incremental fetch sessions on the leader (KIP-227, Kafka's FetchSession, FetchSessionCache, FetchManager).

A full fetch (epoch 0) may open a session: the broker remembers each partition's request (fetch offset,
max bytes, epochs, the fetcher's log start) and what it last answered (high watermark, log start
offset). From then on the fetcher sends only the partitions whose request changed, plus the ones to
forget (incremental fetches, epoch 1, 2, ...), and the answer carries only the partitions with
something to say; a fetch of a thousand quiet partitions is a few bytes each way.

Kafka's rules, on one cache of `max.incremental.fetch.session.cache.slots` sessions (Kafka divides the
slots among 8 shards for its threads' locks; one event loop needs no shards, so this is its one shard):
- session id 0 and epoch -1: sessionless; epoch -1 with an id closes that session; epoch 0 with an id
  closes it and opens a new one; any other epoch continues the session, which must exist
  (FETCH_SESSION_ID_NOT_FOUND), be at that epoch (INVALID_FETCH_SESSION_EPOCH) and name topics as
  the request version does: by id from v13, else by name (FETCH_SESSION_TOPIC_ID_ERROR);
- an incremental fetch that leaves the session without partitions closes it (answered sessionless);
- a full cache makes room for a new session by evicting the least recently used one if unused for
  120 s (Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS); else the least valuable evictable one, by
  (privileged, partitions, id), when the new one is worth at least as much. Followers' sessions are
  privileged; a follower's new session may evict consumers' sessions and any created over 120 s ago, a
  consumer's only those created over 120 s ago (touch's evictableByPrivileged / evictableByAll);
- an incremental answer carries a partition with records, a changed high watermark or log start
  offset, an error, a diverging epoch or a preferred read replica (CachedPartition.maybeUpdateResponseData),
  and here also a changed last stable offset, so a read_committed consumer hears of a commit without
  new records; partitions that returned records move to the end of the session, so the next reads
  start with the others (Kafka's round robin within fetch.max.bytes).

Where kcli goes further than Kafka: Kafka's IncrementalFetchContext reads every partition of the session
on every fetch. Here a session watches its partitions in the replica manager's purgatory for as long
as it lives (the notifications that wake delayed fetches: appends, high watermark, last stable offset,
leadership), and an incremental fetch reads only the partitions that changed since the last fetch, the
ones the fetch names, and those whose last read was not at the end of what they may read (an error, a
partition left out of the response budget, a throttled or out-of-sync follower, a consumer with a
replica selector). Its delayed fetch waits on the session. Every FULL_READ_INTERVAL_MS a fetch reads the
whole session, as Kafka's does, so what changes without a notification (a log start offset moved by
retention) is answered too. A thousand caught-up partitions cost one fetch nothing each.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.replication.fetch_metadata import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from kcli.broker.replication.manager import FetchTarget
from kcli.broker.replication.purgatory import PartitionKey, Purgatory
from kcli.protocol.fetch_codec import PartitionResult

FIRST_TOPIC_ID_VERSION = 13
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000
"""Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: the age before a session may be evicted."""
_MAX_INT32 = 2**31 - 1
FULL_READ_INTERVAL_MS = 10_000
"""How often an incremental fetch of a session reads all of its partitions anyway (see the module's note)."""

PartitionId = tuple[Any, int]
"""How a session names a partition: (topic id, index) from Fetch v13, (topic name, index) before."""


class CachedPartition:
    """A session's partition: its last request, and what the last answer said (CachedPartition)."""

    __slots__ = ("high_watermark", "last_stable_offset", "local_log_start_offset", "request")

    def __init__(self, request: FetchTarget, response: PartitionResult | None = None) -> None:
        self.request = request
        self.high_watermark = -1 if response is None else response.high_watermark
        self.last_stable_offset = -1 if response is None else response.last_stable_offset
        self.local_log_start_offset = -1 if response is None else response.log_start_offset

    def maybe_update_response_data(self, response: PartitionResult, update: bool) -> bool:
        """Whether an incremental answer must carry `response`; with `update`, remember what it says."""
        must_respond = False
        records = response.records
        if records is not None and records.size > 0:
            must_respond = True
        if self.high_watermark != response.high_watermark:
            must_respond = True
            if update:
                self.high_watermark = response.high_watermark
        if self.last_stable_offset != response.last_stable_offset:
            must_respond = True
            if update:
                self.last_stable_offset = response.last_stable_offset
        if self.local_log_start_offset != response.log_start_offset:
            must_respond = True
            if update:
                self.local_log_start_offset = response.log_start_offset
        if response.preferred_read_replica >= 0:
            must_respond = True
        if response.error_code is not ErrorCode.none:
            # sent again once the error is gone, whatever the offsets then
            if update:
                self.high_watermark = -1
            must_respond = True
        diverging = response.diverging_epoch
        if diverging is not None and diverging != (-1, -1):
            must_respond = True
        return must_respond


class FetchSession:
    """One session: its partitions in the order they are read, and the epoch the next fetch must carry."""

    __slots__ = (
        "_names",
        "_purgatory",
        "_waiters",
        "_wake",
        "cached_size",
        "creation_ms",
        "dirty",
        "epoch",
        "evictable_by_all",
        "evictable_by_privileged",
        "id",
        "last_full_read_ms",
        "last_used_ms",
        "partition_map",
        "privileged",
        "uses_topic_ids",
    )

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        partition_map: dict[PartitionId, CachedPartition],
        uses_topic_ids: bool,
        now_ms: int,
        purgatory: Purgatory | None = None,
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        """Opened by a follower: it may evict consumers' sessions, and they cannot evict it while young."""
        self.partition_map = partition_map
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1
        """The partition count as of the last `touch`; -1 while not in a cache."""
        self.evictable_by_privileged = False
        self.evictable_by_all = False
        self._purgatory = purgatory
        """Where the session watches its partitions; None: every incremental fetch reads them all."""
        self._names: dict[PartitionKey, PartitionId] = {}
        """The watched partitions: (topic name, index) -> the session's key."""
        self._wake = self._changed
        self._waiters: list[tuple[asyncio.Future[None], set[PartitionKey]]] = []
        self.dirty: dict[PartitionId, None] = dict.fromkeys(partition_map)
        """The partitions the next incremental fetch reads, in order (all of them at first)."""
        self.last_full_read_ms = now_ms
        if purgatory is not None:
            for key, cached in partition_map.items():
                self._watch(key, cached)

    def __repr__(self) -> str:
        return (
            f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={len(self.partition_map)}, "
            f"uses_topic_ids={self.uses_topic_ids}, epoch={self.epoch})"
        )

    def evictable_key(self) -> tuple[bool, int, int]:
        """EvictableKey: the least valuable session sorts first."""
        return (self.privileged, self.cached_size, self.id)

    def update(
        self, fetch_data: Mapping[PartitionId, FetchTarget], to_forget: Iterable[PartitionId]
    ) -> tuple[int, int, int]:
        """FetchSession.update: add or update the partitions of an incremental request, then drop the
        forgotten ones. (added, updated, removed) counts."""
        partition_map = self.partition_map
        added = updated = removed = 0
        dirty = self.dirty
        for key, request in fetch_data.items():
            cached = partition_map.get(key)
            if cached is None:
                cached = partition_map[key] = CachedPartition(request)
                added += 1
            else:
                if request.topic is None:
                    request = request._replace(topic=cached.request.topic)
                cached.request = request
                updated += 1
                dirty.pop(key, None)  # to the end: read after the partitions that changed before
            self._watch(key, cached)
            dirty[key] = None
        for key in to_forget:
            cached = partition_map.pop(key, None)
            if cached is not None:
                self._unwatch(key, cached)
                dirty.pop(key, None)
                removed += 1
        return added, updated, removed

    # --- what changed: the session's watch of its partitions ----------------------------------------

    @property
    def watches(self) -> bool:
        """Whether the session hears of its partitions' changes (else each fetch reads them all)."""
        return self._purgatory is not None

    def _watch(self, key: PartitionId, cached: CachedPartition) -> None:
        topic = cached.request.topic
        if topic is None or self._purgatory is None:
            return  # a topic id not known here: read on every fetch (its error is answered each time)
        name_key = (topic, key[1])
        if name_key not in self._names:
            self._names[name_key] = key
            self._purgatory.watch(name_key, self._wake)

    def _unwatch(self, key: PartitionId, cached: CachedPartition) -> None:
        topic = cached.request.topic
        if topic is None or self._purgatory is None:
            return
        name_key = (topic, key[1])
        if self._names.get(name_key) == key:
            del self._names[name_key]
            self._purgatory.unwatch(name_key, self._wake)

    def close(self) -> None:
        """The session left the cache: stop watching its partitions."""
        purgatory = self._purgatory
        if purgatory is not None:
            for name_key in self._names:
                purgatory.unwatch(name_key, self._wake)
        self._names.clear()
        self._purgatory = None

    def _changed(self, name_key: PartitionKey) -> None:
        """A partition of the session changed: the next fetch reads it, and a waiting fetch wakes."""
        key = self._names.get(name_key)
        if key is None:
            return
        self.dirty[key] = None
        for woken, changed in self._waiters:
            changed.add(name_key)
            if not woken.done():
                woken.set_result(None)

    async def wait_for_changes(self, deadline: float) -> set[PartitionKey]:
        """The session's partitions (by name) that changed until the waiter ran again; none when the
        event loop's clock reached `deadline` first (manager.PartitionChanges)."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        changed: set[PartitionKey] = set()
        entry = (woken, changed)
        self._waiters.append(entry)
        timer = loop.call_at(deadline, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
            return changed
        finally:
            timer.cancel()
            self._waiters.remove(entry)

    def target(self, name_key: PartitionKey) -> FetchTarget | None:
        """What the session asks of a partition it watches (manager.PartitionChanges)."""
        key = self._names.get(name_key)
        cached = None if key is None else self.partition_map.get(key)
        return None if cached is None else cached.request


class FetchSessionCache:
    """The sessions of this broker (FetchSessionCacheShard, one shard)."""

    def __init__(
        self,
        max_entries: int = 1000,
        eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        rng: random.Random | None = None,
        purgatory: Purgatory | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.purgatory = purgatory
        """The replica manager's: where sessions watch their partitions (None: they read them all)."""
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self._random = rng or random.Random()
        self.num_partitions = 0
        """NumIncrementalFetchPartitionsCached."""
        self.evictions = 0
        """How many sessions were evicted for new ones (IncrementalFetchSessionEvictionsPerSec's count)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def new_session_id(self) -> int:
        """A random positive id not in use (never INVALID_SESSION_ID)."""
        while True:
            session_id = self._random.randint(1, _MAX_INT32 - 1)
            if session_id not in self._sessions:
                return session_id

    def maybe_create_session(
        self,
        now_ms: int,
        privileged: bool,
        size: int,
        uses_topic_ids: bool,
        create_partitions: Callable[[], dict[PartitionId, CachedPartition]],
    ) -> int:
        """A new session when there is room or one may be evicted for it: its id, else INVALID_SESSION_ID."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(
            self.new_session_id(), privileged, create_partitions(), uses_topic_ids, now_ms, self.purgatory
        )
        self._sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """FetchSessionCacheShard.tryEvict: the least recently used session if unused for eviction_ms,
        else the least valuable evictable one when the new session is worth at least as much."""
        sessions = self._sessions.values()
        if not sessions:
            return False
        stalest = min(sessions, key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            self.remove(stalest.id)
            self.evictions += 1
            return True
        candidates = [
            s for s in sessions if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < least.evictable_key():
            return False
        self.remove(least.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
            if session.cached_size >= 0:
                self.num_partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """A session was used: its last use, size and evictability as of now."""
        session.last_used_ms = now_ms
        if session.cached_size >= 0:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partition_map)
        self.num_partitions += session.cached_size
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old_enough
        session.evictable_by_all = old_enough


# --- contexts: one per Fetch request ----------------------------------------------------------------


class FetchContext:
    """What one Fetch reads, and how its answer is made (Kafka's FetchContext)."""

    error: ErrorCode = ErrorCode.none

    def partitions(self) -> Iterator[FetchTarget]:
        """The partitions to read, in order."""
        return iter(())

    def update_and_generate_response_data(
        self, results: list[PartitionResult], settled: Callable[[FetchTarget], bool] | None = None
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        """(top-level error, session id, the partitions the answer carries). `settled`: whether a read
        partition would answer nothing until it changes (ReplicaManager.at_fetch_end)."""
        raise NotImplementedError


class SessionErrorContext(FetchContext):
    """The session named cannot be used: the answer is the error, with no partitions."""

    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def update_and_generate_response_data(
        self, results: list[PartitionResult], settled: Callable[[FetchTarget], bool] | None = None
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        return self.error, INVALID_SESSION_ID, []


class SessionlessFetchContext(FetchContext):
    """A fetch outside any session: every partition asked for is read and answered."""

    def __init__(self, fetch_data: Mapping[PartitionId, FetchTarget]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> Iterator[FetchTarget]:
        return iter(self.fetch_data.values())

    def update_and_generate_response_data(
        self, results: list[PartitionResult], settled: Callable[[FetchTarget], bool] | None = None
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        return ErrorCode.none, INVALID_SESSION_ID, results


class FullFetchContext(SessionlessFetchContext):
    """A full fetch (epoch 0): answered whole, and it opens a session of the partitions answered."""

    def __init__(
        self,
        cache: FetchSessionCache,
        fetch_data: Mapping[PartitionId, FetchTarget],
        uses_topic_ids: bool,
        is_from_follower: bool,
        now_ms: int,
    ) -> None:
        super().__init__(fetch_data)
        self.cache = cache
        self.uses_topic_ids = uses_topic_ids
        self.is_from_follower = is_from_follower
        self.now_ms = now_ms

    def update_and_generate_response_data(
        self, results: list[PartitionResult], settled: Callable[[FetchTarget], bool] | None = None
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        uses_topic_ids = self.uses_topic_ids
        fetch_data = self.fetch_data

        def create_partitions() -> dict[PartitionId, CachedPartition]:
            cached: dict[PartitionId, CachedPartition] = {}
            for result in results:
                key = (result.topic_id if uses_topic_ids else result.topic, result.partition_index)
                request = fetch_data.get(key)
                if request is not None:
                    cached[key] = CachedPartition(request, result)
            return cached

        session_id = self.cache.maybe_create_session(
            self.now_ms, self.is_from_follower, len(results), uses_topic_ids, create_partitions
        )
        return ErrorCode.none, session_id, results


class IncrementalFetchContext(FetchContext):
    """A fetch in a session: reads the partitions of the session that changed (all of them when the
    session does not watch them, or its full read is due), answers the ones with news."""

    def __init__(
        self,
        session: FetchSession,
        request_epoch: int,
        topic_names: Callable[[Any], str | None],
        now_ms: int = 0,
    ) -> None:
        self.session = session
        self.request_epoch = request_epoch
        self.topic_names = topic_names
        self.now_ms = now_ms

    def partitions(self) -> Iterator[FetchTarget]:
        session = self.session
        partition_map = session.partition_map
        if not session.watches or self.now_ms - session.last_full_read_ms >= FULL_READ_INTERVAL_MS:
            session.last_full_read_ms = self.now_ms
            keys = list(partition_map)
        else:
            keys = list(session.dirty)
        session.dirty.clear()  # what changes from now on is read by the next fetch (or this one's wait)
        topic_names = self.topic_names
        for key in keys:
            cached = partition_map.get(key)
            if cached is None:
                continue
            request = cached.request
            if request.topic is None:  # maybeResolveUnknownName: the topic may be known by now
                name = topic_names(request.topic_id)
                if name is not None:
                    request = cached.request = request._replace(topic=name)
                    session._watch(key, cached)
            yield request

    @property
    def changes(self) -> FetchSession | None:
        """What the fetch waits on when its partitions have nothing (manager.PartitionChanges)."""
        return self.session if self.session.watches else None

    def update_and_generate_response_data(
        self, results: list[PartitionResult], settled: Callable[[FetchTarget], bool] | None = None
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        session = self.session
        partition_map = session.partition_map
        uses_topic_ids = session.uses_topic_ids
        dirty = session.dirty
        if session.epoch != next_epoch(self.request_epoch):
            # another fetch of this session came in while this one was read: a duplicate request; what
            # this one read is read again by the next
            for result in results:
                key = (result.topic_id if uses_topic_ids else result.topic, result.partition_index)
                if key in partition_map:
                    dirty[key] = None
            return ErrorCode.invalid_fetch_session_epoch, session.id, []
        watches = session.watches
        answer = []
        for result in results:
            key = (result.topic_id if uses_topic_ids else result.topic, result.partition_index)
            cached = partition_map.get(key)
            if cached is None:
                continue  # forgotten by a later fetch of this session
            if cached.maybe_update_response_data(result, True):
                answer.append(result)
                records = result.records
                if records is not None and records.size > 0:
                    del partition_map[key]  # to the end: the others are read first next time
                    partition_map[key] = cached
            if watches:
                # what this read saw includes every change notified for the partition so far (a read
                # follows its changes with no await in between, its own high watermark move included)
                dirty.pop(key, None)
                if settled is None or not settled(cached.request):
                    dirty[key] = None  # not at its end: read again by the next fetch
        return ErrorCode.none, session.id, answer


class FetchManager:
    """Makes each Fetch's context from its session fields (Kafka's FetchManager.newContext)."""

    def __init__(self, cache: FetchSessionCache, clock_ms: Callable[[], int]) -> None:
        self.cache = cache
        self.clock_ms = clock_ms

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        is_from_follower: bool,
        fetch_data: Mapping[PartitionId, FetchTarget],
        to_forget: Iterable[PartitionId],
        topic_names: Callable[[Any], str | None],
    ) -> FetchContext:
        """FetchManager.newContext: a full fetch closes the session it names (and epoch 0 may open one);
        an incremental one updates its session and moves it to the next epoch, or is a session error."""
        cache = self.cache
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch: any session it names is closed
            if session_id != INVALID_SESSION_ID:
                cache.remove(session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(
                cache, fetch_data, version >= FIRST_TOPIC_ID_VERSION, is_from_follower, self.clock_ms()
            )
        session = cache.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != (version >= FIRST_TOPIC_ID_VERSION):
            return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
        session.update(fetch_data, to_forget)
        if not session.partition_map:
            cache.remove(session.id)
            return SessionlessFetchContext(fetch_data)
        now_ms = self.clock_ms()
        cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session, epoch, topic_names, now_ms)
