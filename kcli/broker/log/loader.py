"""LogLoader: open a partition directory and recover it after an unclean shutdown (reference §4.1).

The order is Kafka's LogLoader.load: leftovers of interrupted deletes, compactions and splits are cleaned
up by the plan `kcli recover logdir` reports too (`formats.log_loader`), every segment is opened (an
index that is missing or fails its cheap sanity check gets the segment recovered at once), and without a
clean-shutdown marker every segment from the one holding the recovery point onward is re-validated. The
first segment that loses bytes has every later segment deleted. What was done is reported in lines an
operator can act on: files, byte positions and offsets.

Recovering a segment also rebuilds its `.txnindex`, as Kafka's recoverSegment does: a producer state of
the loader's own is rebuilt up to the segment's base offset (newest snapshot at or below it, then the
batches in between; later snapshots are dropped, they may describe lost batches) and the segment's
batches are replayed into it one at a time, so each ABORT marker's entry gets the last stable offset of
its moment. The unflushed segments are recovered in order with one such state carried from each to the
next: what Kafka gets by a snapshot after each segment and a fresh state loaded from it, without cutting
each producer's last 5 batches to the one a snapshot keeps. The Log then rebuilds its real producer
state from the newest snapshot left and the batches after it.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from formats.log_loader import offsets_to_snapshot, plan_leftovers, producer_state_replay
from formats.records import Batch
from formats.segment import LOG_SUFFIX, SNAPSHOT_SUFFIX, SWAP_SUFFIX, base_offset_of, unit_size_at, walk
from kcli.broker.log.config import LogConfig
from kcli.broker.log.epochs import LeaderEpochCache
from kcli.broker.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateManager,
    SnapshotProblem,
    replay_batches,
)
from kcli.broker.log.segment import Segment
from kcli.errors import KcliError
from kcli.files import copy_range


class LogRecoveryError(KcliError):
    """Start-up recovery cannot keep what it would cut; the broker stops with this one sentence."""


class LoadedLog(NamedTuple):
    """A partition's segments and offsets after loading."""

    segments: list[Segment]
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    epoch_cache: LeaderEpochCache


