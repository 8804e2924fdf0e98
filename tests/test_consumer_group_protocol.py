"""The consumer rebalance protocol (KIP-848), request by request with kcli's own client.

A broker runs in this process (timeouts below Kafka's minimums, the coordinator's cache in reach);
`group.version` is raised to 1 with UpdateFeatures, as `kcli features upgrade` does. Each test sends
ConsumerGroupHeartbeat, ConsumerGroupDescribe and the group and offset APIs and checks Kafka's answers:
member and group epochs, the target assignment moving partitions through revocation, leaving,
static members, and the errors.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from test_groups import create_topic_request, join_alone, join_request, leave_request, req

from formats.internal import decode_offsets_key
from kcli.broker.coordinator_log import replay_log
from kcli.broker.group.consumer_group import ConsumerGroup, MemberState
from kcli.broker.server import Broker
from kcli.client import KafkaClient
from kcli.config import BrokerConfig
from kcli.features import MV_3_9_IV0
from kcli.protocol.messages import build, nested_type, request_type

HEARTBEAT, DESCRIBE, UPDATE_FEATURES = 68, 69, 57
FIND_COORDINATOR, JOIN_GROUP, LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS = 10, 11, 16, 15, 42
OFFSET_COMMIT, OFFSET_FETCH = 8, 9
MS = datetime.timedelta(milliseconds=1)
SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "group.consumer.session.timeout.ms": "1500",
    "group.consumer.min.session.timeout.ms": "500",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.max.size": "3",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",
}


def in_process(
    tmp_path: Path,
    body: Callable[[Broker, KafkaClient], Awaitable[None]],
    *,
    enable: bool = True,
    topics: dict[str, int] | None = None,
    release: int | None = None,
    settings: dict[str, str] | None = None,
) -> None:
    async def main() -> None:
        config = BrokerConfig(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "log.dirs": str(tmp_path / "data"),
                **SETTINGS,
                **(settings or {}),
            }
        )
        broker = Broker(config, release=release)
        host, port = await broker.start()
        try:
            async with await KafkaClient.connect(f"{host}:{port}", request_timeout=10) as client:
                if enable:
                    await enable_consumer_protocol(client)
                for name, partitions in (topics or {}).items():
                    created = await client.send(create_topic_request(name, partitions))
                    assert created.topics[0].error_code == ErrorCode.none
                response = await client.send(req(FIND_COORDINATOR, 2, key="any", key_type=0))
                assert response.error_code == ErrorCode.none
                await asyncio.wait_for(body(broker, client), 30)
        finally:
            await broker.shutdown(grace=2)

    asyncio.run(main())


async def enable_consumer_protocol(client: KafkaClient) -> None:
    key = build(
        nested_type(request_type(UPDATE_FEATURES, 1), "FeatureUpdateKey"),
        feature="group.version",
        max_version_level=1,
        upgrade_type=1,
    )
    response = await client.send(
        build(request_type(UPDATE_FEATURES, 1), feature_updates=(key,), validate_only=False)
    )
    assert response.error_code == ErrorCode.none, response


def heartbeat(
    group_id: str,
    member_id: str,
    epoch: int,
    *,
    topics: tuple[str, ...] | None = None,
    owned: list[tuple[uuid.UUID, list[int]]] | None = None,
    rebalance_ms: int = -1,
    instance_id: str | None = None,
    assignor: str | None = None,
    regex: str | None = None,
    version: int = 1,
) -> Any:
    cls = request_type(HEARTBEAT, version)
    partitions_cls = nested_type(cls, "TopicPartitions")
    return build(
        cls,
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        rack_id=None,
        rebalance_timeout=rebalance_ms * MS,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=None
        if owned is None
        else tuple(build(partitions_cls, topic_id=t, partitions=tuple(p)) for t, p in owned),
    )


def join(group_id: str, member_id: str, topics: tuple[str, ...], **kwargs: Any) -> Any:
    return heartbeat(group_id, member_id, 0, topics=topics, owned=[], rebalance_ms=5000, **kwargs)


def owned_of(response: Any) -> list[tuple[uuid.UUID, list[int]]]:
    return [(tp.topic_id, list(tp.partitions)) for tp in response.assignment.topic_partitions]


def count(owned: list[tuple[uuid.UUID, list[int]]]) -> int:
    return sum(len(p) for _, p in owned)


def cached(broker: Broker, group_id: str) -> ConsumerGroup:
    return broker.node.groups.manager.consumer_groups[group_id]  # type: ignore[union-attr]


def test_apis_answer_unsupported_version_until_group_version_1(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient) -> None:
        assert HEARTBEAT in client.broker_versions and DESCRIBE in client.broker_versions  # listed, as Kafka
        response = await client.send(join("g", "m1", ("t",)))
        assert response.error_code == ErrorCode.unsupported_version
        described = await client.send(
            build(request_type(DESCRIBE, 1), group_ids=("g",), include_authorized_operations=False)
        )
        assert described.groups[0].error_code == ErrorCode.unsupported_version
        await enable_consumer_protocol(client)
        response = await client.send(join("g", "m1", ("t",)))
        assert response.error_code == ErrorCode.none and response.member_epoch == 1

    in_process(tmp_path, body, enable=False, topics={"t": 2}, release=MV_3_9_IV0)  # group.version 0


def test_rebalance_protocols_without_consumer_turn_the_apis_off(tmp_path: Path) -> None:
    """group.coordinator.rebalance.protocols=classic: UNSUPPORTED_VERSION at group.version 1 too, as
    KafkaApis' isConsumerGroupProtocolEnabled; classic groups form as ever."""

    async def body(broker: Broker, client: KafkaClient) -> None:
        response = await client.send(join("g", "m1", ("t",)))
        assert response.error_code == ErrorCode.unsupported_version
        described = await client.send(
            build(request_type(DESCRIBE, 1), group_ids=("g",), include_authorized_operations=False)
        )
        assert described.groups[0].error_code == ErrorCode.unsupported_version
        member_id, generation = await join_alone(client, "classic-g", topics=("t",))
        assert member_id and generation == 1

    in_process(tmp_path, body, topics={"t": 2}, settings={"group.coordinator.rebalance.protocols": "classic"})


