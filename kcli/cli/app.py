"""The typer app every command module adds its commands to, the root command's options, and what every
reporting command shares: `--output text|json`."""

import os
from enum import StrEnum

import typer

from kcli import __version__


class Output(StrEnum):
    text = "text"
    json = "json"


app = typer.Typer(
    name="kcli",
    help="An embedded Kafka-compatible broker and the tools a Kafka operator reaches for.",
    no_args_is_help=True,
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
