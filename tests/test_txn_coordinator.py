"""TransactionMetadata's state machine: legal transitions, epoch bumps and KIP-360 retries, id rotation,
fencing, and the __transaction_state value round trip (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from formats.internal import decode_txn_value, encode_txn_log
from kcli.broker.txn.metadata import (
    MAX_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)

S = TransactionState


def metadata(state: TransactionState = S.EMPTY, epoch: int = 0, **changes: object) -> TransactionMetadata:
    values: dict[str, object] = {
        "transactional_id": "tx",
        "producer_id": 42,
        "last_producer_id": -1,
        "producer_epoch": epoch,
        "last_producer_epoch": -1,
        "txn_timeout_ms": 60_000,
        "state": state,
    }
    values.update(changes)
    return TransactionMetadata(**values)  # type: ignore[arg-type]


def apply(m: TransactionMetadata, transit: TxnTransitMetadata | ErrorCode) -> TxnTransitMetadata:
    assert isinstance(transit, TxnTransitMetadata), transit
    m.complete_transition_to(transit)
    return transit


def test_a_transaction_goes_empty_ongoing_prepare_complete() -> None:
    m = metadata(epoch=-1)
    apply(m, m.prepare_increment_producer_epoch(30_000, None, now_ms=100))
    assert (m.state, m.producer_epoch, m.txn_timeout_ms, m.txn_start_timestamp) == (S.EMPTY, 0, 30_000, -1)
    apply(m, m.prepare_add_partitions([("t", 0)], now_ms=200))
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {("t", 0)}, 200)
    apply(m, m.prepare_add_partitions([("t", 1)], now_ms=300))
    assert (
        m.topic_partitions == {("t", 0), ("t", 1)} and m.txn_start_timestamp == 200
    )  # the clock keeps running
    apply(m, m.prepare_abort_or_commit(S.PREPARE_COMMIT, now_ms=400))
    assert m.state is S.PREPARE_COMMIT and m.topic_partitions == {("t", 0), ("t", 1)}
    apply(m, m.prepare_complete(now_ms=500))
    assert (m.state, m.topic_partitions, m.txn_last_update_timestamp) == (S.COMPLETE_COMMIT, set(), 500)
    apply(m, m.prepare_add_partitions([("t", 2)], now_ms=600))  # the next transaction restarts the clock
    assert m.txn_start_timestamp == 600


@pytest.mark.parametrize("target", list(S))
@pytest.mark.parametrize("current", list(S))
def test_only_kafkas_transitions_are_legal(current: TransactionState, target: TransactionState) -> None:
    m = metadata(current)
    if current in VALID_PREVIOUS_STATES[target]:
        transit = m._transit(target)
        assert m.pending_state is target
        m.complete_transition_to(transit)
        assert m.state is target and m.pending_state is None
    else:
        with pytest.raises(IllegalTransition):
            m._transit(target)
        assert m.pending_state is None


def test_a_pending_transition_blocks_another_and_can_be_abandoned() -> None:
    m = metadata(S.ONGOING)
    m.prepare_abort_or_commit(S.PREPARE_ABORT, now_ms=1)
    with pytest.raises(IllegalTransition):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, now_ms=1)
    m.abandon_transition()
    assert m.state is S.ONGOING and m.pending_state is None


def test_epoch_bumps_follow_kip_360() -> None:
    m = metadata(S.COMPLETE_ABORT, epoch=5)
    apply(m, m.prepare_increment_producer_epoch(1000, None, now_ms=1))
    assert (m.producer_epoch, m.last_producer_epoch) == (6, -1)  # no expected epoch: a plain bump
    apply(m, m.prepare_increment_producer_epoch(1000, 6, now_ms=2))
    assert (m.producer_epoch, m.last_producer_epoch) == (7, 6)  # the client's own epoch: bump, remember it
    apply(m, m.prepare_increment_producer_epoch(1000, 6, now_ms=3))
    assert (m.producer_epoch, m.last_producer_epoch) == (7, 6)  # a retry of that bump: same answer
    assert m.prepare_increment_producer_epoch(1000, 3, now_ms=4) is ErrorCode.producer_fenced
    assert m.pending_state is None


def test_accepted_producer_ids_for_init_with_an_expected_epoch() -> None:
    m = metadata(epoch=3, last_producer_id=41)
    assert m.is_producer_id_and_epoch_accepted(42, 3)
    assert not m.is_producer_id_and_epoch_accepted(7, 3)
    assert not m.is_producer_id_and_epoch_accepted(41, 3)
    assert m.is_producer_id_and_epoch_accepted(41, MAX_PRODUCER_EPOCH - 1)  # the rotated-away id, exhausted
    assert metadata(epoch=-1).is_producer_id_and_epoch_accepted(7, 3)  # just created: anything goes


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=MAX_PRODUCER_EPOCH - 1)
    assert m.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransition):
        m.prepare_increment_producer_epoch(1000, None, now_ms=1)
    apply(m, m.prepare_producer_id_rotation(43, 1000, now_ms=1, record_last_epoch=True))
    assert (m.producer_id, m.producer_epoch, m.last_producer_id, m.last_producer_epoch) == (
        43,
        0,
        42,
        MAX_PRODUCER_EPOCH - 1,
    )


def test_a_fence_bumps_once_even_when_retried_after_a_failed_write() -> None:
    m = metadata(S.ONGOING, epoch=4)
    assert m.prepare_fence_producer_epoch().producer_epoch == 5
    m.abandon_transition()
    m.has_failed_epoch_fence = True
    m.producer_epoch = 5  # the coordinator keeps the bumped epoch in memory
    fence = m.prepare_fence_producer_epoch()
    assert (fence.state, fence.producer_epoch, fence.last_producer_epoch) == (S.PREPARE_EPOCH_FENCE, 5, -1)


def test_an_expired_id_dies_only_when_idle() -> None:
    for state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        m = metadata(state)
        assert state.is_expiration_allowed
        apply(m, m.prepare_dead())
        assert m.state is S.DEAD
    with pytest.raises(IllegalTransition):
        metadata(S.ONGOING).prepare_dead()


partitions = st.frozensets(st.tuples(st.sampled_from(["a", "b", "topic-c"]), st.integers(0, 100)), max_size=8)


@given(
    producer_id=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, MAX_PRODUCER_EPOCH),
    state=st.sampled_from([s for s in S if s not in (S.DEAD, S.PREPARE_EPOCH_FENCE)]),
    topic_partitions=partitions,
    start=st.integers(-1, 2**42),
    update=st.integers(0, 2**42),
    timeout=st.integers(1, 900_000),
)
def test_transit_round_trips_through_the_transaction_log(
    producer_id: int,
    epoch: int,
    state: TransactionState,
    topic_partitions: frozenset[tuple[str, int]],
    start: int,
    update: int,
    timeout: int,
) -> None:
    if state is S.EMPTY:
        topic_partitions = frozenset()
    transit = TxnTransitMetadata(producer_id, -1, epoch, -1, timeout, state, topic_partitions, start, update)
    key, value = encode_txn_log("tx", transit.to_log_value())
    decoded = decode_txn_value(value)
    assert decoded is not None
    assert (decoded.transaction_partitions is None) == (state is S.EMPTY)
    loaded = TransactionMetadata.from_log_value("tx", decoded)
    assert (
        loaded.producer_id,
        loaded.producer_epoch,
        loaded.txn_timeout_ms,
        loaded.state,
        loaded.topic_partitions,
        loaded.txn_start_timestamp,
        loaded.txn_last_update_timestamp,
        loaded.last_producer_epoch,
    ) == (producer_id, epoch, timeout, state, set(topic_partitions), start, update, -1)


# --- transaction version 2 (KIP-890 part 2) ---------------------------------------------------------------


def test_version_2_bumps_the_epoch_in_prepare_and_keeps_it_in_complete() -> None:
    m = metadata(S.EMPTY, epoch=3)
    apply(m, m.prepare_add_partitions([("t", 0)], now_ms=1, client_transaction_version=2))
    apply(m, m.prepare_abort_or_commit(S.PREPARE_COMMIT, 2, 2))
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch, m.client_transaction_version) == (
        42,
        4,
        3,
        2,
    )
    complete = apply(m, m.prepare_complete(now_ms=3))
    assert (m.state, m.producer_id, m.producer_epoch, m.last_producer_epoch) == (S.COMPLETE_COMMIT, 42, 4, 4)
    value = complete.to_log_value(transaction_version=2)
    assert (value.version, value.client_transaction_version, value.producer_epoch) == (1, 2, 4)
    assert complete.to_log_value(transaction_version=0).client_transaction_version == 0  # v0 cannot hold it


def test_version_2_moves_an_exhausted_epoch_to_the_next_producer_id_at_complete() -> None:
    m = metadata(S.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1, topic_partitions={("t", 0)}, txn_start_timestamp=1)
    prepare = apply(m, m.prepare_abort_or_commit(S.PREPARE_ABORT, 2, 2, next_producer_id=99))
    assert (m.producer_id, m.producer_epoch, m.next_producer_id) == (42, MAX_PRODUCER_EPOCH, 99)
    loaded = TransactionMetadata.from_log_value(
        "tx", decode_txn_value(encode_txn_log("tx", prepare.to_log_value(2))[1])
    )
    assert (loaded.next_producer_id, loaded.client_transaction_version) == (
        99,
        2,
    )  # a new coordinator finishes it
    apply(m, m.prepare_complete(now_ms=3))
    assert (m.producer_id, m.producer_epoch, m.last_producer_id, m.next_producer_id) == (99, 0, 42, -1)


def test_version_2_abort_from_empty_and_an_epoch_at_the_maximum_does_not_overflow() -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=7)
    apply(m, m.prepare_abort_or_commit(S.PREPARE_ABORT, 5, 2, no_partition_added=True))
    assert (m.state, m.producer_epoch, m.txn_start_timestamp, m.topic_partitions) == (
        S.PREPARE_ABORT,
        8,
        5,
        set(),
    )
    m = metadata(S.ONGOING, epoch=MAX_PRODUCER_EPOCH, topic_partitions={("t", 0)})
    apply(m, m.prepare_abort_or_commit(S.PREPARE_ABORT, 2, 2))
    assert m.producer_epoch == MAX_PRODUCER_EPOCH


def test_version_1_keeps_the_epoch() -> None:
    m = metadata(S.ONGOING, epoch=3, topic_partitions={("t", 0)})
    apply(m, m.prepare_abort_or_commit(S.PREPARE_COMMIT, now_ms=2))
    apply(m, m.prepare_complete(now_ms=3))
    assert (m.producer_epoch, m.last_producer_epoch, m.client_transaction_version) == (3, -1, 0)
