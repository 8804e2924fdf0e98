"""`kcli dump-segment`: Kafka's line shapes, JSON lines, decoders, and bad input, through the real CLI."""

import json
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from conftest import kcli_env
from test_records import V0_HELLO, V1_HELLO, V2_COMMIT, V2_HELLO

from formats.index import encode_offset_entry, encode_time_entry
from formats.records import RecordSpec, build_batch

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logdir"


def kcli(*args: str, check: bool = True, process: bool = False) -> subprocess.CompletedProcess:
    """`kcli ARGS` through kcli.cli.main.main in this process, or with `process` as a real `python -m
    kcli` process (the entry point as installed)."""
    if process:
        proc = subprocess.run(
            [sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=120
        )
    else:
        proc = run_kcli(*args)
    if check:
        assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def segment(tmp_path: Path, data: bytes, base: int = 0) -> Path:
    path = tmp_path / "demo-0" / f"{base:020d}.log"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def test_reference_example_print_data_log(tmp_path):
    path = segment(tmp_path, V2_HELLO + V2_COMMIT)
    out = kcli("dump-segment", "--print-data-log", str(path), process=True).stdout
    assert out == (
        f"Dumping {path}\n"
        "Log starting offset: 0\n"
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        "position: 0 CreateTime: 1700000000000 size: 73 magic: 2 compresscodec: none crc: 3863061579 isvalid: true\n"
        "| offset: 0 CreateTime: 1700000000000 keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] payload: hello\n"
        "baseOffset: 1 lastOffset: 1 count: 1 baseSequence: -1 lastSequence: -1 producerId: 1000 producerEpoch: 0 "
        "partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty "
        "position: 73 CreateTime: 1700000000500 size: 78 magic: 2 compresscodec: none crc: 2914555928 isvalid: true\n"
        "| offset: 1 CreateTime: 1700000000500 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 5\n"
    )


def test_reference_example_legacy(tmp_path):
    v0_at_1 = bytearray(V0_HELLO)
    struct.pack_into(">q", v0_at_1, 0, 1)
    path = segment(tmp_path, V1_HELLO + bytes(v0_at_1))
    out = kcli("dump-segment", "--deep-iteration", str(path)).stdout.splitlines()[2:]
    assert out == [
        "offset: 0 position: 0 CreateTime: 1700000000000 size: 39 magic: 1 compresscodec: none crc: 2397244346 isvalid: true",
        "| offset: 0 CreateTime: 1700000000000 keySize: -1 valueSize: 5 isValid: true crc: 2397244346}",
        "offset: 1 position: 39 NoTimestampType: -1 size: 31 magic: 0 compresscodec: none crc: 2275900082 isvalid: true",
        "| offset: 1 NoTimestampType: -1 keySize: -1 valueSize: 5 isValid: true crc: 2275900082}",
    ]


def test_skip_record_metadata_and_key_prefix(tmp_path):
    data = build_batch([RecordSpec(5, b"k", b"v"), RecordSpec(6, None, b"w")])
    path = segment(tmp_path, data)
    lines = kcli("dump-segment", "--print-data-log", "--skip-record-metadata", str(path)).stdout.splitlines()
    assert lines[-2:] == ["| key: k payload: v", " payload: w"]


def test_trailing_bytes_and_max_bytes(tmp_path):
    path = segment(tmp_path, V2_HELLO + V2_HELLO[:20])
    torn = kcli("dump-segment", str(path), check=False)
    assert torn.stdout.splitlines()[-1] == "Found 20 invalid bytes at the end of 00000000000000000000.log"
    assert torn.returncode == 1
    assert torn.stderr == f"kcli: {path}: 20 bytes at its end are not a whole batch.\n"
    out = kcli("dump-segment", "--max-bytes", "80", str(path)).stdout
    assert "invalid bytes" not in out and out.count("baseOffset:") == 1


def test_non_consecutive_offsets_go_to_stderr_in_reverse(tmp_path):
    data = build_batch([RecordSpec(1, b"a", b"1")], base_offset=0) + build_batch(
        [RecordSpec(1, b"a", b"1")], base_offset=5
    )
    data += build_batch([RecordSpec(1, b"a", b"1")], base_offset=9)
    path = segment(tmp_path, data)
    proc = kcli("dump-segment", "--deep-iteration", str(path))
    assert proc.stderr.splitlines() == [
        f"Non-consecutive offsets in {path.absolute()}",
        "  5 is followed by 9",
        "  0 is followed by 5",
    ]


def test_index_and_time_index_checks(tmp_path):
    batches = [build_batch([RecordSpec(100 + i, b"k", b"x" * 50)], base_offset=i) for i in range(4)]
    positions = [sum(len(b) for b in batches[:i]) for i in range(4)]
    path = segment(tmp_path, b"".join(batches))
    index = path.with_suffix(".index")
    index.write_bytes(encode_offset_entry(0, 1, positions[1]) + encode_offset_entry(0, 3, positions[2]))
    out = kcli("dump-segment", str(index), check=False)
    assert out.stdout.splitlines()[1:] == [
        f"offset: 1 position: {positions[1]}",
        f"offset: 3 position: {positions[2]}",
    ]
    assert out.stderr.splitlines() == [
        f"Mismatches in :{index.absolute()}",
        "  Index offset: 3, log offset: 2",
        f"kcli: {index.absolute()}: index entries that do not match the log.",
    ]
    assert out.returncode == 1
    time_index = path.with_suffix(".timeindex")
    time_index.write_bytes(encode_time_entry(0, 101, 1) + encode_time_entry(0, 100, 2))
    out = kcli("dump-segment", str(time_index), check=False)
    assert out.stdout.splitlines()[1:] == ["timestamp: 101 offset: 1", "timestamp: 100 offset: 2"]
    assert out.stderr.splitlines() == [
        f"Found timestamp mismatch in :{time_index.absolute()}",
        "  Index timestamp: 100, log timestamp: 102",
        f"Found out of order timestamp in :{time_index.absolute()}",
        "  Index timestamp: 100, Previously indexed timestamp: 101",
        f"kcli: {time_index.absolute()}: time index timestamps that do not match the log.",
    ]
    assert out.returncode == 1
    assert kcli("dump-segment", "--index-sanity-check", str(index)).stdout.endswith("passed sanity check.\n")


def test_json_lines_carry_every_field(tmp_path):
    data = build_batch(
        [RecordSpec(7, b"key", b'{"a": 1}', (("h1", b"v1"), ("h2", None)))],
        base_offset=3,
        producer_id=9,
        producer_epoch=1,
        base_sequence=4,
    )
    path = segment(tmp_path, data)
    lines = [
        json.loads(line)
        for line in kcli("dump-segment", "--deep-iteration", "-o", "json", str(path)).stdout.splitlines()
    ]
    kinds = [line["type"] for line in lines]
    assert kinds == ["file", "segment", "batch", "record"]
    batch, record = lines[2], lines[3]
    for name in (
        "baseOffset",
        "lastOffset",
        "count",
        "baseSequence",
        "lastSequence",
        "producerId",
        "producerEpoch",
        "partitionLeaderEpoch",
        "isTransactional",
        "isControl",
        "deleteHorizonMs",
        "position",
        "timestampType",
        "maxTimestamp",
        "size",
        "magic",
        "compressCodec",
        "crc",
        "isValid",
    ):
        assert name in batch
    assert (batch["baseOffset"], batch["producerId"], batch["lastSequence"]) == (3, 9, 4)
    assert record == {
        "type": "record",
        "offset": 3,
        "timestamp": 7,
        "sequence": 4,
        "keySize": 3,
        "valueSize": 8,
        "key": "key",
        "value": '{"a": 1}',
        "headers": [["h1", "v1"], ["h2", None]],
    }
    out = kcli(
        "dump-segment", "-o", "json", "--value-decoder", "json", "--key-decoder", "hex", str(path)
    ).stdout
    record = json.loads(out.splitlines()[-1])
    assert record["value"] == {"a": 1} and record["key"] == "6b6579"


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_every_fixture_file_dumps_cleanly(name):
    files = sorted(str(p) for p in (FIXTURES / name).iterdir())
    proc = kcli("dump-segment", "--deep-iteration", *files)
    assert "invalid bytes" not in proc.stdout and "corrupt" not in proc.stdout.lower()
    assert "isvalid: false" not in proc.stdout and "isValid: false" not in proc.stdout
    if name.startswith("m"):
        offsets = [int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("| offset:")]
        assert offsets == list(range(48))


def test_internal_topic_decoders():
    offsets = next(FIXTURES.glob("__consumer_offsets-*"))
    out = kcli("dump-segment", "--offsets-decoder", str(next(offsets.glob("*.log")))).stdout
    assert 'key: {"type":"1","data":{"group":"billing","topic":"m2-none","partition":0}}' in out
    assert "payload: <DELETE>" in out
    metadata = FIXTURES / "__cluster_metadata-0" / "00000000000000000000.log"
    out = kcli("dump-segment", "--cluster-metadata-decoder", str(metadata)).stdout
    assert 'payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"m2-none"' in out


def test_bad_input_gives_one_sentence(tmp_path):
    missing = kcli("dump-segment", str(tmp_path / "nope.log"), check=False)
    assert (
        missing.returncode == 2
        and missing.stderr.strip().count("\n") == 0
        and "no such file" in missing.stderr
    )
    garbage = segment(tmp_path, b"\x00" * 8 + b"\x00\x00\x00\x05" + b"garbage-garbage")
    corrupt = kcli("dump-segment", str(garbage), check=False)
    assert "smaller than minimum record overhead (14)" in corrupt.stdout
    assert corrupt.returncode == 1 and corrupt.stderr.startswith(
        f"kcli: {garbage}: corrupt data at position 0"
    )
    empty = segment(tmp_path, b"", base=7)
    assert kcli("dump-segment", str(empty)).stdout.endswith("Log starting offset: 7\n")
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hi")
    ignored = kcli("dump-segment", str(unknown), check=False)
    assert ignored.returncode == 1
    assert ignored.stderr.splitlines() == [
        f"Ignoring unknown file {unknown}",
        f"kcli: {unknown}: it is not a file Kafka writes, so it was not dumped.",
    ]


def test_flipped_byte_shows_invalid_crc(tmp_path):
    src = FIXTURES / "m2-zstd-0" / "00000000000000000000.log"
    data = bytearray(src.read_bytes())
    data[100] ^= 0x40
    path = segment(tmp_path, bytes(data))
    flipped = kcli("dump-segment", str(path), check=False)
    assert flipped.stdout.count("isvalid: false") == 1
    assert (flipped.returncode, flipped.stderr) == (1, f"kcli: {path}: 1 of its batches fail their CRC.\n")


def test_man_pages_are_current(tmp_path):
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "scripts/man.py", str(tmp_path)],
        cwd=root,
        env=kcli_env(),  # this checkout's CLI, whatever an editable install points at
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    fresh = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert fresh == {p.name: p.read_text() for p in (root / "man").iterdir()}, (
        "run python scripts/man.py and commit man/"
    )


