"""Throwaway certificates for loopback clusters and tests: a CA, then node and client certificates.

A local cluster started with TLS needs a CA its clients trust and a certificate per node valid for
the addresses they dial (127.0.0.1, localhost). These are made with `cryptography`, written as PEM
files (key and chain apart, and both together as Kafka's PEM keystore wants them) and as PKCS12.
Nothing here is for production use: keys are EC P-256 and nobody guards the CA key.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("localhost", "127.0.0.1")
"""What a certificate for a local node is valid for."""


@dataclass(frozen=True)
class Issued:
    """One certificate and its key, as PEM bytes; `chain` is the certificate followed by its CA's."""

    key_pem: bytes
    cert_pem: bytes
    chain_pem: bytes
    subject: str
    """The subject as RFC 2253 (what Kafka's SSL principal mapping sees)."""

    def write(self, directory: Path, name: str, *, password: str = "changeit") -> dict[str, Path]:
        """`<name>.key`, `<name>.crt` (chain), `<name>.pem` (key then chain: Kafka's PEM keystore file)
        and `<name>.p12` (PKCS12 under `password`); their paths by kind."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = {
            "key": directory / f"{name}.key",
            "chain": directory / f"{name}.crt",
            "pem": directory / f"{name}.pem",
            "p12": directory / f"{name}.p12",
        }
        paths["key"].write_bytes(self.key_pem)
        paths["chain"].write_bytes(self.chain_pem)
        paths["pem"].write_bytes(self.key_pem + self.chain_pem)
        paths["p12"].write_bytes(self.pkcs12(password, name))
        for path in paths.values():
            path.chmod(0o600)
        return paths

    def pkcs12(self, password: str, name: str = "kcli") -> bytes:
        key = serialization.load_pem_private_key(self.key_pem, None)
        certs = x509.load_pem_x509_certificates(self.chain_pem)
        encryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        return pkcs12.serialize_key_and_certificates(
            name.encode(),
            key,  # type: ignore[arg-type]
            certs[0],
            certs[1:] or None,
            encryption,
        )


class CertificateAuthority:
    """A self-signed CA that issues node (server) and client certificates."""

    def __init__(self, name: str = "kcli test CA", *, days: int = 30) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, name: str = "ca") -> Path:
        """The CA certificate as `<name>.crt` (a PEM truststore)."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.crt"
        path.write_bytes(self.cert_pem)
        return path

    def issue(
        self,
        common_name: str,
        *,
        names: tuple[str, ...] = LOOPBACK_NAMES,
        organization: str | None = None,
        client: bool = False,
        days: int = 30,
        expired: bool = False,
    ) -> Issued:
        """A certificate for `common_name`, valid for `names` (DNS names and IP addresses) as a server,
        or, with `client`, for client authentication. `expired` makes one whose validity ended yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:  # before the CN in the sequence, so RFC 2253 reads CN=...,O=...
            attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        subject = x509.Name(attributes)
        now = _now()
        start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
        if expired:
            start, end = now - datetime.timedelta(days=days + 1), now - datetime.timedelta(days=1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH]
                    if client
                    else [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(_general_names(names)), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        return Issued(key_pem, cert_pem, cert_pem + self.cert_pem, subject.rfc4514_string())


def _general_names(names: tuple[str, ...]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class LoopbackPki:
    """What a local TLS cluster needs, as files: the CA (a PEM truststore), one certificate every node
    serves and reaches the others with, and one for clients (mTLS); `node` and `client` as `Issued.write`
    names them (key, chain, pem, p12)."""

    ca: Path
    node: dict[str, Path]
    client: dict[str, Path]
    password: str
    """The PKCS12 files' password."""


def loopback_pki(directory: Path, *, password: str = "changeit") -> LoopbackPki:
    """A fresh CA in `directory` with a node and a client certificate for 127.0.0.1 and localhost."""
    ca = CertificateAuthority("kcli local CA")
    return LoopbackPki(
        ca.write(directory),
        ca.issue("kcli-node").write(directory, "node", password=password),
        ca.issue("kcli-client", client=True).write(directory, "client", password=password),
        password,
    )
