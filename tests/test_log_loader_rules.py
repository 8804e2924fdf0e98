"""Kafka's LogLoader rules as one plan (`formats.log_loader`): names in, the loader's changes out, in
its order. The broker's loader and `kcli recover logdir` both apply this plan; their own tests
(test_log_recovery, test_cleaner, test_recover) check them on real directories."""

from __future__ import annotations

from formats.log_loader import FileChange, offsets_to_snapshot, plan_leftovers, producer_state_replay


def _name(offset: int, suffix: str) -> str:
    return f"{offset:020d}{suffix}"


def test_leftovers_go_swaps_complete_and_orphaned_indexes_go_in_kafkas_order() -> None:
    names = [
        _name(0, ".log.swap"),  # a compaction's output, offsets 0..29
        _name(0, ".log"),
        _name(0, ".index"),
        _name(10, ".log"),
        _name(10, ".snapshot"),
        _name(30, ".log"),
        _name(30, ".index"),
        _name(40, ".timeindex.swap"),  # its .log never came: renamed, then orphaned
        _name(48, ".log.cleaned"),
        _name(50, ".log.swap"),  # at or above the lowest .cleaned: an interrupted split's
        _name(60, ".log.deleted"),
        "00000000000000000070-0000000003.checkpoint.deleted",  # a KRaft snapshot's: not the loader's
        "leader-epoch-checkpoint",
    ]
    asked = []

    def next_offset_of(name: str) -> int:
        asked.append(name)
        return 30

    changes = plan_leftovers(names, next_offset_of)
    assert asked == [_name(0, ".log.swap")]
    assert changes == [
        FileChange("stray_deleted", _name(60, ".log.deleted")),
        FileChange("invalid_swap", _name(50, ".log.swap"), min_cleaned_offset=48),
        FileChange("stray_cleaned", _name(48, ".log.cleaned")),
        FileChange("compacted", _name(0, ".index"), swap_range=(0, 30)),
        FileChange("compacted", _name(0, ".log"), swap_range=(0, 30)),
        FileChange("compacted", _name(10, ".log"), swap_range=(0, 30)),
        FileChange("compacted", _name(10, ".snapshot"), swap_range=(0, 30)),
        FileChange("swap", _name(0, ".log.swap"), _name(0, ".log")),
        FileChange("swap", _name(40, ".timeindex.swap"), _name(40, ".timeindex")),
        FileChange("orphaned_index", _name(40, ".timeindex")),
    ]


def test_a_cleaned_file_not_named_after_an_offset_goes_without_cutting_swaps() -> None:
    changes = plan_leftovers(["junk.cleaned", _name(5, ".log.swap")], lambda name: 9)
    assert changes == [
        FileChange("stray_cleaned", "junk.cleaned"),
        FileChange("swap", _name(5, ".log.swap"), _name(5, ".log")),
    ]


def test_a_clean_directory_has_no_changes() -> None:
    names = [_name(0, s) for s in (".log", ".index", ".timeindex", ".snapshot")] + ["partition.metadata"]
    assert plan_leftovers(names, lambda name: 0) == []


def test_producer_state_is_replayed_from_the_loaded_snapshot_with_snapshots_at_the_last_two_bases() -> None:
    bases = [0, 10, 20, 30]
    assert offsets_to_snapshot(bases, 35) == [20, 30, 35]
    assert offsets_to_snapshot([], 0) == [0]
    # a snapshot at 15 loaded: segment 0 is skipped, segment 10 replayed from 15
    assert [
        tuple(s) for s in producer_state_replay(bases, map_end_offset=15, log_start_offset=0, last_offset=35)
    ] == [
        (10, 15, False),
        (20, 20, True),
        (30, 30, True),
    ]
    # no snapshot: from the log start, which may lie inside the first segment
    assert [
        tuple(s) for s in producer_state_replay(bases, map_end_offset=5, log_start_offset=5, last_offset=20)
    ] == [
        (0, 5, False),
        (10, 10, False),
    ]
    assert producer_state_replay(bases, map_end_offset=35, log_start_offset=0, last_offset=35) == []
