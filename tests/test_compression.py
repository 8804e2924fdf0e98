"""formats.compression: round trips, Kafka's exact frame bytes, a foreign writer/reader, bombs and fuzz."""

from __future__ import annotations

import gzip
import random
import struct
import time
import tracemalloc
import zlib

import cramjam
import kafka.codec
import lz4.block
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats.compression import (
    DEFAULT_MAX_UNCOMPRESSED,
    Codec,
    codec_of,
    compress,
    decompress,
    xxh32,
)
from formats.errors import CompressionError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
COMPRESSED = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
CODEC_MAGIC = [(c, m) for c in Codec for m in (0, 1, 2) if not (c is Codec.ZSTD and m < 2)]
BOUNDARY_SIZES = [0, 1, 32 * KiB - 1, 32 * KiB, 32 * KiB + 1, 64 * KiB - 1, 64 * KiB, 64 * KiB + 1, 300 * KiB]


def sample(size: int, seed: int = 0) -> bytes:
    """Half random, half repetitive, so every codec makes both stored and compressed blocks."""
    rng = random.Random(seed)
    noise = rng.randbytes(size // 2)
    text = (b"kafka record value %d " % seed) * (size // 20 + 1)
    return noise + text[: size - len(noise)]


# --- codec ids --------------------------------------------------------------------------------------------


def test_labels_are_kafkas_names():
    assert [c.label for c in Codec] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert [int(c) for c in Codec] == [0, 1, 2, 3, 4]


def test_codec_of_reads_bits_0_to_2_only():
    for attributes in range(256):
        if attributes & 0x07 <= 4:
            assert codec_of(attributes) == attributes & 0x07
    assert codec_of(0x30 | 4) is Codec.ZSTD  # transactional control batch bits do not matter


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_codec_of_rejects_unknown_ids(codec_id):
    with pytest.raises(CompressionError, match=f"Unknown compression type id: {codec_id}"):
        codec_of(0x08 | codec_id)
    with pytest.raises(CompressionError, match="Unknown compression type id"):
        decompress(codec_id, b"x")


def test_unknown_magic_is_refused():
    with pytest.raises(CompressionError, match="magic 3"):
        compress(Codec.GZIP, b"x", magic=3)
    with pytest.raises(CompressionError, match="magic -1"):
        decompress(Codec.GZIP, b"x", magic=-1)


# --- round trips ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", BOUNDARY_SIZES)
@pytest.mark.parametrize(("codec", "magic"), CODEC_MAGIC)
def test_round_trip_across_block_boundaries(codec, magic, size):
    data = sample(size, seed=size)
    packed = compress(codec, data, magic=magic)
    assert decompress(codec, packed, magic=magic) == data
    assert decompress(codec, memoryview(b"##" + packed + b"")[2:], magic=magic) == data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec_magic=st.sampled_from(CODEC_MAGIC),
    data=st.one_of(
        st.binary(max_size=3000), st.builds(sample, st.sampled_from(BOUNDARY_SIZES), st.integers(0, 9))
    ),
    level_pick=st.integers(0, 1000),
)
def test_round_trip_any_bytes_any_level(codec_magic, data, level_pick):
    codec, magic = codec_magic
    levels = {
        Codec.GZIP: [None, -1, 1, 6, 9],
        Codec.LZ4: [None, 1, 9, 12, 17],
        Codec.ZSTD: [None, -5, 1, 3, 19],
    }
    choices = levels.get(codec, [None])
    level = choices[level_pick % len(choices)]
    packed = compress(codec, data, magic=magic, level=level)
    assert decompress(codec, packed, magic=magic) == data


@pytest.mark.parametrize("codec", list(Codec))
def test_max_size_is_inclusive(codec):
    data = sample(100 * KiB, seed=3)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(CompressionError, match=f"decompressed size exceeds {len(data) - 1} bytes"):
        decompress(codec, packed, max_size=len(data) - 1)


@pytest.mark.parametrize(
    ("codec", "level", "message"),
    [
        (Codec.GZIP, 0, "gzip doesn't support given compression level: 0"),
        (Codec.GZIP, 10, "gzip doesn't support given compression level: 10"),
        (Codec.LZ4, 0, "lz4 doesn't support given compression level: 0"),
        (Codec.LZ4, 18, "lz4 doesn't support given compression level: 18"),
        (Codec.ZSTD, 23, "zstd doesn't support given compression level: 23"),
        (Codec.ZSTD, -131073, "zstd doesn't support given compression level: -131073"),
        (Codec.SNAPPY, 1, "snappy does not take a compression level"),
        (Codec.NONE, 1, "none does not take a compression level"),
    ],
)
def test_levels_follow_kafkas_ranges(codec, level, message):
    with pytest.raises(CompressionError, match=message):
        compress(codec, b"abc", level=level)


# --- cross-check with kafka-python's codecs (a writer and reader nobody here wrote) ------------------------


@pytest.mark.parametrize("size", [1, 1000, 32 * KiB + 1, 64 * KiB + 1, 300 * KiB])
def test_kafka_python_reads_ours(size):
    data = sample(size, seed=size)
    assert kafka.codec.gzip_decode(compress(Codec.GZIP, data)) == data
    assert kafka.codec.snappy_decode(compress(Codec.SNAPPY, data)) == data
    assert kafka.codec.lz4_decode(compress(Codec.LZ4, data)) == data
    assert kafka.codec.zstd_decode(compress(Codec.ZSTD, data)) == data


@pytest.mark.parametrize("size", [0, 1, 1000, 32 * KiB + 1, 64 * KiB + 1, 300 * KiB])
def test_we_read_kafka_python(size):
    data = sample(size, seed=size)
    assert decompress(Codec.GZIP, kafka.codec.gzip_encode(data)) == data
    assert decompress(Codec.SNAPPY, kafka.codec.snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(Codec.LZ4, kafka.codec.lz4_encode(data)) == data  # python-lz4 frame with content size
    assert decompress(Codec.ZSTD, kafka.codec.zstd_encode(data)) == data
    if size:  # an empty raw snappy block is one byte that snappy-java would also read
        assert decompress(Codec.SNAPPY, kafka.codec.snappy_encode(data, xerial_compatible=False)) == data


def test_kafka_python_cannot_read_our_empty_snappy_stream_but_kafka_can():
    """kafka-python needs more than the 16-byte header; snappy-java (Kafka) reads a header-only stream."""
    packed = compress(Codec.SNAPPY, b"")
    assert packed == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    assert decompress(Codec.SNAPPY, packed) == b""


# --- gzip ---------------------------------------------------------------------------------------------------


def test_gzip_writes_one_member_like_the_jdk():
    packed = compress(Codec.GZIP, b"hello")
    assert packed[:10] == bytes.fromhex("1f8b08000000000000ff")
    assert gzip.decompress(packed) == b"hello"
    assert packed[-8:] == struct.pack("<II", zlib.crc32(b"hello"), 5)
    deflated = zlib.compressobj(6, zlib.DEFLATED, -15)
    assert packed[10:-8] == deflated.compress(b"hello") + deflated.flush()  # level -1 is zlib's 6


def test_gzip_reads_concatenated_members_and_ignores_trailing_junk():
    one, two = compress(Codec.GZIP, b"first "), gzip.compress(b"second", mtime=0)
    assert decompress(Codec.GZIP, one + two) == b"first second"
    assert decompress(Codec.GZIP, one + two + b"\x00" * 30) == b"first second"
    assert decompress(Codec.GZIP, one + b"not a gzip member at all") == b"first "


def test_gzip_header_optional_fields():
    body = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflate = body.compress(b"payload") + body.flush()
    header = bytes([0x1F, 0x8B, 8, 0x1E, 0, 0, 0, 0, 0, 3])  # FHCRC | FEXTRA | FNAME | FCOMMENT
    header += struct.pack("<H", 4) + b"xtra" + b"name\x00" + b"comment\x00"
    header_crc = struct.pack("<H", zlib.crc32(header) & 0xFFFF)
    trailer = struct.pack("<II", zlib.crc32(b"payload"), 7)
    assert decompress(Codec.GZIP, header + header_crc + deflate + trailer) == b"payload"
    with pytest.raises(CompressionError, match="Corrupt GZIP header"):
        decompress(Codec.GZIP, header + b"\x00\x00" + deflate + trailer)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "Unexpected end of gzip input stream"),
        (b"\x1f\x8b\x08", "Unexpected end of gzip input stream"),
        (b"PK\x03\x04" + bytes(20), "Not in GZIP format"),
        (b"\x1f\x8b\x07" + bytes(20), "Unsupported gzip compression method"),
    ],
)
def test_gzip_bad_headers(payload, message):
    with pytest.raises(CompressionError, match=message):
        decompress(Codec.GZIP, payload)


