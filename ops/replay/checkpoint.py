"""A replay's checkpoint: the JSON file that lets an interrupted replay go on where it stood.

Batches are a pure function of the sources and the options, so the checkpoint records counts, not
batches: per destination partition how many of its batches were acknowledged and the offset after them,
per source partition the records acknowledged, which source partitions are done (and how many batches
each destination partition had from them), and how long the offset map was. It also records the replay
that wrote it (the fingerprint: source, topic, mapping, mode, filters ...), and refuses another.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kcli.files import write_atomically
from ops.replay.options import ReplayError, ReplayOptions
from ops.replay.sources import SourcePartition

CHECKPOINT_VERSION = 1
CHECKPOINT_INTERVAL_S = 0.5
"""A replay rewrites its checkpoint at most this often while batches are acknowledged."""


@dataclass
class Resumed:
    """Where the interrupted replay stood, by its checkpoint and the destination's log end offsets."""

    acked_batches: list[int]
    """Per destination partition: its batches acknowledged, in generation order."""
    next_offsets: list[int]
    """Per destination partition: the offset after its acknowledged batches."""
    landed: list[int]
    """Per destination partition: records it holds past `next_offsets` (sent after the last checkpoint)."""
    completed_sources: int
    """Source partitions [0, completed_sources) had every batch acknowledged."""
    completed_batches: dict[int, int]
    """Per destination partition: its batches from the completed source partitions."""
    acked_records: list[int]
    """Per source partition: its records acknowledged."""
    offset_map_bytes: int
    """The offset map's length when the checkpoint was written."""


class Checkpoint:
    """The checkpoint file of one replay: read and checked against this replay, written atomically."""

    def __init__(
        self, path: Path, options: ReplayOptions, sources: list[SourcePartition], num_partitions: int
    ) -> None:
        self.path = path
        self.topic = options.topic
        self.sources = sources
        self.num_partitions = num_partitions
        self.fingerprint = _fingerprint(options, sources, num_partitions)

    def read(self) -> dict[str, Any] | None:
        """The state the file holds, or None when there is no file yet (a replay that starts afresh)."""
        return read_checkpoint(self.path)

    def resume(self, state: dict[str, Any], ends: list[int]) -> Resumed:
        """Where the replay that wrote `state` stood, given the destination's log end offsets now."""
        theirs = state.get("replay", {})
        for key, value in self.fingerprint.items():
            if theirs.get(key) != value:
                raise ReplayError(
                    f"{self.path} was written by a different replay ({key} differs): "
                    "run with the same source and options, or remove it."
                )
        dest = state["destination"]
        acked_batches, next_offsets, landed = [], [], []
        for p in range(self.num_partitions):
            entry = dest[str(p)]
            acked_batches.append(entry["ackedBatches"])
            next_offset = entry["nextOffset"]
            next_offsets.append(next_offset)
            if ends[p] < next_offset:
                raise ReplayError(
                    f"{self.topic}-{p} ends at offset {ends[p]}, before the {next_offset} "
                    "the checkpoint recorded: its records were deleted since."
                )
            landed.append(ends[p] - next_offset)
        completed = state["completedSources"]
        if completed != [s.name for s in self.sources[: len(completed)]]:
            raise ReplayError(f"{self.path} does not match the source partitions found.")
        acked_records = state["sourcePartitions"]
        return Resumed(
            acked_batches=acked_batches,
            next_offsets=next_offsets,
            landed=landed,
            completed_sources=len(completed),
            completed_batches={int(p): n for p, n in state["completedBatches"].items()},
            acked_records=[acked_records.get(s.name, {}).get("ackedRecords", 0) for s in self.sources],
            offset_map_bytes=state.get("offsetMapBytes", 0),
        )

    def write(
        self,
        *,
        producer_id: int,
        acked_batches: list[int],
        next_offsets: list[int],
        acked_records: list[int],
        completed_sources: int,
        completed_batches: dict[int, int],
        offset_map_bytes: int,
    ) -> None:
        """Replace the file with this state (as `Resumed` names its parts)."""
        sources, completed = self.sources, completed_sources
        state = {
            "version": CHECKPOINT_VERSION,
            "replay": self.fingerprint,
            "complete": completed == len(sources),
            "producerId": producer_id,
            "destination": {
                str(p): {"ackedBatches": acked_batches[p], "nextOffset": next_offsets[p]}
                for p in range(self.num_partitions)
            },
            "sourcePartitions": {
                s.name: {"ackedRecords": acked_records[i], "complete": i < completed}
                for i, s in enumerate(sources)
            },
            "completedSources": [s.name for s in sources[:completed]],
            "completedBatches": {str(p): n for p, n in sorted(completed_batches.items())},
            "offsetMapBytes": offset_map_bytes,
        }
        write_atomically(self.path, orjson.dumps(state, option=orjson.OPT_INDENT_2) + b"\n")


def read_checkpoint(path: Path) -> dict[str, Any] | None:
    """The state a checkpoint file holds, or None when there is none yet; one sentence for a path that
    is not a checkpoint, cannot be read, or could not be written. Called before the destination is
    touched, so a bad --checkpoint changes nothing."""
    check_writable(path, "--checkpoint")
    if not path.exists():
        return None
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ReplayError(f"cannot read {path}: {(e.strerror or str(e)).lower()}.") from None
    try:
        state = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ReplayError(f"{path} is not a replay checkpoint (it is not JSON).") from None
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        raise ReplayError(f"{path} is not a version {CHECKPOINT_VERSION} replay checkpoint.")
    return state


def check_writable(path: Path, option: str) -> None:
    """A file the replay will write: not a directory, and writable, or in a directory that takes new files."""
    if path.is_dir():
        raise ReplayError(f"{option} {path} is a directory, not a file.")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ReplayError(f"{option} {path} is not writable.")
        return
    parent = path.parent
    if not parent.is_dir():
        raise ReplayError(f"{option} {path}: directory {parent} does not exist.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ReplayError(f"{option} {path}: directory {parent} is not writable.")


def _fingerprint(
    options: ReplayOptions, sources: list[SourcePartition], num_partitions: int
) -> dict[str, Any]:
    """What makes a replay's batches what they are: a checkpoint applies only to the same again."""
    return {
        "source": str(options.source.resolve()),
        "sources": [s.name for s in sources],
        "topic": options.topic,
        "partitions": num_partitions,
        "mapping": options.mapping.value,
        "mode": options.mode.value,
        "filters": [
            options.from_offset,
            options.to_offset,
            options.from_time,
            options.to_time,
            options.key_regex,
            options.committed_only,
        ],
        "compression": None if options.compression is None else options.compression.label,
        "batchBytes": options.batch_bytes,
    }
