"""Eligible leader replicas (KIP-966 part 1): the builder's rules against the cases of Kafka's
PartitionChangeBuilderTest, a real QuorumController (metadata_harness.SyncController) fencing brokers one
by one below min ISR, re-registrations after clean and unclean shutdowns, min ISR changes, and the
feature levels `kcli storage format` starts a cluster with.

All in process and cheap: no broker process is started.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from metadata_harness import SyncController, close_controllers  # noqa: F401 (an autouse fixture)

from formats.internal import decode_metadata_record, encode_metadata_record
from formats.kraft_snapshot import read_snapshot
from kcli.broker.metadata.controller import BrokerHeartbeat, ConfigOp, NewTopic, OpType
from kcli.broker.metadata.controller.partition_change_builder import (
    RECOVERING,
    Election,
    JavaHashSet,
    PartitionChangeBuilder,
)
from kcli.broker.metadata.image import NO_LEADER, PartitionRegistration
from kcli.broker.metadata.image_writer import image_records
from kcli.config import BrokerConfig, Listener
from kcli.features import (
    ELIGIBLE_LEADER_REPLICAS_VERSION,
    MV_3_7_IV2,
    MV_3_9_IV0,
    MV_4_0_IV1,
    FeatureError,
    format_feature_levels,
    metadata_version_from_string,
    parse_feature_argument,
)
from kcli.features import (
    GROUP_VERSION as GROUP,
)
from kcli.features import (
    TRANSACTION_VERSION as TXN,
)
from kcli.storage import read_bootstrap_metadata

TOPIC_ID = uuid.UUID("15bb6b75-c7e2-4822-a0d8-d84c94c86aee")  # FbrrdcfiR-KC2CPSTHaJrg
DIRS = tuple(uuid.UUID(int=1000 + i) for i in range(4))

# PartitionChangeRecord version -> the metadata.version Kafka's test builds it at (and ELR on at v2).
MV_FOR_VERSION = {0: 15, 1: MV_3_7_IV2, 2: MV_4_0_IV1}


def partition(isr, leader, *, elr=(), last_known_elr=(), replicas=(1, 2, 3, 4)) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=tuple(replicas),
        isr=tuple(isr),
        leader=leader,
        leader_epoch=100,
        partition_epoch=200,
        directories=DIRS[: len(replicas)],
        elr=tuple(elr),
        last_known_elr=tuple(last_known_elr),
    )


def builder(
    p, acceptable, version=2, *, min_isr=3, last_known_leader=False, elr=None
) -> PartitionChangeBuilder:
    return (
        PartitionChangeBuilder(
            p,
            TOPIC_ID,
            0,
            acceptable,
            MV_FOR_VERSION[version],
            min_isr=min_isr,
            eligible_leader_replicas_enabled=version >= 2 if elr is None else elr,
        )
        .set_election(Election.PREFERRED)
        .set_use_last_known_leader_in_balanced_recovery(last_known_leader)
    )


def fields(record) -> dict:
    """The record's changes, as Kafka's expected records set them (ids and the version checked apart)."""
    name, version, data = record
    assert name == "PartitionChangeRecord"
    assert data.pop("topicId") == TOPIC_ID and data.pop("partitionId") == 0
    return {"version": version, **data}


# --- PartitionChangeBuilder: PartitionChangeBuilderTest's ELR cases -----------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_isr_shrink_below_min_isr(version):
    p = partition([1, 2, 3, 4], 1)
    record = builder(p, lambda r: r != 3, version).set_target_isr([1, 2]).build()
    expected = {"version": version, "isr": [1, 2]}
    if version >= 2:
        expected["eligibleLeaderReplicas"] = [3, 4]
    assert fields(record) == expected
    after = p.merge(record[2])
    assert (after.elr, after.last_known_elr) == (((3, 4), ()) if version >= 2 else ((), ()))


@pytest.mark.parametrize("version", [1, 2])
def test_isr_expand_above_min_isr_clears_both_elr_lists(version):
    p = partition([1, 2], 1, elr=[3], last_known_elr=[4])
    record = builder(p, lambda r: r != 3, version).set_target_isr([1, 2, 3]).build()
    assert fields(record) == {
        "version": version,
        "isr": [1, 2, 3],
        "eligibleLeaderReplicas": [],
        "lastKnownElr": [],
    }
    after = p.merge(record[2])
    assert (after.elr, after.last_known_elr) == ((), ())


def test_isr_add_new_member_not_in_elr_keeps_the_elr():
    p = partition([1], 1, elr=[3], last_known_elr=[2])
    record = builder(p, lambda r: r != 3).set_target_isr([1, 4]).build()
    assert fields(record) == {"version": 2, "isr": [1, 4]}
    after = p.merge(record[2])
    assert (after.elr, after.last_known_elr) == ((3,), (2,))


def test_unclean_shutdown_replicas_leave_the_elr_for_the_last_known_elr():
    p = partition([1], 1, elr=[2, 3])
    record = builder(p, lambda r: r != 3).set_unclean_shutdown_replicas([3]).build()
    assert fields(record) == {"version": 2, "eligibleLeaderReplicas": [2], "lastKnownElr": [3]}


@pytest.mark.parametrize("last_known_leader", [True, False])
def test_an_elr_member_is_elected_when_the_isr_empties(last_known_leader):
    p = partition([1], 1, elr=[3], last_known_elr=[] if last_known_leader else [2])
    record = builder(p, lambda r: r != 1, last_known_leader=last_known_leader).set_target_isr([]).build()
    assert fields(record) == {"version": 2, "isr": [3], "eligibleLeaderReplicas": [1], "leader": 3}
    after = p.merge(record[2])
    assert (after.isr, after.elr, after.leader, after.leader_epoch) == ((3,), (1,), 3, 101)
    assert after.last_known_elr == (() if last_known_leader else (2,))


@pytest.mark.parametrize("last_known_leader", [True, False])
def test_the_isr_can_shrink_to_zero(last_known_leader):
    p = partition([1, 2, 3, 4], 1)
    record = builder(p, lambda r: False, last_known_leader=last_known_leader).set_target_isr([]).build()
    expected = {"version": 2, "isr": [], "leader": NO_LEADER, "eligibleLeaderReplicas": [1, 2, 3, 4]}
    if last_known_leader:
        expected["lastKnownElr"] = [1]
    assert fields(record) == expected
    after = p.merge(record[2])
    assert (after.isr, after.elr) == ((), (1, 2, 3, 4))
    assert after.last_known_elr == ((1,) if last_known_leader else ())
    if last_known_leader:
        # an unclean shutdown of 2 later: the last known leader is not touched
        again = (
            builder(after, lambda r: False, last_known_leader=True).set_unclean_shutdown_replicas([2]).build()
        )
        assert "lastKnownElr" not in fields(again)


def test_the_last_known_leader_is_elected_when_isr_and_elr_are_empty():
    p = partition([], NO_LEADER, last_known_elr=[1])
    record = builder(p, lambda r: True, last_known_leader=True).set_target_isr([]).build()
    assert fields(record) == {
        "version": 2,
        "isr": [1],
        "leader": 1,
        "leaderRecoveryState": RECOVERING,
        "lastKnownElr": [],
    }
    after = p.merge(record[2])
    assert (after.isr, after.elr, after.last_known_elr, after.leader_recovery_state) == (
        (1,),
        (),
        (),
        RECOVERING,
    )


def test_no_last_known_leader_election_while_the_elr_has_members():
    p = partition([], NO_LEADER, elr=[3], last_known_elr=[1])
    assert builder(p, lambda r: r != 3, last_known_leader=True).set_target_isr([]).build() is None


def test_a_fenced_last_known_leader_is_not_elected():
    """Kafka 4.1 (KAFKA-19522): before it, canElectLastKnownLeader elected it even when fenced."""
    p = partition([], NO_LEADER, last_known_elr=[1])
    assert builder(p, lambda r: r != 1, last_known_leader=True).build() is None


@pytest.mark.parametrize("version", [1, 2])
def test_an_unclean_election_clears_the_elr(version):
    """testUncleanLeaderElection's offline partition: ELR 3 is not acceptable, 1 is elected uncleanly."""
    p = partition([], NO_LEADER, elr=[3], last_known_elr=[2], replicas=(2, 1, 3))
    if version < 2:
        p = partition([3], NO_LEADER, replicas=(2, 1, 3))
    for target_isr in (None, [2]):
        b = builder(p, lambda r: r == 1, version, min_isr=2, last_known_leader=True, elr=version >= 2)
        b.set_election(Election.UNCLEAN)
        if target_isr is not None:
            b.set_target_isr(target_isr)
        expected = {"version": version, "isr": [1], "leader": 1, "leaderRecoveryState": RECOVERING}
        if version >= 2:
            expected |= {"eligibleLeaderReplicas": [], "lastKnownElr": []}
        assert fields(b.build()) == expected


