"""FeatureControlManager: the finalized feature levels, today `metadata.version` alone.

A new metadata log starts with the FeatureLevelRecord that `kafka-storage format` would have put in
`bootstrap.checkpoint`; every later record is written at that level's record versions.
"""

from __future__ import annotations

from collections.abc import Sequence

from kcli.broker.metadata.controller.controller_result import ControllerResult, Record
from kcli.broker.metadata.image import METADATA_VERSION, MV_3_9_IV0, ClusterMetadataImage

MIN_METADATA_VERSION = 1  # IBP_3_0_IV1, the oldest KRaft level
MAX_METADATA_VERSION = MV_3_9_IV0
"""The range of metadata.version this software supports (QuorumFeatures), sent with a registration."""


class FeatureControlManager:
    """Writes the bootstrap metadata.version; the image holds the finalized levels."""

    def bootstrap(
        self, image: ClusterMetadataImage, records: Sequence[Record] | None = None
    ) -> ControllerResult[bool]:
        """A log with no metadata.version gets the bootstrap records: those of `bootstrap.checkpoint`
        (`kcli storage format`), else the FeatureLevelRecord of 3.9-IV0 (level 21)."""
        if image.metadata_version != 0:
            return ControllerResult([], False)
        if records:
            return ControllerResult(list(records), True)
        record: Record = ("FeatureLevelRecord", 0, {"name": METADATA_VERSION, "featureLevel": MV_3_9_IV0})
        return ControllerResult([record], True)
