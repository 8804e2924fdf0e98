"""kcli.config: Kafka's property names, defaults, derived values and one-sentence errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcli.config import (
    BROKER_CONFIGS,
    KCLI_DEFAULTS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    Listener,
    is_valid_topic_name,
    parse_listeners,
    parse_override,
    parse_properties,
)
from kcli.errors import KcliError

# Apache Kafka's config/kraft/server.properties (trunk), comments dropped.
KAFKA_KRAFT_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_defaults_are_kafkas_with_kclis_single_node_changes() -> None:
    config = BrokerConfig()
    assert config.node_id == 1
    assert config.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert config.advertised_listener() == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert config.log_dirs == ["./kcli-data"]
    assert config["num.partitions"] == 1
    assert config["default.replication.factor"] == 1
    assert config["auto.create.topics.enable"] is True
    assert config["message.max.bytes"] == 1048588
    assert config["socket.request.max.bytes"] == 104857600
    assert config["log.segment.bytes"] == 1073741824
    assert config["log.index.interval.bytes"] == 4096
    assert config["log.index.size.max.bytes"] == 10485760
    assert config["log.retention.bytes"] == -1
    assert config["log.retention.check.interval.ms"] == 300000
    assert config["log.flush.interval.messages"] == 2**63 - 1
    assert config["offsets.topic.num.partitions"] == 50
    assert config["offsets.topic.replication.factor"] == 1  # Kafka: 3, which one node cannot satisfy
    assert config["transaction.state.log.num.partitions"] == 50
    assert config["group.initial.rebalance.delay.ms"] == 3000
    assert config["unclean.leader.election.enable"] is False
    assert config["min.insync.replicas"] == 1
    assert config.log_retention_ms == 7 * 24 * 3600 * 1000
    assert config.log_roll_ms == 7 * 24 * 3600 * 1000
    assert config.log_flush_interval_ms == 2**63 - 1
    assert not config.is_set("num.partitions")
    assert BROKER_CONFIGS["node.id"].default == -1 and KCLI_DEFAULTS["node.id"] == 1


def test_kafkas_own_server_properties_loads(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# Kafka's sample\n" + KAFKA_KRAFT_SERVER_PROPERTIES)
    config = BrokerConfig.load(config_file=path)
    assert config.listener == Listener("PLAINTEXT", "", 9092)  # CONTROLLER is skipped
    assert config.advertised_listener(bound_port=9092) == Listener("PLAINTEXT", "localhost", 9092)
    assert config.log_dirs == ["/tmp/kraft-combined-logs"]
    everywhere = BrokerConfig(
        {"listeners": "PLAINTEXT://0.0.0.0:0", "advertised.listeners": "PLAINTEXT://10.1.2.3:9092"}
    )
    assert everywhere.advertised_listener(bound_port=5555) == Listener("PLAINTEXT", "10.1.2.3", 9092)
    assert "num.network.threads" in config.ignored_keys()
    assert "num.partitions" not in config.ignored_keys()
    assert "controller.quorum.voters" not in config.ignored_keys()  # the quorum's shape is acted on
    assert config.quorum_voters == {1: ("localhost", 9093)}
    assert config.controller_listener == Listener("CONTROLLER", "", 9093)
    assert config.is_single_node_quorum


def test_layers_file_then_flags_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.dirs=/from/file\nlisteners=PLAINTEXT://127.0.0.1:9999\n")
    config = BrokerConfig.load(
        config_file=path,
        settings={"log.dirs": "/from/flag", "listeners": "PLAINTEXT://127.0.0.1:0"},
        overrides=["num.partitions=5", "log.retention.minutes=2"],
    )
    assert config["num.partitions"] == 5
    assert config.log_dirs == ["/from/flag"]
    assert config.listener.port == 0
    assert config.advertised_listener(bound_port=41234).port == 41234
    assert config.log_retention_ms == 120_000


def test_retention_precedence_and_unlimited() -> None:
    assert BrokerConfig({"log.retention.hours": "1"}).log_retention_ms == 3_600_000
    both = BrokerConfig({"log.retention.hours": "1", "log.retention.minutes": "5", "log.retention.ms": "7"})
    assert both.log_retention_ms == 7
    assert BrokerConfig({"log.retention.ms": "-5"}).log_retention_ms == -1
    assert BrokerConfig({"log.roll.hours": "2"}).log_roll_ms == 7_200_000
    assert BrokerConfig({"log.flush.scheduler.interval.ms": "100"}).log_flush_interval_ms == 100
    assert BrokerConfig({"log.dir": "/one"}).log_dirs == ["/one"]
    assert BrokerConfig({"log.dir": "/one", "log.dirs": "/a, /b"}).log_dirs == ["/a", "/b"]


def test_topic_defaults_come_from_broker_synonyms() -> None:
    config = BrokerConfig(
        {
            "log.segment.bytes": "1048576",
            "log.retention.minutes": "10",
            "log.roll.hours": "1",
            "message.max.bytes": "2000000",
            "log.cleanup.policy": "compact,delete",
            "log.index.interval.bytes": "100",
            "min.insync.replicas": "2",
        }
    )
    defaults = config.topic_defaults()
    assert set(defaults) == set(TOPIC_CONFIGS)
    assert defaults["segment.bytes"] == 1048576
    assert defaults["retention.ms"] == 600_000
    assert defaults["segment.ms"] == 3_600_000
    assert defaults["max.message.bytes"] == 2_000_000
    assert defaults["cleanup.policy"] == ["compact", "delete"]
    assert defaults["index.interval.bytes"] == 100
    assert defaults["min.insync.replicas"] == 2
    assert defaults["retention.bytes"] == -1
    topic = config.topic_config({"retention.ms": "1000", "cleanup.policy": "compact"})
    assert topic["retention.ms"] == 1000 and topic["cleanup.policy"] == ["compact"]
    assert topic["segment.bytes"] == 1048576
    for name, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        assert name in TOPIC_CONFIGS
        assert all(s.name in BROKER_CONFIGS for s in synonyms), name


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"num.partition": "3"}, "unknown configuration key 'num.partition'; did you mean 'num.partitions'?"),
        ({"zzz.qqq": "3"}, "unknown configuration key 'zzz.qqq'."),
        (
            {"num.partitions": "0"},
            "invalid value '0' for configuration num.partitions: value must be at least 1.",
        ),
        (
            {"num.partitions": "many"},
            "invalid value 'many' for configuration num.partitions: expected an integer.",
        ),
        (
            {"num.partitions": "4294967296"},
            "invalid value '4294967296' for configuration num.partitions: out of range for a 32-bit integer.",
        ),
        (
            {"auto.create.topics.enable": "yes"},
            "invalid value 'yes' for configuration auto.create.topics.enable: expected true or false.",
        ),
        (
            {"log.cleanup.policy": "shred"},
            "invalid value 'shred' for configuration log.cleanup.policy: 'shred' is not one of compact, delete.",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:70000"},
            "invalid value 'PLAINTEXT://127.0.0.1:70000' for configuration listeners: "
            "port 70000 in 'PLAINTEXT://127.0.0.1:70000' is not between 0 and 65535.",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://:9093"},
            "sasl.enabled.mechanisms of listener SASL_PLAINTEXT: SASL mechanism GSSAPI (Kerberos) is not "
            "supported by kcli; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "DIGEST-MD5"},
            "sasl.enabled.mechanisms of listener SASL_PLAINTEXT names 'DIGEST-MD5'; kcli offers PLAIN, "
            "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN"},
            "listener SASL_PLAINTEXT enables PLAIN without users: set "
            "listener.name.sasl_plaintext.plain.sasl.jaas.config to a PlainLoginModule line with "
            'user_<name>="<password>" entries.',
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": "PlainLoginModule required user_a=",
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config: option 1 is not name=value (quote values "
            "that start with a digit or hold characters other than letters, digits and .-_$).",
        ),
        (
            {  # Kafka's StreamTokenizer rules: what is left of a misquoted password is not echoed
                "listeners": "SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": "org.apache.kafka.common.security.plain."
                "PlainLoginModule required user_a=x Sekr3t-word;",
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config: option 2 is not name=value (quote values "
            "that start with a digit or hold characters other than letters, digits and .-_$).",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.sasl.jaas.config": "org.apache.kafka.common.security.plain."
                'PlainLoginModule required user_a="b";',
            },
            "listener.name.sasl_plaintext.sasl.jaas.config's PlainLoginModule cannot log in with SASL "
            "mechanism OAUTHBEARER.",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required; "
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            },
            "sasl.jaas.config (listener SASL_PLAINTEXT, SCRAM-SHA-256): 2 login modules are given; it takes "
            "exactly one.",
        ),
        (
            {
                "node.id": "1",
                "controller.quorum.voters": "1@127.0.0.1:9093",
                "controller.listener.names": "CONTROLLER",
                "listeners": "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";',
            },
            "listener SASL_PLAINTEXT: inter-broker SASL/PLAIN needs username and password in "
            "listener.name.sasl_plaintext.plain.sasl.jaas.config.",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                "connection.failed.authentication.delay.ms": "600000",
            },
            "connection.failed.authentication.delay.ms=600000 should always be less than "
            "connections.max.idle.ms=600000 to prevent failed authentication responses from timing out",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredValidatorAllowableClockSkewMs="-5";',
            },
            "listener SASL_PLAINTEXT, OAUTHBEARER: Allowable clock skew millis must not be negative: -5",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://:9093",
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
            },
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL "
            "is used for inter-broker communication",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://:9093",
                "sasl.enabled.mechanisms": "PLAIN",
                "connections.max.reauth.ms": "-1",
            },
            "invalid value '-1' for configuration connections.max.reauth.ms: value must be at least 0.",
        ),
        (
            {
                "listeners": "PLAINTEXT://:9092,SSL://:9093",
                "listener.name.tls.ssl.keystore.location": "/k.p12",
            },
            "listener.name.tls.ssl.keystore.location is set for listener TLS, which listeners does not name.",
        ),
        (
            {"listeners": "PLAINTEXT://:9092,SSL://:9093", "listener.name.ssl.ssl.keystore.secret": "x"},
            "unknown configuration key 'listener.name.ssl.ssl.keystore.secret'.",
        ),
        (
            {"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "SSL"},
            "inter.broker.listener.name must be a listener name defined in listeners; SSL is not one of PLAINTEXT.",
        ),
        (
            {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
        ),
        (
            {"ssl.client.auth": "always"},
            "invalid value 'always' for configuration ssl.client.auth: value must be one of none, requested, required.",
        ),
        (
            {"ssl.principal.mapping.rules": "RULE:^CN=(.*/$1"},
            "invalid rule 'RULE:^CN=(.*/$1' in ssl.principal.mapping.rules (unmatched 'RULE:^CN=(.*/$1').",
        ),
        (
            {"listeners": "INTERNAL://:9093"},
            "listener name INTERNAL has no entry in listener.security.protocol.map.",
        ),
        ({"log.retention.ms": "0"}, "log.retention.ms must be unlimited (-1) or, equal or greater than 1."),
        ({"node.id": "2", "broker.id": "3"}, "broker.id 3 must match node.id 2 when both are set."),
        (
            {"listeners": "PLAINTEXT://0.0.0.0:9092"},
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0; "
            "set advertised.listeners to a routable address.",
        ),
        (
            {"group.coordinator.rebalance.protocols": "consumer"},
            "invalid value 'consumer' for configuration group.coordinator.rebalance.protocols: "
            "Disabling the 'classic' protocol is not supported.",
        ),
        (
            {"group.coordinator.rebalance.protocols": "classic,share"},
            "invalid value 'classic,share' for configuration group.coordinator.rebalance.protocols: "
            "kcli does not run share groups; the protocols it runs are classic and consumer.",
        ),
    ],
)
def test_bad_settings_are_one_sentence(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(settings)
    assert str(info.value) == message
    assert info.value.exit_code == 2 and isinstance(info.value, KcliError)


def test_a_sasl_listener_beside_a_plaintext_inter_broker_one_needs_no_login() -> None:
    """As Kafka: only the inter-broker listener's JAAS line must carry a username and password."""
    config = BrokerConfig(
        {
            "node.id": "1",
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
        }
    )
    assert config.inter_broker_security().protocol == "PLAINTEXT"


