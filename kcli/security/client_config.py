"""A Kafka client properties file (`--command-config`, `--admin.config`, `--producer.config`) read into
a `ClientSecurity` and the few client settings kcli uses (client.id, bootstrap.servers,
request.timeout.ms, default.api.timeout.ms, socket.connection.setup.timeout.ms).

Kafka's Java names are the representation; librdkafka's spellings are accepted and turned into them,
so the TLS and SASL code reads one set of keys:

`ClientSecurity.protocol`: `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), upper case.

`ClientSecurity.sasl_mechanism`: `sasl.mechanism` / librdkafka's `sasl.mechanisms`, upper case; one of
PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER whenever the protocol uses SASL (GSSAPI is refused).

`ClientSecurity.jaas`: the options of the one login module of `sasl.jaas.config`, quotes and escapes
undone: `username`, `password` (PLAIN, SCRAM; librdkafka's `sasl.username` / `sasl.password`);
`clientId`, `clientSecret`, `scope`, `extension_<name>` (OAUTHBEARER against a token endpoint;
librdkafka's `sasl.oauthbearer.client.id` / `.client.secret` / `.scope` / `.extensions`);
`unsecuredLoginStringClaim_sub`, `unsecuredLogin*` (OAUTHBEARER unsecured tokens; librdkafka's
`sasl.oauthbearer.config` principal=, principalClaimName=, scopeClaimName=, lifeSeconds=,
extension_<name>=). The module itself is checked against the mechanism and not kept: the mechanism
says what to run.

`ClientSecurity.sasl`: the other `sasl.*` settings under Kafka's names: `sasl.login.*`,
`sasl.oauthbearer.token.endpoint.url` (set: fetch tokens with clientId/clientSecret; unset: unsecured
tokens from the `unsecuredLogin*` options), `sasl.oauthbearer.scope.claim.name`, `.sub.claim.name`,
`.clock.skew.seconds`, `.header.urlencode`, `sasl.login.callback.handler.class` (only Kafka's own
OAuthBearerLoginCallbackHandler is accepted). `sasl.mechanism` and `sasl.jaas.config` are not in it.

`ClientSecurity.ssl`, filled only when the protocol uses TLS:
  - `ssl.endpoint.identification.algorithm`: always present, "https" (check the broker's host name,
    Kafka's default) or "" (do not; librdkafka's "none").
  - `ssl.protocol` (default TLSv1.3), `ssl.enabled.protocols` (default "TLSv1.2,TLSv1.3"): always
    present. As in Kafka, the enabled list bounds the versions; ssl.protocol names the SSLContext and
    with the default list still lets TLSv1.2 through.
  - `ssl.cipher.suites`: as given (Kafka: comma-separated IANA names; librdkafka: an OpenSSL list).
  - trust: absent means the system's default CAs. `ssl.truststore.type` is "PEM" or "PKCS12" (JKS is
    refused; unset, it is read from the file's first bytes), with either `ssl.truststore.location`
    (an absolute path to an existing file; librdkafka's `ssl.ca.location`) or, PEM only,
    `ssl.truststore.certificates` (the PEM text; librdkafka's `ssl.ca.pem`). `ssl.truststore.password`
    only with PKCS12. A type or password without a store is dropped (Kafka's default type is JKS).
  - `enable.ssl.certificate.verification`: librdkafka's name, present only as "false" (trust any
    certificate); Kafka has no such setting.
  - client certificate: `ssl.keystore.type` "PEM" or "PKCS12", with either `ssl.keystore.location`
    (absolute path; a PEM file holds the key and the chain) plus `ssl.keystore.password` (PKCS12
    only), or, PEM only, `ssl.keystore.key` and `ssl.keystore.certificate.chain` (PEM text; librdkafka's
    `ssl.key.pem` / `ssl.certificate.pem`, or the text of `ssl.key.location` /
    `ssl.certificate.location`). `ssl.key.password` decrypts a PEM key (or a PKCS12 entry).

Secrets (passwords, the JAAS line, private keys, client secrets) never appear in a message: errors name
keys, not values, and `ClientConfig.describe` shows them as `[hidden]`, as Kafka prints passwords.
Keys kcli does not know are refused, as are Java classes, Kerberos and JKS stores; known Kafka client
keys that change nothing for kcli are accepted (`NO_EFFECT`), and producer or consumer settings a
command does not use are returned in `unused` for the command to warn about.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from kcli.config import load_properties
from kcli.errors import KcliError
from kcli.security import PROTOCOLS, SECRET_MARK, ClientSecurity

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
GSSAPI_REFUSED = (
    "SASL mechanism GSSAPI (Kerberos) is not supported by kcli; use PLAIN, SCRAM-SHA-256, "
    "SCRAM-SHA-512 or OAUTHBEARER."
)
LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": ("OAUTHBEARER",),
}
"""Kafka's login modules and the mechanisms each can feed: Plain and Scram modules both put the
username and password on the Subject, so Kafka's clients take either for PLAIN or SCRAM."""
OAUTH_LOGIN_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)

