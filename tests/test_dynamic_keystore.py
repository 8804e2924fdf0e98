"""A renewed keystore or truststore taken without a restart: `listener.name.ssl.ssl.*` set per broker.

A broker on SSL with a client connected; a keystore of the same subject with a new serial is set with
`kcli configs alter --entity-type brokers --entity-name 1`; a new connection sees the new certificate,
the open one goes on; a keystore of another subject is refused with Kafka's sentence. On a three-node
mutual-TLS cluster, a follower's renewed truststore reaches its replica fetcher's next connection, and
its transaction coordinator's markers and its verification of transactional batches.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import KCLI, BrokerProcess, free_port_range, kcli_env, start_broker, stop_cleanly
from cryptography import x509
from kraft_cluster import QUORUM_TIMEOUTS, NodeProcess
from waiting import wait_for

from formats.segment import walk
from kcli.client import KafkaClient
from kcli.protocol.configs import OpType, ResourceType
from kcli.protocol.messages import nested_type
from kcli.security import ClientSecurity
from kcli.security.certs import CertificateAuthority
from ops.local_cluster import plan

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
        "wider": ca.issue("node1", names=("localhost", "127.0.0.1", "node1.example")).write(workdir, "wider")[
            "pem"
        ],
        "narrower": ca.issue("node1").write(workdir, "narrower")["pem"],
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


def test_a_truststore_cannot_be_added_to_a_listener_without_one(
    setup: tuple[BrokerProcess, int, int, dict[str, Path]],
) -> None:
    """Kafka's SslFactory: the SSL listener above has no truststore, so a dynamic one is refused."""
    _, plaintext, _, stores = setup
    refused = alter(f"127.0.0.1:{plaintext}", f"listener.name.ssl.ssl.truststore.location={stores['ca']}")
    assert refused.returncode != 0
    assert (
        "Validation of dynamic config update of SSLFactory failed: Cannot add SSL truststore to an existing "
        "listener for which no truststore was configured."
    ) in refused.stdout + refused.stderr, refused.stdout + refused.stderr


def test_a_keystore_is_checked_against_the_one_in_use_not_the_static_one(
    setup: tuple[BrokerProcess, int, int, dict[str, Path]],
) -> None:
    """Kafka's SslFactory compares a new keystore with the one the listener serves now: once a keystore
    that adds a subject alternative name is in use, one without that name is refused, though it has
    every name of the static keystore."""
    _, plaintext, port, stores = setup
    bootstrap = f"127.0.0.1:{plaintext}"
    done = alter(bootstrap, f"listener.name.ssl.ssl.keystore.location={stores['wider']}")
    assert done.returncode == 0, done.stdout + done.stderr
    wider = serial_of(stores["wider"])
    wait_for("the wider certificate served", lambda: served_serial(port, stores["ca"]) == wider or None, 15)

    refused = alter(bootstrap, f"listener.name.ssl.ssl.keystore.location={stores['narrower']}")
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert (
        "Keystore SubjectAltNames do not match:  "
        "existing={alias=kafka, SAN=[[2, localhost], [2, node1.example], [7, 127.0.0.1]]}, "
        "new={alias=kafka, SAN=[[2, localhost], [7, 127.0.0.1]]}"
    ) in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    assert served_serial(port, stores["ca"]) == wider


