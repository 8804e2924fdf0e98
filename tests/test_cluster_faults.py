"""Multi-node KRaft clusters under faults: kill -9, SIGTERM, and a seeded schedule of both.

The clusters come from tests/kraft_cluster.py (nodes are processes of ours, killed and restarted by
PID on the same dirs and ports); every wait is bounded and waits for an event (a log line, an answer).
The numbering follows test_cluster.py, whose other half this is.

2. kill -9 of the active controller: a new leader, CreateTopics again, and after the restart the three
   voters' metadata logs are identical, byte for byte, below the high watermark; an operation answers
   only once what it read is committed.
3. Fencing: after broker.session.timeout.ms for a killed broker, at once for a SIGTERM'd one (controlled
   shutdown), the active controller's own broker included.
4. A seeded schedule of kill -9 and restarts while a client creates topics: at most one leader per
   epoch, a high watermark that never goes down, committed batches that never change, every
   acknowledged topic there at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from cli_in_process import run_kcli
from kraft_cluster import (
    ELECTION_TIMEOUT_S,
    FETCH_TIMEOUT_S,
    HEARTBEAT_INTERVAL_S,
    SESSION,
    SESSION_TIMEOUT_S,
    DiskBatch,
    LocalKraftCluster,
    Status,
    below,
    read_metadata_log,
    read_quorum_state,
    wait_all_caught_up,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)


# --- 2. kill -9 of the active controller ----------------------------------------------------------------


def create_topics(bootstrap: str, names: Sequence[str], timeout: float = 30.0) -> None:
    """CreateTopics (1 partition, RF 1) through `bootstrap`; fails the test unless every one is created."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
    futures = admin.create_topics([NewTopic(name, 1, 1) for name in names], request_timeout=timeout)
    for future in futures.values():
        future.result(timeout + 5)  # raises on an error answer


def topic_names(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics)


def assert_logs_agree(cluster: LocalKraftCluster, high_watermark: int) -> list[DiskBatch]:
    """Every voter's metadata log holds the same batches, byte for byte, from offset 0 up to
    `high_watermark`; returns them."""
    logs = {
        node_id: below(read_metadata_log(cluster.metadata_dir(node_id)), high_watermark)
        for node_id in cluster.nodes
    }
    reference_id = min(logs)
    reference = logs[reference_id]
    assert all(b.crc_valid for batches in logs.values() for b in batches), "a committed batch fails its CRC"
    assert reference and reference[0].base_offset == 0
    assert all(a.last_offset + 1 == b.base_offset for a, b in zip(reference, reference[1:], strict=False))
    assert reference[-1].last_offset + 1 == high_watermark, "the committed prefix ends at the high watermark"
    for node_id, batches in logs.items():
        assert [(b.base_offset, b.last_offset, b.epoch, b.crc) for b in batches] == [
            (b.base_offset, b.last_offset, b.epoch, b.crc) for b in reference
        ], f"voters {reference_id} and {node_id} disagree below offset {high_watermark}"
        assert [b.data for b in batches] == [b.data for b in reference]
    return reference


