"""kcli.logdir.SegmentReader: windows walked ahead on a walker thread, whatever the batch sizes; walks chained
across segments; every walker stopped and every window unmapped however the caller leaves."""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.records import RecordSpec, build_batch
from formats.segment import StopReason
from kcli.logdir import SegmentReader

WINDOW = (
    64 << 10
)  # the smallest window the reader will use is one allocation granule; 64 KiB keeps tests fast


def write(tmp_path, sizes: list[int], tail: bytes = b"") -> tuple:
    batches, offset = [], 0
    for size in sizes:
        batches.append(build_batch([RecordSpec(offset, b"k", b"v" * size)], base_offset=offset))
        offset += 1
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches) + tail)
    return path, batches


def walk_all(path, **kwargs) -> tuple[list[tuple[int, int]], SegmentReader]:
    reader = SegmentReader(path, window=WINDOW, **kwargs)
    seen = [(chunk.base + b.position, b.base_offset) for chunk in reader.chunks() for b in chunk.batches]
    return seen, reader


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 200_000), min_size=1, max_size=12), torn=st.integers(0, 60))
def test_every_batch_once_in_order_with_any_sizes(tmp_path_factory, sizes, torn):
    tmp_path = tmp_path_factory.mktemp("seg")
    path, batches = write(tmp_path, sizes)
    data = path.read_bytes()
    path.write_bytes(data + batches[0][:torn])  # a torn copy of a batch at the end
    seen, reader = walk_all(path)
    positions = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    assert seen == list(zip(positions, range(len(batches)), strict=True))
    assert reader.end.reason is StopReason.END
    assert (reader.end.position, reader.end.trailing_bytes) == (len(data), torn)


def test_leaving_early_closes_everything(tmp_path):
    path, _ = write(tmp_path, [50_000] * 20)
    reader = SegmentReader(path, window=WINDOW)
    for chunk in reader.chunks():
        assert chunk.batches
        break
    assert not [t for t in threading.enumerate() if t.name.startswith("kcli-walk")]


def test_corruption_mid_file_stops_with_its_position(tmp_path):
    path, batches = write(tmp_path, [40_000] * 6)
    data = bytearray(path.read_bytes())
    bad = sum(len(b) for b in batches[:4])
    data[bad + 8 : bad + 12] = (3).to_bytes(4, "big")  # size below the minimum
    path.write_bytes(bytes(data))
    seen, reader = walk_all(path)
    assert [offset for _, offset in seen] == [0, 1, 2, 3]
    assert reader.end.reason is StopReason.BAD_SIZE and reader.end.position == bad
    assert "smaller than minimum record overhead" in reader.end.problem


def test_a_reader_started_after_another_walks_once_that_one_is_done(tmp_path):
    first, first_batches = write(tmp_path, [30_000] * 8)
    second = tmp_path / "00000000000000000008.log"
    second.write_bytes(
        b"".join(build_batch([RecordSpec(8 + i, b"k", b"v")], base_offset=8 + i) for i in range(5))
    )
    a, b = SegmentReader(first, window=WINDOW), SegmentReader(second, window=WINDOW)
    a.start()
    b.start(after=a)
    assert a.started and b.started
    offsets = [batch.base_offset for reader in (a, b) for chunk in reader.chunks() for batch in chunk.batches]
    assert offsets == list(range(13))
    assert a.end.position == sum(len(x) for x in first_batches) and b.end.trailing_bytes == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("kcli-walk")]


def test_closing_a_started_reader_that_was_never_read(tmp_path):
    path, _ = write(tmp_path, [50_000] * 20)
    a, b = SegmentReader(path, window=WINDOW), SegmentReader(path, window=WINDOW)
    a.start()
    b.start(after=a)
    b.close()  # before `a`: its walker gives up waiting
    a.close()
    a.close()  # idempotent
    assert not [t for t in threading.enumerate() if t.name.startswith("kcli-walk")]
    assert a.end is None and b.end is None


def test_an_unreadable_file_raises_in_the_caller(tmp_path):
    reader = SegmentReader(tmp_path, window=WINDOW)  # a directory
    with pytest.raises(IsADirectoryError):
        list(reader.chunks())
    assert not [t for t in threading.enumerate() if t.name.startswith("kcli-walk")]


def test_chunks_from_another_position_than_the_started_walk(tmp_path):
    path, _ = write(tmp_path, [100] * 3)
    reader = SegmentReader(path, window=WINDOW)
    reader.start()
    with pytest.raises(ValueError, match="started at 0, not 5"):
        next(reader.chunks(5))
    reader.close()
    with pytest.raises(RuntimeError, match="already started"):
        reader.start()
