"""The broker's storage layer on real files: appends, reads, indexes, validation, retention, epochs, manager.

Segments are decoded with `formats` and with kafka-python's reader; index files are compared with
Kafka's sparse rule recomputed from the `.log`; `kcli verify` must find nothing in what the log wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import kcli_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kio.schema.errors import ErrorCode

from formats.compression import Codec
from formats.index import OffsetIndex, TimeIndex, encode_offset_entry, encode_time_entry, preallocated_size
from formats.records import (
    TIMESTAMP_TYPE_BIT,
    ControlType,
    RecordSpec,
    TimestampType,
    build_batch,
    build_control_batch,
    read_batch,
)
from formats.segment import SegmentIndexer, walk
from kcli.broker.log import (
    AppendInfo,
    AppendOrigin,
    Log,
    LogConfig,
    LogManager,
    OffsetOutOfRange,
    PolicyViolation,
    RecordError,
)
from kcli.config import BrokerConfig

T0 = 1_700_000_000_000
TOPIC_ID = uuid.UUID("7b3a9e52-1f7c-4f55-a8c2-6a0d3c2b9e11")


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def records(n: int, ts: int = T0, size: int = 100, key: bytes | None = b"k") -> list[RecordSpec]:
    return [RecordSpec(ts + i, key, bytes([i % 251]) * size, [("h", b"v")]) for i in range(n)]


def batch(n: int = 3, ts: int = T0, size: int = 100, **kwargs) -> bytes:
    key = kwargs.pop("key", b"k")
    return build_batch(records(n, ts, size, key), **kwargs)


def new_log(tmp_path: Path, clock: Clock | None = None, name: str = "orders-0", **config) -> Log:
    config.setdefault("file_delete_delay_ms", 0)
    return Log.create(tmp_path / name, LogConfig(**config), TOPIC_ID, clock=clock or Clock())


def leader_append(log: Log, data: bytes, **kwargs) -> AppendInfo:
    """Append as leader, then raise the high watermark to the log end, as the only in-sync replica's
    Partition does after each append (the Log never moves its own high watermark)."""
    info = log.append_as_leader(data, **kwargs)
    log.update_high_watermark(log.log_end_offset)
    return info


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Every byte a consumer would fetch from `start` to the high watermark, following the slices."""
    out = bytearray()
    offset = log.log_start_offset if start is None else start
    while True:
        fetched = log.read(offset, max_bytes, upper_bound=log.high_watermark, min_one_batch=True)
        if fetched is None:
            return bytes(out)
        data = os.pread(fetched.fd, fetched.size, fetched.position)
        assert len(data) == fetched.size
        out += data
        offset = read_batch_last(data) + 1


def read_batch_last(data: bytes) -> int:
    result = walk(data)
    assert result.stop == len(data), "a fetch slice must hold whole batches"
    return result.batches[-1].last_offset


def segment_files(log: Log) -> list[str]:
    return sorted(os.listdir(log.dir))


def kafka_python_records(data: bytes) -> list[tuple]:
    reader = MemoryRecords(data)
    out = []
    while (kbatch := reader.next_batch()) is not None:
        assert kbatch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kbatch]
    return out


def expected_indexes(log_bytes: bytes, base_offset: int, interval: int) -> tuple[bytes, bytes]:
    """Kafka's sparse rule recomputed from a .log: what .index and .timeindex must hold after close."""
    indexer = SegmentIndexer(interval)
    index, time_index = bytearray(), bytearray()
    for b in walk(log_bytes).batches:
        offset_entry, time_entry = indexer.append(b.position, b.last_offset, b.max_timestamp, b.size)
        if offset_entry:
            index += encode_offset_entry(base_offset, *offset_entry)
            if time_entry:
                time_index += encode_time_entry(base_offset, *time_entry)
    final = indexer.final_time_entry()
    if final:
        time_index += encode_time_entry(base_offset, *final)
    return bytes(index), bytes(time_index)


# --- appends and reads -----------------------------------------------------------------------------------


def test_append_read_round_trip_across_rolls(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=20_000, index_interval_bytes=1024)
    sent = []
    for i in range(60):
        epoch = 0 if i < 30 else 4
        data = batch(1 + i % 5, T0 + 10 * i, 300 + 7 * i)
        info = leader_append(log, data, leader_epoch=epoch, now_ms=T0 + 10 * i)
        assert info.first_offset == (sent[-1][0] + 1 if sent else 0)
        assert info.last_offset == info.first_offset + i % 5
        assert info.log_append_time == -1 and info.log_start_offset == 0
        for k, spec in enumerate(records(1 + i % 5, T0 + 10 * i, 300 + 7 * i)):
            sent.append((info.first_offset + k, spec.timestamp, spec.key, spec.value, (("h", b"v"),)))
    assert log.log_end_offset == log.high_watermark == len(sent)  # the HW where leader_append put it
    assert len(log.segments) > 5
    data = read_all(log)
    assert kafka_python_records(data) == sent
    ours = [
        (r.offset, r.timestamp, r.key, r.value, r.headers)
        for b in walk(data).batches
        for r in b.records(data)
    ]
    assert ours == sent
    epochs = [b.partition_leader_epoch for b in walk(data).batches]
    assert epochs == [0] * 30 + [4] * 30
    # Segment files: 20-digit names, each named after its first offset.
    bases = [s.base_offset for s in log.segments]
    for segment in log.segments:
        assert segment.log_path.name == f"{segment.base_offset:020d}.log"
        first = walk(segment.log_path.read_bytes()).batches[0]
        assert first.base_offset == segment.base_offset
    assert bases == sorted(bases)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == f"0\n2\n0 0\n4 {first_offset_of(sent, 30)}\n"
    assert (log.dir / "partition.metadata").read_text() == "version: 0\ntopic_id: ezqeUh98T1WowmoNPCueEQ"
    log.close()


