"""`kcli features`: describe and change a cluster's feature levels, as kafka-features.sh."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcli.cli.admin import BOOTSTRAP, COMMAND_CONFIG, OUTPUT, run_on_cluster, write_json_lines
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from kcli.features import UpgradeType

features_app = typer.Typer(
    help="Feature levels (metadata.version, eligible.leader.replicas.version, transaction.version): describe, upgrade, downgrade, disable.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(features_app, name="features")

RELEASE_VERSION = typer.Option(
    None,
    "--release-version",
    metavar="VERSION",
    help="Every feature to its level at this release, e.g. 4.1-IV1: metadata.version and each feature's default there.",
    show_default=False,
)
FEATURE = typer.Option(
    None,
    "--feature",
    metavar="NAME=LEVEL",
    help="A feature and its new level; repeat for more.",
    show_default=False,
)
DRY_RUN = typer.Option(False, "--dry-run", help="Have the controller check the change; change nothing.")
UNSAFE = typer.Option(
    False,
    "--unsafe",
    help="Downgrade even where metadata could be lost (the controller refuses it for metadata.version).",
)


@features_app.command("describe")
def describe(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    output: Output = OUTPUT,
) -> None:
    """Each feature the broker supports (min, max), its finalized level and the epoch of those levels."""
    from ops.features import describe_features

    found = run_on_cluster(bootstrap, describe_features, config=command_config)
    if output is Output.json:
        write_json_lines(f.to_json() for f in found)
    else:
        sys.stdout.write("".join(f.line() + "\n" for f in found))


@features_app.command("upgrade")
def upgrade(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    release_version: str = RELEASE_VERSION,
    feature: list[str] = FEATURE,
    dry_run: bool = DRY_RUN,
    output: Output = OUTPUT,
) -> None:
    """Raise feature levels (all or none change). Exit status 1 when the controller refuses."""
    from kcli.features import UpgradeType

    _update(
        "upgrade", bootstrap, command_config, release_version, feature, UpgradeType.UPGRADE, dry_run, output
    )


@features_app.command("downgrade")
def downgrade(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    release_version: str = RELEASE_VERSION,
    feature: list[str] = FEATURE,
    unsafe: bool = UNSAFE,
    dry_run: bool = DRY_RUN,
    output: Output = OUTPUT,
) -> None:
    """Lower feature levels (all or none change). Exit status 1 when the controller refuses."""
    from kcli.features import UpgradeType

    kind = UpgradeType.UNSAFE_DOWNGRADE if unsafe else UpgradeType.SAFE_DOWNGRADE
    _update("downgrade", bootstrap, command_config, release_version, feature, kind, dry_run, output)


@features_app.command("disable")
def disable(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    feature: list[str] = typer.Option(
        None, "--feature", metavar="NAME", help="A feature to set to level 0; repeat for more."
    ),
    unsafe: bool = UNSAFE,
    dry_run: bool = DRY_RUN,
    output: Output = OUTPUT,
) -> None:
    """Set features to level 0 (all or none change). Exit status 1 when the controller refuses."""
    from kcli.features import UpgradeType
    from ops.features import disable_updates

    kind = UpgradeType.UNSAFE_DOWNGRADE if unsafe else UpgradeType.SAFE_DOWNGRADE
    _send("disable", bootstrap, command_config, disable_updates(feature or []), kind, dry_run, output)


def _update(
    op: str,
    bootstrap: str | None,
    command_config: Path | None,
    release_version: str | None,
    features: list[str] | None,
    kind: UpgradeType,
    dry_run: bool,
    output: Output,
) -> None:
    """FeatureCommand.handleUpgradeOrDowngrade: --release-version alone, or --feature settings."""
    from ops.features import feature_updates, release_updates

    if release_version is not None and features:
        raise KcliError("Can not specify `release-version` with other feature flags.")
    updates = (
        release_updates(release_version, kind)
        if release_version is not None
        else feature_updates(features or [])
    )
    _send(op, bootstrap, command_config, updates, kind, dry_run, output)


def _send(
    op: str,
    bootstrap: str | None,
    command_config: Path | None,
    updates: dict[str, int],
    kind: UpgradeType,
    dry_run: bool,
    output: Output,
) -> None:
    from ops.features import update_features, update_lines

    if not updates:
        raise KcliError(f"You must specify at least one feature to {op}")
    results = run_on_cluster(
        bootstrap,
        lambda cluster: update_features(cluster, updates, kind, dry_run=dry_run),
        config=command_config,
    )
    lines, failures = update_lines(op, updates, results, dry_run=dry_run)
    if output is Output.json:
        write_json_lines(
            {"feature": name, "level": updates[name], "error": results[name], "dry_run": dry_run}
            for name in sorted(results)
        )
    else:
        sys.stdout.write("".join(line + "\n" for line in lines))
    if failures:
        raise KcliError(f"{failures} out of {len(updates)} operation(s) failed.", exit_code=1)
