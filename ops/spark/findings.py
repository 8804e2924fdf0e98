"""The second level of the audit: fold the rows of every range into findings, partition by partition.

Ranges of a partition are put back in file order; what one range could not see alone is checked at the
seams between them (the batch before a range's first one, producers re-sending across a range edge,
copies of a record on both sides of one). Gaps are classified here, with `ops.gaps`, once the whole
partition is known. Nothing here reads a file or needs Spark.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from ops import gaps
from ops.spark.archive import CONSUMER_OFFSETS, PartitionDir
from ops.spark.checks import PRODUCER_BATCHES_KEPT, AuditOptions, Row, same_batch, within

WARNING_KINDS = frozenset({gaps.RETENTION, gaps.CONTROL_MARKER, gaps.COMPACTION})
"""Gaps Kafka makes on purpose: reported, but not what makes the exit code 1."""


@dataclass
class Finding:
    """One thing found, with where it is on both sides where there are two sides."""

    job: str  # gaps, duplicates, lag, corrupt
    kind: str
    topic: str
    partition: int
    log_dir: str
    first_offset: int | None
    last_offset: int | None
    message: str
    details: dict = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return "warning" if self.kind in WARNING_KINDS else "error"

    def to_json(self) -> dict:
        return {
            "type": "finding",
            "job": self.job,
            "kind": self.kind,
            "severity": self.severity,
            "topic": self.topic,
            "partition": self.partition,
            "log_dir": self.log_dir,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "message": self.message,
            **self.details,
        }


@dataclass
class LagRow:
    group: str
    topic: str
    partition: int
    committed: int
    end_offset: int | None
    lag: int | None
    lag_seconds: float | None

    def to_json(self) -> dict:
        return {"type": "lag", **self.__dict__}


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    lag: list[LagRow] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def exit_code(self) -> int:
        """1 when something needs attention (explained gaps alone do not), else 0."""
        return 1 if self.errors else 0

    def to_json(self) -> list[dict]:
        return (
            [f.to_json() for f in self.findings]
            + [r.to_json() for r in self.lag]
            + [{"type": "summary", **self.stats}]
        )

    def sort(self) -> None:
        self.findings.sort(
            key=lambda f: (f.log_dir, f.topic, f.partition, f.first_offset or -1, f.kind, f.message)
        )
        self.lag.sort(key=lambda r: (r.group, r.topic, r.partition))


def fold_commits(rows: Iterable[Row]) -> dict[tuple[str, str, int], int]:
    """{(group, topic, partition): committed offset} from the `commit` rows of __consumer_offsets ranges."""
    newest: dict[tuple[str, str, int], tuple[int, int | None]] = {}
    for _, _, kind, payload in rows:
        if kind != "commit":
            continue
        group, topic, partition, log_offset, committed, _ = orjson.loads(payload)
        key = (group, topic, partition)
        if key not in newest or log_offset >= newest[key][0]:
            newest[key] = (log_offset, committed)
    return {key: committed for key, (_, committed) in newest.items() if committed is not None}


def committed_targets(
    commits: dict[tuple[str, str, int], int], partitions: Iterable[PartitionDir]
) -> dict[str, list[int]]:
    """For each partition dir, the committed offsets whose record times the lag job needs."""
    by_tp: dict[tuple[str, int], set[int]] = defaultdict(set)
    for (_, topic, partition), offset in commits.items():
        by_tp[(topic, partition)].add(offset)
    return {
        p.key: sorted(by_tp[(p.topic, p.partition)]) for p in partitions if (p.topic, p.partition) in by_tp
    }


def build_report(
    rows: Iterable[Row],
    partitions: Iterable[PartitionDir],
    options: AuditOptions,
    *,
    commits: dict[tuple[str, str, int], int] | None = None,
) -> Report:
    """Every finding of the checks in `options`, from the rows of all ranges of the archive."""
    by_partition: dict[str, list[tuple[str, str, object]]] = defaultdict(list)
    for range_id, key, kind, payload in rows:
        by_partition[key].append((range_id, kind, orjson.loads(payload)))
    report = Report()
    parts = {p.key: p for p in partitions}
    ends: dict[str, tuple[int | None, int | None]] = {}
    times: dict[str, dict[int, tuple[int, int]]] = {}
    newest_timestamp = -1
    for key in sorted(by_partition):
        part = parts[key]
        folded = _Partition(part, by_partition[key])
        newest_timestamp = max(newest_timestamp, folded.max_timestamp)
        report.findings += folded.corrupt()
        if "gaps" in options.checks:
            report.findings += folded.gaps()
        if "duplicates" in options.checks:
            report.findings += folded.idempotent_duplicates()
            report.findings += folded.content_duplicates(options)
        ends[key] = (folded.end_offset, folded.end_offset_at)
        times[key] = folded.record_times()
    if "lag" in options.checks and commits is not None:
        report.lag, lag_findings = _lag(commits, parts, ends, times, options.at, newest_timestamp)
        report.findings += lag_findings
    report.sort()
    return report


class _Partition:
    """The rows of one partition dir, ranges back in file order; rows of ranges the walk cannot reach
    (after bytes that cannot be framed, in the same file) are left out, as Kafka's reader would stop."""

    def __init__(self, part: PartitionDir, rows: list[tuple[str, str, object]]) -> None:
        self.part = part
        ranges = sorted(
            (p for _, kind, p in rows if kind == "range"),
            key=lambda r: (r["segment_base"], r["file"], r["start"]),
        )
        dead: set[str] = set()
        stopped_files: set[str] = set()
        kept = []
        for r in ranges:
            range_id = f"{r['file']}:{r['start']}"
            if r["file"] in stopped_files:
                dead.add(range_id)
                continue
            kept.append(r)
            if r["stopped"]:
                stopped_files.add(r["file"])
        self.ranges = kept
        self.rows: dict[str, list] = defaultdict(list)
        self.by_range: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for range_id, kind, payload in rows:
            if range_id in dead or kind == "range":
                continue
            self.rows[kind].append(payload)
            self.by_range[range_id][kind].append(payload)
        with_batches = [r for r in self.ranges if r["batches"]]
        self.end_offset = max((r["end_offset"] for r in with_batches), default=None)
        at_ends = [r["end_offset_at"] for r in with_batches if r["end_offset_at"] is not None]
        self.end_offset_at = max(at_ends, default=None)
        self.first_offset = None
        if with_batches:
            first = with_batches[0]["first"]
            self.first_offset = first[1] if first[1] is not None else first[2]
        self.max_timestamp = max((r["max_timestamp"] for r in self.ranges), default=-1)

    def finding(
        self, job: str, kind: str, first: int | None, last: int | None, message: str, **details
    ) -> Finding:
        p = self.part
        return Finding(job, kind, p.topic, p.partition, p.log_dir, first, last, message, details)

    # --- corrupt data -------------------------------------------------------------------------------------

    def corrupt(self) -> list[Finding]:
        return [
            self.finding("corrupt", kind, first, last, message, file=file, position=position)
            for file, position, first, last, kind, message in self.rows["corrupt"]
        ]

    # --- gaps and overlaps --------------------------------------------------------------------------------

    def gaps(self) -> list[Finding]:
        part = self.part
        facts = gaps.PartitionFacts(
            part.log_start_checkpoint,
            part.first_segment_base,
            part.compacted,
            any(r["compaction_seen"] for r in self.ranges),
        )
        found: list[Finding] = []
        candidates = list(self.rows["discontinuity"])
        prev = None  # [file, position, last offset, attributes, crc valid] of the batch before
        for r in self.ranges:
            if not r["batches"]:
                continue
            position, first, last = r["first"]
            if prev is None:
                if first is not None and (head := gaps.head_gap(first, facts)) is not None:
                    found.append(
                        self.finding(
                            "gaps",
                            head.kind,
                            head.first,
                            head.last,
                            head.message,
                            **_sides(None, [r["file"], position, first]),
                        )
                    )
            elif prev[4] and first != prev[2] + 1:
                candidates.append([r["file"], position, first, last, prev[0], prev[1], prev[2], prev[3]])
            last_position, last_offset, attributes, crc_valid = r["last"]
            prev = [r["file"], last_position, last_offset, attributes, crc_valid]
        for file, position, first, last, prev_file, prev_position, prev_last, prev_attributes in candidates:
            expected = prev_last + 1
            before, after = (
                [prev_file, prev_position, prev_last],
                [file, position, first if first is not None else last],
            )
            if first is None or first < expected:
                if first is None and last >= expected:
                    continue  # a v0/v1 compressed wrapper: only its last offset is known, and it moves on
                shown = first if first is not None else last
                found.append(
                    self.finding(
                        "gaps",
                        gaps.OVERLAP,
                        shown,
                        last,
                        f"this batch (offsets {shown}..{last}) starts at or below offset {prev_last}, "
                        "the last offset of the batch before it.",
                        **_sides(before, after),
                    )  # fmt: skip
                )
                continue
            gap = gaps.inner_gap(expected, first - 1, prev_attributes, facts)
            found.append(
                self.finding("gaps", gap.kind, gap.first, gap.last, gap.message, **_sides(before, after))
            )
        return found

    # --- duplicates ---------------------------------------------------------------------------------------

    def idempotent_duplicates(self) -> list[Finding]:
        copies: dict[tuple, set[tuple]] = defaultdict(set)
        for pid, epoch, base_seq, last_seq, pair in self.rows["idempotent"]:
            copies[(pid, epoch, base_seq, last_seq)].update(tuple(c) for c in pair)
        recent: dict[tuple[int, int], deque] = defaultdict(lambda: deque(maxlen=PRODUCER_BATCHES_KEPT))
        for r in self.ranges:
            for rows in self.by_range[f"{r['file']}:{r['start']}"]["producers"]:
                for pid, epoch, head, tail in rows:
                    before = recent[(pid, epoch)]
                    for entry in head:
                        for old in before:
                            if old[0] == entry[0] and old[1] == entry[1]:
                                copies[(pid, epoch, entry[0], entry[1])].update(
                                    {tuple(old[2:]), tuple(entry[2:])}
                                )
                    before.extend(tail)
        found = []
        for (pid, epoch, base_seq, last_seq), where in sorted(copies.items()):
            listed = sorted(where, key=lambda c: (c[2], c[0], c[1]))
            offsets = ", ".join(f"{c[2]}..{c[3]}" for c in listed)
            found.append(
                self.finding(
                    "duplicates",
                    "idempotent_duplicate",
                    listed[0][2],
                    listed[-1][3],
                    f"producer {pid} epoch {epoch} wrote sequences {base_seq}..{last_seq} {len(listed)} times, "
                    f"at offsets {offsets}.",
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=base_seq,
                    last_sequence=last_seq,
                    copies=[
                        {"file": c[0], "position": c[1], "base_offset": c[2], "last_offset": c[3]}
                        for c in listed
                    ],
                )  # fmt: skip
            )
        return found

    def content_duplicates(self, options: AuditOptions) -> list[Finding]:
        groups = _Groups()
        for kh, vh, a, b in self.rows["content"]:
            groups.join((kh, vh), a, b)
        recent: dict[tuple[int, int], list[list]] = defaultdict(list)
        for r in self.ranges:
            for edges in self.by_range[f"{r['file']}:{r['start']}"]["edges"]:
                for copy in edges["head"]:
                    h = (copy[2], copy[3])
                    for old in recent.get(h, ()):
                        if within(old, copy, options.window_offsets, options.window_ms) and not same_batch(
                            old, copy
                        ):
                            groups.join(
                                h, [old[0], old[1], old[5], old[6]], [copy[0], copy[1], copy[5], copy[6]]
                            )
                for copy in edges["tail"]:
                    recent[(copy[2], copy[3])].append(copy)
        found = []
        for (kh, vh), members in groups.groups():
            listed = sorted(members)
            offsets = ", ".join(str(c[0]) for c in listed)
            window = (
                f"{options.window_ms} ms"
                if options.window_ms is not None
                else f"{options.window_offsets} offsets"
            )
            found.append(
                self.finding(
                    "duplicates",
                    "content_duplicate",
                    listed[0][0],
                    listed[-1][0],
                    f"the same key and value appear {len(listed)} times within {window}, at offsets {offsets}.",
                    key_hash=kh,
                    value_hash=vh,
                    copies=[
                        {"offset": c[0], "timestamp": c[1], "file": c[2], "position": c[3]} for c in listed
                    ],
                )  # fmt: skip
            )
        return found

    # --- lag ----------------------------------------------------------------------------------------------

    def record_times(self) -> dict[int, tuple[int, int]]:
        """{committed offset: (offset, timestamp) of the first record at or after it}."""
        best: dict[int, tuple[int, int]] = {}
        for rows in self.rows["lag_times"]:
            for target, offset, ts in rows:
                if target not in best or offset < best[target][0]:
                    best[target] = (offset, ts)
        return best


