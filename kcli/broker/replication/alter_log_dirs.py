"""Moving a replica between log dirs of this broker (Kafka's ReplicaAlterLogDirsManager and Thread).

AlterReplicaLogDirs (`alter_replica_log_dirs`, ReplicaManager.alterReplicaLogDirs) creates the
partition's future log, `<topic>-<partition>.<uuid>-future`, in the target dir and starts a mover for
it. The mover is a follower of the partition's current log on this same broker: it reads whole
batches from the current log at the future log's end and appends them as a follower would (offsets,
epochs and producer state as written), takes the current log's high watermark and log start offset,
and truncates the future log where the current one was truncated (the leader-epoch check Kafka's
thread makes through OffsetForLeaderEpoch). Once the future log has caught up, the directory
assignment goes to the controller (AssignReplicasToDirs, KIP-858) and, when the controller accepted it
and the future log is still caught up, the log manager swaps it in (the `-future` dir renamed to the
partition's name, the old dir renamed `-delete`) in one step of the event loop, so no append falls
between the check and the swap.

The copy is throttled by `replica.alter.log.dirs.io.max.bytes.per.second`, read from the broker config
on every read so a dynamic change applies at once. Kafka measures the rate over 11 one-second windows
and lets a fetch of replica.fetch.max.bytes through whenever the measured rate is below the bound;
kcli paces instead: each read is at most one second's worth of the bound (at least one batch), and the
next waits until the bytes so far fit the bound, so the rate holds from the first byte.

A partition whose future log is found at start-up (a move interrupted by a restart) gets its mover
again from `maybe_add_log_dir_fetchers`, as ReplicaManager.maybeAddLogDirFetchers; a future log the
controller already had as the replica's dir is swapped in at once (recoverAbandonedFutureLogs).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kcli.broker.log import Log, LogManager, LogStorageError, OffsetOutOfRange, RecordError
from kcli.broker.log.manager import FUTURE_DIR_SUFFIX, LogDirNotFound
from kcli.broker.metadata.controller.partition_change_builder import MV_3_7_IV2
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.broker.replication.assignments_manager import AssignmentsManager
from kcli.broker.replication.manager import ReplicaManager
from kcli.broker.replication.partition import Partition
from kcli.config import BrokerConfig

log = logging.getLogger("kcli.broker.replication")

THROTTLE_CONFIG = "replica.alter.log.dirs.io.max.bytes.per.second"
_IDLE_WAIT_SECONDS = 0.5
_ERROR_BACKOFF_SECONDS = 1.0

PartitionKey = tuple[str, int]


class ReassignmentState(enum.Enum):
    """ReplicaAlterLogDirsThread.ReassignmentState: where the directory assignment stands."""

    NONE = "None"
    """Not sent yet (the future log has not caught up)."""
    QUEUED = "Queued"
    """Queued for the controller, which may or may not have it yet."""
    ACCEPTED = "Accepted"
    """The controller has committed the new directory; the swap may happen."""
    EFFECTIVE = "Effective"
    """The future log has replaced the current one."""

    @property
    def maybe_inconsistent_metadata(self) -> bool:
        return self in (ReassignmentState.QUEUED, ReassignmentState.ACCEPTED)


@dataclass
class _Move:
    key: PartitionKey
    topic_id: uuid.UUID | None
    original_dir: uuid.UUID | None
    state: ReassignmentState = ReassignmentState.NONE
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class AlterLogDirsQuota:
    """Paces the copy to the configured bytes per second (shared by every move of the broker)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._start = 0.0
        self._bytes = 0
        self._rate = 0

    def bound(self) -> int:
        return int(self.config[THROTTLE_CONFIG])  # type: ignore[call-overload]

    def max_read_bytes(self, fetch_max_bytes: int) -> int:
        bound = self.bound()
        return max(1, min(fetch_max_bytes, bound))

    def delay(self) -> float:
        """Seconds to wait before the next read so the bytes so far stay within the bound."""
        bound = self.bound()
        if bound != self._rate:  # a new bound starts a new measurement
            self._rate, self._start, self._bytes = bound, time.monotonic(), 0
            return 0.0
        if bound >= 2**62:
            return 0.0
        due = self._start + self._bytes / max(bound, 1)
        now = time.monotonic()
        if due <= now:
            if now - due > 1.0:  # idle for a while: do not let the unused time pile up into a burst
                self._start, self._bytes = now, 0
            return 0.0
        return due - now

    def record(self, size: int) -> None:
        self._bytes += size


