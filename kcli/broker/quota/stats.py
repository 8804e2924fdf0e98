"""Kafka's sampled Rate and TokenBucket (org.apache.kafka.common.metrics.stats), in milliseconds.

A quota is checked against a rate measured over `samples` windows of `window_ms`: the sum of the
samples still alive divided by the time they span, that span padded to at least samples - 1 whole
windows so a client's first second does not read as a huge rate. The throttle time is how long the
client must stay quiet for that rate to fall back to the quota (QuotaUtils.throttleTime).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    events: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0
        self.events = 0


class SampledRate:
    """Rate over a SampledStat of sums: `samples` windows plus Kafka's one overlapping placeholder."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """Units per second over the live samples (Rate.measure)."""
        window = self.window_size_ms(now_ms)
        return sum(s.value for s in self._samples) / (window / 1000.0)

    def window_size_ms(self, now_ms: int) -> int:
        """Rate.windowSize: the span of the live samples, at least samples - 1 whole windows."""
        self._purge(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        elapsed = now_ms - min(s.start_ms for s in self._samples)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def throttle_time_ms(self, quota: float, now_ms: int) -> int:
        """QuotaUtils.throttleTime: 0 within the quota, else the time for the rate to fall to it."""
        value = self.measure(now_ms)
        if value <= quota:
            return 0
        return round((value - quota) / quota * self.window_size_ms(now_ms))

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _purge(self, now_ms: int) -> None:
        """SampledStat.purgeObsoleteSamples: a sample with no event in the whole window starts over."""
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire:
                sample.reset(now_ms)


class TokenBucket:
    """KIP-599's bucket: refills at `quota` per second up to samples x window x quota (its burst)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.tokens = 0.0
        self.last_update_ms = 0

    def measure(self, quota: float, now_ms: int) -> float:
        self._refill(quota, now_ms)
        return self.tokens

    def record(self, quota: float, value: float, now_ms: int) -> None:
        self._refill(quota, now_ms)
        self.tokens = min(self._burst(quota), self.tokens - value)

    def throttle_time_ms(self, quota: float, now_ms: int) -> int:
        """ControllerMutationQuotaManager.throttleTimeMs: time to refill a negative bucket to zero."""
        tokens = self.measure(quota, now_ms)
        return 0 if tokens >= 0 else round(-tokens / quota * 1000)

    def _burst(self, quota: float) -> float:
        return self.samples * (self.window_ms / 1000.0) * quota

    def _refill(self, quota: float, now_ms: int) -> None:
        elapsed = (now_ms - self.last_update_ms) / 1000.0
        self.tokens = min(self._burst(quota), self.tokens + quota * elapsed)
        self.last_update_ms = now_ms