def test_invalid_heartbeats_get_kafka_errors(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient) -> None:
        cases = [
            (
                heartbeat("", "m", 0, topics=("t",), owned=[], rebalance_ms=1),
                ErrorCode.invalid_request,
                "GroupId can't be empty.",
            ),
            (
                heartbeat("g", "", 0, topics=("t",), owned=[], rebalance_ms=1),
                ErrorCode.invalid_request,
                "MemberId can't be empty.",
            ),
            (
                heartbeat("g", "m", 0, topics=("t",), owned=[]),
                ErrorCode.invalid_request,
                "RebalanceTimeoutMs must be provided in first request.",
            ),
            (
                heartbeat("g", "m", 0, topics=("t",), rebalance_ms=1),
                ErrorCode.invalid_request,
                "TopicPartitions must be empty when (re-)joining.",
            ),
            (
                heartbeat("g", "m", 0, owned=[], rebalance_ms=1),
                ErrorCode.invalid_request,
                "SubscribedTopicNames must be set in first request.",
            ),
            (heartbeat("g", "m", -3), ErrorCode.invalid_request, "MemberEpoch is invalid."),
            (heartbeat("g", "m", -2), ErrorCode.invalid_request, "InstanceId can't be null."),
            (join("g", "m", ("t",), instance_id=""), ErrorCode.invalid_request, "InstanceId can't be empty."),
            (join("g", "m", ("t",), assignor="sticky"), ErrorCode.unsupported_assignor, None),
            (heartbeat("g", "m", 3), ErrorCode.group_id_not_found, "Consumer group g not found."),
        ]
        for request, error, message in cases:
            response = await client.send(request)
            assert response.error_code == error, (request, response)
            if message is not None:
                assert response.error_message == message
        assert "g" not in broker.node.groups.manager.consumer_groups  # type: ignore[union-attr]
        # v0: the coordinator names a member that joins without an id
        response = await client.send(join("g0", "", ("t",), version=0))
        assert response.error_code == ErrorCode.none and len(response.member_id) == 22

    in_process(tmp_path, body, topics={"t": 2})


