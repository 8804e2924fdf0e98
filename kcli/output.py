"""Rendering shared by every command: progress on stderr for long work, terminals only."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

PROGRESS_MIN_BYTES = 64 << 20


def progress_for(path: Path, total: int) -> Callable[[int], None] | None:
    """A byte-progress callback drawing a bar on stderr, or None when stderr is not a terminal or the file is small."""
    if total < PROGRESS_MIN_BYTES or not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        return None
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        transient=True,
        console=stderr_console(),
    )
    task = progress.add_task(path.name, total=total)
    progress.start()

    def update(done: int) -> None:
        progress.update(task, completed=done)
        if done >= total:
            progress.stop()

    return update


def stderr_console():
    """A rich console on stderr that respects NO_COLOR: progress never mixes with the report on stdout."""
    from rich.console import Console

    return Console(stderr=True, no_color="NO_COLOR" in os.environ)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode as an unsigned 32-bit value (over UTF-16 code units)."""
    encoded = text.encode("utf-16-le")
    h = 0
    for i in range(0, len(encoded), 2):
        h = (31 * h + int.from_bytes(encoded[i : i + 2], "little")) & 0xFFFFFFFF
    return h


def java_hash_order(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Topic partitions in the order a java.util.HashMap (or HashSet) of TopicPartition iterates them,
    as Kafka's tools print rows from such maps: by bucket of the table the inserts grew (16, doubled
    past a load of 0.75), then in insertion order, taken here as by partition, then topic (what
    Kafka's tools insert in, up to ties of one partition number across topics in one bucket)."""
    keys = sorted(partitions, key=lambda tp: (tp[1], tp[0]))
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(tp: tuple[str, int]) -> int:
        h = (31 * ((31 + tp[1]) & 0xFFFFFFFF) + java_string_hash(tp[0])) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)
