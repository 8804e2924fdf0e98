"""Leader epochs: the runs of offsets each epoch wrote, as the walk meets them, against the
leader-epoch-checkpoint that should map every run to its own epoch.

An epoch run is a list [epoch, first offset, last offset, regressed]; the walk closes a run (sets its last
offset) when the next one starts, and the partition's last run when the partition ends.
"""

from __future__ import annotations

from pathlib import Path

from formats import checkpoints
from formats.errors import FormatError
from ops.verify.checkpoints import entry_line_positions
from ops.verify.context import Context
from ops.verify.findings import checkpoint_sentence


def leader_epoch_change(
    ctx: Context,
    runs: list[list],
    file: Path,
    position: int,
    first: int | None,
    new_epoch: int,
    epoch: int,
    prev_last: int | None,
) -> int:
    """Start a new epoch run; an epoch below the one before is a regression. -1 (no epoch) is skipped."""
    if new_epoch < 0 or first is None:
        return epoch
    regressed = new_epoch < epoch
    if regressed:
        ctx.find(
            file, position, first, first, "leader_epoch_regression",
            f"partition_leader_epoch goes down from {epoch} to {new_epoch} at offset {first}.",
        )  # fmt: skip
    if runs:
        runs[-1][2] = prev_last
    runs.append([new_epoch, first, None, regressed])
    return new_epoch


def check_leader_epoch_checkpoint(
    ctx: Context, file: Path, runs: list[list], log_start: int | None, log_end: int
) -> None:
    """Each epoch run of the log must map, through the checkpoint, to its own epoch.

    `log_start` None: not recorded (a dir pending deletion). Batches before the first entry are then
    not a mismatch: DeleteRecords or retention may have moved the log start past them, and Kafka's
    truncateFromStart moved the first entry with it."""
    ctx.summary.files += 1
    data = ctx.read_bytes(file)
    if data is None:
        return
    try:
        entries = checkpoints.read_leader_epoch_checkpoint(data.decode("utf-8"))
    except (FormatError, UnicodeDecodeError) as e:
        ctx.find(file, None, None, None, "checkpoint_corrupt", checkpoint_sentence(e, file))
        return
    lines = entry_line_positions(data)

    def where(i: int) -> int | None:
        return lines[i] if i < len(lines) else None

    def mismatch(i: int | None, first: int | None, last: int | None, sentence: str) -> None:
        ctx.find(
            file,
            where(i) if i is not None else None,
            first,
            last,
            "leader_epoch_checkpoint_mismatch",
            sentence,
        )

    ordered = []
    for i, (epoch, start) in enumerate(entries):
        if ordered and (epoch <= ordered[-1][1] or start <= ordered[-1][2]):
            mismatch(
                i,
                start,
                start,
                f"entry {epoch} {start} does not come after entry {ordered[-1][1]} {ordered[-1][2]}.",
            )
            continue
        if start > log_end:
            mismatch(
                i,
                start,
                start,
                f"epoch {epoch} starts at offset {start}, beyond the log end offset {log_end}.",
            )
            continue
        ordered.append((i, epoch, start))
    if not ordered:
        return
    starts = [start for _, _, start in ordered]
    for epoch, first, last, regressed in runs:
        if regressed or last is None or last < first:
            continue
        k = _last_at_or_below(starts, first)
        if k < 0:
            if log_start is not None and first >= log_start:
                mismatch(
                    None, first, last,
                    f"offsets {first}..{last} were written in epoch {epoch}, but the first entry starts "
                    f"at offset {starts[0]}.",
                )  # fmt: skip
            continue
        i, cp_epoch, cp_start = ordered[k]
        if cp_epoch != epoch:
            mismatch(
                i, first, last,
                f"offsets {first}..{last} were written in epoch {epoch}, but the entry {cp_epoch} {cp_start} "
                f"assigns offset {first} to epoch {cp_epoch}.",
            )  # fmt: skip
        elif k + 1 < len(ordered) and ordered[k + 1][2] <= last:
            j, next_epoch, next_start = ordered[k + 1]
            mismatch(
                j, first, last,
                f"offsets {first}..{last} were written in epoch {epoch}, but the entry {next_epoch} {next_start} "
                f"starts epoch {next_epoch} inside them.",
            )  # fmt: skip


def _last_at_or_below(sorted_values: list[int], value: int) -> int:
    """Index of the last element <= value, or -1."""
    lo, hi = 0, len(sorted_values)
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_values[mid] <= value:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1
