"""`kcli reassign` against a real 3-node kcli cluster, checked with confluent-kafka. The executes under
load, held by SIGSTOP, cut by Ctrl-C and skipping a down broker run as real `python -m kcli` processes;
the other invocations (generate, verify, list, cancel, refusals) run kcli's entry point in this process.

One cluster for the module (the tests use their own topics):
1. A decommission plan (generate --remove-broker) executed under an idempotent acks=all producer, in
   batches of one move per broker, with a throttle: the throttle configs are set while it runs and
   gone when it returns; nothing produced is lost or duplicated; verify then prints Kafka's lines; the
   rollback file written before anything was sent puts the replicas back.
2. cancel --all mid-way, without the file: a move held by a SIGSTOPped receiving broker is reverted, the
   throttle is not touched on the broker that is down and is cleared there by verify once it is back.
3. Ctrl-C during execute: the running move is cancelled, the waiting one never sent, throttles cleared.
4. generate as Kafka's tool, and the refusals before anything is sent.
5. (a broker of its own with two log dirs) a replica moved between log dirs, followed by verify.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from conftest import KCLI, kcli_env
from kraft_cluster import SESSION, LocalKraftCluster, cluster_status, create_topic, wait_for

from kcli.client import ClientError

pytestmark = pytest.mark.timeout(240)

THROTTLES = {
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKraftCluster]:
    made = LocalKraftCluster(
        tmp_path_factory.mktemp("reassign") / "cluster", 3, (*SESSION, "replica.fetch.backoff.ms=200")
    )
    try:
        made.start()
        made.status(what="a controller leader")
        yield made
    finally:
        for node in made.nodes.values():
            if node.process is not None and node.running:
                os.kill(node.process.pid, signal.SIGCONT)
        made.kill_all()


def reassign(
    cluster: LocalKraftCluster, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`kcli reassign ARGS -b <live brokers>` through the entry point in this process (an exception
    main does not turn into a sentence fails the test); the executes under load, held by SIGSTOP,
    cut by Ctrl-C or skipping a down broker stay real processes."""
    return run_kcli("reassign", *args, "-b", cluster.live_bootstrap(), cwd=cwd)


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def create(
    cluster_or_bootstrap: LocalKraftCluster | str, topic: str, assignment: list[list[int]], **configs: str
) -> None:
    """CreateTopics, then wait until every broker's metadata has the topic (a command may ask any of them)."""
    if isinstance(cluster_or_bootstrap, LocalKraftCluster):
        addresses = [n.node.bootstrap for n in cluster_or_bootstrap.nodes.values() if n.running]
    else:
        addresses = [cluster_or_bootstrap]
    create_topic(addresses[0], topic, assignment, **configs)

    async def everywhere() -> bool:
        from kcli.cluster import Cluster

        for address in addresses:
            async with await Cluster.connect(address) as cluster:
                if len((await cluster.metadata([topic])).partitions(topic)) != len(assignment):
                    return False
        return True

    wait_for(f"topic {topic} on every broker", lambda: asyncio.run(everywhere()), 15, 0.1)


def replicas_of(bootstrap: str, topic: str) -> dict[int, list[int]]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=20)
    return {p: list(info.replicas) for p, info in metadata.topics[topic].partitions.items()}


def live_brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20).brokers)


def throttles_set(bootstrap: str, brokers: list[int], topics: list[str]) -> dict[str, dict[str, str]]:
    """Resource -> the reassignment throttle configs set on it, for brokers and topics (DescribeConfigs
    through kcli's client: each broker answers for itself)."""
    from kcli.cluster import Cluster
    from kcli.protocol.configs import ResourceType
    from ops.configs import describe_configs

    async def ask() -> list[Any]:
        async with await Cluster.connect(bootstrap) as cluster:
            wanted = [(ResourceType.BROKER, str(b)) for b in brokers] + [
                (ResourceType.TOPIC, t) for t in topics
            ]
            return await describe_configs(cluster, wanted, include_synonyms=False)

    found: dict[str, dict[str, str]] = {}
    for described in asyncio.run(ask()):
        dynamic = {e.name: e.value for e in described.dynamic() if e.name in THROTTLES}
        if dynamic:
            found[f"{described.resource_type.label}:{described.name}"] = dynamic
    return found


