"""Figures of moving replicas between the log dirs of one broker (AlterReplicaLogDirs), in a cluster.

    python tests/bench/bench_log_dirs.py [--mib 64] [--throttle-mib 16] [--rate 2000]

Three kcli nodes on loopback (combined mode); node 2 has two log dirs. A topic has partition 0
followed by node 2 (led by node 1) and partition 1 led by node 2; each is filled with `--mib` MiB of
1 KiB records, then node 2 moves both replicas to its other dir while an idempotent producer writes
`--rate` records/s to each. It runs once without a throttle and once with
`replica.alter.log.dirs.io.max.bytes.per.second` = `--throttle-mib` MiB/s (a static setting of the
nodes), and prints per run: the time until both moves completed, the bytes copied (the moved logs' size when
both moves completed) and the copy rate against the throttle. It checks what the suite's single-broker tests cannot (tests/test_log_dirs.py):
a follower's replica moving while its fetcher appends, every broker's replicas byte-identical
afterwards, every acknowledged record read back once, and REPLICA_NOT_AVAILABLE for a partition with
no replica on node 2. One JSON line per run, then a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import free_port_range  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kraft_cluster import REPLICATION, create_topic  # noqa: E402
from test_log_dirs import Writer, alter_replica_log_dirs, read_all, segment_bytes, where  # noqa: E402
from waiting import wait_for  # noqa: E402

from kcli.config import BrokerConfig  # noqa: E402
from kcli.storage import format_storage  # noqa: E402
from ops.local_cluster import LocalCluster, plan  # noqa: E402

TOPIC = "moving"


class _Paced(Writer):
    """The suite's writer at a fixed rate of 1 KiB records."""

    def __init__(self, bootstrap: str, partition: int, rate: int) -> None:
        super().__init__(bootstrap, TOPIC, partition, f"p{partition}")
        self.rate = rate

    def _run(self) -> None:
        tick = 0.02
        while not self._stop.is_set():
            self.write(max(1, int(self.rate * tick)), size=1024)
            self.producer.poll(0)
            time.sleep(tick)


def run(root: Path, mib: int, throttle: int | None, rate: int) -> dict:
    overrides = [*REPLICATION, "log.segment.delete.delay.ms=1000"]
    if throttle is not None:
        overrides.append(f"replica.alter.log.dirs.io.max.bytes.per.second={throttle}")
    layout = plan(root, 3, free_port_range(6), overrides)
    second = layout.nodes[1]
    dirs = [second.directory / "data", second.directory / "data2"]
    text = second.properties.read_text()
    second.properties.write_text(text.replace(f"log.dirs={dirs[0]}\n", f"log.dirs={dirs[0]},{dirs[1]}\n"))
    config = BrokerConfig.load(config_file=second.properties)
    format_storage(config, layout.cluster_id, ignore_formatted=True, now_ms=int(time.time() * 1000))
    cluster = LocalCluster(layout)
    cluster.start()
    try:
        bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in layout.nodes)
        on_second = f"127.0.0.1:{second.port}"
        create_topic(bootstrap, TOPIC, [[1, 2], [2, 3], [3, 1]])
        writers, moves, sizes = [], {}, {}
        for index in (0, 1):
            writer = _Paced(bootstrap, index, rate)
            writer.write(mib * 1024, size=1024)
            assert writer.producer.flush(120) == 0
            writers.append(writer)
        for index in (0, 1):
            source = wait_for(f"{TOPIC}-{index} on node 2", lambda i=index: where(on_second, TOPIC, i)[0], 60)
            wait_for(
                f"node 2 to catch up on {TOPIC}-{index}",
                lambda i=index, s=source: len(segment_bytes(Path(s) / f"{TOPIC}-{i}")) >= mib * 1024 * 1024,
                120,
            )
            sizes[index] = len(segment_bytes(Path(source) / f"{TOPIC}-{index}"))
            target = next(str(d) for d in dirs if str(d) != source)
            moves.setdefault(target, {TOPIC: []})[TOPIC].append(index)
        moves.setdefault(str(dirs[0]), {TOPIC: []})[TOPIC].append(2)
        for writer in writers:
            writer.start()
        started = time.monotonic()
        answered = alter_replica_log_dirs(on_second, moves)
        assert answered == {
            (TOPIC, 0): ErrorCode.none,
            (TOPIC, 1): ErrorCode.none,
            (TOPIC, 2): ErrorCode.replica_not_available,
        }, answered
        targets = {index: path for path, topics in moves.items() for index in topics[TOPIC]}
        for index in (0, 1):
            wait_for(
                f"{TOPIC}-{index} to move",
                lambda i=index: where(on_second, TOPIC, i) == (targets[i], None),
                600,
                0.2,
            )
        elapsed = time.monotonic() - started
        copied = sum(len(segment_bytes(Path(targets[i]) / f"{TOPIC}-{i}")) for i in (0, 1))
        for writer in writers:
            writer.stop()
        for index, writer in enumerate(writers):
            values = read_all(bootstrap, TOPIC, index, len(writer.acked))
            assert len(values) == len(set(values)) == len(writer.acked) and set(values) == set(writer.acked)

        def identical() -> bool:
            return all(
                len({segment_bytes(d) for n in layout.nodes for d in n.directory.glob(f"data*/{TOPIC}-{i}")})
                == 1
                for i in (0, 1)
            )

        wait_for("byte-identical replicas on every broker", identical, 120, 0.5)
    finally:
        cluster.stop()
    return {
        "throttle_bytes_per_s": throttle,
        "bytes_before": sum(sizes.values()),
        "bytes_copied": copied,
        "seconds": round(elapsed, 2),
        "rate_bytes_per_s": round(copied / elapsed),
        "rate_vs_throttle": None if throttle is None else round(copied / elapsed / throttle, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="MiB in each partition before the move")
    parser.add_argument("--throttle-mib", type=float, default=16, help="the throttled run's MiB/s")
    parser.add_argument(
        "--rate", type=int, default=2000, help="records/s produced to each partition meanwhile"
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="kcli-bench-log-dirs-") as tmp:
        for k, throttle in enumerate((None, int(args.throttle_mib * 1024 * 1024))):
            result = run(Path(tmp) / f"run-{k}", args.mib, throttle, args.rate)
            print(json.dumps(result), flush=True)
            results.append(result)
    print(f"\n{'throttle MiB/s':>15} {'copied MiB':>10} {'seconds':>8} {'MiB/s':>8} {'vs throttle':>12}")
    for r in results:
        throttle = "-" if r["throttle_bytes_per_s"] is None else f"{r['throttle_bytes_per_s'] / 2**20:g}"
        ratio = "-" if r["rate_vs_throttle"] is None else f"{r['rate_vs_throttle']:.3f}"
        print(
            f"{throttle:>15} {r['bytes_copied'] / 2**20:>10.1f} {r['seconds']:>8} "
            f"{r['rate_bytes_per_s'] / 2**20:>8.2f} {ratio:>12}"
        )
    print(
        f"\nreproduce: python tests/bench/bench_log_dirs.py --mib {args.mib} --throttle-mib {args.throttle_mib:g} --rate {args.rate}"
    )


if __name__ == "__main__":
    main()
