"""Every command against the generic bad values, table-driven from the command tree itself.

The commands and their options come from the click tree `kcli` runs (kcli.cli.main.command), so a
command or option added later is covered without touching this file. Each option of a kind gets
that kind's bad values: integers beyond their protocol field and not numbers at all; nan, inf, -inf
and a negative for floats; bootstrap lists with port 70000, port 0, no port, a port nothing listens
on, and listeners that are not Kafka (one closes at once, one answers HTTP 400 and stays open);
a digit int() does not read for text options; a missing file, a directory, a binary file, random
bytes named as an index or a segment, and a properties file with port 70000 for each path argument
the command reads. A few explicit cases follow the table (client properties files, spark-audit's
archive, topics create's -1), and a handful run through a real `python -m kcli` process.

Each case must exit non-zero with exactly one error sentence on stderr (click's usage lines may
precede it), no traceback and no "Future exception was never retrieved", finish within seconds, and
leave its working directory and its input files as they were.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from cli_in_process import run_kcli

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[1]
SOUND_SEGMENT = REPO / "fixtures" / "logdir" / "m2-none-0" / "00000000000000000000.log"
FAST = 5.0
"""Seconds a bad input may take to be refused: a connect that ends in an answer, never a timeout."""

LONG_RUNNING = {("broker", "start"), ("cluster", "start")}
"""Commands that serve until stopped: only values refused while parsing are tried on them."""

READS_FIRST = {
    ("dump-segment",),
    ("verify",),
    ("recover", "logdir"),
    ("groups", "reset-offsets"),
    ("elect",),
    ("storage", "format"),
}
"""Commands whose path argument is the first thing they act on: their sentence names that file."""

REPORTS_DAMAGE = {("verify",)}
"""Commands whose answer to a damaged file is their report: exit 1 and findings naming the file on
stdout, rather than an error sentence."""

OUTPUT_PATHS = {"--rollback-file", "--checkpoint", "--offset-map", "--journal", "--quarantine", "--data-dir"}
"""Path options a command writes rather than reads: a missing one is not an error."""

BOOTSTRAP_OPTIONS = {"--bootstrap-server", "--bootstrap-controller"}

TO_THE_CONNECT = {
    ("acls", "add"): ["--allow-principal", "User:x", "--operation", "Read", "--topic", "t"],
    ("acls", "check"): ["--principal", "User:x", "--operation", "Read", "--topic", "t"],
    ("acls", "remove"): ["--allow-principal", "User:x", "--operation", "Read", "--topic", "t", "--force"],
    ("configs", "alter"): ["--topic", "t", "--add-config", "retention.ms=1"],
    ("configs", "describe"): ["--topic", "t"],
    ("elect",): ["--election-type", "preferred", "--all-topic-partitions"],
    ("features", "disable"): ["--feature", "foo"],
    ("features", "downgrade"): ["--feature", "metadata.version=20"],
    ("features", "upgrade"): ["--feature", "metadata.version=20"],
    ("groups", "reset-offsets"): ["--topic", "t", "--to-earliest"],
    ("quorum", "describe"): ["--status"],
    ("quorum", "remove-controller"): ["-d", "AAAAAAAAAAAAAAAAAAAAAA"],
    ("reassign", "cancel"): ["--all"],
    ("reassign", "execute"): ["--reassignment-json-file", "{plan}"],
    ("reassign", "generate"): ["--topics-to-move-json-file", "{move}", "--broker-list", "1"],
    ("reassign", "verify"): ["--reassignment-json-file", "{plan}"],
}
"""What a command needs besides the bootstrap to get as far as connecting (its own checks come first)."""

TO_THE_FILE = {
    ("elect", "--path-to-json-file"): ["--election-type", "preferred"],
    ("elect", "--admin.config"): ["--election-type", "preferred", "--all-topic-partitions"],
    **{(*path, "--command-config"): argv for path, argv in TO_THE_CONNECT.items() if path[0] != "quorum"},
}
"""What a command checks before it reads the file an option names, by (*command, option)."""

CLIENT_CONFIGS = {"--command-config", "--admin.config", "--producer.config"}
"""A client properties file is read just before connecting: given what gets a command that far
(TO_THE_FILE), every command's sentence names it (quorum's is read by each subcommand, after its own
checks)."""

NEVER_CONNECTS_HERE = {("quorum", "add-controller")}
"""Needs a controller's own configuration to get that far: tried, but its sentence need not name the
address."""


# --- the command tree --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    name: str
    command: click.Command


def _tree() -> list[tuple[Level, ...]]:
    """Every runnable command as the chain of (sub)commands from the root's children down."""
    from kcli.cli.main import command

    found: list[tuple[Level, ...]] = []

    def walk(cmd: click.Command, chain: tuple[Level, ...]) -> None:
        children = getattr(cmd, "commands", None)
        if children:
            for name, sub in sorted(children.items()):
                walk(sub, (*chain, Level(name, sub)))
        else:
            found.append(chain)

    walk(command(), ())
    return found


