"""Each test file's time in a pytest junit xml: its tests' setup, call and teardown summed (module fixtures
included), longest first. With `--dist loadfile` a file runs whole on one worker, so these times and how
the files pack onto the workers bound the run (tests/scheduling.py orders them).

    python -m pytest -n 4 --dist loadfile -p no:cacheprovider --junitxml=/tmp/suite.xml
    python scripts/suite_times.py /tmp/suite.xml [TOP]

With KCLI_SUITE_CPU=DIR set for the run (tests/conftest.py writes each file's CPU-seconds and wall-clock
span and the worker's own share there), pass `--cpu DIR` after the xml to see them beside the times, and each
worker's timeline.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


def file_times(junit_xml: str) -> tuple[Counter[str], Counter[str]]:
    """(seconds, test count) per test file, keyed by module name (tests.test_x -> test_x)."""
    seconds: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        module = next((p for p in parts if p.startswith("test_")), ".".join(parts))
        seconds[module] += float(case.get("time", 0) or 0)
        counts[module] += 1
    return seconds, counts


@dataclass
class FileCpu:
    """What conftest wrote under KCLI_SUITE_CPU ("module cpu start end own" per line, one file per worker)."""

    cpu: Counter[str] = field(default_factory=Counter)
    """CPU-seconds per test file: the worker's own and those of the processes it started and reaped."""
    own: Counter[str] = field(default_factory=Counter)
    """The worker's own share: in-process clients, kcli runs in the test's process, the test's code."""
    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Each worker's files as (start, end) wall-clock pairs, by the worker's file name."""


def file_cpu(cpu_dir: Path) -> FileCpu:
    found = FileCpu()
    for path in sorted(cpu_dir.glob("*.cpu")):
        for line in path.read_text().splitlines():
            module, spent, *rest = line.split(" ")
            found.cpu[module] += float(spent)
            if len(rest) >= 2:
                found.spans.setdefault(path.stem, []).append((float(rest[0]), float(rest[1])))
            if len(rest) >= 3:
                found.own[module] += float(rest[2])
    return found


def print_workers(spans: dict[str, list[tuple[float, float]]]) -> None:
    """Per worker, seconds from the first file's start on any worker: when its first file began, when
    its last ended, and the time between files (fixtures of the session, scheduling) in between."""
    if not spans:
        return
    zero = min(start for pairs in spans.values() for start, _ in pairs)
    for worker, pairs in spans.items():
        pairs.sort()
        inside = sum(end - start for start, end in pairs)
        first, last = pairs[0][0] - zero, pairs[-1][1] - zero
        print(
            f"  worker {worker}: {len(pairs)} files from {first:.1f} s to {last:.1f} s, in files"
            f" {inside:.1f} s, between files {last - first - inside:.1f} s"
        )


def main(argv: list[str]) -> int:
    cpu_dir = None
    if "--cpu" in argv[:-1]:
        at = argv.index("--cpu")
        cpu_dir, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2 :]
    if not argv or len(argv) > 2:
        print("usage: python scripts/suite_times.py JUNIT_XML [TOP] [--cpu DIR]", file=sys.stderr)
        return 2
    try:
        seconds, counts = file_times(argv[0])
        top = int(argv[1]) if len(argv) > 1 else 20
        found = file_cpu(cpu_dir) if cpu_dir else FileCpu()
    except (OSError, ET.ParseError, ValueError) as error:
        print(f"suite_times: cannot read {argv[0]}: {error}", file=sys.stderr)
        return 1
    total = sum(seconds.values())
    cpu, own = found.cpu, found.own
    used = f", {sum(cpu.values()):.0f} CPU-s" if cpu else ""
    if own:
        used += f" ({sum(own.values()):.0f} in the workers themselves)"
    print(f"{total:.0f} s of tests in {len(seconds)} files ({sum(counts.values())} tests){used}")
    for module, spent in seconds.most_common(top):
        extra = f" {cpu[module]:7.1f} CPU-s" if cpu else ""
        if own:
            extra += f" ({own[module]:5.1f} own)"
        print(f"{spent:8.1f} s{extra} {counts[module]:5d} tests  {module}")
    print_workers(found.spans)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
