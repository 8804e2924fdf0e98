"""Start-up recovery on real files damaged by hand: torn tails, flipped bytes, missing indexes, leftovers.

Each case crashes a LogManager (no shutdown: no marker, no trimmed indexes), damages the files the way
a crash or a bad disk would, restarts, and checks what was kept, what was dropped, and the line that
reports it. Afterwards `ops.verify` must find nothing in the directory.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from formats.checkpoints import write_leader_epoch_checkpoint, write_offset_checkpoint
from formats.index import OffsetIndex
from formats.records import RecordSpec, build_batch, read_batch
from formats.segment import walk
from kcli.broker.log import LogConfig, LogManager
from kcli.broker.log.log import Log
from kcli.config import BrokerConfig
from ops.verify import Verifier, VerifyOptions, resolve

T0 = 1_700_000_000_000
TOPIC_ID = uuid.UUID("0c1b5c4e-3e0f-4a57-9d8a-2f3e6b7c8d90")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def batch(n: int = 3, size: int = 300, ts: int = T0) -> bytes:
    return build_batch([RecordSpec(ts + i, b"key", bytes([i]) * size) for i in range(n)])


def config(root: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig(
        {"log.dirs": str(root), "log.segment.bytes": "5000", "log.index.interval.bytes": "1000", **extra}
    )


def fill(root: Path, batches: int = 30, **extra: str) -> tuple[LogManager, Log]:
    """A manager with one partition of `batches` 3-record batches (~930 bytes), over several segments."""
    manager = LogManager(config(root, **extra), now_ms=Clock())
    manager.startup()
    log = manager.create_log("orders", 0, TOPIC_ID, LogConfig.from_broker(manager.config))
    for i in range(batches):
        log.append_as_leader(batch(ts=T0 + i), leader_epoch=i // 10, now_ms=T0)
        log.update_high_watermark(log.log_end_offset)  # as the only in-sync replica's Partition does
    manager.wait_for_flushes()
    manager.checkpoint()
    return manager, log


def crash(manager: LogManager) -> None:
    """What a kill -9 leaves: nothing flushed or closed beyond what already happened."""
    manager.wait_for_flushes()
    for log in manager.logs():
        log.close_handlers()


def restart(root: Path, **extra: str) -> tuple[LogManager, list[str], Log]:
    manager = LogManager(config(root, **extra), now_ms=Clock())
    lines = manager.startup()
    log = manager.get_log("orders", 0)
    assert log is not None
    return manager, lines, log


def all_records(log: Log) -> list[tuple[int, bytes]]:
    out = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        result = walk(data)
        assert result.stop == len(data)
        out += [(r.offset, r.value) for b in result.batches for r in b.records(data)]
    return out


def verify_clean(root: Path) -> None:
    findings = []
    Verifier(VerifyOptions(), findings.append).run([resolve(root)])
    assert findings == []


def test_torn_tail_is_truncated_and_reported(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    before = all_records(log)
    active = log.active_segment
    assert active.index_path.stat().st_size == 10 * 1024 * 1024  # preallocated, untrimmed: a crash
    crash(manager)
    size = active.log_path.stat().st_size
    last = walk(active.log_path.read_bytes()).batches[-1]
    os.truncate(active.log_path, size - 100)  # the last batch loses its final 100 bytes

    manager, lines, log = restart(tmp_path)
    kept = last.position
    quarantined = next(tmp_path.parent.glob(f"{tmp_path.name}.quarantine-*")) / "orders-0"
    assert lines == [
        f"{tmp_path}: no clean shutdown marker, recovering 1 logs",
        f"orders-0: kept bytes {kept}..{size - 100} of {active.log_path.name} in "
        f"{quarantined / f'{last.base_offset:020d}.log'}",
        f"orders-0: truncated {active.log_path.name} at byte {kept}, dropping {size - 100 - kept} bytes "
        f"(log end offset now {last.base_offset}; the first dropped batch claims offsets "
        f"{last.base_offset}..{last.last_offset}): Found a batch of {last.size} bytes with only "
        f"{last.size - 100} bytes left",
    ]
    assert log.log_end_offset == last.base_offset == log.high_watermark
    assert all_records(log) == before[: last.base_offset]
    assert log.append_as_leader(batch(), leader_epoch=3, now_ms=T0).first_offset == last.base_offset
    manager.shutdown()
    verify_clean(tmp_path)


def test_flipped_byte_in_the_last_segment_truncates_from_there(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    active = log.active_segment
    crash(manager)
    batches = walk(active.log_path.read_bytes()).batches
    victim = batches[1]
    data = bytearray(active.log_path.read_bytes())
    data[victim.position + 100] ^= 0xFF
    active.log_path.write_bytes(data)

    manager, lines, log = restart(tmp_path)
    assert len(lines) == 3
    assert lines[1].startswith(
        f"orders-0: kept bytes {victim.position}..{len(data)} of {active.log_path.name}"
    )
    assert lines[2].startswith(
        f"orders-0: truncated {active.log_path.name} at byte {victim.position}, dropping "
        f"{len(data) - victim.position} bytes (log end offset now {victim.base_offset}"
    )
    assert lines[2].endswith(f"computed crc = {_crc_of(bytes(data), victim)})")
    assert log.log_end_offset == victim.base_offset
    assert active.log_path.stat().st_size == victim.position
    manager.shutdown()
    verify_clean(tmp_path)


def _crc_of(data: bytes, victim) -> int:
    from formats import _native

    return _native.crc32c(memoryview(data)[victim.position + 21 : victim.position + victim.size])


def test_corruption_in_an_unflushed_segment_deletes_the_later_ones(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    segments = list(log.segments)
    # Pretend nothing was ever flushed: the recovery point goes back to 0.
    crash(manager)
    (tmp_path / "recovery-point-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 0}))
    victim_segment = segments[1]
    data = bytearray(victim_segment.log_path.read_bytes())
    data[-5] ^= 0x10  # inside its last batch
    victim_segment.log_path.write_bytes(data)
    last_batch = walk(bytes(data)).batches[-1]
    later = segments[2:]

    manager, lines, log = restart(tmp_path)
    assert [s.base_offset for s in log.segments] == [segments[0].base_offset, victim_segment.base_offset]
    assert log.log_end_offset == last_batch.base_offset
    assert any(
        line.startswith(f"orders-0: truncated {victim_segment.log_path.name} at byte {last_batch.position}")
        for line in lines
    )
    names = ", ".join(s.log_path.name for s in later)
    assert any(
        f"deleted {len(later)} segments after {victim_segment.log_path.name} ({names}: offsets {later[0].base_offset}..89"
        in line
        for line in lines
    )
    for segment in later:
        assert not segment.log_path.exists() and not segment.index_path.exists()
    assert log.epoch_cache.entries() == [(0, 0)]  # epoch 1 started at offset 30, now gone
    manager.shutdown()
    verify_clean(tmp_path)


def test_segments_below_the_recovery_point_are_not_revalidated(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    first = log.segments[0]
    assert log.recovery_point >= log.segments[1].base_offset  # flushed on roll
    crash(manager)
    data = bytearray(first.log_path.read_bytes())
    data[200] ^= 0x01
    first.log_path.write_bytes(data)
    manager, lines, log = restart(tmp_path)
    assert log.log_end_offset == 90 and first.log_path.stat().st_size == len(data)
    assert not any("truncated" in line for line in lines)
    manager.shutdown()


def test_missing_index_is_rebuilt_byte_for_byte(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    manager.shutdown()
    segment = log.segments[1]
    index, time_index = segment.index_path.read_bytes(), segment.time_index_path.read_bytes()
    assert index and time_index
    segment.index_path.unlink()
    segment.time_index_path.unlink()

    manager, lines, log = restart(tmp_path)  # a clean shutdown: only this segment is recovered
    assert lines == [
        f"orders-0: rebuilt the indexes of {segment.log_path.name} (offset index {segment.index_path.name} is missing)"
    ]
    assert segment.index_path.read_bytes() == index
    assert segment.time_index_path.read_bytes() == time_index
    manager.shutdown()
    verify_clean(tmp_path)


def test_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    manager.shutdown()
    segment = log.segments[0]
    index = segment.index_path.read_bytes()
    segment.index_path.write_bytes(index + b"\x00\x00\x00")
    manager, lines, log = restart(tmp_path)
    assert lines == [
        f"orders-0: rebuilt the indexes of {segment.log_path.name} (offset index {segment.index_path.name} has "
        f"{len(index) + 3} bytes, not a multiple of 8)"
    ]
    assert segment.index_path.read_bytes() == index
    manager.shutdown()


def test_missing_time_index_is_created_empty(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    manager.shutdown()
    segment = log.segments[0]
    segment.time_index_path.unlink()
    manager, lines, log = restart(tmp_path)
    assert lines == [] and segment.time_index_path.read_bytes() == b""
    manager.shutdown()


def test_clean_shutdown_skips_recovery(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    manager.shutdown()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    active = log.active_segment
    index = active.index_path.read_bytes()  # trimmed at shutdown
    assert len(OffsetIndex(index, active.base_offset)) * 8 == len(index) < 10 * 1024 * 1024
    data = bytearray(active.log_path.read_bytes())
    data[-3] ^= 0x01  # would be truncated by recovery
    active.log_path.write_bytes(data)
    manager, lines, log = restart(tmp_path)
    assert lines == []
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # a crash from here on counts as unclean
    assert log.active_segment.log_path.stat().st_size == len(data)
    assert log.log_end_offset == log.recovery_point == 90
    crash(manager)
    manager, lines, log = restart(tmp_path)  # now unclean: the damaged batch goes
    assert log.log_end_offset == 87 and any("truncated" in line for line in lines)
    manager.shutdown()


def test_leftover_files_of_deletes_compaction_and_swaps(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    manager.shutdown()
    d = log.dir
    first, second = log.segments[0], log.segments[1]
    (d / "00000000000000000000.log.deleted").write_bytes(b"old")
    (d / "00000000000000000099.log.cleaned").write_bytes(b"half-written")
    (d / "00000000000000000200.log.swap").write_bytes(b"split leftover")  # base >= smallest .cleaned: invalid
    # A compaction that finished writing: the swap replaces the first two segments.
    replacement = first.log_path.read_bytes() + second.log_path.read_bytes()
    for suffix in (".log", ".index", ".timeindex"):
        (d / f"00000000000000000000{suffix}").rename(d / f"00000000000000000000{suffix}.swap")
    (d / "00000000000000000000.log.swap").write_bytes(replacement)
    (d / "00000000000000000000.index.swap").unlink()
    (d / "00000000000000000000.timeindex.swap").unlink()
    manager, lines, log = restart(tmp_path)
    names = sorted(os.listdir(d))
    assert not [n for n in names if n.endswith((".deleted", ".cleaned", ".swap"))]
    assert second.log_path.name not in names  # replaced by the swapped-in segment
    assert log.segments[0].log_path.read_bytes() == replacement
    assert log.segments[0].index_path.exists()  # rebuilt: the swap came without one
    assert log.log_end_offset == 90
    assert any("interrupted segment split" in line for line in lines)
    manager.shutdown()
    verify_clean(tmp_path)


def test_high_watermark_and_log_start_checkpoints_are_clamped(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    crash(manager)
    (tmp_path / "replication-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 500}))
    manager, lines, log = restart(tmp_path)
    assert log.high_watermark == 90
    crash(manager)
    (tmp_path / "replication-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 40}))
    (tmp_path / "log-start-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 20}))
    manager, lines, log = restart(tmp_path)
    assert (log.log_start_offset, log.high_watermark) == (20, 40)
    assert log.epoch_cache.entries() == [(0, 20), (1, 30), (2, 60)]
    crash(manager)
    (tmp_path / "log-start-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 1000}))
    manager, lines, log = restart(tmp_path)
    assert any("below the checkpointed log start offset 1000" in line for line in lines)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (1000, 1000, 1)
    assert log.segments[0].log_path.name == "00000000000000001000.log"
    manager.shutdown()


def test_unreadable_leader_epoch_checkpoint_is_relearned(tmp_path: Path) -> None:
    manager, log = fill(tmp_path)
    crash(manager)
    (tmp_path / "recovery-point-offset-checkpoint").write_text(write_offset_checkpoint({("orders", 0): 0}))
    (log.dir / "leader-epoch-checkpoint").write_text("garbage\n")
    manager, lines, log = restart(tmp_path)
    assert any("unreadable leader epoch checkpoint reset to empty" in line for line in lines)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == write_leader_epoch_checkpoint(
        [(0, 0), (1, 30), (2, 60)]
    )
    manager.shutdown()
    verify_clean(tmp_path)


def test_preallocated_segment_zero_tail_after_a_crash(tmp_path: Path) -> None:
    manager, log = fill(tmp_path, batches=28, **{"log.preallocate": "true"})
    active = log.active_segment
    assert active.log_path.stat().st_size == 5000  # preallocated to segment.bytes
    assert log.segments[0].log_path.stat().st_size == log.segments[0].size  # trimmed on roll
    crash(manager)
    manager, lines, log = restart(tmp_path, **{"log.preallocate": "true"})
    assert log.log_end_offset == 84
    assert lines[1].endswith(
        "dropping 2009 bytes (log end offset now 84): Found record size 0 smaller than minimum record overhead (14)"
    )
    assert read_batch(log.active_segment.log_path.read_bytes()).base_offset == log.active_segment.base_offset
    manager.shutdown()
    verify_clean(tmp_path)
