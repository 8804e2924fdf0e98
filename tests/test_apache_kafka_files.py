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

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import apache_kafka
import pytest
from apache_kafka import CONSUMER_GROUP_COMMAND, DUMP_LOG_SEGMENTS, STORAGE_TOOL, KafkaNode
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import KCLI, free_port_range, kcli_env, require_apache_kafka
from waiting import wait_for

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


def produce_transaction(bootstrap: str, topic: str, commit: bool, tag: str) -> None:
    """Three records in one transaction of partition 0, committed or aborted; `tag` makes them unique."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{commit}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=f"txn-{i}", value=f"{tag}-{i}", partition=0)
    if commit:
        producer.commit_transaction(30)
    else:  # sent first: librdkafka's abort purges what is still queued, and nothing would reach the log
        assert producer.flush(30) == 0
        producer.abort_transaction(30)


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
    dense = {"index.interval.bytes": "64"}  # .index and .timeindex entries in small segments too
    topics = [
        NewTopic("codecs", 1, 1, config=dense),
        NewTopic("txn", 1, 1, config=dense),
        NewTopic("compacted", 1, 1, config={**COMPACTED, **dense}),
        NewTopic("audited", 2, 1, config=dense),
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
    produce_transaction(b, "txn", commit=True, tag="first")
    produce_transaction(b, "txn", commit=False, tag="aborted")
    produce_transaction(b, "txn", commit=True, tag="second")
    for round_ in range(4):
        produce(b, "compacted", [(f"k{i}", f"round-{round_}") for i in range(5)], 0)
        time.sleep(0.3)
    produce(b, "compacted", [("k0", None)], 0)  # a tombstone, and a roll of the last round's segment
    time.sleep(0.3)
    produce(b, "compacted", [("k9", "last")], 0)
    wait_for("the cleaner on compacted-0", lambda: cleaned(node.log_dir, "compacted-0"), 60)
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
    wait_for("a metadata snapshot", lambda: any(metadata.glob("*.checkpoint")), 60)
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
    "skip-metadata": ("{data}", ("--print-data-log", "--skip-record-metadata")),
    "max-bytes": ("{data}", ("--deep-iteration", "--max-bytes", "300")),
    "index-sanity": ("{data}", ("--index-sanity-check",)),
    "verify-index": ("{data}", ("--verify-index-only",)),
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
    bootstrap = written.archive / "bootstrap.checkpoint"  # Kafka 4.4's format writes a 0-0 snapshot instead
    if case == "metadata" and bootstrap.exists():
        paths.append(bootstrap)
    suffixes = {p.suffix for p in paths}
    theirs, ours = both_dumps(tmp_path, paths, *flags)
    assert theirs.returncode == ours.returncode == 0, theirs.stderr + ours.stderr
    assert ours.stdout.splitlines() == theirs.stdout.splitlines()
    assert ours.stderr.splitlines() == theirs.stderr.splitlines()
    lines = ours.stdout.splitlines()
    assert sum(line.startswith("Dumping ") for line in lines) == len(paths)
    if pattern == "{data}":
        assert suffixes == set(DATA_SUFFIXES), suffixes
        if case in ("batches", "deep", "data"):  # the others stop early or print no batch lines
            assert {f"compresscodec: {c}" for c in CODECS} <= {w for line in lines for w in _codec(line)}
        assert any(line.startswith("version: 0 producerId: ") for line in lines)  # the .txnindex entry
        if case == "index-sanity":  # each .index and .timeindex: checked, or empty (a segment's last)
            checked = [
                line for line in lines if line.endswith(("index passed sanity check.", "index is empty."))
            ]
            assert len(checked) == 2 * sum(p.suffix == ".index" for p in paths)
            assert sum(line.endswith("passed sanity check.") for line in checked) >= 8
        elif case != "verify-index":  # which prints nothing for an index that matches its log
            assert any(re.fullmatch(r"offset: \d+ position: [1-9]\d*", line) for line in lines)  # .index
            assert any(re.fullmatch(r"timestamp: \d+ offset: \d+", line) for line in lines)  # .timeindex
        assert any(line.startswith("producerId: ") and "coordinatorEpoch: 0" in line for line in lines)
        if case in ("deep", "data"):
            assert sum("endTxnMarker: ABORT" in line for line in lines) == 1
            assert sum("endTxnMarker: COMMIT" in line for line in lines) == 2
    elif case == "metadata":
        assert ".checkpoint" in suffixes
        assert any(line.startswith("Snapshot end offset: ") for line in lines)  # a metadata .checkpoint
        assert ("KRaft bootstrap snapshot" in lines) == bootstrap.exists()
        assert any(" SnapshotHeader {" in line for line in lines) and any(
            " SnapshotFooter {" in line for line in lines
        )
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
    recovery_points = archive / "recovery-point-offset-checkpoint"  # Kafka's tool fails on it the same way
    lines = kcli("dump-segment", str(recovery_points)).stdout.splitlines()
    assert lines[0] == f"Dumping {recovery_points}" and "topic: codecs partition: 0 offset: 20" in lines


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


# --- kcli spark-audit over Kafka's segments ----------------------------------------------------------------


def group_rows(text: str) -> set[tuple[str, int, int, int, int]]:
    """(topic, partition, current offset, log end offset, lag) of ConsumerGroupCommand --describe."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    header = next(cols for cols in lines if cols[:2] == ["GROUP", "TOPIC"])
    at = [header.index(c) for c in ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")]
    rows = [cols for cols in lines if len(cols) == len(header) and cols != header]
    return {(r[at[0]], *(int(r[i]) for i in at[1:])) for r in rows}  # type: ignore[misc]


def test_spark_audit_on_kafkas_segments(written: Written) -> None:
    """spark-audit all (one local Spark session) over a copy of Kafka's log dir finds what was produced:
    the record planted twice, no gap but the cleaner's, and the lag of the real __consumer_offsets equal
    to ConsumerGroupCommand's."""
    result = kcli("spark-audit", "all", str(written.archive), "--master", "local[1]", "--output", "json",
                  "--compacted", "compacted", check=False)  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # 1: findings exist
    records = [json.loads(line) for line in result.stdout.splitlines()]
    findings = sorted((r["kind"], r["topic"], r["partition"], r["first_offset"], r["last_offset"])
                      for r in records if r["type"] == "finding")  # fmt: skip
    lags = {(r["topic"], r["partition"], r["committed"], r["end_offset"], r["lag"])
            for r in records if r["type"] == "lag" and r["group"] == AUDIT_GROUP}  # fmt: skip
    first, second = written.duplicate_offsets
    assert findings == [
        ("consumer_lag", "audited", 0, 4, 10),
        ("consumer_lag", "audited", 1, 9, 9),
        ("content_duplicate", "audited", 0, first, second),
        ("offset_gap_compaction", "compacted", 0, 0, 14),
    ]
    assert lags == group_rows(written.group_describe) == {("audited", 0, 4, 11, 7), ("audited", 1, 9, 10, 1)}
    (summary,) = [r for r in records if r["type"] == "summary"]
    assert summary["partitions"] == 12 and summary["errors"] == 3


# --- kcli recover logdir on the log dir of a killed Kafka ---------------------------------------------------


Row = tuple[int, str | None, str | None]


def records_on_disk(log_dir: Path, partitions: Sequence[str], *, damaged: bool) -> dict[str, list[Row]]:
    """(offset, key, value) of every data record in each partition's segments, as kcli reads them (one
    dump-segment run for all). With `damaged`, the dump must exit 1 (a file holds damage) and still list
    every record it can read, as kafka-dump-log lists them."""
    logs = [str(p) for name in partitions for p in sorted((log_dir / name).glob("*.log"))]
    rows: dict[str, list[Row]] = {name: [] for name in partitions}
    control, name = False, ""
    result = kcli("dump-segment", "--print-data-log", "--output", "json", *logs, check=False)
    assert result.returncode == (1 if damaged else 0), result.stderr
    for line in result.stdout.splitlines():
        item = json.loads(line)
        if item["type"] == "file":
            name = Path(item["path"]).parent.name
        elif item["type"] == "batch":
            control = item["isControl"]
        elif item["type"] == "record" and not control:
            rows[name].append((item["offset"], item["key"], item["value"]))
    return rows


def batches_on_disk(log: Path, *, check: bool = True) -> list[dict]:
    lines = kcli("dump-segment", "--output", "json", str(log), check=check).stdout.splitlines()
    return [item for item in map(json.loads, lines) if item["type"] == "batch"]


def torn_tail(log: Path) -> tuple[int, int] | None:
    """(bytes after the last whole batch, the offset that follows it) when a SIGKILL cut a write short
    (the kernel stops a large write between pages for a fatal signal); None when the file ends whole."""
    batches = batches_on_disk(log, check=False)  # a torn file makes dump-segment exit 1
    last = batches[-1] if batches else {"position": 0, "size": 0, "lastOffset": -1}
    extra = log.stat().st_size - (last["position"] + last["size"])
    return (extra, last["lastOffset"] + 1) if extra else None


def served(bootstrap: str, partitions: Sequence[str]) -> dict[str, list[Row]]:
    """Every record Kafka serves (read_uncommitted) from the start of each "topic-N" to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "recovered-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_uncommitted"})  # fmt: skip
    consumer.assign(
        [TopicPartition(p.rsplit("-", 1)[0], int(p.rsplit("-", 1)[1]), OFFSET_BEGINNING) for p in partitions]
    )
    rows: dict[str, list[Row]] = {p: [] for p in partitions}
    at_end: set[str] = set()
    deadline = time.monotonic() + 60
    while len(at_end) < len(partitions):
        assert time.monotonic() < deadline, f"not at the end of {set(partitions) - at_end} after 60 s"
        message = consumer.poll(0.5)
        if message is None:
            continue
        name = f"{message.topic()}-{message.partition()}"
        if message.error() is not None:
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            at_end.add(name)
            continue
        key, value = message.key(), message.value()
        rows[name].append((message.offset(), key and key.decode(), value and value.decode()))
    consumer.close()
    return rows


def produce_until_killed(node: KafkaNode, topic: str, acked_before_kill: int) -> list[tuple[str, Row]]:
    """An idempotent acks=all producer keeps two partitions busy; once `acked_before_kill` records are
    acknowledged (some of each partition) the Kafka JVM gets SIGKILL, records still in flight. Returns what Kafka acknowledged."""
    acked: list[tuple[str, Row]] = []

    def on_delivery(error, message) -> None:
        if error is None:
            row = (message.offset(), message.key().decode(), message.value().decode())
            acked.append((f"{topic}-{message.partition()}", row))

    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 5000})  # fmt: skip
    i = 0
    while len(acked) < acked_before_kill or len({name for name, _ in acked}) < 2:
        try:
            producer.produce(topic, key=f"c{i}", value=f"crash-{i}", partition=i % 2, on_delivery=on_delivery)
            i += 1
        except BufferError:
            pass
        producer.poll(0)
    for _ in range(1000):  # a burst not yet acknowledged when the kill lands, however fast Kafka answers
        producer.produce(topic, key=f"c{i}", value=f"crash-{i}", partition=i % 2, on_delivery=on_delivery)
        i += 1
    os.kill(node.pid, signal.SIGKILL)
    node.process.wait()  # type: ignore[union-attr]
    producer.purge()
    producer.flush(6)
    assert i > len(acked)
    return acked


def plant_damage(log_dir: Path) -> None:
    """A torn tail (codecs-0 loses the last 5 bytes of its zstd batch), a corrupt batch in the middle
    (audited-0's second batch, the planted duplicate, gets one byte flipped) and a deleted .index (txn-0)."""
    codecs = log_dir / "codecs-0" / "00000000000000000000.log"
    os.truncate(codecs, codecs.stat().st_size - 5)
    audited = log_dir / "audited-0" / "00000000000000000000.log"
    second = batches_on_disk(audited)[1]
    assert (second["baseOffset"], second["lastOffset"]) == (5, 6)
    at = second["position"] + second["size"] - 3
    with open(audited, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    (log_dir / "txn-0" / "00000000000000000000.index").unlink()


def test_recover_logdir_after_kill_9_then_kafka_starts_without_recovery(
    written: Written, tmp_path: Path
) -> None:
    """Kafka is killed under a producer and damage is planted (kafka-dump-log and kcli dump-segment print
    the same lines on the torn, the corrupt and the killed producer's segments; kcli verify names the
    damage); kcli recover logdir's dry run and --execute make the same changes (the torn and the corrupt
    batch cut with what follows, the index rebuilt, the marker last), and Apache Kafka then starts on the dir recovering no partition (its clean-shutdown marker found, no
    "Recovering unflushed segment" but the metadata log's) and serves exactly the records kcli kept,
    every acknowledged one among them."""
    node, log_dir = written.node, written.node.log_dir
    start_node(node, written.properties)
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("crash", 2, 1)])["crash"].result(30)
        del admin  # no client left retrying a killed node
        acked = produce_until_killed(node, "crash", 1000)
    finally:
        if node.is_running():
            node.stop()
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    # the kill may land inside a write: that partition's unacknowledged tail is torn, and cut like the planted one
    killed = {name: max((log_dir / name).glob("*.log")) for name in ("crash-0", "crash-1")}
    torn_by_kill = {name: tail for name, log in killed.items() if (tail := torn_tail(log)) is not None}
    plant_damage(log_dir)
    data = sorted(
        p.name for p in log_dir.iterdir() if p.is_dir() and p.name.startswith((*DATA_TOPICS, "crash"))
    )
    before = records_on_disk(log_dir, data, damaged=True)
    torn, corrupt = (log_dir / name / f"{0:020d}.log" for name in ("codecs-0", "audited-0"))
    theirs, ours = both_dumps(
        tmp_path, [torn, corrupt, killed["crash-0"]], "--deep-iteration", "--print-data-log"
    )
    # The same lines; kafka-dump-log exits 0 on damage, kcli 1 with one sentence naming each damaged file.
    assert (theirs.returncode, ours.returncode) == (0, 1), theirs.stderr + ours.stderr
    assert ours.stdout.splitlines() == theirs.stdout.splitlines()
    damage = [
        f"{torn} (126 bytes at its end are not a whole batch)",
        f"{corrupt} (1 of its batches fail their CRC)",
    ]
    if "crash-0" in torn_by_kill:
        damage.append(
            f"{killed['crash-0']} ({torn_by_kill['crash-0'][0]} bytes at its end are not a whole batch)"
        )
    assert ours.stderr == theirs.stderr + f"kcli: {len(damage)} files are damaged: {'; '.join(damage)}.\n"
    assert any(
        re.fullmatch(r"Found \d+ invalid bytes at the end of 0{20}\.log", line)
        for line in ours.stdout.splitlines()
    )
    assert sum("isvalid: false" in line for line in ours.stdout.splitlines()) == 1
    damaged = kcli("verify", "--output", "json", str(log_dir), check=False)
    assert damaged.returncode == 1, damaged.stdout + damaged.stderr
    found = [f for f in map(json.loads, damaged.stdout.splitlines()) if f["type"] == "finding"]
    where = {(Path(f["file"]).parent.name, Path(f["file"]).name, f["severity"]) for f in found}
    assert {("codecs-0", f"{0:020d}.log", "error"), ("audited-0", f"{0:020d}.log", "error"),
            ("txn-0", f"{0:020d}.index", "warning")} <= where, where  # fmt: skip

    dry = kcli("recover", "logdir", "--output", "json", str(log_dir), check=False)
    assert dry.returncode == 3, dry.stdout + dry.stderr
    quarantine = tmp_path / "quarantine"
    done = kcli(
        "recover", "logdir", "--execute", "--output", "json", "--quarantine", str(quarantine), str(log_dir)
    )
    planned, made = ([json.loads(line) for line in r.stdout.splitlines()] for r in (dry, done))
    assert [c for c in made if c["type"] == "change"] == [c for c in planned if c["type"] == "change"]
    assert made[-1]["verifyErrors"] == 0 and made[-1]["executed"]
    cuts: dict[str, int] = {}
    for change in planned:
        if change["type"] == "change" and change["kind"] in ("truncate_segment", "drop_segment"):
            cuts[change["partition"]] = min(cuts.get(change["partition"], 1 << 62), change["firstOffset"])
    expected_cuts = {"codecs-0": 16, "audited-0": 5} | {name: at for name, (_, at) in torn_by_kill.items()}
    assert {p: o for p, o in cuts.items() if p in data} == expected_cuts
    rebuilt = {c["partition"] for c in planned if c["type"] == "change" and c["kind"] == "rebuild_indexes"}
    assert "txn-0" in rebuilt
    # the killed producer's partitions had no producer snapshot: with the marker Kafka would start them
    # with no producer state, so they get the ones its unclean start writes; the marker comes last
    snapshots = {c["partition"] for c in planned if c["type"] == "change" and c["kind"] == "write_snapshot"}
    assert {"crash-0", "crash-1"} <= snapshots
    changes = [c for c in planned if c["type"] == "change"]
    assert (changes[-1]["kind"], Path(changes[-1]["file"]).name) == (
        "write_clean_shutdown",
        ".kafka_cleanshutdown",
    )
    kept = {name: [r for r in rows if r[0] < cuts.get(name, 1 << 62)] for name, rows in before.items()}
    assert len(kept["codecs-0"]) == 16 and len(kept["audited-0"]) == 5

    start_node(node, written.properties)
    try:
        rows = served(node.bootstrap, data)
    finally:
        status = node.stop()
    assert status in (0, 143), node.log()[-3000:]
    log = node.log_path.read_text(errors="replace")
    assert (
        f"Skipping recovery of {len(data) + 6} logs from {log_dir} since clean shutdown file was found" in log
    )
    assert "since no clean shutdown file was found" not in log
    recovered = [line for line in log.splitlines() if "Recovering unflushed segment" in line]
    assert all("partition=__cluster_metadata-0" in line for line in recovered), recovered
    assert rows == kept
    assert {name for name, _ in acked} == {"crash-0", "crash-1"}
    kept_rows = {name: set(rows) for name, rows in kept.items()}
    for name, row in acked:
        assert row in kept_rows[name], (name, row)
