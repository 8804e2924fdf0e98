"""ClusterControlManager: broker registrations, fencing, listeners and broker epochs.

Who is registered, fenced or in controlled shutdown is read from the image; the other managers ask
here whether a broker may lead or join an ISR, which log dir a new replica goes to, and whether a
broker's epoch is current. A registration's broker epoch is the offset its record is written at, so
every new incarnation has a higher epoch than the last.
"""

from __future__ import annotations

import enum
import logging
import sys
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import ApiException, ControllerResult, Record
from kcli.broker.metadata.controller.feature_control_manager import (
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
from kcli.features import SUPPORTED_FEATURES, supported_range

log = logging.getLogger("kcli.broker.metadata")

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
    in_controlled_shutdown: bool = False


def supported_features() -> list[tuple[str, int, int]]:
    """What this software supports, as its brokers announce it in BrokerRegistration: metadata.version
    and every feature kcli implements, each with its (min, max) level."""
    return [(name, *supported_range(name)) for name in (METADATA_VERSION, *SUPPORTED_FEATURES)]


def registration_features(
    image: ClusterMetadataImage | None, broker_id: int, features: Sequence[tuple[str, int, int]] | None
) -> list[dict[str, object]]:
    """The RegisterBrokerRecord's features: the broker's, each finalized level checked against them
    (a feature the broker does not name supports level 0 only; a broker that names no metadata.version
    is taken to support the first KRaft level only)."""
    announced = list(supported_features() if features is None else features)
    finalized = dict(image.features) if image is not None else {}
    if all(name != METADATA_VERSION for name, _, _ in announced):
        announced.append((METADATA_VERSION, MIN_METADATA_VERSION, MIN_METADATA_VERSION))
    for name, low, high in announced:
        level = finalized.get(name, 1 if name == METADATA_VERSION else 0)
        if image is not None and not low <= level <= high:
            raise ApiException(
                ErrorCode.unsupported_version,
                f"Unable to register because the broker does not support finalized version {level} of "
                f"{name}. The broker wants a version between {low} and {high}, inclusive.",
            )
    names = {name for name, _, _ in announced}
    for name, level in finalized.items():
        if level != 0 and name not in names:
            raise ApiException(
                ErrorCode.unsupported_version,
                f"Unable to register because the broker does not support finalized version {level} of "
                f"{name}. The broker wants a version between 0 and 0, inclusive.",
            )
    return [
        {"name": name, "minSupportedVersion": low, "maxSupportedVersion": high}
        for name, low, high in announced
    ]


class BrokerControlState(enum.Enum):
    """Where a broker is in its lifecycle, as the active controller sees it (BrokerControlState)."""

    FENCED = (True, False, False)
    UNFENCED = (False, False, False)
    CONTROLLED_SHUTDOWN = (False, True, False)
    SHUTDOWN_NOW = (True, False, True)

    @property
    def fenced(self) -> bool:
        return self.value[0]

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.value[1]

    @property
    def should_shut_down(self) -> bool:
        return self.value[2]


class ClusterControlManager:
    """Broker registration and the questions about brokers the other control managers ask.

    `last_contact`, `metadata_offsets` and `controlled_shutdown_offsets` are the soft state Kafka's
    BrokerHeartbeatManager keeps outside the log: when each broker was last heard from (monotonic
    seconds, for session expiry), what it had replayed, and who is in controlled shutdown; a new
    active controller starts every session afresh.
    """

    def __init__(self) -> None:
        self.last_contact: dict[int, float] = {}
        self.metadata_offsets: dict[int, int] = {}
        """The metadata offset each broker reported in its last heartbeat."""
        self.controlled_shutdown_offsets: dict[int, int] = {}
        """Brokers in controlled shutdown: the offset every active broker must reach before they go."""
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
        features: Sequence[tuple[str, int, int]] | None = None,
        endpoints: Sequence[tuple[Listener, int]] | None = None,
    ) -> ControllerResult[int]:
        """The RegisterBrokerRecord of a new incarnation, fenced until its heartbeats say it caught up;
        the response is its broker epoch.

        Its log dirs are checked as Kafka checks them: none reserved (kio reads the all-zero one,
        UNASSIGNED, as None), none twice. `features` are the (name, min, max) levels the broker supports
        (this software's when not given): each finalized feature must be in its range, else
        UNSUPPORTED_VERSION (ClusterControlManager.processRegistrationFeature). `endpoints` are every
        listener the broker registers with its security protocol id; without them, `listener` alone
        (PLAINTEXT).
        """
        if any(directory is None or directory.int < _RESERVED_DIRECTORY_IDS for directory in log_dirs):
            raise ApiException(ErrorCode.invalid_registration, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            raise ApiException(ErrorCode.invalid_registration, "Duplicate directory ID in request")
        if image is not None and session_timeout is not None and now is not None:
            current = image.broker(broker_id)
            # Only a broker this controller heard from counts as alive: after a failover, a restarted
            # broker re-registers at once and its last incarnation is fenced in the same batch.
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
                {"name": item.name, "host": item.host, "port": item.port, "securityProtocol": protocol}
                for item, protocol in (endpoints or [(listener, PLAINTEXT)])
            ],
            "features": registration_features(image, broker_id, features),
            "rack": rack,
            "fenced": fenced,
            "inControlledShutdown": False,
            "logDirs": list(log_dirs),
        }
        records: list[Record] = [("RegisterBrokerRecord", REGISTER_BROKER_RECORD_VERSION, record)]
        return ControllerResult(records, broker_epoch)

    @staticmethod
    def registered_epoch(image: ClusterMetadataImage, broker_id: int) -> int:
        """The broker epoch the cluster holds for this broker id, -2 when it has none (what a previous
        broker epoch read from a clean-shutdown file is compared with)."""
        registration = image.broker(broker_id)
        return -2 if registration is None else registration.broker_epoch

    # --- the heartbeat state machine (Kafka's BrokerHeartbeatManager) -----------------------------------

    def current_broker_state(self, image: ClusterMetadataImage, broker_id: int) -> BrokerControlState:
        """FENCED or UNFENCED as the image says; CONTROLLED_SHUTDOWN while this controller holds the
        broker's controlled-shutdown offset (soft state: a new active controller starts it afresh)."""
        registration = image.broker(broker_id)
        if registration is None or registration.fenced:
            return BrokerControlState.FENCED
        if broker_id in self.controlled_shutdown_offsets:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED

    def calculate_next_broker_state(
        self,
        image: ClusterMetadataImage,
        heartbeat: BrokerHeartbeat,
        has_leaderships: Callable[[], bool],
    ) -> tuple[BrokerControlState, BrokerControlState]:
        """(current, next) state for a heartbeat: BrokerHeartbeatManager.calculateNextBrokerState."""
        registration = image.broker(heartbeat.broker_id)
        assert registration is not None
        current = self.current_broker_state(image, heartbeat.broker_id)
        if current is BrokerControlState.FENCED:
            if heartbeat.want_shut_down:
                log.info(
                    "Fenced broker %d has requested and been granted an immediate shutdown.",
                    heartbeat.broker_id,
                )
                return current, BrokerControlState.SHUTDOWN_NOW
            if not heartbeat.want_fence and heartbeat.metadata_offset >= registration.broker_epoch:
                log.info(
                    "The request from broker %d to unfence has been granted because it has caught up with "
                    "the offset of its register broker record %d.",
                    heartbeat.broker_id,
                    registration.broker_epoch,
                )
                return current, BrokerControlState.UNFENCED
            return current, BrokerControlState.FENCED
        if current is BrokerControlState.UNFENCED:
            if heartbeat.want_fence:
                return current, (
                    BrokerControlState.SHUTDOWN_NOW if heartbeat.want_shut_down else BrokerControlState.FENCED
                )
            if heartbeat.want_shut_down:
                if has_leaderships():
                    log.info(
                        "Unfenced broker %d has requested and been granted a controlled shutdown.",
                        heartbeat.broker_id,
                    )
                    return current, BrokerControlState.CONTROLLED_SHUTDOWN
                log.info(
                    "Unfenced broker %d has requested and been granted an immediate shutdown.",
                    heartbeat.broker_id,
                )
                return current, BrokerControlState.SHUTDOWN_NOW
            return current, BrokerControlState.UNFENCED
        # CONTROLLED_SHUTDOWN: done once it leads nothing and every active broker has seen the moves.
        if has_leaderships():
            return current, BrokerControlState.CONTROLLED_SHUTDOWN
        lowest = self.lowest_active_offset(image)
        if self.controlled_shutdown_offsets[heartbeat.broker_id] <= lowest:
            log.info(
                "The request from broker %d to shut down has been granted since the lowest active offset %d "
                "is now greater than the broker's controlled shutdown offset %d.",
                heartbeat.broker_id,
                lowest,
                self.controlled_shutdown_offsets[heartbeat.broker_id],
            )
            return current, BrokerControlState.SHUTDOWN_NOW
        return current, BrokerControlState.CONTROLLED_SHUTDOWN

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int, now: float) -> None:
        """A heartbeat was processed: renew the session and remember the broker's metadata offset.

        A fenced broker leaves controlled shutdown; its next heartbeat shuts it down at once.
        """
        self.last_contact[broker_id] = now
        self.metadata_offsets[broker_id] = metadata_offset
        if fenced:
            self.controlled_shutdown_offsets.pop(broker_id, None)

    def activate(self, now: float) -> None:
        """This controller became the active one: every registered broker's session starts now
        (Kafka's ClusterControlManager.activate), whatever the last controller knew."""
        self.last_contact = {}
        self.sessions_since = now

    def fence(self, broker_id: int) -> None:
        """The broker was fenced without a heartbeat (session expiry)."""
        self.controlled_shutdown_offsets.pop(broker_id, None)

    def forget(self, broker_id: int) -> None:
        """The broker was unregistered: its soft state goes too."""
        self.last_contact.pop(broker_id, None)
        self.metadata_offsets.pop(broker_id, None)
        self.controlled_shutdown_offsets.pop(broker_id, None)

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """The first controlled-shutdown batch's end offset: every active broker must reach it."""
        self.controlled_shutdown_offsets.setdefault(broker_id, offset)

    def lowest_active_offset(self, image: ClusterMetadataImage) -> int:
        """The lowest metadata offset reported by an active broker (unfenced, not shutting down);
        a broker not heard from by this controller counts as -1; no active broker: no limit."""
        offsets = [
            self.metadata_offsets.get(registration.broker_id, -1)
            for registration in image.brokers_by_id.values()
            if not registration.fenced
            and not registration.in_controlled_shutdown
            and registration.broker_id not in self.controlled_shutdown_offsets
        ]
        return min(offsets, default=sys.maxsize)

    @staticmethod
    def fence_record(broker_id: int, broker_epoch: int, *, fenced: bool = True) -> Record:
        """BrokerRegistrationChangeRecord with Fenced 1 (fence) or -1 (unfence), as MV 3.3+ writes it."""
        change = {"brokerId": broker_id, "brokerEpoch": broker_epoch, "fenced": 1 if fenced else -1}
        return ("BrokerRegistrationChangeRecord", 0, change)

    def expired_sessions(self, image: ClusterMetadataImage, now: float, session_timeout: float) -> list[int]:
        """Unfenced brokers whose last heartbeat is older than broker.session.timeout.ms."""
        return [broker_id for broker_id, last in self._sessions(image) if now - last > session_timeout]

    def next_session_expiry(self, image: ClusterMetadataImage, session_timeout: float) -> float | None:
        """When the first live session expires (None: no unfenced broker). Every later event (a
        heartbeat, a registration, an unfencing, activation) starts a session at its own time, so
        none expires before this (Kafka's BrokerHeartbeatManager keeps them ordered for the same)."""
        return min((last + session_timeout for _, last in self._sessions(image)), default=None)

    def _sessions(self, image: ClusterMetadataImage) -> list[tuple[int, float]]:
        """(broker id, last contact) of each unfenced broker."""
        return [
            (registration.broker_id, self.last_contact.get(registration.broker_id, self.sessions_since))
            for registration in image.brokers_by_id.values()
            if not registration.fenced
        ]

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
