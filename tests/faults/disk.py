"""After a run, with every node stopped: `kcli verify` on each log dir, and the replicas of each
partition byte-identical below the high watermark (Kafka's replica consistency: any two replicas
agree on the prefix up to the smaller high watermark)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from faults.cluster import kcli_env
from formats.checkpoints import read_offset_checkpoint
from formats.segment import walk

VERIFY_TIMEOUT_S = 120.0


def verify_log_dirs(log_dirs: Mapping[int, Path]) -> list[str]:
    """`kcli verify` on each node's log dir; a violation per node whose verify does not exit 0."""
    violations = []
    for node_id, log_dir in sorted(log_dirs.items()):
        result = subprocess.run(
            [sys.executable, "-m", "kcli", "verify", str(log_dir)],
            capture_output=True,
            text=True,
            timeout=VERIFY_TIMEOUT_S,
            env=kcli_env(),
        )
        if result.returncode != 0:
            findings = (result.stdout + result.stderr).strip().splitlines()
            violations.append(
                f"kcli verify of node {node_id} exited {result.returncode}: " + " | ".join(findings[:10])
            )
    return violations


def high_watermarks(log_dir: Path) -> dict[tuple[str, int], int]:
    """The node's replication-offset-checkpoint (written at its clean shutdown)."""
    path = log_dir / "replication-offset-checkpoint"
    return read_offset_checkpoint(path.read_text()) if path.exists() else {}


def read_batches(partition_dir: Path) -> dict[int, tuple[int, bytes]]:
    """{base offset: (last offset, the batch's bytes)} of every whole batch of every segment."""
    batches: dict[int, tuple[int, bytes]] = {}
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for batch in walk(data, check_crc=True).batches:
            batches[batch.base_offset] = (
                batch.last_offset,
                data[batch.position : batch.position + batch.size],
            )
    return batches


def compare_replicas(
    log_dirs: Mapping[int, Path], assignment: Mapping[tuple[str, int], Sequence[int]]
) -> tuple[list[str], dict[tuple[str, int], int]]:
    """The replicas of each partition hold the same batches, byte for byte, below the smallest of their
    high watermarks, and each holds every offset below its own. (violations, {partition: that HW})."""
    violations = []
    compared: dict[tuple[str, int], int] = {}
    for (topic, partition), replicas in sorted(assignment.items()):
        name = f"{topic}-{partition}"
        marks = {r: high_watermarks(log_dirs[r]).get((topic, partition), 0) for r in replicas}
        below = min(marks.values(), default=0)
        compared[(topic, partition)] = below
        logs = {r: read_batches(log_dirs[r] / name) for r in replicas if (log_dirs[r] / name).is_dir()}
        for replica in replicas:
            if replica not in logs:
                violations.append(f"{name}: replica {replica} has no partition directory")
                continue
            end = max((last + 1 for last, _ in logs[replica].values()), default=0)
            if end < marks[replica]:
                violations.append(
                    f"{name}: replica {replica}'s log ends at {end}, below its high watermark {marks[replica]}"
                )
        reference: int | None = None
        for replica, batches in sorted(logs.items()):
            prefix = {base: data for base, (last, data) in batches.items() if last < below}
            if reference is None:
                reference, expected = replica, prefix
                continue
            if prefix != expected:
                differing = sorted(b for b in set(prefix) | set(expected) if prefix.get(b) != expected.get(b))
                violations.append(
                    f"{name}: replicas {reference} and {replica} differ below the high watermark {below} "
                    f"(batches at offsets {differing[:10]})"
                )
    return violations, compared
