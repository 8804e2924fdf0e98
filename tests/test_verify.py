"""`kcli verify`: real log dirs written with the batch builder and Kafka's index rule, then corrupted on purpose.

Each planted fault must come back at its exact file and byte position with the right kind; a clean dir
must report nothing; bad paths give one sentence and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Producer
from conftest import REPO, BrokerProcess, kcli_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats import checkpoints
from formats.index import encode_offset_entry, encode_time_entry
from formats.records import ControlType, RecordSpec, build_batch, build_control_batch, read_batch
from formats.segment import SegmentIndexer, filename
from ops.verify import KINDS, Finding, NotKafkaPath, Verifier, VerifyOptions, resolve
from ops.verify.indexes import IndexFiles

T0 = 1_700_000_000_000
FIXTURES = REPO / "fixtures" / "logdir"
CLI = [sys.executable, "-m", "kcli", "verify"]


# --- writing partitions as a broker does ----------------------------------------------------------------


class PartitionWriter:
    """Segments, .index/.timeindex by Kafka's sparse rule, and the leader-epoch-checkpoint of one partition."""

    def __init__(
        self, root: Path, topic: str = "orders", partition: int = 0, index_interval: int = 100
    ) -> None:
        self.dir = root / f"{topic}-{partition}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.index_interval = index_interval
        self.next_offset = 0
        self.epochs: list[tuple[int, int]] = []
        self.base: int | None = None
        self.positions: dict[int, tuple[int, int]] = {}  # base offset -> (segment base, position)

    def roll(self, base: int | None = None) -> None:
        self._flush()
        self.base = self.next_offset if base is None else base
        self.log, self.index, self.time_index = bytearray(), bytearray(), bytearray()
        self.indexer = SegmentIndexer(self.index_interval)

    def append(self, data: bytes) -> int:
        """Append one batch whose offsets and epoch are already in place; returns its position."""
        if self.base is None:
            self.roll()
        batch = read_batch(data)
        if batch.partition_leader_epoch >= 0 and (
            not self.epochs or self.epochs[-1][0] < batch.partition_leader_epoch
        ):
            self.epochs.append((batch.partition_leader_epoch, batch.base_offset))
        position = len(self.log)
        entries = self.indexer.append(position, batch.last_offset, batch.max_timestamp, len(data))
        if entries.offset_entry:
            self.index += encode_offset_entry(self.base, *entries.offset_entry)
        if entries.time_entry:
            self.time_index += encode_time_entry(self.base, *entries.time_entry)
        self.log += data
        self.positions[batch.base_offset] = (self.base, position)
        self.next_offset = batch.last_offset + 1
        return position

    def records(self, base_offset: int, count: int = 3, *, epoch: int = 0, **kwargs) -> int:
        specs = [
            RecordSpec(T0 + base_offset + i, b"k%d" % (base_offset + i), b"v" * 40) for i in range(count)
        ]
        return self.append(
            build_batch(specs, base_offset=base_offset, partition_leader_epoch=epoch, **kwargs)
        )

    def close(self, epochs: list[tuple[int, int]] | None = None) -> Path:
        self._flush()
        entries = self.epochs if epochs is None else epochs
        text = checkpoints.write_leader_epoch_checkpoint([checkpoints.EpochEntry(e, o) for e, o in entries])
        (self.dir / "leader-epoch-checkpoint").write_text(text)
        return self.dir

    def segment(self, base: int) -> Path:
        return self.dir / filename(base, ".log")

    def _flush(self) -> None:
        if self.base is None:
            return
        final = self.indexer.final_time_entry()
        if final:
            self.time_index += encode_time_entry(self.base, *final)
        (self.dir / filename(self.base, ".log")).write_bytes(self.log)
        (self.dir / filename(self.base, ".index")).write_bytes(self.index)
        (self.dir / filename(self.base, ".timeindex")).write_bytes(self.time_index)
        self.base = None