def test_members_share_partitions_through_revocation(tmp_path: Path) -> None:
    """A partition is revoked from its owner before the new member gets it: the joiner waits in
    UNRELEASED_PARTITIONS, the owner in UNREVOKED_PARTITIONS keeps its epoch until it acknowledges."""

    async def body(broker: Broker, client: KafkaClient) -> None:
        first = await client.send(join("g", "a", ("t",)))
        assert (first.error_code, first.member_epoch, count(owned_of(first))) == (ErrorCode.none, 1, 4)
        a_owned = owned_of(first)
        second = await client.send(join("g", "b", ("t",)))
        assert second.member_epoch == 2 and count(owned_of(second)) == 0  # its partitions are not free yet
        assert cached(broker, "g").members["b"].state is MemberState.UNRELEASED_PARTITIONS
        # a's heartbeat: two partitions to revoke, epoch kept
        revoke = await client.send(heartbeat("g", "a", 1, owned=a_owned))
        assert revoke.member_epoch == 1 and count(owned_of(revoke)) == 2
        assert cached(broker, "g").members["a"].state is MemberState.UNREVOKED_PARTITIONS
        described = await client.send(
            build(request_type(DESCRIBE, 1), group_ids=("g",), include_authorized_operations=False)
        )
        assert described.groups[0].group_state == "Reconciling"
        # an offset commit with a stale epoch is refused
        stale = await commit(client, "g", "a", 2, "t")
        assert stale == ErrorCode.stale_member_epoch
        kept = owned_of(revoke)
        done = await client.send(heartbeat("g", "a", 1, owned=kept))
        assert done.member_epoch == 2 and done.assignment is None  # nothing changed in its assignment
        b_next = await client.send(heartbeat("g", "b", 2, owned=[]))
        assert b_next.member_epoch == 2 and count(owned_of(b_next)) == 2
        assert {p for _, ps in owned_of(b_next) for p in ps}.isdisjoint({p for _, ps in kept for p in ps})
        assert await commit(client, "g", "b", 2, "t") == ErrorCode.none
        assert await commit(client, "g", "b", 2, "t", version=8) == ErrorCode.unsupported_version
        fetched = await client.send(fetch_request("g", "b", 1))
        assert fetched.groups[0].error_code == ErrorCode.stale_member_epoch
        fetched = await client.send(fetch_request("g", "b", 2))
        assert fetched.groups[0].error_code == ErrorCode.none
        assert cached(broker, "g").state.value == "Stable"
        # the group's own topic's offsets cannot be deleted while it is subscribed to it
        deleted = await client.send(
            req(
                47,
                0,
                group_id="g",
                topics=(
                    build(
                        nested_type(request_type(47, 0), "OffsetDeleteRequestTopic"),
                        name="t",
                        partitions=(
                            build(
                                nested_type(request_type(47, 0), "OffsetDeleteRequestPartition"),
                                partition_index=0,
                            ),
                        ),
                    ),
                ),
            )
        )
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
        # epochs ahead of or behind the coordinator's fence the member
        fenced = await client.send(heartbeat("g", "b", 7))
        assert fenced.error_code == ErrorCode.fenced_member_epoch
        unknown = await client.send(heartbeat("g", "zz", 2))
        assert unknown.error_code == ErrorCode.unknown_member_id
        # a leaving member's partitions go to the other one
        left = await client.send(heartbeat("g", "b", -1))
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        back = await client.send(heartbeat("g", "a", 2, owned=kept))
        assert back.member_epoch == 3 and count(owned_of(back)) == 4  # the leave bumped the group epoch

    in_process(tmp_path, body, topics={"t": 4})


