"""Raw strings into values: properties files and `key=value` overrides, the parser of each Kafka
type, the validators the tables name, and one property's parse and check (Kafka's ConfigDef)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from formats.checkpoints import parse_java_properties
from formats.errors import CheckpointError
from kcli.config.types import ConfigError, ConfigKey, Validator


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a `server.properties` file (Java properties syntax) into raw strings."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read config file {path}: it is not UTF-8 text.") from None
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise ConfigError(f"cannot read config file {path}: {reason}.") from None
    return parse_properties(text, source=str(path))


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """Parse Java properties text (comments, `=`/`:`/space separators, continuations, escapes)."""
    try:
        return parse_java_properties(text)
    except CheckpointError as exc:
        raise ConfigError(f"cannot parse {source}: {str(exc).rstrip('.')}.") from None


def parse_override(item: str) -> tuple[str, str]:
    """`key=value` from the command line; the value may be empty or contain `=`."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} is not of the form key=value.")
    return key.strip(), value.strip()


def parse_value(
    table: Mapping[str, ConfigKey], key: str, raw: str, *, source: str = "configuration"
) -> object:
    """Parse one raw string for `key` per its type and validator; raise ConfigError otherwise."""
    spec = table.get(key)
    if spec is None:
        raise ConfigError(unknown_key_message(table, key, source))
    try:
        value = PARSERS[spec.type](raw.strip(), key)
    except ValueError as exc:
        raise ConfigError(f"invalid value {raw.strip()!r} for configuration {key}: {exc}.") from None
    if value is not None and spec.validator is not None:
        reason = spec.validator(value)
        if reason is not None:
            raise ConfigError(f"invalid value {raw.strip()!r} for configuration {key}: {reason}.")
    return value


def unknown_key_message(table: Mapping[str, ConfigKey], key: str, source: str, where: str = "") -> str:
    candidates = difflib.get_close_matches(key, list(table), n=1, cutoff=0.6)
    hint = f"; did you mean {candidates[0]!r}?" if candidates else "."
    return f"unknown {source} key {key!r}{' ' + where if where else ''}{hint}"


def _parse_int(bits: int) -> Callable[[str, str], int | None]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def parse(text: str, key: str) -> int | None:
        if text == "" and _NULLABLE_NUMBERS.get(key, False):
            return None
        try:
            value = int(text, 10)
        except ValueError:
            raise ValueError("expected an integer") from None
        if not low <= value <= high:
            raise ValueError(f"out of range for a {bits}-bit integer")
        return value

    return parse


def _parse_double(text: str, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("expected a number") from None


def _parse_boolean(text: str, key: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError("expected true or false")


def _parse_string(text: str, key: str) -> str | None:
    return text


def parse_list(text: str, key: str) -> list[str]:
    if text == "":
        return []
    return [item.strip() for item in text.split(",")]


# kcli.config.listeners adds "listeners" and "protocol_map".
PARSERS: dict[str, Callable[[str, str], object]] = {
    "short": _parse_int(16),
    "int": _parse_int(32),
    "long": _parse_int(64),
    "double": _parse_double,
    "boolean": _parse_boolean,
    "string": _parse_string,
    "password": _parse_string,
    "class": _parse_string,
    "list": parse_list,
}

# Properties whose Kafka default is null: an empty value means "unset" rather than a parse error.
_NULLABLE_NUMBERS = {
    "log.roll.ms": True,
    "log.roll.jitter.ms": True,
    "log.retention.ms": True,
    "log.retention.minutes": True,
    "log.flush.interval.ms": True,
}


def at_least(minimum: float) -> Validator:
    def check(value: object) -> str | None:
        return None if value >= minimum else f"value must be at least {minimum}"  # type: ignore[operator]

    return check


def between(low: float, high: float) -> Validator:
    def check(value: object) -> str | None:
        if low <= value <= high:  # type: ignore[operator]
            return None
        return f"value must be between {low} and {high}"

    return check


def one_of(*choices: str, case_sensitive: bool = True) -> Validator:
    def check(value: object) -> str | None:
        candidate = value if case_sensitive else str(value).lower()
        allowed = choices if case_sensitive else tuple(c.lower() for c in choices)
        return None if candidate in allowed else f"value must be one of {', '.join(choices)}"

    return check


def list_of(*choices: str) -> Validator:
    def check(value: object) -> str | None:
        bad = [item for item in value if item not in choices]  # type: ignore[attr-defined]
        if not value:
            return f"value must name at least one of {', '.join(choices)}"
        return None if not bad else f"{bad[0]!r} is not one of {', '.join(choices)}"

    return check


def rebalance_protocols(value: object) -> str | None:
    """`group.coordinator.rebalance.protocols`: Kafka's names (its ValidList of group types), classic
    always on (KafkaConfig refuses to turn it off), and only the protocols kcli runs."""
    names = list(value)  # type: ignore[call-overload]
    unknown = [n for n in names if n not in ("classic", "consumer", "share", "streams")]
    if unknown:
        return f"{unknown[0]!r} is not one of classic, consumer, share, streams"
    if "classic" not in names:
        return "Disabling the 'classic' protocol is not supported"
    unsupported = [n for n in names if n in ("share", "streams")]
    if unsupported:
        return f"kcli does not run {unsupported[0]} groups; the protocols it runs are classic and consumer"
    return None


def throttled_replica_list(name: str) -> Validator:
    """Kafka's ThrottledReplicaListValidator: `*`, or `partition:broker` items (empty ones allowed)."""

    def check(value: object) -> str | None:
        items = [str(item).strip() for item in value]  # type: ignore[attr-defined]
        if all(_THROTTLED_REPLICA.fullmatch(item) for item in items) or "".join(items) == "*":
            return None
        return (
            f"{name} must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )

    return check


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def compression_level(low: int, high: int, extra: int | None = None) -> Validator:
    def check(value: object) -> str | None:
        if low <= value <= high or value == extra:  # type: ignore[operator]
            return None
        tail = f" or equal to {extra}" if extra is not None else ""
        return f"value must be between {low} and {high}{tail}"

    return check
