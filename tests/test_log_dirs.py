"""A broker with two log dirs: placement, DescribeLogDirs, and AlterReplicaLogDirs moving replicas.

One `kcli broker start` process with `log.dirs=a,b` serves the module, with the copy between dirs
throttled (`replica.alter.log.dirs.io.max.bytes.per.second`) so a move lasts long enough to be seen:
DescribeLogDirs shows the `-future` log in the target dir with its lag while it copies. Moves run while
a confluent-kafka producer writes to the partition; afterwards every acknowledged record is read back
once, the moved log's bytes start with the source log's bytes as they were when the move began, the
old dir is gone, and the controller's metadata names the new dir (KIP-858 directory assignment). A move
cut by a broker restart carries on from its `-future` dir and completes.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import BrokerProcess, free_port_range, kcli_env, start_broker, stop_cleanly
from kio.schema.errors import ErrorCode
from kraft_cluster import REPLICATION
from kraft_cluster import create_topic as create_replicated_topic
from metadata_harness import SyncController
from waiting import wait_for

from formats.checkpoints import read_meta_properties
from kcli.broker.metadata import NewTopic
from kcli.broker.metadata.image import DIRECTORY_UNASSIGNED
from kcli.client import KafkaClient
from kcli.config import BrokerConfig, Listener
from kcli.protocol.messages import build, nested_type, request_type
from kcli.storage import format_storage
from ops.local_cluster import LocalCluster, plan

THROTTLE = 256 * 1024
"""Bytes per second the copy between dirs may use: a move of ~400 KB takes over a second."""
PRELOAD = 2000
"""Records (200 bytes each, ~400 KB) written before a move starts."""
TIMEOUT = 30.0


class Node:
    """The module's broker; `start` starts another process on the same dirs."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.dirs = [workdir / "dir-a", workdir / "dir-b"]
        self.process = self.start()

    def start(self) -> BrokerProcess:
        return start_broker(
            self.workdir,
            data_dir=self.dirs[0],
            overrides=[
                f"log.dirs={self.dirs[0]},{self.dirs[1]}",
                f"replica.alter.log.dirs.io.max.bytes.per.second={THROTTLE}",
                "log.segment.delete.delay.ms=300",
                "num.partitions=1",
            ],
        )

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    started = Node(tmp_path_factory.mktemp("log-dirs"))
    try:
        yield started
    finally:
        stop_cleanly(started.process)


# --- requests ----------------------------------------------------------------------------------------


def send(bootstrap: str, request: Any) -> Any:
    async def go() -> Any:
        async with await KafkaClient.connect(bootstrap) as client:
            return await client.send(request)

    return asyncio.run(go())


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    cls = request_type(19, 7)
    topic = build(
        nested_type(cls, "CreatableTopic"),
        name=name,
        num_partitions=partitions,
        replication_factor=1,
        assignments=(),
        configs=(),
    )
    [result] = send(
        bootstrap, build(cls, topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False)
    ).topics
    assert result.error_code is ErrorCode.none, result


def describe_log_dirs(bootstrap: str, topics: dict[str, list[int]] | None = None) -> dict[str, dict]:
    """{log dir: {(topic, partition, is_future): (size, lag)}} from DescribeLogDirs v4."""
    cls = request_type(35, 4)
    entries = None
    if topics is not None:
        topic_cls = nested_type(cls, "DescribableLogDirTopic")
        entries = tuple(build(topic_cls, topic=t, partitions=tuple(p)) for t, p in topics.items())
    response = send(bootstrap, build(cls, topics=entries))
    assert response.error_code is ErrorCode.none
    described = {}
    for result in response.results:
        assert result.error_code is ErrorCode.none and 0 < result.usable_bytes <= result.total_bytes
        described[result.log_dir] = {
            (t.name, p.partition_index, p.is_future_key): (p.partition_size, p.offset_lag)
            for t in result.topics
            for p in t.partitions
        }
    return described


