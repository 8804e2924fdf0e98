"""StripedReplicaPlacer: Kafka's StripedReplicaPlacerTest cases, with Kafka's MockRandom draws, and the
placer as the controller uses it for CreateTopics and CreatePartitions over racked brokers."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from metadata_harness import SyncController

from kcli.broker.metadata.controller.topic_control_manager import NewTopic
from kcli.broker.metadata.placement import (
    BrokerList,
    InvalidReplicationFactorException,
    PlacementSpec,
    RackList,
    StripedReplicaPlacer,
    UsableBroker,
)
from kcli.config import BrokerConfig, Listener

_MASK = (1 << 64) - 1


class MockRandom(random.Random):
    """Kafka's MockRandom (a java.util.Random with a fixed linear step): nextInt(bound) and
    Collections.shuffle drawn exactly as Java draws them, so placements match Kafka's tests."""

    def __init__(self, state: int = 17) -> None:
        super().__init__(0)
        self.state = state

    def _next(self, bits: int) -> int:
        self.state = (self.state * 2862933555777941757 + 3037000493) & _MASK
        return self.state >> (64 - bits)

    def randrange(self, stop: int) -> int:  # type: ignore[override]
        """Random.nextInt(bound)."""
        r = self._next(31)
        m = stop - 1
        if stop & m == 0:
            return (stop * r) >> 31
        u = r
        while True:
            r = u % stop
            if u - r + m < 1 << 31:  # Java's int overflow test `u - r + m < 0`
                return r
            u = self._next(31)

    def shuffle(self, x: list) -> None:  # type: ignore[override]
        """Collections.shuffle on a RandomAccess list."""
        for i in range(len(x), 1, -1):
            j = self.randrange(i)
            x[i - 1], x[j] = x[j], x[i - 1]


def racks(*brokers: tuple[int, str | None, bool]) -> RackList:
    return RackList(MockRandom(), [UsableBroker(*b) for b in brokers])


def place(
    num_partitions: int, replication_factor: int, *brokers: tuple[int, str | None, bool]
) -> list[list[int]]:
    placer = StripedReplicaPlacer(MockRandom())
    return placer.place(
        PlacementSpec(0, num_partitions, replication_factor), [UsableBroker(*b) for b in brokers]
    )


def test_mock_random_draws_as_java_does():
    # Java: new MockRandom().nextInt(5), then nextInt(4) (a power of two), from state 17
    rnd = MockRandom()
    first = rnd.randrange(5)
    state = (17 * 2862933555777941757 + 3037000493) & _MASK
    assert first == (state >> 33) % 5
    assert rnd.randrange(4) == (4 * (((state * 2862933555777941757 + 3037000493) & _MASK) >> 33)) >> 31


def test_broker_list():
    empty = BrokerList()
    assert empty.size() == 0
    assert empty.next(1) == -1
    brokers = BrokerList().add(0).add(1).add(2).add(3)
    assert brokers.size() == 4
    assert [brokers.next(0) for _ in range(6)] == [0, 1, 2, 3, -1, -1]
    assert [brokers.next(1) for _ in range(5)] == [1, 2, 3, 0, -1]


def test_avoid_fenced_replica_if_possible_on_single_rack():
    rack_list = racks((3, None, False), (1, None, True), (0, None, False), (4, None, False), (2, None, False))
    assert rack_list.num_total_brokers == 5
    assert rack_list.num_unfenced_brokers == 4
    assert rack_list.rack_names == [None]
    for bad in (0, -1):
        with pytest.raises(InvalidReplicationFactorException):
            rack_list.place(bad)
    assert [rack_list.place(4) for _ in range(5)] == [
        [3, 4, 0, 2],
        [4, 0, 2, 3],
        [0, 2, 3, 4],
        [2, 3, 4, 0],
        [0, 4, 3, 2],
    ]


def test_multi_partition_topic_placement_on_single_unfenced_broker():
    assert place(3, 1, (0, None, False), (1, None, True)) == [[0], [0], [0]]


def test_placement_on_fenced_replica_on_single_rack():
    rack_list = racks((3, None, False), (1, None, True), (2, None, False))
    assert rack_list.num_total_brokers == 3
    assert rack_list.num_unfenced_brokers == 2
    assert rack_list.rack_names == [None]
    assert [rack_list.place(3) for _ in range(4)] == [[3, 2, 1], [2, 3, 1], [3, 2, 1], [2, 3, 1]]


def test_rack_list_with_multiple_racks():
    rack_list = racks(
        (11, "1", False),
        (10, "1", False),
        (30, "3", False),
        (31, "3", False),
        (21, "2", False),
        (20, "2", True),
    )
    assert rack_list.num_total_brokers == 6
    assert rack_list.num_unfenced_brokers == 5
    assert rack_list.rack_names == ["1", "2", "3"]
    assert [rack_list.place(4) for _ in range(3)] == [[11, 21, 31, 10], [21, 30, 10, 20], [31, 11, 21, 30]]


def test_rack_list_with_invalid_racks():
    rack_list = racks(
        (11, "1", False),
        (10, "1", False),
        (30, "3", True),
        (31, "3", True),
        (20, "2", True),
        (21, "2", True),
        (41, "4", False),
        (40, "4", True),
    )
    assert rack_list.num_total_brokers == 8
    assert rack_list.num_unfenced_brokers == 3
    assert rack_list.rack_names == ["1", "2", "3", "4"]
    assert [rack_list.place(4) for _ in range(3)] == [[41, 11, 21, 30], [10, 20, 31, 41], [41, 21, 30, 11]]


