"""SCRAM credentials (KIP-554) on real `kcli broker start` processes: kafka-configs.sh's user commands,
AlterUserScramCredentials and DescribeUserScramCredentials with Kafka's error codes (confluent-kafka's
AdminClient as the stock client, kcli's KafkaClient where librdkafka refuses to send the request),
credentials kept across a restart and a metadata snapshot, `storage format --add-scram`, and a
three-node cluster where any node takes a change."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_kcli
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from conftest import (
    KCLI,
    BrokerProcess,
    free_port_range,
    kcli_env,
    require_apache_kafka,
    start_broker,
    start_with_config,
    stop_cleanly,
)
from kraft_cluster import IsolatedCluster
from waiting import wait_for

from formats.internal import decode_metadata_record
from formats.internal import encode_metadata_record as encode
from formats.kraft_snapshot import read_snapshot
from kcli.client import KafkaClient
from kcli.protocol.messages import nested_type
from kcli.security.scram import credential_from_password, random_salt, salted_password

pytestmark = pytest.mark.timeout(180)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
SMALL_SNAPSHOTS = [
    "metadata.log.max.record.bytes.between.snapshots=2000",
    "metadata.max.retention.bytes=1000",
    "metadata.log.segment.bytes=8192",
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_broker(tmp_path_factory.mktemp("scram"))
    try:
        yield broker
    finally:
        stop_cleanly(broker)


def kcli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_kcli(*args)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def upsert(client: AdminClient, user: str, mechanism: ScramMechanism, iterations: int, password: str) -> None:
    futures = client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())]
    )
    futures[user].result(timeout=30)


def described(bootstrap: str, user: str) -> dict[str, int]:
    """mechanism name -> iterations, as the stock client reads DescribeUserScramCredentials."""
    client = admin(bootstrap)  # kept: the futures die with their client
    description = client.describe_user_scram_credentials([user])[user].result(timeout=30)
    return {info.mechanism.name: info.iterations for info in description.scram_credential_infos}


def alter_error(bootstrap: str, alterations: list[Any], user: str) -> tuple[str, str]:
    """(error name, message) the stock client reports for `user`."""
    client = admin(bootstrap)
    futures = client.alter_user_scram_credentials(alterations)
    with pytest.raises(KafkaException) as caught:
        futures[user].result(timeout=30)
    error = caught.value.args[0]
    return error.name(), error.str()


def raw(bootstrap: str, api_key: int, build: Any) -> Any:
    """One request through kcli's client: `build(request class)` makes it; the response."""

    async def go() -> Any:
        async with await KafkaClient.connect(bootstrap) as client:
            cls = client.request_type(api_key)
            return await client.send(build(cls))

    return asyncio.run(go())


def raw_alter(
    bootstrap: str, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int]]
) -> Any:
    """AlterUserScramCredentials with (user, mechanism type) deletions and (user, type, iterations)
    upsertions (the salted password of "secret"), as no stock client would send some of them."""

    def build(cls: type) -> Any:
        deletion = nested_type(cls, "ScramCredentialDeletion")
        upsertion = nested_type(cls, "ScramCredentialUpsertion")
        salt = random_salt()
        return cls(
            deletions=tuple(deletion(name=u, mechanism=m) for u, m in deletions),
            upsertions=tuple(
                upsertion(
                    name=u,
                    mechanism=m,
                    iterations=i,
                    salt=salt,
                    salted_password=salted_password("SCRAM-SHA-256", "secret", salt, 4096),
                )
                for u, m, i in upsertions
            ),
        )

    return {r.user: (r.error_code.name, r.error_message) for r in raw(bootstrap, 51, build).results}


def raw_describe(bootstrap: str, users: list[str] | None) -> dict[str, tuple[str, str | None, list]]:
    def build(cls: type) -> Any:
        name = nested_type(cls, "UserName")
        return cls(users=None if users is None else tuple(name(name=u) for u in users))

    response = raw(bootstrap, 50, build)
    return {
        r.user: (
            r.error_code.name,
            r.error_message,
            [(c.mechanism, c.iterations) for c in r.credential_infos],
        )
        for r in response.results
    }


# --- kafka-configs.sh --entity-type users -------------------------------------------------------------


