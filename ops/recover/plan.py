"""The read-only half of `kcli recover logdir`: every change Kafka's log loader would make to a log dir
after an unclean shutdown, worked out on the files as they are and reported one `Change` at a time.

The decisions are those of Kafka's LogLoader (reference §4.1), taken on `formats` alone so that nothing
is opened for writing:

- leftovers, by the broker's own rules (`formats.log_loader`): `.deleted` and `.cleaned` files go; a
  `.swap` at or above the lowest `.cleaned` offset is the remains of an interrupted split and goes too;
  any other `.swap` completes its swap (the files it replaces go, the suffix is stripped); an index
  without its `.log` goes.
- segments: every batch of every segment is framed and checksummed (Kafka does this past the recovery
  point only; a bad batch below it still fails `kcli verify`, so it is treated the same); the first bad
  one (CRC, framing, an offset no index entry can hold) and everything after it in the segment is cut,
  and every later segment is dropped, as Kafka's recovery deletes them.
- indexes: a segment cut, or whose `.index` / `.timeindex` is missing or fails Kafka's sanity check or
  `kcli verify`, gets both rebuilt by Kafka's sparse rule (`formats.segment.SegmentIndexer`); a cut
  segment's `.txnindex` loses the aborted transactions ending at or after the cut.
- producer snapshots past the recovered log end (or unreadable) go, as Kafka's truncateAndReload drops
  them; where a partition lost batches or snapshots, producer state is rebuilt as Kafka's
  rebuildProducerState does at an unclean start (the latest snapshot above the log start, then every
  batch after it, by the broker's schedule in `formats.log_loader`) and written where it writes it: at
  the start of the last two segments and at the log end.
- an unreadable `.txnindex` is rebuilt from the ABORT markers of its segment (producer state from the
  latest snapshot above the log start and at or below it, else from the log start: Kafka's
  recoverSegment).
- leader-epoch-checkpoint entries starting beyond the recovered log end go (truncateFromEnd); an
  unreadable checkpoint is rebuilt from the batches' epochs (Kafka's assign during recovery).
- root offset checkpoints (recovery point, high watermark, log start) above a partition's recovered log
  end are lowered to it.
- once anything changed, or the dir has no clean-shutdown marker (`.kafka_cleanshutdown`: a broker that
  crashed), the dir is what Kafka's loader leaves after an unclean start, and the marker is written
  last, so that the broker does not recover it a second time (without the marker Kafka re-reads every
  segment from each recovery point). With the
  marker Kafka trusts the producer snapshots and, for a partition that has none, starts with no producer
  state: so a partition whose batches carry producer ids and that has no snapshot gets the ones Kafka's
  unclean start would write. The marker records broker epoch -1, which matches no registration: the
  controller still takes the last shutdown for unclean (KIP-966), as it was.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formats import checkpoints, snapshot
from formats.errors import FormatError
from formats.index import (
    AbortedTxn,
    OffsetIndex,
    TimeIndex,
    encode_aborted_txn,
    encode_offset_entry,
    encode_time_entry,
    read_txn_index,
)
from formats.log_loader import INDEX_SUFFIXES, FileChange, plan_leftovers, producer_state_replay
from formats.records import HEADER_SIZE_UP_TO_MAGIC, MIN_UNIT_SIZE, describe_bad_unit
from formats.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    SegmentIndexer,
    StopReason,
    base_offset_of,
    filename,
    parse_partition_dir,
    walk,
)
from ops.recover.producers import ProducerFold
from ops.verify.findings import Finding
from ops.verify.targets import LEADER_EPOCH_CHECKPOINT

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT = "recovery-point-offset-checkpoint"
REPLICATION = "replication-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
ROOT_CHECKPOINTS = {
    RECOVERY_POINT: "recovery point",
    REPLICATION: "high watermark",
    LOG_START: "log start offset",
}

INDEX_FINDINGS = frozenset(
    {"index_mismatch", "index_corrupt", "index_missing", "time_index_mismatch", "time_index_out_of_order"}
)
"""Findings of `kcli verify` on a .index / .timeindex that rebuilding the segment's indexes clears."""

_INT32_MAX = 2**31 - 1
_METADATA_TOPIC = "__cluster_metadata-"