class LogLoader:
    """Loads one partition directory; `report` receives one line per repair."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        *,
        log_start_offset_checkpoint: int,
        recovery_point_checkpoint: int,
        had_clean_shutdown: bool,
        now_ms: int,
        report: Callable[[str], None],
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        quarantine: Callable[[], Path] | None = None,
    ) -> None:
        self.quarantine = quarantine
        """Where bytes recovery cuts are kept (the log dir's quarantine, made on first use); None: not kept."""
        self.dir = dir
        self.name = dir.name
        self.config = config
        self.log_start_offset_checkpoint = log_start_offset_checkpoint
        self.recovery_point_checkpoint = recovery_point_checkpoint
        self.had_clean_shutdown = had_clean_shutdown
        self.now_ms = now_ms
        self.report = report
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.segments: list[Segment] = []

    def load(self) -> LoadedLog:
        epoch_cache, problem = LeaderEpochCache.load(self.dir)
        if problem:
            self.report(problem)
        self.epoch_cache = epoch_cache
        self._remove_leftovers()
        self._load_segment_files()
        recovery_point, next_offset = self._recover_log()
        self.segments[-1].resize_indexes(self.config.segment_index_bytes)
        epoch_cache.truncate_from_end(next_offset)
        log_start_offset = max(self.log_start_offset_checkpoint, self.segments[0].base_offset)
        epoch_cache.truncate_from_start(self.log_start_offset_checkpoint)
        return LoadedLog(self.segments, log_start_offset, recovery_point, next_offset, epoch_cache)

    # --- leftovers -----------------------------------------------------------------------------------

    def _remove_leftovers(self) -> None:
        """Delete the leftovers of interrupted deletes, compactions and splits, complete finished swaps and
        delete orphaned indexes, by Kafka's rules (`formats.log_loader`)."""
        names = [p.name for p in self.dir.iterdir() if p.is_file()]
        changes = plan_leftovers(names, self._swap_next_offset)
        for change in changes:
            path = self.dir / change.name
            if change.target is None:
                path.unlink(missing_ok=True)
            else:
                path.rename(self.dir / change.target)
            if change.kind == "invalid_swap":
                self.report(f"{self.name}: deleted {change.name}, left by an interrupted segment split")
            elif change.kind == "swap":
                self.report(f"{self.name}: completed the interrupted swap of {change.name}")
            elif change.kind == "orphaned_index":
                self.report(f"{self.name}: deleted {change.name}, an index without its log file")
        cleaned = sum(1 for c in changes if c.kind == "stray_cleaned")
        if cleaned:
            self.report(f"{self.name}: deleted {cleaned} .cleaned files of an interrupted compaction")

    def _swap_next_offset(self, name: str) -> int:
        """Kafka's readNextOffset of the `.log.swap` file `name`: the offset after its last whole batch."""
        segment = Segment(
            self.dir, _offset_of(name), self.config, now_ms=self.now_ms, create=False, suffix=SWAP_SUFFIX
        )
        try:
            next_offset = segment.base_offset
            for header in segment.batch_headers(0, segment.size):
                next_offset = header.last_offset + 1
            return next_offset
        finally:
            segment.close_handlers()

    # --- segments ------------------------------------------------------------------------------------

    def _load_segment_files(self) -> None:
        for name in sorted(p.name for p in self.dir.iterdir() if p.is_file()):
            base_offset = base_offset_of(name)
            if base_offset is None:
                continue
            if name.endswith(LOG_SUFFIX):
                segment = Segment(self.dir, base_offset, self.config, now_ms=self.now_ms, create=False)
                problem = segment.sanity_check()
                if problem is not None:
                    producer_state = self._producer_state_at(segment)
                    result = segment.recover(self.epoch_cache, producer_state=producer_state)
                    # Rebuilding dropped the later snapshots: the producer state rebuilt after loading
                    # starts from this one (Kafka's recoverSegment takes it too).
                    producer_state.take_snapshot()
                    self.report(f"{self.name}: rebuilt the indexes of {name} ({problem})")
                    if result.truncated_bytes:
                        self._report_truncation(segment, result)
                self.segments.append(segment)

    def _recover_log(self) -> tuple[int, int]:
        """Recover unflushed segments unless the shutdown was clean; returns (recovery point, log end)."""
        if not self.had_clean_shutdown:
            unflushed = [
                s
                for i, s in enumerate(self.segments)
                if i + 1 == len(self.segments)
                or self.segments[i + 1].base_offset > self.recovery_point_checkpoint
            ]
            producer_state = self._producer_state_at(unflushed[0]) if unflushed else None
            for k, segment in enumerate(unflushed):
                assert producer_state is not None
                result = segment.recover(
                    self.epoch_cache,
                    producer_state=producer_state,
                    before_truncate=lambda start, end, offset, s=segment: self._keep(s, start, end, offset),
                )
                if result.truncated_bytes:
                    self._report_truncation(segment, result)
                    self._delete_later_segments(segment, unflushed[k + 1 :])
                    break
        log_end_offset = self._delete_segments_if_log_start_greater_than_log_end()
        if not self.segments:
            self.segments.append(
                Segment(
                    self.dir, self.log_start_offset_checkpoint, self.config, now_ms=self.now_ms, create=True
                )
            )
        if log_end_offset is None:
            log_end_offset = self.segments[-1].read_next_offset()
            return min(self.recovery_point_checkpoint, log_end_offset), log_end_offset
        if self.had_clean_shutdown:
            return log_end_offset, log_end_offset
        return min(self.recovery_point_checkpoint, log_end_offset), log_end_offset

    def _producer_state_at(self, segment: Segment) -> ProducerStateManager:
        """The producer state at `segment`'s base offset in a manager of the loader's own (Kafka's
        recoverSegment); rebuilding it drops the snapshots past that offset, as they may hold the state
        of lost, unflushed batches."""
        producer_state = ProducerStateManager(
            self.dir, self.name, producer_id_expiration_ms=self.producer_id_expiration_ms
        )
        for problem in rebuild_producer_state(
            producer_state,
            self.segments,
            log_start_offset=self.log_start_offset_checkpoint,
            last_offset=segment.base_offset,
            now_ms=self.now_ms,
            reload_from_clean_shutdown=False,
        ):
            self.report(f"{self.name}: deleted {problem.path.name}: {problem.message}")
        return producer_state

    def _delete_later_segments(self, corrupt: Segment, later: list[Segment]) -> None:
        if not later:
            return
        first, total = later[0].base_offset, sum(s.size for s in later)
        last_offset = later[-1].read_next_offset() - 1
        for segment in later:
            self._keep(segment, 0, segment.size, segment.base_offset)
            self.segments.remove(segment)
            segment.delete_files()
            (self.dir / f"{segment.base_offset:020d}{SNAPSHOT_SUFFIX}").unlink(missing_ok=True)
        self.report(
            f"{self.name}: deleted {len(later)} segments after {corrupt.log_path.name} "
            f"({', '.join(s.log_path.name for s in later)}: offsets {first}..{last_offset}, {total} bytes), "
            f"since the segment before them lost bytes"
        )

    def _keep(self, segment: Segment, start: int, end: int, first_offset: int) -> None:
        """Copy bytes [start, end) of the segment to `<quarantine>/<partition>/<first offset>.log` before
        recovery cuts or drops them, as `kcli recover logdir --execute` keeps them (`kcli replay` puts the
        records back). A tail of zeros (a preallocated or torn write) holds nothing and is not kept."""
        if self.quarantine is None or end <= start:
            return
        if _all_zeros(segment.log_path, start, end):
            return
        target = self.quarantine() / self.name / f"{first_offset:020d}{LOG_SUFFIX}"
        try:
            copy_range(segment.log_path, start, end, target)
        except OSError as exc:
            raise LogRecoveryError(
                f"cannot keep the {end - start} bytes start-up recovery cuts from {segment.log_path} in "
                f"{target}: {(exc.strerror or str(exc)).lower()}; stop here and run `kcli recover logdir "
                f"{self.dir.parent} --quarantine DIR` with a writable DIR."
            ) from None
        self.report(f"{self.name}: kept bytes {start}..{end} of {segment.log_path.name} in {target}")

    def _delete_segments_if_log_start_greater_than_log_end(self) -> int | None:
        if not self.segments:
            return None
        log_end_offset = self.segments[-1].read_next_offset()
        if log_end_offset >= self.log_start_offset_checkpoint:
            return log_end_offset
        self.report(
            f"{self.name}: deleted all segments, since the log end offset {log_end_offset} is below the "
            f"checkpointed log start offset {self.log_start_offset_checkpoint}"
        )
        for segment in self.segments:
            self._keep(segment, 0, segment.size, segment.base_offset)
            segment.delete_files()
        self.segments.clear()
        self.epoch_cache.clear()
        return None

    def _report_truncation(self, segment: Segment, result: object) -> None:
        valid, truncated, next_offset, problem, first, last = result  # type: ignore[misc]
        claimed = ""
        if first is not None:
            claimed = f"; the first dropped batch claims offsets {first}..{last}"
        self.report(
            f"{self.name}: truncated {segment.log_path.name} at byte {valid}, dropping {truncated} bytes "
            f"(log end offset now {next_offset}{claimed}): {problem}"
        )


def _all_zeros(path: Path, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the file are all zero, read a window at a time."""
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            if chunk.strip(b"\0"):
                return False
            left -= len(chunk)
    return True


def _offset_of(name: str) -> int:
    offset = base_offset_of(name)
    assert offset is not None, name
    return offset


# --- rebuilding from the log -------------------------------------------------------------------------


def rebuild_producer_state(
    state: ProducerStateManager,
    segments: Sequence[Segment],
    *,
    log_start_offset: int,
    last_offset: int,
    now_ms: int,
    reload_from_clean_shutdown: bool,
) -> list[SnapshotProblem]:
    """Bring the state up to `last_offset` from the newest usable snapshot and the batches after it.

    Kafka's UnifiedLog.rebuildProducerState: after a clean shutdown that left no snapshot (a log written
    before snapshots existed) the scan is skipped and empty snapshots are written at the bases of the last
    two segments and at `last_offset`; otherwise snapshots outside (log start, `last_offset`] are dropped,
    the newest remaining one is loaded and every later batch replayed, with snapshots taken at the last
    two segment bases on the way and at `last_offset` at the end.
    """
    bases = [segment.base_offset for segment in segments]
    if state.latest_snapshot_offset() is None and reload_from_clean_shutdown:
        for offset in offsets_to_snapshot(bases, last_offset):
            state.update_map_end_offset(offset)
            state.take_snapshot()
        return []

    is_empty_before_truncation = state.is_empty() and state.map_end_offset >= last_offset
    problems = state.truncate_and_reload(log_start_offset, last_offset, now_ms)
    if not is_empty_before_truncation:
        by_base = {segment.base_offset: segment for segment in segments}
        for step in producer_state_replay(
            bases,
            map_end_offset=state.map_end_offset,
            log_start_offset=log_start_offset,
            last_offset=last_offset,
        ):
            state.update_map_end_offset(step.start_offset)
            if step.snapshot:
                state.take_snapshot()
            load_producers_from_segment(state, by_base[step.base_offset], step.start_offset, last_offset)
    state.update_map_end_offset(last_offset)
    state.take_snapshot()
    return problems


def load_producers_from_segment(
    state: ProducerStateManager, segment: Segment, start_offset: int, end_offset: int
) -> None:
    """Replay the batches of `segment` holding offsets in [start_offset, end_offset), checking nothing."""
    first = segment.translate_offset(start_offset)
    size = segment.size
    if first is None or first.base_offset >= end_offset or size <= first.position:
        return
    with mmap.mmap(segment.fd, size, prot=mmap.PROT_READ) as data:
        completed = replay_batches(state, data, _batches_below(data, first.position, size, end_offset))
    for done in completed:
        state.complete_txn(done)


def _batches_below(data: mmap.mmap, position: int, size: int, end_offset: int) -> Iterator[Batch]:
    """The batches from `position` on whose base offset is below `end_offset`, framed a window at a time."""
    while position < size:
        end = min(size, position + _REPLAY_WINDOW)
        needed = unit_size_at(data, position)
        if needed is not None and needed > end - position:
            end = min(size, position + needed)
        batches = walk(data, position, end, check_crc=False).batches
        if not batches:
            return
        for batch in batches:
            if batch.base_offset >= end_offset:
                return
            yield batch
        position = batches[-1].position + batches[-1].size


_REPLAY_WINDOW = 64 * 1024 * 1024  # bytes of a segment framed per pass while replaying
