"""formats._native: CRC-32C, the batch walk (scan), v2 record decoding and encoding.

Cross-checked against independent implementations: the `crc32c` package for CRCs, kafka-python's
writer and reader for batches and records, and, for every error path, a small Python restatement of
Kafka's own DefaultRecord.readFrom (kept next to the tests so differential fuzzing compares messages).
"""

from __future__ import annotations

import mmap
import pickle
import random
import struct

import crc32c as crc32c_package
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from formats import _native
from formats.errors import CorruptRecordError, FormatError

END, LEGACY, BAD_SIZE, BAD_MAGIC = 0, 1, 2, 3

# Reference vectors (reference §1.5).
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

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
MASK64 = (1 << 64) - 1


# --- a tiny v2 writer, independent of formats/ ------------------------------------------------------------


def varint(n: int) -> bytes:
    """Zig-zag base-128 encoding of a signed int32/int64."""
    u = ((n << 1) ^ (n >> 63)) & MASK64
    out = bytearray()
    while u >= 0x80:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def nullable(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def encode_record(offset_delta=0, timestamp_delta=0, key=None, value=None, headers=()) -> bytes:
    body = bytes([0]) + varint(timestamp_delta) + varint(offset_delta) + nullable(key) + nullable(value)
    body += varint(len(headers))
    for hkey, hvalue in headers:
        hkey = hkey.encode() if isinstance(hkey, str) else hkey
        body += varint(len(hkey)) + hkey + nullable(hvalue)
    return varint(len(body)) + body


def encode_batch(
    records: bytes = b"",
    *,
    base_offset=0,
    partition_leader_epoch=0,
    magic=2,
    attributes=0,
    last_offset_delta=0,
    base_timestamp=0,
    max_timestamp=0,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    records_count=0,
    crc: int | None = None,
) -> bytes:
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    after_crc += records
    crc = crc32c_package.crc32c(after_crc) if crc is None else crc
    return (
        struct.pack(">qiibI", base_offset, 9 + len(after_crc), partition_leader_epoch, magic, crc) + after_crc
    )


# --- crc32c ---------------------------------------------------------------------------------------------


def test_crc32c_check_value_and_reference_vectors():
    assert _native.crc32c(b"123456789") == 0xE3069283
    assert _native.crc32c(b"") == 0
    assert _native.crc32c(V2_HELLO[21:]) == 3863061579
    assert _native.crc32c(V2_COMMIT[21:]) == 2914555928


@pytest.mark.parametrize(
    "length",
    [*range(0, 65), 191, 192, 193, 1000, 16363, 3 * 32768 - 1, 3 * 32768, 3 * 32768 + 8, 1 << 20],
)
def test_crc32c_equals_package_at_every_alignment(length):
    rng = random.Random(length)
    data = bytearray(rng.randbytes(length + 8))
    for align in range(8):
        view = memoryview(data)[align : align + length]
        expected = crc32c_package.crc32c(view)
        assert _native.crc32c(view) == expected
        assert _native._crc32c_portable(view) == expected


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=4000), align=st.integers(0, 7), value=st.integers(0, 2**32 - 1))
def test_crc32c_continues_like_the_package(data, align, value):
    view = memoryview(bytes(align) + data)[align:]
    expected = crc32c_package.crc32c(data, value)
    assert _native.crc32c(view, value) == expected
    assert _native.crc32c(view, value=value) == expected
    assert _native._crc32c_portable(view, value) == expected


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=3000), cut=st.integers(0, 3000))
def test_crc32c_of_concatenation_continues_from_the_prefix(data, cut):
    cut = min(cut, len(data))
    assert _native.crc32c(data[cut:], _native.crc32c(data[:cut])) == _native.crc32c(data)


def test_crc32c_takes_any_contiguous_buffer():
    data = random.Random(1).randbytes(200_000)  # large enough to run without the GIL
    expected = crc32c_package.crc32c(data)
    with mmap.mmap(-1, len(data)) as mm:
        mm[:] = data
        for buf in (data, bytearray(data), memoryview(data), mm):
            assert _native.crc32c(buf) == expected


