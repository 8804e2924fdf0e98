"""LogManager: every partition log in `log.dirs` (Kafka's LogManager).

At start-up it reads the clean-shutdown marker and the root checkpoints of each log dir and loads every
partition directory through the LogLoader. While running, `run_periodic` (called by the broker on a
timer) applies retention, flush.ms, deferred file deletion and the checkpoint intervals, and gives the
log cleaner (compaction, see `cleaner`) its turn: swaps of cleaned segments happen on this thread. At
shutdown it stops the cleaner, flushes and closes every log, writes the checkpoints and the
`.kafka_cleanshutdown` marker.
The metadata log (`__cluster_metadata-0`) is left to its owner, as Kafka's LogManager leaves it to Raft.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from formats.checkpoints import read_offset_checkpoint, write_clean_shutdown, write_offset_checkpoint
from formats.errors import CheckpointError
from formats.segment import parse_partition_dir
from kcli.broker.log.cleaner import CleanerConfig, LogCleaner
from kcli.broker.log.config import LogConfig
from kcli.broker.log.log import Log, wall_clock_ms
from kcli.config import CLUSTER_METADATA_TOPIC, BrokerConfig
from kcli.files import create_if_missing, fsync_dir, write_atomically

log = logging.getLogger("kcli.broker.log")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_ROOT_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)


class LogManager:
    """The logs of this broker, one per (topic, partition), spread over `log.dirs`."""

    def __init__(self, config: BrokerConfig, *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.clock = now_ms
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.default_config = LogConfig.from_broker(config)
        self._logs: dict[tuple[str, int], Log] = {}
        self._logs_per_dir: dict[Path, int] = {}
        """How many live logs each log dir holds: a new partition goes to the dir with fewest (O(1) a log)."""
        self._logs_to_delete: list[tuple[int, Log]] = []
        self._had_clean_shutdown: dict[Path, bool] = {}
        self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcli-log-flush")
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
                if state is not None:
                    lines.append(f"{path}: a -{state} replica directory, left alone")
                    continue
                key = (tp.topic, tp.partition)
                if key in self._logs:
                    raise RuntimeError(
                        f"Duplicate log directories for {tp} are found in both {self._logs[key].dir} and {path}."
                    )
                self._logs[key] = Log.load(
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
                )
                self._logs_per_dir[log_dir] = self._logs_per_dir.get(log_dir, 0) + 1
        lines.extend(self.cleaner.startup())
        self._started = True
        for line in lines:
            log.info("%s", line)
        return lines

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

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> Iterable[Log]:
        return list(self._logs.values())

    def create_log(self, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig) -> Log:
        """The partition's log, created with its partition.metadata if it does not exist yet."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            if existing.topic_id is not None and existing.topic_id != topic_id:
                raise ValueError(
                    f"Tried to create log for {topic}-{partition} with topic id {topic_id}, but the log has "
                    f"topic id {existing.topic_id}"
                )
            existing.update_config(config)
            return existing
        log_dir = min(self.log_dirs, key=lambda d: self._logs_per_dir.get(d, 0))
        created = Log.create(
            log_dir / f"{topic}-{partition}",
            config,
            topic_id,
            clock=self.clock,
            flush_scheduler=self._flusher.submit,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        self._logs[(topic, partition)] = created
        self._logs_per_dir[log_dir] = self._logs_per_dir.get(log_dir, 0) + 1
        return created

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<topic>-<partition>.<uuid>-delete`; remove it after the delete delay."""
        removed = self._logs.pop((topic, partition), None)
        if removed is None:
            return
        self._logs_per_dir[removed.dir.parent] -= 1
        self.cleaner.remove_log(removed)
        suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
        target = removed.dir.with_name(topic[: 255 - len(suffix)] + suffix)
        removed.dir.rename(target)
        fsync_dir(target.parent)
        removed.dir = target
        self._logs_to_delete.append((self.clock(), removed))
        self._write_checkpoints(target.parent, hw=False)

    # --- periodic work -------------------------------------------------------------------------------

    def run_periodic(self, now_ms: int) -> None:
        """Retention, flush.ms, deferred deletes and checkpoints, each when its interval has passed."""
        self.cleaner.poll(now_ms)
        config = self.config
        logs = list(self._logs.values())
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
        logs = [each for each in self._logs.values() if each.dir.parent == log_dir]
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
        self._flusher.shutdown(wait=True)
        for each in self._logs.values():
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
