"""The admin APIs of `kcli broker start`: topics, configs, DeleteRecords and DescribeLogDirs.

Stock clients (confluent-kafka's AdminClient, kafka-python's KafkaAdminClient) talk to a real broker
process; every version kio has and every error path are driven with kcli's own protocol client
against a broker in this process, whose logs the tests can also write to and inspect.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from conftest import BrokerProcess, stop_cleanly
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType as KConfigResourceType
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic as KNewTopic
from kafka.structs import TopicPartition as KTopicPartition
from kio.schema.errors import ErrorCode
from waiting import wait_for, wait_for_async

from formats.records import build_batch
from kcli.broker.server import Broker
from kcli.client import KafkaClient
from kcli.config import BrokerConfig
from kcli.protocol.messages import build, kio_versions, nested_type, request_type

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LONG_TIMEOUT = datetime.timedelta(seconds=30)
ZERO_UUID = uuid.UUID(int=0)


# --- stock clients against a real broker process ---------------------------------------------------


def test_confluent_admin_topics(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics(
        [
            NewTopic("orders", 3, 1, config={"cleanup.policy": "compact", "retention.ms": "3600000"}),
            NewTopic("plain", -1, -1),
            NewTopic("placed", 2, replica_assignment=[[1], [1]]),
        ]
    )
    assert {name: error_of(f) for name, f in created.items()} == {
        "orders": None,
        "plain": None,
        "placed": None,
    }

    failed = admin.create_topics(
        [
            NewTopic("orders", 1, 1),
            NewTopic("bad name", 1, 1),
            NewTopic("wide", 1, 3),
            NewTopic("zero", 0, 1),
            NewTopic("badconfig", 1, 1, config={"retention.ms": "soon"}),
            NewTopic("unknownconfig", 1, 1, config={"no.such.config": "1"}),
            NewTopic("badassign", 2, replica_assignment=[[1], [2]]),
        ]
    )
    assert {name: error_of(f) for name, f in failed.items()} == {
        "orders": ErrorCode.topic_already_exists,
        "bad name": ErrorCode.invalid_topic_exception,
        "wide": ErrorCode.invalid_replication_factor,
        "zero": ErrorCode.invalid_partitions,
        "badconfig": ErrorCode.invalid_config,
        "unknownconfig": ErrorCode.invalid_config,
        "badassign": ErrorCode.invalid_replica_assignment,
    }
    assert "Topic 'orders' already exists." in str(failed["orders"].exception())
    assert "Unknown topic config name: no.such.config" in str(failed["unknownconfig"].exception())

    dry = admin.create_topics([NewTopic("dry", 2, 1)], validate_only=True)
    assert error_of(dry["dry"]) is None
    partitions = {name: len(t.partitions) for name, t in admin.list_topics(timeout=10).topics.items()}
    assert partitions == {"orders": 3, "plain": 1, "placed": 2}

    grown = admin.create_partitions(
        [NewPartitions("orders", 5), NewPartitions("placed", 1), NewPartitions("missing", 2)]
    )
    assert {name: error_of(f) for name, f in grown.items()} == {
        "orders": None,
        "placed": ErrorCode.invalid_partitions,
        "missing": ErrorCode.unknown_topic_or_partition,
    }
    assert error_of(admin.create_partitions([NewPartitions("plain", 4)], validate_only=True)["plain"]) is None
    partitions = {name: len(t.partitions) for name, t in admin.list_topics(timeout=10).topics.items()}
    assert partitions == {"orders": 5, "plain": 1, "placed": 2}

    deleted = admin.delete_topics(["placed", "missing"])
    assert {name: error_of(f) for name, f in deleted.items()} == {
        "placed": None,
        "missing": ErrorCode.unknown_topic_or_partition,
    }
    assert sorted(admin.list_topics(timeout=10).topics) == ["orders", "plain"]
    assert not (broker.data_dir / "placed-0").exists()


def test_confluent_admin_configs_and_records(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics(
        [NewTopic("events", 2, 1, config={"retention.ms": "3600000"}), NewTopic("table", 1, 1)]
    )
    assert all(error_of(f) is None for f in created.values())

    configs = describe(admin, ConfigResource("topic", "events"))
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "3600000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
        "1073741824",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert not configs["retention.ms"].is_read_only and not configs["retention.ms"].is_sensitive

    changes = ConfigResource(
        "topic",
        "events",
        incremental_configs=[
            ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    assert error_of(admin.incremental_alter_configs([changes])[changes]) is None
    configs = describe(admin, ConfigResource("topic", "events"))
    assert configs["segment.bytes"].value == "1048576"
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "604800000",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert configs["cleanup.policy"].value == "delete,compact"

    subtract = ConfigResource(
        "topic",
        "events",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT)
        ],
    )
    invalid = ConfigResource(
        "topic",
        "table",
        incremental_configs=[ConfigEntry("segment.bytes", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    missing = ConfigResource(
        "topic",
        "missing",
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    broker_change = ConfigResource(
        "broker",
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.hours", "2", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    results = admin.incremental_alter_configs([subtract, invalid, missing, broker_change])
    assert [error_of(results[r]) for r in (subtract, invalid, missing, broker_change)] == [
        None,
        ErrorCode.invalid_config,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_request,
    ]
    assert "Cannot update these configs dynamically: Set(log.retention.hours)" in str(
        results[broker_change].exception()
    )
    assert describe(admin, ConfigResource("topic", "events"))["cleanup.policy"].value == "delete"

    # Legacy AlterConfigs replaces the whole set of overrides.
    legacy = ConfigResource("topic", "events", set_config={"cleanup.policy": "compact"})
    assert error_of(admin.alter_configs([legacy])[legacy]) is None
    configs = describe(admin, ConfigResource("topic", "events"))
    assert (configs["segment.bytes"].source, configs["cleanup.policy"].value) == (
        ConfigSource.DEFAULT_CONFIG.value,
        "compact",
    )

    node = describe(admin, ConfigResource("broker", "1"))
    assert (node["log.retention.hours"].value, node["log.retention.hours"].source) == (
        "168",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert node["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert node["log.dirs"].is_read_only and not node["log.retention.ms"].is_read_only

    # DeleteRecords on empty logs: the offsets there are, the offsets there are not, the policy.
    # (librdkafka refuses partitions its metadata lacks itself; the raw-protocol test covers those.)
    deletions = admin.delete_records([TopicPartition("table", 0, 5), TopicPartition("events", 0, 0)])
    assert {(tp.topic, tp.partition): error_of(f) for tp, f in deletions.items()} == {
        ("table", 0): ErrorCode.offset_out_of_range,
        ("events", 0): ErrorCode.policy_violation,
    }
    [deleted] = admin.delete_records([TopicPartition("table", 0, 0)]).values()
    assert deleted.result(timeout=30).low_watermark == 0


def test_kafka_python_admin(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics(
            [
                KNewTopic("audit", 2, 1, topic_configs={"retention.bytes": "1048576"}),
                KNewTopic("scratch", 1, 1),
            ]
        )
        admin.create_topics([KNewTopic("dry", 1, 1)], validate_only=True)
        admin.create_partitions({"audit": KNewPartitions(total_count=4)})
        assert {t["name"]: len(t["partitions"]) for t in admin.describe_topics()} == {
            "audit": 4,
            "scratch": 1,
        }

        topic = KConfigResource(KConfigResourceType.TOPIC, "audit")
        configs = admin.describe_configs([topic], config_filter="all")["topic"]["audit"]
        assert configs["retention.bytes"]["value"] == "1048576"
        assert configs["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
        modified = admin.describe_configs([topic])["topic"]["audit"]
        assert list(modified) == ["retention.bytes"]

        changes = KConfigResource(KConfigResourceType.TOPIC, "audit", configs={"retention.ms": "60000"})
        assert admin.alter_configs([changes]) == {"topic": {"audit": "OK"}}
        legacy = KConfigResource(KConfigResourceType.TOPIC, "audit", configs={"segment.ms": "600000"})
        assert admin.alter_configs([legacy], incremental=False) == {"topic": {"audit": "OK"}}
        modified = admin.describe_configs([topic])["topic"]["audit"]
        # kafka-python carries the other overrides along for the full-replace API.
        assert {k: v["value"] for k, v in modified.items()} == {
            "retention.bytes": "1048576",
            "retention.ms": "60000",
            "segment.ms": "600000",
        }
        admin.reset_configs([KConfigResource(KConfigResourceType.TOPIC, "audit", configs=["segment.ms"])])
        assert sorted(admin.describe_configs([topic])["topic"]["audit"]) == [
            "retention.bytes",
            "retention.ms",
        ]

        node = admin.describe_configs([KConfigResource(KConfigResourceType.BROKER, "1")], config_filter="all")
        assert node["broker"]["1"]["num.partitions"]["value"] == "1"

        deleted = admin.delete_records({KTopicPartition("scratch", 0): 0})
        assert deleted[KTopicPartition("scratch", 0)]["low_watermark"] == 0

        [described] = admin.describe_log_dirs()
        [log_dir] = described["log_dirs"]
        assert log_dir["log_dir"] == os.path.abspath(broker.data_dir)
        assert {
            t["name"]: sorted(p["partition_index"] for p in t["partitions"]) for t in log_dir["topics"]
        } == {
            "audit": [0, 1, 2, 3],
            "scratch": [0],
        }
        assert all(
            p["offset_lag"] == 0 and not p["is_future_key"]
            for t in log_dir["topics"]
            for p in t["partitions"]
        )

        admin.delete_topics(["scratch"])
        assert sorted(admin.list_topics()) == ["audit"]
    finally:
        admin.close()


def test_configs_survive_a_restart(broker_factory, tmp_path: Path) -> None:
    data_dir = tmp_path / "kept"
    first = broker_factory(data_dir=data_dir)
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    created = admin.create_topics(
        [NewTopic("kept", 2, 1, config={"retention.ms": "7200000"}), NewTopic("gone", 1, 1)]
    )
    assert all(error_of(f) is None for f in created.values())
    changes = ConfigResource(
        "topic",
        "kept",
        incremental_configs=[
            ConfigEntry("segment.bytes", "2097152", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    assert error_of(admin.incremental_alter_configs([changes])[changes]) is None
    assert error_of(admin.create_partitions([NewPartitions("kept", 3)])["kept"]) is None
    assert error_of(admin.delete_topics(["gone"])["gone"]) is None
    before = describe(admin, ConfigResource("topic", "kept"))
    stop_cleanly(first)

    second = broker_factory(data_dir=data_dir)
    admin = AdminClient({"bootstrap.servers": second.bootstrap})
    after = describe(admin, ConfigResource("topic", "kept"))
    assert {k: (v.value, v.source) for k, v in after.items()} == {
        k: (v.value, v.source) for k, v in before.items()
    }
    assert (after["retention.ms"].value, after["segment.bytes"].value, after["cleanup.policy"].value) == (
        "7200000",
        "2097152",
        "delete,compact",
    )
    assert {name: len(t.partitions) for name, t in admin.list_topics(timeout=10).topics.items()} == {
        "kept": 3
    }
    assert [(data_dir / f"kept-{i}").is_dir() for i in range(3)] == [True, True, True]
    assert not (data_dir / "gone-0").exists()


def test_produced_data_deleted_by_records_and_by_retention(broker_factory) -> None:
    broker = broker_factory(overrides=["log.retention.check.interval.ms=200"])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics(
        [NewTopic("aging", 1, 1, config={"segment.bytes": "1024"}), NewTopic("trimmed", 1, 1)]
    )
    assert all(error_of(f) is None for f in created.values())
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(12):  # one batch each, about three to a segment
        producer.produce("aging", value=b"x" * 200, key=str(i).encode(), timestamp=hour_ago)
        producer.flush(10)
    producer.produce("aging", value=b"fresh")
    for i in range(10):
        producer.produce("trimmed", value=str(i).encode())
    assert producer.flush(10) == 0

    [deleted] = admin.delete_records([TopicPartition("trimmed", 0, 4)]).values()
    assert deleted.result(timeout=30).low_watermark == 4
    [deleted] = admin.delete_records([TopicPartition("trimmed", 0, -1)]).values()  # -1: the high watermark
    assert deleted.result(timeout=30).low_watermark == 10

    segments = sorted(p.name for p in (broker.data_dir / "aging-0").glob("*.log"))
    assert len(segments) >= 4
    changes = ConfigResource(
        "topic",
        "aging",
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("file.delete.delay.ms", "0", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    assert error_of(admin.incremental_alter_configs([changes])[changes]) is None
    [kept] = wait_for(
        "one segment left in aging-0",
        lambda: (
            len(logs := sorted(p.name for p in (broker.data_dir / "aging-0").glob("*.log"))) == 1 and logs
        ),
        10,
    )
    # Every segment of hour-old batches went; the one holding the fresh batch (offset 12) stayed.
    assert 0 < int(kept[:20]) <= 12
    earliest = admin.list_offsets({TopicPartition("aging", 0): OffsetSpec.earliest()})
    assert [f.result(timeout=30).offset for f in earliest.values()] == [int(kept[:20])]


# --- every version and error path with kcli's own client, broker in this process -------------------


def test_create_topics_every_version(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        low, high = kio_versions(19)
        for version in range(low, high + 1):
            name = f"v{version}"
            response = await client.send(create_topics(version, [(name, 2, 1, {"retention.ms": "1000"})]))
            [result] = response.topics
            assert (result.name, result.error_code, result.error_message) == (name, ErrorCode.none, None)
            info = broker.state.image.topic(name)
            assert info is not None and len(info.partitions) == 2
            if version >= 5:
                assert (result.num_partitions, result.replication_factor) == (2, 1)
                configs = {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}
                assert configs["retention.ms"] == ("1000", 1, False)
                assert configs["segment.bytes"] == ("1073741824", 5, False)
            if version >= 7:
                assert result.topic_id == info.topic_id

        # validate_only: a full answer, nothing created.
        response = await client.send(create_topics(high, [("dry", 3, 1, {})], validate_only=True))
        assert response.topics[0].error_code == ErrorCode.none and response.topics[0].num_partitions == 3
        assert broker.state.image.topic("dry") is None

        # Defaults (-1) and a manual assignment.
        request = create_topics(
            high, [("defaults", -1, -1, {})], assignments={"placed": [(0, [1]), (1, [1])]}
        )
        response = await client.send(request)
        assert [(t.name, t.error_code, t.num_partitions) for t in response.topics] == [
            ("defaults", ErrorCode.none, 1),
            ("placed", ErrorCode.none, 2),
        ]

        # The KRaft controller does not perform an operation whose deadline (timeout) has passed.
        response = await client.send(
            create_topics(high, [("late", 1, 1, {}), ("late", 1, 1, {})], timeout_ms=0)
        )
        assert response.topics[0].error_code == ErrorCode.invalid_request  # only duplicates: no deadline
        response = await client.send(
            create_topics(high, [("late", 1, 1, {}), ("later", 1, 1, {})], timeout_ms=0)
        )
        assert [(t.name, t.error_code, t.error_message) for t in response.topics] == [
            ("late", ErrorCode.request_timed_out, None),
            ("later", ErrorCode.request_timed_out, None),
        ]
        assert broker.state.image.topic("late") is None

        response = await client.send(
            create_topics(
                high,
                [
                    ("twice", 1, 1, {}),
                    ("twice", 1, 1, {}),
                    ("__cluster_metadata", 1, 1, {}),
                    ("nulls", 1, 1, {"retention.ms": None}),
                    ("v2", 1, 1, {}),
                ],
            )
        )
        assert {t.name: (t.error_code, t.error_message) for t in response.topics} == {
            "twice": (ErrorCode.invalid_request, "Duplicate topic name."),
            "__cluster_metadata": (
                ErrorCode.invalid_request,
                "Creation of internal topic __cluster_metadata is prohibited.",
            ),
            "nulls": (ErrorCode.invalid_config, "Null value not supported for topic configs: retention.ms"),
            "v2": (ErrorCode.topic_already_exists, "Topic 'v2' already exists."),
        }
        assert all(t.num_partitions == -1 and t.configs == () for t in response.topics)
        assert (await client.send(create_topics(high, []))).topics == ()

    in_process(tmp_path, run)


def test_delete_topics_every_version(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        low, high = kio_versions(20)
        for version in range(low, high + 1):
            await client.send(create_topics(7, [(f"d{version}", 1, 1, {})]))
            response = await client.send(delete_topics(version, [f"d{version}", "nope"]))
            results = {r.name: r for r in response.responses}
            assert results[f"d{version}"].error_code == ErrorCode.none
            assert results["nope"].error_code == ErrorCode.unknown_topic_or_partition
            if version >= 5:
                assert results["nope"].error_message == "This server does not host this topic-partition."
            assert broker.state.image.topic(f"d{version}") is None
            assert not (tmp_path / "data" / f"d{version}-0").exists()

        await client.send(create_topics(7, [("byid", 1, 1, {}), ("both", 1, 1, {}), ("late", 1, 1, {})]))
        byid = broker.state.image.topic("byid").topic_id
        both = broker.state.image.topic("both").topic_id
        unknown = uuid.uuid4()
        response = await client.send(
            delete_topics(
                6,
                [
                    (None, byid),
                    ("both", both),
                    (None, ZERO_UUID),
                    (None, unknown),
                    ("twice", None),
                    ("twice", None),
                ],
            )
        )
        assert {
            (r.name or "", r.topic_id or ZERO_UUID, r.error_code, r.error_message) for r in response.responses
        } == set(
            [
                ("byid", byid, ErrorCode.none, None),
                (
                    "both",
                    both,
                    ErrorCode.invalid_request,
                    "You may not specify both topic name and topic id.",
                ),
                ("", ZERO_UUID, ErrorCode.invalid_request, "Neither topic name nor id were specified."),
                ("", unknown, ErrorCode.unknown_topic_id, "This server does not host this topic ID."),
                ("twice", ZERO_UUID, ErrorCode.invalid_request, "Duplicate topic name."),
            ]
        )
        assert broker.state.image.topic("byid") is None and broker.state.image.topic("both") is not None

        response = await client.send(delete_topics(6, ["late"], timeout_ms=0))
        assert [(r.name, r.error_code) for r in response.responses] == [("late", ErrorCode.request_timed_out)]
        assert broker.state.image.topic("late") is not None

    in_process(tmp_path, run)


def test_delete_topics_disabled(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        await client.send(create_topics(7, [("kept", 1, 1, {})]))
        for version in range(1, 7):
            response = await client.send(delete_topics(version, ["kept", "kept"]))
            expected = ErrorCode.invalid_request if version < 3 else ErrorCode.topic_deletion_disabled
            assert [r.error_code for r in response.responses] == [expected, expected]
        assert broker.state.image.topic("kept") is not None

    in_process(tmp_path, run, {"delete.topic.enable": "false"})


def test_create_partitions_every_version(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        await client.send(create_topics(7, [("grow", 1, 1, {})]))
        low, high = kio_versions(37)
        for version in range(low, high + 1):
            response = await client.send(create_partitions(version, [("grow", version + 2, None)]))
            assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
                ("grow", ErrorCode.none, None)
            ]
        assert len(broker.state.image.topic("grow").partitions) == high + 2
        assert broker.node.logs.get_log("grow", high + 1) is not None

        response = await client.send(create_partitions(high, [("grow", 9, None)], validate_only=True))
        assert response.results[0].error_code == ErrorCode.none
        assert len(broker.state.image.topic("grow").partitions) == high + 2

        response = await client.send(
            create_partitions(
                high,
                [("grow", 9, [[1]]), ("twice", 2, None), ("twice", 3, None), ("missing", 2, None)],
            )
        )
        assert {r.name: (r.error_code, r.error_message) for r in response.results} == {
            "grow": (
                ErrorCode.invalid_replica_assignment,
                "Attempted to add 4 additional partition(s), but only 1 assignment(s) were specified.",
            ),
            "twice": (ErrorCode.invalid_request, "Duplicate topic name."),
            "missing": (ErrorCode.unknown_topic_or_partition, None),
        }
        response = await client.send(create_partitions(high, [("grow", 9, None)], timeout_ms=0))
        assert response.results[0].error_code == ErrorCode.request_timed_out
        assert len(broker.state.image.topic("grow").partitions) == high + 2

    in_process(tmp_path, run)


def test_describe_configs_every_version(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        await client.send(create_topics(7, [("described", 1, 1, {"retention.ms": "5000"})]))
        low, high = kio_versions(32)
        for version in range(low, high + 1):
            request = describe_configs(
                version,
                [(TOPIC, "described", None), (BROKER, "1", ["log.retention.ms", "log.retention.hours"])],
            )
            response = await client.send(request)
            topic, node = response.results
            assert (topic.error_code, topic.resource_type, topic.resource_name) == (
                ErrorCode.none,
                TOPIC,
                "described",
            )
            configs = {c.name: c for c in topic.configs}
            assert [c.name for c in topic.configs] == sorted(configs)
            retention = configs["retention.ms"]
            assert (
                retention.value,
                retention.config_source,
                retention.read_only,
                retention.is_sensitive,
            ) == (
                "5000",
                1,
                False,
                False,
            )
            assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
                ("retention.ms", "5000", 1),
                ("log.retention.ms", "600000", 4),
                ("log.retention.hours", "168", 5),
            ]
            # A property set in the broker's configuration is the topic's static source.
            assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == ("1048576", 4)
            assert [(s.name, s.source) for s in configs["segment.bytes"].synonyms] == [
                ("log.segment.bytes", 4),
                ("log.segment.bytes", 5),
            ]
            assert [(c.name, c.value, c.config_source, c.read_only) for c in node.configs] == [
                ("log.retention.hours", "168", 5, True),
                ("log.retention.ms", "600000", 4, False),
            ]
            if version >= 3:
                assert (retention.config_type, configs["cleanup.policy"].config_type) == (5, 7)
                assert retention.documentation is None

        request = describe_configs(
            high, [(TOPIC, "described", ["min.cleanable.dirty.ratio"])], documentation=True
        )
        [result] = (await client.send(request)).results
        [entry] = result.configs
        assert (entry.value, entry.config_type) == ("0.5", 6)
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
            ("log.cleaner.min.cleanable.ratio", "0.5", 5)
        ]
        assert entry.documentation

        request = describe_configs(high, [(BROKER, "", None)])
        # the cluster-level defaults: only what formatting with ELR on writes, as Kafka 4.1 does
        defaults = (await client.send(request)).results[0].configs
        assert [(c.name, c.value, c.config_source) for c in defaults] == [("min.insync.replicas", "1", 3)]

        errors = describe_configs(
            high,
            [
                (TOPIC, "missing", None),
                (TOPIC, "bad/name", None),
                (BROKER, "2", None),
                (BROKER, "x", None),
                (BROKER, " 1", None),
                (BROKER_LOGGER, "1", None),
            ],
        )
        assert [(r.error_code, r.error_message, r.configs) for r in (await client.send(errors)).results] == [
            (ErrorCode.unknown_topic_or_partition, None, ()),
            (
                ErrorCode.invalid_topic_exception,
                "Topic name is invalid: 'bad/name' contains one or more characters other than ASCII "
                "alphanumerics, '.', '_' and '-'",
                (),
            ),
            (
                ErrorCode.invalid_request,
                "Unexpected broker id, expected 1 or empty string, but received 2",
                (),
            ),
            (ErrorCode.invalid_request, "Broker id must be an integer, but it is: x", ()),
            (ErrorCode.invalid_request, "Broker id must be an integer, but it is:  1", ()),
            (ErrorCode.invalid_request, "Unsupported resource type: BROKER_LOGGER", ()),
        ]
        # An unknown resource type fails the whole request, as Kafka's ConfigHelper does.
        response = await client.send(describe_configs(high, [(TOPIC, "described", None), (99, "x", None)]))
        assert [r.error_code for r in response.results] == [ErrorCode.invalid_request] * 2

    in_process(tmp_path, run, {"log.retention.ms": "600000", "log.segment.bytes": "1048576"})


def test_alter_configs_every_version_and_error(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        await client.send(
            create_topics(7, [("altered", 1, 1, {"retention.ms": "5000"}), ("other", 1, 1, {})])
        )
        image = lambda: broker.state.image  # noqa: E731
        low, high = kio_versions(44)
        for version in range(low, high + 1):
            ops = [("segment.ms", SET, str(1000 + version)), ("cleanup.policy", APPEND, "compact")]
            response = await client.send(incremental_alter_configs(version, [(TOPIC, "altered", ops)]))
            assert [(r.error_code, r.resource_name) for r in response.responses] == [
                (ErrorCode.none, "altered")
            ]
            assert image().topic_config("altered")["segment.ms"] == str(1000 + version)
        assert image().topic_config("altered")["cleanup.policy"] == "delete,compact"
        log = broker.node.logs.get_log("altered", 0)
        assert (log.config.segment_ms, log.config.compact) == (1000 + high, True)

        low, high = kio_versions(33)
        for version in range(low, high + 1):
            configs = [("retention.bytes", str(4096 * (version + 1)))]
            response = await client.send(alter_configs(version, [(TOPIC, "altered", configs)]))
            assert response.responses[0].error_code == ErrorCode.none
            assert image().topic_config("altered") == {"retention.bytes": str(4096 * (version + 1))}
        assert broker.node.logs.get_log("altered", 0).config.retention_bytes == 4096 * (high + 1)

        response = await client.send(
            incremental_alter_configs(
                1, [(TOPIC, "altered", [("retention.ms", SET, "1")])], validate_only=True
            )
        )
        assert response.responses[0].error_code == ErrorCode.none
        assert "retention.ms" not in image().topic_config("altered")

        cases = [
            (TOPIC, "other", [("retention.ms", SET, "1")]),
            (TOPIC, "other", [("retention.ms", SET, "2")]),
            (TOPIC, "altered", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]),
            (TOPIC, "altered", [("retention.ms", SET, None), ("segment.ms", APPEND, None)]),
            (TOPIC, "altered", [("retention.ms", 7, "1")]),
            (TOPIC, "altered", [("retention.ms", APPEND, "1")]),
            (TOPIC, "altered", [("cleanup.policy", SET, "sometimes")]),
            (BROKER, "1", [("num.partitions", SET, "3")]),
            (BROKER, "", [("log.retention.ms", DELETE, None)]),
            (BROKER, "2", [("num.partitions", SET, "3")]),
            (BROKER, "y", [("num.partitions", SET, "3")]),
            (BROKER_LOGGER, "1", [("kafka", SET, "DEBUG")]),
            (99, "z", []),
        ]
        response = await client.send(incremental_alter_configs(1, cases))
        assert [(r.error_code, r.error_message) for r in response.responses] == [
            (ErrorCode.invalid_request, "Each resource must appear at most once."),
            (ErrorCode.invalid_request, "Each resource must appear at most once."),
            (ErrorCode.invalid_request, "Each resource must appear at most once."),
            (ErrorCode.invalid_request, "Each resource must appear at most once."),
            (ErrorCode.invalid_request, "Each resource must appear at most once."),
            (ErrorCode.invalid_request, "Each resource must appear at most once."),
            (ErrorCode.invalid_request, "Each resource must appear at most once."),
            (ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(num.partitions)"),
            (ErrorCode.none, None),
            (ErrorCode.invalid_request, "Unexpected broker id, expected 1, but received 2"),
            (ErrorCode.invalid_request, "Node id must be an integer, but it is: y"),
            (ErrorCode.invalid_request, "Unsupported resource type: BROKER_LOGGER"),
            (ErrorCode.invalid_request, "Unknown resource type 99"),
        ]
        one_each = [
            [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
            [("retention.ms", SET, None), ("segment.ms", APPEND, None), ("segment.ms", DELETE, None)],
            [("retention.ms", 7, "1")],
            [("retention.ms", APPEND, "1")],
            [("cleanup.policy", SET, "sometimes")],
        ]
        expected = [
            (ErrorCode.invalid_request, "Error due to duplicate config keys"),
            (ErrorCode.invalid_request, "Error due to duplicate config keys"),
            (ErrorCode.invalid_request, "Unknown operations type 7"),
            (ErrorCode.invalid_config, "Can't APPEND to key retention.ms because its type is not LIST."),
            (ErrorCode.invalid_config, None),
        ]
        for ops, (code, message) in zip(one_each, expected, strict=True):
            [result] = (await client.send(incremental_alter_configs(1, [(TOPIC, "other", ops)]))).responses
            assert result.error_code == code
            assert message is None or result.error_message == message
        [result] = (
            await client.send(incremental_alter_configs(1, [(TOPIC, "other", [("retention.ms", SET, None)])]))
        ).responses
        assert result.error_message == "Null value not supported for : retention.ms"
        assert image().topic_config("other") == {}

        legacy_cases = [
            (TOPIC, "other", [("retention.ms", None)]),
            (TOPIC, "missing", [("retention.ms", "10")]),
            (BROKER, "1", []),
            (BROKER, "", [("log.retention.hours", "10")]),
            (BROKER_LOGGER, "1", []),
        ]
        response = await client.send(alter_configs(2, legacy_cases))
        assert [(r.error_code, r.error_message) for r in response.responses] == [
            (ErrorCode.invalid_request, "Null value not supported for : retention.ms"),
            (ErrorCode.unknown_topic_or_partition, "The topic 'missing' does not exist."),
            (ErrorCode.none, None),
            (ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(log.retention.hours)"),
            (ErrorCode.invalid_request, "Unknown resource type 8"),
        ]

    in_process(tmp_path, run)


def test_delete_records_and_describe_log_dirs(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        await client.send(
            create_topics(7, [("ledger", 2, 1, {}), ("compacted", 1, 1, {"cleanup.policy": "compact"})])
        )
        await client.send(create_topics(7, [("__consumer_offsets", 1, 1, {})]))
        ledger = broker.node.logs.get_log("ledger", 0)
        leader = broker.node.replicas.partition("ledger", 0)  # appends go through the partition
        now = int(time.time() * 1000)
        for _ in range(4):
            leader.append_records_to_leader(batch(5, now), required_acks=1, now_ms=now)
        assert (ledger.log_end_offset, ledger.high_watermark) == (20, 20)

        low, high = kio_versions(21)
        for version in range(low, high + 1):
            request = delete_records(version, {"ledger": [(0, 3 + version)]})
            [topic] = (await client.send(request)).topics
            assert [(p.partition_index, p.error_code, p.low_watermark) for p in topic.partitions] == [
                (0, ErrorCode.none, 3 + version)
            ]
        assert ledger.log_start_offset == 3 + high

        request = delete_records(
            high,
            {
                "ledger": [(0, 2), (0, 25), (1, -1)],
                "compacted": [(0, 0)],
                "__consumer_offsets": [(0, 0)],
                "missing": [(0, 0)],
            },
        )
        results = {
            (t.name, p.partition_index): (p.error_code, p.low_watermark)
            for t in (await client.send(request)).topics
            for p in t.partitions
        }
        assert results == {
            ("ledger", 0): (ErrorCode.offset_out_of_range, -1),  # the last offset of a partition wins
            ("ledger", 1): (ErrorCode.none, 0),
            ("compacted", 0): (ErrorCode.policy_violation, -1),
            ("__consumer_offsets", 0): (ErrorCode.invalid_topic_exception, -1),
            ("missing", 0): (ErrorCode.unknown_topic_or_partition, -1),
        }
        [topic] = (await client.send(delete_records(high, {"ledger": [(0, -1), (1, -2)]}))).topics
        assert [(p.error_code, p.low_watermark) for p in topic.partitions] == [
            (ErrorCode.none, 20),
            (ErrorCode.offset_out_of_range, -1),
        ]

        log_dir = os.path.abspath(tmp_path / "data")
        low, high = kio_versions(35)
        for version in range(low, high + 1):
            response = await client.send(describe_log_dirs(version, None))
            [result] = response.results
            assert (result.error_code, result.log_dir) == (ErrorCode.none, log_dir)
            sizes = {
                (t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
                for t in result.topics
                for p in t.partitions
            }
            assert sizes[("ledger", 0)] == (ledger.size_bytes(), 0, False)
            assert sizes[("ledger", 1)] == (0, 0, False)
            assert set(sizes) == {("ledger", 0), ("ledger", 1), ("compacted", 0), ("__consumer_offsets", 0)}
            if version >= 4:
                volume = os.statvfs(log_dir)
                assert result.total_bytes == volume.f_blocks * volume.f_frsize
                assert 0 < result.usable_bytes <= result.total_bytes
        response = await client.send(describe_log_dirs(high, {"ledger": [1, 7], "missing": [0]}))
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in response.results[0].topics] == [
            ("ledger", [1])
        ]

    in_process(tmp_path, run)


def test_retention_set_through_incremental_alter_configs_deletes_old_segments(tmp_path: Path) -> None:
    async def run(broker: Broker, client: KafkaClient) -> None:
        await client.send(create_topics(7, [("aging", 1, 1, {"segment.bytes": "2000"})]))
        log = broker.node.logs.get_log("aging", 0)
        leader = broker.node.replicas.partition("aging", 0)  # appends go through the partition
        now = int(time.time() * 1000)
        hour_ago = now - 3_600_000
        for _ in range(6):  # ~1 KiB batches: two per segment
            leader.append_records_to_leader(batch(8, hour_ago), required_acks=1, now_ms=now)
        leader.append_records_to_leader(batch(8, now), required_acks=1, now_ms=now)
        assert len(log.segments) >= 3 and log.log_start_offset == 0
        names = {p.name for p in log.dir.iterdir() if p.suffix == ".log"}

        ops = [("retention.ms", SET, "60000"), ("file.delete.delay.ms", SET, "0")]
        response = await client.send(incremental_alter_configs(1, [(TOPIC, "aging", ops)]))
        assert response.responses[0].error_code == ErrorCode.none
        await wait_for_async("aging-0's log start at 48", lambda: log.log_start_offset >= 48, 10, 0.05)
        assert log.log_start_offset == 48  # every segment of hour-old batches went, the fresh one stayed
        assert log.segments[0].base_offset == 48
        remaining = {p.name for p in log.dir.iterdir() if p.suffix == ".log"}
        assert len(remaining) < len(names)
        assert all(int(name[:20]) >= 48 for name in remaining)

    in_process(tmp_path, run, {"log.retention.check.interval.ms": "100"})


# --- helpers ---------------------------------------------------------------------------------------


def error_of(future) -> ErrorCode | None:
    """The Kafka error a stock-client future ended with (None: success)."""
    exc = future.exception(timeout=30)
    if exc is None:
        return None
    code = exc.args[0].code()
    assert code >= 0, f"a client-side error, not the broker's: {exc}"
    return ErrorCode(code)


def describe(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs([resource]).values()
    return future.result(timeout=30)


def batch(count: int, timestamp: int) -> bytes:
    return build_batch([(timestamp, b"key", b"v" * 100) for _ in range(count)])


def in_process(tmp_path: Path, body, settings: dict[str, str] | None = None) -> None:
    async def main() -> None:
        async with in_process_broker(tmp_path, settings or {}) as (broker, bootstrap):
            async with await KafkaClient.connect(bootstrap) as client:
                await body(broker, client)

    asyncio.run(main())


@contextlib.asynccontextmanager
async def in_process_broker(tmp_path: Path, settings: dict[str, str]) -> AsyncIterator[tuple[Broker, str]]:
    config = BrokerConfig(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"), **settings}
    )
    broker = Broker(config)
    host, port = await broker.start()
    try:
        yield broker, f"{host}:{port}"
    finally:
        await broker.shutdown(grace=5)


def _request(api_key: int, version: int, **values: object) -> object:
    return build(request_type(api_key, version), **values)


def _nested(api_key: int, version: int, entity: str, /, **values: object) -> object:
    return build(nested_type(request_type(api_key, version), entity), **values)


def create_topics(
    version: int,
    topics: list[tuple[str, int, int, dict[str, str | None]]],
    *,
    assignments: dict[str, list[tuple[int, list[int]]]] | None = None,
    validate_only: bool = False,
    timeout_ms: int = 30000,
) -> object:
    entries = [
        _nested(
            19,
            version,
            "CreatableTopic",
            name=name,
            num_partitions=partitions,
            replication_factor=replication,
            assignments=(),
            configs=tuple(
                _nested(19, version, "CreatableTopicConfig", name=k, value=v) for k, v in configs.items()
            ),
        )
        for name, partitions, replication, configs in topics
    ]
    for name, placed in (assignments or {}).items():
        entries.append(
            _nested(
                19,
                version,
                "CreatableTopic",
                name=name,
                num_partitions=-1,
                replication_factor=-1,
                assignments=tuple(
                    _nested(19, version, "CreatableReplicaAssignment", partition_index=i, broker_ids=tuple(b))
                    for i, b in placed
                ),
                configs=(),
            )
        )
    return _request(
        19,
        version,
        topics=tuple(entries),
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        validate_only=validate_only,
    )


def delete_topics(version: int, topics: list, *, timeout_ms: int = 30000) -> object:
    timeout = datetime.timedelta(milliseconds=timeout_ms)
    if version < 6:
        return _request(20, version, topic_names=tuple(topics), timeout=timeout)
    states = []
    for topic in topics:
        name, topic_id = (topic, None) if isinstance(topic, str) else topic
        states.append(_nested(20, version, "DeleteTopicState", name=name, topic_id=topic_id or ZERO_UUID))
    return _request(20, version, topics=tuple(states), timeout=timeout)


def create_partitions(
    version: int,
    topics: list[tuple[str, int, list[list[int]] | None]],
    *,
    validate_only: bool = False,
    timeout_ms: int = 30000,
) -> object:
    entries = tuple(
        _nested(
            37,
            version,
            "CreatePartitionsTopic",
            name=name,
            count=count,
            assignments=None
            if placed is None
            else tuple(
                _nested(37, version, "CreatePartitionsAssignment", broker_ids=tuple(b)) for b in placed
            ),
        )
        for name, count, placed in topics
    )
    return _request(
        37,
        version,
        topics=entries,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        validate_only=validate_only,
    )


def describe_configs(version: int, resources: list, *, documentation: bool = False) -> object:
    entries = tuple(
        _nested(
            32,
            version,
            "DescribeConfigsResource",
            resource_type=kind,
            resource_name=name,
            configuration_keys=None if keys is None else tuple(keys),
        )
        for kind, name, keys in resources
    )
    return _request(
        32, version, resources=entries, include_synonyms=True, include_documentation=documentation
    )


def incremental_alter_configs(version: int, resources: list, *, validate_only: bool = False) -> object:
    entries = tuple(
        _nested(
            44,
            version,
            "AlterConfigsResource",
            resource_type=kind,
            resource_name=name,
            configs=tuple(
                _nested(44, version, "AlterableConfig", name=k, config_operation=op, value=v)
                for k, op, v in ops
            ),
        )
        for kind, name, ops in resources
    )
    return _request(44, version, resources=entries, validate_only=validate_only)


def alter_configs(version: int, resources: list, *, validate_only: bool = False) -> object:
    entries = tuple(
        _nested(
            33,
            version,
            "AlterConfigsResource",
            resource_type=kind,
            resource_name=name,
            configs=tuple(_nested(33, version, "AlterableConfig", name=k, value=v) for k, v in configs),
        )
        for kind, name, configs in resources
    )
    return _request(33, version, resources=entries, validate_only=validate_only)


def delete_records(version: int, topics: dict[str, list[tuple[int, int]]]) -> object:
    entries = tuple(
        _nested(
            21,
            version,
            "DeleteRecordsTopic",
            name=name,
            partitions=tuple(
                _nested(21, version, "DeleteRecordsPartition", partition_index=i, offset=o)
                for i, o in offsets
            ),
        )
        for name, offsets in topics.items()
    )
    return _request(21, version, topics=entries, timeout=datetime.timedelta(seconds=5))


def describe_log_dirs(version: int, topics: dict[str, list[int]] | None) -> object:
    entries = None
    if topics is not None:
        entries = tuple(
            _nested(35, version, "DescribableLogDirTopic", topic=name, partitions=tuple(parts))
            for name, parts in topics.items()
        )
    return _request(35, version, topics=entries)


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
