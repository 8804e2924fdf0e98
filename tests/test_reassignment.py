"""Partition reassignment (KIP-455): AlterPartitionReassignments and ListPartitionReassignments.

The controller tests drive the real QuorumController over a real Raft client and metadata log
(metadata_harness.SyncController), as tests/test_elections.py does. The cluster tests run three real
`kcli` nodes and move partitions under a running confluent-kafka producer, sending the admin requests
with kcli's own client.
"""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode
from metadata_harness import SyncController
from test_elections import alter_request, create, heartbeat, open_cluster, partition_answer, state

from kcli.broker.metadata.image import NO_LEADER
from kcli.config import BrokerConfig
from kcli.protocol.messages import nested_type, request_type

ALTER = 45
LIST = 46


@pytest.fixture(autouse=True)
def close_controllers():
    yield
    while SyncController.opened:
        SyncController.opened.pop().close()


# --- requests ------------------------------------------------------------------------------------------


def alter_reassignments(targets: dict[tuple[str, int], list[int] | None], version: int = 0, **fields):
    """An AlterPartitionReassignmentsRequest: (topic, partition) -> target replicas, None to cancel."""
    cls = request_type(ALTER, version)
    topic_cls, partition_cls = (
        nested_type(cls, "ReassignableTopic"),
        nested_type(cls, "ReassignablePartition"),
    )
    by_topic: dict[str, list] = {}
    for (topic, index), replicas in targets.items():
        by_topic.setdefault(topic, []).append(
            partition_cls(partition_index=index, replicas=None if replicas is None else tuple(replicas))
        )
    return cls(
        timeout=datetime.timedelta(seconds=30),
        topics=tuple(topic_cls(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        **fields,
    )


def list_reassignments(topics: dict[str, list[int]] | None = None):
    cls = request_type(LIST, 0)
    topic_cls = nested_type(cls, "ListPartitionReassignmentsTopics")
    return cls(
        timeout=datetime.timedelta(seconds=30),
        topics=None
        if topics is None
        else tuple(topic_cls(name=n, partition_indexes=tuple(p)) for n, p in topics.items()),
    )


def answers(response) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    assert response.error_code is ErrorCode.none and response.error_message is None
    return {
        (topic.name, p.partition_index): (p.error_code, p.error_message)
        for topic in response.responses
        for p in topic.partitions
    }


def ongoing(response) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(topic, partition) -> (replicas, adding, removing) of a ListPartitionReassignments answer."""
    assert response.error_code is ErrorCode.none
    return {
        (topic.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for topic in response.topics
        for p in topic.partitions
    }


OK = (ErrorCode.none, None)


def expand(controller, epochs, topic_id, leader, *isr, topic="t", index=0):
    """The leader's AlterPartition asking for `isr`; its answer."""
    p = state(controller, topic, index)
    request = alter_request(
        leader,
        epochs[leader],
        topic_id,
        dict(
            index=index,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            isr=[(b, epochs[b]) for b in isr],
        ),
    )
    return partition_answer(controller.alter_partition(request))


# --- the controller ------------------------------------------------------------------------------------


def test_a_move_adds_then_completes_once_the_isr_holds_every_target_replica(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1, 2))
    assert answers(controller.alter_partition_reassignments(alter_reassignments({("t", 0): [2, 3]}))) == {
        ("t", 0): OK
    }
    p = state(controller, "t")
    # the target, then the replicas being removed; no leader change, no leader-epoch bump
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader, p.leader_epoch) == (
        (2, 3, 1),
        (3,),
        (1,),
        (1, 2),
        1,
        0,
    )
    assert ongoing(controller.list_partition_reassignments(list_reassignments())) == {
        ("t", 0): ((2, 3, 1), (3,), (1,))
    }
    # the adding replica joins the ISR: the leader (1) is removed, 2 (first of the target) leads,
    # and the old leader is told NEW_LEADER_ELECTED although the change is written
    answer = expand(controller, epochs, topic_id, 1, 1, 2, 3)
    assert answer.error_code is ErrorCode.new_leader_elected
    p = state(controller, "t")
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader, p.leader_epoch) == (
        (2, 3),
        (),
        (),
        (2, 3),
        2,
        1,
    )
    assert ongoing(controller.list_partition_reassignments(list_reassignments())) == {}


def test_a_reorder_or_a_shrink_within_the_isr_completes_in_the_same_record(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2, 3), (1, 2, 3))
    response = controller.alter_partition_reassignments(
        alter_reassignments({("t", 0): [3, 2, 1], ("t", 1): [2]})
    )
    assert answers(response) == {("t", 0): OK, ("t", 1): OK}
    reordered, shrunk = state(controller, "t", 0), state(controller, "t", 1)
    # a reorder keeps the leader (the preferred one comes back only by election) and its epoch
    assert (reordered.replicas, reordered.isr, reordered.leader, reordered.leader_epoch) == (
        (3, 2, 1),
        (1, 2, 3),
        1,
        0,
    )
    # a shrink removes replicas: the leader-epoch bump fences them, the leader moves into the target
    assert (shrunk.replicas, shrunk.isr, shrunk.leader, shrunk.leader_epoch) == ((2,), (2,), 2, 1)
    assert not shrunk.adding_replicas and not shrunk.removing_replicas
    # both in one batch
    *_, batch = controller.metadata_log.batches()
    assert [record.name for record, _ in batch.records] == ["PartitionChangeRecord", "PartitionChangeRecord"]