def test_gzip_bad_body_and_trailer():
    packed = compress(Codec.GZIP, sample(5000))
    with pytest.raises(CompressionError, match="Unexpected end"):
        decompress(Codec.GZIP, packed[:-20])
    with pytest.raises(CompressionError, match="Unexpected end"):
        decompress(Codec.GZIP, packed[:-3])
    with pytest.raises(CompressionError, match="Corrupt GZIP trailer"):
        decompress(Codec.GZIP, packed[:-8] + bytes(8))
    with pytest.raises(CompressionError, match="Corrupt gzip data"):
        decompress(Codec.GZIP, packed[:10] + b"\xff" * 40)


# --- snappy -------------------------------------------------------------------------------------------------


def xerial_chunks(packed: bytes) -> list[bytes]:
    """Split a single xerial stream into its raw snappy blocks."""
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    blocks, position = [], 16
    while position < len(packed):
        (length,) = struct.unpack_from(">i", packed, position)
        blocks.append(packed[position + 4 : position + 4 + length])
        position += 4 + length
    assert position == len(packed)
    return blocks


def test_snappy_writes_xerial_framing_with_32_kib_blocks():
    data = sample(100 * KiB)
    blocks = xerial_chunks(compress(Codec.SNAPPY, data))
    assert [cramjam.snappy.decompress_raw_len(b) for b in blocks] == [32 * KiB] * 3 + [4 * KiB]
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data


