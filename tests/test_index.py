""".index, .timeindex and .txnindex: golden bytes, the zero-slot stop rule, lookups, Kafka's checks."""

import mmap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from formats.errors import CorruptIndexError
from formats.index import (
    NO_TIMESTAMP,
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    TXN_ENTRY_SIZE,
    AbortedTxn,
    OffsetIndex,
    OffsetIndexEntry,
    TimeIndex,
    TimeIndexEntry,
    encode_aborted_txn,
    encode_offset_entry,
    encode_time_entry,
    format_aborted_txn,
    preallocated_size,
    read_txn_index,
)

INT32_MAX = 2**31 - 1
T0 = 1_700_000_000_000
int64s = st.integers(-(2**63), 2**63 - 1)
base_offsets = st.integers(0, 2**62)


def be(value: int, size: int) -> bytes:
    """Big-endian two's complement, written independently of the struct module."""
    return value.to_bytes(size, "big", signed=True)


def offset_index_bytes(base_offset: int, entries: list[tuple[int, int]]) -> bytes:
    return b"".join(encode_offset_entry(base_offset, offset, position) for offset, position in entries)


# Strictly increasing relative offsets (the first may be 0) with any positions.
relative_offsets = st.lists(st.integers(1, INT32_MAX), unique=True, max_size=40).map(sorted)


@st.composite
def offset_index_entries(draw):
    relatives = draw(relative_offsets)
    if draw(st.booleans()):
        relatives = [0, *relatives]
    positions = draw(st.lists(st.integers(0, INT32_MAX), min_size=len(relatives), max_size=len(relatives)))
    return list(zip(relatives, positions, strict=True))


@st.composite
def time_index_entries(draw):
    relatives = draw(relative_offsets)
    timestamps = sorted(draw(st.lists(int64s, min_size=len(relatives), max_size=len(relatives), unique=True)))
    return list(zip(timestamps, relatives, strict=True))


# --- golden bytes ----------------------------------------------------------------------------------


def test_offset_entry_golden_bytes():
    assert encode_offset_entry(100, 105, 4096) == bytes.fromhex("00000005 00001000")
    assert encode_offset_entry(0, INT32_MAX, INT32_MAX) == bytes.fromhex("7fffffff 7fffffff")
    assert OFFSET_ENTRY_SIZE == 8


def test_time_entry_golden_bytes():
    assert encode_time_entry(100, 1_700_000_000_123, 105) == be(1_700_000_000_123, 8) + be(5, 4)
    assert encode_time_entry(100, 1_700_000_000_123, 105) == bytes.fromhex("0000018bcfe5687b 00000005")
    assert encode_time_entry(7, -1, 7) == bytes.fromhex("ffffffffffffffff 00000000")
    assert TIME_ENTRY_SIZE == 12


def test_encoders_reject_what_does_not_fit():
    with pytest.raises(ValueError, match=r"^Integer overflow for offset: 99$"):
        encode_offset_entry(100, 99, 0)
    with pytest.raises(ValueError, match=r"^Integer overflow for offset: 2147483748$"):
        encode_offset_entry(100, 100 + 2**31, 0)
    with pytest.raises(ValueError):
        encode_offset_entry(0, 1, -1)
    with pytest.raises(ValueError):
        encode_offset_entry(0, 1, 2**31)
    with pytest.raises(ValueError):
        encode_time_entry(0, 2**63, 1)
    with pytest.raises(ValueError, match="Integer overflow"):
        encode_time_entry(5, 0, 4)


def test_preallocated_size():
    assert preallocated_size(10 * 1024 * 1024, OFFSET_ENTRY_SIZE) == 10_485_760
    assert preallocated_size(10 * 1024 * 1024, TIME_ENTRY_SIZE) == 10_485_756
    assert preallocated_size(4096, TIME_ENTRY_SIZE) == 4092
    assert preallocated_size(12, TIME_ENTRY_SIZE) == 12
    with pytest.raises(ValueError, match=r"^Invalid max index size: 7$"):
        preallocated_size(7, OFFSET_ENTRY_SIZE)


