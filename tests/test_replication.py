"""The replication layer on real logs: Partition (leader checks, acks, high watermark, read bounds), the
purgatory that delayed fetches and produces wait in, and the replica manager a node drives from its
metadata image. Everything runs on real log directories and a real (in-process) node; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from formats.records import RecordSpec, build_batch
from kcli.broker.log import Log, LogConfig, OffsetOutOfRange
from kcli.broker.metadata.controller import NewTopic
from kcli.broker.metadata.image import PartitionRegistration
from kcli.broker.node import Node
from kcli.broker.replication.partition import Partition, PartitionError
from kcli.broker.replication.purgatory import Purgatory
from kcli.broker.replication.replica_selector import (
    RACK_AWARE_REPLICA_SELECTOR,
    ClientMetadata,
    PartitionView,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)
from kcli.config import BrokerConfig, Listener

T0 = 1_700_000_000_000
NODE = 1


def batch(n: int = 3) -> bytes:
    return build_batch([RecordSpec(T0, b"k", b"v" * 50) for _ in range(n)])


def registration(
    *, leader: int = NODE, epoch: int = 0, replicas=(NODE,), isr=(NODE,)
) -> PartitionRegistration:
    return PartitionRegistration(
        tuple(replicas), tuple(isr), leader=leader, leader_epoch=epoch, partition_epoch=0
    )


def hosted(tmp_path: Path, **config: object) -> Partition:
    log = Log.create(tmp_path / "orders-0", LogConfig.from_values(config), uuid.uuid4())
    return Partition(log, NODE, Purgatory())


def test_the_only_in_sync_replica_commits_every_append(tmp_path: Path) -> None:
    partition = hosted(tmp_path)
    partition.apply_registration(registration(epoch=3))
    assert partition.is_leader and partition.log.latest_epoch() == 3
    for n in (1, 4, 2):
        info = partition.append_records_to_leader(batch(n), required_acks=-1, now_ms=T0)
        assert partition.high_watermark == partition.log.log_end_offset == info.last_offset + 1
    assert partition.high_watermark == 7

    async def woken_by_an_append() -> bool:
        loop = asyncio.get_running_loop()
        waiting = asyncio.create_task(partition.purgatory.wait_for_change([partition.key], loop.time() + 5))
        await asyncio.sleep(0)
        partition.append_records_to_leader(batch(1), required_acks=1, now_ms=T0)
        return await waiting

    assert asyncio.run(woken_by_an_append()) is True


def test_the_high_watermark_waits_for_every_in_sync_replica(tmp_path: Path) -> None:
    """With a follower in the ISR whose log end is not known, nothing past the old HW is committed."""
    partition = hosted(tmp_path)
    partition.apply_registration(registration(replicas=(NODE, 2), isr=(NODE, 2)))
    partition.append_records_to_leader(batch(5), required_acks=1, now_ms=T0)
    assert (partition.log.log_end_offset, partition.high_watermark) == (5, 0)
    read = partition.read_records(0, 1 << 20, min_one_batch=True)
    assert read.records is None and read.high_watermark == 0  # consumers stop at the HW
    follower = partition.read_records(0, 1 << 20, replica_id=2, min_one_batch=True)
    assert follower.records is not None and follower.records.size > 0  # followers read to the log end


def test_leader_checks(tmp_path: Path) -> None:
    partition = hosted(tmp_path, **{"min.insync.replicas": 2})
    partition.apply_registration(registration(leader=2, replicas=(NODE, 2), isr=(2,)))
    with pytest.raises(PartitionError) as refused:
        partition.append_records_to_leader(batch(), required_acks=1, now_ms=T0)
    assert refused.value.error_code is ErrorCode.not_leader_or_follower

    partition.apply_registration(registration(epoch=1, replicas=(NODE, 2), isr=(NODE,)))
    with pytest.raises(PartitionError) as short:
        partition.append_records_to_leader(batch(), required_acks=-1, now_ms=T0)
    assert short.value.error_code is ErrorCode.not_enough_replicas
    assert partition.log.log_end_offset == 0  # nothing written
    partition.append_records_to_leader(batch(), required_acks=1, now_ms=T0)  # acks=1 needs only the leader

    for epoch, error in ((0, ErrorCode.fenced_leader_epoch), (2, ErrorCode.unknown_leader_epoch)):
        with pytest.raises(PartitionError) as fenced:
            partition.read_records(0, 100, min_one_batch=True, current_leader_epoch=epoch)
        assert fenced.value.error_code is error
    for replica, epoch, error in (
        (7, -1, ErrorCode.not_leader_or_follower),  # not a replica
        (7, 1, ErrorCode.unknown_leader_epoch),
        (NODE, -1, ErrorCode.not_leader_or_follower),  # the leader itself
    ):
        with pytest.raises(PartitionError) as wrong:
            partition.read_records(0, 100, replica_id=replica, min_one_batch=True, current_leader_epoch=epoch)
        assert wrong.value.error_code is error
    with pytest.raises(OffsetOutOfRange):
        partition.read_records(99, 100, min_one_batch=True)


def test_purgatory_wakes_only_waiters_on_the_changed_partition() -> None:
    async def run() -> None:
        purgatory = Purgatory()
        loop = asyncio.get_running_loop()
        on_a = asyncio.create_task(purgatory.wait_for_change([("a", 0)], loop.time() + 5))
        on_b = asyncio.create_task(purgatory.wait_for_change([("b", 0)], loop.time() + 0.2))
        await asyncio.sleep(0)
        assert purgatory.watched() == 2
        purgatory.check_and_complete(("a", 0))
        assert await on_a is True
        assert await on_b is False  # its deadline came first
        assert purgatory.watched() == 0

        state = {"done": False}
        waiting = asyncio.create_task(purgatory.wait_until([("a", 0)], lambda: state["done"], 5))
        await asyncio.sleep(0)
        purgatory.check_and_complete(("a", 0))  # a change that does not satisfy the condition
        await asyncio.sleep(0)
        assert not waiting.done()
        state["done"] = True
        purgatory.check_and_complete(("a", 0))
        assert await waiting is True

    asyncio.run(run())


def test_node_hosts_partitions_from_its_metadata_and_acks_all_completes_on_the_high_watermark(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        config = BrokerConfig({"log.dirs": str(tmp_path / "data"), "node.id": str(NODE)})
        node = await Node.open(config, "cluster-x")
        try:
            await node.register([Listener("PLAINTEXT", "127.0.0.1", 9092)], None)
            await node.controller.create_topics([NewTopic("orders", 2, 1)])
            replicas = node.replicas
            assert [p.index for p in replicas.partitions() if p.topic == "orders"] == [0, 1]
            leader = replicas.leader_partition(node.image, "orders", 1)
            assert leader.is_leader and leader.leader_epoch == 0

            info = leader.append_records_to_leader(batch(4), required_acks=-1, now_ms=T0)
            required = [(("orders", 1), info.last_offset + 1)]
            assert replicas.acks_reached(required)
            assert await replicas.wait_for_acks(required, timeout=0.1)
            assert replicas.acks_error(("orders", 1), info.last_offset + 1) is ErrorCode.none
            # An offset the high watermark has not reached: DelayedProduce times out.
            assert not await replicas.wait_for_acks([(("orders", 1), 99)], timeout=0.05)
            assert replicas.acks_error(("orders", 1), 99) is ErrorCode.request_timed_out

            with pytest.raises(PartitionError) as unknown:
                replicas.leader_partition(node.image, "orders", 2)
            assert unknown.value.error_code is ErrorCode.unknown_topic_or_partition

            await node.controller.delete_topics(["orders"])
            assert replicas.partition("orders", 1) is None
            assert replicas.acks_error(("orders", 1), 1) is ErrorCode.not_leader_or_follower
        finally:
            await node.shutdown()

    asyncio.run(run())


def test_a_follower_serves_consumers_up_to_its_own_high_watermark(tmp_path: Path) -> None:
    """KIP-392 (Partition.fetchRecords with fetchOnlyFromLeader false): a follower reads for a consumer
    up to the high watermark the leader told it; beyond its log end is OFFSET_OUT_OF_RANGE; without
    client metadata (Fetch < v11) and for other followers it is still NOT_LEADER_OR_FOLLOWER."""
    partition = hosted(tmp_path)
    partition.apply_registration(registration(leader=2, replicas=(2, NODE), isr=(2, NODE)))
    for base_offset, count, leader_high_watermark in ((0, 3, 0), (3, 2, 3)):
        records = build_batch(
            [RecordSpec(T0, b"k", b"v")] * count, base_offset=base_offset, partition_leader_epoch=0
        )
        partition.append_records_as_follower(
            records, leader_high_watermark=leader_high_watermark, leader_log_start_offset=0, now_ms=T0
        )
    assert (partition.log.log_end_offset, partition.high_watermark) == (5, 3)

    read = partition.read_records(0, 1 << 20, min_one_batch=True, fetch_only_from_leader=False)
    assert read.high_watermark == 3 and read.records is not None
    assert partition.log.fetch_upper_bound_offset(read.records) == 3  # the first batch only: below the HW
    assert (
        partition.read_records(3, 1 << 20, min_one_batch=True, fetch_only_from_leader=False).records is None
    )
    with pytest.raises(OffsetOutOfRange):
        partition.read_records(6, 1 << 20, min_one_batch=True, fetch_only_from_leader=False)
    with pytest.raises(PartitionError) as fenced:
        partition.read_records(
            0, 100, min_one_batch=True, current_leader_epoch=1, fetch_only_from_leader=False
        )
    assert fenced.value.error_code is ErrorCode.unknown_leader_epoch
    for replica_id, only_leader in ((-1, True), (3, False)):
        with pytest.raises(PartitionError) as refused:
            partition.read_records(
                0, 100, replica_id=replica_id, min_one_batch=True, fetch_only_from_leader=only_leader
            )
        assert refused.value.error_code is ErrorCode.not_leader_or_follower


def view(broker_id: int, rack: str | None, end: int = 10, since: int = 0) -> ReplicaView:
    return ReplicaView(broker_id, rack, rack is not None, end, since)


@pytest.mark.parametrize(
    ("rack", "followers", "expected"),
    [
        ("", (view(2, "r2"),), 1),  # no client rack: the leader
        ("r9", (view(2, "r2"),), 1),  # no replica in the client's rack: the leader
        ("r1", (view(2, "r1"),), 1),  # the leader shares the rack
        ("r2", (view(2, "r2"), view(3, "r3")), 2),
        ("r2", (view(2, "r2", end=9), view(3, "r2", end=10)), 3),  # the highest log end
        ("r2", (view(2, "r2", since=50), view(3, "r2", since=10)), 3),  # then the most recently caught up
        ("r2", (view(2, "r2"), view(3, "r2")), 3),  # then the highest id
        ("r2", (view(2, None),), 1),  # a broker without an endpoint has no rack
    ],
)
def test_rack_aware_replica_selector(rack: str, followers: tuple[ReplicaView, ...], expected: int) -> None:
    leader = view(1, "r1")
    chosen = RackAwareReplicaSelector().select(
        ClientMetadata(rack), PartitionView((*followers, leader), leader)
    )
    assert chosen is not None and chosen.broker_id == expected


def test_replica_selector_class() -> None:
    assert replica_selector(None) is None
    assert isinstance(replica_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
    with pytest.raises(ValueError, match="cannot be found"):
        replica_selector("com.example.Nearest")