def test_configs_alter_describe_delete_a_users_credentials(shared: BrokerProcess) -> None:
    b = shared.bootstrap
    secret = "alice-secret-9f1"
    add = ["configs", "alter", "-b", b, "--entity-type", "users", "--entity-name", "alice"]
    # One real process for the family: the installed entry point, end to end.
    proc = subprocess.run(
        [*KCLI, *add, "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={secret}]"],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Completed updating config for user alice.\n"
    assert secret not in proc.stdout + proc.stderr
    proc = kcli(*add, "--add-config", f"SCRAM-SHA-256=[password={secret}]")
    assert proc.returncode == 0, proc.stderr

    describe = ["configs", "describe", "-b", b, "--entity-type", "users", "--entity-name", "alice"]
    proc = kcli(*describe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192\n"
    )
    assert described(b, "alice") == {"SCRAM_SHA_256": 4096, "SCRAM_SHA_512": 8192}
    proc = kcli(*describe, "--output", "json")
    assert json.loads(proc.stdout) == {
        "entity_type": "users",
        "entity_name": "alice",
        "credentials": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
            {"mechanism": "SCRAM-SHA-512", "iterations": 8192},
        ],
    }

    proc = kcli(*add, "--delete-config", "SCRAM-SHA-256")
    assert proc.returncode == 0, proc.stderr
    assert (
        kcli(*describe).stdout
        == "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192\n"
    )

    # Refusals: one sentence, exit 2, nothing changed, and never the password.
    for args, sentence in [
        (
            ("--add-config", f"SCRAM-SHA-512=[iterations=20000,password={secret}]"),
            "kcli: cannot alter the SCRAM credentials of user 'alice': Too many iterations.\n",
        ),
        (
            ("--add-config", f"SCRAM-SHA-512=[iterations=100,password={secret}]"),
            "kcli: Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-512\n",
        ),
        (
            ("--delete-config", "SCRAM-SHA-256"),
            "kcli: cannot alter the SCRAM credentials of user 'alice': "
            "Attempt to delete a user credential that does not exist.\n",
        ),
        (
            ("--add-config", f"SCRAM-SHA-512=[pass={secret}]"),
            "kcli: Invalid credential property SCRAM-SHA-512=[hidden]",
        ),
        (
            ("--add-config", f"SCRAM-SHA-1=[password={secret}]"),
            "kcli: Only quota and SCRAM credential configs",
        ),
        (
            ("--delete-config", "consumer_byte_rate"),  # a quota key, but not set on alice
            "kcli: Invalid config(s): consumer_byte_rate\n",
        ),
    ]:
        proc = kcli(*add, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith(sentence), proc.stderr
        assert secret not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    proc = kcli(
        "configs",
        "alter",
        "-b",
        b,
        "--entity-type",
        "users",
        "--entity-default",
        "--add-config",
        "SCRAM-SHA-512=[password=x]",
    )
    assert proc.returncode == 2 and "--entity-default" in proc.stderr
    assert described(b, "alice") == {"SCRAM_SHA_512": 8192}

    # What the metadata log holds: the salt the tool drew and keys that prove the password, no password.
    log = shared.data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    assert secret.encode() not in log.read_bytes()
    dumped = kcli("dump-segment", "--cluster-metadata-decoder", str(log)).stdout
    payloads = [
        json.loads(line.split("payload: ", 1)[1]) for line in dumped.splitlines() if "payload: " in line
    ]
    stored = [p["data"] for p in payloads if p["type"] == "USER_SCRAM_CREDENTIAL_RECORD"]
    last = [d for d in stored if d["name"] == "alice" and d["mechanism"] == 2][-1]
    salt = base64.b64decode(last["salt"])
    expected = credential_from_password("SCRAM-SHA-512", secret, 8192, salt)
    assert base64.b64decode(last["storedKey"]) == expected.stored_key
    assert base64.b64decode(last["serverKey"]) == expected.server_key
    assert {"name": "alice", "mechanism": 1} in [
        p["data"] for p in payloads if p["type"].startswith("REMOVE_USER")
    ]

    for args in (("alter", "--add-config", "SCRAM-SHA-512=[password=x]"), ("describe",)):
        proc = kcli(
            "configs", args[0], "-b", b, "--entity-type", "users", "--entity-name", "\udcff", *args[1:]
        )
        assert (proc.returncode, proc.stderr) == (
            2,
            "kcli: the --entity-name of a user must be UTF-8 text.\n",
        )
    proc = kcli(*add, "--add-config", "SCRAM-SHA-512=[password=\udcff]")
    assert (proc.returncode, proc.stderr) == (
        2,
        "kcli: The SCRAM-SHA-512 credential is not valid UTF-8 text.\n",
    )

    # A user without credentials is left out, as kafka-configs.sh leaves it out.
    proc = kcli("configs", "describe", "-b", b, "--entity-type", "users", "--entity-name", "nobody")
    assert proc.returncode == 0 and proc.stdout == ""
    # No name: every user with a credential.
    assert "user-principal 'alice'" in kcli("configs", "describe", "-b", b, "--entity-type", "users").stdout


# --- Kafka's error codes ------------------------------------------------------------------------------


def test_alter_errors_carry_kafkas_codes_and_messages(shared: BrokerProcess) -> None:
    b = shared.bootstrap
    client = admin(b)
    upsert(client, "carol", SHA256, 4096, "carol-secret")
    assert alter_error(
        b, [UserScramCredentialUpsertion("dave", ScramCredentialInfo(SHA512, 16385), b"x")], "dave"
    ) == (
        "UNACCEPTABLE_CREDENTIAL",
        "Too many iterations",
    )
    assert alter_error(
        b, [UserScramCredentialUpsertion("dave", ScramCredentialInfo(SHA512, 4095), b"x")], "dave"
    ) == (
        "UNACCEPTABLE_CREDENTIAL",
        "Too few iterations",
    )
    assert alter_error(b, [UserScramCredentialDeletion("dave", SHA256)], "dave") == (
        "RESOURCE_NOT_FOUND",
        "Attempt to delete a user credential that does not exist",
    )
    # carol has SHA-256 only: deleting her SHA-512 one is RESOURCE_NOT_FOUND too.
    assert alter_error(b, [UserScramCredentialDeletion("carol", SHA512)], "carol")[0] == "RESOURCE_NOT_FOUND"

    # What librdkafka will not send, sent with kcli's client.
    assert raw_alter(b, [], [("", 1, 4096)]) == {
        "": ("unacceptable_credential", "Username must not be empty")
    }
    assert raw_alter(b, [("", 2)], []) == {"": ("unacceptable_credential", "Username must not be empty")}
    # A name no record can hold (Kafka's strings stop at 32767 bytes): refused, the others written.
    assert raw_alter(b, [], [("n" * 40000, 1, 4096), ("olga", 1, 4096)]) == {
        "n" * 40000: ("unknown_server_error", "'name' field is too long to be serialized"),
        "olga": ("none", None),
    }
    assert raw_alter(b, [], [("erin", 3, 4096)]) == {
        "erin": ("unsupported_sasl_mechanism", "Unknown SCRAM mechanism")
    }
    assert raw_alter(b, [("carol", 0)], []) == {
        "carol": ("unsupported_sasl_mechanism", "Unknown SCRAM mechanism")
    }
    duplicate = ("duplicate_resource", "A user credential cannot be altered twice in the same request")
    # A user twice in one request, whatever the mechanisms: DUPLICATE_RESOURCE, and the others still go through.
    assert raw_alter(b, [], [("frank", 1, 4096), ("frank", 2, 4096), ("gina", 1, 4096)]) == {
        "frank": duplicate,
        "gina": ("none", None),
    }
    assert raw_alter(b, [("carol", 1)], [("carol", 2, 4096)]) == {"carol": duplicate}
    assert raw_describe(b, ["frank"])["frank"][0] == "resource_not_found"
    assert raw_describe(b, ["gina"])["gina"] == ("none", None, [(1, 4096)])
    assert described(b, "carol") == {"SCRAM_SHA_256": 4096}  # the refused deletion left it


def test_describe_errors_and_every_user(shared: BrokerProcess) -> None:
    b = shared.bootstrap
    client = admin(b)
    upsert(client, "henry", SHA512, 5000, "henry-secret")
    answer = raw_describe(b, ["henry", "ghost", "henry"])
    assert answer["henry"] == (
        "duplicate_resource",
        "Cannot describe SCRAM credentials for the same user twice in a single request: henry",
        [],
    )
    assert answer["ghost"] == (
        "resource_not_found",
        "Attempt to describe a user credential that does not exist: ghost",
        [],
    )
    client = admin(b)
    with pytest.raises(KafkaException) as caught:
        client.describe_user_scram_credentials(["ghost"])["ghost"].result(timeout=30)
    assert caught.value.args[0].name() == "RESOURCE_NOT_FOUND"
    everyone = raw_describe(b, None)
    assert everyone["henry"] == ("none", None, [(2, 5000)])
    assert all(code == "none" for code, _, _ in everyone.values())
    every = client.describe_user_scram_credentials().result(timeout=30)
    assert [i.iterations for i in every["henry"].scram_credential_infos] == [5000]


def test_both_apis_are_advertised(shared: BrokerProcess) -> None:
    async def versions() -> tuple[Any, Any]:
        async with await KafkaClient.connect(shared.bootstrap) as client:
            return client.version(50), client.version(51)

    assert asyncio.run(versions()) == (0, 0)


# --- kept in the metadata log, its snapshots and the bootstrap metadata ----------------------------------


def test_credentials_survive_a_restart_and_a_metadata_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    metadata_dir = data / "__cluster_metadata-0"
    broker = start_broker(tmp_path / "run1", data_dir=data, overrides=SMALL_SNAPSHOTS)
    try:
        client = admin(broker.bootstrap)
        upsert(client, "user-0", SHA512, 8192, "first")
        # Enough records for a snapshot and for retention to drop the segment that holds user-0's.
        for k in range(1, 40):
            upsert(client, f"user-{k}", SHA256, 4096, f"secret-{k}")
        futures = client.alter_user_scram_credentials([UserScramCredentialDeletion("user-1", SHA256)])
        futures["user-1"].result(timeout=30)
        wait_for(
            "a snapshot, and the first metadata segment deleted behind it",
            lambda: (
                (metadata_dir / "00000000000000000000.log.deleted").exists()
                and any(p.name.endswith(".checkpoint") for p in metadata_dir.iterdir())
            ),
            60,
            0.05,
        )
    finally:
        stop_cleanly(broker)
    snapshot = sorted(p for p in metadata_dir.iterdir() if p.name.endswith(".checkpoint"))[-1]
    records = [decode_metadata_record(v) for _, v in read_snapshot(snapshot.read_bytes()).records]
    users = {r.data["name"]: r.data for r in records if r.name == "UserScramCredentialRecord"}
    assert "user-0" in users  # its own record went with the first segment: the snapshot keeps it
    assert users["user-0"]["iterations"] == 8192 and users["user-0"]["mechanism"] == 2
    dumped = kcli("dump-segment", "--cluster-metadata-decoder", str(snapshot))
    assert dumped.returncode == 0, dumped.stderr
    assert (
        '"type":"USER_SCRAM_CREDENTIAL_RECORD","version":0,"data":{"name":"user-0","mechanism":2,'
        in dumped.stdout
    )

    again = start_broker(tmp_path / "run2", data_dir=data)
    try:
        assert f"loading snapshot {snapshot.name}" in again.log()
        assert described(again.bootstrap, "user-0") == {"SCRAM_SHA_512": 8192}
        assert described(again.bootstrap, "user-39") == {"SCRAM_SHA_256": 4096}
        # The deletion came after the snapshot, or is in it: gone either way.
        assert raw_describe(again.bootstrap, ["user-1"])["user-1"][0] == "resource_not_found"
    finally:
        stop_cleanly(again)


def test_storage_format_add_scram_then_start(tmp_path: Path) -> None:
    port = free_port_range(1)
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{port}",
        "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(tmp_path / "logs"),
        "metadata.log.dir": str(tmp_path / "metadata"),
    }
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    cluster_id = kcli("storage", "random-uuid").stdout.strip()
    salt = base64.b64encode(b"fixed-salt").decode()
    fmt = ["storage", "format", "-c", str(config), "-t", cluster_id]

    # Bad arguments: ScramParser's sentence, exit 2, nothing written.
    for argument, sentence in [
        ("SCRAM-SHA-512", "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-512'"),
        ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
        ("SCRAM-SHA-512=name=a,password=b]", "Expected configuration string to start with ["),
        ("SCRAM-SHA-512=[name=a,password=b", "Expected configuration string to end with ]"),
        ("SCRAM-SHA-512=[password=b]", "You must supply 'name' to add-scram"),
        ("SCRAM-SHA-512=[name=a]", "You must supply one of 'password' or 'saltedpassword' to add-scram"),
        (
            "SCRAM-SHA-512=[name=a,saltedpassword=AAAA]",
            "You must supply 'salt' with 'saltedpassword' to add-scram",
        ),
        ("SCRAM-SHA-512=[name=a,password=b,iterations=x]", "Failed to parse iterations count: x"),
        (
            "SCRAM-SHA-512=[name=a,password=b,iterations=4000]",
            "The 'iterations' value must be >= 4096 for add-scram using SCRAM-SHA-512",
        ),
        (
            "SCRAM-SHA-256=[name=a,password=b,iterations=16385]",
            "The 'iterations' value must be <= 16384 for add-scram using SCRAM-SHA-256",
        ),
        ("SCRAM-SHA-512=[name=a,password=b,salt=***]", "Failed to decode given salt: ***"),
        ("SCRAM-SHA-512=[name=a,salt=AAAA,saltedpassword=%]", "Failed to decode given saltedPassword: %"),
        ("SCRAM-SHA-512=[name=a,password=b,colour=red]", "Unknown SCRAM configurations: colour"),
        ("SCRAM-SHA-512=[name=a,password]", "No equals sign found in SCRAM component: password"),
        ("SCRAM-SHA-512=[name=a,password=\udcff]", "An --add-scram argument is not valid UTF-8 text."),
        (
            f"SCRAM-SHA-512=[name={'n' * 32768},password=b]",
            "The 'name' given to add-scram is longer than 32767 bytes.",
        ),
    ]:
        proc = kcli(*fmt, "--add-scram", "SCRAM-SHA-256=[name=ok,password=ok]", "--add-scram", argument)
        assert proc.returncode == 2, (argument, proc.stdout, proc.stderr)
        assert proc.stderr == f"kcli: {sentence}\n", proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["server.properties"]

    proc = kcli(
        *fmt,
        "-S",
        "SCRAM-SHA-512=[name=alice,password=alice-secret]",
        "--add-scram",
        f'SCRAM-SHA-256=[name="bob",password=bob-secret,iterations=8192,salt="{salt}"]',
    )
    assert proc.returncode == 0, proc.stderr
    assert "alice-secret" not in proc.stdout
    checkpoint = tmp_path / "metadata" / "bootstrap.checkpoint"
    records = [decode_metadata_record(v) for _, v in read_snapshot(checkpoint.read_bytes()).records]
    scram = {r.data["name"]: r.data for r in records if r.name == "UserScramCredentialRecord"}
    expected = credential_from_password("SCRAM-SHA-256", "bob-secret", 8192, b"fixed-salt")
    assert (
        scram["bob"]["storedKey"] == expected.stored_key and scram["bob"]["serverKey"] == expected.server_key
    )
    assert scram["bob"]["salt"] == b"fixed-salt" and scram["alice"]["iterations"] == 4096
    assert (tmp_path / "logs" / "bootstrap.checkpoint").read_bytes() == checkpoint.read_bytes()
    dumped = kcli("dump-segment", "--cluster-metadata-decoder", str(checkpoint)).stdout
    assert (
        '"type":"USER_SCRAM_CREDENTIAL_RECORD","version":0,"data":{"name":"bob","mechanism":1,"salt":"' + salt
        in dumped
    )

    broker = start_with_config(tmp_path, config)
    try:
        assert described(broker.bootstrap, "alice") == {"SCRAM_SHA_512": 4096}
        assert described(broker.bootstrap, "bob") == {"SCRAM_SHA_256": 8192}
        proc = kcli("configs", "describe", "-b", broker.bootstrap, "--entity-type", "users")
        assert proc.stdout == (
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=4096\n"
            "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192\n"
        )
    finally:
        stop_cleanly(broker)


