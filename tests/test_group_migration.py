"""Classic and consumer groups side by side (KIP-848's migration), with librdkafka's two protocols.

Members of the classic protocol (`group.protocol=classic`) and of the consumer protocol
(`group.protocol=consumer`) share one group as Kafka 4.1 lets them with its default
`group.consumer.migration.policy=bidirectional`: the first consumer-protocol member converts the
classic group into a consumer group (upgrade), classic members keep consuming through JoinGroup,
SyncGroup and Heartbeat served from the consumer group's target assignment, and when the last
consumer-protocol member leaves, the group turns classic again (downgrade). The conversions' records
are in __consumer_offsets (`kcli dump-segment --offsets-decoder`); a rolling upgrade, classic members
replaced one by one, reads every record once; with the policy `disabled` a consumer-protocol member
cannot join a classic group with members. Kafka 4.1.2's Java consumer does the upgrade and downgrade
too (tests/java/KcliClients.java), and kcli's own client checks the classic paths request by request.
On three nodes, an upgraded group keeps its members through a kill -9 of its coordinator's node and is
downgraded by the next coordinator; a conversion whose write the log refuses leaves the group as its
log holds it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import ConfigResource
from conftest import kcli_env
from kio.schema.errors import ErrorCode
from kraft_cluster import admin
from kraft_cluster import create_topic as create_replicated_topic
from test_cluster_clients import find_coordinator, leaders
from test_consumer_group_clients import BROKER_SETTINGS, create_topic, fill
from test_consumer_group_protocol import cached, count, heartbeat, in_process, join, owned_of
from test_groups import commit_request, heartbeat_request, join_request, leave_request, sync_request
from waiting import wait_for

from formats.internal import (
    consumer_protocol_topics,
    encode_consumer_protocol_assignment,
    offsets_partition_for,
)
from kcli.client import KafkaClient
from kcli.protocol.messages import build, nested_type, request_type

pytestmark = pytest.mark.timeout(300)

MEMBER = Path(__file__).parent / "group_member.py"

SETTINGS = [*BROKER_SETTINGS, "group.initial.rebalance.delay.ms=0"]


def classic(
    bootstrap: str,
    group: str,
    topic: str,
    name: str,
    strategy: str = "range,roundrobin",
    session_ms: int = 6000,
) -> Consumer:
    consumer = Consumer(
        {
            "partition.assignment.strategy": strategy,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "client.id": name,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": 500,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    return consumer


def modern(bootstrap: str, group: str, topic: str, name: str) -> Consumer:
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


def poll_all(members: list[Consumer], seconds: float, got: list[str] | None = None) -> list[str]:
    """Poll every member for `seconds`; each record read is committed before the next poll."""
    got = [] if got is None else got
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for consumer in members:
            message = consumer.poll(0.05)
            if message is None:
                continue
            if message.error() is not None:
                continue  # a rebalance's transient errors; librdkafka retries
            got.append(message.value().decode())
            try:
                consumer.commit(message=message, asynchronous=False)
            except KafkaException as e:  # the partition (or the member epoch) moved meanwhile
                got.append(f"uncommitted:{message.value().decode()}:{e}")
    return got


def consume(members: list[Consumer], wanted: set[str], timeout: float = 60) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not wanted <= set(got):
        poll_all(members, 0.5, got)
    return got


def balanced(members: list[Consumer], sizes: list[int], timeout: float = 60) -> None:
    def ok() -> bool:
        for consumer in members:
            assert consumer.poll(0.05) is None, "balanced() polls before anything is produced"
        return sorted(len(c.assignment()) for c in members) == sizes

    wait_for(f"assignments of sizes {sizes}", ok, timeout, 0.05)


def group_type(bootstrap: str, group: str) -> str:
    """The group's type in ListGroups v5 ("classic" or "consumer")."""

    async def listed() -> Any:
        async with await KafkaClient.connect(bootstrap, request_timeout=10) as client:
            return await client.send(build(request_type(16, 5), states_filter=(), types_filter=()))

    response = asyncio.run(listed())
    assert response.error_code == 0
    [found] = [g for g in response.groups if g.group_id == group]
    return str(found.group_type)


def member_types(bootstrap: str, group: str) -> list[int]:
    """ConsumerGroupDescribe v1's MemberType of each member (0 classic, 1 consumer), sorted."""

    async def described() -> Any:
        async with await KafkaClient.connect(bootstrap, request_timeout=10) as client:
            return await client.send(
                build(request_type(69, 1), group_ids=(group,), include_authorized_operations=False)
            )

    [found] = asyncio.run(described()).groups
    assert found.error_code == 0
    return sorted(m.member_type for m in found.members)