class ReplicaAlterLogDirsManager:
    def __init__(
        self,
        replicas: ReplicaManager,
        logs: LogManager,
        config: BrokerConfig,
        assignments: AssignmentsManager | None = None,
    ) -> None:
        self.replicas = replicas
        self.logs = logs
        self.config = config
        self.assignments = assignments
        """None until the broker is registered: without it a caught-up future log is swapped in at
        once (Kafka's DirectoryEventHandler.NOOP)."""
        self.quota = AlterLogDirsQuota(config)
        self._moves: dict[PartitionKey, _Move] = {}
        self._closed = False

    # --- AlterReplicaLogDirs -------------------------------------------------------------------------

    def alter_replica_log_dirs(self, dirs: Iterable[tuple[str, int, str]]) -> dict[PartitionKey, ErrorCode]:
        """ReplicaManager.alterReplicaLogDirs: for each (topic, partition, absolute log dir), start moving
        the replica there, or remember the dir for a log not created yet; the error of each."""
        results: dict[PartitionKey, ErrorCode] = {}
        image = self.replicas.image
        for topic, index, path in dirs:
            key = (topic, index)
            try:
                results[key] = self._alter_one(image, topic, index, path)
            except LogDirNotFound as exc:
                log.warning("Unable to alter log dirs for %s-%d: %s", topic, index, exc)
                results[key] = ErrorCode.log_dir_not_found
            except (LogStorageError, OSError) as exc:
                log.warning("Unable to alter log dirs for %s-%d: %s", topic, index, exc)
                results[key] = ErrorCode.kafka_storage_error
        return results

    def _alter_one(self, image: ClusterMetadataImage | None, topic: str, index: int, path: str) -> ErrorCode:
        # logFutureDirName: <topic>-<partition>.<32 hex>-future must fit a file name (KAFKA-4893)
        if len(f"{topic}-{index}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}") > 255:
            return ErrorCode.invalid_topic_exception
        log_dir = self.logs.configured_log_dir(path)
        if not log_dir.is_dir():
            raise LogStorageError(f"Log directory {path} is offline")
        key = (topic, index)
        future = self.logs.get_log(topic, index, future=True)
        if future is not None and future.dir.parent != log_dir:
            self._stop(key, revert=True)  # the replica is now to go elsewhere: this copy is abandoned
            self.logs.delete_future_log(topic, index)
        self.logs.maybe_update_preferred_log_dir(topic, index, log_dir)
        partition = self.replicas.partition(topic, index)
        if partition is None:
            if image is None or image.partition(topic, index) is None:
                return ErrorCode.unknown_topic_or_partition
            return ErrorCode.replica_not_available  # NotLeaderOrFollower, kept as Kafka answers it here
        if partition.log.dir.parent == log_dir:
            log.info("%s-%d is already in %s; no future replica", topic, index, log_dir)
            return ErrorCode.none
        if self.logs.get_log(topic, index, future=True) is None:
            self.logs.create_future_log(topic, index, log_dir)
            self._start(key)
        return ErrorCode.none

    # --- movers --------------------------------------------------------------------------------------

    def maybe_add_log_dir_fetchers(self) -> None:
        """A mover for every hosted partition with a future log and none running (after a restart, or
        once the partition is hosted)."""
        for future in self.logs.future_logs():
            key = (future.topic, future.partition)
            if key not in self._moves and self.replicas.partition(*key) is not None:
                self._start(key)

    def recover_abandoned_future_logs(self, image: ClusterMetadataImage, node_id: int) -> None:
        """LogManager.recoverAbandonedFutureLogs: a future log in the dir the metadata already names for
        this replica had its assignment accepted before a restart cut the swap: swap it in now."""
        for future in list(self.logs.future_logs()):
            registration = image.partition(future.topic, future.partition)
            if registration is None or node_id not in registration.replicas:
                continue
            position = registration.replicas.index(node_id)
            if position >= len(registration.directories):
                continue
            if self.logs.directory_id(future.dir.parent) == registration.directories[position]:
                log.info("recovering the abandoned future log %s", future.dir)
                self.logs.replace_current_with_future_log(future.topic, future.partition)

    def _start(self, key: PartitionKey) -> None:
        if self._closed or key in self._moves:
            return
        partition = self.replicas.partition(*key)
        image = self.replicas.image
        topic_id = None if image is None else image.topic_id(key[0])
        original = None if partition is None else self.logs.directory_id(partition.log.dir.parent)
        if partition is not None:  # the copy reads the current log as it is: no clean may rewrite it
            self.logs.cleaner.abort_and_pause_cleaning(partition.log)
        move = self._moves[key] = _Move(key, topic_id, original)
        move.task = asyncio.create_task(self._run(move), name=f"kcli-alter-log-dirs-{key[0]}-{key[1]}")
        log.info("Added log dir fetcher for %s-%d", *key)

    def _stop(self, key: PartitionKey, *, revert: bool) -> None:
        """removePartitions: stop the mover; an assignment already sent for it is reverted."""
        move = self._moves.pop(key, None)
        if move is None:
            return
        if move.task is not None and move.task is not asyncio.current_task():
            move.task.cancel()
        if (
            revert
            and move.state.maybe_inconsistent_metadata
            and self.assignments is not None
            and move.topic_id is not None
            and move.original_dir is not None
        ):
            self.assignments.submit(
                move.topic_id, key[1], move.original_dir, "Reverting reassignment for canceled future replica"
            )

    def stop_partition(self, topic: str, partition: int) -> None:
        """The partition is no longer hosted here (deleted, or its replica moved away)."""
        self._stop((topic, partition), revert=False)

    async def shutdown(self) -> None:
        self._closed = True
        tasks = [move.task for move in self._moves.values() if move.task is not None]
        self._moves.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, move: _Move) -> None:
        key = move.key
        while self._moves.get(key) is move:
            partition = self.replicas.partition(*key)
            future = self.logs.get_log(*key, future=True)
            if partition is None or future is None:
                self._stop(key, revert=False)
                return
            try:
                progressed = await self._copy_once(partition.log, future)
                if self._maybe_promote(move, partition, future):
                    return
            except (OSError, LogStorageError, RecordError, OffsetOutOfRange) as exc:
                log.warning("moving %s-%d to %s: %s; retrying", *key, future.dir.parent, exc)
                await asyncio.sleep(_ERROR_BACKOFF_SECONDS)
                continue
            if not progressed:  # caught up: wait for an append, or for the controller's answer
                current, state = partition.log, move.state

                def changed(
                    current: Log = current, future: Log = future, state: ReassignmentState = state
                ) -> bool:
                    return current.log_end_offset != future.log_end_offset or move.state is not state

                await self.replicas.purgatory.wait_until([key], changed, _IDLE_WAIT_SECONDS)

    async def _copy_once(self, current: Log, future: Log) -> bool:
        """One read from the current log appended to the future log, or the throttle's wait before it;
        False when there was nothing to copy."""
        self._maybe_truncate(current, future)
        if future.log_end_offset < current.log_start_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
        progressed = False
        if future.log_end_offset < current.log_end_offset:
            delay = self.quota.delay()
            if delay > 0:
                await asyncio.sleep(delay)
                return True  # look again: the current log may have changed while waiting
            max_bytes = self.quota.max_read_bytes(int(self.config["replica.fetch.max.bytes"]))  # type: ignore[call-overload]
            fetched = current.read(
                future.log_end_offset, max_bytes, upper_bound=current.log_end_offset, min_one_batch=True
            )
            if fetched is not None:
                data = os.pread(fetched.fd, fetched.size, fetched.position)
                future.append_as_follower(data, now_ms=current.clock())
                self.quota.record(len(data))
                progressed = True
        future.update_high_watermark(current.high_watermark)
        start = min(current.log_start_offset, future.high_watermark)
        if start > future.log_start_offset:
            future.maybe_increment_log_start_offset(start)
        return progressed

    @staticmethod
    def _maybe_truncate(current: Log, future: Log) -> None:
        """Truncate the future log to the largest prefix it shares with the current log, by leader
        epochs (the OffsetForLeaderEpoch exchange of AbstractFetcherThread.getOffsetTruncationState)."""
        epoch = future.latest_epoch()
        if epoch is None:
            if future.log_end_offset > current.log_end_offset:
                future.truncate_to(max(current.log_end_offset, future.log_start_offset))
            return
        current_epoch, current_end = current.end_offset_for_epoch(epoch)
        if current_epoch < 0:
            future.truncate_fully_and_start_at(current.log_start_offset)
            return
        if current_epoch == epoch:
            target = min(current_end, future.log_end_offset)
        else:
            _, future_end = future.end_offset_for_epoch(current_epoch)
            target = min(current_end, future_end)
        if target < future.log_end_offset:
            if target < future.log_start_offset:
                future.truncate_fully_and_start_at(current.log_start_offset)
            else:
                future.truncate_to(target)

    def _maybe_promote(self, move: _Move, partition: Partition, future: Log) -> bool:
        """ReplicaAlterLogDirsThread.maybePromoteFutureReplica; True once the future log is swapped in."""
        current = partition.log
        if future.log_end_offset != current.log_end_offset:
            return False
        target_dir = self.logs.directory_id(future.dir.parent)
        image = self.replicas.image
        if (
            self.assignments is None
            or move.topic_id is None
            or target_dir is None
            or image is None
            or (image.metadata_version or 0) < MV_3_7_IV2  # no directories in the metadata to update
        ):
            self._swap(move, partition)
            return True
        if move.state is ReassignmentState.NONE:
            move.state = ReassignmentState.QUEUED

            def accepted() -> None:
                if self._moves.get(move.key) is move:
                    move.state = ReassignmentState.ACCEPTED
                    self.replicas.purgatory.check_and_complete(move.key)

            self.assignments.submit(
                move.topic_id, move.key[1], target_dir, "Future replica promotion", accepted
            )
            return False
        if move.state is ReassignmentState.ACCEPTED:
            self._swap(move, partition)
            return True
        return False

    def _swap(self, move: _Move, partition: Partition) -> None:
        new_log = self.logs.replace_current_with_future_log(*move.key)
        partition.log = new_log
        move.state = ReassignmentState.EFFECTIVE
        self._moves.pop(move.key, None)
        self.replicas.purgatory.check_and_complete(move.key)
        log.info("%s-%d moved to %s", *move.key, new_log.dir.parent)
