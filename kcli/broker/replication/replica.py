"""What a partition's leader knows of one follower (Kafka's `Replica`): its log end and when it last caught up.

The follower's fetch offset is its log end: everything below it is on the follower. "Caught up" is
time-based only, as Kafka since 0.9: the follower reached the leader's log end within the last
replica.lag.time.max.ms, judged from the leader's log end at this fetch and at the previous one.
"""

from __future__ import annotations

UNKNOWN_OFFSET = -1


class Replica:
    __slots__ = (
        "broker_epoch",
        "broker_id",
        "last_caught_up_time_ms",
        "last_fetch_leader_log_end_offset",
        "last_fetch_time_ms",
        "log_end_offset",
        "log_start_offset",
    )

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = 0
        self.broker_epoch = -1

    def __repr__(self) -> str:
        return (
            f"Replica({self.broker_id}, leo={self.log_end_offset}, caught_up={self.last_caught_up_time_ms})"
        )

    def update_fetch_state(
        self, fetch_offset: int, log_start_offset: int, leader_end_offset: int, now_ms: int, broker_epoch: int
    ) -> None:
        """A fetch at `fetch_offset` while the leader's log ended at `leader_end_offset`."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            # it has what the leader had at its previous fetch: caught up as of then
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms
        self.broker_epoch = broker_epoch

    def reset(self, now_ms: int, *, in_isr: bool, keep_log_end: bool) -> None:
        """On a new leader epoch: an ISR member counts as caught up now; a new leader knows no log end."""
        if not keep_log_end:
            self.log_end_offset = UNKNOWN_OFFSET
            self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_caught_up_time_ms = now_ms if in_isr else 0
        self.last_fetch_time_ms = now_ms if in_isr else 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return (
            self.log_end_offset == leader_end_offset
            or now_ms - self.last_caught_up_time_ms <= lag_time_max_ms
        )
