"""`max.connections.per.ip.overrides`: Kafka's `host:count,host:count` map (Csv.parseCsvMap), parsed
here so the table can refuse a bad one with its sentence and the broker can read the counts."""

from __future__ import annotations


def parse_connection_overrides(raw: str) -> dict[str, int]:
    """{host: count}; the last colon splits an entry, so an IPv6 address keeps its own colons."""
    overrides: dict[str, int] = {}
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, colon, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not colon or not host:
            raise ValueError(f"{entry!r} is not host:count")
        try:
            value = int(count.strip())
        except ValueError:
            raise ValueError(f"the count of {host} is not a number") from None
        if value < 0:
            raise ValueError(f"the count of {host} is negative")
        overrides[host] = value
    return overrides


def check_connection_overrides(value: object) -> str | None:
    """The table's validator: None, or why the overrides cannot be read."""
    try:
        parse_connection_overrides(str(value))
    except ValueError as exc:
        return str(exc)
    return None
