"""tests/scheduling.py names real files, and its order keeps every file's tests together and in order."""

from __future__ import annotations

from pathlib import Path

import scheduling

TESTS = Path(__file__).resolve().parent


def test_every_named_file_exists() -> None:
    groups = set(scheduling.SHARED.values())
    named = [name for name in scheduling.START_ORDER if name not in groups] + list(scheduling.SHARED)
    assert [name for name in named if not (TESTS / f"{name}.py").is_file()] == []
    assert len(set(scheduling.START_ORDER)) == len(scheduling.START_ORDER)


def test_shared_files_form_one_unit_queued_first() -> None:
    ids = [
        "tests/test_index.py::test_a",
        "tests/test_scram.py::test_b",
        "tests/test_apache_kafka.py::test_c[x]",
        "tests/test_apache_kafka_ops.py::test_d",
        "tests/test_metadata_snapshots.py::test_e",
    ]
    assert {scheduling.scope_of(i) for i in ids[1:4]} == {"apache-kafka"}
    assert scheduling.scope_of(ids[0]) == "tests/test_index.py"
    ranked = sorted(ids, key=scheduling.start_rank)
    assert ranked == [ids[1], ids[2], ids[3], ids[4], ids[0]]
