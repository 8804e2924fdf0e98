"""The log side of transactions: markers, the last stable offset, `.txnindex`, aborted transactions for
read_committed fetches, and the DescribeProducers and WriteTxnMarkers APIs on a real broker.

Transactional batches are built by hand and appended through the Log API (as a produce the transaction
coordinator verified); markers go through `Log.write_txn_markers`, as the coordinator writes them. After
each write the test raises the high watermark to the log end, as the only in-sync replica's Partition does
(the Log never moves its own high watermark).
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from formats.index import AbortedTxn, encode_aborted_txn, read_txn_index
from formats.records import RecordSpec, build_batch
from kcli.broker.log import AppendInfo, Log, LogConfig, RecordError
from kcli.broker.log.log import TxnMarker
from kcli.client import KafkaClient
from kcli.protocol.messages import request_type

pytestmark = pytest.mark.timeout(60)

T0 = 1_700_000_000_000


def txn_batch(producer_id: int, sequence: int, count: int = 2, *, epoch: int = 0) -> bytes:
    records = [RecordSpec(T0, b"k%d" % i, b"v%d" % i) for i in range(count)]
    return build_batch(
        records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True
    )


def new_log(tmp_path: Path, **config: object) -> Log:
    return Log.create(tmp_path / "t-0", LogConfig(**config), uuid.uuid4(), clock=lambda: T0)


def append(log: Log, batch: bytes) -> tuple[int, int]:
    info = log.append_as_leader(batch, leader_epoch=0, now_ms=T0, transaction_verified=True)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset, info.last_offset


def write_markers(log: Log, markers: list[TxnMarker]) -> list[AppendInfo]:
    try:
        return log.write_txn_markers(markers)
    finally:
        log.update_high_watermark(log.log_end_offset)  # markers before a refused one stay written


def test_markers_close_transactions_and_move_the_last_stable_offset(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    assert append(log, txn_batch(7, 0)) == (0, 1)
    assert append(log, txn_batch(8, 0)) == (2, 3)
    assert log.high_watermark == 4 and log.last_stable_offset == 0  # the HW where append put it
    [abort] = write_markers(log, [TxnMarker(7, 0, 5, commit=False)])
    assert (abort.first_offset, abort.last_offset) == (4, 4)
    # Producer 8's transaction is still open from offset 2: the LSO stops there.
    assert log.last_stable_offset == 2
    assert log.segments[-1].aborted_txns() == [AbortedTxn(0, 7, 0, 4, 2)]
    write_markers(log, [TxnMarker(8, 0, 5, commit=True)])
    assert log.last_stable_offset == log.high_watermark == 6  # the HW where write_markers put it
    assert log.producer_state.last_entry(7).coordinator_epoch == 5
    # The file on disk is Kafka's .txnindex: one 34-byte entry.
    assert read_txn_index((tmp_path / "t-0" / f"{0:020d}.txnindex").read_bytes()) == [
        AbortedTxn(0, 7, 0, 4, 2)
    ]
    log.close()


def test_a_marker_from_an_old_epoch_is_refused(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, txn_batch(7, 0, epoch=3))
    with pytest.raises(RecordError) as refused:
        write_markers(log, [TxnMarker(7, 2, 0, commit=False)])
    assert refused.value.error_code == ErrorCode.invalid_producer_epoch
    write_markers(log, [TxnMarker(7, 3, 4, commit=True)])
    with pytest.raises(RecordError) as fenced:
        write_markers(log, [TxnMarker(7, 3, 1, commit=True)])
    assert fenced.value.error_code == ErrorCode.transaction_coordinator_fenced
    assert log.log_end_offset == 3 and log.last_stable_offset == 3
    log.close()


def test_unverified_transactional_batches_are_refused(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    with pytest.raises(RecordError) as refused:
        log.append_as_leader(txn_batch(7, 0), leader_epoch=0, now_ms=T0)
    assert refused.value.error_code == ErrorCode.invalid_txn_state
    append(log, txn_batch(7, 0))
    # Once the transaction is open here, later batches of it need no verification.
    assert log.append_as_leader(txn_batch(7, 2), leader_epoch=0, now_ms=T0).first_offset == 2
    log.close()


def test_aborted_transactions_for_a_fetch_span_segments(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, txn_batch(1, 0))  # 0-1, aborted at 2
    write_markers(log, [TxnMarker(1, 0, 0, commit=False)])
    log.roll()
    append(log, txn_batch(2, 0))  # 3-4, committed at 5
    write_markers(log, [TxnMarker(2, 0, 0, commit=True)])
    append(log, txn_batch(3, 0))  # 6-7, aborted at 8
    write_markers(log, [TxnMarker(3, 0, 0, commit=False)])
    collected = log.collect_aborted_transactions
    assert [(t.producer_id, t.first_offset) for t in collected(0, 9)] == [(1, 0), (3, 6)]
    assert [t.producer_id for t in collected(2, 9)] == [1, 3]  # the abort marker itself is at 2
    assert [t.producer_id for t in collected(3, 6)] == []
    assert [t.producer_id for t in collected(3, 7)] == [3]
    read = log.read(3, 1 << 20, upper_bound=log.last_stable_offset, min_one_batch=True)
    assert read is not None and log.fetch_upper_bound_offset(read) == 9
    first_batch = log.read(0, 1, upper_bound=9, min_one_batch=True)
    assert first_batch is not None and log.fetch_upper_bound_offset(first_batch) == 2
    log.close()


def test_txnindex_survives_a_restart_and_goes_with_its_segment(tmp_path: Path) -> None:
    log = new_log(tmp_path, retention_ms=-1)
    append(log, txn_batch(1, 0))
    write_markers(log, [TxnMarker(1, 0, 0, commit=False)])
    log.roll()
    append(log, txn_batch(1, 2))
    write_markers(log, [TxnMarker(1, 0, 0, commit=True)])
    log.close()
    log = Log.load(
        tmp_path / "t-0", LogConfig(), had_clean_shutdown=True, high_watermark_checkpoint=6, clock=lambda: T0
    )
    assert [
        (t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_transactions(0, 6)
    ] == [(1, 0, 2)]
    log.delete_records_before(3)
    log.enforce_retention(T0)
    log.delete_pending_segments(T0 + 10**9)
    assert not (tmp_path / "t-0" / f"{0:020d}.txnindex").exists()
    assert log.collect_aborted_transactions(3, 6) == []
    log.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=12))
def test_lso_is_the_oldest_open_transaction(tmp_path_factory: pytest.TempPathFactory, steps: list) -> None:
    """Any interleaving of producers appending and ending transactions: the LSO is the first offset of
    the oldest open one, and each abort is indexed with a first offset below its marker."""
    log = new_log(tmp_path_factory.mktemp("lso"))
    sequences: dict[int, int] = {}
    open_at: dict[int, int] = {}
    for producer_id, end in steps:
        if end and producer_id in open_at:
            commit = producer_id % 2 == 0
            [info] = write_markers(log, [TxnMarker(producer_id, 0, 0, commit)])
            del open_at[producer_id]
            if not commit:
                last = log.segments[-1].aborted_txns()[-1]
                assert last.last_offset == info.first_offset and last.first_offset < info.first_offset
        else:
            first, _ = append(log, txn_batch(producer_id, sequences.get(producer_id, 0)))
            sequences[producer_id] = sequences.get(producer_id, 0) + 2
            open_at.setdefault(producer_id, first)
        assert log.last_stable_offset == min(open_at.values(), default=log.high_watermark)
    log.close()


def test_txnindex_entries_round_trip() -> None:
    entries = [AbortedTxn(0, 1, 0, 4, 2), AbortedTxn(0, 2**40, 5, 9, 10)]
    assert read_txn_index(b"".join(encode_aborted_txn(e) for e in entries)) == entries


# --- the APIs on a real broker ------------------------------------------------------------------------


def test_describe_producers_and_write_txn_markers(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("tx", 1, 1)])["tx"].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce("tx", b"v%d" % i, partition=0)
    assert producer.flush(15) == 0

    async def run() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            [state] = await describe(client, "tx", 0)
            assert state.last_sequence == 2 and state.current_txn_start_offset == -1
            assert state.producer_epoch == 0 and state.last_timestamp > 0
            assert await describe(client, "missing", 0) == ErrorCode.unknown_topic_or_partition

            # An operator's abortTransaction: a marker for a producer, no transaction open.
            errors = await write_marker(client, state.producer_id, 0, [("tx", 0), ("tx", 5), ("nope", 0)])
            assert errors == [
                ("tx", 0, ErrorCode.none),
                ("tx", 5, ErrorCode.unknown_topic_or_partition),
                ("nope", 0, ErrorCode.unknown_topic_or_partition),
            ]
            errors = await write_marker(client, state.producer_id, -1 + 0, [("tx", 0)], epoch=-5)
            assert errors == [("tx", 0, ErrorCode.invalid_producer_epoch)]
            [state] = await describe(client, "tx", 0)
            assert state.coordinator_epoch == 0

    asyncio.run(run())
    # The marker took an offset: the next record lands after it.
    producer.produce("tx", b"after", partition=0)
    assert producer.flush(15) == 0


async def describe(client: KafkaClient, topic: str, partition: int) -> list | ErrorCode:
    cls = request_type(61, 0)
    topic_cls = sys.modules[cls.__module__].TopicRequest
    response = await client.send(cls(topics=(topic_cls(name=topic, partition_indexes=(partition,)),)))
    [result] = response.topics[0].partitions
    if result.error_code != ErrorCode.none:
        return result.error_code
    return list(result.active_producers)


async def write_marker(
    client: KafkaClient, producer_id: int, coordinator_epoch: int, partitions: list, *, epoch: int = 0
) -> list:
    cls = request_type(27, 1)
    module = sys.modules[cls.__module__]
    topics = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    marker = module.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=epoch,
        transaction_result=False,
        topics=tuple(
            module.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(i)) for t, i in topics.items()
        ),
        coordinator_epoch=coordinator_epoch,
    )
    response = await client.send(cls(markers=(marker,)))
    return [
        (topic.name, p.partition_index, p.error_code)
        for topic in response.markers[0].topics
        for p in topic.partitions
    ]
