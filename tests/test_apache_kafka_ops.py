"""kcli's operations against a three-node Apache Kafka 4.1 cluster (the session fixture `kafka_cluster`),
side by side with Kafka's own tool on the same cluster: consumer groups (describe, --members, --state,
reset-offsets; ten librdkafka members of the consumer protocol that join, leave and are killed -9, as
test_consumer_group_clients runs them on kcli's nodes), reassignments and their throttles both ways,
features, the quorum and `cluster status`, `replay` of a fixture partition into Kafka, and last, because
it stops nodes: an unclean election on a partition whose ISR is gone, `recover partitions`' predicted
loss against what Kafka really loses, and preferred elections, with kcli's `elect` and Kafka's
LeaderElectionCommand on twin partitions.

Every test uses names of its own; each runs Kafka's tools (a JVM of about a second) side by side with
kcli's where they are independent. Values that change between two reads of a live cluster (the metadata
log's end, fetch times, feature epochs) are masked, nothing else.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import apache_kafka
import pytest
from apache_kafka import (
    CONFIG_COMMAND,
    CONSUMER_GROUP_COMMAND,
    DUMP_LOG_SEGMENTS,
    FEATURE_COMMAND,
    METADATA_QUORUM_COMMAND,
    KafkaCluster,
    KafkaNode,
)
from cli_in_process import run_kcli
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import REPO
from test_apache_kafka import in_parallel, kafka, kcli, mask
from test_consumer_group_clients import (
    BROKER_SETTINGS,
    java_ten_members_join_leave_and_are_killed,
    member,
    ten_members_join_leave_and_are_killed,
)
from waiting import wait_for

from formats.checkpoints import read_partition_metadata
from kcli.broker.group.metadata_hash import group_hash, topic_hash_of

pytestmark = pytest.mark.timeout(600)

REASSIGN_COMMAND = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION_COMMAND = "org.apache.kafka.tools.LeaderElectionCommand"


def kafka_run(workdir: Path, main_class: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One of Kafka's tools, whatever its exit status."""
    return apache_kafka.run_tool(main_class, args, workdir=workdir)


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """{partition: (leader, replicas, isr)} as `kcli topics describe` prints them (-1: no leader)."""
    return {p: state for (t, p), state in every_partition(bootstrap, topic).items() if t == topic}


def every_partition(bootstrap: str, pattern: str) -> dict[tuple[str, int], tuple[int, list[int], list[int]]]:
    """{(topic, partition): (leader, replicas, isr)} of the topics `pattern` matches."""
    text = run_kcli("topics", "describe", "-b", bootstrap, "-t", pattern).stdout
    found = {}
    for line in text.splitlines():
        cells = dict(re.findall(r"(\w+): ([^\t]*)", line))
        if "Partition" not in cells:
            continue  # a topic's own line
        ids = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
        leader = -1 if cells["Leader"] == "none" else int(cells["Leader"])
        found[cells["Topic"], int(cells["Partition"])] = (leader, ids(cells["Replicas"]), ids(cells["Isr"]))
    return found


def produce_to(
    bootstrap: str, topic: str, per_partition: dict[int, int], prefix: str = "v", acks: str = "1"
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, key=f"k{i}", value=f"{prefix}-{partition}-{i}", partition=partition)
    assert producer.flush(30) == 0


# --- consumer groups --------------------------------------------------------------------------------


