"""The metadata layer: the image fold, the controller's validation, and the metadata log on disk."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from metadata_harness import SyncController, close_controllers  # noqa: F401 (an autouse fixture)

from formats.checkpoints import read_leader_epoch_checkpoint, read_partition_metadata
from formats.internal import decode_metadata_record, encode_metadata_record
from formats.records import ControlType, control_type
from formats.segment import walk
from kcli.broker.metadata import (
    ConfigOp,
    MetadataLoader,
    MetadataLog,
    NewTopic,
    OpType,
    QuorumController,
    metadata_log_dir,
)
from kcli.broker.metadata.controller import ApiException
from kcli.broker.metadata.image import (
    DIRECTORY_LOST,
    ClusterMetadataImage,
    MetadataDelta,
    MetadataReplayError,
    TopicChanges,
    fold,
    topic_changes,
)
from kcli.broker.raft.quorum_state import RaftState
from kcli.config import CLUSTER_METADATA_TOPIC, BrokerConfig, Listener
from kcli.protocol.messages import nested_type, request_type

REPO = Path(__file__).resolve().parents[1]
NODE = 1
LISTENER = Listener("PLAINTEXT", "127.0.0.1", 9092)
DIR_ID = uuid.UUID("8670faa3-99fa-46b7-b355-10bfd0e91ceb")
T1 = uuid.UUID("418c0f03-2751-48dd-be75-91e20bac7527")
T2 = uuid.UUID("b9ac52be-d9cf-46c0-86c4-e578e8457998")


def rec(record_type: str, version: int = 0, /, **data):
    """A record as the log gives it back: encoded with Kafka's framing, then decoded."""
    return decode_metadata_record(encode_metadata_record(record_type, version, data))


def register(broker_id: int = NODE, epoch: int = 1, fenced: bool = False, port: int = 9092):
    return rec(
        "RegisterBrokerRecord",
        3,
        brokerId=broker_id,
        incarnationId=uuid.uuid4(),
        brokerEpoch=epoch,
        endPoints=[{"name": "PLAINTEXT", "host": "127.0.0.1", "port": port, "securityProtocol": 0}],
        features=[{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 21}],
        rack=None,
        fenced=fenced,
        logDirs=[DIR_ID],
    )


def partition(topic_id, index, replicas=(NODE,), leader=NODE, **extra):
    return rec(
        "PartitionRecord",
        1,
        partitionId=index,
        topicId=topic_id,
        replicas=list(replicas),
        isr=list(replicas),
        removingReplicas=[],
        addingReplicas=[],
        leader=leader,
        leaderEpoch=0,
        partitionEpoch=0,
        directories=[DIR_ID] * len(replicas),
        **extra,
    )


def empty_image() -> ClusterMetadataImage:
    return ClusterMetadataImage.empty("cluster-x", NODE, "PLAINTEXT")


def base_records():
    return [
        rec("FeatureLevelRecord", name="metadata.version", featureLevel=21),
        register(),
        rec("TopicRecord", name="orders", topicId=T1),
        partition(T1, 0),
        partition(T1, 1),
    ]


def config(tmp_path: Path, **settings: str) -> BrokerConfig:
    return BrokerConfig({"log.dirs": str(tmp_path / "data"), **settings})


def open_controller(tmp_path: Path, register_node: bool = True, **settings: str) -> SyncController:
    controller = SyncController(config(tmp_path, **settings))
    if register_node:
        controller.register_broker(LISTENER, log_dirs=[DIR_ID])
    return controller


def batch_count(controller: QuorumController) -> int:
    return sum(1 for _ in controller.metadata_log.batches())


def open_loader(controller: QuorumController) -> MetadataLoader:
    """The broker's loader, as Node.open starts it: from the replayed image, told of every commit."""
    loader = MetadataLoader(controller.image)
    controller.raft_client.register(loader)
    return loader


class Recorder:
    """A MetadataPublisher that passes (old, new) on to `see`."""

    def __init__(self, see, name: str = "recorder") -> None:
        self.see = see
        self.name = name

    def on_metadata_update(self, changes, old, new) -> None:
        self.see(old, new)


# --- the fold -----------------------------------------------------------------------------------------


def test_fold_builds_topics_brokers_and_features():
    image = fold(empty_image(), base_records())
    assert image.metadata_version == 21
    assert [b.node_id for b in image.brokers()] == [NODE]
    assert image.brokers()[0].port == 9092 and not image.brokers()[0].is_fenced
    info = image.topic("orders")
    assert info is not None and info.topic_id == T1 and image.topic_by_id(T1) == info
    assert [(p.partition_index, p.leader_id, p.leader_epoch, p.isr_nodes) for p in info.partitions] == [
        (0, NODE, 0, (NODE,)),
        (1, NODE, 0, (NODE,)),
    ]
    assert set(image.partitions_of("orders")) == {0, 1}
    assert image.partitions_of("missing") is None and image.topic("missing") is None
    assert image.partition("orders", 1).directories == (DIR_ID,)
    assert image.cluster_id == "cluster-x" and image.controller_id == NODE


def test_fold_is_immutable_and_incremental_fold_equals_one_pass():
    records = base_records()
    first = fold(empty_image(), records[:3])
    second = fold(first, records[3:])
    assert first.topic("orders").partitions == ()  # the earlier image did not change
    assert second == fold(empty_image(), records)
    with pytest.raises(TypeError):
        second.topics_by_id[T2] = None  # type: ignore[index]


