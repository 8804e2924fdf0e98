"""Replay records from Kafka's segment files into a topic, on our broker or any Kafka cluster.

Sources are read with `kcli.logdir.SegmentReader`; records go out with the standard Produce API, one
connection per partition leader, through an idempotent producer (InitProducerId, sequence numbers) when
the destination offers one. Two paths share one pipeline:

- raw mode re-sends a whole magic v2 batch as it is, compression included; only its producer fields
  (and the transactional bit) change, so its CRC is computed again but nothing is decompressed;
- record mode decodes records, filters them, maps them to partitions and builds new v2 batches.

`Mode.AUTO` takes the raw path for every batch it can (no record-level filter, `same` or `round-robin`
mapping, a batch a producer could have sent) and record mode for the rest (legacy magic v0/v1, compacted
batches with offset gaps, LogAppendTime batches, batches cut by an offset bound).

Resuming is deterministic: batches are a pure function of the sources and the options, generated in one
order (source partitions in turn, records in offset order). The checkpoint keeps, per destination
partition, how many of its batches were acknowledged and the offset after them; a resumed replay
regenerates the batches, skips the acknowledged ones, and counts the records the destination holds
beyond the checkpoint (its log end offset) as batches that landed before the interruption, so nothing is
sent twice provided nothing else writes to those partitions in between.

The package, top down:

  replayer     replay() and the Replayer: sources -> walk -> sender, acknowledgements in generation order
  walk         the source walk (the hot path): raw batches, record-mode filtering, mapping and batching
  sender       Produce requests to partition leaders: idempotence, pacing, retries, acknowledgements
  destination  the destination topic: metadata, creating it when missing, its log end offsets
  checkpoint   the checkpoint file: the replay's fingerprint, resuming, writing
  offset_map   where each run of source offsets landed (JSON lines, or Parquet)
  batch        OutBatch, the unit passed from the walk to the sender and back to the replayer
  sources      SourcePartition, find_sources: what a source path holds
  partitioner  Mapping, java_murmur2, partition_for_key
  options      ReplayOptions, Mode, ReplayError
  report       ReplayStats, PlannedBatch, Progress: what a replay reports
"""

from ops.replay.options import DEFAULT_BATCH_BYTES, Mode, ReplayError, ReplayOptions
from ops.replay.partitioner import Mapping, java_murmur2, partition_for_key
from ops.replay.replayer import keep_freed_heap, replay
from ops.replay.report import PlannedBatch, Progress, ReplayStats
from ops.replay.sources import SourcePartition, find_sources
from ops.replay.walk import raw_obstacle

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "Mapping",
    "Mode",
    "PlannedBatch",
    "Progress",
    "ReplayError",
    "ReplayOptions",
    "ReplayStats",
    "SourcePartition",
    "find_sources",
    "java_murmur2",
    "keep_freed_heap",
    "partition_for_key",
    "raw_obstacle",
    "replay",
]
