"""The small files beside the segments: offset checkpoints, producer snapshots, meta.properties and
partition.metadata. Each must parse; a root offset checkpoint must also agree with the partitions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import formats.checkpoints
from formats import snapshot
from formats.errors import FormatError
from ops.verify.context import Context
from ops.verify.findings import checkpoint_sentence, sentence

OffsetEntries = dict[tuple[str, int], tuple[int, int | None]]
"""{(topic, partition): (offset, byte position of its line)}"""


def read_offset_checkpoint(ctx: Context, file: Path) -> OffsetEntries:
    """The entries of an offset checkpoint, or {} after reporting a bad file."""
    data = ctx.read_bytes(file)
    if data is None:
        return {}
    ctx.summary.files += 1
    try:
        entries = formats.checkpoints.read_offset_checkpoint(data.decode("utf-8"))
    except (FormatError, UnicodeDecodeError) as e:
        ctx.find(file, None, None, None, "checkpoint_corrupt", checkpoint_sentence(e, file))
        return {}
    lines = entry_line_positions(data)
    return {
        tp: (offset, lines[i] if i < len(lines) else None) for i, (tp, offset) in enumerate(entries.items())
    }


def check_root_checkpoint(
    ctx: Context, file: Path, entries: OffsetEntries, ranges: dict[tuple[str, int], tuple[int, int]]
) -> None:
    """Each entry against the (log start, log end) of its partition in `ranges`."""
    what = {
        "recovery-point-offset-checkpoint": "recovery point",
        "replication-offset-checkpoint": "high watermark",
        "log-start-offset-checkpoint": "log start offset",
    }[file.name]
    for (topic, partition), (offset, position) in entries.items():
        name = f"{topic}-{partition}"
        if (topic, partition) not in ranges:
            ctx.find(
                file, position, offset, offset, "checkpoint_unknown_partition",
                f"the {what} of {name} is checkpointed, but this log dir holds no directory {name}.",
            )  # fmt: skip
            continue
        log_start, log_end = ranges[(topic, partition)]
        if offset > log_end:
            ctx.find(
                file, position, offset, offset, "checkpoint_beyond_log_end",
                f"the {what} {offset} of {name} is beyond its log end offset {log_end}.",
            )  # fmt: skip
        elif offset < log_start and what != "log start offset":
            ctx.find(
                file, position, offset, offset, "checkpoint_below_log_start",
                f"the {what} {offset} of {name} is below its log start offset {log_start}.",
            )  # fmt: skip


def quiet_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """A checkpoint read only for context: missing or unreadable means no entries."""
    try:
        return formats.checkpoints.read_offset_checkpoint(path.read_text("utf-8"))
    except (OSError, FormatError, UnicodeDecodeError):
        return {}


def check_snapshot(ctx: Context, path: Path) -> None:
    data = ctx.read_bytes(path)
    if data is None:
        return
    ctx.summary.files += 1
    try:
        snapshot.read_snapshot(data)
    except FormatError as e:
        ctx.find(
            path,
            None,
            None,
            None,
            "snapshot_corrupt",
            f"{sentence(e)[:-1]}; Kafka deletes it and rebuilds producer state.",
        )


def read_text_file(ctx: Context, path: Path, parse: Callable[[str], object]) -> None:
    data = ctx.read_bytes(path)
    if data is None:
        return
    ctx.summary.files += 1
    try:
        parse(data.decode("utf-8"))
    except (FormatError, UnicodeDecodeError) as e:
        ctx.find(path, None, None, None, "checkpoint_corrupt", checkpoint_sentence(e, path))


def entry_line_positions(data: bytes) -> list[int]:
    """Byte positions of the entry lines of a checkpoint (after the version and count lines)."""
    starts = [0]
    at = data.find(b"\n")
    while at >= 0 and at + 1 < len(data):
        starts.append(at + 1)
        at = data.find(b"\n", at + 1)
    return starts[2:]
