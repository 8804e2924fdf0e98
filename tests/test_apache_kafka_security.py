"""Secured listeners both ways, one client.properties for every client: kcli's commands against Apache
Kafka secured, and Kafka's tools and Java clients against kcli secured the same way.

Two set-ups (tests/apache_kafka.py, `Security`): SASL_SSL with SCRAM-SHA-512 (the `admin` user
bootstrapped by `storage format --add-scram`, brokers reaching each other over SASL_SSL) and SSL with
`ssl.client.auth=required` (mTLS). A two-node Kafka cluster per set-up serves kcli's commands, with the
inter-broker listener carrying the reassigned replica; a kcli node is started from the very
server.properties Kafka's harness writes, and Kafka's kafka-topics, kafka-configs,
kafka-consumer-groups, console producer and consumer and KcliClients (tests/java) run against it with
--command-config / --producer.config / --consumer.config on the same client.properties kcli reads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import apache_kafka
import pytest
from apache_kafka import (
    CONFIG_COMMAND,
    CONSUMER_GROUP_COMMAND,
    TOPIC_COMMAND,
    TRANSACTIONS_COMMAND,
    KafkaCluster,
    KafkaNode,
    Security,
)
from conftest import BrokerProcess, _kafka_cluster, free_port_range, require_apache_kafka, start_with_config
from test_apache_kafka import in_parallel, kafka, kcli
from waiting import wait_for

pytestmark = pytest.mark.timeout(300)

CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


@pytest.fixture(scope="module", params=apache_kafka.SECURITY_KINDS)
def secured_kafka(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    """Two Apache Kafka nodes whose client and inter-broker listener is secured as the param says."""
    yield from _kafka_cluster(tmp_path_factory, 2, security=request.param)


def test_kcli_commands_against_secured_kafka(secured_kafka: KafkaCluster, tmp_path: Path) -> None:
    """Every kcli command that connects, with --command-config on the cluster's client.properties."""
    assert secured_kafka.client_properties is not None
    b, config = secured_kafka.bootstrap, str(secured_kafka.client_properties)
    auth = ("-b", b, "--command-config", config)
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    kcli("topics", "create", *auth, "-t", topic, "--replica-assignment", "1,2")
    assert topic in kcli("topics", "list", *auth).split()
    kcli("configs", "alter", *auth, "--topic", topic, "--add-config", "retention.ms=3600000")

    # Move partition 0 from node 1 to nodes 1 and 2: node 2 fetches it over the secured inter-broker listener.
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]})
    )
    moves = tmp_path / "moves.json"
    moves.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = kcli(
        "reassign", "generate", *auth, "--topics-to-move-json-file", str(moves), "--broker-list", "1,2"
    )
    assert "Proposed partition reassignment configuration" in generated
    kcli(
        "reassign",
        "execute",
        *auth,
        "--reassignment-json-file",
        str(plan),
        "--rollback-file",
        str(tmp_path / "rollback.json"),
    )
    wait_for(
        "reassignment complete",
        lambda: "is completed" in kcli("reassign", "verify", *auth, "--reassignment-json-file", str(plan)),
        60,
    )

    # Groups, transactions and the election: the call succeeding over the secured listener is the check.
    described, configs, _, _, features, status, replication, cluster, _ = in_parallel(
        lambda: kcli("topics", "describe", *auth, "-t", topic),
        lambda: kcli("configs", "describe", *auth, "--topic", topic),
        lambda: kcli("groups", "list", *auth),
        lambda: kcli("transactions", "list", *auth),
        lambda: kcli("features", "describe", *auth),
        lambda: kcli("quorum", "--bootstrap-server", b, "--command-config", config, "describe", "--status"),
        lambda: kcli(
            "quorum", "--bootstrap-server", b, "--command-config", config, "describe", "--replication"
        ),
        lambda: kcli("cluster", "status", *auth, "-o", "json"),
        lambda: kcli("elect", *auth, "--election-type", "preferred", "--all-topic-partitions"),
    )
    assert f"Topic: {topic}" in described and "Replicas: 1,2" in described
    assert "retention.ms=3600000" in configs
    assert "metadata.version" in features
    assert f"ClusterId:              {secured_kafka.cluster_id}" in status
    assert "NodeId" in replication
    assert secured_kafka.cluster_id in cluster
    group = f"g-{uuid.uuid4().hex[:6]}"
    offsets = tmp_path / "offsets.csv"
    offsets.write_text(f"{topic},0,0\n")
    kcli("groups", "reset-offsets", *auth, group, "--from-file", str(offsets), "--execute")
    assert group in kcli("groups", "list", *auth).split()
    assert topic in kcli("groups", "describe", *auth, group)