def first_offset_of(sent: list[tuple], batch_number: int) -> int:
    return sum(1 + i % 5 for i in range(batch_number))


def test_reopened_log_serves_the_same_bytes(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=5_000)
    for i in range(30):
        leader_append(log, batch(2, T0 + i), leader_epoch=1, now_ms=T0)
    before = read_all(log)
    log.flush_all()
    log.close()
    again = Log.load(
        tmp_path / "orders-0",
        LogConfig(segment_bytes=5_000),
        had_clean_shutdown=True,
        high_watermark_checkpoint=60,
    )
    assert again.log_end_offset == 60 and again.topic_id == TOPIC_ID
    assert read_all(again) == before
    info = again.append_as_leader(batch(1), leader_epoch=1, now_ms=T0)
    assert info.first_offset == 60
    again.close()


def test_index_files_follow_kafka_rule_and_are_trimmed(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=30_000, index_interval_bytes=2000, segment_index_bytes=1000)
    for i in range(80):
        log.append_as_leader(batch(1 + i % 3, T0 + (i * 37) % 500, 400), leader_epoch=0, now_ms=T0)
    active = log.active_segment
    # The active segment's indexes are preallocated to segment.index.bytes in whole entries.
    assert active.index_path.stat().st_size == preallocated_size(1000, 8) == 1000
    assert active.time_index_path.stat().st_size == preallocated_size(1000, 12) == 996
    inactive = log.segments[:-1]
    assert inactive
    for segment in inactive:  # trimmed on roll
        assert segment.index_path.stat().st_size % 8 == 0
        assert segment.index_path.stat().st_size == segment.offset_index.entries * 8
    log.close()
    for name in sorted(os.listdir(log.dir)):
        if not name.endswith(".log"):
            continue
        base = int(name[:20])
        log_bytes = (log.dir / name).read_bytes()
        index, time_index = expected_indexes(log_bytes, base, 2000)
        assert (log.dir / f"{base:020d}.index").read_bytes() == index
        assert (log.dir / f"{base:020d}.timeindex").read_bytes() == time_index
        assert len(OffsetIndex(index, base)) == len(index) // 8
        assert len(TimeIndex(time_index, base)) == len(time_index) // 12


def test_roll_when_the_offset_index_is_full(tmp_path: Path) -> None:
    log = new_log(tmp_path, index_interval_bytes=0, segment_index_bytes=40)  # 5 offset slots
    for _ in range(13):  # every batch but a segment's first gets an entry: 6 batches fill a segment
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=T0)
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    assert [s.offset_index.entries for s in log.segments] == [5, 5, 0]
    log.close()


def test_roll_on_segment_ms_by_record_timestamps(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_ms=1000)
    log.append_as_leader(batch(1, T0), leader_epoch=0, now_ms=T0)
    log.append_as_leader(batch(1, T0 + 999), leader_epoch=0, now_ms=T0)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, T0 + 1001), leader_epoch=0, now_ms=T0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.integers(1, 6), st.integers(0, 3000), st.integers(-5000, 5000), st.sampled_from(list(Codec))
        ),
        min_size=1,
        max_size=25,
    ),
    st.integers(20_000, 60_000),
    st.integers(0, 3000),
)
def test_round_trip_hypothesis(
    tmp_path_factory: pytest.TempPathFactory, appends: list, segment_bytes: int, interval: int
) -> None:
    root = tmp_path_factory.mktemp("log")
    log = new_log(root, segment_bytes=segment_bytes, index_interval_bytes=interval)
    expected = []
    for n, size, skew, codec in appends:
        specs = [RecordSpec(T0 + skew + k, None if k % 2 else b"key", os.urandom(size)) for k in range(n)]
        info = log.append_as_leader(build_batch(specs, codec=codec), leader_epoch=2, now_ms=T0)
        expected += [(info.first_offset + k, s.timestamp, s.key, s.value) for k, s in enumerate(specs)]
    log.close()
    again = Log.load(
        root / "orders-0", LogConfig(), had_clean_shutdown=True, high_watermark_checkpoint=len(expected)
    )
    data = read_all(again, max_bytes=5000)
    got = [(r.offset, r.timestamp, r.key, r.value) for b in walk(data).batches for r in b.records(data)]
    assert got == expected
    assert [(o, t, k, v) for o, t, k, v, _ in kafka_python_records(data)] == expected
    again.close()
    for segment in again.segments:
        index, time_index = expected_indexes(segment.log_path.read_bytes(), segment.base_offset, interval)
        assert segment.index_path.read_bytes() == index
        assert segment.time_index_path.read_bytes() == time_index