def test_partition_change_bumps_epochs_like_kafka():
    image = fold(empty_image(), base_records())
    isr_only = rec("PartitionChangeRecord", 1, partitionId=0, topicId=T1, isr=[])
    image = fold(image, [isr_only])
    p = image.partition("orders", 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((), NODE, 0, 1)
    same_leader = rec("PartitionChangeRecord", 1, partitionId=0, topicId=T1, leader=NODE, isr=[NODE])
    p = fold(image, [same_leader]).partition("orders", 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((NODE,), NODE, 1, 2)
    no_leader = rec("PartitionChangeRecord", 1, partitionId=1, topicId=T1, leader=-1, leaderRecoveryState=1)
    after = fold(image, [no_leader])
    p = after.partition("orders", 1)
    assert (p.leader, p.leader_epoch, p.leader_recovery_state) == (-1, 1, 1)
    assert after.topic("orders").partitions[1].error_code is ErrorCode.leader_not_available
    assert after.partition("orders", 0) == image.partition("orders", 0)


def test_remove_topic_drops_partitions_and_configs():
    records = base_records() + [
        rec("ConfigRecord", resourceType=2, resourceName="orders", name="retention.ms", value="1000"),
        rec("ConfigRecord", resourceType=2, resourceName="orders", name="cleanup.policy", value="compact"),
        rec("ConfigRecord", resourceType=2, resourceName="orders", name="cleanup.policy", value=None),
        rec("ConfigRecord", resourceType=4, resourceName="", name="log.retention.ms", value="5"),
        rec("ConfigRecord", resourceType=4, resourceName="1", name="log.cleaner.threads", value="2"),
    ]
    image = fold(empty_image(), records)
    assert image.topic_config("orders") == {"retention.ms": "1000"}
    assert image.broker_config("") == {"log.retention.ms": "5"}
    assert image.broker_config("1") == {"log.cleaner.threads": "2"}
    gone = fold(image, [rec("RemoveTopicRecord", topicId=T1)])
    assert gone.topic("orders") is None and gone.topic_by_id(T1) is None
    assert gone.topic_config("orders") == {} and list(gone.topics()) == []
    assert gone.broker_config("") == {"log.retention.ms": "5"}


def test_fencing_and_unknown_leaders_give_kafkas_partition_errors():
    image = fold(empty_image(), base_records() + [register(2, epoch=7, port=9093)])
    assert [b.node_id for b in image.brokers()] == [1, 2]
    fenced = fold(image, [rec("BrokerRegistrationChangeRecord", 0, brokerId=1, brokerEpoch=1, fenced=1)])
    assert fenced.brokers()[0].is_fenced
    p = fenced.topic("orders").partitions[0]
    assert (p.leader_id, p.error_code) == (-1, ErrorCode.listener_not_found)
    unfenced = fold(fenced, [rec("UnfenceBrokerRecord", id=1, epoch=1)])
    assert not unfenced.brokers()[0].is_fenced
    gone = fold(image, [rec("UnregisterBrokerRecord", brokerId=1, brokerEpoch=1)])
    p = gone.topic("orders").partitions[0]
    assert (p.leader_id, p.error_code, p.offline_replicas) == (-1, ErrorCode.leader_not_available, (1,))
    with pytest.raises(MetadataReplayError):
        fold(image, [rec("FenceBrokerRecord", id=1, epoch=99)])


def test_lost_directory_is_an_offline_replica():
    records = base_records()[:3] + [
        rec(
            "PartitionRecord",
            1,
            partitionId=0,
            topicId=T1,
            replicas=[1],
            isr=[1],
            removingReplicas=[],
            addingReplicas=[],
            leader=1,
            leaderEpoch=0,
            partitionEpoch=0,
            directories=[DIRECTORY_LOST],
        )
    ]
    assert fold(empty_image(), records).topic("orders").partitions[0].offline_replicas == (1,)


def test_producer_ids_features_noop_and_transactions():
    image = fold(empty_image(), base_records())
    assert image.next_producer_id_block().first_producer_id == 0
    image = fold(
        image, [rec("ProducerIdsRecord", brokerId=1, brokerEpoch=1, nextProducerId=1000), rec("NoOpRecord")]
    )
    assert image.next_producer_id_block(NODE).first_producer_id == 1000
    with pytest.raises(MetadataReplayError):
        fold(image, [rec("ProducerIdsRecord", brokerId=1, brokerEpoch=1, nextProducerId=1000)])
    assert (
        fold(image, [rec("FeatureLevelRecord", name="metadata.version", featureLevel=0)]).metadata_version
        == 0
    )
    committed = [rec("BeginTransactionRecord", name="x"), rec("TopicRecord", name="t2", topicId=T2)]
    delta = MetadataDelta(image).replay_all((r, -1) for r in committed)
    assert delta.apply().topic("t2") is None  # still buffered
    delta.replay(rec("EndTransactionRecord"))
    assert delta.apply().topic("t2") is not None
    aborted = committed + [rec("AbortTransactionRecord", reason="x")]
    assert fold(image, aborted).topic("t2") is None


def test_replay_errors_on_records_for_missing_topics():
    with pytest.raises(MetadataReplayError):
        fold(empty_image(), [partition(T2, 0)])
    with pytest.raises(MetadataReplayError):
        fold(empty_image(), [rec("PartitionChangeRecord", 0, partitionId=0, topicId=T2)])
    with pytest.raises(MetadataReplayError):
        fold(
            fold(empty_image(), base_records()), [rec("PartitionChangeRecord", 0, partitionId=7, topicId=T1)]
        )
    with pytest.raises(MetadataReplayError):
        fold(empty_image(), [rec("RemoveTopicRecord", topicId=T2)])


# --- the controller ----------------------------------------------------------------------------------


def codes(results):
    return {r.name: r.error.code for r in results}


def test_create_topics_defaults_records_and_one_batch(tmp_path):
    controller = open_controller(tmp_path, **{"num.partitions": "3"})
    batches = batch_count(controller)
    results = controller.create_topics([NewTopic("a"), NewTopic("b", 2, 1, configs={"retention.ms": "100"})])
    assert codes(results) == {"a": ErrorCode.none, "b": ErrorCode.none}
    assert batch_count(controller) == batches + 1
    a, b = results
    assert (a.num_partitions, a.replication_factor, b.num_partitions) == (3, 1, 2)
    assert a.topic_id != b.topic_id and a.topic_id.version == 4
    assert {e.name: (e.value, e.source) for e in b.configs}["retention.ms"] == ("100", 1)
    assert {e.name: (e.value, e.source) for e in b.configs}["segment.bytes"] == ("1073741824", 5)
    image = controller.image
    assert image.topic("a").topic_id == a.topic_id and image.topic_config("b") == {"retention.ms": "100"}
    for p in image.topic("a").partitions:
        assert (p.leader_id, p.leader_epoch, p.isr_nodes, p.replica_nodes) == (NODE, 0, (NODE,), (NODE,))
    assert image.partition("a", 0).directories == (DIR_ID,)
    last = list(controller.metadata_log.batches())[-1]
    assert last.leader_epoch == 1
    assert [r.name for r, _ in last.records] == [
        "TopicRecord",
        "PartitionRecord",
        "PartitionRecord",
        "PartitionRecord",
        "TopicRecord",
        "ConfigRecord",
        "PartitionRecord",
        "PartitionRecord",
    ]


def test_create_topics_validate_only_writes_nothing(tmp_path):
    controller = open_controller(tmp_path)
    end = controller.metadata_log.next_offset
    results = controller.create_topics([NewTopic("a", 2)], validate_only=True)
    assert codes(results) == {"a": ErrorCode.none} and results[0].num_partitions == 2
    assert controller.metadata_log.next_offset == end and controller.image.topic("a") is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is invalid: the empty string is not allowed"),
        (".", "Topic name is invalid: '.' is not allowed"),
        ("..", "Topic name is invalid: '..' is not allowed"),
        (
            "x" * 250,
            f"Topic name is invalid: the length of '{'x' * 250}' is longer than the max allowed length 249",
        ),
        (
            "bad/name",
            "Topic name is invalid: 'bad/name' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'",
        ),
        (
            "é",
            "Topic name is invalid: 'é' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'",
        ),
    ],
)
def test_invalid_topic_names(tmp_path, name, message):
    controller = open_controller(tmp_path)
    [result] = controller.create_topics([NewTopic(name)])
    assert (result.error.code, result.error.message) == (ErrorCode.invalid_topic_exception, message)


