"""`kcli transactions`: list, describe, find-hanging and abort transactions (as kafka-transactions.sh)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import typer

from kcli.cli.admin import BOOTSTRAP, COMMAND_CONFIG, OUTPUT, run_on_cluster, tab_table
from kcli.cli.app import Output, app

if TYPE_CHECKING:
    pass

transactions_app = typer.Typer(
    help="Transactions: list, describe, find hanging ones, abort.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(transactions_app, name="transactions")

PRODUCER_HEADERS = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
]


@transactions_app.command("list")
def list_(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    duration_filter: int = typer.Option(
        -1, "--duration-filter", metavar="MS", help="Only transactions running longer than this (-1: all)."
    ),
    output: Output = OUTPUT,
) -> None:
    """Every transactional id, its coordinator, producer id and state (ListTransactions to every broker)."""
    from ops.transactions import list_transactions

    listings = run_on_cluster(
        bootstrap,
        lambda cluster: list_transactions(cluster, duration_ms=duration_filter),
        config=command_config,
    )
    rows = [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state] for t in listings]
    _render(output, ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)


@transactions_app.command("describe")
def describe(
    transactional_id: str = typer.Option(..., "--transactional-id", help="The transactional id to describe."),
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    output: Output = OUTPUT,
) -> int:
    """The state of one transactional id at its coordinator. Exit 1 when the coordinator does not know it."""
    import time

    from ops.transactions import describe_transaction

    d = run_on_cluster(
        bootstrap, lambda cluster: describe_transaction(cluster, transactional_id), config=command_config
    )
    if d is None:
        print(f"kcli: transactional id '{transactional_id}' does not exist.", file=sys.stderr)
        return 1
    # As kafka-transactions.sh: "None" for the start time and duration when no transaction is open.
    start, duration = "None", "None"
    if d.start_time_ms >= 0:
        start, duration = str(d.start_time_ms), str(int(time.time() * 1000) - d.start_time_ms)
    row = [
        str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
        str(d.timeout_ms), start, duration, ",".join(f"{t}-{p}" for t, p in d.partitions),
    ]  # fmt: skip
    headers = [
        "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
        "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
    ]  # fmt: skip
    _render(output, headers, [row])
    return 0


@transactions_app.command("find-hanging")
def find_hanging(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: str = typer.Option(None, "--topic", help="Search this topic.", show_default=False),
    partition: int = typer.Option(
        None, "--partition", help="Only this partition (needs --topic).", show_default=False
    ),
    broker_id: int = typer.Option(
        None,
        "--broker-id",
        help="Only partitions this broker leads (beyond Kafka's tool: a broker not in the metadata is an error).",
        show_default=False,
    ),
    max_transaction_timeout: int = typer.Option(
        15, "--max-transaction-timeout", metavar="MINUTES", help="Open longer than this counts as old."
    ),
    output: Output = OUTPUT,
) -> int:
    """Open transactions older than --max-transaction-timeout that their coordinator does not know.

    Exit 1 when some are found.
    """
    from ops.transactions import find_hanging as find

    hanging = run_on_cluster(
        bootstrap,
        lambda cluster: find(
            cluster,
            topic=topic,
            partition=partition,
            broker_id=broker_id,
            max_transaction_timeout_ms=max_transaction_timeout * 60_000,
        ),
        config=command_config,
    )
    _render_producers(output, hanging)
    return 1 if hanging else 0


@transactions_app.command("abort")
def abort(
    topic: str = typer.Option(..., "--topic", help="The partition's topic."),
    partition: int = typer.Option(..., "--partition", help="The partition to write the ABORT marker to."),
    start_offset: int = typer.Option(
        None, "--start-offset", help="The first offset of the open transaction to abort.", show_default=False
    ),
    producer_id: int = typer.Option(
        None, "--producer-id", show_default=False, help="Without --start-offset."
    ),
    producer_epoch: int = typer.Option(
        None, "--producer-epoch", show_default=False, help="Without --start-offset."
    ),
    coordinator_epoch: int = typer.Option(
        None, "--coordinator-epoch", show_default=False, help="Without --start-offset."
    ),
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    output: Output = OUTPUT,
) -> None:
    """Abort a hanging transaction on one partition (WriteTxnMarkers with an ABORT marker).

    As kafka-transactions.sh, --start-offset must be where an open transaction starts (DescribeProducers).
    Beyond it: a producer given by --producer-id must be one DescribeProducers lists with an open
    transaction on the partition, and --start-offset cannot be combined with the id options.
    """
    from ops.transactions import abort_transaction

    state = run_on_cluster(
        bootstrap,
        lambda cluster: abort_transaction(
            cluster,
            topic,
            partition,
            start_offset=start_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
        ),
        config=command_config,
    )
    _render_producers(output, [state])


def _render_producers(output: Output, states: Iterable[Any]) -> None:
    states = list(states)
    if output is Output.json:
        sys.stdout.write("".join(orjson.dumps(s.to_json()).decode() + "\n" for s in states))
        return
    rows = [
        [s.topic, str(s.partition), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
         str(s.current_txn_start_offset), str(s.last_timestamp)]
        for s in states
    ]  # fmt: skip
    _render(Output.text, PRODUCER_HEADERS, rows)


def _render(output: Output, headers: list[str], rows: list[list[str]]) -> None:
    if output is Output.json:
        sys.stdout.write(
            "".join(orjson.dumps(dict(zip(headers, row, strict=True))).decode() + "\n" for row in rows)
        )
        return
    sys.stdout.write(tab_table(headers, rows))
