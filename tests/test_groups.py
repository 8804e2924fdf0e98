"""The group coordinator's protocol, request by request, with kcli's own client.

Each test runs a broker in this process (so group timeouts can be set far below Kafka's minimums and
the coordinator's state can be looked at) and opens one connection per member, since a broker
answers one request at a time per connection and a JoinGroup may stay parked. Every version kio has
is sent where versions differ. The restart tests at the end use real broker processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import struct
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, start_broker, stop_cleanly
from kio.schema.errors import ErrorCode
from waiting import wait_for_async

from formats.internal import offsets_partition_for
from kcli.broker.group.group import GroupState
from kcli.broker.server import Broker
from kcli.client import KafkaClient
from kcli.config import BrokerConfig
from kcli.protocol.messages import build, kio_versions, nested_type, request_type

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 15, 16, 42, 8, 9, 47
CREATE_TOPICS, DELETE_TOPICS = 19, 20
MS = datetime.timedelta(milliseconds=1)
FAST_GROUPS = {
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",
}


# --- placement ------------------------------------------------------------------------------------------


def test_find_coordinator_every_version_creates_the_offsets_topic(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        assert broker.node is not None and broker.node.image.topic("__consumer_offsets") is None
        for version in versions(FIND_COORDINATOR):
            if version >= 4:
                response = await client.send(
                    req(FIND_COORDINATOR, version, key_type=0, coordinator_keys=("g1", "g2"))
                )
                assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in response.coordinators] == [
                    ("g1", ErrorCode.none, 1, host, int(port)),
                    ("g2", ErrorCode.none, 1, host, int(port)),
                ]
                response = await client.send(
                    req(FIND_COORDINATOR, version, key_type=7, coordinator_keys=("x",))
                )
                assert response.coordinators[0].error_code == ErrorCode.invalid_request
                continue
            response = await client.send(req(FIND_COORDINATOR, version, key="g1", key_type=0))
            assert (response.error_code, response.node_id, response.host, response.port) == (
                ErrorCode.none,
                1,
                host,
                int(port),
            )
            if version >= 1:
                # A transactional id's coordinator: this node too (__transaction_state is created on demand).
                response = await client.send(req(FIND_COORDINATOR, version, key="t1", key_type=1))
                assert (response.error_code, response.node_id, response.host, response.port) == (
                    ErrorCode.none,
                    1,
                    host,
                    int(port),
                )
        topic = broker.node.image.topic("__consumer_offsets")
        assert topic is not None and topic.is_internal and len(topic.partitions) == 5
        config = broker.node.image.topic_config("__consumer_offsets")
        assert config["cleanup.policy"] == "compact"
        assert config["segment.bytes"] == str(100 * 1024 * 1024)

    in_process(tmp_path, body, FAST_GROUPS)


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------------


def test_join_every_version_member_id_required_from_v4(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        for version in versions(JOIN_GROUP):
            group = f"join-v{version}"
            response = await client.send(join_request(version, group, ""))
            if version >= 4:
                assert response.error_code == ErrorCode.member_id_required
                assert response.member_id.startswith("kcli-") and response.generation_id == -1
                assert response.members == () and response.leader == ""
                response = await client.send(join_request(version, group, response.member_id))
            assert response.error_code == ErrorCode.none
            assert response.generation_id == 1
            assert response.leader == response.member_id
            assert response.protocol_name == "range"
            if version >= 7:
                assert response.protocol_type == "consumer"
            assert [(m.member_id, m.metadata) for m in response.members] == [
                (response.member_id, subscription("orders"))
            ]
            sync = await client.send(
                sync_request(
                    max(0, min(version, 5)), group, 1, response.member_id, {response.member_id: b"A"}
                )
            )
            assert (sync.error_code, sync.assignment) == (ErrorCode.none, b"A")

    in_process(tmp_path, body, FAST_GROUPS)


def test_join_rejections(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        v = versions(JOIN_GROUP)[-1]
        response = await client.send(join_request(v, "", ""))
        assert response.error_code == ErrorCode.invalid_group_id
        response = await client.send(join_request(v, "g", "", session_ms=99))
        assert response.error_code == ErrorCode.invalid_session_timeout
        response = await client.send(join_request(v, "g", "", session_ms=1800001))
        assert response.error_code == ErrorCode.invalid_session_timeout
        response = await client.send(join_request(v, "no-such-group", "someone"))
        assert (response.error_code, response.member_id) == (ErrorCode.unknown_member_id, "someone")
        member_id, generation = await join_alone(client, "g")
        response = await client.send(join_request(v, "g", "", protocol_type="connect"))
        assert response.error_code == ErrorCode.inconsistent_group_protocol
        response = await client.send(join_request(v, "g", "", protocols=[("other", b"")]))
        assert response.error_code == ErrorCode.inconsistent_group_protocol
        sync = await client.send(sync_request(5, "g", generation, member_id, {}, protocol_name="roundrobin"))
        assert sync.error_code == ErrorCode.inconsistent_group_protocol

    in_process(tmp_path, body, FAST_GROUPS)


def test_rebalance_generations_and_fencing(tmp_path: Path) -> None:
    """Two members: the follower waits for the leader's SyncGroup, assignments pass through untouched,
    and a stale generation or unknown member is refused with Kafka's codes."""

    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as a, connect(bootstrap) as b:
            first_id, _ = await join_alone(a, "g")
            # B asks to join: the group rebalances; A learns it through its heartbeat and rejoins.
            b_id = (await b.send(join_request(9, "g", ""))).member_id
            b_join = b.send_nowait(join_request(9, "g", b_id))
            await wait_for_async(
                "g preparing a rebalance",
                lambda: state(broker, "g") is GroupState.PREPARING_REBALANCE,
                5,
                interval=0.01,
            )
            assert (await a.send(heartbeat_request(4, "g", 1, first_id))).error_code == (
                ErrorCode.rebalance_in_progress
            )
            # A commit from the revocation callback still works while preparing.
            commit = await a.send(
                commit_request(9, "g", {("orders", 0): 5}, generation=1, member_id=first_id)
            )
            assert errors_of(commit) == {("orders", 0): ErrorCode.none}
            a_join = await a.send(join_request(9, "g", first_id))
            b_joined = await b_join
            assert a_join.generation_id == b_joined.generation_id == 2
            leader, follower = (a, b) if a_join.leader == first_id else (b, a)
            leader_id = a_join.leader
            follower_id = b_id if leader_id == first_id else first_id
            leader_view = a_join if leader is a else b_joined
            assert sorted(m.member_id for m in leader_view.members) == sorted([first_id, b_id])
            assert (b_joined if leader is a else a_join).members == ()
            # Committing with the new generation before the assignment is known: finish the rebalance first.
            commit = await follower.send(commit_request(9, "g", {("orders", 0): 6}, 2, follower_id))
            assert errors_of(commit) == {("orders", 0): ErrorCode.rebalance_in_progress}
            follower_sync = follower.send_nowait(sync_request(5, "g", 2, follower_id, {}))
            await asyncio.sleep(0.05)
            assert not follower_sync.done()
            leader_sync = await leader.send(
                sync_request(5, "g", 2, leader_id, {leader_id: b"\x00\x01opaque"})
            )
            assert (leader_sync.error_code, leader_sync.assignment) == (ErrorCode.none, b"\x00\x01opaque")
            follower_synced = await follower_sync
            assert (follower_synced.error_code, follower_synced.assignment) == (ErrorCode.none, b"")
            assert follower_synced.protocol_name == "range"
            assert state(broker, "g") is GroupState.STABLE
            for version in versions(HEARTBEAT):
                assert (
                    await a.send(heartbeat_request(version, "g", 2, first_id))
                ).error_code == ErrorCode.none
                assert (await a.send(heartbeat_request(version, "g", 1, first_id))).error_code == (
                    ErrorCode.illegal_generation
                )
                assert (await a.send(heartbeat_request(version, "g", 2, "nobody"))).error_code == (
                    ErrorCode.unknown_member_id
                )
            sync = await a.send(sync_request(5, "g", 1, first_id, {}))
            assert sync.error_code == ErrorCode.illegal_generation
            commit = await a.send(commit_request(9, "g", {("orders", 0): 7}, 1, first_id))
            assert errors_of(commit) == {("orders", 0): ErrorCode.illegal_generation}
            commit = await a.send(commit_request(9, "g", {("orders", 0): 7}, -1, ""))
            assert errors_of(commit) == {("orders", 0): ErrorCode.unknown_member_id}
            # A follower rejoining with the same metadata gets the current generation, no rebalance.
            again = await follower.send(join_request(9, "g", follower_id))
            assert (again.error_code, again.generation_id, again.leader) == (ErrorCode.none, 2, leader_id)
            assert state(broker, "g") is GroupState.STABLE

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 2})


