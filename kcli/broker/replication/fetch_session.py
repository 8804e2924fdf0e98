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
"""

from __future__ import annotations

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
from kcli.protocol.fetch_codec import PartitionResult

FIRST_TOPIC_ID_VERSION = 13
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000
"""Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: the age before a session may be evicted."""
_MAX_INT32 = 2**31 - 1

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
        "cached_size",
        "creation_ms",
        "epoch",
        "evictable_by_all",
        "evictable_by_privileged",
        "id",
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
        for key, request in fetch_data.items():
            cached = partition_map.get(key)
            if cached is None:
                partition_map[key] = CachedPartition(request)
                added += 1
            else:
                cached.request = (
                    request if request.topic is not None else request._replace(topic=cached.request.topic)
                )
                updated += 1
        for key in to_forget:
            if partition_map.pop(key, None) is not None:
                removed += 1
        return added, updated, removed


class FetchSessionCache:
    """The sessions of this broker (FetchSessionCacheShard, one shard)."""

    def __init__(
        self,
        max_entries: int = 1000,
        eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.max_entries = max_entries
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
        session = FetchSession(self.new_session_id(), privileged, create_partitions(), uses_topic_ids, now_ms)
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
        if session is not None and session.cached_size >= 0:
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
        self, results: list[PartitionResult]
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        """(top-level error, session id, the partitions the answer carries)."""
        raise NotImplementedError


class SessionErrorContext(FetchContext):
    """The session named cannot be used: the answer is the error, with no partitions."""

    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def update_and_generate_response_data(
        self, results: list[PartitionResult]
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        return self.error, INVALID_SESSION_ID, []


class SessionlessFetchContext(FetchContext):
    """A fetch outside any session: every partition asked for is read and answered."""

    def __init__(self, fetch_data: Mapping[PartitionId, FetchTarget]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> Iterator[FetchTarget]:
        return iter(self.fetch_data.values())

    def update_and_generate_response_data(
        self, results: list[PartitionResult]
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
        self, results: list[PartitionResult]
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
    """A fetch in a session: reads every partition of the session, answers the ones with news."""

    def __init__(
        self, session: FetchSession, request_epoch: int, topic_names: Callable[[Any], str | None]
    ) -> None:
        self.session = session
        self.request_epoch = request_epoch
        self.topic_names = topic_names

    def partitions(self) -> Iterator[FetchTarget]:
        topic_names = self.topic_names
        for cached in list(self.session.partition_map.values()):
            request = cached.request
            if request.topic is None:  # maybeResolveUnknownName: the topic may be known by now
                name = topic_names(request.topic_id)
                if name is not None:
                    request = cached.request = request._replace(topic=name)
            yield request

    def update_and_generate_response_data(
        self, results: list[PartitionResult]
    ) -> tuple[ErrorCode, int, list[PartitionResult]]:
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):
            # another fetch of this session came in while this one was read: a duplicate request
            return ErrorCode.invalid_fetch_session_epoch, session.id, []
        partition_map = session.partition_map
        uses_topic_ids = session.uses_topic_ids
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
        cache.touch(session, self.clock_ms())
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session, epoch, topic_names)