def test_bad_file_and_overrides_say_where(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("log.segment.byte=100\n")
    with pytest.raises(
        ConfigError,
        match=rf"^unknown configuration key 'log.segment.byte' in {path}; did you mean 'log.segment.bytes'\?$",
    ):
        BrokerConfig.load(config_file=path)
    with pytest.raises(
        ConfigError, match=r"^cannot read config file .*missing: no such file or directory\.$"
    ):
        BrokerConfig.load(config_file=tmp_path / "missing")
    path.write_bytes(b"num.partitions=\xff\xfe\n")
    with pytest.raises(ConfigError, match=r"it is not UTF-8 text\.$"):
        BrokerConfig.load(config_file=path)
    path.write_text("num.partitions=\\u12\n")
    with pytest.raises(ConfigError, match=r"Malformed \\uxxxx encoding"):
        BrokerConfig.load(config_file=path)
    with pytest.raises(
        ConfigError, match=r"^unknown configuration key 'num.partitons' in --override; did you mean"
    ):
        BrokerConfig.load(overrides=["num.partitons=3"])
    with pytest.raises(ConfigError, match=r"^override 'num.partitions' is not of the form key=value\.$"):
        BrokerConfig.load(overrides=["num.partitions"])


def test_topic_config_validation() -> None:
    config = BrokerConfig()
    with pytest.raises(
        ConfigError, match=r"^unknown topic configuration key 'retention.mss'; did you mean 'retention.ms'\?$"
    ):
        config.topic_config({"retention.mss": "1"})
    with pytest.raises(ConfigError, match=r"value must be at least -1\.$"):
        config.topic_config({"retention.ms": "-2"})
    with pytest.raises(ConfigError, match=r"value must be between 0 and 1\.$"):
        config.topic_config({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(ConfigError, match=r"value must be between 1 and 9 or equal to -1\.$"):
        config.topic_config({"compression.gzip.level": "0"})
    assert config.topic_config({"compression.type": "zstd"})["compression.type"] == "zstd"


def test_java_properties_syntax() -> None:
    text = "a=b\\\n   c\nk\\:x : v\n# comment\n! comment\nkey value with spaces\nu=\\u00e9\\tz\nempty\n  spaced = 1\n"
    assert parse_properties(text) == {
        "a": "bc",
        "k:x": "v",
        "key": "value with spaces",
        "u": "é\tz",
        "empty": "",
        "spaced": "1",
    }
    assert (
        BrokerConfig(parse_properties("num.partitions = 7  \n"))["num.partitions"] == 7
    )  # Kafka trims values


def test_listeners_and_overrides_parse() -> None:
    assert parse_listeners("plaintext://[::1]:9092, CONTROLLER://:9093") == [
        Listener("PLAINTEXT", "::1", 9092),
        Listener("CONTROLLER", "", 9093),
    ]
    assert str(Listener("PLAINTEXT", "::1", 9092)) == "PLAINTEXT://[::1]:9092"
    assert parse_override(" log.dirs = /a,/b ") == ("log.dirs", "/a,/b")
    assert parse_override("client.id=a=b") == ("client.id", "a=b")


def test_topic_name_rules_match_kafka() -> None:
    assert is_valid_topic_name("orders.v2_eu-1")
    assert is_valid_topic_name("a" * 249)
    for bad in ("", ".", "..", "a" * 250, "white space", "slash/", "ünicode"):
        assert not is_valid_topic_name(bad), bad


@given(st.integers(min_value=1, max_value=2**31 - 1), st.sampled_from(["num.partitions", "log.roll.hours"]))
def test_integers_round_trip_through_text(value: int, key: str) -> None:
    assert BrokerConfig({key: f"  {value} "})[key] == value


# --- the controller quorum (KRaft) ----------------------------------------------------------------------

COMBINED = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
}
BROKER_ONLY = {
    "process.roles": "broker",
    "node.id": "4",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@c1:9093,2@c2:9093,3@c3:9093",
}
CONTROLLER_ONLY = {
    "process.roles": "controller",
    "node.id": "1",
    "listeners": "CONTROLLER://:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@c1:9093,2@c2:9093,3@c3:9093",
}


def test_kafkas_quorum_defaults() -> None:
    config = BrokerConfig()
    expected = {
        "controller.quorum.election.timeout.ms": 1000,
        "controller.quorum.fetch.timeout.ms": 2000,
        "controller.quorum.election.backoff.max.ms": 1000,
        "controller.quorum.request.timeout.ms": 2000,
        "controller.quorum.retry.backoff.ms": 20,
        "controller.quorum.append.linger.ms": 25,
        "broker.heartbeat.interval.ms": 2000,
        "broker.session.timeout.ms": 9000,
        "initial.broker.registration.timeout.ms": 60000,
        "metadata.max.idle.interval.ms": 500,
        "metadata.log.max.record.bytes.between.snapshots": 20 * 1024 * 1024,
        "metadata.log.max.snapshot.interval.ms": 3_600_000,
        "metadata.max.retention.bytes": 100 * 1024 * 1024,
        "metadata.max.retention.ms": 7 * 24 * 3_600_000,
    }
    assert {key: config[key] for key in expected} == expected
    assert all(BROKER_CONFIGS[key].used for key in expected)
    assert BROKER_CONFIGS["process.roles"].default == [] and KCLI_DEFAULTS["process.roles"] == [
        "broker",
        "controller",
    ]
    for key in ("process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers"):
        assert BROKER_CONFIGS[key].used, key


def test_the_default_node_is_its_own_quorum() -> None:
    config = BrokerConfig()
    assert config.process_roles == frozenset({"broker", "controller"})
    assert config.is_broker and config.is_controller
    assert config.controller_listener is None  # no controller listener: the quorum of one is in-process
    assert config.quorum_voters == {} and config.quorum_bootstrap_servers == []
    assert config.is_single_node_quorum
    assert config.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert config.metadata_log_dir == "./kcli-data"
    # With a controller listener, this node is the sole voter at it (an unset host as loopback).
    with_listener = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9093",
            "controller.listener.names": "CONTROLLER",
        }
    )
    assert with_listener.controller_listener == Listener("CONTROLLER", "", 9093)
    assert with_listener.quorum_voters == {1: ("127.0.0.1", 9093)}
    assert with_listener.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert with_listener.is_single_node_quorum
    # A controller name not among the listeners is still accepted there, as before: no controller listener.
    assert BrokerConfig({"controller.listener.names": "CONTROLLER"}).controller_listener is None
    # process.roles=broker,controller alone is the same shape.
    assert BrokerConfig({"process.roles": "broker,controller"}).is_single_node_quorum