def test_session_expiry_and_leave_group(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as a, connect(bootstrap) as b:
            a_id, _ = await join_alone(a, "g", session_ms=300)
            b_id = (await b.send(join_request(9, "g", "", session_ms=60000))).member_id
            b_join = b.send_nowait(join_request(9, "g", b_id, session_ms=60000, rebalance_ms=60000))
            # A never rejoins: the join phase waits for the rebalance timeout... but A's session ends
            # first (300 ms), it is removed, and B alone forms generation 2.
            joined = await asyncio.wait_for(b_join, 5)
            assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 2, b_id)
            assert (
                await a.send(heartbeat_request(4, "g", 1, a_id))
            ).error_code == ErrorCode.unknown_member_id
            await b.send(sync_request(5, "g", 2, b_id, {b_id: b"x"}))
            # LeaveGroup v0 with an unknown member; v3+ batches report per member.
            assert (await b.send(leave_request(0, "g", ["nobody"]))).error_code == ErrorCode.unknown_member_id
            left = await b.send(leave_request(5, "g", [b_id, "nobody"]))
            assert left.error_code == ErrorCode.none
            assert [(m.member_id, m.error_code) for m in left.members] == [
                (b_id, ErrorCode.none),
                ("nobody", ErrorCode.unknown_member_id),
            ]
            assert state(broker, "g") is GroupState.EMPTY
            assert group(broker, "g").generation_id == 3
            left = await b.send(leave_request(1, "no-such-group", ["x"]))
            assert left.error_code == ErrorCode.unknown_member_id

    in_process(tmp_path, body, FAST_GROUPS)


