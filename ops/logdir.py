"""Reading Kafka's files from disk: segments walked in bounded windows, and the dirs that hold them.

The I/O shell around `formats`: memory stays flat in the file size because each window is mapped,
walked and unmapped before the next (mapped page-cache pages count in RSS while mapped).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from formats.records import Batch
from formats.segment import StopReason, WalkResult, unit_size_at, walk

WINDOW_BYTES = 16 << 20


class Chunk(NamedTuple):
    """Batches framed in one window: `view[b.position]` is where each starts; file position = base + it."""

    base: int
    view: memoryview
    batches: list[Batch]


class SegmentEnd(NamedTuple):
    """How a walk of a whole segment ended."""

    position: int  # file position after the last whole unit (== valid bytes)
    file_size: int
    reason: StopReason  # END (clean or torn tail) or the corruption that stopped it
    problem: str | None  # one sentence when reason is not END

    @property
    def trailing_bytes(self) -> int:
        return self.file_size - self.position


class SegmentReader:
    """Walk a .log file window by window; after iteration, `end` says where and why it stopped."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        check_crc: bool = True,
        max_bytes: int | None = None,
        window: int = WINDOW_BYTES,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.check_crc = check_crc
        self.max_bytes = max_bytes
        self.window = window
        self.on_progress = on_progress
        self.end: SegmentEnd | None = None

    def chunks(self, start: int = 0) -> Iterator[Chunk]:
        try:
            yield from self._chunks(start)
        finally:
            if self.on_progress and self.end is not None:
                self.on_progress(self.end.file_size)

    def _chunks(self, start: int) -> Iterator[Chunk]:
        with open(self.path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            limit = file_size if self.max_bytes is None else min(file_size, self.max_bytes)
            position = start
            want = self.window
            while True:
                if limit - position <= 0:
                    self.end = SegmentEnd(position, file_size, StopReason.END, None)
                    return
                base = position - position % mmap.ALLOCATIONGRANULARITY
                length = min(max(want, self.window), limit - base)
                with _map(f, base, length) as m:
                    view = memoryview(m)
                    try:
                        result: WalkResult = walk(view, position - base, length, check_crc=self.check_crc)
                        if result.batches:
                            yield Chunk(base, view, result.batches)
                        problem = result.problem(view)
                        next_size = unit_size_at(view, result.stop)
                    finally:
                        view.release()
                stop = base + result.stop
                if self.on_progress:
                    self.on_progress(stop)
                if result.reason is not StopReason.END:
                    self.end = SegmentEnd(stop, file_size, result.reason, problem)
                    return
                at_limit = base + length >= limit
                if at_limit:
                    self.end = SegmentEnd(stop, file_size, StopReason.END, None)
                    return
                if stop == position and next_size is not None:
                    want = (
                        next_size + (stop - base) + mmap.ALLOCATIONGRANULARITY
                    )  # one unit bigger than a window
                else:
                    want = self.window
                position = stop

    def __iter__(self) -> Iterator[tuple[int, memoryview, Batch]]:
        """(file position, window view, batch) for every unit; prefer chunks() in hot loops."""
        for chunk in self.chunks():
            for batch in chunk.batches:
                yield chunk.base + batch.position, chunk.view, batch


class _map:
    """A read-only mapping of [offset, offset+length) that is advised sequential and always closed."""

    def __init__(self, f, offset: int, length: int) -> None:
        # MAP_POPULATE maps the window's page-cache pages in one call instead of one fault per page.
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        self.m = mmap.mmap(f.fileno(), length, flags=flags, prot=mmap.PROT_READ, offset=offset)
        if hasattr(self.m, "madvise"):
            self.m.madvise(mmap.MADV_SEQUENTIAL)

    def __enter__(self) -> mmap.mmap:
        return self.m

    def __exit__(self, *exc) -> None:
        self.m.close()
