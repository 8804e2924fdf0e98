"""What the commands that talk to a cluster share: the bootstrap and output options, the event loop, tables."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import typer

from kcli.cli.app import Output

if TYPE_CHECKING:
    from kcli.cluster import Cluster
    from kcli.security import ClientSecurity

T = TypeVar("T")


BOOTSTRAP = typer.Option(
    "127.0.0.1:9092", "--bootstrap-server", "-b", metavar="HOST:PORT[,...]", help="Brokers to bootstrap from."
)
OUTPUT = typer.Option(Output.text, "--output", "-o", help="Aligned columns, or one JSON object per line.")


def run_on_cluster(
    bootstrap: str,
    work: Callable[[Cluster], Awaitable[T]],
    *,
    client_id: str = "kcli",
    security: ClientSecurity | None = None,
) -> T:
    """Connect, run `work(cluster)` on a fresh event loop, close every connection."""
    from kcli.cluster import Cluster
    from kcli.security import PLAINTEXT

    async def main() -> T:
        async with await Cluster.connect(
            bootstrap, client_id=client_id, security=security or PLAINTEXT
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
