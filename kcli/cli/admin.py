"""What the commands that talk to a cluster share: the bootstrap and output options, the event loop, tables."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import typer

from kcli.cli.app import Output
from kcli.errors import KcliError

if TYPE_CHECKING:
    from kcli.cluster import Cluster
    from kcli.security import ClientSecurity
    from kcli.security.client_config import ClientConfig, Role

T = TypeVar("T")


DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP = typer.Option(
    None,
    "--bootstrap-server",
    "-b",
    metavar="HOST:PORT[,...]",
    help=f"Brokers to bootstrap from [default: --command-config's bootstrap.servers, else {DEFAULT_BOOTSTRAP}].",
    show_default=False,
)
BOOTSTRAP_CONTROLLER = typer.Option(
    None,
    "--bootstrap-controller",
    metavar="HOST:PORT[,...]",
    help="Controllers to bootstrap from instead of brokers (KIP-919): the request goes to the controllers.",
    show_default=False,
)
OUTPUT = typer.Option(Output.text, "--output", "-o", help="Aligned columns, or one JSON object per line.")
COMMAND_CONFIG = typer.Option(
    None,
    "--command-config",
    metavar="FILE",
    help="Kafka client properties, Kafka's or librdkafka's names: security.protocol, ssl.*, sasl.* "
    "(sasl.jaas.config), client.id, request.timeout.ms, bootstrap.servers. Settings kcli cannot honour "
    "(Kerberos, JKS stores, Java classes, unknown keys) are refused.",
    show_default=False,
)


def client_config(path: Path | None, *, role: Role = "admin") -> ClientConfig:
    """--command-config read (or the defaults), with a warning for producer or consumer settings the
    command does not use: a client.properties shared with applications often has them."""
    from kcli.security.client_config import DEFAULT, load_client_config

    if path is None:
        return DEFAULT
    config = load_client_config(path, role=role)
    if config.unused:
        print(f"kcli: warning: {path}: {', '.join(config.unused)} not used by this command.", file=sys.stderr)
    return config


def bootstrap_target(server: str | None, controller: str | None) -> tuple[str | None, bool]:
    """--bootstrap-server or --bootstrap-controller, never both (Kafka's initializeBootstrapProperties):
    the addresses and whether they are controllers."""
    if server and controller:
        raise KcliError("You cannot specify both --bootstrap-controller and --bootstrap-server.")
    return (controller, True) if controller else (server, False)


def run_on_cluster(
    bootstrap: str | None,
    work: Callable[[Cluster], Awaitable[T]],
    *,
    client_id: str = "kcli",
    security: ClientSecurity | None = None,
    config: ClientConfig | Path | None = None,
    controllers: bool = False,
) -> T:
    """Connect, run `work(cluster)` on a fresh event loop, close every connection; with `controllers`
    `bootstrap` names controllers (--bootstrap-controller).

    `config` (read from a path here) gives the security, client.id, request.timeout.ms and, when
    `bootstrap` is None, bootstrap.servers; `security` and `client_id` are for callers without one.
    """
    from kcli.cluster import CONNECT_TIMEOUT, Cluster
    from kcli.security import PLAINTEXT

    if config is None or isinstance(config, Path):
        config = client_config(config)
    servers = bootstrap or config.bootstrap_servers or DEFAULT_BOOTSTRAP

    async def main() -> T:
        async with await Cluster.connect(
            servers,
            client_id=config.client_id or client_id,
            request_timeout=config.timeout_s("request.timeout.ms", 30.0),
            security=security or config.security or PLAINTEXT,
            connect_timeout=config.timeout_s("socket.connection.setup.timeout.ms", CONNECT_TIMEOUT),
            controllers=controllers,
        ) as cluster:
            return await work(cluster)

    return asyncio.run(main())


YES = typer.Option(
    False,
    "--yes",
    "-y",
    help="Go on without asking when a regex matches topics it does not name (beyond Kafka's tool, which "
    "never asks); needed when stdin is not a terminal.",
)


def confirm_matches(verb: str, pattern: str, yes: bool) -> Callable[[list[str]], None]:
    """What ops calls before it changes topics a regex matched: ask on a terminal, else require --yes.

    Beyond kafka-topics.sh, which acts on every match at once: `-t '..'` deleting `t1` is a surprise
    nobody can undo.
    """
    from kcli.errors import KcliError

    def confirm(names: list[str]) -> None:
        if yes:
            return
        listed = ", ".join(names)
        if not sys.stdin.isatty():
            raise KcliError(
                f"--topic {pattern!r} is a regular expression that matches {listed}: give --yes to {verb} "
                f"{'it' if len(names) == 1 else 'them'} (stdin is not a terminal, so kcli cannot ask)."
            )
        print(f"--topic {pattern!r} matches {len(names)} topic(s):", file=sys.stderr)
        for name in names:
            print(f"  {name}", file=sys.stderr)
        if not typer.confirm(f"{verb.capitalize()} {'it' if len(names) == 1 else 'them'}?", err=True):
            raise KcliError(f"nothing done: the {verb} was not confirmed.", exit_code=1)

    return confirm


def table(header: list[str], rows: list[list[str]], *, gap: str = " ") -> str:
    """Left-aligned columns as wide as their widest cell, as Kafka's tools print them."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        gap.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    return "\n".join(lines) + "\n"


def tab_table(header: list[str], rows: list[list[str]]) -> str:
    """ToolsUtils.prettyPrintTable, as kafka-transactions.sh and kafka-metadata-quorum.sh print: each cell
    padded to its column's width and followed by a tab, trailing tab included."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "".join(
        "".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths, strict=True)) + "\n"
        for row in (header, *rows)
    )


def write_json_lines(items: Iterable[Any]) -> None:
    sys.stdout.write("".join(orjson.dumps(item).decode() + "\n" for item in items))
