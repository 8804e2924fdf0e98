"""TLS listeners beside a PLAINTEXT one, with stock clients and kcli's own, and every TLS failure as one
sentence.

One broker serves three listeners: PLAINTEXT, SSL (no client certificate asked) and MTLS (an SSL
listener whose `listener.name.mtls.ssl.client.auth=required` overrides the plain `ssl.client.auth`).
Certificates are made once for the module (`kcli.security.certs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import (
    KCLI,
    BrokerProcess,
    free_port_range,
    kcli_env,
    skip_unless_ci,
    start_broker,
    stop_cleanly,
)
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest
from waiting import wait_for

from kcli.broker.network import SocketServer
from kcli.client import ClientError, KafkaClient
from kcli.config import BrokerConfig, Listener
from kcli.security import ClientSecurity
from kcli.security.certs import CertificateAuthority, loopback_pki
from kcli.security.principal import ANONYMOUS, PrincipalMappingError, SslPrincipalMapper


@dataclass
class Pki:
    directory: Path
    ca: Path
    node: dict[str, Path]
    client: dict[str, Path]
    client_subject: str
    stranger: dict[str, Path]
    """A client certificate from a CA the broker does not trust."""
    stranger_ca: Path
    expired: dict[str, Path]
    elsewhere: dict[str, Path]
    """A server certificate valid for other.example only."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    stranger_ca = CertificateAuthority("another CA")
    client = ca.issue("alice", organization="kcli", client=True)
    return Pki(
        directory,
        ca.write(directory),
        ca.issue("node1").write(directory, "node1", password="node-secret"),
        client.write(directory, "alice", password="alice-secret"),
        client.subject,
        stranger_ca.issue("mallory", client=True).write(directory, "mallory"),
        stranger_ca.write(directory, "stranger-ca"),
        ca.issue("node1", expired=True).write(directory, "expired"),
        ca.issue("node1", names=("other.example",)).write(directory, "elsewhere"),
    )


@dataclass
class TlsBroker:
    process: BrokerProcess
    plaintext: int
    ssl: int
    mtls: int


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsBroker]:
    workdir = tmp_path_factory.mktemp("tls-broker")
    base = free_port_range(3)
    config = workdir / "server.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{base},SSL://127.0.0.1:{base + 1},MTLS://127.0.0.1:{base + 2}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL\n"
        f"log.dirs={workdir / 'data'}\n"
        "ssl.keystore.type=PKCS12\n"
        f"ssl.keystore.location={pki.node['p12']}\n"
        "ssl.keystore.password=node-secret\n"
        f"ssl.truststore.location={pki.ca}\n"
        "listener.name.mtls.ssl.client.auth=required\n"
        f"listener.name.mtls.ssl.keystore.location={pki.node['pem']}\n"
        "listener.name.mtls.ssl.keystore.type=PEM\n"
        "listener.name.mtls.ssl.keystore.password=\n"
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*),O=kcli$/$1/L,DEFAULT\n"
    )
    process = start_broker(workdir, config=config, data_dir=workdir / "data")
    try:
        yield TlsBroker(process, base, base + 1, base + 2)
    finally:
        stop_cleanly(process)


def _trusting(pki: Pki, **extra: str) -> dict[str, str]:
    return {"ssl.truststore.location": str(pki.ca), **extra}


def _with_cert(pki: Pki) -> dict[str, str]:
    return _trusting(
        pki,
        **{
            "ssl.keystore.location": str(pki.client["p12"]),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": "alice-secret",
        },
    )


# ---------------------------------------------------------------------------------------------------
# Listeners and metadata
# ---------------------------------------------------------------------------------------------------


