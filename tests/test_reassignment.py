"""Partition reassignment (KIP-455): AlterPartitionReassignments and ListPartitionReassignments.

The controller tests drive the real QuorumController over a real Raft client and metadata log
(metadata_harness.SyncController), as tests/test_elections.py does. The cluster tests run three real
`kcli` nodes and move partitions under a running confluent-kafka producer, sending the admin requests
with kcli's own client.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kraft_cluster import SESSION, LocalKraftCluster, create_topic, partition_batches, wait_for
from metadata_harness import SyncController, close_controllers  # noqa: F401 (an autouse fixture)
from test_elections import alter_request, create, heartbeat, open_cluster, partition_answer, state

from formats.internal import decode_metadata_record, encode_metadata_record
from formats.records import RecordSpec, build_batch
from kcli.broker.log import Log, LogConfig
from kcli.broker.metadata.image import NO_LEADER, ClusterMetadataImage, PartitionRegistration, fold
from kcli.broker.metadata.image_writer import image_records
from kcli.broker.replication.partition import Partition, PartitionError
from kcli.broker.replication.purgatory import Purgatory
from kcli.client import KafkaClient
from kcli.cluster import Cluster
from kcli.config import BrokerConfig
from kcli.protocol.messages import nested_type, request_type

ALTER = 45
LIST = 46
T0 = 1_700_000_000_000


def batch(n: int) -> bytes:
    return build_batch([RecordSpec(T0, b"k", b"v") for _ in range(n)])


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


def test_a_reassignment_round_trips_through_records_and_a_snapshot(tmp_path):
    """PartitionChangeRecord's and PartitionRecord's adding and removing replicas, encoded as the
    metadata log holds them, fold back to the same registration (a snapshot writes PartitionRecords)."""
    controller, epochs = open_cluster(tmp_path)
    create(controller, "t", (1, 2))
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [2, 3]}))
    image = controller.image
    written = [
        decode_metadata_record(encode_metadata_record(name, version, data))
        for name, version, data in image_records(image)
    ]
    again = fold(
        ClusterMetadataImage.empty(image.cluster_id, image.controller_id, image.listener_name), written
    )
    assert again.partition("t", 0) == image.partition("t", 0)
    moving = again.partition("t", 0)
    assert (moving.adding_replicas, moving.removing_replicas) == ((3,), (1,))
    logged = [
        record
        for batch in controller.metadata_log.batches()
        for record, _ in batch.records
        if record.name == "PartitionChangeRecord"
    ]
    assert (tuple(logged[-1].data["addingReplicas"]), tuple(logged[-1].data["removingReplicas"])) == (
        (3,),
        (1,),
    )


def test_replacing_an_ongoing_reassignment_starts_from_the_transitional_replicas(tmp_path):
    controller, epochs = open_cluster(tmp_path, brokers=(1, 2, 3, 4))
    create(controller, "t", (1, 2))
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [3, 4]}))
    controller.alter_partition_reassignments(alter_reassignments({("t", 0): [1, 3]}))
    p = state(controller, "t")
    # current = [3, 4, 1, 2], so nothing is added and 2 and 4 are removed. As in Kafka, an empty
    # adding list is not written: the old one (3, 4) stays until the reassignment completes.
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((1, 3, 2, 4), (3, 4), (2, 4))


# --- the leader's partition ------------------------------------------------------------------------------


def test_the_leader_treats_an_adding_replica_as_a_follower_that_counts_for_min_isr(tmp_path) -> None:
    """[1] -> [2] on the leader (node 1): replica 2 fetches like any follower and joins the ISR once it
    has the high watermark; meanwhile acks=all needs min(min.insync.replicas, 2 assigned replicas)."""
    log = Log.create(tmp_path / "t-0", LogConfig.from_values({"min.insync.replicas": 2}), uuid.uuid4())
    asked: list[tuple[int, ...]] = []
    partition = Partition(log, 1, Purgatory(), alter_isr=lambda p, change: asked.append(change.isr))
    partition.apply_registration(
        PartitionRegistration((1,), (1,), leader=1, leader_epoch=0, partition_epoch=0)
    )
    partition.append_records_to_leader(batch(5), required_acks=-1, now_ms=T0)
    moving = PartitionRegistration(
        (2, 1),
        (1,),
        leader=1,
        leader_epoch=0,
        partition_epoch=1,
        adding_replicas=(2,),
        removing_replicas=(1,),
    )
    partition.apply_registration(moving)
    assert partition.is_reassigning and partition.is_adding_replica(2) and 2 in partition.remote_replicas
    assert partition.effective_min_isr == 2  # the adding replica counts, as in Kafka's effectiveMinIsr
    with pytest.raises(PartitionError) as refused:
        partition.append_records_to_leader(batch(1), required_acks=-1, now_ms=T0)
    assert refused.value.error_code is ErrorCode.not_enough_replicas
    read = partition.read_records(0, 1 << 20, replica_id=2, min_one_batch=True, current_leader_epoch=0)
    assert read.records is not None and asked == []  # behind the high watermark: not in sync yet
    partition.read_records(5, 1 << 20, replica_id=2, min_one_batch=True, current_leader_epoch=0)
    assert asked == [(1, 2)]


# --- a real cluster ------------------------------------------------------------------------------------

CLUSTER_SETTINGS = (
    *SESSION,
    "replica.lag.time.max.ms=3000",
    "replica.fetch.backoff.ms=200",
    "log.segment.delete.delay.ms=0",  # a removed replica's `-delete` dir goes at the next tick
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKraftCluster]:
    """Three combined nodes shared by the module's cluster tests; killed by PID at the end."""
    made = LocalKraftCluster(tmp_path_factory.mktemp("reassign"), 3, CLUSTER_SETTINGS)
    try:
        made.start()
        yield made
    finally:
        made.kill_all()


