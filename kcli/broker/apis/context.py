"""What a request handler sees: the request context, the broker state, and the metadata image.

Handlers read cluster facts (brokers, topics, partitions) only through the `ClusterMetadataImage`
in `BrokerState.image`, an immutable snapshot that the metadata layer replaces as a whole when the
metadata log's committed offset advances (BrokerState is the MetadataLoader's last publisher); topics
missing from it are created through `BrokerState.auto_create_topics`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller import NotControllerError
from kcli.broker.metadata.controller.controller_result import NONE, ApiError, ApiException
from kcli.config import BrokerConfig
from kcli.protocol.messages import error_response
from kcli.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bit_set,
)
from kcli.security.authorizer import STANDARD_AUTHORIZER, StandardAuthorizer, host_of

if TYPE_CHECKING:
    from kcli.broker.apis.registry import ApiRegistry
    from kcli.broker.log.manager import LogManager
    from kcli.broker.metadata.controller import QuorumController
    from kcli.broker.metadata.image import ClusterMetadataImage, TopicChanges
    from kcli.broker.producer_ids import ProducerIdManager
    from kcli.broker.quota.quota_factory import QuotaManagers
    from kcli.broker.raft import KafkaRaftClient
    from kcli.broker.replication.alter_log_dirs import ReplicaAlterLogDirsManager
    from kcli.broker.replication.fetch_session import FetchManager
    from kcli.broker.replication.manager import ReplicaManager
    from kcli.security.scram import ScramCredential


AutoCreateTopics = Callable[[Sequence[str]], Awaitable[Mapping[str, ErrorCode]]]
"""Create missing topics (names already validated); return the error per name (none = created)."""


class ForwardToController(Protocol):
    """Send a request to the active controller; with `caller`, in an Envelope that carries the client's
    principal, client id and address (KIP-590)."""

    def __call__(self, request: Any, caller: Caller | None = None) -> Awaitable[Any]: ...


class Caller(NamedTuple):
    """Who sent a request a broker forwards: what the controller handles it as."""

    principal: str
    client_id: str
    peer: str
    correlation_id: int


class NodeServices(Protocol):
    """The parts of this node that handlers reach, and no more.

    The node (`kcli.broker.node`) wires every layer together and so sits above the handlers; they see
    it through this. Parts a controller-only node lacks (the group and transaction coordinators, the
    AddPartitionsToTxn verifier) are read with getattr where a handler may run on one.
    """

    @property
    def raft(self) -> KafkaRaftClient: ...

    @property
    def controller(self) -> QuorumController | None: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def fetch_manager(self) -> FetchManager: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def alter_log_dirs(self) -> ReplicaAlterLogDirsManager: ...

    @property
    def producer_ids(self) -> ProducerIdManager: ...


T = TypeVar("T")

CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."
"""Kafka's message for Errors.CLUSTER_AUTHORIZATION_FAILED."""


@dataclass
class BrokerState:
    """Everything handlers share: configuration, the API registry, the metadata image and hooks."""

    config: BrokerConfig
    registry: ApiRegistry[RequestContext]
    image: ClusterMetadataImage
    auto_create_topics: AutoCreateTopics | None = None
    node: NodeServices | None = None
    """The controller and the logs; None only for a broker started without storage (network tests)."""
    controller_registry: ApiRegistry[RequestContext] | None = None
    """What the controller listener serves (Raft, broker lifecycle); None without one."""
    controller_listener_name: str | None = None
    forward_to_controller: ForwardToController | None = None
    """Send a request to the active controller and give back its answer (Kafka's forwarding, KIP-590)."""
    quotas: QuotaManagers | None = None
    """Client quota sensors (kcli.broker.quota), made when a handler first needs them."""
    authorizer: StandardAuthorizer | None = None
    """The ACL authorizer `authorizer.class.name` names (KIP-801); None: every request is allowed."""

    name = "BrokerState"  # as a MetadataPublisher (not a dataclass field: no annotation)

    def __post_init__(self) -> None:
        config = self.config
        if self.authorizer is None and config.get("authorizer.class.name") == STANDARD_AUTHORIZER:
            self.authorizer = StandardAuthorizer(
                str(config.get("super.users") or ""), bool(config.get("allow.everyone.if.no.acl.found"))
            )

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def on_metadata_update(
        self, changes: TopicChanges, old: ClusterMetadataImage, new: ClusterMetadataImage
    ) -> None:
        """The MetadataPublisher step (Kafka's metadata cache publisher): handlers read `new` from now on."""
        self.image = new

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """The SASL authenticator's credential lookup (Kafka's CredentialCache): what this broker's
        current metadata image stores for `user` under `mechanism` ("SCRAM-SHA-256" or "SCRAM-SHA-512"),
        or None. Read at each authentication, so an altered or deleted credential counts at once."""
        return self.image.scram_credential(mechanism, user)


@dataclass
class ConnectionInfo:
    """One client connection; client software name/version arrive with ApiVersions v3+ (KIP-511)."""

    connection_id: str
    peer: str
    client_software_name: str = "unknown"
    client_software_version: str = "unknown"
    listener: str = ""
    """The name of the listener the connection came in on."""
    principal: str = "User:ANONYMOUS"
    """Kafka's KafkaPrincipal as "User:name": ANONYMOUS until TLS client auth (the certificate's subject
    mapped by `ssl.principal.mapping.rules`, `kcli.security.principal`) or SASL establishes one."""
    mute_for: Callable[[float], None] | None = None
    """Read no further request on this connection for that many seconds (a quota's throttle, KIP-219)."""


