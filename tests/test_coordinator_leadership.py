"""Coordinators follow the leadership of their partitions, not only topic creation: when this node stops
leading a __consumer_offsets or __transaction_state partition (onResignation) its groups or transactions
leave the cache and clients are sent elsewhere; when it leads it again (onElection) they are loaded back
from the log. There is no election API on one node yet, so the tests commit the PartitionChangeRecords
an election would commit; everything else is a real broker in this process and confluent-kafka clients.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from waiting import wait_for_async

from kcli.broker.metadata.controller import ControllerResult, NewTopic
from kcli.broker.server import Broker
from kcli.config import BrokerConfig

pytestmark = pytest.mark.timeout(120)


async def change_leader(broker: Broker, topic: str, partition: int, leader: int) -> None:
    """What an election (or a leader going offline) commits to the metadata log."""
    controller = broker.node.controller
    topic_id = controller.image.topic_ids[topic]
    change = {"partitionId": partition, "topicId": topic_id, "leader": leader}
    await controller._run(ControllerResult([("PartitionChangeRecord", 0, change)], None))


async def started(tmp_path: Path) -> tuple[Broker, str]:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path / "data"),
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    broker = Broker(config)
    host, port = await broker.start()
    return broker, f"{host}:{port}"


def test_groups_are_unloaded_on_resignation_and_loaded_back_on_election(tmp_path: Path) -> None:
    async def run() -> None:
        broker, bootstrap = await started(tmp_path)
        try:
            await broker.node.controller.create_topics([NewTopic("orders", 1, 1)])
            consumer = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False}
            )
            try:
                await asyncio.to_thread(
                    consumer.commit, offsets=[TopicPartition("orders", 0, 5)], asynchronous=False
                )
                groups = broker.node.groups
                manager = groups.manager
                partition = groups.partition_for("billing")
                assert partition in manager.owned_partitions and manager.get_group("billing") is not None

                await change_leader(broker, "__consumer_offsets", partition, -1)  # the leader went offline
                assert partition not in manager.owned_partitions
                assert manager.get_group("billing") is None
                with pytest.raises(KafkaException):  # NOT_COORDINATOR until the request times out
                    await asyncio.to_thread(consumer.committed, [TopicPartition("orders", 0)], timeout=2)
                assert manager.owned_partitions == {p for p in range(3) if p != partition}

                await change_leader(broker, "__consumer_offsets", partition, broker.config.node_id)  # elected
                # the load runs as a task on the loop (20 s: what committed() below allows it as well)
                await wait_for_async(
                    f"__consumer_offsets-{partition} loaded",
                    lambda: partition in manager.owned_partitions,
                    20,
                    0.02,
                )
                [committed] = await asyncio.to_thread(
                    consumer.committed, [TopicPartition("orders", 0)], timeout=20
                )
                assert committed.offset == 5  # replayed from __consumer_offsets
            finally:
                await asyncio.to_thread(consumer.close)
        finally:
            await broker.shutdown(grace=2)

    asyncio.run(run())


def test_transactions_are_forgotten_on_resignation_and_loaded_back_on_election(tmp_path: Path) -> None:
    async def run() -> None:
        broker, bootstrap = await started(tmp_path)
        try:
            producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ledger-writer"})
            await asyncio.to_thread(producer.init_transactions, 30)
            coordinator = broker.node.transaction_coordinator
            manager = coordinator.state_manager
            partition = coordinator.partition_for("ledger-writer")
            assert "ledger-writer" in manager.transactions[partition]

            await change_leader(broker, "__transaction_state", partition, -1)
            assert partition not in manager.transactions and partition not in manager.loading_partitions

            await change_leader(broker, "__transaction_state", partition, broker.config.node_id)
            await wait_for_async(
                f"__transaction_state-{partition} loaded", lambda: partition in manager.transactions, 2, 0.02
            )
            assert "ledger-writer" in manager.transactions[partition]
            await asyncio.to_thread(producer.flush, 5)
        finally:
            await broker.shutdown(grace=2)

    asyncio.run(run())