def test_static_and_dynamic_quorums_parse() -> None:
    voters = BrokerConfig(
        {**COMBINED, "controller.quorum.voters": "1@localhost:9093, 2@[::1]:9094,3@c3:9095"}
    )
    assert voters.quorum_voters == {1: ("localhost", 9093), 2: ("::1", 9094), 3: ("c3", 9095)}
    assert voters.controller_listener == Listener("CONTROLLER", "127.0.0.1", 9093)
    assert voters.advertised_controller_listener == Listener("CONTROLLER", "127.0.0.1", 9093)
    assert not voters.is_single_node_quorum
    assert BrokerConfig({**COMBINED, "controller.quorum.voters": "1@localhost:9093"}).is_single_node_quorum
    dynamic = BrokerConfig({**COMBINED, "controller.quorum.bootstrap.servers": "c1:9093,[::1]:9094"})
    assert dynamic.quorum_bootstrap_servers == [("c1", 9093), ("::1", 9094)]
    assert dynamic.quorum_voters == {} and not dynamic.is_single_node_quorum
    broker = BrokerConfig(BROKER_ONLY)
    assert broker.process_roles == frozenset({"broker"}) and not broker.is_controller
    assert broker.controller_listener is None and broker.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert not broker.is_single_node_quorum
    assert not BrokerConfig({**BROKER_ONLY, "controller.quorum.voters": "1@c1:9093"}).is_single_node_quorum
    controller = BrokerConfig(CONTROLLER_ONLY)
    assert controller.is_controller and not controller.is_broker
    assert controller.controller_listener == Listener("CONTROLLER", "", 9093)
    advertised = BrokerConfig(
        {**COMBINED, "controller.quorum.voters": "1@c1:9093", "advertised.listeners": "CONTROLLER://c1:9093"}
    )
    assert advertised.advertised_controller_listener == Listener("CONTROLLER", "c1", 9093)
    assert advertised.advertised_listener() == Listener("PLAINTEXT", "127.0.0.1", 9092)


