"""spark-audit over fsspec URLs, without Spark: an archive in fsspec's in-memory filesystem and in a zip.

Both are real fsspec filesystems; the audit over them must report exactly what it reports over the same
files on the local disk (read through mmap), whatever the split size and the window size.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import fsspec
import orjson
import pytest
import spark_archive
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_spark_archive import audit, expected, summary

from formats.segment import StopReason, walk
from kcli.logdir import SegmentReader
from ops.spark import archive


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("archive")
    return root, spark_archive.build(root)


@pytest.fixture(scope="module")
def in_memory(planted) -> str:
    """The planted archive copied file by file into fsspec's memory filesystem."""
    root, _ = planted
    fs = fsspec.filesystem("memory")
    for dirpath, _, names in os.walk(root):
        for name in names:
            local = Path(dirpath, name)
            fs.pipe_file(f"/spark-audit-test/{local.relative_to(root)}", local.read_bytes())
    yield "memory:///spark-audit-test"
    fs.rm("/spark-audit-test", recursive=True)


def zip_archive(root: Path, target: Path) -> str:
    """The archive as a zip (stored, so members seek) and the chained fsspec URL of its root."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as z:
        for dirpath, _, names in os.walk(root):
            for name in names:
                z.write(Path(dirpath, name), str(Path(dirpath, name).relative_to(root)))
    return f"zip://::file://{target}"


def as_local(report_json: list[dict], url_prefix: str, root: Path) -> list[dict]:
    """Findings with the archive's URLs written as the local paths of the same files."""
    text = orjson.dumps(report_json).decode()
    return orjson.loads(text.replace(url_prefix, str(root)))


def test_discovery_over_memory_matches_the_local_disk(planted, in_memory):
    root, _ = planted
    local = archive.discover(root)
    remote = archive.discover(in_memory)
    assert [f.path for f in remote] == [
        f.path.replace(str(root), "memory:///spark-audit-test") for f in local
    ]
    assert [(f.size, f.base_offset) for f in remote] == [(f.size, f.base_offset) for f in local]
    assert [f.partition[:3] + f.partition[4:] for f in remote] == [
        f.partition[:3] + f.partition[4:] for f in local
    ]
    assert next(f for f in remote if f.partition.topic == "compacted").partition.compacted  # the checkpoint
    assert (
        archive.is_url(in_memory) and not archive.is_url(f"file://{root}") and not archive.is_url(str(root))
    )
    with pytest.raises(FileNotFoundError):
        archive.discover("memory:///no-such-archive")


@pytest.mark.parametrize("split", [archive.TARGET_TASK_BYTES, 700, 97])
def test_every_planted_finding_over_memory_as_on_disk(planted, in_memory, split):
    root, truth = planted
    report = audit(in_memory, split=split)
    assert summary(report) == expected(truth)
    local = audit(root, split=split)
    findings = [f.to_json() for f in report.findings]
    assert as_local(findings, "memory:///spark-audit-test", root) == [f.to_json() for f in local.findings]
    assert any("memory:///spark-audit-test/broker-1/broken-0/" in str(f) for f in findings)
    assert [r.to_json() for r in report.lag] == [r.to_json() for r in local.lag]


def test_a_zipped_archive_through_a_chained_url(planted, tmp_path):
    root, truth = planted
    url = zip_archive(root, tmp_path / "backup.zip")
    report = audit(url, split=500)
    assert summary(report) == expected(truth)
    corrupt = next(f for f in report.findings if f.kind == "crc_mismatch")
    assert corrupt.details["file"] == (
        f"zip://broker-1/broken-0/00000000000000000000.log::file://{tmp_path / 'backup.zip'}"
    )


def test_align_over_memory_as_on_disk_with_and_without_index(planted, in_memory):
    root, _ = planted
    log = root / "broker-1" / "orders-0" / "00000000000000000000.log"
    url = f"{in_memory}/broker-1/orders-0/{log.name}"
    data = log.read_bytes()
    fsspec.filesystem("memory").pipe_file("/spark-audit-noindex/orders-0/" + log.name, data)
    bare = "memory:///spark-audit-noindex/orders-0/" + log.name
    try:
        for start in range(0, len(data) + 40, 37):
            want = archive.align(str(log), 0, start)
            assert archive.align(url, 0, start) == want
            assert archive.align(bare, 0, start, len(data)) == want
    finally:
        fsspec.filesystem("memory").rm("/spark-audit-noindex", recursive=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(window=st.integers(min_value=8, max_value=5000), start_batch=st.integers(min_value=0, max_value=9))
def test_fsspec_reader_walks_as_the_mmap_reader(planted, in_memory, window, start_batch):
    """Any window size (smaller than one batch too) and start: the same batches, the same end."""
    root, _ = planted
    for name in ("orders-0/00000000000000000000.log", "broken-0/00000000000000000050.log"):
        path = root / "broker-1" / name
        size = path.stat().st_size
        batches = walk(path.read_bytes()).batches
        start = batches[start_batch % len(batches)].position
        local = SegmentReader(path, window=max(window, 4096))
        want = [
            (c.base + b.position, b.base_offset, b.crc_valid) for c in local.chunks(start) for b in c.batches
        ]
        remote = archive.FsspecSegmentReader(f"{in_memory}/broker-1/{name}", size, window=window)
        got = [
            (c.base + b.position, b.base_offset, b.crc_valid) for c in remote.chunks(start) for b in c.batches
        ]
        assert got == want
        assert (remote.end.position, remote.end.reason) == (local.end.position, local.end.reason)
        assert remote.end.reason is (StopReason.BAD_MAGIC if "broken" in name else StopReason.END)