# --- round trips -----------------------------------------------------------------------------------


@given(base_offsets, offset_index_entries())
def test_offset_index_round_trip(base_offset, entries):
    data = b"".join(
        encode_offset_entry(base_offset, base_offset + rel, position) for rel, position in entries
    )
    index = OffsetIndex(data, base_offset)
    expected = [OffsetIndexEntry(base_offset + rel, position) for rel, position in entries]
    assert list(index.entries()) == expected
    assert list(index) == expected
    assert len(index) == len(expected) == index.slots
    assert [index[i] for i in range(len(index))] == expected
    index.sanity_check()


@given(base_offsets, time_index_entries())
def test_time_index_round_trip(base_offset, entries):
    data = b"".join(encode_time_entry(base_offset, ts, base_offset + rel) for ts, rel in entries)
    index = TimeIndex(data, base_offset)
    expected = [TimeIndexEntry(ts, base_offset + rel) for ts, rel in entries]
    assert list(index.entries()) == expected
    assert len(index) == len(expected)
    index.sanity_check()


# --- zero-slot stop rule ---------------------------------------------------------------------------


def test_untrimmed_offset_index_stops_at_first_zero_slot():
    base = 5000
    entries = [(5000 + 12, 4200), (5000 + 40, 8400), (5000 + 90, 12600)]
    data = offset_index_bytes(base, entries) + bytes(preallocated_size(4096, 8) - 24)
    index = OffsetIndex(data, base)
    assert index.slots == 512
    assert len(index) == 3
    assert list(index) == [OffsetIndexEntry(o, p) for o, p in entries]
    assert index.last_entry() == OffsetIndexEntry(5090, 12600)
    # Kafka's sanity check reads all 512 slots: the last one is (base, 0), which passes.
    index.sanity_check()


def test_slot_zero_always_counts_even_when_it_is_zero():
    index = OffsetIndex(bytes(8 * 1000), 77)
    assert index.slots == 1000
    assert len(index) == 1
    assert list(index) == [OffsetIndexEntry(77, 0)]
    assert len(OffsetIndex(b"", 77)) == 0
    assert len(OffsetIndex(bytes(8), 77)) == 1


def test_stop_rule_ignores_anything_after_the_zero_slot():
    data = offset_index_bytes(0, [(0, 0), (10, 100)]) + bytes(8) + offset_index_bytes(0, [(20, 200)])
    index = OffsetIndex(data, 0)
    assert index.slots == 4
    assert list(index) == [OffsetIndexEntry(0, 0), OffsetIndexEntry(10, 100)]
    assert index.lookup(25) == OffsetIndexEntry(10, 100)


def test_stop_rule_looks_at_the_relative_offset_only():
    # A slot whose position is 0 but relative offset is not is an entry; one whose relative offset
    # is 0 ends the index even if its position is not (what DumpLogSegments does).
    data = be(0, 4) + be(0, 4) + be(1, 4) + be(0, 4) + be(0, 4) + be(99, 4)
    assert list(OffsetIndex(data, 10)) == [OffsetIndexEntry(10, 0), OffsetIndexEntry(11, 0)]
    time_data = be(5, 8) + be(0, 4) + be(6, 8) + be(3, 4) + be(7, 8) + be(0, 4)
    assert list(TimeIndex(time_data, 10)) == [TimeIndexEntry(5, 10), TimeIndexEntry(6, 13)]


def test_untrimmed_time_index_stops_at_first_zero_slot():
    base = 100
    entries = [(1_700_000_000_000, 105), (1_700_000_000_500, 130)]
    data = b"".join(encode_time_entry(base, ts, o) for ts, o in entries) + bytes(12 * 100)
    index = TimeIndex(data, base)
    assert index.slots == 102
    assert list(index) == [TimeIndexEntry(ts, o) for ts, o in entries]


def naive_entry_count(data: bytes, entry_size: int, field_at: int) -> int:
    slots = len(data) // entry_size
    for i in range(1, slots):
        if data[i * entry_size + field_at : i * entry_size + field_at + 4] == bytes(4):
            return i
    return slots