class RequestContext(NamedTuple):
    """The request header fields plus where the request came from (a tuple: one is made per request)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    connection: ConnectionInfo
    state: BrokerState
    request_size: int = 0
    """The frame's header and body in bytes (RequestChannel.Request.sizeInBytes): what a producer's
    byte-rate quota records, as Kafka counts it."""

    @property
    def image(self) -> ClusterMetadataImage:
        """The metadata image as the listener this request came in on sees it: brokers' endpoints on
        that listener (a client on SSL is told SSL addresses), as Kafka's metadata cache answers."""
        state = self.state
        listener = self.connection.listener
        if listener == state.controller_listener_name:
            return state.image
        return state.image.for_listener(listener)

    def authorize(
        self, operation: AclOperation, resource_type: ResourceType, name: str, *, log_if_denied: bool = True
    ) -> bool:
        """Whether this request's principal may do `operation` on the resource (always, with no
        authorizer configured); a denial the request asked for is logged on kafka.authorizer.logger."""
        authorizer = self.state.authorizer
        if authorizer is None:
            return True
        connection = self.connection
        return authorizer.authorize(
            self.state.image.acls,
            connection.principal,
            connection.peer,
            self.api_key,
            operation,
            resource_type,
            name,
            log_if_denied=log_if_denied,
        )

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's AuthHelper.authorizedOperations: the bit set of the operations the type supports
        that this principal may do on the resource (all of them with no authorizer); nothing logged."""
        supported = SUPPORTED_OPERATIONS[resource_type]
        if self.state.authorizer is None:
            return operations_bit_set(supported)
        return operations_bit_set(
            op for op in supported if self.authorize(op, resource_type, name, log_if_denied=False)
        )

    def cluster_authorized_operations(self) -> int:
        """What Metadata and DescribeCluster report when asked: the cluster's authorized operations,
        or 0 without DESCRIBE on the cluster (a denial logged, as Kafka's)."""
        if not self.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return 0
        return self.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)

    def cluster_refusal(self, operation: AclOperation) -> Any | None:
        """Kafka's AuthHelper.authorizeClusterOperation: None when the principal may do `operation` on
        the cluster, else this API's error response carrying CLUSTER_AUTHORIZATION_FAILED (a handler
        whose request names items answers with its own per-item shape instead)."""
        if self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return error_response(
            self.api_key,
            self.api_version,
            ErrorCode.cluster_authorization_failed,
            CLUSTER_AUTHORIZATION_FAILED,
        )

    def authorize_by_resource_type(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether `operation` may be allowed on some resource of the type (always, with no authorizer)."""
        authorizer = self.state.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize_by_resource_type(
            self.state.image.acls,
            self.connection.principal,
            host_of(self.connection.peer),
            operation,
            resource_type,
        )

    @property
    def registry(self) -> ApiRegistry[RequestContext]:
        """The APIs of the listener this request came in on."""
        state = self.state
        if (
            state.controller_registry is not None
            and self.connection.listener == state.controller_listener_name
        ):
            return state.controller_registry
        return state.registry

    @property
    def raft(self) -> KafkaRaftClient:
        """This node's Raft client of the metadata quorum."""
        node = self.state.node
        if node is None:
            raise RuntimeError("this broker was started without storage, so it has no Raft client")
        return node.raft

    @property
    def controller(self) -> QuorumController:
        """This node's controller (active, or a standby that answers NOT_CONTROLLER)."""
        node = self.state.node
        if node is None:
            raise RuntimeError("this broker was started without storage, so it has no controller")
        return node.controller

    @property
    def replicas(self) -> ReplicaManager:
        """The partitions this broker hosts: produce, fetch and the other partition requests go through it."""
        node = self.state.node
        if node is None:
            raise RuntimeError("this broker was started without storage, so it hosts no partitions")
        return node.replicas

    @property
    def fetch_manager(self) -> FetchManager:
        """This broker's incremental fetch sessions (KIP-227)."""
        node = self.state.node
        if node is None:
            raise RuntimeError("this broker was started without storage, so it keeps no fetch sessions")
        return node.fetch_manager


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


async def forward_unless_active(ctx: RequestContext, request: Any) -> Any | None:
    """An admin request on a broker whose controller is not the active one goes there (KIP-590).

    None when this node's controller should answer: it is active, or the request came in on the
    controller listener (a standby answers NOT_CONTROLLER there, and the sender looks again).
    """
    state = ctx.state
    node = state.node
    if node is None or state.forward_to_controller is None:
        return None
    controller = node.controller
    if (
        controller is not None and controller.is_active
    ) or ctx.connection.listener == state.controller_listener_name:
        return None
    return await state.forward_to_controller(request, caller_of(ctx))


def caller_of(ctx: RequestContext) -> Caller:
    """The client a forwarded request is handled as: its principal, client id and address."""
    connection = ctx.connection
    return Caller(connection.principal, ctx.client_id, connection.peer, ctx.correlation_id)


async def on_controller(call: Awaitable[T]) -> tuple[T | None, ApiError]:
    """The controller's answer and NONE, or None and the error its refusal maps to.

    One mapping for every API the active controller answers: NOT_CONTROLLER with the reason when this
    node's controller is not (or stopped being) the active one, so the sender looks for the new one;
    an ApiException's own error otherwise. Each handler puts the error in its response's shape.
    """
    try:
        return await call, NONE
    except NotControllerError as exc:
        return None, ApiError(ErrorCode.not_controller, str(exc))
    except ApiException as exc:
        return None, exc.error


async def controller_error(call: Awaitable[ApiError]) -> ApiError:
    """For an operation that answers with an ApiError: that answer, or the refusal's (`on_controller`)."""
    answer, refused = await on_controller(call)
    return refused if answer is None else answer
