"""The broker's side of the controller: reaching the active controller, registering, heartbeating.

Kafka's NodeToControllerChannelManager and BrokerLifecycleManager. Whatever must reach the active
controller (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, and the admin requests a broker
forwards, KIP-590) goes to the Raft leader's controller listener; when this node's own controller is
the active one, the call stays in the process. A NOT_CONTROLLER answer, or no answer, means the
leadership moved: the request waits for the quorum to name a leader and goes again, until its deadline.

A broker registers fenced, heartbeats every `broker.heartbeat.interval.ms` with the metadata offset it
has applied, and is unfenced once that reaches its registration; only then does it serve clients. On
SIGTERM it asks to shut down (WantShutDown) and the controller fences it before it stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from formats.checkpoints import uuid_from_base64
from kcli.broker.metadata.controller import BrokerHeartbeat, NotControllerError, QuorumController
from kcli.broker.metadata.controller.cluster_control_manager import supported_features
from kcli.broker.metadata.controller.controller_result import ApiException
from kcli.broker.metadata.image import ProducerIdsBlock
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.raft import KafkaRaftClient
from kcli.client import NodeConnections
from kcli.config import SECURITY_PROTOCOL_IDS, BrokerConfig, Listener
from kcli.errors import KcliError
from kcli.protocol.envelope import envelope, read_response
from kcli.protocol.messages import api_name, error_response, nested_type, request_type, response_type
from kcli.security import ReconfigurableSecurity
from kcli.storage import load_meta_properties

if TYPE_CHECKING:
    from kcli.broker.apis.context import Caller

log = logging.getLogger("kcli.broker")

BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
RETRY_BACKOFF_SECONDS = 0.05
LEADER_CHECK_SECONDS = 0.1
"""How often a request waiting on the active controller checks that the quorum still names it."""


class ControllerUnavailable(KcliError):
    """No active controller answered before the deadline."""


class ControllerChannel:
    """Requests to the active controller: in process when it is this node's, else over its listener."""

    def __init__(
        self,
        raft: KafkaRaftClient,
        controller: QuorumController | None,
        *,
        timeout: float,
        security: ReconfigurableSecurity | None = None,
    ) -> None:
        """`security`: how the controller listener is dialed, reconfigured with a renewed keystore (as
        Kafka's NodeToControllerChannelManager's channel builder is); None: the Raft client's."""
        self.raft = raft
        self.controller = controller
        self.timeout = timeout
        self._connections = NodeConnections(f"broker-{raft.node_id}-to-controller", security or raft.security)

    @property
    def local(self) -> QuorumController | None:
        """This node's controller when it is the active one."""
        if self.controller is not None and self.controller.is_active:
            return self.controller
        return None

    async def call(
        self,
        local: Callable[[QuorumController], Awaitable[Any]],
        request: Any,
        *,
        timeout: float | None = None,
    ) -> Any:
        """`local(controller)` when this node's controller is active, else `request` to the active one.

        Returns what the local call returns, or the remote response (kio entity).
        """
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            controller = self.local
            if controller is not None:
                try:
                    return await asyncio.wait_for(local(controller), max(deadline - time.monotonic(), 0.05))
                except (NotControllerError, TimeoutError):
                    pass
            else:
                response = await self._send_to_leader(request, deadline)
                if response is not None and not _not_controller(response):
                    return response
            if time.monotonic() >= deadline:
                raise ControllerUnavailable(
                    f"no active controller answered within {timeout:g} s (quorum leader: {self.raft.leader.leader_id})."
                )
            await asyncio.sleep(RETRY_BACKOFF_SECONDS)

    async def forward(self, request: Any, caller: Caller | None = None) -> Any:
        """Send a client's admin request to the active controller (KIP-590 forwarding): in an Envelope
        that carries `caller`'s principal, client id and address when there is a caller (Kafka's
        ForwardingManager), as it is for the broker's own requests (auto-created topics).

        With no answer before the request timeout, the client gets REQUEST_TIMED_OUT in its request's
        own response, as Kafka's ForwardingManager answers.
        """
        deadline = time.monotonic() + self.timeout
        sent = request if caller is None else _enveloped(request, caller)
        while True:
            response = await self._send_to_leader(sent, deadline)
            if response is not None and caller is not None:
                response = _unwrapped(request, response)
            if response is not None and not _not_controller(response):
                return response
            if time.monotonic() >= deadline:
                log.warning(
                    "%s forwarded to the controller: no answer within %g s (quorum leader %d)",
                    api_name(request.__api_key__),
                    self.timeout,
                    self.raft.leader.leader_id,
                )
                return error_response(request.__api_key__, request.__version__, ErrorCode.request_timed_out)
            await asyncio.sleep(RETRY_BACKOFF_SECONDS)

    async def _send_to_leader(self, request: Any, deadline: float) -> Any | None:
        """The answer of the quorum's leader, or None. A request waiting on a leader that the quorum has
        replaced in the meantime (a stopped or cut-off controller never answers) is given up at once,
        to go again to the new one, as Kafka's NodeToControllerRequestThread disconnects from a
        controller that is no longer active."""
        leader = self.raft.leader
        address = self.raft.address_of(leader.leader_id)
        if address is None:
            return None
        remaining = max(deadline - time.monotonic(), 0.05)
        send = asyncio.ensure_future(
            self._connections.send(leader.leader_id, address, request, timeout=remaining)
        )
        try:
            while True:
                done, _ = await asyncio.wait({send}, timeout=LEADER_CHECK_SECONDS)
                if done:
                    return send.result()
                if self.raft.leader != leader:
                    log.info(
                        "%s to controller %d abandoned: the quorum's leader is now %d (epoch %d)",
                        api_name(request.__api_key__) if not callable(request) else "a request",
                        leader.leader_id,
                        self.raft.leader.leader_id,
                        self.raft.leader.epoch,
                    )
                    await self._connections.drop(leader.leader_id)
                    return None
        finally:
            if not send.done():
                send.cancel()

    async def close(self) -> None:
        await self._connections.close()