def test_a_ca_rotation_in_steps_on_the_inter_broker_listener(tmp_path: Path) -> None:
    """The inter-broker listener's old and new settings must handshake both ways, the old being the ones
    in use: the truststore first takes the new CA beside the old one, then a keystore from the new CA
    is taken (the static settings, trusting the old CA alone, could not dial it), and a client trusting
    only the new CA connects."""
    one, two = CertificateAuthority("CA one"), CertificateAuthority("CA two")
    both = tmp_path / "both.crt"
    both.write_bytes(one.cert_pem + two.cert_pem)
    ca_two = two.write(tmp_path, "two")
    first = one.issue("node1").write(tmp_path, "node1-one")["pem"]
    second = two.issue("node1").write(tmp_path, "node1-two")["pem"]
    base = free_port_range(2)
    config = tmp_path / "server.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{base},SSL://127.0.0.1:{base + 1}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL\n"
        "inter.broker.listener.name=SSL\n"
        f"log.dirs={tmp_path / 'data'}\n"
        f"ssl.keystore.location={first}\nssl.keystore.type=PEM\n"
        f"ssl.truststore.location={one.write(tmp_path, 'one')}\nssl.truststore.type=PEM\n"
    )
    broker = start_broker(tmp_path, config=config, data_dir=tmp_path / "data")
    try:
        bootstrap, port = f"127.0.0.1:{base}", base + 1
        done = alter(bootstrap, f"listener.name.ssl.ssl.truststore.location={both}")
        assert done.returncode == 0, done.stdout + done.stderr
        done = alter(bootstrap, f"listener.name.ssl.ssl.keystore.location={second}")
        assert done.returncode == 0, done.stdout + done.stderr
        renewed = serial_of(second)
        wait_for("CA two's certificate served", lambda: served_serial(port, ca_two) == renewed or None, 15)
        # going back to the static truststore would leave the keystore in use unverifiable
        refused = alter(bootstrap, f"listener.name.ssl.ssl.truststore.location={tmp_path / 'one.crt'}")
        assert refused.returncode != 0, refused.stdout + refused.stderr
        assert (
            "a TLS handshake fails on listener SSL between the current keystore and truststore serving"
            in (refused.stdout + refused.stderr)
        ), refused.stdout + refused.stderr
    finally:
        stop_cleanly(broker)


def test_a_controller_only_node_serves_its_renewed_keystore(tmp_path: Path) -> None:
    """A controller-only node's own dynamic keystore (IncrementalAlterConfigs sent to its controller
    listener, as kafka-configs.sh --bootstrap-controller does) serves that listener's new connections."""
    ca = CertificateAuthority()
    ca_file = ca.write(tmp_path)
    first = ca.issue("controller1").write(tmp_path, "controller1")["pem"]
    renewed = ca.issue("controller1").write(tmp_path, "controller1-renewed")["pem"]
    port = free_port_range(1)
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\n"
        f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.quorum.voters=1@127.0.0.1:{port}\n"
        "listener.security.protocol.map=CONTROLLER:SSL\n"
        f"log.dirs={tmp_path / 'data'}\n"
        f"ssl.keystore.location={first}\nssl.keystore.type=PEM\n"
        f"ssl.truststore.location={ca_file}\nssl.truststore.type=PEM\n"
    )
    controller = start_broker(tmp_path, config=config, data_dir=tmp_path / "data")
    try:
        assert served_serial(port, ca_file) == serial_of(first)
        security = ClientSecurity(protocol="SSL", ssl={"ssl.truststore.location": str(ca_file)})

        async def run() -> int:
            async with await KafkaClient.connect(f"127.0.0.1:{port}", security=security) as client:
                cls = client.request_type(44)
                entry = nested_type(cls, "AlterableConfig")(
                    name="listener.name.controller.ssl.keystore.location",
                    config_operation=int(OpType.SET),
                    value=str(renewed),
                )
                resource = nested_type(cls, "AlterConfigsResource")(
                    resource_type=int(ResourceType.BROKER), resource_name="1", configs=(entry,)
                )
                response = await client.send(cls(resources=(resource,), validate_only=False))
                return int(response.responses[0].error_code)

        assert asyncio.run(run()) == 0
        wait_for(
            "a new connection shown the renewed certificate",
            lambda: served_serial(port, ca_file) == serial_of(renewed) or None,
            15,
        )
        assert "listener CONTROLLER: keystore loaded" in controller.log()
    finally:
        stop_cleanly(controller)