@pytest.mark.timeout(150)
def test_killing_the_active_controller_elects_another_and_loses_no_committed_record(
    cluster_factory: Callable[..., LocalKraftCluster],
) -> None:
    cluster = cluster_factory()
    cluster.start()
    before = wait_all_caught_up(cluster)
    create_topics(cluster.bootstrap, ["before-1", "before-2", "before-3"])
    committed = cluster.wait_status(
        "the topics to commit", lambda s: s.caught_up and s.high_watermark > before.high_watermark
    )
    old_leader, old_epoch = committed.leader_id, committed.epoch
    # What the leader had committed when it died: its log below the high watermark it reported.
    committed_prefix = below(read_metadata_log(cluster.metadata_dir(old_leader)), committed.high_watermark)

    killed_at = time.monotonic()
    cluster[old_leader].kill()
    elected = cluster.wait_status(
        "a new leader",
        lambda s: s.leader_id not in (old_leader, -1) and s.epoch > old_epoch,
        timeout=FETCH_TIMEOUT_S + 6 * ELECTION_TIMEOUT_S + 10,
    )
    took = time.monotonic() - killed_at
    # A follower gives up on the leader after fetch.timeout.ms, then wins an election or a few.
    assert took < FETCH_TIMEOUT_S + 6 * ELECTION_TIMEOUT_S + 5, f"the new leader took {took:.1f} s"
    assert elected.high_watermark == -1 or elected.high_watermark >= committed.high_watermark

    survivors = [n for n in cluster.nodes.values() if n.running]
    create_topics(",".join(n.bootstrap for n in survivors), ["after-1"])
    for node in survivors:
        wait_for(
            f"{node.bootstrap} to list every topic",
            lambda node=node: {"before-1", "before-2", "before-3", "after-1"} <= topic_names(node.bootstrap),
            15,
        )

    cluster[old_leader].start()
    cluster[old_leader].wait_ready()
    final = wait_all_caught_up(cluster)
    assert final.epoch == elected.epoch and final.leader_id == elected.leader_id
    agreed = assert_logs_agree(cluster, final.high_watermark)
    assert agreed[: len(committed_prefix)] == committed_prefix, "a committed batch changed"
    leader_changes = [(b.epoch, b.leader_change) for b in agreed if b.leader_change is not None]
    assert leader_changes[-1] == (elected.epoch, elected.leader_id)
    assert [e for e, _ in leader_changes] == sorted({e for e, _ in leader_changes}), leader_changes
    assert {"before-1", "before-2", "before-3", "after-1"} <= topic_names(cluster[old_leader].bootstrap)
    # kcli dump-segment reads the same records from every voter's log.
    dumped = {node_id: dumped_records(cluster, node_id, final.high_watermark) for node_id in cluster.nodes}
    assert dumped[1] == dumped[2] == dumped[3]
    names = [
        r["value"]["data"]["name"] for r in dumped[1] if r.get("value", {}).get("type") == "TOPIC_RECORD"
    ]
    assert names == ["before-1", "before-2", "before-3", "after-1"]


def dumped_records(cluster: LocalKraftCluster, node_id: int, high_watermark: int) -> list[dict[str, Any]]:
    """The records below `high_watermark` of a voter's metadata log, as `kcli dump-segment
    --cluster-metadata-decoder -o json` prints them (offset, key and value or control type), through
    the entry point in this process (test_dump runs dump-segment as a real process)."""
    [segment] = sorted(cluster.metadata_dir(node_id).glob("*.log"))
    result = run_kcli("dump-segment", "--cluster-metadata-decoder", "-o", "json", str(segment))
    assert result.returncode == 0, result.stderr
    keep = ("offset", "key", "value", "control")
    return [
        {k: item[k] for k in keep if k in item}
        for item in map(json.loads, result.stdout.splitlines())
        if item["type"] == "record" and item["offset"] < high_watermark
    ]


