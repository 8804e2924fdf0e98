"""Leader elections and ISR changes on the controller: PartitionChangeBuilder, AlterPartition,
fencing/unfencing/controlled shutdown, unclean elections, ElectLeaders, preferred-leader rebalance.

The controller tests drive the real QuorumController over a real Raft client and metadata log
(metadata_harness.SyncController); the builder tests run Kafka's rules on real partition registrations.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kraft_cluster import SESSION, SESSION_TIMEOUT_S, wait_all_caught_up, wait_for
from metadata_harness import SyncController, close_controllers  # noqa: F401 (an autouse fixture)

from kcli.broker.metadata.controller import (
    ApiError,
    ApiException,
    BrokerHeartbeat,
    ConfigOp,
    NewTopic,
    OpType,
)
from kcli.broker.metadata.controller.partition_change_builder import (
    RECOVERED,
    RECOVERING,
    Election,
    PartitionChangeBuilder,
)
from kcli.broker.metadata.image import NO_LEADER, PartitionRegistration
from kcli.config import BrokerConfig, Listener
from kcli.protocol.messages import nested_type, request_type

TOPIC_ID = uuid.UUID("5f1c1d4e-0000-4000-8000-000000000001")
DIR = uuid.UUID("7a0b2c3d-0000-4000-8000-000000000001")


def registration(replicas, isr, leader, **kwargs) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=tuple(replicas),
        isr=tuple(isr),
        leader=leader,
        leader_epoch=kwargs.pop("leader_epoch", 5),
        partition_epoch=kwargs.pop("partition_epoch", 7),
        directories=(DIR,) * len(replicas),
        **kwargs,
    )


def builder(partition: PartitionRegistration, acceptable=lambda broker: True) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(partition, TOPIC_ID, 0, acceptable)


def applied(partition: PartitionRegistration, record) -> PartitionRegistration:
    assert record is not None
    name, version, data = record
    assert (name, version) == ("PartitionChangeRecord", 1)
    assert data["topicId"] == TOPIC_ID and data["partitionId"] == 0
    return partition.merge(data)


# --- PartitionChangeBuilder ---------------------------------------------------------------------------


def test_builder_writes_nothing_when_nothing_changes():
    partition = registration([1, 2, 3], [1, 2, 3], 1)
    assert builder(partition).build() is None
    assert builder(partition).set_target_isr([1, 2, 3]).set_election(Election.PREFERRED).build() is None


def test_isr_shrink_keeps_leader_and_epoch_but_bumps_partition_epoch():
    partition = registration([1, 2, 3], [1, 2, 3], 1)
    name, version, data = builder(partition).set_target_isr([1, 3]).build()
    assert data == {"partitionId": 0, "topicId": TOPIC_ID, "isr": [1, 3]}
    after = partition.merge(data)
    assert (after.leader, after.leader_epoch, after.partition_epoch, after.isr) == (1, 5, 8, (1, 3))


def test_leader_leaving_the_isr_elects_the_first_valid_replica_in_replica_order():
    partition = registration([1, 2, 3], [1, 2, 3], 1)
    after = applied(partition, builder(partition, lambda b: b != 1).set_target_isr([3, 2]).build())
    assert (after.leader, after.leader_epoch, after.partition_epoch, after.isr) == (2, 6, 8, (3, 2))


def test_online_election_skips_replicas_that_are_not_acceptable_or_not_in_the_isr():
    partition = registration([1, 2, 3, 4], [1, 3, 4], 1)
    # 2 is not in the ISR, 3 is not acceptable: 4 leads
    after = applied(partition, builder(partition, lambda b: b not in (1, 3)).set_target_isr([3, 4]).build())
    assert after.leader == 4


def test_last_isr_member_stays_when_it_dies_and_the_partition_goes_leaderless():
    partition = registration([1, 2], [1], 1)
    record = builder(partition, lambda b: b != 1).set_target_isr([]).build()
    _, _, data = record
    assert "isr" not in data and data["leader"] == NO_LEADER
    after = partition.merge(data)
    assert (after.leader, after.leader_epoch, after.isr) == (NO_LEADER, 6, (1,))


def test_unclean_election_takes_an_acceptable_replica_outside_the_isr_and_marks_it_recovering():
    partition = registration([1, 2, 3], [1], NO_LEADER)
    clean = builder(partition, lambda b: b != 1)
    assert clean.build() is None  # ONLINE: nobody valid, and the builder writes no no-op
    unclean = builder(partition, lambda b: b != 1).set_election(Election.UNCLEAN)
    after = applied(partition, unclean.build())
    assert (after.leader, after.isr, after.leader_recovery_state) == (2, (2,), RECOVERING)
    assert after.leader_epoch == 6


def test_unclean_election_prefers_a_clean_leader_when_one_exists():
    partition = registration([1, 2, 3], [1, 3], 1)
    after = applied(
        partition,
        builder(partition, lambda b: b != 1).set_election(Election.UNCLEAN).set_target_isr([3]).build(),
    )
    assert (after.leader, after.isr, after.leader_recovery_state) == (3, (3,), RECOVERED)


def test_unclean_election_without_any_acceptable_replica_writes_nothing():
    partition = registration([1, 2], [1], NO_LEADER)
    assert builder(partition, lambda b: False).set_election(Election.UNCLEAN).build() is None


def test_preferred_election_moves_leadership_to_replica_zero_when_valid():
    partition = registration([1, 2, 3], [1, 2, 3], 2)
    after = applied(partition, builder(partition).set_election(Election.PREFERRED).build())
    assert (after.leader, after.leader_epoch) == (1, 6)
    # not valid (not acceptable): the current leader stays, nothing is written
    assert builder(partition, lambda b: b != 1).set_election(Election.PREFERRED).build() is None
    # not in the ISR: same
    outside = registration([1, 2, 3], [2, 3], 2)
    assert builder(outside).set_election(Election.PREFERRED).build() is None


def test_preferred_election_falls_back_to_the_next_valid_replica_when_the_leader_is_invalid():
    partition = registration([1, 2, 3], [2, 3], 2)
    after = applied(partition, builder(partition, lambda b: b == 3).set_election(Election.PREFERRED).build())
    assert after.leader == 3


def test_online_election_keeps_a_valid_current_leader_even_if_not_preferred():
    partition = registration([1, 2, 3], [1, 2, 3], 3)
    assert builder(partition).build() is None


def test_recovering_to_recovered_is_written_and_does_not_bump_the_leader_epoch():
    partition = registration([1, 2], [1], 1, leader_recovery_state=RECOVERING)
    record = builder(partition).set_target_leader_recovery_state(RECOVERED).set_target_isr([1, 2]).build()
    after = applied(partition, record)
    assert (after.leader_recovery_state, after.isr, after.leader_epoch, after.partition_epoch) == (
        RECOVERED,
        (1, 2),
        5,
        8,
    )


def test_removing_a_replica_from_the_assignment_forces_a_leader_epoch_bump():
    partition = registration([1, 2, 3], [1, 2, 3], 1)
    record = builder(partition).set_target_replicas([1, 2]).set_target_isr([1, 2]).build()
    _, _, data = record
    assert data["leader"] == 1 and data["replicas"] == [1, 2] and data["directories"] == [DIR, DIR]
    after = partition.merge(data)
    assert (after.leader, after.leader_epoch, after.replicas) == (1, 6, (1, 2))


def test_an_isr_covering_the_adding_replicas_completes_a_reassignment():
    partition = registration([1, 2, 3], [1, 2], 1, removing_replicas=(1,), adding_replicas=(3,))
    record = builder(partition, lambda b: True).set_target_isr([1, 2, 3]).build()
    after = applied(partition, record)
    # 1 leaves the assignment and its leadership: 2 is the first valid replica of the new one
    assert (after.replicas, after.isr, after.leader, after.removing_replicas, after.adding_replicas) == (
        (2, 3),
        (2, 3),
        2,
        (),
        (),
    )


def test_before_mv_3_6_an_isr_shrink_bumps_the_leader_epoch():
    partition = registration([1, 2, 3], [1, 2, 3], 1)
    old = PartitionChangeBuilder(partition, TOPIC_ID, 0, lambda b: True, metadata_version=11)
    _, version, data = old.set_target_isr([1, 2]).build()
    assert version == 0 and data["leader"] == 1 and "directories" not in data
    assert partition.merge(data).leader_epoch == 6


# --- controller helpers -------------------------------------------------------------------------------

BROKERS = (1, 2, 3)


def open_cluster(tmp_path: Path, brokers=BROKERS, **settings: str) -> tuple[SyncController, dict[int, int]]:
    """A controller (node 1) with `brokers` registered unfenced; returns it and their broker epochs."""
    controller = SyncController(BrokerConfig({"log.dirs": str(tmp_path / "data"), **settings}))
    epochs = {}
    for broker in brokers:
        directory = uuid.UUID(int=1000 + broker)
        epochs[broker] = controller.register_broker(
            Listener("PLAINTEXT", "127.0.0.1", 9000 + broker),
            broker_id=broker,
            log_dirs=[directory],
            fenced=False,
        )
    return controller, epochs


def create(controller: SyncController, name: str, *assignments, **configs: str) -> uuid.UUID:
    [result] = controller.create_topics(
        [NewTopic(name, assignments=list(enumerate(assignments)), configs=configs)]
    )
    assert not result.error.is_failure, result.error
    return result.topic_id


def state(controller: SyncController, topic: str, index: int = 0) -> PartitionRegistration:
    return controller.image.partition(topic, index)


def committed(controller: SyncController) -> bool:
    """The image the controller answers from is the committed one: nothing of it is pending."""
    return not controller.controller._uncommitted


def alter_request(
    broker: int,
    broker_epoch: int,
    topic_id: uuid.UUID,
    *partitions: dict,
    version: int = 3,
):
    cls = request_type(56, version)
    topic_cls, partition_cls = nested_type(cls, "TopicData"), nested_type(cls, "PartitionData")
    items = []
    for p in partitions:
        fields = {
            "partition_index": p.get("index", 0),
            "leader_epoch": p["leader_epoch"],
            "leader_recovery_state": p.get("recovery", RECOVERED),
            "partition_epoch": p["partition_epoch"],
        }
        if version >= 3:
            state_cls = nested_type(cls, "BrokerState")
            fields["new_isr_with_epochs"] = tuple(state_cls(broker_id=b, broker_epoch=e) for b, e in p["isr"])
        else:
            fields["new_isr"] = tuple(b for b, _ in p["isr"])
        items.append(partition_cls(**fields))
    return cls(
        broker_id=broker,
        broker_epoch=broker_epoch,
        topics=(topic_cls(topic_id=topic_id, partitions=tuple(items)),),
    )


def partition_answer(response):
    assert response.error_code is ErrorCode.none
    [topic] = response.topics
    [partition] = topic.partitions
    return partition


def heartbeat(controller: SyncController, epochs: dict[int, int], broker: int, **flags: bool):
    offset = controller.controller.raft_client.log_end_offset
    return controller.broker_heartbeat(BrokerHeartbeat(broker, epochs[broker], offset, **flags))


# --- AlterPartition -----------------------------------------------------------------------------------


def test_alter_partition_shrinks_and_expands_the_isr_and_answers_after_commit(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2, 3))
    isr = [(1, epochs[1]), (2, epochs[2])]
    answer = partition_answer(
        controller.alter_partition(
            alter_request(1, epochs[1], topic_id, dict(leader_epoch=0, partition_epoch=0, isr=isr))
        )
    )
    assert committed(controller)
    assert (answer.error_code, answer.leader_id, answer.leader_epoch, answer.isr, answer.partition_epoch) == (
        ErrorCode.none,
        1,
        0,
        (1, 2),
        1,
    )
    assert answer.leader_recovery_state == RECOVERED
    assert state(controller, "t").isr == (1, 2)
    # expansion back, with -1 skipping the broker-epoch check
    again = alter_request(
        1, epochs[1], topic_id, dict(leader_epoch=0, partition_epoch=1, isr=[*isr, (3, -1)])
    )
    answer = partition_answer(controller.alter_partition(again))
    assert (answer.isr, answer.leader_epoch, answer.partition_epoch) == ((1, 2, 3), 0, 2)
    # the same request again changes nothing: same state, and the leader counts the equal epoch as success
    same = alter_request(
        1, epochs[1], topic_id, dict(leader_epoch=0, partition_epoch=2, isr=[(1, -1), (2, -1), (3, -1)])
    )
    answer = partition_answer(controller.alter_partition(same))
    assert (answer.error_code, answer.isr, answer.partition_epoch) == (ErrorCode.none, (1, 2, 3), 2)


def test_alter_partition_v2_takes_a_plain_isr(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2, 3))
    request = alter_request(
        1, epochs[1], topic_id, dict(leader_epoch=0, partition_epoch=0, isr=[(1, 0), (3, 0)]), version=2
    )
    response = controller.alter_partition(request)
    assert type(response).__version__ == 2
    assert partition_answer(response).isr == (1, 3)


def test_alter_partition_with_a_stale_broker_epoch_fails_the_whole_request(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2, 3))
    request = alter_request(
        1, epochs[1] - 1, topic_id, dict(leader_epoch=0, partition_epoch=0, isr=[(1, -1)])
    )
    response = controller.alter_partition(request)
    assert response.error_code is ErrorCode.stale_broker_epoch and response.topics == ()
    assert state(controller, "t").isr == (1, 2, 3)


def test_alter_partition_unknown_topic_and_partition(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2, 3))
    unknown = alter_request(
        1, epochs[1], uuid.uuid4(), dict(leader_epoch=0, partition_epoch=0, isr=[(1, -1)])
    )
    assert partition_answer(controller.alter_partition(unknown)).error_code is ErrorCode.unknown_topic_id
    missing = alter_request(
        1, epochs[1], topic_id, dict(index=5, leader_epoch=0, partition_epoch=0, isr=[(1, -1)])
    )
    assert (
        partition_answer(controller.alter_partition(missing)).error_code
        is ErrorCode.unknown_topic_or_partition
    )


@pytest.mark.parametrize(
    ("sender", "leader_epoch", "partition_epoch", "isr", "recovery", "expected"),
    [
        # epochs ahead of the controller's: this controller is behind (checked before anything else)
        (2, 1, 0, [(2, -1)], RECOVERED, ErrorCode.not_controller),
        (1, 0, 1, [(1, -1)], RECOVERED, ErrorCode.not_controller),
        # an old leader epoch beats "not the leader"
        (2, -1, 0, [(2, -1)], RECOVERED, ErrorCode.fenced_leader_epoch),
        # "not the leader" beats an old partition epoch
        (2, 0, -1, [(1, -1)], RECOVERED, ErrorCode.invalid_request),
        (1, 0, -1, [(1, -1), (9, -1)], RECOVERED, ErrorCode.invalid_update_version),
        # bad ISRs
        (1, 0, 0, [(2, -1), (3, -1)], RECOVERED, ErrorCode.invalid_request),
        (1, 0, 0, [(1, -1), (1, -1)], RECOVERED, ErrorCode.invalid_request),
        (1, 0, 0, [(1, -1), (9, -1)], RECOVERED, ErrorCode.invalid_request),
        (1, 0, 0, [(1, -1), (-3, -1)], RECOVERED, ErrorCode.invalid_request),
        # RECOVERED never goes back to RECOVERING (and RECOVERING allows one member only)
        (1, 0, 0, [(1, -1)], RECOVERING, ErrorCode.invalid_request),
        (1, 0, 0, [(1, -1), (2, -1)], RECOVERING, ErrorCode.invalid_request),
        # a member with another broker epoch
        (1, 0, 0, [(1, -1), (2, 12345)], RECOVERED, ErrorCode.ineligible_replica),
    ],
)
def test_alter_partition_validation_order(
    tmp_path, sender, leader_epoch, partition_epoch, isr, recovery, expected
):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2, 3))
    end = controller.controller.raft_client.log_end_offset
    request = alter_request(
        sender,
        epochs[sender],
        topic_id,
        dict(leader_epoch=leader_epoch, partition_epoch=partition_epoch, isr=isr, recovery=recovery),
    )
    answer = partition_answer(controller.alter_partition(request))
    assert answer.error_code is expected
    assert state(controller, "t").isr == (1, 2, 3)
    assert controller.controller.raft_client.log_end_offset == end  # nothing written


def test_alter_partition_refuses_fenced_and_unregistered_members(tmp_path):
    controller, epochs = open_cluster(tmp_path, brokers=(1, 2, 3, 4))
    topic_id = create(controller, "t", (1, 2, 3, 4))
    heartbeat(controller, epochs, 3, want_fence=True)
    controller.unregister_broker(4)
    assert controller.image.broker(3).fenced and controller.image.broker(4) is None

    def ask(*members, version=3):
        p = state(controller, "t")
        isr = [(m, -1) for m in members]
        request = alter_request(
            1,
            epochs[1],
            topic_id,
            dict(leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, isr=isr),
            version=version,
        )
        return partition_answer(controller.alter_partition(request))

    assert ask(1, 3).error_code is ErrorCode.ineligible_replica
    assert ask(1, 4).error_code is ErrorCode.ineligible_replica
    answer = ask(1, 2)
    assert (answer.error_code, answer.isr) == (ErrorCode.none, (1, 2))


def run_for(controller: SyncController, coroutine, seconds: float) -> None:
    """Run one of the controller's periodic tasks for `seconds`, then stop it."""

    async def bounded():
        try:
            await asyncio.wait_for(coroutine, seconds)
        except TimeoutError:
            pass

    controller.run(bounded())