def test_groups_describe_and_reset_offsets_equal_kafka_consumer_groups(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """With a live member and again once it left: `kcli groups describe` (offsets, --members, --state)
    prints kafka-consumer-groups.sh --describe's stdout and stderr byte for byte (its rows in its
    order, over twelve partitions), and `groups reset-offsets` its plan, dry run and --execute."""
    b, topic, group = kafka_cluster.bootstrap, "ops-groups", "ops-group"
    kcli("topics", "create", "-b", b, "-t", topic, "--partitions", "12", "--replication-factor", "3")
    produce_to(b, topic, {p: 3 + p % 4 for p in range(12)})
    member = Consumer(
        {"bootstrap.servers": b, "group.id": group, "enable.auto.commit": False, "client.id": "ops-client"}
    )
    member.subscribe([topic])
    wait_for("an assignment", lambda: (member.poll(0.2), len(member.assignment()) == 12)[1], 30)
    # Commits on ten partitions (none on 10 and 11), some of them behind the log end.
    member.commit(offsets=[TopicPartition(topic, p, p % 3) for p in range(10)], asynchronous=False)

    def describe_both(*flags: str) -> tuple[subprocess.CompletedProcess[str], ...]:
        calls = [
            lambda f=f: run_kcli("groups", "describe", "-b", b, group, *f) for f in ((), ("--members",), ("--state",))
        ] + [
            lambda f=f: kafka_run(tmp_path, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--describe", "--group", group, *f)
            for f in ((), ("--members",), ("--state",))
        ]  # fmt: skip
        return tuple(in_parallel(*calls))

    try:
        ours = describe_both()
    finally:
        member.close()
    for kcli_result, kafka_result in zip(ours[:3], ours[3:], strict=True):
        assert kcli_result.returncode == kafka_result.returncode == 0, (
            kcli_result.stderr + kafka_result.stderr
        )
        assert kcli_result.stdout == kafka_result.stdout
        assert kcli_result.stderr == kafka_result.stderr == ""  # Stable: no note
    rows = [line.split() for line in ours[0].stdout.splitlines()[2:]]
    assert len(rows) == 12 and {r[-1] for r in rows} == {"ops-client"}
    assert {(r[2], r[3], r[5]) for r in rows if r[2] in ("10", "11")} == {("10", "-", "-"), ("11", "-", "-")}
    assert ours[1].stdout.splitlines()[2].split()[-2:] == ["ops-client", "12"]
    assert ours[2].stdout.splitlines()[2].split()[-2:] == ["Stable", "1"]

    # The member left: Empty. A dry run, then each tool's --execute of the same reset.
    scope = ("--topic", topic)
    dry, their_dry = in_parallel(
        lambda: run_kcli("groups", "reset-offsets", "-b", b, group, "--to-earliest", "--dry-run", *scope),
        lambda: kafka_run(tmp_path, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--reset-offsets",
                          "--group", group, "--to-earliest", "--dry-run", *scope),
    )  # fmt: skip
    assert dry.returncode == their_dry.returncode == 0, dry.stderr + their_dry.stderr
    assert dry.stdout == their_dry.stdout and dry.stderr == their_dry.stderr == ""
    assert len(dry.stdout.splitlines()) == 2 + 12  # every partition of the topic, as Kafka with --topic
    executed = run_kcli("groups", "reset-offsets", "-b", b, group, "--to-offset", "2", "--execute", *scope)
    their_executed = kafka_run(tmp_path, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--reset-offsets",
                               "--group", group, "--shift-by", "0", "--execute", *scope)  # fmt: skip
    assert executed.returncode == their_executed.returncode == 0, executed.stderr + their_executed.stderr
    assert executed.stdout == their_executed.stdout  # shift by 0 after kcli's reset: the same offsets
    assert {line.split()[-1] for line in executed.stdout.splitlines()[2:]} == {"2"}

    after = describe_both()
    for kcli_result, kafka_result in zip(after[:3], after[3:], strict=True):
        assert kcli_result.stdout == kafka_result.stdout
        assert (
            kcli_result.stderr
            == kafka_result.stderr
            == f"\nConsumer group '{group}' has no active members.\n"
        )
    assert {tuple(line.split()[3:6]) for line in after[0].stdout.splitlines()[2:]} == {
        ("2", str(3 + p % 4), str(1 + p % 4)) for p in range(12)
    }
    assert after[2].stdout.splitlines()[2].split()[-2:] == ["Empty", "0"]


@pytest.mark.timeout(120)
def test_librdkafka_ten_members_join_leave_and_are_killed_on_kafka(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """test_consumer_group_clients' ten librdkafka members (group.protocol=consumer, each a process of
    tests/group_member.py committing every 100 ms, on revocation and before it closes) on Kafka's three
    nodes, with the session timeout and heartbeat interval of kcli's nodes there (conftest's
    KAFKA_CLUSTER_PROPERTIES): they share a 20-partition topic of replication factor 3 while 20,000 keyed
    records are produced with acks=all, two leave and two are killed -9, the six others finish the topic.
    The same rule holds: every record read at least once, none committed twice, a record read twice only
    after a killed member's last confirmed commit of its partition. `kcli groups describe` of the six
    survivors' group (partitions, and members --verbose) equals kafka-consumer-groups.sh --describe's."""
    configured = (kafka_cluster.nodes[0].workdir / "server.properties").read_text().splitlines()
    assert set(BROKER_SETTINGS) <= set(configured), configured
    ten_members_join_leave_and_are_killed(
        kafka_cluster.bootstrap,
        tmp_path,
        "ops-ten-members",
        lambda: {node.node_id: node.log() for node in kafka_cluster.nodes},
        kcli_nodes=False,
        kafka_tool=True,
    )


@pytest.mark.timeout(120)
def test_java_ten_members_join_leave_and_are_killed_on_kafka(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """test_consumer_group_clients' ten Java consumers (kafka-clients 4.1.2, group.protocol=consumer, in
    three JVMs: two join mid-stream and leave, two are killed -9, six stay) on Kafka's three nodes with
    the same client settings and kcli's session timeout and heartbeat interval: the same rule holds there
    as on kcli's nodes."""
    java_ten_members_join_leave_and_are_killed(
        kafka_cluster.bootstrap,
        tmp_path,
        "ops-ten-java",
        lambda: {node.node_id: node.log() for node in kafka_cluster.nodes},
        kcli_nodes=False,
    )


def test_kafka_keeps_the_metadata_hash_kcli_computes(kafka_cluster: KafkaCluster) -> None:
    """Kafka 4.1 keeps a hash of a consumer group's subscribed topics in the group's epoch record
    (KIP-1101, the tagged MetadataHash) and writes no subscription-metadata record (type 4): the hash
    kcli computes from the topic Kafka made (its id, name and partitions; these nodes have no rack) is
    the one in Kafka's __consumer_offsets (every replica of it), read with `kcli dump-segment
    --offsets-decoder`."""
    topic, group = f"hash-{time.monotonic_ns()}", "ops-metadata-hash"
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    consumer = member(kafka_cluster.bootstrap, group, topic, "hashed")
    try:
        wait_for(
            "the member holding the topic", lambda: consumer.poll(0.1) or len(consumer.assignment()) == 3, 60
        )
    finally:
        consumer.close()
    segments = [
        str(p) for node in kafka_cluster.nodes for p in node.log_dir.glob("__consumer_offsets-*/*.log")
    ]
    dumped = kcli("dump-segment", "--offsets-decoder", *segments)
    lines = [line for line in dumped.splitlines() if f'"groupId":"{group}"' in line and "payload: {" in line]
    epochs = [json.loads(line.split("payload: ", 1)[1])["data"] for line in lines if '"type":"3"' in line]
    assert not [line for line in lines if '"type":"4"' in line]
    metadata = (kafka_cluster.nodes[0].log_dir / f"{topic}-0" / "partition.metadata").read_text()
    expected = group_hash({topic: topic_hash_of(read_partition_metadata(metadata).topic_id, topic, [[]] * 3)})
    # every hash Kafka wrote while the member held the topic is kcli's (one written before its coordinator
    # saw the new topic has none, the one after the member left is 0: both omit the tagged field)
    assert {e["metadataHash"] for e in epochs if "metadataHash" in e} == {expected}, epochs


# --- reassignments ----------------------------------------------------------------------------------


def plan_file(path: Path, topic: str, replicas: dict[int, list[int]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for p, r in replicas.items()
    ]}))  # fmt: skip
    return path


def throttle_configs(b: str, topic: str) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """(the topic's dynamic configs, each broker's) as `kcli configs describe` prints them."""

    def parse(text: str) -> dict[str, str]:
        return dict(line.split()[0].split("=", 1) for line in text.splitlines()[1:])

    texts = in_parallel(
        lambda: kcli("configs", "describe", "-b", b, "--topic", topic),
        *(lambda n=n: kcli("configs", "describe", "-b", b, "--broker", str(n)) for n in (1, 2, 3)),
    )
    return parse(texts[0]), {n: parse(t) for n, t in zip((1, 2, 3), texts[1:], strict=True)}


def expected_throttles(
    before: dict[int, list[int]], after: dict[int, list[int]], rate: int
) -> tuple[dict, dict]:
    """What kafka-reassign-partitions.sh --execute --throttle sets: leader throttles on every current
    replica, follower throttles on the replicas being added, leader and follower rates on every broker
    that takes part (all three here)."""
    leader = ",".join(f"{p}:{r}" for p in sorted(before) for r in sorted(before[p]))
    follower = ",".join(f"{p}:{r}" for p in sorted(after) for r in sorted(set(after[p]) - set(before[p])))
    rates = {"leader.replication.throttled.rate": str(rate), "follower.replication.throttled.rate": str(rate)}
    topic = {
        "leader.replication.throttled.replicas": leader,
        "follower.replication.throttled.replicas": follower,
    }
    return topic, {n: rates for n in (1, 2, 3)}


def test_groups_describe_verbose_equals_kafka_consumer_groups_for_both_protocols(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """Two consumer-protocol members (KIP-848, librdkafka's group.protocol=consumer) on two topics and a
    classic member: `kcli groups describe --state --verbose` of the consumer group, and `--members
    --verbose` / `--state --verbose` of the classic one ('-' for its epochs), print what Kafka 4.1's
    kafka-consumer-groups.sh prints, once the consumer group is reconciled. (The consumer group's
    `--members --verbose` is compared on Kafka and on kcli by the ten-member scenario.)"""
    b = kafka_cluster.bootstrap
    topics = {"verbose-a": 3, "verbose-b": 2}
    for topic, count in topics.items():
        kcli(
            "topics", "create", "-b", b, "-t", topic, "--partitions", str(count), "--replication-factor", "3"
        )
    new_group, old_group = "verbose-new", "verbose-old"
    members = [
        Consumer(
            {
                "bootstrap.servers": b,
                "group.id": new_group,
                "group.protocol": "consumer",
                "client.id": f"new-{i}",
            }
        )  # fmt: skip
        for i in range(2)
    ] + [Consumer({"bootstrap.servers": b, "group.id": old_group, "client.id": "old-0"})]
    members[0].subscribe(list(topics))
    members[1].subscribe(list(topics))
    members[2].subscribe([next(iter(topics))])

    def reconciled() -> bool:
        for m in members:
            m.poll(0.1)
        done = run_kcli("groups", "describe", "-b", b, new_group, "-o", "json")
        if done.returncode != 0:
            return False
        group = json.loads(done.stdout)
        return (
            group["state"] == "Stable"
            and len(group["members"]) == 2
            and all(m["assignment"] and m["assignment"] == m["target_assignment"] for m in group["members"])
            and all(m["member_epoch"] == group["target_assignment_epoch"] for m in group["members"])
            and len(members[2].assignment()) == 3
        )

    try:
        wait_for("a reconciled consumer group and a stable classic one", reconciled, 60)
        views = [
            (new_group, "--state", "--verbose"),
            (old_group, "--members", "--verbose"),
            (old_group, "--state", "--verbose"),
        ]
        results = in_parallel(
            *(lambda v=v: run_kcli("groups", "describe", "-b", b, v[0], *v[1:]) for v in views),
            *(
                lambda v=v: kafka_run(
                    tmp_path,
                    CONSUMER_GROUP_COMMAND,
                    "--bootstrap-server",
                    b,
                    "--describe",
                    "--group",
                    v[0],
                    *v[1:],
                )
                for v in views
            ),  # fmt: skip
        )
    finally:
        for m in members:
            m.close()
    for view, ours, theirs in zip(views, results[: len(views)], results[len(views) :], strict=True):
        assert ours.returncode == theirs.returncode == 0, (view, ours.stderr, theirs.stderr)
        assert ours.stdout == theirs.stdout, (view, ours.stdout, theirs.stdout)
    state = results[0].stdout.splitlines()
    assert state[1].split()[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"], state
    assert state[2].split()[-3] == state[2].split()[-2] != "-" and state[2].split()[-1] == "2", state
    classic_row = results[1].stdout.splitlines()[2].split()
    assert classic_row[-4:] == ["-", "verbose-a:0,1,2", "-", "-"], classic_row
    assert results[2].stdout.splitlines()[2].split()[-3:] == ["-", "-", "1"]


def test_reassign_kcli_executes_kafka_verifies_and_back(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """`kcli reassign execute --no-wait --throttle` prints Kafka's --execute lines and sets Kafka's
    throttles, which kafka-reassign-partitions.sh --verify confirms and clears; the rollback the other
    way round: Kafka's --execute, `kcli reassign verify` confirms and clears (checked with kcli configs
    and Kafka's ConfigCommand)."""
    b, topic = kafka_cluster.bootstrap, "ops-reassign"
    kcli("topics", "create", "-b", b, "-t", topic, "--replica-assignment", "1:2,2:3")
    produce_to(b, topic, {0: 20, 1: 20})
    original = {0: [1, 2], 1: [2, 3]}
    moved = {0: [3, 1], 1: [1, 3]}
    plan, rollback = plan_file(tmp_path / "plan.json", topic, moved), tmp_path / "rollback.json"

    started = run_kcli("reassign", "execute", "-b", b, "--reassignment-json-file", str(plan),
                       "--throttle", "50000000", "--no-wait", "--rollback-file", str(rollback))  # fmt: skip
    assert started.returncode == 0, started.stderr
    current = json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any", "any"]} for p, r in original.items()
    ]}, separators=(",", ":"))  # fmt: skip
    execute_lines = [
        "Current partition replica assignment", "", current, "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed.",
        "The inter-broker throttle limit was set to 50000000 B/s",
        f"Successfully started partition reassignments for {topic}-0,{topic}-1",
    ]  # fmt: skip
    assert started.stdout.splitlines() == execute_lines
    assert json.loads(rollback.read_text()) == json.loads(current)
    assert throttle_configs(b, topic) == expected_throttles(original, moved, 50000000)

    wait_for("the moves done", lambda: {p: s[1] for p, s in partitions(b, topic).items()} == moved, 60)
    verified = kafka(tmp_path, REASSIGN_COMMAND, "--bootstrap-server", b, "--verify", "--reassignment-json-file", str(plan))  # fmt: skip
    verify_lines = [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
        f"Reassignment of partition {topic}-1 is completed.",
        "",
        "Clearing broker-level throttles on brokers 1,2,3",
        f"Clearing topic-level throttles on topic {topic}",
    ]
    assert verified.splitlines() == verify_lines
    assert throttle_configs(b, topic) == ({}, {1: {}, 2: {}, 3: {}})

    # The other way: Kafka's tool moves the partitions back, kcli verifies and clears.
    their_started = kafka(tmp_path, REASSIGN_COMMAND, "--bootstrap-server", b, "--execute",
                          "--reassignment-json-file", str(rollback), "--throttle", "40000000")  # fmt: skip
    moved_json = json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any", "any"]} for p, r in moved.items()
    ]}, separators=(",", ":"))  # fmt: skip
    assert their_started.splitlines() == [
        moved_json if line == current else line.replace("50000000", "40000000") for line in execute_lines
    ]
    assert throttle_configs(b, topic) == expected_throttles(moved, original, 40000000)
    wait_for("the moves back", lambda: {p: s[1] for p, s in partitions(b, topic).items()} == original, 60)
    ours = kcli("reassign", "verify", "-b", b, "--reassignment-json-file", str(rollback))
    assert ours.splitlines() == verify_lines
    their_brokers, their_topic = in_parallel(
        lambda: kafka(tmp_path, CONFIG_COMMAND, "--bootstrap-server", b, "--describe", "--entity-type", "brokers"),
        lambda: kafka(tmp_path, CONFIG_COMMAND, "--bootstrap-server", b, "--describe", "--entity-type", "topics", "--entity-name", topic),
    )  # fmt: skip
    assert "throttled" not in their_brokers and "throttled" not in their_topic
    assert their_topic.splitlines() == [f"Dynamic configs for topic {topic} are:"]