def clean_partition(root: Path, topic: str = "orders") -> PartitionWriter:
    """Three segments, two leader epochs: offsets 0..89, batches of 3 records."""
    p = PartitionWriter(root, topic)
    for _ in range(3):
        p.roll()
        for _ in range(10):
            p.records(p.next_offset, epoch=0 if p.next_offset < 45 else 3)
    p.close()
    return p


def verify(*paths: Path, deep: bool = False, compacted: tuple[str, ...] = ()) -> list[Finding]:
    found: list[Finding] = []
    options = VerifyOptions(deep=deep, compacted_topics=frozenset(compacted))
    Verifier(options, found.append).run([resolve(Path(p)) for p in paths])
    return found


def only(found: list[Finding], kind: str) -> Finding:
    matching = [f for f in found if f.kind == kind]
    assert len(matching) == 1, found
    return matching[0]


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(data)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`kcli verify ARGS` through kcli.cli.main.main in this process."""
    return run_kcli("verify", *map(str, args))


def run_cli_process(*args: str) -> subprocess.CompletedProcess:
    """`kcli verify ARGS` as a real `python -m kcli` process: the entry point as installed."""
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, env=kcli_env(), timeout=60)


# --- clean logs -----------------------------------------------------------------------------------------


def test_clean_partition_dir_has_no_findings(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    assert verify(p.dir) == []
    assert verify(p.dir, deep=True) == []
    assert verify(p.segment(30)) == []


def test_clean_partition_through_the_cli(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    proc = run_cli_process(p.dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"verified 10 files, 3 segments, 30 batches, {_bytes(p.dir)} bytes: no findings"
    ]
    proc = run_cli("--deep", "--output", "json", p.dir)
    assert proc.returncode == 0, proc.stderr
    (summary,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert summary["type"] == "summary"
    assert (summary["segments"], summary["batches"], summary["records"], summary["findings"]) == (
        3,
        30,
        90,
        0,
    )


def test_bundled_fixture_log_dir_is_clean() -> None:
    """Every magic and codec from kafka-python, transactional, compacted and internal partitions, checkpoints."""
    found = verify(FIXTURES, deep=True)
    assert [f for f in found if f.severity == "error"] == []
    assert {f.kind for f in found} <= {"offset_gap_compaction"}


def test_progress_counts_log_bytes_across_segments(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    total = sum(p.segment(base).stat().st_size for base in (0, 30, 60))
    seen: list[int] = []

    def progress(path: Path, size: int):
        assert (path, size) == (p.dir, total)
        return seen.append

    Verifier(VerifyOptions(window=4096), lambda f: None, progress=progress).run([resolve(p.dir)])
    assert seen == sorted(seen) and seen[-1] == total
    assert p.segment(0).stat().st_size in seen  # the end of the first segment


def test_a_log_dir_checks_its_root_checkpoints(tmp_path: Path) -> None:
    clean_partition(tmp_path, "orders")
    clean_partition(tmp_path, "payments")
    text = checkpoints.write_offset_checkpoint({("orders", 0): 90, ("payments", 0): 95, ("gone", 1): 3})
    (tmp_path / "recovery-point-offset-checkpoint").write_text(text)
    (tmp_path / "replication-offset-checkpoint").write_text(
        checkpoints.write_offset_checkpoint({("orders", 0): 40})
    )
    found = verify(tmp_path)
    beyond = only(found, "checkpoint_beyond_log_end")
    assert beyond.file == str(tmp_path / "recovery-point-offset-checkpoint")
    assert (beyond.first_offset, beyond.position) == (95, len(b"0\n3\ngone 1 3\norders 0 90\n"))
    assert "95 of payments-0 is beyond its log end offset 90" in beyond.message
    unknown = only(found, "checkpoint_unknown_partition")
    assert unknown.position == len(b"0\n3\n") and "gone-1" in unknown.message
    assert len(found) == 2


def test_a_corrupt_root_checkpoint(tmp_path: Path) -> None:
    clean_partition(tmp_path)
    (tmp_path / "replication-offset-checkpoint").write_text("0\n2\norders 0 90\n")
    finding = only(verify(tmp_path), "checkpoint_corrupt")
    assert finding.message == "Expected [2] entries in checkpoint file, but found only [1]."


# --- planted corruption ---------------------------------------------------------------------------------


def test_flipped_byte_is_a_crc_mismatch_at_its_batch(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    base, position = p.positions[36]
    flip(p.segment(base), position + 100)
    (finding,) = verify(p.dir)
    assert finding.kind == "crc_mismatch" and finding.severity == "error"
    assert (finding.file, finding.position) == (str(p.segment(30)), position)
    assert (finding.first_offset, finding.last_offset) == (36, 38)
    assert finding.message.startswith("Record batch is corrupt (stored crc = ")


def test_truncated_tail_is_a_torn_tail_with_its_byte_count(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    log = p.segment(60)
    data = log.read_bytes()
    _, position = p.positions[87]
    log.write_bytes(data[: position + 50])
    found = verify(p.dir)
    torn = only(found, "torn_tail")
    assert (torn.file, torn.position) == (str(log), position)
    assert torn.message.startswith("50 bytes after the last whole batch do not form a complete batch")
    assert f"declares {len(data) - position} bytes" in torn.message
    # the index and time index now point past the valid bytes
    assert {f.kind for f in found} == {"torn_tail", "index_mismatch", "time_index_mismatch"}


def test_torn_tail_in_an_earlier_segment_says_later_segments_are_lost(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    log = p.segment(0)
    data = log.read_bytes()
    log.write_bytes(data + data[:20])  # the start of a batch that was never finished
    torn = only(verify(p.dir), "torn_tail")
    assert "delete every later segment" in torn.message


def test_bad_size_field_is_corrupt_framing(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    _, position = p.positions[12]
    data = bytearray(p.segment(0).read_bytes())
    data[position + 8 : position + 12] = (5).to_bytes(4, "big")
    p.segment(0).write_bytes(data)
    finding = only(verify(p.dir), "corrupt_batch")
    assert finding.position == position
    assert finding.message.startswith("Found record size 5 smaller than minimum record overhead (14)")


def test_unreadable_segment_and_index_files_are_findings_and_the_rest_is_checked(tmp_path: Path) -> None:
    """The next segment's walk starts while the one before is checked: a failure in either stays a finding."""
    p = clean_partition(tmp_path)
    p.segment(30).unlink()
    p.segment(30).mkdir()
    index = p.dir / filename(60, ".index")
    index.unlink()
    index.mkdir()
    found = verify(p.dir)
    assert [(f.file, f.kind) for f in found] == [
        (str(p.segment(30)), "unreadable_file"),
        (str(index), "unreadable_file"),
        (str(p.segment(60)), "offset_gap_unexplained"),
    ]
    assert found[0].message == "cannot read the file: is a directory."
    assert (found[2].first_offset, found[2].last_offset) == (30, 59)