KINDS = {
    "delete_leftover": "a file Kafka's loader deletes: moved to the quarantine",
    "complete_swap": "a .swap file Kafka's loader renames into place",
    "truncate_segment": "bytes cut from a segment: moved to the quarantine",
    "drop_segment": "a whole segment after a cut one: moved to the quarantine",
    "rebuild_indexes": ".index and .timeindex rewritten from the .log",
    "delete_snapshot": "a producer snapshot Kafka's loader deletes: moved to the quarantine",
    "write_snapshot": "a producer snapshot rebuilt from the log, where Kafka's loader writes one",
    "rebuild_txn_index": "an unreadable .txnindex rewritten from its segment's markers",
    "rewrite_leader_epoch_checkpoint": "leader-epoch-checkpoint rewritten",
    "lower_checkpoint": "a root offset checkpoint entry lowered to the recovered log end",
    "write_clean_shutdown": "Kafka's clean-shutdown marker written, last: the dir needs no recovery of Kafka's",
}


@dataclass
class Change:
    """One change to the log dir: where, what, and (for cut bytes) exactly which offsets and records."""

    partition: str | None  # "topic-3"; None for a root checkpoint file as a whole
    kind: str
    file: str
    message: str
    start: int | None = None  # byte range [start, end) of `file` concerned
    end: int | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    batches: int | None = None
    records: int | None = None
    producers: list[dict] = field(default_factory=list)
    quarantine: str | None = None  # path relative to the quarantine dir where the bytes go
    data: Any = field(default=None, repr=False)  # what the executor needs (new bytes, new name, ...)

    def to_json(self) -> dict:
        out = {
            "type": "change",
            "partition": self.partition,
            "kind": self.kind,
            "file": self.file,
            "start": self.start,
            "end": self.end,
            "firstOffset": self.first_offset,
            "lastOffset": self.last_offset,
            "batches": self.batches,
            "records": self.records,
            "producers": self.producers,
            "quarantine": self.quarantine,
            "message": self.message,
        }
        return out

    def __str__(self) -> str:
        where = self.file if self.start is None else f"{self.file}:{self.start}-{self.end}"
        return f"{where}: {self.kind}: {self.message}"


@dataclass
class PartitionPlan:
    name: str  # the directory name
    path: Path
    log_end: int | None = None  # the recovered log end offset; None without segments
    changes: list[Change] = field(default_factory=list)
    with_marker: list[Change] = field(default_factory=list)
    """Producer snapshots needed only once the clean-shutdown marker is written (see the module doc)."""


@dataclass
class Plan:
    log_dir: Path
    partitions: list[PartitionPlan] = field(default_factory=list)
    root_changes: list[Change] = field(default_factory=list)

    def changes(self) -> Iterator[Change]:
        for partition in self.partitions:
            yield from partition.changes
        yield from self.root_changes

    @property
    def empty(self) -> bool:
        return next(self.changes(), None) is None

    def summary(self) -> dict:
        changes = list(self.changes())
        cut = [c for c in changes if c.kind in ("truncate_segment", "drop_segment")]
        kinds: dict[str, int] = {}
        for c in changes:
            kinds[c.kind] = kinds.get(c.kind, 0) + 1
        return {
            "type": "summary",
            "partitions": len(self.partitions),
            "changes": len(changes),
            "partitionsChanged": len({c.partition for c in changes if c.partition}),
            "bytesRemoved": sum((c.end or 0) - (c.start or 0) for c in cut),
            "recordsRemoved": sum(c.records or 0 for c in cut),
            "kinds": dict(sorted(kinds.items())),
        }


# --- the plan ----------------------------------------------------------------------------------------