def test_metadata_advertises_the_endpoints_of_the_listener_asked(tls_broker: TlsBroker, pki: Pki) -> None:
    async def brokers(port: int, security: ClientSecurity) -> list[tuple[str, int]]:
        """The endpoints Metadata, DescribeCluster and FindCoordinator give: all the same listener's."""
        client = await KafkaClient.connect(f"127.0.0.1:{port}", security=security)
        try:
            metadata = await client.send(
                MetadataRequest(
                    topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
                )
            )
            cluster = await client.send(DescribeClusterRequest(include_cluster_authorized_operations=False))
            [coordinator] = (await client.send(FindCoordinatorRequest(coordinator_keys=("g",)))).coordinators
        finally:
            await client.close()
        found = [(b.host, b.port) for b in metadata.brokers]
        assert [(b.host, b.port) for b in cluster.brokers] == found
        assert [(coordinator.host, coordinator.port)] == found
        return found

    assert asyncio.run(brokers(tls_broker.plaintext, ClientSecurity())) == [
        ("127.0.0.1", tls_broker.plaintext)
    ]
    assert asyncio.run(brokers(tls_broker.ssl, ClientSecurity("SSL", ssl=_trusting(pki)))) == [
        ("127.0.0.1", tls_broker.ssl)
    ]
    assert asyncio.run(brokers(tls_broker.mtls, ClientSecurity("SSL", ssl=_with_cert(pki)))) == [
        ("127.0.0.1", tls_broker.mtls)
    ]
    log = tls_broker.process.log()
    assert f"PLAINTEXT://127.0.0.1:{tls_broker.plaintext} (PLAINTEXT)" in log
    assert f"SSL://127.0.0.1:{tls_broker.ssl} (SSL)" in log


def test_kcli_client_reads_pem_text_and_pkcs12_stores(tls_broker: TlsBroker, pki: Pki) -> None:
    settings = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki.ca.read_text(),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": pki.client["key"].read_text(),
        "ssl.keystore.certificate.chain": pki.client["chain"].read_text(),
    }

    async def versions() -> int:
        client = await KafkaClient.connect(
            f"localhost:{tls_broker.mtls}", security=ClientSecurity("SSL", ssl=settings)
        )
        await client.close()
        return len(client.broker_versions)

    assert asyncio.run(versions()) > 40


# ---------------------------------------------------------------------------------------------------
# Stock clients over SSL and mTLS
# ---------------------------------------------------------------------------------------------------


def test_confluent_kafka_produces_and_consumes_over_ssl_and_mtls(tls_broker: TlsBroker, pki: Pki) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    tls_only = {"security.protocol": "ssl", "ssl.ca.location": str(pki.ca)}
    mtls = {
        **tls_only,
        "ssl.certificate.location": str(pki.client["chain"]),
        "ssl.key.location": str(pki.client["key"]),
    }
    for port, settings in ((tls_broker.ssl, tls_only), (tls_broker.mtls, mtls)):
        topic = f"tls-{uuid.uuid4().hex[:8]}"
        common = {"bootstrap.servers": f"127.0.0.1:{port}", **settings}
        metadata = AdminClient(common).list_topics(timeout=15)
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", port)]
        producer = Producer({**common, "linger.ms": 5})
        values = [f"value-{i}".encode() * 50 for i in range(3000)]
        for value in values:
            producer.produce(topic, value)
        assert producer.flush(30) == 0
        consumer = Consumer({**common, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: faster
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.append(message.value())
        consumer.close()
        assert seen == values

    refused = AdminClient({"bootstrap.servers": f"127.0.0.1:{tls_broker.mtls}", **tls_only})
    with pytest.raises(KafkaException):
        refused.list_topics(timeout=3)


def test_kafka_python_produces_and_consumes_over_ssl_and_mtls(tls_broker: TlsBroker, pki: Pki) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    tls_only = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca)}
    mtls = {**tls_only, "ssl_certfile": str(pki.client["chain"]), "ssl_keyfile": str(pki.client["key"])}
    for port, settings in ((tls_broker.ssl, tls_only), (tls_broker.mtls, mtls)):
        topic = f"kp-{uuid.uuid4().hex[:8]}"
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", **settings)
        for i in range(200):
            producer.send(topic, f"m{i}".encode())
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=f"127.0.0.1:{port}",
            auto_offset_reset="earliest",
            consumer_timeout_ms=10_000,
            **settings,
        )
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 200:
                break
        assert values == [f"m{i}".encode() for i in range(200)]
        consumer.close()


