"""Why offsets are missing from a partition: the classification `kcli verify` and `kcli spark-audit` share.

A gap is a run of offsets that no batch holds between two batches (or between the log start and the
first batch). Kafka creates most gaps on purpose; the kinds name the cause an operator can check:

- `offset_gap_retention`: below the log start offset (retention, DeleteRecords), or the head of the log
  removed when the first batch sits above where the log starts;
- `offset_gap_control_marker`: right after a transactional batch, where the cleaner removed its marker;
- `offset_gap_compaction`: a compacted topic, or a partition where batches show the cleaner's work;
- `offset_gap_unexplained`: nothing above explains it, so records were lost.

The rules are pure functions of what a walk of the partition knows, so a single process walking in
order and a Spark job folding per-range summaries reach the same answer.
"""

from __future__ import annotations

from typing import NamedTuple

from formats.records import CONTROL_BIT, TRANSACTIONAL_BIT

RETENTION = "offset_gap_retention"
CONTROL_MARKER = "offset_gap_control_marker"
COMPACTION = "offset_gap_compaction"
UNEXPLAINED = "offset_gap_unexplained"
OVERLAP = "offset_overlap"

GAP_KINDS = (RETENTION, CONTROL_MARKER, COMPACTION, UNEXPLAINED)

COMPACTED = "the topic is compacted."
COMPACTION_SEEN = "removed by compaction (batches of this partition have records removed by the cleaner)."
UNEXPLAINED_WHY = (
    "nothing explains it (no compaction, not below the log start, not after a transactional batch)."
)


class PartitionFacts(NamedTuple):
    """What decides a gap's kind besides its offsets: known for the whole partition once it is read."""

    log_start_checkpoint: int | None  # from the log dir's log-start-offset-checkpoint
    first_segment_base: int | None  # the base offset the first segment is named after
    compacted: bool  # cleanup.policy=compact known (internal topic, --compacted, cleaner checkpoint)
    compaction_seen: bool  # some batch has fewer records than offsets, or a delete horizon


class Gap(NamedTuple):
    kind: str
    first: int
    last: int
    message: str


def head_gap(first_offset: int, facts: PartitionFacts) -> Gap | None:
    """The offsets between where the log starts and its first batch, if any."""
    checkpointed = facts.log_start_checkpoint is not None
    start = facts.log_start_checkpoint if checkpointed else facts.first_segment_base
    if start is None or first_offset <= start:
        return None
    last = first_offset - 1
    if facts.compacted:
        return _gap(COMPACTION, start, last, COMPACTED)
    source = "log-start-offset-checkpoint" if checkpointed else "segment name"
    return _gap(
        RETENTION,
        start,
        last,
        f"the log starts at offset {start} (its {source}) but its first batch at offset {first_offset}: "
        "the head was removed (retention, DeleteRecords or compaction).",
    )


def inner_gap(first: int, last: int, prev_attributes: int, facts: PartitionFacts) -> Gap:
    """Offsets first..last missing between two batches; prev_attributes are the batch before's."""
    if facts.log_start_checkpoint is not None and last < facts.log_start_checkpoint:
        why = f"below the log start offset {facts.log_start_checkpoint}, so no longer part of the log."
        return _gap(RETENTION, first, last, why)
    if prev_attributes & TRANSACTIONAL_BIT and not prev_attributes & CONTROL_BIT:
        why = "right after a transactional batch, where its transaction marker sat before the cleaner removed it."
        return _gap(CONTROL_MARKER, first, last, why)
    if facts.compacted:
        return _gap(COMPACTION, first, last, COMPACTED)
    if facts.compaction_seen:
        return _gap(COMPACTION, first, last, COMPACTION_SEEN)
    return _gap(UNEXPLAINED, first, last, UNEXPLAINED_WHY)


def shows_compaction(records_count: int, last_offset_delta: int, delete_horizon: bool) -> bool:
    """A v2 batch header the cleaner has worked on: fewer records than offsets, or a delete horizon."""
    return delete_horizon or (0 <= records_count < last_offset_delta + 1)


def _gap(kind: str, first: int, last: int, why: str) -> Gap:
    missing = f"offset {first} is" if first == last else f"offsets {first}..{last} are"
    return Gap(kind, first, last, f"{missing} missing before this batch: {why}")
