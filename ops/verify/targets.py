"""What a PATH given to `kcli verify` is: a segment, a partition dir or a log dir, and the files they hold."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from formats.segment import LOG_SUFFIX, base_offset_of, parse_partition_dir

LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
ROOT_CHECKPOINTS = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    LOG_START_CHECKPOINT,
    CLEANER_CHECKPOINT,
)
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"


class NotKafkaPath(ValueError):
    """A PATH that is not a segment, a partition dir or a log dir; the message is one sentence."""


class Target(NamedTuple):
    kind: str  # "segment", "partition", "segments" (a dir of segments not named TOPIC-PARTITION) or "log_dir"
    path: Path


def resolve(path: Path) -> Target:
    """Say what kind of Kafka path `path` is, or raise NotKafkaPath with one sentence."""
    if not path.exists():
        raise NotKafkaPath(f"{path}: no such file or directory.")
    if path.is_file():
        if path.name.endswith(LOG_SUFFIX):
            return Target("segment", path)
        raise NotKafkaPath(f"{path} is not a .log segment, a partition directory or a log directory.")
    if not path.is_dir():
        raise NotKafkaPath(f"{path} is not a regular file or a directory.")
    names = os.listdir(path)
    if parse_partition_dir(path.resolve().name) and any(is_segment_name(n) for n in names):
        return Target("partition", path)
    if any(n in ROOT_CHECKPOINTS or n == META_PROPERTIES for n in names) or any(
        parse_partition_dir(n) and (path / n).is_dir() for n in names
    ):
        return Target("log_dir", path)
    if any(is_segment_name(n) for n in names):  # a copy of a partition's files, under another name
        return Target("segments", path)
    raise NotKafkaPath(
        f"{path} is not a Kafka directory: it holds no segments, partition directories or checkpoint files."
    )


def is_segment_name(name: str) -> bool:
    return name.endswith(LOG_SUFFIX) and base_offset_of(name) is not None and name.count(".") == 1


def log_bytes(target: Target) -> int:
    """Bytes of .log data under a target, for the progress bar's total."""
    path = target.path
    try:
        if target.kind == "segment":
            return path.stat().st_size
        dirs = (
            [path] if target.kind in ("partition", "segments") else [d for d in path.iterdir() if d.is_dir()]
        )
        return sum(f.stat().st_size for d in dirs for f in d.iterdir() if is_segment_name(f.name))
    except OSError:
        return 0