@pytest.mark.timeout(90)
def test_an_operation_answers_only_once_what_it_read_is_committed(
    cluster_factory: Callable[..., LocalKraftCluster],
) -> None:
    """A leader cut off from its followers appends CreateTopics(pending) and cannot commit it; asked again,
    it must not answer TOPIC_ALREADY_EXISTS from its uncommitted image (Kafka's ControllerWriteEvent waits
    for the writes before it), since that topic may never exist."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = cluster_factory()
    cluster.start()
    status = wait_all_caught_up(cluster)
    leader = cluster[status.leader_id]
    for node in cluster.nodes.values():
        if node is not leader:
            node.kill()
    answers = []
    for _ in range(2):  # well inside the 1.5 fetch timeouts after which the leader resigns
        # A new client each time: the first request holds its connection until it is answered. A kcli
        # broker names itself as the controller in Metadata (Kafka names a random live broker) and
        # forwards what is not its own to the active controller, so this reaches the leader's.
        admin = AdminClient({"bootstrap.servers": leader.bootstrap})
        future = admin.create_topics([NewTopic("pending", 1, 1)], request_timeout=1.5)["pending"]
        try:
            future.result(10)
            answers.append("created")
        except KafkaException as exc:
            answers.append(exc.args[0].name())
    assert "created" not in answers and "TOPIC_ALREADY_EXISTS" not in answers, answers
    # The first one did reach the controller: the topic's record is in the leader's log, uncommitted.
    pending = [b for b in read_metadata_log(cluster.metadata_dir(leader.node_id)) if b"pending" in b.data]
    assert pending and pending[0].base_offset >= status.high_watermark, pending


# --- 3. fencing: a dead broker after its session, a stopping one at once ---------------------------------


def follower_of(status: Status) -> int:
    return min(v for v in status.voters if v != status.leader_id)


def test_a_connection_the_broker_closes_at_once_fails_at_once() -> None:
    """A controller that is shutting down closes new connections as it accepts them; kcli's client must see
    that (it used to miss a close that came before the client object existed, and waited out the request
    timeout: a broker's heartbeats to a stopping controller then hung for 30 s and it lost its session)."""
    from kcli.client import ClientError, KafkaClient

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]

    def slam() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=slam, daemon=True).start()

    async def attempts() -> list[float]:
        took = []
        for _ in range(20):
            started = time.monotonic()
            with pytest.raises(ClientError):
                await KafkaClient.connect(f"127.0.0.1:{port}", connect_timeout=5, request_timeout=5)
            took.append(time.monotonic() - started)
        return took

    try:
        took = asyncio.run(attempts())
    finally:
        listener.close()
    assert max(took) < 2.5, took


