"""`kcli features`: a cluster's feature levels, described and changed as kafka-features.sh does.

`describe` reads what a broker answers to ApiVersions (v3+: the levels it supports, the finalized
levels and their epoch, the offset of its metadata image); `upgrade`, `downgrade` and `disable` send
UpdateFeatures, which the broker forwards to the active controller. The controller checks every
update and applies all or none (kcli/broker/metadata/controller/feature_control_manager.py); with
--dry-run it only checks. The same requests work against Apache Kafka.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.cluster import Cluster, ClusterError
from kcli.errors import KcliError
from kcli.features import (
    MAX_METADATA_VERSION,
    METADATA_VERSION,
    MIN_FORMAT_METADATA_VERSION,
    SUPPORTED_FEATURES,
    FeatureError,
    UpgradeType,
    default_level,
    metadata_version_from_string,
    parse_feature_argument,
    release_version,
)
from kcli.protocol.messages import nested_type

UPDATE_FEATURES = 57
TIMEOUT_MS = 60_000  # UpdateFeaturesRequest's timeoutMs default


@dataclass(frozen=True, slots=True)
class FeatureDescription:
    name: str
    supported_min: int
    supported_max: int
    finalized: int
    epoch: int | None

    def line(self) -> str:
        """FeatureCommand.handleDescribe's line (metadata.version levels by release name)."""
        return (
            f"Feature: {self.name}\tSupportedMinVersion: {_level(self.name, self.supported_min)}\t"
            f"SupportedMaxVersion: {_level(self.name, self.supported_max)}\t"
            f"FinalizedVersionLevel: {_level(self.name, self.finalized)}\t"
            f"Epoch: {'-' if self.epoch is None else self.epoch}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "feature": self.name,
            "supported_min_version": self.supported_min,
            "supported_max_version": self.supported_max,
            "finalized_version_level": self.finalized,
            "epoch": self.epoch,
        }


def _level(name: str, level: int) -> str:
    if name != METADATA_VERSION:
        return str(level)
    text = release_version(level)
    return f"UNKNOWN {level}" if text.startswith("level ") else text


async def describe_features(cluster: Cluster) -> list[FeatureDescription]:
    """Every feature the bootstrap broker supports, with its finalized level (0 when none), by name."""
    response = cluster.bootstrap.api_versions
    if response is None or not hasattr(response, "supported_features"):
        raise ClusterError(f"{cluster.bootstrap.address} does not describe its features (ApiVersions v3+).")
    finalized = {f.name: f.max_version_level for f in response.finalized_features}
    epoch = response.finalized_features_epoch
    return [
        FeatureDescription(
            f.name, f.min_version, f.max_version, finalized.get(f.name, 0), None if epoch < 0 else epoch
        )
        for f in sorted(response.supported_features, key=lambda f: f.name)
    ]


def release_updates(text: str, upgrade_type: UpgradeType) -> dict[str, int]:
    """--release-version: metadata.version at that release and every feature at its default level
    there; an upgrade leaves out the features whose default is 0 (FeatureCommand)."""
    try:
        metadata_version = metadata_version_from_string(text)
    except FeatureError:
        names = ", ".join(
            release_version(level) for level in range(MIN_FORMAT_METADATA_VERSION, MAX_METADATA_VERSION + 1)
        )
        raise KcliError(f"Unknown metadata.version {text}. Supported metadata.version are {names}") from None
    updates = {METADATA_VERSION: metadata_version}
    for name in SUPPORTED_FEATURES:
        level = default_level(name, metadata_version)
        if upgrade_type is not UpgradeType.UPGRADE or level > 0:
            updates[name] = level
    return updates


def feature_updates(arguments: list[str]) -> dict[str, int]:
    """--feature name=level, each name once."""
    updates: dict[str, int] = {}
    for argument in arguments:
        try:
            name, level = parse_feature_argument(argument)
        except FeatureError as exc:
            raise KcliError(str(exc)) from None
        if name in updates:
            raise KcliError(f"Feature {name} was specified more than once.")
        updates[name] = level
    return updates


def disable_updates(names: list[str]) -> dict[str, int]:
    """`disable --feature NAME`: each named feature to level 0, each name once."""
    updates: dict[str, int] = {}
    for name in names:
        if name in updates:
            raise KcliError(f"Feature {name} was specified more than once.")
        updates[name] = 0
    return updates


async def update_features(
    cluster: Cluster, updates: dict[str, int], upgrade_type: UpgradeType, *, dry_run: bool
) -> dict[str, str | None]:
    """UpdateFeatures through the bootstrap broker: feature -> None, or the error message it failed with.
    A top-level error fails every feature with its message, as Kafka's admin client reports it."""
    client = cluster.bootstrap
    cls = client.request_type(UPDATE_FEATURES)
    key_cls = nested_type(cls, "FeatureUpdateKey")
    version = client.version(UPDATE_FEATURES)
    keys = []
    for name, level in updates.items():
        fields: dict[str, Any] = {"feature": name, "max_version_level": level}
        if version == 0:
            if upgrade_type is UpgradeType.UNSAFE_DOWNGRADE:
                raise ClusterError(
                    f"{client.address} cannot do an unsafe downgrade (UpdateFeatures v0 only)."
                )
            fields["allow_downgrade"] = upgrade_type is not UpgradeType.UPGRADE
        else:
            fields["upgrade_type"] = int(upgrade_type)
        keys.append(key_cls(**fields))
    request_fields: dict[str, Any] = {
        "timeout": datetime.timedelta(milliseconds=TIMEOUT_MS),
        "feature_updates": tuple(keys),
    }
    if version >= 1:
        request_fields["validate_only"] = dry_run
    elif dry_run:
        raise ClusterError(
            f"{client.address} cannot validate an update without applying it (UpdateFeatures v0 only)."
        )
    response = await client.send(cls(**request_fields), timeout=TIMEOUT_MS / 1000 + 5)
    if response.error_code is not ErrorCode.none:
        message = response.error_message or response.error_code.name
        return {name: message for name in updates}
    failed = {
        r.feature: r.error_message or r.error_code.name
        for r in getattr(response, "results", ())
        if r.error_code is not ErrorCode.none
    }
    return {name: failed.get(name) for name in updates}


def update_lines(
    op: str, updates: dict[str, int], results: dict[str, str | None], *, dry_run: bool
) -> tuple[list[str], int]:
    """FeatureCommand.update's report, by feature name, and the number of failures."""
    lines, failures = [], 0
    for name in sorted(results):
        level = updates[name]
        error = results[name]
        if error is not None:
            helper = "Can not " if dry_run else "Could not "
            suffix = f"disable {name}" if op == "disable" else f"{op} {name} to {level}"
            lines.append(f"{helper}{suffix}. {error}")
            failures += 1
        else:
            verb = " can be " if dry_run else " was "
            what = "disabled." if op == "disable" else f"{op}d to {level}."
            lines.append(f"{name}{verb}{what}")
    return lines, failures
