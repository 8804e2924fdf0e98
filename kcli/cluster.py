"""A Kafka cluster as an admin tool sees it: a bootstrap broker, the metadata, and one connection per broker.

Requests that must reach a particular broker (ListOffsets and Fetch to a partition leader, group
requests to the group's coordinator) go through `node(node_id)`; connections are opened on first
use and kept. Everything speaks the standard protocol, so the same code serves Apache Kafka.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import AuthenticationError, ClientError, KafkaClient, split_bootstrap
from kcli.protocol.messages import build, nested_type
from kcli.security import PLAINTEXT, ClientSecurity

COORDINATOR_PENDING = frozenset({ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress})
"""FindCoordinator answers that go away by themselves (the first use of __consumer_offsets creates it)."""
COORDINATOR_RETRY_BACKOFF = 0.1
"""Kafka's retry.backoff.ms default, in seconds."""

CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection: KafkaClient.connect's default, Kafka's socket.connection.setup.timeout.ms."""
METADATA = 3
FIND_COORDINATOR = 10
DESCRIBE_CLUSTER = 60
ENDPOINT_CONTROLLERS = 2
"""DescribeCluster's endpoint_type for the controllers (KIP-919)."""
GROUP_KEY = 0
TRANSACTION_KEY = 1


class ClusterError(ClientError):
    """The cluster answered with an error an admin command cannot go on from."""


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: dict[int, str]
    """node id -> "host:port"."""
    leaders: dict[tuple[str, int], int]
    """(topic, partition) -> leader node id (-1 when leaderless)."""
    errors: dict[str, ErrorCode]
    """Topics the metadata answered with an error for (UNKNOWN_TOPIC_OR_PARTITION, ...)."""

    def partitions(self, topic: str) -> list[int]:
        return sorted(p for t, p in self.leaders if t == topic)

    @property
    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.leaders})