@pytest.mark.timeout(210)
def test_a_killed_broker_is_fenced_after_its_session_and_a_stopped_one_at_once(
    cluster_factory: Callable[..., LocalKraftCluster],
) -> None:
    cluster = cluster_factory(overrides=SESSION)
    cluster.start()
    status = wait_all_caught_up(cluster)

    # kill -9: no more heartbeats; the controller fences the broker once its session has expired.
    victim = follower_of(status)
    killed_at = time.monotonic()
    cluster[victim].kill()
    fenced = cluster.wait_status(f"broker {victim} fenced", lambda s: s.fenced.get(victim) is True, 30)
    took = time.monotonic() - killed_at
    assert took >= SESSION_TIMEOUT_S - HEARTBEAT_INTERVAL_S - 0.3, f"fenced {took:.1f} s after kill -9"
    assert took < SESSION_TIMEOUT_S + 10, f"fenced only {took:.1f} s after kill -9"
    assert [i for i, f in fenced.fenced.items() if f] == [victim]
    leader_log = cluster[fenced.leader_id].log()
    assert f"fencing broker {victim}: no heartbeat for {SESSION_TIMEOUT_S * 1000:.0f} ms" in leader_log

    # Back: it registers a new incarnation and is unfenced once caught up.
    cluster[victim].start()
    cluster[victim].wait_ready()
    assert f"broker {victim} is unfenced" in cluster[victim].log()
    status = wait_all_caught_up(cluster)

    # SIGTERM: controlled shutdown, the controller fences it right away, not after the session.
    stopping = follower_of(status)
    leader_log_before = len(cluster[status.leader_id].log())
    stopped_at = time.monotonic()
    os.kill(cluster[stopping].pid, signal.SIGTERM)
    fenced = cluster.wait_status(f"broker {stopping} fenced", lambda s: s.fenced.get(stopping) is True, 30)
    took = time.monotonic() - stopped_at
    assert cluster[stopping].terminate(send=False) == 0, cluster[stopping].log()
    assert took < SESSION_TIMEOUT_S - HEARTBEAT_INTERVAL_S - 0.5, f"fenced {took:.1f} s after SIGTERM"
    assert f"broker {stopping}: controlled shutdown complete" in cluster[stopping].log(), cluster[
        stopping
    ].log()
    assert fenced.leader_id == status.leader_id
    leader_log = cluster[fenced.leader_id].log()[leader_log_before:]
    assert f"fencing broker {stopping}: controlled shutdown" in leader_log
    assert f"fencing broker {stopping}: no heartbeat" not in leader_log

    # The same for the node whose controller is the active one: its broker is fenced while it still
    # leads the quorum, then it resigns and another voter takes over.
    cluster[stopping].start()
    cluster[stopping].wait_ready()
    status = wait_all_caught_up(cluster)
    stopping = status.leader_id
    logs_before = {i: len(n.log()) for i, n in cluster.nodes.items()}
    stopped_at = time.monotonic()
    os.kill(cluster[stopping].pid, signal.SIGTERM)
    fenced = cluster.wait_status(
        f"broker {stopping} fenced", lambda s: s.fenced.get(stopping) is True and s.leader_id != stopping, 30
    )
    took = time.monotonic() - stopped_at
    assert cluster[stopping].terminate(send=False) == 0, cluster[stopping].log()
    assert f"broker {stopping}: controlled shutdown complete" in cluster[stopping].log(), cluster[
        stopping
    ].log()
    assert f"fencing broker {stopping}: controlled shutdown" in cluster[stopping].log()
    new_leader_log = cluster[fenced.leader_id].log()[logs_before[fenced.leader_id] :]
    assert f"fencing broker {stopping}: no heartbeat" not in new_leader_log
    assert took < SESSION_TIMEOUT_S - HEARTBEAT_INTERVAL_S - 0.5, f"fenced {took:.1f} s after SIGTERM"
    # It resigned with EndQuorumEpoch: the next leader campaigned at once, not after fetch.timeout.ms,
    # and the old one stayed until it led (Kafka's graceful shutdown), fetching its epoch's first record.
    assert f"raft: leader {stopping} resigned from epoch {status.epoch}" in new_leader_log, new_leader_log
    assert re.search(
        rf"raft: node \d leads epoch {status.epoch + 1}; leaving the quorum", cluster[stopping].log()
    )
    # No live broker loses its session over the change of controller: their heartbeats find the new
    # one. (An absence has no event to wait for: give the sessions the time to expire, then look.)
    time.sleep(SESSION_TIMEOUT_S + 2 * HEARTBEAT_INTERVAL_S)
    after = cluster.status()
    assert [i for i, f in after.fenced.items() if f] == [stopping], after.text
    new_leader_log = cluster[after.leader_id].log()[logs_before[after.leader_id] :]
    assert "no heartbeat" not in new_leader_log, new_leader_log

    # A paused active controller (SIGSTOP: its connections stay open and never answer): the others
    # elect a new one, and their heartbeats and forwarded requests leave the paused one as soon as the
    # quorum names the new one, instead of waiting out the 30 s request timeout (and their sessions).
    cluster[stopping].start()
    cluster[stopping].wait_ready()
    status = wait_all_caught_up(cluster)
    paused = status.leader_id
    survivors = [i for i in cluster.nodes if i != paused]
    logs_before = {i: len(cluster[i].log()) for i in survivors}
    os.kill(cluster[paused].pid, signal.SIGSTOP)
    try:
        paused_at = time.monotonic()
        create_topics(",".join(cluster[i].bootstrap for i in survivors), ["while-paused"], timeout=25)
        took = time.monotonic() - paused_at
        assert took < FETCH_TIMEOUT_S + 6 * ELECTION_TIMEOUT_S + 5, f"CreateTopics took {took:.1f} s"
        time.sleep(SESSION_TIMEOUT_S + 2 * HEARTBEAT_INTERVAL_S)  # an absence again: let sessions expire
        for i in survivors:  # the paused one is fenced after its session; no other broker is
            for j in survivors:
                assert f"fencing broker {j}: no heartbeat" not in cluster[i].log()[logs_before[i] :]
        after = describe_quorum(",".join(cluster[i].bootstrap for i in survivors))
        assert after is not None and after[0] in survivors, after
    finally:
        os.kill(cluster[paused].pid, signal.SIGCONT)


# --- 4. a seeded schedule of controller kills and restarts, Raft's invariants checked --------------------

CHAOS_SEED = 1
CHAOS_EVENTS = 8


