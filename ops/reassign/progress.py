"""Progress of a reassignment: bytes copied and remaining per partition and in total, rate and ETA.

An adding replica has copied what its log on its broker holds (DescribeLogDirs there), at most the
leader's log size; it still has to copy the difference. A partition's move copies the leader's size
once per adding replica. The leader keeps growing while producers write, so "total" is re-measured on
every poll rather than fixed when the plan was made. Moves not started yet count with the size they
had when planned; finished ones with what they had copied when they finished.

The rate (of the whole plan, and of each running move) is the copied bytes per second over the last 10 s
of polls (a window: a burst or a pause moves
the ETA for a while, not for ever), counted from the first byte copied; ETA = remaining / rate. Pure: the
caller brings the clock and the measurements.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ops.reassign.assignment import TopicPartition

DEFAULT_WINDOW = 10.0


@dataclass(frozen=True, slots=True)
class MoveProgress:
    partition: TopicPartition
    adding: tuple[int, ...]
    leader_size: int
    copied: int
    state: str
    """"pending", "running" or "done"."""

    @property
    def total(self) -> int:
        return self.leader_size * len(self.adding)

    @property
    def remaining(self) -> int:
        return max(self.total - self.copied, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.partition.topic,
            "partition": self.partition.partition,
            "state": self.state,
            "adding": list(self.adding),
            "bytes_total": self.total,
            "bytes_copied": self.copied,
            "bytes_remaining": self.remaining,
        }


def measure(
    partition: TopicPartition,
    adding: Iterable[int],
    leader_size: int,
    replica_sizes: Mapping[int, int],
    state: str = "running",
) -> MoveProgress:
    """A running move: each adding replica's size on its broker, capped at the leader's."""
    adding = tuple(adding)
    copied = sum(min(replica_sizes.get(b, 0), leader_size) for b in adding)
    return MoveProgress(partition, adding, leader_size, copied, state)


@dataclass(frozen=True, slots=True)
class Snapshot:
    elapsed: float
    moves: tuple[MoveProgress, ...]
    rate: float | None
    """Bytes per second; None before two polls."""
    partition_rates: dict[TopicPartition, float | None] = field(default_factory=dict)
    """The running moves' own rates."""

    def partition_eta(self, move: MoveProgress) -> float | None:
        return _eta(move.remaining, self.partition_rates.get(move.partition))

    @property
    def total(self) -> int:
        return sum(m.total for m in self.moves)

    @property
    def copied(self) -> int:
        return sum(m.copied for m in self.moves)

    @property
    def remaining(self) -> int:
        return sum(m.remaining for m in self.moves)

    @property
    def eta(self) -> float | None:
        """Seconds to go at the current rate; 0 when nothing remains, None when not known."""
        return _eta(self.remaining, self.rate)

    @property
    def fraction(self) -> float:
        return 1.0 if self.total == 0 else min(self.copied / self.total, 1.0)

    def count(self, state: str) -> int:
        return sum(1 for m in self.moves if m.state == state)

    def to_json(self) -> dict[str, Any]:
        return {
            "event": "progress",
            "elapsed_s": round(self.elapsed, 3),
            "partitions_done": self.count("done"),
            "partitions_running": self.count("running"),
            "partitions_pending": self.count("pending"),
            "bytes_total": self.total,
            "bytes_copied": self.copied,
            "bytes_remaining": self.remaining,
            "rate_bytes_per_s": None if self.rate is None else round(self.rate, 1),
            "eta_s": None if self.eta is None else round(self.eta, 1),
            "partitions": [self._partition_json(m) for m in self.moves if m.state == "running"],
        }

    def _partition_json(self, move: MoveProgress) -> dict[str, Any]:
        rate, eta = self.partition_rates.get(move.partition), self.partition_eta(move)
        return {
            **move.to_json(),
            "rate_bytes_per_s": None if rate is None else round(rate, 1),
            "eta_s": None if eta is None else round(eta, 1),
        }


def _eta(remaining: int, rate: float | None) -> float | None:
    """Seconds to go at `rate`; 0 when nothing remains, None when the rate is not known (or 0)."""
    if remaining == 0:
        return 0.0
    if not rate:
        return None
    return remaining / rate


@dataclass
class RateEstimator:
    """Bytes per second over the last `window` seconds of polls (shorter at the start).

    Polls before the first byte is copied do not count (the brokers' start-up is no part of the copy
    rate), so the first estimate is the copy's own rate; a stall later on does count, and shows.
    """

    window: float = DEFAULT_WINDOW
    rate: float | None = None
    _samples: deque[tuple[float, int]] = field(default_factory=deque, repr=False)

    def update(self, now: float, copied: int) -> float | None:
        samples = self._samples
        if samples and now <= samples[-1][0]:
            return self.rate
        if len(samples) == 1 and copied == samples[0][1]:
            samples.clear()  # nothing copied yet: start the window here
        samples.append((now, copied))
        while len(samples) > 2 and samples[1][0] <= now - self.window:
            samples.popleft()
        if len(samples) >= 2:
            (then, before), (_, after) = samples[0], samples[-1]
            self.rate = max(after - before, 0) / (now - then)
        return self.rate


@dataclass
class Tracker:
    """Every move of a plan, from pending through running to done, and the rate across them."""

    planned: dict[TopicPartition, MoveProgress]
    started_at: float
    estimator: RateEstimator = field(default_factory=RateEstimator)
    per_partition: dict[TopicPartition, RateEstimator] = field(default_factory=dict)

    @classmethod
    def for_moves(
        cls,
        moves: Iterable[tuple[TopicPartition, Iterable[int], int]],
        now: float,
        window: float = DEFAULT_WINDOW,
    ) -> Tracker:
        """`moves`: (partition, adding replicas, size when planned)."""
        planned = {tp: MoveProgress(tp, tuple(adding), size, 0, "pending") for tp, adding, size in moves}
        return cls(planned, now, RateEstimator(window))

    def observe(
        self, now: float, running: Iterable[MoveProgress], done: Iterable[TopicPartition]
    ) -> Snapshot:
        rates = {}
        for progress in running:
            self.planned[progress.partition] = progress
            estimator = self.per_partition.setdefault(
                progress.partition, RateEstimator(self.estimator.window)
            )
            rates[progress.partition] = estimator.update(now, progress.copied)
        for tp in done:
            last = self.planned.get(tp)
            if last is not None and last.state != "done":
                self.planned[tp] = MoveProgress(tp, last.adding, last.leader_size, last.total, "done")
        moves = tuple(self.planned[tp] for tp in sorted(self.planned))
        copied = sum(m.copied for m in moves)
        rate = self.estimator.update(now, copied)
        return Snapshot(now - self.started_at, moves, rate, rates)
