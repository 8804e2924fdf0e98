"""Kafka's ConnectionQuotas (SocketServer.scala): how many connections a listener accepts, and how fast.

- `max.connections.per.ip` (and `max.connections.per.ip.overrides`, by host or address): a connection
  beyond its address's count is closed at once (Kafka's TooManyConnectionsException, one INFO line).
- `max.connections` broker-wide and per listener (`listener.name.<listener>.max.connections`, else the
  broker-wide value, as Kafka's valuesWithPrefixOverride gives each listener): at a limit the
  listener stops accepting until a connection closes (Kafka's acceptor blocks in waitForConnectionSlot).
  The inter-broker listener is protected when there is another listener: the broker-wide limit does not
  hold it back, and when it pushes the total over, the least recently active connection of another
  listener is closed (Kafka's closeExcessConnections).
- `max.connection.creation.rate` broker-wide (not on the protected listener) and per listener (KIP-612):
  each accepted connection is recorded in a sampled rate over `quota.window.num` windows of
  `quota.window.size.seconds`; over the rate, accepting waits the throttle time, at most one window.
- Per-IP creation rates (KIP-612): the client quota `connection_creation_rate` of an `ip` entity, else
  of the default `ip` entity (DescribeClientQuotas / AlterClientQuotas, kafka-configs --entity-type ips;
  an entity named by a host name holds the address the name resolves to, as Kafka's), holds each
  address to that many new connections a second over the same windows; a connection over it is not
  accepted, its creation un-recorded, and it is closed once the throttle time has passed (Kafka's
  ConnectionThrottledException and delayed close), so the client backs off.
- The controller listener has counts of its own: Kafka's controller runs its own SocketServer, so its
  connections neither count towards the broker's limits nor wait for them.

Every limit is read from the config on each connection, so dynamic updates apply to the next one.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from functools import lru_cache

from kcli.broker.quota.stats import SampledRate
from kcli.config import BrokerConfig
from kcli.config.connection_limits import parse_connection_overrides
from kcli.quota_config import IP, IP_CONNECTION_RATE, QuotaEntity

ClientQuotas = Callable[[], Mapping[QuotaEntity, Mapping[str, float]]]
"""The client quotas of the current metadata image (the `ip` entities' connection rates among them)."""

INT_MAX = 2**31 - 1
_MAX_IP_RATES = 65536
"""Addresses whose creation rate is kept at once; past it the oldest are forgotten (Kafka's sensors expire)."""


class TooManyConnectionsError(Exception):
    """An address already holds its `max.connections.per.ip` connections (TooManyConnectionsException)."""

    def __init__(self, address: str, count: int) -> None:
        super().__init__(f"address {address} already has the configured maximum of {count} connections")
        self.address = address
        self.count = count


class ConnectionQuotas:
    """One SocketServer's connection counts: by address, by listener and in all."""

    def __init__(
        self,
        config: BrokerConfig,
        listener_names: list[str],
        inter_broker_listener: str | None,
        client_quotas: ClientQuotas | None = None,
    ) -> None:
        self.config = config
        self.inter_broker_listener = inter_broker_listener
        self.counts: dict[str, int] = {}
        self.listener_counts: dict[str, int] = {name: 0 for name in listener_names}
        self.total_count = 0
        samples = int(config["quota.window.num"])  # type: ignore[call-overload]
        window_ms = 1000 * int(config["quota.window.size.seconds"])  # type: ignore[call-overload]
        self.max_throttle_time_ms = window_ms
        self._broker_rate = SampledRate(samples, window_ms)
        self._listener_rates = {name: SampledRate(samples, window_ms) for name in listener_names}
        self._samples, self._window_ms = samples, window_ms
        self._client_quotas: ClientQuotas = client_quotas or dict
        self._ip_rates: dict[str, SampledRate] = {}

    # --- the limits, read live (dynamic broker configs) ---------------------------------------------

    def max_connections_per_ip(self, address: str) -> int:
        overrides = _resolved_overrides(str(self.config["max.connections.per.ip.overrides"]))
        return overrides.get(normal_address(address), int(self.config["max.connections.per.ip"]))  # type: ignore[call-overload]

    def broker_max_connections(self) -> int:
        return int(self.config["max.connections"])  # type: ignore[call-overload]

    def max_listener_connections(self, listener_name: str) -> int:
        return self._listener_limit(listener_name, "max.connections")

    def _listener_limit(self, listener_name: str, key: str) -> int:
        """The listener's own value, else the broker-wide one (Kafka's valuesWithPrefixOverride)."""
        return int(self.config.listener_value(listener_name, key))  # type: ignore[call-overload]

    # --- Kafka's checks -----------------------------------------------------------------------------

    def protected_listener(self, listener_name: str) -> bool:
        return self.inter_broker_listener == listener_name and len(self.listener_counts) > 1

    def connection_slot_available(self, listener_name: str) -> bool:
        if self.listener_counts.get(listener_name, 0) >= self.max_listener_connections(listener_name):
            return False
        if self.protected_listener(listener_name):
            return True
        return self.total_count < self.broker_max_connections()

    def max_connections_exceeded(self, listener_name: str) -> bool:
        """Whether a connection of `listener_name` should make room (the protected listener went over)."""
        return self.total_count > self.broker_max_connections() and not self.protected_listener(listener_name)

    def record_connection_and_get_throttle_time_ms(self, listener_name: str, now_ms: float) -> int:
        """How long accepting waits for the broker's and the listener's creation rates, at most one window."""
        throttle = 0
        if not self.protected_listener(listener_name):
            rate = int(self.config["max.connection.creation.rate"])  # type: ignore[call-overload]
            throttle = self._record(self._broker_rate, rate, now_ms)
        listener_rate = self._listener_rates.get(listener_name)
        if listener_rate is not None:
            limit = self._listener_limit(listener_name, "max.connection.creation.rate")
            throttle = max(throttle, self._record(listener_rate, limit, now_ms))
        return throttle

    def _record(self, rate: SampledRate, quota: int, now_ms: float) -> int:
        rate.record(1.0, now_ms)
        if quota >= INT_MAX:
            return 0
        if quota <= 0:
            return self.max_throttle_time_ms
        return min(rate.throttle_time_ms(quota, now_ms), self.max_throttle_time_ms)

    def connection_rate_for_ip(self, address: str) -> int:
        """Kafka's connectionRateForIp: the address's own `connection_creation_rate` (an entity named by
        the address in any spelling, or by a host name resolving to it), else the default ip entity's,
        else none (Int.MaxValue)."""
        quotas = self._client_quotas()
        if not quotas:
            return INT_MAX
        value = quotas.get(((IP, address),), {}).get(IP_CONNECTION_RATE)
        if value is not None:
            return int(value)
        for entity, values in quotas.items():  # named by another spelling, or by a host name
            if len(entity) == 1 and entity[0][0] == IP and entity[0][1] not in (None, address):
                if IP_CONNECTION_RATE in values and resolved_address(entity[0][1]) == address:
                    return int(values[IP_CONNECTION_RATE])
        value = quotas.get(((IP, None),), {}).get(IP_CONNECTION_RATE)
        return INT_MAX if value is None else int(value)

    def record_ip_connection_and_get_throttle_time_ms(
        self, listener_name: str, address: str, now_ms: float
    ) -> int:
        """Kafka's recordIpConnectionMaybeThrottle: 0 when the address is within its creation rate (the
        connection recorded); else the throttle time, the connection un-recorded from the address's,
        the listener's and the broker's rates, as it will not be accepted."""
        quota = self.connection_rate_for_ip(address)
        if quota >= INT_MAX:
            return 0
        rate = self._ip_rates.get(address)
        if rate is None:
            if len(self._ip_rates) >= _MAX_IP_RATES:
                del self._ip_rates[next(iter(self._ip_rates))]
            rate = self._ip_rates[address] = SampledRate(self._samples, self._window_ms)
        throttle = self._record(rate, quota, now_ms)
        if throttle:
            rate.record(-1.0, now_ms)
            listener_rate = self._listener_rates.get(listener_name)
            if listener_rate is not None:
                listener_rate.record(-1.0, now_ms)
            if not self.protected_listener(listener_name):
                self._broker_rate.record(-1.0, now_ms)
        return throttle

    def inc(self, listener_name: str, address: str) -> None:
        """Count an accepted connection; TooManyConnectionsError when its address was already at its
        limit (the connection is counted all the same: its close calls `dec`, as Kafka's closeChannel)."""
        count = self.counts.get(address, 0)
        self.counts[address] = count + 1
        self.total_count += 1
        if listener_name in self.listener_counts:
            self.listener_counts[listener_name] += 1
        limit = self.max_connections_per_ip(address)
        if count >= limit:
            raise TooManyConnectionsError(address, limit)

    def dec(self, listener_name: str, address: str) -> None:
        count = self.counts.get(address, 0)
        if count <= 1:
            self.counts.pop(address, None)
        else:
            self.counts[address] = count - 1
        self.total_count = max(0, self.total_count - 1)
        if self.listener_counts.get(listener_name, 0) > 0:
            self.listener_counts[listener_name] -= 1

    def get(self, address: str) -> int:
        return self.counts.get(address, 0)


def normal_address(address: str) -> str:
    """One spelling per address (an IPv4-mapped IPv6 address as its IPv4 form)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


@lru_cache(maxsize=1024)
def resolved_address(host: str) -> str | None:
    """The address an ip quota entity names, as Kafka's InetAddress.getByName gives it: a literal in its
    normal spelling, else the host name's first address (IPv4 first, Java's default), resolved once;
    None when the name does not resolve."""
    try:
        return normal_address(str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # stable: the resolver's order otherwise
    return normal_address(str(infos[0][4][0])) if infos else None


@lru_cache(maxsize=8)
def _resolved_overrides(raw: str) -> dict[str, int]:
    """The overrides by address: a host name is resolved once, as Kafka's InetAddress.getByName does
    when the config is read; a name that does not resolve overrides nothing."""
    resolved: dict[str, int] = {}
    for host, count in parse_connection_overrides(raw).items():
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
        except (OSError, UnicodeError):
            continue
        for address in addresses:
            resolved[normal_address(str(address))] = count
    return resolved
