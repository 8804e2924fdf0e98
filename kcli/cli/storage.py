"""`kcli storage`: kafka-storage.sh's random-uuid and format, for the nodes of a KRaft cluster."""

import time
from pathlib import Path

import typer

from kcli.cli.app import app

storage_app = typer.Typer(
    help="Format the log directories of a KRaft node (kafka-storage.sh).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(storage_app, name="storage")


@storage_app.command("random-uuid")
def random_uuid() -> None:
    """Print a new cluster id: a random UUID in Kafka's base64 form."""
    from kcli.storage import random_uuid as new_uuid

    typer.echo(new_uuid())


@storage_app.command("format")
def format_storage(
    config_file: Path = typer.Option(
        ..., "--config", "-c", help="The node's server.properties file.", show_default=False
    ),
    cluster_id: str = typer.Option(
        ...,
        "--cluster-id",
        "-t",
        help="The cluster id to use (kcli storage random-uuid).",
        show_default=False,
    ),
    ignore_formatted: bool = typer.Option(
        False, "--ignore-formatted", "-g", help="Skip directories already formatted instead of failing."
    ),
    no_initial_controllers: bool = typer.Option(
        False,
        "--no-initial-controllers",
        "-N",
        help="Used to initialize a server without a dynamic quorum topology (a controller or broker that "
        "joins a dynamic quorum later).",
    ),
    standalone: bool = typer.Option(
        False,
        "--standalone",
        "-s",
        help="Used to initialize a controller as a single-node dynamic quorum (KIP-853).",
    ),
    initial_controllers: str | None = typer.Option(
        None,
        "--initial-controllers",
        "-I",
        metavar="ID@HOST:PORT:DIRECTORY_ID,...",
        help="Used to initialize a server with a specific dynamic quorum topology; the same value must be "
        "used to format all nodes, e.g. 0@c0:9093:JEXY6aqzQY-32P5TStzaFg,1@c1:9093:MvDxzVmcRsaTz33bUuRU6A.",
        show_default=False,
    ),
    overrides: list[str] = typer.Option(
        [], "--override", metavar="KEY=VALUE", help="Set one broker property; repeatable; wins over --config."
    ),
    release_version: str | None = typer.Option(
        None,
        "--release-version",
        "-r",
        help="The release version to use for the initial feature settings, e.g. 4.1 or 4.0-IV1 "
        "(kcli writes 3.9-IV0 to 4.1-IV1); the default is 4.1-IV1, as Kafka 4.1's.",
        show_default=False,
    ),
    feature: list[str] = typer.Option(
        [],
        "--feature",
        "-f",
        metavar="FEATURE=LEVEL",
        help="The setting to use for a specific feature, e.g. eligible.leader.replicas.version=1; repeatable.",
    ),
    add_scram: list[str] = typer.Option(
        [],
        "--add-scram",
        "-S",
        metavar="MECHANISM=[K=V,...]",
        help="A SCRAM credential to start the cluster with, e.g. 'SCRAM-SHA-512=[name=alice,password=alice-secret]'; "
        "also iterations=N (4096-16384, default 4096), salt=BASE64 and saltedpassword=BASE64 (with salt=, "
        "instead of password=); repeatable.",
        show_default=False,
    ),
) -> None:
    """Write meta.properties and bootstrap.checkpoint into every log dir and the metadata log dir.

    The bootstrap.checkpoint holds the cluster's initial feature levels: metadata.version from
    --release-version, and each feature kcli implements at its default for that release unless
    --feature sets it (eligible.leader.replicas.version, KIP-966: 1 needs 4.0-IV1 or later and is the
    default from 4.1; group.version, KIP-848: 1 from 4.0; transaction.version, KIP-890: 2 bumps the
    producer epoch at the end of every transaction, the default from 4.0-IV2). Nothing is written when
    a feature level is refused, the configuration is not a KRaft one (process.roles), the cluster id
    is not a base64 UUID, an --add-scram argument is malformed, or a directory is already formatted
    (unless --ignore-formatted).

    --add-scram credentials go into bootstrap.checkpoint as UserScramCredentialRecords (salt, StoredKey,
    ServerKey and iterations; never the password), so the cluster starts with those users.

    A dynamic quorum (controller.quorum.bootstrap.servers, KIP-853) starts from --standalone (this
    controller is the one voter) or --initial-controllers: kraft.version 1, and the metadata log dir
    gets the bootstrap snapshot __cluster_metadata-0/00000000000000000000-0000000000.checkpoint with the
    KRaftVersion and Voters records; a voter's metadata dir takes its directory.id from them. Nodes
    that join later are formatted with --no-initial-controllers.
    """
    from kcli.config import BrokerConfig
    from kcli.features import FeatureError, metadata_version_from_string, parse_feature_argument
    from kcli.storage import StorageError
    from kcli.storage import format_storage as run_format

    given = [
        name
        for name, used in (
            ("--standalone/-s", standalone),
            ("--no-initial-controllers/-N", no_initial_controllers),
            ("--initial-controllers/-I", initial_controllers is not None),
        )
        if used
    ]
    if len(given) > 1:  # one mutually exclusive group in kafka-storage's parser
        raise StorageError(f"argument {given[1]}: not allowed with argument {given[0]}")
    config = BrokerConfig.load(config_file=config_file, overrides=overrides)
    try:
        release = None if release_version is None else metadata_version_from_string(release_version)
        features = dict(parse_feature_argument(text) for text in feature)
    except FeatureError as exc:
        raise StorageError(str(exc)) from None
    lines = run_format(
        config,
        cluster_id,
        metadata_version=release,
        features=features,
        ignore_formatted=ignore_formatted,
        no_initial_controllers=no_initial_controllers,
        standalone=standalone,
        initial_controllers=initial_controllers,
        add_scram=add_scram,
        now_ms=int(time.time() * 1000),
    )
    for line in lines:
        typer.echo(line)