SECRET_KEYS = frozenset(
    {
        "sasl.jaas.config",
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "ssl.truststore.password",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.key.pem",
    }
)
SECRET_JAAS_OPTIONS = frozenset({"password", "clientSecret"})

MILLISECONDS = {
    "request.timeout.ms": INT_MAX,
    "default.api.timeout.ms": INT_MAX,
    "socket.connection.setup.timeout.ms": LONG_MAX,
}
"""The timeouts kcli uses, with Kafka's type bound (INT or LONG); 0 would give up at once, so each
must be at least 1."""

SASL_KEPT = frozenset(
    {
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "sasl.login.connect.timeout.ms",
        "sasl.login.read.timeout.ms",
        "sasl.login.retry.backoff.max.ms",
        "sasl.login.retry.backoff.ms",
        "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.sub.claim.name",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.header.urlencode",
    }
)
SSL_KEPT = frozenset(
    {
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.key.password",
    }
)

NO_EFFECT = frozenset(
    {
        # CommonClientConfigs / AdminClientConfig: kcli opens one connection per broker, on demand
        "client.dns.lookup",
        "client.rack",
        "metadata.max.age.ms",
        "metadata.recovery.strategy",
        "send.buffer.bytes",
        "receive.buffer.bytes",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retries",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
        "enable.metrics.push",
        "metrics.sample.window.ms",
        "metrics.num.samples",
        "metrics.recording.level",
        "auto.include.jmx.reporter",
        "socket.connection.setup.timeout.max.ms",
        "connections.max.idle.ms",  # a command's connections live as long as the command
        # broker-side OAUTHBEARER validation settings a shared file may carry
        "sasl.oauthbearer.jwks.endpoint.url",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.expected.issuer",
        # JSSE algorithm names: Python's ssl module has one implementation of each
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        # librdkafka: what its OAUTHBEARER method needs switched on; kcli has no switch
        "enable.sasl.oauthbearer.unsecure.jwt",
    }
)
"""Known Kafka (and librdkafka) client settings that change nothing in how kcli connects: accepted."""

PRODUCER_KEYS = frozenset(
    {
        "acks",
        "batch.size",
        "buffer.memory",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delivery.timeout.ms",
        "enable.idempotence",
        "key.serializer",
        "value.serializer",
        "linger.ms",
        "max.block.ms",
        "max.in.flight.requests.per.connection",
        "max.request.size",
        "metadata.max.idle.ms",
        "partitioner.adaptive.partitioning.enable",
        "partitioner.availability.timeout.ms",
        "partitioner.class",
        "partitioner.ignore.keys",
        "transaction.timeout.ms",
        "transactional.id",
    }
)
CONSUMER_KEYS = frozenset(
    {
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "max.poll.records",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "partition.assignment.strategy",
        "auto.offset.reset",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "fetch.max.wait.ms",
        "max.partition.fetch.bytes",
        "check.crcs",
        "key.deserializer",
        "value.deserializer",
        "exclude.internal.topics",
        "isolation.level",
        "allow.auto.create.topics",
    }
)
"""Producer and consumer settings: an admin command does not use them (a shared client.properties
often carries them), so they are reported back, not refused."""

PRODUCER_USED = frozenset({"enable.idempotence", "compression.type"})
"""What `kcli replay` takes from a producer config beyond the common settings."""

Role = Literal["admin", "producer", "server"]
"""What reads the file: an admin command, `kcli replay` (a producer), or `kcli quorum add-controller`,
whose file is the joining controller's own configuration (its broker settings are skipped, as Kafka's
admin client only warns about them)."""


class ClientConfigError(KcliError):
    """A client properties file kcli cannot honour, told in one sentence that names no secret."""


