"""Multi-node KRaft clusters of real `kcli broker start` processes on loopback, with real clients.

The clusters come from tests/kraft_cluster.py (a layout formatted by `ops.local_cluster.plan`, one
process of ours per node); the first test runs `kcli cluster start` itself. Every wait is bounded and
waits for an event (a log line, an answer). Kills, fencing and the seeded chaos schedule are in
test_cluster_faults.py (a file of their own, so that two workers run the two halves at once).

1. `kcli cluster start`: confluent-kafka, kafka-python, aiokafka and kcat create topics, produce and
   consume through each of three brokers; `kcli cluster status` (text, JSON) shows three unfenced
   brokers, a leader and two followers at lag 0; SIGTERM stops the runner and every node cleanly.
5. Bad input: one sentence, exit 2, nothing written: another cluster's dirs, voter lists that disagree,
   a port in use, one node.id twice (in the voter list, or a second process next to the live node);
   what kcli does not detect yet is xfail(strict).
6. A dynamic quorum (KIP-853) grows by add-controller and keeps its voters across kill -9.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import forkserver
import pytest
from cli_in_process import run_kcli
from conftest import START_TIMEOUT, free_port_range, kcli_env
from kraft_cluster import (
    QUORUM_TIMEOUTS,
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    ClusterRunner,
    LocalKraftCluster,
    NodeProcess,
    children_of,
    kcli,
    shutdown_ending,
    still_ours,
    try_status,
    wait_for,
)

from ops.local_cluster import LocalNode, plan

pytestmark = pytest.mark.timeout(120)


# --- 1. kcli cluster start, and every client through every broker ------------------------------------


RECORDS = 5  # per partition and bootstrap broker


def record_value(topic: str, bootstrap: str, partition: int, i: int) -> bytes:
    return f"{topic} via {bootstrap} p{partition} #{i}".encode()


def expected_values(topic: str, bootstraps: Sequence[str], partitions: int) -> dict[int, list[bytes]]:
    """Per partition, in produce order: each bootstrap's records one after the other."""
    return {
        p: [record_value(topic, b, p, i) for b in bootstraps for i in range(RECORDS)]
        for p in range(partitions)
    }


def wait_known_everywhere(bootstraps: Sequence[str], topic: str, partitions: int) -> None:
    """CreateTopics answers once the controller has committed the topic; each broker learns it when it
    applies that batch, a moment later (as in Kafka). Wait until every broker's Metadata has it."""
    from confluent_kafka.admin import AdminClient

    for bootstrap in bootstraps:
        lookup = AdminClient({"bootstrap.servers": bootstrap})

        def known(lookup: AdminClient = lookup) -> bool:
            found = lookup.list_topics(topic, timeout=15).topics.get(topic)
            return found is not None and found.error is None and len(found.partitions) == partitions

        wait_for(f"{bootstrap} to know {topic}", known, 15)


def check_metadata_brokers(brokers: object, expected: Sequence[int]) -> None:
    assert sorted(brokers) == sorted(expected), brokers  # type: ignore[call-overload]