def test_group_limits_types_and_classic_conflicts(tmp_path: Path) -> None:
    async def body(broker: Broker, client: KafkaClient) -> None:
        for member in ("a", "b", "c"):
            assert (
                await client.send(join("g", member, ("t",), assignor="range"))
            ).error_code == ErrorCode.none
        full = await client.send(join("g", "d", ("t",)))
        assert full.error_code == ErrorCode.group_max_size_reached
        joined = await client.send(join_request(9, "g", ""))  # a classic member: the group is full too
        assert joined.error_code == ErrorCode.group_max_size_reached
        listed = await client.send(req(LIST_GROUPS, 5, states_filter=(), types_filter=("consumer",)))
        assert [(g.group_id, g.group_type, g.protocol_type) for g in listed.groups] == [
            ("g", "consumer", "consumer")
        ]
        assert (
            await client.send(req(LIST_GROUPS, 5, states_filter=(), types_filter=("classic",)))
        ).groups == ()
        described = await client.send(
            req(DESCRIBE_GROUPS, 5, groups=("g",), include_authorized_operations=False)
        )
        assert (described.groups[0].group_state, described.groups[0].error_code) == ("Dead", ErrorCode.none)
        described = await client.send(
            req(DESCRIBE_GROUPS, 6, groups=("g",), include_authorized_operations=False)
        )
        assert (described.groups[0].error_code, described.groups[0].error_message) == (
            ErrorCode.group_id_not_found,
            "Group g is not a classic group.",
        )
        consumer = await client.send(
            build(request_type(DESCRIBE, 1), group_ids=("g", "nope"), include_authorized_operations=False)
        )
        group, missing = consumer.groups
        assert (group.assignor_name, len(group.members), missing.error_code) == (
            "range",
            3,
            ErrorCode.group_id_not_found,
        )
        deleted = await client.send(req(DELETE_GROUPS, 2, groups_names=("g",)))
        assert deleted.results[0].error_code == ErrorCode.non_empty_group
        # static members: -2 steps away keeping the partitions, then a new member id takes the instance
        static = await client.send(join("s", "s1", ("t",), instance_id="i1"))
        assert static.member_epoch == 1
        assert (
            await client.send(join("s", "s2", ("t",), instance_id="i1"))
        ).error_code == ErrorCode.unreleased_instance_id
        away = await client.send(heartbeat("s", "s1", -2, instance_id="i1"))
        assert (away.error_code, away.member_epoch) == (ErrorCode.none, -2)
        again = await client.send(join("s", "s2", ("t",), instance_id="i1"))
        assert again.error_code == ErrorCode.none and count(owned_of(again)) == count(owned_of(static))
        assert again.member_epoch == static.member_epoch  # no rebalance for a static member's return
        assert set(cached(broker, "s").members) == {"s2"}
        assert (
            await client.send(heartbeat("s", "s1", 1, instance_id="i1"))
        ).error_code == ErrorCode.fenced_instance_id
        # the same member id back after -2 (a v1 client keeps its id): still released first, then no rebalance
        assert (await client.send(join("s", "s2", ("t",), instance_id="i1"))).error_code == (
            ErrorCode.unreleased_instance_id
        )
        assert (await client.send(heartbeat("s", "s2", -2, instance_id="i1"))).error_code == ErrorCode.none
        same = await client.send(join("s", "s2", ("t",), instance_id="i1"))
        assert (same.member_epoch, count(owned_of(same))) == (static.member_epoch, count(owned_of(static)))
        # an empty consumer group is deleted with tombstones; a classic group may then take the id
        assert (await client.send(heartbeat("s", "s2", -1, instance_id="i1"))).error_code == ErrorCode.none
        deleted = await client.send(req(DELETE_GROUPS, 2, groups_names=("s",)))
        assert deleted.results[0].error_code == ErrorCode.none
        assert "s" not in broker.node.groups.manager.consumer_groups  # type: ignore[union-attr]
        await asyncio.sleep(0.2)
        tombstones: list[int] = []

        def fold(buf: memoryview, batch: Any) -> None:
            if not batch.is_control:
                tombstones.extend(
                    decode_offsets_key(r.key).record_type for r in batch.records(buf) if r.value is None
                )

        await replay_log(broker.node.replicas.log("__consumer_offsets", 0), fold, stopping=lambda: False)  # type: ignore[union-attr]
        assert tombstones[-6:] == [8, 7, 5, 6, 4, 3]  # the member's as it left, then the group's

    in_process(tmp_path, body, topics={"t": 3})