def tls_client(port: int, ca: Path, cert: dict[str, Path]) -> ssl.SSLSocket:
    """A TLS connection to `port` presenting `cert`, its handshake done (TLS 1.2: a refused client
    certificate fails the handshake itself rather than the first read)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert["chain"]), str(cert["key"]))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        return context.wrap_socket(raw, server_hostname="127.0.0.1")
    except BaseException:
        raw.close()
        raise


@pytest.fixture(scope="module")
def mtls(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, int, int, dict[str, object]]]:
    """A broker whose SSL listener wants client certificates from CA `one`, and allows DN and SAN
    changes (`ssl.allow.dn.changes`, `ssl.allow.san.changes`)."""
    workdir = tmp_path_factory.mktemp("dynamic-truststore")
    one, two = CertificateAuthority("CA one"), CertificateAuthority("CA two")
    both = workdir / "both.crt"
    both.write_bytes(one.cert_pem + two.cert_pem)
    stores: dict[str, object] = {
        "one": one.write(workdir, "one"),
        "both": both,
        "node": one.issue("node1").write(workdir, "node1")["pem"],
        "renamed": one.issue("broker-1", names=("127.0.0.1", "broker-1.example")).write(workdir, "renamed")[
            "pem"
        ],
        "client-one": one.issue("alice", client=True).write(workdir, "alice"),
        "client-two": two.issue("bob", client=True).write(workdir, "bob"),
    }
    base = free_port_range(2)
    config = workdir / "server.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{base},SSL://127.0.0.1:{base + 1}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL\n"
        f"log.dirs={workdir / 'data'}\n"
        f"ssl.keystore.location={stores['node']}\nssl.keystore.type=PEM\n"
        f"ssl.truststore.location={stores['one']}\nssl.truststore.type=PEM\n"
        "ssl.client.auth=required\n"
        "listener.name.ssl.ssl.allow.dn.changes=true\nlistener.name.ssl.ssl.allow.san.changes=true\n"
    )
    process = start_broker(workdir, config=config, data_dir=workdir / "data")
    try:
        yield process, base, base + 1, stores
    finally:
        stop_cleanly(process)


def test_a_new_truststore_serves_new_connections(
    mtls: tuple[BrokerProcess, int, int, dict[str, object]],
) -> None:
    """CA two's client is refused until the truststore holding both CAs is set live; a connection made
    before the change goes on."""
    broker, plaintext, port, stores = mtls
    ca, one, two = stores["one"], stores["client-one"], stores["client-two"]
    assert isinstance(ca, Path) and isinstance(one, dict) and isinstance(two, dict)
    with pytest.raises(ssl.SSLError):
        tls_client(port, ca, two).close()
    with tls_client(port, ca, one) as before:
        done = alter(f"127.0.0.1:{plaintext}", f"listener.name.ssl.ssl.truststore.location={stores['both']}")
        assert done.returncode == 0, done.stdout + done.stderr

        def accepted() -> bool | None:
            try:
                tls_client(port, ca, two).close()
            except (ssl.SSLError, OSError):
                return None
            return True

        wait_for("CA two's client accepted", accepted, 15)
        before.sendall(struct.pack(">ihhi", 10, 18, 0, 7) + struct.pack(">h", -1))  # ApiVersions v0
        size = struct.unpack(">i", before.recv(4))[0]
        assert size > 0
    assert "keystore loaded" in broker.log()


def test_allowed_dn_and_san_changes(mtls: tuple[BrokerProcess, int, int, dict[str, object]]) -> None:
    """With ssl.allow.dn.changes and ssl.allow.san.changes, a keystore of another subject and names is
    taken (where the first broker above refuses it)."""
    _, plaintext, port, stores = mtls
    done = alter(f"127.0.0.1:{plaintext}", f"listener.name.ssl.ssl.keystore.location={stores['renamed']}")
    assert done.returncode == 0, done.stdout + done.stderr
    renamed = stores["renamed"]
    assert isinstance(renamed, Path)
    ca = stores["one"]
    assert isinstance(ca, Path)
    wait_for(
        "a new connection shown the renamed certificate",
        lambda: served_serial(port, ca) == serial_of(renamed) or None,
        15,
    )


def test_a_truststore_that_drops_the_keystores_ca_is_refused_on_the_inter_broker_listener(
    tmp_path: Path,
) -> None:
    """Kafka's SslEngineValidator on the inter-broker listener: a truststore that no longer trusts the
    broker's own certificate would end replication, so it is refused with the reason."""
    from kcli.broker.dynamic_keystore import check_keystore_update

    one, other = CertificateAuthority("CA one"), CertificateAuthority("CA other")
    node = one.issue("node1").write(tmp_path, "node1")["pem"]
    old = {"ssl.keystore.location": str(node), "ssl.truststore.location": str(one.write(tmp_path, "one"))}
    new = {**old, "ssl.truststore.location": str(other.write(tmp_path, "other"))}
    refused = check_keystore_update("SSL", old, new, verify_with_truststore=True)
    assert refused is not None and refused.startswith(
        "Validation of dynamic config update of SSLFactory failed: a TLS handshake fails on listener SSL "
        "between the current keystore and truststore serving and the new ones dialing ("
    ), refused
    assert check_keystore_update("SSL", old, new) is None  # not the inter-broker listener
    assert check_keystore_update("SSL", old, dict(old), verify_with_truststore=True) is None
    # with client certificates required, a keystore the current truststore does not trust fails too
    mtls = {**old, "ssl.client.auth": "required"}
    other_node = {
        **mtls,
        "ssl.keystore.location": str(other.issue("node1").write(tmp_path, "other-node")["pem"]),
    }
    refused = check_keystore_update("SSL", mtls, other_node, verify_with_truststore=True)
    assert (
        refused is not None and "serving and the new ones dialing (" in refused and "certificate" in refused
    )


