"""The consumer byte-rate quota around one Fetch (KafkaApis.handleFetchRequest).

A consumer's fetch is bounded to what its quota window can hold (getMaxValueInQuotaWindow), the
response's size is recorded, and a fetch over the quota is answered empty with the throttle time and
unrecorded: the consumer reads the same records again once the throttle has passed. A follower's
fetch is replication, which the replication throttles govern, not this quota.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kcli.broker.quota.quotas import quotas_of, throttle

if TYPE_CHECKING:
    from kcli.broker.apis.context import FramedResponse, RequestContext

_INT32 = struct.Struct(">i")


class ConsumerQuota:
    """One fetch's quota: None-quota fetches pass through untouched."""

    def __init__(self, ctx: RequestContext, max_in_window: float | None) -> None:
        self.ctx = ctx
        self.max_in_window = max_in_window

    def max_bytes(self, max_bytes: int) -> int:
        if self.max_in_window is None:
            return max_bytes
        return max(1, min(max_bytes, int(self.max_in_window)))

    def check(self, response: FramedResponse, empty: Callable[[], FramedResponse]) -> FramedResponse:
        """`response` within the quota, else the empty answer with throttle_time_ms (v1+)."""
        if self.max_in_window is None:
            return response
        ctx = self.ctx
        state = ctx.state
        manager = quotas_of(state).fetch
        quotas, principal, client_id = state.image.client_quotas, ctx.connection.principal, ctx.client_id
        size = response.size
        throttle_ms = manager.record_and_get_throttle_time_ms(quotas, principal, client_id, size)
        if not throttle_ms:
            return response
        manager.unrecord(quotas, principal, client_id, size)
        throttle(ctx, throttle_ms)
        answer = empty()
        if ctx.api_version >= 1 and answer.parts and isinstance(answer.parts[0], bytes):
            first = _INT32.pack(throttle_ms) + answer.parts[0][4:]  # throttle_time_ms leads the body
            answer = type(answer)(answer.response_type, (first, *answer.parts[1:]))
        return answer


def consumer_quota(ctx: RequestContext, request: Any) -> ConsumerQuota:
    """The quota of a consumer's fetch (None inside when no consumer_byte_rate applies)."""
    state = ctx.state
    quotas = state.image.client_quotas
    if not quotas or _replica_id(ctx, request) >= 0:
        return ConsumerQuota(ctx, None)
    limit = quotas_of(state).fetch.max_value_in_quota_window(quotas, ctx.connection.principal, ctx.client_id)
    return ConsumerQuota(ctx, limit)


def _replica_id(ctx: RequestContext, request: Any) -> int:
    return request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
