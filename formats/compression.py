"""Kafka's record compression codecs: gzip, snappy, lz4 and zstd, sans-I/O.

Each codec writes what Kafka's Java client writes and reads what Kafka's Java reader accepts, so an archive
holding batches from any client library decodes here exactly when it decodes in Kafka. Decompression is
bounded while it runs: a hostile batch fails with `CompressionError` once its output passes `max_size`,
before that output is held in memory. Every malformed input raises `CompressionError` and nothing else.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.block
import xxhash
import zstandard

from formats.errors import CompressionError

__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED",
    "Codec",
    "codec_of",
    "compress",
    "decompress",
]


class Codec(enum.IntEnum):
    """Compression codec ids, bits 0-2 of a batch's (or legacy wrapper's) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        """The codec's name as Kafka spells it (`compression.type`, kafka-dump-log's `compresscodec`)."""
        return self.name.lower()


DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024
"""Default cap on decompressed bytes per payload; a larger result raises instead of filling memory."""


def codec_of(attributes: int) -> Codec:
    """The codec declared by a batch's attributes; ids 5-7 are unknown to every Kafka version."""
    return _codec(attributes & 0x07)


def compress(codec: Codec, data: bytes | memoryview, *, magic: int = 2, level: int | None = None) -> bytes:
    """Compress `data` (a batch's records, or a legacy wrapper's inner message set) as Kafka's client does.

    `level` follows Kafka's `compression.<codec>.level` ranges; None means Kafka's default level.
    """
    codec = _codec(codec)
    _check_magic(codec, magic)
    view = memoryview(data).cast("B")
    if codec is Codec.NONE or codec is Codec.SNAPPY:
        if level is not None:
            raise CompressionError(f"{codec.label} does not take a compression level, got {level}.")
        return bytes(view) if codec is Codec.NONE else _snappy_compress(view)
    if codec is Codec.GZIP:
        return _gzip_compress(view, _GZIP_DEFAULT_LEVEL if level is None else level)
    if codec is Codec.LZ4:
        return _lz4_compress(view, magic, _LZ4_DEFAULT_LEVEL if level is None else level)
    return _zstd_compress(view, _ZSTD_DEFAULT_LEVEL if level is None else level)


def decompress(
    codec: Codec,
    data: bytes | memoryview,
    *,
    magic: int = 2,
    max_size: int = DEFAULT_MAX_UNCOMPRESSED,
) -> bytes:
    """Decompress a payload written by any Kafka client, refusing output larger than `max_size` bytes.

    `magic` matters for lz4 (magic 0 frames carry Kafka 0.8/0.9's wrong header checksum) and zstd (v2 only).
    """
    codec = _codec(codec)
    _check_magic(codec, magic)
    view = memoryview(data).cast("B")
    out = _Output(codec, max_size)
    if codec is Codec.NONE:
        out.append(view)
    elif codec is Codec.GZIP:
        _gzip_decompress(view, out)
    elif codec is Codec.SNAPPY:
        _snappy_decompress(view, out)
    elif codec is Codec.LZ4:
        _lz4_decompress(view, magic, out)
    else:
        _zstd_decompress(view, out)
    return out.result()


# --- shared helpers ---------------------------------------------------------------------------------------


def _codec(value: int) -> Codec:
    try:
        return Codec(value)
    except ValueError:
        raise CompressionError(f"Unknown compression type id: {value}.") from None


def _check_magic(codec: Codec, magic: int) -> None:
    if magic not in (0, 1, 2):
        raise CompressionError(f"Unknown record format magic {magic}; Kafka knows 0, 1 and 2.")
    if codec is Codec.ZSTD and magic < 2:
        raise CompressionError(f"ZStandard compression is not supported for magic {magic}.")


class _Output:
    """Decompressed pieces, with the running total checked against the cap as each piece arrives."""

    def __init__(self, codec: Codec, max_size: int) -> None:
        self.codec = codec
        self.max_size = max_size
        self.size = 0
        self.parts: list[bytes | memoryview] = []

    @property
    def remaining(self) -> int:
        return self.max_size - self.size

    def check(self, size: int) -> None:
        """Refuse before decoding when the size of what is about to be produced is known in advance."""
        if size > self.remaining:
            self.too_large()

    def too_large(self) -> None:
        raise CompressionError(f"The {self.codec.label} decompressed size exceeds {self.max_size} bytes.")

    def append(self, piece: bytes | memoryview) -> None:
        self.check(len(piece))
        self.size += len(piece)
        self.parts.append(piece)

    def result(self) -> bytes:
        if len(self.parts) == 1 and type(self.parts[0]) is bytes:
            return self.parts[0]  # no second copy of a large single piece
        return b"".join(self.parts)