_VOTER_FORM = "Each entry should be in the form `{id}@{host}:{port}`."


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"controller.quorum.voters": "1@c1"},
            f"Failed to parse host name from entry 1@c1 for the configuration controller.quorum.voters. {_VOTER_FORM}",
        ),
        (
            {"controller.quorum.voters": "1:c1:9093"},
            f"Invalid configuration value for controller.quorum.voters. {_VOTER_FORM}",
        ),
        (
            {"controller.quorum.voters": "1@c1@c2:9093"},
            f"Invalid configuration value for controller.quorum.voters. {_VOTER_FORM}",
        ),
        ({"controller.quorum.voters": "one@c1:9093"}, "Failed to parse voter ID as an integer from one."),
        (
            {"controller.quorum.voters": "1@c1:70000"},
            f"Failed to parse host port from entry 1@c1:70000 for the configuration controller.quorum.voters. "
            f"{_VOTER_FORM}",
        ),
        (
            {"controller.quorum.bootstrap.servers": "c1"},
            "Failed to parse host name from c1 for the configuration controller.quorum.bootstrap.servers. "
            'Each entry should be in the form "{host}:{port}".',
        ),
        (
            {"controller.quorum.voters": "1@0.0.0.0:9093"},
            "Host string (0.0.0.0) is not routeable.",
        ),
        (
            {"process.roles": "broker,zookeeper"},
            "invalid value 'broker,zookeeper' for configuration process.roles: 'zookeeper' is not one of "
            "broker, controller.",
        ),
        (
            {"controller.quorum.fetch.timeout.ms": "-1"},
            "invalid value '-1' for configuration controller.quorum.fetch.timeout.ms: value must be at least 0.",
        ),
        (
            {"controller.quorum.voters": "1@c1:9093", "controller.quorum.bootstrap.servers": "c1:9093"},
            "controller.quorum.voters and controller.quorum.bootstrap.servers cannot both be set: use "
            "controller.quorum.voters for a static quorum, or controller.quorum.bootstrap.servers for a "
            "dynamic one.",
        ),
        (
            {"controller.quorum.voters": "2@c2:9093,3@c3:9093"},
            "If process.roles contains the 'controller' role, the node id 1 must be included in the set of "
            "voters controller.quorum.voters=Set(2, 3).",
        ),
        (
            {"controller.quorum.voters": "1@c1:9093", "controller.listener.names": ""},
            "controller.listener.names must contain at least one value appearing in the 'listeners' "
            "configuration when running the KRaft controller role.",
        ),
        (
            {"controller.quorum.voters": "1@c1:9093", "listeners": "PLAINTEXT://127.0.0.1:9092"},
            "controller.listener.names must contain at least one value appearing in the 'listeners' "
            "configuration when running the KRaft controller role.",
        ),
        (
            {"controller.quorum.voters": "1@c1:9093", "controller.listener.names": "CONTROLLER,OTHER"},
            "controller.listener.names must only contain values appearing in the 'listeners' configuration "
            "when running the KRaft controller role.",
        ),
        (
            {
                "controller.quorum.voters": "1@c1:9093",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
            },
            "listener name CONTROLLER has no entry in listener.security.protocol.map.",
        ),
        (
            {
                "controller.quorum.voters": "1@c1:9093",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.controller.protocol": "PLAIN",
            },
            "sasl.mechanism.controller.protocol PLAIN must be included in the sasl.enabled.mechanisms of "
            "controller listener CONTROLLER (SCRAM-SHA-512).",
        ),
        (
            {
                "controller.quorum.voters": "1@c1:9093",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
                "listener.name.controller.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
            },
            "controller listener CONTROLLER: SASL/SCRAM-SHA-512 to the controllers needs username and password "
            "in listener.name.controller.scram-sha-512.sasl.jaas.config.",
        ),
        (
            {"process.roles": "controller"},
            "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of "
            "bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers.",
        ),
        (
            {"node.id": None, "controller.quorum.voters": "1@c1:9093"},
            "Missing configuration `node.id` which is required when the controller quorum is configured "
            "(controller.quorum.voters or controller.quorum.bootstrap.servers).",
        ),
    ],
)
def test_bad_quorum_settings_are_kafkas_sentences(settings: dict[str, str | None], message: str) -> None:
    merged = {key: value for key, value in {**COMBINED, **settings}.items() if value is not None}
    with pytest.raises(ConfigError) as info:
        BrokerConfig(merged)
    assert str(info.value) == message


