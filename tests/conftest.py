"""Shared fixtures: a real `kcli broker start` process on an ephemeral loopback port.

    def test_something(broker):            # a fresh broker per test
        AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics()

    def test_other(broker_factory):        # custom properties, several brokers, restarts
        b = broker_factory(overrides=["auto.create.topics.enable=false"])

    def test_interop(kafka_node):          # Apache Kafka 4.1 (tests/apache_kafka.py), one per run
        kcli topics describe -b kafka_node.bootstrap ...   # kafka_cluster: three nodes, one per run

Each broker runs as `kcli broker start --listen 127.0.0.1:0 --data-dir <tmp>/data`, a process of its own
forked from this worker's fork server, which has kcli imported already (tests/forkserver.py), its stderr
to a log file in `<tmp>` (`BrokerProcess.log()`), and the fixture waits for the ready line. At teardown
it is stopped with SIGTERM by PID (SIGKILL after a timeout) and the test fails unless it exited with
status 0.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import forkserver
import pytest
from hypothesis import HealthCheck, settings
from waiting import WaitTimeout, wait_for

BYTECODE_CACHE = os.path.join(tempfile.gettempdir(), f"kcli-tests-pycache-{os.getuid()}")
"""Where this process and its kcli subprocesses cache bytecode when PYTHONDONTWRITEBYTECODE is set."""
if sys.dont_write_bytecode:
    # Set as in some sandboxes, it made every pytest-xdist worker compile the checkout and rewrite the
    # asserts of every test file from source at collection (~12 s of CPU each, four at once on two cores).
    # The bytecode goes outside the source tree instead, as for the subprocesses (kcli_env); Python and
    # pytest's assertion rewriter check each cached file against its source.
    sys.dont_write_bytecode = False
    sys.pycache_prefix = BYTECODE_CACHE

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # Started in the background (a non-interactive shell's `cmd &`), the suite inherits SIGINT ignored, and
    # so would every process it starts: a program that starts with SIGINT ignored keeps it so (Python then
    # installs no Ctrl-C handler), and the tests that Ctrl-C a kcli process would see it run on. A caught
    # signal is back to its default in a child, so the children get Ctrl-C as in a foreground run.
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The multi-node cluster fixtures (cluster_factory, cluster_runner) live with their harness.
pytest_plugins = ("kraft_cluster",)

# CI (CI=true) replays the same examples on every run: a property test there answers "did this change
# break something", and a rare example that fails on a random draw (the every-message-type test found a
# guard bug that way, one draw in ~25) is hunted in local runs, which keep drawing fresh ones.
# No per-example deadline: the suite runs on several pytest-xdist workers beside brokers on two cores, where
# a 200 ms example (or a slow draw) is a scheduling delay, not a slow codec (the benchmarks measure speed).
settings.register_profile("kcli", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("kcli"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "kcli")

REPO = Path(__file__).resolve().parents[1]
KCLI = [sys.executable, "-m", "kcli"]
READY = re.compile(r"^kcli broker: listening on (\S+):(\d+)$", re.MULTILINE)
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile` spreads the files longest first, the Apache Kafka files together (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from scheduling import SharedFileScheduling

    return SharedFileScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the order SharedFileScheduling queues the files in; a run in one process
    keeps the files in collection order. (xdist sets a worker's `dist` option to "no", so this cannot
    ask for loadfile: the order is harmless to the other modes, whose controller hands out tests by
    their index in this same list on every worker.)"""
    if hasattr(config, "workerinput"):
        from scheduling import order_items

        order_items(items)


@dataclass
class BrokerProcess:
    """A running `kcli broker start`; `bootstrap` is "127.0.0.1:PORT"."""

    bootstrap: str
    host: str
    port: int
    pid: int
    data_dir: Path
    log_path: Path
    process: forkserver.Process = field(repr=False)

    def log(self) -> str:
        """Everything the broker wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    def is_running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM by PID, wait; SIGKILL by PID if it does not exit in time. Returns the exit status."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


def free_port_range(count: int) -> int:
    """A base port with `count` consecutive ports free on 127.0.0.1, below the ephemeral range (so
    no client connection takes one while a node is down). KCLI_TEST_PORTS=LOW-HIGH narrows the range
    (runs that share a machine keep out of each other's ports); each pytest-xdist worker takes its own
    slice of it, so two workers never probe the same range and both bind it."""
    low, high = 20000, 32000
    if os.environ.get("KCLI_TEST_PORTS"):
        low_text, _, high_text = os.environ["KCLI_TEST_PORTS"].partition("-")
        low, high = int(low_text), int(high_text)
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        high = min(high, ephemeral_low) if ephemeral_low > low + 1000 else high
    except (OSError, ValueError, IndexError):
        pass
    low, high = _worker_slice(low, high)
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(low, high - count)
        sockets: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError(f"no {count} consecutive free ports in {low}-{high}")


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of [low, high) (all of it outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return low, high
    width = (high - low) // count
    start = low + int(worker[2:]) * width
    return start, start + width


def kcli_env() -> dict[str, str]:
    """The environment a kcli subprocess needs to import this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # kio registers hypothesis strategies when hypothesis is installed, and hypothesis then builds
    # a unicode table in `.hypothesis/` under the cwd (~1.5 s the first time in each directory).
    env.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(REPO / ".hypothesis"))
    env.pop("KCLI_DEBUG", None)
    # With PYTHONDONTWRITEBYTECODE set (as in some sandboxes) every broker and kcli process would compile
    # this checkout's modules from source before it does anything: ~0.5 s of each broker's start-up,
    # and the suite starts hundreds. The children cache their bytecode instead, outside the source tree
    # (as tests/bench/bench_verify.py does); Python checks each .pyc against its source's mtime and size.
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env.setdefault("PYTHONPYCACHEPREFIX", BYTECODE_CACHE)
    return env


