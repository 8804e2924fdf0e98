"""The sources of a replay: the partitions, and their segment files, under the path an operator gives.

A path is a segment file, a partition dir, a log dir or an archive of log dirs (one level of log dirs
further down).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from formats.segment import LOG_SUFFIX, StopReason, base_offset_of, parse_partition_dir
from kcli.logdir import SegmentReader
from ops.replay.options import ReplayError


@dataclass(frozen=True)
class SourcePartition:
    """One source partition: its segment files in offset order."""

    topic: str
    partition: int
    segments: tuple[Path, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def size(self) -> int:
        return sum(file_size(s) for s in self.segments)


def find_sources(
    path: Path, source_topic: str | None = None, partitions: tuple[int, ...] = ()
) -> list[SourcePartition]:
    """The source partitions under a segment file, partition dir, log dir or archive of log dirs.

    A log dir or archive holding several topics needs `source_topic`; internal topics (`__...`) are
    never picked without it. When an archive holds the same partition more than once (replicas), the
    copy reaching the highest offset is used.
    """
    if not path.exists():
        raise ReplayError(f"{path}: no such file or directory.")
    if path.is_file():
        found = [_lone_segment(path, source_topic)]
    elif _segment_names(path) and parse_partition_dir(path.resolve().name):
        found = [_partition_dir(path)]
    else:
        found = _partition_dirs_under(path)
        if not found:
            raise ReplayError(f"{path} holds no segment files, partition dirs or log dirs.")
        topics = sorted({s.topic for s in found})
        if source_topic is None:
            candidates = [t for t in topics if not t.startswith("__")]
            if len(candidates) != 1:
                listed = ", ".join(candidates or topics)
                raise ReplayError(f"{path} holds topics {listed}: pick one with --source-topic.")
            source_topic = candidates[0]
        if source_topic not in topics:
            raise ReplayError(
                f"{path} holds no partition of topic {source_topic!r} (it has {', '.join(topics)})."
            )
        found = [s for s in found if s.topic == source_topic]
    if partitions:
        missing = sorted(set(partitions) - {s.partition for s in found})
        if missing:
            raise ReplayError(
                f"{path} holds no partition {', '.join(map(str, missing))} of the source topic."
            )
        found = [s for s in found if s.partition in partitions]
    return sorted(found, key=lambda s: (s.topic, s.partition))


def check_framing(sources: list[SourcePartition]) -> None:
    """Walk every segment's batch framing (sizes and magic, not CRCs) and raise at the first corrupt
    unit: run before anything is created on the destination, so a random or truncated source fails
    with nothing changed. Window by window, so memory stays bounded; CRCs are left to the replay's own
    walk, which reads every byte anyway."""
    for source in sources:
        for path in source.segments:
            reader = SegmentReader(path, check_crc=False)
            try:
                for _ in reader.chunks():
                    pass
            except OSError as e:
                raise ReplayError(f"cannot read {path}: {(e.strerror or str(e)).lower()}.") from None
            finally:
                reader.close()
            end = reader.end
            if end is not None and end.reason is not StopReason.END:
                raise ReplayError(
                    f"{path}: corrupt data at position {end.position}: {(end.problem or 'corrupt data').rstrip('.')}; "
                    "nothing was sent or created (--skip-corrupt skips the rest of the segment)."
                )


def file_size(path: Path) -> int:
    """Its size in bytes; 0 for a file that cannot be read (gone meanwhile)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _lone_segment(path: Path, source_topic: str | None) -> SourcePartition:
    if base_offset_of(path.name) is None or not path.name.endswith(LOG_SUFFIX):
        raise ReplayError(f"{path} is not a segment file (NNNNNNNNNNNNNNNNNNNN.log).")
    parsed = parse_partition_dir(path.resolve().parent.name)
    if parsed is not None:
        topic, partition = parsed[0]
    else:
        topic, partition = source_topic or path.resolve().parent.name, 0
    return SourcePartition(topic, partition, (path,))


def _segment_names(path: Path) -> list[str]:
    try:
        names = os.listdir(path)
    except OSError as e:
        raise ReplayError(f"cannot read {path}: {(e.strerror or str(e)).lower()}.") from None
    return sorted(n for n in names if n.endswith(LOG_SUFFIX) and base_offset_of(n) is not None)


def _partition_dir(path: Path) -> SourcePartition:
    parsed = parse_partition_dir(path.resolve().name)
    assert parsed is not None
    names = _segment_names(path)
    segments = tuple(path / n for n in sorted(names, key=lambda n: base_offset_of(n) or 0))
    return SourcePartition(parsed[0].topic, parsed[0].partition, segments)


def _partition_dirs_under(root: Path) -> list[SourcePartition]:
    """Partition dirs in `root` (a log dir) and one level further down (an archive of log dirs)."""
    best: dict[tuple[str, int], SourcePartition] = {}
    for log_dir in (root, *sorted(d for d in root.iterdir() if d.is_dir())):
        try:
            children = sorted(log_dir.iterdir())
        except OSError:
            continue
        for child in children:
            parsed = parse_partition_dir(child.name)
            if parsed is None or parsed[1] is not None or not child.is_dir() or not _segment_names(child):
                continue
            found = _partition_dir(child)
            key = (found.topic, found.partition)
            if key not in best or _reach(found) > _reach(best[key]):
                best[key] = found
    return list(best.values())


def _reach(source: SourcePartition) -> tuple[int, int]:
    last = source.segments[-1]
    return (base_offset_of(last.name) or 0, file_size(last))