def send(bootstrap: str, api_key: int, make: Callable[[type], Any]) -> Any:
    """One admin request through kcli's own client, at the version it negotiated with the broker."""

    async def ask() -> Any:
        async with await Cluster.connect(bootstrap, request_timeout=30.0) as found:
            return await found.bootstrap.send(make(found.bootstrap.request_type(api_key)))

    return asyncio.run(ask())


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    """What ApiVersions says of the two reassignment APIs."""

    async def ask() -> dict[int, tuple[int, int]]:
        async with await Cluster.connect(bootstrap, request_timeout=10.0) as found:
            versions = found.bootstrap.broker_versions
        return {key: tuple(versions[key]) for key in (ALTER, LIST) if key in versions}

    return asyncio.run(ask())


def reassign(bootstrap: str, targets: dict[tuple[str, int], list[int] | None]) -> dict:
    def make(cls: type) -> Any:
        return alter_reassignments(targets, version=cls.__version__)

    return answers(send(bootstrap, ALTER, make))


def listed(bootstrap: str, topics: dict[str, list[int]] | None = None) -> dict:
    return ongoing(send(bootstrap, LIST, lambda cls: list_reassignments(topics)))


def assignment(
    bootstrap: str, topic: str, partition: int = 0
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, replicas, isr) as Metadata (kcli's client) shows them through `bootstrap`."""

    async def ask() -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        async with await Cluster.connect(bootstrap, request_timeout=10.0) as found:
            response = await found.metadata_response([topic])
        [answer] = response.topics
        for p in answer.partitions:
            if p.partition_index == partition:
                return p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)
        return -1, (), ()

    return asyncio.run(ask())


def wait_assignment(
    cluster: LocalKraftCluster,
    topic: str,
    what: str,
    check: Callable[..., bool],
    timeout: float = 40.0,
    via: str | None = None,
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, replicas, isr) once `check` holds for them (brokers learn metadata a moment after
    the controller commits it); through `via`, or the live brokers."""

    def ask():
        found = assignment(via or cluster.live_bootstrap(), topic)
        return found if check(*found) else None

    return wait_for(f"{topic}: {what}", ask, timeout, interval=0.2)


def partition_dirs(cluster: LocalKraftCluster, node_id: int, topic: str) -> list[str]:
    """`topic`-0 and its `-delete` renames on node `node_id`'s disk."""
    data = cluster[node_id].node.directory / "data"
    return sorted(p.name for p in data.glob(f"{topic}-0*"))


