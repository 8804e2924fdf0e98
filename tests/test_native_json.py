"""formats._native.json_records: the JSON lines of `kcli dump-segment --deep-iteration --output json`.

The C renderer must be byte-identical to the Python renderer it replaced (kept below as the
reference: decode_records, then orjson on every field), and must fail exactly where and how
decode_records fails. UTF-8 replacement and orjson's escaping are checked on every byte value.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_native import encode_record, varint

from formats import _native
from formats.compression import Codec
from formats.errors import CorruptRecordError, FormatError
from formats.records import RecordSpec, TimestampType, build_batch, read_batch
from ops.dump import Dumper, DumpOptions

STRING, HEX, BASE64 = 0, 1, 2
MODES = (STRING, HEX, BASE64)
TEXT: dict[int, Callable[[bytes], str]] = {
    STRING: lambda data: data.decode("utf-8", "replace"),
    HEX: bytes.hex,
    BASE64: lambda data: base64.b64encode(data).decode(),
}
DECODER_NAMES = {STRING: "string", HEX: "hex", BASE64: "base64"}
INT64 = st.integers(-(2**63), 2**63 - 1)


def reference_lines(
    records: list, base_offset: int, base_sequence: int, key_text: Callable, value_text: Callable
) -> bytes:
    """The Python renderer json_records replaced (ops/dump.py before it), newline-terminated lines."""
    dumps = orjson.dumps
    lines = []
    for offset, timestamp, key, value, headers in records:
        sequence = -1 if base_sequence < 0 else (base_sequence + offset - base_offset) % 2147483648
        lines.append(
            b'{"type":"record","offset":%d,"timestamp":%d,"sequence":%d,"keySize":%d,"valueSize":%d,'
            b'"key":%b,"value":%b,"headers":%b}\n'
            % (
                offset,
                timestamp,
                sequence,
                -1 if key is None else len(key),
                -1 if value is None else len(value),
                b"null" if key is None else dumps(key_text(key)),
                b"null" if value is None else dumps(value_text(value)),
                dumps([[k, None if v is None else value_text(v)] for k, v in headers]) if headers else b"[]",
            )
        )
    return b"".join(lines)


def outcome(fn: Callable, *args) -> tuple:
    """("ok", result) or ("error", message) for a CorruptRecordError, so two functions compare whole."""
    try:
        return "ok", fn(*args)
    except CorruptRecordError as exc:
        return "error", str(exc)


def check_against_decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int, base_sequence: int
) -> None:
    """json_records in every mode pair equals the reference over decode_records, or fails the same way."""
    args = (data, count, base_offset, base_timestamp, log_append_time)
    expected = outcome(_native.decode_records, *args)
    for key_mode, value_mode in itertools.product(MODES, MODES):
        got = outcome(_native.json_records, *args, base_sequence, key_mode, value_mode)
        if expected[0] == "error":
            assert got == expected
        else:
            lines = reference_lines(expected[1], base_offset, base_sequence, TEXT[key_mode], TEXT[value_mode])
            assert got == ("ok", lines)


# --- byte-identical to the Python renderer --------------------------------------------------------------

# Pieces that stress escaping, UTF-8 repair and the 8-byte fast path (ASCII runs around them).
PIECES = [
    b'"', b"\\", b"/", b"\x00", b"\x08", b"\x0b", b"\x1f", b"\x7f", b"abcdefgh", b"xyz",
    "é€😀\u2028\ufeff\ufffd".encode(), b"\xe2\x82", b"\xf0\x90\x80", b"\xed\xa0\x80", b"\xc0\xaf",
    b"\xff", b"\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80", b"\xc3", b"\xf8\x88\x80\x80\x80",
]  # fmt: skip
payload = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.text(max_size=20).map(str.encode),
    st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join),
)
spec = st.builds(
    RecordSpec,
    timestamp=st.integers(-(2**45), 2**45),
    key=payload,
    value=payload,
    headers=st.lists(st.tuples(st.text(max_size=6), payload), max_size=3),
    offset_delta=st.one_of(st.none(), st.integers(0, 2**20)),  # build_batch: deltas fit an int32
)
base_sequence = st.one_of(
    st.sampled_from([-1, -5, 0, 2**31 - 1, 2**31 - 3]), st.integers(-(2**31), 2**31 - 1)
)


@settings(max_examples=150, deadline=None)
@given(
    specs=st.lists(spec, max_size=6),
    base_offset=st.one_of(st.integers(0, 2**40), st.sampled_from([2**63 - 3, 2**63 - 1])),
    base_sequence=base_sequence,
    log_append_time=st.sampled_from([-1, 1700000000000, -(2**63)]),
)
def test_matches_the_python_renderer(specs, base_offset, base_sequence, log_append_time):
    data = build_batch(specs, base_offset=base_offset)[61:]
    base_timestamp = specs[0].timestamp if specs else -1
    check_against_decode_records(
        data, len(specs), base_offset, base_timestamp, log_append_time, base_sequence
    )


@settings(max_examples=100, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.integers(-(2**31), 2**31 - 1),
            INT64,
            payload,
            payload,
            st.lists(st.tuples(st.binary(max_size=8), payload), max_size=3),
        ),
        max_size=5,
    ),
    base_offset=INT64,
    base_timestamp=INT64,
    base_sequence=base_sequence,
)
def test_raw_header_keys_and_wrapping_offsets_match(records, base_offset, base_timestamp, base_sequence):
    """Header keys as raw bytes (invalid UTF-8 too), any deltas, offsets and timestamps that wrap."""
    data = b"".join(encode_record(*r) for r in records)
    check_against_decode_records(data, len(records), base_offset, base_timestamp, -1, base_sequence)


@settings(max_examples=100, deadline=None)
@given(specs=st.lists(spec, min_size=1, max_size=6), base_sequence=base_sequence)
def test_every_line_parses_and_round_trips_the_record(specs, base_sequence):
    data = build_batch(specs, base_offset=100)[61:]
    [*records] = _native.decode_records(data, len(specs), 100, specs[0].timestamp, -1)
    for key_mode, value_mode in itertools.product(MODES, MODES):
        out = _native.json_records(
            data, len(specs), 100, specs[0].timestamp, -1, base_sequence, key_mode, value_mode
        )
        assert out.endswith(b"\n") and out.count(b"\n") == len(records)
        for line, record in zip(out.splitlines(), records, strict=True):
            obj = orjson.loads(line)
            assert list(obj) == ["type", "offset", "timestamp", "sequence", "keySize", "valueSize", "key",
                                 "value", "headers"]  # fmt: skip
            assert (obj["type"], obj["offset"], obj["timestamp"]) == (
                "record",
                record.offset,
                record.timestamp,
            )
            expected_sequence = -1 if base_sequence < 0 else (base_sequence + record.offset - 100) % 2**31
            assert obj["sequence"] == expected_sequence
            assert obj["keySize"] == (-1 if record.key is None else len(record.key))
            assert obj["valueSize"] == (-1 if record.value is None else len(record.value))
            assert back(obj["key"], key_mode) == as_text(record.key, key_mode)
            assert back(obj["value"], value_mode) == as_text(record.value, value_mode)
            assert [(k, back(v, value_mode)) for k, v in obj["headers"]] == [
                (k, as_text(v, value_mode)) for k, v in record.headers
            ]


def back(text: str | None, mode: int) -> bytes | str | None:
    """What a JSON field gives back: the bytes themselves for hex and base64, the text for strings."""
    if text is None or mode == STRING:
        return text
    return bytes.fromhex(text) if mode == HEX else base64.b64decode(text, validate=True)


def as_text(data: bytes | None, mode: int) -> bytes | str | None:
    if data is None or mode != STRING:
        return data
    return data.decode("utf-8", "replace")


# --- every byte value: orjson's escaping and CPython's UTF-8 replacement ---------------------------------


def rendered_values(values: list[bytes], mode: int = STRING) -> list[bytes]:
    """The "value" field of each value, rendered by json_records in one call (one record each)."""
    data = b"".join(encode_record(i, 0, None, v) for i, v in enumerate(values))
    out = _native.json_records(data, len(values), 0, 0, -1, -1, STRING, mode)
    return [line[line.index(b',"value":') + 9 : line.rindex(b',"headers":')] for line in out.splitlines()]


def test_every_one_and_two_byte_string_matches_python_and_orjson():
    values = [bytes([b]) for b in range(256)] + [bytes([a, b]) for a in range(256) for b in range(256)]
    expected = [orjson.dumps(v.decode("utf-8", "replace")) for v in values]
    assert rendered_values(values) == expected


def test_three_and_four_byte_sequences_at_every_boundary_match_python():
    edges = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF,
             0xF0, 0xF4, 0xF5, 0xFF]  # fmt: skip
    values = [bytes([lead, b, c]) for lead in range(0xC0, 0x100) for b in edges for c in edges]
    values += [
        bytes([lead, b, c, d]) for lead in range(0xE0, 0xF8) for b in edges for c in edges for d in edges
    ]
    values += [v + b"tail" for v in values[:5000]]  # a repaired sequence followed by more text
    expected = [orjson.dumps(v.decode("utf-8", "replace")) for v in values]
    assert rendered_values(values) == expected


def test_every_byte_at_every_position_of_the_eight_byte_fast_path():
    values = [b"a" * at + bytes([b]) + b"z" * (19 - at) for at in range(20) for b in range(256)]
    expected = [orjson.dumps(v.decode("utf-8", "replace")) for v in values]
    assert rendered_values(values) == expected


def test_hex_and_base64_of_every_byte_and_every_padding():
    values = [bytes([b]) for b in range(256)] + [bytes(range(n)) for n in range(10)] + [bytes(range(256))]
    assert rendered_values(values, HEX) == [b'"%s"' % v.hex().encode() for v in values]
    assert rendered_values(values, BASE64) == [b'"%s"' % base64.b64encode(v) for v in values]


def test_reference_vector():
    data = encode_record(
        0, 5, b'k\x00"\\/', "h\u00e9\U0001f600\x7f".encode() + b"\xff", [(b"h\xc3", b"v"), (b"n", None)]
    )
    assert _native.json_records(data, 1, 10, 1000, -1, 2**31 - 1, STRING, STRING) == (
        b'{"type":"record","offset":10,"timestamp":1005,"sequence":2147483647,"keySize":5,"valueSize":9,'
        b'"key":"k\\u0000\\"\\\\/","value":"h\xc3\xa9\xf0\x9f\x98\x80\x7f\xef\xbf\xbd",'
        b'"headers":[["h\xef\xbf\xbd","v"],["n",null]]}\n'
    )
    data = encode_record(1, 0, None, b"\xfb\xff", [(b"h", b"\x00")])
    assert _native.json_records(data, 1, 2**63 - 1, -5, 42, 7, HEX, BASE64) == (
        b'{"type":"record","offset":-9223372036854775808,"timestamp":42,"sequence":8,"keySize":-1,"valueSize":2,'
        b'"key":null,"value":"+/8=","headers":[["h","AA=="]]}\n'
    )


# --- bad input: the same errors as decode_records --------------------------------------------------------

GOOD = encode_record(0, 0, b"k", b"v")


@pytest.mark.parametrize(
    ("data", "count"),
    [
        (GOOD, -3),
        (b"\xff\xff\xff\xff\xff", 1),
        (varint(20) + b"\x00" + b"\xff" * 10 + bytes(9), 1),
        (varint(12) + b"\x00\x00" + b"\x80" * 5 + bytes(5), 1),
        (varint(6) + bytes([0, 0, 0, 1, 1]) + varint(-1), 1),
        (varint(6) + bytes([0, 0, 0, 1, 1]) + varint(3), 1),
        (varint(8) + bytes([0, 0, 0, 1, 1]) + varint(1) + varint(-2) + b"\x00", 1),
        (varint(9) + bytes([0, 0, 0, 1, 1]) + varint(1) + varint(1) + b"a" + varint(4), 1),
        (GOOD + GOOD, 1),
        (GOOD, 2),
        (GOOD[:-1], 1),
        (varint(len(GOOD) - 1 + 1) + GOOD[1:] + b"\x00", 1),
        (varint(6) + bytes([0, 0, 0]) + varint(9) + b"ab", 1),
        (GOOD * 3, 2**62),
    ],
)
def test_errors_are_decode_records_errors(data, count):
    expected = outcome(_native.decode_records, data, count, 0, 0, -1)
    assert expected[0] == "error"
    for key_mode, value_mode in itertools.product(MODES, MODES):
        with pytest.raises(CorruptRecordError) as raised:
            _native.json_records(data, count, 0, 0, -1, 0, key_mode, value_mode)
        assert str(raised.value) == expected[1] and isinstance(raised.value, FormatError)


def test_count_zero_is_empty_whatever_follows():
    assert _native.json_records(b"\x01\x02", 0, 0, 0, -1, -1, STRING, STRING) == b""
    assert _native.json_records(memoryview(b""), 0, 0, 0, -1, -1, HEX, BASE64) == b""


def test_argument_errors_are_not_format_errors():
    with pytest.raises(TypeError):
        _native.json_records(GOOD, 1, 0, 0, -1, -1, STRING)
    with pytest.raises(TypeError):
        _native.json_records(GOOD, 1, 0, 0, -1, "-1", STRING, STRING)
    with pytest.raises(TypeError):
        _native.json_records("text", 1, 0, 0, -1, -1, STRING, STRING)
    with pytest.raises(ValueError, match="key_mode must be 0"):
        _native.json_records(GOOD, 1, 0, 0, -1, -1, 3, STRING)
    with pytest.raises(ValueError, match="value_mode must be 0"):
        _native.json_records(GOOD, 1, 0, 0, -1, -1, STRING, -1)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64), count=st.integers(-2, 6), base_offset=INT64, base_sequence=base_sequence)
def test_fuzz_random_bytes(data, count, base_offset, base_sequence):
    check_against_decode_records(data, count, base_offset, 1700000000000, -1, base_sequence)


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(spec, min_size=1, max_size=4),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.integers(-3, 3),
    count_change=st.integers(-1, 1),
)
def test_fuzz_damaged_batches(specs, edits, cut, count_change):
    data = bytearray(build_batch(specs)[61:])
    for where, byte in edits:
        data[where % len(data)] = byte
    data = bytes(data[: len(data) + cut] if cut < 0 else data + bytes(cut))
    check_against_decode_records(data, len(specs) + count_change, 7, specs[0].timestamp, -1, 3)


def test_large_values_grow_the_output_correctly():
    """Values far beyond the first size guess: escapes (6 bytes out per byte in) and long headers."""
    values = [b"\x01" * 100_000, bytes(range(256)) * 500, b"\xff" * 70_000 + "€".encode() * 9_000]
    headers = [(b"h" * 5_000, b"\x00" * 50_000)] * 3
    data = b"".join(encode_record(i, 0, v, v, headers) for i, v in enumerate(values))
    check_against_decode_records(data, len(values), 0, 0, -1, 0)


# --- ops.dump: the JSON dump of a segment through the C renderer -----------------------------------------


def dump(path: Path, json: bool, key_decoder: str = "string", value_decoder: str = "string") -> tuple:
    written: list[bytes] = []
    options = DumpOptions(
        deep_iteration=True, json=json, key_decoder=key_decoder, value_decoder=value_decoder
    )
    dumper = Dumper(options, written.append, warn=lambda message: None)
    dumper.dump(path)
    return b"".join(written), dumper.problems.non_consecutive


def segment_bytes() -> tuple[bytes, list[tuple[list, int, int]]]:
    """Batches of every codec, LogAppendTime, compaction holes, a gap between batches, producer sequences;
    with each batch's records, base offset and base sequence, for the reference."""
    specs = [RecordSpec(1700000000000 + i, b"key-%d" % i, "välue\n\x00".encode() + bytes([i]), (("h", b"\xff"),))
             for i in range(5)]  # fmt: skip
    holes = [s._replace(offset_delta=d) for s, d in zip(specs, (0, 1, 4, 5, 9), strict=True)]
    batches = [
        build_batch(specs, base_offset=0, base_sequence=2**31 - 2, producer_id=1, producer_epoch=0),
        build_batch(specs, base_offset=5, codec=Codec.GZIP),
        build_batch(specs, base_offset=10, codec=Codec.SNAPPY, timestamp_type=TimestampType.LOG_APPEND_TIME),
        build_batch(specs, base_offset=15, codec=Codec.LZ4),
        build_batch(holes, base_offset=20, codec=Codec.ZSTD),
        build_batch(specs, base_offset=40),  # a gap after 29
        build_batch([], base_offset=45),
        build_batch(specs, base_offset=46),
    ]
    expected = []
    for data in batches:
        batch = read_batch(data)
        expected.append((batch.records(data), batch.base_offset, batch.base_sequence))
    return b"".join(batches), expected


