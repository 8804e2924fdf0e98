"""LogManager: every partition log in `log.dirs` (Kafka's LogManager).

At start-up it reads the clean-shutdown marker and the root checkpoints of each log dir and loads every
partition directory through the LogLoader. While running, `run_periodic` (called by the broker on a
timer) applies retention, flush.ms, deferred file deletion and the checkpoint intervals, and gives the
log cleaner (compaction, see `cleaner`) its turn: swaps of cleaned segments happen on this thread. At
shutdown it stops the cleaner, flushes and closes every log, writes the checkpoints and the
`.kafka_cleanshutdown` marker.

Several log dirs: a new partition goes to the dir the controller assigned it (KIP-858 directory id),
else the one AlterReplicaLogDirs asked for (preferred dir), else the dir with fewest logs. A replica
moving between dirs has a future log, `<topic>-<partition>.<uuid>-future` in the target dir, which a
ReplicaAlterLogDirsThread fills and `replace_current_with_future_log` swaps in; a `-future` dir found at
start-up is loaded as the future log again.
The metadata log (`__cluster_metadata-0`) is left to its owner, as Kafka's LogManager leaves it to Raft.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from formats.checkpoints import (
    read_clean_shutdown,
    read_offset_checkpoint,
    uuid_from_base64,
    write_clean_shutdown,
    write_offset_checkpoint,
)
from formats.errors import CheckpointError
from formats.segment import parse_partition_dir
from kcli.broker.log.cleaner import CleanerConfig
from kcli.broker.log.config import LogConfig
from kcli.broker.log.log import Log, wall_clock_ms
from kcli.broker.log.log_cleaner import LogCleaner
from kcli.config import CLUSTER_METADATA_TOPIC, BrokerConfig
from kcli.files import create_if_missing, fsync_dir, quarantine_beside, write_atomically
from kcli.storage import load_meta_properties

log = logging.getLogger("kcli.broker.log")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_ROOT_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)
FUTURE_DIR_SUFFIX = "-future"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
CREATE_BATCH = 64
"""Partitions made per hop to the creator thread: the loop installs each batch as it is made, so the
first partitions become usable while the rest are still being made."""


class NewLog(NamedTuple):
    """One partition log to create (the arguments of `LogManager.create_log`)."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    config: LogConfig
    target_directory_id: uuid.UUID | None = None


class LogDirNotFound(Exception):
    """A log dir that is not one of `log.dirs` (Kafka's LogDirNotFoundException)."""


