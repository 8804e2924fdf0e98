"""ACLs with the StandardAuthorizer (KIP-801) end to end: a real SASL_PLAINTEXT `kcli broker start`
with authorizer.class.name set and super.users=User:admin;User:ANONYMOUS (ANONYMOUS: the principal on the
PLAINTEXT controller listener, which needs CLUSTER_ACTION as in Kafka), stock clients, Kafka's kafka-acls.sh.

A producer allowed WRITE on its topic writes there and gets TOPIC_AUTHORIZATION_FAILED elsewhere; a
consumer with READ on its topic and group reads; a transactional producer needs WRITE on its
transactional id; ACLs written by `kcli acls add` (CreateAcls, forwarded to the controller, replayed
from the metadata log) survive a restart; kafka-acls.sh and `kcli acls list` see the same ACLs. Without
an authorizer the ACL APIs answer SECURITY_DISABLED.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from conftest import (
    KCLI,
    BrokerProcess,
    free_port_range,
    kcli_env,
    require_apache_kafka,
    start_with_config,
    stop_cleanly,
)

pytestmark = pytest.mark.timeout(120)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
"""kafka-acls.sh's main class (in kafka-tools since Kafka 4.0)."""
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def properties(workdir: Path) -> Path:
    port = free_port_range(1)
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    path = workdir / "server.properties"
    path.write_text(
        f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{port}
controller.listener.names=CONTROLLER
listeners=SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={workdir / "data"}
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_MODULE} required username="admin" password="admin-secret" {users};
authorizer.class.name={AUTHORIZER}
super.users=User:admin;User:ANONYMOUS
"""
    )
    return path


def kcli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def client_config(server: BrokerProcess, user: str) -> dict[str, str]:
    return {
        "bootstrap.servers": server.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


def command_config(workdir: Path, server: BrokerProcess, user: str = "admin") -> Path:
    """Client properties Kafka's tools and kcli both read."""
    path = workdir / f"{user}.properties"
    path.write_text(
        f"""bootstrap.servers={server.bootstrap}
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config={PLAIN_MODULE} required username="{user}" password="{PASSWORDS[user]}";
"""
    )
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("acls")


@pytest.fixture(scope="module")
def server(workdir: Path) -> Iterator[BrokerProcess]:
    config = properties(workdir)
    cluster_id = kcli("storage", "random-uuid").stdout.strip()
    kcli("storage", "format", "-c", str(config), "-t", cluster_id)
    process = start_with_config(workdir, config)
    try:
        yield process
    finally:
        if process.is_running():
            stop_cleanly(process)


def acls_add(workdir: Path, server: BrokerProcess, *args: str) -> str:
    return kcli("acls", "add", "--command-config", str(command_config(workdir, server)), *args).stdout


def create_topics(server: BrokerProcess, *names: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = AdminClient(client_config(server, "admin"))
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=30)