def no_throttles(bootstrap: str, brokers: list[int], topics: list[str]) -> None:
    """Every broker's metadata image has the throttles gone (a broker may answer from an image a moment
    behind the controller's)."""
    wait_for("the throttles to be gone", lambda: throttles_set(bootstrap, brokers, topics) == {}, 10, 0.2)


class LoadProducer:
    """An idempotent acks=all producer writing numbered records to `topic` until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )
        self.sent = 0
        self.acked: set[int] = set()
        self.failed: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 180
        while not self.stopping.is_set() and time.monotonic() < deadline:
            for _ in range(20):
                value = self.sent
                self.sent += 1
                self.producer.produce(
                    self.topic, str(value).encode(), partition=value % 2, on_delivery=self._delivered(value)
                )
            self.producer.poll(0.02)
        self.producer.flush(60)

    def _delivered(self, value: int):
        def done(error, _message) -> None:
            if error is None:
                self.acked.add(value)
            else:
                self.failed.append(str(error))

        return done

    def __enter__(self) -> LoadProducer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(90)


def consume_all(bootstrap: str, topic: str, expected: int) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1.0):
                if message.error() is None and len(message.value()) < 20:  # not fill()'s records
                    values.append(int(message.value()))
    finally:
        consumer.close()
    return values


def fill(bootstrap: str, topic: str, partitions: int, mib: float) -> None:
    """About `mib` MiB of 10 KiB records into each partition, acknowledged by every replica."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    payload = os.urandom(5 * 1024).hex().encode()
    for i in range(int(mib * 1024 / 10) * partitions):
        producer.produce(topic, payload, partition=i % partitions)
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_decommission_under_load_throttled_then_verify_and_rollback(
    cluster: LocalKraftCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap
    create(cluster, "orders", [[1, 2], [2, 1]], **{"min.insync.replicas": "1"})
    fill(bootstrap, "orders", 2, 0.5)
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"orders"}],"version":1}')

    generated = reassign(cluster, "generate", "--topics-to-move-json-file", str(topics), "--remove-broker", "1",
                         "-o", "json")  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    (plan_record,) = events(generated.stdout)
    proposed = {p["partition"]: p["replicas"] for p in plan_record["proposed"]["partitions"]}
    assert proposed == {0: [3, 2], 1: [2, 3]}  # broker 1's replicas go to 3, the only broker without one
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_record["proposed"]))
    rollback = tmp_path / "rollback.json"

    seen_throttles: dict[str, dict[str, str]] = {}
    with LoadProducer(bootstrap, "orders") as load:
        wait_for("the producer to get going", lambda: len(load.acked) > 200, 30)
        process = subprocess.Popen(
            [*KCLI, "reassign", "execute", "--reassignment-json-file", str(plan), "--throttle", "300000",
             "--max-moves-per-broker", "1", "--rollback-file", str(rollback), "--interval", "0.3", "-o", "json",
             "-b", bootstrap],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kcli_env(),
        )  # fmt: skip
        try:
            assert process.stdout is not None
            lines = []
            for line in process.stdout:  # ends when the command exits
                lines.append(json.loads(line))
                if lines[-1]["event"] == "throttle_set":  # hold the command while the configs are read
                    os.kill(process.pid, signal.SIGSTOP)
                    try:  # each broker answers from its own metadata image, which may be a moment behind
                        seen_throttles = wait_for(
                            "the throttle configs on every broker",
                            lambda: len(t := throttles_set(bootstrap, [1, 2, 3], ["orders"])) == 4 and t,
                            10,
                            0.1,
                        )
                    finally:
                        os.kill(process.pid, signal.SIGCONT)
            assert process.wait(120) == 0, process.stderr.read() if process.stderr else ""
        finally:
            if process.poll() is None:
                process.kill()
        wait_for("more records after the move", lambda: len(load.acked) > load.sent // 2 + 500, 30)
    assert not load.failed, load.failed[:3]

    kinds = [e["event"] for e in lines]
    assert kinds[:4] == ["current", "rollback_file", "throttle_set", "started"]
    started = [e["partitions"] for e in lines if e["event"] == "started"]
    assert sorted(started) == [["orders-0"], ["orders-1"]]  # one move at a time: broker 3 takes both
    assert (
        kinds.index("started")
        < kinds.index("progress")
        < kinds.index("status")
        < kinds.index("throttles_cleared")
    )
    (status,) = [e for e in lines if e["event"] == "status"]
    assert all(p["completed"] for p in status["partitions"])
    progress = [e for e in lines if e["event"] == "progress"]
    assert progress[-1]["bytes_remaining"] == 0 and progress[-1]["partitions_done"] == 2
    assert max(e["bytes_total"] for e in progress) >= 1024 * 1024  # 2 x 0.5 MiB filled, and the load
    # the throttle as Kafka's tool sets it, while it ran; nothing of it once execute returned
    assert seen_throttles["topic:orders"] == {
        "leader.replication.throttled.replicas": "0:1,0:2,1:1,1:2",
        "follower.replication.throttled.replicas": "0:3,1:3",
    }
    for broker in (1, 2, 3):
        assert seen_throttles[f"broker:{broker}"] == {
            "leader.replication.throttled.rate": "300000",
            "follower.replication.throttled.rate": "300000",
        }
    no_throttles(bootstrap, [1, 2, 3], ["orders"])
    assert replicas_of(bootstrap, "orders") == {0: [3, 2], 1: [2, 3]}

    produced = consume_all(bootstrap, "orders", len(load.acked))
    assert len(produced) == len(set(produced)), "a record was duplicated"
    assert load.acked <= set(produced), f"{len(load.acked - set(produced))} acknowledged records lost"

    verify = reassign(cluster, "verify", "--reassignment-json-file", str(plan))
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition orders-0 is completed.",
        "Reassignment of partition orders-1 is completed.",
        "",  # no replica moves between log dirs: Kafka prints their empty list as a blank line
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic orders",
    ]

    # the rollback file is the assignment before the move, as a reassignment file
    assert json.loads(rollback.read_text()) == {
        "version": 1,
        "partitions": [
            {"topic": "orders", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
            {"topic": "orders", "partition": 1, "replicas": [2, 1], "log_dirs": ["any", "any"]},
        ],
    }
    back = reassign(cluster, "execute", "--reassignment-json-file", str(rollback), "--no-wait",
                    "--rollback-file", str(tmp_path / "second.json"))  # fmt: skip
    assert back.returncode == 0, back.stderr
    assert (
        back.stdout.splitlines()[-1] == "Successfully started partition reassignments for orders-0,orders-1"
    )
    wait_for("the rollback", lambda: replicas_of(bootstrap, "orders") == {0: [1, 2], 1: [2, 1]}, 60, 0.3)
    listed = wait_for(
        "no reassignment listed",
        lambda: (r := reassign(cluster, "list")).stdout == "No partition reassignments found.\n" and r,
        30,
        0.5,
    )
    assert listed.returncode == 0


def test_cancel_all_midway_reverts_and_skips_the_down_broker(
    cluster: LocalKraftCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap
    controller = cluster_status(bootstrap).leader_id
    receiver = max(b for b in (1, 2, 3) if b != controller)  # SIGSTOPped: not the active controller
    source = min(b for b in (1, 2, 3) if b != receiver)
    third = next(b for b in (1, 2, 3) if b not in (receiver, source))
    create(cluster, "held", [[source]])
    create(cluster, "away", [[receiver, source]])
    fill(bootstrap, "held", 1, 0.5)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "held", "partition": 0, "replicas": [source, receiver]}]}
        )
    )

    node = cluster[receiver]
    assert node.process is not None
    started = reassign(cluster, "execute", "--reassignment-json-file", str(plan), "--no-wait",
                       "--throttle", "100000", "--rollback-file", str(tmp_path / "rollback.json"))  # fmt: skip
    os.kill(node.process.pid, signal.SIGSTOP)  # the receiving broker copies no more: the move stays open
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.splitlines()[-3:] == [
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
            "throttle is removed.",
            "The inter-broker throttle limit was set to 100000 B/s",
            "Successfully started partition reassignment for held-0",
        ]
        listed = reassign(cluster, "list")
        assert listed.stdout.splitlines() == [
            "Current partition reassignments:",
            f"held-0: replicas: {source},{receiver}. adding: {receiver}.",
        ]
        again = reassign(cluster, "execute", "--reassignment-json-file", str(plan), "--no-wait")
        assert again.returncode != 0 and again.stderr.splitlines() == [
            "kcli: Cannot execute because there is an existing partition assignment.  Use --additional to override "
            "this and create a new partition assignment in addition to the existing one. The --additional flag can "
            "also be used to change the throttle by resubmitting the current reassignment."
        ]
        others = [b for b in (1, 2, 3) if b != receiver]
        live_bootstrap = ",".join(cluster[b].bootstrap for b in others)
        wait_for(f"broker {receiver} fenced", lambda: receiver not in live_brokers(live_bootstrap), 30, 0.3)

        cancelled = reassign(cluster, "cancel", "--all", "-o", "json")
        assert cancelled.returncode == 0, cancelled.stderr
        first, moves, cleared = events(cancelled.stdout)
        assert first == {"event": "cancelled", "partitions": ["held-0"]}
        assert moves == {"event": "log_dir_moves_cancelled", "replicas": []}
        assert cleared["event"] == "throttles_cleared"
        assert cleared["skipped_brokers"] == [receiver] and receiver not in cleared["brokers"]
        assert cleared["topics"] == ["held"]
        assert reassign(cluster, "list").stdout == "No partition reassignments found.\n"
        assert replicas_of(live_bootstrap, "held") == {0: [source]}
        no_throttles(live_bootstrap, others, ["held"])

        # moving a replica off the broker that is down: the throttle goes on the live brokers only
        away = tmp_path / "away.json"
        away.write_text(json.dumps({"version": 1, "partitions": [{"topic": "away", "partition": 0,
                                                                  "replicas": [source, third]}]}))  # fmt: skip
        moved = subprocess.run(
            [*KCLI, "reassign", "execute", "--reassignment-json-file", str(away), "--no-wait", "--throttle", "100000",
             "--rollback-file", str(tmp_path / "away-rollback.json"), "-o", "json", "-b", live_bootstrap],
            capture_output=True, text=True, timeout=60, env=kcli_env(),
        )  # fmt: skip
        assert moved.returncode == 0, moved.stderr
        (throttle,) = [e for e in events(moved.stdout) if e["event"] == "throttle_set"]
        assert throttle["skipped_brokers"] == [receiver] and throttle["brokers"] == sorted([source, third])
        assert f"kcli: broker {receiver} down" not in moved.stderr  # JSON output: the skip is in the event
    finally:
        os.kill(node.process.pid, signal.SIGCONT)
    wait_for(f"broker {receiver} back", lambda: receiver in live_brokers(bootstrap), 30, 0.3)

    # the rate set on it before it stopped is still there; verify clears it now that it is up
    def rate_on_receiver() -> str | None:
        try:
            found = throttles_set(bootstrap, [receiver], [])
        except ClientError:  # the broker answering Metadata may not list it again yet
            return None
        return found.get(f"broker:{receiver}", {}).get("follower.replication.throttled.rate")

    assert wait_for(f"broker {receiver} in every broker's metadata", rate_on_receiver, 15, 0.3) == "100000"
    verify = reassign(cluster, "verify", "--reassignment-json-file", str(plan))
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.splitlines()[:2] == [
        "Status of partition reassignment:",
        f"There is no active reassignment of partition held-0, but replica set is {source} rather than "
        f"{source},{receiver}.",
    ]
    completed = wait_for(
        "away-0 moved",
        lambda: (
            "Reassignment of partition away-0 is completed."
            in (r := reassign(cluster, "verify", "--reassignment-json-file", str(away))).stdout
            and r
        ),
        30,
        0.5,
    )
    assert "Clearing topic-level throttles on topic away" in completed.stdout
    no_throttles(bootstrap, [1, 2, 3], ["held", "away"])


