"""Coordinators answer a write once it is committed: the partition's high watermark has passed it.

The high watermark is held the way a follower holds it: the tests commit the PartitionChangeRecord
that puts a second replica (node 2, which never fetches) in the ISR of a __consumer_offsets or
__transaction_state partition, so appends reach the log end but the high watermark stays; the
record that shrinks the ISR back to this node releases it. Those records go through the controller,
the replica manager applies them as it applies any election; the requests are real ones, from kcli's
client, to a broker in this process. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_coordinator_leadership import change_leader
from test_groups import (
    FAST_GROUPS,
    commit_request,
    connect,
    errors_of,
    fetch_request,
    find,
    heartbeat_request,
    in_process,
    join_request,
    offsets_of,
    req,
    state,
    sync_request,
)

from kcli.broker.group.group import GroupState
from kcli.broker.metadata.controller import ControllerResult
from kcli.broker.server import Broker
from kcli.client import KafkaClient

pytestmark = pytest.mark.timeout(90)

FIND_COORDINATOR, INIT_PRODUCER_ID, DESCRIBE_TRANSACTIONS = 10, 22, 65
MS = datetime.timedelta(milliseconds=1)
SILENT_FOLLOWER = 2
"""A replica that never fetches: in the ISR, it keeps the high watermark where it is."""


async def set_isr(broker: Broker, topic: str, partition: int, isr: list[int]) -> None:
    """Commit the PartitionChangeRecord of an ISR change (replicas = ISR here), as an expansion or a
    shrink would; the replica manager applies it to the partition."""
    controller = broker.node.controller  # type: ignore[union-attr]
    change = {
        "partitionId": partition,
        "topicId": controller.image.topic_ids[topic],
        "replicas": isr,
        "isr": isr,
    }
    await controller._run(ControllerResult([("PartitionChangeRecord", 0, change)], None))


async def hold_high_watermark(broker: Broker, topic: str, partition: int) -> None:
    await set_isr(broker, topic, partition, [broker.config.node_id, SILENT_FOLLOWER])


async def release_high_watermark(broker: Broker, topic: str, partition: int) -> None:
    await set_isr(broker, topic, partition, [broker.config.node_id])


def uncommitted(broker: Broker, topic: str, partition: int) -> int:
    """How many offsets of the partition's log are past its high watermark."""
    hosted = broker.node.replicas.partition(topic, partition)  # type: ignore[union-attr]
    return hosted.log.log_end_offset - hosted.high_watermark


async def still_waiting(task: asyncio.Task[Any], seconds: float = 0.3) -> bool:
    await asyncio.sleep(seconds)
    return not task.done()


# --- offsets -------------------------------------------------------------------------------------------


def test_offset_commit_is_answered_when_the_high_watermark_passes_it(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        assert errors_of(await client.send(commit_request(9, "g", {("orders", 0): 3}))) == {
            ("orders", 0): ErrorCode.none
        }
        partition = broker.node.groups.partition_for("g")  # type: ignore[union-attr]
        await hold_high_watermark(broker, "__consumer_offsets", partition)
        async with connect(bootstrap) as committer:
            commit = asyncio.create_task(committer.send(commit_request(9, "g", {("orders", 0): 7})))
            assert await still_waiting(commit)
            assert uncommitted(broker, "__consumer_offsets", partition) == 1  # appended, not committed
            # The coordinator answers other requests meanwhile, and does not show the commit yet.
            stable = await client.send(fetch_request(8, {"g": {"orders": [0]}}, require_stable=True))
            assert offsets_of(stable)["g"] == {("orders", 0): (-1, "", ErrorCode.unstable_offset_commit)}
            loose = await client.send(fetch_request(8, {"g": {"orders": [0]}}))
            assert offsets_of(loose)["g"] == {("orders", 0): (3, "", ErrorCode.none)}

            await release_high_watermark(broker, "__consumer_offsets", partition)
            assert errors_of(await commit) == {("orders", 0): ErrorCode.none}
        assert uncommitted(broker, "__consumer_offsets", partition) == 0
        stable = await client.send(fetch_request(8, {"g": {"orders": [0]}}, require_stable=True))
        assert offsets_of(stable)["g"] == {("orders", 0): (7, "", ErrorCode.none)}

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1})