def test_without_elr_the_last_isr_member_stays():
    p = partition([2], 2)
    record = builder(p, lambda r: False, 2, elr=False).set_target_isr([]).build()
    assert fields(record) == {"version": 2, "leader": NO_LEADER}


def test_elr_lists_come_out_in_java_hash_set_order():
    assert list(JavaHashSet([3, 1, 2])) == [1, 2, 3]
    assert list(JavaHashSet([17, 1])) == [17, 1]  # one bucket (17 & 15 == 1): insertion order
    assert list(JavaHashSet([100, 5, 20])) == [100, 20, 5]  # buckets 4, 5, 4
    grown = JavaHashSet([])
    for broker in [40, 8, 24, *range(100, 110)]:  # 13 > 12 entries: 32 buckets
        grown.add(broker)
    # 40, 8 and 104 share bucket 8 of 32, in insertion order
    assert list(grown) == [100, 101, 102, 103, 40, 8, 104, 105, 106, 107, 108, 109, 24]


# --- the controller: fencing below min ISR, the ELR leader, re-registration ----------------------------

BROKERS = (1, 2, 3)


def elr_bootstrap(level: int = 1) -> list:
    return [
        ("FeatureLevelRecord", 0, {"name": "metadata.version", "featureLevel": 27}),
        ("FeatureLevelRecord", 0, {"name": ELIGIBLE_LEADER_REPLICAS_VERSION, "featureLevel": level}),
    ]


