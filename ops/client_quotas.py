"""Client quotas as kafka-configs.sh handles them (--entity-type users / clients / ips, KIP-546).

DescribeClientQuotas and AlterClientQuotas, with the entity given as (type, name) pairs where a None
name is the type's default; kafka-configs.sh's lines come from here too. Both work against Apache
Kafka as well as kcli's broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.protocol.messages import build, nested_type
from kcli.quota_config import CLIENT_ID, IP, IP_KEYS, USER, USER_AND_CLIENT_KEYS

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
MATCH_TYPE_EXACT = 0
MATCH_TYPE_DEFAULT = 1
MATCH_TYPE_SPECIFIED = 2

ENTITY_TYPE_OF = {"users": USER, "clients": CLIENT_ID, "ips": IP}
"""kafka-configs.sh's --entity-type -> ClientQuotaEntity type."""
_LABELS = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}

Entity = tuple[tuple[str, str | None], ...]


class QuotaError(KcliError):
    """A quota the cluster refused to describe or change; the sentence carries its reason."""


@dataclass(frozen=True, slots=True)
class EntityQuotas:
    """One entity's quotas as DescribeClientQuotas tells them."""

    entity: Entity
    values: tuple[tuple[str, float], ...]

    def describe_line(self) -> str:
        """kafka-configs.sh --describe's line: user first, then client id, then ip."""
        names = dict(self.entity)
        parts = [
            f"{_LABELS[kind]} '{names[kind]}'" if names[kind] is not None else f"the default {_LABELS[kind]}"
            for kind in (USER, CLIENT_ID, IP)
            if kind in names
        ]
        values = ", ".join(f"{key}={java_double(value)}" for key, value in self.values)
        return f"Quota configs for {', '.join(parts)} are {values}"

    def to_json(self) -> dict[str, object]:
        return {
            "entity": [{"entity_type": kind, "entity_name": name} for kind, name in self.entity],
            "quotas": dict(self.values),
        }


def java_double(value: float) -> str:
    """Java's Double.toString, as kafka-configs.sh prints quota values: 1024.0, 1.0E7, 0.5."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    mantissa = text[0] + "." + (text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{len(text) - 1 + int(exponent)}"


async def describe_client_quotas(
    cluster: Cluster, components: Sequence[tuple[str, str | None, bool]], *, strict: bool = True
) -> list[EntityQuotas]:
    """Entities matching the filter: (entity type, name, default?) each; a None name without default
    matches any name of the type (ClientQuotaFilter.containsOnly when strict, as kafka-configs.sh)."""
    client = cluster.bootstrap
    cls = client.request_type(DESCRIBE_CLIENT_QUOTAS)
    component_cls = nested_type(cls, "ComponentData")
    parts = []
    for kind, name, default in components:
        match_type = (
            MATCH_TYPE_DEFAULT if default else MATCH_TYPE_EXACT if name is not None else MATCH_TYPE_SPECIFIED
        )
        parts.append(component_cls(entity_type=kind, match_type=match_type, match=name))
    response = await client.send(build(cls, components=tuple(parts), strict=strict))
    if response.error_code != ErrorCode.none:
        raise _refused("describe client quotas", response)
    return sorted(
        (
            EntityQuotas(
                tuple((e.entity_type, e.entity_name) for e in entry.entity),
                tuple(sorted((v.key, float(v.value)) for v in entry.values)),
            )
            for entry in response.entries or ()
        ),
        key=lambda q: [(k, n is not None, n or "") for k, n in q.entity],
    )


def check_quota_configs(
    configs: Mapping[str, str], deletions: Iterable[str], entity_type: str
) -> dict[str, float]:
    """--add-config values as numbers; a key that is not a quota is refused with kafka-configs.sh's
    sentence (users also take SCRAM mechanisms, which the caller has taken out)."""
    allowed = IP_KEYS if entity_type == "ips" else USER_AND_CLIENT_KEYS
    unknown = [k for k in (*configs, *deletions) if k not in allowed]
    if unknown:
        what = {"users": "quota and SCRAM credential configs", "ips": "connection quota configs"}.get(
            entity_type, "quota configs"
        )
        raise QuotaError(
            f"Only {what} can be added for '{entity_type}' using --bootstrap-server. "
            f"Unexpected config names: {','.join(unknown)}"
        )
    values = {}
    for key, text in configs.items():
        try:
            values[key] = float(text)
        except ValueError:
            raise QuotaError(f"Cannot parse quota configuration value for {key}: {text}") from None
    return values


async def alter_client_quotas(
    cluster: Cluster,
    entity: Entity,
    *,
    set_quotas: Mapping[str, float] | None = None,
    delete_quotas: Iterable[str] = (),
    validate_only: bool = False,
) -> None:
    """Set and remove quota keys of one entity with one AlterClientQuotas; a key to remove that is not
    set is refused first, as kafka-configs.sh does ("Invalid config(s)")."""
    set_quotas = dict(set_quotas or {})
    delete_quotas = list(dict.fromkeys(delete_quotas))
    if delete_quotas:
        current = await describe_client_quotas(cluster, [(k, n, n is None) for k, n in entity])
        present = {key for q in current for key, _ in q.values}
        missing = [key for key in delete_quotas if key not in present]
        if missing:
            raise QuotaError(f"Invalid config(s): {','.join(missing)}")
    client = await cluster.least_loaded_or_active_controller()
    cls = client.request_type(ALTER_CLIENT_QUOTAS)
    entry_cls = nested_type(cls, "EntryData")
    entity_cls = nested_type(cls, "EntityData")
    op_cls = nested_type(cls, "OpData")
    ops = [build(op_cls, key=k, value=v, remove=False) for k, v in set_quotas.items()]
    ops += [build(op_cls, key=k, value=0.0, remove=True) for k in delete_quotas]
    entry = build(
        entry_cls,
        entity=tuple(entity_cls(entity_type=k, entity_name=n) for k, n in entity),
        ops=tuple(ops),
    )
    response = await client.send(build(cls, entries=(entry,), validate_only=validate_only))
    for result in response.entries:
        if result.error_code != ErrorCode.none:
            raise _refused("alter client quotas", result)


def _refused(what: str, answer: Any) -> QuotaError:
    reason = answer.error_message or ErrorCode(answer.error_code).name.upper()
    return QuotaError(f"cannot {what}: {reason.rstrip('.')}.")
