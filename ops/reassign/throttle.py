"""Replication throttles as kafka-reassign-partitions.sh sets and clears them (IncrementalAlterConfigs).

Setting: on each topic, `leader.replication.throttled.replicas` (every source replica) and
`follower.replication.throttled.replicas` (every destination), see moves.py; on each reassigning broker,
`leader.replication.throttled.rate` and `follower.replication.throttled.rate` (--throttle), and on each
broker moving replicas between its log dirs `replica.alter.log.dirs.io.max.bytes.per.second`
(--replica-alter-log-dirs-throttle). Unlike Kafka's tool, a broker that is down (not in the metadata)
is skipped and named, instead of failing the command halfway with some throttles set.

Clearing (Kafka's clearAllThrottles): the three broker rates deleted on every live broker and the two
topic lists on every topic of the reassignment. A broker resource is altered through that broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client import ClientError, KafkaClient
from kcli.cluster import Cluster
from kcli.protocol.configs import OpType, ResourceType
from kcli.protocol.messages import nested_type
from ops.reassign.assignment import ReassignError
from ops.reassign.moves import MoveMap, follower_throttles, leader_throttles, reassigning_brokers

INCREMENTAL_ALTER_CONFIGS = 44
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_LEVEL_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)
TOPIC_LEVEL_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)


@dataclass(frozen=True, slots=True)
class ThrottleResult:
    brokers: tuple[int, ...]
    """Brokers the rates were set (or cleared) on."""
    skipped: tuple[int, ...]
    """Brokers left alone because they are down."""
    topics: tuple[str, ...]


async def set_replication_throttle(
    cluster: Cluster, moves: MoveMap, rate: int, live: Iterable[int]
) -> ThrottleResult:
    """modifyReassignmentThrottle: the topic lists, then the rates on the live reassigning brokers."""
    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    topic_ops = {
        topic: [(LEADER_REPLICAS, leaders[topic]), (FOLLOWER_REPLICAS, followers[topic])]
        for topic in sorted(moves)
    }
    await _alter_topics(cluster, {t: [(k, OpType.SET, v) for k, v in ops] for t, ops in topic_ops.items()})
    involved = reassigning_brokers(moves)
    up, down = _split(involved, live)
    for broker in up:
        await _alter_broker(
            cluster, broker, [(LEADER_RATE, OpType.SET, str(rate)), (FOLLOWER_RATE, OpType.SET, str(rate))]
        )
    return ThrottleResult(up, down, tuple(sorted(moves)))


async def set_log_dir_throttle(
    cluster: Cluster, brokers: Iterable[int], rate: int, live: Iterable[int]
) -> ThrottleResult:
    """modifyLogDirThrottle, on the live ones of `brokers`."""
    up, down = _split(brokers, live)
    for broker in up:
        await _alter_broker(cluster, broker, [(LOG_DIRS_RATE, OpType.SET, str(rate))])
    return ThrottleResult(up, down, ())


async def clear_throttles(
    cluster: Cluster, brokers: Iterable[int], topics: Iterable[str], live: Iterable[int]
) -> ThrottleResult:
    """clearAllThrottles: the broker rates on the live ones of `brokers`, the lists on `topics`."""
    up, down = _split(brokers, live)
    for broker in up:
        await _alter_broker(cluster, broker, [(k, OpType.DELETE, None) for k in BROKER_LEVEL_THROTTLES])
    names = tuple(sorted(set(topics)))
    if names:
        await _alter_topics(
            cluster, {t: [(k, OpType.DELETE, None) for k in TOPIC_LEVEL_THROTTLES] for t in names}
        )
    return ThrottleResult(up, down, names)


def _split(brokers: Iterable[int], live: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    alive = set(live)
    wanted = sorted(set(brokers))
    return tuple(b for b in wanted if b in alive), tuple(b for b in wanted if b not in alive)


async def _alter_topics(cluster: Cluster, ops: Mapping[str, list[tuple[str, OpType, str | None]]]) -> None:
    await _alter(cluster.bootstrap, [(ResourceType.TOPIC, t, o) for t, o in ops.items()])


async def _alter_broker(cluster: Cluster, broker: int, ops: list[tuple[str, OpType, str | None]]) -> None:
    try:
        client = await cluster.node(broker)
    except ClientError as exc:
        raise ReassignError(
            f"cannot reach broker {broker} to change its throttle: {str(exc).rstrip('.')}."
        ) from None
    await _alter(client, [(ResourceType.BROKER, str(broker), ops)])


async def _alter(
    client: KafkaClient, resources: list[tuple[ResourceType, str, list[tuple[str, OpType, str | None]]]]
) -> None:
    cls = client.request_type(INCREMENTAL_ALTER_CONFIGS)
    config_cls = nested_type(cls, "AlterableConfig")
    resource_cls = nested_type(cls, "AlterConfigsResource")
    request = cls(
        resources=tuple(
            resource_cls(
                resource_type=int(kind),
                resource_name=name,
                configs=tuple(config_cls(name=k, config_operation=int(op), value=v) for k, op, v in ops),
            )
            for kind, name, ops in resources
        ),
        validate_only=False,
    )
    response = await client.send(request)
    for result in response.responses:
        if result.error_code != ErrorCode.none:
            raise ReassignError(_refusal(result))


def _refusal(result: Any) -> str:
    what = "broker" if result.resource_type == ResourceType.BROKER else "topic"
    reason = (result.error_message or ErrorCode(result.error_code).name.upper()).rstrip(".")
    return f"cannot change the throttle configs of {what} {result.resource_name}: {reason}."
