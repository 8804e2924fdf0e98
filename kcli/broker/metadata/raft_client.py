"""The KRaft client of a quorum of one: append a batch, move the committed offset, hand committed batches on.

Kafka's KafkaRaftClient appends the active controller's batches to `__cluster_metadata-0`, moves the
high watermark once a majority of the voters has them, and only then hands them, in log order, to its
listeners' `handle_commit` (Kafka's controller answers the request then; the MetadataLoader publishes
the next image). The three steps stay apart here: `append` makes a batch durable on this voter,
`poll` moves the high watermark to what a majority holds and delivers the batches below it. This
node is the only voter, so its own log end is that majority and `poll` commits at once; a quorum of
several changes only how far `poll` may move the high watermark.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol

from formats.internal import decode_metadata_record
from kcli.broker.metadata.metadata_log import LoggedBatch, MetadataLog

CONTROLLER_EPOCH = 1
"""The Raft epoch of a quorum of one that never holds an election: the leader epoch of every batch."""


class RaftClientListener(Protocol):
    """Kafka's RaftClient.Listener: told about committed batches, in log order, each exactly once."""

    def handle_commit(self, batches: Sequence[LoggedBatch]) -> None: ...


class RaftClient:
    """This node as leader and sole voter of the metadata quorum, at `CONTROLLER_EPOCH`."""

    def __init__(self, metadata_log: MetadataLog, node_id: int, *, epoch: int = CONTROLLER_EPOCH) -> None:
        self.metadata_log = metadata_log
        self.node_id = node_id
        self.epoch = epoch
        self._listeners: list[RaftClientListener] = []
        self._uncommitted: deque[LoggedBatch] = deque()

    def become_leader(self) -> None:
        """Win the election of a quorum of one: record it in quorum-state; what is on disk is committed.

        Start-up replays the recovered log itself, so those batches are not delivered to listeners.
        """
        self.metadata_log.write_quorum_state(self.node_id, self.epoch)
        self.metadata_log.update_high_watermark(self.metadata_log.next_offset)

    @property
    def high_watermark(self) -> int:
        """The committed offset: batches below it are on a majority of the voters."""
        return self.metadata_log.high_watermark

    @property
    def log_end_offset(self) -> int:
        """Where the next appended batch starts (committed or not)."""
        return self.metadata_log.next_offset

    def register(self, listener: RaftClientListener) -> None:
        """Deliver every batch committed from now on to `listener`, after the listeners registered before."""
        self._listeners.append(listener)

    def append(self, values: Sequence[bytes], *, now_ms: int) -> LoggedBatch:
        """Append `values` (encoded metadata records) as one batch in this epoch; durable, not yet committed."""
        base_offset, last_offset = self.metadata_log.append(values, leader_epoch=self.epoch, now_ms=now_ms)
        records = tuple((decode_metadata_record(value), base_offset + i) for i, value in enumerate(values))
        batch = LoggedBatch(base_offset, last_offset, self.epoch, now_ms, records)
        self._uncommitted.append(batch)
        return batch

    def poll(self) -> None:
        """Move the high watermark to what a majority of voters holds, then deliver what it passed.

        The only voter holds its whole log (appends are fsynced before they return), so the high
        watermark becomes the log end.
        """
        high_watermark = max(self.high_watermark, self.metadata_log.next_offset)
        self.metadata_log.update_high_watermark(high_watermark)
        committed = []
        while self._uncommitted and self._uncommitted[0].last_offset < high_watermark:
            committed.append(self._uncommitted.popleft())
        if committed:
            for listener in self._listeners:
                listener.handle_commit(committed)
