"""InitProducerId (key 22): a producer id and epoch for an idempotent (or transactional) producer.

Follows `KafkaApis.handleInitProducerIdRequest` and `TransactionCoordinator.handleInitProducerId`:
- a producer id without an epoch (or the reverse) is INVALID_REQUEST;
- without a transactional id the request is always granted: a fresh producer id, epoch 0, whatever
  id and epoch the producer sent (v3+ lets it send its old ones);
- ids come from a block of 1000 that the controller records in the metadata log (a ProducerIdsRecord,
  as KRaft's ProducerIdControlManager does), so no id is handed out twice, even across restarts;
- with a transactional id the transaction coordinator decides. Until one exists (`node.transaction_coordinator`
  is the seam it plugs into) the answer is what Kafka gives while the coordinator is not available:
  INVALID_REQUEST for an empty id, INVALID_TRANSACTION_TIMEOUT for a timeout outside
  (0, transaction.max.timeout.ms], else COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.producer_ids import ProducerIdManager, ProducerIdsUnavailable
from kcli.protocol.messages import build, response_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger("kcli.broker")

API_KEY = 22
MAX_VERSION = 5  # Kafka's InitProducerIdRequest validVersions (v6, two-phase commit, is not released)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_NO_THROTTLE = datetime.timedelta(0)


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> object:
    version = ctx.api_version
    if ctx.state.authorizer is not None:
        refused = _authorization_error(ctx, request.transactional_id)
        if refused is not None:
            return _response(version, refused)
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    producer_epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return _response(version, ErrorCode.invalid_request)
    transactional_id = request.transactional_id
    if transactional_id is None:
        try:
            new_id = await producer_id_manager(ctx).generate_producer_id()
        except ProducerIdsUnavailable as e:
            log.warning(
                "InitProducerId from client %r: %s (answered COORDINATOR_LOAD_IN_PROGRESS)", ctx.client_id, e
            )
            return _response(version, ErrorCode.coordinator_load_in_progress)
        return _response(version, ErrorCode.none, new_id, 0)

    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    node = ctx.state.node
    coordinator = getattr(node, "transaction_coordinator", None)
    if coordinator is not None:
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        error, new_id, epoch = await coordinator.handle_init_producer_id(
            transactional_id, timeout_ms, expected
        )
        if version < 4 and error is ErrorCode.producer_fenced:
            error = ErrorCode.invalid_producer_epoch  # older clients do not know PRODUCER_FENCED
        return _response(version, error, new_id, epoch)
    if transactional_id == "":
        return _response(version, ErrorCode.invalid_request)
    max_timeout_ms = int(ctx.state.config["transaction.max.timeout.ms"])  # type: ignore[call-overload]
    if not 0 < timeout_ms <= max_timeout_ms:
        return _response(version, ErrorCode.invalid_transaction_timeout)
    return _response(version, ErrorCode.coordinator_not_available)


def _authorization_error(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """KafkaApis.handleInitProducerIdRequest: WRITE on the transactional id; without one, IDEMPOTENT_WRITE
    on the cluster or WRITE on some topic (KIP-679, Kafka 3.0+)."""
    if transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.transactional_id_authorization_failed
        return None
    if ctx.authorize(
        AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    ) or ctx.authorize_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


def producer_id_manager(ctx: RequestContext) -> ProducerIdManager:
    node = ctx.state.node
    if node is None:
        raise ProducerIdsUnavailable("this broker was started without storage, so it has no controller")
    return node.producer_ids


def _response(
    version: int, error: ErrorCode, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH
) -> object:
    return build(
        response_type(API_KEY, version),
        throttle_time=_NO_THROTTLE,
        error_code=error,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


APIS = [ApiSpec(API_KEY, 0, MAX_VERSION, handle_init_producer_id)]