TREE = _tree()


def _is_path(param: click.Parameter) -> bool:
    return isinstance(param.type, click.Path)


def _dummy(param: click.Parameter, inputs: Path) -> list[str]:
    """A plausible value for a required parameter, so the command gets as far as the case's value."""
    kind = param.type
    if isinstance(kind, click.Choice):
        value = str(kind.choices[0])
    elif isinstance(kind, (click.types.IntParamType, click.types.FloatParamType)):
        value = str(max(1, getattr(kind, "min", None) or 1))
    elif _is_path(param) and isinstance(param, click.Argument):
        value = str(SOUND_SEGMENT)  # replay's source, recover's log dir: a real one
    elif _is_path(param):
        value = str(inputs / "empty.txt")
    elif BOOTSTRAP_OPTIONS.intersection(param.opts):
        value = "127.0.0.1:1"
    else:
        value = "x"
    if isinstance(param, click.Argument):
        return [value]
    return [param.opts[0], value]


def _argv(
    chain: tuple[Level, ...], level: int, param: click.Parameter | None, value: str, inputs: Path
) -> list[str]:
    """`kcli a b --opt VALUE ...` with dummies for every other required parameter at every level."""
    argv: list[str] = []
    for index, step in enumerate(chain):
        argv.append(step.name)
        tail: list[str] = []
        for other in step.command.params:
            if other is param and index == level:
                if isinstance(other, click.Argument):
                    tail.append(value)
                else:
                    argv += [other.opts[0], value]
            elif other.required:
                (tail if isinstance(other, click.Argument) else argv).extend(_dummy(other, inputs))
        argv += tail
    return argv


# --- the cases --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    chain: tuple[Level, ...]
    level: int
    param: click.Parameter
    value: str
    names: str = ""
    """What the sentence must name (the option or the file), when it is not click's own message."""

    def argv(self, inputs: Path, values: dict[str, str]) -> list[str]:
        value = self.value.format(**values)
        argv = _argv(self.chain, self.level, self.param, value, inputs)
        if self.names == "address":
            argv += [a.format(**values) for a in TO_THE_CONNECT.get(self.path, [])]
        elif self.names == "file":
            extra = TO_THE_FILE.get((*self.path, self.param.opts[0] if self.param.opts else ""), [])
            argv += [a.format(**values) for a in extra]
        return argv

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(step.name for step in self.chain)


INT_VALUES = ["99999999999999999999", "-99999999999999999999", "abc"]
FLOAT_VALUES = ["nan", "inf", "-inf", "-1"]
# formatted with the ports of the loopback servers the test starts
BOOTSTRAP_VALUES = {
    "port 70000": ("127.0.0.1:70000", False),
    "port 0": ("127.0.0.1:0", False),
    "no port": ("127.0.0.1", False),
    "unreachable": ("127.0.0.1:{refused}", True),
    "closes": ("127.0.0.1:{closes}", True),
    "http 400": ("127.0.0.1:{http}", True),
}
PATH_VALUES = {
    "missing": "{missing}",
    "directory": "{directory}",
    "binary": "{binary}",
    "random index": "{index}",
    "random segment": "{segment}",
    "properties with port 70000": "{properties}",
}


def _cases() -> Iterator[Case]:
    for chain in TREE:
        title = " ".join(step.name for step in chain)
        serves = tuple(step.name for step in chain) in LONG_RUNNING
        for level, step in enumerate(chain):
            for param in step.command.params:
                name = param.opts[0] if param.opts else param.name
                kind = param.type
                # refused while parsing, so the sentence names the option
                if isinstance(kind, click.types.IntParamType):
                    for value in INT_VALUES:
                        yield Case(f"{title} {name}={value}", chain, level, param, value, names=name)
                elif isinstance(kind, click.types.FloatParamType):
                    for value in FLOAT_VALUES:
                        yield Case(f"{title} {name}={value}", chain, level, param, value, names=name)
                elif BOOTSTRAP_OPTIONS.intersection(param.opts):
                    for label, (value, connects) in BOOTSTRAP_VALUES.items():
                        if not (connects and serves):
                            named = "address" if connects else name
                            yield Case(f"{title} {name} {label}", chain, level, param, value, names=named)
                elif isinstance(kind, click.types.StringParamType) and not serves:
                    # a digit int() does not read ("²".isdigit() is true): numbers in text options
                    yield Case(f"{title} {name}=superscript", chain, level, param, "\u00b2")
                elif _is_path(param) and name not in OUTPUT_PATHS and not serves:
                    for label, value in PATH_VALUES.items():
                        yield Case(f"{title} {name} {label}", chain, level, param, value, names="file")