async def commit(
    client: KafkaClient, group_id: str, member_id: str, epoch: int, topic: str, version: int = 9
) -> ErrorCode:
    cls = request_type(OFFSET_COMMIT, version)
    partition = build(
        nested_type(cls, "OffsetCommitRequestPartition"),
        partition_index=0,
        committed_offset=1,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topic_entry = build(nested_type(cls, "OffsetCommitRequestTopic"), name=topic, partitions=(partition,))
    response = await client.send(
        build(
            cls,
            group_id=group_id,
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            group_instance_id=None,
            topics=(topic_entry,),
        )
    )
    return response.topics[0].partitions[0].error_code


def fetch_request(group_id: str, member_id: str, epoch: int) -> Any:
    cls = request_type(OFFSET_FETCH, 9)
    group = build(
        nested_type(cls, "OffsetFetchRequestGroup"),
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        topics=None,
    )
    return build(cls, groups=(group,), require_stable=False)


def test_classic_and_consumer_groups_convert_only_when_empty(tmp_path: Path) -> None:
    """An empty classic group becomes a consumer group at its first heartbeat (its metadata tombstoned,
    its offsets kept); one with members is upgraded only when its members' ConsumerProtocol bytes read
    (here the assignment is not: refused as Kafka refuses it). An empty consumer group becomes a
    classic group at a JoinGroup."""

    async def body(broker: Broker, client: KafkaClient) -> None:
        manager = broker.node.groups.manager  # type: ignore[union-attr]
        member_id, _ = await join_alone(client, "busy")
        refused = await client.send(join("busy", "m1", ("t",)))
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.group_id_not_found,
            "Cannot upgrade the classic group busy to consumer group because the embedded consumer protocol "
            "is malformed.",
        )
        assert (await client.send(leave_request(4, "busy", [member_id]))).error_code == ErrorCode.none
        assert manager.get_group("busy").generation_id > 0  # Empty, with a generation
        converted = await client.send(join("busy", "m1", ("t",)))
        assert converted.error_code == ErrorCode.none and "busy" in manager.consumer_groups
        assert manager.get_group("busy").protocol_type is None  # only the offsets' holder is left
        listed = await client.send(req(LIST_GROUPS, 5, states_filter=(), types_filter=()))
        assert [(g.group_id, g.group_type) for g in listed.groups] == [("busy", "consumer")]
        # back: the consumer group empties, a classic member's JoinGroup takes the id
        assert (await client.send(heartbeat("busy", "m1", -1))).error_code == ErrorCode.none
        member_id, generation = await join_alone(client, "busy")
        assert generation == 1 and "busy" not in manager.consumer_groups

    in_process(tmp_path, body, topics={"t": 2})


def test_regular_expression_subscriptions(tmp_path: Path) -> None:
    """A member subscribed with a regex gets the partitions of the topics it matches whole, and of a
    matching topic created later at its next heartbeat; a regex that does not compile is refused."""

    async def body(broker: Broker, client: KafkaClient) -> None:
        bad = await client.send(heartbeat("g", "m", 0, owned=[], rebalance_ms=5000, regex="(orders"))
        assert bad.error_code == ErrorCode.invalid_regular_expression
        assert "g" not in broker.node.groups.manager.consumer_groups  # type: ignore[union-attr]
        joined = await client.send(heartbeat("g", "m", 0, owned=[], rebalance_ms=5000, regex="orders-.*"))
        assert joined.error_code == ErrorCode.none and count(owned_of(joined)) == 3  # orders-1, orders-2
        created = await client.send(create_topic_request("orders-3", 2))
        assert created.topics[0].error_code == ErrorCode.none
        later = await client.send(heartbeat("g", "m", joined.member_epoch, owned=owned_of(joined)))
        assert later.member_epoch == joined.member_epoch + 1 and count(owned_of(later)) == 5
        described = await client.send(
            build(request_type(DESCRIBE, 1), group_ids=("g",), include_authorized_operations=False)
        )
        assert described.groups[0].members[0].subscribed_topic_regex == "orders-.*"

    in_process(tmp_path, body, topics={"orders-1": 1, "orders-2": 2, "orders": 4})


