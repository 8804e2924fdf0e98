"""spark-audit on a real local Spark: the kafka-segments data source, the jobs and the CLI.

One SparkSession serves the module (local[2], loopback, UI off); the CLI test starts its own.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
import spark_archive
from test_spark_archive import audit, expected, summary

from formats.segment import walk
from ops.spark import archive, jobs

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    return root, spark_archive.build(root)


@pytest.fixture(scope="module")
def spark():
    session = jobs.session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.codegen.wholeStage": "false",
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        },
    )
    yield session
    session.stop()


def test_batches_rows_match_a_walk_of_every_segment(spark, planted):
    root, _ = planted
    df = spark.read.format("kafka-segments").option("split_bytes", "300").load(str(root))
    rows = df.select("segment", "position", "base_offset", "last_offset", "crc_valid", "magic").collect()
    want = []
    for f in archive.discover(root):
        data = open(f.path, "rb").read()
        for b in walk(data).batches:
            want.append((f.path, b.position, b.base_offset, b.last_offset, b.crc_valid, 2))
    assert sorted(tuple(r) for r in rows) == sorted(want)
    assert df.filter("not crc_valid").count() == 1


def test_records_rows_hash_keys_and_values(spark, planted):
    root, _ = planted
    df = (
        spark.read.format("kafka-segments")
        .option("rows", "records")
        .option("topics", "clicks")
        .load(str(root))
    )
    rows = df.filter("offset in (10, 13)").select("offset", "key_hash", "value_hash", "value").collect()
    assert len(rows) == 2 and rows[0].value_hash == rows[1].value_hash and rows[0].value is None
    with_payload = (
        df.sparkSession.read.format("kafka-segments").option("rows", "records").option("payload", "true")
    )
    values = with_payload.option("topics", "clicks").load(str(root)).filter("offset = 10").collect()
    assert values[0].value == b"same-click"


def test_jobs_report_the_planted_findings_as_the_two_levels_do_alone(spark, planted):
    root, truth = planted
    report = jobs.run(spark, "all", str(root), split_bytes=400)
    assert summary(report) == expected(truth)
    assert [f.to_json() for f in report.findings] == [f.to_json() for f in audit(root).findings]
    assert report.stats["ranges"] > report.stats["segments"]
    gaps_only = jobs.run(spark, "gaps", str(root))
    assert {f.job for f in gaps_only.findings} == {"gaps", "corrupt"}
    seen = []
    jobs.run(spark, "duplicates", str(root), progress=lambda done, total: seen.append((done, total)))
    assert all(0 <= d <= t for d, t in seen)


def test_a_clean_archive_has_no_findings(spark, tmp_path):
    clean = tmp_path / "clean"
    w = spark_archive.PartitionWriter(clean, "ok")
    for o in range(0, 20, 5):
        w.data(o, 5)
    w.close()
    report = jobs.run(spark, "all", str(clean))
    assert report.findings == [] and report.exit_code == 0


def test_cli_json_and_exit_code(planted):
    root, truth = planted
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    kcli = [sys.executable, "-m", "kcli", "spark-audit"]
    done = subprocess.run(
        kcli + ["gaps", str(root), "--master", "local[2]", "-o", "json"],
        capture_output=True,
        env=env,
        timeout=200,
    )
    assert done.returncode == 1, done.stderr.decode()[-2000:]
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    kinds = {(r["kind"], r["topic"]) for r in lines if r["type"] == "finding"}
    assert ("offset_gap_control_marker", "payments") in kinds and ("crc_mismatch", "broken") in kinds
    assert lines[-1]["type"] == "summary" and lines[-1]["findings"] == len(lines) - 1