def test_topic_name_collisions_and_existing_topics(tmp_path):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("a.b"), NewTopic("plain")])
    results = controller.create_topics([NewTopic("a_b"), NewTopic("a.b"), NewTopic("plain"), NewTopic("a-b")])
    by_name = {r.name: r.error for r in results}
    assert by_name["a_b"].code is ErrorCode.invalid_topic_exception
    assert by_name["a_b"].message == "Topic 'a_b' collides with existing topic: a.b"
    assert (by_name["a.b"].code, by_name["a.b"].message) == (
        ErrorCode.topic_already_exists,
        "Topic 'a.b' already exists.",
    )
    assert by_name["plain"].code is ErrorCode.topic_already_exists
    assert by_name["a-b"].code is ErrorCode.none


def test_create_topics_request_level_errors(tmp_path):
    controller = open_controller(tmp_path)
    results = controller.create_topics(
        [NewTopic("dup"), NewTopic("ok"), NewTopic("dup"), NewTopic("__cluster_metadata")]
    )
    assert [r.name for r in results] == ["dup", "ok", "__cluster_metadata"]
    assert (results[0].error.code, results[0].error.message) == (
        ErrorCode.invalid_request,
        "Duplicate topic name.",
    )
    assert results[1].error.code is ErrorCode.none
    assert results[2].error.message == "Creation of internal topic __cluster_metadata is prohibited."


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (
            NewTopic("t", 1, 0),
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        (
            NewTopic("t", 1, -2),
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        (
            NewTopic("t", 1, 3),
            ErrorCode.invalid_replication_factor,
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached "
            "because only 1 broker(s) are registered.",
        ),
        (
            NewTopic("t", 0),
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (
            NewTopic("t", -5),
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (
            NewTopic("t", 1, -1, assignments=[(0, [1])]),
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ),
        (
            NewTopic("t", -1, 1, assignments=[(0, [1])]),
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        ),
        (
            NewTopic("t", assignments=[(0, [])]),
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        ),
        (
            NewTopic("t", assignments=[(0, [5])]),
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes broker 5, but no such broker is registered.",
        ),
        (
            NewTopic("t", assignments=[(0, [1, 1])]),
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes the broker 1 more than once.",
        ),
        (
            NewTopic("t", assignments=[(0, [1]), (0, [1])]),
            ErrorCode.invalid_replica_assignment,
            "Found multiple manual partition assignments for partition 0",
        ),
        (
            NewTopic("t", assignments=[(0, [1]), (2, [1])]),
            ErrorCode.invalid_replica_assignment,
            "partitions should be a consecutive 0-based integer sequence",
        ),
        (
            NewTopic("t", configs={"bogus.key": "1"}),
            ErrorCode.invalid_config,
            "Unknown topic config name: bogus.key",
        ),
        (
            NewTopic("t", configs={"segment.bytes": "abc"}),
            ErrorCode.invalid_config,
            "Invalid value 'abc' for configuration segment.bytes: expected an integer",
        ),
        (
            NewTopic("t", configs={"retention.ms": None, "segment.ms": None}),
            ErrorCode.invalid_config,
            "Null value not supported for topic configs: retention.ms,segment.ms",
        ),
        (
            NewTopic("t", configs={"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}),
            ErrorCode.invalid_config,
            "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
        ),
        (
            NewTopic("t", configs={"remote.storage.enable": "true"}),
            ErrorCode.invalid_config,
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.",
        ),
    ],
)
def test_create_topic_errors(tmp_path, topic, code, message):
    controller = open_controller(tmp_path)
    end = controller.metadata_log.next_offset
    [result] = controller.create_topics([topic])
    assert (result.error.code, result.error.message) == (code, message)
    assert controller.metadata_log.next_offset == end and controller.image.topic("t") is None


def test_manual_assignments_and_default_replication_factor(tmp_path):
    controller = open_controller(tmp_path, **{"default.replication.factor": "2"})
    [result] = controller.create_topics([NewTopic("t")])
    assert result.error.code is ErrorCode.invalid_replication_factor
    [result] = controller.create_topics([NewTopic("t", assignments=[(1, [1]), (0, [1])])])
    assert result.error.code is ErrorCode.none and result.num_partitions == 2


@pytest.mark.parametrize(
    ("log_dirs", "message"),
    [
        ([DIR_ID, None], "Reserved directory ID in request"),  # kio reads the all-zero UUID as None
        ([uuid.UUID(int=2)], "Reserved directory ID in request"),
        ([DIR_ID, DIR_ID], "Duplicate directory ID in request"),
    ],
)
def test_a_registration_with_a_reserved_or_repeated_log_dir_is_refused(tmp_path, log_dirs, message):
    controller = open_controller(tmp_path, register_node=False)
    with pytest.raises(ApiException) as refused:
        controller.register_broker(LISTENER, broker_id=2, log_dirs=log_dirs)
    assert refused.value.error.code is ErrorCode.invalid_registration
    assert refused.value.error.message == message
    assert controller.image.broker(2) is None


def test_errors_need_a_registered_broker(tmp_path):
    controller = open_controller(tmp_path, register_node=False)
    [result] = controller.create_topics([NewTopic("t")])
    assert (
        result.error.message
        == "Unable to replicate the partition 1 time(s): All brokers are currently fenced."
    )


def test_delete_topics_by_name_and_id(tmp_path):
    controller = open_controller(tmp_path)
    created = {
        r.name: r.topic_id for r in controller.create_topics([NewTopic("a"), NewTopic("b"), NewTopic("c")])
    }
    controller.alter_topic_configs("a", [ConfigOp("retention.ms", OpType.SET, "5")])
    batches = batch_count(controller)
    unknown_id = uuid.uuid4()
    results = controller.delete_topics(["a", created["b"], "missing", unknown_id, "c", "c", uuid.UUID(int=0)])
    assert batch_count(controller) == batches + 1
    assert [(r.name, r.topic_id, r.error.code) for r in results] == [
        ("a", created["a"], ErrorCode.none),
        ("b", created["b"], ErrorCode.none),
        ("missing", uuid.UUID(int=0), ErrorCode.unknown_topic_or_partition),
        (None, unknown_id, ErrorCode.unknown_topic_id),
        ("c", uuid.UUID(int=0), ErrorCode.invalid_request),
        (None, uuid.UUID(int=0), ErrorCode.invalid_request),
    ]
    assert results[4].error.message == "Duplicate topic name."
    image = controller.image
    assert [t.name for t in image.topics()] == ["c"] and image.topic_config("a") == {}
    [again] = controller.delete_topics(["c", created["c"]])[1:]
    assert again.error.message == "The provided topic name maps to an ID that was already supplied."


def test_delete_topics_disabled(tmp_path):
    controller = open_controller(tmp_path, **{"delete.topic.enable": "false"})
    controller.create_topics([NewTopic("a")])
    [result] = controller.delete_topics(["a"])
    assert result.error.code is ErrorCode.topic_deletion_disabled and controller.image.topic("a") is not None


def test_create_partitions(tmp_path):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("t", 2)])
    assert controller.create_partitions("t", 4).code is ErrorCode.none
    assert set(controller.image.partitions_of("t")) == {0, 1, 2, 3}
    assert controller.image.partition("t", 3).leader_epoch == 0
    assert controller.create_partitions("t", 5, [[1]]).code is ErrorCode.none
    assert controller.create_partitions("t", 6, validate_only=True).code is ErrorCode.none
    assert len(controller.image.partitions_of("t")) == 5
    cases = [
        (("missing", 3), ErrorCode.unknown_topic_or_partition, None),
        (("t", 5), ErrorCode.invalid_partitions, "Topic already has 5 partition(s)."),
        (
            ("t", 2),
            ErrorCode.invalid_partitions,
            "The topic t currently has 5 partition(s); 2 would not be an increase.",
        ),
        (
            ("t", 7, [[1]]),
            ErrorCode.invalid_replica_assignment,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        (
            ("t", 6, [[2]]),
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes broker 2, but no such broker is registered.",
        ),
    ]
    for args, code, message in cases:
        error = controller.create_partitions(*args)
        assert (error.code, error.message) == (code, message)
    assert len(controller.image.partitions_of("t")) == 5


def test_incremental_alter_configs(tmp_path):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("t", configs={"retention.ms": "100"})])
    ops = [
        ConfigOp("cleanup.policy", OpType.APPEND, "compact"),
        ConfigOp("retention.ms", OpType.DELETE),
        ConfigOp("segment.bytes", OpType.SET, "1000"),
    ]
    assert controller.alter_topic_configs("t", ops).code is ErrorCode.none
    assert controller.image.topic_config("t") == {"cleanup.policy": "delete,compact", "segment.bytes": "1000"}
    subtract = [ConfigOp("cleanup.policy", OpType.SUBTRACT, "delete")]
    assert controller.alter_topic_configs("t", subtract).code is ErrorCode.none
    assert controller.image.topic_config("t")["cleanup.policy"] == "compact"
    end = controller.metadata_log.next_offset
    assert (
        controller.alter_topic_configs("t", [ConfigOp("segment.bytes", OpType.SET, "1000")]).code
        is ErrorCode.none
    )
    assert controller.metadata_log.next_offset == end  # nothing changed, nothing written
    validate = controller.alter_topic_configs(
        "t", [ConfigOp("segment.bytes", OpType.SET, "2000")], validate_only=True
    )
    assert validate.code is ErrorCode.none and controller.image.topic_config("t")["segment.bytes"] == "1000"


@pytest.mark.parametrize(
    ("topic", "ops", "code", "message"),
    [
        (
            "t",
            [ConfigOp("segment.ms", OpType.APPEND, "1")],
            ErrorCode.invalid_config,
            "Can't APPEND to key segment.ms because its type is not LIST.",
        ),
        (
            "t",
            [ConfigOp("nope", OpType.SET, "1")],
            ErrorCode.invalid_config,
            "Unknown topic config name: nope",
        ),
        (
            "t",
            [ConfigOp("retention.ms", OpType.SET, "-7")],
            ErrorCode.invalid_config,
            "Invalid value '-7' for configuration retention.ms: value must be at least -1",
        ),
        (
            "t",
            [ConfigOp("a", OpType.SET, "1"), ConfigOp("a", OpType.DELETE)],
            ErrorCode.invalid_request,
            "Error due to duplicate config keys",
        ),
        (
            "t",
            [ConfigOp("retention.ms", OpType.SET, None)],
            ErrorCode.invalid_request,
            "Null value not supported for : retention.ms",
        ),
        (
            "",
            [ConfigOp("retention.ms", OpType.SET, "1")],
            ErrorCode.invalid_request,
            "Default topic resources are not allowed.",
        ),
        (
            "missing",
            [ConfigOp("retention.ms", OpType.SET, "1")],
            ErrorCode.unknown_topic_or_partition,
            "The topic 'missing' does not exist.",
        ),
        (
            "bad!",
            [ConfigOp("retention.ms", OpType.SET, "1")],
            ErrorCode.invalid_topic_exception,
            "Topic name is invalid: 'bad!' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'",
        ),
    ],
)
def test_alter_config_errors(tmp_path, topic, ops, code, message):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("t", configs={"retention.ms": "100"})])
    error = controller.alter_topic_configs(topic, ops)
    assert (error.code, error.message) == (code, message)
    assert controller.image.topic_config("t") == {"retention.ms": "100"}