def test_kcat_produces_consumes_and_lists_over_ssl(tls_broker: TlsBroker, pki: Pki) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        skip_unless_ci("kcat is not on PATH (apt-get install -y kcat)")
    bootstrap = f"127.0.0.1:{tls_broker.mtls}"
    tls_args = [
        "-X",
        "security.protocol=ssl",
        "-X",
        f"ssl.ca.location={pki.ca}",
        "-X",
        f"ssl.certificate.location={pki.client['chain']}",
        "-X",
        f"ssl.key.location={pki.client['key']}",
    ]
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    lines = "".join(f"line {i}\n" for i in range(100))
    produced = subprocess.run(
        [kcat, "-P", "-b", bootstrap, "-t", topic, *tls_args],
        input=lines,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", *tls_args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == lines
    listing = subprocess.run(
        [kcat, "-L", "-J", "-b", f"127.0.0.1:{tls_broker.ssl}", "-m", "10", *tls_args[:4]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout)["brokers"] == [{"id": 1, "name": f"127.0.0.1:{tls_broker.ssl}"}]


# ---------------------------------------------------------------------------------------------------
# Failures: one sentence each, and the broker goes on
# ---------------------------------------------------------------------------------------------------


def _connect_error(address: str, security: ClientSecurity) -> str:
    async def attempt() -> None:
        client = await KafkaClient.connect(address, security=security, connect_timeout=5, request_timeout=5)
        await client.close()

    with pytest.raises(ClientError) as info:
        asyncio.run(attempt())
    return str(info.value)


def test_untrusted_ca_and_missing_client_certificate(tls_broker: TlsBroker, pki: Pki) -> None:
    address = f"127.0.0.1:{tls_broker.ssl}"
    untrusted = _connect_error(
        address, ClientSecurity("SSL", ssl={"ssl.truststore.location": str(pki.stranger_ca)})
    )
    assert untrusted == (
        f"cannot connect to {address} with TLS: the certificate of {address} is not signed by a trusted CA "
        "(check ssl.truststore.location or ssl.truststore.certificates)."
    )
    mtls = f"127.0.0.1:{tls_broker.mtls}"
    # The broker's TLS alert names the reason, under TLSv1.3 (after the client's side of the handshake
    # is done) as under TLSv1.2 (during it).
    for version in ("TLSv1.3", "TLSv1.2"):
        trusting = _trusting(pki, **{"ssl.enabled.protocols": version})
        assert _connect_error(mtls, ClientSecurity("SSL", ssl=trusting)) == (
            f"cannot connect to {mtls} with TLS: {mtls} requires a client certificate (set ssl.keystore.location)."
        ), version
        stranger = {**trusting, "ssl.keystore.location": str(pki.stranger["pem"])}
        assert _connect_error(mtls, ClientSecurity("SSL", ssl=stranger)) == (
            f"cannot connect to {mtls} with TLS: {mtls} does not trust this client's certificate: its CA is not "
            "in the broker's truststore."
        ), version


def test_tls_to_a_plaintext_port_and_plaintext_to_a_tls_port(tls_broker: TlsBroker, pki: Pki) -> None:
    plain = f"127.0.0.1:{tls_broker.plaintext}"
    assert _connect_error(plain, ClientSecurity("SSL", ssl=_trusting(pki))) == (
        f"cannot connect to {plain} with TLS: {plain} closed the connection during the TLS handshake: it is a "
        "PLAINTEXT listener, or it refuses this client's TLS versions, cipher suites or certificate."
    )
    secure = f"127.0.0.1:{tls_broker.ssl}"
    before = tls_broker.process.log().count("TLS handshake failed on listener SSL")
    sentence = _connect_error(secure, ClientSecurity())
    assert sentence.startswith(f"{secure} closed the connection") and sentence.endswith(
        "is it a Kafka listener (a TLS one wants security.protocol SSL or SASL_SSL)?"
    )
    assert tls_broker.process.log().count("speaks TLS to the PLAINTEXT listener PLAINTEXT") == 1
    # the broker closes a plaintext client on its TLS port with one line, at INFO
    wait_for(
        "the broker's line",
        lambda: tls_broker.process.log().count("TLS handshake failed on listener SSL") == before + 1,
        10,
    )
    [line] = [
        x for x in tls_broker.process.log().splitlines() if "TLS handshake failed on listener SSL" in x
    ][before:]
    assert " INFO kcli.broker: closing connection from 127.0.0.1:" in line


@contextlib.asynccontextmanager
async def _tls_listener(settings: dict[str, str]) -> AsyncIterator[int]:
    """A real TLS listener (kcli's SocketServer, answering every frame with the connection's
    principal) on a free loopback port, with these `ssl.*` settings; its port."""
    config = BrokerConfig(
        {"listeners": "SSL://127.0.0.1:0", "listener.security.protocol.map": "SSL:SSL", **settings}
    )
    network = SocketServer(config)
    network.handle = _echo_principal
    server = await network.bind(Listener("SSL", "127.0.0.1", 0))
    await server.start_serving()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def _tls_client_says(pki: Pki, server: dict[str, str], host: str = "127.0.0.1", **settings: str) -> str:
    """What kcli's client says connecting to a listener with `server` settings: "connected" and the
    TLS version and suite, or its sentence (the address as ADDRESS)."""

    async def attempt() -> str:
        async with _tls_listener(server) as port:
            address = f"{host}:{port}"
            try:
                client = await KafkaClient.connect(
                    address,
                    security=ClientSecurity("SSL", ssl=_trusting(pki, **settings)),
                    negotiate=False,
                    connect_timeout=5,
                )
            except ClientError as exc:
                return str(exc).replace(address, "ADDRESS")
            name, version, _ = client._transport.get_extra_info("ssl_object").cipher()
            await client.close()
            return f"connected {version} {name}"

    return asyncio.run(attempt())


def _tls_server_error(pki: Pki, node: dict[str, Path], host: str = "127.0.0.1", **settings: str) -> str:
    """What a client says of a listener serving `node`'s certificate."""
    said = _tls_client_says(pki, {"ssl.keystore.location": str(node["pem"])}, host, **settings)
    return "connected" if said.startswith("connected") else said


def test_expired_certificate_and_host_name_not_in_it(pki: Pki) -> None:
    assert _tls_server_error(pki, pki.expired) == (
        "cannot connect to ADDRESS with TLS: the certificate of ADDRESS has expired."
    )
    assert _tls_server_error(pki, pki.elsewhere) == (
        "cannot connect to ADDRESS with TLS: the certificate of ADDRESS is not valid for host name 127.0.0.1: "
        "it names other.example (or set ssl.endpoint.identification.algorithm to empty to skip the check)."
    )
    assert _tls_server_error(pki, pki.node, host="localhost") == "connected"
    unchecked = {"ssl.endpoint.identification.algorithm": ""}  # Kafka's way to skip the host name check
    assert _tls_server_error(pki, pki.elsewhere, **unchecked) == "connected"


def test_pem_keystore_with_an_encrypted_key(pki: Pki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    from kcli.security.tls import TlsError, client_context

    key = serialization.load_pem_private_key(pki.client["key"].read_bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"key-secret"),
    )
    keystore = tmp_path / "alice-encrypted.pem"
    keystore.write_bytes(encrypted + pki.client["chain"].read_bytes())
    settings = {"ssl.keystore.location": str(keystore), "ssl.keystore.type": "PEM"}
    client_context({**settings, "ssl.key.password": "key-secret"})
    with pytest.raises(TlsError) as wrong:
        client_context({**settings, "ssl.key.password": "nope"})
    assert (
        str(wrong.value)
        == f"cannot decrypt the private key in ssl.keystore.location {keystore}: wrong ssl.key.password."
    )
    with pytest.raises(TlsError) as unset:
        client_context(settings)
    assert (
        str(unset.value)
        == f"the private key in ssl.keystore.location {keystore} is encrypted: set ssl.key.password."
    )


def test_bad_client_stores_are_one_sentence(pki: Pki, tmp_path: Path) -> None:
    jks = tmp_path / "old.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    cases = {
        "ssl.keystore.location": (
            {"ssl.keystore.location": str(pki.client["p12"]), "ssl.keystore.password": "wrong"},
            f"cannot open ssl.keystore.location {pki.client['p12']}: wrong ssl.keystore.password, "
            "or not a PKCS12 file.",
        ),
        "missing": (
            {"ssl.truststore.location": str(tmp_path / "nowhere.pem")},
            f"cannot read ssl.truststore.location {tmp_path / 'nowhere.pem'}: no such file or directory.",
        ),
        "jks": (
            {"ssl.truststore.location": str(jks), "ssl.truststore.type": "JKS"},
            f"ssl.truststore.location {jks} is a JKS keystore, which kcli cannot read: convert it to PKCS12 "
            "(keytool -importkeystore -deststoretype PKCS12) or PEM.",
        ),
        "protocols": (
            {"ssl.enabled.protocols": "TLSv1.1"},
            "ssl.enabled.protocols names TLSv1.1; kcli speaks TLSv1.2 and TLSv1.3.",
        ),
    }
    for settings, sentence in cases.values():
        assert _connect_error("127.0.0.1:9", ClientSecurity("SSL", ssl=settings)) == sentence


@pytest.mark.parametrize(
    ("settings", "sentence"),
    [
        (
            "ssl.keystore.location={p12}\nssl.keystore.password=nope\n",
            "cannot open ssl.keystore.location {p12}: wrong ssl.keystore.password, or not a PKCS12 file.",
        ),
        (
            "ssl.truststore.location={ca}\n",
            "listener SSL uses TLS but has no keystore: set ssl.keystore.location "
            "(or ssl.keystore.key and ssl.keystore.certificate.chain).",
        ),
    ],
)
def test_broker_with_an_unusable_keystore_stops_with_one_sentence(
    pki: Pki, tmp_path: Path, settings: str, sentence: str
) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "listeners=SSL://127.0.0.1:0\nlistener.security.protocol.map=SSL:SSL\n"
        f"log.dirs={tmp_path / 'data'}\n" + settings.format(p12=pki.node["p12"], ca=pki.ca)
    )
    result = subprocess.run(
        [*KCLI, "broker", "start", "--config", str(config)],
        cwd=tmp_path,
        env=kcli_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["kcli: " + sentence.format(p12=pki.node["p12"])]


def test_enabled_protocols_and_cipher_suites_as_kafka_names_them(pki: Pki) -> None:
    """A listener limited to TLSv1.2 and one suite under its Java name: a client gets exactly those,
    and a client that only speaks TLSv1.3 is refused in one sentence."""

    server = {
        "ssl.keystore.location": str(pki.node["pem"]),
        "ssl.enabled.protocols": "TLSv1.2",
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    }
    assert _tls_client_says(pki, server) == "connected TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256"
    refused = _tls_client_says(pki, server, **{"ssl.enabled.protocols": "TLSv1.3"})
    assert refused == (
        "cannot connect to ADDRESS with TLS: ADDRESS and this client share no TLS version (check ssl.enabled.protocols)."
    )


def test_tls_garbage_leaves_the_broker_serving(tls_broker: TlsBroker) -> None:
    garbage = [
        b"\x16\x03\x01\x02\x00" + os.urandom(512),
        os.urandom(4096),
        b"\x00\x00\x00\x0a" + bytes(10),
        b"",
    ]
    for port in (tls_broker.ssl, tls_broker.mtls):
        for payload in garbage * 5:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(5)
                try:
                    while sock.recv(4096):
                        pass
                except (ConnectionResetError, TimeoutError):
                    pass
    # a handshake abandoned half way is closed by the broker, not held
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", tls_broker.ssl), timeout=5) as raw:
        with context.wrap_socket(raw) as wrapped:
            wrapped.sendall(struct.pack(">i", 2**31 - 1))  # a frame larger than any request: closed
            assert wrapped.recv(10) == b""

    async def still_serves() -> int:
        client = await KafkaClient.connect(f"127.0.0.1:{tls_broker.plaintext}")
        await client.close()
        return len(client.broker_versions)

    assert asyncio.run(still_serves()) > 40
    assert tls_broker.process.is_running()
    log = tls_broker.process.log()
    assert "Traceback" not in log and " ERROR " not in log
    assert log.count("invalid request size 2147483647") == 1
    assert "connection closed after 0 of 2147483647 frame bytes" not in log  # one line per connection


# ---------------------------------------------------------------------------------------------------
# Principals
# ---------------------------------------------------------------------------------------------------


async def _echo_principal(info, frame: bytes) -> bytes:  # type: ignore[no-untyped-def]
    """A handler that answers every frame with the connection's principal (for the tests below)."""
    body = info.principal.encode()
    return struct.pack(">i", len(body)) + body


def test_each_connection_carries_its_principal(pki: Pki) -> None:
    """A real SSL listener with ssl.client.auth=requested: anonymous without a certificate, the mapped
    subject with one."""

    async def principals() -> list[str]:
        server = {
            "ssl.keystore.location": str(pki.node["pem"]),
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),O=(.*)$/$1@$2/U",
        }
        seen = []
        async with _tls_listener(server) as port:
            for certificate in (None, pki.client):
                context = ssl.create_default_context(cafile=str(pki.ca))
                if certificate is not None:
                    context.load_cert_chain(str(certificate["pem"]))
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                writer.write(struct.pack(">i", 3) + b"abc")
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                seen.append((await reader.readexactly(size)).decode())
                writer.close()
        return seen

    assert asyncio.run(principals()) == [ANONYMOUS, "User:ALICE@KCLI"]


