"""`spark.read.format("kafka-segments")`: Kafka segment archives as a Spark DataFrame (Spark 4 Python Data Source).

    spark.dataSource.register(KafkaSegments)
    df = spark.read.format("kafka-segments").option("rows", "batches").load("/archive")

Options (all strings, as Spark passes them):
  rows          batches (one row per batch: every header field and CRC validity), records (one row per
                record, key and value hashed with xxh3-64; `payload=true` adds the bytes), audit (the
                rows of `ops.spark.checks`, which the spark-audit jobs fold)
  crc           true (default) or false: check each batch's CRC
  split_bytes   target bytes per task (default 1 GiB): a Python task costs 50-120 ms whatever its size
  min_tasks     at least this many tasks when the archive is small (default 1)
  topics, exclude_topics, compacted   comma-separated topic names
  audit         the AuditOptions JSON of an audit run

Planning (`partitions()`) runs in Spark's planner process on the driver and only lists files; each task
reads its own byte ranges and yields Arrow record batches, one per window of the segment (16 MiB), so
no row and no batch ever holds a whole file. This module is pickled by reference: executors import it,
so kcli must be importable there (installed, or shipped by `kcli spark-audit --master ...`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import xxhash
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from formats.errors import FormatError
from ops.spark.archive import TARGET_TASK_BYTES, ByteRange, RangeReader, discover, plan
from ops.spark.checks import AuditOptions, audit_ranges

NAME = "kafka-segments"

_WHERE = [
    ("log_dir", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("segment", pa.string()),
]
BATCH_FIELDS = _WHERE + [
    ("segment_base", pa.int64()),
    ("position", pa.int64()),
    ("base_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("batch_length", pa.int32()),
    ("partition_leader_epoch", pa.int32()),
    ("magic", pa.int32()),
    ("crc", pa.int64()),
    ("crc_valid", pa.bool_()),
    ("attributes", pa.int32()),
    ("base_timestamp", pa.int64()),
    ("max_timestamp", pa.int64()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int32()),
    ("base_sequence", pa.int32()),
    ("records_count", pa.int32()),
]
RECORD_FIELDS = _WHERE + [
    ("position", pa.int64()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),
    ("key_size", pa.int32()),
    ("value_size", pa.int32()),
    ("key_hash", pa.int64()),
    ("value_hash", pa.int64()),
    ("headers", pa.int32()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int32()),
    ("base_sequence", pa.int32()),
    ("key", pa.binary()),
    ("value", pa.binary()),
]
AUDIT_FIELDS = [
    ("range_id", pa.string()),
    ("partition_key", pa.string()),
    ("kind", pa.string()),
    ("payload", pa.string()),
]
FIELDS = {"batches": BATCH_FIELDS, "records": RECORD_FIELDS, "audit": AUDIT_FIELDS}
_SPARK_TYPES = {
    pa.string(): "string",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.bool_(): "boolean",
    pa.binary(): "binary",
}


class KafkaSegments(DataSource):
    """Segment files of an archive root: a local path absolute on every executor, or an fsspec URL."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return ", ".join(f"{name} {_SPARK_TYPES[t]}" for name, t in _fields(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaSegmentsReader(dict(self.options))


class RangesPartition(InputPartition):
    def __init__(self, ranges: list[ByteRange]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


class KafkaSegmentsReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[RangesPartition]:
        o = self.options
        if "path" not in o:
            raise FormatError("kafka-segments needs the archive root: .load(PATH).")
        files = discover(
            o["path"],
            compacted_topics=_names(o.get("compacted")),
            include_topics=_names(o.get("topics")) or None,
            exclude_topics=_names(o.get("exclude_topics")),
        )
        tasks = plan(
            files,
            target_bytes=int(o.get("split_bytes", TARGET_TASK_BYTES)),
            min_tasks=int(o.get("min_tasks", 1)),
        )
        return [RangesPartition(t) for t in tasks]

    def read(self, partition: RangesPartition) -> Iterator[pa.RecordBatch]:
        ranges = getattr(
            partition, "ranges", []
        )  # Spark's own empty partition when there was nothing to plan
        rows = self.options.get("rows", "batches")
        crc = self.options.get("crc", "true").lower() != "false"
        if rows == "audit":
            options = AuditOptions.from_json(self.options["audit"])
            out = list(audit_ranges(ranges, options))
            if out:
                yield _record_batch(AUDIT_FIELDS, list(zip(*out, strict=True)))
            return
        payload = self.options.get("payload", "false").lower() == "true"
        for r in ranges:
            reader = RangeReader(r, check_crc=crc)
            for chunk in reader.chunks():
                columns = (
                    _batch_columns(r, chunk) if rows == "batches" else _record_columns(r, chunk, payload)
                )
                if columns and columns[0]:
                    yield _record_batch(FIELDS[rows], columns)


def _fields(options) -> list[tuple[str, pa.DataType]]:
    rows = options.get("rows", "batches")
    if rows not in FIELDS:
        raise FormatError(f"kafka-segments rows must be batches, records or audit, not {rows!r}.")
    return FIELDS[rows]


def _record_batch(fields: list[tuple[str, pa.DataType]], columns: list) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=t) for c, (_, t) in zip(columns, fields, strict=True)], names=[n for n, _ in fields]
    )


def _batch_columns(r: ByteRange, chunk) -> list[list]:
    part = r.file.partition
    base = chunk.base
    rows = []
    for b in chunk.batches:
        if b[4] == 2:
            rows.append(
                (
                    base + b[0],
                    b[1],
                    b[1] + b[7],
                    b[2],
                    b[3],
                    2,
                    b[5],
                    b[14],
                    b[6],
                    b[8],
                    b[9],
                    b[10],
                    b[11],
                    b[12],
                    b[13],
                )
            )
        else:  # v0/v1: offset, size, crc, magic, attributes, timestamp; no producer state
            rows.append(
                (base + b[0], b[1], b[1], b[2], -1, b[4], b[3], b[7], b[5], b[6], b[6], -1, -1, -1, -1)
            )
    n = len(rows)
    where = [
        [part.log_dir] * n,
        [part.topic] * n,
        [part.partition] * n,
        [r.file.path] * n,
        [r.file.base_offset] * n,
    ]
    return where + [list(c) for c in zip(*rows, strict=True)]


def _record_columns(r: ByteRange, chunk, payload: bool) -> list[list]:
    part = r.file.partition
    rows = []
    for b in chunk.batches:
        if not b.crc_valid:
            continue
        try:
            records = b.records(chunk.view)
        except FormatError:
            continue  # the audit reports it; a DataFrame row cannot
        pid = b.producer_id
        epoch, seq = (b.producer_epoch, b.base_sequence) if b.magic == 2 else (-1, -1)
        position = chunk.base + b.position
        for rec in records:
            key, value = rec.key, rec.value
            rows.append(
                (
                    position, rec.offset, rec.timestamp,
                    -1 if key is None else len(key), -1 if value is None else len(value),
                    None if key is None else _signed(xxhash.xxh3_64_intdigest(key)),
                    None if value is None else _signed(xxhash.xxh3_64_intdigest(value)),
                    len(rec.headers), pid, epoch, seq,
                    key if payload else None, value if payload else None,
                )
            )  # fmt: skip
    n = len(rows)
    where = [[part.log_dir] * n, [part.topic] * n, [part.partition] * n, [r.file.path] * n]
    return where + [list(c) for c in zip(*rows, strict=True)] if rows else []


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def _names(text: str | None) -> list[str]:
    return [t for t in (text or "").split(",") if t]
