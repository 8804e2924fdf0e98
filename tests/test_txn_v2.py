"""Transaction version 2 (KIP-890 part 2) against real kcli brokers at transaction.version 2.

On the wire (kio requests): ApiVersions offers EndTxn v5 and TxnOffsetCommit v5 only once the feature
is finalized; Produce v12 adds its partition to the transaction itself; EndTxn v5 bumps the epoch at
the end of every transaction and answers with it, a retry is recognised by it, an abort from Empty
works; a produce with the epoch of an aborted transaction is fenced (the hanging-transaction defence);
a partition the coordinator keeps refusing is logged once by its leader;
__transaction_state holds v1 values with ClientTransactionVersion 2 (kcli dump-segment
--transaction-log-decoder). With stock clients: Kafka's Java transactional producer (kafka-clients
4.1.2, which uses version 2 when the broker has it; beside it a Kafka Streams exactly_once_v2 word
count) and confluent-kafka's (librdkafka 2.16 stays at version 1, which the broker serves beside), on
one node and on three nodes, with the coordinator killed in the middle of a transaction.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import kcli_env, require_apache_kafka, start_broker, stop_cleanly
from kio.schema.errors import ErrorCode
from kraft_cluster import LocalKraftCluster
from test_groups import find
from test_java_clients import (
    MAIN,
    JsonLines,
    check_word_counts,
    clients_run,
    compile_clients,
    in_parallel,
    require_javac,
    steps,
    word_counts,
)
from test_produce_fetch import produce_request
from test_storage import CLUSTER_ID, combined, kcli_process
from test_transactions import (
    FAST,
    consume_all,
    create_topic,
    describe,
    transactional_producer,
    wait_for_state,
)
from test_txn_apis import init_producer, txn_commit
from waiting import wait_for

from formats.records import RecordSpec, build_batch
from kcli.broker.txn.verification import REFUSED_FOR_LONG_S
from kcli.client import KafkaClient
from kcli.protocol.messages import build, request_type

pytestmark = pytest.mark.timeout(180)

END_TXN, TXN_OFFSET_COMMIT, API_VERSIONS = 26, 28, 18
TV2 = "transaction.version=2"


def upgrade_to_tv2(bootstrap: str) -> None:
    """`kcli features upgrade --feature transaction.version=2`, then wait until the broker offers it."""
    result = subprocess.run(
        [sys.executable, "-m", "kcli", "features", "upgrade", "-b", bootstrap, "--feature", TV2],
        capture_output=True, text=True, timeout=60, env=kcli_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    wait_for(
        "transaction.version 2 finalized",
        lambda: api_versions(bootstrap.split(",")[0])[1].get("transaction.version") == 2,
        20,
    )


def api_versions(bootstrap: str) -> tuple[dict[int, tuple[int, int]], dict[str, int]]:
    """(api key -> (min, max), finalized feature -> level) from one ApiVersions v4."""

    async def ask() -> Any:
        async with await KafkaClient.connect(bootstrap) as client:
            request = build(
                request_type(API_VERSIONS, 4), client_software_name="t", client_software_version="1"
            )
            return await client.send(request)

    response = asyncio.run(ask())
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    return versions, {f.name: f.max_version_level for f in response.finalized_features}


def txn_batch(pid: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    now = int(time.time() * 1000)
    return build_batch(
        [RecordSpec(now, b"k", v) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


async def produce(
    client: KafkaClient, version: int, tid: str, topic: str, partition: int, batch: bytes
) -> ErrorCode:
    response = await client.send(
        produce_request(version, topic, partition, batch, acks=-1, transactional_id=tid)
    )
    [[answer]] = [list(t.partition_responses) for t in response.responses]
    return answer.error_code


async def end_txn_v5(client: KafkaClient, tid: str, pid: int, epoch: int, *, commit: bool) -> Any:
    request = build(
        request_type(END_TXN, 5),
        transactional_id=tid,
        producer_id=pid,
        producer_epoch=epoch,
        committed=commit,
    )
    for _ in range(100):  # CONCURRENT_TRANSACTIONS while the previous transaction completes
        response = await client.send(request)
        if response.error_code != ErrorCode.concurrent_transactions:
            return response
        await asyncio.sleep(0.1)
    return response


def dump_transaction_log(data_dir: Path) -> list[dict[str, Any]]:
    """Every __transaction_state record, decoded by `kcli dump-segment --transaction-log-decoder`."""
    files = sorted(str(p) for p in data_dir.glob("__transaction_state-*/*.log"))
    result = subprocess.run(
        [sys.executable, "-m", "kcli", "dump-segment", "--transaction-log-decoder", "--output", "json", *files],
        capture_output=True, text=True, timeout=60, env=kcli_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


# --- on the wire -------------------------------------------------------------------------------------


def test_api_versions_offer_transaction_version_2_only_once_finalized(broker_factory) -> None:
    """A cluster formatted at 3.9 (transaction.version 0) offers EndTxn and TxnOffsetCommit v5 once
    upgraded; a new cluster has them from the start (transaction.version 2, Kafka 4.1's default)."""
    broker = broker_factory(overrides=FAST, extra_args=["--release-version", "3.9"])
    versions, finalized = api_versions(broker.bootstrap)
    assert "transaction.version" not in finalized
    assert versions[END_TXN][1] == 4 and versions[TXN_OFFSET_COMMIT][1] == 4
    upgrade_to_tv2(broker.bootstrap)
    versions, finalized = api_versions(broker.bootstrap)
    assert finalized["transaction.version"] == 2
    assert versions[END_TXN][1] == 5 and versions[TXN_OFFSET_COMMIT][1] == 5 and versions[0][1] >= 12
    fresh = broker_factory(overrides=FAST)
    versions, finalized = api_versions(fresh.bootstrap)
    assert finalized["transaction.version"] == 2
    assert versions[END_TXN][1] == 5 and versions[TXN_OFFSET_COMMIT][1] == 5


def test_epoch_bump_per_transaction_and_a_stale_epoch_is_fenced(broker_factory) -> None:
    broker = broker_factory(overrides=FAST)
    upgrade_to_tv2(broker.bootstrap)
    create_topic(broker.bootstrap, "v2", 1)
    tid = "raw-v2"

    async def run() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with await KafkaClient.connect(broker.bootstrap) as client:
            pid, epoch = await init_producer(client, tid)
            # Produce v12 with no AddPartitionsToTxn: the broker adds the partition itself.
            assert (
                await produce(client, 12, tid, "v2", 0, txn_batch(pid, epoch, 0, [b"c1", b"c2"]))
                == ErrorCode.none
            )
            assert (await describe(broker.bootstrap, tid)).transaction_state == "Ongoing"
            committed = await end_txn_v5(client, tid, pid, epoch, commit=True)
            assert committed.error_code == ErrorCode.none
            assert (committed.producer_id, committed.producer_epoch) == (pid, epoch + 1)
            # A retry of that EndTxn (the client never saw the answer) is told apart by the bumped epoch.
            retried = await end_txn_v5(client, tid, pid, epoch, commit=True)
            assert (retried.error_code, retried.producer_epoch) == (ErrorCode.none, epoch + 1)
            # The next transaction runs at the bumped epoch and is aborted.
            epoch += 1
            assert (
                await produce(client, 12, tid, "v2", 0, txn_batch(pid, epoch, 0, [b"a1"])) == ErrorCode.none
            )
            aborted = await end_txn_v5(client, tid, pid, epoch, commit=False)
            assert (aborted.error_code, aborted.producer_epoch) == (ErrorCode.none, epoch + 1)
            # A hanging-transaction attempt: the aborted transaction's epoch comes back with more data.
            seen["stale v12"] = await produce(client, 12, tid, "v2", 0, txn_batch(pid, epoch, 1, [b"h1"]))
            seen["stale v11"] = await produce(client, 11, tid, "v2", 0, txn_batch(pid, epoch, 1, [b"h2"]))
            # An abort with nothing added (the client cannot know a produce got through) still bumps.
            epoch += 1
            empty = await end_txn_v5(client, tid, pid, epoch, commit=False)
            assert (empty.error_code, empty.producer_epoch) == (ErrorCode.none, epoch + 1)
            epoch += 1
            assert (
                await produce(client, 12, tid, "v2", 0, txn_batch(pid, epoch, 0, [b"c3"])) == ErrorCode.none
            )
            last = await end_txn_v5(client, tid, pid, epoch, commit=True)
            assert (last.error_code, last.producer_epoch) == (ErrorCode.none, epoch + 1)
            seen["pid"], seen["epoch"] = pid, epoch + 1
        return seen

    seen = asyncio.run(run())
    assert seen["stale v12"] == ErrorCode.invalid_producer_epoch  # the coordinator fences it
    assert seen["stale v11"] == ErrorCode.invalid_producer_epoch, seen  # the partition's producer state
    assert consume_all(broker.bootstrap, "v2", 1, "read_committed") == [b"c1", b"c2", b"c3"]
    final = wait_for(
        "CompleteCommit",
        lambda: (
            (d := asyncio.run(describe(broker.bootstrap, tid))).transaction_state == "CompleteCommit" and d
        ),
        20,
    )
    assert (final.producer_id, final.producer_epoch) == (seen["pid"], seen["epoch"])
    values = [
        r["value"]
        for r in dump_transaction_log(broker.data_dir)
        if r.get("key", {}).get("data", {}).get("transactionalId") == tid
    ]
    assert {v["version"] for v in values} == {"1"}  # the flexible value from transaction.version 1
    ends = [
        (STATES[v["data"]["transactionStatus"]], v["data"]["producerEpoch"])
        for v in values
        if v["data"]["transactionStatus"] in (2, 3, 4, 5)
    ]
    e = seen["epoch"] - 4  # the epoch InitProducerId gave
    assert ends == [
        ("PrepareCommit", e + 1), ("CompleteCommit", e + 1),
        ("PrepareAbort", e + 2), ("CompleteAbort", e + 2),
        ("PrepareAbort", e + 3), ("CompleteAbort", e + 3),
        ("PrepareCommit", e + 4), ("CompleteCommit", e + 4),
    ]  # fmt: skip
    assert all(
        v["data"]["clientTransactionVersion"] == 2
        for v in values
        if v["data"]["transactionStatus"] in (2, 3, 4, 5)
    )


STATES = {2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit", 5: "CompleteAbort"}


# --- stock clients on one node -----------------------------------------------------------------------


def confluent_rounds(
    bootstrap: str, tid: str, topic: str, coordinator: str | None = None
) -> list[tuple[str, int, int]]:
    """confluent-kafka's transactional producer: commit, abort, commit (six records each over two
    partitions); after each, (state, producer id, epoch) as DescribeTransactions at `coordinator` (the
    id's coordinator's address, default `bootstrap`) shows them."""
    producer = transactional_producer(bootstrap, tid)
    coordinator = coordinator or bootstrap
    first = asyncio.run(describe(coordinator, tid))
    seen = [(first.transaction_state, first.producer_id, first.producer_epoch)]
    for name, commit in (("first", True), ("second", False), ("third", True)):
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, f"{name}-{i}".encode(), partition=i % 2)
        producer.flush(30)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
        done = wait_for_state(coordinator, tid, "CompleteCommit" if commit else "CompleteAbort")
        seen.append((done.transaction_state, done.producer_id, done.producer_epoch))
    producer.flush(10)
    return seen


def check_confluent_rounds(seen: list[tuple[str, int, int]]) -> None:
    """librdkafka 2.16 runs transaction version 1 (EndTxn up to v3, explicit AddPartitionsToTxn), which a
    broker at transaction.version 2 serves as Kafka does: one epoch for all its transactions."""
    [(_, pid, epoch)] = {(s[0], s[1], s[2]) for s in seen[:1]}
    assert seen == [
        ("Empty", pid, epoch),
        ("CompleteCommit", pid, epoch),
        ("CompleteAbort", pid, epoch),
        ("CompleteCommit", pid, epoch),
    ]


def committed_values() -> list[bytes]:
    return sorted(f"{name}-{i}".encode() for name in ("first", "third") for i in range(6))


def test_storage_format_at_transaction_version_2_and_confluent_kafka(tmp_path: Path) -> None:
    """`kcli storage format --feature transaction.version=2`, a broker on it, and confluent-kafka's
    producer (which keeps to version 1) commits and aborts; read_committed sees the commits only."""
    config = combined(
        tmp_path, **{"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}
    )
    formatted = kcli_process(
        tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID, "--feature", TV2
    )
    assert formatted.returncode == 0, formatted.stderr
    broker = start_broker(tmp_path / "run", config=config, data_dir=tmp_path / "logs-a")
    try:
        assert api_versions(broker.bootstrap)[1].get("transaction.version") == 2
        create_topic(broker.bootstrap, "cf", 2)
        check_confluent_rounds(confluent_rounds(broker.bootstrap, "cf-tid", "cf"))
        assert sorted(consume_all(broker.bootstrap, "cf", 2, "read_committed")) == committed_values()
        assert len(consume_all(broker.bootstrap, "cf", 2, "read_uncommitted")) == 18
    finally:
        stop_cleanly(broker)


def check_java_rounds(lines: list[dict[str, Any]]) -> None:
    """kafka-clients 4.1.2 at version 2: the epoch one higher after every transaction (commit or abort),
    the group's offsets committed with the commits only, read_committed exact."""
    assert steps(lines, "features")[0]["transactionVersion"] == 2
    txns = steps(lines, "txn")
    assert [(t["after"], t["state"]) for t in txns] == [
        ("init", "Empty"), ("commit", "CompleteCommit"), ("abort", "CompleteAbort"), ("commit", "CompleteCommit"),
    ]  # fmt: skip
    pid, epoch = txns[0]["producerId"], txns[0]["producerEpoch"]
    assert [(t["producerId"], t["producerEpoch"]) for t in txns] == [(pid, epoch + i) for i in range(4)]
    expected = sorted(f"{name}-{i}" for name in ("commit1", "commit3") for i in range(5))
    assert steps(lines, "readCommitted")[0]["values"] == expected
    assert steps(lines, "offsets")[0]["offset"] == 30


@pytest.fixture(scope="module")
def java_classes() -> Path:
    """tests/java/KcliClients.java compiled against kafka-clients 4.1.2 (as test_java_clients has it)."""
    require_apache_kafka()
    require_javac()
    return compile_clients()


def test_java_transactional_producer_bumps_the_epoch_per_transaction(
    broker_factory, java_classes: Path, tmp_path: Path
) -> None:
    """kafka-clients' transactional producer, and beside it a Kafka Streams word count at exactly_once_v2
    (its transactions at version 2 too), on one node at transaction.version 2."""
    broker = broker_factory(overrides=FAST)
    upgrade_to_tv2(broker.bootstrap)
    b = broker.bootstrap
    clients, streams = in_parallel(
        lambda: clients_run(java_classes, tmp_path / "java", "txnv2", b, "jv2", "1"),
        lambda: word_counts(java_classes, tmp_path / "streams", b, "wcv2"),
    )
    check_java_rounds(clients)
    check_word_counts(streams)
    values = [
        r["value"]["data"]
        for r in dump_transaction_log(broker.data_dir)
        if r.get("key", {}).get("data", {}).get("transactionalId") == "jv2-tid"
    ]
    ends = [v for v in values if v["transactionStatus"] in (2, 3, 4, 5)]
    assert len(ends) == 6 and all(v["clientTransactionVersion"] == 2 for v in ends)
    streams_ends = {
        r["value"]["data"]["clientTransactionVersion"]
        for r in dump_transaction_log(broker.data_dir)
        if r.get("key", {}).get("data", {}).get("transactionalId", "").startswith("wcv2-exactly-once-v2")
        and (r.get("value") or {}).get("data", {}).get("transactionStatus") in (2, 3, 4, 5)
    }
    assert streams_ends == {2}  # Streams' exactly_once_v2 producer ends its transactions at version 2 too


# --- three nodes -------------------------------------------------------------------------------------

CLUSTER_OVERRIDES = (
    "transaction.state.log.num.partitions=3",
    "offsets.topic.num.partitions=3",
    "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2",
    "offsets.topic.replication.factor=3",
    "group.initial.rebalance.delay.ms=0",
    "broker.session.timeout.ms=6000",
)
"""Internal topics on all three nodes, so the transaction coordinator can fail over."""
FIND_COORDINATOR = 10


@pytest.fixture(scope="module")
def v2_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKraftCluster]:
    """Three combined kcli nodes upgraded to transaction.version 2 (`kcli features upgrade`); every node
    offers it before a test starts. Stopped by PID at the end."""
    cluster = LocalKraftCluster(tmp_path_factory.mktemp("txn-v2-cluster"), 3, CLUSTER_OVERRIDES)
    try:
        cluster.start()
        cluster.status(timeout=60, what="a controller leader")
        upgrade_to_tv2(cluster.bootstrap)
        for node in cluster.nodes.values():
            wait_for(
                f"node {node.node_id} at transaction.version 2",
                lambda node=node: api_versions(node.bootstrap)[1].get("transaction.version") == 2,
                30,
            )
        yield cluster
        for node in cluster.nodes.values():
            assert "Traceback" not in node.log(), f"node {node.node_id} logged a traceback:\n{node.log()}"
    finally:
        cluster.kill_all()


def test_java_transactional_producer_on_three_nodes(
    v2_cluster: LocalKraftCluster, java_classes: Path, tmp_path: Path
) -> None:
    lines = clients_run(java_classes, tmp_path / "java", "txnv2", v2_cluster.bootstrap, "cjv2", "3")
    check_java_rounds(lines)


def test_confluent_kafka_producer_on_three_nodes(v2_cluster: LocalKraftCluster) -> None:
    bootstrap = v2_cluster.bootstrap
    create_topic_on(bootstrap, "cf3", [[1, 2, 3], [2, 3, 1]])
    tid = "cf3-tid"
    node = wait_for("a coordinator", lambda: asyncio.run(find_coordinator(v2_cluster[1].bootstrap, tid)), 60)
    check_confluent_rounds(confluent_rounds(bootstrap, tid, "cf3", v2_cluster[node].bootstrap))
    assert sorted(consume_all(bootstrap, "cf3", 2, "read_committed")) == committed_values()


async def find_coordinator(bootstrap: str, tid: str) -> int | None:
    async with await KafkaClient.connect(bootstrap) as client:
        cls = client.request_type(FIND_COORDINATOR, 4)
        [found] = (await client.send(cls(key_type=1, coordinator_keys=(tid,)))).coordinators
        return found.node_id if found.error_code == ErrorCode.none else None


async def retrying(what: str, call: Any, retriable: frozenset[ErrorCode], timeout: float = 60) -> Any:
    """`call()` (a coroutine factory answering (error, response)) again while its error is retriable or
    the broker cannot be reached."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            error, response = await call()
        except (TimeoutError, OSError, ConnectionError) as exc:
            last = exc
        else:
            if error not in retriable:
                return error, response
            last = error
        await asyncio.sleep(0.3)
    pytest.fail(f"{what}: still {last} after {timeout}s")


COORDINATOR_MOVING = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
    }
)
LEADER_BUSY = frozenset(
    {ErrorCode.not_enough_replicas, ErrorCode.request_timed_out, ErrorCode.not_leader_or_follower}
)


def test_java_producer_through_a_coordinator_failover(
    v2_cluster: LocalKraftCluster, java_classes: Path, tmp_path: Path
) -> None:
    """kafka-clients holds a transaction open (records written) while its coordinator is killed (kill -9),
    then commits through the new coordinator and aborts the next one: the epochs go on one per
    transaction and read_committed sees exactly the committed records."""
    cluster = v2_cluster
    tid = "jfo-tid"
    resume = tmp_path / "resume"
    command = apache_kafka.java_command(
        MAIN,
        ["txnv2-failover", cluster.bootstrap, "jfo", str(resume)],
        log_path=tmp_path / "jfo.log",
        level="warn",
        classpath=[java_classes],
    )
    with open(tmp_path / "jfo.stderr", "w") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path, stdin=subprocess.DEVNULL
        )
    lines = JsonLines(process)
    try:
        lines.wait(
            "the paused transaction",
            lambda: {"event": "paused"} in lines.lines,
            120,
            explain=lambda: tails(tmp_path / "jfo.log", *(n.node.log_file for n in cluster.nodes.values())),
        )
        live = cluster.live_bootstrap().split(",")[0]
        coordinator = wait_for("a coordinator", lambda: asyncio.run(find_coordinator(live, tid)), 60)
        cluster[coordinator].kill()
        resume.touch()
        process.wait(240)
    finally:
        if process.poll() is None:
            process.kill()  # by PID, the JVM this test started
            process.wait()
        lines.reader.join(10)
    errors = [line for line in lines.lines if "error" in line]
    assert process.returncode == 0 and not errors and lines.lines[-1:] == [{"event": "done"}], (
        errors,
        (tmp_path / "jfo.stderr").read_text()[-3000:],
    )
    txns = steps(lines.lines, "txn")
    assert [(t["after"], t["state"]) for t in txns] == [
        ("init", "Empty"), ("commit", "CompleteCommit"), ("abort", "CompleteAbort"),
    ]  # fmt: skip
    pid, epoch = txns[0]["producerId"], txns[0]["producerEpoch"]
    assert [(t["producerId"], t["producerEpoch"]) for t in txns] == [
        (pid, epoch),
        (pid, epoch + 1),
        (pid, epoch + 2),
    ]
    expected = sorted(f"{name}-{i}" for name in ("before", "after") for i in range(5))
    assert steps(lines.lines, "readCommitted")[0]["values"] == expected
    cluster[coordinator].start()
    cluster[coordinator].wait_ready()
    wait_in_sync(cluster, ["__transaction_state", "jfo-out"])


def tails(*paths: Path, size: int = 2000) -> str:
    """The last `size` characters of each file, headed by its name (a failure's context)."""
    return "\n".join(
        f"--- {path}:\n{path.read_text(errors='replace')[-size:] if path.exists() else '(none)'}"
        for path in paths
    )


def wait_in_sync(cluster: LocalKraftCluster, topics: list[str]) -> None:
    """Until every partition of `topics` has all its replicas in the ISR again."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 20000})

    def in_sync() -> bool:
        found = admin.list_topics(timeout=20).topics
        return all(
            topic in found and all(len(p.isrs) == len(p.replicas) for p in found[topic].partitions.values())
            for topic in topics
        )

    wait_for(f"{topics} in sync", in_sync, 90, interval=0.5)


def test_coordinator_failover_in_the_middle_of_a_transaction(v2_cluster: LocalKraftCluster) -> None:
    """A version 2 transaction (Produce v12, EndTxn v5) is open when its coordinator is killed (kill -9):
    the new coordinator loads the v1 records and commits it with the bumped epoch, the next transaction
    aborts, a produce with the aborted epoch is fenced, and read_committed sees exactly the commits."""
    cluster = v2_cluster
    tid = "failover-v2"
    first = cluster[1].bootstrap
    coordinator = wait_for("a coordinator", lambda: asyncio.run(find_coordinator(first, tid)), 60)
    others = [n for n in sorted(cluster.nodes) if n != coordinator]
    leader = others[0]
    create_topic_on(cluster.bootstrap, "fo", [[leader, others[1], coordinator]])

    async def produce_to_leader(epoch: int, sequence: int, values: list[bytes]) -> ErrorCode:
        async def once() -> tuple[ErrorCode, None]:
            async with await KafkaClient.connect(cluster[leader].bootstrap) as client:
                batch = txn_batch(pid, epoch, sequence, values)
                return await produce(client, 12, tid, "fo", 0, batch), None

        return (await retrying("Produce v12", once, LEADER_BUSY))[0]

    async def end(epoch: int, *, commit: bool) -> Any:
        async def once() -> tuple[ErrorCode, Any]:
            node = await find_coordinator(cluster.live_bootstrap().split(",")[0], tid)
            if node is None or not cluster[node].running:
                return ErrorCode.coordinator_not_available, None
            async with await KafkaClient.connect(cluster[node].bootstrap) as client:
                response = await end_txn_v5(client, tid, pid, epoch, commit=commit)
                return response.error_code, response

        error, response = await retrying("EndTxn v5", once, COORDINATOR_MOVING, timeout=90)
        assert error == ErrorCode.none, response
        return response

    async def init() -> tuple[int, int]:
        async with await KafkaClient.connect(cluster[coordinator].bootstrap) as client:
            return await init_producer(client, tid)

    pid, epoch = asyncio.run(init())
    assert asyncio.run(produce_to_leader(epoch, 0, [b"one-0", b"one-1"])) == ErrorCode.none
    assert asyncio.run(end(epoch, commit=True)).producer_epoch == epoch + 1
    epoch += 1
    # The next transaction is open (its partition added by the leader through the remote coordinator)...
    assert asyncio.run(produce_to_leader(epoch, 0, [b"two-0", b"two-1"])) == ErrorCode.none
    cluster[coordinator].kill()  # ...when its coordinator dies
    committed = asyncio.run(end(epoch, commit=True))
    assert (committed.producer_id, committed.producer_epoch) == (pid, epoch + 1)
    epoch += 1
    assert asyncio.run(produce_to_leader(epoch, 0, [b"three-0"])) == ErrorCode.none
    assert asyncio.run(end(epoch, commit=False)).producer_epoch == epoch + 1
    stale = asyncio.run(produce_to_leader(epoch, 1, [b"three-late"]))
    assert stale == ErrorCode.invalid_producer_epoch
    live = cluster.live_bootstrap()
    assert consume_all(live, "fo", 1, "read_committed") == [b"one-0", b"one-1", b"two-0", b"two-1"]
    moved = wait_for(
        "the new coordinator", lambda: asyncio.run(find_coordinator(live.split(",")[0], tid)), 60
    )
    assert moved != coordinator
    state = wait_for_state(cluster[moved].bootstrap, tid, "CompleteAbort", timeout=60)
    assert (state.producer_id, state.producer_epoch) == (pid, epoch + 1)
    # The killed node comes back and follows.
    cluster[coordinator].start()
    cluster[coordinator].wait_ready()
    wait_in_sync(cluster, ["__transaction_state", "fo"])


def create_topic_on(bootstrap: str, topic: str, assignment: list[list[int]]) -> None:
    """A topic with explicit replicas (the first one leads), min.insync.replicas 2; waits for its leaders."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000})
    new = NewTopic(topic, len(assignment), replica_assignment=assignment, config={"min.insync.replicas": "2"})
    admin.create_topics([new], operation_timeout=30)[topic].result(40)

    def led() -> bool:
        found = admin.list_topics(topic, timeout=20).topics.get(topic)
        return (
            found is not None
            and found.error is None
            and [found.partitions[p].leader for p in range(len(assignment))] == [a[0] for a in assignment]
        )

    wait_for(f"{topic} to be led as assigned", led, 60, interval=0.5)


def test_bad_version_2_requests_get_kafkas_errors(broker_factory) -> None:
    """EndTxn v5, TxnOffsetCommit v5 and Produce v12 with a missing or unknown transactional id, the wrong
    producer id or epoch: each answers Kafka's error and the broker goes on serving."""
    broker = broker_factory(overrides=FAST)
    upgrade_to_tv2(broker.bootstrap)
    create_topic(broker.bootstrap, "in", 1)

    async def run() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            pid, epoch = await init_producer(client, "bad-v2")
            for tid, producer, expected in (
                ("", (pid, epoch), ErrorCode.invalid_request),
                ("unknown-v2", (pid, epoch), ErrorCode.invalid_producer_id_mapping),
                ("bad-v2", (pid + 1, epoch), ErrorCode.invalid_producer_id_mapping),
                ("bad-v2", (pid, epoch + 5), ErrorCode.producer_fenced),
            ):
                answer = await end_txn_v5(client, tid, *producer, commit=True)
                assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (expected, -1, -1), (
                    tid
                )
            assert (await end_txn_v5(client, "bad-v2", pid, epoch, commit=True)).error_code == (
                ErrorCode.invalid_txn_state  # nothing to commit
            )
            error = await txn_commit(client, 5, "unknown-v2", pid, epoch, "g", 1)
            assert error == ErrorCode.invalid_producer_id_mapping
            error = await produce(client, 12, "unknown-v2", "in", 0, txn_batch(pid, epoch, 0, [b"x"]))
            assert error == ErrorCode.invalid_producer_id_mapping
            # an offset commit at version 5 adds the group's partition itself, no AddOffsetsToTxn
            await find(client, "g")  # __consumer_offsets comes into being
            for _ in range(100):
                error = await txn_commit(client, 5, "bad-v2", pid, epoch, "g", 7)
                if error not in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
                    break
                await asyncio.sleep(0.1)
            assert error == ErrorCode.none
            assert (await describe(broker.bootstrap, "bad-v2")).transaction_state == "Ongoing"
            ended = await end_txn_v5(client, "bad-v2", pid, epoch, commit=True)
            assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, epoch + 1)

    asyncio.run(run())
    assert api_versions(broker.bootstrap)[1]["transaction.version"] == 2  # still serving


def test_a_partition_refused_for_long_is_logged_once(broker_factory) -> None:
    """The leader says once, after REFUSED_FOR_LONG_S, that the transaction coordinator keeps refusing
    one partition of a transaction (a producer retrying a retriable refusal is otherwise silent until
    its transaction times out); a partition accepted afterwards starts over."""
    broker = broker_factory(overrides=FAST)
    upgrade_to_tv2(broker.bootstrap)
    create_topic(broker.bootstrap, "held", 1)
    line = "The transaction coordinator has refused partition held-0 of unmapped-v2 (epoch 0) for"

    async def run() -> list[ErrorCode]:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            pid, epoch = await init_producer(client, "mapped-v2")
            answers = []
            for _ in range(3):  # a producer id the coordinator does not hold for this transactional id
                answers.append(
                    await produce(client, 12, "unmapped-v2", "held", 0, txn_batch(pid, epoch, 0, [b"x"]))
                )
                if len(answers) < 3:
                    await asyncio.sleep(REFUSED_FOR_LONG_S / 2 + 0.1)
            return answers

    answers = asyncio.run(run())
    assert answers == [ErrorCode.invalid_producer_id_mapping] * 3
    logged = [text for text in broker.log().splitlines() if line in text]
    assert len(logged) == 1 and logged[0].endswith("s: INVALID_PRODUCER_ID_MAPPING"), logged
