"""A fetcher's side of an incremental fetch session (KIP-227, Kafka's clients FetchSessionHandler).

The fetcher hands over, before each Fetch, every partition it wants with what it asks of it; the handler
says what the request carries: all of them in a full fetch (the first, and after a session error),
else only the partitions added or changed since the last request and the ones to forget. The leader's
answer then carries only partitions with news; the others keep their state on the fetcher's side.

Session ids and epochs as Kafka's FetchMetadata: (0, 0) asks for a new session; the leader's answer
names it, and the next requests carry epochs 1, 2, ... FETCH_SESSION_ID_NOT_FOUND starts over at (0, 0);
any other error, or a request that got no answer, closes the session with the next full fetch (its
id with epoch 0), which opens a new one.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from kcli.broker.replication.fetch_metadata import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from kcli.broker.replication.purgatory import PartitionKey


class PartitionData(NamedTuple):
    """What a Fetch asks of one partition (FetchRequest.PartitionData); a change resends the partition."""

    topic_id: uuid.UUID
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


class FetchRequestData(NamedTuple):
    session_id: int
    epoch: int
    to_send: dict[PartitionKey, PartitionData]
    """The partitions the request names, in order."""
    to_forget: list[tuple[uuid.UUID, int]]
    """forgotten_topics_data: (topic id, partition) of the partitions the session drops."""
    session_partitions: dict[PartitionKey, PartitionData]
    """Every partition of the session after this request: what an answer may name (the handler's own
    map, valid until the next `build`)."""

    @property
    def is_full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler:
    """The session towards one leader (one per fetcher)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.session_partitions: dict[PartitionKey, PartitionData] = {}

    def build(
        self, wanted: dict[PartitionKey, PartitionData], changed: set[PartitionKey] | None = None
    ) -> FetchRequestData:
        """FetchSessionHandler.Builder.build: the next request for `wanted`, in its order. `changed`: the
        only partitions whose entry in `wanted` may differ from the last request (None: any may)."""
        if self.epoch == INITIAL_EPOCH:
            self.session_partitions = dict(wanted)
            return FetchRequestData(self.session_id, self.epoch, wanted, [], self.session_partitions)
        session = self.session_partitions
        to_send: dict[PartitionKey, PartitionData] = {}
        to_forget: list[tuple[uuid.UUID, int]] = []
        if changed is not None:
            for key in changed:
                previous = session.get(key)
                data = wanted.get(key)
                if data is None:
                    if previous is not None:
                        del session[key]
                        to_forget.append((previous.topic_id, key[1]))
                elif data != previous:
                    if previous is not None and data.topic_id != previous.topic_id:
                        to_forget.append((previous.topic_id, key[1]))  # a topic recreated under the name
                    session[key] = data
                    to_send[key] = data
            return FetchRequestData(self.session_id, self.epoch, to_send, to_forget, session)
        for key in list(session):
            previous = session[key]
            data = wanted.get(key)
            if data is None:
                del session[key]
                to_forget.append((previous.topic_id, key[1]))
            elif data != previous:
                if data.topic_id != previous.topic_id:
                    to_forget.append((previous.topic_id, key[1]))  # a topic recreated under the name
                session[key] = data
                to_send[key] = data
        for key, data in wanted.items():
            if key not in session:
                session[key] = data
                to_send[key] = data
        return FetchRequestData(self.session_id, self.epoch, to_send, to_forget, session)

    def handle_response(self, error: ErrorCode, session_id: int) -> bool:
        """The answer's top-level error and session id; whether its partitions may be processed."""
        if error is not ErrorCode.none:
            if error is ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        if self.epoch == INITIAL_EPOCH:
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else next_epoch(INITIAL_EPOCH)
        elif session_id == INVALID_SESSION_ID:  # the leader closed the session
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request got no answer: close the session with the next full fetch and open a new one."""
        self.epoch = INITIAL_EPOCH
