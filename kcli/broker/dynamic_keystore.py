"""A renewed keystore or truststore taken without a restart (KIP-226's SSL update, Kafka's SslFactory).

A broker's own dynamic configs may set `ssl.keystore.*` / `ssl.truststore.*` (every SSL listener) or
`listener.name.<listener>.ssl.keystore.*` / `.ssl.truststore.*` (one listener): a new location, password
and type, a PEM key and certificate chain, or PEM trusted certificates. Before the change is stored the
new stores must load, and the new keystore must be the same identity as the one the listener serves
with now (the broker's dynamic level in force, else the static settings), as Kafka's
SslFactory.CertificateEntries.ensureCompatible requires against the engine factory in use: the same
subject distinguished name unless the listener's `ssl.allow.dn.changes` is true, and subject
alternative names including all the old ones unless `ssl.allow.san.changes` is. A truststore cannot be
added to a listener that had none. On the inter-broker listener (Kafka's
keystoreVerifiableUsingTruststore) the old and new settings must complete a TLS handshake with each
other both ways, so that brokers renewed one at a time keep replicating. Once
every node's metadata has the change, each new TLS connection gets a context made from it; connections
already open keep theirs. That holds for the connections the broker opens too (`reconfigure_clients`):
its replica fetchers, transaction markers and verification on the inter-broker listener, and its
requests to the controller, as Kafka registers those clients' channel builders as Reconfigurable. The
Raft client keeps the settings it started with, as Kafka's RaftManager does.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable, Mapping

from kcli.config import BrokerConfig
from kcli.security import ReconfigurableSecurity, tls

log = logging.getLogger("kcli.broker")

KEYSTORE_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
    }
)
"""The keystore part of SslConfigs.RECONFIGURABLE_CONFIGS."""
TRUSTSTORE_CONFIGS = frozenset(
    {
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)
"""The truststore part of SslConfigs.RECONFIGURABLE_CONFIGS."""
RECONFIGURABLE_CONFIGS = KEYSTORE_CONFIGS | TRUSTSTORE_CONFIGS
"""SslConfigs.RECONFIGURABLE_CONFIGS: what kcli swaps live, per broker."""

_PEM_ALIAS = "kafka"
"""The alias Kafka gives the entry of a PEM keystore."""


def keystore_key(name: str) -> str | None:
    """The keystore or truststore config `name` sets, plain or listener-prefixed; None for any other."""
    if name in RECONFIGURABLE_CONFIGS:
        return name
    if name.lower().startswith("listener.name."):
        base = name[len("listener.name.") :].partition(".")[2]
        if base in RECONFIGURABLE_CONFIGS:
            return base
    return None


def listener_ssl_settings(config: BrokerConfig, listener: str, dynamic: Mapping[str, str]) -> dict[str, str]:
    """A listener's `ssl.*` settings with this broker's dynamic keystore configs over the static ones: a
    listener-prefixed value wins over a plain one, a dynamic one over a static one of the same name."""
    settings = config.ssl_settings(listener)
    prefix = f"listener.name.{listener.lower()}."
    for name, value in dynamic.items():
        if name in RECONFIGURABLE_CONFIGS and config.listener_key(listener, name) == name:
            settings[name] = value
    for name, value in dynamic.items():
        if name.lower().startswith(prefix) and name[len(prefix) :] in RECONFIGURABLE_CONFIGS:
            settings[name[len(prefix) :]] = value
    return settings


def reconfigure_clients(
    config: BrokerConfig, clients: Iterable[ReconfigurableSecurity], dynamic: Mapping[str, str]
) -> None:
    """Each of the broker's own clients takes its listener's settings with this broker's dynamic
    keystore configs (checked before they were stored) for its next connections. A store that no longer
    loads (its file changed since) keeps the client's current settings."""
    for client in clients:
        if not client.current.uses_tls:
            continue
        settings = listener_ssl_settings(config, client.listener_name, dynamic)
        try:
            tls.client_context(settings)
        except tls.TlsError as exc:
            log.error(
                "clients of listener %s keep their keystore and truststore: the dynamic ones cannot be "
                "loaded: %s",
                client.listener_name,
                exc,
            )
            continue
        if client.reconfigure(settings):
            log.info(
                "clients of listener %s: keystore and truststore loaded for new connections",
                client.listener_name,
            )


_FAILED = "Validation of dynamic config update of SSLFactory failed: "


