"""Consumer groups with the stock clients against a real broker process.

Each member is its own process (tests/group_member.py) so it can be killed with SIGKILL, which is what
a crashed consumer looks like to the coordinator: no LeaveGroup, just heartbeats that stop. Members
commit after every record, so "nothing consumed twice" is checked exactly: after a rebalance each
new owner starts at the committed offset.

A wait that times out says why: the failure message carries each member's stderr (its client's group
coordinator logs at DEBUG) and the tail of the broker's log.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import count

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import REPO, BrokerProcess, kcli_env
from waiting import wait_for

SESSION_MS = 6000
MEMBER = REPO / "tests" / "group_member.py"
FAST = ["group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=4"]
MEMBER_LOG_LINES = 400
BROKER_LOG_LINES = 80
_member_numbers = count()


def test_three_confluent_consumers_share_six_partitions_and_survive_a_kill(broker_factory) -> None:
    broker = broker_factory(overrides=FAST)
    create_topic(broker, "orders", 6)
    produce(broker, "orders", 6, per_partition=10)
    members = [Member("confluent", broker, "shop", "orders") for _ in range(3)]
    wait = waiter(broker, members)
    try:
        wait(lambda: balanced(members, 6, 3), "three members holding two partitions each")
        wait(lambda: consumed_count(members) == 60, "the first 60 records")
        victim = members[0]
        orphaned = victim.assigned
        killed_at = time.monotonic()
        victim.kill()
        produce(broker, "orders", 6, per_partition=10)
        survivors = members[1:]
        wait(
            lambda: all((p, o) in consumed(survivors) for p in orphaned for o in range(10, 20)),
            "the victim's partitions consumed by the others",
            timeout=SESSION_MS / 1000 + 10,
        )
        moved_after = time.monotonic() - killed_at
        # Detection takes the session timeout from the last heartbeat; the rebalance itself is quick.
        assert moved_after < SESSION_MS / 1000 + 3, moved_after
        wait(lambda: consumed_count(members) == 120, "all 120 records")
        # a survivor's last assignment line may come a moment after the records it read (seen once
        # under a 6-worker run's load): wait for it rather than look once
        wait(lambda: balanced(survivors, 6, 2), "the two survivors holding three partitions each")
        counts = Counter(pair for m in members for pair in m.consumed)
        assert set(counts) == {(p, o) for p in range(6) for o in range(20)}
        assert max(counts.values()) == 1, "a record was consumed twice"
    finally:
        for member in members:
            member.stop()


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients_join_consume_commit_and_rejoin(broker_factory, client: str) -> None:
    broker = broker_factory(overrides=FAST)
    create_topic(broker, "events", 4)
    produce(broker, "events", 4, per_partition=5)
    first = Member(client, broker, "py", "events")
    members = [first]
    wait = waiter(broker, members)
    try:
        wait(lambda: first.assigned == [0, 1, 2, 3], "the only member owning every partition")
        wait(lambda: consumed_count([first]) == 20, "the first 20 records")
        second = Member(client, broker, "py", "events")
        members.append(second)
        wait(lambda: balanced(members, 4, 2), "two members sharing four partitions")
        first.stop()  # a clean close: LeaveGroup, the other takes everything at once
        wait(lambda: second.assigned == [0, 1, 2, 3], "the survivor owning every partition")
        produce(broker, "events", 4, per_partition=5)
        wait(lambda: consumed_count(members) == 40, "all 40 records")
        counts = Counter(pair for m in members for pair in m.consumed)
        assert max(counts.values()) == 1 and len(counts) == 40
    finally:
        for member in members:
            member.stop()


def test_kafka_python_member_with_a_1ms_poll_timer_gets_its_partitions(broker_factory) -> None:
    """The flaky failure of the test above, made certain: a poll timer shorter than a JoinGroup round trip.

    kafka-python 3.0 hangs if a rejoin that only new topic metadata asked for is still in flight when its
    poll timer runs out (see tests/group_member.py). The member learns its topic's partitions before it
    joins, so its first assignment is complete and metadata never makes it rejoin.
    """
    broker = broker_factory(overrides=FAST)
    create_topic(broker, "ticks", 4)
    produce(broker, "ticks", 4, per_partition=2)
    member = Member("kafka-python", broker, "tick", "ticks", poll_ms=1)
    members = [member]
    wait = waiter(broker, members)
    try:
        wait(lambda: member.assigned == [0, 1, 2, 3], "the member owning every partition")
        wait(lambda: consumed_count(members) == 8, "the 8 records")
        assert "assignment_snapshot != metadata_snapshot" not in member.log()
    finally:
        member.stop()


def test_kafka_python_and_aiokafka_in_one_group_agree_on_roundrobin(broker_factory) -> None:
    """kafka-python offers range and roundrobin, aiokafka only roundrobin: the group selects roundrobin."""
    broker = broker_factory(overrides=FAST)
    create_topic(broker, "mixed", 4)
    produce(broker, "mixed", 4, per_partition=3)
    members = [Member("kafka-python", broker, "mix", "mixed"), Member("aiokafka", broker, "mix", "mixed")]
    wait = waiter(broker, members)
    try:
        wait(lambda: balanced(members, 4, 2), "two members sharing four partitions")
        wait(lambda: consumed_count(members) == 12, "the 12 records")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        group = admin.describe_consumer_groups(["mix"])["mix"].result()
        assert len(group.members) == 2
        assert group.partition_assignor == "roundrobin"
        assert str(group.state).endswith("STABLE")
    finally:
        for member in members:
            member.stop()


def test_static_confluent_member_restarts_without_a_rebalance(broker_factory) -> None:
    broker = broker_factory(overrides=FAST)
    create_topic(broker, "static", 2)
    produce(broker, "static", 2, per_partition=3)
    first = Member("confluent", broker, "st", "static", instance_id="node-a")
    other = Member("confluent", broker, "st", "static", instance_id="node-b")
    members = [first, other]
    wait = waiter(broker, members)
    try:
        wait(lambda: balanced(members, 2, 2), "two static members with one partition each")
        wait(lambda: consumed_count(members) == 6, "the six records")
        kept = first.assigned
        seen_by_other = list(other.assignments)
        first.kill()  # static members never send LeaveGroup; a restart within the session keeps its place
        restarted = Member("confluent", broker, "st", "static", instance_id="node-a")
        members.append(restarted)
        wait(lambda: restarted.assigned == kept, "the restarted instance holding its old partition")
        assert other.assignments == seen_by_other  # the other member never saw a rebalance
        produce(broker, "static", 2, per_partition=3)
        wait(lambda: consumed_count(members) == 12, "all 12 records")
        counts = Counter(pair for m in members for pair in m.consumed)
        assert max(counts.values()) == 1
    finally:
        for member in members:
            member.stop()


# --- helpers ---------------------------------------------------------------------------------------------


class Member:
    """A group member process and what it has reported so far."""

    def __init__(
        self,
        client: str,
        broker: BrokerProcess,
        group: str,
        topic: str,
        *,
        instance_id: str | None = None,
        poll_ms: int | None = None,
    ) -> None:
        args = [
            sys.executable,
            str(MEMBER),
            client,
            broker.bootstrap,
            group,
            topic,
            "--session-ms",
            str(SESSION_MS),
        ]
        if instance_id:
            args += ["--instance-id", instance_id]
        if poll_ms is not None:
            args += ["--poll-ms", str(poll_ms)]
        self.client = client
        self.log_path = broker.log_path.parent / f"member-{next(_member_numbers)}-{client}.log"
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                env=kcli_env(),
            )
        self.assignments: list[list[int]] = []
        self.consumed: list[tuple[int, int]] = []
        self._events: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._events.put(json.loads(line))

    def drain(self) -> None:
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if "assigned" in event:
                self.assignments.append(event["assigned"])
            else:
                self.consumed.append(tuple(event["consumed"]))

    def log(self) -> str:
        """Everything the member wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    @property
    def assigned(self) -> list[int]:
        self.drain()
        return self.assignments[-1] if self.assignments else []

    def kill(self) -> None:
        self.process.kill()  # SIGKILL by PID: no LeaveGroup
        self.process.wait()
        self.drain()

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write("stop\n")
                self.process.stdin.close()
                self.process.wait(20)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.drain()