def last_batch(controller: SyncController) -> list[str]:
    *_, batch = controller.metadata_log.batches()
    return [record.name for record, _ in batch.records]


def shrink(controller, epochs, topic, topic_id, leader, *members):
    p = state(controller, topic)
    request = alter_request(
        leader,
        epochs[leader],
        topic_id,
        dict(leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, isr=[(m, -1) for m in members]),
    )
    assert partition_answer(controller.alter_partition(request)).error_code is ErrorCode.none


# --- fencing, unfencing, unregistration ----------------------------------------------------------------


def test_a_fenced_leader_leaves_the_isr_and_a_new_leader_is_elected_in_the_same_batch(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2, 3), (2, 3, 1))
    reply = heartbeat(controller, epochs, 1, want_fence=True)
    assert reply.is_fenced and not reply.should_shut_down
    assert committed(controller)
    led, followed = state(controller, "t", 0), state(controller, "t", 1)
    assert (led.leader, led.leader_epoch, led.isr, led.partition_epoch) == (2, 1, (2, 3), 1)
    # where it only followed: out of the ISR, leader and leader epoch unchanged
    assert (followed.leader, followed.leader_epoch, followed.isr) == (2, 0, (2, 3))
    assert last_batch(controller) == [
        "PartitionChangeRecord",
        "PartitionChangeRecord",
        "BrokerRegistrationChangeRecord",
    ]
    assert controller.image.broker(1).fenced


