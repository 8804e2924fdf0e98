"""The voter set and kraft.version by log offset (KIP-853): Kafka's VoterSetHistory, the kraft.version
history and the KRaftControlRecordStateMachine that fills them.

Each KRaftVersion or Voters control record, in the log or a snapshot, sets the value from its offset
on. The voter set at an offset is that of the latest Voters record at or below it; a snapshot's
records count at its end offset - 1 (the bootstrap snapshot `0-0`'s at -1). Entries are appended in
offset order; a follower that truncates its log drops those at or past the truncation point
(truncate_new_entries), a log whose start moved keeps only the newest entry below the new start
(truncate_old_entries), and a node that installs a leader's snapshot starts again from it (clear).

A static quorum (controller.quorum.voters, kraft.version 0) has no entries: its voter set is the
configured one, whatever the offset.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from formats.records import ControlType, read_kraft_version, read_voters
from kcli.voters import VoterSet


class VoterSetHistory:
    """The voter sets and kraft.version levels of one replica's log, by offset."""

    def __init__(self, static: VoterSet | None = None) -> None:
        self.static = static
        self._voter_offsets: list[int] = []
        self._voter_sets: list[VoterSet] = []
        self._version_offsets: list[int] = []
        self._versions: list[int] = []

    # --- reads ---------------------------------------------------------------------------------------

    def voter_set_at(self, offset: int) -> VoterSet | None:
        """VoterSetHistory.valueAtOrBefore: the latest voter set at or below `offset`."""
        i = bisect.bisect_right(self._voter_offsets, offset)
        return self._voter_sets[i - 1] if i else self.static

    def last_voter_set(self) -> VoterSet | None:
        """The latest voter set, committed or not (what the leader's quorum math and elections use)."""
        return self._voter_sets[-1] if self._voter_sets else self.static

    def last_entry(self) -> tuple[int, VoterSet] | None:
        """(offset, voter set) of the latest Voters record; None for a static quorum or none yet."""
        return (self._voter_offsets[-1], self._voter_sets[-1]) if self._voter_sets else None

    def kraft_version_at(self, offset: int) -> int:
        i = bisect.bisect_right(self._version_offsets, offset)
        return self._versions[i - 1] if i else 0

    @property
    def kraft_version(self) -> int:
        """The latest kraft.version (0 without a KRaftVersion record)."""
        return self._versions[-1] if self._versions else 0

    # --- writes --------------------------------------------------------------------------------------

    def add_voter_set(self, offset: int, voters: VoterSet) -> None:
        if self._voter_offsets and offset <= self._voter_offsets[-1]:
            raise ValueError(f"a voter set at {offset}, not after the last one at {self._voter_offsets[-1]}")
        self._voter_offsets.append(offset)
        self._voter_sets.append(voters)

    def add_kraft_version(self, offset: int, level: int) -> None:
        if self._version_offsets and offset <= self._version_offsets[-1]:
            raise ValueError(f"a kraft.version at {offset}, not after the last one")
        self._version_offsets.append(offset)
        self._versions.append(level)

    def apply(self, records: Iterable[tuple[int, ControlType, bytes]], *, at: int | None = None) -> bool:
        """Add KRaftVersion and Voters records as (offset, type, value), each at its offset or at `at`
        (a snapshot's); True when the voter set or kraft.version changed."""
        changed = False
        for offset, kind, value in records:
            where = offset if at is None else at
            if kind is ControlType.KRAFT_VERSION:
                self.add_kraft_version(where, read_kraft_version(value)[1])
                changed = True
            elif kind is ControlType.KRAFT_VOTERS:
                self.add_voter_set(where, VoterSet.from_records(read_voters(value)[1]))
                changed = True
        return changed

    def truncate_new_entries(self, end_offset: int) -> bool:
        """Drop what is at or past `end_offset` (a follower truncated its log); True when anything went."""
        i = bisect.bisect_left(self._voter_offsets, end_offset)
        j = bisect.bisect_left(self._version_offsets, end_offset)
        changed = i < len(self._voter_offsets) or j < len(self._version_offsets)
        del self._voter_offsets[i:], self._voter_sets[i:]
        del self._version_offsets[j:], self._versions[j:]
        return changed

    def truncate_old_entries(self, start_offset: int) -> None:
        """Keep, of the entries below `start_offset`, only the newest (it still holds from there)."""
        i = bisect.bisect_right(self._voter_offsets, start_offset)
        if i > 1:
            del self._voter_offsets[: i - 1], self._voter_sets[: i - 1]
        j = bisect.bisect_right(self._version_offsets, start_offset)
        if j > 1:
            del self._version_offsets[: j - 1], self._versions[: j - 1]

    def clear(self) -> None:
        self._voter_offsets.clear()
        self._voter_sets.clear()
        self._version_offsets.clear()
        self._versions.clear()
