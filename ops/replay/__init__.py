"""Replay records from Kafka's segment files into a topic, on our broker or any Kafka cluster.

Sources are read with `kcli.logdir.SegmentReader`; records go out with the standard Produce API, one
connection per partition leader, through an idempotent producer (InitProducerId, sequence numbers) when
the destination offers one. Two paths share one pipeline:

- raw mode re-sends a whole magic v2 batch as it is, compression included; only its producer fields
  (and the transactional bit) change, so its CRC is computed again but nothing is decompressed;
- record mode decodes records, filters them, maps them to partitions and builds new v2 batches.

`Mode.AUTO` takes the raw path for every batch it can (no record-level filter, `same` or `round-robin`
mapping, a batch a producer could have sent) and record mode for the rest (legacy magic v0/v1, compacted
batches with offset gaps, LogAppendTime batches, batches cut by an offset bound).

Resuming is deterministic: batches are a pure function of the sources and the options, generated in one
order (source partitions in turn, records in offset order). The checkpoint keeps, per destination
partition, how many of its batches were acknowledged and the offset after them; a resumed replay
regenerates the batches, skips the acknowledged ones, and counts the records the destination holds
beyond the checkpoint (its log end offset) as batches that landed before the interruption, so nothing is
sent twice provided nothing else writes to those partitions in between.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from formats.records import build_batch
from kcli.cluster import Cluster
from kcli.files import write_atomically
from ops.replay.batch import OutBatch, SourceDone
from ops.replay.destination import log_end_offsets, open_destination
from ops.replay.options import DEFAULT_BATCH_BYTES, Mode, ReplayError, ReplayOptions
from ops.replay.partitioner import Mapping, java_murmur2, partition_for_key
from ops.replay.report import PlannedBatch, Progress, ReplayStats
from ops.replay.sender import Sender
from ops.replay.sources import SourcePartition, find_sources
from ops.replay.walk import SourceWalk, raw_obstacle

CHECKPOINT_INTERVAL_S = 0.5
PROGRESS_INTERVAL_S = 0.1
CHECKPOINT_VERSION = 1


def replay(
    options: ReplayOptions,
    *,
    warn: Callable[[str], object] = lambda line: print(line, file=sys.stderr),
    on_progress: Progress | None = None,
    on_planned: Callable[[PlannedBatch], object] | None = None,
) -> ReplayStats:
    """Run a replay to its end; raises ReplayError (or ClientError) with one sentence when it cannot."""
    keep_freed_heap()
    return asyncio.run(_Replay(options, warn, on_progress, on_planned).run())


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


# --- the replay ----------------------------------------------------------------------------------------


class _Replay:
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
        self.map_file: BinaryIO | None = None
        self.map_path: Path | None = None
        self.last_checkpoint = 0.0
        self.last_progress = 0.0
        self.sender: Sender | None = None

    async def run(self) -> ReplayStats:
        opts = self.options
        started = time.monotonic()
        self.sources = find_sources(opts.source, opts.source_topic, opts.partitions)
        self.total_bytes = sum(s.size for s in self.sources)
        opts.check()
        cluster = await Cluster.connect(
            opts.bootstrap_servers, client_id="kcli-replay", request_timeout=opts.request_timeout
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
        checkpoint = _read_checkpoint(opts.checkpoint) if opts.checkpoint else None
        ends = await log_end_offsets(cluster, opts.topic, self.num_partitions)
        if checkpoint is not None:
            self._resume_from(checkpoint, ends)
        else:
            self.next_offset = ends
        self._open_offset_map(checkpoint)
        self.sender = Sender(cluster, metadata, opts, self._acked, self.warn)
        try:
            await self.sender.start()
            self.stats.idempotent = self.sender.idempotent
            self.stats.producer_id = self.sender.producer_id
            self._write_checkpoint(force=True)
            await self._generate_all()
            await self.sender.drain()
            self._report_progress(force=True)
            if self.map_file is not None:
                self.map_file.flush()
        finally:
            await self.sender.close()
            if opts.checkpoint is not None:
                self._write_checkpoint(force=True)
            if self.map_file is not None:
                self.map_file.close()
        self._finish_offset_map()

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
        if self.options.checkpoint is not None:
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
        if self.map_file is not None:
            topic, source_topic, source_partition = self.options.topic, *out.source.rsplit("-", 1)
            lines = b"".join(
                orjson.dumps(
                    {
                        "sourceTopic": source_topic,
                        "sourcePartition": int(source_partition),
                        "sourceOffset": offset,
                        "topic": topic,
                        "partition": p,
                        "offset": base_offset + index,
                        "count": count,
                    }
                )
                + b"\n"
                for offset, index, count in out.runs
            )
            self.map_file.write(lines)

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

    # --- checkpoint and offset map -------------------------------------------------------------------

    def _fingerprint(self) -> dict[str, Any]:
        opts = self.options
        return {
            "source": str(opts.source.resolve()),
            "sources": [s.name for s in self.sources],
            "topic": opts.topic,
            "partitions": self.num_partitions,
            "mapping": opts.mapping.value,
            "mode": opts.mode.value,
            "filters": [
                opts.from_offset,
                opts.to_offset,
                opts.from_time,
                opts.to_time,
                opts.key_regex,
                opts.committed_only,
            ],
            "compression": None if opts.compression is None else opts.compression.label,
            "batchBytes": opts.batch_bytes,
        }

    def _resume_from(self, checkpoint: dict[str, Any], ends: list[int]) -> None:
        ours = self._fingerprint()
        theirs = checkpoint.get("replay", {})
        for key, value in ours.items():
            if theirs.get(key) != value:
                raise ReplayError(
                    f"{self.options.checkpoint} was written by a different replay ({key} differs): "
                    "run with the same source and options, or remove it."
                )
        dest = checkpoint["destination"]
        for p in range(self.num_partitions):
            entry = dest[str(p)]
            self.acked[p] = entry["ackedBatches"]
            self.next_offset[p] = entry["nextOffset"]
            if ends[p] < self.next_offset[p]:
                raise ReplayError(
                    f"{self.options.topic}-{p} ends at offset {ends[p]}, before the {self.next_offset[p]} "
                    "the checkpoint recorded: its records were deleted since."
                )
            self.landed[p] = ends[p] - self.next_offset[p]
        completed = checkpoint["completedSources"]
        if completed != [s.name for s in self.sources[: len(completed)]]:
            raise ReplayError(f"{self.options.checkpoint} does not match the source partitions found.")
        self.completed = len(completed)
        self.completed_batches = {int(p): n for p, n in checkpoint["completedBatches"].items()}
        for p, n in self.completed_batches.items():
            self.generated[p] = n
        for index in range(self.completed):
            self.source_generated[index] = True
        acked_records = checkpoint["sourcePartitions"]
        for index, source in enumerate(self.sources):
            self.source_acked_records[index] = acked_records.get(source.name, {}).get("ackedRecords", 0)
        self.stats.resumed_records = sum(self.source_acked_records[: self.completed])
        landed = sum(self.landed)
        if landed:
            self.warn(
                f"kcli replay: the destination holds {landed} record(s) sent after the last checkpoint; "
                "they are counted as replayed, not sent again."
            )

    def _write_checkpoint(self, *, force: bool = False) -> None:
        path = self.options.checkpoint
        if path is None or self.options.dry_run:
            return
        now = time.monotonic()
        if not force and now - self.last_checkpoint < CHECKPOINT_INTERVAL_S:
            return
        self.last_checkpoint = now
        map_bytes = 0
        if self.map_file is not None:
            self.map_file.flush()
            map_bytes = self.map_file.tell()
        state = {
            "version": CHECKPOINT_VERSION,
            "replay": self._fingerprint(),
            "complete": self.completed == len(self.sources),
            "producerId": self.stats.producer_id,
            "destination": {
                str(p): {"ackedBatches": self.acked[p], "nextOffset": self.next_offset[p]}
                for p in range(self.num_partitions)
            },
            "sourcePartitions": {
                s.name: {"ackedRecords": self.source_acked_records[i], "complete": i < self.completed}
                for i, s in enumerate(self.sources)
            },
            "completedSources": [s.name for s in self.sources[: self.completed]],
            "completedBatches": {str(p): n for p, n in sorted(self.completed_batches.items())},
            "offsetMapBytes": map_bytes,
        }
        write_atomically(path, orjson.dumps(state, option=orjson.OPT_INDENT_2) + b"\n")

    def _open_offset_map(self, checkpoint: dict[str, Any] | None) -> None:
        path = self.options.offset_map
        if path is None:
            return
        self.map_path = path.with_name(path.name + ".jsonl") if path.suffix == ".parquet" else path
        if checkpoint is not None and self.map_path.exists():
            self.map_file = open(self.map_path, "r+b")  # noqa: SIM115 (closed at the end of the run)
            self.map_file.truncate(checkpoint.get("offsetMapBytes", 0))
            self.map_file.seek(0, os.SEEK_END)
        else:
            self.map_file = open(self.map_path, "wb")  # noqa: SIM115

    def _finish_offset_map(self) -> None:
        path = self.options.offset_map
        if path is None or self.map_path is None or path == self.map_path:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [orjson.loads(line) for line in self.map_path.read_bytes().splitlines() if line]
        columns = ("sourceTopic", "sourcePartition", "sourceOffset", "topic", "partition", "offset", "count")
        table = pa.table({name: [row[name] for row in rows] for name in columns})
        pq.write_table(table, path)
        self.map_path.unlink()


def _read_checkpoint(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        state = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        raise ReplayError(f"{path} is not a replay checkpoint (it is not JSON).") from None
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        raise ReplayError(f"{path} is not a version {CHECKPOINT_VERSION} replay checkpoint.")
    return state


__all__ = [
    "DEFAULT_BATCH_BYTES",
    "Mapping",
    "Mode",
    "PlannedBatch",
    "Progress",
    "ReplayError",
    "ReplayOptions",
    "ReplayStats",
    "SourcePartition",
    "find_sources",
    "java_murmur2",
    "keep_freed_heap",
    "partition_for_key",
    "raw_obstacle",
    "replay",
]
