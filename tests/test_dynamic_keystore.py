"""A renewed keystore taken without a restart: `listener.name.ssl.ssl.keystore.location` set per broker.

A broker on SSL with a client connected; a keystore of the same subject with a new serial is set with
`kcli configs alter --entity-type brokers --entity-name 1`; a new connection sees the new certificate,
the open one goes on; a keystore of another subject is refused with Kafka's sentence.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import KCLI, BrokerProcess, free_port_range, kcli_env, start_broker, stop_cleanly
from cryptography import x509
from waiting import wait_for

from kcli.client import KafkaClient
from kcli.security import ClientSecurity
from kcli.security.certs import CertificateAuthority

pytestmark = pytest.mark.timeout(120)


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificates(path.read_bytes())[0].serial_number


def served_serial(port: int, ca: Path) -> int:
    """The serial of the certificate a new TLS connection to `port` is shown."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, int, int, dict[str, Path]]]:
    workdir = tmp_path_factory.mktemp("dynamic-keystore")
    ca = CertificateAuthority()
    stores = {
        "ca": ca.write(workdir),
        "old": ca.issue("node1").write(workdir, "node1")["pem"],
        "renewed": ca.issue("node1").write(workdir, "node1-renewed")["pem"],
        "other": ca.issue("node2").write(workdir, "node2")["pem"],
    }
    base = free_port_range(2)
    config = workdir / "server.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{base},SSL://127.0.0.1:{base + 1}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL\n"
        f"log.dirs={workdir / 'data'}\n"
        f"ssl.keystore.location={stores['old']}\n"
        "ssl.keystore.type=PEM\n"
    )
    process = start_broker(workdir, config=config, data_dir=workdir / "data")
    try:
        yield process, base, base + 1, stores
    finally:
        stop_cleanly(process)


def alter(bootstrap: str, setting: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KCLI, "configs", "alter", "--bootstrap-server", bootstrap, "--entity-type", "brokers"]
        + ["--entity-name", "1", "--add-config", setting],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=60,
    )


async def metadata(client: KafkaClient) -> object:
    request = client.request_type(3, 12)
    return await client.send(
        request(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )


def test_a_renewed_keystore_serves_new_connections(
    setup: tuple[BrokerProcess, int, int, dict[str, Path]],
) -> None:
    broker, plaintext, port, stores = setup
    assert served_serial(port, stores["ca"]) == serial_of(stores["old"])
    security = ClientSecurity(protocol="SSL", ssl={"ssl.truststore.location": str(stores["ca"])})

    async def run() -> None:
        async with await KafkaClient.connect(f"127.0.0.1:{port}", security=security) as client:
            await metadata(client)
            done = alter(
                f"127.0.0.1:{plaintext}", f"listener.name.ssl.ssl.keystore.location={stores['renewed']}"
            )
            assert done.returncode == 0, done.stdout + done.stderr
            renewed = serial_of(stores["renewed"])
            wait_for(
                "a new connection shown the renewed certificate",
                lambda: served_serial(port, stores["ca"]) == renewed or None,
                15,
            )
            await metadata(client)  # the connection opened before goes on

            refused = alter(
                f"127.0.0.1:{plaintext}", f"listener.name.ssl.ssl.keystore.location={stores['other']}"
            )
            assert refused.returncode != 0
            assert "Keystore DistinguishedName does not match:  existing={alias=kafka, DN=CN=node1}" in (
                refused.stdout + refused.stderr
            ), refused.stdout + refused.stderr
            assert served_serial(port, stores["ca"]) == renewed
            await metadata(client)

    asyncio.run(run())
    assert "keystore loaded (certificate serial" in broker.log()
