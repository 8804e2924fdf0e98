"""ops.logdir.SegmentReader: windows walked ahead on a worker thread, whatever the batch sizes."""

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from formats.records import RecordSpec, build_batch
from formats.segment import StopReason
from ops.logdir import SegmentReader

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
