"""Consumer groups of the consumer rebalance protocol (KIP-848) with real clients and broker processes.

librdkafka (confluent-kafka, `group.protocol=consumer`) and Kafka's Java consumer (kafka-clients 4.1.2,
tests/java/KcliClients.java) join groups the coordinator assigns: every record is read once per group,
a member that leaves or is killed hands its partitions to the others (the killed one after the
broker's session timeout, short here), committed offsets are where the next member resumes, and the
group's records in __consumer_offsets bring it back after a broker restart, where
`kcli dump-segment --offsets-decoder` prints them. On three nodes and on one, ten librdkafka members in
processes of their own share a topic while two leave and two are killed -9; so do ten Java members in
three JVMs, two of which join mid-stream and leave. tests/test_apache_kafka_ops.py runs both scenarios
on Apache Kafka 4.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, kcli_env, require_apache_kafka
from kraft_cluster import kcli
from test_consumer_group_protocol import DESCRIBE, commit, count, join, owned_of
from waiting import wait_for

from formats.checkpoints import read_partition_metadata
from kcli.broker.group.metadata_hash import group_hash, topic_hash_of
from kcli.client import KafkaClient
from kcli.protocol.messages import build, request_type

pytestmark = pytest.mark.timeout(300)

SESSION_MS = 6000
"""Long enough that a member alive on a loaded machine keeps its session: at 3 s, three live Java
members lost theirs on Apache Kafka itself together in one clean-clone run (a stall of over 2.5 s)."""
BROKER_SETTINGS = [
    "offsets.topic.num.partitions=3",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=100",
]
"""A short session and heartbeat interval, so a killed member's partitions move within seconds."""


def consumer_protocol_broker(broker_factory: Any, **kwargs: Any) -> BrokerProcess:
    """A broker whose cluster has group.version 1: formatted at 3.9 (group.version 0), then upgraded as an
    operator would with kcli features upgrade (a new cluster has it from the start, Kafka 4.1's default)."""
    broker = broker_factory(overrides=BROKER_SETTINGS, extra_args=["--release-version", "3.9"], **kwargs)
    done = run_kcli("features", "upgrade", "-b", broker.bootstrap, "--feature", "group.version=1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "group.version was upgraded to 1.\n"
    return broker


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def fill(bootstrap: str, topic: str, partitions: int, records: int, start: int = 0) -> list[str]:
    producer = Producer({"bootstrap.servers": bootstrap})
    values = [f"v{i}" for i in range(start, start + records)]
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % partitions)
    assert producer.flush(30) == 0
    return values


