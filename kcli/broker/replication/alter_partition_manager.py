"""ISR changes of the partitions this broker leads, sent to the controller (Kafka's AlterPartitionManager).

A partition's leader decides to grow or shrink its ISR; only the controller may change it, so the
change waits here, batched with the others in one AlterPartition (v3: the new ISR with each member's
broker epoch, the leader's partition epoch as the optimistic lock), and the controller's answer goes
back to the partition. One request at a time; a change asked for again before it was sent replaces
the unsent one, and an answer worth retrying (the controller moved, no answer) is sent again after
a backoff.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.replication.partition import Partition, PendingIsrChange
from kcli.broker.replication.purgatory import PartitionKey
from kcli.protocol.messages import nested_type, request_type

log = logging.getLogger("kcli.broker.replication")

ALTER_PARTITION = 56
ALTER_PARTITION_VERSION = 3
RETRY_BACKOFF_SECONDS = 0.1


class AlterPartitionManager:
    def __init__(
        self,
        node_id: int,
        send: Callable[[Any], Awaitable[Any]],
        broker_epoch: Callable[[], int],
        topic_id: Callable[[str], uuid.UUID | None],
    ) -> None:
        self.node_id = node_id
        self._send = send
        self._broker_epoch = broker_epoch
        self._topic_id = topic_id
        self._unsent: dict[PartitionKey, tuple[Partition, PendingIsrChange]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, partition: Partition, change: PendingIsrChange) -> None:
        """Queue `partition`'s ISR change (Partition.alter_isr)."""
        self._unsent[partition.key] = (partition, change)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._unsent:
                batch, self._unsent = self._unsent, {}
                retry = await self._send_batch(batch)
                for key, item in retry.items():
                    self._unsent.setdefault(key, item)
                if retry:
                    await asyncio.sleep(RETRY_BACKOFF_SECONDS)

    async def _send_batch(
        self, batch: dict[PartitionKey, tuple[Partition, PendingIsrChange]]
    ) -> dict[PartitionKey, tuple[Partition, PendingIsrChange]]:
        """One AlterPartition; returns the changes to send again."""
        cls = request_type(ALTER_PARTITION, ALTER_PARTITION_VERSION)
        topic_cls, partition_cls = nested_type(cls, "TopicData"), nested_type(cls, "PartitionData")
        state_cls = nested_type(cls, "BrokerState")
        by_topic: dict[uuid.UUID, list[Any]] = {}
        sent: dict[tuple[uuid.UUID, int], tuple[Partition, PendingIsrChange]] = {}
        for partition, change in batch.values():
            if partition.pending_isr is not change:
                continue  # overtaken by new metadata before it was sent
            topic_id = self._topic_id(partition.topic)
            if topic_id is None:
                continue
            members = []
            for broker_id in change.isr:
                replica = partition.remote_replicas.get(broker_id)
                epoch = (
                    self._broker_epoch()
                    if broker_id == self.node_id
                    else (replica.broker_epoch if replica else -1)
                )
                members.append(state_cls(broker_id=broker_id, broker_epoch=epoch))
            by_topic.setdefault(topic_id, []).append(
                partition_cls(
                    partition_index=partition.index,
                    leader_epoch=change.leader_epoch,
                    new_isr_with_epochs=tuple(members),
                    leader_recovery_state=0,  # a leader treats RECOVERING as recovered (KIP-704)
                    partition_epoch=change.partition_epoch,
                )
            )
            sent[(topic_id, partition.index)] = (partition, change)
        if not sent:
            return {}
        request = cls(
            broker_id=self.node_id,
            broker_epoch=self._broker_epoch(),
            topics=tuple(topic_cls(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        try:
            response = await self._send(request)
        except Exception as exc:  # no controller answered: keep the changes and try again
            log.info("AlterPartition not answered (%s); will retry", exc)
            return {p.key: (p, c) for p, c in sent.values()}
        if response.error_code is not ErrorCode.none:
            log.info("AlterPartition failed: %s", response.error_code.name)
            if response.error_code is ErrorCode.stale_broker_epoch:
                return {}  # this incarnation is gone; new metadata will reset the partitions
            return {p.key: (p, c) for p, c in sent.values()}
        retry: dict[PartitionKey, tuple[Partition, PendingIsrChange]] = {}
        answered = set()
        for topic in response.topics:
            for data in topic.partitions:
                item = sent.get((topic.topic_id, data.partition_index))
                if item is None:
                    continue
                answered.add((topic.topic_id, data.partition_index))
                partition, change = item
                if data.error_code is not ErrorCode.none:
                    log.info(
                        "AlterPartition of %s-%d to ISR %s: %s",
                        partition.topic,
                        partition.index,
                        list(change.isr),
                        data.error_code.name,
                    )
                if partition.complete_isr_change(
                    change, data.error_code, tuple(data.isr), data.leader_epoch, data.partition_epoch
                ):
                    retry[partition.key] = item
        for key, item in sent.items():
            if key not in answered:
                retry[item[0].key] = item
        return retry
