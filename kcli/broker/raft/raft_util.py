"""What every part of the Raft client shares: the KRaft RPCs' keys and versions, the one-partition
envelope of their messages (Kafka's RaftUtil), replica keys' directory ids, and NotLeaderError."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from formats.checkpoints import uuid_to_base64
from kcli.broker.raft.metadata_log import CLUSTER_METADATA_TOPIC_ID
from kcli.config import CLUSTER_METADATA_TOPIC
from kcli.protocol.messages import build, nested_type

log = logging.getLogger("kcli.broker.raft")

FETCH = 1
VOTE = 52
BEGIN_QUORUM_EPOCH = 53
END_QUORUM_EPOCH = 54
DESCRIBE_QUORUM = 55
FETCH_SNAPSHOT = 59
API_VERSIONS = 18
ADD_RAFT_VOTER = 80
REMOVE_RAFT_VOTER = 81
UPDATE_RAFT_VOTER = 82
ADD_VOTER_CAUGHT_UP_MS = 3600 * 1000
"""LeaderState.isReplicaCaughtUp: a new voter has caught up once and fetched within the last hour."""
FETCH_SNAPSHOT_VERSION = 1
FETCH_MAX_WAIT_MS = 500  # KafkaRaftClient's fetch max wait
MAX_EPOCH = 2**31 - 1 - 2**20
"""The highest epoch this node moves to: each election adds one to an int32, so a request claiming an
epoch near 2**31 (a bug, a corrupt or a forged frame) would leave the quorum unable to elect and the
epoch impossible to write. A million elections of headroom; Kafka has no such guard."""
FETCH_VERSION = 17
VOTE_VERSION = 2
QUORUM_EPOCH_VERSION = 1
DESCRIBE_QUORUM_VERSION = 2
NODE_ID_TAKEN = ErrorCode.duplicate_broker_registration
"""The top-level answer to a Fetch, FetchSnapshot or Vote whose replica id a live process with another
directory id holds. Kafka's own code for a node id already in use ("This broker ID is already in use"),
which its controller answers a BrokerRegistration with while the id's last incarnation is still alive;
no Raft answer uses it otherwise, so a node cannot read it as anything else, and a stock Kafka node
logs it by that name."""


class NotLeaderError(Exception):
    """An append or a wait for commit on a node that is not (or no longer) the leader of that epoch."""


ZERO_UUID = CLUSTER_METADATA_TOPIC_ID.__class__(int=0)


def endpoints_text(listeners: dict[str, tuple[str, int]]) -> str:
    """Endpoints as Kafka's Endpoints.toString shows them."""
    inner = ", ".join(f"{name}=/{host}:{port}" for name, (host, port) in listeners.items())
    return f"Endpoints(endpoints={{{inner}}})"


NO_THROTTLE = timedelta(0)


def known_directory(directory_id: uuid.UUID | None) -> uuid.UUID | None:
    """A directory id, None for none (Kafka's ReplicaKey.NO_DIRECTORY_ID is the zero UUID)."""
    return None if directory_id is None or directory_id.int == 0 else directory_id


def directory_text(directory_id: uuid.UUID | None) -> str:
    """A directory id as meta.properties writes it (Kafka's Uuid.toString), "none" when unknown."""
    directory_id = known_directory(directory_id)
    return "none" if directory_id is None else uuid_to_base64(directory_id)


def any_error(message: Any, code: ErrorCode) -> bool:
    """The top-level error of a KRaft answer, or its one partition's, is `code`."""
    if getattr(message, "error_code", None) is code:
        return True
    for name in ("topics", "responses"):
        for topic in getattr(message, name, ()) or ():
            if any(getattr(p, "error_code", None) is code for p in getattr(topic, "partitions", ())):
                return True
    return False


def beyond_max_epoch(epoch: int) -> bool:
    if epoch <= MAX_EPOCH:
        return False
    log.warning("raft: refusing a request in epoch %d, beyond %d", epoch, MAX_EPOCH)
    return True


FETCH_REQUEST_TOPIC: dict[str, Any] = {
    "topic": "FetchTopic",
    "part": "FetchPartition",
    "topic_key": ("topic_id", CLUSTER_METADATA_TOPIC_ID),
}
"""`single_partition`'s envelope for a Fetch request of `__cluster_metadata-0` (topics by id)."""
FETCH_RESPONSE_TOPIC: dict[str, Any] = {
    "topic": "FetchableTopicResponse",
    "topics_field": "responses",
    "topic_key": ("topic_id", CLUSTER_METADATA_TOPIC_ID),
}
"""... and for its answer."""
SNAPSHOT_TOPIC: dict[str, Any] = {
    "topic": "TopicSnapshot",
    "part": "PartitionSnapshot",
    "topic_key": ("name", CLUSTER_METADATA_TOPIC),
}
"""... and for FetchSnapshot, both ways (topics by name)."""


def single_partition(
    cls: type,
    partition: dict[str, Any],
    *,
    topic: str = "TopicData",
    part: str = "PartitionData",
    topics_field: str = "topics",
    topic_key: tuple[str, Any] = ("topic_name", CLUSTER_METADATA_TOPIC),
    **fields: Any,
) -> Any:
    """A Raft message: `fields` around one topic (`__cluster_metadata`) of one partition, the envelope
    every KRaft RPC has; fields a version lacks are left out."""
    topic_cls, partition_cls = nested_type(cls, topic), nested_type(cls, part)
    name_field, name = topic_key
    entry = topic_cls(**{name_field: name, "partitions": (build(partition_cls, **partition),)})
    return build(cls, **fields, **{topics_field: (entry,)})


def only_partition(message: Any, topics_field: str = "topics") -> Any | None:
    topics = getattr(message, topics_field, ())
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        return None
    return topics[0].partitions[0]


def time_ms() -> int:
    return int(time.time() * 1000)