def open_cluster(tmp_path: Path, bootstrap=None, **settings: str) -> tuple[SyncController, dict[int, int]]:
    config = BrokerConfig({"log.dirs": str(tmp_path / "data"), "min.insync.replicas": "2", **settings})
    controller = SyncController(config, bootstrap_records=bootstrap or elr_bootstrap())
    epochs = {broker: register(controller, broker) for broker in BROKERS}
    return controller, epochs


def register(
    controller: SyncController, broker: int, previous_epoch: int = -1, *, fenced: bool = False
) -> int:
    """A new incarnation of `broker`; the first ones unfenced at once, a restart fenced as over the wire."""
    return controller.register_broker(
        Listener("PLAINTEXT", "127.0.0.1", 9000 + broker),
        broker_id=broker,
        incarnation_id=uuid.uuid4(),
        log_dirs=[uuid.UUID(int=1000 + broker)],
        fenced=fenced,
        previous_broker_epoch=previous_epoch,
    )


def heartbeat(controller: SyncController, epochs: dict[int, int], broker: int, **flags: bool):
    offset = controller.controller.raft_client.log_end_offset
    return controller.broker_heartbeat(BrokerHeartbeat(broker, epochs[broker], offset, **flags))


def state(controller: SyncController, topic: str = "t") -> PartitionRegistration:
    return controller.image.partition(topic, 0)


def batch_names(controller: SyncController) -> list[list[str]]:
    batches = [[record.name for record, _ in batch.records] for batch in controller.metadata_log.batches()]
    return [names for names in batches if names]  # control batches (LeaderChange) have no metadata record


def test_bootstrap_with_elr_writes_the_cluster_min_isr_and_v2_records(tmp_path):
    controller, _ = open_cluster(tmp_path)
    assert batch_names(controller)[0] == ["FeatureLevelRecord", "FeatureLevelRecord", "ConfigRecord"]
    assert controller.image.elr_enabled
    assert controller.image.broker_config("") == {"min.insync.replicas": "2"}
    assert dict(controller.image.broker(1).features) == {
        "metadata.version": (1, 27),
        ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1),
        "transaction.version": (0, 2),
        GROUP: (0, 1),
    }
    controller.create_topics([NewTopic("t", assignments=[(0, (1, 2, 3))])])
    [(record, _)] = [
        r for r in list(controller.metadata_log.batches())[-1].records if r[0].name == "PartitionRecord"
    ]
    assert record.version == 2 and record.data["eligibleLeaderReplicas"] is None