@given(
    st.lists(st.sampled_from([b"\0" * 4, b"\0\0\0\1", b"\1\0\0\0", b"\0\0\1\0", b"\xff" * 4]), max_size=60)
)
def test_entry_count_matches_a_naive_scan(words):
    data = b"".join(words)
    assert len(OffsetIndex(data, 3)) == naive_entry_count(data, 8, 0)
    assert len(TimeIndex(data, 3)) == naive_entry_count(data, 12, 8)


@pytest.mark.parametrize("zero_slot", [1, 65_535, 65_536, 65_537, 131_072, 139_999, None])
def test_entry_count_across_scan_chunks(zero_slot):
    # The count is found 65,536 slots at a time; a zero slot on either side of a boundary counts.
    data = bytearray((be(1, 4) + be(0, 4)) * 140_000)
    if zero_slot is not None:
        data[zero_slot * 8 : zero_slot * 8 + 4] = bytes(4)
    assert len(OffsetIndex(data, 0)) == (140_000 if zero_slot is None else zero_slot)
    time_data = bytearray((be(0, 8) + be(1, 4)) * 140_000)
    if zero_slot is not None:
        time_data[zero_slot * 12 + 8 : zero_slot * 12 + 12] = bytes(4)
    assert len(TimeIndex(time_data, 0)) == (140_000 if zero_slot is None else zero_slot)


def test_preallocated_ten_mib_index_counts_without_a_python_loop():
    data = offset_index_bytes(0, [(i * 10, i * 4096) for i in range(1000)])
    data += bytes(preallocated_size(10 * 1024 * 1024, 8) - len(data))
    index = OffsetIndex(data, 0)
    assert index.slots == 1_310_720
    assert len(index) == 1000
    assert index.lookup(10**9) == OffsetIndexEntry(9990, 999 * 4096)


# --- lookup ----------------------------------------------------------------------------------------


@given(base_offsets, offset_index_entries(), st.integers(-5, 2**31 + 5))
def test_offset_lookup_is_last_entry_at_or_below_target(base_offset, entries, target_delta):
    data = b"".join(
        encode_offset_entry(base_offset, base_offset + rel, position) for rel, position in entries
    )
    index = OffsetIndex(data, base_offset)
    target = base_offset + target_delta
    at_or_below = [e for e in index if e.offset <= target]
    expected = at_or_below[-1] if at_or_below else OffsetIndexEntry(base_offset, 0)
    assert index.lookup(target) == expected


@given(base_offsets, time_index_entries(), int64s)
def test_time_lookup_is_last_entry_at_or_below_target(base_offset, entries, target):
    data = b"".join(encode_time_entry(base_offset, ts, base_offset + rel) for ts, rel in entries)
    index = TimeIndex(data, base_offset)
    at_or_below = [e for e in index if e.timestamp <= target]
    expected = at_or_below[-1] if at_or_below else TimeIndexEntry(NO_TIMESTAMP, base_offset)
    assert index.lookup(target) == expected


def test_lookup_examples():
    index = OffsetIndex(offset_index_bytes(1000, [(1010, 4100), (1020, 8300)]), 1000)
    assert index.lookup(999) == OffsetIndexEntry(1000, 0)
    assert index.lookup(1009) == OffsetIndexEntry(1000, 0)
    assert index.lookup(1010) == OffsetIndexEntry(1010, 4100)
    assert index.lookup(1019) == OffsetIndexEntry(1010, 4100)
    assert index.lookup(5000) == OffsetIndexEntry(1020, 8300)
    assert OffsetIndex(b"", 1000).lookup(1500) == OffsetIndexEntry(1000, 0)
    assert OffsetIndex(b"", 1000).last_entry() == OffsetIndexEntry(1000, 0)

    times = TimeIndex(encode_time_entry(50, 1000, 55) + encode_time_entry(50, 2000, 60), 50)
    assert times.lookup(999) == TimeIndexEntry(-1, 50)
    assert times.lookup(1000) == TimeIndexEntry(1000, 55)
    assert times.lookup(1999) == TimeIndexEntry(1000, 55)
    assert times.lookup(2**62) == TimeIndexEntry(2000, 60)
    assert times.last_entry() == TimeIndexEntry(2000, 60)
    assert TimeIndex(b"", 50).last_entry() == TimeIndexEntry(-1, 50)