def _lag(
    commits: dict[tuple[str, str, int], int],
    parts: dict[str, PartitionDir],
    ends: dict[str, tuple[int | None, int | None]],
    times: dict[str, dict[int, tuple[int, int]]],
    at: int | None,
    newest_timestamp: int,
) -> tuple[list[LagRow], list[Finding]]:
    """Lag of each committed offset against its partition's end (as of `at`), in records and seconds.

    Seconds are measured from `at`, else from the newest timestamp in the archive (its snapshot time),
    to the timestamp of the first record the group has not consumed.
    """
    keys_by_tp: dict[tuple[str, int], list[str]] = defaultdict(list)
    for key, p in parts.items():
        if p.topic != CONSUMER_OFFSETS:
            keys_by_tp[(p.topic, p.partition)].append(key)
    reference = at if at is not None else newest_timestamp
    rows, findings = [], []
    for (group, topic, partition), committed in sorted(commits.items()):
        keys = [k for k in keys_by_tp.get((topic, partition), ()) if k in ends]
        if not keys:
            rows.append(LagRow(group, topic, partition, committed, None, None, None))
            continue
        key = max(keys, key=lambda k: ends[k][0] or -1)  # of several copies of a partition, the longest
        end, end_at = ends[key]
        if at is not None:
            end = (
                end_at
                if end_at is not None
                else parts[key].log_start_checkpoint or parts[key].first_segment_base
            )
        lag = max(0, (end or 0) - committed)
        seconds = 0.0
        if lag:
            found = times.get(key, {}).get(committed)
            seconds = max(0, reference - found[1]) / 1000 if found is not None else None
        row = LagRow(group, topic, partition, committed, end, lag, seconds)
        rows.append(row)
        if lag:
            p = parts[key]
            age = f" ({seconds:.3f} s behind)" if seconds is not None else ""
            findings.append(
                Finding(
                    "lag",
                    "consumer_lag",
                    topic,
                    partition,
                    p.log_dir,
                    committed,
                    end - 1,
                    f"group {group} committed offset {committed}, {lag} records before the end offset {end}{age}.",
                    {"group": group, "lag": lag, "lag_seconds": seconds},
                )  # fmt: skip
            )
    return rows, findings