def test_session_expiry_fences_one_broker_per_write_and_the_last_isr_member_stays(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2, 3))
    run_for(controller, controller.controller.run_session_expiry(200), 3.0)
    assert all(controller.image.broker(b).fenced for b in BROKERS)
    p = state(controller, "t")
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, (3,), 3)
    # Each fence went in its own batch with its partition changes
    names = [[r.name for r, _ in batch.records] for batch in controller.metadata_log.batches()]
    fences = [batch for batch in names if "BrokerRegistrationChangeRecord" in batch]
    assert fences == [["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]] * 3


def test_a_session_is_fenced_at_its_expiry_not_a_polling_interval_later(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2, 3))
    sessions = controller.controller.cluster_control
    now = time.monotonic()
    # broker.session.timeout.ms 20 s: broker 1's session ends 50 ms from now, the others' much later
    sessions.last_contact.update({1: now - 19.95, 2: now - 10, 3: now})
    assert sessions.next_session_expiry(controller.image, 20.0) == pytest.approx(now + 0.05)
    run_for(controller, controller.controller.run_session_expiry(20_000), 0.2)
    assert [controller.image.broker(b).fenced for b in BROKERS] == [True, False, False]
    assert sessions.next_session_expiry(controller.image, 20.0) == pytest.approx(now + 10)


def test_an_unfenced_broker_leads_the_leaderless_partitions_whose_isr_holds_it(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2), (2, 1), (1, 2))
    heartbeat(controller, epochs, 2, want_fence=True)
    heartbeat(controller, epochs, 1, want_fence=True)
    assert [state(controller, "t", i).leader for i in range(3)] == [NO_LEADER] * 3
    assert [state(controller, "t", i).isr for i in range(3)] == [(1,), (1,), (1,)]
    reply = heartbeat(controller, epochs, 2)  # not in any ISR: unfenced, leads nothing
    assert not reply.is_fenced
    assert [state(controller, "t", i).leader for i in range(3)] == [NO_LEADER] * 3
    reply = heartbeat(controller, epochs, 1)
    assert not reply.is_fenced and reply.is_caught_up
    assert last_batch(controller)[0] == "BrokerRegistrationChangeRecord"
    # partition 1 went 2 -> 1 -> none -> 1: one more epoch than the others
    assert [(state(controller, "t", i).leader, state(controller, "t", i).leader_epoch) for i in range(3)] == [
        (1, 2),
        (1, 3),
        (1, 2),
    ]


