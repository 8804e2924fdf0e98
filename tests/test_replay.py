"""`kcli replay`: fixture segments of every magic x codec replayed into a real broker and read back with
confluent-kafka; the offset map, filters, partitioners, corrupt and missing sources, and a replay killed
with SIGKILL then resumed from its checkpoint (no duplicates, no gaps)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from conftest import KCLI, REPO, BrokerProcess, kcli_env, start_broker, stop_cleanly
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from waiting import wait_for

from formats.compression import Codec
from formats.errors import CorruptRecordError
from formats.records import RecordSpec, build_batch, read_batch, rewrite_producer_state, set_producer_state
from formats.segment import walk
from kcli.cli.replay import parse_rate
from ops.replay import (
    Mapping,
    Mode,
    ReplayError,
    ReplayOptions,
    find_sources,
    java_murmur2,
    partition_for_key,
    replay,
)

pytestmark = pytest.mark.timeout(120)

FIXTURES = REPO / "fixtures" / "logdir"
DATA_TOPICS = [
    f"m{magic}-{codec}"
    for magic, codecs in (
        (0, "none gzip snappy lz4"),
        (1, "none gzip snappy lz4"),
        (2, "none gzip snappy lz4 zstd"),
    )
    for codec in codecs.split()
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("broker"), overrides=["auto.create.topics.enable=false"])
    try:
        yield process
    finally:
        stop_cleanly(process)


# ---------------------------------------------------------------------------------------------------
# Pieces without a broker
# ---------------------------------------------------------------------------------------------------


def test_murmur2_matches_kafkas_own_test_values() -> None:
    # clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java testMurmur2
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {key: java_murmur2(key) for key in cases} == cases


@given(st.binary(max_size=64), st.integers(1, 1000))
@settings(max_examples=300, deadline=None)
def test_key_partitioner_agrees_with_kafka_python(key: bytes, partitions: int) -> None:
    # kafka-python's murmur2 answers the same hash as an unsigned 32-bit value
    assert java_murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**40),
            st.none() | st.binary(max_size=20),
            st.none() | st.binary(max_size=200),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(list(Codec)),
    st.booleans(),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**15 - 1),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, deadline=None)
def test_rewrite_producer_state_keeps_records_and_makes_a_valid_crc(
    records: list, codec: Codec, transactional: bool, producer_id: int, epoch: int, sequence: int
) -> None:
    specs = [RecordSpec(ts, k, v, h) for ts, k, v, h in records]
    original = build_batch(
        specs, base_offset=77, partition_leader_epoch=5, codec=codec, is_transactional=transactional
    )
    rewritten = rewrite_producer_state(
        original, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )
    before, after = read_batch(original), read_batch(bytes(rewritten))
    assert after.crc_valid
    assert (after.producer_id, after.producer_epoch, after.base_sequence) == (producer_id, epoch, sequence)
    assert (after.base_offset, after.partition_leader_epoch, after.is_transactional) == (0, -1, False)
    assert after.compression is codec
    assert bytes(rewritten[61:]) == original[61:]  # the records are not touched
    assert [tuple(r)[1:] for r in after.records(bytes(rewritten))] == [
        tuple(r)[1:] for r in before.records(original)
    ]


def test_rewrite_producer_state_refuses_what_is_not_one_whole_v2_batch() -> None:
    batch = build_batch([RecordSpec(1, b"k", b"v")])
    with pytest.raises(CorruptRecordError, match="whole magic v2"):
        rewrite_producer_state(batch[:40], producer_id=1, producer_epoch=0, base_sequence=0)
    with pytest.raises(CorruptRecordError, match="declares"):
        rewrite_producer_state(batch + b"\0", producer_id=1, producer_epoch=0, base_sequence=0)


def test_set_producer_state_stamps_the_buffer_itself_as_rewrite_copies_it() -> None:
    batch = build_batch([RecordSpec(1, b"k", b"v"), RecordSpec(2, None, b"w")], is_transactional=True)
    buffer = bytearray(batch)
    set_producer_state(buffer, producer_id=9, producer_epoch=2, base_sequence=40, is_transactional=True)
    assert buffer == rewrite_producer_state(
        batch, producer_id=9, producer_epoch=2, base_sequence=40, is_transactional=True
    )
    stamped = read_batch(bytes(buffer))
    assert stamped.crc_valid and stamped.is_transactional and stamped.base_sequence == 40
    with pytest.raises(CorruptRecordError, match="declares"):
        set_producer_state(bytearray(batch) + b"\0", producer_id=1, producer_epoch=0, base_sequence=0)


def test_rate_is_bytes_per_second_with_decimal_and_binary_units() -> None:
    assert parse_rate("5000") == 5000
    assert parse_rate("20MB") == 20e6
    assert parse_rate("64MiB") == 64 << 20
    assert parse_rate("1.5k/s") == 1500
    with pytest.raises(Exception, match="not a positive number of bytes per second"):
        parse_rate("fast")


def test_sources_from_a_segment_a_partition_dir_a_log_dir_and_an_archive(tmp_path: Path) -> None:
    [one] = find_sources(FIXTURES / "m2-lz4-0" / "00000000000000000024.log")
    assert (one.topic, one.partition, [p.name for p in one.segments]) == (
        "m2-lz4",
        0,
        ["00000000000000000024.log"],
    )
    [part] = find_sources(FIXTURES / "m2-lz4-0")
    assert [p.name for p in part.segments] == ["00000000000000000000.log", "00000000000000000024.log"]
    with pytest.raises(ReplayError, match="pick one with --source-topic"):
        find_sources(FIXTURES)
    assert [s.name for s in find_sources(FIXTURES, "m1-gzip")] == ["m1-gzip-0"]
    # an archive of two brokers' log dirs: the copy that reaches further wins
    for broker, segments in (("broker-1", 1), ("broker-2", 2)):
        target = tmp_path / broker / "orders-0"
        target.mkdir(parents=True)
        for log in sorted((FIXTURES / "m2-none-0").glob("*.log"))[:segments]:
            shutil.copy(log, target / log.name)
    [archived] = find_sources(tmp_path)
    assert archived.segments[0].parent.parent.name == "broker-2" and len(archived.segments) == 2
    with pytest.raises(ReplayError, match="no partition 3"):
        find_sources(tmp_path, partitions=(3,))
    with pytest.raises(ReplayError, match="no such file or directory"):
        find_sources(tmp_path / "nowhere")


# ---------------------------------------------------------------------------------------------------
# Into a real broker
# ---------------------------------------------------------------------------------------------------


def test_every_magic_and_codec_replays_record_for_record(server: BrokerProcess, tmp_path: Path) -> None:
    create_topics(server, {f"copy-{t}": 1 for t in DATA_TOPICS})
    for topic in DATA_TOPICS:
        stats = run(server, FIXTURES / f"{topic}-0", f"copy-{topic}", offset_map=tmp_path / f"{topic}.jsonl")
        assert stats.records == 48 and stats.idempotent
        if topic.startswith("m2"):
            assert (stats.raw_batches, stats.rebuilt_batches) == (8, 0)  # v2 batches go as they are
        else:
            assert stats.raw_batches == 0
    everything = consume_topics(server, {f"copy-{t}": 1 for t in DATA_TOPICS}, 48 * len(DATA_TOPICS))
    for topic in DATA_TOPICS:
        offset_map = tmp_path / f"{topic}.jsonl"
        source = source_records(FIXTURES / f"{topic}-0")
        consumed = everything[(f"copy-{topic}", 0)]
        assert [r[1:] for r in consumed] == [r[1:] for r in source], topic  # key, value, headers, timestamp
        mapping = expand_offset_map(offset_map)
        assert sorted(mapping) == sorted((topic, 0, r[0]) for r in source)
        by_offset = {r[0]: r for r in consumed}
        for (_, _, source_offset), (_, dest_offset) in zip(mapping, mapping.values(), strict=True):
            expected = next(r for r in source if r[0] == source_offset)
            assert by_offset[dest_offset][1:] == expected[1:]


def test_compacted_source_keeps_its_offsets_in_the_map(server: BrokerProcess, tmp_path: Path) -> None:
    create_topics(server, {"copy-compacted": 1})
    offset_map = tmp_path / "map.jsonl"
    stats = run(server, FIXTURES / "compacted-0", "copy-compacted", offset_map=offset_map)
    source = source_records(FIXTURES / "compacted-0")
    consumed = consume(server, "copy-compacted", {0: len(source)})
    assert [r[1:] for r in consumed] == [r[1:] for r in source]
    assert stats.rebuilt_batches >= 1  # batches with offset gaps cannot go raw
    mapping = expand_offset_map(offset_map)
    assert [k[2] for k in mapping] == [r[0] for r in source]  # the source's own, gapped offsets
    assert [v[1] for v in mapping.values()] == list(range(len(source)))


def test_transactions_markers_are_left_out_and_committed_only_drops_the_aborted(
    server: BrokerProcess,
) -> None:
    create_topics(server, {"txn-all": 1, "txn-committed": 1})
    everything = run(server, FIXTURES / "transactions-0", "txn-all")
    committed = run(server, FIXTURES / "transactions-0", "txn-committed", committed_only=True)
    assert (everything.records, everything.control_batches) == (9, 2)
    assert (committed.records, committed.aborted_records) == (5, 4)
    assert [r[1] for r in consume(server, "txn-committed", {0: 5})] == [
        r[1] for r in source_records(FIXTURES / "transactions-0")[:5]
    ]
    assert len(consume(server, "txn-all", {0: 9})) == 9  # plain records now: no transaction to read through


def test_key_partitioner_puts_records_where_a_java_producer_would(server: BrokerProcess) -> None:
    create_topics(server, {"by-key": 3})
    stats = run(server, FIXTURES / "m2-snappy-0", "by-key", mapping=Mapping.KEY)
    assert stats.raw_batches == 0
    source = source_records(FIXTURES / "m2-snappy-0")
    keyed = [r for r in source if r[1] is not None]
    counts = {p: 0 for p in range(3)}
    for r in keyed:
        counts[(kafka_python_murmur2(r[1]) & 0x7FFFFFFF) % 3] += 1
    nulls = len(source) - len(keyed)
    consumed = consume_partitions(server, "by-key", 3, len(source))
    for partition, records in consumed.items():
        keys = [r[1] for r in records if r[1] is not None]
        assert len(keys) == counts[partition]
        assert all((kafka_python_murmur2(k) & 0x7FFFFFFF) % 3 == partition for k in keys)
        # per key, the source order is kept
        assert keys == [r[1] for r in keyed if (kafka_python_murmur2(r[1]) & 0x7FFFFFFF) % 3 == partition]
    assert sum(1 for rs in consumed.values() for r in rs if r[1] is None) == nulls


def test_round_robin_spreads_whole_batches_in_raw_mode(server: BrokerProcess) -> None:
    create_topics(server, {"spread": 2})
    stats = run(server, FIXTURES / "m2-gzip-0", "spread", mapping=Mapping.ROUND_ROBIN)
    assert (stats.raw_batches, stats.records) == (8, 48)
    consumed = consume_partitions(server, "spread", 2, 48)
    assert [len(consumed[0]), len(consumed[1])] == [24, 24]


def test_filters_by_offset_time_and_key(server: BrokerProcess, tmp_path: Path) -> None:
    create_topics(server, {"f-offsets": 1, "f-time": 1, "f-key": 1})
    source = source_records(FIXTURES / "m2-none-0")
    offset_map = tmp_path / "offsets.jsonl"
    stats = run(
        server, FIXTURES / "m2-none-0", "f-offsets", from_offset=4, to_offset=40, offset_map=offset_map
    )
    assert stats.records == 36
    assert stats.raw_batches == 5 and stats.rebuilt_batches == 2  # batches cut by a bound are rebuilt
    assert [r[1:] for r in consume(server, "f-offsets", {0: 36})] == [r[1:] for r in source[4:40]]
    assert [k[2] for k in expand_offset_map(offset_map)] == list(range(4, 40))

    start, end = source[10][4], source[20][4]
    stats = run(server, FIXTURES / "m2-none-0", "f-time", from_time=start, to_time=end)
    assert stats.records == 10 and stats.raw_batches == 0
    assert [r[4] for r in consume(server, "f-time", {0: 10})] == [r[4] for r in source[10:20]]

    stats = run(server, FIXTURES / "m2-none-0", "f-key", key_regex=r"customer-[12]$")
    wanted = [r for r in source if r[1] in (b"customer-1", b"customer-2")]
    assert stats.records == len(wanted)
    assert [r[1:] for r in consume(server, "f-key", {0: len(wanted)})] == [r[1:] for r in wanted]


def test_dry_run_plans_and_sends_nothing(server: BrokerProcess) -> None:
    create_topics(server, {"dry": 1})
    planned = []
    stats = replay(
        ReplayOptions(FIXTURES / "m1-lz4-0", "dry", server.bootstrap, dry_run=True),
        warn=pytest.fail,
        on_planned=planned.append,
    )
    assert stats.records == 48 and sum(p.records for p in planned) == 48
    assert not any(p.raw for p in planned)
    assert (planned[0].source, planned[0].first_offset, planned[0].partition) == ("m1-lz4-0", 0, 0)
    assert end_offsets(server, "dry", 1) == [0]


def test_mode_raw_refuses_what_it_cannot_send_and_a_missing_topic_is_named(server: BrokerProcess) -> None:
    create_topics(server, {"raw-only": 1})
    with pytest.raises(ReplayError, match="magic v1 message, which --mode raw cannot send"):
        run(server, FIXTURES / "m1-none-0", "raw-only", mode=Mode.RAW)
    with pytest.raises(ReplayError, match="topic 'absent' does not exist"):
        run(server, FIXTURES / "m2-none-0", "absent", create_topic=False)
    create_topics(server, {"too-few": 1})
    sources = REPO / "fixtures" / "logdir"
    with pytest.raises(ReplayError, match="pick one with --source-topic"):
        run(server, sources, "too-few")


def two_partition_source(tmp_path: Path) -> Path:
    """A log dir holding partitions 0 and 2 of topic "src" (48 records each): a destination needs 3."""
    logdir = tmp_path / "logdir"
    shutil.copytree(FIXTURES / "m2-none-0", logdir / "src-0")
    shutil.copytree(FIXTURES / "m2-gzip-0", logdir / "src-2")
    return logdir


def replay_cli(broker: BrokerProcess, source: Path, topic: str, *args: str) -> subprocess.CompletedProcess:
    """`kcli replay` through kcli.cli.main.main in this process (test_cli_prints_a_summary_and_json and
    the interrupted runs use real `python -m kcli` processes)."""
    return run_kcli("replay", str(source), "-b", broker.bootstrap, "-t", topic, *args)


def test_a_missing_destination_is_created_with_create_topics(broker_factory, tmp_path: Path) -> None:
    # auto-creation on and num.partitions=1: a topic made by Metadata auto-creation would have 1 partition
    broker = broker_factory(overrides=["auto.create.topics.enable=true", "num.partitions=1"])
    source = two_partition_source(tmp_path)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    refused = replay_cli(broker, source, "kept-out", "--no-create-topic")
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"kcli: topic 'kept-out' does not exist on {broker.bootstrap} and --no-create-topic was given: "
        "create it with at least 3 partition(s)."
    ]
    dry = replay_cli(broker, source, "planned", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stderr.splitlines() == [
        "topic planned does not exist: the replay would create it with 3 partitions, replication factor "
        "the broker's default."
    ]
    assert dry.stdout.splitlines()[-1].startswith("would replay 96 records")
    assert {"kept-out", "planned"}.isdisjoint(admin.list_topics(timeout=30).topics)

    done = replay_cli(broker, source, "restored", "--no-idempotence")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["created topic restored with 3 partitions, replication factor 1."]
    assert len(admin.list_topics(timeout=30).topics["restored"].partitions) == 3
    consumed = consume_partitions(broker, "restored", 3, 96)
    assert [r[1:] for r in consumed[0]] == [r[1:] for r in source_records(source / "src-0")]
    assert consumed[1] == []
    assert [r[1:] for r in consumed[2]] == [r[1:] for r in source_records(source / "src-2")]

    keyed = replay_cli(
        broker, source, "by-key-new", "--partitioner", "key", "--replication-factor", "1",
        "--config", "retention.ms=-1", "--config", "cleanup.policy=delete",
    )  # fmt: skip
    assert keyed.returncode == 0, keyed.stderr
    assert "created topic by-key-new with 3 partitions, replication factor 1." in keyed.stderr.splitlines()
    resource = ConfigResource("TOPIC", "by-key-new")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "-1" and not configs["retention.ms"].is_default
    assert sum(end_offsets(broker, "by-key-new", 3)) == 96

    refused = replay_cli(broker, source, "x", "--no-create-topic", "--config", "retention.ms=1")
    assert refused.returncode != 0
    assert refused.stderr.splitlines() == [
        "kcli: --replication-factor and --config apply to a topic replay creates: drop --no-create-topic."
    ]


def test_an_existing_topic_with_too_few_partitions_for_same_stays_an_error(
    server: BrokerProcess, tmp_path: Path
) -> None:
    create_topics(server, {"narrow": 2})
    result = replay_cli(server, two_partition_source(tmp_path), "narrow")
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "kcli: topic 'narrow' has 2 partition(s), too few for source partition src-2 with --partitioner same."
    ]
    assert end_offsets(server, "narrow", 2) == [0, 0]


def test_corrupt_batches_are_reported_with_their_position_and_can_be_skipped(
    server: BrokerProcess, tmp_path: Path
) -> None:
    create_topics(server, {"corrupt-skipped": 1, "corrupt-refused": 1})
    part = tmp_path / "orders-0"
    shutil.copytree(FIXTURES / "m2-none-0", part)
    segment = part / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    second = walk(bytes(data)).batches[1].position
    data[second + 70] ^= 0xFF  # a record byte of the second batch: its CRC no longer matches
    third = walk(bytes(data), check_crc=False).batches[2].position
    data[third + 8 : third + 12] = (3).to_bytes(4, "big")  # the third batch's size can no longer be framed
    segment.write_bytes(bytes(data))
    with pytest.raises(
        ReplayError, match=rf"{segment}: corrupt data at position {second}: Record is corrupt"
    ):
        run(server, part, "corrupt-refused")
    warnings: list[str] = []
    stats = run(server, part, "corrupt-skipped", skip_corrupt=True, warn=warnings.append)
    # batch 1 kept, batch 2 (bad CRC) skipped, batches 3-4 lost with the unframeable rest; segment 2 whole
    assert stats.records == 6 + 24 and stats.corrupt_batches == 2
    assert f"at position {second}" in warnings[0] and f"at position {third}" in warnings[1]
    assert "Found record size 3 smaller than minimum record overhead" in warnings[1]
    source = source_records(FIXTURES / "m2-none-0")
    assert [r[2] for r in consume(server, "corrupt-skipped", {0: 30})] == [
        r[2] for r in source[:6] + source[24:]
    ]


def test_a_missing_segment_is_named_and_a_missing_source_is_one_line(
    server: BrokerProcess, tmp_path: Path
) -> None:
    part = tmp_path / "orders-0"
    part.mkdir()
    for segment in (FIXTURES / "m2-none-0").glob("*.log"):
        shutil.copy(segment, part / segment.name)
    shutil.copy(part / "00000000000000000024.log", part / "00000000000000000100.log")
    create_topics(server, {"gappy": 1})
    warnings: list[str] = []
    run(server, part, "gappy", warn=warnings.append)
    assert any("offsets 48..99 of orders-0 are in no segment" in w for w in warnings)
    result = subprocess.run(
        [*KCLI, "replay", str(tmp_path / "gone"), "-b", server.bootstrap, "-t", "gappy"],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (
        2,
        f"kcli: {tmp_path / 'gone'}: no such file or directory.\n",
    )


def test_a_replay_killed_midway_resumes_without_duplicates_or_gaps(
    server: BrokerProcess, tmp_path: Path
) -> None:
    create_topics(server, {"resumed": 2})
    source = tmp_path / "events-0"
    source.mkdir()
    total = write_numbered_segment(source / "00000000000000000000.log", batches=400, per_batch=25)
    checkpoint, offset_map = tmp_path / "replay.checkpoint", tmp_path / "map.jsonl"
    command = [
        *KCLI, "replay", str(source), "-b", server.bootstrap, "-t", "resumed", "--partitioner", "key",
        "--checkpoint", str(checkpoint), "--offset-map", str(offset_map), "--batch-bytes", "2000",
    ]  # fmt: skip
    slow = subprocess.Popen(
        [*command, "--rate", "20000"], env=kcli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wait_for(
        "20 acknowledged batches in the checkpoint",
        lambda: checkpoint.exists() and sum(acked_batches(checkpoint).values()) >= 20,
        30,
        0.05,
    )
    time.sleep(0.25)  # half a checkpoint interval: batches acknowledged after the last checkpoint
    os.kill(slow.pid, signal.SIGKILL)
    slow.wait()
    state = orjson.loads(checkpoint.read_bytes())
    assert sum(acked_batches(checkpoint).values()) >= 20 and not state["complete"]
    time.sleep(0.3)  # whatever the killed process had sent reaches the log
    past_checkpoint = sum(end_offsets(server, "resumed", 2)) - sum(
        d["nextOffset"] for d in state["destination"].values()
    )
    resumed = subprocess.run(command, env=kcli_env(), capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert "already replayed" in resumed.stdout
    if past_checkpoint:  # counted from the log end offsets, never sent again
        assert (
            f"the destination holds {past_checkpoint} record(s) sent after the last checkpoint"
            in resumed.stderr
        )
    assert orjson.loads(checkpoint.read_bytes())["complete"]
    consumed = consume_partitions(server, "resumed", 2, total)
    values = sorted(int(r[2]) for rs in consumed.values() for r in rs)
    assert values == list(range(total))  # each record exactly once
    for records in consumed.values():
        numbers = [int(r[2]) for r in records]
        assert numbers == sorted(numbers)  # in source order within each partition
    mapping = expand_offset_map(offset_map)
    assert sorted(k[2] for k in mapping) == list(range(total))
    by_place = {(p, r[0]): int(r[2]) for p, rs in consumed.items() for r in rs}
    assert all(by_place[dest] == key[2] for key, dest in mapping.items())


def test_a_broker_restart_midway_is_retried_without_duplicates_or_gaps(tmp_path: Path) -> None:
    first = start_broker(tmp_path / "b1")
    create_topics(first, {"restarted": 1})
    source = tmp_path / "events-0"
    source.mkdir()
    total = write_numbered_segment(source / "00000000000000000000.log", batches=400, per_batch=25)
    checkpoint = tmp_path / "replay.checkpoint"
    command = [
        *KCLI, "replay", str(source), "-b", first.bootstrap, "-t", "restarted", "--checkpoint", str(checkpoint),
        "--rate", "40000",
    ]  # fmt: skip
    running = subprocess.Popen(
        command, env=kcli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    second = None
    try:
        wait_for(
            "40 acknowledged batches in the checkpoint",
            lambda: sum(acked_batches(checkpoint).values()) >= 40,
            30,
            0.05,
        )
        assert not orjson.loads(checkpoint.read_bytes())["complete"]
        stop_cleanly(first)
        second = start_broker(tmp_path / "b2", data_dir=first.data_dir, listen=first.bootstrap)
        stdout, stderr = running.communicate(timeout=60)
        assert running.returncode == 0, stderr
        assert f"replayed {total} records" in stdout
        values = [int(r[2]) for r in consume(second, "restarted", {0: total})]
        assert values == list(range(total))
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
        if second is not None:
            stop_cleanly(second)
        elif first.is_running():
            stop_cleanly(first)


def test_parquet_offset_map(server: BrokerProcess, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    create_topics(server, {"parquet": 1})
    path = tmp_path / "map.parquet"
    run(server, FIXTURES / "m2-lz4-0", "parquet", offset_map=path)
    table = pq.read_table(path).to_pylist()
    assert [(r["sourceOffset"], r["offset"], r["count"]) for r in table] == [
        (6 * i, 6 * i, 6) for i in range(8)
    ]
    assert not (tmp_path / "map.parquet.jsonl").exists()


def test_cli_prints_a_summary_and_json(server: BrokerProcess) -> None:
    create_topics(server, {"cli": 1})
    result = subprocess.run(
        [*KCLI, "replay", str(FIXTURES / "m2-zstd-0"), "-b", server.bootstrap, "-t", "cli", "-o", "json",
         "--no-idempotence"],
        capture_output=True, text=True, env=kcli_env(), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = orjson.loads(result.stdout)
    assert (summary["type"], summary["records"], summary["rawBatches"], summary["idempotent"]) == (
        "summary",
        48,
        8,
        False,
    )


def test_a_destination_without_idempotence_gets_one_warning_or_a_refusal(tmp_path: Path) -> None:
    """A cluster that does not offer InitProducerId (an old Kafka): by default replay says so once and
    goes on without idempotence; asked for it with --idempotence, it refuses before sending anything."""
    import asyncio
    import threading

    from kcli.broker.apis import build_registry
    from kcli.broker.apis.registry import ApiRegistry
    from kcli.broker.server import Broker
    from kcli.config import BrokerConfig

    registry = ApiRegistry(spec for spec in build_registry() if spec.api_key != 22)  # no InitProducerId
    ready, state = threading.Event(), {}

    async def serve() -> None:
        config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data")})
        broker = Broker(config, registry=registry)
        host, port = await broker.start()
        state["bootstrap"], state["loop"], state["stop"] = (
            f"{host}:{port}",
            asyncio.get_running_loop(),
            asyncio.Event(),
        )
        ready.set()
        await state["stop"].wait()
        await broker.shutdown(grace=5)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    bootstrap = state["bootstrap"]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("old", 1, 1)])["old"].result(15)
        source = str(FIXTURES / "m2-zstd-0")
        refused = run_kcli("replay", source, "-b", bootstrap, "-t", "old", "--idempotence")
        assert refused.returncode != 0 and refused.stderr.count("\n") == 1, refused.stderr
        assert "InitProducerId" in refused.stderr or "idempoten" in refused.stderr
        assert end_offset(bootstrap, "old") == 0, "nothing was sent"

        warned = run_kcli("replay", source, "-b", bootstrap, "-t", "old", "-o", "json")
        assert warned.returncode == 0, warned.stderr
        assert len([line for line in warned.stderr.splitlines() if "idempoten" in line]) == 1, warned.stderr
        assert orjson.loads(warned.stdout)["idempotent"] is False
        assert end_offset(bootstrap, "old") == 48
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(15)


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offset"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------------


def run(server: BrokerProcess, source: Path, topic: str, *, warn=None, **options):
    return replay(
        ReplayOptions(source, topic, server.bootstrap, **options),
        warn=warn if warn is not None else (lambda line: None),
    )


def create_topics(server: BrokerProcess, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
        future.result(30)


def source_records(partition_dir: Path) -> list[tuple]:
    """(offset, key, value, headers, timestamp) of every data record, decoded by formats."""
    out = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for batch in walk(data).batches:
            if batch.is_control:
                continue
            for r in batch.records(data):
                out.append((r.offset, r.key, r.value, list(r.headers), r.timestamp))
    return out


def consume(server: BrokerProcess, topic: str, counts: dict[int, int]) -> list[tuple]:
    """(offset, key, value, headers, timestamp) as confluent-kafka reads them, partitions in turn."""
    consumed = consume_partitions(server, topic, max(counts) + 1, sum(counts.values()))
    return [r for p in sorted(counts) for r in consumed[p]]


def consume_partitions(
    server: BrokerProcess, topic: str, partitions: int, total: int
) -> dict[int, list[tuple]]:
    consumed = consume_topics(server, {topic: partitions}, total)
    return {p: consumed[(topic, p)] for p in range(partitions)}


def consume_topics(
    server: BrokerProcess, topics: dict[str, int], total: int
) -> dict[tuple[str, int], list[tuple]]:
    """Every record of the topics' partitions, read by one confluent-kafka consumer from offset 0."""
    consumer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "replay-tests", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)])
    out: dict[tuple[str, int], list[tuple]] = {(t, p): [] for t, n in topics.items() for p in range(n)}
    deadline = time.monotonic() + 30
    n = 0
    try:
        while n < total and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.2):
                assert m.error() is None, m.error()
                headers = [(k, v) for k, v in (m.headers() or [])]
                out[(m.topic(), m.partition())].append(
                    (m.offset(), m.key(), m.value(), headers, m.timestamp()[1])
                )
                n += 1
        assert not [m for m in consumer.consume(10, 0.1) if m.error() is None]  # nothing more than expected
    finally:
        consumer.close()
    assert n == total
    return out