def test_an_offset_commit_not_committed_in_time_fails_and_leaves_nothing_cached(tmp_path: Path) -> None:
    """offsets.commit.timeout.ms: the classic coordinator answers REQUEST_TIMED_OUT (Kafka's
    maybeConvertOffsetCommitError keeps it), and the commit is neither pending nor committed."""

    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        await client.send(commit_request(9, "g", {("orders", 0): 3}))
        partition = broker.node.groups.partition_for("g")  # type: ignore[union-attr]
        await hold_high_watermark(broker, "__consumer_offsets", partition)
        started = asyncio.get_running_loop().time()
        answer = await client.send(commit_request(9, "g", {("orders", 0): 7}))
        assert asyncio.get_running_loop().time() - started >= 0.3
        assert errors_of(answer) == {("orders", 0): ErrorCode.request_timed_out}
        stable = await client.send(fetch_request(8, {"g": {"orders": [0]}}, require_stable=True))
        assert offsets_of(stable)["g"] == {("orders", 0): (3, "", ErrorCode.none)}
        assert not broker.node.groups.manager.get_group("g").has_pending_offset_commits("orders", 0)  # type: ignore[union-attr]

    in_process(tmp_path, body, {**FAST_GROUPS, "offsets.commit.timeout.ms": "300"}, topics={"orders": 1})


def test_a_commit_waiting_when_the_coordinator_resigns_is_answered_not_coordinator(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        partition = broker.node.groups.partition_for("g")  # type: ignore[union-attr]
        await hold_high_watermark(broker, "__consumer_offsets", partition)
        async with connect(bootstrap) as committer:
            commit = asyncio.create_task(committer.send(commit_request(9, "g", {("orders", 0): 7})))
            assert await still_waiting(commit)
            await change_leader(broker, "__consumer_offsets", partition, -1)  # the leader went offline
            assert errors_of(await commit) == {("orders", 0): ErrorCode.not_coordinator}
        assert broker.node.groups.manager.get_group("g") is None  # type: ignore[union-attr]

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1})


# --- groups --------------------------------------------------------------------------------------------


def test_sync_group_is_answered_when_the_group_record_is_committed(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        member_id = (await client.send(join_request(9, "g", ""))).member_id
        joined = await client.send(join_request(9, "g", member_id))
        assert joined.error_code == ErrorCode.none and joined.leader == member_id
        partition = broker.node.groups.partition_for("g")  # type: ignore[union-attr]
        await hold_high_watermark(broker, "__consumer_offsets", partition)
        async with connect(bootstrap) as leader:
            sync = asyncio.create_task(
                leader.send(sync_request(5, "g", joined.generation_id, member_id, {member_id: b"A"}))
            )
            assert await still_waiting(sync)
            assert state(broker, "g") is GroupState.COMPLETING_REBALANCE  # not Stable before the write is
            heartbeat = await client.send(heartbeat_request(4, "g", joined.generation_id, member_id))
            assert heartbeat.error_code == ErrorCode.none

            await release_high_watermark(broker, "__consumer_offsets", partition)
            synced = await sync
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"A")
        assert state(broker, "g") is GroupState.STABLE

    in_process(tmp_path, body, FAST_GROUPS, topics={"orders": 1})


def test_group_writes_not_committed_in_time_are_undone(tmp_path: Path) -> None:
    """storeGroup's REQUEST_TIMED_OUT is REBALANCE_IN_PROGRESS: the leader's SyncGroup sends the group
    back to rebalance, and a restarted static member's JoinGroup keeps the member id it had."""

    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        await find(client)
        joined = await client.send(join_request(9, "g", "", instance_id="i-1"))
        member_id = joined.member_id
        partition = broker.node.groups.partition_for("g")  # type: ignore[union-attr]

        await hold_high_watermark(broker, "__consumer_offsets", partition)
        synced = await client.send(sync_request(5, "g", joined.generation_id, member_id, {member_id: b"A"}))
        assert synced.error_code == ErrorCode.rebalance_in_progress
        assert state(broker, "g") is GroupState.PREPARING_REBALANCE

        await release_high_watermark(broker, "__consumer_offsets", partition)
        joined = await client.send(join_request(9, "g", member_id, instance_id="i-1"))
        synced = await client.send(sync_request(5, "g", joined.generation_id, member_id, {member_id: b"A"}))
        assert synced.error_code == ErrorCode.none and state(broker, "g") is GroupState.STABLE

        await hold_high_watermark(broker, "__consumer_offsets", partition)
        rejoined = await client.send(join_request(9, "g", "", instance_id="i-1"))  # the instance restarted
        assert (rejoined.error_code, rejoined.member_id) == (ErrorCode.rebalance_in_progress, "")
        group = broker.node.groups.manager.get_group("g")  # type: ignore[union-attr]
        assert group.current_static_member_id("i-1") == member_id and list(group.members) == [member_id]
        heartbeat = await client.send(
            heartbeat_request(4, "g", joined.generation_id, member_id, instance_id="i-1")
        )
        assert heartbeat.error_code == ErrorCode.none

    in_process(tmp_path, body, {**FAST_GROUPS, "offsets.commit.timeout.ms": "300"}, topics={"orders": 1})


