"""`kcli groups`: argument parsing here; list, describe, reset and delete against a real broker below."""

from __future__ import annotations

import datetime

import pytest

from ops.groups import GroupError, parse_datetime, parse_duration, parse_scope, read_reset_file


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("PT1H30M", 5400), ("P1DT2H", 93600), ("PT0.5S", 0.5), ("1h30m", 5400), ("90s", 90), ("2d", 172800)],
)
def test_parse_duration_iso_and_short_forms(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "P", "1x", "h", "PT", "5 minutes"])
def test_parse_duration_rejects_other_text(text):
    with pytest.raises(GroupError, match="is not a duration"):
        parse_duration(text)


def test_parse_datetime_with_and_without_zone():
    assert parse_datetime("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_datetime("2024-05-01T14:00:00.250+02:00") == 1714564800250
    local = datetime.datetime(2024, 5, 1, 12, 0).astimezone()  # no zone: local time, as Kafka's tool
    assert parse_datetime("2024-05-01T12:00:00") == int(local.timestamp() * 1000)
    with pytest.raises(GroupError, match="is not a date-time"):
        parse_datetime("yesterday")


def test_parse_scope_topics_and_partitions():
    assert parse_scope(["orders", "pay:0,2"]) == ["orders", ("pay", 0), ("pay", 2)]
    with pytest.raises(GroupError, match="TOPIC:PARTITION"):
        parse_scope(["pay:x"])


def test_read_reset_file_both_csv_shapes(tmp_path):
    path = tmp_path / "plan.csv"
    path.write_text("orders,0,10\norders,1,20\n\ng1,pay,0,5\ng2,pay,0,7\n")
    assert read_reset_file(path, "g1") == {("orders", 0): 10, ("orders", 1): 20, ("pay", 0): 5}
    path.write_text("orders,zero,10\n")
    with pytest.raises(GroupError, match=r"plan.csv:1: expected topic,partition,offset"):
        read_reset_file(path, "g1")


# --- against a real broker ------------------------------------------------------------------------

import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from cli_in_process import run_kcli  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from conftest import KCLI, kcli_env  # noqa: E402

HOUR_MS = 3_600_000


def kcli(broker, *args: str) -> subprocess.CompletedProcess:
    """`kcli groups ARGS -b BOOTSTRAP` through kcli.cli.main.main in this process."""
    return run_kcli("groups", *args, "-b", broker.bootstrap)


def kcli_process(broker, *args: str) -> subprocess.CompletedProcess:
    """`kcli groups ARGS -b BOOTSTRAP` as a real `python -m kcli` process: the entry point as installed."""
    return subprocess.run(
        [*KCLI, "groups", *args, "-b", broker.bootstrap],
        env=kcli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def json_lines(result: subprocess.CompletedProcess) -> list[dict]:
    assert result.returncode in (0, 1), result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def seed(broker, topic: str = "orders", *, per_partition: int = 10, age_ms: int = HOUR_MS) -> int:
    """`per_partition` records in each of 3 partitions, record i stamped `age_ms` ago plus i seconds."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    start = int(time.time() * 1000) - age_ms
    for partition in range(3):
        for i in range(per_partition):
            producer.produce(topic, value=b"v", partition=partition, timestamp=start + i * 1000)
    assert producer.flush(30) == 0
    return start


def commit(broker, group: str, offsets: dict[tuple[str, int], int]) -> Consumer:
    """An active member of `group` (subscribed, assigned) that has committed `offsets`."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(sorted({t for t, _ in offsets}))
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment(), "the consumer was never assigned partitions"
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    return consumer


def test_list_describe_lag_and_delete(broker_factory):
    broker = broker_factory(overrides=["group.initial.rebalance.delay.ms=0"])
    start = seed(broker)
    consumer = commit(broker, "billing", {("orders", 0): 4, ("orders", 1): 10})

    (listed,) = json_lines(kcli_process(broker, "list", "-o", "json"))
    assert listed == {"group": "billing", "protocol_type": "consumer", "state": "Stable", "coordinator": 1}
    assert "billing" in kcli(broker, "list").stdout

    before = time.time() * 1000
    (described,) = json_lines(kcli(broker, "describe", "billing", "-o", "json"))
    after = time.time() * 1000
    assert described["state"] == "Stable" and len(described["members"]) == 1
    rows = {p["partition"]: p for p in described["partitions"]}
    # Lag by hand: end offset (10 per partition) minus the committed offset; no commit -> no lag.
    assert [(rows[p]["current_offset"], rows[p]["log_end_offset"], rows[p]["lag"]) for p in (0, 1, 2)] == [
        (4, 10, 6),
        (10, 10, 0),
        (None, 10, None),
    ]
    assert described["total_lag"] == 6
    # Partition 0's first unconsumed record is record 4, stamped start + 4 s.
    assert (before - start - 4000) / 1000 <= rows[0]["lag_seconds"] <= (after - start - 4000) / 1000
    assert rows[1]["lag_seconds"] == 0.0
    assert {rows[p]["member_id"] for p in (0, 1, 2)} == {described["members"][0]["member_id"]}

    # The text is kafka-consumer-groups.sh --describe's: a blank line, the header, a row per partition
    # (committed or assigned), no summary line and no LAG-SECONDS (those are in the JSON above).
    text = kcli(broker, "describe", "billing").stdout.splitlines()
    assert text[0] == "" and text[1].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"
    ]  # fmt: skip
    member = described["members"][0]
    assert sorted(line.split() for line in text[2:]) == [
        ["billing", "orders", str(p), current, "10", lag, member["member_id"], member["host"], member["client_id"]]
        for p, current, lag in ((0, "4", "6"), (1, "10", "0"), (2, "-", "-"))
    ]  # fmt: skip
    members = kcli(broker, "describe", "billing", "--members").stdout.splitlines()
    assert [line.split() for line in members] == [
        [],
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
        ["billing", member["member_id"], member["host"], member["client_id"], "3"],
    ]
    state = kcli(broker, "describe", "billing", "--state").stdout.splitlines()
    assert [line.split() for line in state] == [
        [],
        ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        ["billing", broker.bootstrap, "(1)", "range", "Stable", "1"],
    ]
    both = kcli(broker, "describe", "billing", "--members", "--state")
    assert both.returncode == 2 and both.stderr == "kcli: give at most one of --members and --state.\n"

    refused = kcli(broker, "delete", "billing")
    assert refused.returncode == 1 and "the group is not empty" in refused.stderr
    consumer.close()

    missing = kcli(broker, "describe", "nobody")
    assert missing.returncode == 1 and "consumer group 'nobody' does not exist" in missing.stderr
    deleted = kcli(broker, "delete", "billing", "nobody")
    assert deleted.returncode == 1
    assert "Deletion of requested consumer group 'billing' was successful." in deleted.stdout
    assert "cannot delete consumer group 'nobody': the group does not exist." in deleted.stderr
    assert json_lines(kcli(broker, "list", "-o", "json")) == []


def test_reset_offsets_scenarios(broker_factory, tmp_path):
    broker = broker_factory(overrides=["group.initial.rebalance.delay.ms=0"])
    start = seed(broker)
    consumer = commit(broker, "etl", {("orders", 0): 5, ("orders", 1): 7, ("orders", 2): 9})

    active = kcli_process(broker, "reset-offsets", "etl", "--to-earliest")
    assert active.returncode != 0
    assert (
        "Assignments can only be reset if the group 'etl' is inactive, but the current state is Stable."
        in active.stderr
    )
    consumer.close()

    def plan_of(group: str, *args: str) -> dict[int, int]:
        rows = json_lines(kcli(broker, "reset-offsets", group, *args, "-o", "json"))
        return {r["partition"]: r["new_offset"] for r in rows}

    def plan(*args: str) -> dict[int, int]:
        return plan_of("etl", *args)

    def committed() -> dict[int, int]:
        (d,) = json_lines(kcli(broker, "describe", "etl", "-o", "json"))
        return {p["partition"]: p["current_offset"] for p in d["partitions"]}

    assert plan("--to-earliest") == {0: 0, 1: 0, 2: 0}
    assert committed() == {0: 5, 1: 7, 2: 9}, "a dry run must not commit"
    assert plan("--to-latest", "--topic", "orders:1") == {1: 10}
    assert plan("--to-offset", "42") == {0: 10, 1: 10, 2: 10}, "clamped to the log end"
    assert plan("--shift-by", "-6") == {0: 0, 1: 1, 2: 3}, "clamped to the log start"
    assert plan("--to-current") == {0: 5, 1: 7, 2: 9}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((start + 3000) / 1000)) + "Z"
    assert plan("--to-datetime", stamp) == {0: 3, 1: 3, 2: 3}
    assert plan("--by-duration", "PT1M") == {0: 10, 1: 10, 2: 10}, "nothing that recent: the log end"
    csv = tmp_path / "plan.csv"
    csv.write_text("orders,0,2\norders,2,8\n")
    assert plan("--from-file", str(csv)) == {0: 2, 2: 8}

    explicit = kcli(
        broker, "reset-offsets", "etl", "--to-earliest", "--dry-run"
    )  # as scripts for Kafka's tool say
    assert explicit.returncode == 0 and explicit.stderr == "", explicit.stderr
    assert [line.split()[-1] for line in explicit.stdout.splitlines()[2:]] == ["0", "0", "0"]
    conflicting = kcli(broker, "reset-offsets", "etl", "--to-earliest", "--dry-run", "--execute")
    assert (
        conflicting.returncode == 2
        and conflicting.stderr == "kcli: give one of --execute and --dry-run, not both.\n"
    )
    exported = kcli(broker, "reset-offsets", "etl", "--shift-by", "1", "--export")
    assert exported.stdout == "orders,0,6\norders,1,8\norders,2,10\n"
    both = kcli(broker, "reset-offsets", "etl", "--to-earliest", "--to-latest")
    assert both.returncode == 2 and "give exactly one of" in both.stderr

    assert plan("--shift-by", "-2", "--execute") == {0: 3, 1: 5, 2: 7}
    assert committed() == {0: 3, 1: 5, 2: 7}
    fresh = kcli(broker, "reset-offsets", "new-group", "--to-earliest")
    assert fresh.returncode == 0 and fresh.stdout.count("\n") == 2  # a blank line and the header only
    assert "group 'new-group' has no committed offsets in scope (name topics with --topic)" in fresh.stderr
    assert plan_of("new-group", "--to-earliest", "--topic", "orders:2") == {2: 0}
    unknown = kcli(broker, "reset-offsets", "etl", "--to-earliest", "--topic", "nope")
    assert unknown.returncode != 0 and "topic 'nope' does not exist." in unknown.stderr