def test_legacy_alter_configs_replaces_every_override(tmp_path):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("t", configs={"retention.ms": "100", "segment.ms": "5000"})])
    assert controller.replace_topic_configs("t", {"segment.ms": "6000"}).code is ErrorCode.none
    assert controller.image.topic_config("t") == {"segment.ms": "6000"}
    error = controller.replace_topic_configs("t", {"segment.ms": "0"})
    assert error.code is ErrorCode.invalid_config
    assert controller.replace_topic_configs("t", {"segment.ms": None}).code is ErrorCode.invalid_request
    assert controller.replace_topic_configs("t", {}).code is ErrorCode.none
    assert controller.image.topic_config("t") == {}


def test_auto_create_topics_hook(tmp_path):
    controller = open_controller(tmp_path, **{"num.partitions": "2", "offsets.topic.num.partitions": "3"})
    controller.create_topics([NewTopic("exists")])
    created = controller.auto_create_topics(["fresh", "exists", "__consumer_offsets", "__transaction_state"])
    assert set(created.values()) == {ErrorCode.none}
    image = controller.image
    assert len(image.partitions_of("fresh")) == 2 and len(image.partitions_of("__consumer_offsets")) == 3
    assert image.topic("__consumer_offsets").is_internal
    assert image.topic_config("__consumer_offsets")["cleanup.policy"] == "compact"
    assert image.topic_config("__transaction_state")["compression.type"] == "uncompressed"