def confluent_round_trip(bootstraps: list[str], topic: str, partitions: int) -> dict[int, int]:
    """Create `topic` with the admin API, produce through each broker in turn (idempotent: InitProducerId
    needs a producer-id block from the active controller), read everything back through each broker.
    Returns each partition's leader as Metadata shows it."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CkTopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstraps[0]})  # kept: the futures die with their client
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    wait_known_everywhere(bootstraps, topic, partitions)
    leaders: dict[int, int] = {}
    for bootstrap in bootstraps:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
        check_metadata_brokers(metadata.brokers, [1, 2, 3])
        leaders = {p: info.leader for p, info in metadata.topics[topic].partitions.items()}
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for p in range(partitions):
            for i in range(RECORDS):
                producer.produce(topic, value=record_value(topic, bootstrap, p, i), partition=p)
        assert producer.flush(30) == 0
    expected = expected_values(topic, bootstraps, partitions)
    total = sum(map(len, expected.values()))
    for bootstrap in bootstraps:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False}
        )
        try:
            consumer.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
            got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < total and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                got[message.partition()].append(message.value())
            assert got == expected, f"read through {bootstrap}"
        finally:
            consumer.close()
    return leaders


def kafka_python_round_trip(bootstraps: list[str], topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstraps[0], request_timeout_ms=30000)
    try:
        admin.create_topics([KpNewTopic(topic, partitions, 1)], timeout_ms=30000)
    finally:
        admin.close()
    wait_known_everywhere(bootstraps, topic, partitions)
    for bootstrap in bootstraps:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            # DescribeCluster (kafka-python's describe_cluster); Metadata's brokers are checked below
            check_metadata_brokers([b["broker_id"] for b in admin.describe_cluster()["brokers"]], [1, 2, 3])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, enable_idempotence=False)
        futures = [
            producer.send(topic, value=record_value(topic, bootstrap, p, i), partition=p)
            for p in range(partitions)
            for i in range(RECORDS)
        ]
        producer.flush(30)
        for future in futures:
            future.get(10)
        producer.close(5)
    expected = expected_values(topic, bootstraps, partitions)
    total = sum(map(len, expected.values()))
    leaders: dict[int, int] = {}
    for bootstrap in bootstraps:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
        )
        try:
            tps = [KpTopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < total and time.monotonic() < deadline:
                for tp, messages in consumer.poll(timeout_ms=500).items():
                    got[tp.partition].extend(m.value for m in messages)
            assert got == expected, f"read through {bootstrap}"
            check_metadata_brokers([b.node_id for b in consumer._client.cluster.brokers()], [1, 2, 3])
            leaders = {p: consumer._client.cluster.leader_for_partition(tp) for p, tp in enumerate(tps)}
        finally:
            consumer.close()
    return leaders


def aiokafka_round_trip(bootstraps: list[str], topic: str, partitions: int) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    async def run() -> dict[int, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstraps[0], request_timeout_ms=30000)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic, partitions, 1)], timeout_ms=30000)
        finally:
            await admin.close()
        await asyncio.to_thread(wait_known_everywhere, bootstraps, topic, partitions)
        for bootstrap in bootstraps:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                described = await admin.describe_cluster()
                check_metadata_brokers([b["node_id"] for b in described["brokers"]], [1, 2, 3])
            finally:
                await admin.close()
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
            await producer.start()
            try:
                for p in range(partitions):
                    for i in range(RECORDS):
                        await producer.send(topic, value=record_value(topic, bootstrap, p, i), partition=p)
                await producer.flush()
            finally:
                await producer.stop()
        expected = expected_values(topic, bootstraps, partitions)
        total = sum(map(len, expected.values()))
        leaders: dict[int, int] = {}
        for bootstrap in bootstraps:
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
            await consumer.start()
            try:
                tps = [AioTopicPartition(topic, p) for p in range(partitions)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
                deadline = time.monotonic() + 30
                while sum(map(len, got.values())) < total and time.monotonic() < deadline:
                    for tp, messages in (await consumer.getmany(*tps, timeout_ms=500)).items():
                        got[tp.partition].extend(m.value for m in messages)
                assert got == expected, f"read through {bootstrap}"
                leaders = {p: consumer._client.cluster.leader_for_partition(tp) for p, tp in enumerate(tps)}
            finally:
                await consumer.stop()
        return leaders

    return asyncio.run(run())


def kcat_round_trip(kcat: str, bootstraps: list[str], topic: str, partitions: int) -> dict[int, int]:
    """kcat has no admin API: the first produce auto-creates the topic (num.partitions of the cluster)."""
    for bootstrap in bootstraps:
        listed = subprocess.run(
            [kcat, "-L", "-J", "-b", bootstrap], capture_output=True, text=True, timeout=30
        )
        assert listed.returncode == 0, listed.stderr
        check_metadata_brokers([b["id"] for b in json.loads(listed.stdout)["brokers"]], [1, 2, 3])
        for p in range(partitions):
            lines = "".join(record_value(topic, bootstrap, p, i).decode() + "\n" for i in range(RECORDS))
            produced = subprocess.run(
                [kcat, "-P", "-b", bootstrap, "-t", topic, "-p", str(p)],
                input=lines, capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert produced.returncode == 0, produced.stderr
    expected = expected_values(topic, bootstraps, partitions)
    leaders: dict[int, int] = {}
    for bootstrap in bootstraps:
        for p in range(partitions):
            consumed = subprocess.run(
                [kcat, "-C", "-b", bootstrap, "-t", topic, "-p", str(p), "-o", "beginning", "-e", "-f", "%s\n"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert consumed.returncode == 0, consumed.stderr
            assert [line.encode() for line in consumed.stdout.splitlines()] == expected[p], bootstrap
        listed = subprocess.run(
            [kcat, "-L", "-J", "-b", bootstrap, "-t", topic], capture_output=True, text=True, timeout=30
        )
        [described] = json.loads(listed.stdout)["topics"]
        leaders = {p["partition"]: p["leader"] for p in described["partitions"]}
    return leaders


def auto_create_answers(bootstrap: str, names: Sequence[str]) -> list[tuple[str, str, int]]:
    """(topic, error, partition count) of one Metadata request that may auto-create `names`."""
    from kcli.client import KafkaClient
    from kcli.protocol.messages import build, nested_type

    async def ask() -> list[tuple[str, str, int]]:
        async with await KafkaClient.connect(bootstrap) as client:
            cls = client.request_type(3)
            topic_cls = nested_type(cls, "MetadataRequestTopic")
            request = build(
                cls,
                topics=tuple(build(topic_cls, name=name, topic_id=None) for name in names),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            response = await client.send(request)
            return [(t.name, t.error_code.name, len(t.partitions)) for t in response.topics]

    return asyncio.run(ask())


def test_cluster_start_serves_every_client_through_every_broker(
    tmp_path: Path, cluster_runner: Callable[..., ClusterRunner]
) -> None:
    kcat = shutil.which("kcat")
    if kcat is None and os.environ.get("CI") == "true":
        pytest.fail("kcat is not on PATH (apt-get install -y kcat)")
    base = free_port_range(6)
    runner = cluster_runner(3, base, [*QUORUM_TIMEOUTS, "num.partitions=3"])
    bootstrap_line = wait_for(
        "kcli cluster start to print the bootstrap line",
        lambda: (
            runner.process.poll() is None
            and next((line for line in runner.stdout().splitlines() if line.startswith("bootstrap: ")), None)
        ),
        READY_TIMEOUT_S,
    )
    runner.children = children_of(runner.process.pid)
    bootstraps = [f"127.0.0.1:{base + 2 * k}" for k in range(3)]
    assert bootstrap_line == "bootstrap: " + ",".join(bootstraps)
    assert len(runner.children) == 3
    for k in (1, 2, 3):
        node_dir = runner.data_dir / f"node-{k}"
        assert (
            f"listeners=PLAINTEXT://127.0.0.1:{base + 2 * (k - 1)},CONTROLLER://127.0.0.1:{base + 2 * (k - 1) + 1}"
            in (node_dir / "server.properties").read_text()
        )
        assert "kcli broker: listening on" in (node_dir / "broker.log").read_text()
        assert (node_dir / "data" / "meta.properties").exists()

    # The quorum: one leader, two followers that catch up, three unfenced brokers.
    # A broker answers DescribeCluster from the metadata it has applied, a moment behind the controller.
    status = wait_for(
        "three unfenced brokers and every voter caught up",
        lambda: (
            (s := try_status(bootstraps[0])) is not None
            and s.caught_up
            and s.fenced == {1: False, 2: False, 3: False}
            and s
        ),
        30,
        interval=0.3,
    )
    assert sorted(status.voters) == [1, 2, 3] and status.leader_id in status.voters
    assert status.high_watermark > 0

    # The text form, once it shows every voter at lag 0: the controller keeps writing (the internal
    # topics' ISR changes, NoOps), so a follower may be one batch behind at any instant.
    def text_caught_up() -> subprocess.CompletedProcess[str] | None:
        text = kcli("cluster", "status", "-b", bootstraps[1])
        assert text.returncode == 0, text.stderr
        lags = [
            line.split()[2]
            for line in text.stdout.splitlines()
            if line.split()[-1:] in (["Leader"], ["Follower"])
        ]
        return text if lags and all(lag == "0" for lag in lags) else None

    text = wait_for("kcli cluster status with every voter at lag 0", text_caught_up, 30, interval=0.3)
    rows = [line.split() for line in text.stdout.splitlines()]
    assert re.search(r"^LeaderId: +[123]$", text.stdout, re.MULTILINE), text.stdout
    assert sorted(row[0] for row in rows if row[-1:] == ["unfenced"]) == ["1", "2", "3"]
    roles = {row[0]: row[-1] for row in rows if row[-1:] in (["Leader"], ["Follower"])}
    assert sorted(roles.values()) == ["Follower", "Follower", "Leader"]

    # Auto-creation through a broker whose controller is not the active one: the topic is created by
    # the active controller and reaches this broker's metadata a moment later; meanwhile the answer is
    # LEADER_NOT_AVAILABLE (retriable), never "no error" with no partitions (which librdkafka takes for
    # a topic that lost its partitions, failing what it had queued for them).
    follower = bootstraps[min(v for v in status.voters if v != status.leader_id) - 1]
    for name, error, partitions in auto_create_answers(follower, [f"auto-{i}" for i in range(5)]):
        assert (error, partitions) in (("none", 3), ("leader_not_available", 0)), (name, error, partitions)

    all_leaders = {}
    all_leaders["confluent"] = confluent_round_trip(bootstraps, "ck", 3)
    all_leaders["kafka-python"] = kafka_python_round_trip(bootstraps, "kp", 3)
    all_leaders["aiokafka"] = aiokafka_round_trip(bootstraps, "aio", 3)
    if kcat is not None:
        all_leaders["kcat"] = kcat_round_trip(kcat, bootstraps, "kcat", 3)
    for client, leaders in all_leaders.items():
        # Three single-replica partitions land on the three brokers: each broker served a leader.
        assert sorted(leaders.values()) == [1, 2, 3], (client, leaders)

    # Ctrl-C (SIGTERM here) stops every node with a controlled shutdown, and the runner exits 0. The
    # nodes stop together: the fences reach a majority while one is left, and the last node, whose
    # fence no majority can record any more, sees its peers fenced and goes (it once waited out the
    # 5 s timeout); a leader that leaves first stays until its successor leads, as Kafka's does.
    runner.process.send_signal(signal.SIGTERM)
    assert runner.process.wait(STOP_TIMEOUT_S + 30) == 0, runner.stderr()
    assert not [pid for pid in runner.children if still_ours(pid, runner.data_dir)], (
        "a node outlived the runner"
    )
    assert "stopping the nodes (controlled shutdown)" in runner.stderr()
    endings = {
        k: shutdown_ending((runner.data_dir / f"node-{k}" / "broker.log").read_text()) for k in (1, 2, 3)
    }
    assert list(endings.values()).count("complete") >= 2, endings
    assert all(ending in ("complete", "given up") for ending in endings.values()), endings
    if kcat is None:
        pytest.skip("kcat is not on PATH (apt-get install -y kcat): the other three clients passed")


# --- 5. bad input: one sentence, a non-zero exit, no data touched -----------------------------------------

DETECTION_TIMEOUT_S = 8.0
"""How long a misconfigured node gets to notice, from its first line of output (past the interpreter's
start-up and imports, which a loaded machine stretches): a few election and fetch rounds."""


def tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under `root`: (size, mtime, bytes), the nodes' broker.log (output, not data) and the
    empty `.lock` files a node takes its dirs' locks on (as Kafka's LogManager does, before it binds)
    left out."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "broker.log" and not (p.name == ".lock" and p.stat().st_size == 0)
    }


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("kcli:")]


@dataclass
class Outcome:
    returncode: int | None  # None: still running when given up on (then killed)
    output: str


def run_node(
    config: Path, log: Path, timeout: float = DETECTION_TIMEOUT_S, overrides: Sequence[str] = ()
) -> Outcome:
    """`kcli broker start --config` until it exits or `timeout` passes after its first line of output
    (then it is killed by PID)."""
    args = ["broker", "start", "--config", str(config)]
    for item in overrides:
        args += ["--override", item]
    with open(log, "wb") as out:
        process = forkserver.popen(
            args, stdout=out, stderr=subprocess.STDOUT, cwd=os.getcwd(), env=kcli_env()
        )
    returncode: int | None = None
    try:
        wait_for(
            "the node's first line of output",
            lambda: log.stat().st_size > 0 or process.poll() is not None,
            START_TIMEOUT,
            0.02,
        )
        returncode = process.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return Outcome(returncode, log.read_text(errors="replace"))


def assert_refused(outcome: Outcome, sentence: str) -> None:
    """Exit status 2 and exactly one `kcli:` line, `sentence`."""
    tail = "\n".join(outcome.output.splitlines()[-8:])
    assert outcome.returncode is not None, (
        f"still running {DETECTION_TIMEOUT_S:g} s after its first line:\n{tail}"
    )
    assert outcome.returncode == 2, tail
    assert error_lines(outcome.output) == [sentence], tail
    assert "Traceback" not in outcome.output


@pytest.fixture(scope="module")
def quorum_of_two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKraftCluster]:
    """A formatted 3-node layout with nodes 1 and 2 running (a majority) and node 3's slot free."""
    cluster = LocalKraftCluster(tmp_path_factory.mktemp("quorum-of-two"), 3)
    try:
        for node_id in (1, 2):
            cluster[node_id].start()
        for node_id in (1, 2):
            cluster[node_id].wait_ready()
        yield cluster
    finally:
        cluster.kill_all()