# --- features, quorum, cluster status ----------------------------------------------------------------


def test_features_quorum_and_cluster_status_on_three_nodes(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """`kcli features describe` and `kcli quorum describe --status/--replication` print Kafka's tools'
    lines on three nodes (the metadata log's end, feature epochs and fetch times masked); `kcli cluster
    status` names the same leader, epoch, voters and their roles, and the three unfenced brokers."""
    b = kafka_cluster.bootstrap
    features, their_features, status, their_status, replication, their_replication, cluster = in_parallel(
        lambda: kcli("features", "describe", "-b", b),
        lambda: kafka(tmp_path, FEATURE_COMMAND, "--bootstrap-server", b, "describe"),
        lambda: kcli("quorum", "--bootstrap-server", b, "describe", "--status"),
        lambda: kafka(tmp_path, METADATA_QUORUM_COMMAND, "--bootstrap-server", b, "describe", "--status"),
        lambda: kcli("quorum", "--bootstrap-server", b, "describe", "--replication"),
        lambda: kafka(
            tmp_path, METADATA_QUORUM_COMMAND, "--bootstrap-server", b, "describe", "--replication"
        ),
        lambda: kcli("cluster", "status", "-b", b, "-o", "json"),
    )
    assert mask(features, "Epoch").splitlines() == mask(their_features, "Epoch").splitlines()
    assert "Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1" in features  # fmt: skip
    volatile = ("HighWatermark", "MaxFollowerLagTimeMs", "MaxFollowerLag")
    assert mask(status, *volatile).splitlines() == mask(their_status, *volatile).splitlines()

    def replication_rows(text: str) -> list[list[str]]:
        """NodeId, DirectoryId and Status of each row, the header whole (offsets and times move)."""
        header, *rows = [[c.strip() for c in line.split("\t")] for line in text.splitlines()]
        return [header] + [[r[0], r[1], r[6]] for r in rows]

    assert replication_rows(replication) == replication_rows(their_replication)
    fields = dict(re.findall(r"^(\w+):\s+(.*)$", their_status, re.MULTILINE))
    rows = [json.loads(line) for line in cluster.splitlines()]
    (head,) = [r for r in rows if r["type"] == "cluster"]
    assert (head["clusterId"], head["leaderId"], head["leaderEpoch"]) == (
        kafka_cluster.cluster_id, int(fields["LeaderId"]), int(fields["LeaderEpoch"])
    )  # fmt: skip
    assert [
        (r["nodeId"], f"{r['host']}:{r['port']}", r["fenced"]) for r in rows if r["type"] == "broker"
    ] == [(n.node_id, n.bootstrap, False) for n in kafka_cluster.nodes]
    their_roles = {int(r[0]): r[2] for r in replication_rows(their_replication)[1:]}
    assert sorted(their_roles) == [r["nodeId"] for r in rows if r["type"] == "voter"] == [1, 2, 3]
    assert their_roles[head["leaderId"]] == "Leader"


# --- replay -----------------------------------------------------------------------------------------


RECORD_FIELDS = re.compile(
    r"\| offset: (\d+) (CreateTime: \d+ keySize: -?\d+ valueSize: -?\d+) sequence: -?\d+ (.*)$"
)


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def record_lines(dump: str) -> list[tuple[str, ...]]:
    """(offset, timestamp and sizes, headers key and payload) of each record line of a dump-log text;
    the producer's sequence is left out (the replaying producer numbers its own)."""
    return [m.groups() for m in map(RECORD_FIELDS.match, dump.splitlines()) if m]


def test_replay_of_a_fixture_partition_into_kafka_record_for_record(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """`kcli replay` of a fixture partition (magic 2, gzip, headers with null values) into a replicated
    topic on Kafka: kafka-dump-log on the leader's new segment lists the same records (offsets, create
    times, keys, values, headers) as kcli dump-segment on the source, and a consumer reads them all."""
    b, topic = kafka_cluster.bootstrap, "ops-replayed"
    source = REPO / "fixtures" / "logdir" / "m2-gzip-0"
    sources = sorted(source.glob("*.log"))  # two segments, 24 records each
    # the fixture's records date from 2023: under Kafka's default seven days of retention the next
    # retention check (every five minutes) would delete the replayed segment; keep it
    kcli("topics", "create", "-b", b, "-t", topic, "--partitions", "1", "--replication-factor", "3",
         "--config", "retention.ms=-1")  # fmt: skip
    replayed = run_kcli("replay", str(source), "-b", b, "-t", topic)
    assert replayed.returncode == 0, replayed.stderr
    leader = partitions(b, topic)[0][0]
    segment = kafka_cluster.nodes[leader - 1].log_dir / f"{topic}-0" / "00000000000000000000.log"
    flags = ("--deep-iteration", "--print-data-log")
    theirs, ours = in_parallel(
        lambda: kafka(tmp_path, DUMP_LOG_SEGMENTS, "--files", str(segment), *flags),
        lambda: kcli("dump-segment", "--files", ",".join(str(f) for f in sources), *flags),
    )
    assert record_lines(theirs) == record_lines(ours)
    assert len(record_lines(ours)) == 48 and "headerKeys: [source,trace]" in theirs

    consumer = Consumer(
        {"bootstrap.servers": b, "group.id": "ops-replay-reader", "auto.offset.reset": "earliest"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Message] = []
    deadline = time.monotonic() + 30
    while len(got) < 48 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append(message)
    consumer.close()
    source_records = [
        json.loads(line)
        for segment in sources
        for line in kcli(
            "dump-segment", "--deep-iteration", "--print-data-log", "-o", "json", str(segment)
        ).splitlines()
        if '"type":"record"' in line
    ]
    assert [
        (m.offset(), m.timestamp()[1], text(m.key()), text(m.value()),
         [[k, text(v)] for k, v in m.headers() or []])
        for m in got
    ] == [(r["offset"], r["timestamp"], r["key"], r["value"], r["headers"]) for r in source_records]  # fmt: skip


# --- an ISR gone: unclean election, recovery's prediction, preferred elections (stops nodes: last) ---


def log_end(node: KafkaNode, topic: str, partition: int) -> int:
    """The end of a node's log of one partition, read off its disk with `kcli dump-segment`."""
    segment = node.log_dir / f"{topic}-{partition}" / "00000000000000000000.log"
    batches = [json.loads(line) for line in kcli("dump-segment", "-o", "json", str(segment)).splitlines()]
    return max((b["lastOffset"] + 1 for b in batches if b["type"] == "batch"), default=0)


def test_unclean_election_loses_what_recover_predicted_and_preferred_elections(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """Twin partitions on nodes 2 (leader) and 3, unclean elections off: node 3 stops (controlled
    shutdown takes it out of the ISR), node 2 takes more records alone, then dies by SIGKILL; node 3
    comes back outside the ISR and both partitions are leaderless. `kcli recover partitions` (node 2's
    log dir read off disk) predicts what electing node 3 loses; `kcli elect --election-type unclean`
    elects it on partition 0, LeaderElectionCommand on partition 1, with the same lines. Node 2 comes
    back, truncates exactly the predicted offsets and rejoins; preferred elections (kcli on 0, Kafka's
    tool on 1) give node 2 its leadership back, a second run finds nothing to do, in the same words."""
    first, second, third = kafka_cluster.nodes
    a, c = second, third  # a: the leader that dies; c: the follower elected uncleanly
    topic = "ops-unclean"
    kcli("topics", "create", "-b", kafka_cluster.bootstrap, "-t", topic, "--replica-assignment",
         f"{a.node_id}:{c.node_id},{a.node_id}:{c.node_id}",
         "--config", "unclean.leader.election.enable=false", "--config", "min.insync.replicas=1")  # fmt: skip
    via = first.bootstrap  # node 1 stays up throughout
    wait_for("both replicas in sync", lambda: all(s == (a.node_id, [a.node_id, c.node_id], [a.node_id, c.node_id])
                                                  for s in partitions(via, topic).values()), 60)  # fmt: skip
    # acks=all: both replicas hold these before node 3 stops (with acks=1 a loaded node 3 could stop
    # before it fetched them, and then the election would lose them too).
    produce_to(via, topic, {0: 10, 1: 10}, prefix="kept", acks="all")
    try:
        assert c.stop() in (0, 143)
        wait_for(f"node {c.node_id} out of the ISR", lambda: all(s[2] == [a.node_id] for s in partitions(via, topic).values()), 60)  # fmt: skip
        produce_to(via, topic, {0: 5, 1: 7}, prefix="alone")  # only node 2 holds these
        assert a.kill() == -signal.SIGKILL
        before = {p: log_end(a, topic, p) for p in (0, 1)}
        assert before == {0: 15, 1: 17}
        c.restart()  # with node 1, a quorum again
        wait_for(
            "both partitions leaderless", lambda: all(s[0] == -1 for s in partitions(via, topic).values()), 90
        )
        # Kafka answers OffsetForLeaderEpoch only as a leader: node 3's epoch history comes off its disk too.
        dry = run_kcli("recover", "partitions", "--bootstrap-server", via, "--topic", topic, "-o", "json",
                       "--logdir", f"{a.node_id}={a.log_dir}", "--logdir", f"{c.node_id}={c.log_dir}")  # fmt: skip
        assert dry.returncode == 3, dry.stdout + dry.stderr
        plans = {p["partition"]: p for p in map(json.loads, dry.stdout.splitlines())}
        predicted = {}
        for partition, plan in plans.items():
            candidates = [x for x in plan["candidates"] if x["electable"]]
            assert [x["broker"] for x in candidates] == [c.node_id], dry.stdout + dry.stderr
            candidate = candidates[0]
            predicted[partition] = {(x["broker"], x["startOffset"], x["endOffset"], x["records"]) for x in candidate["losses"]}  # fmt: skip
        assert predicted == {0: {(a.node_id, 10, 15, 5)}, 1: {(a.node_id, 10, 17, 7)}}

        refused = run_kcli(
            "elect", "-b", via, "--election-type", "preferred", "--topic", topic, "--partition", "0"
        )
        their_refused = kafka_run(tmp_path, LEADER_ELECTION_COMMAND, "--bootstrap-server", via,
                                  "--election-type", "preferred", "--topic", topic, "--partition", "1")  # fmt: skip
        assert refused.returncode == their_refused.returncode == 1
        assert refused.stdout.replace(f"{topic}-0", f"{topic}-1") == their_refused.stdout
        assert "PreferredLeaderNotAvailableException" in refused.stdout

        ours, theirs = in_parallel(
            lambda: kcli("elect", "-b", via, "--election-type", "unclean", "--topic", topic, "--partition", "0"),
            lambda: kafka(tmp_path, LEADER_ELECTION_COMMAND, "--bootstrap-server", via,
                          "--election-type", "unclean", "--topic", topic, "--partition", "1"),
        )  # fmt: skip
        assert ours == f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0\n"
        assert theirs == ours.replace(f"{topic}-0", f"{topic}-1")
        wait_for(f"node {c.node_id} leading both", lambda: all(s[0] == c.node_id for s in partitions(via, topic).values()), 60)  # fmt: skip
    finally:
        for node in (c, a):
            if not node.is_running():
                node.restart()
    wait_for(f"node {a.node_id} back in both ISRs",
             lambda: all(sorted(s[2]) == [a.node_id, c.node_id] for s in partitions(via, topic).values()), 90)  # fmt: skip

    # What Kafka really lost: node 2's own log now ends where node 3's did, the alone-records gone.
    reader = Consumer(
        {"bootstrap.servers": via, "group.id": "ops-unclean-reader", "enable.partition.eof": True}
    )
    reader.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    values: dict[int, list[str]] = {0: [], 1: []}
    ended, deadline = set(), time.monotonic() + 30
    while len(ended) < 2 and time.monotonic() < deadline:
        message = reader.poll(1.0)
        if message is None:
            continue
        if message.error() is None:
            values[message.partition()].append(message.value().decode())
        else:
            ended.add(message.partition())
    reader.close()
    assert values == {p: [f"kept-{p}-{i}" for i in range(10)] for p in (0, 1)}
    # Node 2's own log on disk: 15 and 17 records before its restart, cut back to node 3's 10 after.
    assert {p: log_end(a, topic, p) for p in (0, 1)} == {0: 10, 1: 10}
    real_loss = {p: {(a.node_id, 10, end, end - 10)} for p, end in before.items()}
    assert real_loss == predicted

    # Preferred: node 2 is the first replica and in sync again.
    ours, theirs = in_parallel(
        lambda: kcli("elect", "-b", via, "--election-type", "preferred", "--topic", topic, "--partition", "0"),
        lambda: kafka(tmp_path, LEADER_ELECTION_COMMAND, "--bootstrap-server", via,
                      "--election-type", "preferred", "--topic", topic, "--partition", "1"),
    )  # fmt: skip
    assert ours == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"
    assert theirs == ours.replace(f"{topic}-0", f"{topic}-1")
    wait_for(f"node {a.node_id} leading both", lambda: all(s[0] == a.node_id for s in partitions(via, topic).values()), 60)  # fmt: skip
    ours, theirs = in_parallel(
        lambda: kcli("elect", "-b", via, "--election-type", "preferred", "--topic", topic, "--partition", "0"),
        lambda: kafka(tmp_path, LEADER_ELECTION_COMMAND, "--bootstrap-server", via,
                      "--election-type", "preferred", "--topic", topic, "--partition", "1"),
    )  # fmt: skip
    assert ours == f"Valid replica already elected for partitions {topic}-0\n"
    assert theirs == ours.replace(f"{topic}-0", f"{topic}-1")

    # Every partition: once Kafka's tool has elected whatever the restarts left off its preferred leader,
    # neither tool has anything to say (the controller leaves out what needs no election) and both exit 0.
    # First every replica of every topic back in sync, or a preferred replica still catching up fails.
    wait_for("every ISR whole", lambda: (found := every_partition(via, ".*")) and all(sorted(s[1]) == sorted(s[2]) for s in found.values()), 90)  # fmt: skip
    kafka(tmp_path, LEADER_ELECTION_COMMAND, "--bootstrap-server", via, "--election-type", "preferred", "--all-topic-partitions")  # fmt: skip
    ours, theirs = in_parallel(
        lambda: kcli("elect", "-b", via, "--election-type", "preferred", "--all-topic-partitions"),
        lambda: kafka(tmp_path, LEADER_ELECTION_COMMAND, "--bootstrap-server", via, "--election-type", "preferred", "--all-topic-partitions"),
    )  # fmt: skip
    assert ours == theirs == ""
