"""TLS contexts from Kafka's `ssl.*` settings, for clients and for a broker's listeners.

Kafka's DefaultSslEngineFactory reads keystores and truststores as JKS, PKCS12 or PEM (files, or PEM
text in `ssl.keystore.key` / `ssl.keystore.certificate.chain` / `ssl.truststore.certificates`); here
PEM and PKCS12 are read (with `cryptography`) and JKS is refused, since Python cannot read it. Each
failure is one sentence naming the setting and the file: a missing file, a wrong password, a store of
the wrong kind. Handshake failures are turned into sentences by `handshake_failure`.

The host name is checked after the handshake (`check_host_name`), not by OpenSSL during it: the
check needs the certificate's names to say which ones it holds, and OpenSSL reports only a mismatch.
`cryptography` is imported where it is used: a command that never speaks TLS does not pay for it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from kcli.errors import KcliError

if TYPE_CHECKING:
    from cryptography import x509

TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
"""The `ssl.enabled.protocols` kcli speaks (Kafka's default set; older ones are disabled in Kafka too)."""
CLIENT_AUTH = ("none", "requested", "required")
STORE_TYPES = ("PEM", "PKCS12", "JKS")

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"


class TlsError(KcliError):
    """A TLS setting that cannot be used, or a TLS handshake that failed; one sentence."""


def client_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The context a client connects with: the truststore (else the system's CAs), the keystore when
    one is set (for mTLS), protocols and cipher suites. The host name is checked by `check_host_name`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE if not _verifies(settings) else ssl.CERT_REQUIRED
    _apply_protocols(context, settings)
    trusted = _truststore(settings)
    if trusted is None:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        context.load_verify_locations(cadata=trusted)
    keystore = _keystore(settings)
    if keystore is not None:
        _load_key_and_chain(context, *keystore)
    return context


def server_context(settings: Mapping[str, str], *, listener: str = "SSL") -> ssl.SSLContext:
    """The context a TLS listener serves with: its keystore (required), `ssl.client.auth`, and the
    truststore client certificates are checked against (else the system's CAs)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(context, settings)
    keystore = _keystore(settings)
    if keystore is None:
        raise TlsError(
            f"listener {listener} uses TLS but has no keystore: set ssl.keystore.location "
            "(or ssl.keystore.key and ssl.keystore.certificate.chain)."
        )
    _load_key_and_chain(context, *keystore)
    client_auth = (settings.get("ssl.client.auth") or "none").strip().lower()
    if client_auth not in CLIENT_AUTH:
        raise TlsError(f"ssl.client.auth is {client_auth!r}; it must be one of {', '.join(CLIENT_AUTH)}.")
    if client_auth != "none":
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
        trusted = _truststore(settings)
        if trusted is None:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        else:
            context.load_verify_locations(cadata=trusted)
    return context


def checks_host_name(settings: Mapping[str, str]) -> bool:
    """`ssl.endpoint.identification.algorithm`: https (Kafka's default) checks it, empty does not."""
    if not _verifies(settings):
        return False
    algorithm = settings.get("ssl.endpoint.identification.algorithm", "https").strip()
    if algorithm and algorithm.lower() != "https":
        raise TlsError(
            f"ssl.endpoint.identification.algorithm is {algorithm!r}; kcli knows https, or empty for none."
        )
    return bool(algorithm)


def check_host_name(ssl_object: ssl.SSLObject | ssl.SSLSocket, host: str, address: str) -> None:
    """Kafka's endpoint identification (https): `host` must be among the certificate's names (its IP
    or DNS subject alternative names; the common name only when it has none)."""
    from cryptography import x509

    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        raise TlsError(f"{address} presented no certificate.")
    cert = x509.load_der_x509_certificate(der)
    names = certificate_names(cert)
    if any(_name_matches(name, host) for name in names):
        return
    held = ", ".join(names) if names else "no names"
    raise TlsError(
        f"the certificate of {address} is not valid for host name {host}: it names {held} "
        "(or set ssl.endpoint.identification.algorithm to empty to skip the check)."
    )


def keystore_certificate(settings: Mapping[str, str]) -> x509.Certificate | None:
    """The keystore's own certificate (first of its chain), None without a keystore; TlsError in one
    sentence for a store that cannot be read."""
    store = _keystore(settings)
    if store is None:
        return None
    return _pem_certificates(store[1], "the keystore")[0]


def certificate_names(cert: x509.Certificate) -> list[str]:
    """The IP and DNS names of the subject alternative names, else the common name."""
    from cryptography import x509

    try:
        alternative = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        alternative = None
    if alternative is not None:
        ips = [str(ip) for ip in alternative.get_values_for_type(x509.IPAddress)]
        dns = list(alternative.get_values_for_type(x509.DNSName))
        if ips or dns:
            return dns + ips
    common = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    return [str(attribute.value) for attribute in common]


def handshake_failure(exc: BaseException, address: str) -> str:
    """The sentence for a TLS handshake with `address` that failed with `exc` (a client's view)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        if code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            return f"the certificate of {address} has expired."
        if code == 9:  # X509_V_ERR_CERT_NOT_YET_VALID
            return f"the certificate of {address} is not valid yet."
        if code in (18, 19, 20, 21, 2):  # self-signed, self-signed in chain, unknown issuer
            return (
                f"the certificate of {address} is not signed by a trusted CA "
                "(check ssl.truststore.location or ssl.truststore.certificates)."
            )
        return f"the certificate of {address} was refused: {exc.verify_message}."
    if isinstance(exc, ssl.SSLError):
        reason = _reason(exc)
        if reason in ("wrong version number", "record layer failure", "packet length too long"):
            return f"{address} does not speak TLS (is it a PLAINTEXT listener?)."
        if "eof" in reason:
            return _closed_in_handshake(address)
        return _alert_sentence(reason, address) or f"the TLS handshake with {address} failed: {reason}."
    if isinstance(exc, (ConnectionResetError, EOFError, BrokenPipeError)):
        return _closed_in_handshake(address)
    return f"the TLS handshake with {address} failed: {exc}."


def closed_before_answering(exc: BaseException | None, address: str) -> str:
    """The sentence for a TLS connection the broker closed before its first answer: under TLSv1.3
    the broker checks the client's certificate after the client's side of the handshake is done, and
    its alert (kcli's broker sends one, as Kafka's does) arrives after the connection seemed made."""
    reason = _reason(exc) if isinstance(exc, ssl.SSLError) else ""
    found = _alert_sentence(reason, address) if reason else None
    if found is not None:
        return found
    if reason:
        return f"{address} closed the TLS connection before answering ({reason})."
    return (
        f"{address} closed the TLS connection before answering: it requires a client certificate "
        "(set ssl.keystore.location) or does not trust this one."
    )


def _alert_sentence(reason: str, address: str) -> str | None:
    """The sentence for a TLS alert the broker sent, by OpenSSL's reason text; None for others."""
    if "protocol version" in reason or "unsupported protocol" in reason:
        return f"{address} and this client share no TLS version (check ssl.enabled.protocols)."
    if "no shared cipher" in reason or "no cipher" in reason or "insufficient security" in reason:
        return f"{address} and this client share no cipher suite (check ssl.cipher.suites)."
    if "unknown ca" in reason:
        return (
            f"{address} does not trust this client's certificate: its CA is not in the broker's truststore."
        )
    if "certificate expired" in reason:
        return f"{address} refused this client's certificate: it has expired."
    if "certificate required" in reason or "alert handshake failure" in reason:
        return f"{address} requires a client certificate (set ssl.keystore.location)."
    if "bad certificate" in reason or "certificate unknown" in reason or "unsupported certificate" in reason:
        return f"{address} refused this client's certificate ({reason})."
    return None


def _reason(exc: ssl.SSLError) -> str:
    return (exc.reason or str(exc)).lower().replace("_", " ")


def _closed_in_handshake(address: str) -> str:
    """A listener that closes during the handshake without a TLS alert: a plaintext one (Kafka reads a
    ClientHello as an oversized request), or a TLS one that refused the client without saying why."""
    return (
        f"{address} closed the connection during the TLS handshake: it is a PLAINTEXT listener, or it "
        "refuses this client's TLS versions, cipher suites or certificate."
    )


def is_tls_record(head: bytes) -> bool:
    """Whether bytes that arrived on a plaintext listener begin a TLS handshake record (a ClientHello)."""
    return len(head) >= 3 and head[0] == 0x16 and head[1] == 0x03 and head[2] <= 0x04


# --- protocols and cipher suites ------------------------------------------------------------------


def _apply_protocols(context: ssl.SSLContext, settings: Mapping[str, str]) -> None:
    enabled = _list(settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"))
    unknown = [name for name in enabled if name not in TLS_VERSIONS]
    if unknown or not enabled:
        shown = unknown[0] if unknown else "nothing"
        raise TlsError(f"ssl.enabled.protocols names {shown}; kcli speaks {' and '.join(TLS_VERSIONS)}.")
    versions = sorted(TLS_VERSIONS[name] for name in enabled)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    protocol = settings.get("ssl.protocol", "TLSv1.3").strip()
    if protocol == "TLSv1.2":
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        if context.minimum_version > ssl.TLSVersion.TLSv1_2:
            raise TlsError("ssl.protocol is TLSv1.2 but ssl.enabled.protocols allows only TLSv1.3.")
    elif protocol not in ("TLSv1.3", "TLS", ""):
        raise TlsError(f"ssl.protocol is {protocol!r}; kcli speaks TLSv1.2 and TLSv1.3.")
    suites = _list(settings.get("ssl.cipher.suites", ""))
    if suites:
        _apply_cipher_suites(context, suites)


_TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
    }
)


def _apply_cipher_suites(context: ssl.SSLContext, suites: list[str]) -> None:
    """`ssl.cipher.suites` under Java's (IANA) names or OpenSSL's. TLSv1.2 suites restrict what
    OpenSSL offers; Python cannot choose among TLSv1.3 suites, so naming only those turns TLSv1.2 off."""
    available = {cipher["name"] for cipher in context.get_ciphers()}
    chosen: list[str] = []
    for suite in suites:
        if suite in _TLS13_SUITES:
            continue
        name = suite if suite in available else _openssl_name(suite)
        if name not in available:
            raise TlsError(f"ssl.cipher.suites names {suite}, which this Python's OpenSSL does not offer.")
        chosen.append(name)
    if chosen:
        context.set_ciphers(":".join(chosen))
    elif context.maximum_version < ssl.TLSVersion.TLSv1_3:
        raise TlsError(
            "ssl.cipher.suites names only TLSv1.3 suites but ssl.enabled.protocols allows only TLSv1.2."
        )
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_3


def _openssl_name(iana: str) -> str:
    """TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256, and so on."""
    if not iana.startswith("TLS_") or "_WITH_" not in iana:
        return iana
    exchange, _, rest = iana[4:].partition("_WITH_")
    prefix = [] if exchange == "RSA" else exchange.split("_")
    parts = rest.split("_")
    if parts[:1] == ["CHACHA20"]:
        body = ["CHACHA20", "POLY1305"]
    elif parts[:1] == ["AES"] and len(parts) >= 3:
        mode = parts[2]
        body = [f"AES{parts[1]}"] + ([mode] if mode in ("GCM", "CCM") else []) + parts[-1:]
    else:
        return iana
    return "-".join(prefix + body)


# --- stores ----------------------------------------------------------------------------------------


def _truststore(settings: Mapping[str, str]) -> str | None:
    """The trusted CA certificates as PEM text; None when no truststore is set (the system's CAs)."""
    from cryptography.hazmat.primitives import serialization

    text = settings.get("ssl.truststore.certificates", "").strip()
    location = settings.get("ssl.truststore.location", "").strip()
    if text:
        _pem_certificates(text.encode(), "ssl.truststore.certificates")
        return text
    if not location:
        return None
    data = _read(location, "ssl.truststore.location")
    kind = _store_type(settings.get("ssl.truststore.type", ""), data, "ssl.truststore", location)
    if kind == "PEM":
        certs = _pem_certificates(data, f"ssl.truststore.location {location}")
    else:
        password = settings.get("ssl.truststore.password") or None
        key, cert, extra = _pkcs12(data, password, "ssl.truststore", location)
        certs = ([cert] if cert is not None else []) + extra
        if not certs:
            raise TlsError(f"ssl.truststore.location {location} holds no certificates.")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _keystore(settings: Mapping[str, str]) -> tuple[bytes, bytes] | None:
    """The private key (unencrypted PKCS8 PEM) and certificate chain (PEM); None when none is set."""
    key_text = settings.get("ssl.keystore.key", "").strip()
    chain_text = settings.get("ssl.keystore.certificate.chain", "").strip()
    location = settings.get("ssl.keystore.location", "").strip()
    key_password = settings.get("ssl.key.password") or None
    if key_text or chain_text:
        if not (key_text and chain_text):
            missing = "ssl.keystore.certificate.chain" if key_text else "ssl.keystore.key"
            raise TlsError(
                f"ssl.keystore.key and ssl.keystore.certificate.chain go together; {missing} is unset."
            )
        key = _pem_key(key_text.encode(), key_password, "ssl.keystore.key", "ssl.key.password")
        chain = _pem_certificates(chain_text.encode(), "ssl.keystore.certificate.chain")
        return _key_pem(key), _chain_pem(chain)
    if not location:
        return None
    data = _read(location, "ssl.keystore.location")
    kind = _store_type(settings.get("ssl.keystore.type", ""), data, "ssl.keystore", location)
    what = f"ssl.keystore.location {location}"
    if kind == "PEM":
        key = _pem_key(data, key_password, what, "ssl.key.password")
        chain = _pem_certificates(data, what)
    else:
        password = settings.get("ssl.keystore.password") or None
        found, cert, extra = _pkcs12(data, password, "ssl.keystore", location)
        if found is None or cert is None:
            raise TlsError(f"{what} holds no private key with its certificate.")
        key, chain = found, [cert, *extra]
    return _key_pem(key), _chain_pem(chain)


def _load_key_and_chain(context: ssl.SSLContext, key_pem: bytes, chain_pem: bytes) -> None:
    """Python loads a key only from a file: it goes through a private temporary file, removed at once."""
    with _private_file(key_pem + chain_pem) as path:
        try:
            context.load_cert_chain(path)
        except ssl.SSLError as exc:
            raise TlsError(
                f"the keystore's key does not match its certificate: {exc.reason or exc}."
            ) from None


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    directory = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="kcli-tls-", suffix=".pem", dir=directory)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        yield path
    finally:
        os.unlink(path)


def _read(location: str, key: str) -> bytes:
    try:
        with open(location, "rb") as file:
            return file.read()
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise TlsError(f"cannot read {key} {location}: {reason}.") from None


def _store_type(configured: str, data: bytes, prefix: str, location: str) -> str:
    """The store's type: as configured, else guessed from its bytes (Kafka's default, JKS, would
    refuse the PEM and PKCS12 files people mostly have); JKS is refused."""
    kind = configured.strip().upper()
    if kind and kind not in STORE_TYPES:
        raise TlsError(f"{prefix}.type is {configured!r}; kcli reads PEM and PKCS12.")
    if not kind:
        if b"-----BEGIN" in data[:4096]:
            kind = "PEM"
        elif data[:4] in (_JKS_MAGIC, _JCEKS_MAGIC):
            kind = "JKS"
        else:
            kind = "PKCS12"
    if kind == "JKS" or data[:4] in (_JKS_MAGIC, _JCEKS_MAGIC):
        raise TlsError(
            f"{prefix}.location {location} is a JKS keystore, which kcli cannot read: convert it to PKCS12 "
            f"(keytool -importkeystore -deststoretype PKCS12) or PEM."
        )
    return kind


def _pkcs12(
    data: bytes, password: str | None, prefix: str, location: str
) -> tuple[object | None, x509.Certificate | None, list[x509.Certificate]]:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        if password is None:
            raise TlsError(f"{prefix}.location {location} needs a password: set {prefix}.password.") from None
        raise TlsError(
            f"cannot open {prefix}.location {location}: wrong {prefix}.password, or not a PKCS12 file."
        ) from None
    return key, cert, list(extra)


def _pem_certificates(data: bytes, what: str) -> list[x509.Certificate]:
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsError(f"{what} holds no readable PEM certificate.") from None
    return certs


def _pem_key(data: bytes, password: str | None, what: str, password_key: str) -> object:
    from cryptography.hazmat.primitives import serialization

    found = _PEM_KEY.search(data)
    if found is None:
        raise TlsError(f"{what} holds no PEM private key.")
    try:
        return serialization.load_pem_private_key(found.group(0), password.encode() if password else None)
    except TypeError:
        if password is None:
            raise TlsError(f"the private key in {what} is encrypted: set {password_key}.") from None
        raise TlsError(f"the private key in {what} is not encrypted, yet {password_key} is set.") from None
    except ValueError:
        raise TlsError(f"cannot decrypt the private key in {what}: wrong {password_key}.") from None


_PEM_KEY = re.compile(rb"-----BEGIN ([A-Z ]*PRIVATE KEY)-----.+?-----END \1-----", re.DOTALL)


def _key_pem(key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _chain_pem(chain: list[x509.Certificate]) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in chain)


def _name_matches(name: str, host: str) -> bool:
    try:
        return ipaddress.ip_address(name) == ipaddress.ip_address(host)
    except ValueError:
        pass
    name, host = name.lower().rstrip("."), host.lower().rstrip(".")
    if name.startswith("*.") and "." in host:
        return host.split(".", 1)[1] == name[2:]
    return name == host


def _verifies(settings: Mapping[str, str]) -> bool:
    """librdkafka's enable.ssl.certificate.verification=false (client properties keep it): no check
    of the broker's certificate at all, chain or host name."""
    return settings.get("enable.ssl.certificate.verification", "true").strip().lower() != "false"


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
