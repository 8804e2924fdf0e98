"""spark-audit without Spark: discovery, planning, range alignment, per-range checks and the fold.

The archive of tests/spark_archive.py has planted gaps, duplicates, commits and corruption; every one
must be reported exactly, and nothing else, whatever the split size.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import spark_archive
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats.segment import walk
from ops.spark import archive, checks, findings
from ops.verify import Verifier, VerifyOptions, resolve

ALL = frozenset({checks.GAPS, checks.DUPLICATES, checks.LAG})


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("archive")
    return root, spark_archive.build(root)


def audit(
    root: Path, *, split: int = archive.TARGET_TASK_BYTES, at: int | None = None, **kw
) -> findings.Report:
    """The two levels as the Spark job runs them, in this process."""
    files = archive.discover(root)
    parts = list({f.partition.key: f.partition for f in files}.values())
    tasks = archive.plan(files, target_bytes=split)
    first = checks.AuditOptions(checks=frozenset({checks.COMMITS}), at=at)
    commits = findings.fold_commits(r for t in tasks for r in checks.audit_ranges(t, first))
    options = checks.AuditOptions(
        checks=ALL, at=at, committed=findings.committed_targets(commits, parts), **kw
    )
    rows = [r for t in tasks for r in checks.audit_ranges(t, options)]
    return findings.build_report(rows, parts, options, commits=commits)


def summary(report: findings.Report) -> set[tuple]:
    return {(f.kind, f.topic, f.partition, f.first_offset, f.last_offset) for f in report.findings}


def expected(truth: dict) -> set[tuple]:
    out = {(kind, t, p, first, last) for t, p, kind, first, last in truth["gaps"]}
    for t, p, _, _, _, offsets in truth["idempotent"]:
        out.add(("idempotent_duplicate", t, p, offsets[0], offsets[-1] + 3))
    for t, p, offsets in truth["content"]:
        out.add(("content_duplicate", t, p, offsets[0], offsets[-1]))
    out.add(("crc_mismatch", "broken", 0, 20, 24))
    out.add(("corrupt_batch", "broken", 0, None, None))
    for (_, topic, partition), (committed, end) in truth["lag"].items():
        if end > committed:
            out.add(("consumer_lag", topic, partition, committed, end - 1))
    return out


@pytest.mark.parametrize("split", [archive.TARGET_TASK_BYTES, 700, 97])
def test_every_planted_finding_and_nothing_else(planted, split):
    root, truth = planted
    report = audit(root, split=split)
    assert summary(report) == expected(truth)
    corrupt = {
        (f.kind, f.details["file"], f.details["position"]) for f in report.findings if f.job == "corrupt"
    }
    assert corrupt == {(kind, file, position) for _, _, kind, file, position in truth["corrupt"]}
    lag = {(r.group, r.topic, r.partition): (r.committed, r.end_offset) for r in report.lag}
    assert lag == truth["lag"]
    assert report.exit_code == 1


def test_gap_sides_name_segment_and_position(planted):
    root, _ = planted
    report = audit(root, split=300)
    across = next(f for f in report.findings if f.topic == "orders" and f.first_offset == 210)
    assert Path(across.details["before"]["file"]).name == "00000000000000000000.log"
    assert across.details["before"]["offset"] == 209
    assert across.details["after"] == {
        "file": str(root / "broker-1" / "orders-0" / "00000000000000000215.log"),
        "position": 0,
        "offset": 215,
    }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split=st.integers(min_value=40, max_value=6000))
def test_any_split_size_finds_the_same(planted, split):
    root, _ = planted
    whole = audit(root)
    assert [f.to_json() for f in audit(root, split=split).findings] == [f.to_json() for f in whole.findings]


def test_gap_kinds_agree_with_verify(planted):
    root, _ = planted
    seen = []
    Verifier(VerifyOptions(), seen.append).run([resolve(root / "broker-1")])
    verify_gaps = {
        (f.kind, Path(f.file).parent.name, f.first_offset, f.last_offset)
        for f in seen
        if f.kind.startswith("offset_gap") or f.kind == "offset_overlap"
    }
    ours = {
        (f.kind, f"{f.topic}-{f.partition}", f.first_offset, f.last_offset)
        for f in audit(root, split=500).findings
        if f.job == "gaps"
    }
    assert ours == verify_gaps


def test_lag_at_a_past_moment(planted):
    root, truth = planted
    between = truth["commit_times"][1]  # after g1's first commit (150), before its second (300)
    report = audit(root, at=between)
    lag = {(r.group, r.topic): (r.committed, r.end_offset, r.lag) for r in report.lag}
    # orders-0 data carries timestamps T0 + offset, so at T0 + 2000 every offset up to the end was written
    assert lag[("g1", "orders")][0] == 150
    assert lag[("g1", "orders")][2] == lag[("g1", "orders")][1] - 150
    assert ("g2", "clicks") in lag
    early = audit(root, at=spark_archive.T0 + 100)
    assert {(r.group, r.topic): (r.committed, r.end_offset) for r in early.lag} == {}  # nothing committed yet
    before_end = audit(root, at=truth["commit_times"][0])  # g1 at 150; orders-0 written up to T0 + 1000
    row = next(r for r in before_end.lag if r.group == "g1")
    assert (row.committed, row.end_offset, row.lag) == (150, 415, 265)
    assert row.lag_seconds == pytest.approx((truth["commit_times"][0] - (spark_archive.T0 + 150)) / 1000)


def test_plan_covers_every_byte_once(planted):
    root, _ = planted
    files = archive.discover(root)
    for target in (1, 64, 333, 5000, 1 << 30):
        tasks = archive.plan(files, target_bytes=target)
        covered: dict[str, list[tuple[int, int]]] = {}
        for task in tasks:
            assert sum(r.end - r.start for r in task) <= max(target, max(r.end - r.start for r in task))
            for r in task:
                covered.setdefault(r.file.path, []).append((r.start, r.end))
        for f in files:
            spans = sorted(covered[f.path])
            assert spans[0][0] == 0 and spans[-1][1] == f.size
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert len(archive.plan(files, min_tasks=4)) >= 4


def test_align_finds_the_first_batch_at_or_after_start_with_and_without_index(planted, tmp_path):
    root, _ = planted
    log = root / "broker-1" / "orders-0" / "00000000000000000000.log"
    data = log.read_bytes()
    starts = [b.position for b in walk(data).batches]
    assert os.path.getsize(log.with_suffix(".index")) > 0
    copy = tmp_path / "orders-0" / log.name
    copy.parent.mkdir()
    copy.write_bytes(data)  # no .index beside it: the walk starts at byte 0
    for start in range(0, len(data), 37):
        want = next((p for p in starts if p >= start), None)
        assert archive.align(str(log), 0, start) == want
        assert archive.align(str(copy), 0, start) == want


def test_discovery_reads_dir_names_and_checkpoints(planted):
    root, _ = planted
    parts = {f.partition.key: f.partition for f in archive.discover(root)}
    assert parts["broker-1/compacted-0"].compacted
    assert parts["broker-1/__consumer_offsets-0"].compacted
    assert not parts["broker-1/orders-0"].compacted
    assert parts["broker-1/orders-0"].log_dir == "broker-1"
    assert {p.topic for p in parts.values()} >= {"orders", "clicks", "payments", "broken"}
    only = archive.discover(root, include_topics=["orders"])
    assert {f.partition.topic for f in only} == {"orders"}