def test_unregistering_a_broker_removes_it_from_isrs_and_moves_its_leaderships(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (3, 1, 2))
    controller.unregister_broker(3)
    assert last_batch(controller) == ["PartitionChangeRecord", "UnregisterBrokerRecord"]
    p = state(controller, "t")
    assert (p.leader, p.isr, p.replicas) == (1, (1, 2), (3, 1, 2))
    assert controller.image.broker(3) is None


# --- controlled shutdown --------------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_first_and_shuts_down_once_the_others_have_seen_it(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2, 3), (2, 1, 3))
    first = heartbeat(controller, epochs, 1, want_shut_down=True)
    assert (first.is_fenced, first.should_shut_down) == (False, False)
    assert last_batch(controller) == [
        "BrokerRegistrationChangeRecord",
        "PartitionChangeRecord",
        "PartitionChangeRecord",
    ]
    registration = controller.image.broker(1)
    assert registration.in_controlled_shutdown and not registration.fenced
    assert (state(controller, "t", 0).leader, state(controller, "t", 0).isr) == (2, (2, 3))
    assert (state(controller, "t", 1).leader, state(controller, "t", 1).isr) == (2, (2, 3))
    # a broker in controlled shutdown may not lead nor rejoin an ISR
    p = state(controller, "t", 0)
    rejoin = alter_request(
        2,
        epochs[2],
        topic_id,
        dict(leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, isr=[(2, -1), (1, -1)]),
    )
    assert partition_answer(controller.alter_partition(rejoin)).error_code is ErrorCode.ineligible_replica
    # it leads nothing now, but the active brokers have not reported the moves yet
    second = heartbeat(controller, epochs, 1, want_shut_down=True)
    assert (second.is_fenced, second.should_shut_down) == (False, False)
    heartbeat(controller, epochs, 2)
    heartbeat(controller, epochs, 3)
    third = heartbeat(controller, epochs, 1, want_shut_down=True)
    assert (third.is_fenced, third.should_shut_down) == (True, True)
    assert controller.image.broker(1).fenced