class Load:
    """An idempotent acks=all confluent-kafka producer writing to partition 0 of some topics from a
    thread until stopped; what was acknowledged, by topic."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
            }
        )
        self.topics = topics
        self.acked: dict[str, dict[int, bytes]] = {t: {} for t in topics}
        self.failed: list[tuple[str, bytes, str]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked[msg.topic()][msg.offset()] = msg.value()
        else:
            self.failed.append((msg.topic(), msg.value(), err.name()))

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while not self._stop.is_set() and time.monotonic() < deadline:
            for topic in self.topics:
                self.producer.produce(
                    topic, value=f"{topic}-{self.sent}".encode(), partition=0, on_delivery=self._done
                )
            self.sent += 1
            self.producer.poll(0.002)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def wait_acked(self, count: int, timeout: float = 30.0) -> None:
        wait_for(
            f"{count} records acknowledged on each of {self.topics}",
            lambda: all(len(self.acked[t]) >= count for t in self.topics),
            timeout,
        )

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(60) == 0


def read_partition(
    bootstrap: str, topic: str, count: int, timeout: float = 30.0, start: int = 0
) -> dict[int, bytes]:
    """At least `count` records of `topic`-0 from offset `start` (stops at the deadline), by offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False}
    )
    got: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got[message.offset()] = message.value()
    finally:
        consumer.close()
    return got


def test_moving_partitions_under_a_producer_loses_and_duplicates_nothing(cluster: LocalKraftCluster) -> None:
    """RF 1 [1] -> [2] and RF 2 [1, 2] -> [3, 2], both moving the leadership, while an idempotent
    acks=all producer writes to both; then every acknowledged record is read back exactly once, the
    new replicas hold the same bytes, and broker 1's copies are gone from its disk."""
    create_topic(cluster.bootstrap, "move1", [[1]])
    create_topic(cluster.bootstrap, "move2", [[1, 2]], **{"min.insync.replicas": "2"})
    wait_assignment(cluster, "move2", "the ISR whole", lambda leader, replicas, isr: sorted(isr) == [1, 2])
    with Load(cluster.bootstrap, ["move1", "move2"]) as load:
        load.wait_acked(1000)  # some data to copy
        assert reassign(cluster[3].bootstrap, {("move1", 0): [2], ("move2", 0): [3, 2]}) == {
            ("move1", 0): OK,
            ("move2", 0): OK,
        }
        wait_assignment(cluster, "move1", "moved to [2]", lambda leader, r, isr: (leader, r) == (2, (2,)))
        wait_assignment(
            cluster, "move2", "moved to [3, 2]", lambda leader, r, isr: (leader, r) == (3, (3, 2))
        )
        assert listed(cluster.bootstrap) == {}
        done = {t: len(load.acked[t]) for t in load.topics}
        load.wait_acked(max(done.values()) + 300)  # the new leaders take writes
    assert not load.failed, load.failed[:5]
    for topic, acked in load.acked.items():
        end = max(acked) + 1
        read = read_partition(cluster.bootstrap, topic, end)
        values = list(read.values())
        assert len(values) == len(set(values)), f"{topic}: a record was written twice"
        assert all(read.get(offset) == value for offset, value in acked.items()), (
            f"{topic}: an acked record is lost"
        )
        assert sorted(read) == list(range(end)), f"{topic}: offsets are not dense"

    def identical() -> bool:
        copies = [partition_batches(cluster, node, "move2") for node in (3, 2)]
        return bool(copies[0]) and copies[0] == copies[1]

    wait_for("move2's replicas on 3 and 2 byte for byte the same", identical, 30, interval=0.25)
    for topic in ("move1", "move2"):
        wait_for(f"{topic}-0 gone from broker 1", lambda t=topic: not partition_dirs(cluster, 1, t), 15)
        # as Kafka deletes a stray replica: renamed <topic>-<partition>.<uuid>-delete, then removed
        assert re.search(rf"deleted log directory \S*/{topic}-0\.[0-9a-f]{{32}}-delete\n", cluster[1].log())


def produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=f"{topic}-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def delete_records_before(bootstrap: str, topic: str, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": bootstrap})
    [future] = client.delete_records([TopicPartition(topic, 0, offset)], request_timeout=30).values()
    assert future.result(30).low_watermark == offset


def test_a_held_move_is_listed_until_it_completes_and_a_cancel_reverts(cluster: LocalKraftCluster) -> None:
    """The new replica's broker is stopped (SIGSTOP), so its moves cannot complete: both are listed,
    with Metadata showing the transitional replicas; one is cancelled and goes back at once; after
    SIGCONT the other completes and the new replica starts at the leader's log start."""
    controller = cluster.status().leader_id
    stalled = next(n for n in (1, 2, 3) if n != controller)  # the controller must keep answering
    source = next(n for n in (1, 2, 3) if n != stalled)
    via = cluster[source].bootstrap
    create_topic(via, "held", [[source]])
    create_topic(via, "cancelled", [[source]])
    produce(via, "held", 200)
    delete_records_before(via, "held", 50)  # the new replica fetches from log start 50
    process = cluster[stalled].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        targets = {("held", 0): [stalled], ("cancelled", 0): [stalled]}
        assert reassign(via, targets) == {("held", 0): OK, ("cancelled", 0): OK}
        moving = ((stalled, source), (stalled,), (source,))
        assert listed(via) == {("held", 0): moving, ("cancelled", 0): moving}
        assert listed(via, {"held": [0, 3], "nothing": [0]}) == {("held", 0): moving}
        # Metadata lists every replica of the transitional set, as Kafka does
        wait_assignment(
            cluster, "held", "in transition", lambda *s: s == (source, (stalled, source), (source,)), via=via
        )
        assert reassign(via, {("cancelled", 0): None}) == {("cancelled", 0): OK}
        assert listed(via) == {("held", 0): moving}
        wait_assignment(
            cluster, "cancelled", "reverted", lambda *s: s == (source, (source,), (source,)), via=via
        )
    finally:
        process.send_signal(signal.SIGCONT)
    wait_assignment(
        cluster, "held", "moved", lambda leader, r, isr: (leader, r, isr) == (stalled, (stalled,), (stalled,))
    )
    assert listed(via) == {}
    read = read_partition(cluster.bootstrap, "held", 150, start=50)
    assert read == {i: f"held-{i}".encode() for i in range(50, 200)}
    wait_for("held-0 gone from its old broker", lambda: not partition_dirs(cluster, source, "held"), 15)
    wait_for(
        "no cancelled-0 left on the stalled broker",
        lambda: not partition_dirs(cluster, stalled, "cancelled"),
        15,
    )


def test_bad_requests_get_per_partition_errors_through_any_broker(cluster: LocalKraftCluster) -> None:
    """Forwarded from every broker to the active controller (KIP-590), answered per partition."""
    create_topic(cluster.bootstrap, "bad", [[1, 2]])
    expected = {
        ("nope", 0): (ErrorCode.unknown_topic_or_partition, "Unable to find a topic named nope."),
        ("bad", 4): (ErrorCode.unknown_topic_or_partition, "Unable to find partition bad:4."),
        ("bad", 0): (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes the broker 2 more than once.",
        ),
    }
    for node in (1, 2, 3):
        via = cluster[node].bootstrap
        assert advertised(via) == {ALTER: (0, 1), LIST: (0, 0)}
        assert reassign(via, {("nope", 0): [1], ("bad", 4): [1], ("bad", 0): [2, 2]}) == expected
        assert reassign(via, {("bad", 0): []}) == {
            ("bad", 0): (
                ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.",
            )
        }
        assert reassign(via, {("bad", 0): [1, 42]}) == {
            ("bad", 0): (
                ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes broker 42, but no such broker is registered.",
            )
        }
        assert reassign(via, {("bad", 0): None}) == {
            ("bad", 0): (ErrorCode.no_reassignment_in_progress, None)
        }
        assert listed(via, {"bad": [0], "nope": [0]}) == {}
    wait_assignment(cluster, "bad", "as created", lambda leader, replicas, isr: replicas == (1, 2))


