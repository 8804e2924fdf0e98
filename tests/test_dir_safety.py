"""Log dirs are safe from a second process and from a start on the wrong dir, as in Kafka.

A broker locks `.lock` in every log dir and its metadata dir with a POSIX record lock (what Kafka's
FileChannel.tryLock takes on Linux), so a second broker, or Apache Kafka, is refused, and kcli sees
Kafka's lock; offline tools that write refuse a locked dir and touch nothing, the read-only ones say the
dir is in use and go on. A dir with Kafka data but no meta.properties is refused, not formatted; logs
the metadata log does not know are renamed `-stray`, never deleted.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Producer

from tests.conftest import KCLI, BrokerProcess, kcli_env, start_broker, stop_cleanly

IN_USE = "A Kafka instance in another process or thread is using this directory."
SEGMENT = "00000000000000000000.log"


def hashes(root: Path) -> dict[str, str]:
    """Every file under `root` (its `.lock` included) by relative path, with its content's hash."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def kcli_process(*args: str, cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """A real `python -m kcli` process (its own locks, its own process)."""
    return subprocess.run(
        [*KCLI, *args], cwd=cwd, env=kcli_env(), capture_output=True, text=True, timeout=timeout
    )


def one_sentence(stderr: str) -> str:
    """The single line a refused command prints; fails on a traceback or several lines."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture
def kafka_lock(tmp_path: Path) -> Iterator[object]:
    """`hold(dir)`: another process takes `<dir>/.lock` exactly as Kafka's LogManager does on Linux
    (fcntl F_SETLK, exclusive, whole file) and keeps it until the test ends."""
    holders: list[subprocess.Popen[str]] = []
    script = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(os.path.join(sys.argv[1], '.lock'), os.O_RDWR | os.O_CREAT, 0o644)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "print('locked', flush=True)\n"
        "time.sleep(120)\n"
    )

    def hold(directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        holder = subprocess.Popen(
            [sys.executable, "-c", script, str(directory)], stdout=subprocess.PIPE, text=True
        )
        holders.append(holder)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"

    try:
        yield hold
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=f"record-{i}".encode())
    assert producer.flush(15) == 0


def stopped_broker_dir(tmp_path: Path, topic: str = "t1", count: int = 50) -> Path:
    """A log dir a kcli broker wrote `count` records of `topic` to, then stopped cleanly."""
    broker = start_broker(tmp_path / "writer")
    try:
        produce(broker.bootstrap, topic, count)
    finally:
        stop_cleanly(broker)
    return broker.data_dir


# --- the broker's locks -------------------------------------------------------------------------------


def test_a_second_broker_on_a_running_brokers_dir_stops_before_changing_anything(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    produce(broker.bootstrap, "t1", 10)
    before = {k: v for k, v in hashes(broker.data_dir).items() if SEGMENT not in k and "checkpoint" not in k}
    second = kcli_process(
        "broker", "start", "--listen", "127.0.0.1:0", "--data-dir", str(broker.data_dir), cwd=tmp_path
    )
    assert second.returncode == 2
    assert one_sentence(second.stderr) == (
        f"kcli: Failed to acquire lock on file .lock in {broker.data_dir}. {IN_USE}"
    )
    assert "listening on" not in second.stderr
    assert broker.is_running()
    after = {k: v for k, v in hashes(broker.data_dir).items() if SEGMENT not in k and "checkpoint" not in k}
    assert after == before  # meta.properties, the metadata log's files: untouched by the second one
    produce(broker.bootstrap, "t1", 10)  # the first broker still serves


def test_the_lock_is_kafkas_posix_record_lock_both_ways(
    broker: BrokerProcess, tmp_path: Path, kafka_lock
) -> None:
    # What Kafka's tryLock does against a running kcli broker: F_SETLK on its .lock fails.
    fd = os.open(broker.data_dir / ".lock", os.O_RDWR)
    try:
        with pytest.raises(OSError) as refused:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert refused.value.errno in (errno.EACCES, errno.EAGAIN)
    finally:
        os.close(fd)
    # And a dir a Kafka broker holds (the same lock, taken by another process) is refused by kcli,
    # before anything is written there: no meta.properties, no metadata log.
    kafka_dir = tmp_path / "kafka-logs"
    kafka_lock(kafka_dir)
    started = kcli_process(
        "broker", "start", "--listen", "127.0.0.1:0", "--data-dir", str(kafka_dir), cwd=tmp_path
    )
    assert started.returncode == 2
    assert (
        one_sentence(started.stderr) == f"kcli: Failed to acquire lock on file .lock in {kafka_dir}. {IN_USE}"
    )
    assert sorted(p.name for p in kafka_dir.iterdir()) == [".lock"]


def test_the_metadata_log_dir_is_locked_too(broker_factory, tmp_path: Path, kafka_lock) -> None:
    metadata_dir = tmp_path / "metadata"
    kafka_lock(metadata_dir)
    data_dir = tmp_path / "data"
    started = kcli_process(
        "broker", "start", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
        "--override", f"metadata.log.dir={metadata_dir}", cwd=tmp_path,
    )  # fmt: skip
    assert started.returncode == 2
    assert (
        one_sentence(started.stderr)
        == f"kcli: Failed to acquire lock on file .lock in {metadata_dir}. {IN_USE}"
    )
    assert sorted(p.name for p in metadata_dir.iterdir()) == [".lock"]
    # the log dir it locked first is given back: a broker on it alone starts
    broker = broker_factory(data_dir=data_dir)
    assert (broker.data_dir / ".lock").is_file()


def test_a_stopped_brokers_dir_can_be_started_again(broker_factory, tmp_path: Path) -> None:
    first = broker_factory(data_dir=tmp_path / "data")
    produce(first.bootstrap, "t1", 5)
    stop_cleanly(first)
    again = broker_factory(data_dir=tmp_path / "data")  # the lock went with the process
    produce(again.bootstrap, "t1", 5)


# --- offline tools on a running broker's dir ----------------------------------------------------------


def test_offline_tools_that_write_refuse_a_locked_dir_and_touch_nothing(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    produce(broker.bootstrap, "t1", 20)
    data = broker.data_dir
    (data / "t1-0" / "00000000000000000000.index").write_bytes(b"\0" * 7)  # something to repair
    before = {k: v for k, v in hashes(data).items() if SEGMENT not in k and "checkpoint" not in k}
    refused = run_kcli("recover", "logdir", str(data), "--execute", "--quarantine", str(tmp_path / "q"))
    assert refused.returncode == 2
    assert one_sentence(refused.stderr) == (
        f"kcli: {data} is in use by a running broker (its .lock is locked): stop the broker before "
        "kcli recover logdir --execute changes it."
    )
    assert refused.stdout == ""
    assert not (tmp_path / "q").exists()
    after = {k: v for k, v in hashes(data).items() if SEGMENT not in k and "checkpoint" not in k}
    assert after == before


def test_storage_format_refuses_a_dir_a_running_broker_holds(tmp_path: Path, kafka_lock) -> None:
    log_dir = tmp_path / "kafka-logs"
    kafka_lock(log_dir)
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
        f"log.dirs={log_dir}\nlisteners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
        "controller.listener.names=CONTROLLER\n"
    )
    result = run_kcli("storage", "format", "--config", str(config), "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg")
    assert result.returncode == 2
    assert one_sentence(result.stderr) == (
        f"kcli: {log_dir} is in use by a running broker (its .lock is locked): stop the broker before "
        "kcli storage format changes it."
    )
    assert sorted(p.name for p in log_dir.iterdir()) == [".lock"]


def test_read_only_tools_say_the_dir_is_in_use_and_go_on(broker: BrokerProcess) -> None:
    produce(broker.bootstrap, "t1", 20)
    data = broker.data_dir
    in_use = (
        f"kcli: {data} is in use by a running broker (its .lock is locked); "
        "what is read may change while it is read."
    )
    for args in (
        ("verify", str(data)),
        ("verify", str(data / "t1-0")),
        ("dump-segment", str(data / "t1-0" / SEGMENT)),
        ("recover", "logdir", str(data)),
    ):
        result = run_kcli(*args)
        assert result.stderr.splitlines()[0] == in_use, (args, result.stderr)
        assert result.stdout, args  # and it went on
    replayed = run_kcli("replay", str(data / "t1-0"), "-b", broker.bootstrap, "-t", "copy", "--dry-run")
    assert replayed.stderr.splitlines()[0] == in_use, replayed.stderr
    assert replayed.returncode == 0, replayed.stderr
    dumped = run_kcli("dump-segment", str(data / "t1-0" / SEGMENT))
    assert dumped.returncode == 0 and "baseOffset: 0" in dumped.stdout


def test_read_only_tools_say_nothing_about_a_stopped_brokers_dir(tmp_path: Path) -> None:
    data = stopped_broker_dir(tmp_path)
    assert (data / ".lock").is_file()  # left behind, as Kafka leaves it
    result = run_kcli("verify", str(data))
    assert result.returncode == 0 and "in use" not in result.stderr, result


# --- the .lock file and kcli's own walkers -----------------------------------------------------------


def test_walkers_ignore_the_lock_file(tmp_path: Path) -> None:
    from ops.recover import plan_log_dir
    from ops.spark.archive import discover

    data = stopped_broker_dir(tmp_path)
    assert (data / ".lock").is_file()
    verified = run_kcli("verify", str(data), "--output", "json")
    assert verified.returncode == 0 and ".lock" not in verified.stdout, verified
    plan = plan_log_dir(data)
    assert plan.empty and not any(".lock" in str(c) for c in plan.changes())
    assert run_kcli("recover", "logdir", str(data)).returncode == 0
    assert [f.path for f in discover(data) if ".lock" in f.path] == []
    assert {Path(f.path).parent.name for f in discover(data)} >= {"t1-0"}


# --- a dir with data but no meta.properties, and logs the metadata does not know ---------------------


def test_a_dir_with_partitions_but_no_meta_properties_is_refused_untouched(tmp_path: Path) -> None:
    data = stopped_broker_dir(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copytree(data / "t1-0", copy / "t1-0")
    before = hashes(copy)
    started = kcli_process(
        "broker", "start", "--listen", "127.0.0.1:0", "--data-dir", str(copy), cwd=tmp_path
    )
    assert started.returncode == 2
    assert one_sentence(started.stderr) == (
        f"kcli: {copy} holds Kafka data (partition dir t1-0) but no meta.properties, and kcli formats only "
        "an empty dir on first start: format it with `kcli storage format` (partitions its new metadata "
        f"log does not know are then kept as -stray) or check it first with `kcli recover logdir {copy}`."
    )
    assert hashes(copy) == before  # nothing formatted, nothing deleted, not even a .lock


def test_an_empty_partition_metadata_refuses_the_start_naming_the_file(tmp_path: Path) -> None:
    """An empty partition.metadata (what a process killed between creating and writing the file left
    before kcli wrote it under a temporary name and renamed it, as Kafka does) stops the start with
    Kafka's sentence naming the file; the records and the file are left as they were."""
    data = stopped_broker_dir(tmp_path)
    metadata = data / "t1-0" / "partition.metadata"
    metadata.write_text("")
    before = hashes(data / "t1-0")
    started = kcli_process(
        "broker", "start", "--listen", "127.0.0.1:0", "--data-dir", str(data), cwd=tmp_path
    )
    assert started.returncode == 2 and "Traceback" not in started.stderr, started.stderr
    assert started.stderr.splitlines()[-1] == (
        f"kcli: Error while reading partition metadata file {metadata}: Partition metadata file is empty."
    )
    after = hashes(data / "t1-0")
    assert [after[name] for name in (SEGMENT, "partition.metadata")] == [
        before[name] for name in (SEGMENT, "partition.metadata")
    ]
    assert not list(data.glob("*/partition.metadata.tmp"))