def test_a_damaged_index_names_its_file_and_the_cause(tmp_path):
    """Index entries pointing outside the log (random bytes in .index and .timeindex) are mismatches
    of that index, not "cannot open: invalid argument" or an OverflowError from mmap."""
    noise = random.Random(32)
    path = segment(tmp_path, V2_HELLO)
    path.with_suffix(".index").write_bytes(noise.randbytes(800))
    path.with_suffix(".timeindex").write_bytes(noise.randbytes(1200))
    for suffix in (".index", ".timeindex"):
        damaged = path.with_suffix(suffix)
        proc = kcli("dump-segment", str(damaged), check=False)
        assert proc.returncode == 1
        last = proc.stderr.splitlines()[-1]
        assert last.startswith(f"kcli: {damaged.absolute()}: ") and "not" in last, proc.stderr


def test_a_preallocated_index_prints_kafkas_lines_and_is_not_damage(tmp_path):
    """A running broker's active segment (or any after an unclean shutdown) has its .index and
    .timeindex preallocated with zeros. kafka-dump-log.sh reads the zero first slot as the entry
    (offset base, position 0) and reports a mismatch with the first batch's last offset; the same lines
    are printed, but the file is not damaged, so the exit status is 0 (a real mismatch is 1)."""
    path = segment(tmp_path, build_batch([RecordSpec(1, b"a", b"1"), RecordSpec(2, b"b", b"2")]))
    path.with_suffix(".index").write_bytes(bytes(8 * 64))
    path.with_suffix(".timeindex").write_bytes(bytes(12 * 64))
    proc = kcli(
        "dump-segment", str(path.with_suffix(".index")), str(path.with_suffix(".timeindex")), check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "Index offset: 0, log offset: 1" in proc.stdout + proc.stderr
    path.with_suffix(".index").write_bytes(encode_offset_entry(0, 0, 0))  # trimmed: a real entry
    proc = kcli("dump-segment", str(path.with_suffix(".index")), check=False)
    assert proc.returncode == 1, proc.stderr