def plan_log_dir(
    log_dir: Path,
    *,
    index_interval_bytes: int = 4096,
    verify_findings: Callable[[Path], list[Finding]] | None = None,
) -> Plan:
    """Work out every change recovery makes to `log_dir`; reads only.

    `verify_findings(log_dir)` gives `kcli verify`'s findings, from which index problems Kafka's sanity
    check misses (entries pointing at the wrong batch) are taken; without it only that check is used.
    """
    plan = Plan(log_dir)
    by_index: dict[Path, list[Finding]] = {}
    for finding in verify_findings(log_dir) if verify_findings else ():
        path = Path(finding.file)
        if finding.kind in INDEX_FINDINGS and finding.kind != "index_missing":
            if path.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
                by_index.setdefault(path, []).append(finding)
    index_problems: dict[Path, list[str]] = {}
    for path, found in by_index.items():
        log_path = path.with_name(path.name[: path.name.rindex(".")] + LOG_SUFFIX)
        more = f" (and {len(found) - 1} more findings)" if len(found) > 1 else ""
        reason = f"kcli verify: {path.name}: {found[0].message.rstrip('.')}{more}"
        index_problems.setdefault(log_path, []).append(reason)
    log_ends: dict[tuple[str, int], int] = {}
    log_starts = _read_offset_checkpoint(log_dir / LOG_START)
    for name in sorted(os.listdir(log_dir)):
        parsed = parse_partition_dir(name)
        if parsed is None or not (log_dir / name).is_dir():
            continue
        log_start = log_starts.get(parsed[0]) if parsed[1] is None else None
        partition = _plan_partition(log_dir / name, index_interval_bytes, index_problems, log_start)
        plan.partitions.append(partition)
        if parsed[1] is None and partition.log_end is not None:
            log_ends[tuple(parsed[0])] = partition.log_end
    plan.root_changes = _root_checkpoints(log_dir, log_ends)
    marker = log_dir / CLEAN_SHUTDOWN_FILE
    # Kafka's LogManager loads every partition but the metadata log (KafkaMetadataLog always recovers that)
    loaded = [p for p in plan.partitions if not p.name.startswith(_METADATA_TOPIC)]
    unclean = not marker.is_file() and any(p.log_end is not None for p in loaded)
    if (
        not plan.empty or unclean
    ):  # a crashed broker's dir needs at least the marker: Kafka would re-read it all
        for partition in plan.partitions:
            partition.changes += partition.with_marker
        plan.root_changes.append(_clean_shutdown_marker(marker))
    return plan


def _clean_shutdown_marker(marker: Path) -> Change:
    """The marker Kafka's LogManager looks for: with it the loader skips the recovery kcli has done."""
    why = (
        "the dir is recovered: Kafka's loader, finding the marker, skips its own recovery of every partition; "
        "broker epoch -1 still counts as an unclean shutdown for the controller (KIP-966)."
    )
    if marker.is_file():
        why = f"rewritten ({marker.read_text(errors='replace').strip()} was a clean shutdown before these changes); {why}"
        return Change(None, "write_clean_shutdown", str(marker), why, 0, marker.stat().st_size,
                      quarantine=f"leftovers/{CLEAN_SHUTDOWN_FILE}",
                      data=checkpoints.write_clean_shutdown(-1).encode())  # fmt: skip
    return Change(
        None, "write_clean_shutdown", str(marker), why, data=checkpoints.write_clean_shutdown(-1).encode()
    )


def _plan_partition(
    path: Path, interval: int, index_problems: dict[Path, list[str]], log_start: int | None
) -> PartitionPlan:
    plan = PartitionPlan(path.name, path)
    files = {p.name: p for p in sorted(path.iterdir()) if p.is_file()}
    view = _leftovers(plan, files)  # final name -> the file holding its bytes now
    segments = sorted(
        (base_offset_of(n), n)
        for n in view
        if n.endswith(LOG_SUFFIX) and n.count(".") == 1 and base_offset_of(n) is not None
    )
    epochs_seen: list[
        tuple[int, int]
    ] = []  # (epoch, base offset) of every batch kept, for an unreadable checkpoint
    log_end: int | None = None
    cut = False
    kept: list[tuple[int, Path, int]] = []  # (base offset, file, bytes kept) of each segment left
    for base, name in segments:
        assert base is not None
        source = view[name]
        final = path / name
        if cut:
            _drop_segment(plan, view, final, base)
            continue
        with _mapped(source) as data:
            result = _validate(data, base)
            kept.append((base, source, result.valid))
            for batch in result.kept:
                if batch.magic == 2 and batch.partition_leader_epoch >= 0:
                    epochs_seen.append((batch.partition_leader_epoch, batch.base_offset))
            reasons = []
            if result.valid < len(data):
                plan.changes.append(_truncation(plan, final, data, result, base))
                reasons.append(f"the segment is cut at byte {result.valid}")
                cut = True
            reasons += _index_reasons(view, path, name, base, len(data), index_problems.get(source, []))
            if reasons:
                plan.changes.append(_rebuild(plan, view, final, base, result, interval, reasons, cut))
        log_end = result.next_offset
    plan.log_end = log_end
    if log_end is not None:
        _snapshots(plan, view, log_end)
        if kept:  # Kafka's newLogStartOffset, from the checkpoint as lowered to the log end below
            log_start = max(min(log_start or 0, log_end), kept[0][0])
            _producer_state(plan, view, kept, log_end, log_start)
        _epochs(plan, view, log_end, epochs_seen)
    return plan


# --- leftovers ---------------------------------------------------------------------------------------