LAG_MS = 3000
"""replica.lag.time.max.ms of the cluster below: how soon a follower that cannot fetch leaves the ISR."""


def disk_batches(node: NodeProcess, topic: str) -> int:
    """How many whole batches of `topic`-0 node `node` holds on disk."""
    directory = node.node.directory / "data" / f"{topic}-0"
    return sum(len(walk(path.read_bytes(), check_crc=True).batches) for path in directory.glob("*.log"))


@pytest.fixture
def ssl_cluster(tmp_path: Path) -> Iterator[tuple[dict[int, NodeProcess], Path, dict[str, str]]]:
    """`kcli cluster start --security ssl`'s three nodes (mutual TLS between brokers), with node 3's
    inter-broker listener serving a certificate of a second CA ("CA two") that nodes 1 and 3 trust and
    node 2 does not yet: the middle of a CA rotation. Yields the nodes, client.properties and a
    librdkafka client trusting both CAs."""
    layout = plan(
        tmp_path / "cluster",
        3,
        free_port_range(6),
        [*QUORUM_TIMEOUTS, f"replica.lag.time.max.ms={LAG_MS}"],
        security="ssl",
    )
    tls = layout.data_dir / "tls"
    two = CertificateAuthority("CA two")
    both = tls / "both.crt"
    both.write_bytes((tls / "ca.crt").read_bytes() + two.cert_pem)
    node3 = two.issue("kcli-node").write(tls, "node3-ca-two")["pem"]
    extra = {1: [f"listener.name.ssl.ssl.truststore.location={both}"], 2: []}
    extra[3] = [*extra[1], f"listener.name.ssl.ssl.keystore.location={node3}"]
    nodes = {n.node_id: NodeProcess(n) for n in layout.nodes}
    for node_id, lines in extra.items():
        with open(nodes[node_id].node.properties, "a") as properties:
            properties.write("".join(f"{line}\n" for line in lines))
    client = {
        "bootstrap.servers": layout.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": str(both),
        "ssl.certificate.location": str(tls / "client.crt"),
        "ssl.key.location": str(tls / "client.key"),
    }
    try:
        for node in nodes.values():
            node.start()
        for node in nodes.values():
            node.wait_ready()
        yield nodes, layout.data_dir / "client.properties", client
    finally:
        for node in nodes.values():
            if node.running:
                node.terminate()


