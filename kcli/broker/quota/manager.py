"""Kafka's ClientQuotaManager, ClientRequestQuotaManager and ControllerMutationQuotaManager.

Each client is measured under the quota entity that applies to it, found with Kafka's precedence
(DefaultQuotaCallback): /config/users/<user>/clients/<client-id>, /users/<user>/clients/<default>,
/users/<user>, /users/<default>/clients/<client-id>, /users/<default>/clients/<default>,
/users/<default>, /clients/<client-id>, /clients/<default>. Every connection of the clients that share
that entity adds to one rate (one sensor), so a quota holds for a user's clients together. Quotas are
read from the metadata image the broker is serving, so an AlterClientQuotas counts from the next request.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from kcli.broker.quota.stats import SampledRate, TokenBucket
from kcli.quota_config import CLIENT_ID, CONTROLLER_MUTATION_RATE, USER, QuotaEntity

Tags = tuple[str, str]
"""(user tag, client-id tag) as quotaMetricTags makes them; "" where the level ignores that part."""

INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
"""ClientQuotaManager.InactiveSensorExpirationTimeSeconds."""

NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9
"""ClientRequestQuotaManager.nanosToPercentagePerSecond: a whole second of handler time is 100%."""


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def user_name(principal: str) -> str:
    """KafkaPrincipal.getName of "User:alice": the user quotas name."""
    return principal.partition(":")[2] if ":" in principal else principal


def _user(name: str | None) -> QuotaEntity:
    return ((USER, name),)


def _client(name: str | None) -> QuotaEntity:
    return ((CLIENT_ID, name),)


def _both(user: str | None, client_id: str | None) -> QuotaEntity:
    return ((CLIENT_ID, client_id), (USER, user))


class _QuotaLookup:
    """One quota key's values by entity (Kafka's overriddenQuotas of one quota type), kept per image."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._source: object = None
        self._quotas: dict[QuotaEntity, float] = {}

    def refresh(self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> dict[QuotaEntity, float]:
        if client_quotas is not self._source:
            self._source = client_quotas
            self._quotas = {e: v[self.key] for e, v in client_quotas.items() if self.key in v}
        return self._quotas

    def tags(self, quotas: dict[QuotaEntity, float], user: str, client_id: str) -> Tags:
        """DefaultQuotaCallback.quotaMetricTags: the most specific level that has a quota."""
        if not quotas:
            return "", client_id
        for entity, tags in (
            (_both(user, client_id), (user, client_id)),
            (_both(user, None), (user, client_id)),
            (_user(user), (user, "")),
            (_both(None, client_id), (user, client_id)),
            (_both(None, None), (user, client_id)),
            (_user(None), (user, "")),
        ):
            if entity in quotas:
                return tags
        return "", client_id

    @staticmethod
    def limit(quotas: dict[QuotaEntity, float], tags: Tags) -> float | None:
        """DefaultQuotaCallback.quotaLimit for the tags, or None (no quota)."""
        user, client_id = tags
        if user and client_id:
            candidates = (
                _both(user, client_id),
                _both(user, None),
                _both(None, client_id),
                _both(None, None),
            )
        elif user:
            candidates = (_user(user), _user(None))
        elif client_id:
            candidates = (_client(client_id), _client(None))
        else:
            return None
        for entity in candidates:
            quota = quotas.get(entity)
            if quota is not None:
                return quota
        return None


class ClientQuotaManager:
    """Byte-rate quotas (produce, fetch) and the request-time share: a sampled rate per sensor."""

    def __init__(
        self, key: str, samples: int, window_seconds: int, max_throttle_ms: int | None = None
    ) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.max_throttle_ms = max_throttle_ms
        self._lookup = _QuotaLookup(key)
        self._sensors: dict[Tags, SampledRate] = {}

    def quota(
        self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]], principal: str, client_id: str
    ) -> tuple[Tags, float | None]:
        """The sensor `principal` and `client_id` record into and its quota (None: unlimited)."""
        quotas = self._lookup.refresh(client_quotas)
        tags = self._lookup.tags(quotas, user_name(principal), client_id)
        return tags, self._lookup.limit(quotas, tags) if quotas else None

    def record_and_get_throttle_time_ms(
        self,
        client_quotas: Mapping[QuotaEntity, Mapping[str, float]],
        principal: str,
        client_id: str,
        value: float,
        at_ms: int | None = None,
    ) -> int:
        """Sensor.record with its quota check: 0 within the quota, else the throttle time."""
        tags, quota = self.quota(client_quotas, principal, client_id)
        if quota is None:
            return 0
        at_ms = now_ms() if at_ms is None else at_ms
        sensor = self._sensor(tags)
        sensor.record(value, at_ms)
        throttle = sensor.throttle_time_ms(quota, at_ms)
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)  # QuotaUtils.boundedThrottleTime
        return throttle

    def unrecord(
        self,
        client_quotas: Mapping[QuotaEntity, Mapping[str, float]],
        principal: str,
        client_id: str,
        value: float,
        at_ms: int | None = None,
    ) -> None:
        """unrecordQuotaSensor: a throttled fetch answers empty, so what it read does not count."""
        tags, quota = self.quota(client_quotas, principal, client_id)
        if quota is not None:
            self._sensor(tags).record(-value, now_ms() if at_ms is None else at_ms)

    def max_value_in_quota_window(
        self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]], principal: str, client_id: str
    ) -> float | None:
        """getMaxValueInQuotaWindow: more than this is throttled even after a quiet window (it bounds
        a consumer's fetch size); None without a quota."""
        _, quota = self.quota(client_quotas, principal, client_id)
        if quota is None:
            return None
        return quota * (self.samples - 1) * (self.window_ms / 1000)

    def _sensor(self, tags: Tags) -> SampledRate:
        sensor = self._sensors.get(tags)
        if sensor is None:
            self._expire_inactive()
            sensor = self._sensors[tags] = SampledRate(self.samples, self.window_ms)
        return sensor

    def _expire_inactive(self) -> None:
        """Kafka drops a client's sensors after an hour without a request; so does each new one here,
        so a broker that sees many short-lived client ids does not keep them all."""
        cutoff = now_ms() - INACTIVE_SENSOR_EXPIRATION_MS
        for tags in [t for t, sensor in self._sensors.items() if sensor.last_record_ms < cutoff]:
            del self._sensors[tags]


