"""Reading Kafka's files from disk: segments walked in bounded windows, and the dirs that hold them.

The I/O shell around `formats`: memory stays flat in the file size because each window is mapped,
walked and unmapped before long (mapped page-cache pages count in RSS while mapped).
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from formats.records import Batch
from formats.segment import StopReason, WalkResult, unit_size_at, walk

WINDOW_BYTES = 16 << 20
READ_AHEAD = 1  # windows walked and waiting for the caller, besides the one the walker is on


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
    """Walk a .log file window by window; after iteration, `end` says where and why it stopped.

    A walker thread maps and walks the windows back to back, up to READ_AHEAD windows ahead of the
    caller: `formats.segment.walk` checksums a window without the GIL, so on two cores the CRC pass
    and the caller's Python work overlap. The walk (page faults and CRC) is the longer of the two, so
    it does nothing else: the caller unmaps each window once it is done with it, and start() lets it
    begin before the caller is ready (while indexes are read, or while the segment before is checked).
    """

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
        self._start: int | None = None
        self._walker: threading.Thread | None = None
        self._windows: queue.Queue[_Window | SegmentEnd | BaseException | None] = queue.Queue(READ_AHEAD)
        self._stopping = False
        self._finished = False  # the walker's last item (how the walk ended) was taken
        self._walked = threading.Event()  # set once the walker has mapped its last window

    @property
    def started(self) -> bool:
        return self._walker is not None

    def start(self, position: int = 0, *, after: SegmentReader | None = None) -> None:
        """Begin walking from `position` in the background now, e.g. while the caller reads indexes.

        With `after`, the walk waits until that reader has walked its whole file: the next segment's
        first windows are ready when the caller reaches them, and at most two walkers map windows.
        chunks() starts the walk itself when start() was not called; close() (or the end of chunks())
        stops it.
        """
        if self._walker is not None:
            raise RuntimeError(f"{self.path}: the walk has already started")
        self._start = position
        self._walker = threading.Thread(
            target=self._walk, args=(position, after), name="kcli-walk", daemon=True
        )
        self._walker.start()

    def chunks(self, start: int = 0) -> Iterator[Chunk]:
        """Every window's batches in file order; the window is unmapped when the caller asks for the next."""
        if self._walker is None:
            self.start(start)
        elif start != self._start:
            raise ValueError(f"{self.path}: the walk started at {self._start}, not {start}")
        try:
            while (window := self._next_window()) is not None:
                try:
                    if window.result.batches:
                        yield Chunk(window.base, window.view, window.result.batches)
                finally:
                    window.close()
                if self.on_progress:
                    self.on_progress(window.base + window.result.stop)
        finally:
            self.close()
            if self.on_progress and self.end is not None:
                self.on_progress(self.end.file_size)

    def close(self) -> None:
        """Stop the walker and unmap every window it mapped; idempotent."""
        if self._walker is None:
            return
        self._stopping = True
        while self._next_window() is not None:
            pass
        self._walker.join()

    def _next_window(self) -> _Window | None:
        """The next window from the walker, or None once it has finished; raises what stopped it."""
        if self._finished:
            return None
        item = self._windows.get()
        if isinstance(item, _Window):
            if self._stopping:
                item.close()
            return item
        self._finished = True
        if isinstance(item, SegmentEnd):
            self.end = item
            return None
        if isinstance(item, BaseException) and not self._stopping:
            raise item
        return None

    def __iter__(self) -> Iterator[tuple[int, memoryview, Batch]]:
        """(file position, window view, batch) for every unit; prefer chunks() in hot loops."""
        for chunk in self.chunks():
            for batch in chunk.batches:
                yield chunk.base + batch.position, chunk.view, batch

    # --- the walker thread --------------------------------------------------------------------------------

    def _walk(self, start: int, after: SegmentReader | None) -> None:
        """Put every window in order, then how the walk ended: a SegmentEnd, or the exception that
        stopped it, or None when the caller stopped it first."""
        last: SegmentEnd | BaseException | None = None
        try:
            while after is not None and not after._walked.wait(0.05):
                if self._stopping:
                    return
            with open(self.path, "rb") as f:
                last = self._walk_file(f, start)
        except BaseException as e:  # handed to the caller, who raises it
            last = e
        finally:
            self._walked.set()
            self._windows.put(last)

    def _walk_file(self, f, start: int) -> SegmentEnd | None:
        file_size = os.fstat(f.fileno()).st_size
        limit = file_size if self.max_bytes is None else min(file_size, self.max_bytes)
        position, want = start, self.window
        while position < limit:
            if self._stopping:
                return None
            window = self._walk_window(f, position, want, limit)
            self._windows.put(window)
            result = window.result
            stop = window.base + result.stop
            if result.reason is not StopReason.END:
                return SegmentEnd(stop, file_size, result.reason, window.problem)
            if window.base + window.length >= limit:
                return SegmentEnd(stop, file_size, StopReason.END, None)
            if stop == position and window.next_size is not None:
                # a unit bigger than a window gets a window of its own size
                want = window.next_size + stop % mmap.ALLOCATIONGRANULARITY + mmap.ALLOCATIONGRANULARITY
            else:
                want = self.window
            position = stop
        return SegmentEnd(position, file_size, StopReason.END, None)

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


class _Window:
    """A read-only mapping of [base, base+length) and what walking it found; always closed.

    Pages are faulted in by the CRC pass itself: mapping with MAP_POPULATE costs more in total here.
    """

    result: WalkResult
    problem: str | None
    next_size: int | None

    def __init__(self, f, base: int, length: int, position: int) -> None:
        self.base, self.length, self.position = base, length, position
        self.map = mmap.mmap(f.fileno(), length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=base)
        if hasattr(self.map, "madvise"):
            self.map.madvise(mmap.MADV_SEQUENTIAL)
        self.view = memoryview(self.map)

    def close(self) -> None:
        self.view.release()
        self.map.close()
