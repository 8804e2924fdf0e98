"""The broker's storage layer: partition logs in Kafka's on-disk format.

    manager = LogManager(broker_config)
    lines = manager.startup()                      # load + recover every partition dir
    log = manager.create_log("orders", 0, topic_id, LogConfig.from_broker(broker_config))
    info = log.append_as_leader(batch_bytes, leader_epoch=0, now_ms=now)
    log.update_high_watermark(log.log_end_offset)  # the replica manager's Partition does this
    fetch = log.read(0, 1 << 20, upper_bound=log.high_watermark, min_one_batch=True)
    os.sendfile(sock, fetch.fd, fetch.position, fetch.size)

Modules, one concept each: `segment` (a .log with its indexes), `index` (the mapped index files),
`validator` (produce-time checks), `epochs` (leader-epoch-checkpoint), `loader` (start-up recovery),
`producer_state` (idempotent producers' sequences and epochs, `.snapshot` files), `log` (one
partition), `manager` (all partitions, periodic work, shutdown), `config` (LogConfig), `log_cleaner`
(compaction's thread and hand-offs: Kafka's LogCleaner), `cleaner` (one clean of one log: Cleaner),
`cleaner_manager` (which log to clean next, cleaner-offset-checkpoint), `offset_map` (the cleaner's
key -> last offset map).
"""

from kcli.broker.log.config import LogConfig
from kcli.broker.log.errors import LogStorageError, OffsetOutOfRange, RecordError, UnexpectedAppendOffset
from kcli.broker.log.log import AppendInfo, FetchSlice, Log, PolicyViolation
from kcli.broker.log.manager import LogManager
from kcli.broker.log.validator import AppendOrigin

__all__ = [
    "AppendInfo",
    "AppendOrigin",
    "FetchSlice",
    "Log",
    "LogConfig",
    "LogManager",
    "LogStorageError",
    "OffsetOutOfRange",
    "PolicyViolation",
    "RecordError",
    "UnexpectedAppendOffset",
]