class ControllerMutationQuotaManager:
    """KIP-599: partitions created or deleted, measured with a token bucket per sensor."""

    def __init__(self, samples: int, window_seconds: int) -> None:
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self._lookup = _QuotaLookup(CONTROLLER_MUTATION_RATE)
        self._buckets: dict[Tags, TokenBucket] = {}

    def new_quota_for(
        self,
        client_quotas: Mapping[QuotaEntity, Mapping[str, float]],
        principal: str,
        client_id: str,
        strict: bool,
    ) -> ControllerMutationQuota:
        """newQuotaFor: strict (refuse once exhausted) from the versions KIP-599 gave the new error."""
        quotas = self._lookup.refresh(client_quotas)
        tags = self._lookup.tags(quotas, user_name(principal), client_id)
        quota = self._lookup.limit(quotas, tags) if quotas else None
        if quota is None:
            return ControllerMutationQuota(None, 0.0, strict)
        bucket = self._buckets.get(tags)
        if bucket is None:
            bucket = self._buckets[tags] = TokenBucket(self.samples, self.window_ms)
        return ControllerMutationQuota(bucket, quota, strict)


class ControllerMutationQuota:
    """One request's view of its bucket: Strict-, Permissive- or UnboundedControllerMutationQuota."""

    def __init__(self, bucket: TokenBucket | None, quota: float, strict: bool) -> None:
        self.bucket = bucket
        self.quota = quota
        self.strict = strict
        self._throttle_ms = 0
        self._recorded_ms = 0

    def record(self, permits: float) -> bool:
        """Take `permits` (partitions); False when a strict quota is exhausted and refuses them."""
        if self.bucket is None:
            return True
        at = now_ms()
        if self.strict:
            throttle = self.bucket.throttle_time_ms(self.quota, at)  # checkQuotas before recording
            if throttle > 0:
                self._throttle_ms, self._recorded_ms = throttle, at
                return False
            self.bucket.record(self.quota, permits, at)
            return True
        self.bucket.record(self.quota, permits, at)
        throttle = self.bucket.throttle_time_ms(self.quota, at)
        if throttle > 0:
            self._throttle_ms, self._recorded_ms = throttle, at
        return True

    def refund(self, permits: float) -> None:
        """Give back permits of a mutation the controller then refused (it changed nothing)."""
        if self.bucket is not None:
            self.bucket.record(self.quota, -permits, now_ms())

    @property
    def throttle_time_ms(self) -> int:
        """The recorded throttle time less what has passed since (AbstractControllerMutationQuota)."""
        return max(0, self._throttle_ms - (now_ms() - self._recorded_ms))
