"""Segment archives with planted findings, for the spark-audit tests (and the truth they should report).

Batches come from `formats.records.build_batch`; segments get `.index` and `.timeindex` files by Kafka's
sparse-index rule, so ranges can align on them.
"""

from __future__ import annotations

from pathlib import Path

from formats import checkpoints, internal
from formats.index import encode_offset_entry, encode_time_entry
from formats.records import RecordSpec, build_batch
from formats.segment import SegmentIndexer, filename

T0 = 1_700_000_000_000
INDEX_INTERVAL = 512
# JVM options for the tests' Spark processes: the JVM does little in these jobs, start-up is the cost
FAST_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


class PartitionWriter:
    """Appends batches to segments of one partition dir, with offset and time indexes."""

    def __init__(self, log_dir: Path, topic: str, partition: int = 0) -> None:
        self.dir = log_dir / f"{topic}-{partition}"
        self.dir.mkdir(parents=True)
        self.segment: Path | None = None
        self.positions: dict[int, int] = {}  # base offset -> (segment file, position), for planting

    def roll(self, base_offset: int) -> None:
        self._flush()
        self.base = base_offset
        self.segment = self.dir / filename(base_offset, ".log")
        self.log, self.index, self.time_index = bytearray(), bytearray(), bytearray()
        self.indexer = SegmentIndexer(INDEX_INTERVAL)

    def append(self, batch: bytes, base_offset: int, last_offset: int, max_timestamp: int) -> tuple[str, int]:
        if self.segment is None:
            self.roll(base_offset)
        position = len(self.log)
        entries = self.indexer.append(position, last_offset, max_timestamp, len(batch))
        if entries.offset_entry:
            self.index += encode_offset_entry(self.base, *entries.offset_entry)
        if entries.time_entry:
            self.time_index += encode_time_entry(self.base, *entries.time_entry)
        self.log += batch
        return str(self.segment), position

    def data(self, base_offset: int, n: int, *, value: bytes | None = None, **kw) -> tuple[str, int]:
        """n records at base_offset.., timestamp T0 + offset, unique values unless `value` is given."""
        specs = [
            RecordSpec(
                T0 + base_offset + i,
                b"k" if value else b"k%d" % ((base_offset + i) % 7),
                value or b"v%d" % (base_offset + i),
            )
            for i in range(n)
        ]
        batch = build_batch(specs, base_offset=base_offset, partition_leader_epoch=0, **kw)
        return self.append(batch, base_offset, base_offset + n - 1, T0 + base_offset + n - 1)

    def close(self) -> None:
        self._flush()

    def _flush(self) -> None:
        if self.segment is None:
            return
        final = self.indexer.final_time_entry()
        if final:
            self.time_index += encode_time_entry(self.base, *final)
        self.segment.write_bytes(self.log)
        self.segment.with_suffix(".index").write_bytes(self.index)
        self.segment.with_suffix(".timeindex").write_bytes(self.time_index)


