"""Finalized features: the `metadata.version` levels kcli knows and the other features it implements.

Kafka's `MetadataVersion` enum, `Feature` / `FeatureVersion` (KIP-584, KIP-1022) and the part of the
`Formatter` that picks a new cluster's feature levels, for what kcli writes:

- `metadata.version` from 3.9-IV0 (level 21) to 4.1-IV1 (level 27). Of the levels above 3.9-IV0 only
  4.0-IV1 changes a metadata record (PartitionRecord and PartitionChangeRecord v2, which carry the
  eligible leader replicas, KIP-966); the others bootstrap a feature or change an inter-broker RPC.
- `eligible.leader.replicas.version` (KIP-966 part 1): level 1 needs metadata.version 4.0-IV1 or later
  and is the default from 4.1-IV0 on, as in Kafka 4.1 (`EligibleLeaderReplicasVersion.ELRV_1`).
- `transaction.version` (KIP-890): 1 writes __transaction_state values as the flexible v1, 2 bumps the
  producer epoch at the end of every transaction (Kafka's `TransactionVersion`, no dependencies in
  4.1); 2 is the default from 4.0-IV2 on, as in Kafka.
- `group.version` (GroupVersion): level 1 turns on the consumer rebalance protocol (KIP-848,
  ConsumerGroupHeartbeat and ConsumerGroupDescribe); it has no dependency and is the default from
  4.0-IV0 on, as in Kafka.

A new cluster starts, as with Kafka 4.1's `kafka-storage.sh format`, at 4.1-IV1 with ELR on,
group.version 1 and transaction.version 2; `--release-version 3.9` gives 3.9-IV0 and all three at 0.

Features kcli does not implement (share.version, streams.version, ...) are not
offered: a release version that would turn them on in Kafka formats here without them, exactly as a
Kafka whose `Formatter.setSupportedFeatures` leaves them out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from kcli.errors import KcliError

METADATA_VERSION = "metadata.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"
GROUP_VERSION = "group.version"
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"

# MetadataVersion levels that change what kcli writes or does.
MV_3_0_IV1 = 1
MV_3_2_IV0 = 3
MV_3_5_IV2 = 11
"""SCRAM credentials in the metadata log (UserScramCredentialRecord, MetadataVersion.isScramSupported)."""
MV_3_6_IV0 = 12
MV_3_7_IV2 = 17
MV_3_9_IV0 = 21
MV_4_0_IV0 = 22
MV_4_0_IV1 = 23
"""ELR (KIP-966): PartitionRecord and PartitionChangeRecord v2 (MetadataVersion.isElrSupported)."""
MV_4_0_IV2 = 24
MV_4_0_IV3 = 25
MV_4_1_IV0 = 26
"""The bootstrap metadata.version of eligible.leader.replicas.version 1 (on by default from here)."""
MV_4_1_IV1 = 27

_RELEASES = {
    1: "3.0-IV1",
    2: "3.1-IV0",
    3: "3.2-IV0",
    4: "3.3-IV0",
    5: "3.3-IV1",
    6: "3.3-IV2",
    7: "3.3-IV3",
    8: "3.4-IV0",
    9: "3.5-IV0",
    10: "3.5-IV1",
    11: "3.5-IV2",
    12: "3.6-IV0",
    13: "3.6-IV1",
    14: "3.6-IV2",
    15: "3.7-IV0",
    16: "3.7-IV1",
    17: "3.7-IV2",
    18: "3.7-IV3",
    19: "3.7-IV4",
    20: "3.8-IV0",
    21: "3.9-IV0",
    22: "4.0-IV0",
    23: "4.0-IV1",
    24: "4.0-IV2",
    25: "4.0-IV3",
    26: "4.1-IV0",
    27: "4.1-IV1",
}
"""MetadataVersion: feature level -> its name (MetadataVersion.toString), for every KRaft level to 4.1."""

MV_3_3_IV0 = 4
"""MetadataVersion.MINIMUM_BOOTSTRAP_VERSION: the first level with FeatureLevelRecord."""

_METADATA_CHANGED = frozenset({1, 3, 5, 6, 7, 8, 11, 13, 14, 15, 17, MV_4_0_IV1})
"""The levels whose MetadataVersion.didMetadataChange is true (a record format changed there): a
downgrade across one of them could lose what those records carry. 4.1-IV0 and 4.1-IV1 change none."""

MIN_FORMAT_METADATA_VERSION = MV_3_9_IV0
MAX_METADATA_VERSION = MV_4_1_IV1
"""The metadata.version levels kcli can write (and so format a cluster with, and register with)."""
DEFAULT_METADATA_VERSION = MV_4_1_IV1
"""What `kcli storage format`, `kcli cluster start`, a first `kcli broker start` and a controller without
bootstrap.checkpoint start a cluster at: Kafka 4.1's MetadataVersion.LATEST_PRODUCTION, so that a
cluster kcli formats has the levels Kafka 4.1's format gives it."""


