"""`kcli quorum`: kafka-metadata-quorum.sh's add-controller and remove-controller (KIP-853).

As Kafka's MetadataQuorumCommand: --bootstrap-server (a broker, which forwards the request to the
active controller) or --bootstrap-controller (the request goes to the active controller), exactly one;
add-controller reads the joining controller's own configuration (--command-config): its node.id, the
directory.id of its metadata log dir's meta.properties and its advertised controller listeners.
describe --status / --replication prints what `kcli cluster status` prints of the quorum.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from formats.checkpoints import uuid_to_base64
from kcli.cli.app import app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from ops.quorum import ClusterStatus

quorum_app = typer.Typer(
    help="Add or remove controllers of a dynamic KRaft quorum (kafka-metadata-quorum.sh).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(quorum_app, name="quorum")


@quorum_app.callback()
def connection(
    ctx: typer.Context,
    bootstrap_server: str | None = typer.Option(
        None,
        "--bootstrap-server",
        help="A comma-separated list of host:port pairs to use for establishing the connection to the "
        "Kafka cluster.",
        show_default=False,
    ),
    bootstrap_controller: str | None = typer.Option(
        None,
        "--bootstrap-controller",
        help="A comma-separated list of host:port pairs to use for establishing the connection to the "
        "Kafka controllers.",
        show_default=False,
    ),
    command_config: Path | None = typer.Option(
        None,
        "--command-config",
        metavar="FILE",
        help="Kafka client properties (security.protocol, ssl.*, sasl.*, client.id, ...; see `kcli topics "
        "list --help`); for add-controller, the joining controller's own configuration, whose client "
        "settings are used the same way and whose broker settings are skipped.",
        show_default=False,
    ),
) -> None:
    """Connection options, given before the command as kafka-metadata-quorum.sh takes them."""
    ctx.obj = (bootstrap_server, bootstrap_controller, command_config)


def _target(ctx: typer.Context) -> tuple[str, bool, Path | None]:
    server, controller, config = ctx.obj
    if server and controller:
        raise KcliError("argument --bootstrap-controller: not allowed with argument --bootstrap-server")
    if not server and not controller:
        raise KcliError("one of the arguments --bootstrap-server --bootstrap-controller is required")
    return (controller or server), bool(controller), config


@quorum_app.command("add-controller")
def add_controller(
    ctx: typer.Context,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="True if we should print what would be done, but not do it."
    ),
) -> None:
    """Add a controller to the KRaft controller cluster: the one --command-config configures."""
    from kcli.cli.admin import client_config, run_on_cluster
    from ops.quorum import add_raft_voter, controller_identity

    bootstrap, controllers, config = _target(ctx)
    if config is None:
        raise KcliError(
            "You must supply the configuration file of the controller you are adding when using add-controller."
        )
    node_id, directory_id, endpoints = controller_identity(config)
    if not dry_run:
        run_on_cluster(
            bootstrap,
            lambda cluster: add_raft_voter(cluster, node_id, directory_id, endpoints),
            config=client_config(config, role="server"),
            controllers=controllers,
        )
    from formats.checkpoints import uuid_to_base64

    shown = ", ".join(f"{n}://{f'[{h}]' if ':' in h else h}:{p}" for n, h, p in endpoints)
    typer.echo(
        f"{'DRY RUN of adding' if dry_run else 'Added'} controller {node_id} with directory id "
        f"{uuid_to_base64(directory_id)} and endpoints: {shown}"
    )


@quorum_app.command("remove-controller")
def remove_controller(
    ctx: typer.Context,
    controller_id: int = typer.Option(
        ..., "--controller-id", "-i", help="The id of the controller to remove.", show_default=False
    ),
    controller_directory_id: str = typer.Option(
        ...,
        "--controller-directory-id",
        "-d",
        help="The directory ID of the controller to remove.",
        show_default=False,
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="True if we should print what would be done, but not do it."
    ),
) -> None:
    """Remove a controller from the KRaft controller cluster."""
    from formats.checkpoints import uuid_from_base64
    from formats.errors import CheckpointError
    from kcli.cli.admin import run_on_cluster
    from ops.quorum import remove_raft_voter

    bootstrap, controllers, config = _target(ctx)
    if controller_id < 0:
        raise KcliError(f"Invalid negative --controller-id: {controller_id}")
    try:
        directory_id = uuid_from_base64(controller_directory_id)
    except CheckpointError as exc:
        raise KcliError(f"Failed to parse --controller-directory-id: {exc}") from None
    if not dry_run:
        run_on_cluster(
            bootstrap,
            lambda cluster: remove_raft_voter(cluster, controller_id, directory_id),
            config=config,
            controllers=controllers,
        )
    verb = "DRY RUN of removing " if dry_run else "Removed "
    typer.echo(f"{verb} KRaft controller {controller_id} with directory id {controller_directory_id}")


@quorum_app.command("describe")
def describe(
    ctx: typer.Context,
    status: bool = typer.Option(
        False, "--status", help="A summary of the quorum: leader, epoch, high watermark, voters, observers."
    ),
    replication: bool = typer.Option(
        False, "--replication", help="A description of the metadata quorum's replicas and their lag."
    ),
    human_readable: bool = typer.Option(
        False, "--human-readable", help="With --replication: fetch and catch-up times as 'N ms ago'."
    ),
) -> None:
    """Describe the metadata quorum (its leader, epoch, voters and observers), as `kcli cluster status` does."""
    from kcli.cli.admin import run_on_cluster
    from kcli.cli.cluster import status_lines
    from ops.quorum import describe_cluster_status

    bootstrap, _, config = _target(ctx)
    if status and replication:
        raise KcliError("Only one of --status or --replication should be specified with describe sub-command")
    if not status and not replication:
        raise KcliError("One of --status or --replication must be specified with describe sub-command")
    if human_readable and not replication:
        raise KcliError("The option --human-readable is only supported along with --replication")
    result = run_on_cluster(bootstrap, describe_cluster_status, config=config)
    typer.echo(status_lines(result) if status else replication_rows(result, human_readable), nl=False)


def replication_rows(result: ClusterStatus, human_readable: bool) -> str:
    """MetadataQuorumCommand.handleDescribeReplication: the leader, the other voters, the observers; each
    cell padded to its column and followed by a tab (ToolsUtils.prettyPrintTable); timestamps in epoch
    milliseconds, or "N ms ago" with --human-readable; -1 where a replica has none."""
    now = int(time.time() * 1000)

    def when(timestamp_ms: int) -> str:
        if timestamp_ms < 0:
            return "-1"
        return f"{max(now - timestamp_ms, 0)} ms ago" if human_readable else str(timestamp_ms)

    leader = [r for r in result.replicas if r.node_id == result.leader_id and r.is_voter]
    followers = [r for r in result.replicas if r.is_voter and r.node_id != result.leader_id]
    observers = [r for r in result.replicas if not r.is_voter]
    leader_end = leader[0].log_end_offset if leader else 0
    header = [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    rows = [
        [
            str(r.node_id),
            uuid_to_base64(r.directory_id),
            str(r.log_end_offset),
            str(leader_end - r.log_end_offset),
            when(r.last_fetch_ms),
            when(r.last_caught_up_ms),
            status,
        ]
        for group, status in ((leader, "Leader"), (followers, "Follower"), (observers, "Observer"))
        for r in group
    ]
    from kcli.cli.admin import tab_table

    return tab_table(header, rows)
