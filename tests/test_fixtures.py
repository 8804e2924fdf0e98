"""The bundled log dir: regenerates byte for byte, and verifies clean but for its compaction gaps."""

import filecmp
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "logdir"


def test_generator_reproduces_the_committed_fixtures(tmp_path):
    proc = subprocess.run(
        [sys.executable, "fixtures/generate.py", str(tmp_path / "logdir")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    committed = sorted(p.relative_to(FIXTURES) for p in FIXTURES.rglob("*") if p.is_file())
    fresh = sorted(
        p.relative_to(tmp_path / "logdir") for p in (tmp_path / "logdir").rglob("*") if p.is_file()
    )
    assert fresh == committed
    _, mismatch, errors = filecmp.cmpfiles(
        FIXTURES, tmp_path / "logdir", [str(p) for p in committed], shallow=False
    )
    assert mismatch == [] and errors == []


def test_fixture_logdir_verifies_with_only_compaction_warnings():
    proc = subprocess.run(
        [sys.executable, "-m", "kcli", "verify", "--output", "json", str(FIXTURES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    findings = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = [f.get("kind") for f in findings if f.get("kind")]
    assert kinds == ["offset_gap_compaction"] * 3