def chaos_plan(seed: int, events: int) -> list[tuple[float, str]]:
    """(delay in seconds, action) pairs: kill the leader (mostly), kill a follower, restart the node
    down longest. At most two of three nodes are down at once (then the quorum is gone until one is back)."""
    rng = random.Random(seed)
    plan_: list[tuple[float, str]] = []
    down = 0
    for _ in range(events):
        if down == 0:
            action = "kill-leader" if rng.random() < 0.75 else "kill-follower"
        elif down == 1:
            action = rng.choice(["restart", "restart", "kill-leader"])
        else:
            action = "restart"
        down += -1 if action == "restart" else 1
        plan_.append((round(rng.uniform(1.0, 4.5), 2), action))
    return plan_


def describe_quorum(bootstrap: str) -> tuple[int, int, int] | None:
    """(leader, epoch, high watermark) by DescribeQuorum through any of `bootstrap`; None without an answer."""
    from kcli.cluster import Cluster
    from kcli.errors import KcliError
    from ops.quorum import describe_cluster_status

    async def ask() -> tuple[int, int, int]:
        async with await Cluster.connect(bootstrap, request_timeout=3.0) as cluster:
            status = await describe_cluster_status(cluster)
            return status.leader_id, status.leader_epoch, status.high_watermark

    try:
        return asyncio.run(ask())
    except (KcliError, OSError, TimeoutError):
        return None


@dataclass
class QuorumWatch:
    """What a background thread sees of the quorum while nodes die and come back."""

    cluster: LocalKraftCluster
    leaders: dict[int, set[int]] = field(default_factory=dict)  # epoch -> leader ids seen for it
    high_watermarks: list[tuple[int, int, int]] = field(default_factory=list)  # (epoch, leader, hw)
    committed: dict[int, tuple[int, int]] = field(default_factory=dict)  # base offset -> (epoch, crc)
    violations: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def saw_leader(self, epoch: int, leader: int, source: str) -> None:
        if leader < 0:
            return
        seen = self.leaders.setdefault(epoch, set())
        seen.add(leader)
        if len(seen) > 1:
            self.violations.append(f"epoch {epoch} has leaders {sorted(seen)} ({source})")

    def saw_committed(self, batches: list[DiskBatch], source: str) -> None:
        for batch in batches:
            known = self.committed.setdefault(batch.base_offset, (batch.epoch, batch.crc))
            if known != (batch.epoch, batch.crc):
                self.violations.append(
                    f"committed offset {batch.base_offset} was (epoch, crc) {known}, now {(batch.epoch, batch.crc)} ({source})"
                )

    def poll_once(self) -> None:
        for node_id in self.cluster.nodes:
            state = read_quorum_state(self.cluster.metadata_dir(node_id))
            if state is not None:
                self.saw_leader(state["leaderEpoch"], state["leaderId"], f"quorum-state of node {node_id}")
        live = self.cluster.live_bootstrap()
        answer = describe_quorum(live) if live else None
        if answer is None:
            return
        leader, epoch, high_watermark = answer
        self.saw_leader(epoch, leader, "DescribeQuorum")
        if high_watermark < 0:
            return  # a new leader that has not committed in its epoch yet: unknown, as in Kafka
        highest = max((hw for _, _, hw in self.high_watermarks), default=-1)
        if high_watermark < highest:
            self.violations.append(
                f"the high watermark went down from {highest} to {high_watermark} (leader {leader}, epoch {epoch})"
            )
        self.high_watermarks.append((epoch, leader, high_watermark))
        # What the leader had committed: its log below the high watermark it reported (Leader Completeness:
        # those batches are in every later leader's log, unchanged).
        self.saw_committed(
            below(read_metadata_log(self.cluster.metadata_dir(leader)), high_watermark),
            f"node {leader}'s log",
        )

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # a torn read must not end the watch
                self.violations.append(f"the watch failed: {exc!r}")
            self.stop.wait(0.3)


