"""A replay's offset map: where each run of consecutive source offsets landed in the destination.

One JSON object per run (sourceTopic, sourcePartition, sourceOffset, topic, partition, offset, count),
appended as batches are acknowledged. For a `.parquet` path the lines go to PATH.jsonl first and become
the Parquet file when the replay ends. A resumed replay cuts the file back to the length its checkpoint
recorded, so no line is written twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from ops.replay.batch import OutBatch

COLUMNS = ("sourceTopic", "sourcePartition", "sourceOffset", "topic", "partition", "offset", "count")


class OffsetMap:
    """The offset map file of one replay, open from the start of the replay to its end."""

    def __init__(self, path: Path, topic: str, resume_at: int | None) -> None:
        """Open `path` afresh, or with `resume_at` (the length a checkpoint recorded) where it stopped."""
        self.path = path
        self.topic = topic
        self.lines_path = path.with_name(path.name + ".jsonl") if path.suffix == ".parquet" else path
        if resume_at is not None and self.lines_path.exists():
            self.file = open(self.lines_path, "r+b")  # noqa: SIM115 (closed at the end of the run)
            self.file.truncate(resume_at)
            self.file.seek(0, os.SEEK_END)
        else:
            self.file = open(self.lines_path, "wb")  # noqa: SIM115

    def write(self, out: OutBatch, partition: int, base_offset: int) -> None:
        """The runs of `out`, acknowledged at `base_offset` of destination `partition`."""
        topic = self.topic
        source_topic, source_partition = out.source.rsplit("-", 1)
        lines = b"".join(
            orjson.dumps(
                {
                    "sourceTopic": source_topic,
                    "sourcePartition": int(source_partition),
                    "sourceOffset": offset,
                    "topic": topic,
                    "partition": partition,
                    "offset": base_offset + index,
                    "count": count,
                }
            )
            + b"\n"
            for offset, index, count in out.runs
        )
        self.file.write(lines)

    def flush(self) -> int:
        """Flush what is written; its length in bytes."""
        self.file.flush()
        return self.file.tell()

    def close(self) -> None:
        self.file.close()

    def finish(self) -> None:
        """Once the replay is done and the file closed: write the Parquet file a `.parquet` path asks for."""
        if self.path == self.lines_path:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [orjson.loads(line) for line in self.lines_path.read_bytes().splitlines() if line]
        table = pa.table({name: [row[name] for row in rows] for name in COLUMNS})
        pq.write_table(table, self.path)
        self.lines_path.unlink()