# --- Kafka's tools and Java clients against kcli secured the same way ---------------------------------


def start_secured_kcli(workdir: Path, kind: str) -> tuple[BrokerProcess, Security]:
    """A one-node kcli cluster from the server.properties Kafka's harness writes for `kind`, formatted
    with the same `--add-scram`."""
    security = apache_kafka.make_security(kind, workdir)
    base = free_port_range(2)
    node = KafkaNode(1, base, base + 1, workdir)
    config = workdir / "server.properties"
    config.write_text(apache_kafka.server_properties(node, f"1@127.0.0.1:{base + 1}", 1, security))
    cluster_id = kcli("storage", "random-uuid").strip()
    kcli("storage", "format", "-c", str(config), "-t", cluster_id, *security.add_scram)
    return start_with_config(workdir, config), security


@pytest.fixture(scope="module", params=apache_kafka.SECURITY_KINDS)
def secured_kcli(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, Security]]:
    require_apache_kafka()
    process, security = start_secured_kcli(tmp_path_factory.mktemp(f"kcli-{request.param}"), request.param)
    try:
        yield process, security
    finally:
        status = process.stop()
        assert status == 0, f"kcli broker exited with status {status}:\n{process.log()}"


def test_kafka_tools_and_java_clients_against_secured_kcli(
    secured_kcli: tuple[BrokerProcess, Security], tmp_path: Path
) -> None:
    from test_java_clients import check_clients, clients_run, compile_clients, require_javac

    process, security = secured_kcli
    b, config = process.bootstrap, str(security.client_properties)
    topic, group = f"sec-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    kafka(tmp_path, TOPIC_COMMAND, "--bootstrap-server", b, "--command-config", config, "--create", "--topic", topic,
          "--partitions", "2")  # fmt: skip
    values = [f"v{i}" for i in range(50)]

    def consume() -> str:
        return kafka(tmp_path, CONSOLE_CONSUMER, "--bootstrap-server", b, "--consumer.config", config, "--topic",
                     topic, "--group", group, "--from-beginning", "--max-messages", str(len(values)),
                     "--timeout-ms", "60000")  # fmt: skip

    require_javac()
    classes = compile_clients()
    prefix = f"j{uuid.uuid4().hex[:6]}"
    produced, listed, configs, lines = in_parallel(
        lambda: kafka(
            tmp_path,
            CONSOLE_PRODUCER,
            "--bootstrap-server",
            b,
            "--producer.config",
            config,
            "--topic",
            topic,
            stdin="\n".join(values) + "\n",
        ),  # fmt: skip
        lambda: kafka(
            tmp_path,
            TOPIC_COMMAND,
            "--bootstrap-server",
            b,
            "--command-config",
            config,
            "--describe",
            "--topic",
            topic,
        ),  # fmt: skip
        lambda: kafka(
            tmp_path,
            CONFIG_COMMAND,
            "--bootstrap-server",
            b,
            "--command-config",
            config,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--all",
        ),  # fmt: skip
        lambda: clients_run(classes, tmp_path, "--command-config", config, "clients", b, prefix, "1"),
    )
    del produced
    assert f"Topic: {topic}" in listed and "PartitionCount: 2" in listed
    assert "retention.ms=" in configs
    check_clients(lines, prefix, [1], {1: process.data_dir / "data"})
    consumed, transactions = in_parallel(
        consume,
        lambda: kafka(
            tmp_path, TRANSACTIONS_COMMAND, "--bootstrap-server", b, "--command-config", config, "list"
        ),
    )
    assert sorted(consumed.split()) == sorted(values)
    assert f"{prefix}-tid" in transactions
    groups = kafka(tmp_path, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--command-config", config,
                   "--describe", "--group", group)  # fmt: skip
    assert topic in groups and group in groups
    # kcli reads the same file against its own secured listener.
    assert topic in kcli("topics", "list", "-b", b, "--command-config", config).split()
