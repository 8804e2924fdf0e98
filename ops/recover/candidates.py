"""The pure half of `kcli recover partitions`: which replica should lead a partition that lost its whole
ISR, and exactly what every other replica loses if it does.

- Ranking is KIP-966's for its unclean recovery manager: an ELR member first (metadata.version 3.9 has
  ELR off, so kcli has none, but an Apache Kafka cluster may), then the highest last written leader
  epoch, then the longest log (log end offset), then the lowest broker id. Only a replica on a live
  broker can be elected; a stopped one is ranked and reported, never chosen.
- The loss of a follower is where Kafka's follower truncation leaves it once the candidate leads
  (AbstractFetcherThread.getOffsetTruncationState, KIP-101/279): the follower offers its latest epoch,
  the leader answers the largest epoch it has at or below it and where that epoch ends in its log; if
  the follower has that epoch it truncates to the smaller of the two ends, else to the end of its own
  largest epoch below and asks again. Everything from that offset to its log end is lost.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

UNDEFINED_EPOCH = -1
_MAX_TRUNCATION_ROUNDS = 10_000
"""A bound on the follower's epoch-by-epoch walk (one round per epoch it has that the leader lacks)."""


@dataclass(frozen=True, slots=True)
class EpochHistory:
    """A replica's leader-epoch history: (epoch, start offset) ascending, as its leader-epoch-checkpoint
    holds it, and its log end offset."""

    entries: tuple[tuple[int, int], ...]
    log_end_offset: int

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def end_offset_for(self, requested: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers from this log (LeaderEpochFileCache.endOffsetFor):
        the largest epoch at or below `requested` and the start of the next one (the log end for the
        latest); (-1, -1) when the log has no epoch or `requested` is beyond its latest."""
        if requested == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH
        epochs = [e for e, _ in self.entries]
        if requested == epochs[-1]:
            return requested, self.log_end_offset
        higher = bisect_right(epochs, requested)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH
        if higher == 0:
            return requested, self.entries[0][1]
        return epochs[higher - 1], self.entries[higher][1]

    def truncated(self, offset: int) -> EpochHistory:
        """The history once the log is cut at `offset` (truncateFromEnd)."""
        return EpochHistory(tuple(e for e in self.entries if e[1] < offset), min(offset, self.log_end_offset))


def truncation_offset(leader: EpochHistory, follower: EpochHistory) -> int:
    """Where `follower` truncates to once `leader` leads (the offsets it keeps are below it)."""
    current = follower
    for _ in range(_MAX_TRUNCATION_ROUNDS):
        if current.log_end_offset == 0:
            return 0
        leader_epoch, leader_end = leader.end_offset_for(current.latest_epoch)
        if leader_end == UNDEFINED_EPOCH:
            # Only when the follower's epoch is above every epoch of the leader, which the new leader's
            # own epoch rules out; Kafka would cut at the follower's high watermark: assume the worst.
            return 0 if leader.entries else min(current.log_end_offset, leader.log_end_offset)
        follower_epoch, follower_end = current.end_offset_for(leader_epoch)
        if follower_end == UNDEFINED_EPOCH:
            return min(leader_end, current.log_end_offset)
        if follower_epoch != leader_epoch:
            current = current.truncated(min(follower_end, current.log_end_offset))
            continue
        return min(follower_end, leader_end, current.log_end_offset)
    raise AssertionError("the follower's epoch walk did not end")


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """What is known of one replica of the partition (None: not known)."""

    broker: int
    live: bool  # on a registered, unfenced broker: may be elected
    source: str  # "broker" (asked over the protocol), "logdir" (read from disk), "none"
    history: EpochHistory | None
    log_start_offset: int | None = None
    high_watermark: int | None = None
    size_bytes: int | None = None
    in_isr: bool = False
    in_elr: bool = False
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.history is not None


@dataclass(frozen=True, slots=True)
class Loss:
    """Offsets [start, end) that `broker` loses; records and bytes once its batches were read."""

    broker: int
    start: int
    end: int
    records: int | None = None
    bytes: int | None = None
    transactional_producers: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return self.start >= self.end


@dataclass(frozen=True, slots=True)
class Candidate:
    broker: int
    rank: int
    electable: bool
    last_epoch: int
    log_end_offset: int
    losses: tuple[Loss, ...]
    unknown: tuple[int, ...] = ()  # replicas whose log could not be read: their loss is unknown
    why_not: str | None = None

    @property
    def lost_offsets(self) -> int:
        return sum(loss.end - loss.start for loss in self.losses)


def rank(replicas: Sequence[ReplicaInfo]) -> list[ReplicaInfo]:
    """KIP-966's order among the replicas whose log is known: ELR first, then the highest last epoch,
    then the longest log, then the lowest id."""
    known = [r for r in replicas if r.history is not None]
    return sorted(
        known,
        key=lambda r: (
            not r.in_elr,
            -r.history.latest_epoch,  # type: ignore[union-attr]
            -r.history.log_end_offset,  # type: ignore[union-attr]
            r.broker,
        ),
    )


def as_new_leader(history: EpochHistory, new_epoch: int) -> EpochHistory:
    """The history of a replica that has just been elected: a new epoch starting at its log end."""
    if history.entries and history.entries[-1][0] >= new_epoch:
        return history
    return EpochHistory((*history.entries, (new_epoch, history.log_end_offset)), history.log_end_offset)


def plan_candidates(replicas: Sequence[ReplicaInfo], partition_epoch: int = -1) -> list[Candidate]:
    """Every replica whose log is known, in KIP-966 order, with what each other replica loses under it.

    The elected replica starts a new epoch (above `partition_epoch`, the partition's current leader
    epoch, and every epoch seen) at its log end, which is what followers' truncation asks against."""
    out = []
    seen = [r.history.latest_epoch for r in replicas if r.history is not None]
    new_epoch = max([partition_epoch, *seen]) + 1
    for position, replica in enumerate(rank(replicas), start=1):
        assert replica.history is not None
        history = as_new_leader(replica.history, new_epoch)
        losses = []
        unknown = []
        for other in replicas:
            if other.broker == replica.broker:
                continue
            if other.history is None:
                unknown.append(other.broker)
                continue
            start = truncation_offset(history, other.history)
            if start < other.history.log_end_offset:
                losses.append(Loss(other.broker, start, other.history.log_end_offset))
        out.append(
            Candidate(
                replica.broker,
                position,
                replica.live,
                replica.history.latest_epoch,
                history.log_end_offset,
                tuple(losses),
                tuple(unknown),
                None if replica.live else "its broker is down",
            )
        )
    return out


@dataclass
class PartitionRecovery:
    """The plan for one partition: its replicas as found and the ranked candidates."""

    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    leader_epoch: int = -1
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)
    found: list[ReplicaInfo] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    reads: dict[int, Any] = field(
        default_factory=dict
    )  # broker -> what was read of its log (online.ReplicaRead)
    unread: dict[int, str] = field(default_factory=dict)  # broker -> why its lost records could not be read

    @property
    def best(self) -> Candidate | None:
        return next((c for c in self.candidates if c.electable), None)

    def candidate(self, broker: int) -> Candidate | None:
        return next((c for c in self.candidates if c.broker == broker), None)
