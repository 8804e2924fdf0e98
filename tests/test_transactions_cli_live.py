"""`kcli transactions list` and `describe` against real open, completed and empty transactions
(confluent-kafka producers on a real broker), including the timeout and start-time columns."""

from __future__ import annotations

import time

import orjson
import pytest
from conftest import BrokerProcess
from test_transactions import FAST, create_topic, transactional_producer
from test_transactions_cli import kcli

pytestmark = pytest.mark.timeout(60)


def rows(output: str) -> list[dict[str, str]]:
    return [orjson.loads(line) for line in output.splitlines()]


def test_list_and_describe_real_transactions(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "t")
    before_ms = int(time.time() * 1000)
    done = transactional_producer(broker.bootstrap, "done-tx")
    done.begin_transaction()
    done.produce("t", b"committed", partition=0)
    done.commit_transaction(30)
    opened = transactional_producer(broker.bootstrap, "open-tx", **{"transaction.timeout.ms": 45000})
    opened.begin_transaction()
    opened.produce("t", b"a", partition=0)
    opened.produce("t", b"b", partition=1)
    opened.flush(30)
    transactional_producer(broker.bootstrap, "empty-tx")  # InitProducerId only: Empty, no start time

    listed = kcli(broker, "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    by_id = {row["TransactionalId"]: row for row in rows(listed.stdout)}
    assert {i: row["TransactionState"] for i, row in by_id.items()} == {
        "done-tx": "CompleteCommit",
        "empty-tx": "Empty",
        "open-tx": "Ongoing",
    }
    assert {row["Coordinator"] for row in by_id.values()} == {"1"}
    assert len({row["ProducerId"] for row in by_id.values()}) == 3
    text = kcli(broker, "list").stdout
    assert text.splitlines()[0].split() == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
    ]
    # --duration-filter (ListTransactions v1): those running longer; an id with no transaction has no
    # start time (-1) and passes any filter, as Kafka's coordinator has it.
    longer = kcli(broker, "list", "--duration-filter", "600000", "-o", "json")
    assert [row["TransactionalId"] for row in rows(longer.stdout)] == ["empty-tx"]
    time.sleep(0.05)
    assert len(rows(kcli(broker, "list", "--duration-filter", "1", "-o", "json").stdout)) == 3

    described = kcli(broker, "describe", "--transactional-id", "open-tx", "-o", "json")
    assert described.returncode == 0, described.stderr
    [open_row] = rows(described.stdout)
    now_ms = int(time.time() * 1000)
    assert open_row["TransactionState"] == "Ongoing"
    assert open_row["TransactionalId"] == "open-tx" and open_row["CoordinatorId"] == "1"
    assert open_row["ProducerId"] == by_id["open-tx"]["ProducerId"] and open_row["ProducerEpoch"] == "0"
    assert open_row["TransactionTimeoutMs"] == "45000"
    start = int(open_row["CurrentTransactionStartTimeMs"])
    assert before_ms <= start <= now_ms
    assert 0 <= int(open_row["TransactionDurationMs"]) <= now_ms - start + 1000
    assert sorted(open_row["TopicPartitions"].split(",")) == ["t-0", "t-1"]

    [done_row] = rows(kcli(broker, "describe", "--transactional-id", "done-tx", "-o", "json").stdout)
    assert done_row["TransactionState"] == "CompleteCommit"
    assert before_ms <= int(done_row["CurrentTransactionStartTimeMs"]) <= now_ms
    assert done_row["TopicPartitions"] == ""

    # Empty: the broker answers -1 like Kafka, and the CLI prints None like kafka-transactions.sh.
    [empty_row] = rows(kcli(broker, "describe", "--transactional-id", "empty-tx", "-o", "json").stdout)
    assert empty_row["TransactionState"] == "Empty"
    assert (empty_row["CurrentTransactionStartTimeMs"], empty_row["TransactionDurationMs"]) == (
        "None",
        "None",
    )
    table = kcli(broker, "describe", "--transactional-id", "open-tx").stdout.splitlines()
    assert table[0].split()[-3:] == [
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    assert table[1].split()[:2] == ["1", "open-tx"]

    unknown = kcli(broker, "describe", "--transactional-id", "nobody")
    assert unknown.returncode == 1
    assert "transactional id 'nobody' does not exist" in unknown.stderr
    opened.abort_transaction(30)
