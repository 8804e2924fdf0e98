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