def test_wrong_index_entry(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    index = p.dir / filename(30, ".index")
    entries = bytearray(index.read_bytes())
    n = 4
    relative, position = (
        int.from_bytes(entries[n * 8 : n * 8 + 4]),
        int.from_bytes(entries[n * 8 + 4 : n * 8 + 8]),
    )
    entries[n * 8 : n * 8 + 4] = (relative - 1).to_bytes(4, "big")
    index.write_bytes(entries)
    (finding,) = verify(p.dir)
    assert (finding.kind, finding.file, finding.position) == ("index_mismatch", str(index), n * 8)
    assert finding.first_offset == 30 + relative - 1
    assert finding.message == (
        f"entry {n} maps offset {30 + relative - 1} to log position {position}, "
        f"but the batch there ends at offset {30 + relative}."
    )


def test_index_entry_inside_a_batch_and_past_the_end(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    index = p.dir / filename(0, ".index")
    entries = bytearray(index.read_bytes())
    last = len(entries) // 8 - 1
    position = int.from_bytes(entries[8 * last + 4 : 8 * last + 8])
    entries[8 * last + 4 : 8 * last + 8] = (position + 7).to_bytes(4, "big")
    entries += encode_offset_entry(0, 40, 10_000)
    index.write_bytes(entries)
    found = verify(p.dir)
    assert [(f.kind, f.position) for f in found] == [
        ("index_mismatch", 8 * last),
        ("index_mismatch", 8 * last + 8),
    ]
    assert "which is not the start of a batch" in found[0].message
    assert "beyond the segment's last whole batch" in found[1].message


def test_index_that_fails_kafkas_sanity_check(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    index = p.dir / filename(30, ".index")
    index.write_bytes(index.read_bytes() + b"\x00\x00\x00")
    finding = only(verify(p.dir), "index_corrupt")
    assert "not a multiple of 8" in finding.message or "multiple of 8" in finding.message


def test_untrimmed_preallocated_indexes_are_checked_on_their_entries(tmp_path: Path) -> None:
    """The active segment of a running broker (and any after an unclean shutdown) keeps its .index and
    .timeindex preallocated: the entries, then zeros. Kafka's sanity check would fail that time index on
    its zero last slot; verify checks the entries in use, and still finds a bad one among them."""
    p = clean_partition(tmp_path)
    time_index = p.dir / filename(60, ".timeindex")
    in_use = len(time_index.read_bytes()) // 12
    assert in_use >= 2
    for suffix, size in ((".index", 8 * 1000), (".timeindex", 12 * 1000)):
        path = p.dir / filename(60, suffix)
        path.write_bytes(path.read_bytes().ljust(size, b"\0"))
    assert verify(p.dir) == []
    data = bytearray(time_index.read_bytes())
    first = int.from_bytes(data[0:8], "big")
    data[12 * (in_use - 1) : 12 * (in_use - 1) + 8] = (first - 1).to_bytes(8, "big")
    time_index.write_bytes(data)
    corrupt = only(verify(p.dir), "index_corrupt")
    assert (
        f"the last timestamp is {first - 1} which is less than the first timestamp {first}" in corrupt.message
    )


def test_a_sparse_preallocated_index_is_read_up_to_its_hole(tmp_path: Path) -> None:
    """A broker preallocates an active segment's indexes with one truncate, so past the entries they are a
    hole: verify reads only the entries (kilobytes, not 10 MiB per index), and a file with data after the
    hole is read whole, so what is there is still checked."""
    p = clean_partition(tmp_path)
    for suffix, size in ((".index", 8 * 1_310_720), (".timeindex", 12 * 873_813)):
        os.truncate(p.dir / filename(60, suffix), size)
    assert verify(p.dir) == []
    proc = run_cli(p.dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    read = int(proc.stdout.split(" bytes")[0].rsplit(" ", 1)[1])
    assert read < 1 << 20, proc.stdout  # the two files hold 20 MiB, nearly all of it hole
    time_index = p.dir / filename(60, ".timeindex")
    with open(time_index, "r+b") as f:
        f.seek(12 * 873_812)
        f.write(encode_time_entry(60, T0, 61))  # data after the hole: a stray last slot
    assert "index_corrupt" in {f.kind for f in verify(p.dir)}


def test_a_running_brokers_log_dir_verifies_clean(broker: BrokerProcess) -> None:
    """Active segments with preallocated indexes holding entries: no findings while the broker runs."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(2000):
        producer.produce("live", key=b"k%d" % i, value=b"v" * 100)
    assert producer.flush(15) == 0
    time_index = broker.data_dir / "live-0" / filename(0, ".timeindex")
    assert time_index.stat().st_size > 12 * 100  # still preallocated, with entries at its head
    proc = run_cli(broker.data_dir / "live-0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("no findings"), proc.stdout


def test_out_of_order_time_index_entry(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    time_index = p.dir / filename(0, ".timeindex")
    data = bytearray(time_index.read_bytes())
    n = 3
    earlier = int.from_bytes(data[12 * (n - 2) : 12 * (n - 2) + 8])
    data[12 * n : 12 * n + 8] = earlier.to_bytes(8, "big")
    time_index.write_bytes(data)
    found = verify(p.dir)
    out_of_order = only(found, "time_index_out_of_order")
    assert (out_of_order.file, out_of_order.position) == (str(time_index), 12 * n)
    assert (
        f"entry {n} has timestamp {earlier}, not above the previously indexed timestamp"
        in out_of_order.message
    )
    mismatch = only(found, "time_index_mismatch")  # the entry no longer matches its batch either
    assert mismatch.position == 12 * n


def test_index_entries_out_of_order_whatever_the_parsing_slices(tmp_path: Path) -> None:
    """Indexes are parsed a slice at a time (ahead of their segment): an entry out of order is found at its
    place, with the same findings whether it sits inside a slice or at the edge of one."""
    p = clean_partition(tmp_path)
    index = p.dir / filename(30, ".index")
    entries = bytearray(index.read_bytes())
    entries[2 * 8 : 3 * 8], entries[3 * 8 : 4 * 8] = entries[3 * 8 : 4 * 8], entries[2 * 8 : 3 * 8]
    index.write_bytes(entries)
    time_index = p.dir / filename(60, ".timeindex")
    data = bytearray(time_index.read_bytes())
    data[12 * 4 + 8 : 12 * 5] = data[12 * 2 + 8 : 12 * 3]  # entry 4 gets the offset of entry 2
    time_index.write_bytes(data)
    default = IndexFiles.SLICE
    try:
        by_slice = {}
        for size in (default, 1, 2, 3):
            IndexFiles.SLICE = size
            by_slice[size] = verify(p.dir)
    finally:
        IndexFiles.SLICE = default
    found = by_slice[default]
    assert all(other == found for other in by_slice.values())
    corrupt = only(found, "index_corrupt")
    assert (corrupt.file, corrupt.position) == (str(index), 3 * 8)
    assert corrupt.message.startswith("entry 3 (offset ") and "does not come after entry 2" in corrupt.message
    (backwards,) = [f for f in found if f.kind == "time_index_out_of_order" and "below offset" in f.message]
    assert (backwards.file, backwards.position) == (str(time_index), 12 * 4)
    assert backwards.message.endswith("of entry 3.")


def test_missing_offsets_are_an_unexplained_gap(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 10)
    position = p.records(20, 10)
    p.close()
    (finding,) = verify(p.dir)
    assert (finding.kind, finding.severity) == ("offset_gap_unexplained", "error")
    assert (finding.position, finding.first_offset, finding.last_offset) == (position, 10, 19)
    assert finding.message.startswith("offsets 10..19 are missing before this batch: nothing explains it")


def test_gap_in_a_compacted_partition_is_compaction(tmp_path: Path) -> None:
    """The batch before the gap kept its offset range but lost records: the cleaner's signature."""
    p = PartitionWriter(tmp_path)
    p.records(0, 5)
    kept = [RecordSpec(T0 + 5, b"a", b"1", offset_delta=0), RecordSpec(T0 + 9, b"b", b"2", offset_delta=4)]
    p.append(build_batch(kept, base_offset=5, partition_leader_epoch=0))
    position = p.records(20, 5)
    p.close()
    (finding,) = verify(p.dir)
    assert (finding.kind, finding.severity) == ("offset_gap_compaction", "warning")
    assert (finding.position, finding.first_offset, finding.last_offset) == (position, 10, 19)


def test_gap_before_any_compacted_batch_is_classified_once_the_partition_is_read(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 5)
    p.records(10, 5)
    p.append(
        build_batch([RecordSpec(T0, b"a", b"1", offset_delta=2)], base_offset=15, partition_leader_epoch=0)
    )
    p.close()
    assert only(verify(p.dir), "offset_gap_compaction").first_offset == 5


def test_gap_in_a_topic_known_to_be_compacted(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 5)
    p.records(10, 5)
    p.close()
    assert only(verify(p.dir), "offset_gap_unexplained")
    assert only(verify(p.dir, compacted=("orders",)), "offset_gap_compaction").first_offset == 5


def test_gap_after_a_transactional_batch_is_a_removed_marker(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    txn = [RecordSpec(T0 + i, None, b"x") for i in range(3)]
    p.append(
        build_batch(
            txn, base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
        )
    )
    position = p.records(4, 2)
    p.close()
    (finding,) = verify(p.dir)
    assert (finding.kind, finding.position, finding.first_offset, finding.last_offset) == (
        "offset_gap_control_marker", position, 3, 3
    )  # fmt: skip


def test_head_below_the_log_start_is_retention(tmp_path: Path) -> None:
    """log-start-offset-checkpoint says 50; retention already removed the segments up to 100."""
    p = PartitionWriter(tmp_path)
    p.roll(100)
    p.records(100, 5)
    p.close()
    (tmp_path / "log-start-offset-checkpoint").write_text(
        checkpoints.write_offset_checkpoint({("orders", 0): 50})
    )
    for target in (tmp_path, p.dir):
        (finding,) = verify(target)
        assert (finding.kind, finding.severity) == ("offset_gap_retention", "warning")
        assert (finding.position, finding.first_offset, finding.last_offset) == (0, 50, 99)
    (tmp_path / "log-start-offset-checkpoint").unlink()
    assert verify(p.dir) == []  # the log simply starts at its first segment


def test_overlapping_offsets(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 10)
    position = p.records(5, 10)
    p.close()
    finding = only(verify(p.dir), "offset_overlap")
    assert (finding.position, finding.first_offset, finding.last_offset) == (position, 5, 14)


def test_segment_named_above_its_first_batch(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 10)
    p.roll(12)
    p.records(10, 5)
    p.close()
    finding = only(verify(p.dir), "segment_name_mismatch")
    assert (finding.file, finding.position, finding.first_offset) == (str(p.segment(12)), 0, 10)


def test_leader_epoch_going_down(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 5, epoch=2)
    p.records(5, 5, epoch=4)
    position = p.records(10, 5, epoch=3)
    p.close(epochs=[(2, 0), (4, 5)])
    (finding,) = verify(p.dir)
    assert (finding.kind, finding.position, finding.first_offset) == ("leader_epoch_regression", position, 10)
    assert finding.message == "partition_leader_epoch goes down from 4 to 3 at offset 10."


def test_leader_epoch_checkpoint_that_disagrees(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 10, epoch=0)
    p.records(10, 10, epoch=2)
    p.close(epochs=[(0, 0), (2, 15)])
    (finding,) = verify(p.dir)
    assert finding.kind == "leader_epoch_checkpoint_mismatch"
    assert (finding.file, finding.position) == (str(p.dir / "leader-epoch-checkpoint"), len(b"0\n2\n"))
    assert (finding.first_offset, finding.last_offset) == (10, 19)
    assert (
        finding.message
        == "offsets 10..19 were written in epoch 2, but the entry 0 0 assigns offset 10 to epoch 0."
    )


def test_leader_epoch_checkpoint_entry_inside_a_run_and_beyond_the_end(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 10, epoch=0)
    p.records(10, 10, epoch=2)
    p.close(epochs=[(0, 0), (1, 5), (2, 10), (7, 21)])
    found = verify(p.dir)
    assert [(f.kind, f.position) for f in found] == [
        ("leader_epoch_checkpoint_mismatch", len(b"0\n4\n0 0\n1 5\n2 10\n")),
        ("leader_epoch_checkpoint_mismatch", len(b"0\n4\n0 0\n")),
    ]
    assert "beyond the log end offset 20" in found[0].message
    assert "the entry 1 5 starts epoch 1 inside them" in found[1].message


def test_latest_epoch_with_no_batches_yet_is_fine(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 10, epoch=0)
    p.close(epochs=[(0, 0), (1, 10)])
    assert verify(p.dir) == []


def test_deep_checks_record_timestamps_against_max_timestamp(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    specs = [RecordSpec(T0 + i, None, b"x") for i in range(4)]
    position = p.append(build_batch(specs, partition_leader_epoch=0, max_timestamp=T0 + 1))
    p.close()
    assert verify(p.dir) == []
    (finding,) = verify(p.dir, deep=True)
    assert (finding.kind, finding.position) == ("max_timestamp_mismatch", position)
    assert (
        finding.message
        == f"the record at offset 3 has timestamp {T0 + 3}, above the batch's max_timestamp {T0 + 1}."
    )


def test_deep_reports_broken_records_and_control_keys(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 3)
    bad = bytearray(build_batch([RecordSpec(T0, None, b"x")] * 2, base_offset=3, partition_leader_epoch=0))
    bad[-1:] = b""  # drop the last record byte, then fix the size and CRC so only the records are wrong
    bad[8:12] = (len(bad) - 12).to_bytes(4, "big")
    from formats import _native

    bad[17:21] = _native.crc32c(bytes(bad[21:])).to_bytes(4, "big")
    position = p.append(bytes(bad))
    marker = build_control_batch(
        ControlType.COMMIT, base_offset=5, producer_id=1, producer_epoch=0, timestamp=T0
    )
    p.append(marker)
    p.close()
    assert verify(p.dir) == []
    (finding,) = verify(p.dir, deep=True)
    assert (finding.kind, finding.position, finding.first_offset) == ("corrupt_records", position, 3)


def test_pre_4_0_follower_index_entry_is_a_warning(tmp_path: Path) -> None:
    """One entry per follower append: last offset of its last batch at the position of its first."""
    p = PartitionWriter(tmp_path, index_interval=1 << 30)
    p.records(0, 3)
    first = p.records(3, 3)
    p.records(6, 3)
    p.records(9, 3)
    p.close()
    (p.dir / filename(0, ".index")).write_bytes(encode_offset_entry(0, 8, first))
    (finding,) = verify(p.dir)
    assert (finding.kind, finding.severity, finding.position) == ("index_entry_spans_batches", "warning", 0)


def test_corrupt_snapshot_and_partition_metadata(tmp_path: Path) -> None:
    p = clean_partition(tmp_path)
    (p.dir / filename(30, ".snapshot")).write_bytes(b"\x00\x01" + b"\x00" * 12)
    (p.dir / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA")
    found = verify(p.dir)
    assert only(found, "snapshot_corrupt").message.startswith("Snapshot is corrupt (CRC is no longer valid)")
    assert only(found, "checkpoint_corrupt").message == "Invalid topic ID in partition metadata file."


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_crc_covered_byte_is_found_at_its_batch(tmp_path_factory, data) -> None:
    root = tmp_path_factory.mktemp("flip")
    p = PartitionWriter(root)
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=8))
    starts = []
    for size in sizes:
        starts.append(p.records(p.next_offset, size))
    p.close()
    log = p.segment(0)
    ends = starts[1:] + [log.stat().st_size]
    k = data.draw(st.integers(0, len(starts) - 1))
    at = data.draw(st.integers(starts[k] + 21, ends[k] - 1))
    flip(log, at)
    found = verify(p.dir)
    assert any(f.kind == "crc_mismatch" and f.position == starts[k] for f in found), found


# --- paths and the command line -------------------------------------------------------------------------


def test_bad_paths_give_one_sentence_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty-dir").mkdir()
    cases = {
        tmp_path / "missing": f"kcli: {tmp_path / 'missing'}: no such file or directory.",
        tmp_path / "notes.txt": f"kcli: {tmp_path / 'notes.txt'} is not a .log segment, a partition directory or a log directory.",
        tmp_path / "empty-dir": f"kcli: {tmp_path / 'empty-dir'} is not a Kafka directory: it holds no segments, partition directories or checkpoint files.",
    }  # fmt: skip
    for path, sentence in cases.items():
        proc = run_cli(path)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", sentence + "\n")
    proc = run_cli()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    with pytest.raises(NotKafkaPath):
        resolve(tmp_path / "empty-dir")


def test_garbage_and_empty_segments(tmp_path: Path) -> None:
    garbage = tmp_path / filename(0, ".log")
    garbage.write_bytes(random.Random(7).randbytes(3000))
    proc = run_cli(garbage)
    assert proc.returncode == 1 and proc.stderr == ""
    first, summary = proc.stdout.splitlines()[0], proc.stdout.splitlines()[-1]
    assert first.startswith(f"{garbage}:0: ") and ("corrupt_batch" in first or "torn_tail" in first)
    assert summary.startswith("verified 1 file, 1 segment, 0 batches, 3000 bytes: ")
    empty = tmp_path / "sub" / filename(0, ".log")
    empty.parent.mkdir()
    empty.write_bytes(b"")
    proc = run_cli(empty)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == "verified 1 file, 1 segment, 0 batches, 0 bytes: no findings\n"


def test_findings_as_text_and_json_lines(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 10)
    position = p.records(20, 10)
    p.close()
    proc = run_cli(p.dir)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(
        f"{p.segment(0)}:{position}: offset_gap_unexplained: offsets 10..19 are missing"
    )
    assert lines[-1].endswith(": 1 finding (1 error, 0 warnings)")
    proc = run_cli("-o", "json", p.dir)
    finding, summary = (json.loads(line) for line in proc.stdout.splitlines())
    assert finding == {
        "type": "finding",
        "file": str(p.segment(0)),
        "position": position,
        "first_offset": 10,
        "last_offset": 19,
        "kind": "offset_gap_unexplained",
        "severity": "error",
        "message": finding["message"],
    }
    assert (summary["errors"], summary["warnings"], summary["kinds"]) == (1, 0, {"offset_gap_unexplained": 1})


def test_warnings_alone_exit_0_but_are_printed(tmp_path: Path) -> None:
    p = PartitionWriter(tmp_path)
    p.records(0, 5)
    p.records(10, 5)
    p.close()
    proc = run_cli("--compacted", "orders", p.dir)
    assert proc.returncode == 0
    assert ": offset_gap_compaction: " in proc.stdout.splitlines()[0]


def test_every_kind_has_a_severity() -> None:
    assert set(KINDS.values()) == {"error", "warning"}


def _bytes(directory: Path) -> int:
    return sum(
        f.stat().st_size
        for f in directory.iterdir()
        if f.name.split(".")[-1] in {"log", "index", "timeindex"} or f.name == "leader-epoch-checkpoint"
    )


def test_a_dir_pending_deletion_has_no_recorded_log_start(tmp_path: Path) -> None:
    """DeleteRecords then DeleteTopics leaves `<topic>-0.<uuid>-delete` whose leader-epoch-checkpoint was
    truncated from the start (its first entry moved to the new log start) while the segment still holds
    the earlier batches; no checkpoint records that log start, so those batches are not a mismatch. The
    same files under the live name, with no log start checkpointed, still are."""
    import shutil

    source = REPO / "fixtures" / "logdir" / "m2-zstd-0"
    text = "0\n2\n0 1\n2 24\n"  # the fixture's "0 0" entry moved to offset 1, as truncateFromStart(1) does
    pending = tmp_path / "logs" / "m2-zstd-0.0123456789abcdef0123456789abcdef-delete"
    live = tmp_path / "live" / "m2-zstd-0"
    for target in (pending, live):
        shutil.copytree(source, target)
        (target / "leader-epoch-checkpoint").write_text(text)
    assert verify(pending.parent) == []
    found = verify(live.parent)
    assert [f.kind for f in found] == ["leader_epoch_checkpoint_mismatch"]
    assert "but the first entry starts at offset 1" in found[0].message


def test_a_directory_of_segments_not_named_topic_partition_is_verified(tmp_path: Path) -> None:
    """A copy of a partition's files under another name holds segments: it is verified segment by
    segment, not refused as a directory that "holds no segments"."""
    copy = tmp_path / "copied segments"
    copy.mkdir()
    for name in ("00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"):
        (copy / name).write_bytes((FIXTURES / "m2-none-0" / name).read_bytes())
    result = run_kcli("verify", str(copy))
    assert result.returncode == 0, result.stderr
    assert "3 files, 1 segment, 4 batches" in result.stdout and "no findings" in result.stdout, result.stdout
