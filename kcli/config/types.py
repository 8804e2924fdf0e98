"""The shapes of a configuration: a property (`ConfigKey`), a topic property's broker synonym, the
error a bad one raises, and the time units the tables use."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kcli.errors import KcliError

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(KcliError):
    """A bad configuration key, value or file; exit code 2."""


Validator = Callable[[object], str | None]
"""Returns None when the value is acceptable, otherwise the reason (a clause, no full stop)."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One property: its Kafka type, parsed default (None = no default), validator and doc."""

    name: str
    type: str  # "int" | "long" | "short" | "double" | "boolean" | "string" | "list" | "password" | "class"
    default: object
    validator: Validator | None
    doc: str
    used: bool = True  # False: accepted so Kafka's own files load, but kcli does not act on it


@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker property that supplies a topic property's default, times `factor` (hours -> ms)."""

    name: str
    factor: int = 1


MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS


def config_table(rows: Iterable[tuple]) -> dict[str, ConfigKey]:
    table: dict[str, ConfigKey] = {}
    for row in rows:
        name, type_, default, validator, doc, *rest = row
        table[name] = ConfigKey(name, type_, default, validator, doc, *(rest or []))
    return table