def test_a_renewed_truststore_reaches_the_replica_fetchers(
    ssl_cluster: tuple[dict[int, NodeProcess], Path, dict[str, str]],
) -> None:
    """Kafka's inter-broker channel builders are Reconfigurable: node 2 cannot fetch from node 3 (whose
    CA it does not trust) until its truststore is renewed live; then its fetcher's next connection
    takes the new truststore and replication goes on, without a restart."""
    from confluent_kafka import Producer, TopicCollection
    from confluent_kafka.admin import AdminClient, NewTopic

    nodes, client_properties, client = ssl_cluster
    name = "rotated"
    admin = AdminClient(client)
    admin.create_topics([NewTopic(name, 1, replica_assignment=[[3, 2]])])[name].result(30)
    producer = Producer({**client, "acks": "1", "enable.idempotence": False, "message.timeout.ms": 30000})
    for i in range(5):
        producer.produce(name, b"m-%d" % i, partition=0)
    assert producer.flush(30) == 0

    def isr() -> list[int]:
        described = admin.describe_topics(TopicCollection([name]))[name].result(10)
        return sorted(node.id for node in described.partitions[0].isr)

    # node 2's fetcher cannot complete a handshake with node 3, so it leaves the ISR (replica.lag.time.max.ms)
    wait_for("node 2 out of the ISR", lambda: isr() == [3] or None, 30)
    assert disk_batches(nodes[2], name) == 0

    both = client["ssl.ca.location"]
    done = subprocess.run(
        [*KCLI, "configs", "alter", "--bootstrap-server", nodes[1].bootstrap]
        + ["--command-config", str(client_properties), "--entity-type", "brokers", "--entity-name", "2"]
        + ["--add-config", f"listener.name.ssl.ssl.truststore.location={both}"],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for("node 2 replicating from node 3", lambda: disk_batches(nodes[2], name) > 0 or None, 30)
    wait_for("node 2 back in the ISR", lambda: isr() == [2, 3] or None, 30)
    assert "clients of listener SSL: keystore and truststore loaded for new connections" in nodes[2].log()
    producer.produce(name, b"after", partition=0)
    assert producer.flush(30) == 0
    wait_for("node 2 replicating what follows", lambda: disk_batches(nodes[2], name) > 1 or None, 30)


def test_a_renewed_truststore_reaches_transaction_markers_and_verification(
    ssl_cluster: tuple[dict[int, NodeProcess], Path, dict[str, str]],
) -> None:
    """Node 2's other inter-broker clients take its renewed truststore as its fetchers do. Before the
    renewal nodes 2 and 3 cannot talk (neither side of the mutual TLS trusts the other's certificate), so
    two transactions stall: one whose batch node 2 leads and must verify at its coordinator on node 3
    (AddPartitionsToTxn, VerifyOnly: node 2 says in its log that it keeps being refused), one whose batch
    node 3 leads and must verify at node 2. Once node 2's truststore also trusts node 3's CA, both batches
    are appended and both transactions committed, the second's markers sent by node 2's coordinator to
    node 3: a read_committed consumer reads both records, without a restart."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from formats.internal import txn_partition_for

    nodes, client_properties, client = ssl_cluster
    admin = AdminClient(client)
    on_2, on_3 = "led-by-2", "led-by-3"
    for topic, replicas in ((on_2, [2, 1]), (on_3, [3, 1])):
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(30)

    def producer(transactional_id: str) -> Producer:
        settings = {"transactional.id": transactional_id, "transaction.timeout.ms": 90000, "acks": "all"}
        made = Producer({**client, **settings})
        made.init_transactions(30)
        return made

    def transaction_state_leaders() -> dict[int, int] | None:
        found = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
        leaders = {index: partition.leader for index, partition in found.partitions.items()}
        return leaders if leaders and min(leaders.values()) >= 0 else None

    def transactional_id_on(node_id: int, leaders: dict[int, int]) -> str:
        """An id whose transaction coordinator (its __transaction_state partition's leader) is `node_id`."""
        return next(
            f"t-{n}" for n in range(10_000) if leaders[txn_partition_for(f"t-{n}", len(leaders))] == node_id
        )

    first = producer("t-first")  # makes __transaction_state
    leaders = wait_for("__transaction_state led everywhere", transaction_state_leaders, 30)
    verified_id = transactional_id_on(3, leaders)
    verified = producer(verified_id)
    verified.begin_transaction()
    verified.produce(on_2, b"verified at node 3", partition=0)
    marked = producer(transactional_id_on(2, leaders))
    marked.begin_transaction()
    marked.produce(on_3, b"marked by node 2", partition=0)
    for held in (verified, marked):
        held.poll(0)
    wait_for(
        "node 2's verification at node 3 refused",
        lambda: f"has refused partition {on_2}-0" in nodes[2].log() or None,
        30,
    )
    refused = f"has refused partition {on_2}-0 of {verified_id} (epoch 0) for "
    assert re.search(re.escape(refused) + r"\d+ s: NETWORK_EXCEPTION", nodes[2].log())
    assert disk_batches(nodes[2], on_2) == disk_batches(nodes[3], on_3) == 0

    done = subprocess.run(
        [*KCLI, "configs", "alter", "--bootstrap-server", nodes[1].bootstrap]
        + ["--command-config", str(client_properties), "--entity-type", "brokers", "--entity-name", "2"]
        + ["--add-config", f"listener.name.ssl.ssl.truststore.location={client['ssl.ca.location']}"],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for held in (verified, marked):
        assert held.flush(60) == 0
        held.commit_transaction(30)

    consumer = Consumer(
        {
            **client,
            "group.id": "renewed",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    seen: list[bytes] = []

    def both_read() -> bool | None:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.append(message.value())
        return sorted(seen) == [b"marked by node 2", b"verified at node 3"] or None

    try:
        consumer.subscribe([on_2, on_3])
        wait_for("both transactions read committed", both_read, 60)
    finally:
        consumer.close()
        first.flush(10)
