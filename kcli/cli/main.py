"""The `kcli` entry point: builds the typer app and turns errors into one line and an exit code."""

import os
import sys

import click
import typer

from formats.errors import FormatError
from kcli import __version__
from kcli.errors import KcliError

app = typer.Typer(
    name="kcli",
    help="An embedded Kafka-compatible broker and the tools a Kafka operator reaches for.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    if debug:
        os.environ["KCLI_DEBUG"] = "1"


def _register() -> None:
    """Import each command module; each adds its commands to `app`."""
    from kcli.cli import (  # noqa: F401
        broker,
        configs,
        dump,
        groups,
        replay,
        spark_audit,
        topics,
        transactions,
        verify,
    )


def main() -> None:
    # kio registers hypothesis strategies when hypothesis is importable: ~1.5 s and a .hypothesis/ dir
    # in the user's cwd for nothing. The program never needs it (tests import our modules directly).
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    _register()
    try:
        rc = app(standalone_mode=False)
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


def _sentence(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"cannot open{where}: {exc.strerror.lower()}."
    return str(exc)