def build(root: Path) -> dict:
    """A log dir with every kind of planted finding; returns the truth, finding by finding."""
    log_dir = root / "broker-1"
    log_dir.mkdir(parents=True)
    truth: dict[str, list] = {"gaps": [], "idempotent": [], "content": [], "corrupt": []}

    # orders-0: an unexplained gap inside a segment and one across a segment boundary
    w = PartitionWriter(log_dir, "orders")
    offset = 0
    for _ in range(40):
        if offset == 50:
            offset = 60
            truth["gaps"].append(("orders", 0, "offset_gap_unexplained", 50, 59))
        w.data(offset, 5)
        offset += 5
    truth["gaps"].append(("orders", 0, "offset_gap_unexplained", offset, offset + 4))
    offset += 5
    w.roll(offset)
    for _ in range(40):
        w.data(offset, 5)
        offset += 5
    w.close()
    orders_end = offset

    # payments-0: a transaction whose marker the cleaner removed (a gap of one after a transactional batch)
    w = PartitionWriter(log_dir, "payments")
    w.data(0, 3)
    w.data(3, 3, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    truth["gaps"].append(("payments", 0, "offset_gap_control_marker", 6, 6))
    w.data(7, 3)
    w.close()

    # compacted-0: in the cleaner checkpoint; a batch with records removed and whole batches gone
    w = PartitionWriter(log_dir, "compacted")
    w.data(0, 4)
    w.append(
        build_batch([RecordSpec(T0 + 4, b"a", b"x", (), 0), RecordSpec(T0 + 9, b"b", b"y", (), 5)], base_offset=4),
        4, 9, T0 + 9,
    )  # fmt: skip
    w.data(20, 2)
    truth["gaps"].append(("compacted", 0, "offset_gap_compaction", 10, 19))
    w.close()

    # logs-0: the first segment is named 0 but its first batch is at 10: the head went (retention)
    w = PartitionWriter(log_dir, "logs")
    w.roll(0)
    w.data(10, 5)
    truth["gaps"].append(("logs", 0, "offset_gap_retention", 0, 9))
    w.close()

    # orders-1: an idempotent producer re-sends a batch (same sequences, new offsets)
    w = PartitionWriter(log_dir, "orders", 1)
    seq = 0
    offset = 0
    sent = {}
    for i in range(30):
        w.data(offset, 4, producer_id=7, producer_epoch=1, base_sequence=seq)
        sent[seq] = offset
        if i == 20:  # the retry of the batch before lands right after it
            w.data(offset + 4, 4, producer_id=7, producer_epoch=1, base_sequence=seq - 4)
            truth["idempotent"].append(("orders", 1, 7, 1, seq - 4, [sent[seq - 4], offset + 4]))
            offset += 4
        offset += 4
        seq += 4
    w.close()

    # clicks-0: a record repeated 3 offsets later (reported) and one 5000 offsets later (outside the window)
    w = PartitionWriter(log_dir, "clicks")
    for o in range(0, 60):
        value = b"same-click" if o in (10, 13) else b"far-click" if o == 20 else None
        w.data(o, 1, value=value)
    truth["content"].append(("clicks", 0, [10, 13]))
    w.data(5020, 1, value=b"far-click")
    truth["gaps"].append(("clicks", 0, "offset_gap_unexplained", 60, 5019))
    w.close()

    # broken-0: a flipped payload byte (CRC) in segment 0; bytes that cannot be framed in segment 1
    w = PartitionWriter(log_dir, "broken")
    for o in range(0, 50, 5):
        file, position = w.data(o, 5)
        if o == 20:
            flipped = (file, position)
    w.roll(50)
    for o in range(50, 100, 5):
        file, position = w.data(o, 5)
        if o == 75:
            garbage = (file, position)
    w.close()
    _flip(Path(flipped[0]), flipped[1] + 70)
    truth["corrupt"].append(("broken", 0, "crc_mismatch", flipped[0], flipped[1]))
    _put(Path(garbage[0]), garbage[1] + 16, b"\x07")  # magic 7
    truth["corrupt"].append(("broken", 0, "corrupt_batch", garbage[0], garbage[1]))

    # __consumer_offsets: group g1 on orders-0 (150, then 300), g2 on clicks-0 up to date
    w = PartitionWriter(log_dir, "__consumer_offsets", 0)
    commits = [
        ("g1", "orders", 0, 150, T0 + 1_000),
        ("g2", "clicks", 0, 5021, T0 + 2_000),
        ("g1", "orders", 0, 300, T0 + 9_000),
    ]
    for i, (group, topic, partition, committed, ts) in enumerate(commits):
        key, value = internal.encode_offset_commit(group, topic, partition, committed, 0, "", ts)
        w.append(build_batch([RecordSpec(ts, key, value)], base_offset=i), i, i, ts)
    w.close()
    truth["lag"] = {("g1", "orders", 0): (300, orders_end), ("g2", "clicks", 0): (5021, 5021)}
    truth["commit_times"] = [ts for *_, ts in commits]

    (log_dir / "cleaner-offset-checkpoint").write_text(
        checkpoints.write_offset_checkpoint({("compacted", 0): 20})
    )
    (log_dir / "log-start-offset-checkpoint").write_text(checkpoints.write_offset_checkpoint({}))
    return truth


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(data)


def _put(path: Path, position: int, value: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[position : position + len(value)] = value
    path.write_bytes(data)
