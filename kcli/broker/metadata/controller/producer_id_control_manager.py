"""ProducerIdControlManager: blocks of producer ids (AllocateProducerIds), recorded so none repeats.

Each block is a ProducerIdsRecord naming where the next block starts; the image folds them, so a
restart continues after the last block ever handed out.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.cluster_control_manager import ClusterControlManager
from kcli.broker.metadata.controller.controller_result import ApiException, ControllerResult, Record
from kcli.broker.metadata.image import ClusterMetadataImage, ProducerIdsBlock
from kcli.config import LONG_MAX


class ProducerIdControlManager:
    """Hands out the next block of 1000 producer ids to a broker with a current epoch."""

    def __init__(self, cluster_control: ClusterControlManager) -> None:
        self.cluster_control = cluster_control

    def generate_next_producer_id(
        self, image: ClusterMetadataImage, broker_id: int, broker_epoch: int
    ) -> ControllerResult[ProducerIdsBlock]:
        """The next block and its ProducerIdsRecord; raises ApiException (stale epoch, ids exhausted)."""
        self.cluster_control.check_broker_epoch(image, broker_id, broker_epoch)
        block = image.next_producer_id_block(broker_id)
        if block.first_producer_id > LONG_MAX - block.size:
            raise ApiException(
                ErrorCode.unknown_server_error,
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit",
            )
        record: Record = (
            "ProducerIdsRecord",
            0,
            {"brokerId": broker_id, "brokerEpoch": broker_epoch, "nextProducerId": block.next_block_first_id},
        )
        return ControllerResult([record], block)