def test_producer_id_blocks(tmp_path):
    controller = open_controller(tmp_path)
    epoch = controller.image.broker(NODE).broker_epoch
    first = controller.allocate_producer_ids(NODE, epoch)
    second = controller.allocate_producer_ids(NODE, epoch)
    assert (first.first_producer_id, second.first_producer_id, second.size) == (0, 1000, 1000)
    with pytest.raises(ApiException) as raised:
        controller.allocate_producer_ids(NODE, epoch + 1)
    assert raised.value.error.code is ErrorCode.stale_broker_epoch
    controller.close()
    reopened = open_controller(tmp_path, register_node=False)
    assert reopened.image.next_producer_id_block(NODE).first_producer_id == 2000


def test_listeners_see_every_committed_image(tmp_path):
    controller = open_controller(tmp_path)
    seen = []
    open_loader(controller).install_publisher(
        Recorder(lambda old, new: seen.append((old.topic("t"), new.topic("t"))))
    )
    controller.create_topics([NewTopic("t")])
    controller.create_topics([NewTopic("t", 0)], validate_only=True)
    assert len(seen) == 1 and seen[0][0] is None and seen[0][1].name == "t"


def test_topic_changes_tell_storage_what_to_do(tmp_path):
    controller = open_controller(tmp_path)
    changes = []
    open_loader(controller).install_publisher(
        Recorder(lambda old, new: changes.append(topic_changes(old, new)))
    )
    [a] = controller.create_topics([NewTopic("a", 2)])
    controller.create_partitions("a", 3)
    controller.alter_topic_configs("a", [ConfigOp("retention.ms", OpType.SET, "9")])
    controller.delete_topics(["a"])
    assert changes == [
        TopicChanges((("a", 0, a.topic_id), ("a", 1, a.topic_id)), (), ()),
        TopicChanges((("a", 2, a.topic_id),), (), ()),
        TopicChanges((), (), ("a",)),
        TopicChanges((), (("a", a.topic_id, (0, 1, 2)),), ()),
    ]


def test_images_are_published_once_committed_in_installation_order(tmp_path):
    """append -> committed offset -> publish: a publisher sees an image only once the high watermark
    has passed its records, and publishers see it in the order they were installed."""
    controller = open_controller(tmp_path)
    loader = open_loader(controller)
    seen = []

    def recorder(name: str) -> Recorder:
        committed = controller.raft_client
        return Recorder(
            lambda old, new: seen.append((name, new.offset, committed.high_watermark, loader.image is new)),
            name,
        )

    for name in ("storage", "coordinators", "handlers"):
        loader.install_publisher(recorder(name))
    assert [p.name for p in loader.publishers] == ["storage", "coordinators", "handlers"]
    assert controller.raft_client.high_watermark == controller.metadata_log.next_offset
    controller.create_topics([NewTopic("t", 2)])
    end = controller.metadata_log.next_offset
    assert seen == [(name, end - 1, end, True) for name in ("storage", "coordinators", "handlers")]
    assert loader.image == controller.image and loader.image.offset == end - 1


def test_registration_epochs_increase_with_each_start(tmp_path):
    controller = open_controller(tmp_path)
    first = controller.image.broker(NODE)
    assert first.broker_epoch == 2  # offset 0: the epoch's LeaderChange, 1: the bootstrap FeatureLevelRecord
    controller.create_topics([NewTopic("t")])
    controller.close()
    again = open_controller(tmp_path)
    second = again.image.broker(NODE)
    assert second.broker_epoch > first.broker_epoch and second.incarnation_id != first.incarnation_id
    assert again.image.metadata_version == 27  # no bootstrap.checkpoint: Kafka 4.1's latest production level
    bootstrap = [r.name for r, _ in again.metadata_log.records()].count("FeatureLevelRecord")
    assert bootstrap == 1


def _quorum_request(api_key: int, version: int, **partition: object):
    cls = request_type(api_key, version)
    topic_cls, partition_cls = nested_type(cls, "TopicData"), nested_type(cls, "PartitionData")
    names = {f.name for f in dataclasses.fields(partition_cls)}
    defaults = {"partition_index": 0, "voter_directory_id": None, "replica_directory_id": None}
    defaults |= {"preferred_candidates": ()}
    values = {k: v for k, v in (defaults | partition).items() if k in names}
    topic = topic_cls(topic_name=CLUSTER_METADATA_TOPIC, partitions=(partition_cls(**values),))
    extra = {"leader_endpoints": ()} if api_key != 52 else {}
    if api_key != 54:
        extra["voter_id"] = NODE
    return cls(cluster_id="cluster-x", topics=(topic,), **extra)


