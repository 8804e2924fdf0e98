"""Apache Kafka's Java clients and tools (4.1.2, tests/apache_kafka.py) against kcli's broker.

tests/java/KcliClients.java is compiled once per run with `javac` against the pinned jars (into the
jar cache, keyed by the source and the pin; nothing compiled is committed). It drives kafka-clients
and kafka-streams and prints one JSON object per line, which the tests here judge:

1. One kcli node: Admin (createTopics, describeCluster, describeTopics, listOffsets, describeConfigs,
   deleteRecords, listGroups, listConsumerGroups, describeConsumerGroups, listConsumerGroupOffsets,
   listTransactions, describeTransactions), an idempotent acks=all producer per codec (none, gzip,
   snappy, lz4, zstd), a transactional producer that commits, aborts and commits, and a classic-protocol
   read_committed group member that reads exactly the committed records, and a group.protocol=consumer
   member (the cluster's group.version is 1, Kafka 4.1's default); beside it, in a second JVM, a
   Kafka Streams word count (a repartition topic, a changelog) at at_least_once and exactly_once_v2.
2. The same clients and word count against a 3-node kcli cluster, the clients' topics at replication
   factor 3 and min.insync.replicas 2.
3. Kafka's shell tools against that cluster: kafka-reassign-partitions (generate, execute, verify),
   kafka-leader-election (preferred), kafka-transactions (list, describe, describe-producers,
   find-hanging by broker and by topic), kafka-log-dirs, kafka-get-offsets.
4. VerifiableProducer (acks=all) into a topic of replication factor 3 and min.insync.replicas 2, its
   partition leader killed with SIGKILL mid-run; then VerifiableConsumer: every value the producer saw
   acknowledged (`producer_send_success`) is consumed, as Kafka's ProduceConsumeValidateTest judges it.

The cluster (one per module) is disturbed only by the last test, which restarts the node it kills.
Each JVM costs one to two seconds of start-up on two cores: a JVM runs many scenarios, and independent
tool runs go side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import apache_kafka
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, require_apache_kafka, skip_unless_ci, start_broker, stop_cleanly
from test_cluster import LocalKraftCluster, wait_for

from formats.segment import walk

pytestmark = pytest.mark.timeout(420)

SOURCE = Path(__file__).resolve().parent / "java" / "KcliClients.java"
MAIN = "KcliClients"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 20
TXN_BATCH = 5
NO_REBALANCE_DELAY = "group.initial.rebalance.delay.ms=0"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
CLIENT_TIMEOUTS = {"socket.timeout.ms": 30000, "request.timeout.ms": 30000}
"""librdkafka's side of the set-up: generous, the brokers share two cores with other processes."""


# --- compiling and running the Java side -------------------------------------------------------------


def require_javac() -> None:
    """Skip with one line when javac is missing (a JRE without a JDK); with CI=true fail instead."""
    if shutil.which("javac") is None:
        skip_unless_ci("Java clients test not available: javac not on PATH")


def compile_clients() -> Path:
    """The classes dir of KcliClients.java (apache_kafka.compile_java); a javac failure fails the test."""
    try:
        return apache_kafka.compile_java(SOURCE)
    except apache_kafka.KafkaSetupError as error:
        pytest.fail(str(error))


@pytest.fixture(scope="module")
def java_classes() -> Path:
    """The compiled KcliClients (java and the jars required, as the Apache Kafka fixtures require them)."""
    require_apache_kafka()
    require_javac()
    return compile_clients()