def test_a_broker_that_leads_nothing_shuts_down_at_once(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2, 3))
    reply = heartbeat(controller, epochs, 3, want_shut_down=True)
    assert (reply.is_fenced, reply.should_shut_down) == (True, True)
    assert state(controller, "t").isr == (1, 2)
    assert not controller.image.broker(3).in_controlled_shutdown


def test_the_only_broker_shuts_down_leaving_its_partitions_leaderless_and_leads_again_when_back(tmp_path):
    controller, epochs = open_cluster(tmp_path, brokers=(1,))
    create(controller, "t", (1,))
    assert not heartbeat(controller, epochs, 1, want_shut_down=True).should_shut_down
    p = state(controller, "t")
    assert (p.leader, p.isr) == (NO_LEADER, (1,))
    assert heartbeat(controller, epochs, 1, want_shut_down=True).should_shut_down
    epochs[1] = controller.register_broker(
        Listener("PLAINTEXT", "127.0.0.1", 9001), broker_id=1, log_dirs=[uuid.UUID(int=1001)], fenced=True
    )
    assert not heartbeat(controller, epochs, 1).is_fenced
    assert state(controller, "t").leader == 1


# --- unclean elections ------------------------------------------------------------------------------------


def test_without_unclean_election_the_partition_stays_leaderless(tmp_path):
    controller, epochs = open_cluster(tmp_path, **{"unclean.leader.election.enable": "true"})
    topic_id = create(controller, "t", (1, 2), **{"unclean.leader.election.enable": "false"})
    shrink(controller, epochs, "t", topic_id, 1, 1)
    heartbeat(controller, epochs, 1, want_fence=True)
    p = state(controller, "t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (NO_LEADER, (1,), RECOVERED)


def test_with_unclean_election_an_out_of_sync_replica_leads_recovering(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2), **{"unclean.leader.election.enable": "true"})
    shrink(controller, epochs, "t", topic_id, 1, 1)
    heartbeat(controller, epochs, 1, want_fence=True)
    p = state(controller, "t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)
    # the new leader reports RECOVERED with its first ISR change; never the other way back
    request = alter_request(
        2,
        epochs[2],
        topic_id,
        dict(leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, isr=[(2, -1)]),
    )
    answer = partition_answer(controller.alter_partition(request))
    assert (answer.error_code, answer.leader_recovery_state) == (ErrorCode.none, RECOVERED)


def test_the_broker_configuration_enables_unclean_election_when_the_topic_does_not_say(tmp_path):
    controller, epochs = open_cluster(tmp_path, **{"unclean.leader.election.enable": "true"})
    topic_id = create(controller, "t", (1, 2))
    shrink(controller, epochs, "t", topic_id, 1, 1)
    heartbeat(controller, epochs, 1, want_fence=True)
    assert state(controller, "t").leader == 2


def test_the_periodic_unclean_check_elects_once_the_topic_allows_it(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2))
    shrink(controller, epochs, "t", topic_id, 1, 1)
    heartbeat(controller, epochs, 1, want_fence=True)
    run_for(controller, controller.controller.run_unclean_elections(50), 0.5)
    assert state(controller, "t").leader == NO_LEADER
    error = controller.alter_topic_configs(
        "t", [ConfigOp("unclean.leader.election.enable", OpType.SET, "true")]
    )
    assert not error.is_failure
    run_for(controller, controller.controller.run_unclean_elections(50), 0.5)
    p = state(controller, "t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


# --- preferred-leader rebalance --------------------------------------------------------------------------


def test_the_rebalance_pass_moves_leadership_back_to_the_preferred_replica_once_it_is_in_the_isr(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2, 3))
    heartbeat(controller, epochs, 1, want_fence=True)
    heartbeat(controller, epochs, 1)  # back, unfenced, but out of the ISR
    assert (state(controller, "t").leader, state(controller, "t").isr) == (2, (2, 3))
    run_for(controller, controller.controller.run_leader_rebalance(50), 0.4)
    assert state(controller, "t").leader == 2  # replicas[0] is not in the ISR: no election
    shrink(controller, epochs, "t", topic_id, 2, 2, 3, 1)  # the leader takes it back into the ISR
    run_for(controller, controller.controller.run_leader_rebalance(50), 0.4)
    p = state(controller, "t")
    assert (p.leader, p.isr, p.leader_epoch) == (1, (2, 3, 1), 2)