def _enveloped(request: Any, caller: Caller) -> Any:
    return envelope(
        request,
        principal=caller.principal,
        client_id=caller.client_id,
        peer=caller.peer,
        correlation_id=caller.correlation_id,
    )


def _unwrapped(request: Any, answer: Any) -> Any:
    """The forwarded request's response out of the controller's EnvelopeResponse. An envelope error
    says the brokers disagree (Kafka's ForwardingManager): UNSUPPORTED_VERSION closes the client's
    connection, so that it asks for versions again; any other is UNKNOWN_SERVER_ERROR to the client."""
    error = answer.error_code
    name = api_name(request.__api_key__)
    if error is ErrorCode.unsupported_version:
        raise ConnectionAbortedError(f"the controller could not parse the forwarded {name} request")
    if error is not ErrorCode.none or answer.response_data is None:
        log.warning("%s forwarded to the controller: the envelope was refused with %s", name, error.name)
        return error_response(request.__api_key__, request.__version__, ErrorCode.unknown_server_error)
    try:
        return read_response(
            response_type(request.__api_key__, request.__version__), bytes(answer.response_data)
        )
    except Exception as exc:  # kio raises whatever its reader meets in bad bytes
        log.error("%s forwarded to the controller: cannot parse the response in its envelope: %s", name, exc)
        return error_response(request.__api_key__, request.__version__, ErrorCode.unknown_server_error)


def _not_controller(response: Any) -> bool:
    """True when the answer (top level, or any topic or resource in it) says NOT_CONTROLLER."""
    if getattr(response, "error_code", None) is ErrorCode.not_controller:
        return True
    for name in ("topics", "responses", "results"):
        for item in getattr(response, name, ()) or ():
            if getattr(item, "error_code", None) is ErrorCode.not_controller:
                return True
    return False


