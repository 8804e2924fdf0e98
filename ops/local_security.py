"""`kcli cluster start --security`: the TLS and SASL a local cluster is made with, and the files for clients.

    plaintext  PLAINTEXT client listeners (the default).
    ssl        SSL client listeners asking every client for a certificate (`ssl.client.auth=required`);
               the brokers reach each other with their own certificate (mTLS).
    sasl_ssl   SASL_SSL client listeners with SCRAM-SHA-512 and SCRAM-SHA-256 (PLAIN off); a SCRAM
               user `admin` is bootstrapped into the metadata log (`storage format --add-scram`) and the
               brokers log in to each other as `admin` over TLS.

The controller listener (127.0.0.1) is secured as well: with ssl it asks every voter and broker for its
certificate (the node certificate); with sasl_ssl it is SASL_SSL with PLAIN, `admin` and its password in
the listener's JAAS line (`sasl.mechanism.controller.protocol=PLAIN`), since the voters must
authenticate each other before the metadata log that holds the SCRAM credentials is replicated (Kafka's
own KRaft tests secure the controller listener the same way); it offers SCRAM too, so client.properties
also serves `--bootstrap-controller`. A cluster laid out before commit 16f6359 keeps the PLAINTEXT
controller listener its server.properties name. Everything a client needs is written beside the data,
private (mode 0600) where it holds a secret:

    <data-dir>/tls/ca.crt                the throwaway CA (a PEM truststore)
    <data-dir>/tls/node.{key,crt,pem,p12}  the certificate every node serves and dials with
    <data-dir>/tls/client.{key,crt,pem,p12}  a client certificate (ssl)
    <data-dir>/admin.password            admin's random password (sasl_ssl)
    <data-dir>/client.properties         Kafka's client properties: `--command-config` of every kcli
                                         command, and of Kafka's own tools

The certificates and the password are made once: a start that lays the cluster out again (a failed
first start) reuses them, since the formatted metadata already holds admin's credential.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from kcli.security.certs import LoopbackPki, loopback_pki

SECURITY_CHOICES = ("plaintext", "ssl", "sasl_ssl")
TLS_DIR = "tls"
PASSWORD_FILE = "admin.password"
CLIENT_PROPERTIES = "client.properties"
ADMIN = "admin"
INTER_BROKER_MECHANISM = "SCRAM-SHA-512"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
CONTROLLER_MECHANISM = "PLAIN"


@dataclass(frozen=True)
class ClusterSecurity:
    """One `--security` choice made concrete: its certificates and admin's password, as files."""

    name: str
    data_dir: Path
    pki: LoopbackPki | None = None
    password: str | None = None

    @property
    def protocol(self) -> str:
        """Kafka's security protocol, which is also the client listener's name."""
        return self.name.upper()

    @property
    def client_properties(self) -> Path:
        return self.data_dir / CLIENT_PROPERTIES

    @property
    def controller_protocol(self) -> str:
        """The controller listener's security protocol: the client listeners' own."""
        return self.protocol

    def broker_properties(self, *, broker: bool = True) -> dict[str, str]:
        """The server.properties lines beyond the listeners themselves: the TLS files and the
        controller listener's login on every node, the client listener's on brokers (`broker`)."""
        if self.pki is None:
            return {}
        listener = self.protocol.lower()
        lines = {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.node["pem"]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca),
        }
        if self.name == "sasl_ssl":
            login = f'{PLAIN_MODULE} required username="{ADMIN}" password="{self.password}" user_{ADMIN}="{self.password}";'
            lines["sasl.mechanism.controller.protocol"] = CONTROLLER_MECHANISM
            # SCRAM as well, for client.properties with --bootstrap-controller (credentials from the image)
            lines["listener.name.controller.sasl.enabled.mechanisms"] = ",".join(
                (CONTROLLER_MECHANISM, *MECHANISMS)
            )
            lines[f"listener.name.controller.{CONTROLLER_MECHANISM.lower()}.sasl.jaas.config"] = login
        if not broker:
            return lines
        lines["inter.broker.listener.name"] = self.protocol
        if self.name == "ssl":
            lines["ssl.client.auth"] = "required"
        else:
            lines["sasl.enabled.mechanisms"] = ",".join(MECHANISMS)
            lines["sasl.mechanism.inter.broker.protocol"] = INTER_BROKER_MECHANISM
            for mechanism in MECHANISMS:
                login = f'{SCRAM_MODULE} required username="{ADMIN}" password="{self.password}";'
                lines[f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"] = (
                    login if mechanism == INTER_BROKER_MECHANISM else f"{SCRAM_MODULE} required;"
                )
        return lines

    def add_scram(self) -> list[str]:
        """`storage format --add-scram` arguments: admin under both SCRAM mechanisms."""
        if self.password is None:
            return []
        return [f"{m}=[name={ADMIN},password={self.password}]" for m in MECHANISMS]

    def client_properties_text(self, bootstrap: str) -> str:
        """Kafka's client properties for admin (sasl_ssl) or the client certificate (ssl)."""
        lines = {"bootstrap.servers": bootstrap, "security.protocol": self.protocol}
        if self.pki is not None:
            lines["ssl.truststore.type"] = "PEM"
            lines["ssl.truststore.location"] = str(self.pki.ca)
        if self.name == "ssl" and self.pki is not None:
            lines["ssl.keystore.type"] = "PEM"
            lines["ssl.keystore.location"] = str(self.pki.client["pem"])
        if self.name == "sasl_ssl":
            lines["sasl.mechanism"] = INTER_BROKER_MECHANISM
            lines["sasl.jaas.config"] = (
                f'{SCRAM_MODULE} required username="{ADMIN}" password="{self.password}";'
            )
        return "".join(f"{key}={value}\n" for key, value in lines.items())


