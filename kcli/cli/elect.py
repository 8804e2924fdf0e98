"""`kcli elect`: preferred or unclean leader elections, as kafka-leader-election.sh, with a dry run."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcli.cli.admin import DEFAULT_BOOTSTRAP, write_json_lines
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from ops.elect import AdminConfig, ElectionReport, ElectionType, TopicPartition

OUTPUT = typer.Option(
    Output.text, "--output", "-o", help="Kafka's report lines, or one JSON object per partition."
)


@app.command("elect")
def elect(
    election_type: str = typer.Option(
        None,
        "--election-type",
        metavar="preferred|unclean",
        help="preferred: the first replica of each partition leads again, if it is alive and in the ISR; "
        "unclean: a partition without a leader gets one, from the ISR if it can, else an out-of-sync "
        "replica (records may be lost). Required.",
        show_default=False,
    ),
    topic: str = typer.Option(
        None,
        "--topic",
        help="The topic of the one partition to elect for (with --partition).",
        show_default=False,
    ),
    partition: int = typer.Option(
        None, "--partition", help="The partition of --topic to elect for.", show_default=False
    ),
    all_topic_partitions: bool = typer.Option(
        False,
        "--all-topic-partitions",
        help="Every partition of the cluster; the report names only those the controller elected for or "
        "failed on (as Kafka's tool; --dry-run lists every partition).",
    ),
    path_to_json_file: Path = typer.Option(
        None,
        "--path-to-json-file",
        metavar="FILE",
        help='The partitions, as kafka-leader-election.sh reads them: {"partitions": [{"topic": "foo", '
        '"partition": 1}, ...]}; beyond it, an empty list is refused.',
        show_default=False,
    ),
    bootstrap: str = typer.Option(
        None,
        "--bootstrap-server",
        "-b",
        metavar="HOST:PORT[,...]",
        help=f"Brokers to bootstrap from [default: the admin config's bootstrap.servers, else {DEFAULT_BOOTSTRAP}].",
        show_default=False,
    ),
    admin_config: Path = typer.Option(
        None,
        "--admin.config",
        "--command-config",
        metavar="FILE",
        help="Admin client properties, read as every command's --command-config: security.protocol, "
        "ssl.*, sasl.*, client.id, request.timeout.ms, default.api.timeout.ms, bootstrap.servers.",
        show_default=False,
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Show what would change, predicted from Metadata (leader now -> leader after); send no election.",
    ),
    output: Output = OUTPUT,
) -> None:
    """Elect partition leaders with ElectLeaders, as kafka-leader-election.sh.

    Give one of --topic with --partition, --all-topic-partitions or --path-to-json-file. The report
    has Kafka's lines: the partitions elected, those whose valid replica already leads, and one line
    per failure with its error. Exit status 1 when an election failed (or, with --dry-run, would fail);
    2 for bad arguments or a bad file, told in one sentence before anything is sent.
    """
    from ops.elect import load_admin_config

    kind, partitions = _validated(election_type, topic, partition, all_topic_partitions, path_to_json_file)
    config = load_admin_config(admin_config) if admin_config is not None else None
    if config is not None and config.ignored:
        print(
            f"kcli: warning: {admin_config}: {', '.join(config.ignored)} not used by this command.",
            file=sys.stderr,
        )
    report = _run(bootstrap, config, kind, partitions, dry_run)
    if output is Output.json:
        write_json_lines(report.to_json())
    else:
        for line in report.lines():
            print(line)
    failed = len(report.failed)
    if failed:
        would = "would not be" if dry_run else "could not be"
        raise KcliError(f"{failed} replica(s) {would} elected.", exit_code=1)


def _validated(
    election_type: str | None,
    topic: str | None,
    partition: int | None,
    all_topic_partitions: bool,
    path_to_json_file: Path | None,
) -> tuple[ElectionType, list[TopicPartition] | None]:
    """LeaderElectionCommandOptions.validate, in its order and words; then the type and the file."""
    from ops.elect import TopicPartition, load_election_json, parse_election_type

    if election_type is None:
        raise KcliError("Missing required option(s): election-type.")
    chosen = [topic is not None, all_topic_partitions, path_to_json_file is not None]
    if sum(chosen) != 1:
        raise KcliError(
            "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file."
        )
    if topic is not None and partition is None:
        raise KcliError("Missing required option(s): partition.")
    if topic is None and partition is not None:
        raise KcliError("Option partition is only allowed if topic is used.")
    kind = parse_election_type(election_type)
    if path_to_json_file is not None:
        return kind, load_election_json(path_to_json_file)
    if topic is not None:
        assert partition is not None
        return kind, [TopicPartition(topic, partition)]
    return kind, None


def _run(
    bootstrap: str | None,
    config: AdminConfig | None,
    kind: ElectionType,
    partitions: list[TopicPartition] | None,
    dry_run: bool,
) -> ElectionReport:
    from kcli.cluster import Cluster
    from ops.elect import AdminConfig, ElectionRequestFailed, elect_leaders, plan_elections

    config = config or AdminConfig()
    servers = bootstrap or config.bootstrap_servers or DEFAULT_BOOTSTRAP

    async def main() -> ElectionReport:
        async with await Cluster.connect(
            servers,
            client_id=config.client_id,
            request_timeout=config.request_timeout_s,
            security=config.security,
            connect_timeout=config.connect_timeout_s,
        ) as cluster:
            if dry_run:
                return await plan_elections(cluster, kind, partitions)
            return await elect_leaders(cluster, kind, partitions, timeout_s=config.api_timeout_s)

    try:
        return asyncio.run(main())
    except ElectionRequestFailed as exc:
        if exc.report_line is not None:
            print(exc.report_line)  # on stdout, as the Java tool prints it
        raise