@pytest.mark.parametrize(
    ("key_decoder", "value_decoder"), [("string", "string"), ("hex", "base64"), ("base64", "hex")]
)
def test_dump_json_records_are_the_reference_lines(tmp_path, key_decoder, value_decoder):
    data, expected = segment_bytes()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    out, gaps = dump(path, json=True, key_decoder=key_decoder, value_decoder=value_decoder)
    records = b"".join(line + b"\n" for line in out.splitlines() if line.startswith(b'{"type":"record"'))
    key_text = TEXT[MODES[("string", "hex", "base64").index(key_decoder)]]
    value_text = TEXT[MODES[("string", "hex", "base64").index(value_decoder)]]
    assert records == b"".join(reference_lines(r, b, s, key_text, value_text) for r, b, s in expected)
    assert [orjson.loads(line)["type"] for line in out.splitlines()].count("batch") == 8
    # Offset continuity: the same pairs as the text dump, which reads every record in Python.
    assert gaps == dump(path, json=False)[1]
    assert list(gaps.values()) == [[(21, 24), (25, 29), (29, 40), (44, 46)]]


def test_dump_json_reports_a_corrupt_batch_and_goes_on(tmp_path):
    good = build_batch([RecordSpec(1, b"a", b"1")], base_offset=0)
    bad = bytearray(build_batch([RecordSpec(1, b"a", b"1"), RecordSpec(2, b"b", b"2")], base_offset=1))
    bad[57:61] = (3).to_bytes(4, "big")  # three records declared, two present
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(good + bytes(bad) + build_batch([RecordSpec(1, b"c", b"3")], base_offset=3))
    lines = [orjson.loads(line) for line in dump(path, json=True)[0].splitlines()]
    problems = [line for line in lines if line["type"] == "problem"]
    assert [(p["kind"], p["message"]) for p in problems] == [
        ("corruptRecords", "Incorrect declared batch size, premature EOF reached")
    ]
    assert [line["offset"] for line in lines if line["type"] == "record"] == [0, 3]
