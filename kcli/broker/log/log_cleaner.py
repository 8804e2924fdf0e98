"""LogCleaner: compaction of the logs whose cleanup.policy includes `compact` (Kafka's LogCleaner):
the cleaner thread, what it hands back to the broker thread, and the calls that abort, pause and move
cleans. One clean of one log is `cleaner.Cleaner`'s; which log is next, `cleaner_manager`'s.

Threads: the broker runs on one event-loop thread and so does every Log and Segment. The cleaner thread
only reads segment files (through descriptors of its own) and writes `.cleaned` files; each finished
group is handed back to the broker thread (`poll`, called from `LogManager.run_periodic`, or a callback
scheduled on the running loop), which swaps it in with `Log.replace_segments`. The old files stay
readable as `.deleted` for file.delete.delay.ms, so sendfiles in flight finish. A crash at any point
leaves `.cleaned` files (deleted at start-up) or `.swap` files (completed at start-up): see LogLoader.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path

from kcli.broker.log.cleaner import Cleaner, CleanerConfig, CleanerStats, LogCleaningAborted, Swap, Throttler
from kcli.broker.log.cleaner_manager import LogCleanerManager, LogToClean, TopicPartition
from kcli.broker.log.log import Log, wall_clock_ms
from kcli.broker.log.segment import Segment

logger = logging.getLogger("kcli.broker.log.cleaner")


class LogCleaner:
    """Runs cleans on one background thread and swaps their results in on the broker's thread.

    `poll(now_ms)` is the broker thread's part: it performs finished swaps and, when the cleaner thread
    is idle and log.cleaner.backoff.ms has passed since nothing was cleanable, hands it the filthiest
    log. `clean_now` does a whole clean in the caller's thread (tests, benchmarks, tools).
    """

    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: Iterable[Path],
        *,
        logs: Callable[[], Iterable[Log]],
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.manager = LogCleanerManager(log_dirs)
        self.clock = clock
        self._logs = logs
        self._stopping = threading.Event()
        self.throttler = Throttler(config.max_io_bytes_per_second, self._stopping)
        self.cleaner = Cleaner(config, check_done=self._check_done, throttler=self.throttler, clock=clock)
        self._tasks: queue.SimpleQueue[LogToClean | None] = queue.SimpleQueue()
        self._swap_lock = threading.Lock()
        self._swaps: deque[tuple[Log, Segment, list[Segment], Future[bool]]] = deque()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._busy = False
        self._next_run_ms = 0
        self._new_cleaner = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.last_stats: CleanerStats | None = None

    def reconfigure(self, config: CleanerConfig) -> None:
        """Dynamic log.cleaner.* settings (LogCleaner.reconfigure): the I/O throttle and back-off apply at
        once; buffer sizes from the next clean on (a new Cleaner, made while the thread is idle)."""
        buffers_changed = (
            config.num_threads,
            config.dedupe_buffer_size,
            config.dedupe_buffer_load_factor,
            config.io_buffer_size,
            config.max_message_size,
        ) != (
            self.config.num_threads,
            self.config.dedupe_buffer_size,
            self.config.dedupe_buffer_load_factor,
            self.config.io_buffer_size,
            self.config.max_message_size,
        )
        self.config = config
        self.throttler.desired_rate_per_second = config.max_io_bytes_per_second
        self._next_run_ms = 0
        if buffers_changed:
            self._new_cleaner = True

    def startup(self) -> list[str]:
        """Read the cleaner-offset-checkpoint of every log dir (Kafka creates it when missing)."""
        if not self.config.enabled:
            return []
        return self.manager.load_checkpoints()

    # --- the broker thread's side ----------------------------------------------------------------------

    def poll(self, now_ms: int) -> None:
        """Swap in finished groups; start the next clean when the cleaner thread is free and it is time."""
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
        self.run_swaps()
        if not self.config.enabled or self._busy or self._closed or now_ms < self._next_run_ms:
            return
        cleanable = self.manager.grab_filthiest_compacted_log(self._logs(), now_ms, self._live)
        if cleanable is None:
            self._next_run_ms = now_ms + self.config.backoff_ms
            return
        if self._new_cleaner:  # the cleaner thread is idle: no clean holds the old buffers
            self.cleaner = Cleaner(
                self.config, check_done=self._check_done, throttler=self.throttler, clock=self.clock
            )
            self._new_cleaner = False
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kcli-log-cleaner-thread-0", daemon=True)
            self._thread.start()
        self._busy = True
        self._tasks.put(cleanable)

    def run_swaps(self) -> None:
        """Swap every finished `.cleaned` segment into its log (the broker thread owns the segment lists)."""
        while True:
            with self._swap_lock:
                if not self._swaps:
                    return
                log, cleaned, old, future = self._swaps.popleft()
            try:
                swapped = self._swap_now(log, cleaned, old)
            except Exception:  # noqa: BLE001 - the broker thread must go on; the loader repairs at restart
                logger.exception("%s: swapping in %s failed", log.name, cleaned.log_path.name)
                self.manager.mark_partition_uncleanable((log.topic, log.partition))
                swapped = False
            future.set_result(swapped)

    def clean_now(self, now_ms: int | None = None) -> tuple[LogToClean, CleanerStats] | None:
        """Pick the filthiest log and clean it in this thread (swaps included); None if none qualifies."""
        now_ms = self.clock() if now_ms is None else now_ms
        cleanable = self.manager.grab_filthiest_compacted_log(self._logs(), now_ms, self._live)
        if cleanable is None:
            return None
        stats = self._clean_log(cleanable, self._swap_inline, now_ms)
        return cleanable, stats

    def abort_cleaning(self, log: Log) -> None:
        """Stop a clean of `log` in progress at its next check (the log is being deleted or moved)."""
        self.manager.abort_cleaning((log.topic, log.partition))

    def abort_and_pause_cleaning(self, log: Log) -> None:
        """Stop a clean of `log` and clean it no more until `resume_cleaning` (its replica is moving)."""
        self.manager.paused.add((log.topic, log.partition))
        self.abort_cleaning(log)

    def resume_cleaning(self, log: Log) -> None:
        self.manager.paused.discard((log.topic, log.partition))

    def alter_checkpoint_dir(self, log: Log, source_dir: Path, destination_dir: Path) -> None:
        """The log moved from `source_dir` to `destination_dir`: its cleaner checkpoint moves with it."""
        tp = (log.topic, log.partition)
        if not self.config.enabled:
            return
        offset = self.manager.all_cleaner_checkpoints_in(source_dir).get(tp)
        live = self._live()
        if source_dir in self.manager.log_dirs:
            self.manager.update_checkpoint(source_dir, live, remove=tp)
        if offset is not None and destination_dir in self.manager.log_dirs:
            self.manager.update_checkpoint(destination_dir, live, update=(tp, offset))

    def remove_log(self, log: Log) -> None:
        """The log is going away: abort its clean and drop it from its cleaner-offset-checkpoint."""
        self.abort_cleaning(log)
        if self.config.enabled:
            log_dir = log.dir.parent
            if log_dir in self.manager.log_dirs:
                self.manager.update_checkpoint(log_dir, self._live(), remove=(log.topic, log.partition))

    def remove_logs(self, logs: Iterable[Log]) -> None:
        """`remove_log` of many logs (a deleted topic's), each log dir's checkpoint written once for them
        all: they must be gone from the live logs already, whose entries alone the rewrite keeps."""
        log_dirs = set()
        for each in logs:
            self.abort_cleaning(each)
            log_dirs.add(each.dir.parent)
        if self.config.enabled:
            live = self._live()
            for log_dir in log_dirs & set(self.manager.log_dirs):
                self.manager.update_checkpoint(log_dir, live)

    def shutdown(self) -> None:
        """Stop the cleaner thread (a clean in progress is abandoned; its `.cleaned` files are removed)."""
        self._stopping.set()
        with self._swap_lock:
            self._closed = True
            pending = list(self._swaps)
            self._swaps.clear()
        for _, cleaned, _, future in pending:
            cleaned.delete_files()
            future.set_result(False)
        if self._thread is not None:
            self._tasks.put(None)
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                logger.warning("the log cleaner thread did not stop within 30 s")

    def _swap_now(self, log: Log, cleaned: Segment, old: list[Segment]) -> bool:
        tp = (log.topic, log.partition)
        if self.manager.is_aborted(tp) or not any(each is log for each in self._logs()):
            cleaned.delete_files()
            return False
        try:
            swapped = log.replace_segments([cleaned], old, now_ms=self.clock())
        except OSError as e:  # the loader completes or undoes a half-done swap at the next start
            logger.error("%s: swapping in %s failed: %s", log.name, cleaned.log_path.name, e)
            self.manager.mark_partition_uncleanable(tp)
            return False
        if not swapped:
            cleaned.delete_files()
        return swapped

    def _swap_inline(self, log: Log, cleaned: Segment, old: list[Segment]) -> Future[bool]:
        future: Future[bool] = Future()
        future.set_result(self._swap_now(log, cleaned, old))
        return future

    def _live(self) -> set[TopicPartition]:
        return {(each.topic, each.partition) for each in self._logs()}

    # --- the cleaner thread's side ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            cleanable = self._tasks.get()
            if cleanable is None:
                return
            try:
                self._clean_log(cleanable, self._swap_later, self.clock())
            except Exception:  # noqa: BLE001 - e.g. the checkpoint could not be written; try again later
                logger.exception("the log cleaner failed on %s", cleanable.log.name)
            finally:
                self._busy = False
                self._next_run_ms = 0  # Kafka's cleaner looks for the next log at once after a clean

    def _swap_later(self, log: Log, cleaned: Segment, old: list[Segment]) -> Future[bool]:
        future: Future[bool] = Future()
        with self._swap_lock:
            if self._closed:
                cleaned.delete_files()
                future.set_result(False)
                return future
            self._swaps.append((log, cleaned, old, future))
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self.run_swaps)
            except RuntimeError:  # the loop is closed: shutdown drains the queue
                pass
        return future

    def _clean_log(self, cleanable: LogToClean, swap: Swap, now_ms: int) -> CleanerStats | None:
        """Kafka's CleanerThread.cleanLog: clean, record the new first dirty offset, report."""
        log = cleanable.log
        tp = cleanable.topic_partition
        end_offset = None
        stats = None
        try:
            end_offset, stats = self.cleaner.clean(cleanable, now_ms, swap)
            self.last_stats = stats
            logger.info("%s", stats.summary(log.name, cleanable.first_dirty_offset, end_offset))
        except LogCleaningAborted:
            pass
        except Exception as e:  # noqa: BLE001 - Kafka marks the partition uncleanable and goes on
            logger.warning(
                "Unexpected exception thrown when cleaning log %s. Marking its partition (%s) as uncleanable: %s",
                log.name,
                log.name,
                e,
                exc_info=True,
            )
            self.manager.mark_partition_uncleanable(tp)
            return None
        self.manager.done_cleaning(tp, log.dir.parent, end_offset, self._live())
        return stats

    def _check_done(self, log: Log) -> None:
        if self._stopping.is_set() or self.manager.is_aborted((log.topic, log.partition)):
            raise LogCleaningAborted()