def test_group_unloaded_on_resignation_and_replayed_on_election(tmp_path: Path) -> None:
    """A coordinator that stops leading the group's partition forgets the group and stops its timers;
    elected again it replays the group's records: same epochs, same assignment, and the member goes on
    with the epoch it had."""
    from test_coordinator_leadership import change_leader
    from waiting import wait_for_async

    async def body(broker: Broker, client: KafkaClient) -> None:
        manager = broker.node.groups.manager  # type: ignore[union-attr]
        joined = await client.send(join("g", "a", ("t",)))
        assert await commit(client, "g", "a", joined.member_epoch, "t") == ErrorCode.none
        before = cached(broker, "g")
        await change_leader(broker, "__consumer_offsets", 0, -1)
        assert "g" not in manager.consumer_groups
        assert all(handle.cancelled() for handle in before.session_timers.values())
        refused = await client.send(heartbeat("g", "a", joined.member_epoch, owned=owned_of(joined)))
        assert refused.error_code == ErrorCode.not_coordinator
        await change_leader(broker, "__consumer_offsets", 0, broker.config.node_id)
        await wait_for_async("the partition loaded", lambda: 0 in manager.owned_partitions, 20, 0.02)
        after = cached(broker, "g")
        assert (after.group_epoch, after.assignment_epoch, after.members) == (
            before.group_epoch,
            before.assignment_epoch,
            before.members,
        )
        assert after.target_assignment == before.target_assignment and after.session_timers
        again = await client.send(heartbeat("g", "a", joined.member_epoch, owned=owned_of(joined)))
        assert (again.error_code, again.member_epoch) == (ErrorCode.none, joined.member_epoch)
        fetched = await client.send(fetch_request("g", "a", joined.member_epoch))
        assert fetched.groups[0].topics[0].partitions[0].committed_offset == 1

    in_process(tmp_path, body, topics={"t": 2})


def test_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout(tmp_path: Path) -> None:
    """Heartbeats keep the session alive, not a revocation that does not come: the member still owning
    what it was asked to give up is fenced once its rebalance timeout has run, and the partitions go on."""

    async def body(broker: Broker, client: KafkaClient) -> None:
        first = await client.send(heartbeat("g", "a", 0, topics=("t",), owned=[], rebalance_ms=600))
        owned = owned_of(first)
        await client.send(join("g", "b", ("t",)))
        asked = await client.send(heartbeat("g", "a", first.member_epoch, owned=owned))
        assert cached(broker, "g").members["a"].state is MemberState.UNREVOKED_PARTITIONS
        answers = []
        for _ in range(10):  # 1 s of heartbeats that keep reporting every partition as owned
            await asyncio.sleep(0.1)
            answers.append(
                (await client.send(heartbeat("g", "a", asked.member_epoch, owned=owned))).error_code
            )
        assert ErrorCode.none in answers and answers[-1] == ErrorCode.unknown_member_id
        assert set(cached(broker, "g").members) == {"b"}
        taken = await client.send(heartbeat("g", "b", 2, owned=[]))
        assert count(owned_of(taken)) == 4

    in_process(tmp_path, body, topics={"t": 4})


def test_a_subscription_metadata_record_from_before_4_1_is_removed_at_the_next_heartbeat(
    tmp_path: Path,
) -> None:
    """Kafka 4.0 (and kcli before 2026-12-02) kept a consumer group's topics in a subscription-metadata
    record (type 4); Kafka 4.1 keeps their hash in the epoch record and tombstones such a record at the
    group's next heartbeat, without a rebalance when the hash is unchanged."""

    async def body(broker: Broker, client: KafkaClient) -> None:
        first = await client.send(join("g", "a", ("t",)))
        group = cached(broker, "g")
        assert group.metadata_hash != 0 and not group.has_subscription_metadata_record
        topic = {"topicId": uuid.uuid4(), "topicName": "t", "numPartitions": 3, "partitionMetadata": []}
        coordinator = broker.node.groups.consumer  # type: ignore[union-attr]
        coordinator.apply_then_write("g", [(4, {"groupId": "g"}, {"topics": [topic]})])  # as 4.0 wrote it
        assert group.has_subscription_metadata_record
        beat = await client.send(heartbeat("g", "a", first.member_epoch, owned=owned_of(first)))
        assert (beat.error_code, beat.member_epoch) == (ErrorCode.none, first.member_epoch)
        assert not group.has_subscription_metadata_record
        written: list[tuple[int, bool]] = []

        def fold(buf: memoryview, batch: Any) -> None:
            if not batch.is_control:
                written.extend(
                    (decode_offsets_key(r.key).record_type, r.value is None) for r in batch.records(buf)
                )

        await replay_log(broker.node.replicas.log("__consumer_offsets", 0), fold, stopping=lambda: False)  # type: ignore[union-attr]
        assert [w for w in written if w[0] == 4] == [(4, False), (4, True)]

    in_process(tmp_path, body, topics={"t": 3})
