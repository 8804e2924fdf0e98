"""`kcli cluster start --security sasl_ssl`: three nodes, SASL_SSL for clients and between brokers.

One cluster for the module, run as a user runs it and stopped with Ctrl-C. Stock clients connect with
what it wrote and printed (client.properties, the confluent-kafka dict); every kcli command that
connects takes `--command-config client.properties`, and so do Kafka's own tools. A wrong password and
a plaintext client each get one sentence, and admin's password is printed nowhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import KCLI, REPO, free_port_range, kcli_env, require_apache_kafka, skip_unless_ci
from secure_clients import (
    CLIENTS,
    Endpoint,
    SecuredCluster,
    expected,
    run_client,
    secured_cluster,
    start_secured_cluster,
    stop_secured_cluster,
    topic,
)
from waiting import wait_for

from kcli.security.jaas import parse_jaas_config

pytestmark = pytest.mark.timeout(180)

SEEDED = "seeded"
GROUP = "seeded-group"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    with secured_cluster(tmp_path_factory.mktemp("sasl-ssl-cluster"), "sasl_ssl") as cluster:
        _seed(cluster)
        yield cluster


def _seed(cluster: SecuredCluster) -> None:
    """A topic of three partitions on every broker (min.insync.replicas=2: acks=all needs the brokers to
    replicate to each other over SASL_SSL) with records, and a group that committed offsets on it."""
    admin = AdminClient(cluster.librdkafka)  # kept: its futures fail once the handle is gone
    created = admin.create_topics(
        [NewTopic(SEEDED, num_partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})]
    )
    created[SEEDED].result(30)
    producer = Producer({**cluster.librdkafka, "acks": "all"})
    for i in range(30):
        producer.produce(SEEDED, f"seed-{i}".encode(), key=str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**cluster.librdkafka, "group.id": GROUP, "auto.offset.reset": "earliest"})
    consumer.subscribe([SEEDED])
    seen = 0
    try:
        while seen < 30:
            message = consumer.poll(1)
            seen += message is not None and message.error() is None
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def admin_password(cluster: SecuredCluster) -> str:
    return (cluster.data_dir / "admin.password").read_text().strip()


def test_what_it_writes_for_clients(cluster: SecuredCluster) -> None:
    properties = cluster.properties()
    assert properties["security.protocol"] == "SASL_SSL" and properties["sasl.mechanism"] == "SCRAM-SHA-512"
    assert properties["ssl.truststore.type"] == "PEM"
    assert parse_jaas_config(properties["sasl.jaas.config"]).options == {
        "username": "admin",
        "password": admin_password(cluster),
    }
    assert properties["bootstrap.servers"] == cluster.bootstrap
    for secret in ("admin.password", "client.properties", "node-1/server.properties", "tls/node.key"):
        assert (cluster.data_dir / secret).stat().st_mode & 0o077 == 0, secret
    server = (cluster.data_dir / "node-1" / "server.properties").read_text()
    assert "CONTROLLER:SASL_SSL" in server and "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256" in server
    assert "sasl.mechanism.controller.protocol=PLAIN" in server
    assert "listener.name.controller.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,SCRAM-SHA-256" in server


@pytest.mark.parametrize("client", CLIENTS)
def test_stock_clients(cluster: SecuredCluster, client: str) -> None:
    """As admin, over SASL_SSL: SCRAM-SHA-512 (client.properties' mechanism) and SCRAM-SHA-256 too."""
    if client == "kcat" and not (shutil.which("kcat") or shutil.which("kafkacat")):
        skip_unless_ci("kcat is not installed")
    ca = Path(cluster.properties()["ssl.truststore.location"])
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        endpoint = Endpoint(cluster.bootstrap, "SASL_SSL", ca, mechanism, "admin", admin_password(cluster))
        name = topic()
        assert run_client(client, endpoint, name) == expected(name, transactions=client != "kcat")


def test_the_printed_confluent_kafka_config(cluster: SecuredCluster) -> None:
    name = topic()
    producer = Producer({**cluster.librdkafka, "transactional.id": f"tx-{name}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(name, b"printed")
    producer.commit_transaction(30)
    consumer = Consumer({**cluster.librdkafka, "group.id": f"g-{name}", "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    try:
        message = None
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.value() == b"printed"
    finally:
        consumer.close()


def kcli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kcli ARGS` in this process (tests/cli_in_process.py); `check`: it must exit 0."""
    done = run_kcli(*args)
    if check:
        assert done.returncode == 0, f"kcli {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done


def scenario(cluster: SecuredCluster, name: str, workdir: Path) -> list[tuple[list[str], str]]:
    """kcli commands with --command-config and what each prints: (arguments, expected in stdout)."""
    cc = ["--command-config", str(cluster.client_properties)]
    t = f"{name}-topic"
    plan = workdir / "plan.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": t, "partition": 0, "replicas": [2, 3]}]})
    )
    to_move = workdir / "move.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": SEEDED}]}))
    segments = REPO / "fixtures" / "logdir" / "m0-none-0"  # a small segment dir (tests/test_fixtures.py)
    scenarios: dict[str, list[tuple[list[str], str]]] = {
        "topics": [
            (["topics", "create", *cc, "-t", t, "--partitions", "2", "--replication-factor", "3"], t),
            (["topics", "list", *cc], t),
            (["topics", "describe", *cc, "-t", t], "ReplicationFactor: 3"),
            (["topics", "delete", *cc, "-t", t], ""),
        ],
        "configs": [
            (["configs", "alter", *cc, "--topic", SEEDED, "--add-config", "retention.ms=3600000"], ""),
            (["configs", "describe", *cc, "--topic", SEEDED], "retention.ms=3600000"),
            (
                ["configs", "describe", *cc, "--entity-type", "users", "--entity-name", "admin"],
                "SCRAM-SHA-512",
            ),
        ],
        "groups": [(["groups", "list", *cc], GROUP), (["groups", "describe", *cc, GROUP], SEEDED)],
        "reassign": [
            (["topics", "create", *cc, "-t", t, "--replica-assignment", "1:2"], t),
            (
                [
                    "reassign",
                    "generate",
                    *cc,
                    "--topics-to-move-json-file",
                    str(to_move),
                    "--broker-list",
                    "1,2,3",
                ],
                "",
            ),
            (
                [
                    "reassign",
                    "execute",
                    *cc,
                    "--reassignment-json-file",
                    str(plan),
                    "--rollback-file",
                    str(workdir / "rollback.json"),
                    "--interval",
                    "0.2",
                ],
                "",
            ),  # fmt: skip
            (["reassign", "verify", *cc, "--reassignment-json-file", str(plan)], "is completed"),
        ],
        "elect": [(["elect", *cc, "--election-type", "preferred", "--all-topic-partitions"], "")],
        "transactions": [(["transactions", "list", *cc], "TransactionalId")],
        "features": [(["features", "describe", *cc], "metadata.version")],
        "quorum": [
            (["quorum", "--bootstrap-server", cluster.bootstrap, *cc, "describe", "--status"], "LeaderId")
        ],
        "cluster-status": [(["cluster", "status", *cc], "unfenced")],
        "replay": [(["replay", str(segments), "-b", cluster.bootstrap, *cc, "-t", f"{t}-replayed"], "")],
        "recover": [(["recover", "partitions", *cc, "--topic", SEEDED], "")],
    }
    return scenarios[name]


@pytest.mark.parametrize(
    "name",
    ["topics", "configs", "groups", "reassign", "elect", "transactions", "features", "quorum",
     "cluster-status", "replay", "recover"],
)  # fmt: skip
def test_kcli_commands_with_command_config(cluster: SecuredCluster, name: str, tmp_path: Path) -> None:
    for args, shown in scenario(cluster, name, tmp_path):
        done = kcli(*args)
        assert shown in done.stdout, f"kcli {' '.join(args)}:\n{done.stdout}{done.stderr}"
        assert admin_password(cluster) not in done.stdout + done.stderr


def test_kafkas_own_tools_read_client_properties(cluster: SecuredCluster, tmp_path: Path) -> None:
    require_apache_kafka()
    import apache_kafka

    done = apache_kafka.run_tool(
        apache_kafka.TOPIC_COMMAND,
        ["--bootstrap-server", cluster.bootstrap, "--command-config", str(cluster.client_properties),
         "--describe", "--topic", SEEDED],
        workdir=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ReplicationFactor: 3" in done.stdout


def test_a_wrong_password_is_the_brokers_sentence(cluster: SecuredCluster, tmp_path: Path) -> None:
    wrong = "not-the-admin-password-42"
    bad = tmp_path / "bad.properties"
    bad.write_text(cluster.client_properties.read_text().replace(admin_password(cluster), wrong))
    done = kcli("topics", "list", "--command-config", str(bad), check=False)
    first = cluster.bootstrap.split(",")[0]
    assert done.returncode != 0
    assert done.stderr == (
        f"kcli: SASL/SCRAM-SHA-512 authentication with {first} failed: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512.\n"
    )
    assert done.stdout == "" and wrong not in cluster.logs()


def test_a_plaintext_client_on_the_tls_port_is_one_sentence(cluster: SecuredCluster) -> None:
    first = cluster.bootstrap.split(",")[0]
    done = kcli("cluster", "status", "-b", first, check=False)
    assert done.returncode != 0
    assert done.stderr == (
        f"kcli: {first} closed the connection: is it a Kafka listener (a TLS one wants security.protocol SSL "
        "or SASL_SSL)?\n"
    )


def test_a_restart_with_other_security_is_refused(cluster: SecuredCluster) -> None:
    done = subprocess.run(  # a real process: cluster start takes the process's signals
        [*KCLI, "cluster", "start", "--security", "ssl", "--data-dir", str(cluster.data_dir)],
        capture_output=True, text=True, env=kcli_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr == (
        f"kcli: {cluster.data_dir} holds a cluster made with --security sasl_ssl, so kcli cluster start cannot "
        "make it ssl; start it with --security sasl_ssl or use another --data-dir.\n"
    )


def quorum_status(cluster: SecuredCluster, controller: str) -> dict[str, str]:
    """`kcli quorum --bootstrap-controller CONTROLLER describe --status` over the secured controller
    listener, as {field: value}."""
    done = kcli(
        "quorum", "--bootstrap-controller", controller, "--command-config", str(cluster.client_properties),
        "describe", "--status",
    )  # fmt: skip
    return {k: v.strip() for k, v in (line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)}


def controllers(cluster: SecuredCluster) -> dict[int, str]:
    """Each controller's listener ({node id: host:port}), from the nodes' server.properties."""
    found = {}
    for path in sorted(cluster.data_dir.glob("node-*/server.properties")):
        lines = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        for listener in lines["listeners"].split(","):  # broker-only nodes have none
            if listener.startswith("CONTROLLER://"):
                found[int(lines["node.id"])] = listener.removeprefix("CONTROLLER://")
    return found


def test_the_controller_listener_wants_sasl_ssl(cluster: SecuredCluster) -> None:
    """A plaintext client on a controller port is closed with one sentence; admin's properties reach it
    (SCRAM over TLS), and the quorum it reports was elected over SASL_SSL with PLAIN."""
    for node_id, controller in controllers(cluster).items():
        done = kcli("quorum", "--bootstrap-controller", controller, "describe", "--status", check=False)
        assert done.returncode != 0, node_id
        assert done.stderr == (
            f"kcli: {controller} closed the connection: is it a Kafka listener (a TLS one wants "
            "security.protocol SSL or SASL_SSL)?\n"
        )
    status = quorum_status(cluster, ",".join(controllers(cluster).values()))
    assert status["LeaderId"] in ("1", "2", "3") and status["CurrentVoters"].count('"id"') == 3
    assert "TLS handshake failed on listener CONTROLLER" in cluster.logs()


def test_configs_through_the_secured_controller_listener(cluster: SecuredCluster) -> None:
    """kafka-configs.sh's --bootstrap-controller (KIP-919) over SASL_SSL: a broker's config and the broker
    defaults are altered at the active controller whichever controller is named (each in turn, so some
    are not the active one) and read back through a broker; without a name the controllers are listed
    as brokers are; topics, which only brokers list (Metadata), and both bootstrap options are one
    sentence each."""
    cc = ["--command-config", str(cluster.client_properties)]
    broker = ["--bootstrap-server", cluster.bootstrap.split(",")[0], *cc]
    addresses = controllers(cluster)
    key = "log.cleaner.backoff.ms"
    for node_id, address in addresses.items():
        via = ["--bootstrap-controller", address, *cc, "--entity-type", "brokers"]
        done = kcli(
            "configs", "alter", *via, "--entity-name", str(node_id), "--add-config", f"{key}={node_id}000"
        )
        assert done.stdout == f"Completed updating config for broker {node_id}.\n"
        line = f"  {key}={node_id}000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{key}={node_id}000"
        describe = ["configs", "describe", *broker, "--entity-type", "brokers", "--entity-name", str(node_id)]
        # committed at the controller when alter returns; a broker applies it when the record reaches it
        wait_for(f"broker {node_id}'s {key} at a broker", lambda a=describe, w=line: w in kcli(*a).stdout, 30)
    first = ["--bootstrap-controller", ",".join(addresses.values()), *cc]
    done = kcli(
        "configs",
        "alter",
        *first,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        f"{key}=7000",
    )
    assert done.stdout == "Completed updating default config for brokers in the cluster.\n"
    default = f"  {key}=7000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{key}=7000"

    def listed_with_default() -> str | None:
        # the controller that answers may be a follower a record behind the active one
        text = kcli("configs", "describe", *first, "--entity-type", "brokers").stdout
        return text if default in text else None

    listed = wait_for("the brokers' default at a controller", listed_with_default, 30)
    headers = [line for line in listed.splitlines() if not line.startswith("  ")]
    assert headers == [f"Dynamic configs for broker {n} are:" for n in sorted(addresses)] + [
        "Default configs for brokers in the cluster are:"
    ]
    for node_id in addresses:
        kcli(
            "configs",
            "alter",
            *first,
            "--entity-type",
            "brokers",
            "--entity-name",
            str(node_id),
            "--delete-config",
            key,
        )
    kcli("configs", "alter", *first, "--entity-type", "brokers", "--entity-default", "--delete-config", key)
    wait_for(
        f"no {key} left at a broker",
        lambda: key not in kcli("configs", "describe", *broker, "--entity-type", "brokers").stdout,
        30,
    )

    topics = kcli("configs", "describe", *first, "--entity-type", "topics", check=False)
    assert topics.returncode != 0 and topics.stderr == (
        "kcli: the controllers do not answer Metadata requests: give --bootstrap-server to reach topics and "
        "brokers.\n"
    )
    both = kcli("configs", "describe", *first, *broker[:2], "--entity-type", "brokers", check=False)
    assert both.returncode != 0
    assert both.stderr == "kcli: You cannot specify both --bootstrap-controller and --bootstrap-server.\n"
    wrong = kcli(
        "configs",
        "describe",
        "--bootstrap-controller",
        broker[1],
        *cc,
        "--entity-type",
        "brokers",
        check=False,
    )
    assert wrong.returncode != 0
    assert (
        wrong.stderr == f"kcli: {broker[1]} is a broker, not a controller: give it to --bootstrap-server.\n"
    )


def test_failover_over_the_secured_controller_listener(cluster: SecuredCluster) -> None:
    """SIGKILL the quorum leader: the other two voters elect a new one over SASL_SSL (Vote, then
    BeginQuorumEpoch and Fetch), the brokers heartbeat to it, and acks=all produce goes on. Last in the
    module: the cluster keeps two nodes from here on."""
    addresses = controllers(cluster)
    before = quorum_status(cluster, ",".join(addresses.values()))
    leader, epoch = int(before["LeaderId"]), int(before["LeaderEpoch"])
    pid = next(
        p
        for p in cluster.nodes
        if f"node-{leader}/server.properties".encode() in Path(f"/proc/{p}/cmdline").read_bytes()
    )
    os.kill(pid, signal.SIGKILL)
    survivors = ",".join(address for n, address in addresses.items() if n != leader)
    deadline = time.monotonic() + 60
    after = before
    while time.monotonic() < deadline:
        done = kcli(
            "quorum", "--bootstrap-controller", survivors, "--command-config", str(cluster.client_properties),
            "describe", "--status", check=False,
        )  # fmt: skip
        fields = {k: v.strip() for k, v in (x.split(":", 1) for x in done.stdout.splitlines() if ":" in x)}
        if done.returncode == 0 and fields.get("LeaderId") not in (None, str(leader), "-1"):
            after = fields
            break
        time.sleep(0.5)
    assert after is not before, f"no new quorum leader within 60 s:\n{cluster.logs()[-4000:]}"
    assert int(after["LeaderEpoch"]) > epoch
    producer = Producer({**cluster.librdkafka, "acks": "all", "message.timeout.ms": 30000})
    failures: list[str] = []
    for i in range(10):
        producer.produce(
            SEEDED, b"after-failover-%d" % i, on_delivery=lambda e, m: e and failures.append(str(e))
        )
    assert producer.flush(40) == 0 and failures == []


def test_controller_only_nodes_authenticate_their_listener(tmp_path: Path) -> None:
    """`--controllers 3`: brokers register with controller-only voters over SASL_SSL (PLAIN as admin),
    an admin request is forwarded to them, a SCRAM login reaches them, a plaintext one is refused; and
    the cluster starts again from its data (a new election over the secured listener)."""
    cluster = start_secured_cluster(tmp_path, "sasl_ssl", 1, controllers=3)
    assert stop_secured_cluster(cluster) == 0, cluster.output()
    first = json.loads((cluster.data_dir / "cluster.json").read_text())["nodes"][0]["controller_port"] - 1
    cluster = start_secured_cluster(tmp_path, "sasl_ssl", 1, controllers=3, port=first)
    try:
        addresses = controllers(cluster)
        server = (cluster.data_dir / "node-1" / "server.properties").read_text()
        assert "process.roles=controller" in server and "CONTROLLER:SASL_SSL" in server
        assert "sasl.mechanism.controller.protocol=PLAIN" in server
        cc = ["--command-config", str(cluster.client_properties)]
        kcli("topics", "create", *cc, "-t", "forwarded", "--partitions", "1", "--replication-factor", "1")
        status = quorum_status(cluster, ",".join(addresses.values()))
        assert status["LeaderId"] in ("1", "2", "3")
        done = kcli("quorum", "--bootstrap-controller", addresses[1], "describe", "--status", check=False)
        assert done.returncode != 0 and done.stderr == (
            f"kcli: {addresses[1]} closed the connection: is it a Kafka listener (a TLS one wants "
            "security.protocol SSL or SASL_SSL)?\n"
        )
    finally:
        status_code = stop_secured_cluster(cluster)
    assert status_code == 0, cluster.output()


def test_a_secured_dynamic_quorum_grows_by_add_controller(tmp_path: Path) -> None:
    """KIP-853 over a SASL_SSL controller listener (PLAIN, `cluster start --security sasl_ssl`'s
    controller login): controller 1 formatted --standalone, controller 2 --no-initial-controllers
    fetching as an observer; `kcli quorum add-controller --command-config` with controller 2's own
    server.properties (its client settings beside the server's, as kafka-metadata-quorum.sh takes them)
    makes it a voter, which DescribeQuorum through either controller then reports. With a client file
    that is not the controller's own, or without the login, it is one sentence and changes nothing."""
    from kraft_cluster import QUORUM_TIMEOUTS, NodeProcess, wait_for

    from ops.local_cluster import LocalNode
    from ops.local_security import PLAIN_MODULE, cluster_security

    security = cluster_security("sasl_ssl", tmp_path / "pki")
    assert security.pki is not None and security.password is not None
    base = free_port_range(2)
    ports = {1: base, 2: base + 1}
    login = f'{PLAIN_MODULE} required username="admin" password="{security.password}";'
    client = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": login,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(security.pki.ca),
    }
    nodes = {}
    for node_id, port in ports.items():
        directory = tmp_path / f"c{node_id}"
        directory.mkdir()
        settings = {
            "process.roles": "controller",
            "node.id": str(node_id),
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:SASL_SSL",
            "controller.quorum.bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports.values()),
            "log.dirs": str(directory / "data"),
            **security.broker_properties(broker=False),
            **dict(line.split("=", 1) for line in QUORUM_TIMEOUTS),
            **(client if node_id == 2 else {}),
        }
        properties = directory / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        properties.chmod(0o600)
        nodes[node_id] = NodeProcess(LocalNode(node_id, None, port, directory))
    client_file = tmp_path / "admin.properties"
    client_file.write_text("".join(f"{k}={v}\n" for k, v in client.items()))
    client_file.chmod(0o600)
    for node_id, flag in ((1, "--standalone"), (2, "--no-initial-controllers")):
        kcli(
            "storage",
            "format",
            "-c",
            str(nodes[node_id].node.properties),
            "-t",
            "MkU3OEVBNTcwNTJENDM2Qg",
            flag,
        )

    def status(controller: int) -> dict[str, str]:
        done = kcli("quorum", "--bootstrap-controller", f"127.0.0.1:{ports[controller]}", "--command-config",
                    str(client_file), "describe", "--status", check=False)  # fmt: skip
        lines = (line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
        return {k: v.strip() for k, v in lines} if done.returncode == 0 else {}

    try:
        for node in nodes.values():
            node.start()
        for node in nodes.values():
            node.wait_ready()
        wait_for(
            "controller 2 as an observer", lambda: '"id": 2' in status(1).get("CurrentObservers", ""), 20
        )
        assert json.loads(status(1)["CurrentVoters"])[0]["id"] == 1

        join = ["quorum", "--bootstrap-controller", f"127.0.0.1:{ports[2]}"]
        refused = kcli(*join, "--command-config", str(client_file), "add-controller", check=False)
        assert refused.returncode != 0 and refused.stderr == (
            "kcli: node.id not found in configuration file. Is this a valid controller configuration file?\n"
        ), refused.stderr
        plain = kcli(*join, "describe", "--status", check=False)
        assert plain.returncode != 0 and "closed the connection" in plain.stderr, plain.stderr
        assert [v["id"] for v in json.loads(status(1)["CurrentVoters"])] == [1]

        added = kcli(*join, "--command-config", str(nodes[2].node.properties), "add-controller")
        assert added.stdout.startswith("Added controller 2 with directory id "), added.stdout
        assert added.stdout.rstrip().endswith(f"endpoints: CONTROLLER://127.0.0.1:{ports[2]}")
        for controller in (1, 2):
            voters = json.loads(status(controller)["CurrentVoters"])
            assert [v["id"] for v in voters] == [1, 2], (controller, voters)
        assert "TLS handshake failed on listener CONTROLLER" in nodes[1].log() + nodes[2].log()
    finally:
        for node in nodes.values():
            if node.running:
                node.kill()


def test_scram_between_the_voters_of_a_new_quorum_is_one_warning(tmp_path: Path) -> None:
    """SCRAM on the controller listener of a new quorum of two: the credentials reach the metadata log
    only through a leader, which the voters cannot elect without them (Apache Kafka 4.1.2's voters fail
    each other's logins the same way): the node says so once, at start."""
    from kraft_cluster import NodeProcess, wait_for

    from ops.local_cluster import LocalNode
    from ops.local_security import SCRAM_MODULE, cluster_security

    security = cluster_security("sasl_ssl", tmp_path / "pki")
    base = free_port_range(2)
    directory = tmp_path / "c1"
    directory.mkdir()
    settings = {
        "process.roles": "controller",
        "node.id": "1",
        "listeners": f"CONTROLLER://127.0.0.1:{base}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL",
        "controller.quorum.voters": f"1@127.0.0.1:{base},2@127.0.0.1:{base + 1}",
        "log.dirs": str(directory / "data"),
        **security.broker_properties(broker=False),
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config": (
            f'{SCRAM_MODULE} required username="admin" password="{security.password}";'
        ),
    }
    node = NodeProcess(LocalNode(1, None, base, directory))
    node.node.properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    node.node.properties.chmod(0o600)
    kcli("storage", "format", "-c", str(node.node.properties), "-t", "MkU3OEVBNTcwNTJENDM2Qg",
         "--add-scram", f"SCRAM-SHA-512=[name=admin,password={security.password}]")  # fmt: skip
    node.start()
    try:
        warning = "sasl.mechanism.controller.protocol is SCRAM-SHA-512 on a new metadata log"
        wait_for("the warning", lambda: warning in node.log(), 20)
        assert node.log().count(warning) == 1
    finally:
        node.kill()
