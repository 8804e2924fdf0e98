"""Every command's --help shows what its arguments are for, whatever click the ranges let pip pick.

click 8.5 with typer 0.19 silently dropped each argument's help (man pages and --help alike); this
walks typer's command tree and checks the declared help text reaches the rendered help.
"""

import inspect
import os
import re
import subprocess
import sys

import typer
from typer.models import ArgumentInfo
from typer.testing import CliRunner

from kcli.cli.app import app
from kcli.cli.main import register


def _commands(typer_app: typer.Typer, path: tuple[str, ...] = ()):
    for info in typer_app.registered_commands:
        yield (*path, info.name or info.callback.__name__.replace("_", "-")), info.callback
    for group in typer_app.registered_groups:
        name = group.name if isinstance(group.name, str) else group.typer_instance.info.name
        yield from _commands(group.typer_instance, (*path, name))


def _argument_help(callback) -> list[str]:
    return [
        p.default.help
        for p in inspect.signature(callback).parameters.values()
        if isinstance(p.default, ArgumentInfo) and p.default.help
    ]


def _words(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_every_argument_help_is_rendered():
    register()
    runner = CliRunner()
    checked = 0
    for path, callback in _commands(app):
        for help_text in _argument_help(callback):
            result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
            assert result.exit_code == 0, result.output
            assert _words(help_text) in _words(result.output), (path, help_text)
            checked += 1
    assert checked >= 5  # dump-segment, verify, replay, groups, spark-audit all declare argument help


def test_shell_completion_is_offered_and_completes():
    """`kcli --install-completion` / `--show-completion` exist, and the completion script's callback
    (the `_KCLI_COMPLETE` variable it sets) completes subcommands."""
    register()
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert "--install-completion" in result.output and "--show-completion" in result.output
    entry = "import sys; sys.argv[0] = 'kcli'; from kcli.cli.main import main; main()"
    env = {**os.environ, "_KCLI_COMPLETE": "complete_bash", "COMP_WORDS": "kcli topics de", "COMP_CWORD": "2"}
    done = subprocess.run([sys.executable, "-c", entry], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == {"describe", "delete"}


def test_each_command_is_registered_by_the_module_the_entry_point_imports_for_it():
    """kcli.cli.main imports only the module of the command it runs (COMMAND_MODULES): a command missing
    from that map, or mapped to a module that does not add it, would start slower or not at all."""
    from kcli.cli.main import COMMAND_MODULES

    register()
    registered = {path[0]: callback.__module__ for path, callback in _commands(app)}
    assert registered == {name: f"kcli.cli.{module}" for name, module in COMMAND_MODULES.items()}