def test_pending_member_expires_and_unblocks_the_join(tmp_path: Path) -> None:
    """A MEMBER_ID_REQUIRED id holds up early completion until its session timeout has passed."""

    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as a:
            a_id, _ = await join_alone(a, "g", session_ms=10000)
            pending = (await client.send(join_request(9, "g", "", session_ms=200))).member_id
            assert pending in group(broker, "g").pending_members
            started = asyncio.get_running_loop().time()
            rejoined = await a.send(join_request(9, "g", a_id, session_ms=10000))  # leader rejoin: rebalance
            elapsed = asyncio.get_running_loop().time() - started
            assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [a_id]
            assert elapsed >= 0.15
            assert pending not in group(broker, "g").pending_members

    in_process(tmp_path, body, FAST_GROUPS)


def test_initial_rebalance_delay_gathers_members(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as a, connect(bootstrap) as b:
            loop = asyncio.get_running_loop()
            started = loop.time()
            a_join = a.send_nowait(join_request(3, "g", ""))  # v3: no MEMBER_ID_REQUIRED round trip
            await asyncio.sleep(0.1)
            b_join = b.send_nowait(join_request(3, "g", ""))
            first, second = await asyncio.gather(a_join, b_join)
            assert loop.time() - started >= 0.3
            assert first.generation_id == second.generation_id == 1
            assert len(first.members) + len(second.members) == 2

    in_process(tmp_path, body, {**FAST_GROUPS, "group.initial.rebalance.delay.ms": "300"})


def test_static_member_replacement_fences_the_old_instance(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as old, connect(bootstrap) as new:
            joined = await old.send(join_request(5, "g", "", instance_id="i-1"))
            assert joined.error_code == ErrorCode.none  # static members never get MEMBER_ID_REQUIRED
            old_id = joined.member_id
            assert old_id.startswith("i-1-")
            await old.send(sync_request(3, "g", 1, old_id, {old_id: b"P0"}, instance_id="i-1"))
            # The same instance restarts: a new member id, the assignment kept, no rebalance.
            replaced = await new.send(join_request(5, "g", "", instance_id="i-1"))
            new_id = replaced.member_id
            assert (replaced.error_code, replaced.generation_id) == (ErrorCode.none, 1)
            assert new_id != old_id and replaced.leader == old_id  # before v9: the old leader id
            assert state(broker, "g") is GroupState.STABLE
            sync = await new.send(sync_request(3, "g", 1, new_id, {}, instance_id="i-1"))
            assert (sync.error_code, sync.assignment) == (ErrorCode.none, b"P0")
            fenced = await old.send(heartbeat_request(3, "g", 1, old_id, instance_id="i-1"))
            assert fenced.error_code == ErrorCode.fenced_instance_id
            commit = await old.send(commit_request(7, "g", {("orders", 0): 1}, 1, old_id, instance_id="i-1"))
            assert errors_of(commit) == {("orders", 0): ErrorCode.fenced_instance_id}
            # v9 tells a restarted static leader it leads, and to skip the assignor.
            again = await old.send(join_request(9, "g", "", instance_id="i-1"))
            assert (again.leader, again.skip_assignment) == (again.member_id, True)
            assert [m.group_instance_id for m in again.members] == ["i-1"]
            # An admin removes the instance by its id alone.
            left = await client.send(leave_request(5, "g", [""], instance_ids=["i-1"]))
            assert [m.error_code for m in left.members] == [ErrorCode.none]
            assert state(broker, "g") is GroupState.EMPTY

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1})


