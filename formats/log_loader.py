"""Kafka's LogLoader rules for a partition directory, written once (reference §4.1).

Sans I/O: file names (and, for a swap, the next offset a batch walk of its `.log.swap` finds) go in, the
loader's changes come out in the order Kafka's LogLoader.load makes them. The broker's loader applies
them; `kcli recover logdir` reports them and, with --execute, applies them through its quarantine. So the
on-disk contract (which leftovers go, which swaps complete, which segments producer state is replayed
from) has one reading.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, NamedTuple

from formats.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    base_offset_of,
)

SNAPSHOT_DELETE_SUFFIX = ".checkpoint.deleted"
"""KRaft snapshots marked for deletion: KafkaMetadataLog's own recovery handles them, not the loader."""

INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

FileChangeKind = Literal[
    "stray_deleted", "stray_cleaned", "invalid_swap", "compacted", "swap", "orphaned_index"
]


class FileChange(NamedTuple):
    """One delete (`target` None) or rename the loader makes, with why (the step of LogLoader.load)."""

    kind: FileChangeKind
    name: str
    target: str | None = None
    swap_range: tuple[int, int] | None = None
    """For "compacted": [lowest swap base, highest swap next offset), the offsets the swaps replace."""
    min_cleaned_offset: int | None = None
    """For "invalid_swap": the lowest `.cleaned` offset it is at or above."""


def plan_leftovers(names: Iterable[str], next_offset_of: Callable[[str], int]) -> list[FileChange]:
    """Kafka's removeTempFilesAndCollectSwapFiles, swap completion and loadSegmentFiles' orphan check.

    `names` are the regular files of the directory; `next_offset_of(name)` is the offset after the last
    batch of the `.log.swap` file `name` (Kafka's readNextOffset), asked only of valid swap logs.

    - `.deleted` files go (interrupted deletes), except KRaft snapshots';
    - a `.swap` at or above the lowest `.cleaned` offset is an interrupted split's and goes (KAFKA-6264),
      then every `.cleaned` goes (an interrupted compaction; one not named after an offset sets no bound,
      where Kafka's offsetFromFile would fail the whole load);
    - the remaining swaps finished being written: every file whose offset lies in [lowest swap log base,
      highest swap log next offset) is what they replace and goes, then each `.swap` loses its suffix;
    - an index whose `.log` is then missing is orphaned and goes.
    """
    names = sorted(names)
    changes: list[FileChange] = []
    cleaned: list[str] = []
    swaps: list[str] = []
    for name in names:
        if name.endswith(DELETED_SUFFIX) and not name.endswith(SNAPSHOT_DELETE_SUFFIX):
            changes.append(FileChange("stray_deleted", name))
        elif name.endswith(CLEANED_SUFFIX):
            cleaned.append(name)
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(name)
    min_cleaned = min((o for o in map(base_offset_of, cleaned) if o is not None), default=None)
    valid_swaps = []
    for name in swaps:
        offset = base_offset_of(name)
        if min_cleaned is not None and offset is not None and offset >= min_cleaned:
            changes.append(FileChange("invalid_swap", name, min_cleaned_offset=min_cleaned))
        else:
            valid_swaps.append(name)
    changes += [FileChange("stray_cleaned", name) for name in cleaned]
    gone = {c.name for c in changes}
    swap_logs = [
        n for n in valid_swaps if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and base_offset_of(n) is not None
    ]
    if swap_logs:
        low = min(base_offset_of(n) for n in swap_logs)  # type: ignore[type-var]
        high = max(next_offset_of(n) for n in swap_logs)
        for name in names:
            offset = base_offset_of(name)
            if name in gone or name.endswith(SWAP_SUFFIX) or offset is None or not low <= offset < high:
                continue
            changes.append(FileChange("compacted", name, swap_range=(low, high)))
    changes += [FileChange("swap", name, name[: -len(SWAP_SUFFIX)]) for name in valid_swaps]
    after = {c.target for c in changes if c.target} | (set(names) - {c.name for c in changes})
    for name in sorted(after):
        if base_offset_of(name) is not None and name.endswith(INDEX_SUFFIXES):
            if name[: name.rindex(".")] + LOG_SUFFIX not in after:
                changes.append(FileChange("orphaned_index", name))
    return changes


# --- producer state --------------------------------------------------------------------------------


class SegmentReplay(NamedTuple):
    """One segment of the producer-state rebuild: replay its batches in [start_offset, last offset),
    after taking a snapshot at `start_offset` when `snapshot` says so."""

    base_offset: int
    start_offset: int
    snapshot: bool


def offsets_to_snapshot(segment_bases: Sequence[int], last_offset: int) -> list[int]:
    """Where rebuildProducerState writes snapshots: the bases of the last two segments and `last_offset`."""
    return [*segment_bases[-2:], last_offset]


def producer_state_replay(
    segment_bases: Sequence[int], *, map_end_offset: int, log_start_offset: int, last_offset: int
) -> list[SegmentReplay]:
    """Kafka's rebuildProducerState past the snapshot it loaded (which left the state at `map_end_offset`):
    every segment holding offsets in [map_end_offset, last_offset) is replayed from its base, the map end
    or the log start, whichever is highest; a snapshot is taken first at the last two segments' bases."""
    if last_offset <= map_end_offset:
        return []
    at = offsets_to_snapshot(segment_bases, last_offset)
    steps = []
    for k, base in enumerate(segment_bases):
        if k + 1 < len(segment_bases) and segment_bases[k + 1] <= map_end_offset:
            continue
        if base >= last_offset:
            break
        start = max(base, map_end_offset, log_start_offset)
        steps.append(SegmentReplay(base, start, base in at))
        map_end_offset = start
    return steps