def edited(source: Path, target: Path, replacements: dict[str, str]) -> Path:
    """A copy of a server.properties with keys replaced."""
    lines = []
    for line in source.read_text().splitlines():
        key = line.partition("=")[0]
        lines.append(f"{key}={replacements.pop(key)}" if key in replacements else line)
    lines += [f"{key}={value}" for key, value in replacements.items()]
    target.write_text("\n".join(lines) + "\n")
    return target


def test_a_log_dir_of_another_cluster_is_refused(tmp_path: Path) -> None:
    ours = LocalKraftCluster(tmp_path / "ours", 3)
    theirs = plan(tmp_path / "theirs", 3, free_port_range(6), [])
    our_dir, their_dir = ours[1].node.directory / "data", theirs.nodes[0].directory / "data"
    before = (tree(tmp_path / "ours"), tree(tmp_path / "theirs"))
    outcome = run_node(
        ours[1].node.properties, tmp_path / "out.log", overrides=[f"log.dirs={our_dir},{their_dir}"]
    )
    assert_refused(
        outcome,
        f"kcli: Invalid cluster.id in: {their_dir / 'meta.properties'}. "
        f"Expected {ours.layout.cluster_id}, but read {theirs.cluster_id}.",
    )
    assert (tree(tmp_path / "ours"), tree(tmp_path / "theirs")) == before


