"""The replay itself: the sources walked into batches, the batches sent, the acknowledgements accounted.

Batches get a number per destination partition as they are generated; acknowledgements, which leaders
send in any order, are accounted for in that order (one held back until those before it are in), so the
acknowledged batches of a partition are always a prefix: what the checkpoint records. A source partition
is complete once all its batches are acknowledged.
"""

from __future__ import annotations

import asyncio
import ctypes
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from formats.records import build_batch
from kcli.cluster import Cluster
from ops.replay.batch import OutBatch, SourceDone
from ops.replay.checkpoint import CHECKPOINT_INTERVAL_S, Checkpoint, Resumed, check_writable, read_checkpoint
from ops.replay.destination import log_end_offsets, open_destination
from ops.replay.offset_map import OffsetMap
from ops.replay.options import ReplayError, ReplayOptions
from ops.replay.report import PlannedBatch, Progress, ReplayStats
from ops.replay.sender import Sender
from ops.replay.sources import SourcePartition, find_sources
from ops.replay.walk import SourceWalk

PROGRESS_INTERVAL_S = 0.1


def replay(
    options: ReplayOptions,
    *,
    warn: Callable[[str], object] = lambda line: print(line, file=sys.stderr),
    on_progress: Progress | None = None,
    on_planned: Callable[[PlannedBatch], object] | None = None,
) -> ReplayStats:
    """Run a replay to its end; raises ReplayError (or ClientError) with one sentence when it cannot."""
    keep_freed_heap()
    return asyncio.run(Replayer(options, warn, on_progress, on_planned).run())


