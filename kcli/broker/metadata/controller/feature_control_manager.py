"""FeatureControlManager: the finalized feature levels (metadata.version, eligible.leader.replicas.version).

A new metadata log starts with the FeatureLevelRecords that `kafka-storage format` would have put in
`bootstrap.checkpoint`; every later record is written at that level's record versions. A cluster
that starts with eligible leader replicas on also gets a cluster-level min.insync.replicas, as Kafka's
ActivationRecordsGenerator writes it, so that every controller computes the ELR against one value.

UpdateFeatures (`kafka-features.sh upgrade|downgrade|disable`, `kcli features`) changes the levels of a
running cluster with Kafka's checks, in Kafka's order: the upgrade type, the level's sign, whether this
controller and every registered broker support the level, the direction, then metadata.version's
downgrade rule (no downgrade across a level that changed a record format) or the feature's
dependencies. One failed update fails the request and nothing is written. Kafka also requires every
controller of the quorum to have registered (RegisterControllerRecord, from 3.7): kcli's controllers do
not register, so only this controller and the brokers are checked (combined nodes are brokers too).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import NONE, ApiError, ControllerResult, Record
from kcli.broker.metadata.image import BROKER_RESOURCE, METADATA_VERSION, ClusterMetadataImage
from kcli.features import (
    DEFAULT_METADATA_VERSION,
    ELIGIBLE_LEADER_REPLICAS_VERSION,
    KRAFT_VERSION,
    MAX_METADATA_VERSION,
    MV_3_3_IV0,
    SUPPORTED_FEATURES,
    UpgradeType,
    metadata_changed_between,
    release_version,
    supported_range,
    version_range_text,
)
from kcli.features import MV_3_0_IV1 as MIN_METADATA_VERSION

log = logging.getLogger("kcli.broker.metadata")


__all__ = ["MAX_METADATA_VERSION", "MIN_METADATA_VERSION", "FeatureControlManager"]


class FeatureControlManager:
    """Writes the bootstrap feature levels; the image holds the finalized levels."""

    def bootstrap(
        self,
        image: ClusterMetadataImage,
        records: Sequence[Record] | None = None,
        *,
        default_min_insync_replicas: int = 1,
    ) -> ControllerResult[bool]:
        """A log with no metadata.version gets the bootstrap records: those of `bootstrap.checkpoint`
        (`kcli storage format`), else the FeatureLevelRecord of kcli's default metadata.version alone (Kafka's
        BootstrapDirectory.readFromConfiguration: its latest production level, no other feature). With
        eligible.leader.replicas.version above 0 among them, a ConfigRecord follows that sets the
        cluster-level min.insync.replicas to this controller's (ActivationRecordsGenerator)."""
        if image.metadata_version != 0:
            return ControllerResult([], False)
        if not records:
            record: Record = (
                "FeatureLevelRecord",
                0,
                {"name": METADATA_VERSION, "featureLevel": DEFAULT_METADATA_VERSION},
            )
            return ControllerResult([record], True)
        out = list(records)
        elr_level = max(
            (
                data["featureLevel"]
                for name, _, data in records
                if name == "FeatureLevelRecord" and data["name"] == ELIGIBLE_LEADER_REPLICAS_VERSION
            ),
            default=0,
        )
        if elr_level > 0:
            out += elr_safety_records(image, default_min_insync_replicas)
        return ControllerResult(out, True)

    def update_features(
        self,
        image: ClusterMetadataImage,
        updates: Sequence[tuple[str, int, UpgradeType]],
        *,
        node_id: int,
        static_min_insync_replicas: int,
    ) -> ControllerResult[ApiError]:
        """UpdateFeatures: the FeatureLevelRecords of `updates` (name, level, upgrade type), or the first
        error and nothing. Turning eligible.leader.replicas.version on also writes, ahead of it, what
        makes ELR safe (ConfigurationControlManager.maybeGenerateElrSafetyRecords): a cluster-level
        min.insync.replicas (this controller's static value) when there is none, and the removal of
        every broker-level one. The caller writes nothing for a validate-only request."""
        proposed = {**image.features, **{name: level for name, level, _ in updates}}
        records: list[Record] = []
        for name, level, upgrade_type in updates:
            error = self._update_feature(image, name, level, upgrade_type, proposed, node_id)
            if error.is_failure:
                log.warning("%s", error.message)
                return ControllerResult([], error)
            records.append(("FeatureLevelRecord", 0, {"name": name, "featureLevel": level}))
        if any(name == ELIGIBLE_LEADER_REPLICAS_VERSION and level > 0 for name, level, _ in updates):
            records = elr_safety_records(image, static_min_insync_replicas) + records
        return ControllerResult(records, NONE)

    def _update_feature(
        self,
        image: ClusterMetadataImage,
        name: str,
        level: int,
        upgrade_type: UpgradeType,
        proposed: Mapping[str, int],
        node_id: int,
    ) -> ApiError:
        """FeatureControlManager.updateFeature's checks for one feature."""

        def invalid(message: str) -> ApiError:
            return ApiError(
                ErrorCode.invalid_update_version,
                f"Invalid update version {level} for feature {name}. {message}",
            )

        if upgrade_type is UpgradeType.UNKNOWN:
            return invalid("The controller does not support the given upgrade type.")
        current = image.features.get(name, 0)
        if level < 0:
            return invalid("A feature version cannot be less than 0.")
        reason = _reason_not_supported(image, name, level, node_id)
        if reason is not None:
            return invalid(reason)
        if level < current and upgrade_type is UpgradeType.UPGRADE:
            return invalid(
                "Can't downgrade the version of this feature without setting the upgrade type to either "
                "safe or unsafe downgrade."
            )
        if level > current and upgrade_type is not UpgradeType.UPGRADE:
            return invalid("Can't downgrade to a newer version.")
        if name == METADATA_VERSION:
            return _check_metadata_version(current, level, upgrade_type)
        if name not in SUPPORTED_FEATURES and name != KRAFT_VERSION:
            # Kafka's Features.featureFromName, on the way to the dependency check: a level 0 of a
            # name no node knows passes the range check above, and must not read as done.
            return invalid(f"Feature {name} not found.")
        for dependency, needed in _dependencies(name, level).items():
            if proposed.get(dependency, 0) < needed:
                return invalid(
                    f"{name} could not be set to {level} because it depends on {dependency} level {needed}"
                )
        return NONE


