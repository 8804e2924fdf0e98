"""Kafka's LeaderState: the leader's view of its epoch: where it started, how far each voter and
observer has fetched, and the high watermark a majority of voters holds."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica, for the high watermark and DescribeQuorum."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    leader_end_at_last_fetch: int = -1
    high_watermark_sent: int = -1  # the high watermark of the last Fetch answer it got

    def update(self, end_offset: int, now_ms: int, leader_end_offset: int) -> None:
        """Kafka's caught-up rule: reached the leader's end now, or the end it had at the previous fetch."""
        if end_offset >= leader_end_offset:
            self.last_caught_up_ms = now_ms
        elif end_offset >= self.leader_end_at_last_fetch >= 0:
            self.last_caught_up_ms = self.last_fetch_ms
        self.end_offset, self.last_fetch_ms, self.leader_end_at_last_fetch = (
            end_offset,
            now_ms,
            leader_end_offset,
        )


@dataclass
class LeaderState:
    """Kafka's LeaderState: the epoch start, each replica's progress, the high watermark."""

    node_id: int
    epoch: int
    epoch_start_offset: int
    voters: dict[int, ReplicaProgress]
    granting_voters: frozenset[int]
    observers: dict[int, ReplicaProgress] = field(default_factory=dict)
    high_watermark: int = -1
    acknowledged: set[int] = field(default_factory=set)
    check_quorum_fetched: set[int] = field(default_factory=set)

    def update_local(self, flushed_end_offset: int, now_ms: int) -> bool:
        self.voters[self.node_id].update(flushed_end_offset, now_ms, flushed_end_offset)
        return self._maybe_update_high_watermark()

    def update_replica(self, replica_id: int, end_offset: int, now_ms: int, leader_end_offset: int) -> bool:
        """A Fetch from `replica_id` at `end_offset`; True when the high watermark moved."""
        if replica_id in self.voters:
            self.voters[replica_id].update(end_offset, now_ms, leader_end_offset)
            self.acknowledged.add(replica_id)
            self.check_quorum_fetched.add(replica_id)
            return self._maybe_update_high_watermark()
        if replica_id >= 0:
            self.observers.setdefault(replica_id, ReplicaProgress()).update(
                end_offset, now_ms, leader_end_offset
            )
        return False

    def progress(self, replica_id: int) -> ReplicaProgress | None:
        return self.voters.get(replica_id) or self.observers.get(replica_id)

    def set_voters(self, voter_ids: frozenset[int]) -> None:
        """A new voter set (KIP-853), committed or not: replicas move between voters and observers with
        their progress (Kafka's LeaderState.updateVoterAndObserverStates)."""
        for replica_id in [v for v in self.voters if v not in voter_ids]:
            progress = self.voters.pop(replica_id)
            if replica_id != self.node_id:
                self.observers[replica_id] = progress
        for replica_id in voter_ids:
            if replica_id not in self.voters:
                self.voters[replica_id] = self.observers.pop(replica_id, None) or ReplicaProgress()
        self.acknowledged &= set(voter_ids) | {self.node_id}

    def _maybe_update_high_watermark(self) -> bool:
        """The end offset of the voter at index voters/2 when sorted high to low, once past the epoch start."""
        ends = sorted((p.end_offset for p in self.voters.values()), reverse=True)
        if not ends:
            return False
        candidate = ends[len(ends) // 2]
        if candidate > self.epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False