CASES = list(_cases())


# --- the world the cases run in ---------------------------------------------------------------------


class _NotKafka:
    """A loopback listener that is not Kafka: it reads a request, then closes, or answers HTTP 400
    and keeps the connection open (what an HTTP server with keep-alive does)."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(5)
                conn.recv(65536)
                if self.answer:
                    conn.sendall(self.answer)
                    self.open.append(conn)
                else:
                    conn.close()
            except OSError:
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.open:
            conn.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    inputs = tmp_path_factory.mktemp("inputs")
    (inputs / "empty.txt").write_text("")
    noise = random.Random(32).randbytes(4096)
    (inputs / "binary.bin").write_bytes(bytes(range(256)) * 8 + b"\xff\xfe\x00\x81")
    (inputs / "00000000000000000000.timeindex").write_bytes(noise[:1200])  # what Kafka's file names promise,
    (inputs / "00000000000000000000.log").write_bytes(noise)  # not what they hold
    (inputs / "a-directory").mkdir()
    (inputs / "plan.json").write_text(
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}'
    )
    (inputs / "bootstrap.properties").write_text("bootstrap.servers=127.0.0.1:9092,127.0.0.1:70000\n")
    (inputs / "move.json").write_text('{"version":1,"topics":[{"topic":"t"}]}')
    refused = socket.socket()  # bound, never listening: a connect is refused at once, and no other
    refused.bind(("127.0.0.1", 0))  # process (a broker another test starts) can take the port meanwhile
    refused_port = refused.getsockname()[1]
    closes, http = _NotKafka(b""), _NotKafka(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    values = {
        "refused": str(refused_port),
        "closes": str(closes.port),
        "http": str(http.port),
        "missing": str(inputs / "no-such-file.json"),
        "directory": str(inputs / "a-directory"),
        "binary": str(inputs / "binary.bin"),
        "properties": str(inputs / "bootstrap.properties"),
        "plan": str(inputs / "plan.json"),
        "move": str(inputs / "move.json"),
        "index": str(inputs / "00000000000000000000.timeindex"),
        "segment": str(inputs / "00000000000000000000.log"),
    }
    yield inputs, values
    closes.close()
    http.close()
    refused.close()


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def check_refused(result: subprocess.CompletedProcess[str], elapsed: float, names: str = "") -> str:
    """The promise for bad input: non-zero, one sentence, no traceback, quick. Returns the sentence."""
    err = result.stderr
    assert result.returncode != 0, f"exit 0 on bad input; stdout: {result.stdout[-500:]!r}"
    assert "Traceback" not in err and "Future exception" not in err, err
    lines = [
        line
        for line in err.splitlines()
        if line.startswith(("kcli: ", "Error: ")) and not line.startswith("kcli: warning")
    ]
    assert len(lines) == 1, f"not one error line: {err!r}"
    sentence = lines[0].split(": ", 1)[1].strip()
    assert sentence, err
    assert not sentence.startswith("cannot open:"), f"an OS error without its file: {sentence!r}"
    assert elapsed < FAST, f"took {elapsed:.1f} s: {sentence}"
    if names:
        assert names in sentence, f"the sentence does not name {names}: {sentence!r}"
    return sentence


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_value_is_one_sentence(case: Case, world: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    inputs, values = world
    before = _snapshot(inputs)
    argv = case.argv(inputs, values)
    started = time.monotonic()
    result = run_kcli(*argv, cwd=tmp_path)
    elapsed = time.monotonic() - started
    name = _what_to_name(case, values)
    if tuple(s.name for s in case.chain) in REPORTS_DAMAGE and result.returncode == 1 and not result.stderr:
        assert name in result.stdout and elapsed < FAST, result.stdout[-500:]
    else:
        check_refused(result, elapsed, names=name)
    assert list(tmp_path.iterdir()) == [], f"{argv} created {list(tmp_path.iterdir())}"
    assert _snapshot(inputs) == before, f"{argv} changed its inputs"


def _what_to_name(case: Case, values: dict[str, str]) -> str:
    """What the sentence must name: the option refused while parsing, the address that did not
    answer as Kafka, or the file (its last component: commands print it relative or resolved)."""
    if case.names == "file":
        if CLIENT_CONFIGS.intersection(case.param.opts) and case.path[0] != "quorum":
            return Path(case.value.format(**values)).name
        if tuple(step.name for step in case.chain) in READS_FIRST:
            return Path(case.value.format(**values)).name
        return ""
    if case.names == "address":
        return "" if case.path in NEVER_CONNECTS_HERE else case.value.format(**values)
    return case.names


def test_the_table_covers_every_command() -> None:
    """Each command gets at least one case, and the count is printed for the record."""
    covered = {c.chain for c in CASES}
    untouched = [" ".join(s.name for s in chain) for chain in TREE if chain not in covered]
    print(f"{len(CASES)} bad-input cases over {len(TREE)} commands; no generic option: {untouched}")
    assert len(CASES) > 300
    assert {("dump-segment",), ("topics", "create"), ("transactions", "abort")} <= {
        tuple(s.name for s in chain) for chain in covered
    }


@pytest.mark.parametrize(
    "line",
    [
        "bootstrap.servers=127.0.0.1:70000",
        "bootstrap.servers=127.0.0.1",
        "default.api.timeout.ms=99999999999",
    ],
)
def test_a_client_properties_file_is_checked_like_the_options(line: str, tmp_path: Path) -> None:
    """--admin.config's bootstrap.servers and timeouts get the options' checks, and the sentence names
    the file: port 70000 there was an OverflowError, a timeout beyond int32 a struct.error."""
    config = tmp_path / "admin.properties"
    config.write_text(line + "\n")
    started = time.monotonic()
    result = run_kcli(
        "elect", "--election-type", "preferred", "--all-topic-partitions", "--admin.config", str(config)
    )
    sentence = check_refused(result, time.monotonic() - started, names=str(config))
    assert line.split("=")[0] in sentence


@pytest.mark.parametrize(
    "argv", [["--partitions", "-1"], ["--replication-factor", "-1"], ["--partitions", "0"]]
)
def test_topics_create_refuses_what_would_mean_the_broker_default(argv: list[str], tmp_path: Path) -> None:
    """-1 is CreateTopics' "use the broker's default": given on the command line it created a topic."""
    started = time.monotonic()
    result = run_kcli("topics", "create", "-b", "127.0.0.1:1", "-t", "t", *argv, cwd=tmp_path)
    sentence = check_refused(result, time.monotonic() - started)
    assert argv[0][2:].replace("-", " ") in sentence  # "partitions", "replication factor"