def check_keystore_update(
    listener: str,
    old: Mapping[str, str],
    new: Mapping[str, str],
    *,
    allow_dn_changes: bool = False,
    allow_san_changes: bool = False,
    verify_with_truststore: bool = False,
) -> str | None:
    """Why the new keystore or truststore of `listener` is refused (Kafka's sentence), or None."""
    if not _has_truststore(old) and _has_truststore(new):
        return f"{_FAILED}Cannot add SSL truststore to an existing listener for which no truststore was configured."
    try:
        tls.server_context(new, listener=listener)
        if _has_truststore(new):
            tls.client_context(new)  # the truststore loads
        new_cert, old_cert = tls.keystore_certificate(new), tls.keystore_certificate(old)
    except tls.TlsError as exc:
        return f"{_FAILED}{exc}"
    if verify_with_truststore:
        refused = _handshakes(listener, old, new)
        if refused is not None:
            return f"{_FAILED}{refused}"
    if new_cert is None or old_cert is None:
        return None
    if not allow_dn_changes and new_cert.subject != old_cert.subject:
        old_dn, new_dn = old_cert.subject.rfc4514_string(), new_cert.subject.rfc4514_string()
        return (
            "Keystore DistinguishedName does not match:  "
            f"existing={{alias={_PEM_ALIAS}, DN={old_dn}}}, new={{alias={_PEM_ALIAS}, DN={new_dn}}}"
        )
    old_names, new_names = _alt_names(old_cert), _alt_names(new_cert)
    if not allow_san_changes and not old_names <= new_names:
        return (
            "Keystore SubjectAltNames do not match:  "
            f"existing={{alias={_PEM_ALIAS}, SAN={_java_set(old_names)}}}, "
            f"new={{alias={_PEM_ALIAS}, SAN={_java_set(new_names)}}}"
        )
    return None


def check_keystores(
    config: BrokerConfig, dynamic: Mapping[str, str], current: Mapping[str, str]
) -> str | None:
    """Every SSL listener whose keystore the broker's new dynamic configs change: the refusal, or None.

    `current` is the broker's dynamic level in force: the new settings are checked against the ones
    its listeners serve with now (Kafka's SslFactory compares with the engine factory in use), not the
    static ones, so a rotation in several steps is judged one step at a time."""
    for listener in config["listeners"]:  # type: ignore[attr-defined]
        if config.protocol_of(listener.name) not in ("SSL", "SASL_SSL"):
            continue
        old = listener_ssl_settings(config, listener.name, current)
        new = listener_ssl_settings(config, listener.name, dynamic)
        if new != old:
            refused = check_keystore_update(
                listener.name,
                old,
                new,
                allow_dn_changes=bool(config.listener_value(listener.name, "ssl.allow.dn.changes")),
                allow_san_changes=bool(config.listener_value(listener.name, "ssl.allow.san.changes")),
                verify_with_truststore=config.is_broker
                and listener.name == config.inter_broker_listener_name,
            )
            if refused is not None:
                return refused
    return None


def _has_truststore(settings: Mapping[str, str]) -> bool:
    return bool(
        settings.get("ssl.truststore.location", "").strip()
        or settings.get("ssl.truststore.certificates", "").strip()
    )


def _handshakes(listener: str, old: Mapping[str, str], new: Mapping[str, str]) -> str | None:
    """Kafka's SslEngineValidator: the old settings serving a client with the new ones, and the new
    serving the old, each a complete TLS handshake in memory (no host name check; the client's
    certificate checked as the listener's ssl.client.auth says); why one fails."""
    for server, client in ((old, new), (new, old)):
        try:
            server_context = tls.server_context(server, listener=listener)  # its own ssl.client.auth
            client_context = tls.client_context(client)
        except tls.TlsError as exc:
            return str(exc)
        client_context.check_hostname = False
        refused = _handshake(server_context, client_context)
        if refused is not None:
            serving, dialing = ("current", "new") if server is old else ("new", "current")
            return (
                f"a TLS handshake fails on listener {listener} between the {serving} keystore and truststore "
                f"serving and the {dialing} ones dialing ({refused})."
            )
    return None


def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> str | None:
    """One TLS handshake between the two contexts through memory buffers; OpenSSL's reason, or None."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(client_in, client_out, server_side=False)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    done = {id(client): False, id(server): False}
    for _ in range(16):
        for side, out, peer_in in ((client, client_out, server_in), (server, server_out, client_in)):
            if not done[id(side)]:
                try:
                    side.do_handshake()
                    done[id(side)] = True
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError as exc:
                    return str(getattr(exc, "verify_message", None) or exc.reason or exc)
            data = out.read()
            if data:
                peer_in.write(data)
        if all(done.values()):
            return None
    return "the handshake did not complete"


def _alt_names(cert: object) -> set[tuple[int, str]]:
    """The subject alternative names as Java's X509Certificate.getSubjectAlternativeNames gives them."""
    from cryptography import x509

    assert isinstance(cert, x509.Certificate)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {(2, str(n)) for n in names.get_values_for_type(x509.DNSName)} | {
        (7, str(n)) for n in names.get_values_for_type(x509.IPAddress)
    }


def _java_set(names: set[tuple[int, str]]) -> str:
    return "[" + ", ".join(f"[{kind}, {value}]" for kind, value in sorted(names)) + "]"
