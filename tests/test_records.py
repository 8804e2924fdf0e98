"""Record batches v2 and legacy v0/v1, cross-checked against kafka-python's writer and reader."""

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from formats.compression import Codec
from formats.errors import CorruptRecordError
from formats.records import (
    ControlType,
    LegacyBatch,
    RecordBatch,
    RecordSpec,
    TimestampType,
    build_batch,
    build_control_batch,
    control_type,
    end_txn_marker,
    read_batch,
)
from formats.segment import StopReason, walk

# Test vectors of the reference (§1.5).
V2_HELLO = bytes.fromhex(
    "00000000000000000000003d00000000 02e641a44b 0000 00000000 0000018bcfe56800 0000018bcfe56800"
    " ffffffffffffffff ffff ffffffff 00000001 16 00 00 00 01 0a 68656c6c6f 00"
)
V2_COMMIT = bytes.fromhex(
    "0000000000000001 00000042 00000000 02 adb89818 0030 00000000 0000018bcfe569f4 0000018bcfe569f4"
    " 00000000000003e8 0000 ffffffff 00000001 20 00 00 00 08 00000001 0c 000000000005 00"
)
V1_HELLO = bytes.fromhex(
    "0000000000000000 0000001b 8ee30bba 01 00 0000018bcfe56800 ffffffff 00000005 68656c6c6f"
)
V0_HELLO = bytes.fromhex("0000000000000000 00000013 87a77ab2 00 00 ffffffff 00000005 68656c6c6f")

CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]


def test_reference_vector_v2_hello():
    batch = read_batch(V2_HELLO)
    assert isinstance(batch, RecordBatch)
    assert (batch.base_offset, batch.size, batch.crc, batch.crc_valid) == (0, 73, 3863061579, True)
    assert batch.partition_leader_epoch == 0 and batch.max_timestamp == 1700000000000
    [record] = batch.records(V2_HELLO)
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == (
        0,
        1700000000000,
        None,
        b"hello",
        (),
    )


def test_reference_vector_commit_marker():
    batch = read_batch(V2_COMMIT)
    assert batch.is_control and batch.is_transactional
    assert (batch.crc, batch.crc_valid, batch.producer_id, batch.size) == (2914555928, True, 1000, 78)
    [record] = batch.records(V2_COMMIT)
    assert control_type(record.key) is ControlType.COMMIT
    assert end_txn_marker(record.value).coordinator_epoch == 5
    rebuilt = build_control_batch(
        ControlType.COMMIT,
        base_offset=1,
        partition_leader_epoch=0,
        producer_id=1000,
        producer_epoch=0,
        coordinator_epoch=5,
        timestamp=1700000000500,
    )
    assert rebuilt == V2_COMMIT


def test_build_batch_matches_reference_vector():
    built = build_batch([RecordSpec(1700000000000, None, b"hello")], partition_leader_epoch=0)
    assert built == V2_HELLO


def test_reference_vectors_legacy():
    v1 = read_batch(V1_HELLO)
    assert isinstance(v1, LegacyBatch)
    assert (v1.magic, v1.crc, v1.crc_valid, v1.timestamp, v1.size) == (1, 2397244346, True, 1700000000000, 39)
    [r] = v1.records(V1_HELLO)
    assert (r.offset, r.key, r.value, r.timestamp_type) == (0, None, b"hello", TimestampType.CREATE_TIME)
    v0 = read_batch(V0_HELLO)
    assert (v0.magic, v0.crc, v0.crc_valid, v0.timestamp_type) == (
        0,
        2275900082,
        True,
        TimestampType.NO_TIMESTAMP_TYPE,
    )