def produce(server: BrokerProcess, user: str, topic: str, **extra: str) -> KafkaError | None:
    """One message; the delivery error, or None."""
    errors: list[KafkaError | None] = []
    producer = Producer({**client_config(server, user), "message.timeout.ms": "10000", **extra})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def test_producer_writes_only_where_allowed(workdir: Path, server: BrokerProcess) -> None:
    create_topics(server, "alice-topic", "other-topic")
    out = acls_add(
        workdir, server, "--allow-principal", "User:alice", "--operation", "Write", "--topic", "alice-topic"
    )
    assert (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=alice-topic, patternType=LITERAL)`"
        in out
    )
    assert produce(server, "alice", "alice-topic") is None
    error = produce(server, "alice", "other-topic")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    assert (
        "Principal = User:alice is Denied operation = DESCRIBE from host = 127.0.0.1 on resource = Topic:LITERAL:other-topic"
        in server.log()
    )


def test_consumer_needs_read_on_topic_and_group(workdir: Path, server: BrokerProcess) -> None:
    create_topics(server, "bob-topic")
    assert produce(server, "admin", "bob-topic") is None
    acls_add(
        workdir,
        server,
        "--allow-principal",
        "User:bob",
        "--consumer",
        "--topic",
        "bob-topic",
        "--group",
        "bob-group",
    )
    consumer = Consumer(
        {**client_config(server, "bob"), "group.id": "bob-group", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe(["bob-topic"])
        message = None
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None:
                break
        assert message is not None and message.error() is None, message and message.error()
        assert message.value() == b"v"
    finally:
        consumer.close()


def test_transactional_producer_needs_its_transactional_id(workdir: Path, server: BrokerProcess) -> None:
    create_topics(server, "carol-topic")
    acls_add(
        workdir, server, "--allow-principal", "User:carol", "--operation", "Write", "--topic", "carol-topic"
    )
    refused = Producer({**client_config(server, "carol"), "transactional.id": "carol-other"})
    with pytest.raises(KafkaException) as failure:
        refused.init_transactions(15)
    assert failure.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    acls_add(workdir, server, "--allow-principal", "User:carol", "--producer", "--topic", "carol-topic",
             "--transactional-id", "carol-tx")  # fmt: skip
    producer = Producer({**client_config(server, "carol"), "transactional.id": "carol-tx"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("carol-topic", b"in a transaction")
    producer.commit_transaction(15)


def test_kafka_acls_and_kcli_list_agree(workdir: Path, server: BrokerProcess) -> None:
    require_apache_kafka()
    import apache_kafka

    config = command_config(workdir, server)
    added = apache_kafka.run_tool(
        ACL_COMMAND,
        ["--bootstrap-server", server.bootstrap, "--command-config", str(config), "--add",
         "--allow-principal", "User:dave", "--operation", "Read", "--topic", "dave-",
         "--resource-pattern-type", "prefixed"],
        workdir=workdir / "kafka-acls",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed = apache_kafka.run_tool(
        ACL_COMMAND,
        ["--bootstrap-server", server.bootstrap, "--command-config", str(config), "--list"],
        workdir=workdir / "kafka-acls",
    )
    assert listed.returncode == 0, listed.stderr
    ours = kcli("acls", "list", "--command-config", str(config)).stdout
    assert "ResourcePattern(resourceType=TOPIC, name=dave-, patternType=PREFIXED)" in listed.stdout
    assert "(principal=User:dave, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
    assert _lines(ours) == _lines(listed.stdout)  # each resource's entries come in its own order
    checked = kcli("acls", "check", "--command-config", str(config), "--principal", "User:dave",
                   "--operation", "Describe", "--topic", "dave-events")  # fmt: skip
    assert "User:dave ALLOWED DESCRIBE on TOPIC dave-events" in checked.stdout
    denied = kcli("acls", "check", "--command-config", str(config), "--principal", "User:dave",
                  "--operation", "Write", "--topic", "dave-events", check=False)  # fmt: skip
    assert denied.returncode == 1 and "DENIED" in denied.stdout
    kcli("acls", "remove", "--command-config", str(config), "--force", "--allow-principal", "User:dave",
         "--operation", "Read", "--topic", "dave-", "--resource-pattern-type", "prefixed")  # fmt: skip
    assert "User:dave" not in kcli("acls", "list", "--command-config", str(config)).stdout


def test_bad_input_is_one_sentence(workdir: Path, server: BrokerProcess) -> None:
    config = str(command_config(workdir, server))
    for args, sentence in (
        (
            ["--allow-principal", "User:x", "--operation", "Bogus", "--topic", "t"],
            "--operation 'Bogus' is not one of",
        ),
        (["--allow-principal", "x", "--topic", "t"], "Invalid principal 'x'"),
        (
            ["--allow-principal", "User:x", "--operation", "Read", "--cluster"],
            "ResourceType CLUSTER only supports",
        ),
        (
            ["--allow-principal", "User:x", "--topic", "t", "--resource-pattern-type", "match"],
            "is not valid when adding",
        ),
    ):
        done = kcli("acls", "add", "--command-config", config, *args, check=False)
        assert done.returncode != 0 and done.stderr.count("\n") == 1 and sentence in done.stderr, done.stderr
    assert server.is_running()


def _lines(text: str) -> list[str]:
    return sorted(line.strip() for line in text.splitlines() if line.strip())


def test_ordinary_user_cannot_change_acls(workdir: Path, server: BrokerProcess) -> None:
    done = kcli("acls", "add", "--command-config", str(command_config(workdir, server, "alice")),
                "--allow-principal", "User:alice", "--operation", "All", "--topic", "*", check=False)  # fmt: skip
    assert done.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr


def test_group_and_topic_admin_checks(workdir: Path, server: BrokerProcess) -> None:
    """READ on the group for a consumer (GROUP_AUTHORIZATION_FAILED otherwise); CREATE and DELETE on
    topics for CreateTopics and DeleteTopics, ALTER for CreatePartitions (TOPIC_AUTHORIZATION_FAILED otherwise)."""
    from confluent_kafka.admin import NewPartitions, NewTopic

    consumer = Consumer(
        {**client_config(server, "bob"), "group.id": "not-bobs", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe(["bob-topic"])
        error = None
        for _ in range(20):
            message = consumer.poll(1)
            if message is not None and message.error() is not None:
                error = message.error()
                break
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        consumer.close()
    alice = AdminClient(client_config(server, "alice"))
    with pytest.raises(KafkaException) as failure:
        alice.create_topics([NewTopic("alice-new", 1, 1)])["alice-new"].result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as failure:
        alice.delete_topics(["alice-topic"])["alice-topic"].result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls_add(workdir, server, "--allow-principal", "User:alice", "--operation", "Create", "--operation", "Delete",
             "--topic", "alice-", "--resource-pattern-type", "prefixed")  # fmt: skip
    alice.create_topics([NewTopic("alice-new", 1, 1)])["alice-new"].result(timeout=30)
    alice.delete_topics(["alice-new"])["alice-new"].result(timeout=30)
    with pytest.raises(KafkaException) as failure:
        alice.create_partitions([NewPartitions("other-topic", 2)])["other-topic"].result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    bob = AdminClient(client_config(server, "bob"))  # bob may DESCRIBE bob-topic, not DELETE in it
    with pytest.raises(KafkaException) as failure:  # DeleteRecords needs DELETE on the topic
        for future in bob.delete_records([TopicPartition("bob-topic", 0, 0)]).values():
            future.result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_configs_need_describe_and_alter_configs(workdir: Path, server: BrokerProcess) -> None:
    """DescribeConfigs and IncrementalAlterConfigs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic (ALTER_CONFIGS
    implies DESCRIBE_CONFIGS), on the cluster for a broker's configs."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    alice = AdminClient(client_config(server, "alice"))
    topic = ConfigResource(ConfigResource.Type.TOPIC, "alice-topic")
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    for resource, code in (
        (topic, KafkaError.TOPIC_AUTHORIZATION_FAILED),
        (broker, KafkaError.CLUSTER_AUTHORIZATION_FAILED),
    ):
        with pytest.raises(KafkaException) as failure:
            alice.describe_configs([resource])[resource].result(timeout=30)
        assert failure.value.args[0].code() == code
    acls_add(
        workdir,
        server,
        "--allow-principal",
        "User:alice",
        "--operation",
        "AlterConfigs",
        "--topic",
        "alice-topic",
    )
    described = alice.describe_configs([topic])[topic].result(timeout=30)
    assert "retention.ms" in described
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    altered = ConfigResource(ConfigResource.Type.TOPIC, "alice-topic", incremental_configs=[entry])
    alice.incremental_alter_configs([altered])[altered].result(timeout=30)
    denied = ConfigResource(ConfigResource.Type.TOPIC, "other-topic", incremental_configs=[entry])
    with pytest.raises(KafkaException) as failure:
        alice.incremental_alter_configs([denied])[denied].result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acls_survive_a_restart(workdir: Path, server: BrokerProcess) -> None:
    config = command_config(workdir, server)
    before = kcli("acls", "list", "--command-config", str(config), "--output", "json").stdout
    assert '"principal":"User:alice"' in before
    stop_cleanly(server)
    restarted = start_with_config(workdir, workdir / "server.properties")
    try:
        after = kcli(
            "acls", "list", "--command-config", str(command_config(workdir, restarted)), "--output", "json"
        )
        assert sorted(after.stdout.splitlines()) == sorted(before.splitlines())
        assert produce(restarted, "alice", "alice-topic") is None
    finally:
        stop_cleanly(restarted)


def test_security_disabled_without_an_authorizer(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    binding = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.LITERAL,
        "User:a",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as failure:
        for future in admin.create_acls([binding]).values():
            future.result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.SECURITY_DISABLED
    done = kcli("acls", "list", "--bootstrap-server", broker.bootstrap, check=False)  # DescribeAcls
    assert done.returncode != 0
    assert done.stderr == "kcli: Could not describe ACLs: SECURITY_DISABLED (No Authorizer is configured.).\n"


def test_acl_records_fold_and_snapshot_and_match_as_kafka() -> None:
    """The controller's records fold into the image, a snapshot of it folds back the same, and the
    StandardAuthorizer decides over it as Kafka's StandardAuthorizerData: DENY wins, implied DESCRIBE,
    prefixed and wildcard patterns, hosts, super users, the no-ACL default."""
    from formats.internal import decode_metadata_record
    from formats.internal import encode_metadata_record as encode
    from kcli.broker.metadata.controller.acl_control_manager import AclControlManager
    from kcli.broker.metadata.image import ClusterMetadataImage, fold
    from kcli.broker.metadata.image_writer import image_records
    from kcli.security.acl import AclBindingFilter, PatternType, StandardAcl
    from kcli.security.acl import AclOperation as Op
    from kcli.security.acl import AclPermissionType as Perm
    from kcli.security.acl import ResourceType as Res
    from kcli.security.authorizer import StandardAuthorizer

    def acl(
        name: str, pattern: PatternType, principal: str, op: Op, perm: Perm, host: str = "*"
    ) -> StandardAcl:
        return StandardAcl(Res.TOPIC, name, pattern, principal, host, op, perm)

    acls = [
        acl("orders", PatternType.LITERAL, "User:a", Op.WRITE, Perm.ALLOW),
        acl("ord", PatternType.PREFIXED, "User:a", Op.READ, Perm.ALLOW),
        acl("orders-secret", PatternType.LITERAL, "User:a", Op.READ, Perm.DENY),
        acl("*", PatternType.LITERAL, "User:*", Op.DESCRIBE, Perm.ALLOW, host="10.0.0.1"),
        acl("", PatternType.LITERAL, "User:a", Op.READ, Perm.ALLOW),  # INVALID_REQUEST: no name
    ]
    empty = ClusterMetadataImage.empty("cluster", 1, "PLAINTEXT")
    created = AclControlManager().create_acls(empty, acls)
    assert [e.message for e in created.response] == [None] * 4 + ["Resource name should not be empty"]
    image = fold(empty, [decode_metadata_record(encode(*r)) for r in created.records])
    again = fold(empty, [decode_metadata_record(encode(*r)) for r in image_records(image)])
    assert dict(again.acls) == dict(image.acls) and len(image.acls) == 4
    assert AclControlManager().create_acls(image, acls[:1]).records == []  # an existing ACL is kept once

    authorizer = StandardAuthorizer("User:root")
    acls_of = image.acls

    def allowed(principal: str, op: Op, name: str, host: str = "127.0.0.1") -> bool:
        return authorizer.decide(acls_of, principal, host, op, Res.TOPIC, name).allowed

    assert allowed("User:a", Op.WRITE, "orders") and not allowed("User:a", Op.WRITE, "orders-2")
    assert allowed("User:a", Op.DESCRIBE, "orders")  # implied by WRITE
    assert allowed("User:a", Op.READ, "orders-2") and not allowed("User:a", Op.READ, "orders-secret")
    assert allowed("User:b", Op.DESCRIBE, "anything", host="10.0.0.1")
    assert not allowed("User:b", Op.DESCRIBE, "anything")
    assert allowed("User:root", Op.DELETE, "anything")
    assert not allowed("User:b", Op.READ, "nothing-here")
    assert StandardAuthorizer(allow_if_no_acl=True).decide({}, "User:b", "h", Op.READ, Res.TOPIC, "t").allowed

    deleted = AclControlManager().delete_acls(
        image, [AclBindingFilter(Res.TOPIC, "orders-2", PatternType.MATCH)]
    )
    assert sorted(a.resource_name for a in deleted.response[0].deleted) == ["*", "ord"]
    after = fold(image, [decode_metadata_record(encode(*r)) for r in deleted.records])
    assert len(after.acls) == 2


def test_indexed_decisions_equal_a_scan_of_every_acl() -> None:
    """The authorizer finds ACLs through its literal and prefix index and remembers its decisions; each
    decision equals one made by reading every ACL of the type (Kafka's rules, written out plainly)."""
    import random

    from kcli.security.acl import AclOperation as Op
    from kcli.security.acl import AclPermissionType as Perm
    from kcli.security.acl import PatternType, StandardAcl
    from kcli.security.acl import ResourceType as Res
    from kcli.security.authorizer import StandardAuthorizer, find_result

    rng = random.Random(20261202)
    names = ["a", "ab", "abc", "abd", "b", "ba", "*"]
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER]
    acls = {
        i: StandardAcl(
            Res.TOPIC,
            rng.choice(names),
            rng.choice([PatternType.LITERAL, PatternType.PREFIXED]),
            rng.choice(["User:x", "User:y", "User:*"]),
            rng.choice(["*", "10.0.0.1"]),
            rng.choice(ops),
            rng.choice([Perm.ALLOW, Perm.ALLOW, Perm.DENY]),
        )
        for i in range(60)
    }

    def scan(principal: str, host: str, op: Op, name: str) -> bool:
        covering = [
            a
            for a in acls.values()
            if (a.pattern_type == PatternType.LITERAL and a.resource_name in (name, "*"))
            or (a.pattern_type == PatternType.PREFIXED and name.startswith(a.resource_name))
        ]
        results = [find_result(op, principal, host, a) for a in covering]
        if False in results:
            return False
        return True in results  # no ACL at all: allow.everyone.if.no.acl.found, false here

    authorizer = StandardAuthorizer()
    checked = 0
    for _ in range(2):  # the second round is answered from the remembered decisions
        for name in ["a", "ab", "abc", "abcd", "b", "bab", "c", "*"]:
            for principal in ["User:x", "User:y", "User:z"]:
                for host in ["10.0.0.1", "10.0.0.2"]:
                    for op in [Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE]:
                        decided = authorizer.decide(acls, principal, host, op, Res.TOPIC, name).allowed
                        assert decided == scan(principal, host, op, name), (principal, host, op, name)
                        checked += 1
    assert checked == 2 * 8 * 3 * 2 * 4