@pytest.mark.timeout(60)
def test_a_node_with_another_clusters_data_is_refused(
    tmp_path: Path, quorum_of_two: LocalKraftCluster
) -> None:
    theirs = plan(tmp_path / "theirs", 3, free_port_range(6), [])
    their_dir = theirs.nodes[2].directory / "data"
    config = edited(
        quorum_of_two[3].node.properties, tmp_path / "node-3.properties", {"log.dirs": str(their_dir)}
    )
    before = tree(tmp_path / "theirs")
    outcome = run_node(config, tmp_path / "out.log")
    assert outcome.returncode == 2 and "cluster" in " ".join(error_lines(outcome.output)), (
        f"exit {outcome.returncode}; last lines:\n" + "\n".join(outcome.output.splitlines()[-5:])
    )
    assert tree(tmp_path / "theirs") == before


def swapped_voters(cluster: LocalKraftCluster) -> str:
    """The voters with nodes 1's and 2's controller addresses exchanged."""
    c1, c2, c3 = (cluster[k].node.controller_port for k in (1, 2, 3))
    return f"1@127.0.0.1:{c2},2@127.0.0.1:{c1},3@127.0.0.1:{c3}"


def extra_voter(cluster: LocalKraftCluster) -> str:
    return cluster[3].node.properties.read_text().split("controller.quorum.voters=")[1].split()[0] + (
        f",4@127.0.0.1:{free_port_range(1)}"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "voters",
    [
        pytest.param(
            swapped_voters,
            id="addresses-swapped",
        ),
        pytest.param(
            extra_voter,
            id="a-fourth-voter",
        ),
    ],
)
def test_a_voter_list_that_disagrees_is_refused(
    tmp_path: Path, quorum_of_two: LocalKraftCluster, voters: Callable[[LocalKraftCluster], str]
) -> None:
    config = edited(
        quorum_of_two[3].node.properties,
        tmp_path / "node-3.properties",
        {"controller.quorum.voters": voters(quorum_of_two)},
    )
    outcome = run_node(config, tmp_path / "out.log")
    assert outcome.returncode == 2 and any(
        "controller.quorum.voters" in line for line in error_lines(outcome.output)
    ), (
        f"exit {outcome.returncode} (None: still running {DETECTION_TIMEOUT_S:g} s after its first line); last lines:\n"
        + "\n".join(outcome.output.splitlines()[-5:])
    )


