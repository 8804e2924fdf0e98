"""`python -m kcli` and the `kcli` command: the command line, as a process of its own."""

import gc
import sys


def run() -> None:
    # kio registers a Hypothesis strategy for each of its primitive types whenever Hypothesis is
    # importable, an aid to kio's own tests that cost every kcli process 0.18 CPU-s at start (a quarter
    # of importing the broker) wherever Hypothesis happens to be installed. kcli never uses it, so a
    # kcli process sees it as absent; a program that imports kcli as a library is left alone.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    # Importing and building the command tree allocate tens of thousands of long-lived objects, and the
    # cyclic collector ran over and over while they were made: off until the command runs
    # (`kcli topics list` 0.13 -> 0.115 CPU-s; kcli.cli.main turns it back on)
    gc.disable()
    from kcli.cli.main import main

    main()


if __name__ == "__main__":
    run()
