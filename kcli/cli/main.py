"""The `kcli` entry point: registers the command it runs on the app and turns errors into one line and an exit code."""

import gc
import importlib
import logging
import os
import sys

import click
import typer

from formats.errors import FormatError
from kcli.cli.app import app
from kcli.cli.params import harden
from kcli.errors import KcliError

COMMAND_MODULES = {
    "acls": "acls",
    "broker": "broker",
    "cluster": "cluster",
    "configs": "configs",
    "dump-segment": "dump",
    "elect": "elect",
    "features": "features",
    "groups": "groups",
    "quorum": "quorum",
    "reassign": "reassign",
    "recover": "recover",
    "replay": "replay",
    "spark-audit": "spark_audit",
    "storage": "storage",
    "topics": "topics",
    "transactions": "transactions",
    "verify": "verify",
}
"""Each top-level command and the module of kcli.cli that adds it to `app` when imported."""


def register(name: str | None = None) -> None:
    """Import the module of command `name`, or of every command when `name` names none: typer turns
    every registered function into click's tree at each start, and importing and converting all of
    them cost a one-command process ~0.1 CPU-s of its ~0.2 (`kcli topics list`)."""
    modules = [COMMAND_MODULES[name]] if name in COMMAND_MODULES else sorted(set(COMMAND_MODULES.values()))
    for module in modules:
        importlib.import_module(f"kcli.cli.{module}")


def command(args: list[str] | None = None) -> click.Command:
    """The command tree as click runs it for `args` (the whole tree when None): every command
    registered, or only the one `args` names, every option of a kind given the checks of its kind
    (kcli.cli.params).

    A process that runs main more than once (kcli's tests run it in theirs, hundreds of times) builds
    the tree again only when a command was registered since: building it from every command costs
    ~20 ms, and a click tree serves any number of runs."""
    global _built
    named = None if args is None else next((arg for arg in args if not arg.startswith("-")), None)
    register(named)  # the root's options are flags: the first other argument names the command
    registered = (len(app.registered_commands), len(app.registered_groups))
    if _built is None or _built[0] != registered:
        _built = (registered, harden(typer.main.get_command(app)))
    return _built[1]


_built: tuple[tuple[int, int], click.Command] | None = None
"""The last tree `command` built, with the counts of registered commands and groups it was built from."""


def main() -> None:
    # kio registers hypothesis strategies when hypothesis is importable: ~1.5 s and a .hypothesis/ dir
    # in the user's cwd for nothing. The program never needs it (tests import our modules directly).
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    root = command(sys.argv[1:])
    if not gc.isenabled():  # off for the imports (kcli.__main__): what they made lives as long as the
        gc.freeze()  # process, so no collection need look at it again
        gc.enable()
    logging.getLogger("asyncio").addFilter(quiet_unretrieved)
    try:
        rc = root.main(standalone_mode=False)
    except (KcliError, FormatError, OSError) as exc:
        if os.environ.get("KCLI_DEBUG"):
            raise
        code = exc.exit_code if isinstance(exc, KcliError) else 2
        print(f"kcli: {_sentence(exc)}", file=sys.stderr)
        sys.exit(code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.ClickException as exc:  # usage errors: click's message and exit code 2
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


def quiet_unretrieved(record: logging.LogRecord) -> bool:
    """Drop asyncio's "Future/Task exception was never retrieved" report: a request whose caller had
    already failed with its own sentence, told again at exit as a traceback (shown with --debug)."""
    if os.environ.get("KCLI_DEBUG"):  # read when the report comes: --debug sets it while parsing
        return True
    return "exception was never retrieved" not in record.getMessage().partition("\n")[0]


def _sentence(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        if exc.filename:
            return f"cannot open {exc.filename}: {exc.strerror.lower()}."
        # no file to name: an OS call on one already open (a read, a map) failed, not an open
        return f"a system call failed: {exc.strerror.lower()}."
    return str(exc)
