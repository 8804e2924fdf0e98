"""The `kcli` entry point: registers every command on the app and turns errors into one line and an exit code."""

import logging
import os
import sys

import click
import typer

from formats.errors import FormatError
from kcli.cli.app import app
from kcli.cli.params import harden
from kcli.errors import KcliError


def register() -> None:
    """Import each command module; each adds its commands to `app`."""
    from kcli.cli import (  # noqa: F401
        acls,
        broker,
        cluster,
        configs,
        dump,
        elect,
        features,
        groups,
        quorum,
        reassign,
        recover,
        replay,
        spark_audit,
        storage,
        topics,
        transactions,
        verify,
    )


def command() -> click.Command:
    """The whole command tree as click runs it: every command registered, every option of a kind
    given the checks of its kind (kcli.cli.params)."""
    register()
    return harden(typer.main.get_command(app))


def main() -> None:
    # kio registers hypothesis strategies when hypothesis is importable: ~1.5 s and a .hypothesis/ dir
    # in the user's cwd for nothing. The program never needs it (tests import our modules directly).
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    root = command()
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
