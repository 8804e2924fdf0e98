"""How the broker's quota managers (`quota_factory`) are applied to a request, and a throttle with them.

KIP-219: a throttled client gets its answer at once, carrying throttle_time_ms, and the broker then
reads nothing more from that connection until the time has passed; a client that honours the field
waits on its side too, so neither the client nor the broker piles up requests.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import types
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from kcli.broker.quota.manager import NANOS_TO_PERCENTAGE_PER_SECOND, ControllerMutationQuota
from kcli.broker.quota.quota_factory import QuotaManagers

if TYPE_CHECKING:
    from kcli.broker.apis.context import BrokerState, RequestContext

T = TypeVar("T")


def quotas_of(state: BrokerState) -> QuotaManagers:
    """This broker's managers, made on first use (a broker without quotas never pays for them)."""
    managers = state.quotas
    if managers is None:
        managers = state.quotas = QuotaManagers(state.config)
    return managers


def throttle(ctx: RequestContext, throttle_ms: int) -> None:
    """Mute the connection the request came on for `throttle_ms` (ThrottledChannel)."""
    if throttle_ms > 0 and ctx.connection.mute_for is not None:
        ctx.connection.mute_for(throttle_ms / 1000.0)


THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."
"""Errors.THROTTLING_QUOTA_EXCEEDED's default message, what a refused topic carries."""


def record_produce(ctx: RequestContext) -> int:
    """The produce quota's throttle time for this request, recorded first at its whole size, header
    and body, as KafkaApis.handleProduceRequest records request.sizeInBytes."""
    state = ctx.state
    return quotas_of(state).produce.record_and_get_throttle_time_ms(
        state.image.client_quotas, ctx.connection.principal, ctx.client_id, ctx.request_size
    )


def record_request_time(ctx: RequestContext, request: Any, nanos: int) -> int:
    """ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs: the share of a second this request
    kept the handler busy; a follower's fetch and the controller listener are exempt."""
    state = ctx.state
    if ctx.connection.listener == state.controller_listener_name or _is_follower_fetch(ctx, request):
        return 0
    return quotas_of(state).request.record_and_get_throttle_time_ms(
        state.image.client_quotas,
        ctx.connection.principal,
        ctx.client_id,
        nanos * NANOS_TO_PERCENTAGE_PER_SECOND,
    )


def with_throttle_time(response: object, throttle_ms: int) -> object:
    """A kio response with its throttle_time raised to `throttle_ms` (responses without one unchanged)."""
    current = getattr(response, "throttle_time", None)
    if not isinstance(current, datetime.timedelta) or not dataclasses.is_dataclass(response):
        return response
    wanted = datetime.timedelta(milliseconds=throttle_ms)
    if current >= wanted:
        return response
    return dataclasses.replace(response, throttle_time=wanted)  # type: ignore[type-var]


def mutation_quota(ctx: RequestContext, strict_since: int) -> ControllerMutationQuota | None:
    """newQuotaFor: None when no controller_mutation_rate applies to anyone."""
    state = ctx.state
    if not state.image.client_quotas:
        return None
    return quotas_of(state).controller_mutation.new_quota_for(
        state.image.client_quotas, ctx.connection.principal, ctx.client_id, ctx.api_version >= strict_since
    )


def _is_follower_fetch(ctx: RequestContext, request: Any) -> bool:
    if ctx.api_key != 1:
        return False
    state_ = getattr(request, "replica_state", None)
    replica_id = state_.replica_id if state_ is not None else getattr(request, "replica_id", -1)
    return replica_id >= 0


@types.coroutine
def on_cpu(coroutine: Coroutine[Any, Any, T], spent: list[int]) -> Generator[Any, Any, T]:
    """Run `coroutine`, adding to spent[0] the thread time of its own steps only: a handler that waits
    (a long-poll Fetch) is not charged for what other connections do meanwhile (Kafka counts a
    request's time on a request handler thread, not its time in purgatory)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        started = time.thread_time_ns()
        try:
            waiting = coroutine.send(value) if error is None else coroutine.throw(error)
        except StopIteration as done:
            spent[0] += time.thread_time_ns() - started
            return done.value  # type: ignore[no-any-return]
        spent[0] += time.thread_time_ns() - started
        try:
            value, error = (yield waiting), None
        except BaseException as exc:  # cancellation and close reach the handler as they would unwrapped
            value, error = None, exc