class _Groups:
    """Copies of one record content joined into groups (a union-find keyed by copy)."""

    def __init__(self) -> None:
        self.parent: dict[tuple, tuple] = {}
        self.hash_of: dict[tuple, tuple[int, int]] = {}

    def join(self, h: tuple[int, int], a: list, b: list) -> None:
        ka, kb = (h, a[0], a[2]), (h, b[0], b[2])
        for k, c in ((ka, a), (kb, b)):
            if k not in self.parent:
                self.parent[k] = k
                self.hash_of[k] = tuple(c)
        ra, rb = self._root(ka), self._root(kb)
        if ra != rb:
            self.parent[rb] = ra

    def _root(self, k: tuple) -> tuple:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def groups(self) -> list[tuple[tuple[int, int], list[tuple]]]:
        out: dict[tuple, list[tuple]] = defaultdict(list)
        for k in self.parent:
            out[self._root(k)].append(self.hash_of[k])
        return sorted(((root[0], members) for root, members in out.items()), key=lambda g: min(g[1]))


def _sides(before: list | None, after: list) -> dict:
    """The batch on each side of a gap or overlap: file, byte position and offset."""
    side = lambda s: None if s is None else {"file": s[0], "position": s[1], "offset": s[2]}  # noqa: E731
    return {"before": side(before), "after": side(after)}