class Cluster:
    def __init__(
        self,
        bootstrap: KafkaClient,
        *,
        client_id: str,
        request_timeout: float,
        security: ClientSecurity = PLAINTEXT,
        connect_timeout: float = CONNECT_TIMEOUT,
        controllers: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        self.controllers = controllers
        """Connected with --bootstrap-controller (Kafka's bootstrap.controllers, KIP-919): the nodes are
        the controllers, known from DescribeCluster, and the controllers answer no Metadata."""
        self.client_id = client_id
        self.security = security
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._brokers: dict[int, str] = {}
        self._clients: dict[int, KafkaClient] = {}
        self._active_controller: KafkaClient | None = None

    @classmethod
    async def connect(
        cls,
        bootstrap_servers: str,
        *,
        client_id: str = "kcli",
        request_timeout: float = 30.0,
        security: ClientSecurity = PLAINTEXT,
        connect_timeout: float = CONNECT_TIMEOUT,
        controllers: bool = False,
    ) -> Cluster:
        """Connect to the first reachable of "host:port[,host:port...]" (controllers' addresses with
        `controllers`); `connect_timeout` is Kafka's socket.connection.setup.timeout.ms, for this and
        every connection after it."""
        errors = []
        for address in split_bootstrap(bootstrap_servers):  # every entry well formed before any connects
            try:
                client = await KafkaClient.connect(
                    address,
                    client_id=client_id,
                    connect_timeout=connect_timeout,
                    request_timeout=request_timeout,
                    security=security,
                )
            except AuthenticationError:
                raise  # refused credentials: every broker would refuse them (Kafka's clients stop too)
            except ClientError as exc:
                errors.append(str(exc))
                continue
            return cls(
                client,
                client_id=client_id,
                request_timeout=request_timeout,
                security=security,
                connect_timeout=connect_timeout,
                controllers=controllers,
            )
        raise ClusterError(
            errors[0] if len(errors) == 1 else "no bootstrap server is reachable: " + " ".join(errors)
        )

    async def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """Brokers and partition leaders of `topics` (None: every topic)."""
        response = await self.metadata_response(topics)
        leaders: dict[tuple[str, int], int] = {}
        errors: dict[str, ErrorCode] = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                errors[topic.name] = topic.error_code
                continue
            for partition in topic.partitions:
                leaders[(topic.name, partition.partition_index)] = partition.leader_id
        return ClusterMetadata(dict(self._brokers), leaders, errors)

    async def metadata_response(self, topics: list[str] | None = None) -> Any:
        """The Metadata response itself (replicas, ISR, topic ids...), never auto-creating a topic."""
        if self.controllers:
            raise ClusterError(
                "the controllers do not answer Metadata requests: give --bootstrap-server to reach "
                "topics and brokers."
            )
        cls = self.bootstrap.request_type(METADATA)
        topic_cls = nested_type(cls, "MetadataRequestTopic")
        names = None if topics is None else tuple(build(topic_cls, name=t, topic_id=None) for t in topics)
        request = build(
            cls,
            topics=names,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = await self.bootstrap.send(request)
        self._brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        return response

    async def node(self, node_id: int) -> KafkaClient:
        """The connection to broker `node_id` (opened on first use)."""
        client = self._clients.get(node_id)
        if client is not None:
            return client
        if node_id not in self._brokers:
            await self._learn_nodes()
        address = self._brokers.get(node_id)
        if address is None:
            if self.controllers:
                raise ClusterError(f"controller {node_id} is not one of the cluster's controllers.")
            raise ClusterError(f"broker {node_id} is not in the cluster metadata.")
        if address == self.bootstrap.address:
            client = self.bootstrap
        else:
            client = await KafkaClient.connect(
                address,
                client_id=self.client_id,
                connect_timeout=self.connect_timeout,
                request_timeout=self.request_timeout,
                security=self.security,
            )
        self._clients[node_id] = client
        return client

    def address(self, node_id: int) -> str | None:
        """ "host:port" of a broker this cluster has seen in Metadata or FindCoordinator (else None)."""
        return self._brokers.get(node_id)

    async def node_ids(self) -> list[int]:
        """Every broker's id; with `controllers` every controller's."""
        await self._learn_nodes()
        return sorted(self._brokers)

    async def all_nodes(self) -> list[tuple[int, KafkaClient]]:
        """(node id, connection) of every broker (e.g. ListGroups is answered per coordinator)."""
        return [(node_id, await self.node(node_id)) for node_id in await self.node_ids()]

    async def _learn_nodes(self) -> None:
        """The brokers from Metadata; the controllers from DescribeCluster, as Kafka's admin client
        learns them when bootstrapped from controllers."""
        if self.controllers:
            described = await self._describe_controllers()
            self._brokers = {c.broker_id: f"{c.host}:{c.port}" for c in described.brokers}
        else:
            await self.metadata([])

    async def active_controller(self) -> KafkaClient:
        """The connection to the active controller, found with DescribeCluster from the bootstrap
        controller (KIP-919): where Kafka's admin client sends a change when bootstrapped from
        controllers (LeastLoadedBrokerOrActiveKController), since only the active one commits it."""
        if self._active_controller is not None:
            return self._active_controller
        described = await self._describe_controllers()
        address = next(
            (f"{c.host}:{c.port}" for c in described.brokers if c.broker_id == described.controller_id), None
        )
        if address is None:
            raise ClusterError("no active controller is known to the bootstrap controllers.")
        if address == self.bootstrap.address:
            self._active_controller = self.bootstrap
        else:
            self._active_controller = await KafkaClient.connect(
                address,
                client_id=self.client_id,
                connect_timeout=self.connect_timeout,
                request_timeout=self.request_timeout,
                security=self.security,
            )
        return self._active_controller

    async def least_loaded_or_active_controller(self) -> KafkaClient:
        """Where a cluster-wide change goes: the bootstrap broker (which forwards it to the active
        controller), or from controllers the active one."""
        return await self.active_controller() if self.controllers else self.bootstrap

    async def _describe_controllers(self) -> Any:
        client = self.bootstrap
        if client.version(DESCRIBE_CLUSTER) < 1:
            raise ClusterError(f"{client.address} cannot describe its controllers (DescribeCluster v1).")
        response = await client.send(
            build(
                client.request_type(DESCRIBE_CLUSTER),
                include_cluster_authorized_operations=False,
                endpoint_type=ENDPOINT_CONTROLLERS,
                include_fenced_brokers=False,
            )
        )
        if response.error_code is ErrorCode.mismatched_endpoint_type:
            raise ClusterError(
                f"{client.address} is a broker, not a controller: give it to --bootstrap-server."
            )
        if response.error_code is not ErrorCode.none:
            raise ClusterError(f"DescribeCluster failed: {response.error_code.name}.")
        return response

    async def coordinator(self, key: str, key_type: int = GROUP_KEY) -> tuple[int, KafkaClient]:
        """(node id, connection) of the coordinator of a group (key type 0) or transactional id (1)."""
        cls = self.bootstrap.request_type(FIND_COORDINATOR)
        if cls.__version__ >= 4:
            request = cls(key_type=key_type, coordinator_keys=(key,))
        else:
            request = build(cls, key=key, key_type=key_type)
        deadline = time.monotonic() + self.request_timeout
        while True:
            response = await self.bootstrap.send(request)
            answer: Any = response.coordinators[0] if cls.__version__ >= 4 else response
            # Retriable, as Kafka's Admin treats them: the coordinator's topic is being created or loaded.
            if answer.error_code not in COORDINATOR_PENDING or time.monotonic() >= deadline:
                break
            await asyncio.sleep(COORDINATOR_RETRY_BACKOFF)
        if answer.error_code != ErrorCode.none:
            message = getattr(answer, "error_message", None)
            detail = f" ({message})" if message else ""
            what = "group" if key_type == GROUP_KEY else "transactional id"
            raise ClusterError(
                f"cannot find the coordinator of {what} {key!r}: {answer.error_code.name.upper()}{detail}."
            )
        self._brokers[answer.node_id] = f"{answer.host}:{answer.port}"
        return answer.node_id, await self.node(answer.node_id)

    async def by_leader(self, partitions: list[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        """Partitions grouped by their leader's node id; leaderless or unknown ones under -1."""
        metadata = await self.metadata(sorted({t for t, _ in partitions}))
        grouped: dict[int, list[tuple[str, int]]] = {}
        for tp in partitions:
            grouped.setdefault(metadata.leaders.get(tp, -1), []).append(tp)
        return grouped

    async def close(self) -> None:
        opened = (self.bootstrap, *self._clients.values(), self._active_controller)
        clients = {id(c): c for c in opened if c is not None}
        for client in clients.values():
            await client.close()

    async def __aenter__(self) -> Cluster:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
