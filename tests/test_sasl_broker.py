"""SASL_PLAINTEXT end to end: a real `kcli broker start` and stock clients.

confluent-kafka, kafka-python, aiokafka and kcat produce and consume with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512, kcli's own KafkaClient with OAUTHBEARER too (unsecured tokens, and one from a token
endpoint). A wrong password gets the broker's message and leaves the broker serving; a request other
than ApiVersions/SaslHandshake before authentication, or a frame above sasl.server.max.receive.size,
closes the connection. With connections.max.reauth.ms=2000 a 10 s consume goes on across re-
authentications, a session left to expire is closed, and a re-authentication as someone else is refused.

SCRAM users live in the metadata log, as in Kafka: `kcli storage format --add-scram` writes them before
the broker first starts (the two-node cluster's inter-broker `admin` too, as Kafka's docs bootstrap it),
and a user added with `kcli configs alter --entity-type users` logs in at once, and no longer once deleted.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import (
    KCLI,
    BrokerProcess,
    free_port_range,
    kcli_env,
    skip_unless_ci,
    start_with_config,
    stop_cleanly,
)
from kafka import KafkaConsumer, KafkaProducer
from kio.schema.errors import ErrorCode
from local_http import json_endpoint
from waiting import wait_for

from kcli.client import ClientError, KafkaClient
from kcli.protocol.messages import request_type
from kcli.security import ClientSecurity
from kcli.security.sasl.oauthbearer import unsecured_token

pytestmark = pytest.mark.timeout(120)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
USERS = 'user_alice="alice-secret" user_bob="bob-secret"'
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def properties(workdir: Path, enabled: str, extra: str = "") -> Path:
    """A one-node KRaft quorum (so `storage format` takes it) whose client listener is SASL_PLAINTEXT;
    PLAIN users are in its JAAS line, SCRAM users come from the metadata log."""
    port = free_port_range(1)
    path = workdir / "server.properties"
    path.write_text(
        f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{port}
controller.listener.names=CONTROLLER
listeners=SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={workdir / "data"}
sasl.enabled.mechanisms={enabled}
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_MODULE} required username="alice" password="alice-secret" {USERS};
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={SCRAM_MODULE} required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={SCRAM_MODULE} required;
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredValidatorRequiredScope="kafka";
{extra}
"""
    )
    return path


def add_scram(*users: str) -> list[str]:
    """`--add-scram` arguments: each user's password under both SCRAM mechanisms."""
    return [
        argument
        for user in users
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        for argument in ("--add-scram", f"{mechanism}=[name={user},password={PASSWORDS[user]}]")
    ]


def start_formatted(workdir: Path, config: Path) -> BrokerProcess:
    """`kcli storage format --add-scram` for alice and bob, then `kcli broker start --config`."""
    cluster_id = kcli("storage", "random-uuid").stdout.strip()
    kcli("storage", "format", "-c", str(config), "-t", cluster_id, *add_scram("alice", "bob"))
    return start_with_config(workdir, config)