def test_a_rebalance_pass_is_capped_and_the_task_runs_again_at_once(tmp_path, monkeypatch):
    import kcli.broker.metadata.controller.replication_control_manager as rcm

    monkeypatch.setattr(rcm, "MAX_ELECTIONS_PER_IMBALANCE", 2)
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", *[(1, 2, 3)] * 3)
    heartbeat(controller, epochs, 1, want_fence=True)
    heartbeat(controller, epochs, 1)
    for index in range(3):
        p = state(controller, "t", index)
        isr = [(2, -1), (3, -1), (1, -1)]
        request = alter_request(
            2,
            epochs[2],
            topic_id,
            dict(index=index, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, isr=isr),
        )
        assert partition_answer(controller.alter_partition(request)).error_code is ErrorCode.none
    first = controller.controller.replication_control.maybe_balance_partition_leaders(controller.image)
    assert (len(first.records), first.response) == (2, True)
    # the task's next pass follows at once, not after the (long) interval
    run_for(controller, controller.controller.run_leader_rebalance(1000), 1.5)
    assert [state(controller, "t", i).leader for i in range(3)] == [1, 1, 1]


# --- ElectLeaders ---------------------------------------------------------------------------------------


def elect_request(election_type: int | None, topics: dict[str, list[int]] | None, version: int = 2):
    cls = request_type(43, version)
    topic_cls = nested_type(cls, "TopicPartitions")
    partitions = None
    if topics is not None:
        partitions = tuple(
            topic_cls(topic=name, partitions=tuple(indexes)) for name, indexes in topics.items()
        )
    fields = {"topic_partitions": partitions, "timeout": datetime.timedelta(seconds=60)}
    if version >= 1:
        fields["election_type"] = election_type
    return cls(**fields)