@pytest.mark.parametrize(
    ("replication_factor", "brokers", "message"),
    [
        (1, [(11, "1", True), (10, "1", True)], "All brokers are currently fenced."),
        (
            3,
            [(11, "1", False), (10, "1", False)],
            "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered.",
        ),
        (
            0,
            [(11, "1", False), (10, "1", False)],
            "Invalid replication factor 0: the replication factor must be positive.",
        ),
    ],
)
def test_placer_refusals(replication_factor, brokers, message):
    with pytest.raises(InvalidReplicationFactorException) as refused:
        place(1, replication_factor, *brokers)
    assert str(refused.value) == message


def test_successful_placement():
    assert place(5, 3, (0, None, False), (3, None, False), (2, None, False), (1, None, False)) == [
        [2, 3, 0],
        [3, 0, 1],
        [0, 1, 2],
        [1, 2, 3],
        [1, 0, 2],
    ]


def test_even_distribution():
    placements = place(200, 2, *[(b, None, False) for b in range(4)])
    counts = Counter(tuple(replicas) for replicas in placements)
    assert counts == {
        (0, 1): 14,
        (0, 2): 22,
        (0, 3): 14,
        (1, 0): 17,
        (1, 2): 17,
        (1, 3): 16,
        (2, 0): 13,
        (2, 1): 17,
        (2, 3): 20,
        (3, 0): 20,
        (3, 1): 19,
        (3, 2): 11,
    }


def test_rack_list_all_brokers_fenced():
    rack_list = racks((0, None, True), (1, None, True), (2, None, True))
    assert rack_list.num_total_brokers == 3
    assert rack_list.num_unfenced_brokers == 0
    assert rack_list.rack_names == [None]
    with pytest.raises(InvalidReplicationFactorException, match=r"^All brokers are currently fenced\.$"):
        rack_list.place(3)


def test_rack_list_not_enough_brokers():
    rack_list = racks((11, "1", False), (10, "1", False))
    with pytest.raises(InvalidReplicationFactorException) as refused:
        rack_list.place(3)
    assert str(refused.value) == (
        "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered."
    )


def test_rack_list_non_positive_replication_factor():
    rack_list = racks((11, "1", False), (10, "1", False))
    with pytest.raises(InvalidReplicationFactorException) as refused:
        rack_list.place(-1)
    assert str(refused.value) == "Invalid replication factor -1: the replication factor must be positive."


def test_every_partition_spans_every_rack_and_leaders_spread():
    """Whatever the random start: 6 brokers on 3 racks, RF 3, every partition on all three racks, and
    leaderships even over the unfenced brokers."""
    brokers = [UsableBroker(b, f"r{b % 3}", False) for b in range(6)]
    for seed in range(20):
        placements = StripedReplicaPlacer(random.Random(seed)).place(PlacementSpec(0, 12, 3), brokers)
        for replicas in placements:
            assert sorted(f"r{b % 3}" for b in replicas) == ["r0", "r1", "r2"]
        assert Counter(replicas[0] for replicas in placements) == {b: 2 for b in range(6)}


# --- through the controller ------------------------------------------------------------------------


LISTENER = Listener("PLAINTEXT", "127.0.0.1", 9092)


@pytest.fixture
def controller(tmp_path: Path):
    controller = SyncController(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    yield controller
    controller.close()


def register(controller, brokers: dict[int, str | None], fenced: frozenset[int] = frozenset()) -> None:
    for broker_id, rack in brokers.items():
        controller.register_broker(LISTENER, broker_id=broker_id, rack=rack, fenced=broker_id in fenced)


def test_create_topics_places_one_replica_per_rack(controller):
    register(controller, {1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: "r3"})
    [result] = controller.create_topics([NewTopic("t", 12, 3)])
    assert result.error.code is ErrorCode.none
    partitions = controller.image.topic_image("t").partitions
    rack = {b: controller.image.broker(b).rack for b in range(1, 7)}
    for p in partitions.values():
        assert sorted(rack[b] for b in p.replicas) == ["r1", "r2", "r3"]
        assert p.leader == p.replicas[0]
        assert p.isr == p.replicas
    assert Counter(p.leader for p in partitions.values()) == {b: 2 for b in range(1, 7)}


def test_create_partitions_places_one_replica_per_rack_and_fenced_last(controller):
    register(controller, {1: "r1", 2: "r2", 3: "r3", 4: "r3"}, fenced=frozenset({4}))
    [result] = controller.create_topics([NewTopic("t", 1, 3)])
    assert result.error.code is ErrorCode.none
    assert controller.create_partitions("t", 7).code is ErrorCode.none
    partitions = controller.image.topic_image("t").partitions
    assert len(partitions) == 7
    for p in partitions.values():
        # three unfenced brokers, one per rack, are enough: the fenced one is never needed
        assert sorted(p.replicas) == [1, 2, 3]
        assert p.leader != 4


def test_placement_refusals_keep_kafkas_messages(controller):
    register(controller, {2: "r1", 3: "r2"}, fenced=frozenset({2, 3}))
    [result] = controller.create_topics([NewTopic("t", 1, 1)])
    assert result.error.code is ErrorCode.invalid_replication_factor
    assert (
        result.error.message
        == "Unable to replicate the partition 1 time(s): All brokers are currently fenced."
    )


def test_create_partitions_refusal_is_the_placers_sentence(controller):
    register(controller, {2: "r1", 3: "r2"})
    [result] = controller.create_topics([NewTopic("t", 1, 2)])
    assert result.error.code is ErrorCode.none
    controller.unregister_broker(3)
    refused = controller.create_partitions("t", 2)
    assert refused.code is ErrorCode.invalid_replication_factor
    assert refused.message == (
        "The target replication factor of 2 cannot be reached because only 1 broker(s) are registered."
    )