def test_group_max_size(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as a:
            await join_alone(a, "g")
            refused = await client.send(join_request(3, "g", ""))
            assert (refused.error_code, refused.member_id) == (ErrorCode.group_max_size_reached, "")

    in_process(tmp_path, body, {**FAST_GROUPS, "group.max.size": "1"})


# --- offsets ------------------------------------------------------------------------------------------


def test_offset_commit_and_fetch_every_version(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        topic_id = broker.node.image.topic_id("orders")  # type: ignore[union-attr]
        for version in versions(OFFSET_COMMIT):
            group_id = f"simple-v{version}"
            metadata = "Hello\0world!"
            commit = await client.send(
                commit_request(
                    version,
                    group_id,
                    {("orders", 0): 42, ("orders", 9): 1, ("nope", 0): 1},
                    metadata=metadata,
                    topic_ids={"orders": topic_id},
                )
            )
            expected = {("orders", 0): ErrorCode.none, ("orders", 9): ErrorCode.unknown_topic_or_partition}
            expected[("nope", 0)] = (
                ErrorCode.unknown_topic_id if version >= 10 else ErrorCode.unknown_topic_or_partition
            )
            names = {topic_id: "orders", uuid.uuid5(uuid.NAMESPACE_DNS, "nope"): "nope"}
            assert errors_of(commit, names) == expected
            fetched = await client.send(fetch_request(9, {group_id: {"orders": [0, 1]}}))
            assert offsets_of(fetched)[group_id] == {
                ("orders", 0): (42, metadata, ErrorCode.none),
                ("orders", 1): (-1, "", ErrorCode.none),
            }
        for version in versions(OFFSET_FETCH):
            fetched = await client.send(
                fetch_request(version, {"simple-v8": {"orders": [0]}}, topic_ids={"orders": topic_id})
            )
            assert offsets_of(fetched, {topic_id: "orders"}, group="simple-v8") == {
                "simple-v8": {("orders", 0): (42, "Hello\0world!", ErrorCode.none)}
            }
            if version >= 2:
                every = await client.send(fetch_request(version, {"simple-v8": None}))
                assert offsets_of(every, {topic_id: "orders"}, group="simple-v8") == {
                    "simple-v8": {("orders", 0): (42, "Hello\0world!", ErrorCode.none)}
                }
        several = await client.send(
            fetch_request(8, {"simple-v2": None, "simple-v3": {"orders": [0]}, "": None})
        )
        assert offsets_of(several) == {
            "simple-v2": {("orders", 0): (42, "Hello\0world!", ErrorCode.none)},
            "simple-v3": {("orders", 0): (42, "Hello\0world!", ErrorCode.none)},
            "": {},
        }
        # One oversized metadata string fails that partition only.
        commit = await client.send(
            commit_request(
                9, "sizes", {("orders", 0): 1, ("orders", 1): 2}, metadata={("orders", 1): "x" * 4097}
            )
        )
        assert errors_of(commit) == {
            ("orders", 0): ErrorCode.none,
            ("orders", 1): ErrorCode.offset_metadata_too_large,
        }
        # A commit-only group exists, Empty with no protocol type.
        listed = await client.send(req(LIST_GROUPS, 4, states_filter=()))
        assert ("simple-v9", "", "Empty") in {
            (g.group_id, g.protocol_type, g.group_state) for g in listed.groups
        }
        described = await client.send(
            req(DESCRIBE_GROUPS, 5, groups=("simple-v9",), include_authorized_operations=False)
        )
        assert (described.groups[0].group_state, described.groups[0].protocol_type) == ("Empty", "")
        # A commit claiming a generation for a group that does not exist.
        commit = await client.send(
            commit_request(9, "ghost", {("orders", 0): 1}, generation=3, member_id="m")
        )
        assert errors_of(commit) == {("orders", 0): ErrorCode.illegal_generation}

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 2})


def test_require_stable_and_loading(tmp_path: Path) -> None:
    """While a partition loads: most APIs answer LOAD_IN_PROGRESS, Heartbeat NONE and SyncGroup
    REBALANCE_IN_PROGRESS; a pending transactional offset is UNSTABLE_OFFSET_COMMIT with RequireStable."""

    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        coordinator = broker.node.groups  # type: ignore[union-attr]
        await client.send(commit_request(9, "g", {("orders", 0): 3}))
        group_state = coordinator.manager.get_group("g")
        from kcli.broker.group.group import CommitRecord, OffsetAndMetadata

        pending = OffsetAndMetadata(9, -1, "", 0)
        group_state.prepare_txn_offset_commit(77, {("orders", 0): pending})
        group_state.on_txn_offset_commit_append(77, ("orders", 0), CommitRecord(1, pending))
        stable = await client.send(fetch_request(7, {"g": {"orders": [0]}}, require_stable=True))
        assert offsets_of(stable)["g"] == {("orders", 0): (-1, "", ErrorCode.unstable_offset_commit)}
        loose = await client.send(fetch_request(7, {"g": {"orders": [0]}}))
        assert offsets_of(loose)["g"] == {("orders", 0): (3, "", ErrorCode.none)}
        coordinator.on_transaction_completed(77, is_commit=True)
        stable = await client.send(fetch_request(8, {"g": {"orders": [0]}}, require_stable=True))
        assert offsets_of(stable)["g"] == {("orders", 0): (9, "", ErrorCode.none)}

        partition = coordinator.partition_for("g")
        coordinator.manager.loading_partitions.add(partition)
        try:
            assert (
                await client.send(join_request(9, "g", ""))
            ).error_code == ErrorCode.coordinator_load_in_progress
            assert (await client.send(heartbeat_request(4, "g", 1, "m"))).error_code == ErrorCode.none
            sync = await client.send(sync_request(5, "g", 1, "m", {}))
            assert sync.error_code == ErrorCode.rebalance_in_progress
            fetched = await client.send(fetch_request(7, {"g": {"orders": [0]}}))
            assert fetched.error_code == ErrorCode.coordinator_load_in_progress
            fetched = await client.send(fetch_request(1, {"g": {"orders": [0]}}))
            assert offsets_of(fetched)["g"] == {
                ("orders", 0): (-1, "", ErrorCode.coordinator_load_in_progress)
            }
            listed = await client.send(req(LIST_GROUPS, 4, states_filter=()))
            assert listed.error_code == ErrorCode.coordinator_load_in_progress and listed.groups
        finally:
            coordinator.manager.loading_partitions.discard(partition)

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1})


