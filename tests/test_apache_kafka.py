"""Apache Kafka 4.1 as the reference (tests/apache_kafka.py): kcli's tools against a real Kafka node,
Kafka's own tools against kcli's broker, and each side's kafka-dump-log on the other side's segments.

One Kafka node serves the whole run (the session fixture `kafka_node`); each test uses topic and group
names of its own. Kafka's tools are JVMs of about a second each on two cores, so each test runs the few
it needs, the independent ones side by side. Lines that change between two reads of a live cluster (the
metadata log's high watermark, a feature epoch, fetch times) are compared after masking those values only.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import apache_kafka
import pytest
from apache_kafka import (
    CONFIG_COMMAND,
    CONSUMER_GROUP_COMMAND,
    DUMP_LOG_SEGMENTS,
    FEATURE_COMMAND,
    GET_OFFSET_SHELL,
    LOG_DIRS_COMMAND,
    METADATA_QUORUM_COMMAND,
    TOPIC_COMMAND,
    TRANSACTIONS_COMMAND,
    KafkaCluster,
)
from cli_in_process import run_kcli
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from conftest import (
    KCLI,
    BrokerProcess,
    free_port_range,
    kcli_env,
    require_apache_kafka,
    start_broker,
    stop_cleanly,
)
from waiting import wait_for

pytestmark = pytest.mark.timeout(240)
NO_REBALANCE_DELAY = "group.initial.rebalance.delay.ms=0"
"""As the Kafka node runs: a group's first member joins without the 3 s wait (same default on both)."""


T = TypeVar("T")


def kcli(*args: str) -> str:
    """stdout of `kcli ARGS`, which must exit 0, run in this process (tests/cli_in_process.py: a
    `python -m kcli` costs ~0.13 CPU-s of start-up, the command itself a few ms). The first test runs
    its create through kcli_process, so the entry point is proven against Kafka too."""
    return _succeeded(args, run_kcli(*args))


def kcli_process(*args: str) -> str:
    """stdout of a real `python -m kcli ARGS` process, which must exit 0."""
    return _succeeded(
        args, subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=60)
    )


def _succeeded(args: Sequence[str], result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"kcli {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def kafka(workdir: Path, main_class: str, *args: str, stdin: str | None = None) -> str:
    """stdout of one of Kafka's tools, which must exit 0 (stderr in the message when it does not)."""
    result = apache_kafka.run_tool(main_class, args, workdir=workdir, stdin=stdin)
    name = main_class.rsplit(".", 1)[-1]
    assert result.returncode == 0, f"{name} {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def in_parallel(*calls: Callable[[], T]) -> list[T]:
    """Run independent tool invocations side by side (each is a JVM or a Python start-up)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        return [future.result() for future in [pool.submit(call) for call in calls]]


def produce(bootstrap: str, topic: str, count: int, partitions: int, **config: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    for i in range(count):
        producer.produce(
            topic, key=f"key-{i}", value=f"value-{i}", partition=i % partitions, headers={"h": b"1"}
        )
    assert producer.flush(30) == 0


def produce_transaction(bootstrap: str, topic: str, commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{commit}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"txn", value=b"committed" if commit else b"aborted", partition=0)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    """Read `count` records as a member of `group` and commit synchronously, leaving the group Empty."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == count


def mask(text: str, *fields: str) -> str:
    """`text` with the values of `fields` (as "Field: value" or "Field:   value") replaced by "*"."""
    for name in fields:
        text = re.sub(rf"({re.escape(name)}:\s*)\S+", r"\1*", text)
    return text


def group_rows(text: str) -> set[tuple[str, ...]]:
    """(group, topic, partition, current offset, log end offset, lag) of kafka-consumer-groups.sh --describe
    or kcli groups describe: the data both print, in columns of their own."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    header = next(cols for cols in lines if cols[:2] == ["GROUP", "TOPIC"])
    wanted = [
        header.index(c) for c in ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
    ]
    return {tuple(cols[i] for i in wanted) for cols in lines if len(cols) == len(header) and cols != header}


# --- kcli's tools against Apache Kafka ---------------------------------------------------------------


def test_kcli_topics_lines_equal_kafka_topics_against_kafka(kafka_node: KafkaCluster, tmp_path: Path) -> None:
    """`kcli topics` on a Kafka node: the describe lines equal TopicCommand's field for field."""
    b, topic = kafka_node.bootstrap, "kcli-topics"
    assert kcli_process("topics", "create", "-b", b, "-t", topic, "--partitions", "3", "--replication-factor", "1",
                "--config", "cleanup.policy=compact", "--config", "retention.ms=600000") == f"Created topic {topic}.\n"  # fmt: skip
    ours, theirs, listed, their_list = in_parallel(
        lambda: kcli("topics", "describe", "-b", b, "-t", topic),
        lambda: kafka(tmp_path, TOPIC_COMMAND, "--bootstrap-server", b, "--describe", "--topic", topic),
        lambda: kcli("topics", "list", "-b", b),
        lambda: kafka(tmp_path, TOPIC_COMMAND, "--bootstrap-server", b, "--list", "--exclude-internal"),
    )
    assert ours.splitlines() == theirs.splitlines()
    assert len(ours.splitlines()) == 4 and "cleanup.policy=compact" in ours
    assert topic in listed.split() and topic in their_list.split()
    assert set(their_list.split()) <= set(listed.split())  # kcli lists internal topics too

    assert kcli("topics", "delete", "-b", b, "-t", topic) == f"Deleted topic {topic}.\n"
    wait_for(
        f"{topic} gone from the list", lambda: topic not in kcli("topics", "list", "-b", b).split(), 10, 0.2
    )


def test_kcli_configs_lines_equal_kafka_configs_against_kafka(
    kafka_node: KafkaCluster, tmp_path: Path
) -> None:
    """`kcli configs alter/describe` on a Kafka node: the same lines as ConfigCommand --describe."""
    b, topic = kafka_node.bootstrap, "kcli-configs"
    kcli("topics", "create", "-b", b, "-t", topic, "--partitions", "1", "--replication-factor", "1")
    kcli(
        "configs",
        "alter",
        "-b",
        b,
        "--topic",
        topic,
        "--add-config",
        "retention.ms=100000,cleanup.policy=compact",
    )
    kcli("configs", "alter", "-b", b, "--topic", topic, "--add-config", "segment.ms=600000")
    kcli("configs", "alter", "-b", b, "--topic", topic, "--delete-config", "cleanup.policy")
    ours, theirs = in_parallel(
        lambda: kcli("configs", "describe", "-b", b, "--topic", topic),
        lambda: kafka(
            tmp_path,
            CONFIG_COMMAND,
            "--bootstrap-server",
            b,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
        ),  # fmt: skip
    )
    assert ours.splitlines() == theirs.splitlines()
    assert ours.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  retention.ms=100000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=100000}",
        "  segment.ms=600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.ms=600000}",
    ]


def test_kcli_groups_features_quorum_against_kafka(kafka_node: KafkaCluster, tmp_path: Path) -> None:
    """`kcli groups list/describe` after a librdkafka group commits, `kcli features describe` and
    `kcli quorum describe --status` on a Kafka node, beside kafka-consumer-groups, kafka-features and
    kafka-metadata-quorum on the same node."""
    b, topic, group = kafka_node.bootstrap, "kcli-groups", "kcli-group"
    kcli("topics", "create", "-b", b, "-t", topic, "--partitions", "2", "--replication-factor", "1")
    produce(b, topic, 10, 2)
    consume_and_commit(b, topic, group, 10)
    listed, ours, theirs, features, their_features, quorum, their_quorum = in_parallel(
        lambda: kcli("groups", "list", "-b", b),
        lambda: kcli("groups", "describe", "-b", b, group),
        lambda: kafka(
            tmp_path, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--describe", "--group", group
        ),
        lambda: kcli("features", "describe", "-b", b),
        lambda: kafka(tmp_path, FEATURE_COMMAND, "--bootstrap-server", b, "describe"),
        lambda: kcli("quorum", "--bootstrap-server", b, "describe", "--status"),
        lambda: kafka(tmp_path, METADATA_QUORUM_COMMAND, "--bootstrap-server", b, "describe", "--status"),
    )
    assert [group, "Empty", "consumer", "1"] in [line.split() for line in listed.splitlines()]
    rows = {(group, topic, str(p), "5", "5", "0") for p in range(2)}
    assert group_rows(ours) == group_rows(theirs) == rows
    assert mask(features, "Epoch").splitlines() == mask(their_features, "Epoch").splitlines()
    assert "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.1-IV1" in features
    volatile = ("HighWatermark", "MaxFollowerLagTimeMs")
    assert mask(quorum, *volatile).splitlines() == mask(their_quorum, *volatile).splitlines()
    node = kafka_node.nodes[0]
    assert (
        f'CurrentVoters:          [{{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:{node.controller_port}"]}}]'
        in quorum
    )


def test_kcli_transactions_lines_equal_kafka_transactions_against_kafka(
    kafka_node: KafkaCluster, tmp_path: Path
) -> None:
    """`kcli transactions list/describe` on a Kafka node print kafka-transactions.sh's table (cells padded
    and tab-terminated), the same rows; the running duration of a transaction is masked."""
    b, topic = kafka_node.bootstrap, "kcli-transactions"
    kcli("topics", "create", "-b", b, "-t", topic, "--partitions", "1", "--replication-factor", "1")
    produce_transaction(b, topic, commit=True)
    txn_id = f"{topic}-True"
    # the commit returns once PrepareCommit is written; CompleteCommit follows the markers, and both
    # tools must read the same state
    wait_for(
        "CompleteCommit",
        lambda: "CompleteCommit" in kcli("transactions", "describe", "-b", b, "--transactional-id", txn_id),
        timeout=30,
        interval=0.2,
    )
    listed, their_list, described, their_description = in_parallel(
        lambda: kcli("transactions", "list", "-b", b),
        lambda: kafka(tmp_path, TRANSACTIONS_COMMAND, "--bootstrap-server", b, "list"),
        lambda: kcli("transactions", "describe", "-b", b, "--transactional-id", txn_id),
        lambda: kafka(
            tmp_path, TRANSACTIONS_COMMAND, "--bootstrap-server", b, "describe", "--transactional-id", txn_id
        ),
    )
    assert listed.splitlines()[0] == their_list.splitlines()[0]
    assert [c.strip() for c in listed.splitlines()[0].split("\t")] == [
        "TransactionalId", "Coordinator", "ProducerId", "TransactionState", ""
    ]  # fmt: skip
    assert sorted(listed.splitlines()) == sorted(their_list.splitlines())
    assert any(line.startswith(txn_id) and "CompleteCommit" in line for line in listed.splitlines())

    def without_duration(text: str) -> list[list[str]]:
        header, row = text.splitlines()
        cells = row.split("\t")
        del cells[header.split("\t").index("TransactionDurationMs")]
        return [header.split("\t"), [c.strip() for c in cells]]

    assert without_duration(described) == without_duration(their_description)


# --- Kafka's tools against kcli's broker -------------------------------------------------------------