def log_dir_name_with_suffix(topic: str, partition: int, suffix: str) -> str:
    """UnifiedLog.logDirNameWithSuffix: `<topic>-<partition>.<uuid without dashes><suffix>`."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{suffix}"


class LogManager:
    """The logs of this broker, one per (topic, partition), spread over `log.dirs`."""

    def __init__(self, config: BrokerConfig, *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.clock = now_ms
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.default_config = LogConfig.from_broker(config)
        self._logs: dict[tuple[str, int], Log] = {}
        self.generation = 0
        """Counts the changes of the set of current logs (a log made, deleted or replaced by its future)."""
        self._future_logs: dict[tuple[str, int], Log] = {}
        """Logs being filled to replace the current log in another dir (AlterReplicaLogDirs)."""
        self._preferred_log_dirs: dict[tuple[str, int], Path] = {}
        self.directory_ids: dict[Path, uuid.UUID] = {}
        """Each log dir's directory.id from its meta.properties (KIP-858)."""
        self._logs_per_dir: dict[Path, int] = {}
        """How many live logs each log dir holds: a new partition goes to the dir with fewest (O(1) a log)."""
        self._logs_to_delete: list[tuple[int, Log]] = []
        self._had_clean_shutdown: dict[Path, bool] = {}
        self._quarantines: dict[Path, Path] = {}
        self.previous_broker_epoch = -1
        """The broker epoch every log dir's clean-shutdown file recorded at start-up, or -1 (KIP-966)."""
        self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcli-log-flush")
        self._creator = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcli-log-create")
        """Makes the files of new partitions (`create_logs`): a few ms each, too slow for the event loop."""
        self.cleaner = LogCleaner(
            CleanerConfig.from_broker(config), self.log_dirs, logs=self.logs, clock=now_ms
        )
        now = now_ms()
        self._last_retention_ms = now
        self._last_recovery_checkpoint_ms = now
        self._last_start_checkpoint_ms = now
        self._last_hw_checkpoint_ms = now
        self._last_producer_expiration_ms = now
        self.producer_id_expiration_ms = int(config["producer.id.expiration.ms"])  # type: ignore[call-overload]
        self.producer_id_expiration_check_interval_ms = int(
            config["producer.id.expiration.check.interval.ms"]  # type: ignore[call-overload]
        )
        self._started = False

    # --- start-up ------------------------------------------------------------------------------------

    def startup(self, topic_configs: Mapping[str, LogConfig] | None = None) -> list[str]:
        """Load every partition dir (recovering after an unclean shutdown); returns what was repaired.

        `topic_configs` gives the config of topics with overrides; other topics get the broker defaults.
        """
        topic_configs = topic_configs or {}
        lines: list[str] = []
        for name, meta in load_meta_properties([str(d) for d in self.log_dirs]).items():
            if meta.directory_id:
                self.directory_ids[Path(name)] = uuid_from_base64(meta.directory_id)
        self.previous_broker_epoch = self._broker_epoch_from_clean_shutdown_files()
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            had_clean_shutdown = marker.exists()
            if had_clean_shutdown:
                marker.unlink()  # a crash while loading must count as unclean next time
                fsync_dir(log_dir)
            self._had_clean_shutdown[log_dir.resolve()] = had_clean_shutdown
            recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, lines)
            log_starts = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, lines)
            high_watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, lines)
            for name in _ROOT_CHECKPOINTS:
                create_if_missing(log_dir / name)
            partition_dirs = []
            for path in sorted(log_dir.iterdir()):
                parsed = parse_partition_dir(path.name)
                if parsed is None or not path.is_dir() or parsed[0].topic == CLUSTER_METADATA_TOPIC:
                    continue
                partition_dirs.append((path, parsed[0], parsed[1]))
            live = sum(1 for _, _, state in partition_dirs if state is None)
            if live and not had_clean_shutdown:
                lines.append(f"{log_dir}: no clean shutdown marker, recovering {live} logs")
            for path, tp, state in partition_dirs:
                if state == "delete":
                    self._logs_to_delete.append((self.clock(), _DirOnly(path)))  # type: ignore[arg-type]
                    continue
                if state is not None and state != "future":
                    lines.append(f"{path}: a -{state} replica directory, left alone")
                    continue
                key = (tp.topic, tp.partition)
                loaded = self._future_logs if state == "future" else self._logs
                if key in loaded:
                    raise RuntimeError(
                        f"Duplicate log directories for {tp} are found in both {loaded[key].dir} and {path}."
                    )
                loaded[key] = Log.load(
                    path,
                    topic_configs.get(tp.topic, self.default_config),
                    log_start_offset_checkpoint=log_starts.get(key, 0),
                    recovery_point_checkpoint=recovery_points.get(key, 0),
                    high_watermark_checkpoint=high_watermarks.get(key),
                    had_clean_shutdown=had_clean_shutdown,
                    clock=self.clock,
                    flush_scheduler=self._flusher.submit,
                    report=lines.append,
                    producer_id_expiration_ms=self.producer_id_expiration_ms,
                    quarantine=lambda log_dir=log_dir: self._quarantine(log_dir),
                )
                self._logs_per_dir[log_dir] = self._logs_per_dir.get(log_dir, 0) + 1
        lines.extend(self.cleaner.startup())
        self._started = True
        for line in lines:
            log.info("%s", line)
        return lines

    def _quarantine(self, log_dir: Path) -> Path:
        """The dir beside `log_dir` where start-up recovery keeps the bytes it cuts (the one `kcli recover
        logdir --execute` uses by default), named on first use."""
        found = self._quarantines.get(log_dir)
        if found is None:
            found = self._quarantines[log_dir] = quarantine_beside(log_dir)
            log.warning("start-up recovery cuts bytes in %s: they are kept in %s", log_dir, found)
        return found

    def _broker_epoch_from_clean_shutdown_files(self) -> int:
        """LogManager.readBrokerEpochFromCleanShutdownFiles: the epoch only when every log dir's
        clean-shutdown file holds one and they agree; -1 otherwise (a dir without the file, one whose
        file has no readable epoch, dirs that disagree)."""
        epoch = None
        for log_dir in self.log_dirs:
            try:
                current = read_clean_shutdown((log_dir / CLEAN_SHUTDOWN_FILE).read_text())
            except (OSError, UnicodeDecodeError):
                current = None
            if current is None:
                log.info("Unable to read the broker epoch in %s.", log_dir)
                return -1
            if epoch is not None and current != epoch:
                log.info(
                    "Found different broker epochs in %s. Other=%d vs current=%d.", log_dir, epoch, current
                )
                return -1
            epoch = current
        return -1 if epoch is None else epoch

    def had_clean_shutdown(self, log_dir: str | Path) -> bool:
        """Whether `log_dir` held the clean-shutdown marker at start-up (for logs loaded elsewhere)."""
        return self._had_clean_shutdown.get(Path(log_dir).resolve(), False)

    def _read_checkpoint(self, path: Path, lines: list[str]) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(path.read_text("utf-8")) if path.exists() else {}
        except (CheckpointError, UnicodeDecodeError, OSError) as e:
            lines.append(f"{path}: unreadable checkpoint ignored, its offsets reset ({e})")
            return {}

    # --- logs ----------------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int, *, future: bool = False) -> Log | None:
        return (self._future_logs if future else self._logs).get((topic, partition))

    def logs(self) -> Iterable[Log]:
        """The current logs (a future log is not a partition's log until it is swapped in)."""
        return list(self._logs.values())

    def future_logs(self) -> Iterable[Log]:
        return list(self._future_logs.values())

    def all_logs(self) -> Iterable[Log]:
        """Current and future logs, as Kafka's allLogs (what DescribeLogDirs lists)."""
        return [*self._logs.values(), *self._future_logs.values()]

    # --- log dirs ------------------------------------------------------------------------------------

    def configured_log_dir(self, log_dir: str) -> Path:
        """The `log.dirs` entry whose absolute path is `log_dir` (isLogDirOnline's check); else
        LogDirNotFound."""
        for each in self.log_dirs:
            if os.path.abspath(each) == log_dir:
                return each
        raise LogDirNotFound(f"Log dir {log_dir} is not found in the config.")

    def directory_id(self, log_dir: Path) -> uuid.UUID | None:
        return self.directory_ids.get(log_dir)

    def directory_path(self, directory_id: uuid.UUID) -> Path | None:
        for path, each in self.directory_ids.items():
            if each == directory_id:
                return path
        return None

    def maybe_update_preferred_log_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Remember where the partition's log is to be created, unless its current or future log is
        there already (LogManager.maybeUpdatePreferredLogDir)."""
        key = (topic, partition)
        current, future = self._logs.get(key), self._future_logs.get(key)
        if (current is None or current.dir.parent != log_dir) and (
            future is None or future.dir.parent != log_dir
        ):
            self._preferred_log_dirs[key] = log_dir

    def _next_log_dirs(self) -> list[Path]:
        """LogManager.nextLogDirs: the dirs by how many logs (current and future) they hold, fewest first."""
        return sorted(self.log_dirs, key=lambda d: self._logs_per_dir.get(d, 0))

    def create_log(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        config: LogConfig,
        *,
        target_directory_id: uuid.UUID | None = None,
    ) -> Log:
        """The partition's log, created with its partition.metadata if it does not exist yet.

        Where (getOrCreateLog): the dir the controller assigned (`target_directory_id`, unless it is
        UNASSIGNED, LOST or unknown here) when AlterReplicaLogDirs named none, else the preferred dir,
        else the dir with fewest logs."""
        existing = self._existing_log(topic, partition, topic_id, config)
        if existing is not None:
            return existing
        log_dir = self._place(topic, partition, target_directory_id)
        try:
            created = self._make_log(log_dir, topic, partition, topic_id, config)
        except BaseException:
            self._logs_per_dir[log_dir] -= 1
            raise
        self._logs[(topic, partition)] = created
        self.generation += 1
        return created

    async def create_logs(
        self,
        wanted: Sequence[NewLog],
        *,
        batch: int = CREATE_BATCH,
        on_batch: Callable[[], object] | None = None,
    ) -> None:
        """`create_log` for many partitions, their files made on the creator thread `batch` at a time so
        the event loop keeps serving (one CreateTopics may bring 10,000 partitions, ~1-3 ms of file work
        each). The dirs are chosen here, in order, as `create_log` chooses them; each log is a partition's
        log only once its files are all made, so nothing reads or writes a half-made dir. A partition
        whose files cannot be made is left out (logged); the caller must not create or delete these
        partitions elsewhere until this returns. `on_batch` runs on the loop after each batch is installed
        (the node hosts those partitions then, a batch at a time rather than thousands in one go)."""
        loop = asyncio.get_running_loop()
        placed: list[tuple[NewLog, Path]] = []
        seen: set[tuple[str, int]] = set()
        for each in wanted:
            key = (each.topic, each.partition)
            if key in seen or self._existing_log(*each[:4]) is not None:
                continue
            seen.add(key)
            placed.append((each, self._place(each.topic, each.partition, each.target_directory_id)))
        for start in range(0, len(placed), batch):
            chunk = placed[start : start + batch]
            made = await loop.run_in_executor(self._creator, self._make_logs, chunk)
            for (each, log_dir), created in zip(chunk, made, strict=True):
                if isinstance(created, Log):
                    self._logs[(each.topic, each.partition)] = created
                    self.generation += 1
                    continue
                self._logs_per_dir[log_dir] -= 1
                log.error(
                    "cannot create the log of %s-%d in %s: %s", each.topic, each.partition, log_dir, created
                )
            if on_batch is not None:
                on_batch()

    def _existing_log(self, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig) -> Log | None:
        """The partition's current log, given `config`; ValueError when it belongs to another topic id."""
        existing = self._logs.get((topic, partition))
        if existing is None:
            return None
        if existing.topic_id is not None and existing.topic_id != topic_id:
            raise ValueError(
                f"Tried to create log for {topic}-{partition} with topic id {topic_id}, but the log has "
                f"topic id {existing.topic_id}"
            )
        existing.update_config(config)
        return existing

    def _place(self, topic: str, partition: int, target_directory_id: uuid.UUID | None) -> Path:
        """The dir a new log of the partition goes to (counted there from now on)."""
        log_dir = self._preferred_log_dirs.pop((topic, partition), None)
        if log_dir is None and target_directory_id is not None:
            log_dir = self.directory_path(target_directory_id)  # None for UNASSIGNED, LOST, unknown
        if log_dir is None:
            log_dir = self._next_log_dirs()[0]
        self._logs_per_dir[log_dir] = self._logs_per_dir.get(log_dir, 0) + 1
        return log_dir

    def _make_log(
        self, log_dir: Path, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig
    ) -> Log:
        """The files of a new log and the log on them (nothing else is touched: safe on any thread)."""
        return Log.create(
            log_dir / f"{topic}-{partition}",
            config,
            topic_id,
            clock=self.clock,
            flush_scheduler=self._flusher.submit,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )

    def _make_logs(self, placed: Sequence[tuple[NewLog, Path]]) -> list[Log | Exception]:
        """`_make_log` of each, on the creator thread: the log or why it could not be made."""
        made: list[Log | Exception] = []
        for each, log_dir in placed:
            try:
                made.append(self._make_log(log_dir, each.topic, each.partition, each.topic_id, each.config))
            except (OSError, ValueError) as e:
                made.append(e)
        return made

    def create_future_log(self, topic: str, partition: int, log_dir: Path) -> Log:
        """An empty `-future` log of the partition in `log_dir`, which must not hold its current log."""
        key = (topic, partition)
        current = self._logs[key]
        if current.dir.parent == log_dir:
            raise ValueError(f"Can not create the future log for {topic}-{partition} in its current log dir")
        existing = self._future_logs.get(key)
        if existing is not None:
            return existing
        self._preferred_log_dirs.pop(key, None)
        self.cleaner.abort_and_pause_cleaning(current)
        created = Log.create(
            log_dir / log_dir_name_with_suffix(topic, partition, FUTURE_DIR_SUFFIX),
            current.config,
            current.topic_id or uuid.uuid4(),
            clock=self.clock,
            flush_scheduler=self._flusher.submit,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        self._future_logs[key] = created
        self._logs_per_dir[log_dir] = self._logs_per_dir.get(log_dir, 0) + 1
        log.info("created future log for %s-%d in %s", topic, partition, log_dir)
        return created

    def replace_current_with_future_log(self, topic: str, partition: int) -> Log:
        """LogManager.replaceCurrentWithFutureLog: the future log becomes `<topic>-<partition>` in its dir
        and the partition's log; the old one is renamed `-delete` and removed after the delete delay.

        The future log is flushed, closed, renamed and opened again (a clean load from its own files),
        which is what Kafka's renameDir with reinitialisation amounts to. Returns the new current log.
        """
        key = (topic, partition)
        source = self._logs.get(key)
        future = self._future_logs.pop(key)
        future.flush_all()
        future.close()
        target = future.dir.with_name(f"{topic}-{partition}")
        future.epoch_cache.rename_dir(target)
        fsync_dir(target.parent)
        high_watermark = future.high_watermark if source is None else source.high_watermark
        loaded = Log.load(
            target,
            future.config,
            log_start_offset_checkpoint=future.log_start_offset,
            recovery_point_checkpoint=future.log_end_offset,
            high_watermark_checkpoint=high_watermark,
            had_clean_shutdown=True,
            clock=self.clock,
            flush_scheduler=self._flusher.submit,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        self._logs[key] = loaded
        self.generation += 1
        if source is not None:
            self._logs_per_dir[source.dir.parent] -= 1
            self.cleaner.alter_checkpoint_dir(loaded, source.dir.parent, target.parent)
        self.cleaner.resume_cleaning(loaded)
        if source is not None:
            suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            doomed = source.dir.with_name(topic[: 255 - len(suffix)] + suffix)
            source.epoch_cache.rename_dir(doomed)
            fsync_dir(doomed.parent)
            source.dir = doomed
            self._logs_to_delete.append((self.clock(), source))
            self._write_checkpoints(doomed.parent, hw=False)
        self._write_checkpoints(target.parent, hw=False)
        log.info(
            "the current log of %s-%d is replaced with its future log in %s", topic, partition, target.parent
        )
        return loaded

    def delete_future_log(self, topic: str, partition: int) -> None:
        """Drop the partition's future log (its move was cancelled or redirected): renamed `-delete`."""
        removed = self._future_logs.pop((topic, partition), None)
        if removed is None:
            return
        self.cleaner.resume_cleaning(removed)
        self._logs_per_dir[removed.dir.parent] -= 1
        target = removed.dir.with_name(log_dir_name_with_suffix(topic, partition, DELETE_DIR_SUFFIX))
        removed.epoch_cache.rename_dir(target)
        fsync_dir(target.parent)
        removed.dir = target
        self._logs_to_delete.append((self.clock(), removed))

    def mark_stray(self, topic: str, partition: int) -> Path | None:
        """Set a log the metadata does not place here aside, never deleting it (Kafka 3.7+'s stray
        logs): flushed, closed, and renamed `<topic>-<partition>.<uuid>-stray`, which later starts
        leave alone; the operator decides what becomes of it. Returns the new dir."""
        removed = self._logs.pop((topic, partition), None)
        self.generation += 1
        if removed is None:
            return None
        self._preferred_log_dirs.pop((topic, partition), None)
        self._logs_per_dir[removed.dir.parent] -= 1
        self.cleaner.remove_log(removed)
        removed.flush_all()
        removed.close()
        suffix = f"-{partition}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"
        target = removed.dir.with_name(topic[: 255 - len(suffix)] + suffix)
        removed.epoch_cache.rename_dir(target)
        fsync_dir(target.parent)
        removed.dir = target
        self._write_checkpoints(target.parent, hw=False)
        return target

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<topic>-<partition>.<uuid>-delete`; remove it after the delete delay."""
        self.delete_logs([(topic, partition)])

    def delete_logs(self, partitions: Iterable[tuple[str, int]]) -> None:
        """`delete_log` of each partition, with one fsync and one checkpoint write per log dir for them
        all (as Kafka's asyncDelete of a batch): deleting a topic of thousands of partitions must not
        rewrite the checkpoints once a partition on the event loop."""
        touched: set[Path] = set()
        doomed = []
        for topic, partition in partitions:
            self.delete_future_log(topic, partition)
            self._preferred_log_dirs.pop((topic, partition), None)
            removed = self._logs.pop((topic, partition), None)
            self.generation += 1
            if removed is not None:
                doomed.append(removed)
        self.cleaner.remove_logs(doomed)  # before the renames: a clean in progress is aborted first
        for removed in doomed:
            topic, partition = removed.topic, removed.partition
            self._logs_per_dir[removed.dir.parent] -= 1
            suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
            target = removed.dir.with_name(topic[: 255 - len(suffix)] + suffix)
            removed.epoch_cache.rename_dir(target)
            touched.add(target.parent)
            removed.dir = target
            self._logs_to_delete.append((self.clock(), removed))
        for log_dir in touched:
            fsync_dir(log_dir)
            self._write_checkpoints(log_dir, hw=False)

    # --- periodic work -------------------------------------------------------------------------------

    def run_periodic(self, now_ms: int) -> None:
        """Retention, flush.ms, deferred deletes and checkpoints, each when its interval has passed."""
        self.cleaner.poll(now_ms)
        config = self.config
        logs = [*self._logs.values(), *self._future_logs.values()]
        if now_ms - self._last_retention_ms >= int(config["log.retention.check.interval.ms"]):  # type: ignore[call-overload]
            self._last_retention_ms = now_ms
            for each in logs:
                each.enforce_retention(now_ms)
        if now_ms - self._last_producer_expiration_ms >= self.producer_id_expiration_check_interval_ms:
            self._last_producer_expiration_ms = now_ms
            for each in logs:
                each.remove_expired_producers(now_ms)
        for each in logs:
            if now_ms - each.last_flush_ms >= each.config.flush_ms:
                self._flusher.submit(each.flush)
            each.delete_pending_segments(now_ms)
        delay = int(config["log.segment.delete.delay.ms"])  # type: ignore[call-overload]
        due = [entry for entry in self._logs_to_delete if entry[0] + delay <= now_ms]
        for entry in due:
            self._logs_to_delete.remove(entry)
            entry[1].close_handlers()
            shutil.rmtree(entry[1].dir, ignore_errors=True)
            log.info("deleted log directory %s", entry[1].dir)
        write_recovery = now_ms - self._last_recovery_checkpoint_ms >= int(
            config["log.flush.offset.checkpoint.interval.ms"]  # type: ignore[call-overload]
        )
        write_start = now_ms - self._last_start_checkpoint_ms >= int(
            config["log.flush.start.offset.checkpoint.interval.ms"]  # type: ignore[call-overload]
        )
        write_hw = now_ms - self._last_hw_checkpoint_ms >= int(
            config["replica.high.watermark.checkpoint.interval.ms"]  # type: ignore[call-overload]
        )
        if write_recovery:
            self._last_recovery_checkpoint_ms = now_ms
        if write_start:
            self._last_start_checkpoint_ms = now_ms
        if write_hw:
            self._last_hw_checkpoint_ms = now_ms
        if write_recovery or write_start or write_hw:
            for log_dir in self.log_dirs:
                self._write_checkpoints(
                    log_dir, recovery=write_recovery, start=write_start, hw=write_hw, write=self._write_later
                )

    def wait_for_flushes(self) -> None:
        """Block until every flush handed to the background flusher so far has finished."""
        self._flusher.submit(lambda: None).result()

    def checkpoint(self) -> None:
        """Write recovery-point, replication-offset and log-start-offset checkpoints of every log dir."""
        for log_dir in self.log_dirs:
            self._write_checkpoints(log_dir)

    def _write_checkpoints(
        self,
        log_dir: Path,
        *,
        recovery: bool = True,
        start: bool = True,
        hw: bool = True,
        write: Callable[[Path, str], object] = write_atomically,
    ) -> None:
        logs = [each for each in self.all_logs() if each.dir.parent == log_dir]
        if recovery:
            entries = {(e.topic, e.partition): e.recovery_point for e in logs}
            write(log_dir / RECOVERY_POINT_CHECKPOINT, write_offset_checkpoint(entries))
        if start:
            entries = {
                (e.topic, e.partition): e.log_start_offset
                for e in logs
                if e.log_start_offset > e.segments[0].base_offset
            }
            write(log_dir / LOG_START_OFFSET_CHECKPOINT, write_offset_checkpoint(entries))
        if hw:
            entries = {(e.topic, e.partition): e.high_watermark for e in logs}
            write(log_dir / REPLICATION_OFFSET_CHECKPOINT, write_offset_checkpoint(entries))

    def _write_later(self, path: Path, text: str) -> None:
        """Periodic checkpoints are written (and fsynced) on the flusher thread, in order, as Kafka's
        scheduler writes them: an fsync on the caller's thread would stall every request behind it."""
        self._flusher.submit(write_atomically, path, text)

    # --- shutdown ------------------------------------------------------------------------------------

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker."""
        self.cleaner.shutdown()
        self._creator.shutdown(wait=True)
        self._flusher.shutdown(wait=True)
        for each in self.all_logs():
            each.flush_all()
            each.close()
        for _, removed in self._logs_to_delete:
            removed.close_handlers()
        for log_dir in self.log_dirs:
            if not log_dir.is_dir():
                continue
            self._write_checkpoints(log_dir)
            if self._started:
                write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, write_clean_shutdown(broker_epoch))


class _DirOnly:
    """A `-delete` directory found at start-up: nothing is loaded from it, it is only removed."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir

    def close_handlers(self) -> None:
        pass
