"""What `kcli verify` reports: each finding, its kind and severity, and the summary of a run.

Errors are states Kafka would refuse, lose data over or never write itself; warnings are states Kafka
creates on purpose (a compacted range, a log start moved by retention) or tolerates, printed so the log
can be understood but not failing the check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

ERROR = "error"
WARNING = "warning"

KINDS: dict[str, str] = {
    # batches and framing
    "crc_mismatch": ERROR,
    "corrupt_batch": ERROR,
    "corrupt_records": ERROR,
    "torn_tail": ERROR,
    "max_timestamp_mismatch": ERROR,
    "timestamp_order": WARNING,
    # offsets
    "offset_overlap": ERROR,
    "offset_gap_unexplained": ERROR,
    "offset_gap_compaction": WARNING,
    "offset_gap_retention": WARNING,
    "offset_gap_control_marker": WARNING,
    "segment_name_mismatch": ERROR,
    # indexes
    "index_mismatch": ERROR,
    "index_entry_spans_batches": WARNING,
    "index_corrupt": ERROR,
    "index_missing": WARNING,
    "time_index_mismatch": ERROR,
    "time_index_out_of_order": ERROR,
    # leader epochs
    "leader_epoch_regression": ERROR,
    "leader_epoch_checkpoint_mismatch": ERROR,
    # checkpoints and other partition files
    "checkpoint_corrupt": ERROR,
    "checkpoint_beyond_log_end": ERROR,
    "checkpoint_below_log_start": WARNING,
    "checkpoint_unknown_partition": WARNING,
    "snapshot_corrupt": WARNING,
    "unreadable_file": ERROR,
}
"""Every finding kind and its severity; kinds are stable names for scripts."""


class Finding(NamedTuple):
    """One problem found: where (file, byte position, offsets), what (kind) and one sentence."""

    file: str
    position: int | None
    first_offset: int | None
    last_offset: int | None
    kind: str
    message: str

    @property
    def severity(self) -> str:
        return KINDS[self.kind]

    def to_json(self) -> dict:
        return {
            "type": "finding",
            "file": self.file,
            "position": self.position,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
        }

    def __str__(self) -> str:
        where = self.file if self.position is None else f"{self.file}:{self.position}"
        return f"{where}: {self.kind}: {self.message}"


@dataclass
class Summary:
    """What was read and what was found, for the final line and the exit code."""

    files: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    kinds: Counter = field(default_factory=Counter)

    @property
    def errors(self) -> int:
        return sum(n for kind, n in self.kinds.items() if KINDS[kind] == ERROR)

    @property
    def warnings(self) -> int:
        return sum(n for kind, n in self.kinds.items() if KINDS[kind] == WARNING)

    @property
    def exit_code(self) -> int:
        """0 when nothing is wrong (warnings alone included), 1 when there is an error."""
        return 1 if self.errors else 0

    def to_json(self, deep: bool) -> dict:
        return {
            "type": "summary",
            "files": self.files,
            "segments": self.segments,
            "batches": self.batches,
            "records": self.records if deep else None,
            "bytes": self.bytes,
            "findings": self.errors + self.warnings,
            "errors": self.errors,
            "warnings": self.warnings,
            "kinds": dict(sorted(self.kinds.items())),
        }

    def line(self, deep: bool) -> str:
        records = f"{self.records} records, " if deep else ""
        found = self.errors + self.warnings
        if not found:
            verdict = "no findings"
        else:
            verdict = f"{plural(found, 'finding')} ({plural(self.errors, 'error')}, {plural(self.warnings, 'warning')})"
        return (
            f"verified {plural(self.files, 'file')}, {plural(self.segments, 'segment')}, "
            f"{plural(self.batches, 'batch', 'batches')}, {records}{self.bytes} bytes: {verdict}"
        )


def sentence(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if text.endswith(".") else text + "."


def checkpoint_sentence(e: BaseException, path: Path) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"{path.name} is not text (byte {e.start} is not UTF-8)."
    return sentence(e)


def os_sentence(e: OSError) -> str:
    return f"cannot read the file: {(e.strerror or str(e)).lower()}."


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"