def test_snappy_reads_a_raw_block():
    data = sample(70 * KiB)
    assert decompress(Codec.SNAPPY, snappy.compress(data)) == data
    assert decompress(Codec.SNAPPY, b"\x00") == b""  # what snappy.compress(b"") writes
    assert decompress(Codec.SNAPPY, snappy.compress(b"\x82SNAPPY")) == b"\x82SNAPPY"  # too short for a header


def test_snappy_reads_concatenated_xerial_streams():
    first, second = compress(Codec.SNAPPY, sample(40 * KiB, 1)), compress(Codec.SNAPPY, sample(10 * KiB, 2))
    assert decompress(Codec.SNAPPY, first + second) == sample(40 * KiB, 1) + sample(10 * KiB, 2)
    assert decompress(Codec.SNAPPY, first + b"\x00\x00") == sample(40 * KiB, 1)  # partial length: end
    bad_version = second[:8] + struct.pack(">i", 0) + second[12:]
    with pytest.raises(CompressionError, match="incompatible codec version 0"):
        decompress(Codec.SNAPPY, first + bad_version)
    with pytest.raises(CompressionError, match="Insufficient snappy header size"):
        decompress(Codec.SNAPPY, first + second[:10])


def test_snappy_official_framing_is_rejected_clearly():
    framed = snappy.StreamCompressor().add_chunk(sample(10 * KiB))
    assert framed.startswith(b"\xff\x06\x00\x00sNaPpY")
    with pytest.raises(CompressionError, match="official snappy framing format, which Kafka does not read"):
        decompress(Codec.SNAPPY, framed)


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (struct.pack(">i", -5), "zero or negative"),
        (struct.pack(">i", 0), "zero or negative"),
        (struct.pack(">i", 100) + b"short", "ends inside it"),
        (struct.pack(">i", 4) + b"\x05abc", "Corrupt snappy block"),
    ],
)
def test_snappy_bad_chunks(tail, message):
    with pytest.raises(CompressionError, match=message):
        decompress(Codec.SNAPPY, compress(Codec.SNAPPY, b"ok") + tail)


def test_snappy_empty_payload_is_refused_like_snappy_java():
    with pytest.raises(CompressionError, match="Cannot decompress empty snappy stream"):
        decompress(Codec.SNAPPY, b"")


# --- lz4 ------------------------------------------------------------------------------------------------------


def test_xxh32_known_values():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert (xxh32(b"\x60\x40") >> 8) & 0xFF == 0x82
    assert (xxh32(b"\x04\x22\x4d\x18\x60\x40") >> 8) & 0xFF == 0x1A  # Kafka 0.8's broken HC


