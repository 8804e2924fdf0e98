"""`kcli reassign` without a cluster: Kafka's placement, the JSON files, output shapes, move maps and
throttle lists, batches, size-aware plans and the progress/ETA model.

The expected values of the Kafka-derived tests are those of Kafka's own tests (named in each test),
so the same inputs give the same assignments and lines as kafka-reassign-partitions.sh.
"""

from __future__ import annotations

import random
import subprocess

import pytest
from conftest import KCLI, kcli_env

from ops.reassign import report
from ops.reassign.assignment import (
    ReassignError,
    TopicPartition,
    TopicPartitionReplica,
    format_reassignment,
    parse_broker_list,
    parse_execute,
    parse_reassignment,
    parse_topics_to_move,
    replica_order,
)
from ops.reassign.batches import PlannedMove, next_batch, order
from ops.reassign.log_dirs import LogDirMoveState, move_states_text
from ops.reassign.moves import (
    OngoingReassignment,
    PartitionMove,
    follower_throttles,
    leader_throttles,
    proposed_move_map,
    reassigning_brokers,
)
from ops.reassign.placement import BrokerMetadata, assign_replicas_to_brokers, rack_alternated_brokers
from ops.reassign.plan import plan_moves
from ops.reassign.progress import RateEstimator, Tracker, measure
from ops.reassign.verify import cancellable

T = TopicPartition


def brokers_with_racks(racks: dict[int, str | None]) -> list[BrokerMetadata]:
    return [BrokerMetadata(b, r) for b, r in racks.items()]


# --- placement (server-common AdminUtils, core's AdminRackAwareTest) -------------------------------


def test_rack_alternated_list_and_rack_aware_assignment() -> None:
    """AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers."""
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas_to_brokers(brokers_with_racks(racks), 7, 3, 0, 0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_rack_unaware_assignment() -> None:
    """AdminRackAwareTest.testReplicaAssignment (fixed start index 0)."""
    brokers = [BrokerMetadata(b) for b in range(5)]
    assert assign_replicas_to_brokers(brokers, 10, 3, 0, -1) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }
    with pytest.raises(ReassignError, match="^Replication factor must be larger than 0"):
        assign_replicas_to_brokers(brokers, 10, 0)
    with pytest.raises(ReassignError, match=r"^Replication factor: 6 larger than available brokers: 5\.$"):
        assign_replicas_to_brokers(brokers, 10, 6)
    with pytest.raises(ReassignError, match="^Number of partitions must be larger than 0"):
        assign_replicas_to_brokers(brokers, 0, 1)


def test_documentation_example_generate() -> None:
    """Kafka's docs/ops.html, "Automatically migrating data to new machines": foo1 and foo2 (3 partitions,
    RF 2) onto brokers 5,6 give foo1 [6,5],[5,6],[6,5] and foo2 [5,6],[6,5],[5,6]: the start indexes
    the random draw picked there were 1 and 0."""
    brokers = [BrokerMetadata(5), BrokerMetadata(6)]
    assert assign_replicas_to_brokers(brokers, 3, 2, 1) == {0: [6, 5], 1: [5, 6], 2: [6, 5]}
    assert assign_replicas_to_brokers(brokers, 3, 2, 0) == {0: [5, 6], 1: [6, 5], 2: [5, 6]}


def distribution(assignment: dict[int, list[int]], racks: dict[int, str]) -> tuple[dict, dict, dict]:
    """RackAwareTest.getReplicaDistribution: racks per partition, leaders and replicas per broker."""
    partition_racks = {p: [racks[b] for b in replicas] for p, replicas in assignment.items()}
    leaders: dict[int, int] = {}
    counts: dict[int, int] = {}
    for replicas in assignment.values():
        leaders[replicas[0]] = leaders.get(replicas[0], 0) + 1
        for b in replicas:
            counts[b] = counts.get(b, 0) + 1
    return partition_racks, leaders, counts


