"""A renewed keystore taken without a restart (KIP-226's SSL keystore update, Kafka's SslFactory).

A broker's own dynamic configs may set `ssl.keystore.*` (every SSL listener) or
`listener.name.<listener>.ssl.keystore.*` (one listener): a new location, password and type, or a PEM
key and certificate chain. Before the change is stored the new keystore must load and must be the same
identity, as Kafka's SslFactory.CertificateEntries.ensureCompatible requires: the same subject
distinguished name, and subject alternative names including all the old ones. Once every node's
metadata has the change, each new TLS connection gets a context made from it; connections already
open keep theirs.
"""

from __future__ import annotations

from collections.abc import Mapping

from kcli.config import BrokerConfig
from kcli.security import tls

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
"""The keystore part of SslConfigs.RECONFIGURABLE_CONFIGS: what kcli swaps live."""

_PEM_ALIAS = "kafka"
"""The alias Kafka gives the entry of a PEM keystore."""


def keystore_key(name: str) -> str | None:
    """The keystore config `name` sets, plain or listener-prefixed; None for any other name."""
    if name in KEYSTORE_CONFIGS:
        return name
    if name.lower().startswith("listener.name."):
        base = name[len("listener.name.") :].partition(".")[2]
        if base in KEYSTORE_CONFIGS:
            return base
    return None


def listener_ssl_settings(config: BrokerConfig, listener: str, dynamic: Mapping[str, str]) -> dict[str, str]:
    """A listener's `ssl.*` settings with this broker's dynamic keystore configs over the static ones: a
    listener-prefixed value wins over a plain one, a dynamic one over a static one of the same name."""
    settings = config.ssl_settings(listener)
    prefix = f"listener.name.{listener.lower()}."
    for name, value in dynamic.items():
        if name in KEYSTORE_CONFIGS and config.listener_key(listener, name) == name:
            settings[name] = value
    for name, value in dynamic.items():
        if name.lower().startswith(prefix) and name[len(prefix) :] in KEYSTORE_CONFIGS:
            settings[name[len(prefix) :]] = value
    return settings


def check_keystore_update(listener: str, old: Mapping[str, str], new: Mapping[str, str]) -> str | None:
    """Why the new keystore of `listener` is refused (Kafka's sentence), or None."""
    try:
        tls.server_context(new, listener=listener)
        new_cert, old_cert = tls.keystore_certificate(new), tls.keystore_certificate(old)
    except tls.TlsError as exc:
        return f"Validation of dynamic config update of SSLFactory failed: {exc}"
    if new_cert is None or old_cert is None:
        return None
    if new_cert.subject != old_cert.subject:
        old_dn, new_dn = old_cert.subject.rfc4514_string(), new_cert.subject.rfc4514_string()
        return (
            "Keystore DistinguishedName does not match:  "
            f"existing={{alias={_PEM_ALIAS}, DN={old_dn}}}, new={{alias={_PEM_ALIAS}, DN={new_dn}}}"
        )
    old_names, new_names = _alt_names(old_cert), _alt_names(new_cert)
    if not old_names <= new_names:
        return (
            "Keystore SubjectAltNames do not match:  "
            f"existing={{alias={_PEM_ALIAS}, SAN={_java_set(old_names)}}}, "
            f"new={{alias={_PEM_ALIAS}, SAN={_java_set(new_names)}}}"
        )
    return None


def check_keystores(config: BrokerConfig, dynamic: Mapping[str, str]) -> str | None:
    """Every SSL listener whose keystore the broker's new dynamic configs change: the refusal, or None."""
    for listener in config["listeners"]:  # type: ignore[attr-defined]
        if config.protocol_of(listener.name) not in ("SSL", "SASL_SSL"):
            continue
        old = config.ssl_settings(listener.name)
        new = listener_ssl_settings(config, listener.name, dynamic)
        if new != old:
            refused = check_keystore_update(listener.name, old, new)
            if refused is not None:
                return refused
    return None


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
