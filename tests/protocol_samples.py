"""Sample protocol messages built from kio's schema classes, for tests and the broker fuzzer.

`sample_entity` fills every field of a message, with one element in every array, so that each nested
entity is on the wire; `non_nullable_paths` lists where the schema forbids null. Together they make a
request with one null where Kafka allows none (tests/test_broker_net.py) and a corpus covering every
request type the broker handles (tests/bench/fuzz_broker.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid

from kcli.protocol.messages import unwrap_optional


def sample_entity(entity_type: type, null_at: tuple[str, ...] = ()) -> typing.Any:
    """A kio entity with a value in every non-tagged field and one element in every array, except the
    field at the path `null_at` (field names from the top), which is None."""
    values: dict[str, object] = {}
    for f in dataclasses.fields(entity_type):
        if f.metadata.get("tag") is not None:
            continue  # tagged fields keep their defaults
        field_type, _ = unwrap_optional(f.type)
        on_path = bool(null_at) and f.name == null_at[0]
        rest = null_at[1:] if on_path else ()
        if on_path and not rest:
            values[f.name] = None
        elif typing.get_origin(field_type) is tuple:
            inner, _ = unwrap_optional(typing.get_args(field_type)[0])
            if dataclasses.is_dataclass(inner):
                values[f.name] = (sample_entity(inner, rest),)  # type: ignore[arg-type]
            else:
                values[f.name] = (_sample_value(f.metadata["kafka_type"]),)
        elif dataclasses.is_dataclass(field_type):
            values[f.name] = sample_entity(field_type, rest)  # type: ignore[arg-type]
        else:
            values[f.name] = _sample_value(f.metadata["kafka_type"])
    return entity_type(**values)


def non_nullable_paths(entity_type: type, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths to every non-tagged array, string and bytes field the schema does not let be null, in
    this entity and the entities inside it."""
    paths = []
    for f in dataclasses.fields(entity_type):
        if f.metadata.get("tag") is not None:
            continue
        field_type, optional = unwrap_optional(f.type)
        path = (*prefix, f.name)
        if typing.get_origin(field_type) is tuple:
            if not optional:
                paths.append(path)
            inner, _ = unwrap_optional(typing.get_args(field_type)[0])
            if dataclasses.is_dataclass(inner):
                paths += non_nullable_paths(inner, path)  # type: ignore[arg-type]
        elif dataclasses.is_dataclass(field_type):
            paths += non_nullable_paths(field_type, path)  # type: ignore[arg-type]
        elif f.metadata.get("kafka_type") in ("string", "bytes", "records") and not optional:
            paths.append(path)
    return paths


def _sample_value(kafka_type: str) -> object:
    return {
        "string": "s",
        "bytes": b"b",
        "records": b"",
        "bool": False,
        "uuid": uuid.UUID(int=0),
        "timedelta_i32": datetime.timedelta(0),
        "timedelta_i64": datetime.timedelta(0),
        "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
        "float64": 0.0,
    }.get(kafka_type, 0)
