"""Client quota entities and keys, as Kafka's ClientQuotaEntity and QuotaConfig define them: the
controller checks them, the broker's quota managers look them up, `kcli configs` sends them.

An entity is a set of (entity type, name) pairs, a None name being the type's default: users,
client ids, users and client ids together, or IP addresses. Each kind takes its own keys; the byte
rates are integral (LONG), the request share and mutation rate are fractional (DOUBLE).
"""

from __future__ import annotations

from collections.abc import Iterable

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
IP_CONNECTION_RATE = "connection_creation_rate"

USER_AND_CLIENT_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "long",
    CONSUMER_BYTE_RATE: "long",
    REQUEST_PERCENTAGE: "double",
    CONTROLLER_MUTATION_RATE: "double",
}
"""QuotaConfig.userAndClientQuotaConfigs: key -> ConfigDef type."""
IP_KEYS: dict[str, str] = {IP_CONNECTION_RATE: "int"}
"""QuotaConfig.ipConfigs."""

_MAX = {"short": 2**15 - 1, "int": 2**31 - 1, "long": 2**63 - 1}
_ARTICLE = {"short": "a SHORT", "int": "an INT", "long": "a LONG"}

QuotaEntity = tuple[tuple[str, str | None], ...]
"""(entity type, name or None for the default) pairs, sorted by type: one image key per entity."""


def quota_entity(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def describe_entity(entity: QuotaEntity) -> str:
    """ClientQuotaEntity.toString-like text for messages: "ClientQuotaEntity(entries={user=alice})"."""
    inner = ", ".join(f"{kind}={name}" for kind, name in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def valid_keys(entity: dict[str, str | None]) -> dict[str, str] | str:
    """ClientQuotaControlManager.configKeysForEntityType: the keys `entity` takes, or why it is invalid."""
    has_ip = IP in entity
    if has_ip:
        if USER in entity or CLIENT_ID in entity:
            # Kafka's sentence, missing space included.
            return "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        if not is_valid_ip(entity[IP]):
            return f"{entity[IP]} is not a valid IP or resolvable host."
        return IP_KEYS
    if USER in entity or CLIENT_ID in entity:
        return USER_AND_CLIENT_KEYS
    return "Invalid empty client quota entity"


def value_error(keys: dict[str, str], key: str, value: float) -> str | None:
    """ClientQuotaControlManager.validateQuotaKeyValue: None, or the INVALID_REQUEST sentence."""
    kind = keys.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if value <= 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == "double":
        return None
    if value > _MAX[kind]:
        return f"Proposed value for {key} is too large for {_ARTICLE[kind]}."
    if abs(value % 1.0) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def is_valid_ip(host: str | None) -> bool:
    """InetAddress.getByName succeeds: a literal address, or a name that resolves."""
    if host is None:
        return True
    import ipaddress
    import socket

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None)
        return True
    except (OSError, UnicodeError):
        return False
