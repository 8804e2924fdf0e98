"""The acting half of `kcli recover logdir --execute`: a plan's changes, done in its order.

Nothing leaves the log dir without a copy: bytes cut from a segment go to `<quarantine>/<partition>/
<offset>.log` (a segment `kcli replay` reads, named after the first cut batch), a dropped segment goes
there whole, and every file deleted or rewritten (leftovers, snapshots, old indexes and checkpoints) goes
to `<quarantine>/<partition>/leftovers/` or `<quarantine>/leftovers/` first. Each copy is fsynced, with
its directory, before the original is touched; a line of `<quarantine>/journal.jsonl` (fsynced too)
says what is about to be done before each action, so an interrupted run can be told apart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import orjson

from formats import checkpoints
from kcli.files import copy_range, fsync_dir, write_atomically
from ops.recover.plan import Change, Plan

JOURNAL = "journal.jsonl"


class RecoverError(Exception):
    """A quarantine that cannot be used; the message is one sentence."""


class Executor:
    def __init__(
        self, plan: Plan, quarantine: Path, *, on_change: Callable[[Change], None] | None = None
    ) -> None:
        self.plan = plan
        self.quarantine = quarantine
        self.on_change = on_change
        self._journal = None

    def check(self) -> None:
        """Refuse a quarantine inside the log dir (the broker would trip on it) or one that would be
        overwritten."""
        log_dir = self.plan.log_dir.resolve()
        q = self.quarantine.resolve()
        if q == log_dir or log_dir in q.parents:
            raise RecoverError(
                f"the quarantine {self.quarantine} must be outside the log dir {self.plan.log_dir}."
            )
        for change in self.plan.changes():
            if change.quarantine and (q / change.quarantine).exists():
                raise RecoverError(
                    f"{self.quarantine / change.quarantine} already exists: give a fresh --quarantine directory."
                )

    def run(self) -> None:
        self.check()
        self.quarantine.mkdir(parents=True, exist_ok=True)
        with open(self.quarantine / JOURNAL, "ab") as journal:
            self._journal = journal
            self._write_journal({"action": "start", "logDir": str(self.plan.log_dir.resolve())})
            last = ("lower_checkpoint", "write_clean_shutdown")
            for change in self.plan.changes():
                if change.kind not in last:
                    self._do(change)
            self._lower_checkpoints([c for c in self.plan.root_changes if c.kind == "lower_checkpoint"])
            for change in self.plan.root_changes:  # the marker last: it says the rest is done
                if change.kind == "write_clean_shutdown":
                    self._do(change)
            self._write_journal({"action": "done"})
        self._journal = None

    # --- one change ---------------------------------------------------------------------------------

    def _do(self, change: Change) -> None:
        self._record(change)
        file = Path(change.file)
        kind = change.kind
        if kind in ("delete_leftover", "delete_snapshot", "drop_segment"):
            self._copy(file, 0, None, change.quarantine)
            file.unlink()
            fsync_dir(file.parent)
        elif kind == "complete_swap":
            os.rename(file, change.data)
            fsync_dir(file.parent)
        elif kind == "truncate_segment":
            self._copy(file, change.start, change.end, change.quarantine)
            fd = os.open(file, os.O_RDWR | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, change.data)
                os.fsync(fd)
            finally:
                os.close(fd)
        elif kind == "rebuild_indexes":
            offset_index, time_index, txn_index = change.data
            stem = file.name[: -len(".log")]
            partition = change.partition
            for suffix, content in (
                (".index", offset_index),
                (".timeindex", time_index),
                (".txnindex", txn_index),
            ):
                if content is None:
                    continue
                target = file.with_name(stem + suffix)
                if target.exists():
                    self._copy(target, 0, None, f"{partition}/leftovers/{target.name}")
                write_atomically(target, content)
        elif kind in ("rewrite_leader_epoch_checkpoint", "rebuild_txn_index", "write_clean_shutdown"):
            if file.exists():
                self._copy(file, 0, None, change.quarantine)
            write_atomically(file, change.data)
        elif kind == "write_snapshot":
            write_atomically(file, change.data)
        else:
            raise AssertionError(kind)
        if self.on_change is not None:
            self.on_change(change)

    def _lower_checkpoints(self, changes: list[Change]) -> None:
        by_file: dict[str, list[Change]] = {}
        for change in changes:
            by_file.setdefault(change.file, []).append(change)
        for name, group in by_file.items():
            path = Path(name)
            for change in group:
                self._record(change)
            self._copy(path, 0, None, group[0].quarantine)
            entries = checkpoints.read_offset_checkpoint(path.read_text("utf-8"))
            for change in group:
                tp, offset = change.data
                entries[tp] = offset
            write_atomically(path, checkpoints.write_offset_checkpoint(entries))
            for change in group:
                if self.on_change is not None:
                    self.on_change(change)

    # --- the quarantine and the journal ---------------------------------------------------------------

    def _copy(self, source: Path, start: int, end: int | None, relative: str | None) -> None:
        """Copy bytes [start, end) of `source` to the quarantine, fsynced with its directory."""
        assert relative is not None
        target = self.quarantine / relative
        try:
            copy_range(source, start, end, target)
        except FileExistsError:
            raise RecoverError(f"{target} already exists: give a fresh --quarantine directory.") from None

    def _record(self, change: Change) -> None:
        entry = change.to_json()
        del entry["type"], entry["producers"]
        entry["action"] = entry.pop("kind")
        self._write_journal(entry)

    def _write_journal(self, entry: dict) -> None:
        assert self._journal is not None
        line = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "unixMs": int(time.time() * 1000),
            **entry,
        }
        self._journal.write(orjson.dumps(line) + b"\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())