@dataclass(frozen=True)
class ClientConfig:
    """What a client properties file says: how to connect, and the client settings kcli uses."""

    security: ClientSecurity = field(default_factory=ClientSecurity)
    client_id: str | None = None
    """`client.id`; None leaves the command's own."""
    bootstrap_servers: str | None = None
    """`bootstrap.servers`, used where --bootstrap-server is not given."""
    timeouts_ms: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """`request.timeout.ms`, `default.api.timeout.ms`, `socket.connection.setup.timeout.ms`, where set."""
    producer: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    """The producer settings `kcli replay` honours (PRODUCER_USED), read with role="producer"."""
    unused: tuple[str, ...] = ()
    """Producer or consumer settings given that this command does not use (sorted)."""

    def timeout_s(self, key: str, default: float) -> float:
        """A millisecond setting in seconds, or `default` when the file does not set it."""
        value = self.timeouts_ms.get(key)
        return default if value is None else value / 1000

    def describe(self) -> dict[str, str]:
        """Every setting under Kafka's names, secrets shown as Kafka shows a password."""
        s = self.security
        out = {"security.protocol": s.protocol}
        if s.uses_sasl:
            out["sasl.mechanism"] = s.sasl_mechanism
        out.update(s.sasl)
        out.update(
            (key, SECRET_MARK if key in SECRET_KEYS or key == "ssl.keystore.key" else value)
            for key, value in s.ssl.items()
        )
        if s.jaas:
            out["sasl.jaas.config"] = SECRET_MARK
        if self.client_id is not None:
            out["client.id"] = self.client_id
        if self.bootstrap_servers is not None:
            out["bootstrap.servers"] = self.bootstrap_servers
        out.update((key, str(value)) for key, value in self.timeouts_ms.items())
        out.update(self.producer)
        return out


DEFAULT = ClientConfig()


def load_client_config(path: str | Path, *, role: Role = "admin") -> ClientConfig:
    """Read a Kafka client properties file; one sentence naming the file for anything kcli cannot honour."""
    p = Path(path)
    if p.is_dir():
        raise ClientConfigError(f"cannot read client config {path}: it is a directory.")
    if not p.exists():
        raise ClientConfigError(f"cannot read client config {path}: no such file.")
    return parse_client_config(load_properties(p), source=str(path), role=role)


def parse_client_config(
    properties: Mapping[str, str], *, source: str = "client config", role: Role = "admin"
) -> ClientConfig:
    """Turn properties (Kafka's or librdkafka's names) into a ClientConfig; see the module docstring."""
    return _Reader(properties, source, role).read()