def test_item_access():
    index = OffsetIndex(offset_index_bytes(0, [(1, 10), (2, 20)]), 0)
    assert index[-1] == OffsetIndexEntry(2, 20)
    assert index[0] == OffsetIndexEntry(1, 10)
    with pytest.raises(IndexError):
        index[2]
    with pytest.raises(IndexError):
        index[-3]


def test_views_accept_memoryview_and_mmap_and_release():
    data = offset_index_bytes(0, [(1, 10), (2, 20)]) + bytes(16)
    assert list(OffsetIndex(memoryview(bytearray(data))[:16], 0)) == [(1, 10), (2, 20)]
    with mmap.mmap(-1, len(data)) as mapped:
        mapped[:] = data
        index = OffsetIndex(mapped, 0)
        assert len(index) == 2
        index.release()  # without this, closing the map would raise BufferError


# --- sanity checks (Kafka's sentences, Kafka's order) ----------------------------------------------


def test_offset_index_sanity_last_offset_below_base():
    data = be(-1, 4) + be(0, 4)
    with pytest.raises(CorruptIndexError) as e:
        OffsetIndex(data, 10).sanity_check()
    assert str(e.value) == (
        "Corrupt index found, index file has non-zero size but the last offset is 9 "
        "which is less than the base offset 10"
    )


def test_offset_index_sanity_length_not_multiple():
    with pytest.raises(CorruptIndexError) as e:
        OffsetIndex(offset_index_bytes(0, [(1, 0)]) + b"\0\0\0", 0).sanity_check()
    assert (
        str(e.value) == "Index file is corrupt, found 11 bytes which is neither positive nor a multiple of 8"
    )
    with pytest.raises(CorruptIndexError, match="found 5 bytes"):
        OffsetIndex(b"\1" * 5, 0).sanity_check()


def test_offset_index_sanity_checks_offset_before_length():
    with pytest.raises(CorruptIndexError, match="^Corrupt index found"):
        OffsetIndex(be(-5, 4) + be(0, 4) + b"\0", 10).sanity_check()


def test_time_index_sanity_messages():
    data = encode_time_entry(0, 500, 3) + encode_time_entry(0, 400, 4)
    with pytest.raises(CorruptIndexError) as e:
        TimeIndex(data, 0).sanity_check()
    assert str(e.value) == (
        "Corrupt time index found, time index file has non-zero size but the last timestamp is 400 "
        "which is less than the first timestamp 500"
    )
    data = be(500, 8) + be(-2, 4)
    with pytest.raises(CorruptIndexError) as e:
        TimeIndex(data, 100).sanity_check()
    assert str(e.value) == (
        "Corrupt time index found, time index file has non-zero size but the last offset is 98 "
        "which is less than the first offset 100"
    )
    with pytest.raises(CorruptIndexError) as e:
        TimeIndex(encode_time_entry(0, 500, 3) + b"\0", 0).sanity_check()
    assert str(e.value) == (
        "Time index file is corrupt, found 13 bytes which is neither positive nor a multiple of 12"
    )


def test_untrimmed_time_index_fails_kafkas_sanity_check_like_kafka():
    # Kafka's check reads the zero tail as a last entry with timestamp 0.
    data = encode_time_entry(0, 1_700_000_000_000, 5) + bytes(24)
    with pytest.raises(CorruptIndexError, match="last timestamp is 0 which is less than the first timestamp"):
        TimeIndex(data, 0).sanity_check()


def test_empty_indexes_pass_sanity_check():
    OffsetIndex(b"", 0).sanity_check()
    TimeIndex(b"", 0).sanity_check()


