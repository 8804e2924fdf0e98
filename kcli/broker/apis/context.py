"""What a request handler sees: the request context, the broker state, and the metadata image.

Handlers read cluster facts (brokers, topics, partitions) only through a `MetadataImage`, an
immutable snapshot that the metadata layer replaces as a whole when the metadata log advances.
Today the image is `SingleNodeImage` with no topics; the topic registry plugs in by putting its own
image (same interface) into `BrokerState.image`, and an auto-creation hook into
`BrokerState.auto_create_topics`.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from kcli.config import BrokerConfig

if TYPE_CHECKING:
    from kcli.broker.apis import ApiRegistry
    from kcli.broker.metadata.controller import QuorumController
    from kcli.broker.node import Node


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as clients must reach it (its advertised listener)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    is_fenced: bool = False


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: tuple[int, ...]
    isr_nodes: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    is_internal: bool = False


class MetadataImage(Protocol):
    """The read-only view of cluster metadata that request handlers use."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self) -> Sequence[BrokerInfo]: ...

    def topics(self) -> Iterable[TopicInfo]: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...


@dataclass(frozen=True)
class SingleNodeImage:
    """This node as the only broker and controller, with a fixed set of topics (none by default)."""

    cluster_id: str
    node: BrokerInfo
    topics_by_name: Mapping[str, TopicInfo] = field(default_factory=dict)

    @property
    def controller_id(self) -> int:
        return self.node.node_id

    def brokers(self) -> Sequence[BrokerInfo]:
        return (self.node,)

    def topics(self) -> Iterable[TopicInfo]:
        return self.topics_by_name.values()

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics_by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for info in self.topics_by_name.values():
            if info.topic_id == topic_id:
                return info
        return None


AutoCreateTopics = Callable[[Sequence[str]], Awaitable[Mapping[str, ErrorCode]]]
"""Create missing topics (names already validated); return the error per name (none = created)."""


@dataclass
class BrokerState:
    """Everything handlers share: configuration, the API registry, the metadata image and hooks."""

    config: BrokerConfig
    registry: ApiRegistry
    image: MetadataImage
    auto_create_topics: AutoCreateTopics | None = None
    node: Node | None = None
    """The controller and the logs; None only for a broker started without storage (network tests)."""

    @property
    def node_id(self) -> int:
        return self.config.node_id


@dataclass
class ConnectionInfo:
    """One client connection; client software name/version arrive with ApiVersions v3+ (KIP-511)."""

    connection_id: str
    peer: str
    client_software_name: str = "unknown"
    client_software_version: str = "unknown"


class RequestContext(NamedTuple):
    """The request header fields plus where the request came from (a tuple: one is made per request)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    connection: ConnectionInfo
    state: BrokerState

    @property
    def controller(self) -> QuorumController:
        """The quorum-of-one controller admin requests go through."""
        node = self.state.node
        if node is None:
            raise RuntimeError("this broker was started without storage, so it has no controller")
        return node.controller


@dataclass(frozen=True, slots=True)
class FileRegion:
    """`count` bytes of an open file from `offset`, sent with os.sendfile (no copy through Python)."""

    file: BinaryIO
    offset: int
    count: int


@dataclass(frozen=True, slots=True)
class FramedResponse:
    """A response body a handler has already encoded as parts, some of them file regions.

    This is the zero-copy path for Fetch: the handler encodes everything around the record bytes
    with kio and leaves the records as `FileRegion`s of segment files. `response_type` (the kio
    response class) tells the server which response header version to write in front.
    """

    response_type: type
    parts: tuple[bytes | FileRegion, ...]

    @property
    def size(self) -> int:
        return sum(p.count if isinstance(p, FileRegion) else len(p) for p in self.parts)


def new_cluster_id() -> str:
    """A fresh cluster id in Kafka's form: a random UUID as 22 chars of URL-safe base64, no padding.

    Like Kafka's `Uuid.randomUuid`, never the all-zero id and never one starting with "-".
    """
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        if not text.startswith("-") and any(raw):
            return text