def test_a_request_naming_this_node_leader_or_candidate_does_not_move_it_where_kafka_never_goes(tmp_path):
    # Kafka's QuorumState never follows itself nor votes for itself; a quorum of one that did (a
    # BeginQuorumEpoch naming it leader of a later epoch) told its controller it was active while its
    # Raft client, a follower, could not append.
    controller = open_controller(tmp_path)
    raft = controller.raft_client
    epoch = raft.epoch
    for api_key, handle in ((53, raft.handle_begin_quorum_epoch), (54, raft.handle_end_quorum_epoch)):
        for leader_epoch, error in ((epoch, ErrorCode.none), (epoch + 1, ErrorCode.invalid_request)):
            request = _quorum_request(api_key, 1, leader_id=NODE, leader_epoch=leader_epoch)
            [answer] = handle(request, 1).topics[0].partitions
            assert (answer.error_code, answer.leader_id, answer.leader_epoch) == (error, NODE, epoch)
            assert raft.quorum.state is RaftState.LEADER and controller.is_active
    # A Vote from itself in a later epoch: Unattached in that epoch (as in Kafka), no vote for itself,
    # and the quorum of one elects itself again.
    vote = _quorum_request(
        52,
        2,
        replica_id=NODE,
        replica_epoch=epoch + 5,
        last_offset_epoch=epoch,
        last_offset=0,
        pre_vote=False,
    )
    [answer] = raft.handle_vote(vote, 2).topics[0].partitions
    assert not answer.vote_granted
    assert (raft.quorum.state, raft.quorum.voted_id, raft.epoch) == (RaftState.UNATTACHED, -1, epoch + 5)
    assert not controller.is_active
    controller.run(asyncio.wait_for(controller.controller.wait_active(), 10))
    assert raft.quorum.state is RaftState.LEADER and raft.epoch == epoch + 6


def test_a_replica_id_that_another_live_directory_holds_is_refused(tmp_path):
    """The leader tells two processes with one node.id apart by their directory ids (KIP-853's replica
    key): another one is refused while the known one fetched within the fetch timeout; a restart (the
    same dir) is served, and so is a dir formatted again once the old one has been silent that long."""
    from kcli.broker.raft import open_raft_client
    from kcli.broker.raft.metadata_log import CLUSTER_METADATA_TOPIC_ID
    from kcli.broker.raft.raft_util import FETCH, NODE_ID_TAKEN, VOTE

    own, first, second = (uuid.UUID(int=n) for n in (0xA1, 0xB2, 0xC3))

    async def run() -> None:
        raft = open_raft_client(
            config(tmp_path, **{"controller.quorum.fetch.timeout.ms": "300"}), "cluster-x"
        )
        raft.directory_id = own
        await raft.start()
        await raft.wait_caught_up()

        async def fetch(replica_id: int, directory_id: uuid.UUID) -> ErrorCode:
            cls = request_type(FETCH, 17)
            topic_cls, partition_cls = nested_type(cls, "FetchTopic"), nested_type(cls, "FetchPartition")
            partition = partition_cls(
                partition=0, current_leader_epoch=raft.epoch, fetch_offset=0, last_fetched_epoch=0,
                log_start_offset=-1, partition_max_bytes=1 << 20, replica_directory_id=directory_id,
            )  # fmt: skip
            request = cls(
                cluster_id="cluster-x",
                replica_state=nested_type(cls, "ReplicaState")(replica_id=replica_id, replica_epoch=-1),
                max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                topics=(topic_cls(topic_id=CLUSTER_METADATA_TOPIC_ID, partitions=(partition,)),),
            )  # fmt: skip
            answer = await raft.handle_fetch(request, 17)
            return answer.error_code

        def pre_vote(directory_id: uuid.UUID) -> ErrorCode:
            request = _quorum_request(
                VOTE, 2, replica_id=2, replica_directory_id=directory_id, replica_epoch=raft.epoch,
                last_offset_epoch=raft.epoch, last_offset=raft.log_end_offset, pre_vote=True,
            )  # fmt: skip
            return raft.handle_vote(request, 2).error_code

        try:
            assert await fetch(2, first) is ErrorCode.none
            assert await fetch(2, second) is NODE_ID_TAKEN  # node 2 is live with the first dir
            assert pre_vote(second) is NODE_ID_TAKEN  # and the second cannot campaign as node 2 either
            assert await fetch(2, first) is ErrorCode.none  # a restart: the same dir
            assert await fetch(NODE, first) is NODE_ID_TAKEN  # the leader's own id, whatever the dir
            await asyncio.sleep(0.4)  # the first dir silent past the fetch timeout: its node died
            assert await fetch(2, second) is ErrorCode.none  # formatted again after the death: served
            assert await fetch(2, first) is NODE_ID_TAKEN
            [observer] = raft.describe_quorum(2).topics[0].partitions[0].observers
            assert (observer.replica_id, observer.replica_directory_id) == (2, second)
        finally:
            await raft.shutdown()
            raft.log.close()

    asyncio.run(run())


def test_a_vote_goes_to_one_replica_key_even_across_a_restart(tmp_path):
    """Two processes with node.id 2 and two directory ids: a voter that voted for one of them in an epoch
    does not vote for the other (Kafka's votedKey; quorum-state keeps votedDirectoryId), so they cannot
    both win that epoch."""
    from kcli.broker.raft import open_raft_client

    voters = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "controller.quorum.voters": "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
        "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:1",
    }
    first, second = uuid.UUID(int=0xB2), uuid.UUID(int=0xC3)

    def granted(raft, directory_id: uuid.UUID) -> bool:
        request = _quorum_request(
            52, 2, replica_id=2, replica_directory_id=directory_id, replica_epoch=1, last_offset_epoch=0,
            last_offset=0, pre_vote=False,
        )  # fmt: skip
        [answer] = raft.handle_vote(request, 2).topics[0].partitions
        return answer.vote_granted

    async def run() -> None:
        for votes in ([(first, True), (second, False), (first, True)], [(second, False), (first, True)]):
            raft = open_raft_client(config(tmp_path, **voters), "cluster-x")
            raft.quorum.initialize(0)  # not started: no election of its own
            try:
                assert [(d, granted(raft, d)) for d, _ in votes] == votes
                assert (raft.quorum.voted_id, raft.quorum.voted_directory_id) == (2, first)
            finally:
                raft.log.close()

    asyncio.run(run())


