"""Rendering shared by every command: progress on stderr for long work, terminals only."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
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
