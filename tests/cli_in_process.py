"""`kcli ARGS` through the real entry point, kcli.cli.main.main, in the test's own process.

A `python -m kcli` process costs about a second of interpreter start and imports before it sends
anything; a table of bad inputs or a scenario of twenty invocations pays that twenty times. This runs
the same `main` (argument parsing, error-to-sentence mapping, exit codes) with sys.argv set and
stdout/stderr captured, and answers a CompletedProcess like subprocess.run's. Each test file keeps
at least one real `python -m kcli` process per command family, so the installed entry point itself
stays proven.

Runs take turns (a lock): sys.argv and the redirected sys.stdout and sys.stderr belong to the whole
process, and a test may run kcli beside Kafka's tools in threads (test_apache_kafka.in_parallel).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path


class _Captured(io.TextIOWrapper):
    """A text stream with a binary `.buffer` (kcli dump writes bytes there) and no terminal."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", errors="replace")  # type: ignore[attr-defined]


@contextlib.contextmanager
def _without_debug() -> Iterator[None]:
    """KCLI_DEBUG makes main re-raise instead of printing its one sentence; kcli_env drops it too."""
    saved = os.environ.pop("KCLI_DEBUG", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["KCLI_DEBUG"] = saved


_ONE_AT_A_TIME = threading.Lock()


def run_kcli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`kcli ARGS` in this process (in `cwd` when given): exit status, stdout and stderr as a
    subprocess would give them. An exception main does not turn into a sentence propagates and fails
    the test, as a traceback on a real process's stderr would."""
    from kcli.cli.main import main  # main sets sys.modules["hypothesis"]; conftest imported it already

    out, err = _Captured(), _Captured()
    code: int | str | None = None
    with _ONE_AT_A_TIME:
        saved_argv = sys.argv
        sys.argv = ["kcli", *args]
        try:
            with (
                _without_debug(),
                contextlib.chdir(cwd or os.getcwd()),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                try:
                    main()
                except SystemExit as exited:
                    code = exited.code
        finally:
            sys.argv = saved_argv
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed to stderr, status 1
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess(["kcli", *args], code, out.text(), err.text())