def test_read_limits_and_bounds(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    sizes = []
    for _ in range(5):
        info = log.append_as_leader(batch(4, T0, 500), leader_epoch=0, now_ms=T0)
        sizes.append(info.size)
    one = sizes[0]
    # An offset inside a batch returns the batch holding it.
    fetched = log.read(6, 1 << 20, upper_bound=20, min_one_batch=True)
    assert fetched is not None and fetched.position == one and fetched.size == 4 * one
    # max_bytes below one batch: nothing, unless the first batch is wanted whatever its size.
    assert log.read(0, one - 1, upper_bound=20, min_one_batch=False) is None
    assert log.read(0, one - 1, upper_bound=20, min_one_batch=True).size == one
    assert log.read(0, 2 * one + 10, upper_bound=20, min_one_batch=False).size == 2 * one
    # Nothing at or past the upper bound (high watermark or last stable offset).
    assert log.read(0, 1 << 20, upper_bound=8, min_one_batch=True).size == 2 * one
    assert log.read(8, 1 << 20, upper_bound=8, min_one_batch=True) is None
    assert log.read(20, 1 << 20, upper_bound=20, min_one_batch=True) is None
    with pytest.raises(OffsetOutOfRange):
        log.read(21, 100, upper_bound=20, min_one_batch=True)
    log.close()


def cold_read(log: Log, offset: int, max_bytes: int, upper_bound: int) -> object:
    """log.read with every segment's remembered append ends set aside: the index lookup and header walk."""
    kept = [(segment, dict(segment._starts)) for segment in log.segments]
    for segment, _ in kept:
        segment._starts.clear()
    try:
        return log.read(offset, max_bytes, upper_bound=upper_bound, min_one_batch=True)
    finally:
        for segment, starts in kept:
            segment._starts.update(starts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(["leader", "follower", "truncate"]), st.integers(1, 3), st.integers(1, 4)),
        min_size=1,
        max_size=30,
    ),
    st.integers(2_000, 6_000),
)
def test_reads_at_remembered_append_ends_equal_the_index_walk(
    tmp_path_factory: pytest.TempPathFactory, steps: list, segment_bytes: int
) -> None:
    """A fetch at the offset where a recent append ended skips the offset index and the header walk
    (Segment.recent_start); through leader appends, multi-batch follower appends, rolls and truncations
    every read, at every offset, budget and bound, is the one the walk gives."""
    log = new_log(tmp_path_factory.mktemp("log"), segment_bytes=segment_bytes, index_interval_bytes=300)
    for kind, batches, count in steps:
        leo = log.log_end_offset
        if kind == "leader":
            log.append_as_leader(batch(count, T0, 60), leader_epoch=0, now_ms=T0)
        elif kind == "follower":
            data = b"".join(
                batch(count, T0, 60, base_offset=leo + k * count, partition_leader_epoch=0)
                for k in range(batches)
            )
            log.append_as_follower(data, now_ms=T0)
        elif leo > 0:
            log.truncate_to(leo - min(leo, count * batches))
        leo = log.log_end_offset
        for offset in range(log.log_start_offset, leo + 1):
            for max_bytes in (1, 500, 1 << 20):
                for upper_bound in {leo, (offset + leo) // 2 + 1} - {leo + 1}:
                    warm = log.read(offset, max_bytes, upper_bound=upper_bound, min_one_batch=True)
                    assert warm == cold_read(log, offset, max_bytes, upper_bound), (
                        offset,
                        max_bytes,
                        upper_bound,
                    )
    log.close()


# --- validation ------------------------------------------------------------------------------------------


def flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


REJECTIONS = [
    ("bad crc", {}, lambda: flip(batch(2), 70), ErrorCode.corrupt_message, "Record is corrupt"),
    (
        "base offset",
        {},
        lambda: batch(2, base_offset=3),
        ErrorCode.invalid_record,
        "should be 0, but it is 3",
    ),
    (
        "too large",
        {"max_message_bytes": 500},
        lambda: batch(2, size=400),
        ErrorCode.message_too_large,
        "exceeds",
    ),
    (
        "count mismatch",
        {},
        lambda: build_batch(records(3), last_offset_delta=5),
        ErrorCode.invalid_record,
        "Inconsistent batch offset range [0, 5] and count of records 3",
    ),
    (
        "control batch",
        {},
        lambda: build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, timestamp=T0),
        ErrorCode.invalid_record,
        "Clients are not allowed to write control records",
    ),
    (
        "idempotent without sequence",
        {},
        lambda: batch(1, producer_id=7, producer_epoch=0),
        ErrorCode.invalid_record,
        "Invalid sequence number -1 in record batch with producerId 7",
    ),
    ("two batches", {}, lambda: batch(1) + batch(1), ErrorCode.invalid_record, "more than one batch"),
    (
        "size below minimum",
        {},
        lambda: bytes(8) + (5).to_bytes(4, "big") + bytes(20),
        ErrorCode.corrupt_message,
        "minimum",
    ),
    (
        "bad magic",
        {},
        lambda: flip_magic(batch(1)),
        ErrorCode.corrupt_message,
        "Invalid magic found in record: 7",
    ),
    ("only a torn batch", {}, lambda: batch(2)[:-5], ErrorCode.invalid_record, "no complete record batch"),
    (
        "null key on a compacted topic",
        {"cleanup_policy": ("compact",)},
        lambda: batch(3, key=None),
        ErrorCode.invalid_record,
        "Compacted topic cannot accept message without key",
    ),
    (
        "timestamp too old",
        {"message_timestamp_before_max_ms_config": 1000},
        lambda: batch(2, T0 - 5000),
        ErrorCode.invalid_timestamp,
        "invalid timestamp",
    ),
    (
        "timestamp too new (deprecated difference config)",
        {"message_timestamp_difference_max_ms": 1000},
        lambda: batch(2, T0 + 5000),
        ErrorCode.invalid_timestamp,
        "invalid timestamp",
    ),
    (
        "producer sets LogAppendTime",
        {"message_timestamp_type": TimestampType.LOG_APPEND_TIME},
        lambda: batch(2, timestamp_type=TimestampType.LOG_APPEND_TIME),
        ErrorCode.invalid_timestamp,
        "invalid timestamp",
    ),
    (
        "larger than a segment",
        {"segment_bytes": 300},
        lambda: batch(2, size=200),
        ErrorCode.record_list_too_large,
        "segment size",
    ),
]