def test_loopback_pki_serves_and_authenticates(tmp_path: Path) -> None:
    """What `kcli cluster start` with TLS will write: a node certificate a client trusts through the
    CA file, and a client certificate the node's listener accepts under ssl.client.auth=required."""
    made = loopback_pki(tmp_path)
    server = {
        "ssl.keystore.location": str(made.node["p12"]),
        "ssl.keystore.password": made.password,
        "ssl.truststore.location": str(made.ca),
        "ssl.client.auth": "required",
    }
    client = {
        "ssl.truststore.location": str(made.ca),
        "ssl.keystore.location": str(made.client["pem"]),
    }

    async def principal() -> str:
        async with _tls_listener(server) as port:
            kafka = await KafkaClient.connect(
                f"localhost:{port}", security=ClientSecurity("SSL", ssl=client), negotiate=False
            )
            await kafka.close()
            context = ssl.create_default_context(cafile=str(made.ca))
            context.load_cert_chain(str(made.client["pem"]))
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
            writer.write(struct.pack(">i", 1) + b"?")
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            name = (await reader.readexactly(size)).decode()
            writer.close()
            return name

    assert asyncio.run(principal()) == "User:CN=kcli-client"
    assert all(path.stat().st_mode & 0o077 == 0 for path in (*made.node.values(), *made.client.values()))