def kcli(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m kcli ARGS`, which must succeed."""
    done = subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("sasl")
    process = start_formatted(workdir, properties(workdir, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"))
    try:
        yield process
    finally:
        stop_cleanly(process)


@pytest.fixture(scope="module")
def reauth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("sasl-reauth")
    config = properties(workdir, "PLAIN,SCRAM-SHA-512", "connections.max.reauth.ms=2000")
    process = start_formatted(workdir, config)
    try:
        yield process
    finally:
        stop_cleanly(process)


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def librdkafka(
    server: BrokerProcess, mechanism: str, user: str = "alice", password: str | None = None
) -> dict:
    return {
        "bootstrap.servers": server.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user] if password is None else password,
    }


def python_client(server: BrokerProcess, mechanism: str, user: str) -> dict:
    """kafka-python's and aiokafka's settings (they share the names)."""
    return {
        "bootstrap_servers": server.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": PASSWORDS[user],
    }


def security(mechanism: str, user: str = "alice", password: str | None = None) -> ClientSecurity:
    jaas = {"username": user, "password": PASSWORDS[user] if password is None else password}
    return ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, jaas=jaas)


def consume_ck(config: dict, name: str, count: int, timeout: float = 20.0) -> list[bytes]:
    consumer = Consumer({**config, "group.id": f"g-{name}", "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka(server: BrokerProcess, mechanism: str) -> None:
    name = topic()
    producer = Producer(librdkafka(server, mechanism))
    for i in range(5):
        producer.produce(name, b"ck-%d" % i)
    assert producer.flush(20) == 0
    assert consume_ck(librdkafka(server, mechanism, "bob"), name, 5) == [b"ck-%d" % i for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python(server: BrokerProcess, mechanism: str) -> None:
    name = topic()
    sasl = python_client(server, mechanism, "alice")
    producer = KafkaProducer(**sasl)
    for i in range(5):
        producer.send(name, b"kp-%d" % i)
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(name, auto_offset_reset="earliest", consumer_timeout_ms=10000, **sasl)
    try:
        values = [m.value for _, m in zip(range(5), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [b"kp-%d" % i for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka(server: BrokerProcess, mechanism: str) -> None:
    name = topic()
    sasl = python_client(server, mechanism, "bob")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**sasl)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(name, b"aio-%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(name, auto_offset_reset="earliest", **sasl)
        await consumer.start()
        try:
            values = []
            async with asyncio.timeout(20):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 5:
                        return values
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat(server: BrokerProcess, mechanism: str) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        skip_unless_ci("kcat is not installed")
    name = topic()
    sasl = [
        "-b",
        server.bootstrap,
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        f"sasl.mechanisms={mechanism}",
    ]
    sasl += ["-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    lines = "".join(f"kcat-{i}\n" for i in range(5))
    subprocess.run([kcat, *sasl, "-P", "-t", name], input=lines.encode(), check=True, timeout=30)
    out = subprocess.run(
        [kcat, *sasl, "-C", "-t", name, "-o", "beginning", "-c", "5", "-e"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.decode().split() == [f"kcat-{i}" for i in range(5)]


async def metadata(client: KafkaClient) -> object:
    request = client.request_type(3, 12)
    return await client.send(
        request(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )


def test_kcli_client_every_mechanism(server: BrokerProcess) -> None:
    oauth = ClientSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        jaas={"unsecuredLoginStringClaim_sub": "carol", "unsecuredLoginListClaim_scope": ",kafka"},
    )

    async def run() -> None:
        for each in [*(security(m) for m in MECHANISMS), oauth]:
            async with await KafkaClient.connect(server.bootstrap, security=each) as client:
                assert client.authentications == 1
                await metadata(client)

    asyncio.run(run())


def oauth(url: str, scope: str) -> ClientSecurity:
    """OAUTHBEARER with a token from the client-credentials grant at `url`, asking for `scope`."""
    return ClientSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl={"sasl.oauthbearer.token.endpoint.url": url},
        jaas={"clientId": "svc", "clientSecret": "svc-secret", "scope": scope},
    )


def test_kcli_client_oauthbearer_token_endpoint(server: BrokerProcess) -> None:
    """A client-credentials grant against a local token endpoint; the token it hands out is unsecured."""
    seen: list[dict] = []

    def answer(method: str, form: str, headers: dict[str, str]) -> object:
        seen.append({"form": form, "authorization": headers["Authorization"]})
        scope = "kafka" if "scope=kafka" in form else "other"
        token = unsecured_token(
            {"unsecuredLoginStringClaim_sub": "svc", "unsecuredLoginStringClaim_scope": scope}
        )
        return {"access_token": token.value, "token_type": "bearer", "expires_in": 3600}

    async def run(url: str) -> None:
        async with await KafkaClient.connect(server.bootstrap, security=oauth(url, "kafka")) as client:
            await metadata(client)
        with pytest.raises(ClientError) as refused:
            await KafkaClient.connect(server.bootstrap, security=oauth(url, "nope"))
        assert str(refused.value) == (
            f"SASL/OAUTHBEARER authentication with {server.bootstrap} failed: "
            '{"status":"insufficient_scope", "scope":"[kafka]"}.'
        )

    with json_endpoint(answer, "/token") as url:
        asyncio.run(run(url))
    assert "grant_type=client_credentials" in seen[0]["form"] and seen[0]["authorization"].startswith(
        "Basic "
    )


def test_kcli_client_errors_are_one_sentence(server: BrokerProcess, reauth_server: BrokerProcess) -> None:
    async def refused(bootstrap: str, each: ClientSecurity) -> str:
        with pytest.raises(ClientError) as caught:
            await asyncio.wait_for(KafkaClient.connect(bootstrap, security=each), 10)
        return str(caught.value)

    async def run() -> None:
        assert await refused(server.bootstrap, security("PLAIN", password="wrong")) == (
            f"SASL/PLAIN authentication with {server.bootstrap} failed: Authentication failed: Invalid "
            "username or password."
        )
        assert await refused(server.bootstrap, security("SCRAM-SHA-256", password="wrong")) == (
            f"SASL/SCRAM-SHA-256 authentication with {server.bootstrap} failed: Authentication failed during "
            "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256."
        )
        assert await refused(reauth_server.bootstrap, security("SCRAM-SHA-256")) == (
            f"{reauth_server.bootstrap} does not offer SASL mechanism SCRAM-SHA-256 (it offers PLAIN, SCRAM-SHA-512)."
        )
        message = await refused(server.bootstrap, security("PLAIN", password="wrong-password-xyz"))
        assert "wrong-password-xyz" not in message
        assert "alice-secret" not in repr(security("PLAIN"))

    asyncio.run(run())
    assert "wrong-password-xyz" not in server.log() and "alice-secret" not in server.log()


def test_a_scram_user_added_and_deleted_with_kcli_configs(server: BrokerProcess, tmp_path: Path) -> None:
    """`kcli configs alter --entity-type users` writes carol's credential into the metadata log: she logs
    in right after, and once it is deleted her first SCRAM message is answered SASL_AUTHENTICATION_FAILED."""
    command_config = tmp_path / "admin.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f'sasl.jaas.config={PLAIN_MODULE} required username="alice" password="alice-secret";\n'
    )
    alter = ["configs", "alter", "--bootstrap-server", server.bootstrap]
    alter += ["--command-config", str(command_config), "--entity-type", "users", "--entity-name", "carol"]
    carol = ClientSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        jaas={"username": "carol", "password": "carol-secret"},
    )

    async def first_scram_answer() -> ErrorCode:
        client = await KafkaClient.connect(server.bootstrap)  # ApiVersions only: SASL by hand
        try:
            handshake = await client.send(request_type(17, 1)(mechanism="SCRAM-SHA-256"))
            assert handshake.error_code == ErrorCode.none
            answer = await client.send(
                request_type(36, 2)(auth_bytes=b"n,,n=carol,r=fyko+d2lbbFgONRv9qkxdawL")
            )
            return answer.error_code
        finally:
            await client.close()

    async def logs_in() -> bool:
        async with await KafkaClient.connect(server.bootstrap, security=carol) as client:
            await metadata(client)
            return client.authentications == 1

    def answered(code: ErrorCode) -> Callable[[], bool | None]:
        return lambda: asyncio.run(first_scram_answer()) == code or None

    assert asyncio.run(first_scram_answer()) == ErrorCode.sasl_authentication_failed
    added = kcli(*alter, "--add-config", "SCRAM-SHA-256=[iterations=4096,password=carol-secret]")
    # the answer comes once the controller committed the record; the broker's image follows at once,
    # asynchronously (as Kafka's brokers do), so the first login may wait a moment for it
    wait_for("carol's credential on the broker", answered(ErrorCode.none), timeout=5)  # server-first
    assert asyncio.run(logs_in())
    deleted = kcli(*alter, "--delete-config", "SCRAM-SHA-256")
    wait_for("carol's credential gone", answered(ErrorCode.sasl_authentication_failed), timeout=5)
    with pytest.raises(ClientError, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        asyncio.run(logs_in())
    for text in (added.stdout, added.stderr, deleted.stdout, deleted.stderr, server.log()):
        assert "carol-secret" not in text and "alice-secret" not in text


def test_wrong_password_librdkafka_gets_the_brokers_message(server: BrokerProcess) -> None:
    errors: list[str] = []
    config = {
        **librdkafka(server, "PLAIN", password="wrong"),
        "error_cb": lambda e: errors.append(e.str()),
        "reconnect.backoff.ms": 1000,
    }
    producer = Producer(config)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=2)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert any("Authentication failed: Invalid username or password" in e for e in errors), errors
    assert server.is_running()
    assert Producer(librdkafka(server, "PLAIN")).list_topics(timeout=10).brokers


def raw_connection(server: BrokerProcess) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=10)
    return sock


def frame(api_key: int, version: int, body: bytes, correlation_id: int = 1) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_request_before_authentication_closes_the_connection(server: BrokerProcess) -> None:
    with raw_connection(server) as sock:
        sock.sendall(frame(3, 1, struct.pack(">i", -1)))  # Metadata v1, all topics
        assert closed_by_peer(sock)
    assert "Unexpected Kafka request of type Metadata during SASL handshake." in server.log()


def test_an_oversized_frame_before_authentication_is_closed(server: BrokerProcess) -> None:
    with raw_connection(server) as sock:
        sock.sendall(struct.pack(">i", 524289) + b"\0" * 1024)
        assert closed_by_peer(sock)
    assert "invalid request size 524289 (sasl.server.max.receive.size is 524288)" in server.log()


def test_handshake_names_the_enabled_mechanisms_and_v0_carries_raw_tokens(server: BrokerProcess) -> None:
    mechanism = b"DIGEST-MD5"
    with raw_connection(server) as sock:
        sock.sendall(frame(17, 1, struct.pack(">h", len(mechanism)) + mechanism))
        size = struct.unpack(">i", sock.recv(4))[0]
        body = sock.recv(size)
        assert struct.unpack_from(">h", body, 4)[0] == ErrorCode.unsupported_sasl_mechanism
        for name in (b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512", b"OAUTHBEARER"):
            assert name in body
        assert closed_by_peer(sock)
    with raw_connection(server) as sock:  # SaslHandshake v0: the PLAIN token follows as a bare frame
        sock.sendall(frame(17, 0, struct.pack(">h", 5) + b"PLAIN"))
        size = struct.unpack(">i", sock.recv(4))[0]
        assert struct.unpack_from(">h", sock.recv(size), 4)[0] == 0
        token = b"\0alice\0alice-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert sock.recv(4) == b"\0\0\0\0"  # an empty server token
        sock.sendall(frame(3, 1, struct.pack(">i", -1), correlation_id=2))
        size = struct.unpack(">i", sock.recv(4))[0]
        assert size > 8 and not closed_by_peer_soon(sock)


def closed_by_peer_soon(sock: socket.socket) -> bool:
    sock.settimeout(0.3)
    return closed_by_peer(sock)


def test_confluent_kafka_reauthenticates_through_a_long_consume(reauth_server: BrokerProcess) -> None:
    name = topic()
    config = librdkafka(reauth_server, "SCRAM-SHA-512")
    producer = Producer(config)
    consumer = Consumer({**config, "group.id": f"g-{name}", "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    received: list[bytes] = []
    sent = 0
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            producer.produce(name, b"r-%d" % sent)
            sent += 1
            producer.poll(0)
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received.append(message.value())
        assert producer.flush(10) == 0
        while len(received) < sent and time.monotonic() < deadline + 10:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(message.value())
    finally:
        consumer.close()
    assert received == [b"r-%d" % i for i in range(sent)]
    log = reauth_server.log()
    assert "expired without re-authentication" not in log, log


def test_kcli_client_reauthenticates_with_requests_in_flight(reauth_server: BrokerProcess) -> None:
    async def run() -> int:
        async with await KafkaClient.connect(reauth_server.bootstrap, security=security("PLAIN")) as client:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                await asyncio.gather(*(metadata(client) for _ in range(4)))
                await asyncio.sleep(0.05)
            return client.authentications

    assert asyncio.run(run()) >= 3  # the first, then one per ~1.7-1.9 s


def test_an_expired_session_is_closed_and_principals_cannot_change(reauth_server: BrokerProcess) -> None:
    async def authenticate(client: KafkaClient, user: str) -> object:
        handshake = await client.send(request_type(17, 1)(mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.none
        token = f"\0{user}\0{PASSWORDS[user]}".encode()
        return await client.send(request_type(36, 2)(auth_bytes=token))

    async def run() -> None:
        client = await KafkaClient.connect(reauth_server.bootstrap)  # ApiVersions only: SASL by hand
        try:
            answer = await authenticate(client, "alice")
            assert answer.error_code == ErrorCode.none
            assert answer.session_lifetime.total_seconds() == 2.0
            await metadata(client)
            refused = await authenticate(client, "bob")
            assert refused.error_code == ErrorCode.sasl_authentication_failed
            assert (
                refused.error_message
                == "Cannot change principals during re-authentication from User.alice: User.bob"
            )
        finally:
            await client.close()
        client = await KafkaClient.connect(reauth_server.bootstrap)
        try:
            assert (await authenticate(client, "alice")).error_code == ErrorCode.none
            await asyncio.sleep(2.2)
            with pytest.raises(ClientError, match="closed by the broker"):
                await metadata(client)
        finally:
            await client.close()

    asyncio.run(run())
    assert "expired without re-authentication" in reauth_server.log()


def test_sasl_client_on_a_plaintext_listener_is_told_so(broker: BrokerProcess) -> None:
    async def run() -> str:
        with pytest.raises(ClientError) as caught:
            await KafkaClient.connect(broker.bootstrap, security=security("PLAIN"))
        return str(caught.value)

    assert asyncio.run(run()) == (
        f"{broker.bootstrap} refused SaslHandshake (ILLEGAL_SASL_STATE): it is not a SASL listener."
    )


def test_brokers_replicate_over_sasl(cluster_factory) -> None:
    """Two nodes whose client listener is SASL_PLAINTEXT: followers fetch as SCRAM-SHA-512 `admin`
    (sasl.mechanism.inter.broker.protocol), so acks=all with min.insync.replicas=2 completes. The JAAS
    line names only the login; `admin`'s credential is bootstrapped by `storage format --add-scram`."""
    cluster = cluster_factory(
        2,
        overrides=[
            "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.plaintext.plain.sasl.jaas.config={PLAIN_MODULE} required {USERS};",
            f'listener.name.plaintext.scram-sha-512.sasl.jaas.config={SCRAM_MODULE} required username="admin" '
            'password="admin-secret";',
        ],
        add_scram=["SCRAM-SHA-512=[name=admin,password=admin-secret]"],
    )
    cluster.start()
    config = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    name = topic()
    admin = AdminClient(config)
    created = admin.create_topics(
        [NewTopic(name, num_partitions=2, replication_factor=2, config={"min.insync.replicas": "2"})]
    )
    created[name].result(20)
    failures: list[str] = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 20000})
    for i in range(20):
        producer.produce(name, b"rep-%d" % i, on_delivery=lambda e, m: e and failures.append(str(e)))
    assert producer.flush(30) == 0 and failures == []
    assert sorted(consume_ck(config, name, 20)) == sorted(b"rep-%d" % i for i in range(20))


def test_mutated_sasl_frames_only_fail_authentication(server: BrokerProcess) -> None:
    """Four hundred connections send a SaslHandshake and a SaslAuthenticate with mutated bytes (token,
    header or size); each is answered or closed, the broker logs no unexpected error and goes on serving."""
    rng = random.Random(11)
    seeds = {
        "PLAIN": b"\0alice\0alice-secret",
        "SCRAM-SHA-256": b"n,,n=alice,r=abcdefgh",
        "SCRAM-SHA-512": b"n,,n=alice,r=abcdefgh",
        "OAUTHBEARER": b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.\x01\x01",
    }

    def authenticate_frame(token: bytes) -> bytes:
        header = struct.pack(">hhih", 36, 2, 2, 4) + b"fuzz" + b"\0"  # v2: flexible header, no tags
        body = bytes([len(token) + 1]) + token + b"\0" if len(token) < 127 else b""
        data = bytearray(frame_bytes(header + body))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)

    async def one(mechanism: str) -> None:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        try:
            name = mechanism.encode()
            writer.write(frame(17, 1, struct.pack(">h", len(name)) + name))
            writer.write(authenticate_frame(bytearray(seeds[mechanism])))
            writer.write_eof()  # a frame whose size grew is cut short here, not waited for
            await writer.drain()
            async with asyncio.timeout(10):
                while await reader.read(65536):
                    pass
        except (ConnectionError, TimeoutError):
            pass
        finally:
            writer.close()

    async def run() -> None:
        limit = asyncio.Semaphore(20)

        async def limited(mechanism: str) -> None:
            async with limit:
                await one(mechanism)

        await asyncio.gather(*(limited(rng.choice(list(seeds))) for _ in range(400)))
        async with await KafkaClient.connect(server.bootstrap, security=security("SCRAM-SHA-256")) as client:
            await metadata(client)

    asyncio.run(run())
    log = server.log()
    assert server.is_running()
    assert "Traceback" not in log and "unexpected error" not in log, log[-5000:]


def frame_bytes(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload
