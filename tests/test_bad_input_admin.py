"""Bad input to the admin commands against one live broker: each row is argv, the exit status, a
fragment of the one sentence expected, and whether the broker must be left exactly as it was (its
topics, every partition's log end offset and the group's committed offsets).

The commands run through the real entry point in this process (`run_kcli`); two tests run a real
`python -m kcli` process (one with a pty as stdin, to answer the confirmation). What goes beyond
Kafka's own tools (refusing internal topics, asking before a regex acts on names it does not spell
out, refusing made-up producers and empty lists) is said in the rows' comments and in each command's
help.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import KCLI, BrokerProcess, kcli_env, start_broker, stop_cleanly
from kio.schema.errors import ErrorCode

from kcli.client import KafkaClient
from kcli.protocol.messages import build, nested_type, request_type

pytestmark = pytest.mark.timeout(240)

GROUP = "g1"
ZERO = uuid.UUID(int=0)
Snapshot = tuple[list[str], dict[tuple[str, int], int], dict[tuple[str, int], int]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for every row: topics t1 (three records) and t2, group g1 committed at t1-0 offset 1."""
    process = start_broker(tmp_path_factory.mktemp("bad-input-admin") / "broker")
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        for future in admin.create_topics([NewTopic("t1", 1, 1), NewTopic("t2", 1, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": process.bootstrap, "enable.idempotence": True})
        for value in (b"a", b"b", b"c"):
            producer.produce("t1", value, partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": process.bootstrap, "group.id": GROUP, "enable.auto.commit": False}
        )
        consumer.commit(offsets=[TopicPartition("t1", 0, 1)], asynchronous=False)
        consumer.close()
        yield process
    finally:
        stop_cleanly(process)


def snapshot(broker: BrokerProcess) -> Snapshot:
    """The topics, the log end offset of each partition, and the group's committed offsets."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    metadata = admin.list_topics(timeout=30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
    try:
        ends = {
            (name, p): consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30)[1]
            for name, topic in metadata.topics.items()
            if not name.startswith("__")
            for p in topic.partitions
        }
        committed = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.committed([TopicPartition("t1", 0), TopicPartition("t2", 0)], timeout=30)
        }
    finally:
        consumer.close()
    return sorted(metadata.topics), ends, committed


def _files(tmp: Path) -> dict[str, str]:
    """Input files the rows name, written once per test."""
    corrupt_dir = tmp / "src-0"
    corrupt_dir.mkdir(exist_ok=True)
    # a unit of 100 bytes whose magic is 7: no Kafka format
    unit = (0).to_bytes(8, "big") + (100).to_bytes(4, "big") + (0).to_bytes(4, "big") + bytes([7])
    (corrupt_dir / "00000000000000000000.log").write_bytes(unit.ljust(112 * 3, b"\x00"))
    paths = {
        "empty_election": tmp / "empty-election.json",
        "missing_partition": tmp / "missing-partition.json",
        "topics_to_move": tmp / "topics.json",
    }
    paths["empty_election"].write_text('{"partitions": []}')
    paths["missing_partition"].write_text(
        json.dumps({"version": 1, "partitions": [{"topic": "t1", "partition": 5, "replicas": [1]}]})
    )
    paths["topics_to_move"].write_text(json.dumps({"version": 1, "topics": [{"topic": "t1"}]}))
    paths["no_topics"] = tmp / "no-topics.json"
    paths["no_topics"].write_text('{"version": 1, "topics": []}')
    paths["reset_csv"] = tmp / "reset.csv"
    paths["reset_csv"].write_text("t1,0,2\nt1,9,1\n")
    paths["no_partitions"] = tmp / "no-partitions.json"
    paths["no_partitions"].write_text('{"version": 1, "partitions": []}')
    return {
        **{name: str(path) for name, path in paths.items()},
        "corrupt_source": str(corrupt_dir),
        "good_source": str(tmp / "good-0"),
        "no_dir_checkpoint": str(tmp / "no-such-dir" / "replay.checkpoint"),
        "a_dir": str(corrupt_dir.parent),
    }


# argv (with {placeholders} for the files above), exit status, fragment of the sentence, nothing changed
ROWS: list[tuple[list[str], int, str, bool]] = [
    # internal topics are refused (beyond kafka-topics.sh in KRaft; the ZooKeeper-era tool refused too)
    (["topics", "delete", "-t", "__consumer_offsets"], 2,
     "topic __consumer_offsets is an internal topic and cannot be deleted.", True),
    (["topics", "delete", "-t", "__.*"], 2,
     "is an internal topic and cannot be deleted (--topic '__.*' matches __consumer_offsets).", True),
    # a regex matching names it does not spell out: --yes is needed when stdin is not a terminal
    (["topics", "delete", "-t", ".."], 2,
     "--topic '..' is a regular expression that matches t1, t2: give --yes to delete them", True),
    (["topics", "delete", "-t", "t1|t."], 2, "matches t1, t2: give --yes to delete them", True),
    (["topics", "alter", "-t", "t.", "--partitions", "2"], 2,
     "--topic 't.' is a regular expression that matches t1, t2: give --yes to alter them", True),
    (["topics", "delete", "-t", ""], 2, "--topic is empty: give a topic name or a regular expression.", True),
    (["topics", "alter", "-t", "__consumer_offsets", "--partitions", "60"], 2,
     "topic __consumer_offsets is an internal topic: adding partitions would move its groups'", True),
    # -1 is refused as kafka-topics.sh refuses it; leaving the option out asks for the broker default
    (["topics", "create", "-t", "fresh", "--partitions", "-1"], 2,
     "the number of partitions must be at least 1.", True),
    (["topics", "create", "-t", "fresh", "--replication-factor", "-1"], 2,
     "the replication factor must be between 1 and 32767.", True),
    (["topics", "create", "-t", "fresh", "--partitions", "0"], 2,
     "the number of partitions must be at least 1.", True),
    (["topics", "alter", "-t", "t1", "--partitions", "-1"], 2, "the number of partitions must be at least 1.", True),
    # kafka-consumer-groups.sh refuses an unknown state
    (["groups", "list", "--state", "Bogus"], 2,
     "invalid state list 'Bogus': 'Bogus' is not a group state; valid states are PreparingRebalance", True),
    (["groups", "list", "--state", "stable,Nope"], 2, "'Nope' is not a group state", True),
    (["groups", "reset-offsets", GROUP, "--from-file", "{reset_csv}", "--execute"], 2,
     "topic 't1' has no partition 9.", True),
    (["groups", "describe", "nobody"], 1, "kcli: consumer group 'nobody' does not exist.", True),
    (["groups", "reset-offsets", GROUP, "--to-earliest", "--export", "-o", "json"], 2,
     "--export prints topic,partition,offset CSV: give --export or --output json, not both.", True),
    # the controller answers Kafka's INVALID_UPDATE_VERSION for a feature no node knows
    (["features", "disable", "--feature", "foo.bar"], 1,
     "Could not disable foo.bar. The update failed for all features since the following feature had an "
        "error: Invalid update version 0 for feature foo.bar. Feature foo.bar not found.", True),
    (["features", "upgrade", "--feature", "foo.bar=0"], 1, "Feature foo.bar not found.", True),
    (["reassign", "generate", "--topics-to-move-json-file", "{topics_to_move}",
      "--remove-broker", "9"], 2,
     "Unknown broker id 9: it is not a live broker and holds no replica of the topics given.", True),
    (["reassign", "verify", "--reassignment-json-file", "{missing_partition}"], 2,
     "Unable to find partition: t1-5.", True),
    # beyond kafka-reassign-partitions.sh: an empty list would report nothing and clear every throttle
    (["reassign", "verify", "--reassignment-json-file", "{no_partitions}"], 2,
     "Partition reassignment list cannot be empty.", True),
    (["reassign", "cancel", "--reassignment-json-file", "{no_partitions}"], 2,
     "Partition reassignment list cannot be empty.", True),
    (["reassign", "execute", "--reassignment-json-file", "{no_partitions}"], 2,
     "Partition reassignment list cannot be empty.", True),
    (["reassign", "generate", "--topics-to-move-json-file", "{no_topics}", "--broker-list", "1"], 2,
     'the topics-to-move file names no topic in "topics": nothing to move.', True),
    (["reassign", "generate", "--remove-broker", "9"], 2,
     "Unknown broker id 9: it is not a live broker and holds no replica of any topic.", True),
    # beyond kafka-leader-election.sh, which elects nothing and prints nothing
    (["elect", "--election-type", "preferred", "--path-to-json-file", "{empty_election}"], 2,
     "\"partitions\" list is empty: name at least one partition.", True),
    # as kafka-transactions.sh: -1 (DescribeProducers' "no open transaction") matches nothing
    (["transactions", "abort", "--topic", "t1", "--partition", "0", "--start-offset", "-1"], 2,
     "--start-offset must be the first offset of an open transaction (0 or more), not -1.", True),
    (["transactions", "abort", "--topic", "t1", "--partition", "0", "--start-offset", "0"], 2,
     "Could not find any open transactions starting at offset 0 on partition t1-0.", True),
    # beyond kafka-transactions.sh: a producer id must be one with an open transaction on the partition
    (["transactions", "abort", "--topic", "t1", "--partition", "0", "--producer-id", "123456",
      "--producer-epoch", "0", "--coordinator-epoch", "0"], 2,
     "producer 123456 is not an active producer of t1-0: nothing to abort", True),
    (["transactions", "abort", "--topic", "t1", "--partition", "0", "--start-offset", "0",
      "--producer-id", "1"], 2, "give --start-offset, or --producer-id", True),
    (["transactions", "find-hanging", "--broker-id", "99"], 2, "broker 99 is not in the cluster metadata.", True),
    # replay: local problems fail before the destination topic is created
    (["replay", "{corrupt_source}", "-t", "replayed"], 2, "corrupt data at position 0", True),
    (["replay", "{good_source}", "-t", "replayed", "--checkpoint", "{no_dir_checkpoint}"], 2,
     "--checkpoint {no_dir_checkpoint}: directory", True),
    (["replay", "{good_source}", "-t", "replayed", "--offset-map", "{a_dir}"], 2,
     "--offset-map {a_dir} is a directory, not a file.", True),
    (["replay", "{good_source}", "-t", "replayed", "--checkpoint", "{a_dir}"], 2,
     "--checkpoint {a_dir} is a directory, not a file.", True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "status", "fragment", "unchanged"), ROWS, ids=[" ".join(r[0]) for r in ROWS]
)
def test_bad_input_is_one_sentence_and_changes_nothing(
    broker: BrokerProcess, tmp_path: Path, argv: list[str], status: int, fragment: str, unchanged: bool
) -> None:
    files = _files(tmp_path)
    _good_source(broker, Path(files["good_source"]))
    args = [a.format(**files) for a in argv]
    before = snapshot(broker)
    result = run_kcli(*args, "-b", broker.bootstrap)
    assert result.returncode == status, (result.stdout, result.stderr)
    assert fragment.format(**files) in result.stdout + result.stderr, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    if fragment.format(**files) in result.stderr:  # the sentence alone: no report of nothing on stdout
        assert result.stdout == "", result.stdout
    if unchanged:
        assert snapshot(broker) == before


def test_internal_topic_refused_as_a_real_process(broker: BrokerProcess) -> None:
    before = snapshot(broker)
    result = subprocess.run(
        [*KCLI, "topics", "delete", "-t", "__consumer_offsets", "-b", broker.bootstrap],
        env=kcli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "kcli: topic __consumer_offsets is an internal topic and cannot be deleted.\n"
    assert snapshot(broker) == before


def test_broker_refuses_delete_topics_of_an_internal_topic(broker: BrokerProcess) -> None:
    """Any client, not only kcli: DeleteTopics of __consumer_offsets, by name or by id, answers
    INVALID_TOPIC_EXCEPTION (17) with a message (beyond Kafka's KRaft controller, which deletes it)."""
    before = snapshot(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.delete_topics(["__consumer_offsets"], operation_timeout=30)["__consumer_offsets"]
    with pytest.raises(KafkaException) as raised:
        future.result(30)
    assert raised.value.args[0].code() == KafkaError.TOPIC_EXCEPTION == ErrorCode.invalid_topic_exception

    async def by_name_and_id() -> list[tuple[str, int, str]]:
        client = await KafkaClient.connect(broker.bootstrap)
        try:
            metadata = await client.send(
                build(
                    request_type(3, 12),
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
            topic_id = next(t.topic_id for t in metadata.topics if t.name == "__consumer_offsets")
            cls = request_type(20, 6)
            state = nested_type(cls, "DeleteTopicState")
            answer = await client.send(
                build(
                    cls,
                    topics=(
                        state(name="__consumer_offsets", topic_id=ZERO),
                        state(name=None, topic_id=topic_id),
                    ),
                    timeout=datetime.timedelta(seconds=30),
                )
            )
            return sorted((r.name, r.error_code, r.error_message) for r in answer.responses)
        finally:
            await client.close()

    message = "Cannot delete internal topic __consumer_offsets."
    code = ErrorCode.invalid_topic_exception
    assert asyncio.run(by_name_and_id()) == [("__consumer_offsets", code, message)] * 2
    assert snapshot(broker) == before


def test_regex_acts_with_yes_and_names_need_no_yes(broker: BrokerProcess) -> None:
    """A regex with --yes does what Kafka's tool does; names spelled out ('a,b', 'a\\.b') need no --yes."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("r.1", 1, 1), NewTopic("r-2", 1, 1)]).values():
        future.result(30)
    grown = run_kcli("topics", "alter", "-t", "r\\.1,r-2", "--partitions", "2", "-b", broker.bootstrap)
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout.splitlines() == ["Topic r-2 now has 2 partitions.", "Topic r.1 now has 2 partitions."]
    deleted = run_kcli("topics", "delete", "-t", "r.[0-9]", "--yes", "-b", broker.bootstrap)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == ["Deleted topic r-2.", "Deleted topic r.1."]
    assert not {"r.1", "r-2"} & set(admin.list_topics(timeout=30).topics)


def test_create_without_partitions_takes_the_broker_default(broker: BrokerProcess) -> None:
    created = run_kcli("topics", "create", "-t", "defaults", "-o", "json", "-b", broker.bootstrap)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["partitions"] == 1  # num.partitions
    assert run_kcli("topics", "delete", "-t", "defaults", "-b", broker.bootstrap).returncode == 0


def test_groups_list_states_any_case(broker: BrokerProcess) -> None:
    listed = run_kcli("groups", "list", "--state", "empty,STABLE", "-o", "json", "-b", broker.bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["group"] for line in listed.stdout.splitlines()] == [GROUP]


def _good_source(broker: BrokerProcess, path: Path) -> None:
    """A real partition dir to replay from: a copy of the broker's t1-0 segment."""
    if path.exists():
        return
    path.mkdir()
    source = next((broker.data_dir / "logs").glob("t1-0")) if (broker.data_dir / "logs").exists() else None
    if source is None:
        source = next(broker.data_dir.rglob("t1-0"))
    for segment in source.glob("*.log"):
        (path / segment.name).write_bytes(segment.read_bytes())


def test_abort_by_id_of_an_open_transaction_then_refused_once_closed(broker: BrokerProcess) -> None:
    """The explicit form still aborts a transaction DescribeProducers shows open (a coordinator epoch of
    -1 becomes 0, as in Kafka's tool); once its ABORT marker is written the same abort is refused."""
    from kcli.cluster import Cluster
    from ops.transactions import describe_producers

    async def states() -> list:
        async with await Cluster.connect(broker.bootstrap) as cluster:
            return await describe_producers(cluster, [("t2", 0)])

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": "tx-abort",
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("t2", b"x", partition=0)
    assert producer.flush(30) == 0
    [opened] = [s for s in asyncio.run(states()) if s.current_txn_start_offset >= 0]
    argv = ["transactions", "abort", "--topic", "t2", "--partition", "0", "--producer-id", str(opened.producer_id),
            "--producer-epoch", str(opened.producer_epoch), "--coordinator-epoch", "-1", "-b", broker.bootstrap]  # fmt: skip
    aborted = run_kcli(*argv, "-o", "json")
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout)["producer_id"] == opened.producer_id
    assert [
        s.current_txn_start_offset for s in asyncio.run(states()) if s.producer_id == opened.producer_id
    ] == [-1]
    again = run_kcli(*argv)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr == (
        f"kcli: producer {opened.producer_id} has no open transaction on t2-0: nothing to abort.\n"
    )


def test_regex_on_a_terminal_lists_and_asks(broker: BrokerProcess) -> None:
    """On a terminal (a real pty as stdin), the matches are listed and 'n' leaves them; 'y' deletes."""
    import os
    import pty

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("q1", 1, 1), NewTopic("q2", 1, 1)]).values():
        future.result(30)

    def answer(reply: bytes) -> subprocess.CompletedProcess[str]:
        leader, follower = pty.openpty()
        try:
            os.write(leader, reply)
            return subprocess.run(
                [*KCLI, "topics", "delete", "-t", "q.", "-b", broker.bootstrap],
                stdin=follower,
                env=kcli_env(),
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            os.close(leader)
            os.close(follower)

    kept = answer(b"n\n")
    assert kept.returncode == 1 and kept.stdout == ""
    assert "--topic 'q.' matches 2 topic(s):\n  q1\n  q2\nDelete them? [y/N]: " in kept.stderr
    assert kept.stderr.endswith("kcli: nothing done: the delete was not confirmed.\n")
    assert {"q1", "q2"} <= set(admin.list_topics(timeout=30).topics)
    deleted = answer(b"y\n")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == ["Deleted topic q1.", "Deleted topic q2."]
    assert not {"q1", "q2"} & set(admin.list_topics(timeout=30).topics)


def test_reset_offset_outside_the_log_warns_as_kafka(broker: BrokerProcess) -> None:
    """kafka-consumer-groups.sh moves an offset outside the log to its nearer end and warns; so does kcli
    (a dry run here: nothing committed)."""
    before = snapshot(broker)
    planned = run_kcli(
        "groups", "reset-offsets", GROUP, "--to-offset", "99", "--topic", "t1", "-b", broker.bootstrap
    )
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines()[2].split() == [GROUP, "t1", "0", "3"]
    assert planned.stderr.splitlines() == [
        "kcli: warning: New offset (99) is higher than latest offset for topic partition t1-0. Value will be set to 3",
        "(dry run: add --execute to commit these offsets)",
    ]
    assert snapshot(broker) == before