# --- transactions --------------------------------------------------------------------------------------


def init_producer_id(transactional_id: str, timeout_ms: int = 60000) -> Any:
    return req(
        INIT_PRODUCER_ID,
        4,
        transactional_id=transactional_id,
        transaction_timeout=timeout_ms * MS,
        producer_id=-1,
        producer_epoch=-1,
    )


async def describe(client: KafkaClient, transactional_id: str) -> tuple[str, int]:
    """(state, producer epoch) as DescribeTransactions shows the id."""
    answer = await client.send(req(DESCRIBE_TRANSACTIONS, 0, transactional_ids=(transactional_id,)))
    (described,) = answer.transaction_states
    assert described.error_code == ErrorCode.none
    return described.transaction_state, described.producer_epoch


async def initialized(broker: Broker, client: KafkaClient, transactional_id: str) -> tuple[int, int]:
    """FindCoordinator creates __transaction_state; (partition of the id, producer epoch)."""
    found = await client.send(req(FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(transactional_id,)))
    assert found.coordinators[0].error_code == ErrorCode.none
    answer = await client.send(init_producer_id(transactional_id))
    assert answer.error_code == ErrorCode.none
    partition = broker.node.transaction_coordinator.partition_for(transactional_id)  # type: ignore[union-attr]
    return partition, answer.producer_epoch


def test_init_producer_id_is_answered_when_its_transition_is_committed(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        partition, epoch = await initialized(broker, client, "tx")
        await hold_high_watermark(broker, "__transaction_state", partition)
        async with connect(bootstrap) as producer:
            bump = asyncio.create_task(producer.send(init_producer_id("tx")))
            assert await still_waiting(bump)
            assert await describe(client, "tx") == ("Empty", epoch)  # the new epoch is not shown yet
            again = await client.send(init_producer_id("tx"))
            assert again.error_code == ErrorCode.concurrent_transactions  # the transition is pending

            await release_high_watermark(broker, "__transaction_state", partition)
            bumped = await bump
        assert (bumped.error_code, bumped.producer_epoch) == (ErrorCode.none, epoch + 1)
        assert await describe(client, "tx") == ("Empty", epoch + 1)

    in_process(tmp_path, body, {"transaction.state.log.num.partitions": "3"})


def test_a_transition_not_committed_in_time_is_dropped(tmp_path: Path) -> None:
    """The transaction log waits the transaction's own timeout; then COORDINATOR_NOT_AVAILABLE, which
    clients retry, and the id is as it was, free for the retry."""

    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        partition, epoch = await initialized(broker, client, "tx")
        await hold_high_watermark(broker, "__transaction_state", partition)
        started = asyncio.get_running_loop().time()
        answer = await client.send(init_producer_id("tx", timeout_ms=300))
        assert asyncio.get_running_loop().time() - started >= 0.3
        assert answer.error_code == ErrorCode.coordinator_not_available
        assert await describe(client, "tx") == ("Empty", epoch)

        await release_high_watermark(broker, "__transaction_state", partition)
        retried = await client.send(init_producer_id("tx"))
        assert (retried.error_code, retried.producer_epoch) == (ErrorCode.none, epoch + 1)

    in_process(tmp_path, body, {"transaction.state.log.num.partitions": "3"})


def test_a_transition_waiting_when_the_coordinator_resigns_is_answered_not_coordinator(
    tmp_path: Path,
) -> None:
    async def body(broker: Broker, client: KafkaClient, bootstrap: str) -> None:
        partition, _ = await initialized(broker, client, "tx")
        await hold_high_watermark(broker, "__transaction_state", partition)
        async with connect(bootstrap) as producer:
            bump = asyncio.create_task(producer.send(init_producer_id("tx")))
            assert await still_waiting(bump)
            await change_leader(broker, "__transaction_state", partition, -1)
            assert (await bump).error_code == ErrorCode.not_coordinator
        manager = broker.node.transaction_coordinator.state_manager  # type: ignore[union-attr]
        assert partition not in manager.transactions

    in_process(tmp_path, body, {"transaction.state.log.num.partitions": "3"})