def test_brokers_fenced_one_by_one_below_min_isr_then_the_elr_member_leads(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    controller.create_topics([NewTopic("t", assignments=[(0, (1, 2, 3))])])
    heartbeat(controller, epochs, 1, want_fence=True)  # the leader: ISR 2,3 is still at min ISR
    p = state(controller)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, (2, 3), (), ())
    heartbeat(controller, epochs, 2, want_fence=True)  # below min ISR: 2 is eligible, 1 is not
    p = state(controller)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (3, (3,), (2,), ())
    heartbeat(controller, epochs, 3, want_fence=True)  # the ISR empties: no dead member stays in it
    p = state(controller)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (), (2, 3), (3,))
    changes = [
        r for r, _ in list(controller.metadata_log.batches())[-1].records if r.name == "PartitionChangeRecord"
    ]
    assert [c.version for c in changes] == [2]
    epoch_before = p.leader_epoch
    heartbeat(controller, epochs, 1)  # not eligible: unfenced, leads nothing
    assert state(controller).leader == NO_LEADER
    heartbeat(controller, epochs, 2)  # an ELR member comes back: it leads, alone in the ISR
    p = state(controller)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, (2,), (3,), ())
    assert p.leader_epoch == epoch_before + 1 and p.leader_recovery_state == 0


