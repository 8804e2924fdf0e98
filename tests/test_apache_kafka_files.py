"""kcli's offline tools on log dirs Apache Kafka 4.1 wrote (tests/apache_kafka.py): `dump-segment` beside
kafka-dump-log on the same files, `verify`, `recover logdir` after a kill -9 and planted damage, and
`spark-audit` over an archive of Kafka's segments.

One Kafka node of this file's own serves it all (it needs settings the shared `kafka_node` lacks: a cleaner
that runs at once and metadata snapshots every few KiB). It fills its log dir with every codec, both
transaction outcomes, a compacted topic after the cleaner ran, committed group offsets and a metadata
snapshot, then stops cleanly; the dump, verify and audit tests read a copy of that dir, and the recovery
test starts Kafka again on the original. kafka-dump-log takes many files in one JVM, so each flag set
is one run over every file it applies to.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import apache_kafka
import pytest
from apache_kafka import CONSUMER_GROUP_COMMAND, DUMP_LOG_SEGMENTS, STORAGE_TOOL, KafkaNode
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import KCLI, free_port_range, kcli_env, require_apache_kafka

pytestmark = pytest.mark.timeout(300)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
NODE_SETTINGS = {
    "log.cleaner.backoff.ms": 100,  # the cleaner looks for dirty logs every 0.1 s, not every 15 s
    "metadata.log.max.record.bytes.between.snapshots": 2048,  # a metadata snapshot within seconds
    "log.flush.offset.checkpoint.interval.ms": 600000,  # no recovery-point checkpoint while killed runs
}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",  # each round of keys rolls a segment the cleaner may take
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
}
AUDIT_GROUP = "audit-group"
AUDIT_COMMITS = {0: 4, 1: 9}
"""The committed offsets of AUDIT_GROUP on the `audited` topic (of 11 and 10 records)."""


@dataclass
class Written:
    """The node, a copy of its log dir as Kafka left it after a clean shutdown, and what was produced."""

    node: KafkaNode
    properties: Path
    archive: Path
    group_describe: str
    duplicate_offsets: tuple[int, int]


def kcli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`python -m kcli ARGS`; with `check`, it must exit 0."""
    result = subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=180)
    if check:
        assert result.returncode == 0, f"kcli {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result


def kafka_tool(workdir: Path, main_class: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One of Kafka's tools, which must exit 0."""
    result = apache_kafka.run_tool(main_class, args, workdir=workdir)
    assert result.returncode == 0, (
        f"{main_class} {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    )
    return result


def in_parallel(*calls: Callable[[], object]) -> list:
    with ThreadPoolExecutor(max_workers=3) as pool:
        return [future.result() for future in [pool.submit(call) for call in calls]]


def start_node(node: KafkaNode, properties: Path) -> None:
    apache_kafka.launch(node, properties)
    try:
        apache_kafka.wait_ready(node, time.monotonic())
    except apache_kafka.KafkaSetupError as error:
        node.stop()
        pytest.fail(str(error))


def produce(bootstrap: str, topic: str, records: Sequence[tuple[str, str | None]], partition: int, **config):
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition, headers={"h": b"1"})
    assert producer.flush(30) == 0


def produce_transaction(bootstrap: str, topic: str, commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{commit}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=f"txn-{i}", value="committed" if commit else "aborted", partition=0)
    if commit:
        producer.commit_transaction(30)
    else:  # sent first: librdkafka's abort purges what is still queued, and nothing would reach the log
        assert producer.flush(30) == 0
        producer.abort_transaction(30)


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout:g} s"
        time.sleep(0.2)


def cleaned(log_dir: Path, topic_partition: str) -> bool:
    """Whether the cleaner checkpointed a cleaned offset above 0 for `topic_partition`."""
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return False
    lines = path.read_text().splitlines()[2:]
    return any(line.split()[0] + "-" + line.split()[1] == topic_partition and int(line.split()[2]) > 0
               for line in lines if line.strip())  # fmt: skip


