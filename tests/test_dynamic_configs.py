"""Dynamic broker configs (KIP-226) on a real broker, through confluent-kafka's admin client and `kcli configs`.

1. Per broker ("1") and cluster-wide (""): IncrementalAlterConfigs and legacy AlterConfigs store them,
   DescribeConfigs shows the value in force with its source and synonyms in Kafka's order (dynamic
   for this broker, dynamic default, static, default), read_only false for what is dynamic; a topic
   with no override takes the dynamic log default. They survive a restart that loads them from a
   metadata snapshot.
2. What Kafka refuses, refused with its error code and sentence: a static property, a bad type or
   range, log.retention.ms 0, a cleaner thread count more than doubled, a per-broker-only property
   at the cluster-wide level.
3. A dynamic log default applies to the logs at once: retention and roll set cluster-wide delete an
   old segment of a topic that has no overrides.
4. `kcli configs alter/describe --entity-type brokers` (--entity-name and --entity-default) end to end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, BrokerProcess, kcli_env, start_broker, stop_cleanly
from waiting import wait_for

pytestmark = pytest.mark.timeout(120)

DYNAMIC_BROKER = "DYNAMIC_BROKER_CONFIG"
DYNAMIC_DEFAULT = "DYNAMIC_DEFAULT_BROKER_CONFIG"
STATIC = "STATIC_BROKER_CONFIG"
DEFAULT = "DEFAULT_CONFIG"
STATIC_OVERRIDES = (
    "log.cleaner.backoff.ms=20000",
    "log.retention.check.interval.ms=200",
    "metadata.log.max.record.bytes.between.snapshots=1",  # every commit is followed by a snapshot
)


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def alter(client: Any, name: str, **ops: str | None) -> BaseException | None:
    """IncrementalAlterConfigs on broker `name` through confluent-kafka (dots as underscores; None deletes)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(
            key.replace("_", "."),
            value,
            incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET,
        )
        for key, value in ops.items()
    ]
    resource = ConfigResource("broker", name, incremental_configs=entries)
    return client.incremental_alter_configs([resource])[resource].exception(30)


def alter_defaults(bootstrap: str, **configs: str) -> None:
    """The cluster-wide defaults (resource name "", which librdkafka cannot name) through kcli's client."""
    from kcli.cluster import Cluster
    from ops.configs import BROKER_DEFAULTS, ResourceType, alter_configs

    async def run() -> None:
        async with await Cluster.connect(broker_bootstrap := bootstrap, request_timeout=30.0) as cluster:
            assert broker_bootstrap
            await alter_configs(
                cluster,
                ResourceType.BROKER,
                BROKER_DEFAULTS,
                set_configs={k.replace("_", "."): v for k, v in configs.items()},
            )

    asyncio.run(run())


def describe(bootstrap: str, kind: str, name: str) -> dict[str, Any]:
    """DescribeConfigs with synonyms through kcli's client: {name: ConfigEntry}."""
    from kcli.cluster import Cluster
    from ops.configs import ResourceType, describe_configs

    async def run() -> Any:
        async with await Cluster.connect(bootstrap, request_timeout=30.0) as cluster:
            return await describe_configs(cluster, [(ResourceType[kind.upper()], name)])

    [described] = asyncio.run(run())
    return {e.name: e for e in described.entries}


