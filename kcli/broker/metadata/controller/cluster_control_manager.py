"""ClusterControlManager: broker registrations, fencing, listeners and broker epochs.

Who is registered, fenced or in controlled shutdown is read from the image; the other managers ask
here whether a broker may lead or join an ISR, which log dir a new replica goes to, and whether a
broker's epoch is current. A registration's broker epoch is the offset its record is written at, so
every new incarnation has a higher epoch than the last.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import ApiException, ControllerResult, Record
from kcli.broker.metadata.controller.feature_control_manager import (
    MAX_METADATA_VERSION,
    MIN_METADATA_VERSION,
)
from kcli.broker.metadata.image import (
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    METADATA_VERSION,
    BrokerRegistration,
    ClusterMetadataImage,
)
from kcli.config import Listener

PLAINTEXT = 0  # SecurityProtocol.PLAINTEXT id
REGISTER_BROKER_RECORD_VERSION = 3
"""The RegisterBrokerRecord version written at MV 3.9-IV0 (MetadataVersion.registerBrokerRecordVersion)."""


class ClusterControlManager:
    """Broker registration and the questions about brokers the other control managers ask."""

    def register_broker(
        self,
        broker_id: int,
        listener: Listener,
        *,
        broker_epoch: int,
        incarnation_id: uuid.UUID | None = None,
        rack: str | None = None,
        log_dirs: Sequence[uuid.UUID] = (),
    ) -> ControllerResult[int]:
        """The RegisterBrokerRecord (unfenced) of a new incarnation; the response is its broker epoch."""
        record = {
            "brokerId": broker_id,
            "incarnationId": incarnation_id or uuid.uuid4(),
            "brokerEpoch": broker_epoch,
            "endPoints": [
                {
                    "name": listener.name,
                    "host": listener.host,
                    "port": listener.port,
                    "securityProtocol": PLAINTEXT,
                }
            ],
            "features": [
                {
                    "name": METADATA_VERSION,
                    "minSupportedVersion": MIN_METADATA_VERSION,
                    "maxSupportedVersion": MAX_METADATA_VERSION,
                }
            ],
            "rack": rack,
            "fenced": False,
            "inControlledShutdown": False,
            "logDirs": list(log_dirs),
        }
        records: list[Record] = [("RegisterBrokerRecord", REGISTER_BROKER_RECORD_VERSION, record)]
        return ControllerResult(records, broker_epoch)

    def check_broker_epoch(self, image: ClusterMetadataImage, broker_id: int, broker_epoch: int) -> None:
        """Raise STALE_BROKER_EPOCH unless `broker_epoch` is the broker's current registration."""
        registration = image.broker(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            raise ApiException(
                ErrorCode.stale_broker_epoch,
                f"Expected broker epoch {registration.broker_epoch if registration else -1}, "
                f"but got broker epoch {broker_epoch}",
            )

    def usable_brokers(self, image: ClusterMetadataImage) -> list[BrokerRegistration]:
        """Brokers replicas may be placed on: registered and not in controlled shutdown (fenced or not)."""
        return [b for b in image.brokers_by_id.values() if not b.in_controlled_shutdown]

    def active_brokers(self, image: ClusterMetadataImage, brokers: Iterable[int]) -> list[int]:
        """Those of `brokers` that may join an ISR: registered, unfenced and not shutting down."""
        out = []
        for broker in brokers:
            registration = image.broker(broker)
            if (
                registration is not None
                and not registration.fenced
                and not registration.in_controlled_shutdown
            ):
                out.append(broker)
        return out

    def default_dir(self, image: ClusterMetadataImage, broker: int) -> uuid.UUID:
        """ClusterControlManager.defaultDir: the broker's only log dir, else UNASSIGNED."""
        registration = image.broker(broker)
        if registration is None:
            return DIRECTORY_UNASSIGNED
        if not registration.log_dirs:
            return DIRECTORY_MIGRATING
        if len(registration.log_dirs) == 1:
            return registration.log_dirs[0]
        return DIRECTORY_UNASSIGNED