class BrokerLifecycleManager:
    """Registration, heartbeats and controlled shutdown of this node's broker."""

    def __init__(self, config: BrokerConfig, channel: ControllerChannel, loader: MetadataLoader) -> None:
        self.config = config
        self.channel = channel
        self.loader = loader
        self.node_id = config.node_id
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.fenced = True
        self._unfenced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._shutting_down = False
        self.heartbeat_interval = int(config["broker.heartbeat.interval.ms"]) / 1000  # type: ignore[call-overload]
        self.log_dir_ids = _log_dir_ids(config)
        self.previous_broker_epoch = -1
        """The broker epoch this node's clean-shutdown files record (LogManager.readBrokerEpochFromCleanShutdownFiles),
        sent with every registration of this incarnation; -1 when they do not show a clean shutdown."""

    async def start(self, advertised: Sequence[Listener], rack: str | None) -> None:
        """Register, then heartbeat in the background until unfenced (this returns then)."""
        await self._register(advertised, rack)
        self._task = asyncio.create_task(self._heartbeats(advertised, rack), name="kcli-broker-heartbeats")
        await self._unfenced.wait()
        log.info("broker %d is unfenced (broker epoch %d)", self.node_id, self.broker_epoch)

    async def _register(self, advertised: Sequence[Listener], rack: str | None) -> None:
        """BrokerRegistration with every client listener as clients reach it (Kafka registers each
        advertised listener with its security protocol)."""
        endpoints = [(x, SECURITY_PROTOCOL_IDS[self.config.protocol_of(x.name)]) for x in advertised]
        cls = request_type(BROKER_REGISTRATION, 4)
        listener_cls, feature_cls = nested_type(cls, "Listener"), nested_type(cls, "Feature")
        request = cls(
            broker_id=self.node_id,
            cluster_id=self.channel.raft.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=tuple(
                listener_cls(name=x.name, host=x.host, port=x.port, security_protocol=protocol)
                for x, protocol in endpoints
            ),
            features=tuple(
                feature_cls(name=name, min_supported_version=low, max_supported_version=high)
                for name, low, high in supported_features()
            ),
            rack=rack,
            is_migrating_zk_broker=False,
            log_dirs=self.log_dir_ids,
            previous_broker_epoch=self.previous_broker_epoch,
        )

        async def local(controller: QuorumController) -> int:
            return await controller.register_broker(
                advertised[0],
                endpoints=endpoints,
                broker_id=self.node_id,
                incarnation_id=self.incarnation_id,
                rack=rack,
                log_dirs=self.log_dir_ids,
                fenced=True,
                previous_broker_epoch=self.previous_broker_epoch,
                features=supported_features(),
            )

        deadline = (
            time.monotonic() + int(self.config["initial.broker.registration.timeout.ms"]) / 1000  # type: ignore[call-overload]
        )
        while True:
            reason = None
            try:
                answer = await self.channel.call(local, request)
            except ApiException as exc:
                error, reason = exc.error.code, exc.error.message
            else:
                if isinstance(answer, int):
                    self.broker_epoch = answer
                    return
                if answer.error_code is ErrorCode.none:
                    self.broker_epoch = answer.broker_epoch
                    return
                error = answer.error_code
            if error is not ErrorCode.duplicate_broker_registration or time.monotonic() > deadline:
                if error is ErrorCode.duplicate_broker_registration:
                    raise KcliError(
                        f"node.id {self.node_id} is registered by another broker that is still alive; "
                        "give this node another node.id (or stop the other one)."
                    )
                raise KcliError(
                    f"the controller refused this broker's registration: {error.name}"
                    + (f": {reason}" if reason else ".")
                )
            await asyncio.sleep(self.heartbeat_interval)  # an old incarnation's session may still be live

    async def heartbeat(
        self, *, want_shut_down: bool = False, timeout: float | None = None
    ) -> tuple[ErrorCode, bool, bool]:
        """One heartbeat; (error, fenced, should shut down)."""
        offset = self.loader.image.offset
        cls = request_type(BROKER_HEARTBEAT, 1)
        request = cls(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=offset,
            want_fence=False,
            want_shut_down=want_shut_down,
            offline_log_dirs=(),
        )
        beat = BrokerHeartbeat(self.node_id, self.broker_epoch, offset, False, want_shut_down)

        async def local(controller: QuorumController) -> Any:
            try:
                return await controller.broker_heartbeat(beat)
            except ApiException as exc:
                return exc.error.code

        answer = await self.channel.call(local, request, timeout=timeout)
        if isinstance(answer, ErrorCode):
            return answer, True, False
        if hasattr(answer, "error_code"):
            return answer.error_code, answer.is_fenced, answer.should_shut_down
        return ErrorCode.none, answer.is_fenced, answer.should_shut_down

    async def _heartbeats(self, advertised: Sequence[Listener], rack: str | None) -> None:
        while not self._shutting_down:
            try:
                error, fenced, _ = await self.heartbeat()
            except ControllerUnavailable as exc:
                log.warning("broker %d: heartbeat not answered: %s", self.node_id, exc)
                continue
            if error is ErrorCode.stale_broker_epoch:
                log.warning(
                    "broker %d: stale broker epoch %d, registering again", self.node_id, self.broker_epoch
                )
                try:
                    await self._register(advertised, rack)
                except (ControllerUnavailable, KcliError) as exc:  # keep trying: a silent stop fences us
                    log.error("broker %d: registering again failed: %s", self.node_id, exc)
                    await asyncio.sleep(self.heartbeat_interval)
                continue
            if error is ErrorCode.none:
                if self.fenced and not fenced:
                    self._unfenced.set()
                self.fenced = fenced
            await asyncio.sleep(
                self.heartbeat_interval if not self.fenced else min(self.heartbeat_interval, 0.05)
            )

    async def stop(self) -> None:
        """Stop heartbeating, asking nothing: the way out of a node that has left the quorum (a fatal
        fault), whose controller would fence it once its session expires."""
        self._shutting_down = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def controlled_shutdown(self, timeout: float) -> None:
        """WantShutDown until the controller says ShouldShutDown (it fences this broker first). Once."""
        if self._shutting_down:
            return
        await self.stop()
        if self.broker_epoch < 0:
            return
        log.info("broker %d: controlled shutdown: asking the controller to fence this broker", self.node_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            beat = asyncio.ensure_future(
                self.heartbeat(want_shut_down=True, timeout=max(deadline - time.monotonic(), 0.05))
            )
            try:
                while not beat.done() and (lost := self.quorum_lost()) is None:
                    await asyncio.wait({beat}, timeout=LEADER_CHECK_SECONDS)
                if not beat.done():
                    beat.cancel()
                    await asyncio.gather(beat, return_exceptions=True)
                    log.warning("broker %d: controlled shutdown given up: %s", self.node_id, lost)
                    return
                error, _, should_shut_down = beat.result()
            except ControllerUnavailable as exc:
                log.warning("broker %d: controlled shutdown not acknowledged: %s", self.node_id, exc)
                return
            if error is not ErrorCode.none:
                log.warning("broker %d: controlled shutdown refused: %s", self.node_id, error.name)
                return
            if should_shut_down:
                log.info("broker %d: controlled shutdown complete: the controller fenced it", self.node_id)
                return
            await asyncio.sleep(RETRY_BACKOFF_SECONDS)
        log.warning("broker %d: controlled shutdown not acknowledged within %g s", self.node_id, timeout)

    def quorum_lost(self) -> str | None:
        """Why no majority of the controller quorum is left to record this broker's fence, or None.

        A voter that is also a registered broker is the same process (node.id is unique in KRaft); once
        the controller has fenced that broker, its voter is leaving or gone with it. When every node of a
        combined cluster stops at once, the last one would otherwise wait out the whole timeout for a
        record that cannot commit (Kafka's last broker does); nobody is left to take its leaderships.
        """
        voters = set(self.channel.raft.voter_addresses)
        brokers = self.loader.image.brokers_by_id
        gone = sorted(v for v in voters if v != self.node_id and v in brokers and brokers[v].fenced)
        if not gone or len(voters) - len(gone) > len(voters) // 2:
            return None
        return (
            f"the brokers of voters {', '.join(map(str, gone))} are fenced and stopping with their "
            f"controllers, so no majority of the {len(voters)} voters is left to record the fence"
        )


def _log_dir_ids(config: BrokerConfig) -> tuple[uuid.UUID, ...]:
    """The directory.id of each log dir's meta.properties (KIP-858), sent with the registration."""
    found = load_meta_properties(config.log_dirs)
    ids = []
    for log_dir in config.log_dirs:
        meta = found.get(log_dir)
        if meta is not None and meta.directory_id:
            ids.append(uuid_from_base64(meta.directory_id))
    return tuple(ids)


async def allocate_producer_ids(
    channel: ControllerChannel, broker_id: int, broker_epoch: int
) -> ProducerIdsBlock:
    """AllocateProducerIds to the active controller (in process when it is this node's)."""
    cls = request_type(67, 0)
    request = cls(broker_id=broker_id, broker_epoch=broker_epoch)

    async def local(controller: QuorumController) -> ProducerIdsBlock:
        return await controller.allocate_producer_ids(broker_id, broker_epoch)

    answer = await channel.call(local, request)
    if isinstance(answer, ProducerIdsBlock):
        return answer
    if answer.error_code is not ErrorCode.none:
        raise ApiException(answer.error_code, f"AllocateProducerIds failed: {answer.error_code.name}")
    return ProducerIdsBlock(broker_id, answer.producer_id_start, answer.producer_id_len)
