"""The controller quorum's addresses: `controller.quorum.voters` and `controller.quorum.bootstrap.servers`
read as Kafka's QuorumConfig reads them."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kcli.config.types import ConfigError

# Kafka's Utils.getHost/getPort: an optional `scheme://`, then host (IPv6 in brackets or not), `:`, digits.
_HOST_PORT = re.compile(r"(?:[0-9a-zA-Z\-%._]*://)?\[?([0-9a-zA-Z\-%._:]*)]?:([0-9]+)")
_VOTERS_FORM = "Each entry should be in the form `{id}@{host}:{port}`."
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def parse_quorum_voters(entries: Iterable[str]) -> dict[int, tuple[str, int]]:
    """`controller.quorum.voters` entries `{id}@{host}:{port}` -> {id: (host, port)}, as Kafka's
    QuorumConfig.parseVoterConnections reads them, with its sentences for a malformed entry; a repeated
    id, which Kafka lets the last address win, is refused."""
    voters: dict[int, tuple[str, int]] = {}
    for entry in entries:
        parts = entry.split("@")
        while len(parts) > 1 and parts[-1] == "":  # Java's String.split drops trailing empty strings
            parts.pop()
        if len(parts) != 2:
            raise ConfigError(f"Invalid configuration value for controller.quorum.voters. {_VOTERS_FORM}")
        id_text, address = parts
        if not _JAVA_INT.fullmatch(id_text) or not -(2**31) <= int(id_text) < 2**31:
            raise ConfigError(f"Failed to parse voter ID as an integer from {id_text}.")
        match = _HOST_PORT.fullmatch(address)
        if match is None or not match.group(1):
            raise ConfigError(
                f"Failed to parse host name from entry {entry} for the configuration "
                f"controller.quorum.voters. {_VOTERS_FORM}"
            )
        port = int(match.group(2))
        if port > 65535:
            raise ConfigError(
                f"Failed to parse host port from entry {entry} for the configuration "
                f"controller.quorum.voters. {_VOTERS_FORM}"
            )
        if int(id_text) in voters:  # Kafka keeps the last address silently; two voters of one id is a typo
            raise ConfigError(
                f"controller.quorum.voters names node {int(id_text)} twice; each voter needs its own node id."
            )
        voters[int(id_text)] = (match.group(1), port)
    return voters


def parse_quorum_bootstrap_servers(entries: Iterable[str]) -> list[tuple[str, int]]:
    """`controller.quorum.bootstrap.servers` entries `{host}:{port}` -> [(host, port)], with the
    sentences of Kafka's QuorumConfig.parseBootstrapServer."""
    servers: list[tuple[str, int]] = []
    for entry in entries:
        match = _HOST_PORT.fullmatch(entry)
        what = "name" if match is None or not match.group(1) else "port"
        if what == "name" or int(match.group(2)) > 65535:  # type: ignore[union-attr]
            raise ConfigError(
                f"Failed to parse host {what} from {entry} for the configuration "
                'controller.quorum.bootstrap.servers. Each entry should be in the form "{host}:{port}".'
            )
        servers.append((match.group(1), int(match.group(2))))  # type: ignore[union-attr]
    return servers


def check_quorum_voters(value: object) -> str | None:
    parse_quorum_voters(value)  # type: ignore[arg-type]
    return None


def check_quorum_bootstrap_servers(value: object) -> str | None:
    parse_quorum_bootstrap_servers(value)  # type: ignore[arg-type]
    return None
