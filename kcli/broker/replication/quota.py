"""Replication throttles (KIP-73), as Kafka's ReplicationQuotaManager enforces them.

Each broker keeps two quota managers (moves between its log dirs pace themselves, alter_log_dirs.py):
the leader's (bytes it sends to followers' fetches) and the follower's (bytes its fetchers take). A
manager has
- the bound, from the broker config `leader.replication.throttled.rate` /
  `follower.replication.throttled.rate` (unset: no bound);
- the throttled partitions, from each topic's `leader.replication.throttled.replicas` /
  `follower.replication.throttled.replicas`: the partitions listed with this broker's id, or all of
  the topic's for `*`;
- the measured rate: Kafka's SimpleRate over a SampledStat of `replication.quota.window.num`
  samples of `replication.quota.window.size.seconds` each. The rate is the bytes in the retained
  samples over the time since the oldest one started, but never over less than one sample's length
  (so the first bytes do not read as an enormous rate). Unlike Kafka's, a rate with nothing recorded
  opens no sample, so idle time before a copy is no credit (see SimpleRate).

Every byte of a throttled partition is recorded, in-sync replicas' too, so the total stays under the
bound; but only replicas out of the ISR are held back (ReplicaManager.shouldLeaderThrottle and
RemoteLeaderEndPoint.shouldFollowerThrottle), so a throttle never pushes an in-sync follower out. A
partition held back is simply not read (leader: empty records in the fetch answer) or not asked for
(follower) while the measured rate is above the bound: the copy rate settles at the bound, give or
take one fetch's worth of bytes over the rate's window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kcli.config import LONG_MAX

_MARGIN_MS = 1.0

ALL_REPLICAS = None
"""What `throttled_partitions` returns for `*`: every partition of the topic."""


@dataclass(slots=True)
class _Sample:
    start_ms: float
    last_event_ms: float
    value: float = 0.0
    events: int = 0


class SimpleRate:
    """Kafka's SimpleRate (a Rate over a WindowedSum SampledStat), in bytes per second.

    One difference: the first sample opens with the first record, not with the first measurement, and
    when every sample has expired the rate starts over empty. Kafka's sensor is measured (and, on the
    leader, recorded with zero bytes) on every fetch, so the seconds before a copy starts count as
    credit it may then spend at full speed, up to the whole window (11 s at the defaults); here a copy
    gets at most one sample's worth at once, then the bound.
    """

    def __init__(self, samples: int, window_ms: float) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._ring: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: float) -> float:
        self._purge_obsolete(now_ms)
        if not self._ring:
            return 0.0
        total = sum(s.value for s in self._ring)
        elapsed = now_ms - self._oldest().start_ms
        return total / (max(elapsed, self.window_ms) / 1000)

    def ms_until_at_most(self, bound: float, now_ms: float) -> float:
        """How long until `measure` falls to `bound` if nothing more is recorded (0 when it is there)."""
        self._purge_obsolete(now_ms)
        if not self._ring:
            return 0.0
        total = sum(s.value for s in self._ring)
        start = self._oldest().start_ms
        if total <= bound * max(now_ms - start, self.window_ms) / 1000:
            return 0.0
        if bound <= 0:
            return self.samples * self.window_ms  # until the samples expire
        return start + total / bound * 1000 - now_ms

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._ring:
            self._current = 0
            self._ring.append(_Sample(now_ms, now_ms))
        return self._ring[self._current]

    def _advance(self, now_ms: float) -> _Sample:
        # one slot more than `samples`: the sample overlapping the start of the window stays
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._ring):
            self._ring.append(_Sample(now_ms, now_ms))
        else:
            sample = self._ring[self._current]
            sample.start_ms = sample.last_event_ms = now_ms
            sample.value, sample.events = 0.0, 0
        return self._ring[self._current]

    def _oldest(self) -> _Sample:
        return min(self._ring, key=lambda s: s.start_ms)

    def _purge_obsolete(self, now_ms: float) -> None:
        """Samples with no event within the whole window start over (they no longer count); when none
        is left the rate starts over with the next record."""
        expire_ms = self.samples * self.window_ms
        if all(now_ms - sample.last_event_ms >= expire_ms for sample in self._ring):
            self._ring.clear()
            return
        for sample in self._ring:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.start_ms = sample.last_event_ms = now_ms
                sample.value, sample.events = 0.0, 0


class ReplicationQuotaManager:
    """One replication throttle: its bound, its throttled partitions and its measured rate."""

    def __init__(
        self,
        name: str,
        *,
        samples: int = 11,
        window_seconds: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self._clock = clock
        self._bound: float | None = None
        self._rate = SimpleRate(samples, self.window_ms)
        self._throttled: dict[str, frozenset[int] | None] = {}

    @property
    def upper_bound(self) -> int:
        """The bound in bytes/s; Long.MAX_VALUE when there is none."""
        return LONG_MAX if self._bound is None else int(self._bound)

    def update_quota(self, bytes_per_second: int) -> None:
        """A new bound; Long.MAX_VALUE (the default) means none. The measured rate carries on."""
        self._bound = None if bytes_per_second >= LONG_MAX else float(bytes_per_second)

    def mark_throttled(self, topic: str, partitions: frozenset[int] | None) -> None:
        """These partitions of `topic` (ALL_REPLICAS: all of them) are throttled, replacing the last set."""
        self._throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    @property
    def throttles_any(self) -> bool:
        """Some topic has throttled replicas (else no partition needs a look)."""
        return bool(self._throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        if topic not in self._throttled:
            return False
        partitions = self._throttled[topic]
        return partitions is ALL_REPLICAS or partition in partitions

    def record(self, size: int) -> None:
        """Bytes copied for a throttled partition (recorded even when the quota is exceeded)."""
        if size > 0:
            self._rate.record(size, self._now_ms())

    def is_quota_exceeded(self) -> bool:
        """Sensor.checkQuotas: the measured rate is above the bound."""
        if self._bound is None:
            return False
        return self._rate.measure(self._now_ms()) > self._bound

    def rate(self) -> float:
        """The measured rate in bytes/s (the byte-rate metric)."""
        return self._rate.measure(self._now_ms())

    def seconds_until_within(self) -> float:
        """How long until the quota is no longer exceeded, with nothing more recorded (0 if it is not);
        a millisecond past the exact point, so a check then is sure to pass."""
        if self._bound is None:
            return 0.0
        pause_ms = self._rate.ms_until_at_most(self._bound, self._now_ms())
        return (pause_ms + _MARGIN_MS) / 1000 if pause_ms > 0 else 0.0

    def _now_ms(self) -> float:
        return self._clock() * 1000


def throttled_partitions(value: Iterable[str] | None, broker_id: int) -> frozenset[int] | None:
    """TopicConfigHandler.parseThrottledPartitions: the partitions a throttled-replicas list names for
    `broker_id` (`partition:broker` items), or ALL_REPLICAS for `*`."""
    items = [item.strip() for item in value or () if item.strip()]
    if items == ["*"]:
        return ALL_REPLICAS
    partitions = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if broker.isdigit() and partition.isdigit() and int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)
