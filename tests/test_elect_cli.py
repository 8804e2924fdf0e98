"""`kcli elect` (kafka-leader-election.sh): argument checks, the JSON file, the report lines, and real
elections on one three-node kcli cluster shared by the module's tests.

1. Preferred: after a broker bounce its partition is led by another replica; --dry-run shows the move
   and changes nothing; the election puts the preferred replica back; a second run finds nothing to do.
2. Unclean: with unclean.leader.election.enable=false on the topic, a follower dropped from the ISR,
   then the leader stopped, the partition stays leaderless; a preferred election fails there
   (PREFERRED_LEADER_NOT_AVAILABLE, exit 1); an unclean one, asked for, elects the out-of-sync replica.
3. Bad flags and bad JSON files: one sentence, exit 2, nothing sent (in process, through the real entry point).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kraft_cluster import SESSION, LocalKraftCluster, kcli, wait_for

from kcli.errors import KcliError
from kcli.features import MV_3_9_IV0
from ops.elect import (
    ElectionError,
    ElectionOutcome,
    ElectionReport,
    ElectionType,
    PartitionState,
    TopicPartition,
    java_exception,
    load_admin_config,
    parse_election_json,
    parse_election_type,
    predict,
)

LAG_TIME_MS = 3000
UNCLEAN_INTERVAL_MS = 500
OVERRIDES = (
    *SESSION,
    f"replica.lag.time.max.ms={LAG_TIME_MS}",
    "replica.fetch.backoff.ms=200",
    # the controller's own preferred-leader pass must not undo the imbalance before the test looks
    "leader.imbalance.check.interval.seconds=3600",
    # the controller's unclean pass runs often, so that a partition it leaves leaderless shows it would
    f"unclean.leader.election.interval.ms={UNCLEAN_INTERVAL_MS}",
)


# --- unit: the JSON file ---------------------------------------------------------------------------


def test_json_file_is_read_as_kafka_reads_it():
    text = '{"version": 1, "partitions": [{"topic": "foo", "partition": 1}, {"topic": "bar", "partition": 0, "x": 2}]}'
    assert parse_election_json(text) == [TopicPartition("foo", 1), TopicPartition("bar", 0)]
    # beyond Kafka (which elects nothing and prints nothing): an empty list is a mistake
    with pytest.raises(ElectionError, match=r'"partitions" list is empty: name at least one partition\.'):
        parse_election_json('{"partitions": []}')


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("", "Replica election data is empty (the file is not JSON)."),
        ("{partitions: [", "Replica election data is empty (the file is not JSON)."),
        ("[]", "Replica election data must be a JSON object, not a list."),
        ('{"partition": []}', 'Replica election data is missing "partitions" field.'),
        ('{"partitions": {"topic": "a"}}', "Replica election data's \"partitions\" must be a list, not an object."),
        ('{"partitions": ["a-0"]}', '"partitions" entry 0 must be an object, not a string.'),
        ('{"partitions": [{"partition": 0}]}', '"partitions" entry 0 needs a string "topic", not null.'),
        ('{"partitions": [{"topic": 7, "partition": 0}]}', '"partitions" entry 0 needs a string "topic", not an integer.'),
        ('{"partitions": [{"topic": "a", "partition": "0"}]}', '"partitions" entry 0 needs an integer "partition", not a string.'),
        ('{"partitions": [{"topic": "a", "partition": 1.5}]}', '"partitions" entry 0 needs an integer "partition", not a number with a fraction.'),
        ('{"partitions": [{"topic": "a", "partition": true}]}', '"partitions" entry 0 needs an integer "partition", not a boolean.'),
        ('{"partitions": [{"topic": "a", "partition": 2147483648}]}', '"partitions" entry 0 needs an integer "partition", not 2147483648 (out of the 32-bit range).'),
        (
            '{"partitions": [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 1}, {"topic": "a", "partition": 0}]}',
            "Replica election data contains duplicate partitions: a-0.",
        ),
    ],
)  # fmt: skip
def test_bad_json_file_is_one_sentence(text: str, sentence: str):
    with pytest.raises(ElectionError) as raised:
        parse_election_json(text)
    assert str(raised.value) == sentence


def test_election_type_in_any_case_and_admin_config(tmp_path: Path):
    assert parse_election_type("preferred") is ElectionType.PREFERRED
    assert parse_election_type("UNCLEAN") is ElectionType.UNCLEAN
    with pytest.raises(ElectionError, match="must be preferred or unclean, not 'clean'"):
        parse_election_type("clean")
    config = tmp_path / "admin.properties"
    config.write_text(
        "client.id=ops\ndefault.api.timeout.ms=60000\nretries=3\nacks=all\nsecurity.protocol=PLAINTEXT\n"
    )
    loaded = load_admin_config(config)
    assert (loaded.client_id, loaded.api_timeout_s, loaded.request_timeout_s, loaded.ignored) == (
        "ops",
        60.0,
        30.0,
        ("acks",),  # a producer setting; retries is an admin client's, which changes nothing here
    )
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\n"
    )  # the same reader as --command-config: security settings are read, not refused
    loaded = load_admin_config(config)
    assert (loaded.security.protocol, loaded.security.sasl_mechanism) == ("SASL_SSL", "PLAIN")
    assert dict(loaded.security.jaas) == {"username": "u", "password": "p"}
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    with pytest.raises(KcliError, match="GSSAPI \\(Kerberos\\) is not supported"):
        load_admin_config(config)


# --- unit: predictions and report lines -----------------------------------------------------------


def state(leader: int, replicas: tuple[int, ...], isr: tuple[int, ...], partition: int = 0) -> PartitionState:
    return PartitionState("t", partition, leader, replicas, isr)


@pytest.mark.parametrize(
    ("kind", "leader", "replicas", "isr", "live", "error", "new_leader", "unclean"),
    [
        # preferred: nothing to do, the first replica back, the current leader kept, a leaderless fallback
        ("PREFERRED", 1, (1, 2, 3), (1, 2, 3), {1, 2, 3}, ErrorCode.election_not_needed, None, False),
        ("PREFERRED", 2, (1, 2, 3), (1, 2, 3), {1, 2, 3}, ErrorCode.none, 1, False),
        ("PREFERRED", 2, (1, 2, 3), (2, 3), {1, 2, 3}, ErrorCode.preferred_leader_not_available, None, False),
        ("PREFERRED", 2, (1, 2, 3), (1, 2, 3), {2, 3}, ErrorCode.preferred_leader_not_available, None, False),
        ("PREFERRED", -1, (1, 2, 3), (1, 3), {2, 3}, ErrorCode.none, 3, False),
        ("PREFERRED", -1, (1, 2), (1,), {2}, ErrorCode.preferred_leader_not_available, None, False),
        # unclean: a leader is there; a live ISR member first; else the first live replica, out of sync
        ("UNCLEAN", 2, (1, 2), (2,), {1, 2}, ErrorCode.election_not_needed, None, False),
        ("UNCLEAN", -1, (1, 2, 3), (1, 3), {2, 3}, ErrorCode.none, 3, False),
        ("UNCLEAN", -1, (1, 2, 3), (1,), {2, 3}, ErrorCode.none, 2, True),
        ("UNCLEAN", -1, (1, 2), (1,), set(), ErrorCode.eligible_leaders_not_available, None, False),
    ],
)  # fmt: skip
def test_dry_run_predicts_the_controllers_choice(
    kind, leader, replicas, isr, live, error, new_leader, unclean
):
    outcome = predict(ElectionType[kind], state(leader, replicas, isr), live)
    assert (outcome.error, outcome.new_leader, outcome.unclean) == (error, new_leader, unclean)
    assert outcome.leader == (leader if leader >= 0 else None)


def test_report_lines_are_kafkas():
    outcomes = (
        ElectionOutcome("t", 1, ErrorCode.none),
        ElectionOutcome("t", 0, ErrorCode.none),
        ElectionOutcome(
            "a", 3, ErrorCode.election_not_needed, "Leader election not needed for topic partition."
        ),
        ElectionOutcome("a", 2, ErrorCode.election_not_needed),
        ElectionOutcome("x", 0, ErrorCode.unknown_topic_or_partition, "No such topic as x"),
        ElectionOutcome("t", 9, ErrorCode.preferred_leader_not_available, None),
    )
    report = ElectionReport(ElectionType.PREFERRED, outcomes)
    # Each set in Java's HashSet/HashMap order, as the Java tool prints it: t-1 hashes to bucket 4 of
    # 16, t-0 to bucket 5; x-0 to bucket 0, t-9 to bucket 1.
    assert report.lines() == [
        "Successfully completed leader election (PREFERRED) for partitions t-1, t-0",
        "Valid replica already elected for partitions a-2, a-3",
        "Error completing leader election (PREFERRED) for partition: x-0: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: No such topic as x",
        "Error completing leader election (PREFERRED) for partition: t-9: "
        "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: The preferred leader was not available.",
    ]
    assert [o["result"] for o in report.to_json()] == [
        "not_needed",
        "not_needed",
        "elected",
        "elected",
        "failed",
        "failed",
    ]
    assert report.to_json()[-1] == {
        "topic": "x", "partition": 0, "election_type": "PREFERRED", "result": "failed",
        "error": "UNKNOWN_TOPIC_OR_PARTITION", "message": "No such topic as x", "leader": None,
        "new_leader": None, "unclean": False, "dry_run": False,
    }  # fmt: skip
    planned = ElectionReport(
        ElectionType.UNCLEAN,
        (ElectionOutcome("u", 0, ErrorCode.none, None, None, 2, True), ElectionOutcome("u", 1, ErrorCode.none, None, None, 3)),
        dry_run=True,
    )  # fmt: skip
    assert planned.lines() == [
        "Would complete leader election (UNCLEAN) for partitions "
        "u-0 (leader none -> 2, out of sync: records may be lost), u-1 (leader none -> 3)"
    ]
    assert java_exception(ErrorCode.request_timed_out, None) == (
        "org.apache.kafka.common.errors.TimeoutException: The request timed out."
    )
    assert java_exception(ErrorCode.eligible_leaders_not_available, "x").endswith(
        ".EligibleLeadersNotAvailableException: x"
    )


# --- bad flags: through the real entry point, in process -------------------------------------------


def run_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """`kcli ARGS` through kcli.cli.main.main in this process: (exit status, stdout, stderr). (main
    blocks a later `import hypothesis`; conftest has imported it already, so nothing changes.)"""
    from kcli.cli.main import main

    monkeypatch.setattr(sys, "argv", ["kcli", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    return exited.value.code, out, err  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["--all-topic-partitions"], "Missing required option(s): election-type."),
        (["--election-type", "preferred"],
         "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file."),
        (["--election-type", "preferred", "--all-topic-partitions", "--topic", "t", "--partition", "0"],
         "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file."),
        (["--election-type", "unclean", "--topic", "some-topic"], "Missing required option(s): partition."),
        (["--election-type", "unclean", "--all-topic-partitions", "--partition", "0"],
         "Option partition is only allowed if topic is used."),
        (["--election-type", "fair", "--all-topic-partitions"], "--election-type must be preferred or unclean, not 'fair'."),
        (["--election-type", "preferred", "--path-to-json-file", "/nonexistent/e.json"],
         "cannot read /nonexistent/e.json: no such file or directory."),
    ],
)  # fmt: skip
def test_bad_flags_are_one_sentence_and_exit_2(monkeypatch, capsys, args, sentence):
    # a bootstrap nothing listens on: nothing may be sent before the arguments are checked
    code, out, err = run_main(monkeypatch, capsys, "elect", "-b", "127.0.0.1:1", *args)
    assert (code, out, err) == (2, "", f"kcli: {sentence}\n")


def test_bad_json_file_and_admin_config_exit_2(monkeypatch, capsys, tmp_path: Path):
    bad = tmp_path / "elect.json"
    bad.write_text('{"partitions": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 0}]}')
    code, out, err = run_main(
        monkeypatch, capsys, "elect", "-b", "127.0.0.1:1", "--election-type", "preferred", "--path-to-json-file", str(bad)
    )  # fmt: skip
    assert (code, out, err) == (
        2,
        "",
        f"kcli: {bad}: Replica election data contains duplicate partitions: a-0.\n",
    )
    secured = tmp_path / "admin.properties"
    secured.write_text("security.protocol=SSL\nssl.truststore.type=JKS\nssl.truststore.location=x.jks\n")
    code, out, err = run_main(
        monkeypatch, capsys, "elect", "-b", "127.0.0.1:1", "--election-type", "preferred",
        "--all-topic-partitions", "--admin.config", str(secured),
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err.startswith(f"kcli: {secured}: JKS truststores are not supported; convert ")
    assert err.count("\n") == 1


# --- a real cluster ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKraftCluster]:
    """Three combined nodes for the whole module, formatted at 3.9 (ELR off: a partition's last in-sync
    replica stays in its ISR when it stops, which the unclean election test needs; with ELR it moves
    to the ELR); every node left running is killed by PID."""
    made = LocalKraftCluster(tmp_path_factory.mktemp("elect"), 3, OVERRIDES, release=MV_3_9_IV0)
    try:
        made.start()
        yield made
    finally:
        made.kill_all()


def elect(bootstrap: str, *args: str) -> Any:
    """`kcli elect` as a process, through the broker whose Metadata the test waited on (a dry run
    predicts from it)."""
    return kcli("elect", "-b", bootstrap, *args, timeout=60)


@pytest.fixture
def elect_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """`kcli elect` through the same entry point in this process: a second less than a new process."""

    def run(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
        code, out, err = run_main(monkeypatch, capsys, "elect", "-b", bootstrap, *args)
        return subprocess.CompletedProcess(["kcli", "elect", *args], code, out, err)

    return run


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000})


def create_topic(bootstrap: str, topic: str, assignment: list[list[int]], **configs: str) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    future = client.create_topics(
        [NewTopic(topic, len(assignment), replica_assignment=assignment, config=configs)],
        operation_timeout=30,
    )[topic]
    future.result(30)


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), as Metadata from `bootstrap` shows them."""
    found = admin(bootstrap).list_topics(topic, timeout=10).topics[topic]
    assert found.error is None, found.error
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in found.partitions.values()}


