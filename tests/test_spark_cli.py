"""`kcli spark-audit` without Spark: the --output option and the report as a table, JSON lines or Parquet.

The report comes from the two levels run in this process (test_spark_archive.audit), the same records a
Spark job hands the CLI.
"""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import pyarrow.parquet as pq
import pytest
import spark_archive
from test_spark_archive import audit

from kcli.cli import spark_audit
from kcli.cli.spark_audit import Output, OutputType


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("archive")
    spark_archive.build(root)
    report = audit(root)
    report.stats = {"job": "all", "segments": 10, "ranges": 10, "batches": 1, "bytes": 1, "seconds": 0.1}
    report.stats |= {"findings": len(report.findings), "errors": report.errors}
    return report.to_json()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("table", Output("table")),
        ("json", Output("json")),
        ("json:out/report.jsonl", Output("json", Path("out/report.jsonl"))),
        ("parquet:/tmp/f.parquet", Output("parquet", Path("/tmp/f.parquet"))),
        ("parquet:C:\\audit\\f.parquet", Output("parquet", Path("C:\\audit\\f.parquet"))),
    ],
)
def test_output_values(text, want):
    assert OutputType().convert(text, None, None) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("parquet", "parquet needs the file to write: --output parquet:PATH."),
        ("xml", "'xml' is not table, json, json:PATH or parquet:PATH."),
        ("table:x", "'table:x' is not table, json, json:PATH or parquet:PATH."),
    ],
)
def test_bad_output_values_say_what_is_expected(text, message):
    with pytest.raises(click.BadParameter) as e:
        OutputType().convert(text, None, None)
    assert e.value.message == message


def test_json_lines_to_stdout_alone(records, capsys):
    spark_audit._render(records, Output("json"))
    out = capsys.readouterr().out
    assert [orjson.loads(line) for line in out.splitlines()] == orjson.loads(orjson.dumps(records))


def test_json_and_parquet_files_keep_every_record_and_print_the_table(records, tmp_path, capsys):
    spark_audit._render(records, Output("json", tmp_path / "r.jsonl"))
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert [orjson.loads(line) for line in lines] == orjson.loads(orjson.dumps(records))
    assert "findings" in capsys.readouterr().out
    spark_audit._render(records, Output("parquet", tmp_path / "r.parquet"))
    rows = pq.read_table(tmp_path / "r.parquet").to_pylist()
    assert [orjson.loads(r["details"]) for r in rows] == [r for r in records if r["type"] != "summary"]
    table = capsys.readouterr().out
    assert "crc_mismatch" in table and "consumer lag" in table
    assert "00000000000000000000.log:" in table  # where: file name and position, not the whole path


def test_file_names_from_paths_and_urls():
    assert spark_audit._file_name("/a/b/00000000000000000005.log") == "00000000000000000005.log"
    assert spark_audit._file_name("s3://bucket/t-0/00000000000000000005.log") == "00000000000000000005.log"
    chained = "zip://b-1/t-0/00000000000000000005.log::file:///backups/b.zip"
    assert spark_audit._file_name(chained) == "00000000000000000005.log"
