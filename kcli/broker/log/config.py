"""LogConfig: the topic-level settings one partition's log acts on, with Kafka's derived values."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from formats.compression import Codec
from formats.records import TimestampType
from kcli.config import TOPIC_CONFIGS, BrokerConfig

LONG_MAX = 2**63 - 1

_CODECS = {
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's topic configs by their snake_case names; build one with `from_broker` or `from_values`.

    The defaults are Kafka's. `values` keeps every topic property as parsed (for DescribeConfigs).
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_bytes: int = -1
    retention_ms: int = 7 * 24 * 3600 * 1000
    max_message_bytes: int = 1024 * 1024 + 12
    file_delete_delay_ms: int = 60000
    cleanup_policy: tuple[str, ...] = ("delete",)
    max_compaction_lag_ms: int = LONG_MAX
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms_config: int = LONG_MAX
    message_timestamp_after_max_ms_config: int = LONG_MAX
    min_insync_replicas: int = 1
    values: Mapping[str, object] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    @classmethod
    def from_broker(cls, broker: BrokerConfig, overrides: Mapping[str, str] | None = None) -> LogConfig:
        """The config of a topic with these overrides (raw strings), on top of the broker's defaults."""
        return cls.from_values(broker.topic_config(overrides))

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> LogConfig:
        """From parsed topic properties (`BrokerConfig.topic_config()`); missing keys take Kafka's defaults."""
        merged = {name: spec.default for name, spec in TOPIC_CONFIGS.items()}
        merged.update(values)
        timestamp_type = str(merged["message.timestamp.type"])
        return cls(
            segment_bytes=int(merged["segment.bytes"]),  # type: ignore[call-overload]
            segment_ms=int(merged["segment.ms"]),  # type: ignore[call-overload]
            segment_jitter_ms=int(merged["segment.jitter.ms"]),  # type: ignore[call-overload]
            segment_index_bytes=int(merged["segment.index.bytes"]),  # type: ignore[call-overload]
            index_interval_bytes=int(merged["index.interval.bytes"]),  # type: ignore[call-overload]
            flush_messages=int(merged["flush.messages"]),  # type: ignore[call-overload]
            flush_ms=int(merged["flush.ms"]),  # type: ignore[call-overload]
            retention_bytes=int(merged["retention.bytes"]),  # type: ignore[call-overload]
            retention_ms=int(merged["retention.ms"]),  # type: ignore[call-overload]
            max_message_bytes=int(merged["max.message.bytes"]),  # type: ignore[call-overload]
            file_delete_delay_ms=int(merged["file.delete.delay.ms"]),  # type: ignore[call-overload]
            cleanup_policy=tuple(merged["cleanup.policy"]),  # type: ignore[arg-type]
            max_compaction_lag_ms=int(merged["max.compaction.lag.ms"]),  # type: ignore[call-overload]
            compression_type=str(merged["compression.type"]),
            compression_gzip_level=int(merged["compression.gzip.level"]),  # type: ignore[call-overload]
            compression_lz4_level=int(merged["compression.lz4.level"]),  # type: ignore[call-overload]
            compression_zstd_level=int(merged["compression.zstd.level"]),  # type: ignore[call-overload]
            preallocate=bool(merged["preallocate"]),
            message_timestamp_type=(
                TimestampType.LOG_APPEND_TIME
                if timestamp_type == "LogAppendTime"
                else TimestampType.CREATE_TIME
            ),
            message_timestamp_difference_max_ms=int(merged["message.timestamp.difference.max.ms"]),  # type: ignore[call-overload]
            message_timestamp_before_max_ms_config=int(merged["message.timestamp.before.max.ms"]),  # type: ignore[call-overload]
            message_timestamp_after_max_ms_config=int(merged["message.timestamp.after.max.ms"]),  # type: ignore[call-overload]
            min_insync_replicas=int(merged["min.insync.replicas"]),  # type: ignore[call-overload]
            values=MappingProxyType(dict(merged)),
        )

    # Values Kafka's LogConfig derives.

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention deletes segments (cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, capped by max.compaction.lag.ms on compacted topics."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def message_timestamp_before_max_ms(self) -> int:
        """before.max.ms, or the deprecated difference.max.ms while before.max.ms keeps its default."""
        if self.message_timestamp_before_max_ms_config != LONG_MAX:
            return self.message_timestamp_before_max_ms_config
        return self.message_timestamp_difference_max_ms

    @property
    def message_timestamp_after_max_ms(self) -> int:
        if self.message_timestamp_after_max_ms_config != LONG_MAX:
            return self.message_timestamp_after_max_ms_config
        return self.message_timestamp_difference_max_ms

    def random_segment_jitter(self) -> int:
        """Kafka's randomSegmentJitter: a fixed random slice of segment.jitter.ms per segment."""
        if self.segment_jitter_ms == 0:
            return 0
        return random.randrange(2**31) % min(self.segment_jitter_ms, self.segment_ms)

    def target_codec(self, source: Codec) -> Codec:
        """The codec stored batches get: the producer's, or compression.type's."""
        if self.compression_type == "producer":
            return source
        return _CODECS[self.compression_type]

    def compression_level(self, codec: Codec) -> int | None:
        """The level compression.<codec>.level asks for; None for the codec's own default."""
        if codec is Codec.GZIP:
            return None if self.compression_gzip_level == -1 else self.compression_gzip_level
        if codec is Codec.LZ4:
            return self.compression_lz4_level
        if codec is Codec.ZSTD:
            return self.compression_zstd_level
        return None
