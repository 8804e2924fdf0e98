"""The checks every option of a kind gets, applied once to the whole command tree (`harden`), so a
command added tomorrow has them too.

- An integer is refused beyond the protocol field it ends up in: `struct` would raise deep inside the
  client (a traceback) or, worse, a value would be cut. Most of Kafka's integers are int32; the
  options named in FIELDS go to an int16 or int64 field, or are TCP ports.
- A float (every one is a duration or an interval) must be finite and not negative: `nan` slips
  through click's range checks (every comparison with it is false) and `inf` waits forever.
- A bootstrap list is checked as host:port entries before anything else runs.

The error is click's usage error naming the option, the value and the range; help texts are unchanged.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import click

INT16 = ("a Kafka int16", -(1 << 15), (1 << 15) - 1)
INT32 = ("a Kafka int32", -(1 << 31), (1 << 31) - 1)
INT64 = ("a Kafka int64", -(1 << 63), (1 << 63) - 1)
PORT = ("a TCP port", 0, 65535)

FIELDS: dict[str, tuple[str, int, int]] = {
    "--producer-epoch": INT16,
    "--replication-factor": INT16,
    "--producer-id": INT64,
    "--start-offset": INT64,
    "--from-offset": INT64,
    "--to-offset": INT64,
    "--shift-by": INT64,
    "--throttle": INT64,
    "--replica-alter-log-dirs-throttle": INT64,
    "--duration-filter": INT64,
    "--timeout": INT64,
    "--window-ms": INT64,
    "--window-offsets": INT64,
    "--port": PORT,
}
"""Integer options by name whose Kafka field is not an int32 (the same name means the same field in
every command, as in Kafka's tools)."""

BOOTSTRAP_OPTIONS = frozenset({"--bootstrap-server", "--bootstrap-controller"})


def harden(command: click.Command) -> click.Command:
    """Give every parameter of `command` and its subcommands the checks of its kind; returns it."""
    for param in command.params:
        _harden_param(param)
    for sub in getattr(command, "commands", {}).values():
        harden(sub)
    return command


def field_of(param: click.Parameter) -> tuple[str, int, int]:
    """The integer field a parameter's value goes to (int32 unless FIELDS says otherwise)."""
    for opt in param.opts:
        if opt in FIELDS:
            return FIELDS[opt]
    return INT32


def _harden_param(param: click.Parameter) -> None:
    kind = param.type
    if isinstance(kind, _Checked):
        return
    if isinstance(kind, click.types.IntParamType):
        param.type = _with(kind, _IntField, field=field_of(param))
    elif isinstance(kind, click.types.FloatParamType):
        param.type = _with(kind, _FiniteDuration)
    elif isinstance(kind, click.types.StringParamType) and BOOTSTRAP_OPTIONS.intersection(param.opts):
        param.type = _with(kind, _Bootstrap)


class _Checked:
    """Marks a parameter type `harden` already extended, so hardening a tree twice checks once."""


class _IntField(_Checked):
    """Beyond its field, struct raises deep in the client (or a value would be cut)."""

    field: tuple[str, int, int]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)  # type: ignore[misc]
        name, low, high = self.field
        if number is not None and not low <= number <= high:
            self.fail(f"{number} is beyond {name} ({low} to {high}).", param, ctx)  # type: ignore[attr-defined]
        return number


class _FiniteDuration(_Checked):
    """nan passes every range check (each comparison is false); inf waits forever."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)  # type: ignore[misc]
        if number is not None and not math.isfinite(number):
            self.fail(f"{value} is not a finite number of seconds.", param, ctx)  # type: ignore[attr-defined]
        if number is not None and number < 0:
            self.fail(f"{value} is negative; give a number of seconds, 0 or more.", param, ctx)  # type: ignore[attr-defined]
        return number


class _Bootstrap(_Checked):
    """Checked while parsing, so nothing runs (or reads a file) before a bad address is refused."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from kcli.client import ClientError, split_bootstrap  # not at import: dump-segment starts without it

        text = super().convert(value, param, ctx)  # type: ignore[misc]
        if text is not None:
            try:
                split_bootstrap(text)
            except ClientError as exc:
                self.fail(str(exc), param, ctx)  # type: ignore[attr-defined]
        return text


_CLASSES: dict[tuple[type, type], type] = {}


def _with(kind: click.ParamType, check: type, **attributes: Any) -> click.ParamType:
    """A copy of `kind` whose class also runs `check` after its own conversion: the same name, range
    and help as before (typer renders a range from the class), one more refusal."""
    cls = _CLASSES.get((type(kind), check))
    if cls is None:
        cls = _CLASSES[(type(kind), check)] = type(type(kind).__name__, (check, type(kind)), {})
    extended = cls.__new__(cls)
    extended.__dict__.update(copy.copy(kind.__dict__))
    for name, value in attributes.items():
        setattr(extended, name, value)
    return extended
