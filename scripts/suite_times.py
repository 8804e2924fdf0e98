"""Each test file's time in a pytest junit xml: its tests' setup, call and teardown summed (module fixtures
included), longest first. With `--dist loadfile` a file runs whole on one worker, so these times and how
the files pack onto the workers bound the run (tests/scheduling.py orders them).

    python -m pytest -n 4 --dist loadfile -p no:cacheprovider --junitxml=/tmp/suite.xml
    python scripts/suite_times.py /tmp/suite.xml [TOP]

With KCLI_SUITE_CPU=DIR set for the run (tests/conftest.py writes each file's CPU-seconds there), pass
`--cpu DIR` after the xml to see them beside the times.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
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


def file_cpu(cpu_dir: Path) -> Counter[str]:
    """CPU-seconds per test file, from the lines conftest writes under KCLI_SUITE_CPU."""
    cpu: Counter[str] = Counter()
    for path in cpu_dir.glob("*.cpu"):
        for line in path.read_text().splitlines():
            module, spent = line.rsplit(" ", 1)
            cpu[module] += float(spent)
    return cpu


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
        cpu = file_cpu(cpu_dir) if cpu_dir else Counter()
    except (OSError, ET.ParseError, ValueError) as error:
        print(f"suite_times: cannot read {argv[0]}: {error}", file=sys.stderr)
        return 1
    total = sum(seconds.values())
    used = f", {sum(cpu.values()):.0f} CPU-s" if cpu else ""
    print(f"{total:.0f} s of tests in {len(seconds)} files ({sum(counts.values())} tests){used}")
    for module, spent in seconds.most_common(top):
        extra = f" {cpu[module]:7.1f} CPU-s" if cpu else ""
        print(f"{spent:8.1f} s{extra} {counts[module]:5d} tests  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
