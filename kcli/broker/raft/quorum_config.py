"""The Raft client's timeouts and metadata-log retention (Kafka's QuorumConfig)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Kafka's `controller.quorum.*` timeouts, in milliseconds."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    retention_bytes: int = 100 * 1024 * 1024  # metadata.max.retention.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # metadata.max.retention.ms

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> RaftConfig:
        """From `controller.quorum.<name>` settings; missing ones keep Kafka's defaults."""
        names = {
            "election_timeout_ms": "controller.quorum.election.timeout.ms",
            "fetch_timeout_ms": "controller.quorum.fetch.timeout.ms",
            "election_backoff_max_ms": "controller.quorum.election.backoff.max.ms",
            "request_timeout_ms": "controller.quorum.request.timeout.ms",
            "retry_backoff_ms": "controller.quorum.retry.backoff.ms",
            "retention_bytes": "metadata.max.retention.bytes",
            "retention_ms": "metadata.max.retention.ms",
        }
        return cls(**{attr: int(values[key]) for attr, key in names.items() if values.get(key) is not None})