# --- three nodes ---------------------------------------------------------------------------------------


def test_a_credential_altered_through_any_node_reaches_every_node(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    cluster.start()
    cluster.status()
    nodes = [cluster[i].bootstrap for i in sorted(cluster.nodes)]

    def everywhere(user: str, expected: list[tuple[int, int]] | None) -> None:
        """Until every node describes `user` with (mechanism type, iterations) `expected`, or as unknown."""

        def described_by(bootstrap: str) -> list[tuple[int, int]] | None:
            code, _, infos = raw_describe(bootstrap, [user])[user]
            return infos if code == "none" else None

        wait_for(
            f"{user}'s credentials on every node",
            lambda: all(described_by(bootstrap) == expected for bootstrap in nodes),
            30,
            0.1,
        )

    for k, bootstrap in enumerate(nodes):
        user = f"user-via-{k}"
        client = admin(bootstrap)
        upsert(client, user, SHA512, 4096 + k, "secret")
        everywhere(user, [(2, 4096 + k)])  # the controller is one node: the others forwarded
    # A deletion through another node than the one that wrote it.
    client = admin(nodes[2])
    futures = client.alter_user_scram_credentials([UserScramCredentialDeletion("user-via-0", SHA512)])
    futures["user-via-0"].result(timeout=30)
    everywhere("user-via-0", None)
    # The CLI through one node, describe through another.
    proc = kcli(
        "configs", "alter", "-b", nodes[1], "--entity-type", "users", "--entity-name", "zoe",
        "--add-config", "SCRAM-SHA-256=[iterations=6000,password=zoe-secret]",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    everywhere("zoe", [(1, 6000)])
    proc = kcli("configs", "describe", "-b", nodes[2], "--entity-type", "users", "--entity-name", "zoe")
    assert (
        proc.stdout == "SCRAM credential configs for user-principal 'zoe' are SCRAM-SHA-256=iterations=6000\n"
    )


def test_brokers_of_an_isolated_controller_forward_and_see_credentials(tmp_path: Path) -> None:
    """Kafka's isolated mode (node 1 a controller alone): a broker forwards AlterUserScramCredentials to
    the controller's listener, and every broker answers Describe from its own image."""
    cluster = IsolatedCluster(tmp_path, ())
    try:
        cluster.start()
        proc = kcli(
            "configs", "alter", "-b", cluster.brokers(2), "--entity-type", "users", "--entity-name", "uma",
            "--add-config", "SCRAM-SHA-512=[iterations=4100,password=uma-secret]",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        for node_id in (2, 3, 4):
            wait_for(
                f"uma's credential on broker {node_id}",
                lambda n=node_id: (
                    raw_describe(cluster.brokers(n), ["uma"])["uma"] == ("none", None, [(2, 4100)])
                ),
                30,
                0.1,
            )
        client = admin(cluster.brokers(3))
        futures = client.alter_user_scram_credentials([UserScramCredentialDeletion("uma", SHA512)])
        futures["uma"].result(timeout=30)
        wait_for(
            "uma's credential gone from broker 4",
            lambda: raw_describe(cluster.brokers(4), ["uma"])["uma"][0] == "resource_not_found",
            30,
            0.1,
        )
    finally:
        cluster.kill_all()


# --- beside Apache Kafka ---------------------------------------------------------------------------------


def _caused_by(stderr: str) -> str:
    """The last "Caused by:" line of a Java tool's stack trace (the broker's error and message)."""
    causes = [line for line in stderr.splitlines() if line.startswith("Caused by: ")]
    return causes[-1] if causes else stderr.strip().splitlines()[-1]


def test_kafka_configs_on_kcli_and_kcli_configs_on_kafka(
    shared: BrokerProcess, kafka_node: Any, tmp_path: Path
) -> None:
    """Kafka's ConfigCommand alters credentials on kcli's broker, kcli's on Apache Kafka's, and both
    brokers answer the same requests with the same errors (describing is compared on Kafka's node;
    ConfigCommand --describe on kcli's is in test_client_quotas.py)."""
    import apache_kafka

    def kafka_configs(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
        return apache_kafka.run_tool(
            apache_kafka.CONFIG_COMMAND, ["--bootstrap-server", bootstrap, *args], workdir=tmp_path
        )

    user = ["--entity-type", "users", "--entity-name"]
    on_kcli = kafka_configs(
        shared.bootstrap,
        "--alter",
        *user,
        "ivy",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=ivy-pw]",
    )
    assert on_kcli.returncode == 0, on_kcli.stderr
    assert on_kcli.stdout == "Completed updating config for user ivy.\n"
    assert described(shared.bootstrap, "ivy") == {"SCRAM_SHA_256": 8192}

    proc = kcli(
        "configs", "alter", "-b", kafka_node.bootstrap, *user, "ivy",
        "--add-config", "SCRAM-SHA-512=[iterations=8192,password=ivy-pw]",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    theirs = kafka_configs(kafka_node.bootstrap, "--describe", *user, "ivy")
    assert theirs.returncode == 0, theirs.stderr
    assert (
        theirs.stdout
        == "SCRAM credential configs for user-principal 'ivy' are SCRAM-SHA-512=iterations=8192\n"
    )
    assert kcli("configs", "describe", "-b", kafka_node.bootstrap, *user, "ivy").stdout == theirs.stdout

    # The same refusals from both brokers, as Kafka's tool reports them.
    for args in [
        ("--delete-config", "SCRAM-SHA-256"),
        ("--add-config", "SCRAM-SHA-256=[iterations=20000,password=x]"),
        ("--add-config", "SCRAM-SHA-256=[password=x],SCRAM-SHA-512=[password=x]"),
    ]:
        kafkas = kafka_configs(kafka_node.bootstrap, "--alter", *user, "jack", *args)
        ours = kafka_configs(shared.bootstrap, "--alter", *user, "jack", *args)
        assert (ours.returncode, _caused_by(ours.stderr)) == (kafkas.returncode, _caused_by(kafkas.stderr)), (
            args
        )
        assert kafkas.returncode == 1
    kafkas = kcli(
        "configs", "alter", "-b", kafka_node.bootstrap, *user, "jack", "--delete-config", "SCRAM-SHA-256"
    )
    ours = kcli("configs", "alter", "-b", shared.bootstrap, *user, "jack", "--delete-config", "SCRAM-SHA-256")
    assert (ours.returncode, ours.stderr) == (kafkas.returncode, kafkas.stderr)


def test_storage_format_add_scram_writes_what_kafkas_storage_tool_writes(tmp_path: Path) -> None:
    """The same --add-scram arguments (a given salt, so the keys are the same) give the same bootstrap
    records as Kafka's StorageTool (4.1 writes them to bootstrap.checkpoint, 4.4 to the metadata log's
    0-0 snapshot), kcli's broker starts on Kafka's formatted dir with those users, kafka-dump-log prints
    kcli's file as kcli does, and a bad argument gets Kafka's sentence."""
    require_apache_kafka()
    import apache_kafka

    from kcli.storage import read_bootstrap_metadata

    port = free_port_range(1)
    salt = base64.b64encode(b"fixed-salt").decode()
    arguments = [
        "--add-scram",
        f"SCRAM-SHA-256=[name=bob,password=bob-secret,iterations=8192,salt={salt}]",
        "--add-scram",
        f"SCRAM-SHA-512=[name=alice,password=alice-secret,salt={salt}]",
    ]
    configs = {}
    for who in ("kafka", "kcli"):
        configs[who] = tmp_path / f"{who}.properties"
        configs[who].write_text(
            "process.roles=broker,controller\nnode.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{port}\n"
            f"listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}\n"
            f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path / who}\n"
        )
    cluster_id = "MvDxzVmcRsaTz33bUuRU6A"
    theirs = apache_kafka.run_tool(
        apache_kafka.STORAGE_TOOL,
        ["format", "-c", str(configs["kafka"]), "-t", cluster_id, *arguments],  # both at their defaults
        workdir=tmp_path / "w",
    )
    assert theirs.returncode == 0, theirs.stderr
    ours = kcli("storage", "format", "-c", str(configs["kcli"]), "-t", cluster_id, *arguments)
    assert ours.returncode == 0, ours.stderr
    formatting = [line for line in theirs.stdout.splitlines(keepends=True) if line.startswith("Formatting ")]
    assert ours.stdout == "".join(formatting).replace(str(tmp_path / "kafka"), str(tmp_path / "kcli"))

    def bootstrap_records(who: str) -> list[Any]:
        bootstrap = read_bootstrap_metadata(tmp_path / who)
        assert bootstrap is not None
        return bootstrap.records

    assert bootstrap_records("kcli") == bootstrap_records("kafka")
    assert [r.name for r in bootstrap_records("kcli")].count("UserScramCredentialRecord") == 2

    broker = start_with_config(tmp_path, configs["kafka"])
    try:
        assert described(broker.bootstrap, "bob") == {"SCRAM_SHA_256": 8192}
        assert described(broker.bootstrap, "alice") == {"SCRAM_SHA_512": 4096}
    finally:
        stop_cleanly(broker)

    checkpoint = str(tmp_path / "kcli" / "bootstrap.checkpoint")
    dump_log = apache_kafka.run_tool(
        apache_kafka.DUMP_LOG_SEGMENTS,
        ["--cluster-metadata-decoder", "--files", checkpoint],
        workdir=tmp_path / "w",
    )
    assert dump_log.returncode == 0, dump_log.stderr
    assert kcli("dump-segment", "--cluster-metadata-decoder", checkpoint).stdout == dump_log.stdout

    bad = "SCRAM-SHA-256=[name=bob,password]"
    theirs = apache_kafka.run_tool(
        apache_kafka.STORAGE_TOOL,
        ["format", "-c", str(configs["kafka"]), "-t", cluster_id, "-g", "--add-scram", bad],
        workdir=tmp_path / "w",
    )
    ours = kcli("storage", "format", "-c", str(configs["kcli"]), "-t", cluster_id, "-g", "--add-scram", bad)
    assert (ours.returncode, ours.stderr) == (theirs.returncode + 1, f"kcli: {theirs.stderr}")


# --- the controller's rules and the image, without a broker ----------------------------------------------


def _image(metadata_version: int, records: list[tuple[str, int, dict[str, Any]]]) -> Any:
    from kcli.broker.metadata.image import ClusterMetadataImage, fold

    encoded = [
        ("FeatureLevelRecord", 0, {"name": "metadata.version", "featureLevel": metadata_version}),
        *records,
    ]
    empty = ClusterMetadataImage.empty("cluster", 1, "PLAINTEXT")
    return fold(empty, [decode_metadata_record(encode(*r)) for r in encoded])


def test_scram_needs_metadata_version_3_5_iv2_and_snapshots_keep_it() -> None:
    from kio.schema.alter_user_scram_credentials.v0.request import (
        ScramCredentialDeletion,
        ScramCredentialUpsertion,
    )

    from kcli.broker.metadata.controller.scram_control_manager import ScramControlManager
    from kcli.broker.metadata.image import fold
    from kcli.broker.metadata.image_writer import image_records
    from kcli.features import MV_3_5_IV2
    from kcli.security.scram_credentials import credential_record

    alice = credential_from_password("SCRAM-SHA-512", "alice-secret", 8192)
    image = _image(MV_3_5_IV2, [credential_record("alice", alice)])
    assert image.scram_credential("SCRAM-SHA-512", "alice") == alice
    assert image.scram_credential("SCRAM-SHA-256", "alice") is None
    # A snapshot of the image (image_records) folds back to the same credentials.
    again = fold(
        type(image).empty("cluster", 1, "PLAINTEXT"),
        [decode_metadata_record(encode(*r)) for r in image_records(image)],
    )
    assert dict(again.scram) == dict(image.scram)

    upsertion = ScramCredentialUpsertion(
        name="bob", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p" * 32
    )
    deletion = ScramCredentialDeletion(name="alice", mechanism=2)
    control = ScramControlManager()
    result = control.alter_credentials(image, [deletion], [upsertion])
    assert [name for name, _, _ in result.records] == [
        "RemoveUserScramCredentialRecord",
        "UserScramCredentialRecord",
    ]
    assert all(not r.error.is_failure for r in result.response)

    older = _image(MV_3_5_IV2 - 1, [])
    result = control.alter_credentials(older, [deletion], [upsertion])
    assert result.records == []
    assert {(r.user, r.error.code.name, r.error.message) for r in result.response} == {
        ("alice", "unsupported_version", "The current metadata.version does not support SCRAM"),
        ("bob", "unsupported_version", "The current metadata.version does not support SCRAM"),
    }
    # Below 3.5-IV2 a snapshot has no SCRAM records (Kafka's ScramImage.write reports the loss).
    assert not [
        r
        for r in image_records(_image(MV_3_5_IV2 - 1, [credential_record("alice", alice)]))
        if r[0].startswith("User")
    ]


def test_the_broker_state_looks_credentials_up_in_its_current_image() -> None:
    """BrokerState.scram_credential is what the SASL authenticator is given: each call reads the image
    the metadata publisher installed last, so an altered or deleted credential counts at the next login."""
    from kcli.broker.apis import build_registry
    from kcli.broker.apis.context import BrokerState
    from kcli.broker.metadata.image import topic_changes
    from kcli.config import BrokerConfig
    from kcli.features import MV_3_9_IV0
    from kcli.security.scram_credentials import credential_record

    first = credential_from_password("SCRAM-SHA-256", "one", 4096)
    second = credential_from_password("SCRAM-SHA-256", "two", 8192)
    before = _image(MV_3_9_IV0, [credential_record("kim", first)])
    state = BrokerState(BrokerConfig.load(overrides=[]), build_registry(), before)
    lookup = state.scram_credential  # the callable handed to the authenticator, taken once
    assert lookup("SCRAM-SHA-256", "kim") == first
    assert lookup("SCRAM-SHA-512", "kim") is None and lookup("SCRAM-SHA-256", "lee") is None
    after = _image(MV_3_9_IV0, [credential_record("kim", second)])
    state.on_metadata_update(topic_changes(before, after), before, after)
    assert lookup("SCRAM-SHA-256", "kim") == second
    removed = _image(
        MV_3_9_IV0,
        [
            credential_record("kim", second),
            ("RemoveUserScramCredentialRecord", 0, {"name": "kim", "mechanism": 1}),
        ],
    )
    state.on_metadata_update(topic_changes(after, removed), after, removed)
    assert lookup("SCRAM-SHA-256", "kim") is None