def start_broker(
    workdir: Path,
    *,
    data_dir: Path | None = None,
    overrides: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    listen: str = "127.0.0.1:0",
    config: Path | None = None,
) -> BrokerProcess:
    """Start a broker and wait for its ready line; fail the test with its stderr if it does not come.
    With `config` (a server.properties naming its listeners and log.dirs, `data_dir` its log dir) the
    broker takes everything from that file instead of --listen and --data-dir."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = data_dir or workdir / "data"
    log_path = workdir / f"broker-{time.monotonic_ns()}.log"
    args = ["broker", "start"]
    if config:
        args += ["--config", str(config)]
    else:
        args += ["--listen", listen]
        if not any(item.partition("=")[0].strip() in ("log.dirs", "log.dir") for item in overrides):
            args += ["--data-dir", str(data_dir)]  # an override of log.dirs says where instead (not both)
    for item in overrides:
        args += ["--override", item]
    args += list(extra_args)
    with open(log_path, "wb") as log_file:
        process = forkserver.popen(args, stdout=log_file, stderr=log_file, cwd=workdir, env=kcli_env())
    return wait_until_ready(process, log_path, data_dir)


def wait_until_ready(process: forkserver.Process, log_path: Path, data_dir: Path) -> BrokerProcess:
    """The broker once its ready line is in `log_path`; the test fails with the log if the process exits
    first or the line does not come within START_TIMEOUT (the process is killed by PID then)."""

    def ready() -> re.Match[str] | None:
        text = log_path.read_text(errors="replace")
        match = READY.search(text)
        if match is None and process.poll() is not None:
            pytest.fail(f"kcli broker exited with status {process.returncode} before it was ready:\n{text}")
        return match

    try:
        match = wait_for(
            "kcli broker's ready line",
            ready,
            START_TIMEOUT,
            0.02,
            explain=lambda: log_path.read_text(errors="replace"),
        )
    except WaitTimeout:
        process.kill()
        process.wait()
        raise
    host, port = match.group(1), int(match.group(2))
    return BrokerProcess(f"{host}:{port}", host, port, process.pid, data_dir, log_path, process)


def start_with_config(workdir: Path, config: Path) -> BrokerProcess:
    """`kcli broker start --config FILE` (no --listen: the file's listeners stay), waited for."""
    log_path = workdir / f"broker-{time.monotonic_ns()}.log"
    with open(log_path, "wb") as log_file:
        process = forkserver.popen(
            ["broker", "start", "--config", str(config)],
            stdout=log_file,
            stderr=log_file,
            cwd=workdir,
            env=kcli_env(),
        )
    return wait_until_ready(process, log_path, workdir)


def stop_cleanly(broker: BrokerProcess) -> None:
    status = broker.stop()
    assert status == 0, f"kcli broker exited with status {status}:\n{broker.log()}"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh single-node broker with kcli's defaults, stopped (and checked) at teardown."""
    process = start_broker(tmp_path / "broker")
    try:
        yield process
    finally:
        stop_cleanly(process)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    """`factory(overrides=[...], data_dir=..., extra_args=[...])` -> BrokerProcess; all stopped at teardown."""
    started: list[BrokerProcess] = []
    counter = iter(range(1_000_000))

    def factory(
        *,
        overrides: Sequence[str] = (),
        data_dir: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> BrokerProcess:
        process = start_broker(
            tmp_path / f"broker-{next(counter)}",
            data_dir=data_dir,
            overrides=overrides,
            extra_args=extra_args,
        )
        started.append(process)
        return process

    try:
        yield factory
    finally:
        failures = []
        for process in started:
            status = process.stop()
            if status != 0:
                failures.append(f"broker {process.pid} exited with status {status}:\n{process.log()}")
        assert not failures, "\n".join(failures)


# --- Apache Kafka, the reference (tests/apache_kafka.py) ------------------------------------------


def skip_unless_ci(message: str) -> None:
    """Skip with `message`; with CI=true fail instead: CI installs what the interop tests need, and a test
    that quietly never runs there would prove nothing."""
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: required)")
    pytest.skip(message)


def require_apache_kafka() -> None:
    """Skip with one line naming what is missing when java or mvn is not here; with CI=true fail instead,
    since CI has both and an interop test that quietly never runs there would prove nothing."""
    import apache_kafka

    missing = apache_kafka.missing_tools()
    if missing:
        skip_unless_ci(f"Apache Kafka reference not available: {' and '.join(missing)} not on PATH")
    try:
        apache_kafka.resolve()
    except apache_kafka.KafkaSetupError as error:
        pytest.fail(str(error))


def _kafka_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    count: int,
    security: str | None = None,
    properties: dict[str, object] | None = None,
    *,
    name: str = "",
) -> Iterator:
    """`count` Apache Kafka nodes (`security`: see apache_kafka.Security; `properties`: more
    server.properties lines), stopped after the last use; a session fixture passes its `name` so that it
    stops once no test left to run asks for it."""
    import apache_kafka

    require_apache_kafka()
    workdir = tmp_path_factory.mktemp(f"apache-kafka-{count}-{security or 'plaintext'}")
    try:
        cluster = apache_kafka.start_cluster(
            workdir, count, free_port_range(2 * count), security=security, extra=properties
        )
    except apache_kafka.KafkaSetupError as error:
        pytest.fail(str(error))
    stopped = False

    def stop() -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        statuses = cluster.stop()
        # Kafka's shutdown hook ends the JVM with 143 (128 + SIGTERM) after a clean shutdown.
        bad = {
            node: status
            for node, status in statuses.items()
            if status not in (0, 143) and node not in cluster.stranded
        }
        assert not bad, f"Apache Kafka nodes exited with {bad}"

    if name:
        _SESSION_KAFKA[name] = stop
    try:
        yield cluster
    finally:
        _SESSION_KAFKA.pop(name, None)
        stop()