def test_upgrade_then_downgrade_keeps_every_member_consuming(broker_factory: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = broker_factory(overrides=SETTINGS, data_dir=data_dir)
    topic, group = f"mig-{uuid.uuid4().hex[:8]}", "mig"
    create_topic(broker.bootstrap, topic, 6)
    members = [classic(broker.bootstrap, group, topic, f"c{i}") for i in range(2)]
    try:
        balanced(members, [3, 3])
        assert group_type(broker.bootstrap, group) == "classic"
        first = fill(broker.bootstrap, topic, 6, 30, start=0)
        assert sorted(consume(members, set(first))) == sorted(first)

        # upgrade: a consumer-protocol member joins the classic group with members
        members.append(modern(broker.bootstrap, group, topic, "m0"))
        balanced(members, [2, 2, 2])
        assert group_type(broker.bootstrap, group) == "consumer"
        described = run_kcli("groups", "describe", "-b", broker.bootstrap, group, "-o", "json")
        assert described.returncode == 0, described.stderr
        found = json.loads(described.stdout.splitlines()[0])
        assert len(found["members"]) == 3
        assert member_types(broker.bootstrap, group) == [0, 0, 1]
        second = fill(broker.bootstrap, topic, 6, 60, start=100)
        read = consume(members, set(second))
        assert sorted(read) == sorted(second)  # each once, the classic members' included

        # downgrade: the last consumer-protocol member leaves a group of classic members
        members.pop().close()
        balanced(members, [3, 3])
        assert group_type(broker.bootstrap, group) == "classic"
        third = fill(broker.bootstrap, topic, 6, 30, start=200)
        assert sorted(consume(members, set(third))) == sorted(third)
    finally:
        for consumer in members:
            consumer.close()
    broker.stop()
    segments = sorted(data_dir.glob("__consumer_offsets-*/*.log"))
    dumped = run_kcli("dump-segment", "--offsets-decoder", *map(str, segments))
    assert dumped.returncode == 0, dumped.stderr
    lines = [line for line in dumped.stdout.splitlines() if f'"{group}"' in line]
    kinds = [k for k in map(_kind, lines) if k is not None and k[0] != "1"]
    # upgrade: the classic group's tombstone, then the consumer group's records (member metadata first)
    upgrade = kinds.index(("2", None))
    assert kinds[upgrade + 1 : upgrade + 3] == [("5", "value"), ("5", "value")]
    assert kinds[upgrade + 3] == ("3", "value")
    # downgrade: the consumer group's tombstones (its metadata last), then the classic group's record
    downgrade = max(i for i, k in enumerate(kinds) if k == ("3", None))
    assert downgrade > upgrade
    assert kinds[downgrade + 1] == ("2", "value")
    assert kinds[downgrade - 1] == ("4", None)


def _kind(line: str) -> tuple[str, str | None] | None:
    """(record type, "value" or None for a tombstone) of a dumped __consumer_offsets record."""
    if "key: {" not in line:
        return None
    key = line.split("key: ", 1)[1]
    record_type = key.split('"type":"', 1)[1].split('"', 1)[0]
    return record_type, None if "payload: <DELETE>" in line else "value"


@pytest.mark.parametrize("strategy", ["range,roundrobin", "cooperative-sticky"])
def test_rolling_upgrade_loses_nothing_and_rereads_only_after_a_refused_commit(
    broker_factory: Any, strategy: str
) -> None:
    """librdkafka's eager default and its cooperative assignor (which reports its owned partitions)."""
    broker = broker_factory(overrides=SETTINGS)
    topic, group = f"roll-{uuid.uuid4().hex[:8]}", "roll"
    create_topic(broker.bootstrap, topic, 6)
    members = [classic(broker.bootstrap, group, topic, f"c{i}", strategy) for i in range(3)]
    produced: list[str] = []
    read: list[str] = []
    try:
        balanced(members, [2, 2, 2])
        for step in range(3):
            batch = fill(broker.bootstrap, topic, 6, 30, start=1000 * step)
            produced += batch
            read += consume(members, set(batch[:15]))  # some read before the swap
            members.pop(0).close()  # the oldest classic member goes, a consumer-protocol one comes
            members.append(modern(broker.bootstrap, group, topic, f"m{step}"))
            read += consume(members, set(batch) - set(read))  # the rest across the rebalance
            balanced(members, [2, 2, 2])
        last = fill(broker.bootstrap, topic, 6, 30, start=9000)
        produced += last
        read += consume(members, set(last))
        read += poll_all(members, 2)  # nothing read twice after the last record either
        assert group_type(broker.bootstrap, group) == "consumer"
    finally:
        for consumer in members:
            consumer.close()
    # A commit racing the member's epoch bump is refused (STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for a
    # classic member whose rejoin the coordinator saw first), as Kafka refuses it; the partition's next
    # reader then starts at the last accepted commit and reads that record again, Kafka's at-least-once.
    # So: nothing lost, and a record read twice only after a refused commit of it.
    reads = Counter(v for v in read if not v.startswith("uncommitted:"))
    refused = Counter(v.split(":")[1] for v in read if v.startswith("uncommitted:"))
    assert sorted(reads) == sorted(produced)
    again = {v: n for v, n in reads.items() if n > 1 + refused[v]}
    assert not again, f"read again with no refused commit to explain it: {again}"


def test_disabled_policy_keeps_a_classic_group_classic(broker_factory: Any) -> None:
    broker = broker_factory(overrides=[*SETTINGS, "group.consumer.migration.policy=disabled"])
    topic, group = f"off-{uuid.uuid4().hex[:8]}", "off"
    create_topic(broker.bootstrap, topic, 2)
    old = classic(broker.bootstrap, group, topic, "c0")
    new = None
    try:
        balanced([old], [2])
        new = modern(broker.bootstrap, group, topic, "m0")
        errors: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not errors:
            message = new.poll(0.2)
            old.poll(0.05)
            if message is not None and message.error() is not None:
                errors.append(message.error().str())
        # librdkafka makes GROUP_ID_NOT_FOUND from ConsumerGroupHeartbeat fatal for the consumer
        assert len(errors) == 1 and "The group id does not exist" in errors[0], errors
        assert len(old.assignment()) == 2 and new.assignment() == []
        assert group_type(broker.bootstrap, group) == "classic"
    finally:
        old.close()
        if new is not None:
            new.close()


# --- request by request, with kcli's own client against a broker in this process ----------------------


def test_classic_member_of_a_consumer_group_request_by_request(tmp_path: Path) -> None:
    """A classic member joins a consumer group: MEMBER_ID_REQUIRED first, then the member epoch as its
    generation; the partition the consumer member still owns reaches it only after the revocation,
    through a REBALANCE_IN_PROGRESS heartbeat and a rejoin; its commits carry its epoch as the
    generation; it leaves with LeaveGroup, which a consumer-protocol member cannot use."""

    async def body(broker: Any, client: KafkaClient) -> None:
        a = await client.send(join("g", "a", ("t",)))
        assert count(owned_of(a)) == 2
        first = await client.send(join_request(9, "g", "", session_ms=5000, topics=("t",)))
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        member_id = first.member_id
        joined = await client.send(join_request(9, "g", member_id, session_ms=5000, topics=("t",)))
        assert (joined.error_code, joined.protocol_type, joined.protocol_name) == (
            ErrorCode.none,
            "consumer",
            "range",
        )
        assert (joined.leader, joined.members) == ("", ())
        group = cached(broker, "g")
        assert joined.generation_id == group.group_epoch == group.members[member_id].member_epoch
        assert group.members[member_id].classic_member_metadata.session_timeout_ms == 5000
        synced = await client.send(sync_request(5, "g", joined.generation_id, member_id, {}))
        assert synced.error_code == ErrorCode.none
        assert consumer_protocol_topics(synced.assignment, subscription=False) == {}  # a still owns it
        beat = await client.send(heartbeat_request(4, "g", joined.generation_id, member_id))
        assert beat.error_code == ErrorCode.none  # waiting for a to release its partition
        # a revokes one partition, then acknowledges it: the partition is free
        a2 = await client.send(heartbeat("g", "a", a.member_epoch, owned=owned_of(a)))
        assert count(owned_of(a2)) == 1
        a3 = await client.send(heartbeat("g", "a", a2.member_epoch, owned=owned_of(a2)))
        assert a3.error_code == ErrorCode.none
        beat = await client.send(heartbeat_request(4, "g", joined.generation_id, member_id))
        assert beat.error_code == ErrorCode.rebalance_in_progress
        rejoined = await client.send(join_request(9, "g", member_id, session_ms=5000, topics=("t",)))
        synced = await client.send(sync_request(5, "g", rejoined.generation_id, member_id, {}))
        assert synced.error_code == ErrorCode.none
        [(topic, partitions)] = consumer_protocol_topics(synced.assignment, subscription=False).items()
        assert topic == "t" and len(partitions) == 1
        assert (
            await client.send(heartbeat_request(4, "g", rejoined.generation_id, member_id))
        ).error_code == ErrorCode.none
        # the checks of Kafka's classic paths into a consumer group
        stale = await client.send(heartbeat_request(4, "g", rejoined.generation_id - 1, member_id))
        assert stale.error_code == ErrorCode.illegal_generation
        other = sync_request(5, "g", rejoined.generation_id, member_id, {}, protocol_name="roundrobin")
        assert (await client.send(other)).error_code == ErrorCode.inconsistent_group_protocol
        unknown = await client.send(heartbeat_request(4, "g", rejoined.generation_id, "nobody"))
        assert unknown.error_code == ErrorCode.unknown_member_id
        # OffsetCommit v8: a classic member's version, its generation the member epoch
        committed = await client.send(
            commit_request(8, "g", {("t", 0): 5}, rejoined.generation_id, member_id)
        )
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        old = await client.send(commit_request(8, "g", {("t", 0): 6}, rejoined.generation_id - 1, member_id))
        assert old.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
        # LeaveGroup: the consumer member cannot use it; the classic member leaves and a takes all
        left = await client.send(leave_request(4, "g", ["a", member_id]))
        assert left.error_code == ErrorCode.none
        assert [m.error_code for m in left.members] == [ErrorCode.unknown_member_id, ErrorCode.none]
        assert set(cached(broker, "g").members) == {"a"}
        back = await client.send(heartbeat("g", "a", a3.member_epoch, owned=owned_of(a2)))
        assert count(owned_of(back)) == 2

    in_process(tmp_path, body, topics={"t": 2})


def test_java_classic_and_consumer_members_upgrade_and_downgrade(broker_factory: Any, tmp_path: Path) -> None:
    """Kafka 4.1.2's Java consumer: a classic member, then a consumer-protocol member in the same group
    (upgrade), every record read once between them, then the consumer-protocol member leaves
    (downgrade) and the classic member takes every partition back."""
    import test_java_clients
    from test_consumer_group_clients import java_steps
    from test_java_clients import MAIN, java

    test_java_clients.require_apache_kafka()
    test_java_clients.require_javac()
    classes = test_java_clients.compile_clients()
    broker = broker_factory(overrides=SETTINGS)
    topic = f"java-mig-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 4)
    values = fill(broker.bootstrap, topic, 4, 40)
    result = java(
        MAIN,
        ["mixedGroup", broker.bootstrap, "java-mixed", topic, "40"],
        tmp_path / "java",
        classpath=[classes],
        timeout=240,
    )
    step = java_steps(result, "mixedGroup")
    assert "error" not in step, step
    assert sorted(step["values"]) == sorted(values)
    assert step["types"] == ["Classic", "Consumer", "Classic"]
    assert step["assignments"] == [2, 2, 4]


def test_killed_consumer_protocol_member_downgrades_at_its_session_timeout(broker_factory: Any) -> None:
    """The last consumer-protocol member is SIGKILLed: at group.consumer.session.timeout.ms the group
    turns classic, and its classic member rebalances to every partition and reads on."""
    broker = broker_factory(overrides=SETTINGS)
    topic, group = f"kill-{uuid.uuid4().hex[:8]}", "kill"
    create_topic(broker.bootstrap, topic, 2)
    old = classic(broker.bootstrap, group, topic, "c0")
    process = None
    try:
        balanced([old], [2])
        process = subprocess.Popen(
            [
                sys.executable,
                str(MEMBER),
                "confluent",
                broker.bootstrap,
                group,
                topic,
                "--protocol",
                "consumer",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=kcli_env(),
        )
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while len(old.assignment()) != 1 and time.monotonic() < deadline:
            assert old.poll(0.05) is None
        assert len(old.assignment()) == 1 and group_type(broker.bootstrap, group) == "consumer"
        process.kill()  # by PID: no leaving heartbeat
        process.wait()
        killed = time.monotonic()
        balanced([old], [2])
        assert time.monotonic() - killed >= 1.0  # not before the broker's session timeout ran out
        assert group_type(broker.bootstrap, group) == "classic"
        values = fill(broker.bootstrap, topic, 2, 20, start=0)
        assert sorted(consume([old], set(values))) == sorted(values)
    finally:
        old.close()
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def test_classic_static_member_replacing_the_last_consumer_member_downgrades(tmp_path: Path) -> None:
    """A consumer-protocol static member steps away (epoch -2); a classic member with its instance id
    joins: the group turns classic at once with the new member in its place, holding its assignment."""

    async def body(broker: Any, client: KafkaClient) -> None:
        s1 = await client.send(join("st", "s1", ("t",), instance_id="i1"))
        assert count(owned_of(s1)) == 2
        other = await client.send(join_request(9, "st", "", instance_id="i2", session_ms=5000, topics=("t",)))
        assert other.error_code == ErrorCode.none
        s1_target = dict(cached(broker, "st").target_assignment["s1"])
        assert sum(len(p) for p in s1_target.values()) == 1
        away = await client.send(heartbeat("st", "s1", -2, instance_id="i1"))
        assert away.error_code == ErrorCode.none
        replacing = await client.send(
            join_request(9, "st", "", instance_id="i1", session_ms=5000, topics=("t",))
        )
        assert replacing.error_code == ErrorCode.none and replacing.member_id != "s1"
        assert group_type_of(broker, "st") == "classic"
        group = broker.node.groups.manager.get_group("st")
        assert group.state.value == "Stable" and set(group.members) == {replacing.member_id, other.member_id}
        synced = await client.send(sync_request(5, "st", replacing.generation_id, replacing.member_id, {}))
        assert synced.error_code == ErrorCode.none
        assert consumer_protocol_topics(synced.assignment, subscription=False) == {
            "t": tuple(sorted(next(iter(s1_target.values()))))
        }

    in_process(tmp_path, body, topics={"t": 2})


async def offsets_max_message_bytes(client: KafkaClient, value: str | None) -> None:
    """Set (or with None delete) __consumer_offsets' max.message.bytes."""
    cls = request_type(44, 1)  # IncrementalAlterConfigs
    config = build(nested_type(cls, "AlterableConfig"), name="max.message.bytes",
                   config_operation=0 if value is not None else 1, value=value)  # fmt: skip
    resource = build(nested_type(cls, "AlterConfigsResource"), resource_type=2,
                     resource_name="__consumer_offsets", configs=(config,))  # fmt: skip
    answer = await client.send(build(cls, resources=(resource,), validate_only=False))
    assert answer.responses[0].error_code == ErrorCode.none, answer


def test_a_refused_upgrade_write_leaves_the_group_as_its_log_holds_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The upgrade's batch is refused (MESSAGE_TOO_LARGE: __consumer_offsets' max.message.bytes set
    below it) after its records were applied: the heartbeat gets UNKNOWN_SERVER_ERROR, as Kafka's
    normalizeException maps it, and the partition's state goes back to what its log holds, as Kafka's runtime reverts to the last
    written offset: the classic group with its member, heartbeating, its offsets kept, and no consumer
    group (before, the cache held an upgraded group the log did not). Once writes are taken again, the
    same heartbeat upgrades the group."""

    async def body(broker: Any, client: KafkaClient) -> None:
        first = await client.send(join_request(9, "r", "", session_ms=5000, topics=("t",)))
        member_id = first.member_id
        joined = await client.send(join_request(9, "r", member_id, session_ms=5000, topics=("t",)))
        both = encode_consumer_protocol_assignment({"t": [0, 1]}, 0)
        synced = await client.send(sync_request(5, "r", joined.generation_id, member_id, {member_id: both}))
        assert synced.error_code == ErrorCode.none
        committed = await client.send(commit_request(8, "r", {("t", 0): 7}, joined.generation_id, member_id))
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none

        await offsets_max_message_bytes(client, "100")
        refused = await client.send(join("r", "a", ("t",)))
        assert refused.error_code == ErrorCode.unknown_server_error, refused

        async def classic_heartbeat() -> ErrorCode:
            beat = await client.send(heartbeat_request(4, "r", joined.generation_id, member_id))
            return beat.error_code

        deadline = time.monotonic() + 10
        while (error := await classic_heartbeat()) == ErrorCode.coordinator_load_in_progress:
            assert time.monotonic() < deadline, "the partition was not loaded again"
            await asyncio.sleep(0.05)
        assert error == ErrorCode.none
        assert group_type_of(broker, "r") == "classic"
        group = broker.node.groups.manager.get_group("r")
        assert set(group.members) == {member_id} and group.state.value == "Stable"
        assert ("t", 0) in group.offsets

        await offsets_max_message_bytes(client, None)
        upgraded = await client.send(join("r", "a", ("t",)))
        assert upgraded.error_code == ErrorCode.none and group_type_of(broker, "r") == "consumer"

    caplog.set_level(logging.WARNING, logger="kcli.broker.group")
    in_process(tmp_path, body, topics={"t": 2})
    assert "a write was refused after its records were applied" in caplog.text


def group_type_of(broker: Any, group_id: str) -> str:
    manager = broker.node.groups.manager
    return "consumer" if group_id in manager.consumer_groups else "classic"


def test_upgraded_group_and_its_classic_member_come_back_after_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The upgrade's records are replayed by the next coordinator: the group is a consumer group whose
    classic member keeps its JoinGroup's session timeout and protocols, and the offsets stay; the load
    counts it once and says nothing of the empty classic group holding its offsets."""
    members: dict[str, str] = {}

    async def before(broker: Any, client: KafkaClient) -> None:
        first = await client.send(join_request(9, "u", "", session_ms=5000, topics=("t",)))
        member_id = first.member_id
        joined = await client.send(join_request(9, "u", member_id, session_ms=5000, topics=("t",)))
        assert joined.error_code == ErrorCode.none and joined.leader == member_id
        both = encode_consumer_protocol_assignment({"t": [0, 1]}, 0)
        synced = await client.send(sync_request(5, "u", joined.generation_id, member_id, {member_id: both}))
        assert synced.error_code == ErrorCode.none
        committed = await client.send(commit_request(8, "u", {("t", 0): 7}, joined.generation_id, member_id))
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        upgraded = await client.send(join("u", "a", ("t",)))  # the first consumer-protocol member
        assert upgraded.error_code == ErrorCode.none
        group = cached(broker, "u")
        assert group.members[member_id].assigned_partitions and group.group_epoch == joined.generation_id + 1
        assert not broker.node.groups.manager.get_group("u").members  # only the offsets' holder is left
        members["classic"] = member_id

    async def after(broker: Any, client: KafkaClient) -> None:
        group = cached(broker, "u")
        classic_member = group.members[members["classic"]]
        assert classic_member.classic_member_metadata is not None
        assert classic_member.classic_member_metadata.session_timeout_ms == 5000
        assert [name for name, _ in classic_member.classic_member_metadata.supported_protocols] == [
            "range",
            "roundrobin",
        ]
        assert not group.members["a"].uses_classic_protocol
        assert group_type_of(broker, "u") == "consumer"
        fetched = await client.send(
            build(
                request_type(9, 8),
                groups=(
                    build(
                        nested_type(request_type(9, 8), "OffsetFetchRequestGroup"),
                        group_id="u",
                        topics=None,
                    ),
                ),
                require_stable=False,
            )
        )
        [partition] = [p for t in fetched.groups[0].topics for p in t.partitions if p.partition_index == 0]
        assert partition.committed_offset == 7

    in_process(tmp_path, before, topics={"t": 2})
    caplog.set_level(logging.INFO, logger="kcli.broker.group")
    in_process(tmp_path, after)
    loads = [r.getMessage() for r in caplog.records if "Finished loading" in r.getMessage()]
    assert any(m.endswith(": 1 group(s), 1 offset(s)") for m in loads), loads
    assert not [r for r in caplog.records if r.getMessage().startswith("Loading group metadata for u ")]


# --- three nodes: the group's coordinator killed between the upgrade and the downgrade ------------------

CLUSTER_SETTINGS = (*SETTINGS, "group.consumer.session.timeout.ms=6000", "min.insync.replicas=2")
"""BROKER_SETTINGS' three __consumer_offsets partitions, heartbeats every 500 ms and 1 s minimum
session, with consumer-protocol sessions of 6 s: on the next coordinator every member's session starts
when the group is loaded, and a member must find that coordinator within it. The cluster's
min.insync.replicas (2) is __consumer_offsets' too, which `kcli cluster start` replicates three times."""
FAILOVER_PARTITIONS = 6
FAILOVER_ASSIGNMENT = [[1 + (p + k) % 3 for k in range(3)] for p in range(FAILOVER_PARTITIONS)]
"""Each node leads two of the data partitions and follows the four others."""
CLASSIC_SESSION_MS = 10_000
"""librdkafka's classic member gives up its member id after a session without a heartbeat answer: it
must outlast the kill, the broker's fencing (4 s) and the load on the next coordinator."""


class Readers:
    """In-process librdkafka members polled in turn by the test's thread. A record read is committed at
    once, synchronously (its offset + 1), before the next poll; `reads` holds (member, partition, offset,
    value, confirmed) for each read, confirmed when that commit succeeded."""

    def __init__(self) -> None:
        self.members: dict[str, Consumer] = {}
        self.reads: list[tuple[str, int, int, str, bool]] = []
        self.errors: list[str] = []

    def poll(self) -> None:
        for name, consumer in list(self.members.items()):
            message = consumer.poll(0.02)
            if message is None:
                continue
            if message.error() is not None:  # transient while the coordinator moves; librdkafka retries
                self.errors.append(f"{name}: {message.error()}")
                continue
            try:
                answer = consumer.commit(message=message, asynchronous=False) or []
                confirmed = all(tp.error is None for tp in answer)
            except KafkaException:  # NOT_COORDINATOR, a stale epoch, the group rebalancing
                confirmed = False
            read = (name, message.partition(), message.offset(), message.value().decode(), confirmed)
            self.reads.append(read)

    def until(self, what: str, check: Any, explain: Any, timeout: float = 60) -> Any:
        def polled() -> Any:
            self.poll()
            return check()

        return wait_for(what, polled, timeout, 0, explain=explain)

    def sizes(self) -> list[int]:
        return sorted(len(c.assignment()) for c in self.members.values())

    def read(self) -> set[tuple[int, int]]:
        return {(p, o) for _, p, o, _, _ in self.reads}

    def close(self, name: str) -> None:
        self.members.pop(name).close()


@pytest.mark.timeout(150)
def test_upgraded_group_keeps_its_members_through_a_coordinator_kill_and_downgrades_on_the_next(
    replicated_cluster: Any,
) -> None:
    """Three nodes; __consumer_offsets of replication factor 3 and min.insync.replicas 2; a 6-partition
    topic of replication factor 3 written with acks=all (idempotent). Two classic members (range) read
    it; two consumer-protocol members join: the group is upgraded on its coordinator (a node that is not
    the active controller). That node is killed -9 while records are produced and read: the next leader
    of the group's __consumer_offsets partition coordinates the group with the same four members (two
    classic, two consumer-protocol, the same member ids and group epoch), which read on. The
    consumer-protocol members then leave one by one: after the first the group is a consumer group of
    three, after the second it is downgraded, on the new coordinator, to a classic group of the two
    classic members, which read the rest; the group ends Stable, committed at the log end.

    Members run in this process, each read committed synchronously before the next poll. The rule:
    every acknowledged record is read, nothing else is; and a record is read more than once only if
    all its reads but one had their commit refused or unanswered (a commit that succeeded moved the
    group past the record for good, on the new coordinator too)."""
    cluster = replicated_cluster(*CLUSTER_SETTINGS)
    controller = cluster.status().leader_id
    wait_for("__consumer_offsets", lambda: find_coordinator(cluster, 0, "warm-up"), 60, 0.25)
    offsets_leaders = wait_for(
        "__consumer_offsets fully replicated",
        lambda: leaders(cluster, "__consumer_offsets", 3, full_isr=True),
        60,
        0.25,
    )
    group = next(
        g
        for g in (f"failover-{i}" for i in range(100))
        if offsets_leaders[offsets_partition_for(g, 3)] != controller
    )
    victim = offsets_leaders[offsets_partition_for(group, 3)]
    assert find_coordinator(cluster, 0, group) == victim
    survivors = [n for n in cluster.nodes if n != victim]
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    client = admin(cluster.bootstrap)
    offsets_configs = client.describe_configs([resource])[resource].result(30)
    assert offsets_configs["min.insync.replicas"].value == "2"
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    create_replicated_topic(cluster.bootstrap, topic, FAILOVER_ASSIGNMENT, **{"min.insync.replicas": "2"})
    wait_for(
        f"{topic} led as assigned with full ISRs",
        lambda: (
            leaders(cluster, topic, FAILOVER_PARTITIONS, full_isr=True)
            == {p: a[0] for p, a in enumerate(FAILOVER_ASSIGNMENT)}
        ),
        60,
        0.25,
    )

    acked: dict[tuple[int, int], str] = {}
    failed: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
        }
    )

    def produce(prefix: str, records: int, pause: float = 0.0) -> None:
        def done(err: Any, msg: Any) -> None:
            if err is None:
                acked[msg.partition(), msg.offset()] = msg.value().decode()
            else:
                failed.append(f"{msg.value()!r}: {err}")

        for i in range(records):
            producer.produce(
                topic, f"{prefix}{i}".encode(), partition=i % FAILOVER_PARTITIONS, on_delivery=done
            )
            producer.poll(0)
            time.sleep(pause)
        assert producer.flush(60) == 0 and not failed, failed[:5]

    readers = Readers()

    def explain() -> str:
        parts = [f"sizes {readers.sizes()}; client errors: {readers.errors[-20:]}"]
        for node in cluster.nodes.values():
            parts.append(f"--- node {node.node_id}:\n" + "\n".join(node.log().splitlines()[-60:]))
        return "\n".join(parts)

    def all_read() -> bool:
        return readers.read() >= set(acked)

    def described() -> dict[str, Any]:
        result = run_kcli("groups", "describe", "-b", cluster.live_bootstrap(), group, "-o", "json")
        assert result.returncode == 0, result.stderr
        [found] = [json.loads(line) for line in result.stdout.splitlines()]
        return found

    def member_ids() -> dict[str, str]:
        return {c.memberid(): name for name, c in readers.members.items()}

    try:
        for name in ("c0", "c1"):
            readers.members[name] = classic(
                cluster.bootstrap, group, topic, name, session_ms=CLASSIC_SESSION_MS
            )
        readers.until("two classic members of 3 partitions", lambda: readers.sizes() == [3, 3], explain)
        assert group_type(cluster[victim].bootstrap, group) == "classic"
        produce("a", 60)
        readers.until("the first records read", all_read, explain)

        # the upgrade: consumer-protocol members join the classic group on the victim
        for name in ("m0", "m1"):
            readers.members[name] = modern(cluster.bootstrap, group, topic, name)
        readers.until("four members of 1, 1, 2, 2", lambda: readers.sizes() == [1, 1, 2, 2], explain)
        assert group_type(cluster[victim].bootstrap, group) == "consumer"
        assert member_types(cluster[victim].bootstrap, group) == [0, 0, 1, 1]
        # the members' sizes settle a heartbeat before their epochs do (Reconciling, seen once in a run)
        before = readers.until(
            "the upgraded group Stable", lambda: (d := described())["state"] == "Stable" and d, explain
        )
        assert before["coordinator"] == victim and before["state"] == "Stable"
        ids = member_ids()
        assert {m["member_id"]: m["upgraded"] for m in before["members"]} == {
            member_id: name.startswith("m") for member_id, name in ids.items()
        }
        produce("b", 60)
        readers.until("the records after the upgrade read", all_read, explain)

        # the coordinator's node is killed -9 while records are produced and read
        producing = threading.Thread(target=produce, args=("c", 150, 0.01))
        producing.start()
        readers.until(
            "records read while producing", lambda: sum(r[3][0] == "c" for r in readers.reads) >= 30, explain
        )
        cluster[victim].kill()
        killed_at = time.monotonic()
        new = wait_for(
            "a new coordinator",
            lambda: (found := find_coordinator(cluster, 0, group)) in survivors and found,
            60,
            0.25,
        )
        readers.until(
            "every record produced across the kill read",
            lambda: not producing.is_alive() and all_read(),
            explain,
        )
        producing.join()
        assert not failed, failed[:5]
        after = described()
        assert after["coordinator"] == new and after["state"] == "Stable"
        assert {m["member_id"]: m["upgraded"] for m in after["members"]} == {
            m["member_id"]: m["upgraded"] for m in before["members"]
        }
        assert after["group_epoch"] == before["group_epoch"]
        assert group_type(cluster[new].bootstrap, group) == "consumer"
        assert member_types(cluster[new].bootstrap, group) == [0, 0, 1, 1]
        assert readers.sizes() == [1, 1, 2, 2]
        produce("d", 60)
        readers.until("the records after the failover read", all_read, explain)
        print(f"coordinator {victim} killed, {new} took over; {time.monotonic() - killed_at:.1f} s to here")

        # the consumer-protocol members leave: the group is downgraded on the new coordinator
        readers.close("m1")
        readers.until("three members of 2 partitions", lambda: readers.sizes() == [2, 2, 2], explain)
        assert group_type(cluster[new].bootstrap, group) == "consumer"
        assert member_types(cluster[new].bootstrap, group) == [0, 0, 1]
        readers.close("m0")
        readers.until("the two classic members of 3 partitions", lambda: readers.sizes() == [3, 3], explain)
        assert group_type(cluster[new].bootstrap, group) == "classic"
        produce("e", 60)
        readers.until("the records after the downgrade read", all_read, explain)
        final = readers.until(
            "a Stable classic group committed at the log end",
            lambda: (found := described())["state"] == "Stable" and found["total_lag"] == 0 and found,
            explain,
            30,
        )
        assert (final["coordinator"], final["protocol_type"], final["protocol"]) == (new, "consumer", "range")
        assert sorted(m["member_id"] for m in final["members"]) == sorted(
            i for i, name in ids.items() if name.startswith("c")
        )
    finally:
        for name in list(readers.members):
            readers.close(name)

    every_read = Counter((p, o) for _, p, o, _, _ in readers.reads)
    assert set(every_read) == set(acked)  # every acknowledged record read, nothing else
    assert all(acked[p, o] == v for _, p, o, v, _ in readers.reads)
    refused = Counter((p, o) for _, p, o, _, confirmed in readers.reads if not confirmed)
    twice = {r: n for r, n in every_read.items() if n - refused[r] > 1}
    assert not twice, f"read again after a confirmed commit: {sorted(twice)[:10]}"
    print(f"{len(readers.reads)} reads of {len(acked)} records; {sum(refused.values())} commits refused")
    for node in cluster.nodes.values():
        assert "Traceback" not in node.log(), f"node {node.node_id}:\n{node.log()}"