# --- the metadata log on disk ------------------------------------------------------------------------


def test_restart_replays_an_identical_image(tmp_path):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("a", 3), NewTopic("b", configs={"cleanup.policy": "compact"})])
    controller.create_partitions("a", 5)
    controller.alter_topic_configs("a", [ConfigOp("retention.ms", OpType.SET, "42")])
    controller.delete_topics(["b"])
    image = controller.image
    controller.close()
    reopened = SyncController(config(tmp_path))
    assert reopened.image == image and reopened.metadata_log.recovery_report == []
    assert list(reopened.image.topics()) == list(image.topics())


def test_files_have_kafkas_names_and_contents(tmp_path):
    controller = open_controller(tmp_path)
    directory = metadata_log_dir(controller.config)
    assert directory == tmp_path / "data" / "__cluster_metadata-0"
    names = sorted(p.name for p in directory.iterdir())
    assert "00000000000000000000.log" in names
    metadata = read_partition_metadata((directory / "partition.metadata").read_text())
    assert str(metadata.topic_id) == "00000000-0000-0000-0000-000000000001"
    epochs = read_leader_epoch_checkpoint((directory / "leader-epoch-checkpoint").read_text())
    assert [(e.epoch, e.start_offset) for e in epochs] == [(1, 0)]
    assert (directory / "quorum-state").read_text() == (
        '{"leaderId":1,"leaderEpoch":1,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'
    )
    data = (directory / "00000000000000000000.log").read_bytes()
    result = walk(data)
    assert result.stop == len(data)
    assert all(b.crc_valid and b.partition_leader_epoch == 1 and b.magic == 2 for b in result.batches)
    first, *rest = result.batches
    assert first.is_control and [control_type(r.key) for r in first.records(data)] == [
        ControlType.LEADER_CHANGE
    ]
    for batch in rest:
        assert all(r.key is None for r in batch.records(data))


def test_torn_last_batch_is_truncated_to_the_previous_image(tmp_path):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("kept")])
    before = controller.image
    controller.create_topics([NewTopic("lost", 4)])
    segment = controller.metadata_log.segments[-1]
    controller.close()
    size = segment.stat().st_size
    with open(segment, "r+b") as f:  # what kill -9 in the middle of a write leaves
        f.truncate(size - 10)
    reopened = SyncController(config(tmp_path))
    assert reopened.image == before
    [line] = reopened.metadata_log.recovery_report
    assert f"truncated {segment.name} at byte" in line and f"log end offset now {before.offset + 1}" in line
    assert segment.stat().st_size < size - 10
    reopened.create_topics([NewTopic("after")])
    reopened.close()
    again = SyncController(config(tmp_path))
    assert {t.name for t in again.image.topics()} == {"kept", "after"}
    assert again.metadata_log.recovery_report == []
    again.close()
    assert_verifies_clean(segment.parent)


def test_corrupt_batch_truncates_it_and_later_segments(tmp_path):
    controller = SyncController(config(tmp_path, **{"metadata.log.segment.bytes": "400"}))
    images = [controller.image]  # the registration may have a segment of its own, so recovery can end here
    controller.register_broker(LISTENER)
    images.append(controller.image)
    for i in range(6):
        controller.create_topics([NewTopic(f"t{i}", 2)])
        images.append(controller.image)
    segments = controller.metadata_log.segments
    assert len(segments) >= 3
    assert [int(p.name[:20]) for p in segments] == sorted(int(p.name[:20]) for p in segments)
    controller.close()
    victim = segments[1]
    data = bytearray(victim.read_bytes())
    data[-5] ^= 0xFF  # a flipped bit in the last batch of a middle segment
    victim.write_bytes(bytes(data))
    reopened = MetadataLog.open(victim.parent, segment_bytes=400)
    truncated, deleted = reopened.recovery_report
    assert f"truncated {victim.name}" in truncated and "crc" in truncated.lower()
    assert f"deleted {len(segments) - 2} segments after {victim.name}" in deleted
    assert not any(p.exists() for p in segments[2:])
    assert reopened.segments == segments[:2]
    replayed = (
        MetadataDelta(ClusterMetadataImage.empty("cluster-x", NODE, "PLAINTEXT"))
        .replay_all(reopened.records())
        .apply()
    )
    assert replayed.offset == reopened.next_offset - 1
    assert replayed == next(img for img in images if img.offset == replayed.offset)


def test_garbage_size_field_is_truncated(tmp_path):
    controller = open_controller(tmp_path)
    before = controller.image
    segment = controller.metadata_log.segments[-1]
    controller.close()
    with open(segment, "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 20)  # a unit claiming 5 bytes
    reopened = SyncController(config(tmp_path))
    assert reopened.image == before and len(reopened.metadata_log.recovery_report) == 1


def test_undecodable_record_is_an_error_not_a_truncation(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog.open(directory)
    log.append([b"\x01\x63\x00"], leader_epoch=1, now_ms=0)  # unknown record type 99
    log.close()
    with pytest.raises(Exception, match="Unknown metadata id 99"):
        list(MetadataLog.open(directory).records())


def kcli(*args: str) -> str:
    """`kcli ARGS` through kcli.cli.main.main in this process (test_dump and test_verify run the
    commands as real processes); its stdout, after exit status 0."""
    proc = run_kcli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def assert_verifies_clean(path: Path) -> None:
    """`kcli verify --deep` finds nothing: CRCs, offsets, both indexes and the epoch checkpoint agree."""
    assert "no findings" in kcli("verify", "--deep", str(path))


def test_segments_roll_with_indexes_that_verify_clean(tmp_path):
    controller = SyncController(config(tmp_path, **{"metadata.log.segment.bytes": "5000"}))
    controller.register_broker(LISTENER)
    for i in range(40):
        controller.create_topics([NewTopic(f"t{i}", 3)])
    controller.close()
    reopened = SyncController(config(tmp_path, **{"metadata.log.segment.bytes": "5000"}))
    for i in range(40, 50):
        reopened.create_topics([NewTopic(f"t{i}", 3)])
    segments = reopened.metadata_log.segments
    assert len(segments) >= 4 and len(list(reopened.image.topics())) == 50
    assert any(p.with_suffix(".index").stat().st_size > 0 for p in segments)
    reopened.close()
    assert_verifies_clean(segments[0].parent.parent)


def test_dump_segment_decodes_the_metadata_log(tmp_path):
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("dumped", 2, configs={"retention.ms": "7"})])
    segment = controller.metadata_log.segments[0]
    controller.close()
    out = kcli("dump-segment", "--cluster-metadata-decoder", str(segment))
    assert (
        '"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":27}'
        in out
    )
    assert '"type":"REGISTER_BROKER_RECORD","version":3' in out
    assert '"type":"TOPIC_RECORD","version":0,"data":{"name":"dumped"' in out
    assert out.count('"type":"PARTITION_RECORD","version":2') == 2  # 4.1-IV1: v2, with the ELR fields
    assert '"name":"retention.ms","value":"7"' in out
    assert "partitionLeaderEpoch: 1" in out and "isvalid: false" not in out


