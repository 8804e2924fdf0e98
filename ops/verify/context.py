"""What every check of a run shares: the options, the summary, and where findings and file reads go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kcli.logdir import WINDOW_BYTES
from ops.verify.findings import Finding, Summary, os_sentence


@dataclass(frozen=True)
class VerifyOptions:
    deep: bool = False  # decode every record, not only batch headers
    compacted_topics: frozenset[str] = frozenset()  # topics known to have cleanup.policy=compact
    window: int = WINDOW_BYTES


class Context:
    """One run: each finding is counted in `summary` and goes to `report` as soon as it is known."""

    def __init__(self, options: VerifyOptions, report: Callable[[Finding], object]) -> None:
        self.options = options
        self.summary = Summary()
        self._report = report

    def find(
        self,
        file: Path | str,
        position: int | None,
        first_offset: int | None,
        last_offset: int | None,
        kind: str,
        message: str,
    ) -> None:
        self.summary.kinds[kind] += 1
        self._report(Finding(str(file), position, first_offset, last_offset, kind, message))

    def read_bytes(self, path: Path) -> bytes | None:
        return self.bytes_read(path, read(path))

    def bytes_read(self, path: Path, data: bytes | OSError) -> bytes | None:
        """The bytes of a file read earlier, counted; None after reporting why it could not be read."""
        if isinstance(data, OSError):
            self.find(path, None, None, None, "unreadable_file", os_sentence(data))
            return None
        self.summary.bytes += len(data)
        return data


def read(path: Path) -> bytes | OSError:
    try:
        return path.read_bytes()
    except OSError as e:
        return e
