"""Secure connections: what a client presents (TLS, SASL) and what a broker checks, as Kafka does them.

`ClientSecurity` is the one value every connection a kcli tool or broker opens is given: the security
protocol and the `ssl.*` / `sasl.*` settings under Kafka's Java property names (librdkafka's spellings
are turned into these when a properties file is read). `tls` makes SSL contexts from them and `sasl`
runs the mechanisms; `KafkaClient.connect` applies both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's SecurityProtocol names."""

SECRET_MARK = "[hidden]"
"""What Kafka's tools print in place of a password (Password.toString)."""


def _frozen(values: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True)
class ClientSecurity:
    """How one client connects: Kafka's `security.protocol` and the settings it needs.

    `ssl` holds `ssl.*` properties, `sasl` holds `sasl.*` properties other than the JAAS line, and
    `jaas` the options of `sasl.jaas.config` (username, password, unsecuredLoginStringClaim_sub, ...),
    all under Kafka's names. Secrets stay out of `repr`.
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "GSSAPI"
    """Kafka's default when `sasl.mechanism` is unset (refused: kcli has no Kerberos)."""
    ssl: Mapping[str, str] = field(default_factory=_frozen, repr=False)
    sasl: Mapping[str, str] = field(default_factory=_frozen, repr=False)
    jaas: Mapping[str, str] = field(default_factory=_frozen, repr=False)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


PLAINTEXT = ClientSecurity()


class ReconfigurableSecurity:
    """The ClientSecurity a broker's own client opens its next connection with, as Kafka's inter-broker
    and broker-to-controller channel builders are Reconfigurable (SslChannelBuilder.reconfigure): a
    renewed keystore or truststore of `listener_name` replaces it, and connections already open keep
    the one they were made with."""

    def __init__(
        self, listener_name: str, build: Callable[[Mapping[str, str] | None], ClientSecurity]
    ) -> None:
        """`build(ssl settings)` makes the ClientSecurity of the listener; None: its static settings."""
        self.listener_name = listener_name
        self._build = build
        self.current = build(None)

    def reconfigure(self, ssl: Mapping[str, str]) -> bool:
        """Take the listener's new `ssl.*` settings (checked and loadable); whether they changed it."""
        if not self.current.uses_tls or dict(self.current.ssl) == dict(ssl):
            return False
        self.current = self._build(ssl)
        return True