def test_crc32c_rejects_bad_arguments():
    with pytest.raises(TypeError):
        _native.crc32c("text")
    with pytest.raises(BufferError):
        _native.crc32c(memoryview(b"abcd")[::2])  # not contiguous
    with pytest.raises(OverflowError):
        _native.crc32c(b"x", 1 << 32)
    with pytest.raises(TypeError):
        _native.crc32c(b"x", initial=0)
    with pytest.raises(TypeError):
        _native.crc32c()


# --- scan -----------------------------------------------------------------------------------------------


def scan(buf, position=0, end=None, check_crc=True):
    return _native.scan(buf, position, len(buf) if end is None else end, check_crc)


def test_scan_reference_vectors_field_by_field():
    buf = V2_HELLO + V2_COMMIT
    batches, stop, reason = scan(buf)
    assert (stop, reason) == (len(buf), END)
    assert batches == [
        (0, 0, 61, 0, 2, 3863061579, 0, 0, 1700000000000, 1700000000000, -1, -1, -1, 1, True),
        (73, 1, 66, 0, 2, 2914555928, 0x30, 0, 1700000000500, 1700000000500, 1000, 0, -1, 1, True),
    ]


@settings(max_examples=200, deadline=None)
@given(
    base_offset=INT64,
    partition_leader_epoch=INT32,
    attributes=st.integers(-(2**15), 2**15 - 1),
    last_offset_delta=INT32,
    base_timestamp=INT64,
    max_timestamp=INT64,
    producer_id=INT64,
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    base_sequence=INT32,
    records_count=INT32,
    records=st.binary(max_size=300),
    lead=st.binary(max_size=20),
)
def test_scan_reads_every_header_field(lead, records, **fields):
    batch = encode_batch(records, **fields)
    buf = lead + batch
    batches, stop, reason = scan(buf, len(lead))
    assert (stop, reason) == (len(buf), END)
    assert batches == [
        (
            len(lead),
            fields["base_offset"],
            len(batch) - 12,
            fields["partition_leader_epoch"],
            2,
            crc32c_package.crc32c(batch[21:]),
            fields["attributes"],
            fields["last_offset_delta"],
            fields["base_timestamp"],
            fields["max_timestamp"],
            fields["producer_id"],
            fields["producer_epoch"],
            fields["base_sequence"],
            fields["records_count"],
            True,
        )
    ]


def kafka_python_batch(seed: int, count: int, compression: int = 0) -> bytes:
    rng = random.Random(seed)
    builder = DefaultRecordBatchBuilder(2, compression, seed % 2 == 1, 1000 + seed, 3, 7 * seed, 1 << 20)
    for i in range(count):
        builder.append(
            i,
            timestamp=1_700_000_000_000 + rng.randint(-1000, 1000),
            key=rng.randbytes(5),
            value=rng.randbytes(rng.randint(0, 400)),
            headers=[("h", b"v")],
        )
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, 1000 * seed)  # base offset: outside the CRC
    struct.pack_into(">i", data, 12, seed)  # partition leader epoch: outside the CRC
    return bytes(data)


def test_scan_matches_kafka_python_headers_across_many_batches():
    # More batches than one GIL-free chunk, of different sizes, so the three-at-a-time CRC path
    # meets uneven lengths and a remainder.
    batches = [kafka_python_batch(seed, 1 + seed % 9, compression=seed % 2) for seed in range(200)]
    buf = b"".join(batches)
    found, stop, reason = scan(buf)
    assert (stop, reason, len(found)) == (len(buf), END, len(batches))
    position = 0
    for raw, got in zip(batches, found, strict=True):
        theirs = DefaultRecordBatch(raw)
        assert got == (
            position,
            theirs.base_offset,
            len(raw) - 12,
            theirs.leader_epoch,
            2,
            theirs.crc,
            theirs.attributes,
            theirs.last_offset_delta,
            theirs.first_timestamp,
            theirs.max_timestamp,
            theirs.producer_id,
            theirs.producer_epoch,
            theirs.base_sequence,
            struct.unpack_from(">i", raw, 57)[0],
            True,
        )
        position += len(raw)
    unchecked, _, _ = scan(buf, check_crc=False)
    assert [b[:14] for b in unchecked] == [b[:14] for b in found]
    assert all(b[14] is None for b in unchecked)


