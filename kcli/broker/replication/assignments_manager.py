"""Tell the controller which log dir holds each replica (Kafka's AssignmentsManager, KIP-858).

A broker with several log dirs reports where it placed a replica the controller left UNASSIGNED, and
where a replica moved to (AlterReplicaLogDirs). Assignments wait in `ready`, keyed by (topic id,
partition), a newer one replacing an older; one AssignReplicasToDirs at a time carries up to
MAX_ASSIGNMENTS_PER_REQUEST of them. An assignment whose topic, partition or replica is gone from the
metadata is dropped before sending; one the controller refuses (or a request that fails) is retried
after an exponential backoff (100 ms doubling up to 10 s, as Kafka's STANDARD_BACKOFF). An accepted
assignment runs its callback.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.protocol.messages import nested_type, request_type

log = logging.getLogger("kcli.broker.replication")

ASSIGN_REPLICAS_TO_DIRS = 73
MAX_ASSIGNMENTS_PER_REQUEST = 2250
"""AssignReplicasToDirsRequest.MAX_ASSIGNMENTS_PER_REQUEST."""
_BACKOFF_INITIAL = 0.1
_BACKOFF_MAX = 10.0

SendToController = Callable[[Any], Awaitable[Any]]


@dataclass
class Assignment:
    topic_id: uuid.UUID
    partition: int
    directory_id: uuid.UUID
    reason: str
    on_success: Callable[[], None] | None = None


class AssignmentsManager:
    def __init__(
        self,
        node_id: int,
        send: SendToController,
        image: Callable[[], ClusterMetadataImage],
        broker_epoch: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self._send = send
        self._image = image
        self._broker_epoch = broker_epoch
        self._ready: dict[tuple[uuid.UUID, int], Assignment] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0

    def submit(
        self,
        topic_id: uuid.UUID,
        partition: int,
        directory_id: uuid.UUID,
        reason: str,
        on_success: Callable[[], None] | None = None,
    ) -> None:
        """Queue the assignment (replacing one not sent yet for the same partition) and send soon."""
        self._ready[(topic_id, partition)] = Assignment(topic_id, partition, directory_id, reason, on_success)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kcli-assignments-manager")

    def pending(self) -> int:
        return len(self._ready)

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._ready:
                if not await self._send_once():
                    self._failures += 1
                    await asyncio.sleep(min(_BACKOFF_INITIAL * 2 ** (self._failures - 1), _BACKOFF_MAX))
                else:
                    self._failures = 0

    def _valid(self, image: ClusterMetadataImage, assignment: Assignment) -> bool:
        """Assignment.valid: the topic, the partition and this broker's replica still exist."""
        topic = image.topics_by_id.get(assignment.topic_id)
        registration = None if topic is None else topic.partitions.get(assignment.partition)
        return registration is not None and self.node_id in registration.replicas

    async def _send_once(self) -> bool:
        """Send one batch; False when something has to be retried."""
        image = self._image()
        in_flight: dict[tuple[uuid.UUID, int], Assignment] = {}
        for key in list(self._ready):
            if len(in_flight) >= MAX_ASSIGNMENTS_PER_REQUEST:
                break
            assignment = self._ready.pop(key)
            if self._valid(image, assignment):
                in_flight[key] = assignment
        if not in_flight:
            return True
        try:
            response = await self._send(self._request(in_flight))
        except Exception as exc:  # noqa: BLE001 - no controller now: keep the assignments for later
            log.warning("AssignReplicasToDirs of %d replicas failed: %s; retrying", len(in_flight), exc)
            self._requeue(in_flight)
            return False
        if response.error_code is not ErrorCode.none:
            log.warning("AssignReplicasToDirs refused: %s; retrying", response.error_code.name)
            self._requeue(in_flight)
            return False
        retry = False
        for directory in response.directories:
            for topic in directory.topics:
                for partition in topic.partitions:
                    assignment = in_flight.pop((topic.topic_id, partition.partition_index), None)
                    if assignment is None:
                        continue
                    if partition.error_code is ErrorCode.none:
                        log.info(
                            "replica %s-%d assigned to dir %s (%s)",
                            topic.topic_id,
                            partition.partition_index,
                            assignment.directory_id,
                            assignment.reason,
                        )
                        if assignment.on_success is not None:
                            assignment.on_success()
                    else:
                        log.warning(
                            "assigning %s-%d to dir %s failed: %s",
                            topic.topic_id,
                            partition.partition_index,
                            assignment.directory_id,
                            partition.error_code.name,
                        )
                        self._ready.setdefault((topic.topic_id, partition.partition_index), assignment)
                        retry = True
        if in_flight:  # no result for them in the response
            self._requeue(in_flight)
            retry = True
        return not retry

    def _requeue(self, assignments: dict[tuple[uuid.UUID, int], Assignment]) -> None:
        for key, assignment in assignments.items():
            self._ready.setdefault(key, assignment)

    def _request(self, assignments: dict[tuple[uuid.UUID, int], Assignment]) -> Any:
        cls = request_type(ASSIGN_REPLICAS_TO_DIRS, 0)
        dir_cls, topic_cls = nested_type(cls, "DirectoryData"), nested_type(cls, "TopicData")
        partition_cls = nested_type(cls, "PartitionData")
        by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
        for assignment in assignments.values():
            topics = by_dir.setdefault(assignment.directory_id, {})
            topics.setdefault(assignment.topic_id, []).append(assignment.partition)
        return cls(
            broker_id=self.node_id,
            broker_epoch=self._broker_epoch(),
            directories=tuple(
                dir_cls(
                    id_=dir_id,
                    topics=tuple(
                        topic_cls(
                            topic_id=topic_id,
                            partitions=tuple(partition_cls(partition_index=p) for p in sorted(parts)),
                        )
                        for topic_id, parts in topics.items()
                    ),
                )
                for dir_id, topics in by_dir.items()
            ),
        )