@dataclass
class TopicCreator:
    """CreateTopics, one new topic at a time, for as long as it runs; remembers what was acknowledged."""

    bootstrap: str
    acknowledged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})
        for i in range(1_000_000):
            if self.stop.is_set():
                return
            name = f"chaos-{i}"
            future = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=10)[name]
            try:
                future.result(15)
            except KafkaException as exc:
                error = exc.args[0]
                if error.name() == "TOPIC_ALREADY_EXISTS":  # a retry of a request that went through
                    self.acknowledged.append(name)
                else:
                    self.failed.append((name, error.name()))
                    self.stop.wait(0.2)
            except Exception as exc:  # a client timeout: not acknowledged
                self.failed.append((name, repr(exc)))
            else:
                self.acknowledged.append(name)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_seeded_controller_kills_keep_raft_invariants(
    cluster_factory: Callable[..., LocalKraftCluster],
) -> None:
    schedule = chaos_plan(CHAOS_SEED, CHAOS_EVENTS)
    print(f"seed {CHAOS_SEED}: {schedule}")
    cluster = cluster_factory()
    cluster.start()
    wait_all_caught_up(cluster)
    watch = QuorumWatch(cluster)
    creator = TopicCreator(cluster.bootstrap)
    threads = [
        threading.Thread(target=watch.run, daemon=True),
        threading.Thread(target=creator.run, daemon=True),
    ]
    for thread in threads:
        thread.start()
    rng = random.Random(CHAOS_SEED + 1)  # picks among nodes when the plan's choice is not unique
    down: list[int] = []
    executed: list[str] = []
    started = time.monotonic()
    try:
        for delay, action in schedule:
            time.sleep(delay)  # the schedule itself: what happens between two events is the test
            live = [i for i, n in cluster.nodes.items() if n.running]
            if action == "restart":
                node_id = down.pop(0)
                cluster[node_id].start()
                executed.append(f"restart {node_id}")
            else:
                answer = describe_quorum(cluster.live_bootstrap())
                leader = answer[0] if answer is not None and answer[0] in live else None
                if action == "kill-leader" and leader is not None:
                    node_id, what = leader, "the leader"
                else:
                    node_id = rng.choice([i for i in live if i != leader])
                    what = "a follower" if leader is not None else "a voter (no leader known)"
                cluster[node_id].kill()
                down.append(node_id)
                executed.append(f"kill -9 {node_id} ({what})")
            print(f"  {time.monotonic() - started:5.1f} s: {executed[-1]}")
        for node_id in down:
            cluster[node_id].start()
        for node in cluster.nodes.values():
            node.wait_ready(90)
        creator.stop.set()
        threads[1].join(30)
        final = wait_all_caught_up(cluster, 60)
    finally:
        watch.stop.set()
        creator.stop.set()
        for thread in threads:
            thread.join(30)
    print(
        f"acknowledged {len(creator.acknowledged)} topics, {len(creator.failed)} not: {creator.failed[:10]}"
    )
    print(f"epochs and leaders seen: {dict(sorted(watch.leaders.items()))}")
    print(
        f"{len(watch.high_watermarks)} DescribeQuorum answers, {len(watch.committed)} committed batches seen"
    )

    assert not watch.violations, "\n".join(watch.violations)
    agreed = assert_logs_agree(cluster, final.high_watermark)
    watch.saw_committed(agreed, "the final logs")
    for node_id in cluster.nodes:
        for batch in read_metadata_log(cluster.metadata_dir(node_id)):
            if batch.leader_change is not None:
                watch.saw_leader(batch.epoch, batch.leader_change, f"LeaderChange in node {node_id}'s log")
        state = read_quorum_state(cluster.metadata_dir(node_id))
        assert state is not None
        watch.saw_leader(state["leaderEpoch"], state["leaderId"], f"node {node_id}'s final quorum-state")
    assert not watch.violations, "\n".join(watch.violations)
    epochs = [b.epoch for b in agreed]
    assert epochs == sorted(epochs), "the epochs of a log never go down"
    assert len({e for e in epochs}) >= 2, "the schedule changed the leader at least once"
    assert creator.acknowledged, f"no CreateTopics succeeded: {creator.failed[:5]}"
    for node in cluster.nodes.values():
        wait_for(
            f"{node.bootstrap} to list every acknowledged topic",
            lambda node=node: set(creator.acknowledged) <= topic_names(node.bootstrap),
            20,
        )
