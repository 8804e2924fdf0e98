"""Group state and __consumer_offsets replay without a broker: the rules ClassicGroup enforces, and
loading a partition's batches (regular, transactional, markers, tombstones) against a plain model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.internal import (
    MemberMetadata,
    decode_offsets_key,
    decode_offsets_value,
    encode_group_metadata,
    encode_group_metadata_key,
    encode_offset_commit,
    encode_offset_commit_key,
)
from formats.records import ControlType, RecordSpec, build_batch, build_control_batch
from formats.segment import StopReason, walk
from kcli.broker.group.group import (
    ClassicGroup,
    CommitRecord,
    GroupState,
    Member,
    OffsetAndMetadata,
)
from kcli.broker.group.loader import PartitionReplay, group_from_record

NOW = 1_700_000_000_000
DAY = 24 * 3600 * 1000


# --- ClassicGroup ---------------------------------------------------------------------------------------


def member(member_id: str, *protocols: str, instance: str | None = None) -> Member:
    return Member(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=1000,
        session_timeout_ms=1000,
        protocol_type="consumer",
        protocols=[(name, name.encode()) for name in protocols],
    )


def test_protocol_selection_takes_most_votes_among_protocols_everyone_supports() -> None:
    group = ClassicGroup("g", GroupState.EMPTY, NOW)
    group.add(member("a", "range", "roundrobin"))
    group.add(member("b", "roundrobin", "range"))
    group.add(member("c", "roundrobin", "sticky"))
    # Only roundrobin is supported by all three.
    assert group.select_protocol() == "roundrobin"
    group.remove("c")
    # range and roundrobin tie one vote each: the leader's preference decides.
    assert group.leader_id == "a" and group.select_protocol() == "range"
    group.transition_to(GroupState.PREPARING_REBALANCE, NOW)
    assert group.supports_protocols("consumer", ["roundrobin"])
    assert not group.supports_protocols("consumer", ["sticky"])
    assert not group.supports_protocols("connect", ["range"])
    empty = ClassicGroup("e", GroupState.EMPTY, NOW)
    assert not empty.supports_protocols("", ["range"]) and not empty.supports_protocols("consumer", [])


def test_illegal_transitions_are_refused() -> None:
    group = ClassicGroup("g", GroupState.EMPTY, NOW)
    with pytest.raises(
        RuntimeError, match="should be in the CompletingRebalance states before moving to Stable"
    ):
        group.transition_to(GroupState.STABLE, NOW)
    group.transition_to(GroupState.PREPARING_REBALANCE, NOW + 1)
    group.init_next_generation(NOW + 2)  # no members: back to Empty, one generation later
    assert (group.state, group.generation_id, group.current_state_timestamp) == (GroupState.EMPTY, 1, NOW + 2)


def test_static_member_replacement_fences_parked_requests() -> None:
    group = ClassicGroup("g", GroupState.EMPTY, NOW)
    answers = []
    group.add(member("old", "range", instance="i"), answers.append)
    replaced = group.replace_static_member("i", "old", "new")
    assert replaced.member_id == "new" and group.leader_id == "new"
    assert group.current_static_member_id("i") == "new"
    assert [a.error.name for a in answers] == ["fenced_instance_id"]
    assert group.num_members_awaiting_join == 0


def test_offset_expiry_rules() -> None:
    retention = 7 * DAY
    old = OffsetAndMetadata(1, -1, "", NOW - 8 * DAY)
    fresh = OffsetAndMetadata(2, -1, "", NOW - DAY)
    explicit = OffsetAndMetadata(3, -1, "", NOW - DAY, expire_timestamp=NOW - 1)

    simple = ClassicGroup("simple", GroupState.EMPTY, NOW)  # commit-only: each offset by its commit time
    simple.offsets = {
        ("t", 0): CommitRecord(0, old),
        ("t", 1): CommitRecord(1, fresh),
        ("t", 2): CommitRecord(2, explicit),
    }
    assert set(simple.remove_expired_offsets(NOW, retention)) == {("t", 0), ("t", 2)}

    emptied = ClassicGroup("emptied", GroupState.EMPTY, NOW - 8 * DAY)  # everything, from when it emptied
    emptied.protocol_type = "consumer"
    emptied.offsets = {("t", 0): CommitRecord(0, fresh)}
    assert set(emptied.remove_expired_offsets(NOW, retention)) == {("t", 0)}

    stable = group_from_record("stable", group_value(["a"], topics=("t",)), NOW)  # only unsubscribed topics
    stable.offsets = {("t", 0): CommitRecord(0, old), ("gone", 0): CommitRecord(1, old)}
    assert set(stable.remove_expired_offsets(NOW, retention)) == {("gone", 0)}


# --- loading a partition ----------------------------------------------------------------------------------


def group_value(members: list[str], *, topics: tuple[str, ...] = ("t",), generation: int = 3):  # type: ignore[no-untyped-def]
    subscription = b"\x00\x00" + len(topics).to_bytes(4, "big")
    for topic in topics:
        subscription += len(topic).to_bytes(2, "big") + topic.encode()
    subscription += b"\xff\xff\xff\xff"
    key, value = encode_group_metadata(
        "g",
        "consumer",
        generation,
        "range" if members else None,
        members[0] if members else None,
        NOW,
        [
            MemberMetadata(
                member_id=m,
                group_instance_id=None,
                client_id="c",
                client_host="/h",
                rebalance_timeout=5000,
                session_timeout=6000,
                subscription=subscription,
                assignment=m.encode(),
            )
            for m in members
        ],
    )
    return decode_offsets_value(decode_offsets_key(key), value)


def test_group_record_reloads_as_stable_or_empty() -> None:
    stable = group_from_record("g", group_value(["a", "b"]), NOW)
    assert (stable.state, stable.generation_id, stable.protocol_name, stable.leader_id) == (
        GroupState.STABLE,
        3,
        "range",
        "a",
    )
    assert [(m.member_id, m.assignment, m.session_timeout_ms) for m in stable.members.values()] == [
        ("a", b"a", 6000),
        ("b", b"b", 6000),
    ]
    assert stable.subscribed_topics == {"t"} and stable.current_state_timestamp == NOW
    empty = group_from_record("g", group_value([]), NOW)
    assert (empty.state, empty.protocol_name, empty.size) == (GroupState.EMPTY, None, 0)


KEYS = st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(["t", "u"]), st.integers(0, 1))
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("commit"), st.lists(st.tuples(KEYS, st.integers(0, 10**6)), min_size=1, max_size=3)
        ),
        st.tuples(st.just("tombstone"), KEYS),
        st.tuples(
            st.just("txn"),
            st.integers(1, 3),
            st.lists(st.tuples(KEYS, st.integers(0, 10**6)), min_size=1, max_size=3),
        ),
        st.tuples(st.just("marker"), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("group"), st.sampled_from(["g1", "g2"]), st.booleans()),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(OPERATIONS)
def test_replay_matches_a_model_of_the_log(operations) -> None:  # type: ignore[no-untyped-def]
    log = bytearray()
    offset = 0
    committed: dict[tuple[str, str, int], tuple[int, int]] = {}  # key -> (offset, batch base offset)
    pending: dict[int, dict[tuple[str, str, int], tuple[int, int]]] = {}
    groups: dict[str, bool] = {}
    for operation in operations:
        kind = operation[0]
        if kind in ("commit", "txn"):
            commits = operation[-1]
            pid = operation[1] if kind == "txn" else -1
            records = [
                RecordSpec(NOW, *encode_offset_commit(g, t, p, o, -1, "", NOW)) for (g, t, p), o in commits
            ]
            log += build_batch(
                records,
                base_offset=offset,
                producer_id=pid,
                producer_epoch=0 if pid > 0 else -1,
                is_transactional=pid > 0,
            )
            target = pending.setdefault(pid, {}) if pid > 0 else committed
            for key, value in commits:
                target[key] = (value, offset)
            offset += len(records)
        elif kind == "tombstone":
            (g, t, p) = operation[1]
            log += build_batch([RecordSpec(NOW, encode_offset_commit_key(g, t, p), None)], base_offset=offset)
            committed.pop(operation[1], None)
            offset += 1
        elif kind == "marker":
            pid, commit = operation[1], operation[2]
            control = ControlType.COMMIT if commit else ControlType.ABORT
            log += build_control_batch(
                control, base_offset=offset, producer_id=pid, producer_epoch=0, timestamp=NOW
            )
            for key, value in pending.pop(pid, {}).items():
                if commit and (key not in committed or committed[key][1] < value[1]):
                    committed[key] = value
            offset += 1
        else:
            group_id, alive = operation[1], operation[2]
            if alive:
                key, value = encode_group_metadata(group_id, "consumer", 1, None, None, NOW, [])
            else:
                key, value = encode_group_metadata_key(group_id), None
            log += build_batch([RecordSpec(NOW, key, value)], base_offset=offset)
            groups[group_id] = alive
            offset += 1

    replay = PartitionReplay("__consumer_offsets-0")
    view = memoryview(bytes(log))
    result = walk(view)
    assert result.reason is StopReason.END
    for batch in result.batches:
        replay.replay(view, batch)
    assert {k: (r.offset.offset, r.appended_batch_offset) for k, r in replay.offsets.items()} == committed
    assert {
        pid: {k: (r.offset.offset, r.appended_batch_offset) for k, r in offsets.items()}
        for pid, offsets in replay.pending.items()
        if offsets
    } == {pid: offsets for pid, offsets in pending.items() if offsets}
    assert set(replay.group_values) == {g for g, alive in groups.items() if alive}
    loaded = {g.group_id: g for g in replay.groups(NOW)}
    expected_groups = {g for g, _, _ in committed} | {g for g, alive in groups.items() if alive}
    expected_groups |= {g for offsets in pending.values() for g, _, _ in offsets}
    assert set(loaded) == expected_groups
    for (g, t, p), (value, _) in committed.items():
        assert loaded[g].offset(t, p).offset == value  # type: ignore[union-attr]
