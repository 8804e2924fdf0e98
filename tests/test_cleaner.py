"""The log cleaner on real Log objects in temporary dirs: what a clean keeps, when it runs, crash safety.

- Many updates per key (any codec, tombstones among them) leave exactly the latest record per key, at
  its original offset, in batches that keep their base and last offsets (hypothesis).
- Tombstones stay with a delete horizon (now + delete.retention.ms) set in their batch, and go at the
  first clean after it; min.compaction.lag.ms holds young segments back, max.compaction.lag.ms forces
  old ones through; only logs above min.cleanable.dirty.ratio are chosen.
- Retained batches keep producer id, epoch, base sequence, leader epoch and codec; a producer's last
  batch stays as an empty batch when all its records are superseded; magic v0/v1 logs are cleaned.
- A tiny dedupe buffer cleans in several passes, each recorded in cleaner-offset-checkpoint.
- Every state a crash can leave between `.cleaned` and the end of the swap loads into a complete log.
- The LogManager's background cleaner swaps on the caller's thread; `kcli verify` calls the gaps
  compaction.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path

import pytest
from conftest import kcli_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from formats.compression import Codec
from formats.records import DELETE_HORIZON_BIT, RecordBatch, RecordSpec, build_batch
from formats.segment import walk
from kcli.broker.log import Log, LogConfig, LogManager
from kcli.broker.log.cleaner import Cleaner, CleanerConfig, Throttler
from kcli.broker.log.cleaner_manager import CLEANER_OFFSET_CHECKPOINT, log_to_clean
from kcli.broker.log.log_cleaner import LogCleaner
from kcli.broker.log.segment import Segment
from kcli.config import BrokerConfig

T0 = 1_700_000_000_000
DAY_MS = 24 * 3600 * 1000
TOPIC_ID = uuid.UUID("0e0c1f8a-2b44-4d8e-9a51-3c3f2d9b7a10")
CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def compact_config(**values: object) -> LogConfig:
    settings_ = {
        "cleanup.policy": ["compact"],
        "min.cleanable.dirty.ratio": 0.0,
        "file.delete.delay.ms": 0,
        "index.interval.bytes": 256,
    }
    settings_.update({k.replace("_", "."): v for k, v in values.items()})
    return LogConfig.from_values(settings_)


def new_log(dir: Path, clock: Clock, name: str = "topic-0", **values: object) -> Log:
    return Log.create(dir / name, compact_config(**values), TOPIC_ID, clock=clock)


def log_cleaner(dir: Path, clock: Clock, *logs: Log, **config: object) -> LogCleaner:
    cleaner = LogCleaner(CleanerConfig(**config), [dir], logs=lambda: list(logs), clock=clock)  # type: ignore[arg-type]
    cleaner.startup()
    return cleaner


def append(log: Log, clock: Clock, specs: list[RecordSpec], **batch: object) -> None:
    """Append as leader, then raise the high watermark to the log end, as the only in-sync replica's
    Partition does (the Log never moves its own high watermark; the cleaner stops at it)."""
    log.append_as_leader(build_batch(specs, **batch), leader_epoch=0, now_ms=clock.now)  # type: ignore[arg-type]
    log.update_high_watermark(log.log_end_offset)


def batches_of(log: Log) -> list[tuple[RecordBatch, bytes]]:
    out = []
    for segment in log.segments:
        data = os.pread(segment.fd, segment.size, 0)
        result = walk(data)
        assert result.stop == len(data)
        out += [(batch, data) for batch in result.batches]
    return out


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b, data in batches_of(log) for r in b.records(data)]


def latest_per_key(appended: list[tuple[int, bytes, bytes | None]]) -> list[tuple[int, bytes, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes, bytes | None]] = {}
    for record in appended:
        latest[record[1]] = record
    return sorted(latest.values())


def fill(log: Log, clock: Clock, updates: list[list[tuple[int, bool]]], codec: Codec) -> list:
    """Append one batch per inner list of (key number, tombstone?); returns (offset, key, value)s."""
    appended = []
    for batch in updates:
        specs = []
        for n, tombstone in batch:
            offset = log.log_end_offset + len(specs)
            key = b"key-%d" % n
            value = None if tombstone else b"value-%d" % offset
            specs.append(RecordSpec(clock.now, key, value))
            appended.append((offset, key, value))
        append(log, clock, specs, codec=codec)
    return appended


# --- what a clean keeps ----------------------------------------------------------------------------------


updates_strategy = st.lists(
    st.lists(st.tuples(st.integers(0, 12), st.booleans()), min_size=1, max_size=6), min_size=1, max_size=30
)


@given(
    updates=updates_strategy, codec=st.sampled_from(CODECS), segment_bytes=st.sampled_from([300, 1000, 10**6])
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cleaning_keeps_exactly_the_latest_record_per_key(
    tmp_path_factory, updates, codec, segment_bytes
) -> None:
    dir = tmp_path_factory.mktemp("log")
    clock = Clock()
    log = new_log(dir, clock, segment_bytes=segment_bytes)
    appended = fill(log, clock, updates, codec)
    original = {b.base_offset: b for b, _ in batches_of(log)}
    log.roll(now_ms=clock.now)

    assert log_cleaner(dir, clock, log).clean_now() is not None
    assert records_of(log) == latest_per_key(appended)  # tombstones stay until their delete horizon
    for batch, _ in batches_of(log):
        before = original[batch.base_offset]
        assert (batch.last_offset, batch.compression, batch.crc_valid) == (before.last_offset, codec, True)
    assert (dir / CLEANER_OFFSET_CHECKPOINT).read_text() == f"0\n1\ntopic 0 {log.log_end_offset}\n"

    # A day later (delete.retention.ms) and with something new to clean, the tombstones go.
    clock.now += DAY_MS + 1
    extra = fill(log, clock, [[(99, False)]], codec)
    log.roll(now_ms=clock.now)
    assert log_cleaner(dir, clock, log).clean_now() is not None
    assert records_of(log) == [r for r in latest_per_key(appended + extra) if r[2] is not None]
    assert not [p for p in os.listdir(log.dir) if p.endswith((".cleaned", ".swap"))]
    log.close()


def test_tombstones_get_a_delete_horizon_and_go_after_it(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock, delete_retention_ms=60_000)
    append(log, clock, [RecordSpec(T0, b"a", b"1"), RecordSpec(T0, b"b", b"1")])
    append(log, clock, [RecordSpec(T0, b"a", None)])
    log.roll(now_ms=clock.now)
    cleaner = log_cleaner(tmp_path, clock, log)
    clock.now = T0 + 1000
    cleaner.clean_now()
    [(kept, data), (tombstone, _)] = batches_of(log)
    assert [(r.key, r.value) for r in kept.records(data)] == [(b"b", b"1")]
    assert kept.delete_horizon_ms is None  # no tombstone in it: copied as it was
    assert tombstone.attributes & DELETE_HORIZON_BIT and tombstone.delete_horizon_ms == T0 + 1000 + 60_000

    def clean_again(now: int) -> list:
        clock.now = now
        append(log, clock, [RecordSpec(now, b"c-%d" % now, b"x")])
        log.roll(now_ms=now)
        assert cleaner.clean_now() is not None
        return [(key, value) for _, key, value in records_of(log)]

    assert (b"a", None) in clean_again(T0 + 60_999)  # before the horizon
    assert (b"a", None) not in clean_again(T0 + 61_000)
    log.close()


def test_min_compaction_lag_holds_young_segments_back(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock, min_compaction_lag_ms=3_600_000)
    appended = fill(log, clock, [[(1, False)], [(1, False)], [(1, False)]], Codec.NONE)
    log.roll(now_ms=clock.now)
    cleaner = log_cleaner(tmp_path, clock, log)
    clock.now = T0 + 3_599_999
    assert cleaner.clean_now() is None
    assert records_of(log) == appended
    clock.now = T0 + 3_600_001
    assert cleaner.clean_now() is not None
    assert records_of(log) == appended[-1:]
    log.close()


def test_max_compaction_lag_cleans_below_the_dirty_ratio(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=3_600_000)
    appended = fill(log, clock, [[(n, False)] for n in range(10)], Codec.NONE)
    log.roll(now_ms=clock.now)
    cleaner = log_cleaner(tmp_path, clock, log)
    assert cleaner.clean_now() is not None  # all dirty: ratio 1.0
    appended += fill(log, clock, [[(0, False)]], Codec.NONE)
    log.roll(now_ms=clock.now)
    clock.now = T0 + 600_000
    assert cleaner.clean_now() is None  # a tenth dirty, younger than max.compaction.lag.ms
    assert cleaner.manager.dirtiest_log_cleanable_ratio < 0.9
    clock.now = T0 + 3_600_001
    assert cleaner.clean_now() is not None
    assert records_of(log) == latest_per_key(appended)
    log.close()


def test_only_logs_above_their_dirty_ratio_are_chosen_dirtiest_first(tmp_path: Path) -> None:
    clock = Clock()
    quiet = new_log(tmp_path, clock, "quiet-0", min_cleanable_dirty_ratio=0.5)
    busy = new_log(tmp_path, clock, "busy-0", min_cleanable_dirty_ratio=0.5)
    fill(quiet, clock, [[(n, False)] for n in range(10)], Codec.NONE)
    quiet.roll(now_ms=clock.now)
    cleaner = log_cleaner(tmp_path, clock, quiet, busy)
    assert cleaner.clean_now()[0].log is quiet  # type: ignore[index]
    fill(quiet, clock, [[(0, False)]], Codec.NONE)  # a tenth of quiet is dirty now
    quiet.roll(now_ms=clock.now)
    fill(busy, clock, [[(0, False)]] * 3, Codec.NONE)  # all of busy
    busy.roll(now_ms=clock.now)
    chosen = cleaner.clean_now()
    assert chosen is not None and chosen[0].log is busy and chosen[0].cleanable_ratio == 1.0
    assert cleaner.clean_now() is None
    assert 0 < cleaner.manager.dirtiest_log_cleanable_ratio < 0.5
    quiet.close()
    busy.close()


def records_of_dir(dir: Path) -> list:
    out = []
    for path in sorted(dir.glob("*.log")):
        data = path.read_bytes()
        out += [(r.offset, r.key, r.value) for b in walk(data).batches for r in b.records(data)]
    return out


def test_batches_keep_producer_fields_and_a_producers_last_batch_stays_empty(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock)
    producer = {"producer_id": 4000, "producer_epoch": 3}
    append(log, clock, [RecordSpec(T0, b"a", b"1"), RecordSpec(T0, b"b", b"1")], codec=Codec.LZ4,
           base_sequence=0, **producer)  # fmt: skip
    append(log, clock, [RecordSpec(T0, b"c", b"1"), RecordSpec(T0, b"d", b"1")], codec=Codec.ZSTD,
           base_sequence=2, **producer)  # fmt: skip
    append(log, clock, [RecordSpec(T0, b"e", b"1")], base_sequence=4, **producer)
    # A plain producer then overwrites b, and every key of the idempotent producer's last batch.
    append(log, clock, [RecordSpec(T0, b"b", b"2"), RecordSpec(T0, b"e", b"2"), RecordSpec(T0, b"z", b"2")])
    append(log, clock, [RecordSpec(T0, b"z", b"3")])
    before = {b.base_offset: b for b, _ in batches_of(log)}
    log.roll(now_ms=clock.now)
    log_cleaner(tmp_path, clock, log).clean_now()

    after = batches_of(log)
    assert [(b.base_offset, b.last_offset, b.records_count) for b, _ in after] == [
        (0, 1, 1),  # a kept, b superseded: re-encoded
        (2, 3, 2),  # copied as it was
        (4, 4, 0),  # the producer's last batch, all superseded: kept empty for its sequence number
        (5, 7, 2),
        (8, 8, 1),  # the last batch below the cleaning bound
    ]
    for batch, _ in after:
        old = before[batch.base_offset]
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.partition_leader_epoch) == (
            old.producer_id, old.producer_epoch, old.base_sequence, old.partition_leader_epoch,
        )  # fmt: skip
        assert batch.crc_valid and batch.last_offset_delta == old.last_offset_delta
        assert batch.compression == (Codec.NONE if batch.records_count == 0 else old.compression)
    assert [(r.offset, r.key) for r in after[0][0].records(after[0][1])] == [(0, b"a")]
    assert after[2][0].last_sequence == 4
    log.close()


def test_a_small_dedupe_buffer_cleans_in_several_passes(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock, segment_bytes=2000)
    appended = fill(
        log, clock, [[(n % 30, False) for n in range(i, i + 5)] for i in range(0, 300, 5)], Codec.NONE
    )
    log.roll(now_ms=clock.now)
    cleaner = log_cleaner(tmp_path, clock, log, dedupe_buffer_size=128 * 12)  # 12 slots: 10 keys a pass
    checkpoints = []
    while cleaner.clean_now() is not None:
        checkpoints.append((tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().split()[-1])
    assert len(checkpoints) > 3 and checkpoints[-1] == str(log.log_end_offset)
    assert [int(c) for c in checkpoints] == sorted(int(c) for c in checkpoints)
    assert records_of(log) == latest_per_key(appended)
    log.close()


@pytest.mark.parametrize("compression_type", [0, 1])  # none, gzip
def test_magic_v0_v1_logs_are_cleaned(tmp_path: Path, compression_type: int) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock)
    appended = []
    for magic in (0, 1):
        for _ in range(3):
            first = log.log_end_offset
            builder = LegacyRecordBatchBuilder(
                magic=magic, compression_type=compression_type, batch_size=1 << 20
            )
            for offset in range(first, first + 4):
                key = b"k%d" % (offset % (5 if magic == 0 else 3))  # k3, k4 only in the v0 part
                value = b"v%d-%d" % (magic, offset)
                # Inside a v1 wrapper offsets are relative; v0 wrappers and plain messages hold absolute ones.
                relative = compression_type and magic == 1
                builder.append(offset - first if relative else offset, timestamp=T0, key=key, value=value)
                appended.append((offset, key, value))
            data = bytearray(builder.build())
            if compression_type:  # a wrapper carries the offset of its last message
                data[:8] = (first + 3).to_bytes(8, "big")
            log.append_as_follower(bytes(data), now_ms=clock.now)
            log.update_high_watermark(log.log_end_offset)  # the leader's high watermark, as a fetch brings it
        log.roll(now_ms=clock.now)
    cleaner = log_cleaner(tmp_path, clock, log)
    assert cleaner.clean_now() is not None
    kept = records_of(log)
    latest = latest_per_key(appended)
    if compression_type == 0:
        assert kept == latest
    else:  # a wrapper stays whole while any message in it is the latest for its key
        assert set(latest) <= set(kept) and len(kept) < len(appended)
        assert {key: value for _, key, value in kept} == {key: value for _, key, value in latest}
    assert {b.magic for b, _ in batches_of(log)} == {0, 1}
    log.close()


# --- crash safety --------------------------------------------------------------------------------------

CRASH_POINTS = [
    "cleaned",  # the group written as .cleaned, nothing renamed
    "log-swapped",  # .log.cleaned -> .log.swap, its indexes still .cleaned
    "swapped",  # every new file .swap, the old segments untouched
    "first-old-deleted",  # the first old segment renamed .deleted
    "old-deleted",  # every old segment .deleted
    "log-unswapped",  # the new .log has lost .swap, its indexes have not
    "done",
]


def clean_without_swapping(log: Log, clock: Clock) -> tuple[Segment, list[Segment]]:
    """Run a clean whose swap only records what it was given, as if the broker died right after."""
    captured = []

    def capture(log: Log, cleaned: Segment, old: list[Segment]) -> Future[bool]:
        captured.append((cleaned, old))
        done: Future[bool] = Future()
        done.set_result(True)
        return done

    cleaner = Cleaner(
        CleanerConfig(), check_done=lambda log: None, throttler=Throttler(math.inf, threading.Event())
    )
    cleaner.clean(log_to_clean(log, 0, log.active_segment.base_offset), clock.now, capture)
    [(cleaned, old)] = captured
    return cleaned, old


def leave_files_as_a_crash_at(point: str, dir: Path, cleaned: Segment, old: list[Segment]) -> None:
    step = CRASH_POINTS.index(point)

    def move(base: int, ext: str, suffix: str, new_suffix: str) -> None:
        os.rename(dir / f"{base:020d}{ext}{suffix}", dir / f"{base:020d}{ext}{new_suffix}")

    base = cleaned.base_offset
    if step >= 1:
        move(base, ".log", ".cleaned", ".swap")
    if step >= 2:
        for ext in (".index", ".timeindex"):
            move(base, ext, ".cleaned", ".swap")
    for segment in old[: 1 if step == 3 else len(old) if step >= 4 else 0]:
        for ext in (".log", ".index", ".timeindex"):
            move(segment.base_offset, ext, "", ".deleted")
    if step >= 5:
        move(base, ".log", ".swap", "")
    if step >= 6:
        for ext in (".index", ".timeindex"):
            move(base, ext, ".swap", "")


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_anywhere_in_the_swap_loads_into_a_complete_log(tmp_path: Path, point: str) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock)
    appended = []
    for _ in range(4):  # four segments of one group, then the active one
        appended += fill(log, clock, [[(n % 7, n % 5 == 0)] for n in range(20)], Codec.GZIP)
        log.roll(now_ms=clock.now)
    appended += fill(log, clock, [[(1, False)]], Codec.NONE)
    original = records_of(log)
    cleaned, old = clean_without_swapping(log, clock)
    assert len(old) == 4
    data = os.pread(cleaned.fd, cleaned.size, 0)
    after_clean = [(r.offset, r.key, r.value) for b in walk(data).batches for r in b.records(data)]
    after_clean += [r for r in original if r[0] >= log.active_segment.base_offset]
    log.close_handlers()  # the broker dies: nothing trimmed, nothing flushed by us
    cleaned.close_handlers()
    leave_files_as_a_crash_at(point, log.dir, cleaned, old)

    lines: list[str] = []
    loaded = Log.load(log.dir, log.config, recovery_point_checkpoint=0, clock=clock, report=lines.append)
    assert not [p for p in os.listdir(log.dir) if p.endswith((".cleaned", ".swap", ".deleted"))], lines
    kept = records_of(loaded)
    assert kept == (original if CRASH_POINTS.index(point) < 2 else after_clean), lines
    assert latest_per_key(kept) == latest_per_key(appended)
    assert loaded.log_end_offset == original[-1][0] + 1
    loaded.close()


def test_a_swap_after_retention_removed_an_old_segment_changes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock, cleanup_policy=["compact", "delete"], retention_bytes=1)
    for _ in range(3):
        fill(log, clock, [[(n % 3, False)] for n in range(10)], Codec.NONE)
        log.roll(now_ms=clock.now)
    cleaned, old = clean_without_swapping(log, clock)
    assert log.enforce_retention(clock.now) > 0
    segments = list(log.segments)
    assert not log.replace_segments([cleaned], old, now_ms=clock.now)
    assert log.segments == segments
    assert cleaned.log_path.name.endswith(".log.cleaned")  # the caller drops it
    cleaned.delete_files()
    log.close()


# --- the cleaner inside the LogManager, and kcli verify ---------------------------------------------------


def test_the_log_manager_cleans_in_the_background_and_swaps_on_its_own_thread(tmp_path: Path) -> None:
    config = BrokerConfig({"log.dirs": str(tmp_path), "log.cleaner.backoff.ms": "10"})
    manager = LogManager(config)
    manager.startup()
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text() == "0\n0\n"
    clock = Clock()
    log = manager.create_log("orders", 0, TOPIC_ID, compact_config(segment_bytes=4096))
    appended = fill(log, clock, [[(n % 10, False)] for n in range(300)], Codec.SNAPPY)
    log.roll(now_ms=clock.now)
    swap_threads = set()
    original = log.replace_segments

    def replace_segments(*args: object, **kwargs: object) -> bool:
        swap_threads.add(threading.current_thread())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    log.replace_segments = replace_segments  # type: ignore[method-assign]
    deadline = time.monotonic() + 20
    while "orders 0 300" not in (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text():
        assert time.monotonic() < deadline, "the cleaner did not run"
        manager.run_periodic(int(time.time() * 1000))
        time.sleep(0.01)
    assert swap_threads == {threading.current_thread()}
    assert records_of(log) == latest_per_key(appended)
    manager.shutdown()

    reopened = LogManager(config)
    reopened.startup()
    assert records_of(reopened.get_log("orders", 0)) == latest_per_key(appended)  # type: ignore[arg-type]
    reopened.shutdown()


def test_kcli_verify_calls_the_gaps_of_a_cleaned_log_compaction(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, clock, segment_bytes=2000)
    fill(log, clock, [[(n % 4, False), ((n + 1) % 4, n % 3 == 0)] for n in range(100)], Codec.LZ4)
    log.roll(now_ms=clock.now)
    log_cleaner(tmp_path, clock, log).clean_now()
    log.close()
    result = subprocess.run(
        [sys.executable, "-m", "kcli", "verify", "--deep", "-o", "json", str(log.dir)],
        capture_output=True, text=True, env=kcli_env(), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = {
        line.split('"kind":"')[1].split('"')[0] for line in result.stdout.splitlines() if '"kind"' in line
    }
    assert kinds == {"offset_gap_compaction"}, result.stdout
