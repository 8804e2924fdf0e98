"""formats.wire: the one set of wire primitives every codec uses, against Kafka's encodings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from formats import wire


@given(st.integers(0, 2**32 - 1))
def test_an_unsigned_varint_reads_back_and_both_writers_agree(value: int) -> None:
    out = bytearray()
    wire.write_uvarint(out, value)
    assert bytes(out) == wire.uvarint(value)
    assert wire.read_uvarint(out, 0, len(out)) == (value, len(out))


def test_unsigned_varints_are_kafkas() -> None:
    assert wire.uvarint(0) == b"\x00"
    assert wire.uvarint(127) == b"\x7f"
    assert wire.uvarint(128) == b"\x80\x01"
    assert wire.uvarint(300) == b"\xac\x02"


def test_a_varint_cut_short_or_too_long_is_refused_with_its_reason() -> None:
    with pytest.raises(wire.VarintError) as cut:
        wire.read_uvarint(b"\x80", 0, 1)
    assert cut.value.truncated
    with pytest.raises(wire.VarintError) as long:
        wire.read_uvarint(b"\x80" * 5 + b"\x01", 0, 6)
    assert not long.value.truncated


@given(st.one_of(st.none(), st.text(max_size=300)), st.booleans(), st.integers(-1, 300))
def test_strings_and_array_lengths_read_back(text: str | None, flexible: bool, count: int) -> None:
    out = bytearray()
    wire.write_nullable_string(out, text, flexible)
    wire.write_array_length(out, count, flexible)
    value, pos = wire.read_nullable_string(out, 0, flexible)
    assert value == text
    assert wire.read_array_length(out, pos, flexible) == (count, len(out))


def test_tagged_fields_are_skipped_and_one_past_the_end_is_refused() -> None:
    section = b"\x02" + b"\x00\x01x" + b"\x05\x02yz"
    assert wire.skip_tagged_fields(section + b"rest", 0, len(section) + 4) == len(section)
    with pytest.raises(wire.WireError):
        wire.skip_tagged_fields(b"\x01\x00\x05ab", 0, 5)