# --- gzip: one RFC 1952 member like java.util.zip.GZIPOutputStream; read like GZIPInputStream -------------

_GZIP_DEFAULT_LEVEL = -1  # Deflater.DEFAULT_COMPRESSION, zlib's level 6
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_DEFLATE = 8
_GZIP_FHCRC, _GZIP_FEXTRA, _GZIP_FNAME, _GZIP_FCOMMENT = 0x02, 0x04, 0x08, 0x10
# JDK 16+ header: magic, CM=8, no flags, MTIME 0, XFL 0, OS 255 ("unknown").
_GZIP_HEADER = _GZIP_MAGIC + bytes([_GZIP_DEFLATE, 0, 0, 0, 0, 0, 0, 0xFF])
_GZIP_STEP_IN, _GZIP_STEP_OUT = 64 * 1024, 256 * 1024  # bounded steps: memory stays near the output cap


def _gzip_compress(view: memoryview, level: int) -> bytes:
    if level != -1 and not 1 <= level <= 9:
        raise CompressionError(f"gzip doesn't support given compression level: {level}.")
    deflater = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflater.compress(view) + deflater.flush()
    trailer = struct.pack("<II", zlib.crc32(view), len(view) & 0xFFFFFFFF)
    return _GZIP_HEADER + body + trailer


def _gzip_decompress(view: memoryview, out: _Output) -> None:
    """Concatenated members are read; bytes after a member that are not a gzip header are ignored (as Java)."""
    position = _gzip_header_end(view, 0)
    while True:
        position, crc, size = _gzip_inflate(view, position, out)
        if len(view) - position < 8:
            raise CompressionError("Unexpected end of gzip input stream in the member trailer.")
        if struct.unpack_from("<II", view, position) != (crc, size & 0xFFFFFFFF):
            raise CompressionError("Corrupt GZIP trailer (CRC-32 or size does not match the data).")
        position += 8
        if position == len(view):
            return
        try:
            position = _gzip_header_end(view, position)
        except CompressionError:
            return  # GZIPInputStream ignores trailing bytes that do not start another member


