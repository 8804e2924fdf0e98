"""FeatureControlManager: the finalized feature levels (metadata.version, eligible.leader.replicas.version).

A new metadata log starts with the FeatureLevelRecords that `kafka-storage format` would have put in
`bootstrap.checkpoint`; every later record is written at that level's record versions. A cluster
that starts with eligible leader replicas on also gets a cluster-level min.insync.replicas, as Kafka's
ActivationRecordsGenerator writes it, so that every controller computes the ELR against one value.
"""

from __future__ import annotations

from collections.abc import Sequence

from kcli.broker.metadata.controller.controller_result import ControllerResult, Record
from kcli.broker.metadata.image import BROKER_RESOURCE, METADATA_VERSION, MV_3_9_IV0, ClusterMetadataImage
from kcli.features import ELIGIBLE_LEADER_REPLICAS_VERSION, MAX_METADATA_VERSION
from kcli.features import MV_3_0_IV1 as MIN_METADATA_VERSION

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
        (`kcli storage format`), else the FeatureLevelRecord of 3.9-IV0 (level 21). With
        eligible.leader.replicas.version above 0 among them, a ConfigRecord follows that sets the
        cluster-level min.insync.replicas to this controller's (ActivationRecordsGenerator)."""
        if image.metadata_version != 0:
            return ControllerResult([], False)
        if not records:
            record: Record = (
                "FeatureLevelRecord",
                0,
                {"name": METADATA_VERSION, "featureLevel": MV_3_9_IV0},
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
            config = {
                "resourceType": BROKER_RESOURCE,
                "resourceName": "",
                "name": "min.insync.replicas",
                "value": str(default_min_insync_replicas),
            }
            out.append(("ConfigRecord", 0, config))
        return ControllerResult(out, True)