def test_describe_watch_redraws_on_a_terminal_and_repeats_in_a_pipe(broker_factory):
    import os
    import pty
    import select
    import signal

    broker = broker_factory(overrides=["group.initial.rebalance.delay.ms=0"])
    seed(broker, per_partition=2)
    commit(broker, "watched", {("orders", 0): 1}).close()
    args = [*KCLI, "groups", "describe", "watched", "--watch", "--interval", "0.3", "-b", broker.bootstrap]

    def capture(stdout: int, read_fd: int) -> str:
        process = subprocess.Popen(
            args, stdout=stdout, stderr=subprocess.PIPE, env={**kcli_env(), "TERM": "xterm"}
        )
        os.close(stdout)
        chunks, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline and "".join(chunks).count("LOG-END-OFFSET") < 3:
            if select.select([read_fd], [], [], 0.5)[0]:
                try:
                    chunks.append(os.read(read_fd, 65536).decode(errors="replace"))
                except OSError:
                    break
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 130, process.stderr.read()
        os.close(read_fd)
        return "".join(chunks)

    read_fd, write_fd = os.pipe()
    piped = capture(write_fd, read_fd)
    assert piped.count("\nGROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET") >= 3
    assert "\x1b[" not in piped, "no terminal control codes in a pipe"

    leader, follower = pty.openpty()
    drawn = capture(follower, leader)
    assert drawn.count("LOG-END-OFFSET") >= 3
    assert "\x1b[" in drawn, "a terminal is redrawn in place"