def _supported(name: str) -> tuple[int, int]:
    """This controller's range for a feature; (0, 0) (QuorumFeatures.DISABLED) for one it does not know."""
    return supported_range(name) if name == METADATA_VERSION or name in SUPPORTED_FEATURES else (0, 0)


def _reason_not_supported(image: ClusterMetadataImage, name: str, level: int, node_id: int) -> str | None:
    """QuorumFeatures.reasonNotSupported for this controller, then every registered broker."""
    nodes = [(f"Local controller {node_id}", _supported(name))]
    for broker_id in sorted(image.brokers_by_id):
        nodes.append((f"Broker {broker_id}", image.brokers_by_id[broker_id].features.get(name, (0, 0))))
    for what, (low, high) in nodes:
        if not low <= level <= high:
            if high == 0:
                return f"{what} does not support this feature."
            return f"{what} only supports versions {version_range_text(low, high)}"
    return None


def _check_metadata_version(current: int, level: int, upgrade_type: UpgradeType) -> ApiError:
    """FeatureControlManager.updateMetadataVersion: never below 3.3-IV0, no downgrade across a level
    that changed a record format (unsafe downgrades are not supported either)."""

    def invalid(message: str) -> ApiError:
        return ApiError(ErrorCode.invalid_update_version, f"Invalid metadata.version {level}. {message}")

    if level < MV_3_3_IV0:
        return invalid(f"Unable to set a metadata.version less than {release_version(MV_3_3_IV0)}")
    if level < current:
        if not metadata_changed_between(level, current):
            log.warning(
                "Downgrading metadata.version from %s to %s.",
                release_version(current),
                release_version(level),
            )
        elif upgrade_type is UpgradeType.UNSAFE_DOWNGRADE:
            return invalid("Unsafe metadata downgrade is not supported in this version.")
        else:
            return invalid(
                "Refusing to perform the requested downgrade because it might delete metadata information."
            )
    elif level > current:
        log.warning(
            "Upgrading metadata.version from %s to %s.", release_version(current), release_version(level)
        )
    return NONE


def _dependencies(name: str, level: int) -> Mapping[str, int]:
    """Features.validateVersion's inputs: any level from 1 needs metadata.version 3.3-IV0, plus the
    level's own dependencies."""
    needs: dict[str, int] = {METADATA_VERSION: MV_3_3_IV0} if level >= 1 else {}
    for feature in SUPPORTED_FEATURES.get(name, ()):
        if feature.level == level:
            needs.update(feature.dependencies)
    return needs


def elr_safety_records(image: ClusterMetadataImage, static_min_insync_replicas: int) -> list[Record]:
    """ConfigurationControlManager.maybeGenerateElrSafetyRecords: the cluster-level min.insync.replicas
    (this controller's static value) when unset, and no broker-level one left."""
    records: list[Record] = []
    if "min.insync.replicas" not in image.broker_config(""):
        config = {"resourceType": BROKER_RESOURCE, "resourceName": "", "name": "min.insync.replicas"}
        records.append(("ConfigRecord", 0, {**config, "value": str(static_min_insync_replicas)}))
    brokers = sorted(int(name) for kind, name in image.configs if kind == BROKER_RESOURCE and name)
    for broker_id in brokers:  # brokersWithConfigs: registered or not
        if "min.insync.replicas" in image.broker_config(str(broker_id)):
            config = {
                "resourceType": BROKER_RESOURCE,
                "resourceName": str(broker_id),
                "name": "min.insync.replicas",
            }
            records.append(("ConfigRecord", 0, {**config, "value": None}))
    return records