class UpgradeType(enum.IntEnum):
    """FeatureUpdate.UpgradeType: UpdateFeatures v1+'s UpgradeType field (v0's AllowDowngrade maps to
    SAFE_DOWNGRADE or UPGRADE)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def from_code(cls, code: int) -> UpgradeType:
        return cls(code) if code in (1, 2, 3) else cls.UNKNOWN


class FeatureError(KcliError):
    """A feature name or level that cannot be used; one sentence, exit code 2."""


def release_version(level: int) -> str:
    """The release name Kafka prints for a metadata.version level (MetadataVersion.toString)."""
    return _RELEASES.get(level, f"level {level}")


def is_scram_supported(metadata_version: int) -> bool:
    """MetadataVersion.isScramSupported: 3.5-IV2 or later."""
    return metadata_version >= MV_3_5_IV2


def is_elr_supported(metadata_version: int) -> bool:
    """MetadataVersion.isElrSupported: 4.0-IV1 or later."""
    return metadata_version >= MV_4_0_IV1


def partition_record_version(metadata_version: int) -> int:
    """MetadataVersion.partitionRecordVersion."""
    if is_elr_supported(metadata_version):
        return 2
    return 1 if metadata_version >= MV_3_7_IV2 else 0


def partition_change_record_version(metadata_version: int) -> int:
    """MetadataVersion.partitionChangeRecordVersion."""
    if is_elr_supported(metadata_version):
        return 2
    return 1 if metadata_version >= MV_3_7_IV2 else 0


def register_broker_record_version(metadata_version: int) -> int:
    """MetadataVersion.registerBrokerRecordVersion for the levels kcli writes (3.7-IV2 to 4.1: v3, which
    carries the log dirs; Kafka's v4 arrives with cordoned log dirs at 4.3-IV0)."""
    return 3


def transaction_version_level(features: Mapping[str, int]) -> int:
    """The finalized transaction.version (TransactionStateManager.transactionVersionLevel), 0 if unset."""
    return features.get(TRANSACTION_VERSION, 0)


def supports_epoch_bump(transaction_version: int) -> bool:
    """TransactionVersion.supportsEpochBump: version 2 ends every transaction with a bumped epoch."""
    return transaction_version >= 2


def transaction_log_value_version(transaction_version: int) -> int:
    """TransactionVersion.transactionLogValueVersion: the flexible v1 from transaction.version 1."""
    return 1 if transaction_version >= 1 else 0


def is_consumer_protocol_enabled(features: Mapping[str, int]) -> bool:
    """GroupVersion.isConsumerRebalanceProtocolSupported: group.version >= 1."""
    return features.get(GROUP_VERSION, 0) >= 1


def is_elr_enabled(features: Mapping[str, int]) -> bool:
    """FeatureControlManager.isElrFeatureEnabled: eligible.leader.replicas.version >= 1 on a
    metadata.version that supports ELR."""
    return (
        is_elr_supported(features.get(METADATA_VERSION, 0))
        and features.get(ELIGIBLE_LEADER_REPLICAS_VERSION, 0) >= 1
    )


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """One FeatureVersion: its level, the metadata.version it is the default from, what it needs."""

    level: int
    bootstrap_metadata_version: int
    dependencies: Mapping[str, int]


SUPPORTED_FEATURES: dict[str, tuple[FeatureLevel, ...]] = {
    ELIGIBLE_LEADER_REPLICAS_VERSION: (
        FeatureLevel(0, MV_3_0_IV1, {}),
        FeatureLevel(1, MV_4_1_IV0, {METADATA_VERSION: MV_4_0_IV1}),
    ),
    TRANSACTION_VERSION: (
        FeatureLevel(0, MV_3_0_IV1, {}),
        FeatureLevel(1, MV_4_0_IV2, {}),
        FeatureLevel(2, MV_4_0_IV2, {}),
    ),
    GROUP_VERSION: (
        FeatureLevel(0, MV_3_0_IV1, {}),
        FeatureLevel(1, MV_4_0_IV0, {}),
    ),
}
"""The features besides metadata.version kcli implements, each with its levels (Kafka's Feature enum,
as far as kcli goes). kraft.version (0 static, 1 dynamic quorum, KIP-853) is handled apart: it has
no FeatureLevelRecord (kraft_version_level)."""


def supported_range(name: str) -> tuple[int, int]:
    """The (min, max) level this software supports, as a broker registration announces it."""
    if name == METADATA_VERSION:
        return MV_3_0_IV1, MAX_METADATA_VERSION
    levels = SUPPORTED_FEATURES[name]
    return levels[0].level, levels[-1].level


def default_level(name: str, metadata_version: int) -> int:
    """Feature.defaultLevel: the highest level whose bootstrap metadata.version is at or below it."""
    chosen = SUPPORTED_FEATURES[name][0]
    for candidate in SUPPORTED_FEATURES[name]:
        if candidate.bootstrap_metadata_version <= metadata_version:
            chosen = candidate
        else:
            break
    return chosen.level


def metadata_version_from_string(text: str) -> int:
    """MetadataVersion.fromVersionString for the levels kcli can write: "4.1" is the newest level of that
    release, "4.0-IV1" one level; anything else is refused naming what is supported."""
    key = text
    segments = text.split(".")
    if len(segments) > 2:
        key = ".".join(segments[:2])
    by_name = {name: level for level, name in _RELEASES.items() if _writable(level)}
    for level, name in sorted(_RELEASES.items()):
        if _writable(level):
            by_name[name.split("-")[0]] = level  # the release alone: its newest level
    level = by_name.get(key)
    if level is None:
        raise FeatureError(
            f"Unknown metadata.version '{text}'. Supported metadata.version are: {_supported_names()}"
        )
    return level


def metadata_version_from_level(level: int) -> int:
    """MetadataVersion.fromFeatureLevel, limited to the levels kcli can write."""
    if not _writable(level):
        raise FeatureError(
            f"No MetadataVersion with feature level {level}. Valid feature levels are from "
            f"{MIN_FORMAT_METADATA_VERSION} to {MAX_METADATA_VERSION}."
        )
    return level


def parse_feature_argument(text: str) -> tuple[str, int]:
    """StorageTool's feature=level parsing (both sides trimmed, the level a Java short)."""
    name, equals, level_text = text.partition("=")
    if not equals:
        raise FeatureError(f"Can't parse feature=level string {text}: equals sign not found.")
    level_text = level_text.strip()
    try:
        level = int(level_text)
    except ValueError:
        level = None
    if level is None or not -(2**15) <= level < 2**15 or not level_text.lstrip("+-").isdigit():
        raise FeatureError(
            f"Can't parse feature=level string {text}: unable to parse {level_text} as a short."
        )
    return name.strip(), level


def format_feature_levels(
    requested: Mapping[str, int], release: int | None = None, *, dynamic_quorum: bool = False
) -> tuple[int, dict[str, int]]:
    """The Formatter's calculateEffectiveReleaseVersion and calculateEffectiveFeatureLevels: the
    metadata.version and the level of every supported feature a new cluster starts with.

    `requested` are the --feature settings, `release` the --release-version level (None: kcli's default).
    Unknown features, unknown levels and unmet dependencies are refused with Kafka's sentences.
    kraft.version is checked against `dynamic_quorum` (kraft_version_level) but left out of the levels:
    it has no FeatureLevelRecord, its level goes into the bootstrap snapshot's KRaftVersion record.
    """
    if METADATA_VERSION in requested:
        if release is not None:
            raise FeatureError(
                f"Use --release-version instead of --feature {METADATA_VERSION}=X to avoid ambiguity."
            )
        metadata_version = metadata_version_from_level(requested[METADATA_VERSION])
    else:
        metadata_version = DEFAULT_METADATA_VERSION if release is None else release
    levels: dict[str, int] = {}
    for name, level in requested.items():
        if name == METADATA_VERSION:
            continue
        if name == KRAFT_VERSION:
            kraft_version_level(level, dynamic_quorum)
            continue
        if name not in SUPPORTED_FEATURES:
            supported = ", ".join(sorted([*SUPPORTED_FEATURES, KRAFT_VERSION]))
            raise FeatureError(f"Unsupported feature: {name}. Supported features are: {supported}")
        levels[name] = level
    for name in SUPPORTED_FEATURES:
        levels.setdefault(name, default_level(name, metadata_version))
    everything = {METADATA_VERSION: metadata_version, **levels}
    for name, level in sorted(levels.items()):
        feature = next((f for f in SUPPORTED_FEATURES[name] if f.level == level), None)
        if feature is None:
            raise FeatureError(f"No feature:{name} with feature level {level}")
        for dependency, needed in feature.dependencies.items():
            if everything.get(dependency, 0) < needed:
                raise FeatureError(
                    f"{name} could not be set to {level} because it depends on {dependency} level {needed}"
                )
    return metadata_version, levels


KRAFT_VERSION_0 = 0
"""kraft.version 0: a static quorum (controller.quorum.voters, KIP-595)."""
KRAFT_VERSION_1 = 1
"""kraft.version 1: a dynamic quorum (KIP-853), its voters in KRaftVersion and Voters control records."""


def kraft_version_level(requested: int | None, dynamic_quorum: bool) -> int:
    """The Formatter's effectiveKRaftFeatureLevel: 1 with KIP-853 configuration (--standalone or
    --initial-controllers), else 0; a --feature kraft.version that disagrees is refused."""
    if requested is None:
        return KRAFT_VERSION_1 if dynamic_quorum else KRAFT_VERSION_0
    if requested == 0 and dynamic_quorum:
        raise FeatureError(
            f"Cannot set {KRAFT_VERSION} to {requested} if KIP-853 configuration is present. "
            f"Try removing the --feature flag for {KRAFT_VERSION}."
        )
    if requested != 0 and not dynamic_quorum:
        raise FeatureError(
            f"Cannot set {KRAFT_VERSION} to {requested} unless KIP-853 configuration is present. "
            f"Try removing the --feature flag for {KRAFT_VERSION}."
        )
    if requested not in (KRAFT_VERSION_0, KRAFT_VERSION_1):
        raise FeatureError(f"No feature:{KRAFT_VERSION} with feature level {requested}")
    return requested


def bootstrap_feature_records(metadata_version: int, levels: Mapping[str, int]) -> list[tuple[str, int]]:
    """BootstrapMetadata.fromVersions: metadata.version first, then every other feature above level 0 by
    name (kraft.version never has a record)."""
    records = [(METADATA_VERSION, metadata_version)]
    records += [
        (name, level) for name, level in sorted(levels.items()) if level > 0 and name != KRAFT_VERSION
    ]
    return records


def metadata_changed_between(low: int, high: int) -> bool:
    """MetadataVersion.checkIfMetadataChanged: a level in (low, high] changed a record format."""
    low, high = min(low, high), max(low, high)
    return any(level in _METADATA_CHANGED for level in range(low + 1, high + 1))


def version_range_text(low: int, high: int) -> str:
    """Kafka's VersionRange.toString: "3", "0-1", or "4+" when open-ended."""
    if low == high:
        return str(low)
    return f"{low}+" if high == 2**15 - 1 else f"{low}-{high}"


def _writable(level: int) -> bool:
    return MIN_FORMAT_METADATA_VERSION <= level <= MAX_METADATA_VERSION


def _supported_names() -> str:
    return ", ".join(
        _RELEASES[level] for level in range(MIN_FORMAT_METADATA_VERSION, MAX_METADATA_VERSION + 1)
    )
