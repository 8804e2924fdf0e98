"""The QuorumController: run an admin operation on the active controller, answer once it is committed.

Each operation follows Kafka's QuorumController: the control manager that owns the concept checks
the request against the controller's image (with Kafka's rules, error codes and messages) and returns
a `ControllerResult`, its records and its answer; the controller appends the records to the metadata
log as ONE batch through the Raft client (so an operation is all or nothing, even across `kill -9`)
and folds them into its image at once, so the next operation sees them; the answer waits until the
quorum has committed the batch. Validate-only requests stop before the append. Operations run one at
a time: the check, the append and the fold happen in one turn of the event loop.

Only the Raft leader's controller is active. The others replay committed batches into their image
(standby controllers, ready to take over) and answer NOT_CONTROLLER. A controller that loses the
leadership drops its uncommitted writes: its image goes back to the last committed one, and the
operations still waiting get NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from formats.internal import MetadataRecord, encode_metadata_record
from kcli.broker.metadata.controller.acl_control_manager import AclControlManager, DeletionResult
from kcli.broker.metadata.controller.client_quota_control_manager import (
    ClientQuotaControlManager,
    EntityResult,
)
from kcli.broker.metadata.controller.cluster_control_manager import (
    BrokerHeartbeat,
    ClusterControlManager,
    HeartbeatReply,
)
from kcli.broker.metadata.controller.configuration_control_manager import (
    ConfigOp,
    ConfigurationControlManager,
)
from kcli.broker.metadata.controller.controller_result import ApiError, ApiException, ControllerResult, Record
from kcli.broker.metadata.controller.directory_assignment import assign_replicas_to_dirs
from kcli.broker.metadata.controller.feature_control_manager import FeatureControlManager
from kcli.broker.metadata.controller.producer_id_control_manager import ProducerIdControlManager
from kcli.broker.metadata.controller.replication_control_manager import (
    ALTER_PARTITION,
    ALTER_PARTITION_REASSIGNMENTS,
    ReplicationControlManager,
)
from kcli.broker.metadata.controller.scram_control_manager import ScramControlManager, UserResult
from kcli.broker.metadata.controller.topic_control_manager import (
    CreateTopicResult,
    DeleteTopicResult,
    NewTopic,
    TopicControlManager,
)
from kcli.broker.metadata.image import ClusterMetadataImage, ProducerIdsBlock, fold
from kcli.broker.raft.metadata_log import LoggedBatch, MetadataLog
from kcli.broker.raft.raft_client import KafkaRaftClient
from kcli.broker.raft.raft_listener import LeaderAndEpoch
from kcli.broker.raft.raft_util import NotLeaderError
from kcli.broker.raft.snapshots import SnapshotId
from kcli.config import BrokerConfig, Listener
from kcli.errors import KcliError
from kcli.features import DEFAULT_METADATA_VERSION, UpgradeType, release_version
from kcli.protocol.messages import build, response_type
from kcli.security.acl import AclBindingFilter, StandardAcl

log = logging.getLogger("kcli.broker.metadata")

T = TypeVar("T")

_INACTIVE_POLL_SECONDS = 0.25
"""How often a controller that is not active looks whether it became so, to fence stale sessions."""
_EXPIRY_MARGIN_SECONDS = 0.001
"""Past a session's expiry: Kafka fences a session older than the timeout, not one exactly as old."""


class NotControllerError(KcliError):
    """This node's controller is not the active one (or stopped being it before the write committed)."""

    error_code = ErrorCode.not_controller


