"""The QuorumController of a quorum of one: run an admin operation, then commit its records.

Each operation follows Kafka's QuorumController: the control manager that owns the concept checks
the request against the current image (with Kafka's rules, error codes and messages) and returns a
`ControllerResult`, its records and its answer; the controller appends the records to the metadata
log as ONE batch (so an operation is all or nothing, even across `kill -9`) and folds them into its
own image at once, as Kafka's controller replays its writes, so the next operation sees them. The
Raft client then commits the batch (moves the high watermark past it) and hands it to its
listeners: the broker's MetadataLoader folds it into the committed image and publishes that.
Validate-only requests stop before the append.

This node is the only voter, so it is always the active controller and a batch is committed as soon
as it is on disk: the request path stays synchronous, and every operation returns after its records
are committed and published, as Kafka answers only then.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TypeVar

from kio.schema.errors import ErrorCode

from formats.internal import encode_metadata_record
from kcli.broker.metadata.controller.cluster_control_manager import ClusterControlManager
from kcli.broker.metadata.controller.configuration_control_manager import (
    ConfigOp,
    ConfigurationControlManager,
)
from kcli.broker.metadata.controller.controller_result import ApiError, ControllerResult, Record
from kcli.broker.metadata.controller.feature_control_manager import FeatureControlManager
from kcli.broker.metadata.controller.producer_id_control_manager import ProducerIdControlManager
from kcli.broker.metadata.controller.replication_control_manager import (
    CreateTopicResult,
    DeleteTopicResult,
    NewTopic,
    ReplicationControlManager,
)
from kcli.broker.metadata.image import (
    MV_3_9_IV0,
    ClusterMetadataImage,
    MetadataDelta,
    MetadataReplayError,
    ProducerIdsBlock,
    fold,
)
from kcli.broker.metadata.metadata_log import MetadataLog, MetadataLogError, metadata_log_dir
from kcli.broker.metadata.raft_client import RaftClient
from kcli.config import BrokerConfig, Listener

log = logging.getLogger("kcli.broker.metadata")

T = TypeVar("T")


class QuorumController:
    """The active controller; `image` holds every batch it appended (all committed, with one voter)."""

    def __init__(self, config: BrokerConfig, raft_client: RaftClient, image: ClusterMetadataImage) -> None:
        self.config = config
        self.node_id = config.node_id
        self.raft_client = raft_client
        self._image = image
        self.cluster_control = ClusterControlManager()
        self.configuration_control = ConfigurationControlManager(config)
        self.replication_control = ReplicationControlManager(
            config, self.cluster_control, self.configuration_control
        )
        self.producer_id_control = ProducerIdControlManager(self.cluster_control)
        self.feature_control = FeatureControlManager()

    @classmethod
    def open(
        cls, config: BrokerConfig, *, cluster_id: str, listener_name: str | None = None
    ) -> QuorumController:
        """Open (recover) the metadata log, replay it into an image, and bootstrap an empty log."""
        metadata_log = MetadataLog.open(
            metadata_log_dir(config),
            segment_bytes=int(config["metadata.log.segment.bytes"]),  # type: ignore[call-overload]
            segment_ms=int(config["metadata.log.segment.ms"]),  # type: ignore[call-overload]
        )
        image = ClusterMetadataImage.empty(cluster_id, config.node_id, listener_name or config.listener.name)
        try:
            image = MetadataDelta(image).replay_all(metadata_log.records()).apply()
        except MetadataReplayError as exc:
            metadata_log.close()
            raise MetadataLogError(
                f"cannot replay the metadata log in {metadata_log.directory}: {str(exc).rstrip('.')}."
            ) from None
        raft_client = RaftClient(metadata_log, config.node_id)
        raft_client.become_leader()
        controller = cls(config, raft_client, image)
        controller.bootstrap()
        return controller

    @property
    def image(self) -> ClusterMetadataImage:
        return self._image

    @property
    def metadata_log(self) -> MetadataLog:
        return self.raft_client.metadata_log

    def close(self) -> None:
        self.metadata_log.close()

    # --- start-up and brokers -----------------------------------------------------------------------

    def bootstrap(self) -> None:
        """A log with no metadata.version gets the bootstrap FeatureLevelRecord (3.9-IV0, level 21)."""
        if self._run(self.feature_control.bootstrap(self._image)):
            log.info("bootstrapped the metadata log with metadata.version %d (3.9-IV0)", MV_3_9_IV0)

    def register_broker(
        self,
        listener: Listener,
        *,
        incarnation_id: uuid.UUID | None = None,
        rack: str | None = None,
        log_dirs: Sequence[uuid.UUID] = (),
        broker_id: int | None = None,
    ) -> int:
        """Write this process's RegisterBrokerRecord (unfenced); returns its broker epoch.

        As in ClusterControlManager, the broker epoch is the offset the record is written at.
        """
        result = self.cluster_control.register_broker(
            self.node_id if broker_id is None else broker_id,
            listener,
            broker_epoch=self.raft_client.log_end_offset,
            incarnation_id=incarnation_id,
            rack=rack,
            log_dirs=log_dirs,
        )
        return self._run(result)

    # --- topics -----------------------------------------------------------------------------------

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[CreateTopicResult]:
        """CreateTopics: one result per distinct name, in request order; successes are one batch."""
        results = self._run(self.replication_control.create_topics(self._image, topics), validate_only)
        created = [r.name for r in results if not r.error.is_failure]
        if created:
            log.info("%s topic(s) %s", "validated" if validate_only else "created", ", ".join(created))
        return results

    def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]:
        """DeleteTopics by name or id: one result per distinct reference; removals are one batch."""
        result = self.replication_control.delete_topics(self._image, topics)
        self._run(result)
        if result.records:
            deleted = (str(r.name) for r in result.response if not r.error.is_failure)
            log.info("deleted topic(s) %s", ", ".join(deleted))
        return result.response

    def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> ApiError:
        """CreatePartitions for one topic: raise its partition count to `count`."""
        result = self.replication_control.create_partitions(self._image, topic, count, assignments)
        return self._run(result, validate_only)

    # --- configs ----------------------------------------------------------------------------------

    def alter_topic_configs(
        self, topic: str, ops: Sequence[ConfigOp], *, validate_only: bool = False
    ) -> ApiError:
        """IncrementalAlterConfigs on a topic: SET, DELETE, APPEND, SUBTRACT, all or nothing."""
        result = self.configuration_control.incremental_alter_topic_configs(self._image, topic, ops)
        return self._run(result, validate_only)

    def replace_topic_configs(
        self, topic: str, configs: Mapping[str, str | None], *, validate_only: bool = False
    ) -> ApiError:
        """Legacy AlterConfigs on a topic: `configs` becomes the whole set of overrides."""
        result = self.configuration_control.legacy_alter_topic_configs(self._image, topic, configs)
        return self._run(result, validate_only)

    # --- producer ids -----------------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        """AllocateProducerIds: hand out the next block of 1000 and record where the next one starts."""
        return self._run(
            self.producer_id_control.generate_next_producer_id(self._image, broker_id, broker_epoch)
        )

    # --- auto topic creation ----------------------------------------------------------------------

    async def auto_create_topics(self, names: Sequence[str]) -> Mapping[str, ErrorCode]:
        """The `AutoCreateTopics` hook: create missing topics with the broker's defaults.

        Internal topics get the settings their coordinators ask for (AutoTopicCreationManager).
        A topic that turns out to exist already counts as created.
        """
        results = self.create_topics([self._auto_topic(name) for name in names])
        return {
            r.name: ErrorCode.none if r.error.code is ErrorCode.topic_already_exists else r.error.code
            for r in results
        }

    def _auto_topic(self, name: str) -> NewTopic:
        config = self.config
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

    # --- internals --------------------------------------------------------------------------------

    def _run(self, result: ControllerResult[T], validate_only: bool = False) -> T:
        """Commit the result's records (none for a validate-only request), then give its answer."""
        if result.records and not validate_only:
            self._commit(result.records)
        return result.response

    def _commit(self, records: Sequence[Record]) -> None:
        """Append `records` as one batch, fold it into the controller's image, then let the quorum commit it."""
        values = [encode_metadata_record(name, version, data) for name, version, data in records]
        batch = self.raft_client.append(values, now_ms=int(time.time() * 1000))
        self._image = fold(self._image, batch.records)
        self.raft_client.poll()  # one voter: committed now, and published before the operation answers