@pytest.mark.parametrize(
    ("racks", "partitions", "rf", "start", "first_partition", "even_leaders", "even_replicas"),
    [
        # AdminRackAwareTest.testAssignmentWithRackAware
        ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 6, 3, 2, 0, True, True),
        # testAssignmentWithRackAwareWithRandomStartIndex
        ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 6, 3, -1, -1, True, True),
        # testAssignmentWithRackAwareWithUnevenReplicas
        ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 13, 3, 0, 0, False, False),
        # testAssignmentWithRackAwareWithUnevenRacks
        ({0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 12, 3, -1, -1, True, False),
        # testAssignmentWith2ReplicasRackAware
        ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 12, 2, -1, -1, True, True),
        # testRackAwareExpansion
        ({6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}, 12, 2, -1, 12, True, True),
        # testAssignmentWith2ReplicasRackAwareWith6PartitionsAnd3Brokers
        ({0: "rack1", 1: "rack2", 4: "rack3"}, 3, 2, -1, -1, True, True),
        # testLargeNumberPartitionsAssignment
        (
            {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1", 6: "rack1", 7: "rack2",
             8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"},
            96, 3, -1, -1, True, True,
        ),
    ],
)  # fmt: skip
def test_rack_aware_distribution(
    racks, partitions, rf, start, first_partition, even_leaders, even_replicas
) -> None:
    """RackAwareTest.checkReplicaDistribution over AdminRackAwareTest's cases: no broker twice, one replica
    per rack, and (where Kafka checks it) even leaders and replicas per broker."""
    assignment = assign_replicas_to_brokers(
        brokers_with_racks(racks), partitions, rf, start, first_partition, rng=random.Random(7)
    )
    assert len(assignment) == partitions
    partition_racks, leaders, counts = distribution(assignment, racks)
    for replicas in assignment.values():
        assert len(set(replicas)) == len(replicas)
    assert all(len(set(r)) == rf for r in partition_racks.values())
    if even_leaders:
        assert sorted(leaders.values()) == [partitions // len(racks)] * len(racks)
    if even_replicas:
        assert sorted(counts.values()) == [partitions * rf // len(racks)] * len(racks)


def test_more_and_fewer_replicas_than_racks_and_single_rack() -> None:
    """AdminRackAwareTest.testMoreReplicasThanRacks, testLessReplicasThanRacks, testSingleRack,
    testSkipBrokerWithReplicaAlreadyAssigned."""
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    assignment = assign_replicas_to_brokers(brokers_with_racks(racks), 6, 5)
    assert all(len(r) == 5 and len({racks[b] for b in r}) == 3 for r in assignment.values())
    assignment = assign_replicas_to_brokers(brokers_with_racks(racks), 6, 2)
    assert all(len({racks[b] for b in r}) == 2 for r in assignment.values())
    single = dict.fromkeys(range(6), "rack1")
    assignment = assign_replicas_to_brokers(brokers_with_racks(single), 6, 3)
    assert sorted(r[0] for r in assignment.values()) == list(range(6))
    skip = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    assignment = assign_replicas_to_brokers(brokers_with_racks(skip), 6, 4, 2, -1)
    assert all(len(set(r)) == 4 for r in assignment.values())


def test_mixed_racks_refused() -> None:
    """AdminRackAwareTest.testAssignReplicasToBrokersWithInvalidParameters: some brokers without a rack."""
    brokers = brokers_with_racks({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: None})
    with pytest.raises(ReassignError, match="^Not all brokers have rack information"):
        assign_replicas_to_brokers(brokers, 10, 5)


# --- the JSON files (ReassignPartitionsUnitTest) ---------------------------------------------------


def test_parse_generate_args() -> None:
    """ReassignPartitionsUnitTest.testParseGenerateAssignmentArgs."""
    with pytest.raises(ReassignError, match="^Broker list contains duplicate entries: 1."):
        parse_broker_list("1,1,2")
    with pytest.raises(ReassignError, match="^Broker list contains duplicate entries: 5."):
        parse_broker_list("5,2,3,4,5")
    assert parse_broker_list("5,2,3,4") == [5, 2, 3, 4]
    assert parse_topics_to_move('{"topics": [{"topic": "foo"},{"topic": "bar"}], "version":1}') == [
        "foo",
        "bar",
    ]
    assert parse_topics_to_move('{"topics": [{"topic": "foo"}]}') == ["foo"]
    with pytest.raises(ReassignError, match="^Not supported version field value 2"):
        parse_topics_to_move('{"topics": [], "version": 2}')
    with pytest.raises(ReassignError, match="is not valid JSON"):
        parse_topics_to_move("{invalid_json")
    with pytest.raises(ReassignError, match="not broker ids"):
        parse_broker_list("1,x")


def test_documentation_files() -> None:
    """The JSON files of Kafka's docs/ops.html, as printed there (spaces and newlines included)."""
    assert parse_topics_to_move(
        '{\n  "topics": [\n    { "topic": "foo1" },\n    { "topic": "foo2" }\n  ],\n  "version": 1\n}'
    ) == ["foo1", "foo2"]
    custom = parse_execute(
        '{"version":1,"partitions":[{"topic":"foo1","partition":0,"replicas":[5,6]},'
        '{"topic":"foo2","partition":1,"replicas":[2,3]}]}'
    )
    assert custom.targets() == {T("foo1", 0): (5, 6), T("foo2", 1): (2, 3)} and custom.log_dirs == {}
    increase = parse_execute(
        '{"version":1,\n "partitions":[{"topic":"foo","partition":0,"replicas":[5,6,7]}]}'
    )
    assert increase.targets() == {T("foo", 0): (5, 6, 7)}
    assert (
        report.started(custom.targets()) == "Successfully started partition reassignments for foo1-0,foo2-1"
    )


def test_parse_execute_args() -> None:
    """ReassignPartitionsUnitTest.testParseExecuteAssignmentArgs."""
    with pytest.raises(ReassignError, match="^Partition reassignment list cannot be empty"):
        parse_execute('{"version":1,"partitions":[]}')
    with pytest.raises(
        ReassignError, match="^Partition reassignment contains duplicate topic partitions: foo-0"
    ):
        parse_execute(
            '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[0,1],"log_dirs":["any","any"]},'
            '{"topic":"foo","partition":0,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}'
        )
    with pytest.raises(ReassignError, match="^Partition replica lists may not contain duplicate entries: "):
        parse_execute(
            '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[0,0],"log_dirs":["/abc","/def"]},'
            '{"topic":"foo","partition":1,"replicas":[2,3],"log_dirs":["/abc","/def"]}]}'
        )
    with pytest.raises(ReassignError, match="^Partition replica list cannot be empty"):
        parse_execute('{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[]}]}')
    with pytest.raises(
        ReassignError, match=r"^Size of replicas list \[1, 2\] is different from size of log dirs"
    ):
        parse_execute('{"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}')
    data = parse_execute(
        '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[3,4,5],"log_dirs":["any","any","any"]}]}'
    )
    assert data.targets() == {T("foo", 0): (1, 2, 3), T("foo", 1): (3, 4, 5)}
    assert data.log_dirs == {}
    data = parse_execute(
        '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3],'
        '"log_dirs":["/tmp/a","/tmp/b","/tmp/c"]}]}'
    )
    assert data.log_dirs == {
        TopicPartitionReplica("foo", 0, 1): "/tmp/a",
        TopicPartitionReplica("foo", 0, 2): "/tmp/b",
        TopicPartitionReplica("foo", 0, 3): "/tmp/c",
    }
    with pytest.raises(ReassignError, match="is not valid JSON"):  # testPropagateInvalidJsonError
        parse_reassignment("{invalid_json")
    for bad, sentence in [
        ('{"partitions":[{"partition":0,"replicas":[1]}]}', 'no string "topic"'),
        ('{"partitions":[{"topic":"a","partition":"0","replicas":[1]}]}', 'no integer "partition"'),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":"1"}]}', 'no "replicas" list'),
        ('{"partitions":{}}', "must be a list"),
        ("[]", "must hold a JSON object"),
    ]:
        with pytest.raises(ReassignError, match=sentence):
            parse_reassignment(bad)


def test_json_output_and_orders() -> None:
    """formatAsReassignmentJson; testCompareTopicPartitions, testCompareTopicPartitionReplicas."""
    assert format_reassignment({T("foo", 1): [4, 5, 6], T("bar", 0): [7, 8]}) == (
        '{"version":1,"partitions":[{"topic":"bar","partition":0,"replicas":[7,8],"log_dirs":["any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[4,5,6],"log_dirs":["any","any","any"]}]}'
    )
    assert T("abc", 0) < T("abc", 1) and not T("def", 0) < T("abc", 1)
    assert replica_order(TopicPartitionReplica("def", 0, 0)) < replica_order(
        TopicPartitionReplica("abc", 0, 1)
    )
    assert not replica_order(TopicPartitionReplica("def", 0, 0)) < replica_order(
        TopicPartitionReplica("cde", 0, 0)
    )
    assert str(TopicPartitionReplica("bar", 0, 1)) == "bar-0-1"


# --- output shapes ---------------------------------------------------------------------------------


def test_status_lines() -> None:
    """ReassignPartitionsUnitTest.testPartitionReassignStatesToString."""
    states = {
        T("foo", 0): report.PartitionReassignmentState((1, 2, 3), (1, 2, 3), True),
        T("foo", 1): report.PartitionReassignmentState((1, 2, 3), (1, 2, 4), False),
        T("bar", 0): report.PartitionReassignmentState((1, 2, 3), (1, 2, 4), False),
        T("baz", 0): report.PartitionReassignmentState((1, 2, 3), (1, 2, 4), True),
    }
    assert report.states(states).splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition bar-0 is still in progress.",
        "There is no active reassignment of partition baz-0, but replica set is 1,2,3 rather than 1,2,4.",
        "Reassignment of partition foo-0 is completed.",
        "Reassignment of partition foo-1 is still in progress.",
    ]


def test_current_assignment_and_started_lines() -> None:
    """ReassignPartitionsUnitTest.testCurrentPartitionReplicaAssignmentToString; docs/ops.html's lines."""
    assert report.current_assignment({T("bar", 0): [7, 8], T("foo", 1): [4, 5, 6]}).split("\n") == [
        "Current partition replica assignment",
        "",
        '{"version":1,"partitions":[{"topic":"bar","partition":0,"replicas":[7,8],"log_dirs":["any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[4,5,6],"log_dirs":["any","any","any"]}]}',
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
    ]
    assert (
        report.started([T("foo2", 1), T("foo1", 0)])
        == "Successfully started partition reassignments for foo1-0,foo2-1"
    )
    assert report.started([T("foo", 0)]) == "Successfully started partition reassignment for foo-0"
    assert report.throttle_set(50000000) == "The inter-broker throttle limit was set to 50000000 B/s"
    assert (
        report.log_dir_throttle_set(100000000)
        == "The replica-alter-dir throttle limit was set to 100000000 B/s"
    )
    assert report.throttles_cleared([3, 1, 2], ["my-topic"]).splitlines() == [
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic my-topic",
    ]
    assert report.cancelled([]) == "None of the specified partition reassignments are active."


def test_ongoing_lines() -> None:
    """ReassignPartitionsUnitTest.testCurReassignmentsToString."""
    assert report.ongoing({}) == "No partition reassignments found."
    assert report.ongoing(
        {
            T("foo", 1): OngoingReassignment((1, 2, 3, 4, 5), (4, 5), (1, 2)),
            T("foo", 0): OngoingReassignment((0, 1, 2, 4), (4,), ()),
            T("bar", 0): OngoingReassignment((2, 3, 0), (), (0,)),
        }
    ).splitlines() == [
        "Current partition reassignments:",
        "bar-0: replicas: 2,3,0. removing: 0.",
        "foo-0: replicas: 0,1,2,4. adding: 4.",
        "foo-1: replicas: 1,2,3,4,5. adding: 4,5. removing: 1,2.",
    ]


def test_replica_move_lines() -> None:
    """ReassignPartitionsUnitTest.testReplicaMoveStatesToString."""
    R = TopicPartitionReplica
    states = {
        R("bar", 0, 0): LogDirMoveState("completed", "/tmp/kafka-logs0", "/tmp/kafka-logs0"),
        R("foo", 0, 0): LogDirMoveState("active", "/tmp/kafka-logs1", "/tmp/kafka-logs0", "/tmp/kafka-logs1"),
        R("foo", 1, 0): LogDirMoveState("cancelled", "/tmp/kafka-logs1", "/tmp/kafka-logs0"),
        R("quux", 0, 0): LogDirMoveState("missing_replica", "/tmp/kafka-logs1"),
        R("quux", 1, 1): LogDirMoveState(
            "active", "/tmp/kafka-logs1", "/tmp/kafka-logs0", "/tmp/kafka-logs2"
        ),
        R("quux", 2, 1): LogDirMoveState("missing_log_dir", "/tmp/kafka-logs1"),
    }
    assert move_states_text(states).splitlines() == [
        "Reassignment of replica bar-0-0 completed successfully.",
        "Reassignment of replica foo-0-0 is still in progress.",
        "Partition foo-1 on broker 0 is not being moved from log dir /tmp/kafka-logs0 to /tmp/kafka-logs1.",
        "Partition quux-0 cannot be found in any live log directory on broker 0.",
        "Partition quux-1 on broker 1 is being moved to log dir /tmp/kafka-logs2 instead of /tmp/kafka-logs1.",
        "Partition quux-2 is not found in any live log dir on broker 1. "
        "There is likely an offline log directory on the broker.",
    ]
    assert move_states_text({}) == ""
    assert [s.done for s in states.values()] == [True, False, True, False, False, False]


# --- moves and throttles ---------------------------------------------------------------------------


def test_move_map_and_throttle_lists() -> None:
    """ReassignPartitionsUnitTest.testMoveMap."""
    ongoing = {
        T("foo", 0): OngoingReassignment((1, 2, 3, 4), (4,), (3,)),
        T("foo", 1): OngoingReassignment((4, 5, 6, 7, 8), (7, 8), (4, 5)),
        T("foo", 2): OngoingReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
        T("foo", 3): OngoingReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
        T("foo", 4): OngoingReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
        T("foo", 5): OngoingReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
    }
    proposed = {
        T("foo", 0): [1, 2, 5],
        T("foo", 2): [3, 4],
        T("foo", 3): [5, 6],
        T("foo", 4): [3],
        T("foo", 5): [3, 4, 5, 6],
        T("bar", 0): [1, 2, 3],
    }
    current = {
        T("foo", 0): [1, 2, 3, 4],
        T("foo", 1): [4, 5, 6, 7, 8],
        T("foo", 2): [1, 2, 3, 4],
        T("foo", 3): [1, 2, 3, 4],
        T("foo", 4): [1, 2, 3, 4],
        T("foo", 5): [1, 2, 3, 4],
        T("bar", 0): [2, 3, 4],
    }
    moves = proposed_move_map(ongoing, proposed, current)

    def move(sources: set[int], destinations: set[int]) -> PartitionMove:
        return PartitionMove(frozenset(sources), frozenset(destinations))

    assert moves["foo"] == {
        0: move({1, 2, 3}, {5}),
        1: move({4, 5, 6}, {7, 8}),
        2: move({1, 2}, {3, 4}),
        3: move({1, 2}, {5, 6}),
        4: move({1, 2}, {3}),
        5: move({1, 2}, {3, 4, 5, 6}),
    }
    assert moves["bar"] == {0: move({2, 3, 4}, {1})}
    assert leader_throttles(moves) == {
        "foo": "0:1,0:2,0:3,1:4,1:5,1:6,2:1,2:2,3:1,3:2,4:1,4:2,5:1,5:2",
        "bar": "0:2,0:3,0:4",
    }
    assert follower_throttles(moves) == {
        "foo": "0:5,1:7,1:8,2:3,2:4,3:5,3:6,4:3,5:3,5:4,5:5,5:6",
        "bar": "0:1",
    }
    assert reassigning_brokers(moves) == {1, 2, 3, 4, 5, 6, 7, 8}
    assert OngoingReassignment((1, 2, 3, 4), (4,), (3,)).original == (1, 2, 3)
    assert OngoingReassignment((1, 2, 3, 4), (4,), (3,)).target == (1, 2, 4)


def test_cancel_spares_partitions_whose_original_replicas_are_all_down() -> None:
    """A revert onto replicas that are all down would leave the partition without a leader."""
    ongoing = {
        T("a", 0): OngoingReassignment((1, 2, 3), (3,), (1,)),  # original 1,2: 2 is live
        T("a", 1): OngoingReassignment((1, 3), (3,), (1,)),  # original 1 only, down
        T("a", 2): OngoingReassignment((1, 2), (), ()),  # nothing moving: not cancelled (nothing to revert)
        T("a", 3): OngoingReassignment((2, 3), (3,), ()),  # only adding: cancelled (the Scala tool's rule)
    }
    assert cancellable(ongoing, [2, 3]) == ([T("a", 0), T("a", 3)], {T("a", 1): (1,)})


# --- batches ---------------------------------------------------------------------------------------


def test_batches_cap_moves_per_broker() -> None:
    """Largest first; a broker (adding or leading) never in more than the cap at once; a move that only
    shrinks takes no slot."""
    moves = order(
        [
            PlannedMove(T("a", 0), (1, 2), (3, 2), 1, 100),  # slots 3 (adding) + 1 (leader)
            PlannedMove(T("a", 1), (1, 2), (1, 3), 1, 300),  # slots 3, 1
            PlannedMove(T("a", 2), (2, 4), (2, 5), 2, 200),  # slots 5, 2
            PlannedMove(T("a", 3), (1, 2, 3), (1, 2), 1, 900),  # shrink: no slot
        ]
    )
    assert [m.partition.partition for m in moves] == [1, 2, 0, 3]
    first = next_batch(moves, [], 1)
    assert [m.partition.partition for m in first] == [1, 2, 3]
    assert next_batch([moves[2]], first, 1) == []
    assert next_batch([moves[2]], [moves[1]], 1) == [moves[2]]
    assert [m.partition.partition for m in next_batch(moves, [], 2)] == [1, 2, 0, 3]
    with pytest.raises(ValueError):
        next_batch(moves, [], 0)


# --- size-aware plans ------------------------------------------------------------------------------


def test_decommission_moves_only_the_removed_brokers_replicas() -> None:
    current = {T("t", p): [1 + p % 4, 1 + (p + 1) % 4] for p in range(8)}
    sizes = {T("t", p): (p + 1) * 1000 for p in range(8)}
    plan = plan_moves(current, sizes, [BrokerMetadata(b) for b in (1, 2, 3)], balance=False)
    assert set(plan.proposed) == {tp for tp, replicas in current.items() if 4 in replicas}
    for tp, replicas in plan.proposed.items():
        assert 4 not in replicas and len(set(replicas)) == 2
        kept = [b for b in current[tp] if b != 4]
        assert all(b in replicas for b in kept)
        assert replicas.index(kept[0]) == current[tp].index(kept[0])  # positions kept
    assert plan.bytes_to_move == sum(sizes[tp] for tp in plan.proposed)
    assert sum(plan.load_after.values()) == 2 * sum(sizes.values())


def test_expansion_moves_few_bytes_onto_the_new_broker() -> None:
    current = {T("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(12)}
    sizes = {T("t", p): 1000 for p in range(12)}
    brokers = [BrokerMetadata(b) for b in (1, 2, 3, 4)]
    plan = plan_moves(current, sizes, brokers, balance=True, receivers=[4])
    assert all(4 in replicas for replicas in plan.proposed.values())
    assert plan.load_before[4] == 0
    mean = 2 * 12 * 1000 / 4
    assert abs(plan.load_after[4] - mean) <= 0.1 * mean + 1000
    assert plan.bytes_to_move == plan.load_after[4]  # only what the new broker needs moves
    # Kafka's --generate would lay all 12 partitions out afresh: most replicas move
    kafka = assign_replicas_to_brokers(brokers, 12, 2, 0)
    kafka_bytes = sum(1000 * len(set(kafka[p]) - set(current[T("t", p)])) for p in range(12))
    assert plan.bytes_to_move < kafka_bytes


def test_plan_weighs_sizes_and_respects_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    current = {T("big", 0): [1, 3], T("small", 0): [1, 4], T("small", 1): [2, 3]}
    sizes = {T("big", 0): 10_000, T("small", 0): 10, T("small", 1): 10}
    plan = plan_moves(current, sizes, brokers_with_racks({2: "a", 3: "b", 4: "b"}), balance=False)
    # broker 1 goes: its replicas must land on rack a (the partition's other replica is on b): broker 2
    assert plan.proposed[T("big", 0)] == (2, 3)
    assert plan.proposed[T("small", 0)] == (2, 4)
    with pytest.raises(ReassignError, match="^Not all brokers have rack information"):
        plan_moves(current, sizes, brokers_with_racks({2: "a", 3: None}), balance=False)
    with pytest.raises(ReassignError, match="larger than available brokers"):
        plan_moves(current, sizes, [BrokerMetadata(3)], balance=False)
    balanced = plan_moves(current, sizes, brokers_with_racks(racks), balance=True)
    for tp, replicas in {**current, **balanced.proposed}.items():
        assert len({racks[b] for b in replicas}) == 2, tp


# --- progress and ETA ------------------------------------------------------------------------------


def test_progress_measure_and_eta() -> None:
    tp = T("t", 0)
    m = measure(tp, (3, 4), 1000, {3: 400, 4: 1200})
    assert (m.total, m.copied, m.remaining) == (2000, 1400, 600)  # a replica past the leader counts as done
    tracker = Tracker.for_moves([(tp, (3,), 1000), (T("t", 1), (3,), 3000)], now=0.0, window=10.0)
    first = tracker.observe(0.0, [measure(tp, (3,), 1000, {3: 0})], [])
    assert first.rate is None and first.eta is None and first.remaining == 4000
    second = tracker.observe(2.0, [measure(tp, (3,), 1000, {3: 200})], [])
    assert second.rate == pytest.approx(100.0) and second.eta == pytest.approx(38.0)
    running = second.to_json()["partitions"]
    assert [(p["partition"], p["rate_bytes_per_s"], p["eta_s"]) for p in running] == [(0, 100.0, 8.0)]
    third = tracker.observe(4.0, [], [tp])  # finished: counted as fully copied
    assert third.count("done") == 1 and third.copied == 1000 and third.remaining == 3000
    assert third.to_json()["partitions_pending"] == 1
    done = tracker.observe(6.0, [], [T("t", 1)])
    assert done.eta == 0.0 and done.fraction == 1.0


def test_rate_is_smoothed() -> None:
    """A steady 1 MB/s with one stalled poll: the estimate dips and recovers instead of jumping to 0; idle
    polls before the copy begins do not count."""
    estimator = RateEstimator(window=10.0)
    assert estimator.update(-2.0, 0) is None and estimator.update(-1.0, 0) is None
    copied = 0
    rates = []
    for second in range(1, 31):
        copied += 0 if second == 15 else 1_000_000
        rates.append(estimator.update(float(second), copied))
    assert rates[0] == pytest.approx(500_000)  # from the last idle poll: the copy began after it
    assert rates[13] == pytest.approx(1_000_000)
    assert 850_000 < rates[14] < 1_000_000
    assert rates[-1] == pytest.approx(1_000_000, rel=0.05)


# --- the CLI's refusals, before any connection -----------------------------------------------------


def kcli_refused(*args: str, cwd=None) -> str:
    result = subprocess.run(
        [*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=60, cwd=cwd
    )
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_cli_refusals(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[0,0]}]}')
    assert kcli_refused("reassign", "execute", "--reassignment-json-file", str(bad), "-b", "127.0.0.1:1") == (
        "kcli: Partition replica lists may not contain duplicate entries: foo-0 contains multiple entries for 0."
    )
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"foo"}],"version":1}')
    assert kcli_refused(
        "reassign", "generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,1"
    ) == ("kcli: Broker list contains duplicate entries: 1.")
    assert kcli_refused("reassign", "cancel") == "kcli: give either --reassignment-json-file or --all."
    assert kcli_refused("reassign", "execute", "--reassignment-json-file", str(bad), "--no-wait",
                        "--max-moves-per-broker", "2") == (
        "kcli: --max-moves-per-broker needs execute to wait: it cannot be combined with --no-wait."
    )  # fmt: skip
    assert kcli_refused(
        "reassign", "verify", "--reassignment-json-file", str(tmp_path / "none.json")
    ).startswith("kcli: cannot open")