_SESSION_KAFKA: dict[str, Callable[[], None]] = {}
"""The session-scoped Apache Kafka fixtures running now, by fixture name: how to stop each."""


@pytest.fixture(scope="module", autouse=True)
def _file_cpu(request: pytest.FixtureRequest) -> Iterator[None]:
    """With KCLI_SUITE_CPU=DIR, each file's CPU-seconds (the worker's and those of the processes it
    started and reaped: brokers, JVMs, tools; the fork server's children as it reports them), its
    wall-clock start and end and the worker's own share go to a line in DIR, for scripts/suite_times.py.
    Set up before the fixture below, so that its teardown (a Kafka node stopped) counts too."""
    cpu_dir = os.environ.get("KCLI_SUITE_CPU")
    if not cpu_dir:
        yield
        return
    import resource

    def cpu_seconds() -> tuple[float, float]:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        mine = own.ru_utime + own.ru_stime
        return mine + children.ru_utime + children.ru_stime + forkserver.children_cpu(), mine

    (before, own_before), began = cpu_seconds(), time.time()
    yield
    (after, own_after), ended = cpu_seconds(), time.time()
    with open(Path(cpu_dir) / f"{os.getpid()}.cpu", "a") as out:
        out.write(
            f"{request.node.path.stem} {after - before:.2f} {began:.2f} {ended:.2f} {own_after - own_before:.2f}\n"
        )


@pytest.fixture(scope="module", autouse=True)
def _stop_apache_kafka_after_its_last_use(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each file: stop the session's Apache Kafka node or cluster when no test after this file
    asks for it. An idle 3-node cluster takes ~8% of a core, and a session fixture otherwise lives until
    its xdist worker ends (tests/scheduling.py runs the files that use them first, on one worker)."""
    yield
    if not _SESSION_KAFKA:
        return
    items = request.session.items
    prefix = request.node.nodeid + "::"
    last = max((i for i, item in enumerate(items) if item.nodeid.startswith(prefix)), default=len(items))
    for name in list(_SESSION_KAFKA):
        if not any(name in item.fixturenames for item in items[last + 1 :]):
            _SESSION_KAFKA.pop(name)()


@pytest.fixture(scope="session")
def kafka_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One combined Apache Kafka KRaft node for the whole run, started when a test first asks; tests that
    share it use topic and group names of their own."""
    yield from _kafka_cluster(tmp_path_factory, 1, name="kafka_node")


KAFKA_CLUSTER_PROPERTIES = {
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 100,
}
"""kafka_cluster's session timeout and heartbeat interval of consumer-protocol members (KIP-848): those
of test_consumer_group_clients.BROKER_SETTINGS instead of Kafka's 45 s (and 45 s at least) and 5 s, so
that a member killed -9 in test_apache_kafka_ops loses its partitions within seconds, as on kcli's nodes.
No other test of kafka_cluster waits on a session to end; classic groups keep Kafka's defaults."""


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Three combined Apache Kafka nodes (static voters, one cluster id) for the whole run, started when
    a test first asks, with KAFKA_CLUSTER_PROPERTIES."""
    yield from _kafka_cluster(tmp_path_factory, 3, properties=KAFKA_CLUSTER_PROPERTIES, name="kafka_cluster")