def consumed(members: list[Member]) -> set[tuple[int, int]]:
    for member in members:
        member.drain()
    return {pair for m in members for pair in m.consumed}


def consumed_count(members: list[Member]) -> int:
    for member in members:
        member.drain()
    return sum(len(m.consumed) for m in members)


def balanced(members: list[Member], partitions: int, count: int) -> bool:
    """`count` live members, each with partitions/count partitions, together all of them, no overlap."""
    live = [m for m in members if m.process.poll() is None]
    owned = [m.assigned for m in live]
    flat = [p for parts in owned for p in parts]
    return (
        len(live) == count
        and sorted(flat) == list(range(partitions))
        and all(len(parts) == partitions // count for parts in owned)
    )


def waiter(broker: BrokerProcess, members: Sequence[Member]) -> Callable[..., None]:
    """`wait_for` whose timeout message explains itself with these members' and the broker's logs."""

    def wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        wait_for(what, condition, timeout, interval=0.05, explain=lambda: diagnostics(broker, members))

    return wait


def diagnostics(broker: BrokerProcess, members: Sequence[Member]) -> str:
    """What each member reported and logged, then the end of the broker's log."""
    parts = []
    for number, member in enumerate(members):
        member.drain()
        status = member.process.poll()
        parts.append(
            f"--- member {number} ({member.client}, pid {member.process.pid}, "
            f"{'running' if status is None else f'exited {status}'}): assignments {member.assignments}, "
            f"{len(member.consumed)} consumed; last {MEMBER_LOG_LINES} lines of stderr:\n"
            + tail(member.log(), MEMBER_LOG_LINES)
        )
    parts.append(
        f"--- broker (last {BROKER_LOG_LINES} lines of its log):\n" + tail(broker.log(), BROKER_LOG_LINES)
    )
    return "\n".join(parts)


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()


def produce(broker: BrokerProcess, topic: str, partitions: int, *, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(20) == 0
