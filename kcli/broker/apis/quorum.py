"""The controller listener's own requests: the metadata quorum's Raft and the brokers' lifecycle.

As Kafka's ControllerApis: Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch (of `__cluster_metadata`)
go to the Raft client, FetchSnapshot too; DescribeQuorum is answered by the leader; BrokerRegistration, BrokerHeartbeat,
AlterPartition and AssignReplicasToDirs by the active controller, others answering NOT_CONTROLLER so the broker looks for the new one.
These APIs are served on `controller.listener.names` only, never to clients. Each is authorized as
ControllerApis does: CLUSTER_ACTION on the cluster for what nodes send each other, DESCRIBE for
DescribeQuorum, ALTER for the operator's AddRaftVoter, RemoveRaftVoter and UnregisterBroker; a denial is
CLUSTER_AUTHORIZATION_FAILED in the API's error response.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import RequestContext, caller_of, forward_unless_active, on_controller
from kcli.broker.apis.registry import ApiSpec
from kcli.broker.metadata.controller import BrokerHeartbeat
from kcli.broker.raft.raft_util import (
    ADD_RAFT_VOTER,
    BEGIN_QUORUM_EPOCH,
    DESCRIBE_QUORUM,
    END_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    REMOVE_RAFT_VOTER,
    UPDATE_RAFT_VOTER,
    VOTE,
)
from kcli.config import Listener
from kcli.protocol.messages import build, kio_versions, response_type
from kcli.security.acl import AclOperation

log = logging.getLogger("kcli.broker")

BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
UNREGISTER_BROKER = 64
ALLOCATE_PRODUCER_IDS = 67
ALTER_PARTITION = 56
ASSIGN_REPLICAS_TO_DIRS = 73
_NO_THROTTLE = datetime.timedelta(0)


async def handle_vote(ctx: RequestContext, request: Any) -> object:
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    return ctx.raft.handle_vote(request, ctx.api_version)


async def handle_begin_quorum_epoch(ctx: RequestContext, request: Any) -> object:
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    return ctx.raft.handle_begin_quorum_epoch(request, ctx.api_version)


async def handle_end_quorum_epoch(ctx: RequestContext, request: Any) -> object:
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    return ctx.raft.handle_end_quorum_epoch(request, ctx.api_version)


async def handle_raft_fetch(ctx: RequestContext, request: Any) -> object:
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    return await ctx.raft.handle_fetch(request, ctx.api_version)


async def handle_fetch_snapshot(ctx: RequestContext, request: Any) -> object:
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    return ctx.raft.handle_fetch_snapshot(request, ctx.api_version)


async def handle_describe_quorum(ctx: RequestContext, request: Any) -> object:
    if (refused := ctx.cluster_refusal(AclOperation.DESCRIBE)) is not None:
        return refused
    return ctx.raft.describe_quorum(ctx.api_version)


async def handle_describe_quorum_on_broker(ctx: RequestContext, request: Any) -> object:
    """A broker answers DescribeQuorum by asking the active controller (Kafka forwards it)."""
    if ctx.raft.quorum.is_leader or ctx.state.forward_to_controller is None:
        if (refused := ctx.cluster_refusal(AclOperation.DESCRIBE)) is not None:
            return refused
        return ctx.raft.describe_quorum(ctx.api_version)
    return await ctx.state.forward_to_controller(request, caller_of(ctx))


async def handle_add_raft_voter(ctx: RequestContext, request: Any) -> object:
    """AddRaftVoter (KIP-853): the Raft leader answers; a broker forwards it to the active controller
    (Kafka's KafkaApis.forwardToControllerOrFail), which is the Raft leader."""
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    if (refused := ctx.cluster_refusal(AclOperation.ALTER)) is not None:
        return refused
    return await ctx.raft.handle_add_raft_voter(request, ctx.api_version)


async def handle_remove_raft_voter(ctx: RequestContext, request: Any) -> object:
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    if (refused := ctx.cluster_refusal(AclOperation.ALTER)) is not None:
        return refused
    return await ctx.raft.handle_remove_raft_voter(request, ctx.api_version)


async def handle_update_raft_voter(ctx: RequestContext, request: Any) -> object:
    """UpdateRaftVoter: a voter announcing its endpoints to the leader (controller listener only)."""
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    return await ctx.raft.handle_update_raft_voter(request, ctx.api_version)


async def handle_broker_registration(ctx: RequestContext, request: Any) -> object:
    """A broker's new incarnation: registered fenced, with its broker epoch (the record's offset)."""
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    cls = response_type(BROKER_REGISTRATION, ctx.api_version)
    if request.cluster_id != ctx.raft.cluster_id:
        return build(
            cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.inconsistent_cluster_id, broker_epoch=-1
        )
    listeners = [Listener(item.name, item.host, item.port) for item in request.listeners]
    listener = listeners[0] if listeners else None
    if listener is None:
        return build(
            cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.invalid_registration, broker_epoch=-1
        )
    epoch, refused = await on_controller(
        ctx.controller.register_broker(
            listener,
            broker_id=request.broker_id,
            incarnation_id=request.incarnation_id,
            rack=request.rack,
            log_dirs=tuple(getattr(request, "log_dirs", ())),
            fenced=True,
            # Clean-shutdown detection needs v3+ (before it, no previous broker epoch is trusted).
            previous_broker_epoch=request.previous_broker_epoch if ctx.api_version >= 3 else -1,
            features=[(f.name, f.min_supported_version, f.max_supported_version) for f in request.features],
            endpoints=[
                (x, item.security_protocol) for x, item in zip(listeners, request.listeners, strict=True)
            ],
        )
    )
    if refused.is_failure:
        if refused.code is not ErrorCode.not_controller:
            log.warning("broker %d not registered: %s", request.broker_id, refused.message)
        return build(cls, throttle_time=_NO_THROTTLE, error_code=refused.code, broker_epoch=-1)
    log.info("registered broker %d (epoch %d) at %s", request.broker_id, epoch, listener)
    return build(cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, broker_epoch=epoch)


async def handle_broker_heartbeat(ctx: RequestContext, request: Any) -> object:
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    cls = response_type(BROKER_HEARTBEAT, ctx.api_version)
    heartbeat = BrokerHeartbeat(
        request.broker_id,
        request.broker_epoch,
        request.current_metadata_offset,
        request.want_fence,
        request.want_shut_down,
    )
    reply, refused = await on_controller(ctx.controller.broker_heartbeat(heartbeat))
    if reply is not None:
        return build(
            cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.none,
            is_caught_up=reply.is_caught_up,
            is_fenced=reply.is_fenced,
            should_shut_down=reply.should_shut_down,
        )
    return build(
        cls,
        throttle_time=_NO_THROTTLE,
        error_code=refused.code,
        is_caught_up=False,
        is_fenced=True,
        should_shut_down=False,
    )


async def handle_unregister_broker(ctx: RequestContext, request: Any) -> object:
    """UnregisterBroker, on the active controller (a broker forwards it there)."""
    cls = response_type(UNREGISTER_BROKER, ctx.api_version)
    forwarded = await forward_unless_active(ctx, request)
    if forwarded is not None:
        return forwarded
    if (denied := ctx.cluster_refusal(AclOperation.ALTER)) is not None:
        return denied
    _, refused = await on_controller(ctx.controller.unregister_broker(request.broker_id))
    return build(cls, throttle_time=_NO_THROTTLE, error_code=refused.code, error_message=refused.message)


async def handle_allocate_producer_ids(ctx: RequestContext, request: Any) -> object:
    """A broker's next block of producer ids, recorded in the metadata log (ProducerIdsRecord)."""
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    cls = response_type(ALLOCATE_PRODUCER_IDS, ctx.api_version)
    block, refused = await on_controller(
        ctx.controller.allocate_producer_ids(request.broker_id, request.broker_epoch)
    )
    if block is not None:
        return build(
            cls,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.none,
            producer_id_start=block.first_producer_id,
            producer_id_len=block.size,
        )
    return build(
        cls, throttle_time=_NO_THROTTLE, error_code=refused.code, producer_id_start=-1, producer_id_len=0
    )


async def handle_alter_partition(ctx: RequestContext, request: Any) -> object:
    """A partition leader's ISR change; NOT_CONTROLLER (top level) from a controller that is not active."""
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    response, error = await on_controller(ctx.controller.alter_partition(request))
    if error.is_failure:
        return build(
            response_type(ALTER_PARTITION, ctx.api_version),
            throttle_time=_NO_THROTTLE,
            error_code=error.code,
            topics=(),
        )
    return response


async def handle_assign_replicas_to_dirs(ctx: RequestContext, request: Any) -> object:
    """A broker's replicas placed in its log dirs (KIP-858); NOT_CONTROLLER from a standby controller."""
    if (refused := ctx.cluster_refusal(AclOperation.CLUSTER_ACTION)) is not None:
        return refused
    response, error = await on_controller(ctx.controller.assign_replicas_to_dirs(request))
    if error.is_failure:
        return build(
            response_type(ASSIGN_REPLICAS_TO_DIRS, ctx.api_version),
            throttle_time=_NO_THROTTLE,
            error_code=error.code,
            directories=(),
        )
    return response


CONTROLLER_APIS = [
    ApiSpec(FETCH, 17, 17, handle_raft_fetch),
    ApiSpec(VOTE, 2, 2, handle_vote),
    ApiSpec(BEGIN_QUORUM_EPOCH, 1, 1, handle_begin_quorum_epoch),
    ApiSpec(END_QUORUM_EPOCH, 1, 1, handle_end_quorum_epoch),
    ApiSpec(DESCRIBE_QUORUM, 0, 2, handle_describe_quorum),
    ApiSpec(FETCH_SNAPSHOT, 1, 1, handle_fetch_snapshot),
    ApiSpec(BROKER_REGISTRATION, 0, 4, handle_broker_registration),
    ApiSpec(BROKER_HEARTBEAT, 0, 1, handle_broker_heartbeat),
    ApiSpec(ALLOCATE_PRODUCER_IDS, 0, 0, handle_allocate_producer_ids),
    ApiSpec(UNREGISTER_BROKER, 0, 0, handle_unregister_broker),
    ApiSpec(ALTER_PARTITION, *kio_versions(ALTER_PARTITION), handle_alter_partition),  # type: ignore[misc]
    ApiSpec(ASSIGN_REPLICAS_TO_DIRS, 0, 0, handle_assign_replicas_to_dirs),
    ApiSpec(ADD_RAFT_VOTER, 0, 1, handle_add_raft_voter),
    ApiSpec(REMOVE_RAFT_VOTER, 0, 0, handle_remove_raft_voter),
    ApiSpec(UPDATE_RAFT_VOTER, 0, 0, handle_update_raft_voter),
]
"""Served on the controller listener only (with ApiVersions and the admin requests brokers forward)."""

BROKER_APIS = [
    ApiSpec(DESCRIBE_QUORUM, 0, 2, handle_describe_quorum_on_broker),
    ApiSpec(UNREGISTER_BROKER, 0, 0, handle_unregister_broker),
    ApiSpec(ADD_RAFT_VOTER, 0, 1, handle_add_raft_voter),
    ApiSpec(REMOVE_RAFT_VOTER, 0, 0, handle_remove_raft_voter),
]
"""What a broker listener serves of these: DescribeQuorum and UnregisterBroker, forwarded to the leader."""
