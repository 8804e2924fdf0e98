"""Kafka's sampled Rate and TokenBucket (org.apache.kafka.common.metrics.stats), in milliseconds.

A quota is checked against a rate measured over `samples` windows of `window_ms`: the sum of the
samples still alive divided by the time they span, that span padded to at least samples - 1 whole
windows so a client's first second does not read as a huge rate. The throttle time is how long the
client must stay quiet for that rate to fall back to the quota (QuotaUtils.throttleTime).
"""

from __future__ import annotations

from kcli.broker.replication.quota import SimpleRate


class SampledRate(SimpleRate):
    """Kafka's Rate: SimpleRate's samples (the replication throttles'), its window padded instead to
    samples - 1 whole windows, as client quotas measure it."""

    last_record_ms = 0.0
    """When a value was last recorded: a sensor idle for an hour is dropped (ClientQuotaManager)."""

    def record(self, value: float, now_ms: float) -> None:
        super().record(value, now_ms)
        self.last_record_ms = now_ms

    def measure(self, now_ms: float) -> float:
        """Units per second over the live samples (Rate.measure)."""
        window = self.window_size_ms(now_ms)
        return sum(s.value for s in self._ring) / (window / 1000.0)

    def window_size_ms(self, now_ms: float) -> float:
        """Rate.windowSize: the span of the live samples, at least samples - 1 whole windows."""
        self._purge_obsolete(now_ms)
        elapsed = now_ms - self._oldest().start_ms if self._ring else 0.0
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def throttle_time_ms(self, quota: float, now_ms: float) -> int:
        """QuotaUtils.throttleTime: 0 within the quota, else the time for the rate to fall to it."""
        value = self.measure(now_ms)
        if value <= quota:
            return 0
        return round((value - quota) / quota * self.window_size_ms(now_ms))


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