def test_no_unretrieved_future_report_reaches_the_user(caplog: pytest.LogCaptureFixture) -> None:
    """Whatever future a failed command leaves behind, asyncio's report of it at exit is not shown."""
    import asyncio
    import gc

    run_kcli("topics", "list", "-b", "127.0.0.1:1")  # main() installs the filter, as every run does

    async def leave_one_behind() -> None:
        asyncio.get_running_loop().create_future().set_exception(RuntimeError("nobody awaits this"))

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(leave_one_behind())
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


@pytest.mark.parametrize("archive", ["", "nosuch://x", "::", "memory://nothing-here", "/no/such/dir"])
def test_a_spark_archive_is_refused_before_spark_starts(archive: str, tmp_path: Path) -> None:
    """The archive is a text argument (paths and fsspec URLs): an empty one audited the current
    directory, an unknown protocol was a ValueError traceback, a missing URL was found only once a
    Spark session had started."""
    started = time.monotonic()
    result = run_kcli("spark-audit", "gaps", archive, cwd=tmp_path)
    sentence = check_refused(result, time.monotonic() - started)
    assert archive.strip(":") in sentence or not archive.strip(":")


# --- the real entry point, a handful of times --------------------------------------------------------

SUBPROCESS = {
    "port 70000": ["topics", "list", "-b", "127.0.0.1:70000"],
    "http 400": ["groups", "list", "-b", "127.0.0.1:{http}"],
    "closes": ["transactions", "list", "-b", "127.0.0.1:{closes}"],
    "int16": ["transactions", "abort", "--producer-epoch", "99999"],
    "nan": ["reassign", "execute", "--interval", "nan"],
}


@pytest.mark.parametrize("argv", SUBPROCESS.values(), ids=SUBPROCESS.keys())
def test_bad_value_through_python_m_kcli(
    argv: list[str], world: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    _, values = world
    env = {k: v for k, v in os.environ.items() if k != "KCLI_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "kcli", *(a.format(**values) for a in argv)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    check_refused(result, time.monotonic() - started - 1.5)  # less the interpreter's start
    assert list(tmp_path.iterdir()) == []