class QuorumController:
    """One node's controller: active while its Raft client leads, a standby replaying commits otherwise."""

    def __init__(
        self,
        config: BrokerConfig,
        raft_client: KafkaRaftClient,
        image: ClusterMetadataImage,
        *,
        bootstrap_records: Sequence[Record] | None = None,
    ) -> None:
        self.config = config
        self.bootstrap_records = bootstrap_records
        self.node_id = config.node_id
        self.raft_client = raft_client
        self._image = image
        self._committed = image
        self._uncommitted: deque[tuple[int, ClusterMetadataImage]] = deque()  # (last offset, image after it)
        self._active_epoch: int | None = None
        self._activated = asyncio.Event()
        self._last_write = 0.0
        self.cluster_control = ClusterControlManager()
        self.configuration_control = ConfigurationControlManager(config)
        self.topic_control = TopicControlManager(config, self.cluster_control, self.configuration_control)
        self.replication_control = ReplicationControlManager(self.cluster_control, self.configuration_control)
        self.producer_id_control = ProducerIdControlManager(self.cluster_control)
        self.feature_control = FeatureControlManager()
        self.scram_control = ScramControlManager()
        self.client_quota_control = ClientQuotaControlManager()
        self.acl_control = AclControlManager()
        raft_client.register(self)

    @property
    def image(self) -> ClusterMetadataImage:
        """What the next operation is checked against: committed, plus this leader's pending writes."""
        return self._image

    @property
    def is_active(self) -> bool:
        return self._active_epoch is not None

    async def wait_active(self) -> None:
        """Until this controller is the active one (start-up of a quorum of one, tests)."""
        await self._activated.wait()

    @property
    def metadata_log(self) -> MetadataLog:
        return self.raft_client.log

    # --- the Raft listener ------------------------------------------------------------------------

    def handle_commit(self, batches: Sequence[LoggedBatch]) -> None:
        """Committed batches: this leader's own writes are folded already; others are replayed."""
        for batch in batches:
            if batch.leader_epoch == self._active_epoch:
                while self._uncommitted and self._uncommitted[0][0] <= batch.last_offset:
                    self._committed = self._uncommitted.popleft()[1]
            elif batch.records:
                self._committed = fold(self._committed, batch.records)
                if self._active_epoch is None:
                    self._image = self._committed

    def handle_load_snapshot(self, snapshot_id: SnapshotId, records: Sequence[MetadataRecord]) -> None:
        """The committed state as of a snapshot (start-up, or a standby that fell behind the leader)."""
        empty = ClusterMetadataImage.empty(
            self._committed.cluster_id, self.node_id, self._committed.listener_name
        )
        self._committed = dataclasses.replace(fold(empty, records), offset=snapshot_id.end_offset - 1)
        self._uncommitted.clear()
        if self._active_epoch is None:
            self._image = self._committed

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """Claim when this node leads (it has replayed every batch before its epoch), renounce otherwise."""
        if leader.leader_id == self.node_id:
            self._active_epoch = leader.epoch
            self._image = self._committed
            self.cluster_control.activate(time.monotonic())
            log.info("controller %d is active in epoch %d", self.node_id, leader.epoch)
            self._activated.set()
            bootstrap = self.feature_control.bootstrap(
                self._image,
                self.bootstrap_records,
                default_min_insync_replicas=int(self.config["min.insync.replicas"]),  # type: ignore[call-overload]
            )
            if self._write(bootstrap) is not None:
                source = (
                    "the bootstrap metadata"
                    if self.bootstrap_records
                    else f"metadata.version {release_version(DEFAULT_METADATA_VERSION)}"
                )
                log.info("bootstrapped the metadata log from %s", source)
        elif self._active_epoch is not None:
            log.info("controller %d is no longer active (leader now %d)", self.node_id, leader.leader_id)
            self._active_epoch = None
            self._activated.clear()
            self._uncommitted.clear()
            self._image = self._committed

    # --- start-up and brokers -----------------------------------------------------------------------

    async def register_broker(
        self,
        listener: Listener,
        *,
        incarnation_id: uuid.UUID | None = None,
        rack: str | None = None,
        log_dirs: Sequence[uuid.UUID] = (),
        broker_id: int | None = None,
        fenced: bool = False,
        previous_broker_epoch: int = -1,
        features: Sequence[tuple[str, int, int]] | None = None,
        endpoints: Sequence[tuple[Listener, int]] | None = None,
    ) -> int:
        """BrokerRegistration: write a RegisterBrokerRecord; returns the broker epoch.

        As in ClusterControlManager, the broker epoch is the offset the record is written at. A broker
        that registers over the wire starts fenced and is unfenced by its heartbeats.

        A new incarnation whose `previous_broker_epoch` (from its clean-shutdown files) is not the epoch
        the cluster holds for it shut down uncleanly: with eligible leader replicas on, it leaves every
        ISR and ELR in the same batch (ClusterControlManager.registerBroker, handleBrokerShutdown).
        """
        broker_id = self.node_id if broker_id is None else broker_id
        previous = self._image.broker(broker_id)
        new_incarnation = (
            previous is None or incarnation_id is None or previous.incarnation_id != incarnation_id
        )
        clean = previous_broker_epoch == self.cluster_control.registered_epoch(self._image, broker_id)
        result = self.cluster_control.register_broker(
            broker_id,
            listener,
            broker_epoch=self.raft_client.log_end_offset,
            incarnation_id=incarnation_id,
            rack=rack,
            log_dirs=log_dirs,
            fenced=fenced,
            image=self._image,
            now=time.monotonic(),
            session_timeout=int(self.config["broker.session.timeout.ms"]) / 1000,  # type: ignore[call-overload]
            features=features,
            endpoints=endpoints,
        )
        records: list[Record] = []
        if new_incarnation and not clean and self._image.elr_enabled:
            self.replication_control.handle_broker_unclean_shutdown(self._image, broker_id, records)
            log.info(
                "broker %d registers a new incarnation after an unclean shutdown (previous broker epoch %d, "
                "registered %d): %d partition change(s)",
                broker_id,
                previous_broker_epoch,
                self.cluster_control.registered_epoch(self._image, broker_id),
                len(records),
            )
            if previous is not None and not previous.fenced:
                records.append(self.cluster_control.fence_record(broker_id, previous.broker_epoch))
        elif previous is not None and not previous.fenced:
            # The last incarnation's session expired before the expiry task fenced it: fence it in
            # this batch, so the partitions it led get new leaders before the new one registers.
            self.replication_control.handle_broker_fenced(self._image, broker_id, records)
        if records:
            result = ControllerResult(records + list(result.records), result.response)
        broker_epoch = await self._run(result)
        # A new incarnation starts its session afresh, out of any controlled shutdown of the last one.
        self.cluster_control.touch(broker_id, True, -1, time.monotonic())
        return broker_epoch

    async def unregister_broker(self, broker_id: int) -> None:
        """UnregisterBroker (kafka-cluster.sh unregister): the broker leaves every ISR, partitions it led
        get new leaders, and the registration goes, in one batch."""
        registration = self._image.broker(broker_id)
        if registration is None:
            raise ApiException(
                ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not currently registered"
            )
        records: list[Record] = []
        self.replication_control.handle_broker_unregistered(
            self._image, broker_id, registration.broker_epoch, records
        )
        await self._run(ControllerResult(records, None))
        self.cluster_control.forget(broker_id)
        log.info("unregistered broker %d", broker_id)

    async def broker_heartbeat(self, heartbeat: BrokerHeartbeat) -> HeartbeatReply:
        """BrokerHeartbeat: renew the session and move the broker through Kafka's heartbeat states
        (unfence, fence, controlled shutdown), writing the ISR and leader changes that go with them."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        result = self.replication_control.process_broker_heartbeat(self._image, heartbeat, time.monotonic())
        if heartbeat.want_shut_down and result.response.should_shut_down and result.records:
            log.info("fencing broker %d: controlled shutdown", heartbeat.broker_id)

        def shutdown_offset(offset: int) -> None:
            if result.response.in_controlled_shutdown:
                self.cluster_control.maybe_update_controlled_shutdown_offset(heartbeat.broker_id, offset)

        return await self._run(result, on_batch_end=shutdown_offset)

    async def run_idle_writes(self, interval_ms: int) -> None:
        """While active: a NoOpRecord when nothing was written for metadata.max.idle.interval.ms.

        Kafka's controller does this so the quorum's high watermark keeps moving: observers and
        standbys can tell they are caught up, and a leader that lost its quorum finds out.
        """
        if interval_ms <= 0:
            return
        while True:
            await asyncio.sleep(interval_ms / 1000)
            if not self.is_active or time.monotonic() - self._last_write < interval_ms / 1000:
                continue
            try:
                self._write(ControllerResult([("NoOpRecord", 0, {})], None))
            except NotControllerError:
                continue

    async def run_session_expiry(self, session_timeout_ms: int) -> None:
        """While active: fence brokers whose last heartbeat is older than broker.session.timeout.ms.

        As Kafka, at the expiry itself (a dead broker's partitions move a session timeout after its last
        heartbeat, not up to a polling interval later), one broker per write, and every session starts
        afresh when this controller activates.
        """
        timeout = session_timeout_ms / 1000
        while True:
            if not self.is_active:
                await asyncio.sleep(min(timeout / 20, _INACTIVE_POLL_SECONDS))
                continue
            expiry = self.cluster_control.next_session_expiry(self._image, timeout)
            now = time.monotonic()
            if expiry is None or expiry > now:
                await asyncio.sleep(timeout if expiry is None else expiry - now + _EXPIRY_MARGIN_SECONDS)
                continue
            expired = self.cluster_control.expired_sessions(self._image, now, timeout)
            if not expired:  # exactly at the expiry: only a session older than the timeout is fenced
                await asyncio.sleep(_EXPIRY_MARGIN_SECONDS)
                continue
            broker_id = expired[0]
            log.info("fencing broker %d: no heartbeat for %d ms", broker_id, session_timeout_ms)
            records: list[Record] = []
            self.replication_control.handle_broker_fenced(self._image, broker_id, records)
            self.cluster_control.fence(broker_id)
            try:
                await self._run(ControllerResult(records, None))
            except NotControllerError:
                await asyncio.sleep(_EXPIRY_MARGIN_SECONDS)

    async def elect_leaders(self, request: Any) -> Any:
        """ElectLeaders (a kio ElectLeadersRequest, v0-2): the ElectLeadersResponse of the same
        version, sent once the elections are committed. An unknown election type raises
        ApiException(INVALID_REQUEST); a controller that is not active raises NotControllerError."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        return await self._run(self.replication_control.elect_leaders(self._image, request))

    async def alter_partition_reassignments(self, request: Any) -> Any:
        """AlterPartitionReassignments (a kio request, v0-1): the response of the same version, sent once
        the partitions' changes are committed (one batch). Raises NotControllerError when not active."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        if not request.topics:
            # As Kafka's QuorumController: nothing to do, answered at once with the defaults.
            return build(
                response_type(ALTER_PARTITION_REASSIGNMENTS, request.__version__),
                throttle_time=datetime.timedelta(0),
                allow_replication_factor_change=True,
                error_code=ErrorCode.none,
                error_message="",
                responses=(),
            )
        return await self._run(self.replication_control.alter_partition_reassignments(self._image, request))

    async def update_features(self, request: Any) -> ApiError:
        """UpdateFeatures (a kio request, v0-2): NONE once the new levels are committed, or the first
        failed update's error (nothing written); a validate-only request writes nothing either."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        version = request.__version__
        updates = [
            (
                update.feature,
                update.max_version_level,
                (UpgradeType.SAFE_DOWNGRADE if update.allow_downgrade else UpgradeType.UPGRADE)
                if version == 0
                else UpgradeType.from_code(update.upgrade_type),
            )
            for update in request.feature_updates
        ]
        result = self.feature_control.update_features(
            self._image,
            updates,
            node_id=self.node_id,
            static_min_insync_replicas=int(self.config["min.insync.replicas"]),  # type: ignore[call-overload]
        )
        return await self._run(result, version >= 1 and request.validate_only)

    async def list_partition_reassignments(self, request: Any) -> Any:
        """ListPartitionReassignments (a kio request, v0): the ongoing reassignments as committed (a read:
        it waits for this leader's pending writes, as Kafka's read events do)."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        response = self.replication_control.list_partition_reassignments(self._image, request)
        return await self._run(ControllerResult([], response))

    def election_tasks(self) -> list[asyncio.Task[None]]:
        """The periodic election passes this configuration asks for: preferred-leader rebalance
        (auto.leader.rebalance.enable) and unclean elections."""
        tasks = []
        if self.config["auto.leader.rebalance.enable"]:
            seconds = int(self.config["leader.imbalance.check.interval.seconds"])  # type: ignore[call-overload]
            tasks.append(asyncio.create_task(self.run_leader_rebalance(seconds * 1000)))
        unclean_ms = int(self.config["unclean.leader.election.interval.ms"])  # type: ignore[call-overload]
        tasks.append(asyncio.create_task(self.run_unclean_elections(unclean_ms)))
        return tasks

    async def run_leader_rebalance(self, interval_ms: int) -> None:
        """While active: preferred-leader elections for imbalanced partitions every
        leader.imbalance.check.interval.seconds (auto.leader.rebalance.enable); again at once when a
        pass hit its cap of elections."""
        await self._run_periodic_elections(
            interval_ms, self.replication_control.maybe_balance_partition_leaders
        )

    async def run_unclean_elections(self, interval_ms: int) -> None:
        """While active: unclean elections for leaderless partitions of topics that allow them,
        every unclean.leader.election.interval.ms."""
        await self._run_periodic_elections(interval_ms, self.replication_control.maybe_elect_unclean_leaders)

    async def _run_periodic_elections(
        self, interval_ms: int, elect: Callable[[ClusterMetadataImage], ControllerResult[bool]]
    ) -> None:
        more = False
        while True:
            await asyncio.sleep(0 if more else interval_ms / 1000)
            more = False
            if not self.is_active:
                continue
            result = elect(self._image)
            try:
                await self._run(result)
            except NotControllerError:
                continue
            more = result.response

    # --- partitions: ISR changes and elections ---------------------------------------------------------

    async def alter_partition(self, request: Any) -> Any:
        """AlterPartition (a kio AlterPartitionRequest, v2 or v3): the leader's ISR change, answered
        with the AlterPartitionResponse of the same version once the change is committed.

        Raises NotControllerError when this controller is not the active one.
        """
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        if not request.topics:  # as Kafka's QuorumController: nothing to do, no broker epoch checked
            response_cls = response_type(ALTER_PARTITION, request.__version__)
            return build(
                response_cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, topics=()
            )
        return await self._run(self.replication_control.alter_partition(self._image, request))

    async def assign_replicas_to_dirs(self, request: Any) -> Any:
        """AssignReplicasToDirs (KIP-858): a broker's replicas placed in its log dirs, answered once
        the directory changes are committed. Raises NotControllerError when not the active one."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        return await self._run(assign_replicas_to_dirs(self.replication_control, self._image, request))

    # --- topics -----------------------------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[CreateTopicResult]:
        """CreateTopics: one result per distinct name, in request order; successes are one batch."""
        results = await self._run(self.topic_control.create_topics(self._image, topics), validate_only)
        created = [r.name for r in results if not r.error.is_failure]
        if created:
            log.info("%s topic(s) %s", "validated" if validate_only else "created", ", ".join(created))
        return results

    async def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]:
        """DeleteTopics by name or id: one result per distinct reference; removals are one batch."""
        result = self.topic_control.delete_topics(self._image, topics)
        await self._run(result)
        if result.records:
            deleted = (str(r.name) for r in result.response if not r.error.is_failure)
            log.info("deleted topic(s) %s", ", ".join(deleted))
        return result.response

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> ApiError:
        """CreatePartitions for one topic: raise its partition count to `count`."""
        result = self.topic_control.create_partitions(self._image, topic, count, assignments)
        return await self._run(result, validate_only)

    # --- configs ----------------------------------------------------------------------------------

    async def alter_topic_configs(
        self, topic: str, ops: Sequence[ConfigOp], *, validate_only: bool = False
    ) -> ApiError:
        """IncrementalAlterConfigs on a topic: SET, DELETE, APPEND, SUBTRACT, all or nothing."""
        result = self.configuration_control.incremental_alter_topic_configs(self._image, topic, ops)
        return await self._run(result, validate_only)

    async def replace_topic_configs(
        self, topic: str, configs: Mapping[str, str | None], *, validate_only: bool = False
    ) -> ApiError:
        """Legacy AlterConfigs on a topic: `configs` becomes the whole set of overrides."""
        result = self.configuration_control.legacy_alter_topic_configs(self._image, topic, configs)
        return await self._run(result, validate_only)

    async def alter_broker_configs(
        self, name: str, ops: Sequence[ConfigOp], *, validate_only: bool = False
    ) -> ApiError:
        """IncrementalAlterConfigs on a BROKER resource (a node id, or "" for the cluster-wide defaults)."""
        result = self.configuration_control.incremental_alter_broker_configs(
            self._image, name, ops, self.config.quorum_voters
        )
        return await self._run(result, validate_only)

    async def replace_broker_configs(
        self, name: str, configs: Mapping[str, str | None], *, validate_only: bool = False
    ) -> ApiError:
        """Legacy AlterConfigs on a BROKER resource: `configs` becomes its whole set."""
        result = self.configuration_control.legacy_alter_broker_configs(
            self._image, name, configs, self.config.quorum_voters
        )
        return await self._run(result, validate_only)

    # --- SCRAM credentials -------------------------------------------------------------------------

    async def alter_user_scram_credentials(self, request: Any) -> list[UserResult]:
        """AlterUserScramCredentials (a kio request, v0): one result per user, once the credentials
        that passed Kafka's checks are committed (one batch)."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        result = self.scram_control.alter_credentials(
            self._image, list(request.deletions), list(request.upsertions)
        )
        return await self._run(result)

    # --- ACLs ------------------------------------------------------------------------------------

    async def create_acls(self, acls: list[StandardAcl]) -> list[ApiError]:
        """CreateAcls: one error (or NONE) per ACL, once the new ones are committed (one batch)."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        return await self._run(self.acl_control.create_acls(self._image, acls))

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[DeletionResult]:
        """DeleteAcls: per filter, the ACLs it removed, once their removal is committed."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        return await self._run(self.acl_control.delete_acls(self._image, filters))

    # --- client quotas -----------------------------------------------------------------------------

    async def alter_client_quotas(self, entries: list[Any], validate_only: bool) -> list[EntityResult]:
        """AlterClientQuotas: one result per entity, once the quotas that passed are committed."""
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        result = self.client_quota_control.alter_client_quotas(self._image, entries)
        return await self._run(result, validate_only)

    # --- producer ids -----------------------------------------------------------------------------

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        """AllocateProducerIds: hand out the next block of 1000 and record where the next one starts."""
        return await self._run(
            self.producer_id_control.generate_next_producer_id(self._image, broker_id, broker_epoch)
        )

    # --- auto topic creation ----------------------------------------------------------------------

    async def auto_create_topics(self, names: Sequence[str]) -> Mapping[str, ErrorCode]:
        """The `AutoCreateTopics` hook: create missing topics with the broker's defaults.

        Internal topics get the settings their coordinators ask for (AutoTopicCreationManager).
        A topic that turns out to exist already counts as created.
        """
        results = await self.create_topics([auto_topic(self.config, name) for name in names])
        return {
            r.name: ErrorCode.none if r.error.code is ErrorCode.topic_already_exists else r.error.code
            for r in results
        }

    # --- internals --------------------------------------------------------------------------------

    async def _run(
        self,
        result: ControllerResult[T],
        validate_only: bool = False,
        *,
        on_batch_end: Callable[[int], None] | None = None,
    ) -> T:
        """Write the result's records (none for a validate-only request), then answer once committed.

        `on_batch_end` is told the offset the operation's state is complete at (its batch's last
        offset, or the last one written before it), as Kafka's processBatchEndOffset.
        """
        if not self.is_active:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        if result.records and not validate_only:
            last_offset = self._write(result)
        else:
            # As Kafka's ControllerWriteEvent: an operation that writes nothing read the in-memory
            # image, which holds this leader's uncommitted writes; it answers once they are committed.
            last_offset = self._uncommitted[-1][0] if self._uncommitted else None
        if on_batch_end is not None:
            on_batch_end(last_offset if last_offset is not None else self.raft_client.log_end_offset - 1)
        if last_offset is not None:
            try:
                await self.raft_client.wait_committed(last_offset)
            except NotLeaderError:
                raise NotControllerError(
                    f"node {self.node_id} lost the controller leadership before the write was committed"
                ) from None
        return result.response

    def _write(self, result: ControllerResult[object]) -> int | None:
        """Append the records as one batch and fold them into the image; the batch's last offset."""
        if not result.records:
            return None
        values = [encode_metadata_record(name, version, data) for name, version, data in result.records]
        try:
            batch = self.raft_client.append(values, now_ms=int(time.time() * 1000))
            self._last_write = time.monotonic()
        except NotLeaderError:
            raise NotControllerError(f"node {self.node_id} is not the active controller") from None
        self._image = fold(self._image, batch.records)
        self._uncommitted.append((batch.last_offset, self._image))
        return batch.last_offset


def auto_topic(config: BrokerConfig, name: str) -> NewTopic:
    """The topic auto-creation makes: broker defaults, or the settings an internal topic's coordinator asks for."""
    if name == "__consumer_offsets":
        return NewTopic(
            name,
            int(config["offsets.topic.num.partitions"]),  # type: ignore[call-overload]
            int(config["offsets.topic.replication.factor"]),  # type: ignore[call-overload]
            configs={
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(config["offsets.topic.segment.bytes"]),
            },
        )
    if name == "__transaction_state":
        return NewTopic(
            name,
            int(config["transaction.state.log.num.partitions"]),  # type: ignore[call-overload]
            int(config["transaction.state.log.replication.factor"]),  # type: ignore[call-overload]
            configs={
                "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
                "cleanup.policy": "compact",
                "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
                "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
            },
        )
    return NewTopic(
        name,
        int(config["num.partitions"]),  # type: ignore[call-overload]
        int(config["default.replication.factor"]),  # type: ignore[call-overload]
    )