class Replayer:
    """One replay: the sources walked into batches, the batches sent, and their acknowledgements
    accounted for in generation order, for the checkpoint, the offset map and the stats."""

    def __init__(
        self,
        options: ReplayOptions,
        warn: Callable[[str], object],
        on_progress: Progress | None,
        on_planned: Callable[[PlannedBatch], object] | None,
    ) -> None:
        self.options = options
        self.warn = warn
        self.on_progress = on_progress
        self.on_planned = on_planned
        self.stats = ReplayStats()
        self.key_pattern = re.compile(options.key_regex.encode()) if options.key_regex is not None else None
        self.sources: list[SourcePartition] = []
        self.num_partitions = 0
        self.total_bytes = 0
        # bookkeeping of what is acknowledged, in generation order per destination partition
        self.generated: list[int] = []  # batches generated so far, per destination partition
        self.acked: list[int] = []  # acknowledged prefix, per destination partition
        self.next_offset: list[int] = []  # destination offset after the acknowledged prefix
        self.landed: list[int] = []  # records found past the checkpoint, not yet matched to batches
        self.done_ahead: list[dict[int, tuple[OutBatch, int]]] = []
        self.source_outstanding: list[int] = []
        self.source_generated: list[bool] = []
        self.source_batches: list[dict[int, int]] = []
        self.source_acked_records: list[int] = []
        self.completed = 0  # sources [0, completed) have every batch acknowledged
        self.completed_batches: dict[int, int] = {}
        self.checkpoint: Checkpoint | None = None
        self.offset_map: OffsetMap | None = None
        self.last_checkpoint = 0.0
        self.last_progress = 0.0
        self.sender: Sender | None = None

    async def run(self) -> ReplayStats:
        opts = self.options
        started = time.monotonic()
        self.sources = find_sources(opts.source, opts.source_topic, opts.partitions)
        self.total_bytes = sum(s.size for s in self.sources)
        opts.check()
        # Local problems first: nothing on the destination is created or written before they pass.
        if opts.checkpoint is not None and not opts.dry_run:
            read_checkpoint(opts.checkpoint)
        if opts.offset_map is not None and not opts.dry_run:
            check_writable(opts.offset_map, "--offset-map")
        cluster = await Cluster.connect(
            opts.bootstrap_servers,
            client_id=opts.client_id,
            request_timeout=opts.request_timeout,
            security=opts.security,
            connect_timeout=opts.connect_timeout,
        )
        try:
            metadata, self.num_partitions = await open_destination(cluster, opts, self.sources, self.warn)
            self._reset_bookkeeping()
            if opts.dry_run:
                await self._generate_all()
                self._report_progress(force=True)
            else:
                await self._replay(cluster, metadata)
        finally:
            await cluster.close()
        self.stats.elapsed = time.monotonic() - started
        return self.stats

    def _reset_bookkeeping(self) -> None:
        n, s = self.num_partitions, len(self.sources)
        self.generated = [0] * n
        self.acked = [0] * n
        self.next_offset = [0] * n
        self.landed = [0] * n
        self.done_ahead = [{} for _ in range(n)]
        self.source_outstanding = [0] * s
        self.source_generated = [False] * s
        self.source_batches = [{} for _ in range(s)]
        self.source_acked_records = [0] * s

    async def _replay(self, cluster: Cluster, metadata: Any) -> None:
        opts = self.options
        checkpoint = None
        if opts.checkpoint is not None:
            checkpoint = self.checkpoint = Checkpoint(
                opts.checkpoint, opts, self.sources, self.num_partitions
            )
        state = checkpoint.read() if checkpoint is not None else None
        ends = await log_end_offsets(cluster, opts.topic, self.num_partitions)
        resumed = None
        if checkpoint is not None and state is not None:
            resumed = checkpoint.resume(state, ends)
            self._resume(resumed)
        else:
            self.next_offset = ends
        if opts.offset_map is not None:
            resume_at = resumed.offset_map_bytes if resumed is not None else None
            self.offset_map = OffsetMap(opts.offset_map, opts.topic, resume_at)
        self.sender = Sender(cluster, metadata, opts, self._acked, self.warn)
        try:
            await self.sender.start()
            self.stats.idempotent = self.sender.idempotent
            self.stats.producer_id = self.sender.producer_id
            self._write_checkpoint(force=True)
            await self._generate_all()
            await self.sender.drain()
            self._report_progress(force=True)
            if self.offset_map is not None:
                self.offset_map.flush()
        finally:
            await self.sender.close()
            self._write_checkpoint(force=True)
            if self.offset_map is not None:
                self.offset_map.close()
        if self.offset_map is not None:
            self.offset_map.finish()

    # --- generation --------------------------------------------------------------------------------------

    async def _generate_all(self) -> None:
        dry_run = self.options.dry_run
        generated, acked, landed = self.generated, self.acked, self.landed
        submit = self.sender.submit if self.sender is not None else None
        walk = SourceWalk(
            self.options, self.sources, self.stats, self.warn, self.num_partitions, self.key_pattern
        )
        for item in walk.batches(self.completed):
            if type(item) is SourceDone:
                self.source_generated[item.source_index] = True
                self._advance_completed()
                continue
            p = item.partition
            item.index = index = generated[p]
            generated[p] = index + 1
            batches = self.source_batches[item.source_index]
            batches[p] = batches.get(p, 0) + 1
            if dry_run:
                self._plan(item)
            elif index < acked[p]:
                self.stats.resumed_records += item.count
            elif landed[p]:
                self._landed(item)
            else:
                self.source_outstanding[item.source_index] += 1
                assert submit is not None
                await submit(item)
        if not dry_run:
            self._advance_completed()

    def _plan(self, out: OutBatch) -> None:
        if out.raw is None:
            out.payload = build_batch(out.specs, codec=out.codec)
        planned = out.planned()
        self.stats.batches += 1
        self.stats.records += out.count
        self.stats.bytes += planned.bytes
        if out.raw is not None:
            self.stats.raw_batches += 1
        else:
            self.stats.rebuilt_batches += 1
        if self.on_planned:
            self.on_planned(planned)
        self._report_progress()

    # --- acknowledgements --------------------------------------------------------------------------------

    def _acked(self, out: OutBatch, base_offset: int) -> None:
        """The destination acknowledged `out` at `base_offset`: account for it in partition order."""
        p = out.partition
        ahead = self.done_ahead[p]
        if out.index == self.acked[p] and not ahead:  # the usual case: in order, nothing held back
            self._account(out, base_offset)
            if not self.source_outstanding[out.source_index]:
                self._advance_completed()
        else:
            ahead[out.index] = (out, base_offset)
            while self.acked[p] in ahead:
                batch, base = ahead.pop(self.acked[p])
                self._account(batch, base)
            self._advance_completed()
        if self.on_progress:
            self._report_progress()
        if self.checkpoint is not None:
            self._write_checkpoint()

    def _landed(self, out: OutBatch) -> None:
        """A batch the interrupted run sent and the destination holds: count it, send nothing."""
        p = out.partition
        if self.landed[p] < out.count:
            raise ReplayError(
                f"{self.options.topic}-{p} holds {self.landed[p]} record(s) past the checkpoint that do not "
                "make whole batches of this replay: something else wrote to it since the interruption."
            )
        self.landed[p] -= out.count
        self.stats.resumed_records += out.count
        self.source_outstanding[out.source_index] += 1
        self._acked(out, self.next_offset[p])
        self.stats.records -= out.count
        self.stats.bytes -= out.size
        self.stats.batches -= 1

    def _account(self, out: OutBatch, base_offset: int) -> None:
        p = out.partition
        self.acked[p] += 1
        self.next_offset[p] = base_offset + out.count
        self.source_outstanding[out.source_index] -= 1
        self.source_acked_records[out.source_index] += out.count
        self.stats.records += out.count
        self.stats.bytes += out.size
        self.stats.batches += 1
        if out.raw is not None:
            self.stats.raw_batches += 1
        else:
            self.stats.rebuilt_batches += 1
        if self.offset_map is not None:
            self.offset_map.write(out, p, base_offset)

    def _advance_completed(self) -> None:
        while (
            self.completed < len(self.sources)
            and self.source_generated[self.completed]
            and self.source_outstanding[self.completed] == 0
        ):
            for p, n in self.source_batches[self.completed].items():
                self.completed_batches[p] = self.completed_batches.get(p, 0) + n
            self.completed += 1

    def _report_progress(self, *, force: bool = False) -> None:
        """At most every PROGRESS_INTERVAL_S (a terminal redraw per batch would cost more than the batch)."""
        if not self.on_progress:
            return
        now = time.monotonic()
        if not force and now - self.last_progress < PROGRESS_INTERVAL_S:
            return
        self.last_progress = now
        self.on_progress(min(self.stats.source_bytes, self.total_bytes), self.total_bytes, self.stats.records)

    # --- checkpoint ------------------------------------------------------------------------------------

    def _resume(self, resumed: Resumed) -> None:
        """Take up the bookkeeping where the interrupted replay left it."""
        self.acked = resumed.acked_batches
        self.next_offset = resumed.next_offsets
        self.landed = resumed.landed
        self.completed = resumed.completed_sources
        self.completed_batches = resumed.completed_batches
        for p, n in self.completed_batches.items():
            self.generated[p] = n
        for index in range(self.completed):
            self.source_generated[index] = True
        self.source_acked_records = resumed.acked_records
        self.stats.resumed_records = sum(self.source_acked_records[: self.completed])
        landed = sum(self.landed)
        if landed:
            self.warn(
                f"kcli replay: the destination holds {landed} record(s) sent after the last checkpoint; "
                "they are counted as replayed, not sent again."
            )

    def _write_checkpoint(self, *, force: bool = False) -> None:
        """At most every CHECKPOINT_INTERVAL_S unless `force`; nothing without --checkpoint."""
        checkpoint = self.checkpoint
        if checkpoint is None:
            return
        now = time.monotonic()
        if not force and now - self.last_checkpoint < CHECKPOINT_INTERVAL_S:
            return
        self.last_checkpoint = now
        checkpoint.write(
            producer_id=self.stats.producer_id,
            acked_batches=self.acked,
            next_offsets=self.next_offset,
            acked_records=self.source_acked_records,
            completed_sources=self.completed,
            completed_batches=self.completed_batches,
            offset_map_bytes=self.offset_map.flush() if self.offset_map is not None else 0,
        )


def keep_freed_heap() -> None:
    """Let glibc keep freed heap memory instead of handing it back to the kernel at once.

    Every batch makes a few buffers of up to a megabyte (the batch, the request frame); by default glibc
    maps blocks that large afresh, or trims the heap top as soon as they are freed, so each new buffer
    page-faults all of its pages in again: measured, that is most of the cost of building a 512 KiB batch
    (1.2 against 0.17 us per 1 KiB record). Blocks below MMAP_THRESHOLD come from the heap, and up to
    TRIM_THRESHOLD of free heap top is kept. Once per process; nothing happens without glibc.
    """
    global _heap_kept
    if _heap_kept:
        return
    _heap_kept = True
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 16 << 20)
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)


_heap_kept = False
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
