"""A short run of the broker fuzzer (tests/bench/fuzz_broker.py): mutated frames against a real broker.

The corpus is the sample request of every API key and version the broker handles (no stock clients, so
the run is the same on every machine for its seed); the bench adds recorded client traffic and runs a
million frames.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from fuzz_broker import FuzzReport, fuzz  # noqa: E402

from kcli.broker.apis import build_registry  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_twenty_thousand_mutated_frames_kill_nothing_and_reach_no_handler_error(tmp_path: Path) -> None:
    report = fuzz(20_000, seed=14, connections=8, workdir=tmp_path, clients=False)
    assert report.frames == 20_000
    assert len(report.corpus) == len(list(build_registry()))  # every API the broker handles
    assert report.broker_deaths == [], _summary(report)
    assert not report.handler_errors and report.tracebacks == 0, _summary(report)
    assert report.warnings > 0  # the malformed ones were refused, each with a WARNING line
    assert report.clean_stop, _summary(report)
    assert report.verify_clean, report.verify_output
    assert report.peak_rss < 512 << 20, _summary(report)


def _summary(report: FuzzReport) -> str:
    errors = "\n".join(f"{count} x {message}" for message, count in report.handler_errors.most_common(10))
    deaths = "\n".join(report.broker_deaths[:3])
    return f"deaths:\n{deaths}\nerrors:\n{errors}\npeak RSS {report.peak_rss >> 20} MiB"