def _leftovers(plan: PartitionPlan, files: dict[str, Path]) -> dict[str, Path]:
    """Kafka's leftover, swap and orphaned-index rules (`formats.log_loader`) as changes; returns the dir
    as it is after them (final name -> the file holding its bytes now)."""

    def next_offset_of(name: str) -> int:
        with _mapped(files[name]) as data:
            return _validate(data, base_offset_of(name) or 0, stop_at_bad=False).next_offset

    view = dict(files)
    for change in plan_leftovers(files, next_offset_of):
        source = view.pop(change.name)
        if change.target is not None:
            view[change.target] = source
            plan.changes.append(
                Change(plan.name, "complete_swap", str(source),
                       f"a swap a compaction finished writing: Kafka's loader renames it to {change.target}.",
                       data=plan.path / change.target)
            )  # fmt: skip
        else:
            plan.changes.append(
                _move(
                    plan,
                    "delete_leftover",
                    source,
                    change.name,
                    _why_deleted(change),
                    plan.path / change.name,
                )
            )
    return view


def _why_deleted(change: FileChange) -> str:
    if change.kind == "stray_deleted":
        return "a file an earlier delete left behind (.deleted); Kafka's loader deletes it."
    if change.kind == "invalid_swap":
        return (
            f"a .swap at or above the lowest .cleaned offset {change.min_cleaned_offset}, left by an "
            "interrupted segment split; Kafka's loader deletes it."
        )
    if change.kind == "stray_cleaned":
        return "the output of an interrupted compaction (.cleaned); Kafka's loader deletes it."
    if change.kind == "compacted":
        low, high = change.swap_range or (0, 0)
        return (
            f"replaced by the swap of offsets {low}..{high - 1} that a compaction finished; Kafka's loader "
            "deletes it."
        )
    return "an index without its .log file; Kafka's loader deletes it."


def _move(
    plan: PartitionPlan, kind: str, path: Path, name: str, message: str, final: Path | None = None
) -> Change:
    """Moving `path` to the quarantine; `final` is where it is by then (a swap renamed before it goes)."""
    size = path.stat().st_size
    return Change(
        plan.name, kind, str(final or path), message, 0, size, quarantine=f"{plan.name}/leftovers/{name}"
    )


# --- segments ----------------------------------------------------------------------------------------


@dataclass
class Validated:
    kept: list  # the batches before the first bad one
    valid: int  # bytes they take
    next_offset: int  # the offset after the last kept batch (the base offset when none)
    problem: str | None


def _validate(data: memoryview | bytes, base: int, *, stop_at_bad: bool = True) -> Validated:
    """Kafka's LogSegment.recover on a segment's bytes: batches up to the first that fails ensureValid,
    framing, or the offset range of its segment."""
    size = len(data)
    result = walk(data, 0, size, check_crc=True)
    kept = []
    for batch in result.batches:
        problem = None
        if stop_at_bad and batch.crc_valid is not True:
            problem = f"Record is corrupt (stored crc = {batch.crc}): the batch at byte {batch.position} fails its CRC check"
        elif stop_at_bad and not 0 <= batch.last_offset - base <= _INT32_MAX:
            problem = f"Found offset {batch.last_offset} that cannot be stored relative to the segment's base offset {base}"
        if problem is not None:
            return Validated(kept, batch.position, _next_offset(kept, base), problem)
        kept.append(batch)
    valid = result.stop
    problem = None
    if result.reason is not StopReason.END:
        problem = result.problem(data)
    elif valid < size:
        left = size - valid
        if left < HEADER_SIZE_UP_TO_MAGIC:
            problem = f"{left} bytes at the end are fewer than a batch header (a torn tail)"
        else:
            declared = int.from_bytes(data[valid + 8 : valid + 12], "big", signed=True)
            problem = describe_bad_unit(declared, left, data[valid + 16]) + " (a torn tail)"
    return Validated(kept, valid, _next_offset(kept, base), problem)


def _next_offset(kept: list, base: int) -> int:
    return kept[-1].last_offset + 1 if kept else base


def _cut_contents(data: memoryview | bytes, start: int) -> tuple[list, int]:
    """The batches that still frame in data[start:] (checksums not asked) and the bytes after them."""
    result = walk(data, start, len(data), check_crc=False)
    return result.batches, len(data) - result.stop


