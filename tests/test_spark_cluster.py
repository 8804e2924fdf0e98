"""spark-audit on a real Spark standalone cluster (master and one worker from the pyspark package) on loopback.

`kcli spark-audit all --master spark://...` packages kcli, runs the job through spark-submit, and must
report exactly what the two levels report in one process (which local mode equals, see test_spark_audit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import spark_archive
from conftest import free_port_range
from spark_archive import FAST_JVM
from test_spark_archive import audit
from waiting import wait_for

pytestmark = pytest.mark.timeout(280)


@pytest.fixture
def cluster(tmp_path):
    from pyspark.find_spark_home import _find_spark_home

    spark_class = os.path.join(_find_spark_home(), "bin", "spark-class")
    # this worker's ports, below the ephemeral range: probed free with bind 0 and bound by the JVMs
    # seconds later, a port could go to another process's outgoing connection meanwhile
    port = free_port_range(3)
    ui, worker_ui = port + 1, port + 2
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
    }
    work = tmp_path / "work"
    procs = []
    try:
        procs.append(
            subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "master.err", "wb"),
            )
        )  # fmt: skip
        procs.append(
            subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
                 "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui), "--work-dir", str(work)],
                env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.err", "wb"),
            )
        )  # fmt: skip

        def alive_workers() -> int:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                return json.load(r).get("aliveworkers", 0)

        wait_for("the standalone master and a worker it counts alive", alive_workers, 90, 0.3)
        yield f"spark://127.0.0.1:{port}", work
    finally:
        for p in reversed(procs):  # spark-class execs java: the pid is the JVM's
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_standalone_cluster_reports_what_local_mode_does(cluster, tmp_path):
    master, work = cluster
    root = tmp_path / "archive"
    spark_archive.build(root)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-m", "kcli", "spark-audit", "all", str(root), "--master", master, "-o", "json",
         "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.host=127.0.0.1",
         "--conf", f"spark.driver.extraJavaOptions={FAST_JVM}", "--conf", f"spark.executor.extraJavaOptions={FAST_JVM}"],
        capture_output=True, env=env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr.decode()[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    local = audit(root)
    assert [r for r in records if r["type"] == "finding"] == [
        json.loads(json.dumps(f.to_json())) for f in local.findings
    ]
    assert [r for r in records if r["type"] == "lag"] == [
        json.loads(json.dumps(r.to_json())) for r in local.lag
    ]
    shipped = list(Path(work).glob("app-*/*/kcli-job/formats/_native*"))
    assert shipped, "the executors did not get kcli's package with its compiled formats._native"