def test_a_standby_controller_answers_not_controller_in_each_requests_own_shape(
    cluster: LocalKraftCluster,
) -> None:
    """On a controller listener a standby does not forward: its error fills each request's own error
    shape (Kafka's getErrorResponse): every named partition and the top level of an alter; the top
    level of a list, with each asked partition named and no replicas."""
    active = cluster.status().leader_id
    standby = next(n for n in (1, 2, 3) if n != active)
    address = f"127.0.0.1:{cluster[standby].node.controller_port}"

    async def ask(request: Any) -> Any:
        client = await KafkaClient.connect(address, request_timeout=10.0)
        try:
            return await client.send(request)
        finally:
            await client.close()

    altered = asyncio.run(ask(alter_reassignments({("t", 0): [1], ("t", 1): None, ("u", 0): [2]})))
    assert altered.error_code is ErrorCode.not_controller and altered.error_message
    assert {
        (t.name, p.partition_index): (p.error_code, p.error_message == altered.error_message)
        for t in altered.responses
        for p in t.partitions
    } == {key: (ErrorCode.not_controller, True) for key in (("t", 0), ("t", 1), ("u", 0))}
    found = asyncio.run(ask(list_reassignments({"t": [0, 1]})))
    assert found.error_code is ErrorCode.not_controller
    assert [(t.name, [(p.partition_index, p.replicas) for p in t.partitions]) for t in found.topics] == [
        ("t", [(0, ()), (1, ())])
    ]


def test_a_broker_killed_during_a_move_leaves_the_partition_led(cluster: LocalKraftCluster) -> None:
    """[killed, controller] -> [controller, new]: the new replica's broker is paused while the move
    starts, and the leader (a replica being removed) is killed -9 before it could copy anything. The
    new replica cannot fetch from a dead leader, so the move waits; once the killed broker's session
    expires the other original replica leads, the new one catches up from it and the move completes.
    The killed broker, restarted, sets its stray copy aside (`-stray`). (The pause is short: with one node dead and
    one paused, the metadata quorum would have no majority.)"""
    controller = cluster.status().leader_id
    killed, new = (n for n in (1, 2, 3) if n != controller)
    via = cluster[controller].bootstrap
    create_topic(via, "killed", [[killed, controller]])
    wait_assignment(
        cluster, "killed", "the ISR whole", lambda leader, r, isr: leader == killed and len(isr) == 2, via=via
    )
    produce(via, "killed", 100)
    process = cluster[new].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        assert reassign(via, {("killed", 0): [controller, new]}) == {("killed", 0): OK}
        cluster[killed].kill()
        assert listed(via) == {("killed", 0): ((controller, new, killed), (new,), (killed,))}
    finally:
        process.send_signal(signal.SIGCONT)
    # the partition is led again once the killed broker is fenced, whether or not the move is done
    wait_assignment(cluster, "killed", "a live leader", lambda leader, r, isr: leader == controller, via=via)
    wait_assignment(
        cluster,
        "killed",
        "moved",
        lambda leader, r, isr: (
            (leader, r, sorted(isr)) == (controller, (controller, new), sorted((controller, new)))
        ),
        via=via,
    )
    assert listed(via) == {}
    read = read_partition(cluster[new].bootstrap, "killed", 100)
    assert read == {i: f"killed-{i}".encode() for i in range(100)}
    cluster[killed].start()
    cluster[killed].wait_ready()
    wait_for(  # Kafka 3.7+: a log the metadata no longer places here is renamed -stray, never deleted
        "the killed broker's stray killed-0 set aside",
        lambda: (
            [re.sub("[0-9a-f]{32}", "U", n) for n in partition_dirs(cluster, killed, "killed")]
            == ["killed-0.U-stray"]
        ),
        30,
    )

    def all_led() -> bool:
        async def ask() -> bool:
            async with await Cluster.connect(cluster.bootstrap, request_timeout=10.0) as found:
                response = await found.metadata_response(None)
            return all(p.leader_id >= 0 for t in response.topics for p in t.partitions)

        return asyncio.run(ask())

    wait_for("every partition of the cluster led", all_led, 30, interval=0.25)