def test_principal_mapping_rules_as_kafka_reads_them(pki: Pki) -> None:
    assert pki.client_subject == "CN=alice,O=kcli"
    rules = (
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT"
    )
    mapper = SslPrincipalMapper(rules)
    assert mapper.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("cn=duke,ou=JavaSoft") == "DUKE"
    assert SslPrincipalMapper("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    assert SslPrincipalMapper(None).principal(None) == ANONYMOUS
    with pytest.raises(PrincipalMappingError, match="no rule of ssl.principal.mapping.rules applies"):
        SslPrincipalMapper("RULE:^CN=x$/y/").name("CN=a")


# ---------------------------------------------------------------------------------------------------
# Brokers among themselves over TLS
# ---------------------------------------------------------------------------------------------------


def test_replication_between_brokers_over_mtls(cluster_factory, pki: Pki) -> None:  # type: ignore[no-untyped-def]
    """Two nodes whose only client listener (named PLAINTEXT, mapped to SSL) requires client
    certificates: followers fetch, and acks=all produce completes, only if the replica fetchers
    connect with the broker's own keystore and truststore."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = cluster_factory(
        brokers=2,
        overrides=[
            "listener.security.protocol.map=PLAINTEXT:SSL,CONTROLLER:PLAINTEXT",
            f"ssl.keystore.location={pki.node['p12']}",
            "ssl.keystore.password=node-secret",
            f"ssl.truststore.location={pki.ca}",
            "ssl.client.auth=required",
        ],
    )
    cluster.start()
    try:
        common = {
            "bootstrap.servers": cluster.bootstrap,
            "security.protocol": "ssl",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client["chain"]),
            "ssl.key.location": str(pki.client["key"]),
        }
        admin = AdminClient(common)
        for future in admin.create_topics([NewTopic("replicated", 1, 2)]).values():
            future.result(30)
        producer = Producer({**common, "acks": "all"})
        for i in range(100):
            producer.produce("replicated", f"r{i}".encode())
        assert producer.flush(30) == 0

        def both_in_sync() -> bool:
            partition = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0]
            return sorted(partition.isrs) == [1, 2]

        wait_for("both replicas in sync", both_in_sync, 30)
        leader = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0].leader
        follower = cluster[3 - leader]
        follower_port = int(follower.bootstrap.rpartition(":")[2])
        ports = {b.port for b in admin.list_topics(timeout=10).brokers.values()}
        assert follower_port in ports and len(ports) == 2
        consumer = Consumer({**common, "group.id": "replicated-reader"})
        consumer.assign([TopicPartition("replicated", 0, OFFSET_BEGINNING)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 100 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.append(message.value())
        consumer.close()
        assert seen == [f"r{i}".encode() for i in range(100)]
    finally:
        for node_id in (2, 1):
            assert cluster[node_id].terminate() == 0, cluster[node_id].log()


# ---------------------------------------------------------------------------------------------------
# kcli's commands over TLS (--command-config)
# ---------------------------------------------------------------------------------------------------


def _kcli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KCLI, *args], cwd=workdir, env=kcli_env(), capture_output=True, text=True, timeout=60
    )


def test_kcli_topics_over_mtls_with_command_config(tls_broker: TlsBroker, pki: Pki, tmp_path: Path) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    kafka_names = tmp_path / "client.properties"
    kafka_names.write_text(
        "security.protocol=SSL\n"
        f"ssl.truststore.location={pki.ca}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.keystore.location={pki.client['p12']}\n"
        "ssl.keystore.type=PKCS12\n"
        "ssl.keystore.password=alice-secret\n"
    )
    librdkafka_names = tmp_path / "librdkafka.properties"
    librdkafka_names.write_text(
        "security.protocol=ssl\n"
        f"ssl.ca.location={pki.ca}\n"
        f"ssl.certificate.location={pki.client['chain']}\n"
        f"ssl.key.location={pki.client['key']}\n"
    )
    bootstrap = f"127.0.0.1:{tls_broker.mtls}"
    created = _kcli(
        tmp_path, "topics", "create", "-b", bootstrap, "--command-config", str(kafka_names), "--topic", topic
    )
    assert created.returncode == 0, created.stderr
    listed = _kcli(tmp_path, "topics", "list", "-b", bootstrap, "--command-config", str(librdkafka_names))
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()

    untrusting = tmp_path / "untrusting.properties"
    untrusting.write_text(f"security.protocol=SSL\nssl.truststore.location={pki.stranger_ca}\n")
    refused = _kcli(tmp_path, "topics", "list", "-b", bootstrap, "--command-config", str(untrusting))
    assert refused.returncode != 0
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("kcli: ") and "is not signed by a trusted CA" in line, line