@given(st.binary(max_size=200), base_offsets)
def test_garbage_indexes_raise_only_corrupt_index_error(data, base_offset):
    for cls in (OffsetIndex, TimeIndex):
        index = cls(data, base_offset)
        entries = list(index)
        assert len(entries) == len(index) <= index.slots
        index.lookup(base_offset + 100)
        index.last_entry()
        try:
            index.sanity_check()
        except CorruptIndexError:
            pass


# --- .txnindex -------------------------------------------------------------------------------------

aborted_txns = st.builds(AbortedTxn, st.just(0), int64s, int64s, int64s, int64s)


def test_aborted_txn_golden_bytes():
    txn = AbortedTxn(0, 1000, 5, 9, 3)
    expected = be(0, 2) + be(1000, 8) + be(5, 8) + be(9, 8) + be(3, 8)
    assert encode_aborted_txn(txn) == expected
    assert len(expected) == TXN_ENTRY_SIZE == 34
    assert read_txn_index(expected * 2) == [txn, txn]
    assert read_txn_index(b"") == []


@given(st.lists(aborted_txns, max_size=20))
def test_txn_index_round_trip(txns):
    assert read_txn_index(b"".join(encode_aborted_txn(t) for t in txns)) == txns


def test_txn_index_errors():
    entry = encode_aborted_txn(AbortedTxn(0, 1, 2, 3, 4))
    with pytest.raises(CorruptIndexError) as e:
        read_txn_index(entry + b"\0" * 10)
    assert str(e.value) == "Transaction index file is corrupt, found 44 bytes which is not a multiple of 34"
    with pytest.raises(CorruptIndexError) as e:
        read_txn_index(entry + be(1, 2) + entry[2:])
    assert (
        str(e.value) == "Unexpected aborted transaction version 1 in transaction index, current version is 0"
    )
    with pytest.raises(ValueError):
        encode_aborted_txn(AbortedTxn(1, 1, 2, 3, 4))
    with pytest.raises(ValueError):
        encode_aborted_txn(AbortedTxn(0, 2**63, 2, 3, 4))


@given(st.binary(max_size=200))
def test_garbage_txn_index_raises_only_corrupt_index_error(data):
    try:
        txns = read_txn_index(data)
    except CorruptIndexError:
        return
    assert len(txns) * TXN_ENTRY_SIZE == len(data)


def test_format_aborted_txn():
    assert format_aborted_txn(AbortedTxn(0, 1000, 5, 9, 3)) == (
        "version: 0 producerId: 1000 firstOffset: 5 lastOffset: 9 lastStableOffset: 3"
    )


def test_as_trimmed_drops_only_a_preallocated_zero_tail() -> None:
    """What a roll or clean shutdown would trim: whole zero slots after the entries in use, and a zero
    first slot too (a segment's first batch never gets an entry). Anything else is left for the checks."""
    entries = offset_index_bytes(100, [(110, 4200), (125, 8400)])
    assert list(OffsetIndex(entries + bytes(8 * 50), 100).as_trimmed()) == list(OffsetIndex(entries, 100))
    assert OffsetIndex(entries + bytes(8 * 50), 100).as_trimmed().length == len(entries)
    assert OffsetIndex(bytes(8 * 50), 100).as_trimmed().length == 0
    assert len(OffsetIndex(bytes(8 * 50), 100)) == 1  # as Kafka's tools read it: (100, 0)
    for left_alone in (entries, entries + bytes(3), entries + bytes(8) + b"\1" + bytes(15), b""):
        index = OffsetIndex(left_alone, 100)
        assert index.as_trimmed() is index
    times = encode_time_entry(100, T0 + 5, 104) + encode_time_entry(100, T0 + 9, 130)
    untrimmed = TimeIndex(times + bytes(12 * 20), 100)
    with pytest.raises(CorruptIndexError, match="the last timestamp is 0"):
        untrimmed.sanity_check()  # Kafka's check on the file as it stands
    untrimmed.as_trimmed().sanity_check()
    assert list(untrimmed.as_trimmed()) == [TimeIndexEntry(T0 + 5, 104), TimeIndexEntry(T0 + 9, 130)]
