"""What a run records: every write and its outcome, every transaction, what each consumer saw, and
the final full read. Plain data, so the checker is pure functions over it (and hand-made histories)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    """What the producer was told about a write."""

    PENDING = "pending"  # no answer yet (at the end of a run: the producer gave up waiting)
    ACKED = "acked"  # acknowledged with an offset: must be in the log, at that offset, once
    FAILED = "failed"  # a definite error from the client: may still be in the log (a lost answer)
    UNKNOWN = "unknown"  # timed out: may or may not be in the log


class TxnOutcome(StrEnum):
    COMMITTED = "committed"  # commit_transaction returned: every record visible to read_committed
    ABORTED = "aborted"  # abort_transaction returned: none visible
    UNKNOWN = "unknown"  # the commit or abort did not answer: all or none visible


@dataclass
class Write:
    """One idempotent produce of a unique value to one partition."""

    value: str
    partition: int
    known_offset: int  # the highest offset known to be below the high watermark when the write started
    outcome: Outcome = Outcome.PENDING
    offset: int | None = None
    error: str | None = None


@dataclass
class Transaction:
    """One transaction: its (partition, value) records and how it ended."""

    txn_id: int
    records: list[tuple[int, str]] = field(default_factory=list)
    outcome: TxnOutcome = TxnOutcome.UNKNOWN
    error: str | None = None


@dataclass
class Seen:
    """One record a consumer saw."""

    topic: str
    partition: int
    offset: int
    value: str


@dataclass
class History:
    """A run's record, and the final full reads (read_uncommitted of the data topic, read_committed of
    the transactional topic) made once the faults ended and every node was back."""

    topic: str
    txn_topic: str
    writes: list[Write] = field(default_factory=list)
    transactions: list[Transaction] = field(default_factory=list)
    consumed: dict[str, list[Seen]] = field(default_factory=dict)  # consumer name -> in poll order
    read_committed: set[str] = field(default_factory=set)  # the consumers with isolation read_committed
    final: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # partition -> (offset, value)
    final_committed: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # of txn_topic
    final_end: dict[int, int] = field(default_factory=dict)  # partition -> high watermark of `topic`