def _gzip_inflate(view: memoryview, position: int, out: _Output) -> tuple[int, int, int]:
    """Inflate one member's deflate data in bounded steps; return where it ends, its CRC-32 and size."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    crc = size = 0
    while not inflater.eof:
        if position == len(view):
            raise CompressionError("Unexpected end of gzip (ZLIB) input stream.")
        piece: bytes | memoryview = view[position : position + _GZIP_STEP_IN]
        position += len(piece)
        while True:
            try:
                chunk = inflater.decompress(piece, _GZIP_STEP_OUT)
            except zlib.error as e:
                raise CompressionError(f"Corrupt gzip data: {e}.") from None
            out.append(chunk)
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
            piece = inflater.unconsumed_tail
            # A full step may leave output pending inside zlib even when all input is consumed.
            if inflater.eof or (not piece and len(chunk) < _GZIP_STEP_OUT):
                break
    return position - len(inflater.unused_data), crc, size


def _gzip_header_end(view: memoryview, start: int) -> int:
    """Parse a member header the way GZIPInputStream.readHeader does; return where the deflate data starts."""

    def need(end: int) -> None:
        if end > len(view):
            raise CompressionError("Unexpected end of gzip input stream in a member header.")

    need(start + 10)
    if view[start : start + 2] != _GZIP_MAGIC:
        raise CompressionError("Not in GZIP format.")
    if view[start + 2] != _GZIP_DEFLATE:
        raise CompressionError("Unsupported gzip compression method.")
    flags = view[start + 3]
    position = start + 10
    if flags & _GZIP_FEXTRA:
        need(position + 2)
        position += 2 + int.from_bytes(view[position : position + 2], "little")
        need(position)
    for flag in (_GZIP_FNAME, _GZIP_FCOMMENT):
        if flags & flag:
            while True:
                need(position + 1)
                position += 1
                if view[position - 1] == 0:
                    break
    if flags & _GZIP_FHCRC:
        need(position + 2)
        expected = zlib.crc32(view[start:position]) & 0xFFFF
        if int.from_bytes(view[position : position + 2], "little") != expected:
            raise CompressionError("Corrupt GZIP header.")
        position += 2
    return position


# --- snappy: xerial snappy-java stream framing, or one raw block ------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, minimum compatible version 1
_XERIAL_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE
_XERIAL_MAGIC_HEAD = struct.unpack(">i", _XERIAL_MAGIC[:4])[0]  # a chunk length equal to this starts a header
_SNAPPY_FRAMING_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"  # the official framing format; Kafka cannot read it


def _snappy_compress(view: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(view: memoryview, out: _Output) -> None:
    """Read as snappy-java's SnappyInputStream (1.1.10) does, which is what Kafka uses."""
    if len(view) == 0:
        raise CompressionError("Cannot decompress empty snappy stream.")
    if len(view) < len(_XERIAL_HEADER) or view[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        if view[: len(_SNAPPY_FRAMING_STREAM_ID)] == _SNAPPY_FRAMING_STREAM_ID:
            raise CompressionError(
                "Snappy payload uses the official snappy framing format, which Kafka does not read "
                "(it expects xerial snappy-java framing or a raw block)."
            )
        _snappy_block(view, out)
        return
    position = len(_XERIAL_HEADER)
    while len(view) - position >= 4:  # SnappyInputStream ends quietly on a partial length
        (chunk_size,) = struct.unpack_from(">i", view, position)
        position += 4
        if chunk_size == _XERIAL_MAGIC_HEAD:  # another stream's header: concatenated streams
            header = view[position - 4 : position - 4 + len(_XERIAL_HEADER)]
            if len(header) < len(_XERIAL_HEADER):
                raise CompressionError("Insufficient snappy header size in a concatenated block.")
            if header[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
                return  # SnappyInputStream stops at a header whose magic does not match
            (version,) = struct.unpack_from(">i", header, len(_XERIAL_MAGIC))
            if version < 1:
                raise CompressionError(
                    f"Snappy stream compressed with an incompatible codec version {version}; "
                    "at least version 1 is required."
                )
            position += len(_XERIAL_HEADER) - 4
            continue
        if chunk_size <= 0:
            raise CompressionError(f"Snappy chunk size is zero or negative: {chunk_size}.")
        if chunk_size > len(view) - position:
            raise CompressionError("Failed to read snappy chunk: the stream ends inside it.")
        _snappy_block(view[position : position + chunk_size], out)
        position += chunk_size


def _snappy_block(block: memoryview, out: _Output) -> None:
    """One raw snappy block; its length header is checked against the cap before anything is allocated."""
    try:
        out.check(cramjam.snappy.decompress_raw_len(block))
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
    except cramjam.DecompressionError as e:
        raise CompressionError(f"Corrupt snappy block ({e}).") from None


# --- lz4: Kafka's LZ4 frame (Lz4BlockOutputStream / Lz4BlockInputStream) ----------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian
_LZ4_DEFAULT_LEVEL = 9  # Kafka uses lz4-java's fast compressor at its default level, HC otherwise
_LZ4_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
_LZ4_BD = 0x40  # maximum block size 64 KiB
_LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000  # block-size bit: block stored as is
_LZ4_PREMATURE_EOS = "Stream ended prematurely"


def _lz4_compress(view: memoryview, magic: int, level: int) -> bytes:
    if not 1 <= level <= 17:
        raise CompressionError(f"lz4 doesn't support given compression level: {level}.")
    descriptor = _LZ4_MAGIC + bytes([_LZ4_FLG, _LZ4_BD])
    # Magic 0 keeps Kafka 0.8/0.9's header checksum, wrongly taken over the magic bytes too (KIP-57).
    hashed = descriptor if magic == 0 else descriptor[4:]
    parts = [descriptor, bytes([(xxh32(hashed) >> 8) & 0xFF])]
    for start in range(0, len(view), _LZ4_BLOCK_SIZE):
        block = view[start : start + _LZ4_BLOCK_SIZE]
        if level == _LZ4_DEFAULT_LEVEL:
            packed = lz4.block.compress(block, mode="default", store_size=False)
        else:
            packed = lz4.block.compress(block, mode="high_compression", compression=level, store_size=False)
        if len(packed) >= len(block):  # incompressible: store the block as is
            parts.append(struct.pack("<I", len(block) | _LZ4_UNCOMPRESSED))
            parts.append(bytes(block))
        else:
            parts.append(struct.pack("<I", len(packed)))
            parts.append(packed)
    parts.append(b"\x00\x00\x00\x00")  # EndMark; Kafka writes no content checksum
    return b"".join(parts)


def _lz4_decompress(view: memoryview, magic: int, out: _Output) -> None:
    """Read one frame as Lz4BlockInputStream does; bytes after its EndMark are ignored, as in Kafka."""
    if len(view) < 6:
        raise CompressionError(f"{_LZ4_PREMATURE_EOS}.")
    if view[:4] != _LZ4_MAGIC:
        raise CompressionError("Stream unsupported (invalid magic bytes).")
    flg, bd = view[4], view[5]
    if flg & 0x03:
        raise CompressionError("Reserved bits must be 0.")
    if not flg & 0x20:
        raise CompressionError("Dependent block stream is unsupported.")
    if flg >> 6 != 1:
        raise CompressionError(f"Version {flg >> 6} is unsupported.")
    if bd & 0x0F:
        raise CompressionError("Reserved2 field must be 0.")
    if not 4 <= (bd >> 4) & 0x07 <= 7:
        raise CompressionError("Block size value must be between 4 and 7.")
    if bd & 0x80:
        raise CompressionError("Reserved3 field must be 0.")
    max_block_size = 1 << (2 * ((bd >> 4) & 0x07) + 8)
    block_checksum, content_size, content_checksum = bool(flg & 0x10), bool(flg & 0x08), bool(flg & 0x04)
    position = 6 + (8 if content_size else 0)  # Kafka skips a content size without checking it
    if len(view) < position + 1:
        raise CompressionError(f"{_LZ4_PREMATURE_EOS}.")
    if magic != 0 and view[position] != (xxh32(view[4:position]) >> 8) & 0xFF:
        raise CompressionError("Stream frame descriptor corrupted.")
    position += 1
    while True:
        if len(view) - position < 4:
            raise CompressionError(f"{_LZ4_PREMATURE_EOS}.")
        (block_size,) = struct.unpack_from("<I", view, position)
        position += 4
        stored = bool(block_size & _LZ4_UNCOMPRESSED)
        block_size &= ~_LZ4_UNCOMPRESSED
        if block_size == 0:  # EndMark
            if content_checksum and len(view) - position < 4:  # read, but not verified, by Kafka
                raise CompressionError(f"{_LZ4_PREMATURE_EOS}.")
            return
        if block_size > max_block_size:
            raise CompressionError(f"Block size {block_size} exceeded max: {max_block_size}.")
        if len(view) - position < block_size + (4 if block_checksum else 0):
            raise CompressionError(f"{_LZ4_PREMATURE_EOS}.")
        block = view[position : position + block_size]
        position += block_size
        if block_checksum:
            (expected,) = struct.unpack_from("<I", view, position)
            position += 4
            if xxh32(block) != expected:
                raise CompressionError("Block checksum mismatch.")
        if stored:
            out.append(block)
            continue
        try:
            out.append(lz4.block.decompress(block, uncompressed_size=max_block_size))
        except lz4.block.LZ4BlockError:
            raise CompressionError("Corrupt lz4 block: it does not decompress.") from None


def xxh32(data: bytes | memoryview, seed: int = 0) -> int:
    """XXH32, the hash of the LZ4 frame's header checksum and block checksums."""
    return xxhash.xxh32_intdigest(data, seed)


# --- zstd: standard frames, as zstd-jni's ZstdOutputStream / ZstdInputStream --------------------------------

_ZSTD_DEFAULT_LEVEL = 3
_ZSTD_MIN_LEVEL, _ZSTD_MAX_LEVEL = -131072, 22
_ZSTD_FEED = 64  # input bytes per step once the cap is near: bounds output per step (<= 128 KiB per block)
_ZSTD_MAX_EXPANSION = 32 * 1024  # a 4-byte RLE block can expand to 128 KiB


def _zstd_compress(view: memoryview, level: int) -> bytes:
    if not _ZSTD_MIN_LEVEL <= level <= _ZSTD_MAX_LEVEL:
        raise CompressionError(f"zstd doesn't support given compression level: {level}.")
    # A streaming compressor, like zstd-jni's output stream: the frame carries no content size.
    compressor = zstandard.ZstdCompressor(level=level).compressobj()
    return compressor.compress(view) + compressor.flush()


def _zstd_decompress(view: memoryview, out: _Output) -> None:
    """Read concatenated frames (and skippable frames); an empty payload is empty, as in zstd-jni.

    python-zstandard cannot cap one call's output, so the input is fed in slices small enough that even
    the most compressible data cannot overshoot the cap by more than a few blocks.
    """
    decompressor = zstandard.ZstdDecompressor()
    position = 0
    while position < len(view):
        frame = decompressor.decompressobj()
        while not frame.eof:
            if position == len(view):
                raise CompressionError("Truncated zstd source: the payload ends inside a frame.")
            step = max(_ZSTD_FEED, out.remaining // _ZSTD_MAX_EXPANSION)
            piece = view[position : position + step]
            position += len(piece)
            try:
                out.append(frame.decompress(piece))
            except zstandard.ZstdError as e:
                raise CompressionError(f"Corrupt zstd data ({e}).") from None
        position -= len(frame.unused_data)