def test_lz4_frame_bytes_are_kafkas():
    hello = bytes.fromhex("04224d1860408205000080") + b"hello" + bytes(4)  # one stored block, EndMark
    assert compress(Codec.LZ4, b"hello") == hello
    assert compress(Codec.LZ4, b"hello", magic=1) == hello
    assert compress(Codec.LZ4, b"hello", magic=0) == hello[:6] + b"\x1a" + hello[7:]
    assert compress(Codec.LZ4, b"") == bytes.fromhex("04224d1860408200000000")
    assert compress(Codec.LZ4, sample(200 * KiB)).startswith(bytes.fromhex("04224d18604082"))


def test_lz4_blocks_are_64_kib_and_independent():
    data = b"0123456789abcdef" * (10 * KiB)  # compressible, 160 KiB
    packed = compress(Codec.LZ4, data)
    position, sizes = 7, []
    while True:
        (size,) = struct.unpack_from("<I", packed, position)
        if size == 0:
            break
        block = packed[position + 4 : position + 4 + size]
        sizes.append(len(lz4.block.decompress(block, uncompressed_size=64 * KiB)))
        position += 4 + size
    assert sizes == [64 * KiB, 64 * KiB, 32 * KiB]
    assert lz4.frame.decompress(packed) == data


def test_lz4_header_checksum_is_checked_for_magic_1_and_2_only():
    v0 = compress(Codec.LZ4, b"legacy", magic=0)
    assert decompress(Codec.LZ4, v0, magic=0) == b"legacy"
    for magic in (1, 2):
        with pytest.raises(CompressionError, match="Stream frame descriptor corrupted"):
            decompress(Codec.LZ4, v0, magic=magic)
    assert decompress(Codec.LZ4, compress(Codec.LZ4, b"new"), magic=0) == b"new"


@pytest.mark.parametrize(
    "block_size",
    [
        lz4.frame.BLOCKSIZE_MAX64KB,
        lz4.frame.BLOCKSIZE_MAX256KB,
        lz4.frame.BLOCKSIZE_MAX1MB,
        lz4.frame.BLOCKSIZE_MAX4MB,
    ],
)
def test_lz4_reads_python_lz4_frames_with_every_optional_field(block_size):
    data = sample(600 * KiB, seed=block_size)
    packed = lz4.frame.compress(
        data,
        block_size=block_size,
        block_linked=False,
        content_checksum=True,
        block_checksum=True,
        store_size=True,
    )
    assert decompress(Codec.LZ4, packed) == data
    # The block checksums are xxh32 over the stored bytes: damage one and it must be noticed.
    (first_block,) = struct.unpack_from("<I", packed, 15)
    broken = bytearray(packed)
    broken[15 + 4 + (first_block & 0x7FFFFFFF)] ^= 0x01
    with pytest.raises(CompressionError, match="Block checksum mismatch"):
        decompress(Codec.LZ4, bytes(broken))


def test_lz4_rejects_dependent_blocks_with_kafkas_message():
    linked = lz4.frame.compress(sample(200 * KiB), block_linked=True)
    with pytest.raises(CompressionError, match="Dependent block stream is unsupported"):
        decompress(Codec.LZ4, linked)


def frame(flg: int, bd: int, body: bytes = bytes(4)) -> bytes:
    return b"\x04\x22\x4d\x18" + bytes([flg, bd, (xxh32(bytes([flg, bd])) >> 8) & 0xFF]) + body


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "Stream ended prematurely"),
        (b"\x04\x22\x4d\x18\x60", "Stream ended prematurely"),
        (b"\x04\x22\x4d\x18\x60\x40", "Stream ended prematurely"),
        (frame(0x60, 0x40, b""), "Stream ended prematurely"),
        (frame(0x60, 0x40, b"\x05\x00\x00\x00abc"), "Stream ended prematurely"),
        (frame(0x64, 0x40, b"\x00\x00\x00\x00\x01"), "Stream ended prematurely"),
        (b"\x02\x21\x4c\x18\x60\x40\x82\x00\x00\x00\x00", "Stream unsupported \\(invalid magic bytes\\)"),
        (frame(0x61, 0x40), "Reserved bits must be 0"),
        (frame(0xA0, 0x40), "Version 2 is unsupported"),
        (frame(0x60, 0x41), "Reserved2 field must be 0"),
        (frame(0x60, 0x30), "Block size value must be between 4 and 7"),
        (frame(0x60, 0xC0), "Reserved3 field must be 0"),
        (frame(0x60, 0x40, struct.pack("<I", 65537 | 0x80000000)), "Block size 65537 exceeded max: 65536"),
        (frame(0x60, 0x40, b"\x03\x00\x00\x00\xff\xff\xff\x00\x00\x00\x00"), "Corrupt lz4 block"),
    ],
)
def test_lz4_malformed_frames(payload, message):
    with pytest.raises(CompressionError, match=message):
        decompress(Codec.LZ4, payload)