records_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=1 << 41),
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 1 << 40))
def test_kafka_python_batches_decode_identically(records, codec, base_offset):
    builder = DefaultRecordBatchBuilder(2, int(codec), False, 7, 3, 11, batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    ours = read_batch(bytes(data))
    theirs = DefaultRecordBatch(bytes(data))
    assert ours.crc_valid and ours.crc == theirs.crc
    assert (ours.producer_id, ours.producer_epoch, ours.base_sequence) == (7, 3, 11)
    assert ours.last_sequence == theirs.last_sequence
    assert (
        ours.compression == theirs.compression_type
    )  # kafka-python stores uncompressed when nothing is saved
    decoded = ours.records(bytes(data))
    expected = [(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in theirs]
    assert [tuple(r) for r in decoded] == expected


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(CODECS), log_append=st.booleans())
def test_our_batches_decode_with_kafka_python(records, codec, log_append):
    specs = [RecordSpec(ts, key, value, tuple(headers)) for ts, key, value, headers in records]
    ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    data = build_batch(specs, base_offset=100, codec=codec, timestamp_type=ts_type, max_timestamp=1 << 42)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    for i, (spec, record) in enumerate(zip(specs, got, strict=True)):
        expected_ts = (1 << 42) if log_append else spec.timestamp
        assert record == (100 + i, expected_ts, spec.key, spec.value, [(k, v) for k, v in spec.headers])
    ours = read_batch(data).records(data)
    assert [tuple(r)[:4] for r in ours] == [g[:4] for g in got]


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, base_offset=st.integers(0, 1 << 40))
def test_uncompressed_batches_are_byte_identical_to_kafka_pythons(records, base_offset):
    builder = DefaultRecordBatchBuilder(2, 0, False, 7, 3, 11, batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    theirs = bytearray(builder.build())
    struct.pack_into(">q", theirs, 0, base_offset)
    specs = [RecordSpec(ts, key, value, tuple(headers)) for ts, key, value, headers in records]
    ours = build_batch(
        specs,
        base_offset=base_offset,
        partition_leader_epoch=0,
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
    )
    assert ours == theirs and type(ours) is bytes


@settings(max_examples=30, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(CODECS))
def test_decoded_records_rebuild_into_the_same_batch(records, codec):
    specs = [RecordSpec(ts, key, value, tuple(headers)) for ts, key, value, headers in records]
    data = build_batch(specs, base_offset=40, codec=codec)
    decoded = read_batch(data).records(data)
    assert build_batch(decoded, base_offset=40, codec=codec) == data
    assert build_batch(iter(decoded), base_offset=40, codec=codec) == data


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_message_sets_from_kafka_python(magic, codec):
    builder = LegacyRecordBatchBuilder(magic, int(codec), batch_size=1 << 20)
    values = [(b"k%d" % i if i % 3 else None, b"v" * i if i % 4 else None) for i in range(12)]
    # On disk, v0 inner offsets are absolute and v1 inner offsets relative (the broker writes them so).
    first = 1000 if magic == 0 and codec is not Codec.NONE else 0
    for i, (key, value) in enumerate(values):
        builder.append(first + i, timestamp=1700000000000 + i, key=key, value=value)
    data = bytearray(builder.build())
    if codec is not Codec.NONE:
        struct.pack_into(">q", data, 0, 1000 + len(values) - 1)  # the broker stamps the last inner offset
    data = bytes(data)
    result = walk(data)
    assert result.reason is StopReason.END and result.stop == len(data)
    records = [r for b in result.batches for r in b.records(data)]
    base = 1000 if codec is not Codec.NONE else 0
    assert [r.offset for r in records] == [base + i for i in range(len(values))]
    assert [(r.key, r.value) for r in records] == values
    expected_ts = [1700000000000 + i for i in range(12)] if magic == 1 else [-1] * 12
    assert [r.timestamp for r in records] == expected_ts
    assert all(r.crc_valid for r in records)
    theirs = [(r.offset, r.key, r.value) for b in MemoryRecords(data) for r in b]
    assert [(r.key, r.value) for r in records] == [(k, v) for _, k, v in theirs]


def test_walk_mixed_magics_and_torn_tail():
    v2 = build_batch([RecordSpec(5, b"a", b"b")], base_offset=2)
    data = V0_HELLO + V1_HELLO + v2 + v2[:30]
    result = walk(data)
    assert [b.magic for b in result.batches] == [0, 1, 2]
    assert result.reason is StopReason.END
    assert result.stop == len(data) - 30
    assert result.problem(data) is None


def test_walk_reports_bad_size_and_flipped_crc():
    v2 = bytearray(build_batch([RecordSpec(5, b"a", b"b")]))
    v2[-1] ^= 0xFF
    result = walk(bytes(v2))
    assert result.batches[0].crc_valid is False
    bad = bytes(v2) + struct.pack(">qi", 9, 3) + b"\x00" * 20
    result = walk(bad)
    assert result.reason is StopReason.BAD_SIZE and result.stop == len(v2)
    assert "smaller than minimum record overhead (14)" in result.problem(bad)


def test_legacy_crc_is_crc32_over_magic_to_end():
    flipped = bytearray(V1_HELLO)
    flipped[-1] ^= 1
    entry = read_batch(bytes(flipped))
    assert entry.crc_valid is False
    assert zlib.crc32(V1_HELLO[16:]) == entry.crc


def test_corrupt_records_raise_one_sentence():
    data = bytearray(build_batch([RecordSpec(5, b"a", b"b"), RecordSpec(6, b"c", b"d")]))
    struct.pack_into(">i", data, 57, 3)  # claims 3 records, holds 2
    batch = read_batch(bytes(data), check_crc=False)
    with pytest.raises(CorruptRecordError, match="premature EOF"):
        batch.records(bytes(data))
    struct.pack_into(">i", data, 57, -1)
    with pytest.raises(CorruptRecordError, match="invalid record count -1"):
        read_batch(bytes(data), check_crc=False).records(bytes(data))


def test_compaction_gaps_and_delete_horizon_are_kept():
    specs = [RecordSpec(10, b"k1", b"v", offset_delta=0), RecordSpec(12, b"k2", None, offset_delta=4)]
    data = build_batch(specs, base_offset=50, last_offset_delta=6, delete_horizon_ms=99)
    batch = read_batch(data)
    assert (batch.last_offset, batch.delete_horizon_ms, batch.base_timestamp) == (56, 99, 99)
    assert [(r.offset, r.timestamp, r.value) for r in batch.records(data)] == [(50, 10, b"v"), (54, 12, None)]