def flip_magic(data: bytes) -> bytes:
    out = bytearray(data)
    out[16] = 7
    return bytes(out)


@pytest.mark.parametrize("name, config, make, code, text", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_validation_rejections_write_nothing(
    tmp_path: Path, name: str, config: dict, make, code, text: str
) -> None:
    log = new_log(tmp_path, **config)
    log.append_as_leader(batch(1, size=10), leader_epoch=0, now_ms=T0)
    files = {p.name: p.read_bytes() for p in log.dir.iterdir()}
    with pytest.raises(RecordError) as caught:
        log.append_as_leader(make(), leader_epoch=0, now_ms=T0)
    assert caught.value.error_code == code
    assert text in caught.value.message
    assert log.log_end_offset == 1 and log.active_segment.size == len(batch(1, size=10))
    assert {p.name: p.read_bytes() for p in log.dir.iterdir()} == files
    log.close()


def test_record_errors_name_every_bad_record(tmp_path: Path) -> None:
    log = new_log(tmp_path, cleanup_policy=("compact",))
    specs = [RecordSpec(T0, b"a", b"1"), RecordSpec(T0, None, b"2"), RecordSpec(T0, None, b"3")]
    with pytest.raises(RecordError) as caught:
        log.append_as_leader(build_batch(specs), leader_epoch=0, now_ms=T0)
    assert [i for i, _ in caught.value.record_errors] == [1, 2]
    assert "2 record errors in total" in caught.value.message
    log.close()


def test_trailing_partial_bytes_are_dropped_as_kafka_does(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data = batch(2)
    info = log.append_as_leader(data + data[:30], leader_epoch=0, now_ms=T0)
    assert info.size == len(data) and log.active_segment.size == len(data)
    log.close()


def test_log_append_time_is_stamped_with_a_new_crc(tmp_path: Path) -> None:
    log = new_log(tmp_path, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    info = leader_append(log, batch(3, T0 - 10_000), leader_epoch=0, now_ms=T0 + 5)
    assert info.log_append_time == T0 + 5 == info.max_timestamp
    data = read_all(log)
    stored = read_batch(data)
    assert stored.crc_valid and stored.attributes & TIMESTAMP_TYPE_BIT and stored.max_timestamp == T0 + 5
    assert [r[1] for r in kafka_python_records(data)] == [T0 + 5] * 3
    log.close()


def test_create_time_max_timestamp_rederived_when_records_are_decoded(tmp_path: Path) -> None:
    # Bounded timestamps make the records count, and Kafka then stores the true max timestamp.
    log = new_log(tmp_path, message_timestamp_before_max_ms_config=10**9)
    data = build_batch(records(3, T0), max_timestamp=T0 - 1)
    leader_append(log, data, leader_epoch=0, now_ms=T0)
    stored = read_batch(read_all(log))
    assert stored.crc_valid and stored.max_timestamp == T0 + 2
    log.close()


def test_compression_type_recompresses(tmp_path: Path) -> None:
    log = new_log(tmp_path, compression_type="zstd")
    specs = records(5, T0, 300)
    leader_append(
        log,
        build_batch(specs, codec=Codec.GZIP, producer_id=4, producer_epoch=1, base_sequence=9),
        leader_epoch=0,
        now_ms=T0,
    )
    data = read_all(log)
    stored = read_batch(data)
    assert stored.compression is Codec.ZSTD and stored.crc_valid
    assert (stored.producer_id, stored.producer_epoch, stored.base_sequence) == (4, 1, 9)
    assert [(r.timestamp, r.key, r.value) for r in stored.records(data)] == [
        (s.timestamp, s.key, s.value) for s in specs
    ]
    log.close()


def test_legacy_v1_input_is_converted_to_v2(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=T0 + i, key=b"k%d" % i, value=b"v%d" % i)
    leader_append(log, bytes(builder.build()), leader_epoch=0, now_ms=T0)
    leader_append(log, batch(1), leader_epoch=0, now_ms=T0)
    data = read_all(log)
    stored = walk(data).batches
    assert [b.magic for b in stored] == [2, 2]
    assert [(r.offset, r.timestamp, r.key) for r in stored[0].records(data)] == [
        (0, T0, b"k0"),
        (1, T0 + 1, b"k1"),
        (2, T0 + 2, b"k2"),
    ]
    log.close()


def test_follower_and_raft_leader_appends_keep_offsets(tmp_path: Path) -> None:
    log = new_log(tmp_path, index_interval_bytes=100)
    data = batch(2, base_offset=0, partition_leader_epoch=3) + batch(
        3, base_offset=2, partition_leader_epoch=3
    )
    info = log.append_as_follower(data, now_ms=T0)
    assert (info.first_offset, info.last_offset) == (0, 4)
    raft = batch(1, base_offset=5, partition_leader_epoch=4)
    assert (
        log.append_as_leader(raft, leader_epoch=4, now_ms=T0, origin=AppendOrigin.RAFT_LEADER).first_offset
        == 5
    )
    with pytest.raises(RecordError, match="did not set the batch epoch"):
        log.append_as_leader(
            batch(1, base_offset=6, partition_leader_epoch=3),
            leader_epoch=4,
            now_ms=T0,
            origin=AppendOrigin.RAFT_LEADER,
        )
    with pytest.raises(RecordError, match="less than the next offset 6"):
        log.append_as_follower(batch(1, base_offset=2, partition_leader_epoch=4), now_ms=T0)
    assert log.epoch_cache.entries() == [(3, 0), (4, 5)]
    control = build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, timestamp=T0)
    assert (
        log.append_as_leader(control, leader_epoch=4, now_ms=T0, origin=AppendOrigin.COORDINATOR).first_offset
        == 6
    )
    log.close()
    index, _ = expected_indexes(log.segments[0].log_path.read_bytes(), 0, 100)
    assert log.segments[0].index_path.read_bytes() == index


# --- timestamps and epochs -------------------------------------------------------------------------------


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=1500, index_interval_bytes=500)
    timestamps = [T0 + t for t in (10, 20, 15, 40, 30, 50, 45, 60, 55, 70, 70, 65)]
    everything = []
    for i in range(0, len(timestamps), 2):
        specs = [RecordSpec(ts, b"k", b"x" * 300) for ts in timestamps[i : i + 2]]
        info = log.append_as_leader(build_batch(specs), leader_epoch=i // 4, now_ms=T0)
        everything += [(info.first_offset + k, s.timestamp, i // 4) for k, s in enumerate(specs)]
    assert len(log.segments) > 2

    def kafka_rule(target: int):
        for segment in log.segments:  # the first segment whose max timestamp reaches the target
            seg_records = [r for r in everything if in_segment(log, segment, r[0])]
            if max(r[1] for r in seg_records) >= target:
                return next((r for r in seg_records if r[1] >= target), None)
        return None

    for target in range(T0, T0 + 75):
        assert log.offset_for_timestamp(target) == kafka_rule(target), target
    assert log.offset_for_timestamp(T0 + 71) is None
    assert log.max_timestamp_offset() == (9, T0 + 70, 2)  # the first record holding the largest timestamp
    log.close()


def in_segment(log: Log, segment, offset: int) -> bool:
    later = [s.base_offset for s in log.segments if s.base_offset > segment.base_offset]
    return offset >= segment.base_offset and (not later or offset < later[0])


def test_end_offset_for_epoch(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for epoch, n in ((0, 3), (2, 4), (5, 2)):
        log.append_as_leader(batch(n), leader_epoch=epoch, now_ms=T0)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 3\n5 7\n"
    assert log.latest_epoch() == 5
    assert log.end_offset_for_epoch(5) == (5, 9)  # the latest epoch ends at the log end
    assert log.end_offset_for_epoch(0) == (0, 3)
    assert log.end_offset_for_epoch(1) == (0, 3)  # largest epoch <= 1, start of the next one
    assert log.end_offset_for_epoch(2) == (2, 7)
    assert log.end_offset_for_epoch(4) == (2, 7)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    log.assign_epoch_start_offset(6, log.log_end_offset)  # what the Partition does on becoming leader
    log.update_high_watermark(log.log_end_offset)
    assert log.end_offset_for_epoch(5) == (5, 9) and log.end_offset_for_epoch(6) == (6, 9)
    log.close()


# --- retention and DeleteRecords -------------------------------------------------------------------------


def test_retention_by_time_deletes_whole_segments(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock, segment_bytes=2000, retention_ms=1000, file_delete_delay_ms=500)
    for i in range(12):
        leader_append(log, batch(2, T0 + 100 * i, 300), leader_epoch=0, now_ms=T0)
    bases = [s.base_offset for s in log.segments]
    sizes = {s.base_offset: s.size for s in log.segments}
    assert len(bases) >= 4
    # Segments whose newest record is more than retention.ms before now go; the active one stays.
    now = T0 + 100 * 6 + 1001
    expired = [b for b in bases[:-1] if max_ts_of(log, b) < now - 1000]
    deleted = log.enforce_retention(now)
    assert deleted == sum(sizes[b] for b in expired) > 0
    assert log.log_start_offset == log.segments[0].base_offset == bases[len(expired)]
    assert sorted(p for p in os.listdir(log.dir) if p.endswith(".deleted"))  # kept for file.delete.delay.ms
    log.delete_pending_segments(now + 499)
    assert any(p.endswith(".deleted") for p in os.listdir(log.dir))
    log.delete_pending_segments(now + 500)
    assert not any(p.endswith(".deleted") for p in os.listdir(log.dir))
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100, upper_bound=log.high_watermark, min_one_batch=True)
    assert read_all(log)[:8] == log.log_start_offset.to_bytes(8, "big")
    log.close()


def max_ts_of(log: Log, base: int) -> int:
    for segment in log.segments:
        if segment.base_offset == base:
            return segment.max_timestamp_so_far
    raise KeyError(base)


def test_retention_by_bytes_and_all_segments(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=2000, retention_bytes=3000)
    for _ in range(20):
        leader_append(log, batch(2, T0, 300), leader_epoch=0, now_ms=T0)
    total = log.size_bytes()
    deleted = log.enforce_retention(T0)
    assert deleted > 0 and log.size_bytes() == total - deleted
    assert log.size_bytes() >= 3000 > log.size_bytes() - log.segments[0].size
    # retention.ms 0-ish: every segment is old; the active one is rolled so that it can go too.
    log.update_config(LogConfig(segment_bytes=2000, retention_ms=1, file_delete_delay_ms=0))
    log.enforce_retention(T0 + 10_000)
    assert [s.size for s in log.segments] == [0]
    assert log.log_start_offset == log.log_end_offset == 40 == log.segments[0].base_offset
    assert log.read(40, 100, upper_bound=40, min_one_batch=True) is None
    assert log.append_as_leader(batch(1), leader_epoch=0, now_ms=T0).first_offset == 40
    log.close()


def test_delete_records_moves_the_log_start(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=2000)
    for _ in range(10):
        leader_append(log, batch(3, T0, 300), leader_epoch=1, now_ms=T0)
    assert log.delete_records_before(14) == 14 == log.log_start_offset
    assert log.epoch_cache.entries() == [(1, 14)]
    with pytest.raises(OffsetOutOfRange):
        log.read(13, 100, upper_bound=30, min_one_batch=True)
    # The batch holding offset 14 is served whole; the consumer skips what lies below the start.
    fetched = log.read(14, 1 << 20, upper_bound=30, min_one_batch=True)
    assert read_batch(os.pread(fetched.fd, fetched.size, fetched.position)).base_offset == 12
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(31)
    assert log.delete_records_before(-1) == 30  # -1: up to the high watermark
    before = len(log.segments)
    assert log.enforce_retention(T0) > 0 and len(log.segments) < before
    assert log.segments[0].base_offset <= 30
    log.close()
    compacted = new_log(tmp_path, name="compacted-0", cleanup_policy=("compact",))
    with pytest.raises(PolicyViolation):
        compacted.delete_records_before(0)
    compacted.close()


# --- flushing --------------------------------------------------------------------------------------------


def test_recovery_point_moves_only_with_flushes(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=2000)
    log.append_as_leader(batch(2, size=300), leader_epoch=0, now_ms=T0)
    assert log.recovery_point == 0
    while len(log.segments) == 1:
        log.append_as_leader(batch(2, size=300), leader_epoch=0, now_ms=T0)
    assert log.recovery_point == log.active_segment.base_offset  # the finished segment was flushed on roll
    log.close()
    eager = new_log(tmp_path, name="eager-0", flush_messages=1)
    eager.append_as_leader(batch(2), leader_epoch=0, now_ms=T0)
    assert eager.recovery_point == 2
    eager.close()


# --- the manager -----------------------------------------------------------------------------------------


def broker_config(tmp_path: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig({"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", **extra})


def test_manager_lifecycle(tmp_path: Path) -> None:
    clock = Clock()
    config = broker_config(tmp_path, **{"log.segment.bytes": "3000", "log.segment.delete.delay.ms": "1000"})
    manager = LogManager(config, now_ms=clock)
    assert manager.startup() == []
    logs = [manager.create_log("orders", p, TOPIC_ID, LogConfig.from_broker(config)) for p in range(3)]
    assert {each.dir.parent.name for each in logs} == {"a", "b"}  # spread over the log dirs
    assert manager.create_log("orders", 0, TOPIC_ID, LogConfig.from_broker(config)) is logs[0]
    with pytest.raises(ValueError):
        manager.create_log("orders", 0, uuid.uuid4(), LogConfig.from_broker(config))
    for each in logs:
        each.assign_epoch_start_offset(0, each.log_end_offset)  # what the Partition does on becoming leader
        each.update_high_watermark(each.log_end_offset)
        for _ in range(10):
            leader_append(each, batch(2, size=300), leader_epoch=0, now_ms=T0)
    logs[1].delete_records_before(5)
    manager.checkpoint()
    dir_of_1 = logs[1].dir.parent
    text = (dir_of_1 / "log-start-offset-checkpoint").read_text()
    assert text == "0\n1\norders 1 5\n"
    assert "orders 1 20\n" in (dir_of_1 / "replication-offset-checkpoint").read_text()
    manager.delete_log("orders", 2)
    assert manager.get_log("orders", 2) is None
    deleted_dirs = [p for d in "ab" for p in (tmp_path / d).iterdir() if p.name.endswith("-delete")]
    assert len(deleted_dirs) == 1 and deleted_dirs[0].name.startswith("orders-2.")
    clock.now += 999
    manager.run_periodic(clock.now)
    assert deleted_dirs[0].exists()
    clock.now += 1
    manager.run_periodic(clock.now)
    assert not deleted_dirs[0].exists()
    manager.shutdown(broker_epoch=7)
    for d in "ab":
        assert (tmp_path / d / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":7}'
    recovery = (logs[0].dir.parent / "recovery-point-offset-checkpoint").read_text()
    assert "orders 0 20\n" in recovery

    again = LogManager(config, now_ms=clock)
    assert again.startup() == []
    assert again.had_clean_shutdown(tmp_path / "a")
    assert not (tmp_path / "a" / ".kafka_cleanshutdown").exists()
    assert sorted(
        (each.topic, each.partition, each.log_end_offset, each.log_start_offset) for each in again.logs()
    ) == [
        ("orders", 0, 20, 0),
        ("orders", 1, 20, 5),
    ]
    assert again.get_log("orders", 0).high_watermark == 20
    again.shutdown()


def test_manager_retention_and_flush_ms(tmp_path: Path) -> None:
    clock = Clock()
    config = broker_config(
        tmp_path,
        **{
            "log.segment.bytes": "2000",
            "log.retention.bytes": "2500",
            "log.retention.check.interval.ms": "100",
            "log.flush.interval.ms": "50",
            "log.segment.delete.delay.ms": "0",
        },
    )
    manager = LogManager(config, now_ms=clock)
    manager.startup()
    each = manager.create_log("t", 0, TOPIC_ID, LogConfig.from_broker(config))
    for _ in range(20):
        leader_append(each, batch(2, size=300), leader_epoch=0, now_ms=T0)
    size = each.size_bytes()
    assert each.recovery_point < each.log_end_offset
    manager.wait_for_flushes()  # the flushes of rolled segments
    clock.now += 100
    manager.run_periodic(clock.now)
    assert each.size_bytes() < size and each.log_start_offset > 0
    manager.wait_for_flushes()  # flush.ms runs on the flusher thread too
    assert each.recovery_point == each.log_end_offset
    manager.shutdown()


def test_verify_finds_nothing_after_a_long_run(tmp_path: Path) -> None:
    clock = Clock()
    config = broker_config(
        tmp_path,
        **{
            "log.segment.bytes": "60000",
            "log.index.interval.bytes": "1500",
            "log.segment.delete.delay.ms": "0",
        },
    )
    manager = LogManager(config, now_ms=clock)
    manager.startup()
    logs = [manager.create_log("stream", p, TOPIC_ID, LogConfig.from_broker(config)) for p in range(2)]
    for i in range(600):
        each = logs[i % 2]
        epoch = i // 200
        codec = list(Codec)[i % 5]
        leader_append(
            each, batch(1 + i % 7, T0 + i, 200 + i % 300, codec=codec), leader_epoch=epoch, now_ms=T0 + i
        )
    logs[0].delete_records_before(logs[0].segments[2].base_offset + 1)
    manager.run_periodic(clock.now + 300_000)  # one retention pass
    manager.shutdown()
    result = subprocess.run(
        [sys.executable, "-m", "kcli", "verify", str(tmp_path / "a"), str(tmp_path / "b")],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("no findings"), result.stdout


def test_manager_loads_future_logs_and_leaves_the_metadata_log_and_stray_ones(tmp_path: Path) -> None:
    root = tmp_path / "a"
    Log.create(root / "__cluster_metadata-0", LogConfig(), uuid.UUID(int=1)).close()
    stray = root / f"orders-1.{uuid.uuid4().hex}-stray"
    stray.mkdir()
    future = root / f"orders-0.{uuid.uuid4().hex}-future"
    Log.create(future, LogConfig(), uuid.uuid4()).close()
    manager = LogManager(BrokerConfig({"log.dirs": str(root)}))
    lines = manager.startup()
    assert lines == [f"{stray}: a -stray replica directory, left alone"]
    assert manager.get_log("__cluster_metadata", 0) is None and list(manager.logs()) == []
    # a move between log dirs cut by a restart: the future log is loaded as the partition's future log
    assert [each.dir for each in manager.future_logs()] == [future]
    assert manager.get_log("orders", 0, future=True) is not None and manager.get_log("orders", 0) is None
    manager.shutdown()
    assert (root / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 0 0\n"


def test_log_append_time_batch_on_a_create_time_topic_is_stored_as_create_time(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data = build_batch(records(2, T0), timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=T0 + 50)
    leader_append(log, data, leader_epoch=0, now_ms=T0)
    stored = read_batch(read_all(log))
    assert stored.crc_valid and stored.timestamp_type is TimestampType.CREATE_TIME
    assert stored.max_timestamp == T0 + 50
    log.close()


def test_epoch_truncations_are_written_off_the_callers_thread(tmp_path: Path) -> None:
    """Kafka's truncateFromStartAsyncFlush: a truncation's checkpoint write goes to the flush scheduler; a
    new epoch is written at once, so the file never misses an entry, and a later write writes the
    entries as they are when it runs."""
    from formats.checkpoints import read_leader_epoch_checkpoint
    from kcli.broker.log.epochs import LeaderEpochCache

    (tmp_path / "t-0").mkdir()
    cache, _ = LeaderEpochCache.load(tmp_path / "t-0")
    scheduled: list = []
    cache.flush_scheduler = scheduled.append

    def on_disk() -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in read_leader_epoch_checkpoint(cache.path.read_text())]

    cache.assign(0, 0)
    cache.assign(3, 10)
    assert on_disk() == [(0, 0), (3, 10)] and scheduled == []  # written at once
    cache.truncate_from_start(12)
    assert on_disk() == [(0, 0), (3, 10)] and len(scheduled) == 1  # not yet
    cache.assign(5, 20)  # written at once, with the truncation
    assert on_disk() == [(3, 12), (5, 20)]
    cache.truncate_from_end(20)
    scheduled.pop(0)()  # the first truncation's write, late: the entries as they are now
    assert on_disk() == [(3, 12)]
    scheduled.pop(0)()
    assert on_disk() == [(3, 12)] and not scheduled


def test_a_closed_epoch_cache_writes_nothing_into_a_dir_being_removed(tmp_path: Path) -> None:
    """A deleted log's truncation write still queued on the flusher ran while its `-delete` dir was
    being removed, created the checkpoint's temporary file in it, and the dir stayed (seen in CI)."""
    from kcli.broker.log.epochs import LeaderEpochCache

    (tmp_path / "t-0").mkdir()
    cache, _ = LeaderEpochCache.load(tmp_path / "t-0")
    scheduled: list = []
    cache.flush_scheduler = scheduled.append
    cache.assign(0, 0)
    cache.truncate_from_start(1)
    cache.rename_dir(tmp_path / "t-0.x-delete")
    cache.close()
    for each in (tmp_path / "t-0.x-delete").iterdir():
        each.unlink()
    scheduled.pop(0)()
    assert list((tmp_path / "t-0.x-delete").iterdir()) == []


def test_a_leadership_without_appends_leaves_no_epoch_behind_after_a_diverging_answer(tmp_path: Path) -> None:
    """A replica made leader of epoch 2 writes that epoch's start at its log end, then loses the
    leadership before it appends. Its next leader never had epoch 2 and answers its fetch (last fetched
    epoch 2) with a diverging epoch 1 ending at that same log end: nothing to cut, but the epoch must go
    (Kafka's truncateTo always truncates the epoch cache), or every later fetch says 2 again, is told
    it diverged again, and the replica never catches up (seen in a 3-node test: out of the ISR for good)."""
    from types import SimpleNamespace

    from kcli.broker.replication.fetcher import _truncate_to_diverging

    log = new_log(tmp_path)
    log.append_as_follower(batch(8, base_offset=0, partition_leader_epoch=1), now_ms=T0)
    log.assign_epoch_start_offset(2, 8)  # made leader, appended nothing
    assert log.latest_epoch() == 2
    _truncate_to_diverging(SimpleNamespace(log=log), 1, 8)
    assert log.log_end_offset == 8 and log.epoch_cache.entries() == [(1, 0)]
    assert log.latest_epoch() == 1  # the next fetch agrees with the leader's history and moves on
    log.close()
    reloaded = Log.load(log.dir, log.config, recovery_point_checkpoint=0, had_clean_shutdown=True)
    assert reloaded.epoch_cache.entries() == [(1, 0)]
    reloaded.close()


def test_truncate_to_drops_records_segments_epochs_and_producer_state_past_the_target(tmp_path: Path) -> None:
    """A follower that diverged from its leader cuts its log back; a reload sees the same log."""
    log = new_log(tmp_path, segment_bytes=600)
    for base in range(0, 12, 2):
        epoch = 1 if base < 6 else 2
        log.append_as_follower(
            batch(
                2,
                base_offset=base,
                partition_leader_epoch=epoch,
                producer_id=7,
                producer_epoch=0,
                base_sequence=base,
            ),
            now_ms=T0,
        )
    assert len(log.segments) > 2 and log.epoch_cache.entries() == [(1, 0), (2, 6)]
    log.update_high_watermark(12)
    assert log.truncate_to(6)
    assert log.log_end_offset == 6 and log.high_watermark == 6 and log.recovery_point <= 6
    assert log.epoch_cache.entries() == [(1, 0)]
    assert log.producer_state.last_entry(7).last_seq == 5  # the batches from 6 are gone with its sequence
    assert not log.truncate_to(9)  # past the end: nothing to do
    info = log.append_as_follower(batch(1, base_offset=6, partition_leader_epoch=3), now_ms=T0)
    assert info.first_offset == 6 and log.epoch_cache.entries() == [(1, 0), (3, 6)]
    log.close()
    reloaded = Log.load(log.dir, log.config, recovery_point_checkpoint=0, had_clean_shutdown=False)
    assert reloaded.log_end_offset == 7 and reloaded.epoch_cache.entries() == [(1, 0), (3, 6)]
    reloaded.close()


def test_a_flush_on_another_thread_never_deadlocks_an_append_that_rolls(tmp_path: Path) -> None:
    """The metadata log has no flush scheduler, so a roll flushes the old segment in place, under the
    lock the append holds, while the Raft client flushes the same log on a thread. That flush held the
    flush lock and wanted the log's lock while the append held the log's lock and wanted the flush
    lock: the node's event loop froze (seen as a node that never finished its shutdown)."""
    import threading

    log = new_log(tmp_path, segment_bytes=1_000)
    stop = threading.Event()

    def flush_forever() -> None:
        while not stop.is_set():
            log.flush()

    def append_and_roll() -> None:
        for _ in range(1_500):
            leader_append(log, batch(2, size=200), leader_epoch=0, now_ms=T0)

    flusher = threading.Thread(target=flush_forever, daemon=True)
    appender = threading.Thread(target=append_and_roll, daemon=True)
    flusher.start()
    appender.start()
    appender.join(60)
    stop.set()
    flusher.join(10)
    assert not appender.is_alive() and not flusher.is_alive(), "the append and the flush deadlocked"
    assert len(log.segments) > 500
    log.flush()
    assert log.recovery_point == log.log_end_offset
    log.close()