def test_kafka_tools_against_kcli_broker(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """kafka-topics, kafka-configs, kafka-consumer-groups, kafka-get-offsets, kafka-features,
    kafka-metadata-quorum and kafka-log-dirs against `kcli broker`: each exits 0 and prints what kcli's
    own tool prints against the same broker (and what it prints against Kafka)."""
    broker = broker_factory(overrides=[NO_REBALANCE_DELAY])
    b, topic, group = broker.bootstrap, "from-kafka", "kafka-tools-group"
    created = kafka(tmp_path, TOPIC_COMMAND, "--bootstrap-server", b, "--create", "--topic", topic,
                    "--partitions", "2", "--replication-factor", "1", "--config", "retention.ms=100000")  # fmt: skip
    assert created == f"Created topic {topic}.\n"
    produce(b, topic, 10, 2)
    consume_and_commit(b, topic, group, 10)
    (
        described,
        ours,
        listed,
        configs,
        our_configs,
        groups,
        group_text,
        offsets,
        features,
        our_features,
        quorum,
        our_quorum,
        log_dirs,
    ) = in_parallel(  # fmt: skip
        lambda: kafka(tmp_path, TOPIC_COMMAND, "--bootstrap-server", b, "--describe", "--topic", topic),
        lambda: kcli("topics", "describe", "-b", b, "-t", topic),
        lambda: kafka(tmp_path, TOPIC_COMMAND, "--bootstrap-server", b, "--list"),
        lambda: kafka(
            tmp_path,
            CONFIG_COMMAND,
            "--bootstrap-server",
            b,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
        ),  # fmt: skip
        lambda: kcli("configs", "describe", "-b", b, "--topic", topic),
        lambda: kafka(tmp_path, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--list"),
        lambda: kafka(
            tmp_path, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--describe", "--group", group
        ),
        lambda: kafka(tmp_path, GET_OFFSET_SHELL, "--bootstrap-server", b, "--topic", topic),
        lambda: kafka(tmp_path, FEATURE_COMMAND, "--bootstrap-server", b, "describe"),
        lambda: kcli("features", "describe", "-b", b),
        lambda: kafka(tmp_path, METADATA_QUORUM_COMMAND, "--bootstrap-server", b, "describe", "--status"),
        lambda: kcli("quorum", "--bootstrap-server", b, "describe", "--status"),
        lambda: kafka(
            tmp_path, LOG_DIRS_COMMAND, "--bootstrap-server", b, "--describe", "--topic-list", topic
        ),
    )
    assert described.splitlines() == ours.splitlines()
    assert described.splitlines()[0].endswith(  # with ELR on, the cluster-level min.insync.replicas too
        "\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: min.insync.replicas=1,retention.ms=100000"
    )
    assert topic in listed.split() and "__consumer_offsets" in listed.split()
    assert (
        configs.splitlines()
        == our_configs.splitlines()
        == [
            f"Dynamic configs for topic {topic} are:",
            "  retention.ms=100000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=100000}",
        ]
    )
    assert groups.split() == [group]
    assert group_rows(group_text) == {(group, topic, str(p), "5", "5", "0") for p in range(2)}
    assert sorted(offsets.split()) == [f"{topic}:0:5", f"{topic}:1:5"]
    # kcli's broker finalizes what Kafka 4.1 formats (4.1-IV1, ELR, group.version 1, transaction.version 2)
    # and announces metadata.version from level 1 (3.0-IV1), which Kafka 4.1 (whose own minimum is
    # 3.3-IV3) prints as "UNKNOWN 1": listed in the README's differences.
    assert "Feature: metadata.version\tSupportedMinVersion: UNKNOWN 1\t" in features
    assert "Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\t" in our_features
    features = features.replace("SupportedMinVersion: UNKNOWN 1", "SupportedMinVersion: 3.0-IV1")
    assert mask(features, "Epoch").splitlines() == mask(our_features, "Epoch").splitlines()
    volatile = ("HighWatermark", "MaxFollowerLagTimeMs")
    assert mask(quorum, *volatile).splitlines() == mask(our_quorum, *volatile).splitlines()
    assert re.search(r"^CurrentVoters: +\[\{\"id\": 1, \"directoryId\": \"[\w-]{22}\"", quorum, re.MULTILINE)
    body = json.loads(log_dirs.splitlines()[-1])
    (only,) = body["brokers"]
    (log_dir,) = only["logDirs"]
    assert log_dir["error"] is None and Path(log_dir["logDir"]) == broker.data_dir
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert sorted(sizes) == [f"{topic}-0", f"{topic}-1"] and all(size > 0 for size in sizes.values())


# --- kafka-dump-log and kcli dump-segment on each other's segments ---------------------------------


CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def fill(bootstrap: str, topic: str) -> None:
    """Batches of every codec, one committed and one aborted transaction (control batches) in partition 0."""
    for codec in CODECS:
        produce(bootstrap, topic, 4, 1, **{"compression.type": codec, "linger.ms": "50"})
    produce_transaction(bootstrap, topic, commit=True)
    produce_transaction(bootstrap, topic, commit=False)
    consume_and_commit(
        bootstrap, topic, "dump-group", 4 * len(CODECS) + 1
    )  # read_committed: not the aborted one


def written(log_dir: Path, topic: str) -> list[Path]:
    """The first segment of each partition of an internal topic that holds records."""
    segments = (p / "00000000000000000000.log" for p in log_dir.glob(f"{topic}-*"))
    return sorted(s for s in segments if s.stat().st_size)


def dumps(workdir: Path, files: Sequence[Path], *flags: str) -> tuple[list[str], list[str]]:
    """(kafka-dump-log lines, kcli dump-segment lines) for the same files and flags."""
    names = ",".join(str(f) for f in files)
    theirs, ours = in_parallel(
        lambda: kafka(workdir, DUMP_LOG_SEGMENTS, "--files", names, *flags),
        lambda: kcli("dump-segment", "--files", names, *flags),
    )
    return theirs.splitlines(), ours.splitlines()


def test_dump_log_lines_equal_on_each_others_segments(
    kafka_node: KafkaCluster, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """kafka-dump-log on segments kcli's broker wrote and kcli dump-segment on segments Kafka wrote
    (every codec, transaction markers, their indexes) print the same lines; and the same for the
    __cluster_metadata log with --cluster-metadata-decoder, up to where the live log had grown."""
    topic = "dump-both-ways"
    node, broker = kafka_node.nodes[0], broker_factory(overrides=[NO_REBALANCE_DELAY])
    kcli(
        "topics",
        "create",
        "-b",
        node.bootstrap,
        "-t",
        topic,
        "--partitions",
        "1",
        "--replication-factor",
        "1",
    )
    kcli(
        "topics",
        "create",
        "-b",
        broker.bootstrap,
        "-t",
        topic,
        "--partitions",
        "1",
        "--replication-factor",
        "1",
    )
    fill(node.bootstrap, topic)
    fill(broker.bootstrap, topic)
    segments = [d / f"{topic}-0" / "00000000000000000000.log" for d in (node.log_dir, broker.data_dir)]
    indexes = [s.with_suffix(suffix) for s in segments for suffix in (".index", ".timeindex")]
    theirs, ours = dumps(tmp_path, [*segments, *indexes], "--deep-iteration", "--print-data-log")
    assert theirs == ours
    assert sum("endTxnMarker: COMMIT" in line for line in ours) == 2  # one per side
    assert {f"compresscodec: {c}" for c in CODECS} <= {
        m.group(0) for m in re.finditer(r"compresscodec: \w+", "\n".join(ours))
    }

    sides = (node.log_dir, broker.data_dir)
    for internal, flag, marker in (
        ("__transaction_state", "--transaction-log-decoder", '"transactionStatus":4'),  # CompleteCommit
        ("__consumer_offsets", "--offsets-decoder", '"commitTimestamp":'),
    ):
        files = [f for d in sides for f in written(d, internal)]
        assert len({f.parents[2] for f in files}) == 2, files  # both sides wrote some
        theirs, ours = dumps(tmp_path, files, flag)
        assert theirs == ours, internal
        assert sum(marker in line for line in ours) >= 2, internal

    metadata = [
        d / "__cluster_metadata-0" / "00000000000000000000.log" for d in (node.log_dir, broker.data_dir)
    ]
    for path in metadata:  # both logs grow while the dumps run (NoOpRecords): compare the common prefix
        theirs, ours = dumps(tmp_path, [path], "--cluster-metadata-decoder")
        common = min(len(theirs), len(ours)) - 2
        assert common > 10 and theirs[:common] == ours[:common], path
        assert any("LeaderChange: {" in line for line in ours[:common])


# --- a three-node Apache Kafka cluster -----------------------------------------------------------------


def test_kcli_topics_and_quorum_against_a_kafka_cluster(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """On three Kafka nodes: a replicated topic's describe lines (replicas, ISR, leaders spread by Kafka's
    placement) and the quorum's status (three voters with their endpoints) equal Kafka's tools' lines."""
    b, topic = kafka_cluster.bootstrap, "kcli-replicated"
    kcli("topics", "create", "-b", b, "-t", topic, "--partitions", "3", "--replication-factor", "3",
         "--config", "min.insync.replicas=2")  # fmt: skip
    # CreateTopics answers once the controller has committed the topic; each broker learns it from the
    # metadata log a moment later, and the tools below may ask any of them
    for node in kafka_cluster.nodes:
        wait_for(
            f"node {node.node_id} to know {topic}",
            lambda node=node: (
                run_kcli("topics", "describe", "-b", node.bootstrap, "-t", topic).returncode == 0
            ),
            30,
            0.2,
        )
    ours, theirs, quorum, their_quorum = in_parallel(
        lambda: kcli("topics", "describe", "-b", b, "-t", topic),
        lambda: kafka(tmp_path, TOPIC_COMMAND, "--bootstrap-server", b, "--describe", "--topic", topic),
        lambda: kcli("quorum", "--bootstrap-server", b, "describe", "--status"),
        lambda: kafka(tmp_path, METADATA_QUORUM_COMMAND, "--bootstrap-server", b, "describe", "--status"),
    )
    assert ours.splitlines() == theirs.splitlines()
    assert {line.split("\tReplicas: ")[1].split("\t")[0] for line in ours.splitlines()[1:]} == {
        "1,2,3",
        "2,3,1",
        "3,1,2",
    }
    volatile = ("HighWatermark", "MaxFollowerLagTimeMs", "MaxFollowerLag")
    assert mask(quorum, *volatile).splitlines() == mask(their_quorum, *volatile).splitlines()
    voters = json.loads(re.search(r"^CurrentVoters: +(.*)$", quorum, re.MULTILINE)[1])
    assert voters == [
        {"id": n.node_id, "endpoints": [f"CONTROLLER://127.0.0.1:{n.controller_port}"]}
        for n in kafka_cluster.nodes
    ]


# --- one log dir, both programs ------------------------------------------------------------------------


def committed_and_readable(bootstrap: str, topic: str, group: str) -> tuple[list[int], int]:
    """(the group's committed offsets of partitions 0 and 1, how many records a new group reads)."""
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 30
    while True:  # a broker that just started answers NOT_COORDINATOR until it has loaded __consumer_offsets
        try:
            partitions = committed.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)
            break
        except KafkaException as error:
            code = error.args[0].code()
            if code not in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
                raise
            assert time.monotonic() < deadline, f"committed offsets still {error} after 30 s"
            time.sleep(0.2)
    offsets = [tp.offset for tp in partitions]
    committed.close()
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{group}-reader-{time.monotonic_ns()}",
         "auto.offset.reset": "earliest", "enable.partition.eof": True}
    )  # fmt: skip
    reader.subscribe([topic])
    seen, at_end, deadline = 0, set(), time.monotonic() + 30
    while len(at_end) < 2 and time.monotonic() < deadline:
        message = reader.poll(1.0)
        if message is None:
            continue
        if message.error() is None:
            seen += 1
        elif message.error().code() == KafkaError._PARTITION_EOF:
            at_end.add(message.partition())
    reader.close()
    return offsets, seen


def test_a_log_dir_moves_from_kcli_to_kafka_and_back(tmp_path: Path) -> None:
    """One server.properties, one log dir: `kcli broker` formats and fills it (records, a committed group,
    a committed and an aborted transaction), Apache Kafka starts on it with no recovery of a data
    partition, serves it all and appends, and kcli starts again on what Kafka wrote (its metadata log
    records included) and serves everything."""
    require_apache_kafka()
    port, topic, group = free_port_range(2), "moving", "moving-group"
    node = apache_kafka.KafkaNode(1, port, port + 1, tmp_path / "node")
    node.workdir.mkdir(parents=True)
    props = node.workdir / "server.properties"
    props.write_text(apache_kafka.server_properties(node, f"1@127.0.0.1:{port + 1}", replication=1))

    broker = start_broker(tmp_path / "kcli", config=props, data_dir=node.log_dir)
    try:
        kcli(
            "topics",
            "create",
            "-b",
            broker.bootstrap,
            "-t",
            topic,
            "--partitions",
            "2",
            "--replication-factor",
            "1",
        )
        produce(broker.bootstrap, topic, 10, 2)
        consume_and_commit(broker.bootstrap, topic, group, 10)
        produce_transaction(broker.bootstrap, topic, commit=True)
        produce_transaction(broker.bootstrap, topic, commit=False)
    finally:
        stop_cleanly(broker)

    apache_kafka.launch(node, props)
    try:
        apache_kafka.wait_ready(node, time.monotonic())
        assert committed_and_readable(node.bootstrap, topic, group) == ([5, 5], 11)  # read_committed
        produce(node.bootstrap, topic, 4, 2)
    finally:
        assert node.stop() in (0, 143), node.log()[-3000:]
    recovered = [line for line in node.log().splitlines() if "Recovering unflushed segment" in line]
    assert all("partition=__cluster_metadata-0" in line for line in recovered), (
        recovered
    )  # Kafka always replays it

    broker = start_broker(tmp_path / "kcli-again", config=props, data_dir=node.log_dir)
    try:
        assert committed_and_readable(broker.bootstrap, topic, group) == ([5, 5], 15)
    finally:
        stop_cleanly(broker)


def test_kcli_starts_on_a_dir_kafka_formatted_unless_a_finalized_feature_is_beyond_it(tmp_path: Path) -> None:
    """kafka-storage format's meta.properties and bootstrap.checkpoint with Kafka 4.1's defaults
    (metadata.version 4.1-IV1, ELR on, group.version 1, transaction.version 2) start `kcli broker`; with
    share.version 1 (KIP-932 share groups, which kcli does not implement) the broker refuses to register
    and says which feature."""
    require_apache_kafka()
    cluster_id = apache_kafka.random_cluster_id()
    dirs = {}
    for name in ("defaults", "share"):
        port = free_port_range(2)
        node = apache_kafka.KafkaNode(1, port, port + 1, tmp_path / name)
        node.workdir.mkdir(parents=True)
        props = node.workdir / "server.properties"
        props.write_text(apache_kafka.server_properties(node, f"1@127.0.0.1:{port + 1}", replication=1))
        dirs[name] = (node, props)
    features = {"defaults": [], "share": ["--feature", "share.version=1"]}
    outputs = in_parallel(
        *(
            lambda name=name: kafka(
                tmp_path,
                apache_kafka.STORAGE_TOOL,
                "format",
                "-t",
                cluster_id,
                "-c",
                str(dirs[name][1]),
                *features[name],
            )  # fmt: skip
            for name in dirs
        )
    )
    assert all("with metadata.version 4.1-IV1" in out for out in outputs), outputs

    refused = subprocess.run(
        [*KCLI, "broker", "start", "--config", str(dirs["share"][1])],
        capture_output=True, text=True, env=kcli_env(), timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert re.search(
        r"^kcli: the controller refused this broker's registration: unsupported_version: Unable to register "
        r"because the broker does not support finalized version 1 of share\.version\.",
        refused.stderr,
        re.MULTILINE,
    ), refused.stderr

    node, props = dirs["defaults"]
    broker = start_broker(tmp_path / "kcli", config=props, data_dir=node.log_dir)
    try:
        features_text = kcli("features", "describe", "-b", broker.bootstrap)
        for line in (
            "Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\tSupportedMaxVersion: 4.1-IV1\tFinalizedVersionLevel: 4.1-IV1",
            "Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1",
            "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1",
            "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 2",
        ):
            assert line in features_text, features_text
    finally:
        stop_cleanly(broker)
