"""`kcli ARGS` as a process of its own, forked from one that has kcli's modules imported already.

    process = forkserver.popen(["broker", "start", "--config", path], stdout=log, stderr=log, cwd=d, env=env)

A `python -m kcli broker start` spends ~0.2 of its ~0.26 CPU-s of start-up on the interpreter and on
importing the broker, and the suite starts hundreds of brokers. As multiprocessing's forkserver does,
each pytest-xdist worker keeps one server process (`python -m forkserver`, started on first use) that
imported the broker's modules and built kcli's command tree once and holds no thread; for each process
asked for it forks, and the child points fds 0-2 at the files it was given, takes the cwd and the
environment, sets sys.argv and runs `kcli.__main__.run()`, the function `python -m kcli` runs, then
leaves as any Python process does (atexit, the exit status). So each broker is still its own process
with its own PID, signals, files and sockets, started with the same arguments; what it does not repeat is
the interpreter's start and the imports. The server reaps its children and tells the worker each exit
status and the child's CPU time (`children_cpu`, counted in the suite's per-file CPU figures).

`popen` answers an object with the parts of subprocess.Popen the harnesses use (pid, poll, wait,
returncode, send_signal, terminate, kill). It falls back to a plain `python -m kcli` subprocess where a
fork could differ from one: KCLI_FORKSERVER=0, or an environment whose PYTHON* variables are not the
server's. The command line's own start (`python -m kcli`, its import errors, its exit codes on bad
flags) stays proven by the tests that start it as a plain process (test_bad_input, test_broker_net,
test_dir_safety and others).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
_MESSAGE = 1 << 20


# --- the worker's side ----------------------------------------------------------------------------------


class ForkedProcess:
    """A child of this worker's fork server, with subprocess.Popen's interface as far as the harnesses use it."""

    def __init__(self, args: list[str], pid: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _exit(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # not reaped yet, so the PID is still this process's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Client:
    """The connection to this worker's server: one request at a time, exits read by a thread."""

    def __init__(self, env: Mapping[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = dict(env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "forkserver", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            cwd=Path(__file__).parent,
            env=self.env,
        )
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.replies: list[dict[str, Any]] = []
        self.replied = threading.Condition()
        self.children: dict[int, ForkedProcess] = {}
        self.early: dict[int, int] = {}
        self.cpu = 0.0
        threading.Thread(target=self._read, name="forkserver-exits", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(_MESSAGE)
            except OSError:
                data = b""
            if not data:  # the server died: it killed its children on the way, or they are orphans now
                with self.replied:
                    self.replies.append({"error": "the fork server exited"})
                    self.replied.notify_all()
                    orphans, self.children = list(self.children.values()), {}
                for child in orphans:
                    child._exit(signal.SIGKILL)
                return
            message = json.loads(data)
            if "exit" in message:
                with self.replied:
                    self.cpu += message["cpu"]
                    child = self.children.pop(message["exit"], None)
                    if child is None:  # the pid reply is still on its way to popen
                        self.early[message["exit"]] = message["status"]
                if child is not None:
                    child._exit(message["status"])
            else:
                with self.replied:
                    self.replies.append(message)
                    self.replied.notify_all()

    def spawn(self, args: list[str], fds: Sequence[int], cwd: str, env: Mapping[str, str]) -> ForkedProcess:
        request = json.dumps({"argv": args, "cwd": cwd, "env": dict(env)}).encode()
        with self.lock:
            socket.send_fds(self.sock, [request], list(fds))
            with self.replied:
                self.replied.wait_for(lambda: self.replies)
                reply = self.replies.pop(0)
                if "error" in reply:
                    raise RuntimeError(f"kcli fork server: {reply['error']}")
                child = ForkedProcess(args, reply["pid"])
                status = self.early.pop(child.pid, None)
                if status is None:
                    self.children[child.pid] = child
        if status is not None:
            child._exit(status)
        return child


Process = ForkedProcess | subprocess.Popen[bytes]
"""What popen answers: a forked process or, where the server does not apply, a plain subprocess."""

_client: _Client | None = None
_client_lock = threading.Lock()


def _interpreter_settings(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def popen(
    args: Sequence[str],
    *,
    stdout: IO[Any] | int,
    stderr: IO[Any] | int,
    cwd: Path | str,
    env: Mapping[str, str],
) -> Process:
    """`kcli ARGS` with stdin from /dev/null, stdout and stderr to the given files (subprocess.STDOUT
    allowed for stderr). A plain `python -m kcli` subprocess where the fork server does not apply."""
    global _client
    with _client_lock:
        if os.environ.get("KCLI_FORKSERVER", "1") == "0" or (
            _client is not None and _interpreter_settings(_client.env) != _interpreter_settings(env)
        ):
            return subprocess.Popen(
                [sys.executable, "-m", "kcli", *args],
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, cwd=cwd, env=dict(env),
            )  # fmt: skip
        if _client is None or _client.process.poll() is not None:
            _client = _Client(env)
        client = _client
    out = stdout if isinstance(stdout, int) else stdout.fileno()
    err = out if stderr == subprocess.STDOUT else stderr if isinstance(stderr, int) else stderr.fileno()
    with open(os.devnull, "rb") as null:
        return client.spawn([str(a) for a in args], [null.fileno(), out, err], str(cwd), env)


def children_cpu() -> float:
    """CPU-seconds (user + system) of this worker's forked processes that have exited so far."""
    return _client.cpu if _client is not None else 0.0


# --- the server -----------------------------------------------------------------------------------------


def _prepare() -> None:
    """What `python -m kcli broker start` imports before it runs, done once (with kcli.__main__'s settings)."""
    import gc

    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    gc.disable()  # kcli.__main__.run's setting for the imports; main freezes them and enables it
    import kcli.__main__  # noqa: F401
    import kcli.broker.node  # noqa: F401
    import kcli.broker.server  # noqa: F401
    import kcli.cli.broker  # noqa: F401
    from kcli.cli.main import command

    command(["broker", "start"])
    if threading.active_count() != 1:
        raise SystemExit("kcli fork server: importing kcli started a thread; forking would copy it half-made")


def _serve(sock: socket.socket) -> dict[str, Any] | None:
    """Fork a child per request and report exits, until the worker goes. In a child: its request."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    try:
        while True:
            readable = select.select([sock, wake_r], [], [])[0]
            if wake_r in readable:
                os.read(wake_r, 4096)
                while live:
                    pid, status, usage = os.wait4(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    live.discard(pid)
                    cpu = usage.ru_utime + usage.ru_stime
                    sock.send(json.dumps({"exit": pid, "status": status, "cpu": cpu}).encode())
            if sock not in readable:
                continue
            data, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 3)
            if not data:
                break
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the child leaves the loop, with none of the server's children to kill
                live.clear()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_r, wake_w, sock.detach()):
                    os.close(fd)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                for fd in fds:
                    os.close(fd)
                return json.loads(data)
            for fd in fds:
                os.close(fd)
            live.add(pid)
            sock.send(json.dumps({"pid": pid}).encode())
    finally:  # the worker went (or the server failed) without stopping them: nothing else would
        for pid in live:
            os.kill(pid, signal.SIGKILL)
    return None


def _become(request: dict[str, Any]) -> None:
    """The child: the cwd, environment and argv `python -m kcli ARGS` would have had."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # as `python -m kcli` started in that directory has it
    sys.argv = [str(Path(sys.modules["kcli.__main__"].__file__ or "kcli")), *request["argv"]]


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sys.path[0] = str(REPO)  # not tests/: no test module may stand in for a module kcli imports
    _prepare()
    request = _serve(sock)
    if request is None:
        return
    _become(request)
    from kcli.__main__ import run

    run()


if __name__ == "__main__":
    main()