def java(
    main_class: str,
    args: Sequence[str],
    workdir: Path,
    *,
    classpath: Sequence[Path] = (),
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run one JVM to completion; its log4j output (warnings and worse) goes to a file in `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{main_class.rsplit('.', 1)[-1]}-{time.monotonic_ns()}.log"
    command = apache_kafka.java_command(
        main_class, args, log_path=log_path, level="warn", classpath=classpath
    )
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=workdir, stdin=subprocess.DEVNULL
    )


def tool(workdir: Path, main_class: str, *args: str) -> str:
    """stdout of one of Kafka's tools, which must exit 0 (its output in the message when it does not)."""
    result = apache_kafka.run_tool(main_class, args, workdir=workdir, timeout=300)
    name = main_class.rsplit(".", 1)[-1]
    assert result.returncode == 0, (
        f"{name} {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


def in_parallel(*calls: Callable[[], Any]) -> list[Any]:
    """Independent JVMs side by side."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        return [future.result() for future in [pool.submit(call) for call in calls]]


def clients_run(classes: Path, workdir: Path, *args: str) -> list[dict[str, Any]]:
    """The JSON lines of one KcliClients run; any step's error fails the test with all of them."""
    result = java(MAIN, args, workdir, classpath=[classes])
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    errors = [line for line in lines if "error" in line]
    assert result.returncode == 0 and not errors and lines[-1:] == [{"event": "done"}], (
        f"KcliClients {' '.join(args)} exited {result.returncode}; step errors:\n"
        + "\n".join(json.dumps(e) for e in errors)
        + f"\nstderr:\n{result.stderr[-3000:]}"
    )
    return lines


def steps(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("step") == name]


def check_clients(
    lines: list[dict[str, Any]], prefix: str, nodes: list[int], log_dirs: dict[int, Path]
) -> None:
    """What KcliClients must have seen against a healthy kcli cluster of `nodes` (replication factor
    len(nodes), min.insync.replicas 2 above one node)."""
    replication = len(nodes)
    data, txn, group, txn_id = f"{prefix}-data", f"{prefix}-txn", f"{prefix}-group", f"{prefix}-tid"
    [cluster] = steps(lines, "describeCluster")
    assert cluster["nodes"] == nodes and cluster["controller"] in nodes and cluster["clusterId"]

    produced = steps(lines, "produce")
    assert [p["codec"] for p in produced] == list(CODECS) and all(p["acked"] == PER_CODEC for p in produced)
    # Offsets per partition run on across producers and codecs with no gap: partition i % 3 of record i.
    per_partition: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for p in produced:
        for i, offset in enumerate(p["offsets"]):
            per_partition[i % 3].append(offset)
    assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values()), per_partition
    counts = {p: len(offsets) for p, offsets in per_partition.items()}

    assert [t["outcome"] for t in steps(lines, "transactions")] == ["commit", "abort", "commit"]
    [consumed] = steps(lines, "consume")
    committed_txn = [f"commit-{i}" for i in range(TXN_BATCH)] * 2
    expected = sorted(
        [f"{codec}-value-{i}" for codec in CODECS for i in range(PER_CODEC)] + committed_txn
    )  # read_committed: no "abort-*", each committed record once
    assert sorted(consumed["values"]) == expected
    assert [v for v in consumed["values"] if v.startswith("commit-")] == committed_txn  # in order
    # Three transactions of five records and three markers: the consumer's position is past them all.
    txn_end = 3 * TXN_BATCH + 3
    positions = {f"{data}-{p}": n for p, n in counts.items()} | {f"{txn}-0": txn_end}
    assert consumed["positions"] == positions

    described = {d["topic"]: d for d in steps(lines, "describeTopics")}
    assert sorted(described) == [data, txn]
    for topic in described.values():
        assert topic["internal"] is False and len(topic["topicId"]) == 22
        for partition in topic["partitions"]:
            assert sorted(partition["replicas"]) == nodes and sorted(partition["isr"]) == nodes
            assert partition["leader"] in partition["replicas"]

    [offsets] = steps(lines, "listOffsets")
    assert offsets["earliest"] == {"0": 0, "1": 0, "2": 0}
    assert offsets["latest"] == {str(p): n for p, n in counts.items()}
    assert all(0 <= offsets["maxTimestamp"][str(p)] < n for p, n in counts.items())
    assert offsets["txnLatest"] == {"0": txn_end}

    [configs] = steps(lines, "describeConfigs")
    assert configs["topic"] == {
        "cleanup.policy": ["delete", "DEFAULT_CONFIG"],
        "compression.type": ["producer", "DEFAULT_CONFIG"],
        "min.insync.replicas": ["2" if replication > 1 else "1", "DYNAMIC_TOPIC_CONFIG"],
    }
    assert {int(b): Path(v[1]) for b, v in configs["brokers"].items()} == log_dirs
    assert all(v[0] > 100 for v in configs["brokers"].values())  # every broker config, not just a few

    assert steps(lines, "deleteRecords") == [{"step": "deleteRecords", "lowWatermark": 5, "earliest": 5}]

    [groups] = steps(lines, "groups")
    assert groups["listGroups"] == [
        {"groupId": group, "type": "Classic", "protocol": "consumer", "state": "Empty"}
    ]
    assert groups["inListConsumerGroups"] is True
    assert groups["describe"]["state"] == "Empty" and groups["describe"]["type"] == "Classic"
    assert groups["describe"]["members"] == 0 and groups["describe"]["coordinator"] in nodes
    assert groups["committed"] == positions

    # group.version 1 (kcli's default, as Kafka 4.1's): a KIP-848 member joins beside the classic group
    # and reads (at group.version 0 it is refused: tests/test_consumer_group_clients.py)
    [protocol] = steps(lines, "consumerProtocol")
    assert protocol["refused"] is None and protocol["records"] > 0, protocol

    [txns] = steps(lines, "transactionsAdmin")
    assert txns["listed"] == [{"id": txn_id, "state": "CompleteCommit"}]
    assert txns["state"] == "CompleteCommit" and txns["topicPartitions"] == 0


# --- one kcli node -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kcli_node(tmp_path_factory: pytest.TempPathFactory, java_classes: Path) -> Iterator[BrokerProcess]:
    """One kcli broker for the single-node tests (each uses names of its own)."""
    process = start_broker(tmp_path_factory.mktemp("kcli-node"), overrides=[NO_REBALANCE_DELAY])
    try:
        yield process
    finally:
        stop_cleanly(process)


def test_java_clients_and_kafka_streams_against_one_kcli_node(
    kcli_node: BrokerProcess, java_classes: Path, tmp_path: Path
) -> None:
    """kafka-clients' Admin, idempotent and transactional producers and a read_committed classic
    consumer (one JVM), and a Kafka Streams word count at at_least_once and exactly_once_v2 (another
    JVM, side by side), against one kcli node."""
    b = kcli_node.bootstrap
    clients, streams = in_parallel(
        lambda: clients_run(java_classes, tmp_path / "clients", "clients", b, "single", "1"),
        lambda: word_counts(java_classes, tmp_path / "streams", b, "wc"),
    )
    check_clients(clients, "single", [1], {1: kcli_node.data_dir})
    # Each producer's batches are on disk in its own codec: the broker kept what the client compressed.
    codecs = {
        batch.compression.name.lower()
        for segment in kcli_node.data_dir.glob("single-data-*/*.log")
        for batch in walk(segment.read_bytes()).batches
    }
    assert codecs == set(CODECS)
    check_word_counts(streams)


def word_counts(classes: Path, workdir: Path, bootstrap: str, prefix: str) -> list[dict[str, Any]]:
    """One JVM running the Streams word count at at_least_once, then at exactly_once_v2."""
    guarantees = ("at_least_once", "exactly_once_v2")
    return clients_run(classes, workdir, "streams", bootstrap, prefix, str(workdir / "state"), *guarantees)


def check_word_counts(lines: list[dict[str, Any]]) -> None:
    """Both Streams runs ended with every word's count on the output topic, and no thread failed."""
    runs = steps(lines, "streams")
    assert [run["guarantee"] for run in runs] == ["at_least_once", "exactly_once_v2"]
    for run in runs:
        assert run["failures"] == [] and "ERROR" not in run["states"], run
        assert run["counts"] == run["expected"], run
        assert run["expected"]["the"] == 4 and run["expected"]["dog"] == 3


# --- a 3-node kcli cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kcli_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKraftCluster]:
    """Three combined kcli nodes for the module (Kafka's tools need no javac); stopped with SIGTERM by
    PID at the end."""
    require_apache_kafka()
    cluster = LocalKraftCluster(tmp_path_factory.mktemp("kcli-cluster"), 3, [NO_REBALANCE_DELAY])
    try:
        cluster.start()
        yield cluster
    finally:
        running = [node for node in cluster.nodes.values() if node.running]
        for node in running:  # all at once: no node waits out a stopped peer's timeouts alone
            os.kill(node.pid, signal.SIGTERM)
        for node in running:
            node.terminate(send=False)


def node_log_dirs(cluster: LocalKraftCluster) -> dict[int, Path]:
    return {node_id: node.node.directory / "data" for node_id, node in cluster.nodes.items()}


def test_java_clients_against_a_kcli_cluster(
    kcli_cluster: LocalKraftCluster, java_classes: Path, tmp_path: Path
) -> None:
    """The same kafka-clients scenarios against three kcli nodes, every topic at replication factor 3,
    and beside them the Kafka Streams word count (its internal topics at the brokers' default)."""
    b = kcli_cluster.bootstrap
    lines, streams = in_parallel(
        lambda: clients_run(java_classes, tmp_path / "clients", "clients", b, "cluster", "3"),
        lambda: word_counts(java_classes, tmp_path / "streams", b, "cwc"),
    )
    check_clients(lines, "cluster", [1, 2, 3], node_log_dirs(kcli_cluster))
    check_word_counts(streams)


def leaders(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, replicas) as the metadata says."""
    found = admin.list_topics(topic, timeout=30).topics[topic]
    return {p: (info.leader, list(info.replicas)) for p, info in found.partitions.items()}


def json_after(text: str, heading: str) -> dict[str, Any]:
    """The JSON object on the first line that starts with '{' after the line `heading`."""
    lines = text.splitlines()
    start = lines.index(heading)
    return json.loads(next(line for line in lines[start:] if line.startswith("{")))


def test_kafka_shell_tools_against_a_kcli_cluster(kcli_cluster: LocalKraftCluster, tmp_path: Path) -> None:
    """kafka-reassign-partitions generate/execute/verify, kafka-leader-election, kafka-transactions,
    kafka-log-dirs and kafka-get-offsets against the kcli cluster: each exits 0 and prints what it
    prints against Kafka (the lines of the tools' own source, checked here field by field)."""
    b, topic, txn_topic, txn_id = kcli_cluster.bootstrap, "tools-moved", "tools-txn", "tools-tid"
    admin = AdminClient({"bootstrap.servers": b, **CLIENT_TIMEOUTS})
    created = admin.create_topics(
        [NewTopic(topic, 2, replica_assignment=[[1, 2], [2, 3]]), NewTopic(txn_topic, 1, 3)],
        request_timeout=60,
    )
    for future in created.values():
        future.result(60)
    producer = Producer(
        {"bootstrap.servers": b, "acks": "all", "message.timeout.ms": 120000, **CLIENT_TIMEOUTS}
    )
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(120) == 0
    txn_producer = Producer({"bootstrap.servers": b, "transactional.id": txn_id, **CLIENT_TIMEOUTS})
    txn_producer.init_transactions(60)
    txn_producer.begin_transaction()
    for i in range(3):
        txn_producer.produce(txn_topic, value=f"t{i}".encode(), partition=0)
    txn_producer.commit_transaction(60)

    # kafka-transactions asks about the transaction (describe-producers and find-hanging of a broker
    # that follows the partition), before the reassignment below: a broker-wide find-hanging lists every
    # partition of that broker and fails (against Kafka too) on one the move has taken away meanwhile.
    txn_leader = leaders(admin, txn_topic)[0][0]
    follower = min(n for n in (1, 2, 3) if n != txn_leader)
    transactions = [
        ["list"],
        ["describe", "--transactional-id", txn_id],
        ["describe-producers", "--topic", txn_topic, "--partition", "0", "--broker-id", str(follower)],
        ["find-hanging", "--broker-id", str(follower)],
        ["find-hanging", "--topic", txn_topic],
    ]
    pool = ThreadPoolExecutor(max_workers=2)
    answers = [
        pool.submit(tool, tmp_path, apache_kafka.TRANSACTIONS_COMMAND, "--bootstrap-server", b, *args)
        for args in transactions
    ]
    pool.shutdown(wait=True)

    # kafka-reassign-partitions: --generate proposes from the current assignment; --execute runs a plan
    # that reorders partition 0's replicas and moves partition 1 from broker 2 to broker 1.
    move = tmp_path / "move.json"
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    plan = tmp_path / "plan.json"
    target = {0: [2, 1], 1: [1, 3]}
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in target.items()
    ]}))  # fmt: skip
    generated = tool(tmp_path, REASSIGN, "--bootstrap-server", b, "--topics-to-move-json-file", str(move),
                     "--broker-list", "1,2,3", "--generate")  # fmt: skip
    current = json_after(generated, "Current partition replica assignment")
    assert current == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": topic, "partition": 1, "replicas": [2, 3], "log_dirs": ["any", "any"]},
    ]}  # fmt: skip
    proposed = json_after(generated, "Proposed partition reassignment configuration")
    assert [p["partition"] for p in proposed["partitions"]] == [0, 1]
    assert all(
        len(set(p["replicas"])) == 2 and set(p["replicas"]) <= {1, 2, 3} for p in proposed["partitions"]
    )

    executed = tool(
        tmp_path, REASSIGN, "--bootstrap-server", b, "--reassignment-json-file", str(plan), "--execute"
    )
    assert json_after(executed, "Current partition replica assignment") == current
    assert "Save this to use as the --reassignment-json-file option during rollback" in executed
    assert (
        executed.splitlines()[-1] == f"Successfully started partition reassignments for {topic}-0,{topic}-1"
    )

    def verified() -> str | None:
        out = tool(
            tmp_path, REASSIGN, "--bootstrap-server", b, "--reassignment-json-file", str(plan), "--verify"
        )
        return out if "is still in progress" not in out else None

    verify = wait_for(
        "kafka-reassign-partitions --verify to report both completed", verified, 120, interval=0.5
    )
    assert verify.splitlines() == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
        f"Reassignment of partition {topic}-1 is completed.",
        "",
        "Clearing broker-level throttles on brokers 1,2,3",
        f"Clearing topic-level throttles on topic {topic}",
    ]
    # A reorder keeps the leader (1) that is still a replica, as Kafka's controller does; the preferred
    # leader is now 2, which kafka-leader-election then elects.
    wait_for("partition 0 led by 1 with replicas [2, 1]", lambda: leaders(admin, topic)[0] == (1, [2, 1]), 30)
    elected = tool(tmp_path, LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "preferred",
                   "--topic", topic, "--partition", "0")  # fmt: skip
    assert elected == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"
    wait_for("partition 0 led by 2", lambda: leaders(admin, topic)[0] == (2, [2, 1]), 30)
    again = tool(tmp_path, LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "preferred",
                 "--topic", topic, "--partition", "0")  # fmt: skip
    assert again == f"Valid replica already elected for partitions {topic}-0\n"

    log_dirs_args = ["--bootstrap-server", b, "--describe", "--topic-list", topic]
    offsets_args = ["--bootstrap-server", b, "--topic-partitions", f"{topic}:0,{topic}:1,{txn_topic}:0"]
    log_dirs, offsets = in_parallel(
        lambda: tool(tmp_path, apache_kafka.LOG_DIRS_COMMAND, *log_dirs_args),
        lambda: tool(tmp_path, apache_kafka.GET_OFFSET_SHELL, *offsets_args),
    )
    listed, described, producers, hanging_on_broker, hanging_in_topic = (a.result() for a in answers)

    def table(text: str) -> list[list[str]]:
        return [[cell.strip() for cell in line.split("\t")][:-1] for line in text.splitlines()]

    assert table(listed)[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [row] = [r for r in table(listed)[1:] if r[0] == txn_id]
    coordinator, producer_id = int(row[1]), row[2]
    assert coordinator in (1, 2, 3) and row[3] == "CompleteCommit"
    header, detail = table(described)
    assert header == [
        "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
        "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
    ]  # fmt: skip
    assert detail[:5] == [str(coordinator), txn_id, producer_id, "0", "CompleteCommit"] and detail[8] == ""
    # A follower answers DescribeProducers from its own replica, as Kafka's Partition.activeProducerState.
    header, state = table(producers)
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset"]  # fmt: skip
    assert state[:2] == [producer_id, "0"] and state[3] == "2" and state[5] == "None"
    no_hanging = [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]]  # fmt: skip
    assert table(hanging_on_broker) == table(hanging_in_topic) == no_hanging

    assert log_dirs.splitlines()[:2] == [
        "Querying brokers for log directories information",
        "Received log directory information from brokers 1,2,3",
    ]
    body = json.loads(log_dirs.splitlines()[2])
    assert body["version"] == 1
    hosted = {}
    for broker in body["brokers"]:
        (only,) = broker["logDirs"]
        assert only["error"] is None and Path(only["logDir"]) == node_log_dirs(kcli_cluster)[broker["broker"]]
        for p in only["partitions"]:
            assert p["isFuture"] is False and p["offsetLag"] == 0 and p["size"] > 0
            hosted.setdefault(p["partition"], set()).add(broker["broker"])
    assert hosted == {f"{topic}-0": {1, 2}, f"{topic}-1": {1, 3}}
    assert sorted(offsets.split()) == [f"{topic}:0:10", f"{topic}:1:10", f"{txn_topic}:0:4"]


# --- VerifiableProducer and VerifiableConsumer through a leader's SIGKILL ----------------------------


class JsonLines:
    """A running tool's JSON stdout lines, read on a thread; waits are on the lines, not on sleeps."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                with self.changed:
                    self.lines.append(json.loads(line))
                    self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def named(self, name: str) -> list[dict[str, Any]]:
        with self.changed:
            return [line for line in self.lines if line.get("name") == name]

    def wait(
        self, what: str, check: Callable[[], bool], timeout: float, explain: Callable[[], str] | None = None
    ) -> None:
        """Until `check()` holds; fail naming `what`, the tool's last lines and `explain()` (its log, the
        brokers') when the tool exits first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not check():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (not self.reader.is_alive() and not check()):
                    pytest.fail(
                        f"{what}: not after {timeout:g} s (tool exit status {self.process.poll()}); "
                        f"its last lines: {self.lines[-5:]}" + (f"\n{explain()}" if explain else "")
                    )
                self.changed.wait(min(remaining, 1.0))


def start_tool(main_class: str, args: Sequence[str], workdir: Path) -> JsonLines:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{main_class.rsplit('.', 1)[-1]}.log"
    command = apache_kafka.java_command(main_class, args, log_path=log_path, level="warn")
    with open(workdir / f"{main_class.rsplit('.', 1)[-1]}.stderr", "w") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=workdir, stdin=subprocess.DEVNULL
        )
    return JsonLines(process)


def stop_tool(tool_lines: JsonLines) -> None:
    """SIGTERM by PID (the tools' shutdown hooks print their last events), SIGKILL after 30 s."""
    process = tool_lines.process
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    tool_lines.reader.join(10)


MESSAGES = 4000
KILL_AFTER = 1000


def test_verifiable_producer_loses_no_acknowledged_record_through_a_leader_kill(
    kcli_cluster: LocalKraftCluster, tmp_path: Path
) -> None:
    """VerifiableProducer (acks=all) into one partition of replication factor 3 and min.insync.replicas
    2; after KILL_AFTER acknowledgements the partition's leader gets SIGKILL and the producer goes on
    with the new leader. VerifiableConsumer then reads every acknowledged value.

    The tool sets retries=0, as Kafka's system tests run it: sends in flight to the killed leader fail
    (a NetworkException or NOT_LEADER_OR_FOLLOWER each) and may or may not be in the log; the judgement
    is Kafka's ProduceConsumeValidateTest's, every acknowledged value consumed, plus what a log must
    hold anyway: only values that were sent, each once, at offsets without a gap."""
    b, topic = kcli_cluster.bootstrap, "verifiable"
    admin = AdminClient({"bootstrap.servers": b, **CLIENT_TIMEOUTS})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})], request_timeout=60)[
        topic
    ].result(60)

    def leader() -> int | None:
        found = leaders(admin, topic)[0][0]
        return found if found > 0 else None

    victim = wait_for("a leader for the topic", leader, 60)
    producer_config, consumer_config = tmp_path / "producer.properties", tmp_path / "consumer.properties"
    producer_config.write_text("request.timeout.ms=30000\ndelivery.timeout.ms=180000\nmax.block.ms=120000\n")
    consumer_config.write_text("request.timeout.ms=30000\ndefault.api.timeout.ms=120000\n")
    producer = start_tool(VERIFIABLE_PRODUCER, [
        "--bootstrap-server", b, "--topic", topic, "--max-messages", str(MESSAGES), "--throughput", "1000",
        "--acks", "-1", "--producer.config", str(producer_config),
    ], tmp_path / "producer")  # fmt: skip
    try:
        producer.wait(f"{KILL_AFTER} acknowledgements before the kill",
                      lambda: len(producer.named("producer_send_success")) >= KILL_AFTER, 120)  # fmt: skip
        killed_ms = time.time() * 1000
        kcli_cluster[victim].kill()
        producer.wait("the producer to finish", lambda: bool(producer.named("tool_data")), 240)
    finally:
        stop_tool(producer)
    sent = {str(i) for i in range(MESSAGES)}
    successes = producer.named("producer_send_success")
    acked = {line["value"] for line in successes}
    errors = producer.named("producer_send_error")
    [summary] = producer.named("tool_data")
    assert summary["sent"] == MESSAGES and summary["acked"] == len(acked) == len(successes)
    assert len(acked) + len(errors) == MESSAGES
    # Only sends the kill cut fail, and the producer goes on with the new leader to the last record.
    assert all(e["timestamp"] >= killed_ms - 1000 for e in errors), errors[:3]
    network, not_leader = (
        f"class org.apache.kafka.common.errors.{name}Exception" for name in ("Network", "NotLeaderOrFollower")
    )
    assert {e["exception"] for e in errors} <= {network, not_leader}, errors[:3]
    assert all(
        e["message"] == f"Disconnected from node {victim}" for e in errors if e["exception"] == network
    )
    assert str(MESSAGES - 1) in acked and any(s["timestamp"] > killed_ms for s in successes)
    new_leader = wait_for("a new leader", lambda: (found := leader()) != victim and found, 60)

    consumer = start_tool(VERIFIABLE_CONSUMER, [
        "--bootstrap-server", b, "--topic", topic, "--group-id", "verifiable-group", "--group-protocol",
        "classic", "--reset-policy", "earliest", "--verbose", "--session-timeout", "30000",
        "--consumer.config", str(consumer_config),
    ], tmp_path / "consumer")  # fmt: skip
    end = max(s["offset"] for s in successes) + 1  # the last value sent was acknowledged: the log's end
    try:

        def read_to_the_end() -> bool:
            return len(consumer.named("record_data")) >= end

        consumer.wait(f"{end} records consumed", read_to_the_end, 120)
    finally:
        stop_tool(consumer)
        kcli_cluster[victim].start()
    consumed = consumer.named("record_data")
    values = [line["value"] for line in consumed]
    assert acked - set(values) == set(), "acknowledged records lost"
    assert set(values) <= sent and len(values) == len(set(values)) == end
    assert sorted(line["offset"] for line in consumed) == list(range(end))
    kcli_cluster[victim].wait_ready()
    print(
        f"leader {victim} killed, {new_leader} leads; {len(errors)} sends failed, {len(acked)} acknowledged"
    )