class _Reader:
    def __init__(self, properties: Mapping[str, str], source: str, role: Role) -> None:
        self.props = {key.strip(): value for key, value in properties.items()}
        self.source = source
        self.role = role

    def fail(self, sentence: str) -> ClientConfigError:
        return ClientConfigError(f"{self.source}: {sentence}")

    def get(self, key: str) -> str | None:
        value = self.props.get(key)
        return None if value is None else value.strip()

    def read(self) -> ClientConfig:
        unused = self._check_keys()
        protocol = (self.get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            shown = self.get("security.protocol")
            raise self.fail(f"security.protocol {shown!r} is not one of {', '.join(PROTOCOLS)}.")
        mechanism, sasl, jaas = self._sasl(protocol in ("SASL_PLAINTEXT", "SASL_SSL"))
        ssl = self._ssl() if protocol in ("SSL", "SASL_SSL") else {}
        security = ClientSecurity(
            protocol=protocol,
            sasl_mechanism=mechanism,
            ssl=MappingProxyType(ssl),
            sasl=MappingProxyType(sasl),
            jaas=MappingProxyType(jaas),
        )
        bootstrap = self.get("bootstrap.servers") or None
        if bootstrap is not None:
            from kcli.client import ClientError, split_bootstrap

            try:
                split_bootstrap(bootstrap)
            except ClientError as exc:
                raise self.fail(f"bootstrap.servers: {str(exc)[0].lower()}{str(exc)[1:]}") from None
        return ClientConfig(
            security=security,
            client_id=self.props.get("client.id") or None,
            bootstrap_servers=bootstrap,
            timeouts_ms=MappingProxyType(
                {
                    key: self._milliseconds(key, bound)
                    for key, bound in MILLISECONDS.items()
                    if key in self.props
                }
            ),
            producer=MappingProxyType(self._producer()),
            unused=unused,
        )

    # --- keys ------------------------------------------------------------------------------------

    def _check_keys(self) -> tuple[str, ...]:
        """Refuse keys kcli cannot honour or does not know; return the producer/consumer ones unused."""
        unused = []
        for key in sorted(self.props):
            if key in KNOWN or key in NO_EFFECT:
                continue
            if self.role == "server":
                continue
            if key in PRODUCER_KEYS or key in CONSUMER_KEYS:
                if not (self.role == "producer" and key in PRODUCER_USED):
                    unused.append(key)
                continue
            if key.startswith("sasl.kerberos.") or key == "sasl.kerberos":
                raise self.fail(f"{key} is a Kerberos setting: {GSSAPI_REFUSED}")
            if key in JAVA_CLASSES:
                if key == "sasl.login.callback.handler.class" and self.get(key) in OAUTH_LOGIN_HANDLERS:
                    continue
                raise self.fail(
                    f"{key} names a Java class, which kcli cannot load; leave it out (kcli's own "
                    "implementation is used)."
                )
            if key == "bootstrap.controllers":
                raise self.fail(
                    "bootstrap.controllers is not read from a client config; give --bootstrap-server."
                )
            close = difflib.get_close_matches(key, sorted(KNOWN | NO_EFFECT), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise self.fail(f"{key} is not a Kafka client setting kcli knows{hint}.")
        return tuple(unused)

    def _one_of(self, kafka: str, librdkafka: str) -> str | None:
        """A setting both clients spell differently; given twice, the two must agree."""
        a, b = self.get(kafka), self.get(librdkafka)
        if a is not None and b is not None and a != b:
            raise self.fail(f"{kafka} and librdkafka's {librdkafka} disagree; give one.")
        return a if a is not None else b

    def _milliseconds(self, key: str, bound: int) -> int:
        raw = self.props[key]
        try:
            value = int(raw.strip())
        except ValueError:
            value = -1
        if not 1 <= value <= bound:
            raise self.fail(f"{key} must be a number of milliseconds from 1 to {bound}, not {raw!r}.")
        return value

    def _producer(self) -> dict[str, str]:
        if self.role != "producer":
            return {}
        out = {}
        idempotence = self.get("enable.idempotence")
        if idempotence is not None:
            if idempotence.lower() not in ("true", "false"):
                raise self.fail(f"enable.idempotence must be true or false, not {idempotence!r}.")
            out["enable.idempotence"] = idempotence.lower()
        compression = self.get("compression.type")
        if compression is not None:
            if compression.lower() not in ("none", "gzip", "snappy", "lz4", "zstd"):
                raise self.fail(
                    f"compression.type must be none, gzip, snappy, lz4 or zstd, not {compression!r}."
                )
            out["compression.type"] = compression.lower()
        return out

    # --- SASL ------------------------------------------------------------------------------------

    def _sasl(self, uses_sasl: bool) -> tuple[str, dict[str, str], dict[str, str]]:
        mechanism = self._one_of("sasl.mechanism", "sasl.mechanisms") or "GSSAPI"
        mechanism = mechanism.upper()
        sasl = {key: self.props[key].strip() for key in SASL_KEPT if key in self.props}
        handler = self.get("sasl.login.callback.handler.class")
        if handler is not None:
            sasl["sasl.login.callback.handler.class"] = handler
        jaas: dict[str, str] = {}
        module = None
        line = self.props.get("sasl.jaas.config")
        if line is not None and line.strip():
            module, jaas = parse_jaas_config(line, source=f"{self.source}: sasl.jaas.config")
        jaas = self._librdkafka_sasl(jaas, sasl)
        if not uses_sasl:
            return mechanism, sasl, jaas
        if mechanism == "GSSAPI":
            raise self.fail(GSSAPI_REFUSED)
        if mechanism not in MECHANISMS:
            raise self.fail(
                f"SASL mechanism {mechanism} is not supported by kcli; use {', '.join(MECHANISMS[:-1])} "
                f"or {MECHANISMS[-1]}."
            )
        if module is not None and mechanism not in LOGIN_MODULES[module]:
            raise self.fail(
                f"sasl.jaas.config's {module.rsplit('.', 1)[1]} cannot log in with SASL mechanism {mechanism}."
            )
        if mechanism == "OAUTHBEARER":
            if module is None and not jaas:
                raise self.fail(
                    "SASL mechanism OAUTHBEARER needs sasl.jaas.config with "
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule (or librdkafka's "
                    "sasl.oauthbearer.* settings)."
                )
            if "sasl.oauthbearer.token.endpoint.url" in sasl and not (
                "clientId" in jaas and "clientSecret" in jaas
            ):
                raise self.fail(
                    "sasl.oauthbearer.token.endpoint.url needs the clientId and clientSecret options in "
                    "sasl.jaas.config (librdkafka: sasl.oauthbearer.client.id and sasl.oauthbearer.client.secret)."
                )
        elif not (jaas.get("username") and "password" in jaas):
            raise self.fail(
                f"SASL mechanism {mechanism} needs a username and password: give sasl.jaas.config "
                '(... required username="..." password="...";) or sasl.username and sasl.password '
                "(kcli does not read JAAS files)."
            )
        return mechanism, sasl, jaas

    def _librdkafka_sasl(self, jaas: dict[str, str], sasl: dict[str, str]) -> dict[str, str]:
        """librdkafka's SASL settings onto JAAS options; each may not repeat what sasl.jaas.config says."""
        mapped: dict[str, str] = {}
        for key, option in (
            ("sasl.username", "username"),
            ("sasl.password", "password"),
            ("sasl.oauthbearer.client.id", "clientId"),
            ("sasl.oauthbearer.client.secret", "clientSecret"),
            ("sasl.oauthbearer.scope", "scope"),
        ):
            if key in self.props:
                mapped[option] = self.props[key] if option in SECRET_JAAS_OPTIONS else self.props[key].strip()
        extensions = self.get("sasl.oauthbearer.extensions")
        if extensions:
            for item in extensions.split(","):
                name, sep, value = item.partition("=")
                if not sep or not name.strip():
                    raise self.fail(
                        "sasl.oauthbearer.extensions must be a comma-separated list of name=value."
                    )
                mapped[f"extension_{name.strip()}"] = value.strip()
        unsecured = self.props.get("sasl.oauthbearer.config")
        if unsecured is not None and unsecured.strip():
            mapped.update(self._unsecured_jwt(unsecured))
        method = (self.get("sasl.oauthbearer.method") or "default").lower()
        if method not in ("default", "oidc"):
            raise self.fail(f"sasl.oauthbearer.method must be default or oidc, not {method!r}.")
        if method == "oidc" and "sasl.oauthbearer.token.endpoint.url" not in sasl:
            raise self.fail("sasl.oauthbearer.method oidc needs sasl.oauthbearer.token.endpoint.url.")
        if mapped and jaas:
            given = sorted(k for k in self.props if k in LIBRDKAFKA_SASL)
            raise self.fail(f"give either sasl.jaas.config or librdkafka's {', '.join(given)}, not both.")
        return mapped or jaas

    def _unsecured_jwt(self, text: str) -> dict[str, str]:
        """librdkafka's sasl.oauthbearer.config for unsecured tokens, as Kafka's unsecuredLogin* options."""
        names = {
            "principal": "unsecuredLoginStringClaim_sub",
            "principalClaimName": "unsecuredLoginPrincipalClaimName",
            "scopeClaimName": "unsecuredLoginScopeClaimName",
            "lifeSeconds": "unsecuredLoginLifetimeSeconds",
        }
        out = {}
        for item in text.split():
            name, sep, value = item.partition("=")
            if name.startswith("extension_") and sep:
                out["unsecuredLoginExtension_" + name[len("extension_") :]] = value
            elif name in names and sep:
                out[names[name]] = value
            else:
                raise self.fail(  # the item is not echoed: it may hold a value
                    "sasl.oauthbearer.config takes space-separated principal=, principalClaimName=, "
                    "scopeClaimName=, lifeSeconds= and extension_<name>= items only."
                )
        if "unsecuredLoginPrincipalClaimName" in out and "unsecuredLoginStringClaim_sub" in out:
            claim = out.pop("unsecuredLoginStringClaim_sub")
            out["unsecuredLoginStringClaim_" + out["unsecuredLoginPrincipalClaimName"]] = claim
        return out

    # --- TLS -------------------------------------------------------------------------------------

    def _ssl(self) -> dict[str, str]:
        ssl = {key: self.props[key].strip() for key in SSL_KEPT if key in self.props}
        for key in ("ssl.truststore.password", "ssl.keystore.password", "ssl.key.password"):
            if key in self.props:
                ssl[key] = self.props[key]  # a password's spaces are its own
        for key in ("ssl.truststore.certificates", "ssl.keystore.key", "ssl.keystore.certificate.chain"):
            if not ssl.get(key, "x"):
                del ssl[key]
        ssl.setdefault("ssl.protocol", "TLSv1.3")
        ssl.setdefault("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")
        algorithm = self.props.get("ssl.endpoint.identification.algorithm", "https").strip()
        if algorithm.lower() not in ("https", "", "none"):
            raise self.fail(
                f"ssl.endpoint.identification.algorithm must be https, or empty (librdkafka: none) to "
                f"skip the host name check, not {algorithm!r}."
            )
        ssl["ssl.endpoint.identification.algorithm"] = "https" if algorithm.lower() == "https" else ""
        verify = self.get("enable.ssl.certificate.verification")
        if verify is not None:
            if verify.lower() not in ("true", "false"):
                raise self.fail(f"enable.ssl.certificate.verification must be true or false, not {verify!r}.")
            if verify.lower() == "false":
                ssl["enable.ssl.certificate.verification"] = "false"
        self._librdkafka_ssl(ssl)
        self._store(ssl, "truststore")
        self._store(ssl, "keystore")
        return ssl

    def _librdkafka_ssl(self, ssl: dict[str, str]) -> None:
        """librdkafka's PEM settings as Kafka's PEM truststore and keystore."""
        ca_location = self.get("ssl.ca.location")
        ca_pem = self.props.get("ssl.ca.pem", "").strip()
        if ca_location or ca_pem:
            if any(k in ssl for k in ("ssl.truststore.location", "ssl.truststore.certificates")):
                raise self.fail("give either ssl.truststore.* or librdkafka's ssl.ca.*, not both.")
            if ca_location and ca_pem:
                raise self.fail("give either ssl.ca.location or ssl.ca.pem, not both.")
            if ca_location == "probe":
                pass  # librdkafka: the system's CAs, which is what no truststore means
            elif ca_location:
                if Path(ca_location).is_dir():
                    raise self.fail(
                        f"ssl.ca.location {ca_location} is a directory; kcli needs a file of PEM certificates."
                    )
                ssl["ssl.truststore.type"] = "PEM"
                ssl["ssl.truststore.location"] = ca_location
            else:
                ssl["ssl.truststore.type"] = "PEM"
                ssl["ssl.truststore.certificates"] = ca_pem
        cert = self._pem_text("ssl.certificate.location", "ssl.certificate.pem")
        key = self._pem_text("ssl.key.location", "ssl.key.pem")
        if cert is None and key is None:
            return
        if cert is None or key is None:
            raise self.fail(
                "a client certificate needs both ssl.certificate.location (or .pem) and ssl.key.location "
                "(or .pem)."
            )
        if any(k in ssl for k in ("ssl.keystore.location", "ssl.keystore.key")):
            raise self.fail(
                "give either ssl.keystore.* or librdkafka's ssl.certificate.* and ssl.key.*, not both."
            )
        ssl["ssl.keystore.type"] = "PEM"
        ssl["ssl.keystore.certificate.chain"] = cert
        ssl["ssl.keystore.key"] = key

    def _pem_text(self, location_key: str, pem_key: str) -> str | None:
        location = self.get(location_key)
        pem = self.props.get(pem_key, "").strip()
        if location and pem:
            raise self.fail(f"give either {location_key} or {pem_key}, not both.")
        if location:
            return self._read_text(location_key, location)
        return pem or None

    def _read_text(self, key: str, location: str) -> str:
        try:
            return self._read(key, location).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{key} {location} is not PEM text.") from None

    def _read(self, key: str, location: str, size: int = -1) -> bytes:
        """A file a setting names, or one sentence naming the setting and the file."""
        try:
            with open(location, "rb") as file:
                return file.read(size)
        except FileNotFoundError:
            raise self.fail(f"{key} {location}: no such file.") from None
        except IsADirectoryError:
            raise self.fail(f"{key} {location} is a directory, not a file.") from None
        except OSError as exc:
            raise self.fail(f"{key} {location}: {(exc.strerror or str(exc)).lower()}.") from None

    def _store(self, ssl: dict[str, str], store: str) -> None:
        """One store's type, file and inline PEM, checked as Kafka's DefaultSslEngineFactory does."""
        location_key = f"ssl.{store}.location"
        type_key = f"ssl.{store}.type"
        password_key = f"ssl.{store}.password"
        inline = (
            ("ssl.truststore.certificates",)
            if store == "truststore"
            else ("ssl.keystore.key", "ssl.keystore.certificate.chain")
        )
        if ssl.get(location_key) == "":
            del ssl[location_key]
        location = ssl.get(location_key)
        given_type = ssl.pop(type_key, "").upper() or None
        has_inline = any(k in ssl for k in inline)
        if location is None and not has_inline:
            # no store: the type and passwords open nothing (Kafka's JKS default type included)
            ssl.pop(password_key, None)
            if store == "keystore":
                ssl.pop("ssl.key.password", None)
            return
        if given_type in ("JKS", "JCEKS"):
            raise self.fail(_jks_refusal(store, location))
        if given_type not in (None, "PEM", "PKCS12"):
            raise self.fail(f"{type_key} must be PKCS12 or PEM, not {given_type!r}.")
        if location is not None:
            if has_inline:
                raise self.fail(f"give either {location_key} or {' and '.join(inline)}, not both.")
            found = self._store_file(location_key, location)
            if found == "JKS":
                raise self.fail(_jks_refusal(store, location))
            if given_type is not None and given_type != found:
                raise self.fail(f"{location_key} {location} is {found}, not the {type_key} {given_type}.")
            ssl[location_key] = str(Path(location).absolute())
            ssl[type_key] = found
        else:
            if given_type not in (None, "PEM"):
                raise self.fail(f"{' and '.join(inline)} need {type_key} PEM.")
            if not all(k in ssl for k in inline):
                raise self.fail(f"{' and '.join(inline)} go together.")
            ssl[type_key] = "PEM"
        if ssl[type_key] == "PEM" and password_key in ssl:
            what = "ssl.key.password" if store == "keystore" else "no password"
            raise self.fail(f"{password_key} cannot be given for a PEM {store}; it takes {what}.")

    def _store_file(self, key: str, location: str) -> str:
        """PEM, PKCS12 or JKS, from the file's first bytes (Kafka's type default, JKS, is not trusted:
        librdkafka's ssl.keystore.location is PKCS12 and says no type)."""
        found = _store_kind(self._read(key, location, 64))
        if found is None:
            raise self.fail(f"{key} {location} is neither PEM nor PKCS12.")
        return found


def _store_kind(head: bytes) -> str | None:
    if head[:4] in (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce"):
        return "JKS"
    if head.lstrip()[:10] == b"-----BEGIN":
        return "PEM"
    if head[:1] == b"\x30":  # a DER SEQUENCE: PKCS#12's PFX
        return "PKCS12"
    return None


def _jks_refusal(store: str, location: str | None) -> str:
    source = location or "FILE.jks"
    return (
        f"JKS {store}s are not supported; convert {source} with keytool -importkeystore "
        f"-srckeystore {source} -destkeystore {store}.p12 -deststoretype PKCS12, then set "
        f"ssl.{store}.type=PKCS12."
    )


LIBRDKAFKA_SASL = frozenset(
    {
        "sasl.username",
        "sasl.password",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.scope",
        "sasl.oauthbearer.extensions",
        "sasl.oauthbearer.config",
    }
)
KNOWN = (
    frozenset(
        {
            "security.protocol",
            "bootstrap.servers",
            "client.id",
            "sasl.mechanism",
            "sasl.mechanisms",
            "sasl.jaas.config",
            "sasl.oauthbearer.method",
            "ssl.endpoint.identification.algorithm",
            "enable.ssl.certificate.verification",
            "ssl.ca.location",
            "ssl.ca.pem",
            "ssl.certificate.location",
            "ssl.certificate.pem",
            "ssl.key.location",
            "ssl.key.pem",
        }
    )
    | MILLISECONDS.keys()
    | SASL_KEPT
    | SSL_KEPT
    | LIBRDKAFKA_SASL
)
JAVA_CLASSES = frozenset(
    {
        "sasl.client.callback.handler.class",
        "sasl.login.callback.handler.class",
        "sasl.login.class",
        "ssl.engine.factory.class",
        "ssl.provider",
        "security.providers",
        "metric.reporters",
        "interceptor.classes",
    }
)


# --- sasl.jaas.config ---------------------------------------------------------------------------

_FLAGS = ("required", "requisite", "sufficient", "optional")


def parse_jaas_config(text: str, *, source: str = "sasl.jaas.config") -> tuple[str, dict[str, str]]:
    """The login module and options of a one-module JAAS line, tokenized as Kafka's JaasConfig does
    (java.io.StreamTokenizer: quoted values with escapes, `//` and `/* */` comments, unquoted values
    of letters, digits and `.-_$` that do not start with a digit)."""
    tokens = _jaas_tokens(text, source)
    entries: list[tuple[str, dict[str, str]]] = []
    i = 0

    def fail(sentence: str) -> ClientConfigError:
        return ClientConfigError(f"{source}: {sentence}")

    while i < len(tokens):
        module = tokens[i].word
        if module is None:
            raise fail("the login module class is not given.")
        i += 1
        if i == len(tokens):
            raise fail("the login module control flag (required) is not given.")
        flag = tokens[i].word
        if flag is None or flag.lower() not in _FLAGS:
            raise fail("the login module control flag must be required, requisite, sufficient or optional.")
        i += 1
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i].char != ";":
            key = tokens[i].word
            if key is None or i + 2 >= len(tokens) or tokens[i + 1].char != "=" or tokens[i + 2].word is None:
                raise fail(
                    f"{_option_named(key, len(options))} is not name=value (quote values that start with a "
                    "digit or hold characters other than letters, digits and .-_$)."
                )
            options[key] = tokens[i + 2].word or ""
            i += 3
        if i == len(tokens):
            raise fail("the login module entry is not ended by a semicolon.")
        i += 1
        entries.append((module, options))
    if not entries:
        raise fail("no login module is given.")
    if len(entries) > 1:
        raise fail(f"{len(entries)} login modules are given; a client takes one.")
    module, options = entries[0]
    if module == "com.sun.security.auth.module.Krb5LoginModule":
        raise fail(GSSAPI_REFUSED)
    if module not in LOGIN_MODULES:
        known = ", ".join(LOGIN_MODULES)
        shown = module if re.fullmatch(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)+", module) else "given"
        raise fail(f"the login module {shown} is not supported by kcli; use one of {known}.")
    return module, options


_OPTION_NAMES = re.compile(
    r"username|password|clientId|clientSecret|scope|unsecuredLogin\w+|extension_\w+|tokenauth"
)


def _option_named(key: str | None, index: int) -> str:
    """How an error names a JAAS option: by its name when it is a known one, else by its place (a
    misquoted value would otherwise be echoed as a name)."""
    if key is not None and _OPTION_NAMES.fullmatch(key):
        return f"option {key}"
    return f"option {index + 1}"


@dataclass(frozen=True, slots=True)
class _Token:
    word: str | None = None
    """A word or quoted string's text."""
    char: str | None = None
    """An ordinary character (=, ;, ...) or a number, which carries no text."""


def _jaas_tokens(text: str, source: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == "/":  # `//` and a lone `/` (StreamTokenizer's comment character) run to the end of line
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif c in "\"'":
            value, i = _quoted(text, i + 1, c)
            tokens.append(_Token(word=value))
        elif (
            c.isdigit()
            or c == "."
            or (c == "-" and i + 1 < n and (text[i + 1].isdigit() or text[i + 1] == "."))
        ):
            i += 1
            while i < n and (text[i].isdigit() or text[i] == "."):
                i += 1
            tokens.append(_Token(char="number"))
        elif _is_word_char(c) and c != "-":
            start = i
            while i < n and (_is_word_char(text[i]) or text[i].isdigit() or text[i] == "."):
                i += 1
            tokens.append(_Token(word=text[start:i]))
        else:
            tokens.append(_Token(char=c))
            i += 1
    return tokens


def _is_word_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or c in "-_$" or ord(c) >= 0xA0


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _quoted(text: str, i: int, quote: str) -> tuple[str, int]:
    """A quoted string from just after its opening quote: StreamTokenizer's escapes; it ends at the
    matching quote, or (unterminated) at the end of the line."""
    out: list[str] = []
    n = len(text)
    while i < n and text[i] != quote and text[i] not in "\r\n":
        c = text[i]
        i += 1
        if c == "\\" and i < n:
            c = text[i]
            i += 1
            if c in "01234567":
                digits = c
                limit = 3 if c <= "3" else 2
                while len(digits) < limit and i < n and text[i] in "01234567":
                    digits += text[i]
                    i += 1
                c = chr(int(digits, 8))
            else:
                c = _ESCAPES.get(c, c)
        out.append(c)
    if i < n and text[i] == quote:
        i += 1
    return "".join(out), i
