"""One node's parts besides the network: the controller (a quorum of one), the metadata loader, the log
manager, the replica manager that hosts the partitions on those logs, and the group and transaction
coordinators.

Metadata drives storage, as in Kafka's KRaft broker: the node is the first publisher of every
committed image the MetadataLoader publishes, and applies its topic changes (partitions created,
topics deleted, configs changed) to the logs and the replica manager. At start-up the same
reconciliation brings the log dirs in line with the replayed metadata log, so one code path serves
first start, restart and every admin operation.

A reassignment reaches storage the same way: a broker a partition's replicas now name creates its
(empty) log and follows the leader; one they no longer name deletes its log as Kafka deletes a stray
replica (renamed `-delete`, removed after log.segment.delete.delay.ms).

Publishing order (fixed here, and `BrokerState` last, installed by the server once registered):
1. the dynamic configs: broker configs over the static properties, replication throttles;
2. this node: create/delete logs, apply the image to the replica manager;
3. the group coordinator, 4. the transaction coordinator: load or drop their partitions, whose
   logs step 2 has just created.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.dynamic_config_publisher import DynamicConfigPublisher
from kcli.broker.dynamic_keystore import reconfigure_clients
from kcli.broker.group.coordinator import GroupCoordinator
from kcli.broker.lifecycle import (
    BrokerLifecycleManager,
    ControllerChannel,
    allocate_producer_ids,
)
from kcli.broker.log.config import LogConfig
from kcli.broker.log.log import wall_clock_ms
from kcli.broker.log.manager import LogManager, NewLog
from kcli.broker.metadata.controller import QuorumController
from kcli.broker.metadata.controller.partition_change_builder import MV_3_7_IV2
from kcli.broker.metadata.controller.quorum_controller import auto_topic
from kcli.broker.metadata.image import ClusterMetadataImage, MetadataReplayError, TopicChanges
from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.producer_ids import ProducerIdManager
from kcli.broker.raft import KafkaRaftClient, MetadataLogError, open_raft_client
from kcli.broker.replication.alter_log_dirs import ReplicaAlterLogDirsManager
from kcli.broker.replication.assignments_manager import AssignmentsManager
from kcli.broker.replication.fetch_session import FetchManager, FetchSessionCache
from kcli.broker.replication.fetcher import FetcherConfig
from kcli.broker.replication.manager import ReplicaManager
from kcli.broker.replication.partition import monotonic_ms
from kcli.broker.replication.replica_selector import replica_selector
from kcli.broker.txn.coordinator import TransactionCoordinator
from kcli.broker.txn.verification import AddPartitionsToTxnManager
from kcli.config import INTERNAL_TOPICS, BrokerConfig, Listener
from kcli.errors import KcliError
from kcli.protocol.messages import nested_type, request_type
from kcli.security import ReconfigurableSecurity
from kcli.storage import read_bootstrap_metadata

CREATE_TOPICS = 19

log = logging.getLogger("kcli.broker")

PERIODIC_TICK_SECONDS = 0.5
"""How often retention, flush.ms, deferred deletes and checkpoints are considered (each keeps its own interval)."""
SHUTDOWN_STEP_SECONDS = 5.0
INLINE_CREATE_LIMIT = 16
"""An image that creates at most this many partitions here has them made on the event loop, at once
(a few ms each); more are made on the log manager's creator thread (see `on_metadata_update`). The
internal topics' partitions (50 at most by default) do not count: the coordinators find their logs made
as soon as they see them, as before."""
_NO_CHANGES = TopicChanges((), (), ())
CONTROLLED_SHUTDOWN_SECONDS = 5.0
"""How long the controller may take to approve the controlled shutdown before the node stops anyway
(BrokerServer.shutdown logs "Timed out waiting for the controller to approve controlled shutdown")."""


class Node:
    name = "Node (logs and replica manager)"  # as the MetadataLoader's first publisher

    def __init__(self, config: BrokerConfig, cluster_id: str) -> None:
        """Open the metadata log and make every part; nothing runs until `start`."""
        self.config = config
        raft, self.controller, loader = metadata_parts(config, cluster_id, config.inter_broker_listener_name)
        self.raft, self.loader = raft, loader
        timeout = int(config["request.timeout.ms"]) / 1000  # type: ignore[call-overload]
        inter_broker = ReconfigurableSecurity(config.inter_broker_listener_name, config.inter_broker_security)
        to_controller = ReconfigurableSecurity(config.controller_listener_name, config.controller_security)
        self.client_security = (inter_broker, to_controller)
        """What the broker's own clients dial with, reconfigured when its keystore is renewed."""
        self.channel = ControllerChannel(raft, self.controller, timeout=timeout, security=to_controller)
        self.lifecycle = BrokerLifecycleManager(config, self.channel, loader)
        self.logs = LogManager(config)
        self.replicas = ReplicaManager(
            config.node_id,
            self.logs,
            replica_lag_time_max_ms=int(config["replica.lag.time.max.ms"]),  # type: ignore[call-overload]
            fetcher_config=FetcherConfig(
                max_wait_ms=int(config["replica.fetch.wait.max.ms"]),  # type: ignore[call-overload]
                min_bytes=int(config["replica.fetch.min.bytes"]),  # type: ignore[call-overload]
                max_bytes=int(config["replica.fetch.response.max.bytes"]),  # type: ignore[call-overload]
                partition_max_bytes=int(config["replica.fetch.max.bytes"]),  # type: ignore[call-overload]
                backoff_ms=int(config["replica.fetch.backoff.ms"]),  # type: ignore[call-overload]
                request_timeout_ms=int(config["replica.socket.timeout.ms"]),  # type: ignore[call-overload]
                security=inter_broker,
            ),
            replica_selector=replica_selector(config["replica.selector.class"]),  # type: ignore[arg-type]
            quota_samples=int(config["replication.quota.window.num"]),  # type: ignore[call-overload]
            quota_window_seconds=int(config["replication.quota.window.size.seconds"]),  # type: ignore[call-overload]
        )
        self.fetch_manager = FetchManager(
            FetchSessionCache(
                int(config["max.incremental.fetch.session.cache.slots"]),  # type: ignore[call-overload]
                purgatory=self.replicas.purgatory,
            ),
            monotonic_ms,
        )
        self.dynamic_configs = DynamicConfigPublisher(config, self.logs, self.replicas)
        self.dynamic_configs.on_keystore_change(partial(reconfigure_clients, config, self.client_security))
        self.assignments = AssignmentsManager(
            config.node_id,
            self._send_assign_replicas_to_dirs,
            lambda: self.loader.image,
            lambda: self.broker_epoch,
        )
        self.alter_log_dirs = ReplicaAlterLogDirsManager(self.replicas, self.logs, config)
        self.producer_ids = ProducerIdManager(
            lambda: allocate_producer_ids(self.channel, config.node_id, self.lifecycle.broker_epoch)
        )
        self.groups = GroupCoordinator(config, self.replicas, loader)
        self.transaction_coordinator = TransactionCoordinator(
            config,
            self.replicas,
            loader,
            self.producer_ids,
            on_offsets_marker=self.groups.on_transaction_completed,
            inter_broker_security=inter_broker,
        )
        self.add_partitions_to_txn = AddPartitionsToTxnManager(
            config, loader, self.transaction_coordinator, inter_broker
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._storage_steps: deque[tuple[TopicChanges, ClusterMetadataImage]] = deque()
        """Images whose storage step waits for an earlier one that creates many partitions, in order."""
        self._storage_task: asyncio.Task[None] | None = None
        self._stopping = False

    @classmethod
    async def open(cls, config: BrokerConfig, cluster_id: str) -> Node:
        """A started node (tests and tools that need no network)."""
        node = cls(config, cluster_id)
        await node.start()
        return node

    async def start(self) -> None:
        """Join the metadata quorum, catch up with it, then recover every partition log and reconcile.

        As Kafka's BrokerServer, the logs are loaded only once this node has the committed metadata:
        which topics exist, and their configs, come from the quorum, not from what the disk holds.
        """
        await join_quorum(self.raft, self.config)
        image = self.loader.image
        self.dynamic_configs.initialize(image)  # the logs load with the dynamic broker defaults
        self.logs.startup({name: self._log_config(self.config, image, name) for name in image.topic_ids})
        # Read before start-up removed the clean-shutdown files: the registration offers it back.
        self.lifecycle.previous_broker_epoch = self.logs.previous_broker_epoch
        self.loader.install_publisher(self.dynamic_configs)
        self.loader.install_publisher(self)  # the coordinators load from the logs it creates
        self.loader.install_publisher(self.groups)
        self.loader.install_publisher(self.transaction_coordinator)
        self._reconcile(image)
        if self.controller is not None:
            self._tasks.extend(controller_tasks(self.config, self.controller))

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    async def auto_create_topics(self, names: Sequence[str]) -> Mapping[str, ErrorCode]:
        """Kafka's AutoTopicCreationManager: CreateTopics on the active controller, wherever it is."""
        controller = self.channel.local
        if controller is not None:
            return await controller.auto_create_topics(names)
        cls = request_type(CREATE_TOPICS, 7)
        topic_cls, config_cls = nested_type(cls, "CreatableTopic"), nested_type(cls, "CreatableTopicConfig")
        topics = []
        for name in names:
            topic = auto_topic(self.config, name)
            configs = tuple(config_cls(name=k, value=v) for k, v in (topic.configs or {}).items())
            topics.append(
                topic_cls(
                    name=name,
                    num_partitions=topic.num_partitions,
                    replication_factor=topic.replication_factor,
                    assignments=(),
                    configs=configs,
                )
            )
        request = cls(
            topics=tuple(topics), timeout=timedelta(seconds=self.channel.timeout), validate_only=False
        )
        response = await self.channel.forward(request)
        answered = {
            t.name: ErrorCode.none if t.error_code is ErrorCode.topic_already_exists else t.error_code
            for t in response.topics
        }
        return {name: answered.get(name, ErrorCode.request_timed_out) for name in names}

    async def _send_alter_partition(self, request: Any) -> Any:
        return await self.channel.call(lambda controller: controller.alter_partition(request), request)

    async def _send_assign_replicas_to_dirs(self, request: Any) -> Any:
        return await self.channel.call(
            lambda controller: controller.assign_replicas_to_dirs(request), request
        )

    @property
    def image(self) -> ClusterMetadataImage:
        """The last committed image the loader published."""
        return self.loader.image

    async def register(self, advertised: Sequence[Listener], rack: str | None) -> None:
        """Register this incarnation with the active controller and wait until it unfences this broker;
        then replicate: follow the leaders of the partitions this broker follows, send ISR changes."""
        await self.lifecycle.start(advertised, rack)
        self.replicas.start_replication(self._send_alter_partition, lambda: self.lifecycle.broker_epoch)
        self.alter_log_dirs.assignments = self.assignments
        self.alter_log_dirs.maybe_add_log_dir_fetchers()
        image = self.loader.image
        self._maybe_update_topic_assignments(image, [(p.topic, p.index) for p in self.replicas.partitions()])
        self._tasks.append(asyncio.create_task(self.replicas.run_isr_expiration()))
        self.groups.startup()  # loads __consumer_offsets on the running loop before requests are served
        self.transaction_coordinator.startup()  # loads __transaction_state the same way

    async def run_periodic(self) -> None:
        """Retention, flushes, deferred deletes and checkpoints, until cancelled."""
        while True:
            await asyncio.sleep(PERIODIC_TICK_SECONDS)
            try:
                self.logs.run_periodic(wall_clock_ms())
            except OSError as e:  # a full disk must not kill the loop; Kafka marks the dir offline
                log.error("periodic log maintenance failed: %s", e)

    async def controlled_shutdown(self) -> None:
        """Move this broker's leaderships away while it still serves clients (BrokerServer.shutdown's
        first step): producers and consumers are told NOT_LEADER_OR_FOLLOWER and follow the new
        leaders instead of finding a closed socket and a partition still led here."""
        await self.lifecycle.controlled_shutdown(timeout=CONTROLLED_SHUTDOWN_SECONDS)

    async def shutdown(self, *, controlled: bool = True) -> None:
        """Controlled shutdown (unless done already, or not `controlled`: after a fatal fault there is
        no quorum to ask), leave the quorum, close the metadata log, then flush and close every log."""
        if controlled:
            await self.controlled_shutdown()
        else:
            await self.lifecycle.stop()
        self._stopping = True  # the storage steps stop after the partitions being made now
        if self._storage_task is not None:
            await bounded("partition creation", self._storage_task)
        for task in self._tasks:
            task.cancel()
        await bounded("the node's tasks", asyncio.gather(*self._tasks, return_exceptions=True))
        await bounded("the log dir movers", self.alter_log_dirs.shutdown())
        await bounded("the replica fetchers", self.replicas.shutdown())
        await bounded("the directory assignments", self.assignments.shutdown())
        await bounded("the transaction coordinator", self.transaction_coordinator.shutdown())
        await bounded("transaction verification", self.add_partitions_to_txn.close())
        self.groups.shutdown()
        await bounded("the controller channel", self.channel.close())
        await bounded("the Raft client", self.raft.shutdown())
        self.raft.log.close()
        self.logs.shutdown(self.broker_epoch)

    # --- metadata -> storage ------------------------------------------------------------------------

    def on_metadata_update(
        self, changes: TopicChanges, old: ClusterMetadataImage, new: ClusterMetadataImage
    ) -> None:
        """The MetadataPublisher step: create and delete logs, reconfigure them, update the replica manager.

        An image that creates more than INLINE_CREATE_LIMIT partitions of user topics here (one
        CreateTopics may bring 10,000, a few ms of file work each) has its storage step run by a task
        that makes the files on the log manager's creator thread, so the event loop keeps serving; the steps of later images
        queue behind it and run in order. Until its log is made a partition is not hosted here, so
        requests to it are answered NOT_LEADER_OR_FOLLOWER, as while a leader is moving."""
        user_logs = sum(1 for each in self._new_logs(changes, new) if each.topic not in INTERNAL_TOPICS)
        if not self._storage_steps and user_logs <= INLINE_CREATE_LIMIT:
            self._apply_storage_step(changes, new)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to give the work to: done here, as before
            self._apply_storage_step(changes, new)
            return
        self._storage_steps.append((changes, new))
        if self._storage_task is None or self._storage_task.done():
            self._storage_task = loop.create_task(self._run_storage_steps())

    async def _run_storage_steps(self) -> None:
        """The queued storage steps in image order, each image's new logs made off the event loop; the
        coordinators are then told again, as they load from logs that did not exist when they saw it."""
        while self._storage_steps and not self._stopping:
            changes, new = self._storage_steps[0]
            try:
                self._delete_logs(changes)
                await self.logs.create_logs(
                    self._new_logs(changes, new), on_batch=lambda new=new: self.replicas.apply_image(new)
                )
                self._apply_storage_step(changes, new, inline=False)
            except Exception:  # logged: the steps of the images after it must still run
                log.exception("cannot apply the metadata image at offset %d to storage", new.offset)
            finally:
                self._storage_steps.popleft()
            image = self.loader.image
            for publisher in (self.groups, self.transaction_coordinator):
                publisher.on_metadata_update(_NO_CHANGES, image, image)

    def _new_logs(self, changes: TopicChanges, new: ClusterMetadataImage) -> list[NewLog]:
        """The logs of the image's new partitions that have a replica here."""
        configs: dict[str, LogConfig] = {}  # one per topic, not one per partition
        wanted = []
        for topic, partition, topic_id in changes.created:
            if not self._is_replica(new, topic, partition):
                continue
            if topic not in configs:
                configs[topic] = self._log_config(self.config, new, topic)
            wanted.append(
                NewLog(topic, partition, topic_id, configs[topic], self._directory(new, topic, partition))
            )
        return wanted

    def _delete_logs(self, changes: TopicChanges) -> None:
        """Delete the logs of the image's deleted topics (before any log of the image is created: a topic
        deleted and created again under the same name)."""
        for topic, _topic_id, partitions in changes.deleted:
            for partition in partitions:
                self.alter_log_dirs.stop_partition(topic, partition)
            self.logs.delete_logs((topic, partition) for partition in partitions)
            log.info("deleted topic %s (%d partitions)", topic, len(partitions))

    def _apply_storage_step(
        self, changes: TopicChanges, new: ClusterMetadataImage, *, inline: bool = True
    ) -> None:
        """One image's storage step on the event loop; not `inline`, its deleted topics' logs are gone and
        its new logs made already (`_run_storage_steps`)."""
        configs: dict[str, LogConfig] = {}  # one per topic, not one per partition
        if inline:
            self._delete_logs(changes)
            for topic, partition, topic_id, config, directory in self._new_logs(changes, new):
                configs[topic] = config
                self.logs.create_log(topic, partition, topic_id, config, target_directory_id=directory)
        for topic, partition, topic_id in changes.reassigned:
            hosted = self.logs.get_log(topic, partition) is not None
            if self._is_replica(new, topic, partition):
                if not hosted:
                    # A replica added by a reassignment: an empty log, filled by its fetcher from the
                    # leader (from the leader's log start when that is above 0).
                    if topic not in configs:
                        configs[topic] = self._log_config(self.config, new, topic)
                    self.logs.create_log(
                        topic,
                        partition,
                        topic_id,
                        configs[topic],
                        target_directory_id=self._directory(new, topic, partition),
                    )
                    log.info("created %s-%d: a replica added by a reassignment", topic, partition)
            elif hosted:
                # A replica the reassignment removed (completed or cancelled): Kafka's stray replica,
                # renamed to <topic>-<partition>.<uuid>-delete and removed after the delete delay.
                self.alter_log_dirs.stop_partition(topic, partition)
                self.logs.delete_log(topic, partition)
                log.info("deleted %s-%d: a reassignment removed this broker's replica", topic, partition)
        self.replicas.apply_image(new)
        if self.alter_log_dirs.assignments is not None:
            self._maybe_update_topic_assignments(
                new, [(t, p) for t, p, _ in (*changes.created, *changes.reassigned)]
            )
            self.alter_log_dirs.maybe_add_log_dir_fetchers()
        for topic in changes.reconfigured:
            config = self._log_config(self.config, new, topic)
            for partition in new.partitions_of(topic) or {}:
                for existing in (
                    self.logs.get_log(topic, partition),
                    self.logs.get_log(topic, partition, future=True),
                ):
                    if existing is not None:
                        existing.update_config(config)

    def _reconcile(self, image: ClusterMetadataImage) -> None:
        """Create the logs the metadata names and the disk lacks; delete logs of topics no longer named.

        A future log (a move between log dirs cut by a restart) whose dir the metadata already names is
        swapped in first; one of a partition no longer here is deleted; the others are moved on once
        the broker is registered."""
        self.alter_log_dirs.recover_abandoned_future_logs(image, self.config.node_id)
        for future in list(self.logs.future_logs()):
            if self.logs.get_log(future.topic, future.partition) is None or not self._is_replica(
                image, future.topic, future.partition
            ):
                log.info("removing %s: the future log of a replica not hosted here", future.dir.name)
                self.logs.delete_future_log(future.topic, future.partition)
        for existing in list(self.logs.logs()):
            why = self._stray_reason(image, existing.topic, existing.partition, existing.topic_id)
            if why is not None:
                # Kafka 3.7+ (LogManager.isStrayKraftReplica): set aside as -stray, never deleted here.
                where = existing.dir
                target = self.logs.mark_stray(existing.topic, existing.partition)
                log.warning("Log in %s marked stray and renamed to %s: %s", where, target, why)
        for name, topic_id in image.topic_ids.items():
            config = self._log_config(self.config, image, name)
            for partition in image.partitions_of(name) or {}:
                if self._is_replica(image, name, partition) and self.logs.get_log(name, partition) is None:
                    self.logs.create_log(
                        name,
                        partition,
                        topic_id,
                        config,
                        target_directory_id=self._directory(image, name, partition),
                    )
        self.replicas.apply_image(image)

    def _stray_reason(
        self, image: ClusterMetadataImage, topic: str, partition: int, topic_id: uuid.UUID | None
    ) -> str | None:
        """Why a log found at start-up is not this broker's (LogManager.isStrayKraftReplica), or None."""
        known = image.topic_ids.get(topic)
        if known is None:
            return f"topic {topic} is not in the metadata log"
        if topic_id is not None and topic_id != known:
            return f"its topic id {topic_id} is not the metadata's {known} for {topic}"
        if partition not in (image.partitions_of(topic) or {}):
            return f"partition {partition} of {topic} is not in the metadata log"
        if not self._is_replica(image, topic, partition):
            return "the metadata places this partition on other brokers"
        return None

    def _directory(self, image: ClusterMetadataImage, topic: str, partition: int) -> uuid.UUID | None:
        """The log dir the metadata assigns this node's replica of the partition (KIP-858), if any."""
        registration = image.partition(topic, partition)
        if registration is None or self.config.node_id not in registration.replicas:
            return None
        position = registration.replicas.index(self.config.node_id)
        return registration.directories[position] if position < len(registration.directories) else None

    def _maybe_update_topic_assignments(
        self, image: ClusterMetadataImage, partitions: Sequence[tuple[str, int]]
    ) -> None:
        """ReplicaManager.maybeUpdateTopicAssignment: where the metadata's dir for a replica here is not
        the dir its log is in (UNASSIGNED for a new replica on a broker of several dirs), tell the
        controller the actual one. A replica that is moving is left to its mover."""
        if (image.metadata_version or 0) < MV_3_7_IV2:
            return
        for topic, partition in partitions:
            current = self.logs.get_log(topic, partition)
            topic_id = image.topic_id(topic)
            if current is None or topic_id is None or self.logs.get_log(topic, partition, future=True):
                continue
            actual = self.logs.directory_id(current.dir.parent)
            if actual is not None and actual != self._directory(image, topic, partition):
                self.assignments.submit(topic_id, partition, actual, "Applying metadata delta")

    def _is_replica(self, image: ClusterMetadataImage, topic: str, partition: int) -> bool:
        registration = image.partition(topic, partition)
        return registration is not None and self.config.node_id in registration.replicas

    @staticmethod
    def _log_config(config: BrokerConfig, image: ClusterMetadataImage, topic: str) -> LogConfig:
        return LogConfig.from_broker(config, image.topic_config(topic))


async def bounded(what: str, step: Awaitable[object]) -> None:
    """One shutdown step, given SHUTDOWN_STEP_SECONDS: a step that hangs (a peer that never answers) is
    named in the log and left behind, so the logs are still flushed and closed and the process exits."""
    try:
        await asyncio.wait_for(step, SHUTDOWN_STEP_SECONDS)
    except TimeoutError:
        log.warning("shutdown: %s did not finish within %g s; going on", what, SHUTDOWN_STEP_SECONDS)


def metadata_parts(
    config: BrokerConfig, cluster_id: str, listener_name: str
) -> tuple[KafkaRaftClient, QuorumController | None, MetadataLoader]:
    """What every node has (Kafka's SharedServer): the Raft client, the controller of a voter, the loader.

    The controller is the Raft client's first listener, so it activates before the loader publishes
    what it wrote.
    """
    raft = open_raft_client(config, cluster_id)
    empty = ClusterMetadataImage.empty(cluster_id, config.node_id, listener_name)
    controller = None
    if raft.quorum.is_voter or (raft.dynamic and config.is_controller):  # KIP-853: a voter to be
        bootstrap = read_bootstrap_metadata(config.metadata_log_dir)
        records = bootstrap.record_tuples() if bootstrap else None
        controller = QuorumController(config, raft, empty, bootstrap_records=records)
    loader = MetadataLoader(
        empty,
        raft=raft,
        max_bytes_between_snapshots=int(config["metadata.log.max.record.bytes.between.snapshots"]),  # type: ignore[call-overload]
        max_snapshot_interval_ms=int(config["metadata.log.max.snapshot.interval.ms"]),  # type: ignore[call-overload]
    )
    raft.register(loader)
    return raft, controller, loader


def warn_scram_between_new_voters(config: BrokerConfig, metadata_end: int) -> None:
    """A new quorum whose voters log in to each other with SCRAM cannot elect a leader: the credentials
    are in the metadata log only once a leader has written the bootstrap records. Apache Kafka 4.1.2's
    voters fail authentication against each other until they are stopped (measured 2026-12-02), and so
    do kcli's; the operator gets one sentence instead of a log of failed logins."""
    listener = config.controller_listener
    mechanism = str(config["sasl.mechanism.controller.protocol"]).upper()
    if not config.is_controller or listener is None or metadata_end > 0 or not mechanism.startswith("SCRAM-"):
        return
    if len(config.quorum_voters) < 2:  # a voter of one elects itself; a dynamic quorum grows from one
        return
    if config.protocol_of(listener.name) not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return
    log.warning(
        "sasl.mechanism.controller.protocol is %s on a new metadata log: the voters cannot authenticate "
        "each other until a leader has written the SCRAM credentials, which it cannot be elected to do; "
        "use PLAIN (or OAUTHBEARER) on the controller listener, as Kafka's own KRaft tests do",
        mechanism,
    )


async def join_quorum(raft: KafkaRaftClient, config: BrokerConfig) -> None:
    """Start the Raft client and wait until this node has what the quorum had committed; on failure
    stop it, close the log and leave no trace of a first start (a metadata log with no record)."""
    warn_scram_between_new_voters(config, raft.log.next_offset)
    try:
        await raft.start()
        await raft.wait_caught_up()
    except BaseException as exc:
        await raft.shutdown()
        raft.log.close()
        raft.discard_if_untouched()
        if isinstance(exc, MetadataReplayError):
            raise fatal_error_sentence(raft, exc) from None
        raise


def fatal_error_sentence(raft: KafkaRaftClient, exc: BaseException) -> KcliError:
    """The one sentence for what stopped the Raft client: its own (a KcliError says it already), or
    the batch of the metadata log that could not be applied."""
    if isinstance(exc, KcliError):
        return exc
    reason = str(exc).rstrip(".") or type(exc).__name__
    if isinstance(exc, MetadataReplayError):
        return MetadataLogError(f"cannot replay the metadata log in {raft.log.directory}: {reason}.")
    return MetadataLogError(f"cannot apply the metadata log in {raft.log.directory}: {reason}.")


def controller_tasks(config: BrokerConfig, controller: QuorumController) -> list[asyncio.Task[None]]:
    """What an active controller does on its own: fence expired broker sessions, write NoOps when idle."""
    session_ms = int(config["broker.session.timeout.ms"])  # type: ignore[call-overload]
    idle_ms = int(config["metadata.max.idle.interval.ms"])  # type: ignore[call-overload]
    return [
        asyncio.create_task(controller.run_session_expiry(session_ms)),
        asyncio.create_task(controller.run_idle_writes(idle_ms)),
        *controller.election_tasks(),
    ]


class ControllerNode:
    """A controller-only process (process.roles=controller): a voter and its controller, no partitions.

    Kafka's ControllerServer: it serves the controller listener only; brokers register with it and
    forward admin requests to it when it is the active controller.
    """

    def __init__(self, config: BrokerConfig, cluster_id: str) -> None:
        self.config = config
        listener_name = str(config["inter.broker.listener.name"] or "PLAINTEXT")
        self.raft, controller, self.loader = metadata_parts(config, cluster_id, listener_name)
        if controller is None:
            raise KcliError(
                f"node.id {config.node_id} is a controller but not one of controller.quorum.voters."
            )
        self.controller: QuorumController = controller
        self.dynamic_configs = DynamicConfigPublisher(config)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def image(self) -> ClusterMetadataImage:
        return self.loader.image

    async def start(self) -> None:
        await join_quorum(self.raft, self.config)
        self.dynamic_configs.initialize(self.loader.image)
        self.loader.install_publisher(self.dynamic_configs)
        self._tasks.extend(controller_tasks(self.config, self.controller))

    async def shutdown(self, *, controlled: bool = True) -> None:
        for task in self._tasks:
            task.cancel()
        await bounded("the controller's tasks", asyncio.gather(*self._tasks, return_exceptions=True))
        await bounded("the Raft client", self.raft.shutdown())
        self.raft.log.close()