def _truncation(plan: PartitionPlan, final: Path, data, result: Validated, base: int) -> Change:
    size = len(data)
    framed, unframed = _cut_contents(data, result.valid)
    records = 0
    producers: dict[int, dict] = {}
    for batch in framed:
        if batch.magic == 2:
            records += batch.records_count
            if batch.producer_id >= 0:
                entry = producers.setdefault(
                    batch.producer_id,
                    {"producerId": batch.producer_id, "producerEpoch": batch.producer_epoch, "firstSequence": batch.base_sequence,
                     "lastSequence": batch.last_sequence, "firstOffset": batch.base_offset, "lastOffset": batch.last_offset,
                     "batches": 0, "transactional": batch.is_transactional},
                )  # fmt: skip
                entry["producerEpoch"] = batch.producer_epoch
                entry["lastSequence"] = batch.last_sequence
                entry["lastOffset"] = batch.last_offset
                entry["batches"] += 1
                entry["transactional"] = entry["transactional"] or batch.is_transactional
        else:
            try:
                records += len(batch.records(data))
            except FormatError:
                records += 1
    first = framed[0].base_offset if framed else None
    last = framed[-1].last_offset if framed else None
    torn = _torn_header(data, size - unframed) if unframed else None
    if torn is not None:  # the header of a batch written only in part: what it was to hold
        first = torn["baseOffset"] if first is None else first
        last = torn["lastOffset"]
        if torn.get("producerId", -1) >= 0:
            p = producers.setdefault(torn["producerId"], {
                "producerId": torn["producerId"], "producerEpoch": torn["producerEpoch"],
                "firstSequence": torn["baseSequence"], "firstOffset": torn["baseOffset"], "batches": 0,
                "transactional": torn["transactional"]})  # fmt: skip
            p.update(lastSequence=torn["lastSequence"], lastOffset=torn["lastOffset"], torn=True)
    claimed = _claimed_base(data, result.valid)
    name_offset = (
        claimed
        if claimed is not None and result.next_offset <= claimed <= result.next_offset + _INT32_MAX
        else result.next_offset
    )
    what = f"{len(framed)} {'batch' if len(framed) == 1 else 'batches'}"
    if framed:
        what += f" (offsets {first}..{last}, {records} records)"
    if unframed:
        what += f" and {unframed} bytes that do not frame"
        if torn is not None:
            what += (
                f", the start of a batch that claims offsets {torn['baseOffset']}..{torn['lastOffset']}"
                + (f" ({torn['records']} records)" if "records" in torn else "")
            )
    who = ""
    if producers:
        who = "; producers cut: " + ", ".join(
            f"{p['producerId']} (epoch {p['producerEpoch']}, sequences {p['firstSequence']}..{p['lastSequence']})"
            for p in producers.values()
        )
    message = (
        f"{result.problem}: bytes {result.valid}..{size} are cut ({what}){who}; the log end offset becomes "
        f"{result.next_offset} and every later segment is dropped."
    )
    return Change(
        plan.name, "truncate_segment", str(final), message, result.valid, size, first, last, len(framed), records,
        list(producers.values()), f"{plan.name}/{filename(name_offset, LOG_SUFFIX)}", data=result.valid,
    )  # fmt: skip


def _torn_header(data, position: int) -> dict | None:
    """What the v2 header of a unit cut short at `position` declares, as far as its bytes go."""
    view = bytes(data[position : position + 61])
    if len(view) < 27 or view[16] != 2:
        return None
    base = int.from_bytes(view[0:8], "big", signed=True)
    header = {"baseOffset": base, "lastOffset": base + int.from_bytes(view[23:27], "big", signed=True)}
    if len(view) == 61:
        attributes = int.from_bytes(view[21:23], "big")
        base_sequence = int.from_bytes(view[53:57], "big", signed=True)
        header.update(
            producerId=int.from_bytes(view[43:51], "big", signed=True),
            producerEpoch=int.from_bytes(view[51:53], "big", signed=True),
            baseSequence=base_sequence,
            lastSequence=base_sequence + header["lastOffset"] - base if base_sequence >= 0 else -1,
            records=int.from_bytes(view[57:61], "big", signed=True),
            transactional=bool(attributes & 0x10),
        )
    return header


def _claimed_base(data, position: int) -> int | None:
    """The base offset the unit at `position` declares, when its header prefix looks like one."""
    if len(data) - position < HEADER_SIZE_UP_TO_MAGIC:
        return None
    size = int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
    if size < MIN_UNIT_SIZE or data[position + 16] > 2:
        return None
    return int.from_bytes(data[position : position + 8], "big", signed=True)


