"""`python -m kcli` and the `kcli` command: the command line, as a process of its own."""

import gc
import sys


def run() -> None:
    # kio registers a Hypothesis strategy for each of its primitive types whenever Hypothesis is
    # importable, an aid to kio's own tests that cost every kcli process 0.18 CPU-s at start (a quarter
    # of importing the broker) wherever Hypothesis happens to be installed. kcli never uses it, so a
    # kcli process sees it as absent; a program that imports kcli as a library is left alone.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    # Importing allocates tens of thousands of long-lived objects, and the cyclic collector ran over and
    # over while they were made: off while importing (~5% of a broker's start, 0.25 -> 0.235 CPU-s)
    gc.disable()
    from kcli.cli.main import main

    main()


if __name__ == "__main__":
    run()