def test_a_port_in_use_is_refused_before_anything_is_touched(tmp_path: Path) -> None:
    cluster = LocalKraftCluster(tmp_path / "cluster", 3)
    node = cluster[2].node
    before = tree(tmp_path / "cluster")
    for port in (node.port, node.controller_port):
        with socket.socket() as taken:
            # as a server binds (and as free_port_range probed): an earlier test's connections to this
            # port may still be in TIME_WAIT, which only a plain bind refuses; a listener still holds it
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", port))
            taken.listen()
            outcome = run_node(node.properties, tmp_path / f"node-{port}.log")
            assert_refused(outcome, f"kcli: cannot listen on 127.0.0.1:{port}: address already in use.")
            # kcli cluster start on the same (formatted) layout: no node is started, so none writes.
            started = kcli("cluster", "start", "--data-dir", str(tmp_path / "cluster"), timeout=60)
            assert started.returncode == 2, started.stderr
            assert error_lines(started.stderr) == [
                f"kcli: node 2 cannot listen on 127.0.0.1:{port}: address already in use; no node was started."
            ]
            assert "bootstrap:" not in started.stdout
    assert tree(tmp_path / "cluster") == before


def test_the_same_id_twice_in_the_voter_list_is_refused(tmp_path: Path) -> None:
    cluster = LocalKraftCluster(tmp_path / "cluster", 3)
    c1, c2, c3 = (cluster[k].node.controller_port for k in (1, 2, 3))
    before = tree(tmp_path / "cluster")
    outcome = run_node(
        cluster[1].node.properties,
        tmp_path / "out.log",
        overrides=[f"controller.quorum.voters=1@127.0.0.1:{c1},2@127.0.0.1:{c2},2@127.0.0.1:{c3}"],
    )
    assert outcome.returncode == 2 and any(
        "controller.quorum.voters" in line for line in error_lines(outcome.output)
    ), (
        f"exit {outcome.returncode} (None: still running {DETECTION_TIMEOUT_S:g} s after its first line); last lines:\n"
        + "\n".join(outcome.output.splitlines()[-5:])
    )
    assert tree(tmp_path / "cluster") == before


