"""Each test file's time in a pytest junit xml: its tests' setup, call and teardown summed (module fixtures
included), longest first. With `--dist loadfile` a file runs whole on one worker, so these times and how
the files pack onto the workers bound the run (tests/scheduling.py orders them).

    python -m pytest -n 4 --dist loadfile -p no:cacheprovider --junitxml=/tmp/suite.xml
    python scripts/suite_times.py /tmp/suite.xml [TOP]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


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


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print("usage: python scripts/suite_times.py JUNIT_XML [TOP]", file=sys.stderr)
        return 2
    try:
        seconds, counts = file_times(argv[0])
        top = int(argv[1]) if len(argv) > 1 else 20
    except (OSError, ET.ParseError, ValueError) as error:
        print(f"suite_times: cannot read {argv[0]}: {error}", file=sys.stderr)
        return 1
    total = sum(seconds.values())
    print(f"{total:.0f} s of tests in {len(seconds)} files ({sum(counts.values())} tests)")
    for module, spent in seconds.most_common(top):
        print(f"{spent:8.1f} s {counts[module]:5d} tests  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
