"""What a replay is asked to do (ReplayOptions, the sending Mode), and the error of one that cannot."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from formats.compression import Codec
from kcli.errors import KcliError
from kcli.security import PLAINTEXT, ClientSecurity
from ops.replay.partitioner import Mapping

MAX_IN_FLIGHT = 5
"""Batches in flight per partition: an idempotent producer may not have more (the broker remembers the
last five batches of each producer for de-duplication)."""
DEFAULT_BATCH_BYTES = 512 * 1024
"""Record mode closes a batch at this many record bytes: under the default max.message.bytes (1 MiB)
even uncompressed."""


class ReplayError(KcliError):
    """A replay that cannot start or go on: bad source, bad options, or a destination that refuses."""


class Mode(StrEnum):
    AUTO = "auto"
    RAW = "raw"
    RECORD = "record"


@dataclass(frozen=True)
class ReplayOptions:
    source: Path
    topic: str
    bootstrap_servers: str
    source_topic: str | None = None
    partitions: tuple[int, ...] = ()
    """Source partitions to replay; empty means all."""
    from_offset: int | None = None
    """First source offset replayed (inclusive)."""
    to_offset: int | None = None
    """Source offset to stop before (exclusive, like a log end offset)."""
    from_time: int | None = None
    """Records with a timestamp (ms) at or after this; inclusive."""
    to_time: int | None = None
    """Records with a timestamp (ms) before this; exclusive."""
    key_regex: str | None = None
    """Records whose key contains a match (re.search on the key bytes); null keys never match."""
    committed_only: bool = False
    mapping: Mapping = Mapping.SAME
    mode: Mode = Mode.AUTO
    compression: Codec | None = None
    """Codec of rebuilt batches; None keeps the codec of the source batch (raw batches always keep theirs)."""
    idempotence: bool | None = None
    """None: idempotent when the destination supports it, with a warning when it does not."""
    rate: float | None = None
    """Upper bound in bytes per second of record batches sent."""
    dry_run: bool = False
    checkpoint: Path | None = None
    offset_map: Path | None = None
    skip_corrupt: bool = False
    batch_bytes: int = DEFAULT_BATCH_BYTES
    acks: int = -1
    max_in_flight: int = MAX_IN_FLIGHT
    request_timeout: float = 30.0
    connect_timeout: float = 10.0
    """socket.connection.setup.timeout.ms, in seconds."""
    create_topic: bool = True
    """Create a destination topic that does not exist (as MirrorMaker 2 does), or refuse."""
    replication_factor: int = -1
    """Of a created destination; -1 is the broker's default.replication.factor."""
    topic_configs: tuple[tuple[str, str], ...] = ()
    """Config overrides of a created destination."""
    client_id: str = "kcli-replay"
    security: ClientSecurity = PLAINTEXT
    """How every connection to the destination is made (--producer.config)."""

    @property
    def record_filters(self) -> bool:
        """Filters that look at each record, so a batch cannot be sent as it is."""
        return self.key_regex is not None or self.from_time is not None or self.to_time is not None

    def check(self) -> None:
        """Raise ReplayError for options that contradict each other, or need what is not installed."""
        if self.mode is Mode.RAW and self.record_filters:
            raise ReplayError(
                "--mode raw sends whole batches: it cannot apply --key-regex, --from-time or --to-time."
            )
        if self.mode is Mode.RAW and self.mapping is Mapping.KEY:
            raise ReplayError("--mode raw sends whole batches: it cannot spread records by key.")
        if self.mode is Mode.RAW and self.compression is not None:
            raise ReplayError("--mode raw keeps each batch's compression: --compression needs record mode.")
        if self.offset_map is not None and self.offset_map.suffix == ".parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ReplayError(
                    "a Parquet offset map needs pyarrow, which is not installed: give a .jsonl path."
                ) from None
        if self.batch_bytes < 1:
            raise ReplayError("--batch-bytes must be at least 1.")
