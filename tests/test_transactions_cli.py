"""`kcli transactions` against a real broker: DescribeProducers and WriteTxnMarkers paths of find-hanging
and abort (list and describe need the transaction coordinator's ListTransactions/DescribeTransactions)."""

from __future__ import annotations

import subprocess

import pytest
from cli_in_process import run_kcli
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import KCLI, BrokerProcess, kcli_env

pytestmark = pytest.mark.timeout(60)


def kcli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`kcli transactions ARGS -b BOOTSTRAP` through kcli.cli.main.main in this process."""
    return run_kcli("transactions", *args, "-b", broker.bootstrap)


def kcli_process(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`kcli transactions ARGS -b BOOTSTRAP` as a real `python -m kcli` process: the entry point as installed."""
    return subprocess.run(
        [*KCLI, "transactions", *args, "-b", broker.bootstrap],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=30,
    )


def test_find_hanging_and_abort(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("t", 2, 1)])["t"].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    producer.produce("t", b"v", partition=0)
    assert producer.flush(15) == 0

    # An idempotent producer has no open transaction: nothing hangs.
    found = kcli_process(
        broker, "find-hanging", "--topic", "t", "--max-transaction-timeout", "0", "-o", "json"
    )
    assert found.returncode == 0 and found.stdout == "", found.stderr
    assert "needs --topic or --broker-id" in kcli(broker, "find-hanging").stderr
    assert (
        "--partition needs --topic"
        in kcli(broker, "find-hanging", "--broker-id", "0", "--partition", "1").stderr
    )

    missing = kcli(broker, "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert missing.returncode != 0
    assert "Could not find any open transactions starting at offset 0 on partition t-0." in missing.stderr

    # A producer with no open transaction (-1 is what DescribeProducers answers for it) and a made-up
    # producer id are refused: neither may write an ABORT marker that ends nothing.
    none_open = kcli(broker, "abort", "--topic", "t", "--partition", "0", "--start-offset", "-1")
    assert none_open.returncode != 0
    assert (
        "--start-offset must be the first offset of an open transaction (0 or more), not -1."
        in none_open.stderr
    )
    made_up = kcli(
        broker, "abort", "--topic", "t", "--partition", "0", "--producer-id", "5000", "--producer-epoch", "0",
        "--coordinator-epoch", "0", "-o", "json",
    )  # fmt: skip
    assert made_up.returncode != 0 and made_up.stdout == ""
    assert "producer 5000 is not an active producer of t-0: nothing to abort" in made_up.stderr
    producer.produce("t", b"after", partition=0)
    delivered: list = []
    producer.poll(0)
    producer.produce("t", b"after2", partition=0, on_delivery=lambda err, msg: delivered.append(msg.offset()))
    assert producer.flush(15) == 0
    assert delivered == [2]  # 0: v, 1: after: no marker was written