def test_an_empty_or_missing_dir_is_still_formatted_on_first_start(broker_factory, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for data_dir in (empty, tmp_path / "missing"):
        broker = broker_factory(data_dir=data_dir)
        assert (data_dir / "meta.properties").is_file()
        produce(broker.bootstrap, "t1", 1)


def test_logs_the_metadata_log_does_not_know_are_renamed_stray_never_deleted(
    broker_factory, tmp_path: Path
) -> None:
    data = stopped_broker_dir(tmp_path, count=50)
    segment = (data / "t1-0" / SEGMENT).read_bytes()
    shutil.rmtree(data / "__cluster_metadata-0")  # the metadata log is lost; meta.properties stays
    broker = broker_factory(data_dir=data)
    strays = [p for p in data.iterdir() if p.name.startswith("t1-0.")]
    assert len(strays) == 1 and re.fullmatch(r"t1-0\.[0-9a-f]{32}-stray", strays[0].name), strays
    assert (strays[0] / SEGMENT).read_bytes() == segment  # every byte kept
    assert re.search(
        rf"WARNING kcli\.broker: Log in {re.escape(str(data / 't1-0'))} marked stray and renamed to "
        rf"{re.escape(str(strays[0]))}: topic t1 is not in the metadata log",
        broker.log(),
    ), broker.log()
    assert "removing t1-0" not in broker.log()
    # A new t1 gets a new, empty log; the stray one is left alone on later starts.
    produce(broker.bootstrap, "t1", 3)
    stop_cleanly(broker)
    again = broker_factory(data_dir=data)
    assert (strays[0] / SEGMENT).read_bytes() == segment
    assert "stray" not in again.log().replace(f"{strays[0]}: a -stray replica directory, left alone", "")


# --- start-up recovery keeps what it cuts --------------------------------------------------------------


def test_start_up_recovery_keeps_a_whole_cut_segment_in_the_quarantine(
    broker_factory, tmp_path: Path
) -> None:
    data = stopped_broker_dir(tmp_path, count=50)
    segment = data / "t1-0" / SEGMENT
    original = segment.read_bytes()
    damaged = bytearray(original)
    damaged[70] ^= 0xFF  # inside the first batch: its CRC fails, so recovery cuts the whole segment
    segment.write_bytes(damaged)
    (data / ".kafka_cleanshutdown").unlink()  # as after a crash: the segment is recovered
    broker = broker_factory(data_dir=data)
    assert segment.stat().st_size == 0  # Kafka's recovery cuts from the first bad batch
    quarantines = list(tmp_path.glob("writer/data.quarantine-*"))
    assert len(quarantines) == 1, broker.log()
    assert (quarantines[0] / "t1-0" / SEGMENT).read_bytes() == bytes(damaged)  # every cut byte kept
    assert f"start-up recovery cuts bytes in {data}: they are kept in {quarantines[0]}" in broker.log()
    assert (
        f"t1-0: kept bytes 0..{len(original)} of {SEGMENT} in {quarantines[0] / 't1-0' / SEGMENT}"
        in broker.log()
    )


def test_start_up_recovery_keeps_the_cut_tail_and_the_dropped_segments(tmp_path: Path) -> None:
    from formats.checkpoints import write_offset_checkpoint
    from tests.test_log_recovery import crash, fill, restart

    root = tmp_path / "logs"
    manager, log = fill(root)
    segments = list(log.segments)
    crash(manager)
    (root / "recovery-point-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 0}))
    victim = segments[1]
    data = bytearray(victim.log_path.read_bytes())
    data[-5] ^= 0x10  # inside its last batch
    victim.log_path.write_bytes(data)
    later = {s.base_offset: s.log_path.read_bytes() for s in segments[2:]}
    manager, lines, log = restart(root)
    kept_valid = log.segments[-1].size
    (quarantine,) = tmp_path.glob("logs.quarantine-*")
    tail = sorted((quarantine / "orders-0").iterdir())
    assert len(tail) == 1 + len(later)
    cut_name = tail[0].name  # named by the first offset the cut batch claims
    assert tail[0].read_bytes() == bytes(data[kept_valid:])
    for base, content in later.items():
        assert (quarantine / "orders-0" / f"{base:020d}.log").read_bytes() == content
    assert any(f"kept bytes {kept_valid}..{len(data)} of {victim.log_path.name}" in line for line in lines)
    assert cut_name.endswith(".log")
    manager.shutdown()


def test_a_zero_tail_is_cut_without_a_quarantine(tmp_path: Path) -> None:
    from tests.test_log_recovery import crash, fill, restart

    root = tmp_path / "logs"
    manager, log = fill(root, batches=3)
    crash(manager)
    with open(log.segments[-1].log_path, "ab") as f:
        f.write(b"\0" * 512)  # a preallocated or torn tail: nothing in it to keep
    manager, lines, log = restart(root)
    assert any("truncated" in line for line in lines)
    assert list(tmp_path.glob("logs.quarantine-*")) == []
    manager.shutdown()


# --- conflicting values are errors, never silently ignored ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (
            ["--listen", "127.0.0.1:0", "--override", "listeners=PLAINTEXT://127.0.0.1:19092"],
            "kcli: --listen 127.0.0.1:0 and --override listeners=PLAINTEXT://127.0.0.1:19092 both set "
            "listeners: give one of them.",
        ),
        (
            ["--data-dir", "{d}/a", "--override", "log.dirs={d}/b"],
            "kcli: --data-dir {d}/a and --override log.dirs={d}/b both set log.dirs: give one of them.",
        ),
        (
            ["--data-dir", "{d}/a", "--override", "log.dir={d}/b"],
            "kcli: --data-dir {d}/a and --override log.dir={d}/b both set log.dirs: give one of them.",
        ),
    ],
)
def test_broker_start_refuses_a_flag_and_an_override_that_disagree(
    tmp_path: Path, args: list[str], sentence: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # a real process: were the conflict ignored, it would start a broker, and time out here
    result = kcli_process("broker", "start", *(a.format(d=tmp_path) for a in args), cwd=work, timeout=20)
    assert result.returncode == 2
    assert one_sentence(result.stderr) == sentence.format(d=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # nothing created: no a, no b
    assert list(work.iterdir()) == []  # no ./kcli-data


def test_cluster_start_honours_a_new_port_and_overrides_after_a_failed_first_start(tmp_path: Path) -> None:
    import socket

    from ops.local_cluster import LocalClusterError, plan
    from tests.conftest import free_port_range

    data = tmp_path / "cluster"
    base = free_port_range(4)
    with socket.socket() as taken:
        # as free_port_range probed it (a port of this worker's range may still be in TIME_WAIT), and
        # listening, which SO_REUSEADDR does not let the node's listener share
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", base))
        taken.listen()
        failed = run_kcli("cluster", "start", "--brokers", "1", "--data-dir", str(data), "--port", str(base))
    assert failed.returncode == 2
    assert one_sentence(failed.stderr.splitlines()[-1]).startswith(
        f"kcli: node 1 cannot listen on 127.0.0.1:{base}: "
    )
    first_id = orjson_loads(data / "cluster.json")["cluster_id"]
    layout = plan(data, 1, base + 2, ["log.retention.ms=60000"])
    assert (layout.cluster_id, layout.nodes[0].port, layout.nodes[0].controller_port) == (
        first_id,
        base + 2,
        base + 3,
    )
    properties = layout.nodes[0].properties.read_text()
    assert f"listeners=PLAINTEXT://127.0.0.1:{base + 2},CONTROLLER://127.0.0.1:{base + 3}" in properties
    assert f"controller.quorum.voters=1@127.0.0.1:{base + 3}" in properties
    assert "log.retention.ms=60000" in properties
    again = plan(data, 1, None, [])  # no flag: the stored ports and overrides
    assert again == layout and "log.retention.ms=60000" in again.nodes[0].properties.read_text()
    with pytest.raises(LocalClusterError) as shape:  # the shape is never changed, started or not
        plan(data, 1, None, [], controllers=1)
    assert str(shape.value) == (
        f"{data} holds a cluster of 0 controller-only nodes, not 1; use another --data-dir for a cluster of "
        "another shape."
    )


def test_cluster_start_refuses_a_new_port_or_override_once_the_cluster_has_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ops.local_cluster import LocalCluster, LocalClusterError, plan
    from tests.conftest import free_port_range

    for key, value in kcli_env().items():  # the runner's nodes inherit this process's environment
        monkeypatch.setenv(key, value)
    data = tmp_path / "cluster"
    base = free_port_range(2)
    layout = plan(data, 1, base, ["log.retention.ms=60000"])
    runner = LocalCluster(layout)
    try:
        runner.start()
        # a cluster node locks its dirs as `kcli broker start` does: the same node started again is refused
        node = layout.nodes[0]
        again = kcli_process("broker", "start", "--config", str(node.properties), cwd=tmp_path)
        assert again.returncode == 2
        assert one_sentence(again.stderr) == (
            f"kcli: Failed to acquire lock on file .lock in {node.directory / 'data'}. {IN_USE}"
        )
    finally:
        runner.stop()
    with pytest.raises(LocalClusterError) as moved:
        plan(data, 1, base + 10, [])
    assert str(moved.value) == (
        f"{data} holds a cluster that has already run, so kcli cluster start cannot apply --port {base + 10}: "
        f"its first client port is {base}; start it as it is (edit node-N/server.properties to change a node) "
        "or use another --data-dir."
    )
    with pytest.raises(LocalClusterError) as changed:
        plan(data, 1, None, ["log.retention.ms=1000"])
    assert str(changed.value) == (
        f"{data} holds a cluster that has already run, so kcli cluster start cannot apply --override "
        "log.retention.ms=1000: its nodes were configured with --override log.retention.ms=60000; start it "
        "as it is (edit node-N/server.properties to change a node) or use another --data-dir."
    )
    assert plan(data, 1, base, ["log.retention.ms=60000"]) == layout  # the same values are fine
    assert plan(data, 1, None, []) == layout


def test_cluster_start_keeps_its_security_and_its_secrets(tmp_path: Path) -> None:
    """--security is part of the cluster: another one is refused whether the cluster ran or not, and a
    layout written again (a new port before the first start) keeps the CA and admin's password, which the
    formatted metadata already holds."""
    from ops.local_cluster import LocalClusterError, plan
    from tests.conftest import free_port_range

    data = tmp_path / "cluster"
    base = free_port_range(4)
    layout = plan(data, 1, base, [], security="sasl_ssl")
    password, ca = (data / "admin.password").read_text(), (data / "tls" / "ca.crt").read_bytes()
    properties = layout.nodes[0].properties.read_text()
    assert f"listeners=SASL_SSL://127.0.0.1:{base},CONTROLLER://127.0.0.1:{base + 1}" in properties
    assert f'password="{password.strip()}"' in properties
    moved = plan(data, 1, base + 2, [], security="SASL_SSL")  # Kafka's spelling is the same choice
    assert moved.security == "sasl_ssl" and moved.nodes[0].port == base + 2
    assert (data / "admin.password").read_text() == password and (data / "tls" / "ca.crt").read_bytes() == ca
    assert f"127.0.0.1:{base + 2}" in (data / "client.properties").read_text()
    for other in ("ssl", "plaintext"):
        with pytest.raises(LocalClusterError) as refused:
            plan(data, 1, None, [], security=other)
        assert str(refused.value) == (
            f"{data} holds a cluster made with --security sasl_ssl, so kcli cluster start cannot make it "
            f"{other}; start it with --security sasl_ssl or use another --data-dir."
        )
    plain = plan(tmp_path / "plain", 1, base, [])
    assert plain.security == "plaintext" and not (tmp_path / "plain" / "client.properties").exists()
    with pytest.raises(
        LocalClusterError, match="made with --security plaintext, so kcli cluster start cannot make it ssl"
    ):
        plan(tmp_path / "plain", 1, None, [], security="ssl")
    with pytest.raises(LocalClusterError) as unknown:
        plan(tmp_path / "other", 1, base, [], security="tls")
    assert str(unknown.value) == "--security 'tls' is not one of plaintext, ssl, sasl_ssl."


def orjson_loads(path: Path) -> dict:
    import orjson

    return orjson.loads(path.read_bytes())


# --- recover partitions creates nothing before there is something to do ---------------------------------


def test_recover_partitions_creates_no_journal_when_there_is_nothing_to_do(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    produce(broker.bootstrap, "t1", 3)
    journal = tmp_path / "journals" / "deep" / "j.jsonl"
    base = ("recover", "partitions", "--bootstrap-server", broker.bootstrap, "--execute")
    led = run_kcli(*base, "--topic", "t1", "--journal", str(journal), cwd=tmp_path)
    assert led.returncode == 1
    assert one_sentence(led.stderr) == "kcli: t1-0 has a leader (broker 1): there is nothing to recover."
    none = run_kcli(*base, "--journal", str(journal), cwd=tmp_path)
    assert none.returncode == 0 and none.stdout == "No partition without a leader.\n"
    a_dir = tmp_path / "a-dir"
    a_dir.mkdir()
    refused = run_kcli(*base, "--topic", "t1", "--journal", str(a_dir), cwd=tmp_path)
    assert refused.returncode == 2
    assert one_sentence(refused.stderr) == f"kcli: --journal {a_dir} is a directory: give a file path."
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-dir",
        "broker",
    ]  # no journals/, no default journal
    assert list(a_dir.iterdir()) == []


def test_a_log_of_an_earlier_topic_of_the_same_name_is_stray_not_served(
    broker_factory, tmp_path: Path
) -> None:
    """A log whose partition.metadata names another topic id than the metadata log's topic of that name
    (the topic was deleted and created again while this copy was elsewhere) is not the topic's data."""
    data = tmp_path / "data"
    first = broker_factory(data_dir=data)
    produce(first.bootstrap, "t1", 10)
    stop_cleanly(first)
    old = tmp_path / "old-t1-0"
    shutil.copytree(data / "t1-0", old)
    second = broker_factory(data_dir=data)
    assert run_kcli("topics", "delete", "-b", second.bootstrap, "-t", "t1").returncode == 0
    assert (
        run_kcli("topics", "create", "-b", second.bootstrap, "-t", "t1", "--partitions", "1").returncode == 0
    )
    stop_cleanly(second)
    shutil.rmtree(data / "t1-0")
    shutil.copytree(old, data / "t1-0")
    third = broker_factory(data_dir=data)
    strays = [p for p in data.iterdir() if p.name.endswith("-stray")]
    assert len(strays) == 1 and hashes(strays[0]).get(SEGMENT) == hashes(old)[SEGMENT]
    assert re.search(
        r"marked stray and renamed to .*: its topic id \S+ is not the metadata's \S+ for t1", third.log()
    )
    assert (data / "t1-0" / SEGMENT).stat().st_size == 0  # the topic of today starts empty


def test_segments_below_the_checkpointed_log_start_are_kept_when_recovery_drops_them(tmp_path: Path) -> None:
    from formats.checkpoints import write_offset_checkpoint
    from tests.test_log_recovery import crash, fill, restart

    root = tmp_path / "logs"
    manager, log = fill(root, batches=6)
    contents = {s.base_offset: s.log_path.read_bytes() for s in log.segments}
    crash(manager)
    (root / "log-start-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 1000}))
    manager, lines, log = restart(root)
    assert any("deleted all segments" in line for line in lines)
    (quarantine,) = tmp_path.glob("logs.quarantine-*")
    for base, content in contents.items():
        assert (quarantine / "orders-0" / f"{base:020d}.log").read_bytes() == content
    manager.shutdown()
