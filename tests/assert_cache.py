"""Write pytest's assert-rewritten bytecode of the suite's modules once, before the xdist workers start.

pytest rewrites the asserts of every test module, conftest and plugin it imports, and caches the result
beside the source (hash-checked, so it survives a fresh checkout once written). On a fresh clone every
xdist worker finds that cache empty and rewrites and compiles all of them itself at collection, all at
once: ~27 CPU-s and ~14 s of wall time on two cores before the first test. `./dev test` runs this first;
it writes the same files with pytest's own functions, split over the cores, and the workers then read them.
It is only a warm-up: if this pytest's internals differ, it says so in one line and the workers rewrite
as they always could.

    python -m tests.assert_cache
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PLUGINS = ("conftest.py", "kraft_cluster.py")
"""Besides test_*.py, what pytest rewrites here: the conftest and the plugin it names (pytest_plugins)."""


def _write(source: Path) -> None:
    from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc_fp, get_cache_dir

    cache = get_cache_dir(source)
    cache.mkdir(exist_ok=True)
    source_hash, code = _rewrite_test(source, None)  # type: ignore[arg-type]  # no config: the defaults
    target = cache / (source.name[:-3] + PYC_TAIL)
    partial = target.with_name(f"{target.name}.{os.getpid()}")
    with open(partial, "wb") as out:
        _write_pyc_fp(out, source_hash, code)
    os.replace(partial, target)  # atomic, as pytest writes its own


def main() -> int:
    sources = sorted(TESTS.glob("test_*.py")) + [TESTS / name for name in PLUGINS]
    try:
        with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(_write, sources, chunksize=4))
    except (ImportError, AttributeError, TypeError, OSError) as error:
        print(
            f"tests.assert_cache: not written ({error}); pytest rewrites the test files itself",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
