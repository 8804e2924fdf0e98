"""LeaderEpochCache: which leader epoch wrote which offsets, kept in `leader-epoch-checkpoint` (Kafka's
LeaderEpochFileCache, reference §4.2).

OffsetForLeaderEpoch answers from it, and ListOffsets takes the epoch of the earliest and latest offsets
from it. As Kafka's, a new epoch is written to the file at once (tmp, fsync, rename), so the file never
misses an entry of records written, except the epoch a new leader starts at its log end (`assign` with
`write_later`): no record holds it yet, and its write goes to `flush_scheduler`, ahead of any flush of
the records written in it (one thread, in order), so a crash can only lose it with records that
recovery scans again past the recovery point, learning the epoch from their batches. (Becoming
leader of thousands of new partitions at once must not fsync thousands of files on the event loop.)
Truncations (a log start moved by retention or DeleteRecords, a log end cut back) are
written by `flush_scheduler` when one is set (the log manager's flusher thread), off the event loop:
a stale file then holds extra entries, which the next load truncates away again. Each write, at once
or later, writes the entries as they are when it runs, under the lock that also guards changes.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from pathlib import Path

from formats.checkpoints import EpochEntry, read_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from kcli.files import create_if_missing, write_atomically

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries; epochs and start offsets both strictly increase."""

    def __init__(self, path: Path, entries: list[EpochEntry] | None = None) -> None:
        self.path = path
        self.flush_scheduler: Callable[[Callable[[], None]], object] | None = None
        """Runs a truncation's write later, off the caller's thread (Kafka's truncate...AsyncFlush)."""
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._lock = threading.Lock()
        self._closed = False
        for entry in entries or ():
            self._put(entry.epoch, entry.start_offset)

    @classmethod
    def load(cls, partition_dir: Path) -> tuple[LeaderEpochCache, str | None]:
        """The cache in `partition_dir`, creating an empty file when there is none.

        A file that does not parse is reset to empty (recovery re-learns the epochs of the segments it
        scans); the second value then says so in one sentence.
        """
        path = partition_dir / LEADER_EPOCH_CHECKPOINT
        create_if_missing(path)
        try:
            entries = read_leader_epoch_checkpoint(path.read_text("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            cache = cls(path)
            cache._write()
            return cache, f"{path}: unreadable leader epoch checkpoint reset to empty ({e})"
        return cls(path, entries), None

    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts, strict=True)]

    def __len__(self) -> int:
        return len(self._epochs)

    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._starts[-1]) if self._epochs else None

    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._starts[0]) if self._epochs else None

    def assign(self, epoch: int, start_offset: int, *, write_later: bool = False) -> bool:
        """Record that `epoch` starts at `start_offset`; True (and the file rewritten) if anything changed.

        Entries whose epoch is >= `epoch` or whose start offset is >= `start_offset` are dropped first,
        so the entries stay monotonic. `write_later`: the file is written by `flush_scheduler` (an epoch
        no record holds yet, see the module's docstring).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"Received invalid partition leader epoch entry {epoch} {start_offset}")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        with self._lock:
            while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
                self._epochs.pop()
                self._starts.pop()
            self._epochs.append(epoch)
            self._starts.append(start_offset)
        if write_later:
            self._write_later()
        else:
            self._write()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers; (-1, -1) when the epoch is unknown."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote `offset`: the last entry starting at or below it."""
        k = bisect_right(self._starts, offset)
        return self._epochs[k - 1] if k else None

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after `end_offset` (the log was truncated to end there)."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return False
        k = bisect_left(self._starts, end_offset)
        with self._lock:
            del self._epochs[k:], self._starts[k:]
        self._write_later()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop entries wholly below a new log start offset; the one straddling it starts there."""
        k = bisect_right(self._starts, start_offset)
        if k == 0:
            return False
        epoch = self._epochs[k - 1]
        with self._lock:
            del self._epochs[:k], self._starts[:k]
            self._epochs.insert(0, epoch)
            self._starts.insert(0, start_offset)
        self._write_later()
        return True

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._starts.clear()
        self._write()

    def rename_dir(self, target: Path) -> None:
        """Rename the partition dir to `target` and the file's path with it, under the lock a write
        holds: a write still pending on the flusher then lands in the renamed dir (a `-stray` or
        `-delete` one) instead of being skipped as a dir deleted meanwhile."""
        with self._lock:
            self.path.parent.rename(target)
            self.path = target / self.path.name

    def _put(self, epoch: int, start_offset: int) -> None:
        self._epochs.append(epoch)
        self._starts.append(start_offset)

    def _write_later(self) -> None:
        if self.flush_scheduler is None:
            self._write()
        else:
            self.flush_scheduler(self._write)

    def close(self) -> None:
        """No more writes: the partition dir is about to be removed, and a write still pending on the
        flusher would otherwise create a file in it while it is being removed."""
        with self._lock:
            self._closed = True

    def _write(self) -> None:
        """The entries as they are now; a partition dir deleted meanwhile is not an error (writeIfDirExists)."""
        with self._lock:
            if not self._closed and self.path.parent.exists():
                write_atomically(self.path, write_leader_epoch_checkpoint(self.entries()))