def test_ctrl_c_cancels_the_running_moves_and_clears_the_throttles(
    cluster: LocalKraftCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap
    create(cluster, "slow", [[1], [1]])
    fill(bootstrap, "slow", 2, 3)  # a follower's first fetch (up to 1 MiB) is not held back by the throttle
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "slow", "partition": p, "replicas": [2]} for p in (0, 1)]}
        )
    )
    process = subprocess.Popen(
        [*KCLI, "reassign", "execute", "--reassignment-json-file", str(plan), "--throttle", "50000",
         "--max-moves-per-broker", "1", "--rollback-file", str(tmp_path / "rollback.json"), "--interval", "0.3",
         "-o", "json", "-b", bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kcli_env(),
    )  # fmt: skip
    signals = ""
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(json.loads(line))
            if lines[-1]["event"] == "progress":
                signals = _signal_masks(process.pid)
                os.kill(process.pid, signal.SIGINT)  # Ctrl-C
                interrupted = time.monotonic()
                break
        lines += [json.loads(line) for line in process.stdout]
        status = process.wait(60)
        after = time.monotonic() - interrupted
    finally:
        if process.poll() is None:
            process.kill()
    assert process.stderr is not None
    stderr = process.stderr.read()
    # what the run said if it went on after the Ctrl-C (a string: pytest cuts the repr of other messages)
    progress = [e["elapsed_s"] for e in lines if e["event"] == "progress"]
    told = (
        [e["event"] for e in lines if e["event"] != "progress"],
        f"{len(progress)} progress to {progress[-1]} s",
    )
    assert status == 130, (
        f"exit {status} {after:.1f} s after SIGINT; {signals}; events {told}; stderr {stderr!r}"
    )
    assert "Traceback" not in stderr
    (stopped,) = [e for e in lines if e["event"] == "cancelled"]
    assert stopped["reason"] == "interrupted"
    assert [e["event"] for e in lines][-1] == "throttles_cleared"
    assert "status" not in [e["event"] for e in lines]
    # one move at a time: at the first poll one runs and the other waits (unless the first was already done)
    started = {p for e in lines if e["event"] == "started" for p in e["partitions"]}
    assert stopped["not_started"] or stopped["partitions"]
    assert set(stopped["not_started"]).isdisjoint(started) and set(stopped["partitions"]) <= started
    no_throttles(bootstrap, [1, 2, 3], ["slow"])
    finished = started - set(stopped["partitions"])  # done before the Ctrl-C
    expected = {p: [2] if f"slow-{p}" in finished else [1] for p in (0, 1)}
    wait_for("the reverted move", lambda: replicas_of(bootstrap, "slow") == expected, 30, 0.3)
    assert reassign(cluster, "list").stdout == "No partition reassignments found.\n"


def _signal_masks(pid: int) -> str:
    """The blocked, ignored and caught signal masks of `pid`, as /proc shows them."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return ", ".join(
        line.replace("\t", " ") for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
    )


def test_generate_kafkas_way_and_refusals(cluster: LocalKraftCluster, tmp_path: Path) -> None:
    """generate over --broker-list as Kafka's tool (both blocks, every partition, only listed brokers, the
    first replicas round-robin); the checks before anything is sent, each one sentence."""
    create(cluster, "gen", [[1, 2], [2, 3], [3, 1], [1, 3]])
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"gen"}],"version":1}')
    result = reassign(cluster, "generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"] == [
        {"topic": "gen", "partition": p, "replicas": r, "log_dirs": ["any", "any"]}
        for p, r in enumerate([[1, 2], [2, 3], [3, 1], [1, 3]])
    ]
    assert lines[2:4] == ["", "Proposed partition reassignment configuration"]
    proposed = [p["replicas"] for p in json.loads(lines[4])["partitions"]]
    assert len(lines) == 5 and len(proposed) == 4
    assert all(sorted(r) == [1, 2] for r in proposed)
    assert [r[0] for r in proposed] in ([1, 2, 1, 2], [2, 1, 2, 1])

    # docs/ops.html's increase-replication-factor.json (brokers 5,6,7 there are 1,2,3 here), as printed there
    create(cluster, "foo", [[1]])
    increase = tmp_path / "increase-replication-factor.json"
    increase.write_text('{"version":1,\n "partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3]}]}')
    started = reassign(cluster, "execute", "--reassignment-json-file", str(increase), "--no-wait",
                       "--rollback-file", str(tmp_path / "foo-rollback.json"))  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines() == [
        "Current partition replica assignment",
        "",
        '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1],"log_dirs":["any"]}]}',
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Successfully started partition reassignment for foo-0",
    ]
    wait_for(
        "foo-0 on three replicas",
        lambda: (
            reassign(cluster, "verify", "--reassignment-json-file", str(increase)).stdout.splitlines()[:2]
            == ["Status of partition reassignment:", "Reassignment of partition foo-0 is completed."]
        ),
        30,
        0.3,
    )
    assert replicas_of(cluster.bootstrap, "foo") == {0: [1, 2, 3]}

    def refused(*args: str) -> str:
        result = reassign(cluster, *args)
        assert result.returncode != 0 and result.stdout == "", result.stdout
        (line,) = result.stderr.splitlines()
        return line

    topics.write_text('{"topics":[{"topic":"gen"},{"topic":"quux"}],"version":1}')
    assert refused("generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,2") == (
        "kcli: Topic quux not found."
    )
    topics.write_text('{"topics":[{"topic":"gen"}]}')
    assert refused("generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1") == (
        "kcli: Replication factor: 2 larger than available brokers: 1."
    )
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"gen","partition":0,"replicas":[1,4]}]}')
    assert refused("execute", "--reassignment-json-file", str(plan)) == "kcli: Unknown broker id 4."
    plan.write_text('{"version":1,"partitions":[{"topic":"gen","partition":9,"replicas":[1,2]}]}')
    assert (
        refused("execute", "--reassignment-json-file", str(plan)) == "kcli: Unable to find partition: gen-9."
    )
    assert not list(tmp_path.glob("reassign-rollback-*.json")) and not list(
        Path.cwd().glob("reassign-rollback-*")
    )


def test_replica_moved_between_log_dirs(broker_factory, tmp_path: Path) -> None:
    """A file whose log_dirs name a dir: the move between the broker's two log dirs is started after the
    reassignment (Kafka's lines), verify follows it, and once it is done clears the dir throttle."""
    dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    broker = broker_factory(data_dir=dirs[0], overrides=[f"log.dirs={dirs[0]},{dirs[1]}", "num.partitions=1"])
    bootstrap = broker.bootstrap
    create(bootstrap, "ld", [[1]])
    fill(bootstrap, "ld", 1, 0.5)
    here = next(d for d in dirs if (d / "ld-0").is_dir())
    there = next(d for d in dirs if d != here)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": "ld", "partition": 0, "replicas": [1], "log_dirs": [str(there)]}],
            }
        )
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = run_kcli("reassign", *args, "-b", bootstrap)
        assert result.returncode == 0, result.stderr
        return result

    started = run("execute", "--reassignment-json-file", str(plan), "--no-wait",
                  "--replica-alter-log-dirs-throttle", "300000", "--rollback-file", str(tmp_path / "rollback.json"))  # fmt: skip
    assert started.stdout.splitlines()[-3:] == [
        "The replica-alter-dir throttle limit was set to 300000 B/s",
        "Successfully started partition reassignment for ld-0",
        f"Successfully started moving log directory to {there} for replica ld-0 with broker 1 ",
    ]
    assert throttles_set(bootstrap, [1], []) == {
        "broker:1": {"replica.alter.log.dirs.io.max.bytes.per.second": "300000"}
    }
    during = run("verify", "--reassignment-json-file", str(plan)).stdout.splitlines()
    assert during[:2] == ["Status of partition reassignment:", "Reassignment of partition ld-0 is completed."]
    if (
        during[2] == "Reassignment of replica ld-0-1 is still in progress."
    ):  # the copy takes ~2 s at the throttle
        assert len(during) == 3  # nothing cleared while a move runs
    done = wait_for(
        "the log dir move",
        lambda: (
            (lines := run("verify", "--reassignment-json-file", str(plan)).stdout.splitlines())[2:3]
            == ["Reassignment of replica ld-0-1 completed successfully."]
            and lines
        ),
        30,
        0.5,
    )
    assert done[3:] == [
        "Clearing broker-level throttles on broker 1",
        "Clearing topic-level throttles on topic ld",
    ]
    assert (there / "ld-0").is_dir() and not (here / "ld-0").exists()
    no_throttles(bootstrap, [1], ["ld"])

    # and back, waited for: the move starts once the partition's reassignment is done, and is followed
    plan.write_text(plan.read_text().replace(str(there), str(here)))
    back = run("execute", "--reassignment-json-file", str(plan), "--replica-alter-log-dirs-throttle", "300000",
               "--rollback-file", str(tmp_path / "rollback-2.json"), "--interval", "0.2")  # fmt: skip
    assert back.stdout.splitlines()[-8:] == [
        "The replica-alter-dir throttle limit was set to 300000 B/s",
        "Successfully started partition reassignment for ld-0",
        f"Successfully started moving log directory to {here} for replica ld-0 with broker 1 ",
        "Status of partition reassignment:",
        "Reassignment of partition ld-0 is completed.",
        "Reassignment of replica ld-0-1 completed successfully.",
        "Clearing broker-level throttles on broker 1",
        "Clearing topic-level throttles on topic ld",
    ]
    assert (here / "ld-0").is_dir() and not (there / "ld-0").exists()
