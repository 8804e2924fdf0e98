"""Listeners: `NAME://host:port` entries, the listener-to-security-protocol map and Kafka's protocol ids."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kcli.config.values import PARSERS, parse_list


@dataclass(frozen=True, slots=True)
class Listener:
    """One entry of `listeners` / `advertised.listeners`: `NAME://host:port`."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9a-fA-F:.]+\]|[^:\[\]/]*):(-?\d+)$")


def parse_listeners(text: str) -> list[Listener]:
    """`PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9093` -> listeners; names are upper-cased as Kafka does."""
    listeners: list[Listener] = []
    for item in parse_list(text, "listeners"):
        match = _LISTENER.match(item)
        if match is None:
            raise ValueError(f"{item!r} is not of the form NAME://host:port")
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} in {item!r} is not between 0 and 65535")
        if any(existing.name == name for existing in listeners):
            raise ValueError(f"listener name {name} appears more than once")
        listeners.append(Listener(name, host, port))
    return listeners


def _parse_listener_value(text: str, key: str) -> list[Listener] | None:
    if text == "" and key == "advertised.listeners":
        return None
    return parse_listeners(text)


def _parse_protocol_map(text: str, key: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in parse_list(text, key):
        name, sep, protocol = item.partition(":")
        if not sep or not name or not protocol:
            raise ValueError(f"{item!r} is not of the form LISTENER_NAME:SECURITY_PROTOCOL")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


PARSERS["listeners"] = _parse_listener_value
PARSERS["protocol_map"] = _parse_protocol_map

DEFAULT_PROTOCOL_MAP = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
"""Kafka's SecurityProtocol ids, as BrokerRegistration and RegisterBrokerRecord carry them."""