def test_an_unclean_restart_leaves_the_elr_and_a_clean_one_keeps_it(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    controller.create_topics([NewTopic("t", assignments=[(0, (1, 2, 3))])])
    for broker in (1, 2, 3):
        heartbeat(controller, epochs, broker, want_fence=True)
    assert state(controller).elr == (2, 3)
    # broker 3 comes back with the epoch its clean-shutdown files recorded: nothing changes
    epochs[3] = register(controller, 3, previous_epoch=epochs[3], fenced=True)
    assert batch_names(controller)[-1] == ["RegisterBrokerRecord"]
    assert state(controller).elr == (2, 3)
    # broker 2 comes back without one (killed): it leaves the ELR before it registers
    epochs[2] = register(controller, 2, previous_epoch=-1, fenced=True)
    assert batch_names(controller)[-1] == ["PartitionChangeRecord", "RegisterBrokerRecord"]
    p = state(controller)
    assert (p.isr, p.elr, p.leader) == ((), (3,), NO_LEADER)
    heartbeat(controller, epochs, 2)
    assert state(controller).leader == NO_LEADER  # no longer eligible
    heartbeat(controller, epochs, 3)
    p = state(controller)
    assert (p.leader, p.isr, p.elr) == (3, (3,), ())


def test_an_unclean_restart_of_a_live_leader_moves_the_leadership(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    controller.create_topics([NewTopic("t", assignments=[(0, (1, 2, 3))])])
    controller.controller.cluster_control.last_contact.pop(
        1
    )  # killed: its session has lapsed, not yet fenced
    epochs[1] = register(controller, 1, previous_epoch=-1, fenced=True)
    assert batch_names(controller)[-1] == [
        "PartitionChangeRecord",
        "BrokerRegistrationChangeRecord",
        "RegisterBrokerRecord",
    ]
    p = state(controller)
    assert (p.leader, p.isr, p.elr) == (2, (2, 3), ())


def test_without_the_feature_a_4_x_cluster_keeps_no_elr(tmp_path):
    controller, epochs = open_cluster(tmp_path, bootstrap=elr_bootstrap(0)[:1])
    assert not controller.image.elr_enabled and "min.insync.replicas" not in controller.image.broker_config(
        ""
    )
    controller.create_topics([NewTopic("t", assignments=[(0, (1, 2, 3))])])
    for broker in (1, 2, 3):
        heartbeat(controller, epochs, broker, want_fence=True)
    p = state(controller)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (3,), (), ())
    epochs[3] = register(controller, 3, previous_epoch=-1, fenced=True)
    assert batch_names(controller)[-1] == ["RegisterBrokerRecord"]


def test_the_topic_min_isr_decides_and_a_change_clears_the_elr(tmp_path):
    controller, epochs = open_cluster(tmp_path)
    controller.create_topics(
        [NewTopic("t", assignments=[(0, (1, 2, 3))], configs={"min.insync.replicas": "3"})]
    )
    assert batch_names(controller)[-1] == ["TopicRecord", "ConfigRecord", "ClearElrRecord", "PartitionRecord"]
    heartbeat(controller, epochs, 1, want_fence=True)  # ISR 2,3 is below the topic's min ISR of 3
    p = state(controller)
    assert (p.isr, p.elr) == ((2, 3), (1,))
    partition_epoch = p.partition_epoch
    controller.alter_topic_configs("t", [ConfigOp("min.insync.replicas", OpType.SET, "2")])
    assert batch_names(controller)[-1] == ["ConfigRecord", "ClearElrRecord"]
    p = state(controller)
    assert (p.isr, p.elr, p.last_known_elr, p.partition_epoch) == ((2, 3), (), (), partition_epoch + 1)
    # a broker-level min ISR is refused while ELR is on; the cluster-level one cannot be removed
    error = controller.alter_broker_configs("1", [ConfigOp("min.insync.replicas", OpType.SET, "1")])
    assert error.message == "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
    error = controller.alter_broker_configs("", [ConfigOp("min.insync.replicas", OpType.DELETE)])
    assert error.message == "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."
    assert not controller.alter_broker_configs(
        "", [ConfigOp("min.insync.replicas", OpType.SET, "1")]
    ).is_failure
    assert batch_names(controller)[-1] == ["ConfigRecord", "ClearElrRecord"]


def test_a_snapshot_of_an_elr_image_replays_to_the_same_image(tmp_path):
    from kcli.broker.metadata.image import ClusterMetadataImage, fold

    controller, epochs = open_cluster(tmp_path)
    controller.create_topics([NewTopic("t", assignments=[(0, (1, 2, 3))])])
    for broker in (1, 2, 3):
        heartbeat(controller, epochs, broker, want_fence=True)
    image = controller.image
    records = image_records(image)
    [(name, version, data)] = [r for r in records if r[0] == "PartitionRecord"]
    assert (version, data["eligibleLeaderReplicas"], data["lastKnownElr"]) == (2, [2, 3], [3])
    decoded = [decode_metadata_record(encode_metadata_record(*r)) for r in records]
    again = fold(
        ClusterMetadataImage.empty(image.cluster_id, image.controller_id, image.listener_name), decoded
    )
    assert dict(again.topics_by_id[image.topic_id("t")].partitions) == dict(
        image.topics_by_id[image.topic_id("t")].partitions
    )


def test_a_broker_that_does_not_support_the_finalized_elr_level_is_refused(tmp_path):
    from kcli.broker.metadata.controller import ApiException

    controller, _ = open_cluster(tmp_path)
    with pytest.raises(ApiException) as raised:
        controller.register_broker(
            Listener("PLAINTEXT", "127.0.0.1", 9009),
            broker_id=9,
            incarnation_id=uuid.uuid4(),
            log_dirs=[uuid.UUID(int=1009)],
            features=[("metadata.version", 1, 21)],
        )
    assert raised.value.error.message == (
        "Unable to register because the broker does not support finalized version 27 of metadata.version. "
        "The broker wants a version between 1 and 21, inclusive."
    )


# --- formatting ---------------------------------------------------------------------------------------------


def test_feature_levels_as_kafkas_formatter_picks_them():
    # Kafka 4.1's defaults (its latest production metadata.version, 4.1-IV1): ELR, group.version 1
    # (KIP-848, GroupVersion.GV_1's bootstrap level is 4.0-IV0) and transaction.version 2 (KIP-890,
    # from 4.0-IV2); 3.9 has them all at 0
    assert format_feature_levels({}) == (27, {ELIGIBLE_LEADER_REPLICAS_VERSION: 1, GROUP: 1, TXN: 2})
    assert format_feature_levels({}, MV_3_9_IV0) == (
        MV_3_9_IV0,
        {ELIGIBLE_LEADER_REPLICAS_VERSION: 0, GROUP: 0, TXN: 0},
    )
    assert format_feature_levels({}, metadata_version_from_string("4.0")) == (
        25,
        {ELIGIBLE_LEADER_REPLICAS_VERSION: 0, GROUP: 1, TXN: 2},
    )
    # on by default from 4.1-IV0, the bootstrap metadata.version of eligible.leader.replicas.version 1
    assert format_feature_levels({}, metadata_version_from_string("4.1")) == (
        27,
        {ELIGIBLE_LEADER_REPLICAS_VERSION: 1, GROUP: 1, TXN: 2},
    )
    assert format_feature_levels({ELIGIBLE_LEADER_REPLICAS_VERSION: 1}, 23) == (
        23,
        {ELIGIBLE_LEADER_REPLICAS_VERSION: 1, GROUP: 1, TXN: 0},
    )
    assert format_feature_levels({ELIGIBLE_LEADER_REPLICAS_VERSION: 0, GROUP: 0}, 27) == (
        27,
        {ELIGIBLE_LEADER_REPLICAS_VERSION: 0, GROUP: 0, TXN: 2},
    )
    assert format_feature_levels({"metadata.version": 24}) == (
        24,
        {ELIGIBLE_LEADER_REPLICAS_VERSION: 0, GROUP: 1, TXN: 2},
    )
    assert format_feature_levels({GROUP: 1}, MV_3_9_IV0) == (
        MV_3_9_IV0,
        {ELIGIBLE_LEADER_REPLICAS_VERSION: 0, GROUP: 1, TXN: 0},
    )
    assert metadata_version_from_string("4.0-IV1") == 23 and metadata_version_from_string("3.9") == 21
    for requested, release, message in [
        (
            {ELIGIBLE_LEADER_REPLICAS_VERSION: 1},
            MV_3_9_IV0,
            "eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23",
        ),
        (
            {ELIGIBLE_LEADER_REPLICAS_VERSION: 2},
            27,
            "No feature:eligible.leader.replicas.version with feature level 2",
        ),
        (
            {"share.version": 1},
            27,
            "Unsupported feature: share.version. Supported features are: "
            "eligible.leader.replicas.version, group.version, kraft.version, transaction.version",
        ),
        (
            {"metadata.version": 23},
            23,
            "Use --release-version instead of --feature metadata.version=X to avoid ambiguity.",
        ),
    ]:
        with pytest.raises(FeatureError) as raised:
            format_feature_levels(requested, release)
        assert str(raised.value) == message
    with pytest.raises(
        FeatureError,
        match=r"^Unknown metadata.version '3.5'. Supported metadata.version are: "
        r"3.9-IV0, 4.0-IV0, 4.0-IV1, 4.0-IV2, 4.0-IV3, 4.1-IV0, 4.1-IV1$",
    ):
        metadata_version_from_string("3.5")
    assert parse_feature_argument(" eligible.leader.replicas.version = 1 ") == (
        ELIGIBLE_LEADER_REPLICAS_VERSION,
        1,
    )
    with pytest.raises(FeatureError, match="equals sign not found"):
        parse_feature_argument("eligible.leader.replicas.version")
    with pytest.raises(FeatureError, match="unable to parse x as a short"):
        parse_feature_argument("eligible.leader.replicas.version=x")


def formatted(tmp_path: Path, *args: str):
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:19093\n"
        "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:19093\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'logs'}\nmetadata.log.dir={tmp_path / 'metadata'}\n"
    )
    return run_kcli(
        "storage",
        "format",
        "--config",
        str(config),
        "--cluster-id",
        "MkU3OEVBNTcwNTJENDM2Qg",
        *args,
        cwd=tmp_path,
    )