def test_a_node_id_that_is_not_the_dirs_is_refused(tmp_path: Path) -> None:
    """Node 3's dirs started as node 2 (a copy-pasted config): the stored node.id says no."""
    cluster = LocalKraftCluster(tmp_path / "cluster", 3)
    data = cluster[3].node.directory / "data"
    before = tree(tmp_path / "cluster")
    outcome = run_node(cluster[3].node.properties, tmp_path / "out.log", overrides=["node.id=2"])
    assert_refused(
        outcome,
        f"kcli: Stored node id 3 doesn't match the configured node.id 2 in {data / 'meta.properties'}.",
    )
    assert tree(tmp_path / "cluster") == before


def directory_id(log_dir: Path) -> str:
    from kcli.storage import load_meta_properties

    meta = load_meta_properties([str(log_dir)])[str(log_dir)]
    assert meta.directory_id
    return meta.directory_id


def quorum_status(bootstrap: str) -> Any:
    """`ops.quorum.ClusterStatus` by DescribeQuorum through any of `bootstrap`; None without an answer."""
    from kcli.cluster import Cluster
    from kcli.errors import KcliError
    from ops.quorum import describe_cluster_status

    async def ask() -> Any:
        async with await Cluster.connect(bootstrap, request_timeout=3.0) as cluster:
            return await describe_cluster_status(cluster)

    try:
        return asyncio.run(ask())
    except (KcliError, OSError, TimeoutError):
        return None


@pytest.mark.timeout(60)
def test_a_second_node_with_a_taken_id_is_refused(tmp_path: Path, quorum_of_two: LocalKraftCluster) -> None:
    """A second process with node.id 2 (its own formatted dir, so its own directory.id; its own ports; the
    cluster's id and voters) next to the live node 2. Whichever node leads tells the two apart by their
    directory ids (not by addresses: a node may be reached through a proxy): node 1 refuses its pre-vote,
    or node 2 its Fetch as node 2. It stops with one sentence naming both directory ids, having written
    nothing, and the quorum keeps its leader, node 2 fetching (or leading) as before."""
    from kcli.config import BrokerConfig
    from kcli.storage import format_storage

    base = free_port_range(2)
    data = tmp_path / "impostor-data"
    config = edited(
        quorum_of_two[2].node.properties,
        tmp_path / "impostor.properties",
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{base},CONTROLLER://127.0.0.1:{base + 1}",
            "log.dirs": str(data),
        },
    )
    format_storage(BrokerConfig.load(config_file=config), quorum_of_two.layout.cluster_id, now_ms=0)
    real, impostor = directory_id(quorum_of_two[2].node.directory / "data"), directory_id(data)
    before = tree(data)
    outcome = run_node(config, tmp_path / "out.log")
    stopped_ms = time.time() * 1000
    tail = "\n".join(outcome.output.splitlines()[-5:])
    assert outcome.returncode == 2, (
        f"exit {outcome.returncode} (None: still running {DETECTION_TIMEOUT_S:g} s after its first line):\n{tail}"
    )
    [sentence] = error_lines(outcome.output)
    assert sentence.startswith("kcli: node.id 2 is taken: ") and real in sentence and impostor in sentence, (
        tail
    )
    assert "Traceback" not in outcome.output
    assert tree(data) == before  # no quorum-state, no metadata log

    def fetching() -> Any:
        status = quorum_status(f"{quorum_of_two[1].bootstrap},{quorum_of_two[2].bootstrap}")
        if status is None or status.leader_id not in (1, 2):
            return None
        fetched = {r.node_id: r.last_fetch_ms for r in status.replicas if r.is_voter}
        follower = 3 - status.leader_id
        return status if fetched.get(follower, -1) > stopped_ms else None

    wait_for("a leader, and its follower fetching after the second node 2 stopped", fetching, 20)


