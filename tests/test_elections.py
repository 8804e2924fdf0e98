"""Leader elections and ISR changes on the controller: PartitionChangeBuilder, AlterPartition,
fencing/unfencing/controlled shutdown, unclean elections, ElectLeaders, preferred-leader rebalance.

The controller tests drive the real QuorumController over a real Raft client and metadata log
(metadata_harness.SyncController); the builder tests run Kafka's rules on real partition registrations.
"""

from __future__ import annotations

import uuid

from kcli.broker.metadata.controller.partition_change_builder import (
    RECOVERED,
    RECOVERING,
    Election,
    PartitionChangeBuilder,
)
from kcli.broker.metadata.image import NO_LEADER, PartitionRegistration

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