def test_format_with_the_elr_feature_writes_its_feature_level_record(tmp_path):
    result = formatted(
        tmp_path, "--release-version", "4.0", "--feature", "eligible.leader.replicas.version=1"
    )
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[-1]
        == f"Formatting metadata directory {tmp_path / 'metadata'} with metadata.version 4.0-IV3."
    )
    snapshot = read_snapshot((tmp_path / "metadata" / "bootstrap.checkpoint").read_bytes())
    assert [decode_metadata_record(value).data for _, value in snapshot.records] == [
        {"name": "metadata.version", "featureLevel": 25},
        {"name": ELIGIBLE_LEADER_REPLICAS_VERSION, "featureLevel": 1},
        {"name": GROUP, "featureLevel": 1},
        {"name": TXN, "featureLevel": 2},
    ]
    bootstrap = read_bootstrap_metadata(tmp_path / "metadata")
    assert bootstrap is not None and bootstrap.metadata_version == 25


def test_format_defaults_to_release_4_1_with_elr_and_3_9_keeps_the_old_levels(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    assert formatted(tmp_path / "a", "-r", "4.1").returncode == 0
    records = read_snapshot((tmp_path / "a" / "metadata" / "bootstrap.checkpoint").read_bytes()).records
    assert [decode_metadata_record(v).data["featureLevel"] for _, v in records] == [
        27,
        1,
        1,
        2,
    ]  # ELR, group, txn
    assert formatted(tmp_path / "b").returncode == 0  # no --release-version: the same, Kafka 4.1's default
    default = read_snapshot((tmp_path / "b" / "metadata" / "bootstrap.checkpoint").read_bytes()).records
    assert [decode_metadata_record(v).data for _, v in default] == [
        decode_metadata_record(v).data for _, v in records
    ]
    assert formatted(tmp_path / "c", "-r", "3.9").returncode == 0
    records = read_snapshot((tmp_path / "c" / "metadata" / "bootstrap.checkpoint").read_bytes()).records
    assert [decode_metadata_record(v).data for _, v in records] == [
        {"name": "metadata.version", "featureLevel": 21}
    ]


def test_format_refuses_elr_on_3_9_and_writes_nothing(tmp_path):
    result = formatted(
        tmp_path, "--release-version", "3.9", "--feature", "eligible.leader.replicas.version=1"
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "kcli: eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23"
    ]
    assert not (tmp_path / "metadata").exists() and not (tmp_path / "logs").exists()


# --- the broker: the previous broker epoch it registers with ------------------------------------------------


def test_the_previous_broker_epoch_comes_from_every_log_dirs_clean_shutdown_file(tmp_path):
    """LogManager.readBrokerEpochFromCleanShutdownFiles: all dirs must agree, else -1 (an unclean start)."""
    from kcli.broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager

    dirs = [tmp_path / "a", tmp_path / "b"]
    config = BrokerConfig({"log.dirs": ",".join(map(str, dirs))})
    manager = LogManager(config)
    manager.startup()
    assert manager.previous_broker_epoch == -1  # a first start
    manager.shutdown(broker_epoch=42)
    assert all((d / CLEAN_SHUTDOWN_FILE).read_text() == '{"version":0,"brokerEpoch":42}' for d in dirs)
    again = LogManager(config)
    again.startup()
    assert again.previous_broker_epoch == 42
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)  # a crash from here on is unclean
    again.shutdown(broker_epoch=43)
    (dirs[1] / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":7}')
    disagree = LogManager(config)
    disagree.startup()
    assert disagree.previous_broker_epoch == -1
    disagree.shutdown(broker_epoch=44)
    (dirs[0] / CLEAN_SHUTDOWN_FILE).unlink()
    missing = LogManager(config)
    missing.startup()
    assert missing.previous_broker_epoch == -1
    missing.shutdown()


# --- readers ------------------------------------------------------------------------------------------------


def test_describe_topic_partitions_answers_the_elr_and_metadata_does_not(tmp_path):
    """DescribeTopicPartitions v0 carries the ELR lists (KRaftMetadataCache); Metadata has no such field."""
    import asyncio
    from types import SimpleNamespace

    from kcli.broker.apis.describe_topic_partitions import handle_describe_topic_partitions
    from kcli.protocol.messages import nested_type, request_type, response_type

    controller, epochs = open_cluster(tmp_path)
    controller.create_topics([NewTopic("t", assignments=[(0, (1, 2, 3))])])
    for broker in (1, 2, 3):
        heartbeat(controller, epochs, broker, want_fence=True)
    request_cls = request_type(75, 0)
    request = request_cls(
        topics=(nested_type(request_cls, "TopicRequest")(name="t"),), response_partition_limit=10, cursor=None
    )
    ctx = SimpleNamespace(
        api_version=0,
        image=controller.image,
        state=SimpleNamespace(image=controller.image, config=BrokerConfig({})),
        # no authorizer configured: every topic may be described (its operations are not looked at here)
        authorize=lambda *_args, **_kwargs: True,
        authorized_operations=lambda *_args: 0,
    )
    response = asyncio.run(handle_describe_topic_partitions(ctx, request))  # type: ignore[arg-type]
    [topic] = response.topics
    [p] = topic.partitions
    assert (p.leader_id, p.isr_nodes, p.eligible_leader_replicas, p.last_known_elr) == (-1, (), (2, 3), (3,))
    metadata_partition = nested_type(response_type(3, 12), "MetadataResponsePartition")
    assert "eligible_leader_replicas" not in metadata_partition.__dataclass_fields__
