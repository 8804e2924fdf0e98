"""ClusterControlManager: broker registrations, fencing, listeners and broker epochs.

Who is registered, fenced or in controlled shutdown is read from the image; the other managers ask
here whether a broker may lead or join an ISR, which log dir a new replica goes to, and whether a
broker's epoch is current. A registration's broker epoch is the offset its record is written at, so
every new incarnation has a higher epoch than the last.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
_RESERVED_DIRECTORY_IDS = 100
"""DirectoryId reserves the first 100 UUIDs (UNASSIGNED, LOST, MIGRATING and room for more)."""
"""The RegisterBrokerRecord version written at MV 3.9-IV0 (MetadataVersion.registerBrokerRecordVersion)."""


@dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    broker_id: int
    broker_epoch: int
    metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


class ClusterControlManager:
    """Broker registration and the questions about brokers the other control managers ask.

    `last_contact` is the soft state Kafka keeps outside the log: when each broker was last heard
    from (monotonic seconds), for session expiry; a new active controller starts every session afresh.
    """

    def __init__(self) -> None:
        self.last_contact: dict[int, float] = {}
        self.sessions_since = 0.0
        """When this controller became active: a broker not heard from since has had that long."""

    def register_broker(
        self,
        broker_id: int,
        listener: Listener,
        *,
        broker_epoch: int,
        incarnation_id: uuid.UUID | None = None,
        rack: str | None = None,
        log_dirs: Sequence[uuid.UUID] = (),
        fenced: bool = True,
        image: ClusterMetadataImage | None = None,
        now: float | None = None,
        session_timeout: float | None = None,
    ) -> ControllerResult[int]:
        """The RegisterBrokerRecord of a new incarnation, fenced until its heartbeats say it caught up;
        the response is its broker epoch.

        Its log dirs are checked as Kafka checks them: none reserved (kio reads the all-zero one,
        UNASSIGNED, as None), none twice.
        """
        if any(directory is None or directory.int < _RESERVED_DIRECTORY_IDS for directory in log_dirs):
            raise ApiException(ErrorCode.invalid_registration, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            raise ApiException(ErrorCode.invalid_registration, "Duplicate directory ID in request")
        if image is not None and session_timeout is not None and now is not None:
            current = image.broker(broker_id)
            last = self.last_contact.get(broker_id)
            if (
                current is not None
                and incarnation_id is not None
                and current.incarnation_id != incarnation_id
                and not current.fenced
                and last is not None
                and now - last < session_timeout
            ):
                raise ApiException(
                    ErrorCode.duplicate_broker_registration,
                    f"Another broker is registered with that broker id ({broker_id}).",
                )
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
            "fenced": fenced,
            "inControlledShutdown": False,
            "logDirs": list(log_dirs),
        }
        records: list[Record] = [("RegisterBrokerRecord", REGISTER_BROKER_RECORD_VERSION, record)]
        return ControllerResult(records, broker_epoch)

    def process_heartbeat(
        self,
        image: ClusterMetadataImage,
        heartbeat: BrokerHeartbeat,
        now: float,
    ) -> ControllerResult[HeartbeatReply]:
        """Kafka's BrokerHeartbeatManager state machine, without controlled shutdown's leader moves.

        A fenced broker is unfenced once its metadata offset reaches its registration record; a broker
        that wants to shut down or be fenced is fenced. The heartbeat renews the broker's session.
        """
        self.check_broker_epoch(image, heartbeat.broker_id, heartbeat.broker_epoch)
        registration = image.broker(heartbeat.broker_id)
        assert registration is not None
        self.last_contact[heartbeat.broker_id] = now
        caught_up = heartbeat.metadata_offset >= registration.broker_epoch
        records: list[Record] = []
        fenced = registration.fenced
        if heartbeat.want_shut_down or heartbeat.want_fence:
            if not fenced:
                records.append(self.fence_record(registration.broker_id, registration.broker_epoch))
                fenced = True
        elif fenced and caught_up:
            records.append(self.fence_record(registration.broker_id, registration.broker_epoch, fenced=False))
            fenced = False
        return ControllerResult(records, HeartbeatReply(caught_up, fenced, heartbeat.want_shut_down))

    @staticmethod
    def fence_record(broker_id: int, broker_epoch: int, *, fenced: bool = True) -> Record:
        """BrokerRegistrationChangeRecord with Fenced 1 (fence) or -1 (unfence), as MV 3.3+ writes it."""
        change = {"brokerId": broker_id, "brokerEpoch": broker_epoch, "fenced": 1 if fenced else -1}
        return ("BrokerRegistrationChangeRecord", 0, change)

    def expired_sessions(self, image: ClusterMetadataImage, now: float, session_timeout: float) -> list[int]:
        """Unfenced brokers whose last heartbeat is older than broker.session.timeout.ms."""
        expired = []
        for registration in image.brokers_by_id.values():
            last = self.last_contact.get(registration.broker_id, self.sessions_since)
            if not registration.fenced and now - last > session_timeout:
                expired.append(registration.broker_id)
        return expired

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

    def is_active(self, image: ClusterMetadataImage, broker_id: int) -> bool:
        """ClusterControlManager.isActive: registered, unfenced and not in controlled shutdown."""
        registration = image.broker(broker_id)
        return (
            registration is not None and not registration.fenced and not registration.in_controlled_shutdown
        )

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