def test_cancel_reverts_to_the_original_replicas_and_a_cancel_of_nothing_is_refused(tmp_path):
    controller, epochs = open_cluster(tmp_path, brokers=(1, 2, 3, 4))
    topic_id = create(controller, "t", (1, 2))
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [3, 4]}))
    expand(controller, epochs, topic_id, 1, 1, 2, 3)  # 3 caught up, 4 not yet
    p = state(controller, "t")
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == (
        (3, 4, 1, 2),
        (1, 2, 3),
        (3, 4),
        (1, 2),
    )
    assert answers(controller.alter_partition_reassignments(alter_reassignments({("t", 0): None}))) == {
        ("t", 0): OK
    }
    p = state(controller, "t")
    # the adding replicas leave replicas and ISR (a removal: the leader epoch is bumped)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas, p.leader, p.leader_epoch) == (
        (1, 2),
        (1, 2),
        (),
        (),
        1,
        1,
    )
    # nothing left to cancel: Kafka's exception carries the code's own sentence, so no message
    response = controller.alter_partition_reassignments(alter_reassignments({("t", 0): None}))
    assert answers(response) == {("t", 0): (ErrorCode.no_reassignment_in_progress, None)}


@pytest.mark.parametrize("unclean", [False, True])
def test_cancel_when_no_original_replica_is_in_the_isr(tmp_path, unclean):
    """[1] -> [2, 3] with 2 caught up, then 1 dies: the ISR is [2] alone. Reverting needs an unclean
    election: refused unless the topic allows one; allowed, the original replica is the ISR alone and,
    being dead, the partition is left leaderless (KAFKA-14424), until broker 1 comes back."""
    controller, epochs = open_cluster(tmp_path)
    topic_id = create(controller, "t", (1,), **{"unclean.leader.election.enable": str(unclean).lower()})
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [2, 3]}))
    expand(controller, epochs, topic_id, 1, 1, 2)
    heartbeat(controller, epochs, 1, want_fence=True)
    p = state(controller, "t")
    assert (p.replicas, p.isr, p.leader) == ((2, 3, 1), (2,), 2)  # an adding replica may lead
    response = controller.alter_partition_reassignments(alter_reassignments({("t", 0): None}))
    if not unclean:
        assert answers(response) == {
            ("t", 0): (
                ErrorCode.invalid_replica_assignment,
                "Unable to revert partition assignment for t:0 because it would require an unclean "
                "leader election.",
            )
        }
        assert state(controller, "t") == p
        return
    assert answers(response) == {("t", 0): OK}
    p = state(controller, "t")
    assert (p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas) == (
        (1,),
        (1,),
        NO_LEADER,
        (),
        (),
    )
    heartbeat(controller, epochs, 1)  # back: unfenced, it leads its partition again
    assert state(controller, "t").leader == 1


def test_bad_requests_get_kafkas_per_partition_errors_and_the_good_ones_are_written(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2), (1, 2))
    response = controller.alter_partition_reassignments(
        alter_reassignments(
            {
                ("missing", 0): [1],
                ("t", 7): [1],
                ("t", 0): [],
                ("t", 1): [2, 9],
            }
        )
    )
    assert answers(response) == {
        ("missing", 0): (ErrorCode.unknown_topic_or_partition, "Unable to find a topic named missing."),
        ("t", 7): (ErrorCode.unknown_topic_or_partition, "Unable to find partition t:7."),
        ("t", 0): (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        ),
        ("t", 1): (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        ),
    }
    response = controller.alter_partition_reassignments(
        alter_reassignments({("t", 0): [3, 3], ("t", 1): [2, 3]})
    )
    assert answers(response) == {
        ("t", 0): (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes the broker 3 more than once.",
        ),
        ("t", 1): OK,
    }
    assert state(controller, "t", 0).replicas == (1, 2)
    assert state(controller, "t", 1).adding_replicas == (3,)
    # ListPartitionReassignments leaves out unknown topics and partitions and those not moving
    listed = controller.list_partition_reassignments(list_reassignments({"t": [0, 1, 5], "missing": [0]}))
    assert ongoing(listed) == {("t", 1): ((2, 3, 1), (3,), (1,))}


def test_v1_refuses_a_replication_factor_change_when_asked_to(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2), (1, 2))
    request = alter_reassignments(
        {("t", 0): [1, 2, 3], ("t", 1): [2, 3]}, version=1, allow_replication_factor_change=False
    )
    response = controller.alter_partition_reassignments(request)
    assert response.allow_replication_factor_change is False
    assert answers(response) == {
        ("t", 0): (ErrorCode.invalid_replication_factor, "The replication factor is changed from 2 to 3"),
        ("t", 1): OK,
    }
    # during a reassignment the size compared is the one the partition is heading for: [2, 3]
    request = alter_reassignments({("t", 1): [3]}, version=1, allow_replication_factor_change=False)
    assert answers(controller.alter_partition_reassignments(request)) == {
        ("t", 1): (ErrorCode.invalid_replication_factor, "The replication factor is changed from 2 to 1")
    }


def test_a_reassignment_survives_a_controller_restart(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2))
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [2, 3]}))
    before = state(controller, "t")
    controller.close()
    SyncController.opened.remove(controller)
    again = SyncController(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    assert state(again, "t") == before
    assert ongoing(again.list_partition_reassignments(list_reassignments({"t": [0]}))) == {
        ("t", 0): ((2, 3, 1), (3,), (1,))
    }


def test_replacing_an_ongoing_reassignment_starts_from_the_transitional_replicas(tmp_path):
    controller, epochs = open_cluster(tmp_path, brokers=(1, 2, 3, 4))
    create(controller, "t", (1, 2))
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [3, 4]}))
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [1, 3]}))
    p = state(controller, "t")
    # current = [3, 4, 1, 2], so nothing is added and 2 and 4 are removed. As in Kafka, an empty
    # adding list is not written: the old one (3, 4) stays until the reassignment completes.
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((1, 3, 2, 4), (3, 4), (2, 4))