def election_results(response) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    return {
        (topic.topic, partition.partition_id): (partition.error_code, partition.error_message)
        for topic in response.replica_election_results
        for partition in topic.partition_result
    }


def imbalanced_cluster(tmp_path):
    """t-0 led by 2 with its preferred replica 1 back in the ISR, t-1 balanced, t-2 led by 2 with 1
    out of its ISR, u-0 leaderless with only the fenced 3 in its ISR."""
    controller, epochs = open_cluster(tmp_path)
    t_id = create(controller, "t", (1, 2), (2, 1), (1, 2))
    create(controller, "u", (3, 2))
    u_id = controller.image.topic_id("u")
    shrink(controller, epochs, "u", u_id, 3, 3)
    heartbeat(controller, epochs, 1, want_fence=True)
    heartbeat(controller, epochs, 3, want_fence=True)
    heartbeat(controller, epochs, 1)
    shrink(controller, epochs, "t", t_id, 2, 2, 1)
    return controller, epochs


def test_elect_leaders_preferred_per_partition_answers(tmp_path):
    controller, _ = imbalanced_cluster(tmp_path)
    response = controller.elect_leaders(elect_request(0, {"t": [0, 1, 2, 7], "nope": [0]}))
    assert committed(controller)
    assert response.error_code is ErrorCode.none
    assert election_results(response) == {
        ("t", 0): (ErrorCode.none, None),
        ("t", 1): (ErrorCode.election_not_needed, "Leader election not needed for topic partition."),
        ("t", 2): (ErrorCode.preferred_leader_not_available, "The preferred leader was not available."),
        ("t", 7): (ErrorCode.unknown_topic_or_partition, "No such partition as t-7"),
        ("nope", 0): (ErrorCode.unknown_topic_or_partition, "No such topic as nope"),
    }
    assert [state(controller, "t", i).leader for i in range(3)] == [1, 2, 2]


def test_elect_leaders_for_all_partitions_leaves_out_those_that_need_none(tmp_path):
    controller, _ = imbalanced_cluster(tmp_path)
    response = controller.elect_leaders(elect_request(None, None, version=0))
    assert election_results(response) == {
        ("t", 0): (ErrorCode.none, None),
        ("t", 2): (ErrorCode.preferred_leader_not_available, "The preferred leader was not available."),
        ("u", 0): (ErrorCode.preferred_leader_not_available, "The preferred leader was not available."),
    }
    assert [topic.topic for topic in response.replica_election_results] == ["t", "u"]
    assert state(controller, "t", 0).leader == 1