def test_delete_groups_and_offset_delete(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as a:
            member_id, generation = await join_alone(a, "live", topics=("orders",))
            commit = await a.send(
                commit_request(9, "live", {("orders", 0): 1, ("other", 0): 2}, generation, member_id)
            )
            assert set(errors_of(commit).values()) == {ErrorCode.none}
            deleted = await client.send(req(DELETE_GROUPS, 2, groups_names=("live", "unknown")))
            assert {r.group_id: r.error_code for r in deleted.results} == {
                "live": ErrorCode.non_empty_group,
                "unknown": ErrorCode.group_id_not_found,
            }
            removed = await client.send(
                offset_delete_request("live", {"orders": [0], "other": [0], "gone": [0]})
            )
            assert removed.error_code == ErrorCode.none
            assert {
                (t.name, p.partition_index): p.error_code for t in removed.topics for p in t.partitions
            } == {
                ("orders", 0): ErrorCode.group_subscribed_to_topic,
                ("other", 0): ErrorCode.none,
                ("gone", 0): ErrorCode.unknown_topic_or_partition,
            }
            fetched = await client.send(fetch_request(8, {"live": None}))
            assert offsets_of(fetched)["live"] == {("orders", 0): (1, "", ErrorCode.none)}
            missing = await client.send(offset_delete_request("unknown", {"orders": [0]}))
            assert (missing.error_code, missing.topics) == (ErrorCode.group_id_not_found, ())
            await a.send(leave_request(3, "live", [member_id]))
        for version in versions(DELETE_GROUPS):
            await client.send(commit_request(9, f"gone-{version}", {("orders", 0): 1}))
            deleted = await client.send(req(DELETE_GROUPS, version, groups_names=(f"gone-{version}",)))
            assert deleted.results[0].error_code == ErrorCode.none
        deleted = await client.send(req(DELETE_GROUPS, 2, groups_names=("live",)))
        assert deleted.results[0].error_code == ErrorCode.none
        assert broker.node.groups.manager.get_group("live") is None  # type: ignore[union-attr]
        fetched = await client.send(fetch_request(8, {"live": None}))
        assert offsets_of(fetched)["live"] == {}

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1, "other": 1})


def test_list_and_describe_groups(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        async with connect(bootstrap) as a:
            member_id, _ = await join_alone(a, "stable", topics=("orders",))
            await client.send(commit_request(9, "idle", {("orders", 0): 1}))
            for version in versions(LIST_GROUPS):
                listed = await client.send(req(LIST_GROUPS, version, states_filter=(), types_filter=()))
                assert {g.group_id: g.protocol_type for g in listed.groups} == {
                    "stable": "consumer",
                    "idle": "",
                }
                if version >= 4:
                    only = await client.send(
                        req(LIST_GROUPS, version, states_filter=("sTaBlE",), types_filter=())
                    )
                    assert [(g.group_id, g.group_state) for g in only.groups] == [("stable", "Stable")]
                if version >= 5:
                    assert [g.group_type for g in listed.groups] == ["classic", "classic"]
                    none = await client.send(
                        req(LIST_GROUPS, version, states_filter=(), types_filter=("consumer",))
                    )
                    assert none.groups == ()
            for version in versions(DESCRIBE_GROUPS):
                described = await client.send(
                    req(
                        DESCRIBE_GROUPS,
                        version,
                        groups=("stable", "missing"),
                        include_authorized_operations=True,
                    )
                )
                stable, missing = described.groups
                assert (
                    stable.error_code,
                    stable.group_state,
                    stable.protocol_type,
                    stable.protocol_data,
                ) == (
                    ErrorCode.none,
                    "Stable",
                    "consumer",
                    "range",
                )
                assert [(m.member_id, m.client_id, m.client_host) for m in stable.members] == [
                    (member_id, "kcli", "/127.0.0.1")
                ]
                assert stable.members[0].member_metadata == subscription("orders")
                assert stable.members[0].member_assignment == b"assigned"
                if version >= 3:
                    # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: Kafka 4's operations on a group
                    assert stable.authorized_operations == sum(1 << op for op in (3, 6, 8, 10, 11))
                if version >= 6:
                    assert (missing.error_code, missing.error_message) == (
                        ErrorCode.group_id_not_found,
                        "Group missing not found.",
                    )
                else:
                    assert (missing.error_code, missing.group_state, missing.members) == (
                        ErrorCode.none,
                        "Dead",
                        (),
                    )

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1})