def _drop_segment(plan: PartitionPlan, view: dict[str, Path], final: Path, base: int) -> None:
    source = view.pop(final.name)
    with _mapped(source) as data:
        framed, unframed = _cut_contents(data, 0)
        size = len(data)
        records = sum(b.records_count if b.magic == 2 else 1 for b in framed)
        pids = sorted({b.producer_id for b in framed if b.magic == 2 and b.producer_id >= 0})
    first = framed[0].base_offset if framed else None
    last = framed[-1].last_offset if framed else None
    message = (
        f"a segment after the one cut: Kafka's recovery deletes it ({size} bytes, "
        + (f"offsets {first}..{last}, {records} records" if framed else "no whole batch")
        + (f", producers {', '.join(map(str, pids))}" if pids else "")
        + ")."
    )
    plan.changes.append(
        Change(plan.name, "drop_segment", str(final), message, 0, size, first, last, len(framed), records,
               [{"producerId": p} for p in pids], f"{plan.name}/{filename(base, LOG_SUFFIX)}")
    )  # fmt: skip
    stem = filename(base, "")
    for suffix in (*INDEX_SUFFIXES, SNAPSHOT_SUFFIX):
        name = stem + suffix
        if name in view:
            plan.changes.append(
                _move(
                    plan,
                    "delete_leftover",
                    view.pop(name),
                    name,
                    f"belongs to the dropped segment {final.name}.",
                )
            )


# --- indexes -----------------------------------------------------------------------------------------


def _index_reasons(
    view: dict[str, Path], path: Path, name: str, base: int, size: int, found: list[str]
) -> list[str]:
    """Why the segment's .index / .timeindex must be rebuilt: missing, failing Kafka's sanity check, or
    failing `kcli verify`; [] when they are fine."""
    if not size:
        return []
    reasons = []
    for suffix, cls in ((INDEX_SUFFIX, OffsetIndex), (TIME_INDEX_SUFFIX, TimeIndex)):
        index_name = filename(base, suffix)
        if index_name not in view:
            reasons.append(f"{index_name} is missing")
            continue
        try:
            index = cls(view[index_name].read_bytes(), base)
            index.sanity_check()
        except FormatError as e:
            reasons.append(f"{index_name} fails Kafka's sanity check: {e}")
    return reasons + found


def index_files(batches: list, base: int, interval: int) -> tuple[bytes, bytes]:
    """The .index and .timeindex Kafka's LogSegment.recover writes for `batches`, trimmed."""
    indexer = SegmentIndexer(interval)
    offsets = bytearray()
    times = bytearray()
    for batch in batches:
        offset_entry, time_entry = indexer.append(
            batch.position, batch.last_offset, batch.max_timestamp, batch.size
        )
        if offset_entry is not None:
            offsets += encode_offset_entry(base, *offset_entry)
            if time_entry is not None:
                times += encode_time_entry(base, *time_entry)
    final = indexer.final_time_entry()
    if final is not None:
        times += encode_time_entry(base, *final)
    return bytes(offsets), bytes(times)


def _rebuild(
    plan: PartitionPlan,
    view: dict[str, Path],
    final: Path,
    base: int,
    result: Validated,
    interval: int,
    reasons: list[str],
    cut: bool,
) -> Change:
    offset_index, time_index = index_files(result.kept, base, interval)
    txn_index = None
    txn_name = filename(base, TXN_INDEX_SUFFIX)
    dropped_txns = 0
    if cut and txn_name in view:
        try:
            aborted = read_txn_index(view[txn_name].read_bytes())
        except FormatError:
            aborted = []
        kept = [t for t in aborted if t.last_offset < result.next_offset]
        dropped_txns = len(aborted) - len(kept)
        if dropped_txns:
            txn_index = b"".join(encode_aborted_txn(t) for t in kept)
    message = (
        f"{'; '.join(reasons)}: {filename(base, INDEX_SUFFIX)} ({len(offset_index) // 8} entries) and "
        f"{filename(base, TIME_INDEX_SUFFIX)} ({len(time_index) // 12} entries) are rebuilt from the .log"
    )
    if dropped_txns:
        message += f", and {dropped_txns} aborted transactions ending at or after offset {result.next_offset} leave {txn_name}"
    return Change(
        plan.name, "rebuild_indexes", str(final), message + ".", data=(offset_index, time_index, txn_index)
    )


# --- snapshots and epochs ----------------------------------------------------------------------------