def alter_replica_log_dirs(bootstrap: str, moves: dict[str, dict[str, list[int]]]) -> dict[tuple, ErrorCode]:
    cls = request_type(34, 2)
    dir_cls, topic_cls = nested_type(cls, "AlterReplicaLogDir"), nested_type(cls, "AlterReplicaLogDirTopic")
    dirs = tuple(
        build(
            dir_cls,
            path=path,
            topics=tuple(build(topic_cls, name=t, partitions=tuple(p)) for t, p in topics.items()),
        )
        for path, topics in moves.items()
    )
    response = send(bootstrap, build(cls, dirs=dirs))
    return {(t.topic_name, p.partition_index): p.error_code for t in response.results for p in t.partitions}


def where(bootstrap: str, topic: str, partition: int) -> tuple[str | None, str | None]:
    """(dir of the current log, dir of the future log) as DescribeLogDirs reports them."""
    current = future = None
    for log_dir, partitions in describe_log_dirs(bootstrap, {topic: [partition]}).items():
        if (topic, partition, False) in partitions:
            current = log_dir
        if (topic, partition, True) in partitions:
            future = log_dir
    return current, future


def directory_id(log_dir: str) -> str:
    return read_meta_properties((Path(log_dir) / "meta.properties").read_text()).directory_id or ""


