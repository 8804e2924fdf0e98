"""Reading Kafka's files from disk: segments walked in bounded windows, and the dirs that hold them.

The I/O shell around `formats`: memory stays flat in the file size because each window is mapped,
walked and unmapped before the next (mapped page-cache pages count in RSS while mapped).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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
        """Walk window N+1 on a worker thread while the caller checks window N: the CRC pass releases
        the GIL, so on two cores checksumming and the caller's Python work overlap."""
        with open(self.path, "rb") as f, ThreadPoolExecutor(1, thread_name_prefix="kcli-walk") as pool:
            file_size = os.fstat(f.fileno()).st_size
            limit = file_size if self.max_bytes is None else min(file_size, self.max_bytes)
            if limit - start <= 0:
                self.end = SegmentEnd(start, file_size, StopReason.END, None)
                return
            pending: Future[_Window] | None = pool.submit(self._walk_window, f, start, self.window, limit)
            try:
                while pending is not None:
                    window = pending.result()
                    pending = None
                    result = window.result
                    stop = window.base + result.stop
                    if result.reason is not StopReason.END:
                        self.end = SegmentEnd(stop, file_size, result.reason, window.problem)
                    elif window.base + window.length >= limit:
                        self.end = SegmentEnd(stop, file_size, StopReason.END, None)
                    else:
                        stuck = stop == window.position and window.next_size is not None
                        # a unit bigger than a window gets a window of its own size
                        want = (
                            window.next_size
                            + (stop % mmap.ALLOCATIONGRANULARITY)
                            + mmap.ALLOCATIONGRANULARITY
                            if stuck
                            else self.window
                        )
                        pending = pool.submit(self._walk_window, f, stop, want, limit)
                    try:
                        if result.batches:
                            yield Chunk(window.base, window.view, result.batches)
                    finally:
                        pool.submit(window.close)  # unmapping costs too: off the caller's thread
                    if self.on_progress:
                        self.on_progress(stop)
            finally:
                if pending is not None:
                    pending.result().close()

    def _walk_window(self, f, position: int, want: int, limit: int) -> _Window:
        base = position - position % mmap.ALLOCATIONGRANULARITY
        length = min(max(want, self.window), limit - base)
        window = _Window(f, base, length, position)
        try:
            window.result = walk(window.view, position - base, length, check_crc=self.check_crc)
            window.problem = window.result.problem(window.view)
            window.next_size = unit_size_at(window.view, window.result.stop)
        except BaseException:
            window.close()
            raise
        return window

    def __iter__(self) -> Iterator[tuple[int, memoryview, Batch]]:
        """(file position, window view, batch) for every unit; prefer chunks() in hot loops."""
        for chunk in self.chunks():
            for batch in chunk.batches:
                yield chunk.base + batch.position, chunk.view, batch


class _Window:
    """A read-only mapping of [base, base+length) and what walking it found; always closed."""

    result: WalkResult
    problem: str | None
    next_size: int | None

    def __init__(self, f, base: int, length: int, position: int) -> None:
        self.base, self.length, self.position = base, length, position
        # MAP_POPULATE maps the window's page-cache pages in one call instead of one fault per page.
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        self.map = mmap.mmap(f.fileno(), length, flags=flags, prot=mmap.PROT_READ, offset=base)
        if hasattr(self.map, "madvise"):
            self.map.madvise(mmap.MADV_SEQUENTIAL)
        self.view = memoryview(self.map)

    def close(self) -> None:
        self.view.release()
        self.map.close()