def test_scan_flags_a_flipped_byte_inside_the_crc_only():
    batches = [kafka_python_batch(seed, 3) for seed in range(7)]
    buf = bytearray(b"".join(batches))
    starts = [sum(map(len, batches[:i])) for i in range(len(batches))]
    buf[starts[4] + 61 + 5] ^= 0x01  # a record byte of batch 4
    buf[starts[2] + 3] ^= 0xFF  # base offset of batch 2: outside the CRC
    buf[starts[5] + 13] ^= 0xFF  # partition leader epoch of batch 5: outside the CRC
    found, stop, reason = scan(bytes(buf))
    assert (stop, reason) == (len(buf), END)
    assert [b[14] for b in found] == [True, True, True, True, False, True, True]
    buf[starts[6] + 17] ^= 0x80  # the stored CRC itself
    assert [b[14] for b in scan(bytes(buf))[0]] == [True, True, True, True, False, True, False]


def test_scan_stops_at_the_end_of_data():
    assert scan(b"") == ([], 0, END)
    assert scan(V2_HELLO[:16]) == ([], 0, END)
    # Kafka stops when 17 or fewer bytes remain (FileLogInputStream: position >= end - 17), even
    # when those bytes would declare a bad size.
    assert scan(struct.pack(">qiib", 0, 3, 0, 2)) == ([], 0, END)
    assert scan(V2_HELLO + V2_COMMIT[:17])[1:] == (73, END)


def test_scan_stops_where_a_torn_tail_begins():
    buf = V2_HELLO + V2_COMMIT + V2_HELLO[:40]
    batches, stop, reason = scan(buf)
    assert (len(batches), stop, reason) == (2, 151, END)
    # The edge of the caller's window looks the same: the unit runs past `end`.
    batches, stop, reason = scan(V2_HELLO + V2_COMMIT, 0, 100)
    assert (len(batches), stop, reason) == (1, 73, END)


def test_scan_stops_at_a_legacy_unit_and_resumes_after_it():
    buf = V2_HELLO + V1_HELLO + V2_COMMIT
    batches, stop, reason = scan(buf)
    assert ([b[0] for b in batches], stop, reason) == ([0], 73, LEGACY)
    v0 = bytearray(V1_HELLO)
    v0[16] = 0
    assert scan(bytes(v0))[1:] == (0, LEGACY)
    resume = stop + 12 + struct.unpack_from(">i", buf, stop + 8)[0]
    batches, stop, reason = scan(buf, resume)
    assert ([b[0] for b in batches], stop, reason) == ([112], len(buf), END)
    assert batches[0][1:] == scan(V2_COMMIT)[0][0][1:]


@pytest.mark.parametrize("size", [13, 0, -1, -(2**31)])
def test_scan_stops_at_a_size_below_the_v0_overhead(size):
    bad = struct.pack(">qiib", 0, size, 0, 2) + bytes(30)
    assert scan(V2_HELLO + bad) == (scan(V2_HELLO)[0], 73, BAD_SIZE)


@pytest.mark.parametrize("size", [14, 48])
def test_scan_stops_at_a_v2_unit_smaller_than_a_batch_header(size):
    bad = struct.pack(">qiib", 0, size, 0, 2) + bytes(size - 5)
    assert scan(V2_HELLO + bad + V2_HELLO)[1:] == (73, BAD_SIZE)
    # Declared too small but complete for a v1 message is legacy, not bad size.
    legacy = struct.pack(">qiib", 0, size, 0, 1) + bytes(size - 5)
    assert scan(legacy)[1:] == (0, LEGACY)


@pytest.mark.parametrize("magic", [3, 127, -1, -128])
def test_scan_stops_at_an_unknown_magic(magic):
    bad = bytearray(V2_COMMIT)
    struct.pack_into(">b", bad, 16, magic)
    assert scan(V2_HELLO + bytes(bad))[1:] == (73, BAD_MAGIC)


def test_scan_positions_are_absolute_and_buffers_of_any_kind_work():
    buf = bytes(10) + V2_HELLO + V2_COMMIT
    with mmap.mmap(-1, len(buf)) as mm:
        mm[:] = buf
        view = memoryview(mm)
        try:
            for source in (buf, bytearray(buf), memoryview(buf), view):
                batches, stop, reason = _native.scan(source, 10, len(buf), True)
                assert ([b[0] for b in batches], stop, reason) == ([10, 83], len(buf), END)
        finally:
            view.release()