def test_a_secured_controller_listener_is_how_the_controllers_are_dialed() -> None:
    """Kafka's controller client: the controller listener's protocol, its listener-prefixed ssl.* settings
    and sasl.mechanism.controller.protocol's JAAS line; a broker-only node reads the same keys."""
    login = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="ctl" password="pw";'
    secured = {
        "controller.quorum.voters": "1@c1:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": login[:-1] + ' user_ctl="pw";',
        "listener.name.controller.ssl.truststore.location": "/ca.crt",
        "ssl.truststore.location": "/other.crt",
    }
    for node in (COMBINED, BROKER_ONLY):
        config = BrokerConfig({**node, **secured})
        security = config.controller_security()
        assert (security.protocol, security.sasl_mechanism) == ("SASL_SSL", "PLAIN")
        assert security.jaas["username"] == "ctl" and security.jaas["password"] == "pw"
        assert security.ssl["ssl.truststore.location"] == "/ca.crt"
        assert config.inter_broker_security().protocol == "PLAINTEXT"
    assert BrokerConfig(COMBINED).controller_security().protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"node.id": "2"},
            "If process.roles contains just the 'broker' role, the node id 2 must not be included in the set "
            "of voters controller.quorum.voters=Set(1, 2, 3).",
        ),
        (
            {"controller.listener.names": ""},
            "controller.listener.names must contain at least one value when running KRaft with just the broker role.",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9093"},
            "controller.listener.names must not contain a value appearing in the 'listeners' configuration when "
            "running KRaft with just the broker role.",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"},
            "Controller listener with name CONTROLLER defined in controller.listener.names not found in "
            "listener.security.protocol.map (an explicit security mapping for each controller listener is "
            "required if listener.security.protocol.map is non-empty, or if there are security protocols other "
            "than PLAINTEXT in use).",
        ),
        (
            {"controller.quorum.voters": ""},
            "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of "
            "bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers.",
        ),
    ],
)
def test_bad_broker_only_settings(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig({**BROKER_ONLY, **settings})
    assert str(info.value) == message


def test_a_controller_only_node_has_only_controller_listeners() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig({**CONTROLLER_ONLY, "listeners": "CONTROLLER://:9093,PLAINTEXT://:9092"})
    assert str(info.value) == (
        "The listeners config must only contain KRaft controller listeners from controller.listener.names "
        "when process.roles=controller."
    )
    with pytest.raises(ConfigError, match="must be included in the set of voters"):
        BrokerConfig({**CONTROLLER_ONLY, "node.id": "9"})
    dynamic = {k: v for k, v in CONTROLLER_ONLY.items() if k != "controller.quorum.voters"}
    assert BrokerConfig({**dynamic, "controller.quorum.bootstrap.servers": "c1:9093"}).quorum_voters == {}


def test_several_client_listeners_resolve_as_kafka_resolves_them() -> None:
    """Each client listener, its advertised address, its protocol, its ssl.* settings with the
    listener.name.<name>. prefix winning, and the inter-broker listener and how it is reached."""
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,INTERNAL://:9094,CONTROLLER://:9095",
            "advertised.listeners": "SSL://broker1.example:19093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": "1@127.0.0.1:9095",
            "node.id": "1",
            "process.roles": "broker,controller",
            "inter.broker.listener.name": "internal",
            "ssl.keystore.location": "/keys/node.p12",
            "ssl.client.auth": "requested",
            "listener.name.INTERNAL.ssl.client.auth": "required",
            "listener.name.internal.ssl.keystore.location": "/keys/internal.pem",
        }
    )
    assert [x.name for x in config.client_listeners] == ["PLAINTEXT", "SSL", "INTERNAL"]
    assert config.listener.name == "PLAINTEXT"
    assert config.advertised_listener(name="SSL") == Listener("SSL", "broker1.example", 19093)
    assert config.advertised_listener(name="INTERNAL") == Listener("INTERNAL", "127.0.0.1", 9094)
    assert [config.protocol_of(x.name) for x in config.client_listeners] == ["PLAINTEXT", "SSL", "SSL"]
    assert config.ssl_settings("SSL") == {
        "ssl.keystore.location": "/keys/node.p12",
        "ssl.client.auth": "requested",
    }
    assert config.ssl_settings("INTERNAL") == {
        "ssl.keystore.location": "/keys/internal.pem",
        "ssl.client.auth": "required",
    }
    assert config.inter_broker_listener_name == "INTERNAL"
    security = config.inter_broker_security()
    assert security.protocol == "SSL" and security.ssl["ssl.keystore.location"] == "/keys/internal.pem"
    assert "listener.name.internal.ssl.keystore.location" not in config.ignored_keys()
    plain = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"})
    assert plain.inter_broker_listener_name == "PLAINTEXT"  # security.inter.broker.protocol's default
    assert plain.inter_broker_security().protocol == "PLAINTEXT"
