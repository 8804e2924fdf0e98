"""SASL_SSL end to end on one node: TLS underneath PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

confluent-kafka, kafka-python, aiokafka and kcat produce, commit and abort transactions (kcat has none)
and read in a consumer group, each with each mechanism; the SCRAM users come from `storage format
--add-scram`. The brokers' certificates are `kcli.security.certs.loopback_pki`'s.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import (
    KCLI,
    BrokerProcess,
    free_port_range,
    kcli_env,
    skip_unless_ci,
    start_with_config,
    stop_cleanly,
)
from secure_clients import CLIENTS, Endpoint, expected, run_client, topic

from kcli.security.certs import LoopbackPki, loopback_pki
from kcli.storage import random_uuid

pytestmark = pytest.mark.timeout(120)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PASSWORD = "alice-sasl-ssl-secret"


@dataclass
class SaslSslBroker:
    process: BrokerProcess
    pki: LoopbackPki


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslSslBroker]:
    """One combined node whose client listener is SASL_SSL; alice logs in with each mechanism."""
    workdir = tmp_path_factory.mktemp("sasl-ssl")
    pki = loopback_pki(workdir / "tls")
    controller = free_port_range(1)
    config = workdir / "server.properties"
    config.write_text(
        f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
controller.listener.names=CONTROLLER
listeners=SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller}
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_SSL
log.dirs={workdir / "data"}
group.initial.rebalance.delay.ms=0
ssl.keystore.type=PKCS12
ssl.keystore.location={pki.node["p12"]}
ssl.keystore.password={pki.password}
ssl.truststore.type=PEM
ssl.truststore.location={pki.ca}
sasl.enabled.mechanisms={",".join(MECHANISMS)}
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_MODULE} required user_alice="{PASSWORD}";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={SCRAM_MODULE} required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={SCRAM_MODULE} required username="alice" password="{PASSWORD}";
"""
    )
    kcli = [*KCLI, "storage", "format", "-c", str(config), "-t", random_uuid()]
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        kcli += ["--add-scram", f"{mechanism}=[name=alice,password={PASSWORD}]"]
    done = subprocess.run(kcli, capture_output=True, text=True, env=kcli_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    process = start_with_config(workdir, config)
    try:
        yield SaslSslBroker(process, pki)
    finally:
        stop_cleanly(process)
    assert PASSWORD not in process.log()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_clients_produce_transact_and_consume_in_a_group(
    sasl_ssl: SaslSslBroker, client: str, mechanism: str
) -> None:
    if client == "kcat" and not (shutil.which("kcat") or shutil.which("kafkacat")):
        skip_unless_ci("kcat is not installed")
    endpoint = Endpoint(sasl_ssl.process.bootstrap, "SASL_SSL", sasl_ssl.pki.ca, mechanism, "alice", PASSWORD)
    name = topic()
    assert run_client(client, endpoint, name) == expected(name, transactions=client != "kcat")