def test_scan_rejects_a_bad_window():
    for position, end in [(-1, 10), (5, 4), (0, len(V2_HELLO) + 1)]:
        with pytest.raises(ValueError):
            _native.scan(V2_HELLO, position, end, True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(
        st.one_of(
            st.binary(max_size=80),
            st.sampled_from([V2_HELLO, V2_COMMIT, V1_HELLO]),
            st.tuples(st.sampled_from([V2_HELLO, V2_COMMIT]), st.integers(0, 77)).map(lambda t: t[0][: t[1]]),
        ),
        max_size=6,
    ),
    check_crc=st.booleans(),
)
def test_scan_never_fails_on_arbitrary_bytes(chunks, check_crc):
    buf = b"".join(chunks)
    batches, stop, reason = scan(buf, check_crc=check_crc)
    assert reason in (END, LEGACY, BAD_SIZE, BAD_MAGIC) and 0 <= stop <= len(buf)
    position = 0
    for batch in batches:
        assert batch[0] == position and batch[4] == 2 and batch[2] >= 49
        if check_crc:
            assert batch[14] == (
                crc32c_package.crc32c(buf[position + 21 : position + 12 + batch[2]]) == batch[5]
            )
        position += 12 + batch[2]
    assert position == stop


# --- decode_records: against kafka-python ---------------------------------------------------------------

header_strategy = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12)))
record_strategy = st.tuples(
    st.integers(-(2**40), 2**40),  # timestamp, so deltas from the first can be negative
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(header_strategy, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=12), base_offset=st.integers(0, 2**62))
def test_decode_records_matches_kafka_python(records, base_offset):
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i, (timestamp, key, value, headers) in enumerate(records):
        builder.append(i * 3, timestamp=timestamp, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    data = bytes(data)
    base_timestamp, count = struct.unpack_from(">q", data, 27)[0], struct.unpack_from(">i", data, 57)[0]
    ours = _native.decode_records(memoryview(data)[61:], count, base_offset, base_timestamp, -1)
    theirs = [
        (r.offset, r.timestamp, r.key, r.value, tuple(map(tuple, r.headers)))
        for r in DefaultRecordBatch(data)
    ]
    assert [tuple(r) for r in ours] == theirs
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours] == theirs
    assert all(type(r) is _native.Record for r in ours)


