"""`kcli topics` and `kcli configs` against a real broker, run through the real entry point (in this
process; one real `python -m kcli` process per command family); checked with confluent-kafka."""

from __future__ import annotations

import base64
import json
import subprocess

from cli_in_process import run_kcli
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from conftest import KCLI, free_port_range, kcli_env


def kcli(broker, *args: str, bootstrap: str | None = None) -> subprocess.CompletedProcess:
    """`kcli ARGS -b BOOTSTRAP` through kcli.cli.main.main in this process."""
    return run_kcli(*args, "-b", bootstrap or broker.bootstrap)


def kcli_process(broker, *args: str) -> subprocess.CompletedProcess:
    """`kcli ARGS -b BOOTSTRAP` as a real `python -m kcli` process: the entry point as installed."""
    return subprocess.run(
        [*KCLI, *args, "-b", broker.bootstrap], env=kcli_env(), capture_output=True, text=True, timeout=60
    )


def ok(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def refused(result: subprocess.CompletedProcess, sentence: str) -> None:
    """Exit status not 0, nothing on stdout, and exactly `kcli: <sentence>` on stderr (no traceback)."""
    assert result.returncode != 0, result.stdout
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"kcli: {sentence}"], result.stderr


def topic_id(broker, name: str) -> str:
    """The topic's id as Kafka's Uuid.toString prints it (URL-safe base64; librdkafka's str() is not URL-safe)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (description,) = admin.describe_topics(TopicCollection([name])).values()
    found = description.result(30).topic_id
    raw = b"".join(
        (bits & (1 << 64) - 1).to_bytes(8, "big")
        for bits in (found.get_most_significant_bits(), found.get_least_significant_bits())
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_create_list_describe_alter_delete(broker_factory):
    """At 3.9 (ELR off: no cluster-level min.insync.replicas), so a topic's Configs and
    --topics-with-overrides show its own overrides only; with ELR on, Kafka 4.1 lists that cluster-level
    value for every topic too (test_configs_describe_and_alter, and test_apache_kafka against Kafka)."""
    broker = broker_factory(extra_args=["--release-version", "3.9"])
    assert ok(kcli_process(broker, "topics", "create", "--topic", "orders", "--partitions", "3",
                   "--config", "cleanup.policy=compact", "--config", "segment.bytes=1000000")) == [
        "Created topic orders."
    ]  # fmt: skip
    assert ok(kcli(broker, "topics", "create", "--topic", "pay", "--replica-assignment", "1,1")) == [
        "Created topic pay."
    ]
    assert ok(kcli(broker, "topics", "create", "--topic", "audit")) == ["Created topic audit."]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_topics(timeout=30).topics
    assert len(listed["orders"].partitions) == 3
    assert len(listed["pay"].partitions) == 2
    assert len(listed["audit"].partitions) == 1  # the broker's num.partitions
    resource = ConfigResource("TOPIC", "orders")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "1000000"

    # an internal topic, made by a group's first commit: listed unless --exclude-internal
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    consumer.commit(offsets=[TopicPartition("orders", 0, 0)], asynchronous=False)
    consumer.close()
    assert ok(kcli(broker, "topics", "list")) == ["__consumer_offsets", "audit", "orders", "pay"]
    assert ok(kcli(broker, "topics", "list", "--exclude-internal")) == ["audit", "orders", "pay"]
    assert ok(kcli(broker, "topics", "list", "--topic", "o.*,pay")) == ["orders", "pay"]
    assert ok(kcli(broker, "topics", "list", "--topic", "ord")) == []  # whole names only
    assert [json.loads(line) for line in ok(kcli(broker, "topics", "list", "--exclude-internal", "-o", "json"))] == [
        {"topic": "audit"},
        {"topic": "orders"},
        {"topic": "pay"},
    ]  # fmt: skip

    orders_id = topic_id(broker, "orders")
    pay_id = topic_id(broker, "pay")
    # The broker offers DescribeTopicPartitions: ELR and last known ELR are shown, empty as ELR is
    # not in use (kafka-topics.sh against Kafka prints the same; N/A is for brokers without it).
    assert ok(kcli(broker, "topics", "describe", "--topic", "orders|pay")) == [
        f"Topic: orders\tTopicId: {orders_id}\tPartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,segment.bytes=1000000",
        *(
            f"\tTopic: orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: "
            for p in range(3)
        ),
        f"Topic: pay\tTopicId: {pay_id}\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: ",
        *(f"\tTopic: pay\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: " for p in range(2)),
    ]  # fmt: skip
    described = [
        json.loads(line)
        for line in ok(kcli(broker, "topics", "describe", "-o", "json", "--exclude-internal"))
    ]
    assert [d["topic"] for d in described] == ["audit", "orders", "pay"]
    assert described[1] == {
        "topic": "orders",
        "topic_id": orders_id,
        "internal": False,
        "partition_count": 3,
        "replication_factor": 1,
        "configs": {"cleanup.policy": "compact", "segment.bytes": "1000000"},
        "partitions": [
            {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1], "offline_replicas": [],
             "elr": [], "last_known_elr": []}
            for p in range(3)
        ],
    }  # fmt: skip
    assert ok(kcli(broker, "topics", "describe", "--topics-with-overrides", "--exclude-internal")) == [
        f"Topic: orders\tTopicId: {orders_id}\tPartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,segment.bytes=1000000"
    ]
    # one healthy node: nothing is under-replicated or unavailable (an offline partition needs a second node)
    assert ok(kcli(broker, "topics", "describe", "--under-replicated-partitions")) == []
    assert ok(kcli(broker, "topics", "describe", "--unavailable-partitions")) == []
    assert ok(kcli(broker, "topics", "describe", "--unavailable-partitions", "-o", "json")) == []
    assert ok(kcli(broker, "topics", "describe", "--under-min-isr-partitions")) == []
    # min.insync.replicas 1 (the default) and an ISR of one: every partition is at its minimum
    at_min = ok(kcli(broker, "topics", "describe", "--at-min-isr-partitions", "--topic", "orders"))
    assert [line.split("\t")[2] for line in at_min] == [f"Partition: {p}" for p in range(3)]

    assert ok(kcli(broker, "topics", "alter", "--topic", "orders", "--partitions", "5")) == [
        "Topic orders now has 5 partitions."
    ]
    assert len(admin.list_topics(timeout=30).topics["orders"].partitions) == 5
    assert ok(kcli(broker, "topics", "delete", "--topic", "pay|audit")) == [
        "Deleted topic audit.",
        "Deleted topic pay.",
    ]
    assert ok(kcli(broker, "topics", "delete", "--topic", "pay", "--if-exists")) == []
    assert sorted(admin.list_topics(timeout=30).topics) == ["__consumer_offsets", "orders"]


def test_describe_reads_the_elr_across_describe_topic_partitions_pages(broker_factory):
    """With max.request.partition.size.limit=2 the ELR of five partitions takes three pages: every
    partition line still has its (empty) ELR, none falls back to N/A."""
    broker = broker_factory(overrides=["max.request.partition.size.limit=2"])
    ok(kcli(broker, "topics", "create", "--topic", "a", "--partitions", "3"))
    ok(kcli(broker, "topics", "create", "--topic", "b", "--partitions", "2"))
    lines = [line for line in ok(kcli(broker, "topics", "describe")) if line.startswith("\t")]
    assert [line.split("\t")[1:3] for line in lines] == [
        [f"Topic: {t}", f"Partition: {p}"] for t, p in (("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1))
    ]
    assert all(line.endswith("\tElr: \tLastKnownElr: ") for line in lines), lines


def test_partition_line_says_n_a_without_describe_topic_partitions():
    """Metadata carries no ELR: the description then has None, printed N/A as kafka-topics.sh does."""
    from kcli.cli.topics import _partition_line
    from ops.topics import PartitionDescription

    without = PartitionDescription(0, 2, 5, (1, 2, 3), (2, 3), (1,), True)
    assert _partition_line("t", without) == (
        "\tTopic: t\tPartition: 0\tLeader: 2\tReplicas: 1,2,3\tIsr: 2,3\tElr: N/A\tLastKnownElr: N/A"
    )
    assert without.to_json()["elr"] is None and without.to_json()["last_known_elr"] is None
    with_elr = PartitionDescription(
        0, -1, 5, (1, 2, 3), (), (1, 2, 3), False, elr=(2,), last_known_elr=(3, 1)
    )
    assert _partition_line("t", with_elr).endswith(
        "\tLeader: none\tReplicas: 1,2,3\tIsr: \tElr: 2\tLastKnownElr: 3,1"
    )


def test_topics_bad_input_is_one_sentence(broker):
    ok(kcli(broker, "topics", "create", "--topic", "orders", "--partitions", "2"))
    # one refusal as a real process: the sentence and the status survive the installed entry point
    refused(kcli_process(broker, "topics", "create", "--topic", "orders"), "topic 'orders' already exists.")
    assert ok(kcli(broker, "topics", "create", "--topic", "orders", "--if-not-exists")) == []
    refused(
        kcli(broker, "topics", "create", "--topic", "t", "--config", "cleanup.policy=nope"),
        "cannot create topic 't': Invalid value 'nope' for configuration cleanup.policy: "
        "'nope' is not one of compact, delete.",
    )
    refused(
        kcli(broker, "topics", "create", "--topic", "t", "--config", "no.such.config=1"),
        "cannot create topic 't': Unknown topic config name: no.such.config.",
    )
    refused(
        kcli(broker, "topics", "create", "--topic", "t", "--config", "x"), "--config 'x' is not KEY=VALUE."
    )
    refused(
        kcli(broker, "topics", "create", "--topic", "t", "--partitions", "0"),
        "the number of partitions must be at least 1.",
    )
    refused(
        kcli(broker, "topics", "create", "--topic", "t", "--partitions", "2", "--replica-assignment", "1,1"),
        "--replica-assignment cannot be combined with --partitions or --replication-factor.",
    )
    refused(
        kcli(broker, "topics", "create", "--topic", "t", "--replica-assignment", "1:1"),
        "partition 0 lists broker 1 more than once.",
    )
    for command in (["describe"], ["delete"], ["alter", "--partitions", "3"]):
        refused(kcli(broker, "topics", *command, "--topic", "nosuch"), "topic 'nosuch' does not exist.")
    assert ok(kcli(broker, "topics", "describe", "--topic", "nosuch", "--if-exists")) == []
    refused(
        kcli(broker, "topics", "alter", "--topic", "orders", "--partitions", "1"),
        "cannot add partitions to topic 'orders': The topic orders currently has 2 partition(s); "
        "1 would not be an increase.",
    )
    refused(
        kcli(broker, "topics", "describe", "--topics-with-overrides", "--under-replicated-partitions"),
        "--topics-with-overrides cannot be combined with --under-replicated-partitions, --unavailable-partitions, "
        "--under-min-isr-partitions or --at-min-isr-partitions.",
    )
    refused(kcli(broker, "topics", "list", "--topic", "("), "'(' is not a valid regular expression: "
            "missing ), unterminated subpattern at position 0.")  # fmt: skip
    # a port nothing listens on: this worker's, below the ephemeral range (no connection takes it)
    closed = f"127.0.0.1:{free_port_range(1)}"
    result = kcli(broker, "topics", "list", bootstrap=closed)
    assert result.returncode != 0 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"kcli: cannot connect to {closed}: "), line
    # nothing above changed the topic
    assert (
        len(
            AdminClient({"bootstrap.servers": broker.bootstrap})
            .list_topics(timeout=30)
            .topics["orders"]
            .partitions
        )
        == 2
    )
    assert sorted(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics) == [
        "orders"
    ]


def test_configs_describe_and_alter(broker):
    ok(kcli(broker, "topics", "create", "--topic", "orders", "--config", "cleanup.policy=compact"))
    assert ok(kcli_process(broker, "configs", "describe", "--topic", "orders")) == [
        "Dynamic configs for topic orders are:",
        "  cleanup.policy=compact sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}",
    ]
    assert ok(
        kcli(broker, "configs", "alter", "--entity-type", "topics", "--entity-name", "orders",
             "--add-config", "retention.ms=60000,min.cleanable.dirty.ratio=0.1", "--delete-config", "cleanup.policy")
    ) == ["Completed updating config for topic orders."]  # fmt: skip
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("TOPIC", "orders")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "60000"
    assert configs["min.cleanable.dirty.ratio"].value == "0.1"
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default

    lines = ok(kcli(broker, "configs", "describe", "--entity-type", "topics", "--entity-name", "orders"))
    assert lines[0] == "Dynamic configs for topic orders are:"
    assert [line.split(" ")[2] for line in lines[1:]] == [
        "min.cleanable.dirty.ratio=0.1",
        "retention.ms=60000",
    ]
    every = ok(kcli(broker, "configs", "describe", "--topic", "orders", "--all"))
    assert every[0] == "All configs for topic orders are:"
    assert (
        "  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}" in every
    )
    assert len(every) - 1 == len(configs)
    (as_json,) = ok(kcli(broker, "configs", "describe", "--topic", "orders", "-o", "json"))
    assert json.loads(as_json)["configs"][1] == {
        "name": "retention.ms",
        "value": "60000",
        "source": "DYNAMIC_TOPIC_CONFIG",
        "sensitive": False,
        "read_only": False,
        "synonyms": [{"name": "retention.ms", "value": "60000", "source": "DYNAMIC_TOPIC_CONFIG"}],
    }
    assert ok(kcli(broker, "configs", "describe", "--entity-type", "brokers")) == [
        "Dynamic configs for broker 1 are:",
        "Default configs for brokers in the cluster are:",
        # written with ELR's bootstrap (ActivationRecordsGenerator), as on a Kafka 4.1 cluster
        "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}",
    ]
    assert (
        ok(kcli(broker, "configs", "describe", "--broker", "1", "--all"))[0]
        == "All configs for broker 1 are:"
    )

    refused(
        kcli_process(broker, "configs", "alter", "--topic", "orders", "--add-config", "retention.ms=soon"),
        "cannot alter the configs of topic 'orders': Invalid value 'soon' for configuration retention.ms: "
        "expected an integer.",
    )
    refused(
        kcli(broker, "configs", "alter", "--topic", "orders", "--delete-config", "segment.bytes"),
        "cannot delete segment.bytes: not set on topic 'orders'.",
    )
    refused(
        kcli(broker, "configs", "alter", "--topic", "nosuch", "--add-config", "retention.ms=1"),
        "topic 'nosuch' does not exist.",
    )
    refused(kcli(broker, "configs", "describe", "--topic", "nosuch"), "topic 'nosuch' does not exist.")
    refused(
        kcli(broker, "configs", "alter", "--broker", "1", "--add-config", "log.retention.hours=1"),
        "cannot alter the configs of broker 1: Cannot update these configs dynamically: Set(log.retention.hours).",
    )
    refused(kcli(broker, "configs", "alter", "--broker", "one", "--add-config", "a=b"),
            "the entity name of a broker must be its integer id, not 'one'.")  # fmt: skip
    refused(
        kcli(broker, "configs", "alter", "--topic", "orders"), "give --add-config, --delete-config or both."
    )
    refused(kcli(broker, "configs", "alter", "--topic", "orders", "--add-config", "retention.ms"),
            "'retention.ms' in --add-config is not key=value.")  # fmt: skip
    refused(
        kcli(broker, "configs", "describe", "--topic", "orders", "--broker", "1"),
        "give one of --topic, --broker.",
    )
    refused(
        kcli(broker, "configs", "describe", "--entity-type", "topics", "--entity-default"),
        "--entity-default applies to brokers, not topics.",
    )
    refused(
        kcli(broker, "configs", "alter", "--entity-type", "topics", "--add-config", "a=b"),
        "name the topic with --entity-name.",
    )
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "60000"  # no refused change went through
