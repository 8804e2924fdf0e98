"""UpdateFeatures and the features in ApiVersions: the controller's rules in process (a real
QuorumController on a real metadata log, tests/metadata_harness.py), then `kcli features` against a
real broker, as kafka-features.sh would drive it.

The controller's checks and sentences are Kafka's FeatureControlManager.updateFeature and
updateMetadataVersion; turning ELR on writes ConfigurationControlManager.maybeGenerateElrSafetyRecords'
records ahead of the feature.
"""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from conftest import BrokerProcess
from kio.schema.errors import ErrorCode
from metadata_harness import SyncController, close_controllers  # noqa: F401 (an autouse fixture)

from kcli.broker.apis.features import update_features_response
from kcli.broker.metadata.controller import ConfigOp, OpType
from kcli.config import BrokerConfig, Listener
from kcli.features import ELIGIBLE_LEADER_REPLICAS_VERSION as ELR
from kcli.features import METADATA_VERSION, metadata_changed_between
from kcli.protocol.messages import nested_type, request_type

SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE = 2, 3, 1


def open_controller(tmp_path: Path, metadata_version: int = 21, **settings: str) -> SyncController:
    config = BrokerConfig({"log.dirs": str(tmp_path / "data"), "min.insync.replicas": "2", **settings})
    bootstrap = [("FeatureLevelRecord", 0, {"name": METADATA_VERSION, "featureLevel": metadata_version})]
    controller = SyncController(config, bootstrap_records=bootstrap)
    for broker in (1, 2):
        register(controller, broker)
    return controller


def register(controller: SyncController, broker: int, features=None) -> int:
    return controller.register_broker(
        Listener("PLAINTEXT", "127.0.0.1", 9000 + broker),
        broker_id=broker,
        incarnation_id=uuid.uuid4(),
        log_dirs=[uuid.UUID(int=1000 + broker)],
        fenced=False,
        features=features,
    )


def request(*updates: tuple[str, int, int], validate_only: bool = False, version: int = 1):
    cls = request_type(57, version)
    key = nested_type(cls, "FeatureUpdateKey")
    fields = {"timeout": datetime.timedelta(seconds=60), "validate_only": validate_only}
    if version == 0:
        keys = [key(feature=n, max_version_level=lv, allow_downgrade=t != UPGRADE) for n, lv, t in updates]
        fields.pop("validate_only")
    else:
        keys = [key(feature=n, max_version_level=lv, upgrade_type=t) for n, lv, t in updates]
    return cls(feature_updates=tuple(keys), **fields)


def records_written(controller: SyncController, since: int) -> list[tuple[str, dict]]:
    return [
        (record.name, record.data)
        for batch in controller.metadata_log.batches()
        for record, offset in batch.records
        if offset >= since
    ]