def end_offsets(server: BrokerProcess, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "replay-tests"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def expand_offset_map(path: Path) -> dict[tuple[str, int, int], tuple[int, int]]:
    """(source topic, partition, offset) -> (partition, offset), one entry per record, in file order."""
    out: dict[tuple[str, int, int], tuple[int, int]] = {}
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        for i in range(row["count"]):
            key = (row["sourceTopic"], row["sourcePartition"], row["sourceOffset"] + i)
            assert key not in out, f"{key} mapped twice"
            out[key] = (row["partition"], row["offset"] + i)
    return out


def acked_batches(checkpoint: Path) -> dict[str, int]:
    try:
        state = orjson.loads(checkpoint.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return {p: d["ackedBatches"] for p, d in state["destination"].items()}


def write_numbered_segment(path: Path, *, batches: int, per_batch: int) -> int:
    """Batches whose record values count 0, 1, 2 ...; keys spread over 7 values."""
    offset = 0
    with open(path, "wb") as f:
        for _ in range(batches):
            specs = [
                RecordSpec(1_700_000_000_000 + offset + i, b"k%d" % ((offset + i) % 7), b"%d" % (offset + i))
                for i in range(per_batch)
            ]
            f.write(build_batch(specs, base_offset=offset, codec=Codec.LZ4))
            offset += per_batch
    return offset