def member(bootstrap: str, group: str, topic: str, name: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    return consumer


def consume(members: list[Consumer], wanted: int, timeout: float = 60) -> list[tuple[int, str]]:
    """(member index, value) of `wanted` records, polled round-robin; each member commits what it read."""
    got: list[tuple[int, str]] = []
    deadline = time.monotonic() + timeout
    while len(got) < wanted and time.monotonic() < deadline:
        for index, consumer in enumerate(members):
            message = consumer.poll(0.1)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((index, message.value().decode()))
            consumer.commit(message=message, asynchronous=False)
    return got


def settle(members: list[Consumer], sizes: list[int], timeout: float = 30) -> None:
    """Poll until the members' assignments have these sizes (the group reconciled); no record is
    returned by these polls, the topic being empty or the test reading it after."""

    def balanced() -> bool:
        for consumer in members:
            message = consumer.poll(0.05)
            assert message is None, "settle() polls before anything is produced"
        return sorted(len(c.assignment()) for c in members) == sizes

    wait_for(f"assignments of sizes {sizes}", balanced, timeout, 0.05)


def test_librdkafka_members_share_leave_and_resume(broker_factory: Any) -> None:
    broker = consumer_protocol_broker(broker_factory)
    topic, group = f"cg-{uuid.uuid4().hex[:8]}", "kip848"
    create_topic(broker.bootstrap, topic, 6)
    members = [member(broker.bootstrap, group, topic, f"m{i}") for i in range(3)]
    try:
        settle(members, [2, 2, 2])
        # kcli groups describe finds the consumer group through ConsumerGroupDescribe
        described = run_kcli("groups", "describe", "-b", broker.bootstrap, group, "-o", "json")
        assert described.returncode == 0, described.stderr
        [found] = (
            json.loads(described.stdout)
            if described.stdout.startswith("[")
            else [json.loads(described.stdout)]
        )
        assert (found["state"], len(found["members"])) == ("Stable", 3)
        assert sorted(sum(len(p) for p in m["assignment"].values()) for m in found["members"]) == [2, 2, 2]
        values = fill(broker.bootstrap, topic, 6, 60, start=1)
        read = consume(members, 60)
        assert sorted(v for _, v in read) == sorted(values)  # each record once in the group
        assert {i for i, _ in read} == {0, 1, 2}
        # one member leaves: its partitions go to the other two
        members.pop().close()
        settle(members, [3, 3])
        more = fill(broker.bootstrap, topic, 6, 30, start=61)
        read = consume(members, 30)
        assert sorted(v for _, v in read) == sorted(more)
    finally:
        for consumer in members:
            consumer.close()
    # a new member resumes from the committed offsets
    late = fill(broker.bootstrap, topic, 6, 12, start=91)
    resumed = member(broker.bootstrap, group, topic, "late")
    try:
        read = consume([resumed], 12)
        assert sorted(v for _, v in read) == sorted(late)
        assert consume([resumed], 1, timeout=3) == []
    finally:
        resumed.close()
    listed = run_kcli("groups", "list", "-b", broker.bootstrap)
    assert listed.returncode == 0 and group in listed.stdout

    # the empty consumer group: its offsets reset (dry run, then --execute), read again from there, deleted
    reset = ["groups", "reset-offsets", "-b", broker.bootstrap, group, "--topic", topic, "--to-offset", "10"]
    planned = run_kcli(*reset, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert [line.split()[-1] for line in planned.stdout.splitlines()[2:]] == ["10"] * 6, planned.stdout
    executed = run_kcli(*reset, "--execute")
    assert executed.returncode == 0 and executed.stdout == planned.stdout, executed.stderr
    again = member(broker.bootstrap, group, topic, "again")
    try:
        read = consume([again], len(more + late))  # offsets 10 on: the second and third fills
        assert sorted(v for _, v in read) == sorted(more + late), read
        assert consume([again], 1, timeout=2) == []
    finally:
        again.close()
    deleted = run_kcli("groups", "delete", "-b", broker.bootstrap, group)
    assert deleted.returncode == 0, deleted.stderr
    gone = run_kcli("groups", "describe", "-b", broker.bootstrap, group)
    assert gone.returncode == 1 and f"consumer group '{group}' does not exist" in gone.stderr, gone.stderr


def test_librdkafka_regex_subscription(broker_factory: Any) -> None:
    """librdkafka sends a "^"-subscription as the heartbeat's SubscribedTopicRegex: the coordinator
    resolves it, so the member reads every matching topic and no other."""
    broker = consumer_protocol_broker(broker_factory)
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    for name in ("a", "b", "other"):
        create_topic(broker.bootstrap, f"{prefix}-{name}" if name != "other" else f"x{prefix}", 2)
    wanted = fill(broker.bootstrap, f"{prefix}-a", 2, 6) + fill(
        broker.bootstrap, f"{prefix}-b", 2, 6, start=6
    )
    fill(broker.bootstrap, f"x{prefix}", 2, 4, start=100)
    consumer = member(broker.bootstrap, "regex", f"^{prefix}-.*", "rx")
    try:
        read = consume([consumer], 12)
        assert sorted(v for _, v in read) == sorted(wanted)
        assert consume([consumer], 1, timeout=3) == []
        assert {tp.topic for tp in consumer.assignment()} == {f"{prefix}-a", f"{prefix}-b"}
        described = asyncio.run(describe_members(broker.bootstrap, "regex"))
        assert [(m.subscribed_topic_regex, m.subscribed_topic_names) for m in described] == [
            (f"(^{prefix}-.*)", ())  # librdkafka joins its patterns, each in parentheses
        ]
    finally:
        consumer.close()

    def resolutions() -> list[str] | None:
        """The group's regular-expression records (type 16, Kafka 4.0+) once the last one is a tombstone."""
        segments = sorted(broker.data_dir.glob("__consumer_offsets-*/*.log"))
        dumped = run_kcli("dump-segment", "--offsets-decoder", *map(str, segments))
        lines = [
            line
            for line in dumped.stdout.splitlines()
            if '"type":"16"' in line and '"groupId":"regex"' in line
        ]
        return lines if lines and "payload: <DELETE>" in lines[-1] else None

    # resolved as Kafka records it, and removed when the last member subscribing with it left
    first, *_ = wait_for("the resolution's tombstone", resolutions, 10)
    assert f'"regularExpression":"(^{prefix}-.*)"' in first
    assert f'"topics":["{prefix}-a","{prefix}-b"],"version":' in first


async def describe_members(bootstrap: str, group_id: str) -> Any:
    async with await KafkaClient.connect(bootstrap, request_timeout=10) as client:
        request = build(request_type(DESCRIBE, 1), group_ids=(group_id,), include_authorized_operations=False)
        return (await client.send(request)).groups[0].members


KILLABLE = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", len(c.assignment()), flush=True)
"""


def test_killed_member_partitions_move_after_the_session_timeout(broker_factory: Any, tmp_path: Path) -> None:
    broker = consumer_protocol_broker(broker_factory)
    topic, group = f"cg-{uuid.uuid4().hex[:8]}", "killed"
    create_topic(broker.bootstrap, topic, 4)  # empty: a poll returns no record, only rebalances
    survivor = member(broker.bootstrap, group, topic, "survivor")
    script = tmp_path / "member.py"
    script.write_text(KILLABLE)
    process = subprocess.Popen(
        [sys.executable, str(script), broker.bootstrap, group, topic],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, env=kcli_env(),
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    try:
        # The survivor polls meanwhile: it must revoke two partitions before the newcomer gets them.
        wait_for(
            "the members to share the partitions",
            lambda: survivor.poll(0.1) or (lines and len(survivor.assignment()) == 2),
            60,
        )
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        killed_at = time.monotonic()
        wait_for(
            "the survivor to hold every partition",
            lambda: survivor.poll(0.1) or len(survivor.assignment()) == 4,
            30,
        )
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1  # not before the session ran out
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
        survivor.close()


def test_group_survives_a_broker_restart(broker_factory: Any, tmp_path: Path) -> None:
    """The coordinator that loads the partition again rebuilds the group from its records: the same
    epochs and assignment, and the members go on heartbeating with the epochs they had."""
    data_dir = tmp_path / "data"
    broker = consumer_protocol_broker(broker_factory, data_dir=data_dir)
    topic = f"cg-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)

    async def before(bootstrap: str) -> tuple[Any, Any]:
        async with await KafkaClient.connect(bootstrap, request_timeout=10) as client:
            await client.send(build(request_type(10, 2), key="g", key_type=0))
            first = await client.send(join("g", "a", (topic,)))
            assert count(owned_of(first)) == 2
            assert await commit(client, "g", "a", first.member_epoch, topic) == 0
            return first, await describe(client)

    async def after(bootstrap: str, epoch: int, owned: Any) -> tuple[Any, Any]:
        async with await KafkaClient.connect(bootstrap, request_timeout=10) as client:
            await client.send(build(request_type(10, 2), key="g", key_type=0))
            described = await describe(client)
            from test_consumer_group_protocol import heartbeat

            again = await client.send(heartbeat("g", "a", epoch, owned=owned))
            return described, again

    first, described = asyncio.run(before(broker.bootstrap))
    broker.stop()
    restarted = broker_factory(overrides=BROKER_SETTINGS, data_dir=data_dir)
    described_again, again = asyncio.run(after(restarted.bootstrap, first.member_epoch, owned_of(first)))
    assert described_again == described
    assert (again.error_code, again.member_epoch) == (0, first.member_epoch)
    restarted.stop()
    segments = sorted(data_dir.glob("__consumer_offsets-*/*.log"))
    dumped = run_kcli("dump-segment", "--offsets-decoder", *map(str, segments))
    assert dumped.returncode == 0, dumped.stderr
    # Kafka 4.1's records: the subscribed topics' metadata hash in the group's epoch record (KIP-1101),
    # no subscription-metadata record (type 4, Kafka 4.0's)
    for record_type in (3, 5, 6, 7, 8):
        assert f'"type":"{record_type}"' in dumped.stdout, record_type
    assert '"type":"4"' not in dumped.stdout
    assert '"data":{"groupId":"g","memberId":"a"}' in dumped.stdout
    topic_id = read_partition_metadata((data_dir / f"{topic}-0" / "partition.metadata").read_text()).topic_id
    expected = group_hash({topic: topic_hash_of(topic_id, topic, [[], []])})
    assert f'"data":{{"epoch":1,"metadataHash":{expected}}}' in dumped.stdout, dumped.stdout


async def describe(client: KafkaClient) -> Any:
    response = await client.send(
        build(request_type(DESCRIBE, 1), group_ids=("g",), include_authorized_operations=False)
    )
    group = response.groups[0]
    assert group.error_code == 0 and group.group_state == "Stable"
    return group


def test_java_consumer_protocol_members(broker_factory: Any, tmp_path: Path) -> None:
    import test_java_clients
    from test_java_clients import MAIN, java, java_classes  # noqa: F401 (the fixture's module)

    test_java_clients.require_apache_kafka()
    test_java_clients.require_javac()
    classes = test_java_clients.compile_clients()
    broker = broker_factory(overrides=BROKER_SETTINGS, extra_args=["--release-version", "3.9"])
    topic = f"cg-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 4)
    # group.version 0 (a cluster formatted at 3.9): the member is refused with the client's own sentence
    result = java(
        MAIN, ["consumerProtocol", broker.bootstrap, "refused", topic], tmp_path / "java", classpath=[classes]
    )
    assert java_steps(result, "consumerProtocol") == {"step": "consumerProtocol", "records": 0, "refused": (
        "The cluster does not support the new CONSUMER group protocol. Set group.protocol=classic on the "
        "consumer configs to revert to the CLASSIC protocol until the cluster is upgraded."
    )}  # fmt: skip
    done = run_kcli("features", "upgrade", "-b", broker.bootstrap, "--feature", "group.version=1")
    assert done.returncode == 0, done.stderr
    values = fill(broker.bootstrap, topic, 4, 40)
    result = java(
        MAIN,
        ["consumerGroup", broker.bootstrap, "java-group", topic, "40"],
        tmp_path / "java",
        classpath=[classes],
        timeout=240,
    )
    step = java_steps(result, "consumerGroup")
    assert "error" not in step, step
    assert sorted(step["values"]) == sorted(values)
    assert sorted(len(a) for a in step["assignments"]) == [2, 2]
    assert step["describe"] == {
        "type": "Consumer",
        "state": "Stable",
        "members": 2,
        "assigned": 4,
        "assignor": "uniform",
    }
    assert step["resumed"] == 0 and step["thirdAssignment"] == 4


def java_steps(result: subprocess.CompletedProcess[str], name: str) -> dict[str, Any]:
    """The one JSON line KcliClients printed for step `name`."""
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    found = [line for line in lines if line.get("step") == name]
    assert len(found) == 1, (result.stdout, result.stderr)
    return found[0]


def test_storage_format_with_group_version_1(tmp_path: Path) -> None:
    """`kcli storage format --feature group.version=1`: the cluster starts with consumer groups on."""
    from conftest import stop_cleanly
    from test_storage import CLUSTER_ID, combined, kcli, start_with_config

    config = combined(tmp_path)
    formatted = kcli(
        tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID, "--feature", "group.version=1"
    )
    assert formatted.returncode == 0, formatted.stderr
    broker = start_with_config(tmp_path, config)
    try:
        described = run_kcli("features", "describe", "-b", broker.bootstrap)
        assert (
            "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1"
            in (described.stdout)
        )
        topic = f"cg-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, 2)
        values = fill(broker.bootstrap, topic, 2, 4)
        consumer = member(broker.bootstrap, "formatted", topic, "f")
        try:
            assert sorted(v for _, v in consume([consumer], 4)) == sorted(values)
        finally:
            consumer.close()
    finally:
        stop_cleanly(broker)


MEMBER = Path(__file__).parent / "group_member.py"
CLUSTER_PARTITIONS = 20
CLUSTER_RECORDS = 20_000
RECORD_MS = 0.5
"""The time a member spends on each record: ten members read about 20,000 records a second at most,
so the four that leave or are killed have records left to read when they go."""


class MemberProcess:
    """tests/group_member.py with --commit-ms: a librdkafka member of the consumer protocol in a process
    of its own (so that it can be killed -9), committing what it read every 100 ms, on revocation and
    before it closes; `events` are its JSON lines, in order."""

    def __init__(self, bootstrap: str, group: str, topic: str, log: Path) -> None:
        args = [sys.executable, str(MEMBER), "confluent", bootstrap, group, topic, "--protocol", "consumer"]
        args += ["--commit-ms", "100", "--record-ms", str(RECORD_MS)]
        self.log_path = log
        with open(log, "wb") as stderr:
            self.process = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=kcli_env()
            )
        self.events: list[dict[str, Any]] = []
        self._reads: list[tuple[int, int]] = []
        self._assigned: list[int] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.killed = False

    def _read(self) -> None:
        """Its lines into `events`, and into a file beside its log: a failed check can be read later."""
        assert self.process.stdout is not None
        with open(self.log_path.with_suffix(".events"), "w") as kept:
            for line in self.process.stdout:
                kept.write(line)
                self.add(json.loads(line))

    def add(self, event: dict[str, Any]) -> None:
        """One of its lines, in order. Its reads and its last assignment are kept as they come: the waits
        poll them every 50 ms, and a scan of 20,000 lines each time cost seconds of the test's CPU."""
        if "read" in event:
            p, o = event["read"]
            self._reads.append((p, o))
        if "assigned" in event:
            self._assigned = event["assigned"]
        self.events.append(event)

    def _all(self, key: str) -> list[Any]:
        return [e[key] for e in list(self.events) if key in e]

    @property
    def assigned(self) -> list[int]:
        return self._assigned

    @property
    def reads(self) -> list[tuple[int, int]]:
        return list(self._reads)

    def covered_reads(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
        """(reads a later confirmed commit of this member covered, reads of partitions it then lost
        uncommitted, the others), in the order of its lines. A member is told its partitions are lost
        when the coordinator fenced it (its session expired): it may not commit them any more."""
        covered: list[tuple[int, int]] = []
        lost: list[tuple[int, int]] = []
        pending: dict[int, list[int]] = {}
        for event in list(self.events):
            if "read" in event:
                p, o = event["read"]
                pending.setdefault(p, []).append(o)
            for p, end in event.get("committed", ()):
                covered += [(p, o) for o in pending.get(p, []) if o < end]
                pending[p] = [o for o in pending.get(p, []) if o >= end]
            for p in event.get("lost", ()):
                lost += [(p, o) for o in pending.pop(p, [])]
        return covered, lost, [(p, o) for p, offsets in pending.items() for o in offsets]

    @property
    def sent(self) -> dict[int, int]:
        """Partition -> the highest offset of a commit this member sent, confirmed or not."""
        found: dict[int, int] = {}
        for offsets in self._all("committing"):
            for p, o in offsets:
                found[p] = max(found.get(p, -1), o)
        return found

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def member_id(self) -> str | None:
        found = self._all("member")
        return found[-1] if found else None

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.killed = True

    def stop(self) -> None:
        """Ask it to commit, close (a leave) and exit: "stop" on its stdin."""
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.write("stop\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass

    def wait(self) -> None:
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.reader.join(10)


def produce_keyed(bootstrap: str, topic: str, records: int = CLUSTER_RECORDS) -> set[tuple[int, int]]:
    """(partition, offset) of every record acknowledged by an acks=all producer, keyed k0, k1, ..."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    written: set[tuple[int, int]] = set()
    failed: list[str] = []

    def done(err: Any, msg: Any) -> None:
        if err is None:
            written.add((msg.partition(), msg.offset()))
        else:
            failed.append(str(err))

    for i in range(records):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(), on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed[:5]
    assert len(written) == records
    return written


DESCRIBE_VIEWS = ((), ("--members", "--verbose"))
"""The views of a group compared with kafka-consumer-groups.sh --describe: its partitions (offsets and
owners) and its members with their epochs, current and target assignments."""


def kafka_tool_here() -> bool:
    """Whether Kafka's tools can run here (java, and the pinned jars or mvn); with CI=true they must be:
    conftest.require_apache_kafka fails then, as it fails when the jars cannot be resolved."""
    import apache_kafka

    if apache_kafka.missing_tools() and os.environ.get("CI") != "true":
        return False
    require_apache_kafka()
    return True


def describe_equals_kafka_consumer_groups(bootstrap: str, group: str, workdir: Path) -> list[str]:
    """`kcli groups describe GROUP [--members --verbose]` and Kafka 4.1's kafka-consumer-groups.sh
    --describe --group GROUP [--members --verbose] on the same cluster, side by side: the same exit
    status 0, stdout and stderr byte for byte. Returns kcli's stdout of each view."""
    import apache_kafka

    def ours(view: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return kcli("groups", "describe", group, *view, "--bootstrap-server", bootstrap)

    def theirs(view: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        args = ["--bootstrap-server", bootstrap, "--describe", "--group", group, *view]
        return apache_kafka.run_tool(apache_kafka.CONSUMER_GROUP_COMMAND, args, workdir=workdir)

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [(pool.submit(ours, v), pool.submit(theirs, v)) for v in DESCRIBE_VIEWS]
        results = [(a.result(), b.result()) for a, b in futures]
    for view, (mine, kafkas) in zip(DESCRIBE_VIEWS, results, strict=True):
        assert mine.returncode == kafkas.returncode == 0, (view, mine.stderr, kafkas.stderr)
        assert mine.stdout == kafkas.stdout, (view, mine.stdout, kafkas.stdout)
        assert mine.stderr == kafkas.stderr == "", (view, mine.stderr, kafkas.stderr)
    return [mine.stdout for mine, _ in results]


def create_cluster_topic(bootstrap: str, topic: str, replication_factor: int = 3) -> None:
    """The ten-member scenarios' topic: CLUSTER_PARTITIONS partitions, replication factor 3 and min ISR 2
    on three nodes (1 and 1 on one)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    min_isr = str(min(2, replication_factor))
    new = NewTopic(topic, CLUSTER_PARTITIONS, replication_factor, config={"min.insync.replicas": min_isr})
    admin.create_topics([new])[topic].result(30)


def assert_survivors_group(found: dict[str, Any], topic: str, written: set[tuple[int, int]]) -> None:
    """`kcli groups describe -o json` of the survivors' group: the consumer protocol's uniform assignor,
    every partition owned and committed at its log end."""
    assert (found["protocol_type"], found["protocol"]) == ("consumer", "uniform")
    owned = sorted(p for m in found["members"] for p in m["assignment"][topic])
    assert owned == list(range(CLUSTER_PARTITIONS))
    ends = {p: 1 + max(o for q, o in written if q == p) for p in range(CLUSTER_PARTITIONS)}
    assert {r["partition"]: r["current_offset"] for r in found["partitions"]} == ends


def assert_read_once(
    members: Sequence[Any],
    written: set[tuple[int, int]],
    gone: Sequence[Any],
    handed_over: dict[int, set[int]],
) -> None:
    """The ten-member scenarios' rule over the members' reports: every record read at least once and
    nothing else; none committed twice; every read of a member not killed committed, unless the member
    lost that partition uncommitted (fenced: a loaded machine can delay a heartbeat past the session,
    on Apache Kafka as on kcli); a record nobody committed read by a killed member that had sent a
    commit past it (so read twice only after a kill or a fence); and the partitions `handed_over` by
    the members `gone` read on by others where they had not been read to their end."""
    committed_reads: Counter[tuple[int, int]] = Counter()
    uncommitted: dict[int, list[tuple[int, int]]] = {}
    fenced: dict[int, list[tuple[int, int]]] = {}
    for number, m in enumerate(members):
        covered, lost, pending = m.covered_reads()
        committed_reads.update(covered)
        uncommitted[number], fenced[number] = pending, lost
    every_read = Counter(r for m in members for r in m.reads)
    assert set(every_read) == written  # each record read at least once, and nothing else
    assert max(committed_reads.values()) == 1, [r for r, n in committed_reads.items() if n > 1][:10]
    assert all(not uncommitted[i] for i, m in enumerate(members) if not m.killed), {
        i: (pending[:10], [e for e in members[i].events if "read" not in e][-20:])
        for i, pending in uncommitted.items()
        if pending and not members[i].killed
    }
    in_flight = Counter(
        r for i, m in enumerate(members) for r in fenced[i] + (uncommitted[i] if m.killed else [])
    )
    # read twice: after a kill or a fence only
    assert all(n - in_flight[r] <= 1 for r, n in every_read.items())
    for p, o in written - set(committed_reads):
        assert any((p, o) in uncommitted[i] and m.sent.get(p, -1) > o for i, m in enumerate(members)), (
            f"partition {p} offset {o}: read by a killed member only, and after every commit it sent"
        )
    # the partitions of the members that left and were killed went on with others, unless the member had
    # read one to its end (the producer can finish first on a loaded machine; keys k0..k19999 put 1,029
    # records in partition 12, and a member gone at offset 1028 left nothing to read on)
    ends: dict[int, int] = {}
    for p, o in written:
        ends[p] = max(o, ends.get(p, -1))
    for m in gone:
        others = [r for n in members if n is not m for r in n.reads]
        for p in handed_over[id(m)]:
            last = max((o for q, o in m.reads if q == p), default=-1)
            assert last == ends[p] or any(q == p and o > last for q, o in others), (
                f"partition {p} after {last}"
            )


def ten_members_join_leave_and_are_killed(
    bootstrap: str,
    workdir: Path,
    group: str,
    node_logs: Callable[[], dict[int, str]],
    *,
    kcli_nodes: bool,
    kafka_tool: bool,
    replication_factor: int = 3,
) -> None:
    """The scenario of the test below on the nodes at `bootstrap` (three of kcli's or Apache Kafka's, or
    one with `replication_factor` 1; with BROKER_SETTINGS' session timeout and heartbeat interval), the
    members' logs in `workdir`, the group named `group`. `node_logs()` is each node's log so far by node id, shown when a wait fails; the logs
    of kcli nodes (`kcli_nodes`) must hold no Traceback at the end. With `kafka_tool`, `kcli groups
    describe` of the final group (its partitions, and its members --verbose) equals kafka-consumer-groups.sh
    --describe's on the same cluster, byte for byte."""
    topic = f"cg-{uuid.uuid4().hex[:8]}"
    create_cluster_topic(bootstrap, topic, replication_factor)
    members = [MemberProcess(bootstrap, group, topic, workdir / f"member-{i}.log") for i in range(10)]
    leaving, killed, survivors = members[:2], members[2:4], members[4:]

    def explain() -> str:
        parts = []
        for number, m in enumerate(members):
            parts.append(
                f"--- member {number} (pid {m.process.pid}, exit {m.process.poll()}, killed {m.killed}): "
                f"assigned {m.assigned}, {len(m.reads)} read; stderr:\n"
                + "\n".join(m.log().splitlines()[-40:])
            )
        for node_id, text in node_logs().items():
            parts.append(f"--- node {node_id}:\n" + "\n".join(text.splitlines()[-60:]))
        return "\n".join(parts)

    def wait(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
        return wait_for(what, check, timeout, 0.05, explain=explain)

    written: set[tuple[int, int]] = set()
    try:
        wait(
            "ten members holding two partitions each",
            lambda: (
                sorted(p for m in members for p in m.assigned) == list(range(CLUSTER_PARTITIONS))
                and all(len(m.assigned) == 2 for m in members)
            ),
        )
        producing = threading.Thread(target=lambda: written.update(produce_keyed(bootstrap, topic)))
        producing.start()
        wait(
            "the four members that go to be reading",
            lambda: all(len(m.reads) >= 200 for m in leaving + killed),
        )
        handed_over = {id(m): set(m.assigned) for m in leaving + killed}
        for m in killed:
            m.kill()
        for m in leaving:
            m.stop()
        producing.join(90)
        assert len(written) == CLUSTER_RECORDS, "the producer failed (its thread's error is above)"
        wait(
            "the survivors to read every record", lambda: set().union(*(m.reads for m in members)) >= written
        )

        def described() -> dict[str, Any] | None:
            result = kcli("groups", "describe", group, "-o", "json", "--bootstrap-server", bootstrap)
            assert result.returncode == 0, result.stderr
            [found] = [json.loads(line) for line in result.stdout.splitlines()]
            members_ids = sorted(m["member_id"] for m in found["members"])
            done = found["state"] == "Stable" and found["total_lag"] == 0
            reconciled = all(
                m["assignment"] == m["target_assignment"]
                and m["member_epoch"] == found["target_assignment_epoch"]
                for m in found["members"]
            )
            survived = members_ids == sorted(m.member_id or "" for m in survivors)
            return found if done and reconciled and survived else None

        found = wait("the group of six survivors, reconciled and committed at the log end", described, 30)
        assert_survivors_group(found, topic, written)
        if kafka_tool:
            offsets, verbose = describe_equals_kafka_consumer_groups(bootstrap, group, workdir / "kafka-tool")
            assert len(offsets.splitlines()) == 2 + CLUSTER_PARTITIONS, offsets  # a blank line, the header
            rows = [line.split() for line in verbose.splitlines()[2:]]
            assert sorted(r[1] for r in rows) == sorted(m.member_id or "" for m in survivors), verbose
            # CURRENT-EPOCH equal to TARGET-EPOCH, CURRENT-ASSIGNMENT to TARGET-ASSIGNMENT: reconciled
            assert all(r[-4] == r[-2] and r[-3] == r[-1] for r in rows), verbose
    finally:
        for m in members:
            if not m.killed:
                m.stop()
        for m in members:
            m.wait()
    for m in leaving + survivors:
        assert m.process.returncode == 0, explain()

    assert_read_once(members, written, leaving + killed, handed_over)
    if kcli_nodes:
        for node_id, text in node_logs().items():
            assert "Traceback" not in text, f"node {node_id}:\n{text}"


@pytest.mark.timeout(120)
def test_librdkafka_ten_members_join_leave_and_are_killed_on_three_nodes(
    replicated_cluster: Any, tmp_path: Path
) -> None:
    """Ten librdkafka members (group.protocol=consumer, each a process of tests/group_member.py committing
    every 100 ms, on revocation and before it closes) share a 20-partition topic of replication factor 3
    on three nodes while 20,000 keyed records are produced with acks=all; once four of them are reading,
    two leave (close) and two are killed -9, and the six others finish the topic.

    A read counts as committed when a later commit of the same member, which it saw succeed, covered
    it. The rule checked: every record is read at least once; no record is committed twice; every read
    of a member that left or stayed is committed; a record nobody committed was read by a killed member
    that had sent a commit past it (the commit reached the coordinator, its answer did not come back).
    So a record is read twice only where a killed member read it after its last confirmed commit of
    that partition and the next owner read it again. The partitions of the members that went are read
    on by others, and `kcli groups describe` shows a consumer group of the six survivors, reconciled,
    every partition committed at its log end; where Kafka's tools run, kafka-consumer-groups.sh
    --describe prints what `kcli groups describe` prints of it (partitions, and members --verbose).
    tests/test_apache_kafka_ops.py runs the same scenario on Apache Kafka 4.1."""
    cluster = replicated_cluster(*BROKER_SETTINGS)
    ten_members_join_leave_and_are_killed(
        cluster.bootstrap,
        tmp_path,
        "ten",
        lambda: {node.node_id: node.log() for node in cluster.nodes.values()},
        kcli_nodes=True,
        kafka_tool=kafka_tool_here(),
    )


@pytest.mark.timeout(120)
def test_librdkafka_ten_members_join_leave_and_are_killed_on_one_node(
    broker_factory: Any, tmp_path: Path
) -> None:
    """The scenario above on one node, the topic's 20 partitions of replication factor 1: two of the ten
    members leave, two are killed -9, the six others finish the topic, and the same rule holds."""
    broker = broker_factory(overrides=BROKER_SETTINGS)
    ten_members_join_leave_and_are_killed(
        broker.bootstrap,
        tmp_path,
        "ten-one-node",
        lambda: {1: broker.log()},
        kcli_nodes=True,
        kafka_tool=False,
        replication_factor=1,
    )


JAVA_COMMIT_MS = 200
JAVA_RECORD_US = 1500
"""A batch commit every 200 ms, and 1.5 ms spent on each record: the members read more slowly than the
producer writes, so that the four that go have records left to read when they go."""


class JavaMembers:
    """One JVM of tests/java/KcliClients.java `members`: `count` Java consumers of the consumer protocol,
    a thread each, committing with commitSync every JAVA_COMMIT_MS, in onPartitionsRevoked and before
    they close (on "stop"), sending again a commit refused for a stale member epoch (it crossed the
    heartbeat answer that bumped the epoch; Kafka 4.1's coordinator refuses it too); killed -9, the JVM
    takes them all. They subscribe at once or, with `on_join`, on join(). `members` sees each one's lines
    as a MemberProcess sees its process's."""

    def __init__(
        self,
        classes: Path,
        bootstrap: str,
        group: str,
        topic: str,
        count: int,
        workdir: Path,
        on_join: bool = False,
    ) -> None:
        import apache_kafka
        from test_java_clients import MAIN

        self.name = workdir.name
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path, self.stderr_path = workdir / "client.log", workdir / "stderr"
        args = ["members", bootstrap, group, topic, str(count), str(JAVA_COMMIT_MS), str(JAVA_RECORD_US)]
        args.append("stdin" if on_join else "now")
        command = apache_kafka.java_command(
            MAIN, args, log_path=self.log_path, level="info", classpath=[classes]
        )
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=workdir
            )
        self.members = [JavaMember(self, i) for i in range(count)]
        self.lines: list[dict[str, Any]] = []
        """Its lines of no member: {"event": "done"} once every member closed, anything unexpected."""
        self.killed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line) if line.startswith("{") else {"text": line}
            if "m" in event:
                self.members[event.pop("m")].add(event)
            else:
                self.lines.append(event)

    def log(self) -> str:
        parts = [p.read_text(errors="replace") for p in (self.log_path, self.stderr_path) if p.exists()]
        return "\n".join(parts)

    def join(self) -> None:
        """Let its members subscribe: "join" on its stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write("join\n")
        self.process.stdin.flush()

    kill = MemberProcess.kill
    stop = MemberProcess.stop
    wait = MemberProcess.wait


class JavaMember:
    """One consumer of a JavaMembers JVM: its lines (without "m"), read as MemberProcess reads them."""

    def __init__(self, jvm: JavaMembers, index: int) -> None:
        self.jvm, self.index = jvm, index
        self.events: list[dict[str, Any]] = []
        self._reads: list[tuple[int, int]] = []
        self._assigned: list[int] = []

    @property
    def killed(self) -> bool:
        return self.jvm.killed

    add = MemberProcess.add
    _all = MemberProcess._all
    assigned = MemberProcess.assigned
    reads = MemberProcess.reads
    covered_reads = MemberProcess.covered_reads
    sent = MemberProcess.sent
    member_id = MemberProcess.member_id


def java_ten_members_join_leave_and_are_killed(
    bootstrap: str,
    workdir: Path,
    group: str,
    node_logs: Callable[[], dict[int, str]],
    *,
    kcli_nodes: bool,
    replication_factor: int = 3,
) -> None:
    """The Java scenario of the test below on the nodes at `bootstrap` (three of kcli's or Apache Kafka's,
    or one with `replication_factor` 1), as `ten_members_join_leave_and_are_killed` is the librdkafka one."""
    import test_java_clients

    test_java_clients.require_apache_kafka()
    test_java_clients.require_javac()
    classes = test_java_clients.compile_clients()
    topic = f"cg-{uuid.uuid4().hex[:8]}"
    create_cluster_topic(bootstrap, topic, replication_factor)
    jvms = [
        JavaMembers(classes, bootstrap, group, topic, count, workdir / name, on_join)
        for name, count, on_join in (("leaving", 2, True), ("killed", 2, False), ("staying", 6, False))
    ]
    leaving_jvm, killed_jvm, staying_jvm = jvms
    members = [m for jvm in jvms for m in jvm.members]
    leaving, killed, survivors = members[:2], members[2:4], members[4:]

    def explain() -> str:
        parts = []
        for number, m in enumerate(members):
            parts.append(
                f"--- member {number} ({m.jvm.name} {m.index}, {m.member_id}): assigned {m.assigned}, "
                f"{len(m.reads)} read, last lines {m.events[-5:]}"
            )
        for jvm in jvms:
            parts.append(
                f"--- JVM {jvm.name} (pid {jvm.process.pid}, exit {jvm.process.poll()}, killed {jvm.killed}): "
                f"lines {jvm.lines[-5:]}; log:\n" + "\n".join(jvm.log().splitlines()[-40:])
            )
        for node_id, text in node_logs().items():
            parts.append(f"--- node {node_id}:\n" + "\n".join(text.splitlines()[-60:]))
        return "\n".join(parts)

    def wait(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
        return wait_for(what, check, timeout, 0.05, explain=explain)

    def holding(some: list[JavaMember], sizes: tuple[int, ...]) -> bool:
        owned = sorted(p for m in some for p in m.assigned)
        return owned == list(range(CLUSTER_PARTITIONS)) and all(len(m.assigned) in sizes for m in some)

    written: set[tuple[int, int]] = set()
    first = killed + survivors
    try:
        wait("eight members holding every partition", lambda: holding(first, (2, 3)))
        producing = threading.Thread(target=lambda: written.update(produce_keyed(bootstrap, topic)))
        producing.start()
        wait("the eight members to be reading", lambda: all(len(m.reads) >= 100 for m in first))
        leaving_jvm.join()
        wait("ten members holding two partitions each", lambda: holding(members, (2,)))
        wait(
            "the four members that go to be reading",
            lambda: all(len(m.reads) >= 200 for m in leaving + killed),
        )
        handed_over = {id(m): set(m.assigned) for m in leaving + killed}
        killed_jvm.kill()
        leaving_jvm.stop()
        producing.join(90)
        assert len(written) == CLUSTER_RECORDS, "the producer failed (its thread's error is above)"
        wait(
            "the survivors to read every record", lambda: set().union(*(m.reads for m in members)) >= written
        )

        def described() -> dict[str, Any] | None:
            result = kcli("groups", "describe", group, "-o", "json", "--bootstrap-server", bootstrap)
            assert result.returncode == 0, result.stderr
            [found] = [json.loads(line) for line in result.stdout.splitlines()]
            members_ids = sorted(m["member_id"] for m in found["members"])
            done = found["state"] == "Stable" and found["total_lag"] == 0
            return found if done and members_ids == sorted(m.member_id or "" for m in survivors) else None

        found = wait("the group of six survivors, committed at the log end", described, 30)
        assert_survivors_group(found, topic, written)
    finally:
        for jvm in jvms:
            if not jvm.killed:
                jvm.stop()
        for jvm in jvms:
            jvm.wait()
    for jvm in (leaving_jvm, staying_jvm):
        assert jvm.process.returncode == 0 and jvm.lines == [{"event": "done"}], explain()
    for m in leaving + survivors:
        assert [e for e in m.events if "error" in e or "lost" in e] == [] and "closed" in m.events[-1], (
            explain()
        )

    # the join took partitions from members that were reading: revoked between two of their reads
    def revoked_between_reads(m: JavaMember) -> bool:
        kinds = "".join("r" if "read" in e else "v" if "revoked" in e else "" for e in m.events)
        return "v" in kinds.strip("v")  # a "v" with an "r" on either side

    assert any(revoked_between_reads(m) for m in first), explain()

    assert_read_once(members, written, leaving + killed, handed_over)
    if kcli_nodes:
        for node_id, text in node_logs().items():
            assert "Traceback" not in text, f"node {node_id}:\n{text}"


@pytest.mark.timeout(120)
def test_java_ten_members_join_leave_and_are_killed_on_three_nodes(
    replicated_cluster: Any, tmp_path: Path
) -> None:
    """Ten of Kafka's Java consumers (kafka-clients 4.1.2, group.protocol=consumer, tests/java/KcliClients.java
    `members`: commitSync every 200 ms, in onPartitionsRevoked and before close) share a 20-partition
    topic of replication factor 3 on three nodes while 20,000 keyed records are produced with acks=all.
    Three JVMs hold them, started together (a JVM starts slowly on two cores): six that stay, two that
    are killed -9 and two that leave. The eight of the first two JVMs share the topic; once they are
    reading, the last two join (partitions move from members with reads in hand, which commit them on
    revocation), and once the four that go are reading, their JVM of two is killed and the other two
    close; the six others finish the topic.

    The rule is the librdkafka test's above: every record is read at least once; no record is committed
    twice; every read of a member that left or stayed is committed; a record nobody committed was read by
    a killed member that had sent a commit past it. So a record is read twice only where a killed member
    read it after its last confirmed commit of that partition and the next owner read it again. The
    partitions of the members that went are read on by others, and `kcli groups describe` shows a
    consumer group of the six survivors, every partition committed at its log end."""
    cluster = replicated_cluster(*BROKER_SETTINGS)
    java_ten_members_join_leave_and_are_killed(
        cluster.bootstrap,
        tmp_path,
        "ten-java",
        lambda: {node.node_id: node.log() for node in cluster.nodes.values()},
        kcli_nodes=True,
    )


@pytest.mark.timeout(120)
def test_java_ten_members_join_leave_and_are_killed_on_one_node(broker_factory: Any, tmp_path: Path) -> None:
    """The Java scenario above on one node, the topic's 20 partitions of replication factor 1."""
    broker = broker_factory(overrides=BROKER_SETTINGS)
    java_ten_members_join_leave_and_are_killed(
        broker.bootstrap,
        tmp_path,
        "ten-java-one-node",
        lambda: {1: broker.log()},
        kcli_nodes=True,
        replication_factor=1,
    )