def test_turning_elr_on_needs_its_metadata_version_and_writes_the_safety_configs_first(tmp_path):
    controller = open_controller(tmp_path)
    controller.alter_broker_configs("2", [ConfigOp("min.insync.replicas", OpType.SET, "3")])
    error = controller.update_features(request((ELR, 1, UPGRADE)))
    assert (error.code, error.message) == (
        ErrorCode.invalid_update_version,
        f"Invalid update version 1 for feature {ELR}. {ELR} could not be set to 1 because it depends on "
        f"{METADATA_VERSION} level 23",
    )
    start = controller.raft_client.log_end_offset
    # both in one request: the dependency is checked against the proposed levels
    assert not controller.update_features(
        request((METADATA_VERSION, 23, UPGRADE), (ELR, 1, UPGRADE))
    ).is_failure
    assert records_written(controller, start) == [
        (
            "ConfigRecord",
            {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas", "value": "2"},
        ),
        (
            "ConfigRecord",
            {"resourceType": 4, "resourceName": "2", "name": "min.insync.replicas", "value": None},
        ),
        ("FeatureLevelRecord", {"name": METADATA_VERSION, "featureLevel": 23}),
        ("FeatureLevelRecord", {"name": ELR, "featureLevel": 1}),
    ]
    image = controller.image
    assert image.elr_enabled and image.broker_config("") == {"min.insync.replicas": "2"}
    assert image.broker_config("2") == {}
    # from now on a broker-level min ISR is refused, as Kafka's ConfigurationControlManager does
    error = controller.alter_broker_configs("1", [ConfigOp("min.insync.replicas", OpType.SET, "1")])
    assert error.message == "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
    # disabled again (a safe downgrade to 0): only the feature record
    start = controller.raft_client.log_end_offset
    assert not controller.update_features(request((ELR, 0, SAFE_DOWNGRADE))).is_failure
    assert records_written(controller, start) == [("FeatureLevelRecord", {"name": ELR, "featureLevel": 0})]
    assert not controller.image.elr_enabled


@pytest.mark.parametrize(
    ("update", "message"),
    [
        (("share.version", 1, UPGRADE), "Local controller 1 does not support this feature."),
        ((METADATA_VERSION, 28, UPGRADE), "Local controller 1 only supports versions 1-27"),
        ((ELR, -1, SAFE_DOWNGRADE), "A feature version cannot be less than 0."),
        ((ELR, 1, 0), "The controller does not support the given upgrade type."),
        ((ELR, 1, 7), "The controller does not support the given upgrade type."),
        (
            (METADATA_VERSION, 20, UPGRADE),
            "Can't downgrade the version of this feature without setting the "
            "upgrade type to either safe or unsafe downgrade.",
        ),
        ((METADATA_VERSION, 22, SAFE_DOWNGRADE), "Can't downgrade to a newer version."),
    ],
)
def test_refused_updates_write_nothing(tmp_path, update, message):
    controller = open_controller(tmp_path)
    start = controller.raft_client.log_end_offset
    # a good update next to the bad one is not applied either
    error = controller.update_features(request((METADATA_VERSION, 22, UPGRADE), update))
    assert error.code is ErrorCode.invalid_update_version
    assert error.message == f"Invalid update version {update[1]} for feature {update[0]}. {message}"
    assert controller.raft_client.log_end_offset == start
    assert controller.image.metadata_version == 21
    for version in (0, 1, 2):  # the answer: one error for all, no per-feature results (v2 has none at all)
        response = update_features_response(version, request((ELR, 1, UPGRADE), version=version), error)
        assert response.error_code is ErrorCode.invalid_update_version
        assert response.error_message.endswith(error.message) and getattr(response, "results", ()) == ()


def test_metadata_version_downgrades_follow_the_levels_that_changed_records(tmp_path):
    assert not metadata_changed_between(17, 21) and metadata_changed_between(16, 21)
    assert metadata_changed_between(22, 23) and not metadata_changed_between(23, 27)
    controller = open_controller(tmp_path, metadata_version=27)
    for level, kind, outcome in [
        (
            22,
            SAFE_DOWNGRADE,
            "Refusing to perform the requested downgrade because it might delete metadata information.",
        ),
        (22, UNSAFE_DOWNGRADE, "Unsafe metadata downgrade is not supported in this version."),
        (3, SAFE_DOWNGRADE, "Unable to set a metadata.version less than 3.3-IV0"),
        (23, SAFE_DOWNGRADE, None),
    ]:
        error = controller.update_features(request((METADATA_VERSION, level, kind)))
        assert error.message == (None if outcome is None else f"Invalid metadata.version {level}. {outcome}")
    assert controller.image.metadata_version == 23


def test_every_registered_broker_must_support_the_level_and_dry_runs_write_nothing(tmp_path):
    controller = open_controller(tmp_path, metadata_version=23)
    register(controller, 3, features=[(METADATA_VERSION, 1, 23)])  # knows no ELR
    start = controller.raft_client.log_end_offset
    error = controller.update_features(request((ELR, 1, UPGRADE), validate_only=True))
    assert (
        error.message
        == f"Invalid update version 1 for feature {ELR}. Broker 3 does not support this feature."
    )
    error = controller.update_features(request((METADATA_VERSION, 24, UPGRADE)))
    assert (
        error.message
        == f"Invalid update version 24 for feature {METADATA_VERSION}. Broker 3 only supports versions 1-23"
    )
    controller.unregister_broker(3)  # upgraded software: it leaves and comes back
    register(controller, 3)
    assert not controller.update_features(request((ELR, 1, UPGRADE), validate_only=True)).is_failure
    assert controller.raft_client.log_end_offset > start  # the re-registration's records only
    assert not controller.image.elr_enabled
    # v0's AllowDowngrade
    assert not controller.update_features(request((ELR, 1, UPGRADE), version=0)).is_failure
    assert controller.image.elr_enabled


def test_kcli_features_against_a_broker(broker_factory) -> None:
    """On a broker started at 3.9 (`--release-version 3.9`): describe, a refused upgrade (exit 1, nothing
    changed), a dry run, the upgrade to 4.1-IV1 (every feature at its default there, as kafka-features.sh
    upgrades), and the broker's ApiVersions epoch and levels after it."""
    broker: BrokerProcess = broker_factory(extra_args=["--release-version", "3.9"])
    b = broker.bootstrap

    def features(*args: str):
        return run_kcli("features", *args, "-b", b)

    described = features("describe")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0].startswith(
        f"Feature: {ELR}\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\tEpoch: "
    )
    assert lines[1].startswith(  # the consumer rebalance protocol (KIP-848), off at 3.9-IV0
        "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\t"
    )
    assert lines[2].startswith(  # a static quorum (controller.quorum.voters): kraft.version 0
        "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\t"
    )
    assert lines[3].startswith(
        "Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\tSupportedMaxVersion: 4.1-IV1\t"
        "FinalizedVersionLevel: 3.9-IV0\tEpoch: "
    )
    refused = features("upgrade", "--feature", f"{ELR}=1")
    assert refused.returncode == 1
    assert refused.stdout == (
        f"Could not upgrade {ELR} to 1. The update failed for all features since the following feature had an "
        f"error: Invalid update version 1 for feature {ELR}. {ELR} could not be set to 1 because it depends on "
        "metadata.version level 23\n"
    )
    assert refused.stderr == "kcli: 1 out of 1 operation(s) failed.\n"
    dry = features("upgrade", "--release-version", "4.1-IV1", "--dry-run")
    assert dry.stdout == (
        f"{ELR} can be upgraded to 1.\ngroup.version can be upgraded to 1.\nmetadata.version can be upgraded to 27.\n"
        "transaction.version can be upgraded to 2.\n"
    ), dry.stderr
    done = features("upgrade", "--release-version", "4.1-IV1")
    assert done.stdout == (
        f"{ELR} was upgraded to 1.\ngroup.version was upgraded to 1.\nmetadata.version was upgraded to 27.\n"
        "transaction.version was upgraded to 2.\n"
    ), done.stderr
    after = features("describe", "-o", "json").stdout
    import json

    levels = {item["feature"]: item for item in map(json.loads, after.splitlines())}
    assert (
        levels[ELR]["finalized_version_level"] == 1
        and levels[METADATA_VERSION]["finalized_version_level"] == 27
        and levels["group.version"]["finalized_version_level"] == 1
        and levels["transaction.version"]["finalized_version_level"] == 2
    )
    assert levels[ELR]["epoch"] > int(lines[0].rsplit(" ", 1)[1])
    assert features("upgrade", "--release-version", "4.1", "--feature", f"{ELR}=1").stderr == (
        "kcli: Can not specify `release-version` with other feature flags.\n"
    )
    assert broker.is_running()