def wait_partitions(bootstrap: str, topic: str, what: str, check, timeout: float = 40.0):
    return wait_for(
        f"{topic}: {what}", lambda: (s := partitions(bootstrap, topic)) and check(s) and s, timeout, 0.2
    )


def live_brokers(bootstrap: str) -> set[int]:
    return set(admin(bootstrap).list_topics(timeout=10).brokers)


def active_controller(cluster: LocalKraftCluster) -> int:
    from kcli.cluster import Cluster
    from ops.quorum import describe_cluster_status

    async def ask() -> int | None:
        async with await Cluster.connect(cluster.live_bootstrap(), request_timeout=10.0) as connected:
            leader = (await describe_cluster_status(connected)).leader_id
            return leader if leader >= 0 else None

    return wait_for("the active controller", lambda: asyncio.run(ask()), 30, 0.2)


def listed(line: str, prefix: str) -> list[str]:
    assert line.startswith(prefix), line
    return line[len(prefix) :].split(", ")


def test_preferred_election_restores_the_preferred_leaders_after_a_bounce(cluster, elect_here, tmp_path):
    controller = active_controller(cluster)
    bounced, third = sorted(n for n in cluster.nodes if n != controller)
    create_topic(cluster.bootstrap, "pref", [[bounced, controller, third], [third, bounced, controller]])
    wait_partitions(cluster.bootstrap, "pref", "preferred leaders and full ISRs",
                    lambda s: s[0][0] == bounced and s[1][0] == third and all(len(p[2]) == 3 for p in s.values()))  # fmt: skip

    # The bounce: a controlled shutdown moves pref-0 to the next ISR member; back, the broker rejoins
    # the ISR but does not lead (an ISR expansion never moves leadership).
    assert cluster[bounced].terminate() == 0
    cluster[bounced].start()
    cluster[bounced].wait_ready()
    via = cluster[controller].bootstrap
    wait_partitions(via, "pref", f"node {bounced} back in the ISR, not leading",
                    lambda s: s[0][0] == controller and bounced in s[0][2])  # fmt: skip

    dry = elect_here(via, "--election-type", "preferred", "--all-topic-partitions", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    would, valid = dry.stdout.splitlines()
    assert listed(would, "Would complete leader election (PREFERRED) for partitions ") == [
        f"pref-0 (leader {controller} -> {bounced})"
    ]
    assert "pref-1" in listed(valid, "Valid replica already elected for partitions ")
    assert partitions(via, "pref")[0][0] == controller  # nothing was sent

    # As LeaderElectionCommand: only what the controller answered, and with every partition asked for
    # it leaves out those that needed no election (no "Valid replica already elected" line then).
    done = elect(via, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions pref-0"
    ]
    wait_partitions(
        via, "pref", "the preferred leaders back", lambda s: s[0][0] == bounced and s[1][0] == third
    )

    config = tmp_path / "admin.properties"  # what kcli's client can use of an admin config, it uses
    config.write_text("client.id=elect-test\ndefault.api.timeout.ms=40000\nretries=3\n")
    again = elect_here(
        via, "--election-type", "preferred", "--all-topic-partitions", "--admin.config", str(config)
    )
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""  # retries is an admin client setting that changes nothing for kcli
    assert again.stdout == ""  # nothing needed an election: Kafka's tool prints nothing either

    named = tmp_path / "elect.json"
    named.write_text(
        json.dumps({"partitions": [{"topic": "pref", "partition": 1}, {"topic": "nosuch", "partition": 0}]})
    )
    result = elect_here(via, "--election-type", "preferred", "--path-to-json-file", str(named), "-o", "json")
    assert result.returncode == 1 and result.stderr == "kcli: 1 replica(s) could not be elected.\n", (
        result.stderr
    )
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["topic"], r["partition"], r["result"], r["error"], r["leader"]) for r in rows] == [
        ("nosuch", 0, "failed", "UNKNOWN_TOPIC_OR_PARTITION", None),
        ("pref", 1, "not_needed", None, third),
    ]
    assert rows[0]["message"] == "No such topic as nosuch"