def fill(node: KafkaNode, workdir: Path) -> tuple[str, tuple[int, int]]:
    """Write every kind of file into the node's log dir; return ConsumerGroupCommand's describe of
    AUDIT_GROUP and the offsets of the duplicate planted in `audited`."""
    b = node.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    topics = [
        NewTopic("codecs", 1, 1),
        NewTopic("txn", 1, 1),
        NewTopic("compacted", 1, 1, config=COMPACTED),
        NewTopic("audited", 2, 1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    for codec in CODECS:
        records = [(f"{codec}-{i}", f"value-{i}") for i in range(4)]
        produce(
            b,
            "codecs",
            records,
            0,
            **{"compression.type": codec, "linger.ms": "50", "enable.idempotence": True},
        )
    produce_transaction(b, "txn", commit=True)
    produce_transaction(b, "txn", commit=False)
    produce_transaction(b, "txn", commit=True)
    for round_ in range(4):
        produce(b, "compacted", [(f"k{i}", f"round-{round_}") for i in range(5)], 0)
        time.sleep(0.3)
    produce(b, "compacted", [("k0", None)], 0)  # a tombstone, and a roll of the last round's segment
    time.sleep(0.3)
    produce(b, "compacted", [("k9", "last")], 0)
    wait_for("the cleaner on compacted-0", lambda: cleaned(node.log_dir, "compacted-0"))
    # `audited`: acks=1, no idempotence; the record "dup" produced twice by design (offsets 5 and 6).
    produce(b, "audited", [(f"a{i}", f"v{i}") for i in range(5)], 0, acks="1")
    produce(b, "audited", [("dup", "same"), ("dup", "same")], 0, acks="1")
    produce(b, "audited", [(f"a{i}", f"v{i}") for i in range(5, 9)], 0, acks="1")
    produce(b, "audited", [(f"b{i}", f"w{i}") for i in range(10)], 1, acks="1")
    consumer = Consumer({"bootstrap.servers": b, "group.id": AUDIT_GROUP, "enable.auto.commit": False})
    consumer.commit(
        offsets=[TopicPartition("audited", p, o) for p, o in AUDIT_COMMITS.items()], asynchronous=False
    )
    consumer.close()
    describe = kafka_tool(workdir, CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--describe",
                          "--group", AUDIT_GROUP).stdout  # fmt: skip
    metadata = node.log_dir / "__cluster_metadata-0"
    wait_for("a metadata snapshot", lambda: any(metadata.glob("*.checkpoint")))
    return describe, (5, 6)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    """A Kafka node's log dir with every kind of file, after a clean shutdown; the node stopped."""
    require_apache_kafka()
    workdir = tmp_path_factory.mktemp("kafka-files")
    port = free_port_range(2)
    node = KafkaNode(1, port, port + 1, workdir / "node")
    node.workdir.mkdir(parents=True)
    properties = node.workdir / "server.properties"
    base = apache_kafka.server_properties(node, f"1@127.0.0.1:{port + 1}", replication=1)
    properties.write_text(base + "".join(f"{k}={v}\n" for k, v in NODE_SETTINGS.items()))
    kafka_tool(workdir, STORAGE_TOOL, "format", "-t", apache_kafka.random_cluster_id(), "-c", str(properties))
    start_node(node, properties)
    try:
        describe, duplicate = fill(node, workdir)
    finally:
        status = node.stop()
    assert status in (0, 143), node.log()[-3000:]
    assert (node.log_dir / ".kafka_cleanshutdown").exists()
    archive = workdir / "archive"
    shutil.copytree(node.log_dir, archive)
    try:
        yield Written(node, properties, archive, describe, duplicate)
    finally:
        if node.is_running():
            node.stop()


# --- kcli dump-segment beside kafka-dump-log, and kcli verify -------------------------------------------


DATA_TOPICS = ("codecs", "txn", "compacted", "audited")
DATA_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".txnindex")


def files(root: Path, partitions: str, suffixes: Sequence[str]) -> list[Path]:
    """The files of the partition dirs matching `partitions` whose names end in one of `suffixes`."""
    return sorted(p for d in root.glob(partitions) for p in d.iterdir() if p.name.endswith(tuple(suffixes)))


def both_dumps(
    workdir: Path, paths: Sequence[Path], *flags: str
) -> tuple[subprocess.CompletedProcess[str], ...]:
    """kafka-dump-log and kcli dump-segment on the same files with the same flags (one JVM for all)."""
    names = ",".join(str(p) for p in paths)
    return tuple(
        in_parallel(
            lambda: apache_kafka.run_tool(DUMP_LOG_SEGMENTS, ["--files", names, *flags], workdir=workdir),
            lambda: kcli("dump-segment", "--files", names, *flags, check=False),
        )
    )


DUMPS = {
    "batches": ("{data}", ()),
    "deep": ("{data}", ("--deep-iteration",)),
    "data": ("{data}", ("--deep-iteration", "--print-data-log")),
    "offsets": ("__consumer_offsets-*", ("--offsets-decoder",)),
    "transactions": ("__transaction_state-*", ("--transaction-log-decoder",)),
    "metadata": ("__cluster_metadata-0", ("--cluster-metadata-decoder",)),
}
"""Each case is one kafka-dump-log JVM over every file of its partitions: (partition dirs, flags)."""


@pytest.mark.parametrize("case", DUMPS)
def test_dump_segment_lines_equal_kafka_dump_log_on_kafkas_files(
    written: Written, tmp_path: Path, case: str
) -> None:
    """kcli dump-segment prints kafka-dump-log's stdout and stderr, line for line, on every file type the
    tool takes (.log, .index, .timeindex, .snapshot, .txnindex, and the metadata log's .checkpoint
    snapshots) of a log dir Kafka wrote, with each of its flag sets."""
    pattern, flags = DUMPS[case]
    patterns = [f"{t}-*" for t in DATA_TOPICS] if pattern == "{data}" else [pattern]
    paths = [p for glob in patterns for p in files(written.archive, glob, (*DATA_SUFFIXES, ".checkpoint"))]
    if case == "metadata":
        paths.append(written.archive / "bootstrap.checkpoint")
    suffixes = {p.suffix for p in paths}
    theirs, ours = both_dumps(tmp_path, paths, *flags)
    assert theirs.returncode == ours.returncode == 0, theirs.stderr + ours.stderr
    assert ours.stdout.splitlines() == theirs.stdout.splitlines()
    assert ours.stderr.splitlines() == theirs.stderr.splitlines()
    lines = ours.stdout.splitlines()
    assert sum(line.startswith("Dumping ") for line in lines) == len(paths)
    if pattern == "{data}":
        assert suffixes == set(DATA_SUFFIXES), suffixes
        assert {f"compresscodec: {c}" for c in CODECS} <= {w for line in lines for w in _codec(line)}
        assert any(line.startswith("version: 0 producerId: ") for line in lines)  # the .txnindex entry
        assert any(line.startswith("producerId: ") and "coordinatorEpoch: 0" in line for line in lines)
        if flags:
            assert sum("endTxnMarker: ABORT" in line for line in lines) == 1
            assert sum("endTxnMarker: COMMIT" in line for line in lines) == 2
    elif case == "metadata":
        assert ".checkpoint" in suffixes
        assert any("KRaft snapshot" in line or "Snapshot end offset" in line for line in lines), lines[:5]
        assert any('"type":"TOPIC_RECORD"' in line and '"name":"compacted"' in line for line in lines)
    elif case == "offsets":
        assert any(f'"group":"{AUDIT_GROUP}"' in line for line in lines)
    else:
        assert any('"transactionStatus":5' in line for line in lines)  # CompleteAbort


def _codec(line: str) -> list[str]:
    return (
        [f"compresscodec: {line.split('compresscodec: ')[1].split()[0]}"] if "compresscodec: " in line else []
    )


def test_dump_segment_on_files_kafka_dump_log_does_not_take(written: Written, tmp_path: Path) -> None:
    """partition.metadata and meta.properties: kafka-dump-log prints only their "Dumping" line and
    "Ignoring unknown file" on stderr, kcli dumps their content after the same line (a difference the
    README lists; a name without a dot, leader-epoch-checkpoint, even ends Kafka's tool with an exception)."""
    archive = written.archive
    paths = [archive / "codecs-0" / "partition.metadata", archive / "meta.properties"]
    theirs, ours = both_dumps(tmp_path, paths)
    assert theirs.returncode == ours.returncode == 0, theirs.stderr + ours.stderr
    assert theirs.stdout.splitlines() == [f"Dumping {p}" for p in paths]
    assert theirs.stderr.splitlines() == [f"Ignoring unknown file {p}" for p in paths]
    assert ours.stdout.splitlines()[0::2] == theirs.stdout.splitlines()
    assert ours.stdout.splitlines()[1].startswith("version: 0 topicId: ")
    assert ours.stdout.splitlines()[3].startswith("version: 1 nodeId: 1 clusterId: ")
    epochs = archive / "codecs-0" / "leader-epoch-checkpoint"
    theirs, ours = both_dumps(tmp_path, [epochs])
    assert theirs.returncode == 1 and "StringIndexOutOfBoundsException" in theirs.stderr
    assert ours.stdout.splitlines() == [f"Dumping {epochs}", "epoch: 0 startOffset: 0"]


def test_verify_is_clean_on_kafkas_log_dir(written: Written) -> None:
    """kcli verify on Kafka's log dir: no error; the one warning is the compacted topic's offset gap,
    classified as compaction (the cleaner removed offsets 0..14)."""
    result = kcli("verify", "--deep", "--compacted", "compacted", str(written.archive))
    findings = result.stdout.splitlines()[:-1]
    assert findings == [
        f"{written.archive}/compacted-0/00000000000000000000.log:0: offset_gap_compaction: offsets 0..14 "
        "are missing before this batch: the topic is compacted."
    ]
    assert result.stdout.splitlines()[-1].endswith(": 1 finding (0 errors, 1 warning)")
