"""A long fault-injection run on three kcli nodes (tests/faults), with its figures.

    python tests/bench/bench_faults.py [--faults 20] [--seed N] [--replication-factor 3] [--min-insync 2]
                                       [--rate 40] [--keep DIR] [--release-version 4.1]

Runs the seeded schedule of faults (SIGKILL, SIGTERM, SIGSTOP/SIGCONT, an isolated node, a cut link,
on the partition leader, a follower or the active controller) with an idempotent producer, a
transactional producer and two consumers throughout, then every check. Prints the faults, the writes
acknowledged / failed / timed out, the transactions, the recovery time per fault kind (median, max)
and, when a check fails, the violations and the seed to rerun (exit 1). Loopback only; every process
it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from faults.run import RunConfig, run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one, printed")
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--min-insync", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40.0, help="idempotent writes per second")
    parser.add_argument("--keep", type=Path, default=None, help="run in DIR and keep the nodes' logs")
    parser.add_argument(
        "--release-version",
        default=None,
        help="upgrade the cluster's features to this release first (4.1: eligible leader replicas on)",
    )
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    config = RunConfig(
        seed=seed,
        faults=args.faults,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync,
        partitions=args.partitions,
        rate=args.rate,
        release_version=args.release_version,
    )
    features = f", features of release {args.release_version}" if args.release_version else ""
    print(f"seed {seed}: {args.faults} faults, replication factor {args.replication_factor}, "
          f"min.insync.replicas {args.min_insync}{features}", flush=True)  # fmt: skip
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = run(config, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="kcli-bench-faults-") as tmp:
            result = run(config, Path(tmp))
    for record in result.faults:
        recovered = f"{record.recovery_s:.2f} s" if record.recovery_s is not None else "did not recover"
        print(f"  fault {record.index:2d}: {record.injected}; recovered in {recovered}")
    figures = result.figures()
    writes, txns = figures["writes"], figures["transactions"]
    print(f"faults: {figures['faults']}   elapsed: {figures['elapsed_s']} s")
    print(f"writes: acked {writes['acked']}, failed {writes['failed']}, timed out {writes['unknown']}, "
          f"unanswered {writes['pending']}")  # fmt: skip
    print(
        f"transactions: committed {txns['committed']}, aborted {txns['aborted']}, unknown {txns['unknown']}"
    )
    print(f"consumed: {figures['consumed']}")
    print("recovery (s) per fault kind:")
    for kind, stats in figures["recovery_s"].items():  # type: ignore[union-attr]
        print(f"  {kind:8s} n={stats['n']:2d}  median {stats['median']:6.2f}  max {stats['max']:6.2f}")
    for note in result.notes:
        print(f"note: {note}")
    if result.violations:
        print(f"FAILED with seed {seed} ({len(result.violations)} violations); rerun: "
              f"python tests/bench/bench_faults.py --faults {args.faults} --seed {seed} "
              f"--replication-factor {args.replication_factor} --min-insync {args.min_insync}")  # fmt: skip
        for violation in result.violations[:100]:
            print(f"  {violation}")
        print(json.dumps({"seed": seed, "violations": len(result.violations)}))
        return 1
    print(f"OK: every check held (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
