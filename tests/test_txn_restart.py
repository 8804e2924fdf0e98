"""Transactions across broker restarts and over time, against a real broker process.

A restart (SIGTERM or kill -9) that leaves a transaction in PrepareCommit/PrepareAbort must be finished
by the coordinator's load: markers on every partition, then CompleteCommit/CompleteAbort, so that
read_committed consumers see exactly the committed records. The Prepare record is the last thing the
coordinator writes before the markers; to stop the broker in that window deterministically, the test
stops it while the transaction is Ongoing and appends the Prepare record to __transaction_state itself
(what the coordinator would have written), then restarts. Idle transactional ids expire: they leave
ListTransactions and DescribeTransactions, and their producer id is fenced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from conftest import BrokerProcess, start_broker
from test_transactions import (
    FAST,
    consume_all,
    create_topic,
    describe,
    list_transactions,
    transactional_producer,
    wait_for_state,
)
from waiting import wait_for

from formats.internal import TxnLogValue, decode_txn_key, decode_txn_value, encode_txn_log, txn_partition_for
from formats.records import RecordBatch, RecordSpec, build_batch
from formats.segment import walk
from kcli.broker.log.config import LogConfig
from kcli.broker.log.log import Log
from kcli.broker.log.validator import AppendOrigin

pytestmark = pytest.mark.timeout(120)

PREPARE_COMMIT, PREPARE_ABORT = 2, 3


def last_txn_value(partition_dir: Path, transactional_id: str) -> TxnLogValue:
    """The newest __transaction_state value of `transactional_id`, read from the segment files."""
    found = None
    for path in sorted(partition_dir.glob("*.log")):
        data = memoryview(path.read_bytes())
        for batch in walk(data).batches:
            if not isinstance(batch, RecordBatch) or batch.is_control:
                continue
            for record in batch.records(data):
                if record.key is not None and decode_txn_key(record.key) == transactional_id:
                    found = decode_txn_value(record.value)
    assert found is not None, f"{transactional_id} has no record in {partition_dir}"
    return found


def append_prepare(data_dir: Path, transactional_id: str, status: int, *, clean: bool) -> TxnLogValue:
    """Append the Prepare record the coordinator writes on EndTxn, to a stopped broker's log."""
    partition_dir = data_dir / f"__transaction_state-{txn_partition_for(transactional_id, 3)}"
    ongoing = last_txn_value(partition_dir, transactional_id)
    assert ongoing.state == "Ongoing"
    prepare = dataclasses.replace(
        ongoing, transaction_status=status, transaction_last_update_timestamp_ms=int(time.time() * 1000)
    )
    partition_log = Log.load(partition_dir, LogConfig(), had_clean_shutdown=clean)
    key, value = encode_txn_log(transactional_id, prepare)
    partition_log.append_as_leader(
        build_batch([RecordSpec(prepare.transaction_last_update_timestamp_ms, key, value)]),
        leader_epoch=partition_log.latest_epoch() or 0,
        now_ms=prepare.transaction_last_update_timestamp_ms,
        origin=AppendOrigin.COORDINATOR,
    )
    partition_log.flush_all()
    partition_log.close()
    return prepare