def test_lz4_reads_one_frame_and_ignores_what_follows():
    assert decompress(Codec.LZ4, compress(Codec.LZ4, b"one") + b"trailing junk") == b"one"


def test_lz4_stored_block_for_incompressible_data():
    noise = random.Random(7).randbytes(1000)
    packed = compress(Codec.LZ4, noise)
    assert struct.unpack_from("<I", packed, 7)[0] == 1000 | 0x80000000
    assert packed[11:1011] == noise
    assert decompress(Codec.LZ4, packed) == noise


# --- zstd -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_needs_magic_2(magic):
    with pytest.raises(CompressionError, match=f"ZStandard compression is not supported for magic {magic}"):
        compress(Codec.ZSTD, b"x", magic=magic)
    with pytest.raises(CompressionError, match=f"ZStandard compression is not supported for magic {magic}"):
        decompress(Codec.ZSTD, compress(Codec.ZSTD, b"x"), magic=magic)


def test_zstd_streams_frames_without_content_size():
    data = sample(300 * KiB)
    packed = compress(Codec.ZSTD, data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.get_frame_parameters(packed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Codec.ZSTD, packed) == data


def test_zstd_reads_concatenated_and_skippable_frames():
    skippable = b"\x50\x2a\x4d\x18" + struct.pack("<I", 4) + b"skip"
    one, two = compress(Codec.ZSTD, b"one "), zstandard.ZstdCompressor(level=19).compress(b"two")
    assert decompress(Codec.ZSTD, one + skippable + two) == b"one two"
    assert decompress(Codec.ZSTD, b"") == b""  # zstd-jni reads an empty stream as empty


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda p: p[:-2], "Truncated zstd source"),
        (lambda p: p + b"garbage", "Corrupt zstd data"),
        (lambda p: b"\x28\xb5\x2f\xfd" + b"\xff" * 20, "Corrupt zstd data"),
    ],
)
def test_zstd_malformed(mangle, message):
    with pytest.raises(CompressionError, match=message):
        decompress(Codec.ZSTD, mangle(compress(Codec.ZSTD, sample(10 * KiB))))


# --- bombs: 1 GiB of zeros, built without materialising 1 GiB -----------------------------------------------