def synonyms(entry: Any) -> list[tuple[str, str | None, str]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def error_of(exception: BaseException | None) -> tuple[Any, str] | None:
    if exception is None:
        return None
    error = exception.args[0]
    return error.code(), error.str()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_broker_configs_per_broker_and_default_persisted(broker_factory: Any, tmp_path: Path) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigResource, NewTopic

    data_dir = tmp_path / "data"
    broker = broker_factory(overrides=STATIC_OVERRIDES, data_dir=data_dir)
    client = admin(broker.bootstrap)
    client.create_topics([NewTopic("plain", 1, 1)])["plain"].result(30)

    assert alter(client, "1", leader_replication_throttled_rate="1000000", log_retention_ms="3600000") is None
    alter_defaults(
        broker.bootstrap, follower_replication_throttled_rate="2000000", log_retention_ms="7200000"
    )
    assert alter(client, "1", my_custom_setting="x") is None  # Kafka keeps unknown names as custom properties

    def check(bootstrap: str) -> None:
        node, defaults = describe(bootstrap, "broker", "1"), describe(bootstrap, "broker", "")
        retention = node["log.retention.ms"]
        assert (retention.value, retention.source, retention.read_only) == ("3600000", DYNAMIC_BROKER, False)
        assert synonyms(retention) == [
            ("log.retention.ms", "3600000", DYNAMIC_BROKER),
            ("log.retention.ms", "7200000", DYNAMIC_DEFAULT),
            ("log.retention.hours", "168", DEFAULT),
        ]
        leader = node["leader.replication.throttled.rate"]
        assert (leader.value, leader.source) == ("1000000", DYNAMIC_BROKER)
        follower = node["follower.replication.throttled.rate"]
        assert (follower.value, follower.source, synonyms(follower)) == (
            "2000000",
            DYNAMIC_DEFAULT,
            [("follower.replication.throttled.rate", "2000000", DYNAMIC_DEFAULT)],
        )
        backoff = node["log.cleaner.backoff.ms"]
        assert (backoff.value, backoff.source, backoff.read_only) == ("20000", STATIC, False)
        assert node["log.dirs"].read_only and node["num.partitions"].read_only
        custom = node["my.custom.setting"]
        assert (custom.value, custom.is_sensitive, custom.source) == (None, True, DYNAMIC_BROKER)
        assert sorted((e.name, e.value, e.source) for e in defaults.values()) == [
            ("follower.replication.throttled.rate", "2000000", DYNAMIC_DEFAULT),
            ("log.retention.ms", "7200000", DYNAMIC_DEFAULT),
            (
                "min.insync.replicas",
                "1",
                DYNAMIC_DEFAULT,
            ),  # ELR's bootstrap record (on by default, as in 4.1)
        ]
        assert synonyms(defaults["log.retention.ms"]) == [("log.retention.ms", "7200000", DYNAMIC_DEFAULT)]
        # A topic without an override takes the dynamic log default in force on this broker.
        topic = describe(bootstrap, "topic", "plain")
        assert (topic["retention.ms"].value, topic["retention.ms"].source) == ("3600000", DYNAMIC_BROKER)

    check(broker.bootstrap)

    # Refused as Kafka refuses them: INVALID_REQUEST with its sentence, nothing stored.
    refusals = {
        "log.dirs": ({"log_dirs": "/elsewhere"}, "Cannot update these configs dynamically: Set(log.dirs)"),
        "type": (
            {"leader_replication_throttled_rate": "fast"},
            "Invalid value fast for configuration leader.replication.throttled.rate: Not a number of type LONG",
        ),
        "range": (
            {"follower_replication_throttled_rate": "-1"},
            "Invalid value -1 for configuration follower.replication.throttled.rate: Value must be at least 0",
        ),
        "retention": (
            {"log_retention_ms": "0"},
            "requirement failed: log.retention.ms must be unlimited (-1) or, equal or greater than 1.",
        ),
        "threads": ({"log_cleaner_threads": "3"}, "Invalid dynamic configuration"),
    }
    for what, (ops, sentence) in refusals.items():
        assert error_of(alter(client, "1", **ops)) == (KafkaError.INVALID_REQUEST, sentence), what
    # A property Kafka lets only a broker's own level set, at the cluster-wide level:
    from kcli.errors import KcliError

    with pytest.raises(KcliError) as refused:
        alter_defaults(broker.bootstrap, listeners="PLAINTEXT://127.0.0.1:1")
    assert str(refused.value) == (
        "cannot alter the configs of the broker defaults: Cannot update these configs at default cluster "
        "level, broker id must be specified: Set(listeners)."
    )
    # (Another broker's id: librdkafka sends that resource to that broker; tests/test_admin_apis.py sends
    # it to this one, which answers Kafka's "Unexpected broker id".)

    # Legacy AlterConfigs replaces a level's whole set.
    legacy = ConfigResource("broker", "1", set_config={"log.retention.ms": "3600000"})
    assert client.alter_configs([legacy])[legacy].exception(30) is None
    assert sorted(
        e.name for e in describe(broker.bootstrap, "broker", "1").values() if e.source == DYNAMIC_BROKER
    ) == ["log.retention.ms"]
    assert alter(client, "1", leader_replication_throttled_rate="1000000", my_custom_setting="x") is None

    # A restart replays them from the metadata log (a snapshot, at one commit between snapshots).
    broker.stop()
    assert list((data_dir / "__cluster_metadata-0").glob("*.checkpoint"))
    broker = broker_factory(overrides=STATIC_OVERRIDES, data_dir=data_dir)
    check(broker.bootstrap)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that need no restart."""
    process = start_broker(tmp_path_factory.mktemp("shared"), overrides=STATIC_OVERRIDES)
    try:
        yield process
    finally:
        stop_cleanly(process)


def test_a_dynamic_log_default_applies_to_the_logs_at_once(shared: BrokerProcess) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = shared
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce("aging", b"old")
    assert producer.flush(30) == 0
    # Cluster-wide: roll a segment 100 ms after its first record, keep data one second.
    alter_defaults(broker.bootstrap, log_roll_ms="100", log_retention_ms="1000")
    time.sleep(0.2)  # the segment's first record must be older than log.roll.ms for the next append to roll
    producer.produce("aging", b"new")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "aging-marks"})
    try:
        wait_for(
            "the old segment deleted by the dynamic retention",
            lambda: consumer.get_watermark_offsets(TopicPartition("aging", 0), timeout=5)[0] >= 1,
            30,
        )
    finally:
        consumer.close()


def test_kcli_configs_brokers_end_to_end(shared: BrokerProcess) -> None:
    import subprocess
    import sys

    broker = shared

    def kcli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kcli", *args, "--bootstrap-server", broker.bootstrap],
            capture_output=True, text=True, env=kcli_env(), cwd=REPO, timeout=60,
        )  # fmt: skip

    rate = "leader.replication.throttled.rate"
    assert kcli("configs", "alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                f"{rate}=5000000").returncode == 0  # fmt: skip
    done = kcli("configs", "alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
                f"{rate}=1000000,log.cleaner.io.max.bytes.per.second=5000000.0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    described = kcli("configs", "describe", "--entity-type", "brokers", "--entity-name", "1")
    assert described.returncode == 0, described.stderr
    assert described.stdout.splitlines() == [
        "Dynamic configs for broker 1 are:",
        "  leader.replication.throttled.rate=1000000 sensitive=false "
        "synonyms={DYNAMIC_BROKER_CONFIG:leader.replication.throttled.rate=1000000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:leader.replication.throttled.rate=5000000}",
        "  log.cleaner.io.max.bytes.per.second=5000000.0 sensitive=false "
        "synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.io.max.bytes.per.second=5000000.0, "
        "DEFAULT_CONFIG:log.cleaner.io.max.bytes.per.second=1.7976931348623157E308}",
    ]
    defaults = kcli("configs", "describe", "--entity-type", "brokers", "--entity-default").stdout.splitlines()
    assert defaults[0] == "Default configs for brokers in the cluster are:"
    assert (
        f"  {rate}=5000000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=5000000}}"
        in defaults
    )
    refused = kcli("configs", "alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
                   "num.io.threads=4")  # fmt: skip
    assert (refused.returncode, refused.stderr.strip()) == (
        2,
        "kcli: cannot alter the configs of broker 1: Cannot update these configs dynamically: Set(num.io.threads).",
    )
    removed = kcli(
        "configs", "alter", "--entity-type", "brokers", "--entity-name", "1", "--delete-config", rate
    )
    assert removed.returncode == 0, removed.stderr
    assert rate not in {
        e.name for e in describe(broker.bootstrap, "broker", "1").values() if e.source == DYNAMIC_BROKER
    }