def test_decode_records_reference_vectors():
    [hello] = _native.decode_records(V2_HELLO[61:], 1, 0, 1700000000000, -1)
    assert hello == (0, 1700000000000, None, b"hello", ())
    [marker] = _native.decode_records(V2_COMMIT[61:], 1, 1, 1700000000500, -1)
    assert marker == (1, 1700000000500, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", ())


def test_decode_records_log_append_time_replaces_every_timestamp():
    data = encode_record(0, 5) + encode_record(1, -7)
    assert [r.timestamp for r in _native.decode_records(data, 2, 10, 1000, -1)] == [1005, 993]
    assert [r.timestamp for r in _native.decode_records(data, 2, 10, 1000, 42)] == [42, 42]


def test_decode_records_wraps_like_java_longs_and_keeps_sparse_offset_deltas():
    data = encode_record(-(2**31), 1) + encode_record(2**31 - 1, -(2**63))
    first, second = _native.decode_records(data, 2, 2**63 - 1, 2**63 - 1, -1)
    assert (first.offset, first.timestamp) == (2**63 - 1 - 2**31, -(2**63))
    assert (second.offset, second.timestamp) == (-(2**63) + 2**31 - 2, -1)


def test_decode_records_headers_keys_are_utf8_with_replacement():
    data = encode_record(headers=[(b"caf\xc3\xa9", b"1"), (b"bad\xff", None), (b"", b"")])
    [record] = _native.decode_records(data, 1, 0, 0, -1)
    assert record.headers == (("café", b"1"), ("bad\ufffd", None), ("", b""))


def test_decode_records_any_negative_length_is_null_as_in_kafka():
    body = bytes([0]) + varint(0) + varint(0) + varint(-5) + varint(-2) + varint(0)
    [record] = _native.decode_records(varint(len(body)) + body, 1, 0, 0, -1)
    assert (record.key, record.value) == (None, None)


def test_decode_records_count_zero_ignores_trailing_bytes_as_kafka_does():
    assert _native.decode_records(b"\x01\x02", 0, 0, 0, -1) == []
    assert _native.decode_records(b"", 0, 0, 0, -1) == []


def test_record_type_behaves_like_a_named_tuple():
    Record = _native.Record
    record = Record(5, 6, b"k", None, (("h", b"v"),))
    assert record == (5, 6, b"k", None, (("h", b"v"),)) and isinstance(record, tuple)
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == tuple(record)
    assert Record(offset=1, timestamp=2, key=None, value=b"", headers=()) == (1, 2, None, b"", ())
    assert Record._fields == ("offset", "timestamp", "key", "value", "headers")
    assert repr(record) == "Record(offset=5, timestamp=6, key=b'k', value=None, headers=(('h', b'v'),))"
    assert pickle.loads(pickle.dumps(record)) == record
    assert type(pickle.loads(pickle.dumps(record))) is Record
    match record:
        case Record(offset=offset, key=key):
            assert (offset, key) == (5, b"k")
    with pytest.raises(AttributeError):
        record.offset = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        Record(1, 2, 3)


# --- decode_records: errors, against a restatement of Kafka's reader -----------------------------------


class _Underflow(Exception):
    """java.nio.BufferUnderflowException."""


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Underflow
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:  # ByteUtils.readVarint
        result = 0
        for i in range(4):
            b = self.byte()
            result |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                return (result >> 1) ^ -(result & 1)
        b = self.byte()
        result = (result | b << 28) & 0xFFFFFFFF
        if b >= 0x80:
            raise CorruptRecordError(
                f"Varint is too long, the most significant bit in the 5th byte is set, converted value: {result:x}"
            )
        return (result >> 1) ^ -(result & 1)

    def varlong(self) -> int:  # ByteUtils.readVarlong
        value = shift = 0
        while (b := self.byte()) & 0x80:
            value |= (b & 0x7F) << shift
            shift += 7
            if shift > 63:
                raise CorruptRecordError(
                    "Varlong is too long, most significant bit in the 10th byte is set, "
                    f"converted value: {value & MASK64:x}"
                )
        value = (value | b << shift) & MASK64
        return (value >> 1) ^ -(value & 1)

    def bytes_or_none(self, length: int) -> bytes | None:  # Utils.readBytes
        if length < 0:
            return None
        if length > self.remaining:
            raise _Underflow
        self.pos += length
        return self.data[self.pos - length : self.pos]


def _int64(n: int) -> int:
    return (n + 2**63) % 2**64 - 2**63


def kafka_decode(data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int):
    """DefaultRecordBatch's uncompressed iterator over DefaultRecord.readFrom(ByteBuffer, ...)."""
    if count < 0:
        raise CorruptRecordError(f"Found invalid record count {count} in magic v2 batch")
    buf, out = _Reader(data), []
    for _ in range(count):
        try:
            size = buf.varint()
        except _Underflow:
            raise CorruptRecordError("Incorrect declared batch size, premature EOF reached") from None
        if buf.remaining < size:
            raise CorruptRecordError(
                f"Invalid record size: expected {size} bytes in record payload, but instead the buffer has "
                f"only {buf.remaining} remaining bytes."
            )
        start = buf.pos
        try:
            buf.byte()
            timestamp_delta = buf.varlong()
            offset_delta = buf.varint()
            key = buf.bytes_or_none(buf.varint())
            value = buf.bytes_or_none(buf.varint())
            header_count = buf.varint()
            if header_count < 0:
                raise CorruptRecordError(f"Found invalid number of record headers {header_count}")
            if header_count > buf.remaining:
                raise CorruptRecordError(
                    f"Found invalid number of record headers. {header_count} is larger than the remaining "
                    "size of the buffer"
                )
            headers = []
            for _ in range(header_count):
                key_size = buf.varint()
                if key_size < 0:
                    raise CorruptRecordError(f"Invalid negative header key size {key_size}")
                header_key = buf.bytes_or_none(key_size).decode("utf-8", "replace")
                headers.append((header_key, buf.bytes_or_none(buf.varint())))
        except _Underflow:
            raise CorruptRecordError("Found invalid record structure") from None
        if buf.pos - start != size:
            raise CorruptRecordError(
                f"Invalid record size: expected to read {size} bytes in record payload, but instead read "
                f"{buf.pos - start}"
            )
        timestamp = log_append_time if log_append_time != -1 else _int64(base_timestamp + timestamp_delta)
        out.append((_int64(base_offset + offset_delta), timestamp, key, value, tuple(headers)))
    if count > 0 and buf.remaining:
        raise CorruptRecordError("Incorrect declared batch size, records still remaining in file")
    return out


def outcome(fn, *args):
    try:
        return [tuple(r) for r in fn(*args)]
    except CorruptRecordError as e:
        return ("error", str(e))


GOOD = encode_record(0, 0, b"k", b"v", [("a", b"1")])  # a 1-byte length, then 12 bytes of body


@pytest.mark.parametrize(
    ("data", "count", "message"),
    [
        (GOOD, -3, "Found invalid record count -3 in magic v2 batch"),
        (
            b"\xff\xff\xff\xff\xff",
            1,
            "Varint is too long, the most significant bit in the 5th byte is set, converted value: ffffffff",
        ),
        (
            b"\x80\x80\x80\x80\x81",
            1,
            "Varint is too long, the most significant bit in the 5th byte is set, converted value: 10000000",
        ),
        (
            varint(20) + b"\x00" + b"\xff" * 10 + bytes(9),
            1,
            "Varlong is too long, most significant bit in the 10th byte is set, converted value: ffffffffffffffff",
        ),
        (
            varint(12) + b"\x00\x00" + b"\x80" * 5 + bytes(5),
            1,
            "Varint is too long, the most significant bit in the 5th byte is set, converted value: 0",
        ),
        (varint(6) + bytes([0, 0, 0, 1, 1]) + varint(-1), 1, "Found invalid number of record headers -1"),
        (
            varint(6) + bytes([0, 0, 0, 1, 1]) + varint(3),
            1,
            "Found invalid number of record headers. 3 is larger than the remaining size of the buffer",
        ),
        (
            varint(8) + bytes([0, 0, 0, 1, 1]) + varint(1) + varint(-2) + b"\x00",
            1,
            "Invalid negative header key size -2",
        ),
        (GOOD + GOOD, 1, "Incorrect declared batch size, records still remaining in file"),
        (GOOD, 2, "Incorrect declared batch size, premature EOF reached"),
        (GOOD + b"\x80", 2, "Incorrect declared batch size, premature EOF reached"),
        (
            GOOD[:-1],
            1,
            "Invalid record size: expected 12 bytes in record payload, but instead the buffer has only 11 remaining bytes.",
        ),
        (
            varint(13) + GOOD[1:] + b"\x00",
            1,
            "Invalid record size: expected to read 13 bytes in record payload, but instead read 12",
        ),
        (
            varint(11) + GOOD[1:],
            1,
            "Invalid record size: expected to read 11 bytes in record payload, but instead read 12",
        ),
        (
            varint(-1) + bytes([0, 0, 0, 1, 1, 0]),
            1,
            "Invalid record size: expected to read -1 bytes in record payload, but instead read 6",
        ),
        (varint(6) + bytes([0, 0, 0]) + varint(9) + b"ab", 1, "Found invalid record structure"),
        (varint(4) + bytes([0, 0, 0, 1]), 1, "Found invalid record structure"),
        (varint(8) + bytes([0, 0, 0, 1, 1, 2]) + varint(5) + b"ab", 1, "Found invalid record structure"),
    ],
)
def test_decode_records_errors_carry_kafkas_messages(data, count, message):
    with pytest.raises(CorruptRecordError) as raised:
        _native.decode_records(data, count, 0, 0, -1)
    assert str(raised.value) == message
    assert isinstance(raised.value, FormatError)
    assert outcome(kafka_decode, data, count, 0, 0, -1) == ("error", message)


def test_decode_records_argument_errors_are_not_format_errors():
    with pytest.raises(TypeError):
        _native.decode_records(GOOD, 1, 0, 0)
    with pytest.raises(TypeError):
        _native.decode_records(GOOD, "1", 0, 0, -1)
    with pytest.raises(TypeError):
        _native.decode_records("text", 1, 0, 0, -1)


@settings(max_examples=400, deadline=None)
@given(
    data=st.binary(max_size=64),
    count=st.integers(-2, 6),
    base_offset=INT64,
    base_timestamp=INT64,
    log_append_time=st.sampled_from([-1, 0, 1700000000000]),
)
def test_decode_records_fuzz_random_bytes(data, count, base_offset, base_timestamp, log_append_time):
    args = (data, count, base_offset, base_timestamp, log_append_time)
    assert outcome(_native.decode_records, *args) == outcome(kafka_decode, *args)


@settings(max_examples=400, deadline=None)
@given(
    records=st.lists(
        st.builds(
            encode_record,
            st.integers(-(2**31), 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.one_of(st.none(), st.binary(max_size=8)),
            st.one_of(st.none(), st.binary(max_size=8)),
            st.lists(
                st.tuples(st.binary(max_size=4), st.one_of(st.none(), st.binary(max_size=4))), max_size=2
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.integers(-3, 3),
    count_change=st.integers(-1, 1),
)
def test_decode_records_fuzz_damaged_batches(records, edits, cut, count_change):
    data = bytearray(b"".join(records))
    for where, byte in edits:
        data[where % len(data)] = byte
    data = bytes(data[: len(data) + cut] if cut < 0 else data + bytes(cut))
    args = (data, len(records) + count_change, 100, 1700000000000, -1)
    assert outcome(_native.decode_records, *args) == outcome(kafka_decode, *args)


def test_decode_records_huge_count_on_little_data_fails_cleanly():
    with pytest.raises(CorruptRecordError, match="premature EOF"):
        _native.decode_records(GOOD, 2**31 - 1, 0, 0, -1)
    with pytest.raises(CorruptRecordError, match="premature EOF"):
        _native.decode_records(GOOD * 3, 2**62, 0, 0, -1)


def test_scan_builds_instances_of_a_given_tuple_subclass():
    from formats.records import RecordBatch, RecordSpec, build_batch

    data = build_batch([RecordSpec(1, b"k", b"v")], base_offset=7) * 1
    plain, _, _ = _native.scan(data, 0, len(data), True)
    typed, stop, reason = _native.scan(data, 0, len(data), True, RecordBatch)
    assert type(typed[0]) is RecordBatch and typed[0] == RecordBatch._make(plain[0])
    assert typed[0].base_offset == 7 and (stop, reason) == (len(data), 0)
    with pytest.raises(TypeError, match="tuple subclass"):
        _native.scan(data, 0, len(data), True, dict)


# --- encode_records: against the tiny writer above and kafka-python ------------------------------------

spec_strategy = st.tuples(
    st.integers(-(2**40), 2**40),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(header_strategy, max_size=3).map(tuple),
    st.one_of(st.none(), INT32),
)


@settings(max_examples=200, deadline=None)
@given(specs=st.lists(spec_strategy, max_size=12), base_timestamp=st.integers(-(2**40), 2**40))
def test_encode_records_matches_the_reference_writer(specs, base_timestamp):
    expected, delta = b"", -1
    for timestamp, key, value, headers, offset_delta in specs:
        delta = delta + 1 if offset_delta is None else offset_delta
        expected += encode_record(delta, timestamp - base_timestamp, key, value, headers)
    data, last_offset_delta, max_timestamp = _native.encode_records(specs, base_timestamp)
    assert data == expected and type(data) is bytes
    assert last_offset_delta == delta
    assert max_timestamp == max((s[0] for s in specs), default=-1)


@settings(max_examples=100, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=12))
def test_encode_records_equals_kafka_pythons_records_region(records):
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i, (timestamp, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=headers)
    theirs = bytes(builder.build())
    specs = [
        (timestamp, key, value, tuple(map(tuple, headers))) for timestamp, key, value, headers in records
    ]
    data, last_offset_delta, max_timestamp = _native.encode_records(specs, records[0][0])
    assert data == theirs[61:]
    assert (last_offset_delta, max_timestamp) == struct.unpack_from(">i8xq", theirs, 23)


@settings(max_examples=100, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=12), base_offset=st.integers(0, 2**40))
def test_decoded_records_encode_back_to_the_same_bytes(records, base_offset):
    specs = [
        (timestamp, key, value, tuple(map(tuple, headers))) for timestamp, key, value, headers in records
    ]
    data, _, _ = _native.encode_records(specs, 1000)
    decoded = _native.decode_records(data, len(specs), base_offset, 1000, -1)
    assert _native.encode_records(decoded, 1000) == _native.encode_records(specs, 1000)
    assert _native.encode_records(tuple(decoded), 1000)[0] == data


def test_encode_records_a_record_takes_the_next_offset_delta_whatever_its_offset():
    Record = _native.Record
    items = [Record(900, 5, b"a", b"1", ()), (6, None, b"2", (), 7), Record(3, 4, None, None, ())]
    data, last_offset_delta, max_timestamp = _native.encode_records(items, 5)
    assert data == encode_record(0, 0, b"a", b"1") + encode_record(7, 1, None, b"2") + encode_record(8, -1)
    assert (last_offset_delta, max_timestamp) == (8, 6)
    assert [r.offset for r in _native.decode_records(data, 3, 100, 5, -1)] == [100, 107, 108]


def test_encode_records_timestamp_deltas_wrap_like_java_longs():
    data, _, max_timestamp = _native.encode_records([(-(2**63), b"k", None), (2**63 - 1, None, None)], 1)
    assert data == encode_record(0, 2**63 - 1, b"k") + encode_record(1, 2**63 - 2)
    decoded = _native.decode_records(data, 2, 0, 1, -1)
    assert [r.timestamp for r in decoded] == [-(2**63), 2**63 - 1] and max_timestamp == 2**63 - 1


def test_encode_records_takes_any_bytes_like_key_value_and_header_lists():
    expected = encode_record(0, 0, b"key", b"value", [("h", b"v"), ("n", None)])
    items = [(7, bytearray(b"key"), memoryview(b"value"), [["h", bytearray(b"v")], ("n", None)])]
    assert _native.encode_records(items, 7)[0] == expected
    assert _native.encode_records([], 0) == (b"", -1, -1)
    assert _native.encode_records([(1, None, None)], 1)[0] == encode_record(0, 0)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([[1, None, None]], "a record must be a Record or a"),
        ([(1, None)], "a record must be a Record or a"),
        ([(1.5, None, None)], "timestamp must be an int"),
        ([(1, "text", None)], "key must be bytes or None"),
        ([(1, None, 5)], "value must be bytes or None"),
        ([(1, None, None, "h")], "headers must be a tuple or list"),
        ([(1, None, None, (("h", b"v", b"x"),))], "header must be a .str, bytes | None. pair"),
        ([(1, None, None, ((b"h", b"v"),))], "header key must be a str"),
        ([(1, None, None, (("h", "v"),))], "header value must be bytes or None"),
        ([(1, None, None, (), 2.0)], "offset_delta must be an int"),
    ],
)
def test_encode_records_rejects_what_it_cannot_encode(items, message):
    with pytest.raises(TypeError, match=message):
        _native.encode_records(items, 0)


def test_encode_records_argument_errors():
    with pytest.raises(TypeError, match="list or tuple"):
        _native.encode_records(iter([]), 0)
    with pytest.raises(OverflowError):
        _native.encode_records([(2**63, None, None)], 0)
    with pytest.raises(UnicodeEncodeError):
        _native.encode_records([(0, None, None, (("\ud800", None),))], 0)
    with pytest.raises(TypeError):
        _native.encode_records([], 0, 1)


# --- murmur2: against kafka-python's ----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=70))
def test_murmur2_matches_kafka_python(data):
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    ours = _native.murmur2(data)
    assert -(2**31) <= ours < 2**31
    assert ours & 0xFFFFFFFF == kafka_python_murmur2(data)  # kafka-python answers it unsigned


def test_murmur2_takes_any_bytes_like_and_nothing_else():
    assert _native.murmur2(bytearray(b"21")) == _native.murmur2(memoryview(b"xx21")[2:]) == -973932308
    with pytest.raises(TypeError):
        _native.murmur2("21")


def test_uninitialized_bytearray_is_a_writable_bytearray_of_the_size_asked() -> None:
    buffer = _native.uninitialized_bytearray(1 << 20)
    assert type(buffer) is bytearray and len(buffer) == 1 << 20
    buffer[:] = bytes(range(256)) * 4096
    assert buffer[-1] == 255
    assert _native.uninitialized_bytearray(0) == bytearray()
    with pytest.raises(ValueError):
        _native.uninitialized_bytearray(-1)
