"""Topics: names (valid, internal), the topic-level properties (Kafka's TopicConfig / LogConfig) and
the broker properties that supply their defaults (ServerTopicConfigSynonyms)."""

from __future__ import annotations

import re

from kcli.config.types import DAY_MS, HOUR_MS, LONG_MAX, MINUTE_MS, ConfigKey, Synonym, config_table
from kcli.config.values import (
    at_least,
    between,
    compression_level,
    list_of,
    one_of,
    parse_value,
    throttled_replica_list,
)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
TOPIC_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def parse_topic_value(key: str, raw: str) -> object:
    """Validate one topic-level property (CreateTopics / AlterConfigs will answer INVALID_CONFIG)."""
    return parse_value(TOPIC_CONFIGS, key, raw, source="topic configuration")


def is_valid_topic_name(name: str) -> bool:
    """Kafka's `Topic.isValid`: 1-249 chars of [a-zA-Z0-9._-], and not "." or ".."."""
    return 0 < len(name) <= 249 and name not in (".", "..") and _TOPIC_NAME.fullmatch(name) is not None


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


TOPIC_CONFIGS: dict[str, ConfigKey] = config_table(
    [
        ("segment.bytes", "int", 1024 * 1024 * 1024, at_least(14), "Roll a segment at this size."),
        ("segment.ms", "long", 7 * DAY_MS, at_least(1), "Roll a segment after this long."),
        ("segment.jitter.ms", "long", 0, at_least(0), "Random jitter subtracted from segment.ms."),
        (
            "segment.index.bytes",
            "int",
            10 * 1024 * 1024,
            at_least(4),
            "Preallocated size of each index file.",
        ),
        ("flush.messages", "long", LONG_MAX, at_least(1), "fsync after this many messages."),
        ("flush.ms", "long", LONG_MAX, at_least(0), "fsync after this long."),
        (
            "retention.bytes",
            "long",
            -1,
            None,
            "Delete old segments while the partition is larger; -1 = no limit.",
        ),
        (
            "retention.ms",
            "long",
            7 * DAY_MS,
            at_least(-1),
            "Delete segments older than this; -1 keeps forever.",
        ),
        ("max.message.bytes", "int", 1024 * 1024 + 12, at_least(0), "Largest record batch accepted."),
        ("index.interval.bytes", "int", 4096, at_least(0), "Bytes between offset-index entries."),
        ("delete.retention.ms", "long", DAY_MS, at_least(0), "How long tombstones survive compaction."),
        ("min.compaction.lag.ms", "long", 0, at_least(0), "Minimum age before compaction."),
        ("max.compaction.lag.ms", "long", LONG_MAX, at_least(1), "Maximum age before compaction."),
        ("file.delete.delay.ms", "long", 60000, at_least(0), "Grace period of .deleted files."),
        ("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1), "Dirty ratio that triggers cleaning."),
        ("cleanup.policy", "list", ["delete"], list_of(*CLEANUP_POLICIES), "delete, compact, or both."),
        ("unclean.leader.election.enable", "boolean", False, None, "Allow an out-of-sync replica to lead."),
        ("min.insync.replicas", "int", 1, at_least(1), "Replicas that must acknowledge acks=all."),
        ("compression.type", "string", "producer", one_of(*TOPIC_COMPRESSION), "Codec the broker stores."),
        ("compression.gzip.level", "int", -1, compression_level(1, 9, -1), "gzip level."),
        ("compression.lz4.level", "int", 9, compression_level(1, 17), "lz4 level."),
        ("compression.zstd.level", "int", 3, compression_level(-131072, 22), "zstd level."),
        ("preallocate", "boolean", False, None, "Preallocate segment files."),
        (
            "message.timestamp.type",
            "string",
            "CreateTime",
            one_of(*TIMESTAMP_TYPES),
            "CreateTime or LogAppendTime.",
        ),
        (
            "message.timestamp.difference.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "Deprecated bound on timestamp skew.",
        ),
        (
            "message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "How far in the past a timestamp may be.",
        ),
        (
            "message.timestamp.after.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "How far in the future a timestamp may be.",
        ),
        ("message.downconversion.enable", "boolean", True, None, "Down-convert for old fetchers.", False),
        ("message.format.version", "string", "3.0-IV1", None, "Obsolete message format version.", False),
        (
            "leader.replication.throttled.replicas",
            "list",
            [],
            throttled_replica_list("leader.replication.throttled.replicas"),
            "Replicas ([partition]:[broker],... or *) whose leader-side replication is throttled.",
        ),
        (
            "follower.replication.throttled.replicas",
            "list",
            [],
            throttled_replica_list("follower.replication.throttled.replicas"),
            "Replicas ([partition]:[broker],... or *) whose follower-side replication is throttled.",
        ),
        ("remote.storage.enable", "boolean", False, None, "Tiered storage.", False),
        ("local.retention.ms", "long", -2, at_least(-2), "Tiered storage local retention.", False),
        ("local.retention.bytes", "long", -2, at_least(-2), "Tiered storage local retention.", False),
    ]
)

TOPIC_CONFIG_SYNONYMS: dict[str, tuple[Synonym, ...]] = {
    # Kafka's ServerTopicConfigSynonyms: the first synonym that is set wins (derived ones are
    # computed by BrokerConfig: segment.ms, segment.jitter.ms, retention.ms, flush.ms).
    "segment.bytes": (Synonym("log.segment.bytes"),),
    "segment.ms": (Synonym("log.roll.ms"), Synonym("log.roll.hours", HOUR_MS)),
    "segment.jitter.ms": (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", HOUR_MS)),
    "segment.index.bytes": (Synonym("log.index.size.max.bytes"),),
    "flush.messages": (Synonym("log.flush.interval.messages"),),
    "flush.ms": (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms")),
    "retention.bytes": (Synonym("log.retention.bytes"),),
    "retention.ms": (
        Synonym("log.retention.ms"),
        Synonym("log.retention.minutes", MINUTE_MS),
        Synonym("log.retention.hours", HOUR_MS),
    ),
    "max.message.bytes": (Synonym("message.max.bytes"),),
    "index.interval.bytes": (Synonym("log.index.interval.bytes"),),
    "delete.retention.ms": (Synonym("log.cleaner.delete.retention.ms"),),
    "min.compaction.lag.ms": (Synonym("log.cleaner.min.compaction.lag.ms"),),
    "max.compaction.lag.ms": (Synonym("log.cleaner.max.compaction.lag.ms"),),
    "file.delete.delay.ms": (Synonym("log.segment.delete.delay.ms"),),
    "min.cleanable.dirty.ratio": (Synonym("log.cleaner.min.cleanable.ratio"),),
    "cleanup.policy": (Synonym("log.cleanup.policy"),),
    "unclean.leader.election.enable": (Synonym("unclean.leader.election.enable"),),
    "min.insync.replicas": (Synonym("min.insync.replicas"),),
    "compression.type": (Synonym("compression.type"),),
    "compression.gzip.level": (Synonym("compression.gzip.level"),),
    "compression.lz4.level": (Synonym("compression.lz4.level"),),
    "compression.zstd.level": (Synonym("compression.zstd.level"),),
    "preallocate": (Synonym("log.preallocate"),),
    "message.format.version": (Synonym("log.message.format.version"),),
    "message.timestamp.type": (Synonym("log.message.timestamp.type"),),
    "message.timestamp.difference.max.ms": (Synonym("log.message.timestamp.difference.max.ms"),),
    "message.timestamp.before.max.ms": (Synonym("log.message.timestamp.before.max.ms"),),
    "message.timestamp.after.max.ms": (Synonym("log.message.timestamp.after.max.ms"),),
    "message.downconversion.enable": (Synonym("log.message.downconversion.enable"),),
}