KILLER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from metadata_harness import SyncController
    from kcli.broker.metadata import NewTopic
    from kcli.config import BrokerConfig, Listener
    config = BrokerConfig({"log.dirs": sys.argv[1]})
    controller = SyncController(config)
    controller.register_broker(Listener("PLAINTEXT", "127.0.0.1", 9092))
    print("ready", flush=True)
    i = 0
    while True:
        controller.create_topics([NewTopic(f"t{i}", 8, configs={"retention.ms": str(i + 1)})])
        i += 1
    """
)


def test_real_kill_9_leaves_whole_operations_only(tmp_path):
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLER, str(data), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ},
    )
    try:
        assert proc.stdout.readline() == b"ready\n"
        segment = data / "__cluster_metadata-0" / "00000000000000000000.log"
        while segment.stat().st_size < 20000 and proc.poll() is None:
            time.sleep(0.005)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    controller = SyncController(BrokerConfig({"log.dirs": str(data)}))
    topics = list(controller.image.topics())
    assert len(topics) > 10
    for topic in topics:  # every topic arrived whole: its partitions and its config
        assert len(topic.partitions) == 8
        assert controller.image.topic_config(topic.name) == {"retention.ms": str(int(topic.name[1:]) + 1)}
    assert sorted(int(t.name[1:]) for t in topics) == list(range(len(topics)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("create"), st.sampled_from("abcde"), st.integers(-1, 3)),
            st.tuples(st.just("delete"), st.sampled_from("abcde"), st.just(0)),
            st.tuples(st.just("grow"), st.sampled_from("abcde"), st.integers(1, 5)),
            st.tuples(st.just("config"), st.sampled_from("abcde"), st.integers(-2, 3)),
        ),
        max_size=12,
    )
)
def test_any_operation_sequence_replays_to_the_same_image(tmp_path_factory, operations):
    root = tmp_path_factory.mktemp("ops")
    controller = open_controller(root)
    for op, name, n in operations:
        if op == "create":
            controller.create_topics([NewTopic(name, n)])
        elif op == "delete":
            controller.delete_topics([name])
        elif op == "grow":
            controller.create_partitions(name, n)
        else:
            controller.alter_topic_configs(name, [ConfigOp("retention.ms", OpType.SET, str(n))])
    image = controller.image
    controller.close()
    reopened = SyncController(config(root))
    assert reopened.image == image
    delta = MetadataDelta(empty_image())
    for record, offset in reopened.metadata_log.records():
        delta.replay(record, offset)
    assert delta.apply() == image


def test_an_excessively_large_operation_fails_whole_and_at_once(tmp_path):
    """QuorumController.MAX_RECORDS_PER_USER_OP: 2**31-1 partitions is one small request; it must be
    refused before any placement is computed, and writes nothing."""
    controller = open_controller(tmp_path)
    controller.create_topics([NewTopic("t", 1)])
    end = controller.metadata_log.next_offset
    started = time.monotonic()
    results = controller.create_topics([NewTopic("huge", 2**31 - 1), NewTopic("small", 1)])
    assert {r.name: (r.error.code, r.error.message) for r in results} == {
        name: (ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")
        for name in ("huge", "small")
    }
    error = controller.create_partitions("t", 2**31 - 1)
    assert (error.code, error.message) == (
        ErrorCode.policy_violation,
        "Unable to perform excessively large batch operation.",
    )
    assert time.monotonic() - started < 1.0
    assert controller.metadata_log.next_offset == end
    # 10,000 records in one operation is still fine: a topic of 9,999 partitions (with its TopicRecord).
    [result] = controller.create_topics([NewTopic("wide", 9_999)], validate_only=True)
    assert result.error.code is ErrorCode.none


def test_a_vote_in_an_epoch_near_the_int32_limit_is_refused(tmp_path):
    """One forged Vote in epoch 2**31-1 would leave no epoch to campaign in and none to write."""
    from kcli.broker.raft import open_raft_client
    from kcli.broker.raft.raft_util import MAX_EPOCH, VOTE
    from kcli.protocol.messages import nested_type, request_type

    async def run() -> None:
        raft = open_raft_client(config(tmp_path), "cluster-x")
        await raft.start()
        await raft.wait_caught_up()
        try:
            cls = request_type(VOTE, 2)
            topic_cls, partition_cls = nested_type(cls, "TopicData"), nested_type(cls, "PartitionData")
            for epoch, expected in (
                (2**31 - 1, ErrorCode.invalid_request),
                (MAX_EPOCH + 1, ErrorCode.invalid_request),
            ):
                partition = partition_cls(
                    partition_index=0, replica_epoch=epoch, replica_id=NODE, replica_directory_id=None,
                    voter_directory_id=None, last_offset_epoch=1, last_offset=0, pre_vote=False,
                )  # fmt: skip
                request = cls(
                    cluster_id="cluster-x",
                    voter_id=NODE,
                    topics=(topic_cls(topic_name="__cluster_metadata", partitions=(partition,)),),
                )
                answer = raft.handle_vote(request, 2).topics[0].partitions[0]
                assert answer.error_code is expected and not answer.vote_granted
            assert raft.epoch < MAX_EPOCH and raft.quorum.is_leader
        finally:
            await raft.shutdown()
            raft.log.close()

    asyncio.run(run())