def librdkafka_config(name: str, data_dir: Path, bootstrap: str) -> str:
    """A Python dict of librdkafka settings (confluent-kafka) for the cluster, as text to paste: the
    password is read from its file, so the text itself holds no secret."""
    data_dir = data_dir.resolve()
    tls = data_dir / TLS_DIR
    items = [f'"bootstrap.servers": "{bootstrap}"', f'"security.protocol": "{name.upper()}"']
    if name != "plaintext":
        items.append(f'"ssl.ca.location": "{tls / "ca.crt"}"')
    if name == "ssl":
        items.append(f'"ssl.certificate.location": "{tls / "client.crt"}"')
        items.append(f'"ssl.key.location": "{tls / "client.key"}"')
    if name == "sasl_ssl":
        items.append(f'"sasl.mechanisms": "{INTER_BROKER_MECHANISM}"')
        items.append(f'"sasl.username": "{ADMIN}"')
        items.append(f'"sasl.password": open("{data_dir / PASSWORD_FILE}").read().strip()')
    return "{" + ", ".join(items) + "}"


def cluster_security(name: str, data_dir: Path) -> ClusterSecurity:
    """The certificates and password of `name` in `data_dir`: those already there, else new ones."""
    data_dir = data_dir.resolve()
    if name == "plaintext":
        return ClusterSecurity(name, data_dir)
    pki = _stored_pki(data_dir / TLS_DIR) or loopback_pki(data_dir / TLS_DIR)
    password = _password(data_dir / PASSWORD_FILE) if name == "sasl_ssl" else None
    return ClusterSecurity(name, data_dir, pki, password)


def write_private(path: Path, text: str) -> None:
    """Write `text` to a file only its owner can read, never readable by others even for a moment."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _password(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    write_private(path, password + "\n")
    return password


def _stored_pki(directory: Path) -> LoopbackPki | None:
    """The PKI an earlier start made (`loopback_pki`'s file names), if it is all there."""
    kinds = {"key": "key", "chain": "crt", "pem": "pem", "p12": "p12"}
    node = {kind: directory / f"node.{ext}" for kind, ext in kinds.items()}
    client = {kind: directory / f"client.{ext}" for kind, ext in kinds.items()}
    ca = directory / "ca.crt"
    if not all(p.exists() for p in (ca, *node.values(), *client.values())):
        return None
    return LoopbackPki(ca, node, client, "changeit")
