"""Regenerate man/ from the CLI definitions: `python scripts/man.py [DIR]`.

typer vendors its own click, which click-man cannot introspect, so this walks typer's command tree and
writes one roff page per command (kcli.1, kcli-dump-segment.1, kcli-broker-start.1, ...).
"""

import shutil
import sys
from pathlib import Path

from kcli import __version__
from kcli.cli.main import command

MAN_DATE = "2026-11-22"  # fixed, so regenerating without CLI changes changes nothing
TARGET = Path(__file__).resolve().parent.parent / "man"


def main(target: Path = TARGET) -> list[Path]:
    root = command()
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    written = _write(root, ["kcli"], None, target)
    print(f"wrote {len(written)} pages to {target}")
    return written


def _write(command, names: list[str], parent_ctx, target: Path) -> list[Path]:
    ctx = command.context_class(command, info_name=names[-1], parent=parent_ctx)
    path = target / ("-".join(names) + ".1")
    path.write_text(_page(command, names, ctx))
    written = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            written += _write(sub, names + [name], ctx, target)
    return written


def _page(command, names: list[str], ctx) -> str:
    title = " ".join(names)
    summary = (command.short_help or (command.help or "").strip().split("\n")[0]).rstrip(".")
    lines = [
        f'.TH "{"-".join(names).upper()}" "1" "{MAN_DATE}" "kcli {__version__}" "kcli manual"',
        ".SH NAME",
        f"{_esc('-'.join(names))} \\- {_esc(summary)}",
        ".SH SYNOPSIS",
        f".B {_esc(title)}",
        _esc(" ".join(command.collect_usage_pieces(ctx))),
    ]
    if command.help:
        lines += [".SH DESCRIPTION", _esc(command.help.strip())]
    options = [p.get_help_record(ctx) for p in command.get_params(ctx)]
    options = [o for o in options if o]
    if options:
        lines.append(".SH OPTIONS")
        for flags, help_text in options:
            lines += [".TP", f"\\fB{_esc(flags)}\\fR", _esc(help_text)]
    subcommands = sorted(getattr(command, "commands", {}).items())
    if subcommands:
        lines.append(".SH COMMANDS")
        for name, sub in subcommands:
            if not sub.hidden:
                lines += [
                    ".TP",
                    f"\\fB{_esc(name)}\\fR",
                    _esc(sub.get_short_help_str(80)),
                    f"See \\fB{'-'.join(names + [name])}\\fR(1).",
                ]
    return "\n".join(lines) + "\n"


def _esc(text: str) -> str:
    """roff: escape backslashes and hyphens, keep lines from starting with a control character."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in out.split("\n"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else TARGET)