def gzip_bomb(mib: int) -> bytes:
    """Deflate data for 1 MiB of zeros, fully flushed so that each copy is identical, repeated `mib` times."""
    zeros = bytes(MiB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    final = b"\x03\x00"  # an empty final fixed-Huffman block
    trailer = struct.pack("<II", crc, (mib * MiB) & 0xFFFFFFFF)
    return bytes.fromhex("1f8b08000000000000ff") + piece * mib + final + trailer


def snappy_bomb(mib: int) -> bytes:
    chunk = bytes(cramjam.snappy.compress_raw(bytes(32 * KiB)))
    return compress(Codec.SNAPPY, b"") + (struct.pack(">i", len(chunk)) + chunk) * (mib * 32)


def raw_snappy_bomb(mib: int) -> bytes:
    """One raw block: varint length, a literal zero, then copies of 64 bytes at offset 1."""
    size, varint = mib * MiB, bytearray()
    rest = size
    while rest >= 0x80:
        varint.append(rest & 0x7F | 0x80)
        rest >>= 7
    varint.append(rest)
    copies, tail = divmod(size - 1, 64)
    body = b"\x00\x00" + bytes([63 << 2 | 2, 1, 0]) * copies
    if tail:
        body += bytes([(tail - 1) << 2 | 2, 1, 0])
    return bytes(varint) + body


def lz4_bomb(mib: int) -> bytes:
    block = lz4.block.compress(bytes(64 * KiB), store_size=False)
    return compress(Codec.LZ4, b"")[:7] + (struct.pack("<I", len(block)) + block) * (mib * 16) + bytes(4)


def zstd_bomb(mib: int, content_size: bool) -> bytes:
    zeros = bytes(MiB)
    compressor = zstandard.ZstdCompressor(level=1).compressobj(size=mib * MiB if content_size else -1)
    return b"".join(compressor.compress(zeros) for _ in range(mib)) + compressor.flush()


BOMBS = [
    pytest.param(Codec.GZIP, gzip_bomb, id="gzip"),
    pytest.param(Codec.SNAPPY, snappy_bomb, id="snappy-xerial"),
    pytest.param(Codec.SNAPPY, raw_snappy_bomb, id="snappy-raw"),
    pytest.param(Codec.LZ4, lz4_bomb, id="lz4"),
    pytest.param(Codec.ZSTD, lambda mib: zstd_bomb(mib, content_size=True), id="zstd-with-size"),
    pytest.param(Codec.ZSTD, lambda mib: zstd_bomb(mib, content_size=False), id="zstd-no-size"),
]


@pytest.mark.parametrize(("codec", "build"), BOMBS)
def test_bomb_construction_is_genuine(codec, build):
    assert decompress(codec, build(3), max_size=3 * MiB) == bytes(3 * MiB)


@pytest.mark.parametrize(("codec", "build"), BOMBS)
def test_one_gib_bomb_stops_at_the_cap(codec, build):
    bomb = build(1024)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(CompressionError, match="decompressed size exceeds 1048576 bytes"):
            decompress(codec, bomb, max_size=MiB)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB, f"{codec.label} held {peak} bytes while refusing a bomb"
    assert elapsed < 5, f"{codec.label} took {elapsed:.1f} s to refuse a bomb"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_default_cap_overshoot_is_bounded(codec):
    """At the default 64 MiB cap, memory stays near the cap itself, never near the bomb's 1 GiB."""
    build = {
        Codec.GZIP: gzip_bomb,
        Codec.SNAPPY: snappy_bomb,
        Codec.LZ4: lz4_bomb,
        Codec.ZSTD: lambda mib: zstd_bomb(mib, content_size=False),
    }[codec]
    bomb = build(1024)
    tracemalloc.start()
    try:
        with pytest.raises(CompressionError, match=f"exceeds {DEFAULT_MAX_UNCOMPRESSED} bytes"):
            decompress(codec, bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < DEFAULT_MAX_UNCOMPRESSED + 16 * MiB


# --- fuzz -------------------------------------------------------------------------------------------------------

PREFIXES = {
    Codec.NONE: [b""],
    Codec.GZIP: [b"", bytes.fromhex("1f8b08000000000000ff"), bytes.fromhex("1f8b081f")],
    Codec.SNAPPY: [b"", compress(Codec.SNAPPY, b""), compress(Codec.SNAPPY, b"")[:12] + b"\x00\x00\x00\x00"],
    Codec.LZ4: [b"", bytes.fromhex("04224d18604082"), bytes.fromhex("04224d187c70"), frame(0x7C, 0x70, b"")],
    Codec.ZSTD: [b"", b"\x28\xb5\x2f\xfd", b"\x50\x2a\x4d\x18"],
}


def outcome(codec: Codec, payload: bytes, magic: int) -> None:
    try:
        result = decompress(codec, payload, magic=magic, max_size=MiB)
    except CompressionError as e:
        assert str(e) and str(e).endswith("."), repr(e)
    else:
        assert isinstance(result, bytes) and len(result) <= MiB


@settings(max_examples=400, deadline=None)
@given(
    codec_magic=st.sampled_from(CODEC_MAGIC),
    prefix_pick=st.integers(0, 10),
    noise=st.binary(max_size=400),
)
def test_fuzz_random_bytes(codec_magic, prefix_pick, noise):
    codec, magic = codec_magic
    prefixes = PREFIXES[codec]
    outcome(codec, prefixes[prefix_pick % len(prefixes)] + noise, magic)


@settings(max_examples=300, deadline=None)
@given(
    codec_magic=st.sampled_from(CODEC_MAGIC),
    seed=st.integers(0, 50),
    edits=st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.sampled_from("sxdt")), max_size=4
    ),
)
def test_fuzz_mutated_valid_payloads(codec_magic, seed, edits):
    codec, magic = codec_magic
    payload = bytearray(compress(codec, sample(seed * 97, seed), magic=magic))
    for where, value, kind in edits:
        if not payload:
            break
        i = where % len(payload)
        if kind == "s":
            payload[i] = value
        elif kind == "x":
            payload[i] ^= 1 << (value % 8)
        elif kind == "d":
            del payload[i]
        else:
            del payload[i:]
    outcome(codec, bytes(payload), magic)
