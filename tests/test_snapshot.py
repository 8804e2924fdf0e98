"""Producer state .snapshot files: golden bytes, round trips, Kafka's errors and kafka-dump-log lines."""

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from formats.errors import CorruptSnapshotError
from formats.snapshot import (
    SNAPSHOT_ENTRY_SIZE,
    ProducerSnapshotEntry,
    decrement_sequence,
    format_snapshot_entry,
    read_snapshot,
    write_snapshot,
)

INT32_MAX = 2**31 - 1


def be(value: int, size: int) -> bytes:
    return value.to_bytes(size, "big", signed=True)


def int_range(bits: int):
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


snapshot_entries = st.builds(
    ProducerSnapshotEntry,
    producer_id=int_range(64),
    epoch=int_range(16),
    last_sequence=int_range(32),
    last_offset=int_range(64),
    offset_delta=int_range(32),
    timestamp=int_range(64),
    coordinator_epoch=int_range(32),
    current_txn_first_offset=int_range(64),
)

PRODUCER_1000 = ProducerSnapshotEntry(
    producer_id=1000,
    epoch=0,
    last_sequence=9,
    last_offset=9,
    offset_delta=9,
    timestamp=1_700_000_000_000,
    coordinator_epoch=-1,
    current_txn_first_offset=-1,
)


def hand_built_snapshot(entries: list[ProducerSnapshotEntry]) -> bytes:
    """The layout of the reference (§3.5), assembled field by field without formats.snapshot."""
    body = be(len(entries), 4)
    for e in entries:
        body += (
            be(e.producer_id, 8)
            + be(e.epoch, 2)
            + be(e.last_sequence, 4)
            + be(e.last_offset, 8)
            + be(e.offset_delta, 4)
            + be(e.timestamp, 8)
            + be(e.coordinator_epoch, 4)
            + be(e.current_txn_first_offset, 8)
        )
    return be(1, 2) + crc32c.crc32c(body).to_bytes(4, "big") + body


def test_crc32c_is_the_castagnoli_polynomial():
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_golden_bytes():
    data = write_snapshot([PRODUCER_1000])
    assert data == hand_built_snapshot([PRODUCER_1000])
    assert len(data) == 10 + SNAPSHOT_ENTRY_SIZE == 56
    assert data[:2] == b"\x00\x01"
    assert data[6:10] == b"\x00\x00\x00\x01"
    assert data[10:18] == be(1000, 8)
    assert write_snapshot([]) == b"\x00\x01" + crc32c.crc32c(b"\0\0\0\0").to_bytes(4, "big") + b"\0\0\0\0"
    assert read_snapshot(write_snapshot([])) == []


@given(st.lists(snapshot_entries, max_size=20))
def test_round_trip(entries):
    data = write_snapshot(entries)
    assert data == hand_built_snapshot(entries)
    assert read_snapshot(data) == entries
    assert read_snapshot(memoryview(bytearray(data))) == entries


def test_bytes_after_the_entries_are_ignored_when_the_crc_covers_them():
    data = bytearray(write_snapshot([PRODUCER_1000]) + b"tail")
    data[2:6] = crc32c.crc32c(bytes(data[6:])).to_bytes(4, "big")
    assert read_snapshot(bytes(data)) == [PRODUCER_1000]


# --- errors ------------------------------------------------------------------------------------------


def snapshot_error(data: bytes) -> str:
    with pytest.raises(CorruptSnapshotError) as e:
        read_snapshot(data)
    return str(e.value)


def test_unknown_version():
    # Kafka throws this inside the try that wraps schema errors, so the prefix is part of its message.
    data = b"\x00\x02" + write_snapshot([PRODUCER_1000])[2:]
    assert (
        snapshot_error(data)
        == "Snapshot failed schema validation: Snapshot contained an unknown file version 2"
    )
    assert snapshot_error(b"\xff\xff") == (
        "Snapshot failed schema validation: Snapshot contained an unknown file version -1"
    )
    assert snapshot_error(b"\x00\x00" + bytes(8)).endswith("unknown file version 0")


def test_bad_crc():
    data = bytearray(write_snapshot([PRODUCER_1000]))
    good_crc = int.from_bytes(data[2:6], "big")
    data[20] ^= 0x40
    computed = crc32c.crc32c(bytes(data[6:]))
    assert snapshot_error(bytes(data)) == (
        f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {good_crc}. Computed crc: {computed}"
    )