def metadata_directories(node: Node) -> dict[tuple[str, int], list[str]]:
    """{(topic id, partition): directories} from the last partition or change record setting them."""
    segment = node.dirs[0] / "__cluster_metadata-0" / "00000000000000000000.log"
    result = subprocess.run(
        [sys.executable, "-m", "kcli", "dump-segment", "--cluster-metadata-decoder", str(segment)],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found: dict[tuple[str, int], list[str]] = {}
    for line in result.stdout.splitlines():
        if "payload: " not in line:
            continue
        record = json.loads(line.split("payload: ", 1)[1])
        data = record.get("data", {})
        if record.get("type") in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD") and data.get("directories"):
            found[(data["topicId"], data["partitionId"])] = data["directories"]
    return found


def topic_id(partition_dir: Path) -> str:
    return (partition_dir / "partition.metadata").read_text().split("topic_id: ")[1].strip()


# --- producing and consuming -------------------------------------------------------------------------


class Writer:
    """An idempotent acks=all producer writing to one partition in a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, partition: int, prefix: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "batch.size": 16384,  # many batches: the copy reads whole batches
            }
        )
        self.topic, self.partition, self.prefix = topic, partition, prefix
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._count = 0

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.errors.append(str(error))
        else:
            self.acked.append(message.value())

    def write(self, count: int, size: int = 200) -> None:
        for _ in range(count):
            value = f"{self.prefix}-{self._count:08d}-".encode().ljust(size, b"x")
            self._count += 1
            while True:
                try:
                    self.producer.produce(
                        self.topic, value, partition=self.partition, on_delivery=self._delivered
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)

    def _run(self) -> None:
        while not self._stop.is_set():  # ~50 KB/s, well below the throttle: the copy catches up
            self.write(5)
            self.producer.poll(0)
            time.sleep(0.02)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT)
        assert self.producer.flush(TIMEOUT) == 0
        assert not self.errors, self.errors[:5]


def read_all(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is None:
                    values.append(message.value())
        # one more short poll: a duplicate past the expected count would show here
        values.extend(m.value() for m in consumer.consume(1000, timeout=0.3) if m.error() is None)
    finally:
        consumer.close()
    return values


def segment_bytes(partition_dir: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(partition_dir.glob("*.log")))


def move_under_load(node: Node, topic: str, partition: int) -> tuple[Writer, str, str, bytes]:
    """Preload the partition, start a producer on it and ask for its move; (writer, source, target,
    the source's segment bytes when the move was asked for)."""
    writer = Writer(node.bootstrap, topic, partition, topic)
    writer.write(PRELOAD)
    assert writer.producer.flush(TIMEOUT) == 0
    source, _ = where(node.bootstrap, topic, partition)
    assert source is not None
    target = next(str(d) for d in node.dirs if str(d) != source)
    writer.start()
    before = segment_bytes(Path(source) / f"{topic}-{partition}")
    assert alter_replica_log_dirs(node.bootstrap, {target: {topic: [partition]}}) == {
        (topic, partition): ErrorCode.none
    }
    return writer, source, target, before


# --- tests ---------------------------------------------------------------------------------------------


def test_new_partitions_go_to_the_dir_with_fewest_and_the_controller_learns_which(node: Node) -> None:
    create_topic(node.bootstrap, "spread", 4)
    described = describe_log_dirs(node.bootstrap, {"spread": [0, 1, 2, 3]})
    assert sorted(described) == sorted(str(d) for d in node.dirs)
    placed = {log_dir: sorted(p for (_, p, _) in partitions) for log_dir, partitions in described.items()}
    assert sorted(len(p) for p in placed.values()) == [2, 2], placed  # fewest logs first, in turn
    assert all(lag == 0 for partitions in described.values() for _, lag in partitions.values())
    # KIP-858: the broker reported each replica's dir, so the metadata names it (not UNASSIGNED)
    expected = {
        (topic_id(Path(log_dir) / f"spread-{index}"), index): [directory_id(log_dir)]
        for log_dir, partitions in placed.items()
        for index in partitions
    }
    wait_for(
        "the metadata to place each replica in its dir",
        lambda: expected.items() <= metadata_directories(node).items(),
        interval=0.2,
        timeout=TIMEOUT,
    )


def test_alter_replica_log_dirs_errors_per_partition(node: Node) -> None:
    create_topic(node.bootstrap, "errors", 1)
    current, _ = where(node.bootstrap, "errors", 0)
    long_name = "l" * 220
    create_topic(node.bootstrap, long_name, 1)
    results = alter_replica_log_dirs(
        node.bootstrap,
        {
            str(node.workdir / "not-a-log-dir"): {"errors": [0]},
            str(node.dirs[1]): {"missing": [0], long_name: [0]},
            str(current): {"errors": [7]},
        },
    )
    assert results == {
        ("errors", 0): ErrorCode.log_dir_not_found,
        ("missing", 0): ErrorCode.unknown_topic_or_partition,
        (long_name, 0): ErrorCode.invalid_topic_exception,  # <name>-0.<uuid>-future is too long a file name
        ("errors", 7): ErrorCode.unknown_topic_or_partition,
    }
    # to the dir it is in already: nothing to do, no future log
    assert alter_replica_log_dirs(node.bootstrap, {str(current): {"errors": [0]}}) == {
        ("errors", 0): ErrorCode.none
    }
    assert where(node.bootstrap, "errors", 0) == (current, None)


def test_move_under_produce_load_keeps_every_record_once(node: Node) -> None:
    create_topic(node.bootstrap, "moving", 1)
    writer, source, target, before = move_under_load(node, "moving", 0)
    try:
        # the throttle makes the copy last: the future log shows in the target dir with its lag
        seen = wait_for(
            "the future log with a lag",
            lambda: describe_log_dirs(node.bootstrap, {"moving": [0]})[target].get(("moving", 0, True)),
            timeout=TIMEOUT,
            interval=0.05,
        )
        size, lag = seen
        assert lag > 0 and 0 <= size < len(before)
        wait_for(
            "the move to complete",
            lambda: where(node.bootstrap, "moving", 0) == (target, None),
            timeout=TIMEOUT,
            interval=0.05,
        )
    finally:
        writer.stop()
    assert not (Path(source) / "moving-0").exists()
    wait_for(
        "the old dir to be deleted",
        lambda: not any(p.name.startswith("moving-0.") for p in Path(source).iterdir()),
        timeout=TIMEOUT,
        interval=0.05,
    )
    values = read_all(node.bootstrap, "moving", 0, len(writer.acked))
    assert len(values) == len(set(values)) == len(writer.acked)  # nothing duplicated
    assert set(values) == set(writer.acked)  # nothing lost
    assert len(writer.acked) > PRELOAD  # the producer wrote during the move
    moved = segment_bytes(Path(target) / "moving-0")
    assert moved[: len(before)] == before  # the batches copied as they were written
    key = (topic_id(Path(target) / "moving-0"), 0)
    wait_for(
        "the metadata to name the new dir",
        lambda: metadata_directories(node).get(key) == [directory_id(target)],
        interval=0.2,
        timeout=TIMEOUT,
    )


def test_a_move_cut_by_a_restart_carries_on_from_its_future_dir(node: Node) -> None:
    """Two moves cut by a restart: one mid-copy goes on copying from its `-future` dir; one whose new dir
    the controller had accepted but whose swap did not happen (made here by hand: the moved log renamed
    back to `-future`, the old one restored) is swapped in at start-up (recoverAbandonedFutureLogs)."""
    create_topic(node.bootstrap, "abandoned", 1)
    small = Writer(node.bootstrap, "abandoned", 0, "abandoned")
    small.write(100)
    assert small.producer.flush(TIMEOUT) == 0
    old, _ = where(node.bootstrap, "abandoned", 0)
    new = next(str(d) for d in node.dirs if str(d) != old)
    assert alter_replica_log_dirs(node.bootstrap, {new: {"abandoned": [0]}}) == {
        ("abandoned", 0): ErrorCode.none
    }
    wait_for(
        "the small move",
        lambda: where(node.bootstrap, "abandoned", 0) == (new, None),
        timeout=TIMEOUT,
        interval=0.05,
    )

    create_topic(node.bootstrap, "restarted", 1)
    writer = Writer(node.bootstrap, "restarted", 0, "restarted")
    writer.write(3 * PRELOAD // 2)  # ~600 KB: three reads at the throttle, a second apart
    assert writer.producer.flush(TIMEOUT) == 0
    source, _ = where(node.bootstrap, "restarted", 0)
    target = next(str(d) for d in node.dirs if str(d) != source)
    assert alter_replica_log_dirs(node.bootstrap, {target: {"restarted": [0]}}) == {
        ("restarted", 0): ErrorCode.none
    }
    stop_cleanly(node.process)  # mid-copy
    [future] = [p for p in Path(target).iterdir() if p.name.startswith("restarted-0.")]
    assert future.name.endswith("-future") and (Path(source) / "restarted-0").is_dir()
    abandoned = Path(new) / f"abandoned-0.{uuid.uuid4().hex}-future"
    (Path(new) / "abandoned-0").rename(abandoned)
    shutil.copytree(abandoned, Path(old) / "abandoned-0")

    node.process = node.start()
    assert where(node.bootstrap, "abandoned", 0) == (new, None)  # swapped before the broker served
    assert not abandoned.exists()
    wait_for(
        "the move to complete after the restart",
        lambda: where(node.bootstrap, "restarted", 0) == (target, None),
        timeout=TIMEOUT,
        interval=0.05,
    )
    assert not future.exists() and not (Path(source) / "restarted-0").exists()
    values = read_all(node.bootstrap, "restarted", 0, len(writer.acked))
    assert len(values) == len(set(values)) == len(writer.acked) and set(values) == set(writer.acked)
    values = read_all(node.bootstrap, "abandoned", 0, len(small.acked))
    assert sorted(values) == sorted(small.acked)
    wait_for(
        "the old copy to be deleted",
        lambda: not any(p.name.startswith("abandoned-0") for p in Path(old).iterdir()),
        timeout=TIMEOUT,
        interval=0.05,
    )


def test_the_controller_records_replica_dirs_and_answers_each_partition(tmp_path: Path) -> None:
    """AssignReplicasToDirs on the controller (ReplicationControlManager.handleAssignReplicasToDirs)."""
    first, second = uuid.uuid4(), uuid.uuid4()
    controller = SyncController(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    try:
        listener = Listener("PLAINTEXT", "127.0.0.1", 9092)
        epoch = controller.register_broker(listener, log_dirs=[first, second])
        controller.register_broker(
            Listener("PLAINTEXT", "127.0.0.1", 9094), broker_id=2, log_dirs=[uuid.uuid4()]
        )
        [here] = controller.create_topics([NewTopic("here", assignments=[(0, [1]), (1, [1])])])
        [there] = controller.create_topics([NewTopic("there", assignments=[(0, [2])])])
        # a broker of several dirs: the controller cannot tell which, it writes UNASSIGNED
        assert controller.image.partition("here", 0).directories == (DIRECTORY_UNASSIGNED,)
        unknown = uuid.uuid4()
        request = assign_request(
            epoch,
            {second: {here.topic_id: [0, 9], unknown: [0], there.topic_id: [0]}, first: {here.topic_id: [1]}},
        )
        response = controller.assign_replicas_to_dirs(request)
        assert response.error_code is ErrorCode.none
        answered = {
            (d.id_, t.topic_id, p.partition_index): p.error_code
            for d in response.directories
            for t in d.topics
            for p in t.partitions
        }
        assert answered == {
            (second, here.topic_id, 0): ErrorCode.none,
            (second, here.topic_id, 9): ErrorCode.unknown_topic_or_partition,
            (second, unknown, 0): ErrorCode.unknown_topic_id,
            (second, there.topic_id, 0): ErrorCode.not_leader_or_follower,
            (first, here.topic_id, 1): ErrorCode.none,
        }
        image = controller.image
        assert image.partition("here", 0).directories == (second,)
        assert image.partition("here", 1).directories == (first,)
        assert image.partition("here", 0).leader_epoch == 0  # a dir change is no leader change
        stale = controller.assign_replicas_to_dirs(assign_request(epoch - 1, {first: {here.topic_id: [0]}}))
        assert (stale.error_code, stale.directories) == (ErrorCode.stale_broker_epoch, ())
        assert controller.image.partition("here", 0).directories == (second,)
    finally:
        controller.close()


def assign_request(broker_epoch: int, dirs: dict[uuid.UUID, dict[uuid.UUID, list[int]]]) -> Any:
    cls = request_type(73, 0)
    dir_cls, topic_cls = nested_type(cls, "DirectoryData"), nested_type(cls, "TopicData")
    partition_cls = nested_type(cls, "PartitionData")
    return build(
        cls,
        broker_id=1,
        broker_epoch=broker_epoch,
        directories=tuple(
            build(
                dir_cls,
                id_=dir_id,
                topics=tuple(
                    build(
                        topic_cls,
                        topic_id=t,
                        partitions=tuple(build(partition_cls, partition_index=p) for p in ps),
                    )
                    for t, ps in topics.items()
                ),
            )
            for dir_id, topics in dirs.items()
        ),
    )


def test_a_followers_replica_moves_while_its_fetcher_appends(tmp_path: Path) -> None:
    """Node 2 of three has two log dirs and follows partition 0, which a producer writes to while the
    replica moves: the replicas of every broker are byte-identical afterwards and every record is read
    back once; partition 1, with no replica on node 2, answers REPLICA_NOT_AVAILABLE. (More, and
    figures, in tests/bench/bench_log_dirs.py.)"""
    layout = plan(tmp_path / "cluster", 3, free_port_range(6), list(REPLICATION))
    second = layout.nodes[1]
    dirs = [second.directory / "data", second.directory / "data2"]
    text = second.properties.read_text()
    second.properties.write_text(text.replace(f"log.dirs={dirs[0]}\n", f"log.dirs={dirs[0]},{dirs[1]}\n"))
    config = BrokerConfig.load(config_file=second.properties)
    format_storage(config, layout.cluster_id, ignore_formatted=True, now_ms=int(time.time() * 1000))
    cluster = LocalCluster(layout)
    cluster.start()
    try:
        bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in layout.nodes)
        on_second = f"127.0.0.1:{second.port}"
        create_replicated_topic(bootstrap, "followed", [[1, 2], [3, 1]])
        writer = Writer(bootstrap, "followed", 0, "followed")
        writer.write(PRELOAD // 2)
        assert writer.producer.flush(TIMEOUT) == 0
        writer.start()
        source = wait_for(
            "node 2's replica", lambda: where(on_second, "followed", 0)[0], timeout=TIMEOUT, interval=0.05
        )
        target = next(str(d) for d in dirs if str(d) != source)
        assert alter_replica_log_dirs(on_second, {target: {"followed": [0, 1]}}) == {
            ("followed", 0): ErrorCode.none,
            ("followed", 1): ErrorCode.replica_not_available,  # no replica on this broker
        }
        wait_for(
            "the move",
            lambda: where(on_second, "followed", 0) == (target, None),
            timeout=TIMEOUT,
            interval=0.05,
        )
        writer.stop()
        values = read_all(bootstrap, "followed", 0, len(writer.acked))
        assert len(values) == len(set(values)) == len(writer.acked) and set(values) == set(writer.acked)
        wait_for(
            "byte-identical replicas",
            lambda: (
                len({segment_bytes(d) for n in layout.nodes for d in n.directory.glob("data*/followed-0")})
                == 1
            ),
            interval=0.2,
            timeout=TIMEOUT,
        )
    finally:
        cluster.stop()
    assert cluster.exited() == {1: 0, 2: 0, 3: 0}
