"""The consumer groups' server assignors and reconciliation (kcli.broker.group.assignors and
.reconciliation) as functions: what Kafka's UniformAssignor, RangeAssignor and CurrentAssignmentBuilder
tests check, and the group timeouts' configuration rules."""

from __future__ import annotations

import uuid

import pytest

from kcli.broker.group.assignors import MemberSubscription, assign_range, assign_uniform, configured_assignors
from kcli.broker.group.consumer_group import ConsumerGroupMember, MemberState
from kcli.broker.group.reconciliation import FencedMemberEpoch, reconcile
from kcli.config import BrokerConfig, ConfigError

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def sizes(assignment: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in assignment.items()}


def test_uniform_balances_and_keeps_partitions_where_they_are() -> None:
    members = {m: MemberSubscription(frozenset({T1})) for m in ("a", "b", "c")}
    first = assign_uniform(members, {T1: 7}, {})
    assert sorted(sizes(first).values()) == [2, 2, 3]
    assert set().union(*(a[T1] for a in first.values())) == set(range(7))
    # a fourth member takes partitions from the others; no one else's partition moves between them
    members["d"] = MemberSubscription(frozenset({T1}))
    second = assign_uniform(members, {T1: 7}, first)
    assert sorted(sizes(second).values()) == [1, 2, 2, 2]
    for member in ("a", "b", "c"):
        assert second[member][T1] <= first[member][T1]
    # heterogeneous subscriptions: each topic only to its subscribers, still balanced
    mixed = {"a": MemberSubscription(frozenset({T1, T2})), "b": MemberSubscription(frozenset({T2}))}
    result = assign_uniform(mixed, {T1: 2, T2: 4}, {})
    assert result["b"].get(T1) is None and sizes(result) == {"a": 3, "b": 3}


def test_range_gives_contiguous_ranges_in_member_order() -> None:
    members = {m: MemberSubscription(frozenset({T1, T2})) for m in ("b", "a")}
    result = assign_range(members, {T1: 5, T2: 2}, {})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({1})}


def test_configured_assignors_take_kafka_class_names() -> None:
    assert configured_assignors(["org.apache.kafka.coordinator.group.assignor.RangeAssignor", "uniform"]) == [
        "range",
        "uniform",
    ]
    with pytest.raises(ValueError, match="Unknown server assignor sticky"):
        configured_assignors(["sticky"])


def test_a_partition_is_revoked_before_it_is_assigned_elsewhere() -> None:
    owner = ConsumerGroupMember("a", member_epoch=1, assigned_partitions={T1: frozenset({0, 1})})
    epochs = {(T1, 0): 1, (T1, 1): 1}

    def epoch_of(topic_id: uuid.UUID, partition: int) -> int:
        return epochs.get((topic_id, partition), -1)

    # target epoch 2 takes partition 1 away: the owner must revoke it first and keeps epoch 1
    revoking = reconcile(owner, 2, {T1: frozenset({0})}, epoch_of, [(T1, [0, 1])])
    assert (revoking.state, revoking.member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 1)
    assert revoking.partitions_pending_revocation == {T1: frozenset({1})}
    # the newcomer waits for it
    newcomer = reconcile(ConsumerGroupMember("b"), 2, {T1: frozenset({1})}, epoch_of, [])
    assert (newcomer.state, newcomer.member_epoch, newcomer.assigned_partitions) == (
        MemberState.UNRELEASED_PARTITIONS,
        2,
        {},
    )
    # still listed as owned: no progress; acknowledged: the owner moves to epoch 2
    assert reconcile(revoking, 2, {T1: frozenset({0})}, epoch_of, [(T1, [0, 1])]) is revoking
    released = reconcile(revoking, 2, {T1: frozenset({0})}, epoch_of, [(T1, [0])])
    assert (released.state, released.member_epoch, released.previous_member_epoch) == (
        MemberState.STABLE,
        2,
        1,
    )
    del epochs[(T1, 1)]
    assigned = reconcile(newcomer, 2, {T1: frozenset({1})}, epoch_of, [])
    assert (assigned.state, assigned.assigned_partitions) == (MemberState.STABLE, {T1: frozenset({1})})
    # a member in a state this coordinator does not know is fenced unless it owns nothing
    unknown = ConsumerGroupMember("c", member_epoch=1, state=MemberState.UNKNOWN)
    with pytest.raises(FencedMemberEpoch):
        reconcile(unknown, 2, {}, epoch_of, None)
    assert reconcile(unknown, 2, {}, epoch_of, []).state is MemberState.STABLE


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"group.consumer.heartbeat.interval.ms": "50000"}, "must be less than or equal to"),
        ({"group.consumer.session.timeout.ms": "1000"}, "must be greater than or equal to"),
        (
            {
                "group.consumer.session.timeout.ms": "5000",
                "group.consumer.min.session.timeout.ms": "1000",
                "group.consumer.heartbeat.interval.ms": "5000",
            },
            "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms",
        ),
    ],
)
def test_consumer_group_timeouts_are_checked_as_kafka_does(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": "/tmp/unused", **settings})
