"""The broker's quota managers, one per quota type (Kafka's QuotaFactory.QuotaManagers): below the
request context that holds them and the helpers that apply them to a request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcli.broker.quota.manager import ClientQuotaManager, ControllerMutationQuotaManager
from kcli.quota_config import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

if TYPE_CHECKING:
    from kcli.config import BrokerConfig


class QuotaManagers:
    """Produce, fetch, request-time and controller-mutation quotas of one broker."""

    def __init__(self, config: BrokerConfig) -> None:
        samples = int(config["quota.window.num"])  # type: ignore[call-overload]
        window = int(config["quota.window.size.seconds"])  # type: ignore[call-overload]
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window)
        # ClientRequestQuotaManager: a throttle never exceeds one window (maxThrottleTimeMs).
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window, max_throttle_ms=window * 1000)
        self.controller_mutation = ControllerMutationQuotaManager(
            int(config["controller.quota.window.num"]),  # type: ignore[call-overload]
            int(config["controller.quota.window.size.seconds"]),  # type: ignore[call-overload]
        )