@pytest.mark.parametrize("commit", [True, False], ids=["PrepareCommit", "PrepareAbort"])
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_restart_in_prepare_state_finishes_the_transaction(
    broker_factory, tmp_path: Path, how: signal.Signals, commit: bool
) -> None:
    data_dir = tmp_path / "data"
    first = start_broker(tmp_path / "first", overrides=FAST, data_dir=data_dir)
    create_topic(first.bootstrap, "prep")
    producer = transactional_producer(first.bootstrap, "prep-tx")
    producer.begin_transaction()
    for i in range(4):
        producer.produce("prep", f"before-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce("prep", f"pending-{i}".encode(), partition=i % 2)
    producer.flush(30)
    ongoing = asyncio.run(describe(first.bootstrap, "prep-tx"))
    assert ongoing.transaction_state == "Ongoing"
    first.process.send_signal(how)
    assert first.process.wait(15) in (0, -signal.SIGKILL)
    del producer

    prepare = append_prepare(
        data_dir, "prep-tx", PREPARE_COMMIT if commit else PREPARE_ABORT, clean=how is signal.SIGTERM
    )
    restarted: BrokerProcess = broker_factory(overrides=FAST, data_dir=data_dir)
    done = wait_for_state(restarted.bootstrap, "prep-tx", "CompleteCommit" if commit else "CompleteAbort")
    assert done.transaction_state == ("CompleteCommit" if commit else "CompleteAbort"), done
    assert (done.producer_id, done.producer_epoch) == (prepare.producer_id, prepare.producer_epoch)
    assert "after loading" in restarted.log()

    before = sorted(f"before-{i}".encode() for i in range(4))
    pending = sorted(f"pending-{i}".encode() for i in range(6))
    committed = sorted(consume_all(restarted.bootstrap, "prep", 2, "read_committed"))
    assert committed == (sorted(before + pending) if commit else before)
    assert sorted(consume_all(restarted.bootstrap, "prep", 2, "read_uncommitted")) == sorted(before + pending)

    # The producer carries on with the next epoch; its records are visible once committed.
    again = transactional_producer(restarted.bootstrap, "prep-tx")
    again.begin_transaction()
    again.produce("prep", b"after", partition=0)
    again.commit_transaction(30)
    assert b"after" in consume_all(restarted.bootstrap, "prep", 2, "read_committed")


EXPIRING = [
    *FAST,
    "transactional.id.expiration.ms=1500",
    "transaction.remove.expired.transaction.cleanup.interval.ms=300",
]


def test_idle_transactional_id_expires_and_its_producer_is_fenced(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=EXPIRING)
    create_topic(broker.bootstrap, "idle", 1)
    producer = transactional_producer(broker.bootstrap, "idle-tx")
    producer.begin_transaction()
    producer.produce("idle", b"one", partition=0)
    producer.commit_transaction(30)
    busy = transactional_producer(broker.bootstrap, "busy-tx", **{"transaction.timeout.ms": 60000})
    busy.begin_transaction()
    busy.produce("idle", b"open", partition=0)
    busy.flush(30)
    described = asyncio.run(describe(broker.bootstrap, "idle-tx"))
    assert described.transaction_state == "CompleteCommit"

    seen: list[set[str]] = []

    def expired() -> set[str] | None:
        states = asyncio.run(list_transactions(broker.bootstrap)).transaction_states
        seen.append({state.transactional_id for state in states})
        return seen[-1] if "idle-tx" not in seen[-1] else None

    ids = wait_for("idle-tx expired", expired, 15, 0.2, explain=lambda: f"listed: {seen[-1:]}")
    assert ids == {"busy-tx"}, ids  # an Ongoing transaction never expires
    gone = asyncio.run(describe(broker.bootstrap, "idle-tx"))
    assert gone.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    assert "Removed expired transactional id idle-tx" in broker.log()

    # The old producer id no longer maps to the id: its next transaction fails as Kafka fails it
    # (INVALID_PRODUCER_ID_MAPPING, fatal for the producer), and a new instance starts over.
    producer.begin_transaction()
    producer.produce("idle", b"late", partition=0)
    with pytest.raises(KafkaException) as failure:
        producer.commit_transaction(15)
    assert failure.value.args[0].code() == KafkaError.INVALID_PRODUCER_ID_MAPPING, failure.value
    fresh = transactional_producer(broker.bootstrap, "idle-tx")
    fresh.begin_transaction()
    fresh.produce("idle", b"two", partition=0)
    fresh.commit_transaction(30)
    busy.commit_transaction(30)
    assert consume_all(broker.bootstrap, "idle", 1, "read_committed") == [b"one", b"open", b"two"]