def test_unclean_election_elects_an_out_of_sync_replica_only_when_asked(cluster, elect_here):
    controller = active_controller(cluster)
    for node in cluster.nodes.values():  # the previous test may have left one down
        if not node.running:
            node.start()
            node.wait_ready()
    leader, follower = sorted(n for n in cluster.nodes if n != controller)
    via = cluster[controller].bootstrap
    # dirty-1 keeps its leader (the controller's node) throughout: an unclean election is not needed there
    create_topic(via, "dirty", [[leader, follower], [controller, leader]],
                 **{"unclean.leader.election.enable": "false", "min.insync.replicas": "1"})  # fmt: skip
    wait_partitions(via, "dirty", "full ISRs", lambda s: s[0][0] == leader and s[1][0] == controller
                    and all(len(p[2]) == 2 for p in s.values()))  # fmt: skip

    # The follower stops fetching and leaves the ISR; then the leader stops: nobody in sync is left.
    stalled = cluster[follower].process
    assert stalled is not None
    stalled.send_signal(signal.SIGSTOP)
    try:
        wait_partitions(via, "dirty", f"node {follower} out of the ISR", lambda s: s[0][2] == [leader], 30)
        cluster[leader].process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        wait_partitions(via, "dirty", "no leader", lambda s: s[0][0] == -1 and s[0][2] == [leader], 30)
    finally:
        stalled.send_signal(signal.SIGCONT)
    assert cluster[leader].process.wait(30) == 0  # type: ignore[union-attr]
    wait_for(f"node {follower} alive and node {leader} gone",
             lambda: (b := live_brokers(via)) and follower in b and leader not in b, 30, 0.2)  # fmt: skip
    alive_since = time.monotonic()
    assert partitions(via, "dirty")[0][:2] == (-1, [leader, follower])  # unclean is off: still leaderless

    # Preferred cannot help: its replica is gone and nobody else is in sync.
    refused = elect_here(via, "--election-type", "preferred", "--topic", "dirty", "--partition", "0")
    assert refused.returncode == 1, refused.stderr
    assert refused.stdout.splitlines() == [
        "Error completing leader election (PREFERRED) for partition: dirty-0: "
        "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: The preferred leader was not available."
    ]
    assert refused.stderr == "kcli: 1 replica(s) could not be elected.\n"

    dry = elect_here(via, "--election-type", "unclean", "--all-topic-partitions", "--dry-run", "-o", "json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    rows = {(r["topic"], r["partition"]): r for r in map(json.loads, dry.stdout.splitlines())}
    assert rows[("dirty", 0)] | {"message": None} == {
        "topic": "dirty", "partition": 0, "election_type": "UNCLEAN", "result": "elected", "error": None,
        "message": None, "leader": None, "new_leader": follower, "unclean": True, "dry_run": True,
    }  # fmt: skip
    assert rows[("dirty", 1)]["result"] == "not_needed" and rows[("dirty", 1)]["leader"] == controller
    assert {r["result"] for k, r in rows.items() if k != ("dirty", 0)} == {"not_needed"}
    # Three of the controller's unclean passes (the topic forbids them) since the follower came back,
    # and a dry run sent nothing: still leaderless. An absence has no event to wait for.
    time.sleep(max(0.0, alive_since + 3 * UNCLEAN_INTERVAL_MS / 1000 - time.monotonic()))
    assert partitions(via, "dirty")[0][0] == -1

    done = elect(via, "--election-type", "unclean", "--all-topic-partitions")
    assert done.returncode == 0, done.stdout + done.stderr
    # Every other partition has a leader: the controller leaves them out of its answer, and so does the report.
    assert done.stdout.splitlines() == [
        "Successfully completed leader election (UNCLEAN) for partitions dirty-0"
    ]
    wait_partitions(via, "dirty", f"node {follower} leading alone", lambda s: s[0][:3] == (follower, [leader, follower], [follower]))  # fmt: skip