def _snapshots(plan: PartitionPlan, view: dict[str, Path], log_end: int) -> None:
    for name in sorted(view):
        offset = base_offset_of(name)
        if offset is None or not name.endswith(SNAPSHOT_SUFFIX) or name.count(".") != 1:
            continue
        path = view[name]
        if offset > log_end:
            plan.changes.append(
                _move(
                    plan,
                    "delete_snapshot",
                    path,
                    name,
                    f"a producer snapshot at offset {offset}, beyond the recovered log end offset {log_end}; Kafka's loader deletes it and rebuilds producer state from the log.",
                )
            )
            continue
        try:
            snapshot.read_snapshot(path.read_bytes())
        except FormatError as e:
            plan.changes.append(
                _move(
                    plan,
                    "delete_snapshot",
                    path,
                    name,
                    f"{str(e).rstrip('.')}; Kafka's loader deletes it and rebuilds producer state from the log.",
                )
            )


def _producer_state(
    plan: PartitionPlan,
    view: dict[str, Path],
    kept: list[tuple[int, Path, int]],
    log_end: int,
    log_start: int,
) -> None:
    """Snapshots rebuilt where the partition lost batches or snapshots, and unreadable .txnindex files."""
    deleted = {Path(c.file).name for c in plan.changes if c.kind == "delete_snapshot"}
    snapshots: dict[int, list] = {}  # offset -> entries of each readable snapshot left
    for name in view:
        offset = base_offset_of(name)
        if offset is None or not name.endswith(SNAPSHOT_SUFFIX) or name.count(".") != 1 or name in deleted:
            continue
        try:
            snapshots[offset] = snapshot.read_snapshot(view[name].read_bytes())
        except FormatError:
            continue
    now_ms = int(time.time() * 1000)
    lost = any(c.kind in ("truncate_segment", "drop_segment", "delete_snapshot") for c in plan.changes)
    none_left = not plan.name.startswith(_METADATA_TOPIC) and not any(o <= log_end for o in snapshots)
    if lost or none_left:
        start = _snapshot_to_load(snapshots, log_start, log_end)
        fold = ProducerFold.from_snapshot(snapshots.get(start, ()), now_ms)
        origin = "the log start" if start is None else f"the snapshot at offset {start}"
        start = log_start if start is None else start
        shots = _replay(kept, fold, start, log_end, log_start, snapshots=True)[0]
        why = "where Kafka's loader writes a snapshot at an unclean start"
        if not lost:  # only the marker makes them needed, and only where there is producer state to keep
            why += "; with the clean-shutdown marker and no snapshot it would start with no producer state"
            if not any(content[1] for content in shots.values()):
                shots = {}
        for offset, content in shots.items():
            (plan.changes if lost else plan.with_marker).append(
                Change(plan.name, "write_snapshot", str(plan.path / filename(offset, SNAPSHOT_SUFFIX)),
                       f"producer state rebuilt from {origin} to offset {offset} ({content[1]} producers, "
                       f"{content[2]} open transactions), {why}.",
                       data=content[0])
            )  # fmt: skip
    for k, (base, _, _) in enumerate(kept):
        name = filename(base, TXN_INDEX_SUFFIX)
        if name not in view:
            continue
        try:
            read_txn_index(view[name].read_bytes())
            continue
        except FormatError as e:
            problem = str(e).rstrip(".")
        start = _snapshot_to_load(snapshots, log_start, base)
        fold = ProducerFold.from_snapshot(snapshots.get(start, ()), now_ms)
        end = kept[k + 1][0] if k + 1 < len(kept) else log_end
        from_offset = log_start if start is None else start
        aborted = [
            t
            for t in _replay(kept, fold, from_offset, end, log_start, snapshots=False)[1]
            if t.last_offset >= base
        ]
        plan.changes.append(
            Change(plan.name, "rebuild_txn_index", str(view[name]),
                   f"{problem}: rebuilt from the segment's ABORT markers ({len(aborted)} aborted transactions).",
                   quarantine=f"{plan.name}/leftovers/{name}", data=b"".join(encode_aborted_txn(t) for t in aborted))
        )  # fmt: skip