@pytest.mark.timeout(60)
def test_a_node_refused_after_it_joined_stops_and_its_cluster_runner_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fatal fault after start-up ends the process (Kafka's ProcessTerminatingFaultHandler), it does
    not leave a zombie serving stale metadata. Controller 1 and broker 2 run under `LocalCluster` (what
    `kcli cluster start --controllers 1 --brokers 1` runs). Broker 2 is paused (SIGSTOP) past the fetch
    and session timeouts, a second broker 2 (its own dir and ports) joins meanwhile, and then broker 2
    goes on (SIGCONT): the leader refuses its Fetch, the id being live in another directory. Broker 2
    shuts down and `kcli broker start` exits 2 with one sentence; controller 1 and the second broker 2
    go on; the runner names the node and its sentence, and stops controller 1."""
    from kcli.config import BrokerConfig
    from kcli.storage import format_storage
    from ops.local_cluster import LocalCluster

    for key, value in kcli_env().items():  # the runner's nodes inherit this process's environment
        monkeypatch.setenv(key, value)
    fetch_timeout_s = 1.0
    overrides = [
        f"controller.quorum.fetch.timeout.ms={int(fetch_timeout_s * 1000)}",
        "broker.session.timeout.ms=1000",
        "broker.heartbeat.interval.ms=250",
    ]
    layout = plan(tmp_path / "cluster", 1, free_port_range(4), overrides, controllers=1)
    runner = LocalCluster(layout)
    node_2 = layout.nodes[1]
    base = free_port_range(1)
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second = edited(
        node_2.properties,
        second_dir / "server.properties",
        {"listeners": f"PLAINTEXT://127.0.0.1:{base}", "log.dirs": str(second_dir / "data")},
    )
    format_storage(BrokerConfig.load(config_file=second), layout.cluster_id, now_ms=0)
    first_id, second_id = directory_id(node_2.directory / "data"), directory_id(second_dir / "data")
    second_node = NodeProcess(LocalNode(2, base, None, second_dir))
    try:
        runner.start()
        first = runner.processes[2]
        os.kill(first.pid, signal.SIGSTOP)
        time.sleep(fetch_timeout_s + 0.3)  # the leader's note of its directory id, and its session, expire
        second_node.start()
        second_node.wait_ready(30)
        os.kill(first.pid, signal.SIGCONT)
        try:
            first.wait(20)
        except subprocess.TimeoutExpired:
            pytest.fail(
                "broker 2 still runs 20 s after the quorum refused it:\n" + _tail_text(node_2.log_file)
            )
        output = node_2.log_file.read_text(errors="replace")
        assert first.returncode == 2, _tail_text(node_2.log_file)
        [sentence] = error_lines(output)
        assert sentence.startswith("kcli: node.id 2 is taken: node 1 has a live node 2 with directory.id "), (
            sentence
        )
        assert second_id in sentence and first_id in sentence, sentence
        assert "Traceback" not in output
        assert "controlled shutdown" not in output.split("raft: stopping")[1]  # none with a quorum it left
        assert (node_2.directory / "data" / "__cluster_metadata-0").is_dir()  # its logs are left intact
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", node_2.port), timeout=1).close()

        def second_fetching() -> Any:
            status = quorum_status(second_node.bootstrap)
            recent_ms = time.time() * 1000 - fetch_timeout_s * 1000
            observers = [(r.node_id, r.last_fetch_ms > recent_ms) for r in status.replicas if not r.is_voter]
            return status if observers == [(2, True)] else None

        status = wait_for("controller 1 leading, the second broker 2 fetching", second_fetching, 20)
        assert status.leader_id == 1
        assert runner.processes[1].poll() is None and second_node.running

        assert second_node.terminate() == 0  # while its controller runs: a quick controlled shutdown
        failure = runner.failure()
        assert failure is not None and str(failure) == f"node 2 stopped with exit status 2: {sentence[6:]}"
        runner.stop()
        assert runner.processes[1].returncode == 0
    finally:
        for process in runner.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
        if second_node.running:
            second_node.terminate()


def _tail_text(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- a dynamic quorum (KIP-853) ----------------------------------------------------------------------------


def _describe_quorum(address: str) -> Any:
    """DescribeQuorum v2 from the controller at `address` (the leader answers it), or None."""
    from kcli.client import KafkaClient
    from kcli.protocol.messages import nested_type

    async def ask() -> Any:
        client = await KafkaClient.connect(address, client_id="test", request_timeout=5.0)
        try:
            cls = client.request_type(55)
            topic, part = nested_type(cls, "TopicData"), nested_type(cls, "PartitionData")
            request = cls(
                topics=(topic(topic_name="__cluster_metadata", partitions=(part(partition_index=0),)),)
            )
            return await client.send(request)
        finally:
            await client.close()

    try:
        answer = asyncio.run(ask())
    except Exception:
        return None
    partition = answer.topics[0].partitions[0] if answer.topics else None
    return answer if partition is not None and partition.error_code.value == 0 else None


def test_a_dynamic_quorum_grows_by_add_controller_and_keeps_its_voters_across_kill_9(tmp_path: Path) -> None:
    """KIP-853 end to end: controller 1 formatted --standalone leads alone; controller 2, formatted
    --no-initial-controllers, finds it through controller.quorum.bootstrap.servers and fetches as an
    observer; `kcli quorum add-controller` (to the active controller, --bootstrap-controller) makes it a
    voter; DescribeQuorum v2 shows both voters with directory ids and endpoints. After kill -9 of
    node 1 and a restart, the two voters elect a leader again (node 1 reads the voter set from its log,
    not its bootstrap snapshot of one); remove-controller then takes node 2 out."""
    base = free_port_range(2)
    ports = {1: base, 2: base + 1}
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
    nodes = {}
    for node_id, port in ports.items():
        directory = tmp_path / f"c{node_id}"
        directory.mkdir()
        settings = [
            "process.roles=controller",
            f"node.id={node_id}",
            f"listeners=CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            f"controller.quorum.bootstrap.servers={bootstrap}",
            f"log.dirs={directory / 'data'}",
            *QUORUM_TIMEOUTS,
        ]
        (directory / "server.properties").write_text("\n".join(settings) + "\n")
        nodes[node_id] = NodeProcess(LocalNode(node_id, None, port, directory))
    config = {i: str(n.node.properties) for i, n in nodes.items()}
    cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"
    for node_id, flag in ((1, "--standalone"), (2, "--no-initial-controllers")):
        result = run_kcli("storage", "format", "-c", config[node_id], "-t", cluster_id, flag)
        assert result.returncode == 0, result.stderr
    try:
        for node in nodes.values():
            node.start()
        for node in nodes.values():
            node.wait_ready()
        first = f"127.0.0.1:{ports[1]}"
        observed = wait_for(
            "node 2 to fetch as an observer",
            lambda: (
                (a := _describe_quorum(first))
                and [o.replica_id for o in a.topics[0].partitions[0].observers] == [2]
                and a
            ),
            15,
        )
        assert [v.replica_id for v in observed.topics[0].partitions[0].current_voters] == [1]

        result = run_kcli(
            "quorum",
            "--bootstrap-controller",
            f"127.0.0.1:{ports[2]}",
            "--command-config",
            config[2],
            "add-controller",
        )
        assert result.returncode == 0, result.stderr
        meta = (nodes[2].node.directory / "data" / "meta.properties").read_text()
        directory_id = re.search(r"^directory.id=(\S+)$", meta, re.MULTILINE)[1]
        assert result.stdout == (
            f"Added controller 2 with directory id {directory_id} and endpoints: "
            f"CONTROLLER://127.0.0.1:{ports[2]}\n"
        )
        described = run_kcli("quorum", "--bootstrap-controller", first, "describe", "--status")
        assert described.returncode == 0, described.stderr
        voters = json.loads(re.search(r"^CurrentVoters: +(.*)$", described.stdout, re.MULTILINE)[1])
        assert [v["id"] for v in voters] == [1, 2]
        assert voters[1] == {
            "id": 2, "directoryId": directory_id, "endpoints": [f"CONTROLLER://127.0.0.1:{ports[2]}"]
        }  # fmt: skip
        assert "\nCurrentObservers:       []\n" in described.stdout
        replication = run_kcli("quorum", "--bootstrap-controller", first, "describe", "--replication")
        assert replication.returncode == 0, replication.stderr
        header, *rows = [line.split("\t") for line in replication.stdout.splitlines()]
        assert [cell.strip() for cell in header] == [
            "NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
            "Status", "",
        ]  # fmt: skip
        assert [(row[0].strip(), row[6].strip()) for row in rows] == [("1", "Leader"), ("2", "Follower")]
        assert all(row[1].strip() != "AAAAAAAAAAAAAAAAAAAAAA" and int(row[4]) > 0 for row in rows)
        answer = _describe_quorum(first)
        partition = answer.topics[0].partitions[0]
        assert [v.replica_id for v in partition.current_voters] == [1, 2]
        assert all(v.replica_directory_id.int != 0 for v in partition.current_voters)
        assert [(n.node_id, [(ln.host, ln.port) for ln in n.listeners]) for n in answer.nodes] == [
            (1, [("127.0.0.1", ports[1])]),
            (2, [("127.0.0.1", ports[2])]),
        ]

        nodes[1].kill()
        nodes[1].start()
        nodes[1].wait_ready()

        def two_voters_led() -> Any:
            for port in ports.values():
                a = _describe_quorum(f"127.0.0.1:{port}")
                if a is not None and a.topics[0].partitions[0].high_watermark > 0:
                    return a
            return None

        again = wait_for("a leader of the two voters after kill -9", two_voters_led, 20)
        assert [v.replica_id for v in again.topics[0].partitions[0].current_voters] == [1, 2]

        result = run_kcli(
            "quorum", "--bootstrap-controller", first, "remove-controller", "-i", "2", "-d", directory_id
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"Removed  KRaft controller 2 with directory id {directory_id}\n"
        # Node 2 may have led (node 1 restarted resigned, and grants pre-votes as Kafka's ResignedState
        # does): out of the voters, it resigns, and node 1 leads alone.
        wait_for(
            "node 1 to lead the one voter left",
            lambda: (a := _describe_quorum(first)) is not None and a.topics[0].partitions[0].leader_id == 1,
            20,
        )
        result = run_kcli(
            "quorum", "--bootstrap-controller", first, "remove-controller", "-i", "2", "-d", directory_id
        )
        assert result.returncode == 2 and "VOTER_NOT_FOUND" in result.stderr
    finally:
        for node in nodes.values():
            if node.running:
                node.kill()