def test_elect_leaders_unclean_overrides_the_topic_config(tmp_path):
    controller, _ = imbalanced_cluster(tmp_path)
    response = controller.elect_leaders(elect_request(1, {"u": [0], "t": [0]}))
    assert election_results(response) == {
        ("u", 0): (ErrorCode.none, None),
        ("t", 0): (ErrorCode.election_not_needed, "Leader election not needed for topic partition."),
    }
    p = state(controller, "u")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_elect_leaders_unclean_without_any_acceptable_replica(tmp_path):
    controller, epochs = open_cluster(tmp_path, brokers=(1, 2))
    create(controller, "t", (1, 2))
    heartbeat(controller, epochs, 2, want_fence=True)
    heartbeat(controller, epochs, 1, want_fence=True)
    response = controller.elect_leaders(elect_request(1, {"t": [0]}))
    assert election_results(response) == {
        ("t", 0): (
            ErrorCode.eligible_leaders_not_available,
            "Eligible topic partition leaders are not available.",
        )
    }


def test_elect_leaders_with_an_unknown_election_type_is_refused_whole(tmp_path):
    controller, _ = imbalanced_cluster(tmp_path)
    end = controller.controller.raft_client.log_end_offset
    with pytest.raises(ApiException) as refused:
        controller.elect_leaders(elect_request(5, {"t": [0]}))
    assert refused.value.error == ApiError(ErrorCode.invalid_request, "Unknown election type 5")
    assert controller.controller.raft_client.log_end_offset == end


# --- a real cluster: kill -9 a partition leader --------------------------------------------------------


def describe_partition(bootstrap: str, topic: str) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """(leader, replicas, isr) of partition 0 as Metadata shows it through `bootstrap`, or None."""
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5)
    except Exception:
        return None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or 0 not in found.partitions:
        return None
    partition = found.partitions[0]
    return partition.leader, tuple(partition.replicas), tuple(partition.isrs)


@pytest.mark.timeout(240)
def test_killing_a_partition_leader_elects_another_from_the_isr_after_its_session(cluster_factory):
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as AdminNewTopic

    cluster = cluster_factory(overrides=SESSION)
    cluster.start()
    wait_all_caught_up(cluster, timeout=90)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 20000})
    futures = admin.create_topics([AdminNewTopic("replicated", 1, 3)], request_timeout=30)
    futures["replicated"].result(40)
    leader, replicas, isr = wait_for(
        "the new topic's leader in Metadata",
        lambda: (d := describe_partition(cluster.bootstrap, "replicated")) and d[0] >= 0 and d,
        30,
    )
    assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3]

    killed_at = time.monotonic()
    cluster[leader].kill()

    def moved():
        found = describe_partition(cluster.live_bootstrap(), "replicated")
        return found if found is not None and found[0] not in (-1, leader) else None

    new_leader, after_replicas, after_isr = wait_for(f"a leader other than {leader}", moved, 90, interval=0.5)
    took = time.monotonic() - killed_at
    # only once the session expired (the controller fences it and elects in the same batch)
    assert took >= SESSION_TIMEOUT_S - 1.0, f"re-elected {took:.1f} s after kill -9"
    assert new_leader in isr and new_leader != leader
    assert leader not in after_isr and after_replicas == replicas
    # the ONLINE election takes the first replica, in assignment order, that is in the ISR and alive
    assert new_leader == next(r for r in replicas if r != leader)

    cluster[leader].start()
    cluster[leader].wait_ready()
    wait_all_caught_up(cluster, timeout=90)
    back = wait_for(
        f"broker {leader} back in the ISR",
        lambda: (d := describe_partition(cluster.bootstrap, "replicated")) and leader in d[2] and d,
        60,
    )
    assert back[1] == replicas
    assert back[0] == new_leader  # an ISR expansion never moves the leadership

    # ElectLeaders, forwarded to the active controller: the preferred replica leads again if it was
    # the killed one (now back in the ISR); otherwise it never stopped leading.
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("replicated", 0)]).result(40)
    [(partition, error)] = result.items()
    assert (partition.topic, partition.partition) == ("replicated", 0)
    if replicas[0] == leader:
        assert error is None, error
        wait_for(
            "the preferred replica leading",
            lambda: (d := describe_partition(cluster.bootstrap, "replicated")) and d[0] == replicas[0],
            30,
        )
    else:
        assert error is not None and error.name() == "ELECTION_NOT_NEEDED", error