def _replay(
    kept: list[tuple[int, Path, int]],
    fold: ProducerFold,
    start: int,
    end: int,
    log_start: int,
    *,
    snapshots: bool,
) -> tuple[dict[int, tuple[bytes, int, int]], list[AbortedTxn]]:
    """Feed `fold`, which holds the state at `start`, the batches up to `end` by Kafka's rebuild schedule
    (`formats.log_loader.producer_state_replay`): with `snapshots`, the snapshot (bytes, producers, open
    transactions) at each offset above `start` where Kafka's loader takes one; and the aborted
    transactions its ABORT markers complete."""
    shots = {}
    aborted = []
    by_base = {base: (source, size) for base, source, size in kept}
    steps = producer_state_replay(
        list(by_base), map_end_offset=start, log_start_offset=log_start, last_offset=end
    )
    for step in steps:
        if snapshots and step.snapshot and step.start_offset > start:
            shots[step.start_offset] = (fold.snapshot(), len(fold.producers), fold.open_transactions)
        source, size = by_base[step.base_offset]
        with _mapped(source) as data:
            for batch in walk(data, 0, size, check_crc=False).batches:
                if batch.last_offset < step.start_offset:
                    continue
                if batch.base_offset >= end:
                    break
                txn = fold.feed(batch, data)
                if txn is not None:
                    aborted.append(txn)
    if snapshots and end > start:
        shots[end] = (fold.snapshot(), len(fold.producers), fold.open_transactions)
    return shots, aborted


def _epochs(plan: PartitionPlan, view: dict[str, Path], log_end: int, seen: list[tuple[int, int]]) -> None:
    path = view.get(LEADER_EPOCH_CHECKPOINT)
    if path is None:
        return
    try:
        entries = checkpoints.read_leader_epoch_checkpoint(path.read_text("utf-8"))
        unreadable = None
    except (FormatError, UnicodeDecodeError) as e:
        entries, unreadable = [], str(e).rstrip(".")
    kept = [e for e in entries if e.start_offset <= log_end]
    gone = entries[len(kept) :]
    added = []
    if not plan.name.startswith(_METADATA_TOPIC):  # the Raft log keeps its epochs itself
        for epoch, start in seen:  # Kafka's assign, as recovery calls it for each batch of a newer epoch
            if not kept or epoch > kept[-1].epoch:
                kept.append(checkpoints.EpochEntry(epoch, start))
                added.append(kept[-1])
    if unreadable is not None:
        message = f"{unreadable}; rebuilt from the batches' leader epochs ({len(kept)} entries)."
    elif not gone and not added:
        return
    else:
        parts = []
        if gone:
            parts.append(
                f"{', '.join(f'epoch {e.epoch} from offset {e.start_offset}' for e in gone)} "
                f"{'starts' if len(gone) == 1 else 'start'} beyond the recovered log end offset {log_end}: "
                f"{'that entry is' if len(gone) == 1 else 'those entries are'} removed (Kafka's truncateFromEnd)"
            )
        if added:
            parts.append(
                f"batches of {', '.join(f'epoch {e.epoch} from offset {e.start_offset}' for e in added)} have "
                "no entry: added, as Kafka's recovery assigns them"
            )
        message = "; ".join(parts) + "."
    plan.changes.append(
        Change(plan.name, "rewrite_leader_epoch_checkpoint", str(plan.path / LEADER_EPOCH_CHECKPOINT), message,
               quarantine=f"{plan.name}/leftovers/{LEADER_EPOCH_CHECKPOINT}", data=checkpoints.write_leader_epoch_checkpoint(kept))
    )  # fmt: skip


def _snapshot_to_load(snapshots: dict[int, list], log_start: int, offset: int) -> int | None:
    """The snapshot Kafka's truncateAndReload loads to rebuild the state up to `offset`: the newest in
    (log start, offset] (it deletes the others); None: it starts empty at the log start."""
    return max((o for o in snapshots if log_start < o <= offset), default=None)


def _read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """A root offset checkpoint's entries; {} when it is missing or unreadable."""
    try:
        return checkpoints.read_offset_checkpoint(path.read_text("utf-8"))
    except (OSError, FormatError, UnicodeDecodeError):
        return {}


def _root_checkpoints(log_dir: Path, log_ends: dict[tuple[str, int], int]) -> list[Change]:
    changes = []
    for name, what in ROOT_CHECKPOINTS.items():
        path = log_dir / name
        entries = _read_offset_checkpoint(path)
        for tp, offset in sorted(entries.items()):
            end = log_ends.get(tp)
            if end is None or offset <= end:
                continue
            changes.append(
                Change(f"{tp[0]}-{tp[1]}", "lower_checkpoint", str(path),
                       f"the {what} {offset} of {tp[0]}-{tp[1]} is beyond its recovered log end offset {end}: lowered to {end}.",
                       first_offset=offset, last_offset=end, quarantine=f"leftovers/{name}", data=(tp, end))
            )  # fmt: skip
    return changes


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview | bytes]:
    """The bytes of a file, memory-mapped read-only (an empty file is b"")."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            yield b""
            return
        with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as data:
            view = memoryview(data)
            try:
                yield view
            finally:
                view.release()