def test_crc_is_printed_unsigned():
    data = bytearray(write_snapshot([]))
    data[2:6] = b"\xff\xff\xff\xff"
    assert "Stored crc: 4294967295." in snapshot_error(bytes(data))


def test_short_and_structurally_broken_files():
    assert snapshot_error(b"").startswith("Snapshot failed schema validation: ")
    assert snapshot_error(b"\x00").startswith("Snapshot failed schema validation: ")
    assert snapshot_error(b"\x00\x01\x00\x00\x00").startswith("Snapshot failed schema validation: ")
    negative = b"\x00\x01" + bytes(4) + be(-1, 4)
    assert snapshot_error(negative) == (
        "Snapshot failed schema validation: non-nullable field producerEntries was serialized as null"
    )
    truncated = write_snapshot([PRODUCER_1000, PRODUCER_1000])[:-1]
    assert snapshot_error(truncated) == (
        "Snapshot failed schema validation: 2 entries need 92 bytes but only 91 bytes remain"
    )


@given(st.binary(max_size=150))
def test_garbage_raises_only_corrupt_snapshot_error(data):
    try:
        entries = read_snapshot(data)
    except CorruptSnapshotError as e:
        assert str(e).startswith("Snapshot ")
        return
    assert len(data) >= 10 + SNAPSHOT_ENTRY_SIZE * len(entries)


@given(st.lists(snapshot_entries, min_size=1, max_size=3), st.data())
def test_any_flipped_bit_is_detected(entries, data):
    raw = bytearray(write_snapshot(entries))
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(bytes(raw))


def test_write_rejects_out_of_range_fields():
    with pytest.raises(ValueError):
        write_snapshot([ProducerSnapshotEntry(1, 2**15, 0, 0, 0, 0, 0, -1)])


# --- derived fields and the kafka-dump-log line ------------------------------------------------------


def test_derived_first_sequence_and_offset():
    assert PRODUCER_1000.first_sequence == 0
    assert PRODUCER_1000.first_offset == 0
    assert PRODUCER_1000.has_batch_metadata
    wrapped = ProducerSnapshotEntry(7, 1, 2, 500, 5, 0, 0, -1)
    # 2147483645, 2147483646, 2147483647, 0, 1, 2: six sequences, delta 5.
    assert wrapped.first_sequence == 2_147_483_645
    assert wrapped.first_offset == 495


def test_decrement_sequence_like_java():
    assert decrement_sequence(10, 3) == 7
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(3, 3) == 0
    # Java int overflow is kept: garbage prints what Kafka would print.
    assert decrement_sequence(INT32_MAX, -(2**31)) == -1
    # decrement - sequence wraps to -1, MAX - (-1) wraps to MIN, plus one.
    assert decrement_sequence(-(2**31), INT32_MAX) == -(2**31) + 1


def test_dump_line_from_the_reference():
    assert format_snapshot_entry(PRODUCER_1000) == (
        "producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1700000000000 firstSequence: 0 lastSequence: 9 lastOffset: 9 offsetDelta: 9 "
        "timestamp: 1700000000000"
    )


def test_dump_line_with_open_transaction():
    entry = ProducerSnapshotEntry(42, 3, 19, 150, 4, 1_700_000_000_500, 7, 123)
    assert format_snapshot_entry(entry) == (
        "producerId: 42 producerEpoch: 3 coordinatorEpoch: 7 currentTxnFirstOffset: OptionalLong[123] "
        "lastTimestamp: 1700000000500 firstSequence: 15 lastSequence: 19 lastOffset: 150 offsetDelta: 4 "
        "timestamp: 1700000000500"
    )


def test_dump_line_without_batch_metadata_ends_with_a_space():
    entry = ProducerSnapshotEntry(42, 3, -1, -1, 0, 1_700_000_000_500, 7, 0)
    assert not entry.has_batch_metadata
    assert format_snapshot_entry(entry) == (
        "producerId: 42 producerEpoch: 3 coordinatorEpoch: 7 currentTxnFirstOffset: OptionalLong[0] "
        "lastTimestamp: 1700000000500 "
    )