def test_offsets_expire_and_follow_topic_deletion(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        coordinator = broker.node.groups  # type: ignore[union-attr]
        manager = coordinator.manager
        await client.send(commit_request(9, "old", {("orders", 0): 1}))
        await client.send(commit_request(9, "both", {("orders", 0): 1, ("doomed", 0): 2}))
        deleted = await client.send(
            req(DELETE_TOPICS, 6, topics=(delete_topic("doomed"),), timeout=30000 * MS)
        )
        assert deleted.responses[0].error_code == ErrorCode.none
        fetched = await client.send(fetch_request(8, {"both": None}))
        assert offsets_of(fetched)["both"] == {("orders", 0): (1, "", ErrorCode.none)}
        # Seven days and a minute later the retention pass removes commit-only groups' offsets.
        real_clock = manager.clock
        manager.clock = lambda: real_clock() + 7 * 24 * 3600 * 1000 + 60_000
        try:
            assert manager.cleanup_expired_offsets() == 2
        finally:
            manager.clock = real_clock
        fetched = await client.send(fetch_request(8, {"old": None, "both": None}))
        assert offsets_of(fetched) == {"old": {}, "both": {}}
        assert manager.get_group("old") is None

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1, "doomed": 1})


# --- persistence (real broker processes) -----------------------------------------------------------------


def test_offsets_and_groups_survive_restart_and_kill(tmp_path: Path) -> None:
    overrides = ["offsets.topic.num.partitions=4", "group.initial.rebalance.delay.ms=0"]
    data_dir = tmp_path / "data"
    first = start_broker(tmp_path / "first", data_dir=data_dir, overrides=overrides)
    try:
        write_offsets_and_a_group(first)
    finally:
        stop_cleanly(first)

    second = start_broker(tmp_path / "second", data_dir=data_dir, overrides=overrides)
    try:
        assert committed(second.bootstrap, "keep") == {
            0: (10, "meta-0"),
            1: (20, "meta-1"),
            2: (30, "meta-2"),
        }
        described = asyncio.run(describe(second.bootstrap, "member"))
        assert (described.group_state, described.protocol_data, len(described.members)) == (
            "Stable",
            "range",
            1,
        )
        assert described.members[0].member_assignment == b"assigned"
        asyncio.run(commit_more(second.bootstrap))
    finally:
        second.process.kill()  # SIGKILL by PID
        second.process.wait()

    third = start_broker(tmp_path / "third", data_dir=data_dir, overrides=overrides)
    try:
        assert committed(third.bootstrap, "keep") == {0: (11, ""), 1: (20, "meta-1"), 2: (30, "meta-2")}
        assert "Finished loading offsets and group metadata" in third.log()
    finally:
        stop_cleanly(third)

    # kafka-dump-log's --offsets-decoder view of what the broker wrote.
    partition = offsets_partition_for("keep", 4)
    segment = data_dir / f"__consumer_offsets-{partition}" / ("0" * 20 + ".log")
    done = run_kcli("dump-segment", "--offsets-decoder", str(segment))
    assert done.returncode == 0, done.stderr
    dumped = done.stdout
    assert '"group":"keep","topic":"orders","partition":0' in dumped
    assert '"offset":10,"leaderEpoch":-1,"metadata":"meta-0' in dumped  # librdkafka sends a trailing NUL
    assert '"offset":11,"leaderEpoch":-1,"metadata":""' in dumped


