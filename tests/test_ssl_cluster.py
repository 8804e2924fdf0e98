"""`kcli cluster start --security ssl`: three nodes whose client listeners want a client certificate, the
brokers replicating to each other over mutual TLS.

Stock clients connect with the client certificate the cluster wrote; kcli and Kafka's own tools with its
client.properties. A client without a certificate, and a plaintext one, each get one sentence.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import KCLI, kcli_env, require_apache_kafka, skip_unless_ci
from secure_clients import (
    CLIENTS,
    Endpoint,
    SecuredCluster,
    expected,
    run_client,
    secured_cluster,
    topic,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    with secured_cluster(tmp_path_factory.mktemp("ssl-cluster"), "ssl") as cluster:
        yield cluster


def kcli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=60)


def test_what_it_writes_for_clients(cluster: SecuredCluster) -> None:
    tls = cluster.data_dir / "tls"
    assert cluster.properties() == {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls / "ca.crt"),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls / "client.pem"),
    }
    assert cluster.librdkafka == {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls / "ca.crt"),
        "ssl.certificate.location": str(tls / "client.crt"),
        "ssl.key.location": str(tls / "client.key"),
    }
    server = (cluster.data_dir / "node-2" / "server.properties").read_text()
    assert "ssl.client.auth=required" in server and "inter.broker.listener.name=SSL" in server
    assert (tls / "client.key").stat().st_mode & 0o077 == 0


def test_brokers_replicate_over_mutual_tls(cluster: SecuredCluster) -> None:
    """acks=all with min.insync.replicas=3 completes only when both followers fetch (with their certificate)."""
    name = topic()
    admin = AdminClient(cluster.librdkafka)
    created = admin.create_topics(
        [NewTopic(name, num_partitions=3, replication_factor=3, config={"min.insync.replicas": "3"})]
    )
    created[name].result(30)
    producer = Producer({**cluster.librdkafka, "acks": "all", "message.timeout.ms": 30000})
    failures: list[str] = []
    for i in range(30):
        producer.produce(name, b"m-%d" % i, on_delivery=lambda e, m: e and failures.append(str(e)))
    assert producer.flush(40) == 0 and failures == []


@pytest.mark.parametrize("client", CLIENTS)
def test_stock_clients_with_the_client_certificate(cluster: SecuredCluster, client: str) -> None:
    if client == "kcat" and not (shutil.which("kcat") or shutil.which("kafkacat")):
        skip_unless_ci("kcat is not installed")
    tls = cluster.data_dir / "tls"
    endpoint = Endpoint(
        cluster.bootstrap, "SSL", tls / "ca.crt", cert=tls / "client.crt", key=tls / "client.key"
    )
    name = topic()
    assert run_client(client, endpoint, name) == expected(name, transactions=client != "kcat")


@pytest.mark.parametrize(
    "args",
    [["cluster", "status"], ["topics", "list"], ["groups", "list"], ["features", "describe"]],
    ids=" ".join,
)
def test_kcli_with_command_config(cluster: SecuredCluster, args: list[str]) -> None:
    done = kcli(*args, "--command-config", str(cluster.client_properties))
    assert done.returncode == 0, done.stderr


def test_kafkas_own_tools_read_client_properties(cluster: SecuredCluster, tmp_path: Path) -> None:
    require_apache_kafka()
    import apache_kafka

    name = topic()
    done = apache_kafka.run_tool(
        apache_kafka.TOPIC_COMMAND,
        ["--bootstrap-server", cluster.bootstrap, "--command-config", str(cluster.client_properties),
         "--create", "--topic", name, "--replication-factor", "3"],
        workdir=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Created topic {name}.\n"


def test_a_client_without_a_certificate_is_one_sentence(cluster: SecuredCluster, tmp_path: Path) -> None:
    properties = cluster.properties()
    no_cert = tmp_path / "no-cert.properties"
    no_cert.write_text(
        "security.protocol=SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={properties['ssl.truststore.location']}\n"
    )
    first = cluster.bootstrap.split(",")[0]
    done = kcli("topics", "list", "-b", first, "--command-config", str(no_cert))
    assert done.returncode != 0
    assert done.stderr == (
        f"kcli: cannot connect to {first} with TLS: {first} requires a client certificate (set "
        "ssl.keystore.location).\n"
    )


def test_a_plaintext_client_is_one_sentence(cluster: SecuredCluster) -> None:
    first = cluster.bootstrap.split(",")[0]
    done = kcli("topics", "list", "-b", first)
    assert done.returncode != 0
    assert done.stderr == (
        f"kcli: {first} closed the connection: is it a Kafka listener (a TLS one wants security.protocol SSL "
        "or SASL_SSL)?\n"
    )


def test_the_controller_listener_wants_a_certificate(cluster: SecuredCluster, tmp_path: Path) -> None:
    """The quorum runs on mutual TLS: a plaintext client and a TLS client without a certificate are each
    refused in one sentence on every controller port; the client certificate reaches the active one."""
    addresses = []
    for path in sorted(cluster.data_dir.glob("node-*/server.properties")):
        server = path.read_text()
        assert "CONTROLLER:SSL" in server and "ssl.client.auth=required" in server
        listeners = next(x for x in server.splitlines() if x.startswith("listeners="))
        addresses.append(listeners.split("CONTROLLER://")[1])
    properties = cluster.properties()
    no_cert = tmp_path / "no-cert.properties"
    no_cert.write_text(
        "security.protocol=SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={properties['ssl.truststore.location']}\n"
    )
    for controller in addresses:
        done = kcli("quorum", "--bootstrap-controller", controller, "describe", "--status")
        assert done.returncode != 0 and done.stderr == (
            f"kcli: {controller} closed the connection: is it a Kafka listener (a TLS one wants "
            "security.protocol SSL or SASL_SSL)?\n"
        )
        done = kcli(
            "quorum",
            "--bootstrap-controller",
            controller,
            "--command-config",
            str(no_cert),
            "describe",
            "--status",
        )
        assert done.returncode != 0 and done.stderr == (
            f"kcli: cannot connect to {controller} with TLS: {controller} requires a client certificate (set "
            "ssl.keystore.location).\n"
        )
    done = kcli(
        "quorum", "--bootstrap-controller", ",".join(addresses), "--command-config", str(cluster.client_properties),
        "describe", "--status",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "LeaderId:" in done.stdout and done.stdout.count('"id"') >= 3