def write_offsets_and_a_group(first: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result()
    consumer = Consumer(
        {
            "bootstrap.servers": first.bootstrap,
            "group.id": "keep",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.commit(
        offsets=[TopicPartition("orders", p, 10 * (p + 1), f"meta-{p}") for p in range(3)],
        asynchronous=False,
    )
    consumer.close()
    asyncio.run(commit_and_join(first.bootstrap))


async def commit_and_join(bootstrap: str) -> None:
    async with connect(bootstrap) as client:
        await find(client, "member")
        await join_alone(client, "member", session_ms=30000)


async def commit_more(bootstrap: str) -> None:
    async with connect(bootstrap) as client:
        await find(client, "keep")
        commit = await client.send(commit_request(9, "keep", {("orders", 0): 11}, metadata=""))
        assert errors_of(commit) == {("orders", 0): ErrorCode.none}


async def describe(bootstrap: str, group_id: str) -> Any:
    async with connect(bootstrap) as client:
        while True:
            described = await client.send(
                req(DESCRIBE_GROUPS, 5, groups=(group_id,), include_authorized_operations=False)
            )
            if described.groups[0].error_code != ErrorCode.coordinator_load_in_progress:
                return described.groups[0]
            await asyncio.sleep(0.05)


def committed(bootstrap: str, group_id: str) -> dict[int, tuple[int, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        result = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=20)
        return {tp.partition: (tp.offset, tp.metadata or "") for tp in result}
    finally:
        consumer.close()


# --- helpers ---------------------------------------------------------------------------------------------


def in_process(
    tmp_path: Path,
    body: Callable[[Broker, KafkaClient, str], Awaitable[None]],
    settings: dict[str, str],
    *,
    topics: dict[str, int] | None = None,
) -> None:
    async def main() -> None:
        config = BrokerConfig(
            {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"), **settings}
        )
        broker = Broker(config)
        host, port = await broker.start()
        bootstrap = f"{host}:{port}"
        try:
            async with await KafkaClient.connect(bootstrap) as client:
                for name, partitions in (topics or {}).items():
                    created = await client.send(create_topic_request(name, partitions))
                    assert created.topics[0].error_code == ErrorCode.none
                await asyncio.wait_for(body(broker, client, bootstrap), 30)
        finally:
            await broker.shutdown(grace=2)

    asyncio.run(main())


@contextlib.asynccontextmanager
async def connect(bootstrap: str) -> AsyncIterator[KafkaClient]:
    client = await KafkaClient.connect(bootstrap, request_timeout=10)
    try:
        yield client
    finally:
        await client.close()


def group(broker: Broker, group_id: str):  # type: ignore[no-untyped-def]
    found = broker.node.groups.manager.get_group(group_id)  # type: ignore[union-attr]
    assert found is not None
    return found


def state(broker: Broker, group_id: str) -> GroupState:
    return group(broker, group_id).state


def versions(api_key: int) -> list[int]:
    low, high = kio_versions(api_key)  # type: ignore[misc]
    return list(range(low, high + 1))


def req(api_key: int, version: int, **values: object) -> Any:
    return build(request_type(api_key, version), **values)


def nested(api_key: int, version: int, entity: str, /, **values: object) -> Any:
    return build(nested_type(request_type(api_key, version), entity), **values)


async def find(client: KafkaClient, key: str = "any") -> None:
    response = await client.send(req(FIND_COORDINATOR, 2, key=key, key_type=0))
    assert response.error_code == ErrorCode.none


def subscription(*topics: str) -> bytes:
    """A consumer-protocol Subscription v0, as the Java client and librdkafka write it."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def join_request(
    version: int,
    group_id: str,
    member_id: str,
    *,
    session_ms: int = 10000,
    rebalance_ms: int = 10000,
    instance_id: str | None = None,
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
    topics: tuple[str, ...] = ("orders",),
) -> Any:
    protocols = (
        protocols if protocols is not None else [("range", subscription(*topics)), ("roundrobin", b"")]
    )
    return req(
        JOIN_GROUP,
        version,
        group_id=group_id,
        session_timeout=session_ms * MS,
        rebalance_timeout=rebalance_ms * MS,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocols=tuple(
            nested(JOIN_GROUP, version, "JoinGroupRequestProtocol", name=n, metadata=m) for n, m in protocols
        ),
        reason=None,
    )


def sync_request(
    version: int,
    group_id: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes],
    *,
    instance_id: str | None = None,
    protocol_name: str = "range",
) -> Any:
    return req(
        SYNC_GROUP,
        version,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocol_name=protocol_name,
        assignments=tuple(
            nested(SYNC_GROUP, version, "SyncGroupRequestAssignment", member_id=m, assignment=a)
            for m, a in assignments.items()
        ),
    )


def heartbeat_request(
    version: int, group_id: str, generation: int, member_id: str, *, instance_id: str | None = None
) -> Any:
    return req(
        HEARTBEAT,
        version,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def leave_request(
    version: int, group_id: str, member_ids: list[str], *, instance_ids: list[str] | None = None
) -> Any:
    if version < 3:
        return req(LEAVE_GROUP, version, group_id=group_id, member_id=member_ids[0])
    instance_ids = instance_ids or [None] * len(member_ids)  # type: ignore[list-item]
    return req(
        LEAVE_GROUP,
        version,
        group_id=group_id,
        members=tuple(
            nested(LEAVE_GROUP, version, "MemberIdentity", member_id=m, group_instance_id=i, reason=None)
            for m, i in zip(member_ids, instance_ids, strict=True)
        ),
    )


async def join_alone(
    client: KafkaClient, group_id: str, *, session_ms: int = 10000, topics: tuple[str, ...] = ("orders",)
) -> tuple[str, int]:
    """Join as the only member, become leader, sync an assignment; (member id, generation)."""
    first = await client.send(join_request(9, group_id, "", session_ms=session_ms, topics=topics))
    member_id = first.member_id
    joined = await client.send(join_request(9, group_id, member_id, session_ms=session_ms, topics=topics))
    assert joined.error_code == ErrorCode.none, joined
    synced = await client.send(
        sync_request(5, group_id, joined.generation_id, member_id, {member_id: b"assigned"})
    )
    assert synced.error_code == ErrorCode.none
    return member_id, joined.generation_id


def commit_request(
    version: int,
    group_id: str,
    offsets: dict[tuple[str, int], int],
    generation: int = -1,
    member_id: str = "",
    *,
    instance_id: str | None = None,
    metadata: str | dict[tuple[str, int], str] = "",
    topic_ids: dict[str, Any] | None = None,
) -> Any:
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))

    def meta(key: tuple[str, int]) -> str:
        return metadata.get(key, "") if isinstance(metadata, dict) else metadata

    topics = tuple(
        nested(
            OFFSET_COMMIT,
            version,
            "OffsetCommitRequestTopic",
            name=topic,
            topic_id=(topic_ids or {}).get(topic) or uuid.uuid5(uuid.NAMESPACE_DNS, topic),
            partitions=tuple(
                nested(
                    OFFSET_COMMIT,
                    version,
                    "OffsetCommitRequestPartition",
                    partition_index=p,
                    committed_offset=o,
                    committed_leader_epoch=-1,
                    committed_metadata=meta((topic, p)),
                )
                for p, o in parts
            ),
        )
        for topic, parts in by_topic.items()
    )
    return req(
        OFFSET_COMMIT,
        version,
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        retention_time=-1 * MS,
        topics=topics,
    )


def errors_of(response: Any, names: dict[Any, str] | None = None) -> dict[tuple[str, int], ErrorCode]:
    return {
        (
            getattr(t, "name", None) or (names or {}).get(t.topic_id, str(t.topic_id)),
            p.partition_index,
        ): p.error_code
        for t in response.topics
        for p in t.partitions
    }


def fetch_request(
    version: int,
    groups: dict[str, dict[str, list[int]] | None],
    *,
    require_stable: bool = False,
    topic_ids: dict[str, Any] | None = None,
) -> Any:
    def topics(group_topics: dict[str, list[int]] | None, entity: str) -> Any:
        if group_topics is None:
            return None
        return tuple(
            nested(
                OFFSET_FETCH,
                version,
                entity,
                name=t,
                topic_id=(topic_ids or {}).get(t),
                partition_indexes=tuple(ps),
            )
            for t, ps in group_topics.items()
        )

    if version >= 8:
        return req(
            OFFSET_FETCH,
            version,
            groups=tuple(
                nested(
                    OFFSET_FETCH,
                    version,
                    "OffsetFetchRequestGroup",
                    group_id=g,
                    member_id=None,
                    member_epoch=-1,
                    topics=topics(ts, "OffsetFetchRequestTopics"),
                )
                for g, ts in groups.items()
            ),
            require_stable=require_stable,
        )
    ((group_id, group_topics),) = groups.items()
    return req(
        OFFSET_FETCH,
        version,
        group_id=group_id,
        topics=topics(group_topics, "OffsetFetchRequestTopic"),
        require_stable=require_stable,
    )


def offsets_of(
    response: Any, names: dict[Any, str] | None = None, *, group: str = "g"
) -> dict[str, dict[tuple[str, int], tuple]]:
    """{group: {(topic, partition): (offset, metadata, error)}}; `group` names a v0-v7 response's group."""

    def topic_name(t: Any) -> str:
        return getattr(t, "name", None) or (names or {}).get(t.topic_id, str(t.topic_id))

    def partitions(topics: Any) -> dict[tuple[str, int], tuple]:
        return {
            (topic_name(t), p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in topics
            for p in t.partitions
        }

    if hasattr(response, "groups"):
        return {g.group_id: partitions(g.topics) for g in response.groups}
    return {group: partitions(response.topics)}


def offset_delete_request(group_id: str, topics: dict[str, list[int]]) -> Any:
    return req(
        OFFSET_DELETE,
        0,
        group_id=group_id,
        topics=tuple(
            nested(
                OFFSET_DELETE,
                0,
                "OffsetDeleteRequestTopic",
                name=t,
                partitions=tuple(
                    nested(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=p) for p in ps
                ),
            )
            for t, ps in topics.items()
        ),
    )


def create_topic_request(name: str, partitions: int) -> Any:
    version = 7
    topic = nested(
        CREATE_TOPICS,
        version,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=1,
        assignments=(),
        configs=(),
    )
    return req(CREATE_TOPICS, version, topics=(topic,), timeout=30000 * MS, validate_only=False)


def delete_topic(name: str) -> Any:
    return nested(DELETE_TOPICS, 6, "DeleteTopicState", name=name, topic_id=None)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_shutdown_answers_a_parked_join_at_once(tmp_path: Path) -> None:
    """SIGTERM while a JoinGroup waits out a long initial delay: the join is answered NOT_COORDINATOR
    and the broker exits at once, instead of holding the connection for the whole shutdown grace."""
    broker = start_broker(tmp_path, overrides=["group.initial.rebalance.delay.ms=60000"])

    async def park_then_stop() -> tuple[Any, float]:
        async with connect(broker.bootstrap) as client:
            await find(client)
            parked = client.send_nowait(join_request(3, "slow", ""))  # v3: no MEMBER_ID_REQUIRED round trip
            await asyncio.sleep(0.5)
            assert not parked.done()
            started = asyncio.get_running_loop().time()
            broker.process.terminate()  # SIGTERM by PID
            answer = await asyncio.wait_for(parked, 5)
            return answer, asyncio.get_running_loop().time() - started

    answer, waited = asyncio.run(park_then_stop())
    assert answer.error_code == ErrorCode.not_coordinator
    assert waited < 5
    assert broker.process.wait(10) == 0
