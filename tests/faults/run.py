"""One fault-injection run: a cluster, the workload, the seeded faults, then every check.

    steady state -> inject -> hold `duration` -> heal -> recovery (steady state again), per fault

Steady state: every node running and unfenced, a quorum leader, every partition of the data topic with
a leader and a full ISR, and since the wait began, acknowledged writes and records read by every
consumer. Each wait is bounded; a cluster that does not recover is a finding (liveness), reported with
the seed, and the run goes on to its final checks with every fault healed.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from faults import schedule
from faults.checker import check
from faults.cluster import ClusterTimeout, FaultCluster, wait_for
from faults.disk import compare_replicas, verify_log_dirs
from faults.history import History, Outcome, TxnOutcome
from faults.workload import (
    LOG,
    TRANSACTIONAL_ID,
    IdempotentProducer,
    Known,
    Reader,
    TransactionalProducer,
    Worker,
    final_read,
    stop_all,
)


@dataclass(frozen=True)
class RunConfig:
    seed: int
    faults: int
    replication_factor: int = 3
    min_insync_replicas: int = 2
    partitions: int = 3
    rate: float = 40.0  # idempotent writes per second
    steady_timeout: float = 60.0
    recovery_timeout: float = 90.0
    topic: str = "faults"
    txn_topic: str = "faults-txn"
    release_version: str | None = None
    """Upgrade the running cluster's features to this release first (UpdateFeatures), e.g. "4.1" for
    eligible leader replicas (KIP-966); None keeps kcli's default levels."""


@dataclass
class FaultRecord:
    index: int
    injected: str
    kind: str
    target: str
    node: int
    recovery_s: float | None  # from the heal to steady state again; None when it did not recover


@dataclass
class RunResult:
    config: RunConfig
    history: History
    faults: list[FaultRecord] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def figures(self) -> dict[str, object]:
        outcomes = defaultdict(int)
        for write in self.history.writes:
            outcomes[write.outcome.value] += 1
        txns = defaultdict(int)
        for txn in self.history.transactions:
            txns[txn.outcome.value] += 1
        recovery: dict[str, list[float]] = defaultdict(list)
        for record in self.faults:
            if record.recovery_s is not None:
                recovery[record.kind].append(record.recovery_s)
        return {
            "seed": self.config.seed,
            "faults": len(self.faults),
            "writes": {o.value: outcomes[o.value] for o in Outcome},
            "transactions": {o.value: txns[o.value] for o in TxnOutcome},
            "consumed": {name: len(seen) for name, seen in self.history.consumed.items()},
            "recovery_s": {
                kind: {"n": len(v), "median": round(statistics.median(v), 2), "max": round(max(v), 2)}
                for kind, v in sorted(recovery.items())
            },
            "elapsed_s": round(self.elapsed_s, 1),
        }

    def report(self) -> str:
        lines = [f"seed {self.config.seed}: {len(self.violations)} violation(s)"]
        lines += [f"  fault {r.index}: {r.injected}, recovered in {r.recovery_s} s" for r in self.faults]
        lines += [f"  VIOLATION {v}" for v in self.violations[:50]]
        lines += [f"  note {n}" for n in self.notes[:20]]
        lines.append(f"  figures {self.figures()}")
        return "\n".join(lines)


def _upgrade_features(bootstrap: str, release: str) -> None:
    """`kcli features upgrade --release-version RELEASE`, through kcli's own admin code."""
    from kcli.cluster import Cluster
    from kcli.features import UpgradeType
    from ops.features import release_updates, update_features

    async def upgrade() -> dict[str, str | None]:
        async with await Cluster.connect(bootstrap) as cluster:
            updates = release_updates(release, UpgradeType.UPGRADE)
            return await update_features(cluster, updates, UpgradeType.UPGRADE, dry_run=False)

    failed = {name: error for name, error in asyncio.run(upgrade()).items() if error is not None}
    assert not failed, f"features upgrade to {release} failed: {failed}"


def run(config: RunConfig, workdir: Path) -> RunResult:
    """Run `config` in `workdir`; every process it starts is stopped (by PID) before it returns."""
    began = time.monotonic()
    history = History(config.topic, config.txn_topic)
    result = RunResult(config, history)
    cluster = FaultCluster(workdir / "cluster")
    workers: list[Worker] = []
    try:
        cluster.start()
        if config.release_version is not None:
            _upgrade_features(cluster.bootstrap, config.release_version)
        admin = AdminClient(
            {"bootstrap.servers": cluster.bootstrap, "client.id": "faults-admin", "logger": LOG}
        )
        _create_topics(admin, config)
        known = Known()
        rng = random.Random(config.seed)
        producer = IdempotentProducer(cluster.bootstrap, history, known, config.partitions, config.rate, rng)
        txns = TransactionalProducer(
            cluster.bootstrap, history, config.partitions, random.Random(rng.random())
        )
        topics = {config.topic: config.partitions, config.txn_topic: config.partitions}
        readers = [
            Reader(cluster.bootstrap, history, "reader-uncommitted", "read_uncommitted", topics, known),
            Reader(cluster.bootstrap, history, "reader-committed", "read_committed", topics, known),
        ]
        workers = [producer, txns, *readers]
        for worker in workers:
            worker.start()
        progress = [producer, *readers]
        try:
            _steady(
                cluster,
                admin,
                config,
                [*progress, txns],
                "steady state before the first fault",
                config.steady_timeout,
            )
            for index, fault in enumerate(schedule.plan(config.seed, config.faults)):
                _steady(
                    cluster,
                    admin,
                    config,
                    progress,
                    f"steady state before fault {index}",
                    config.steady_timeout,
                )
                node = _resolve(cluster, admin, config, fault)
                injected = schedule.inject(cluster, fault, node)
                record = FaultRecord(index, str(injected), fault.kind, fault.target, node, None)
                result.faults.append(record)
                time.sleep(fault.duration)
                healed = time.monotonic()
                schedule.heal(cluster, injected)
                _steady(
                    cluster,
                    admin,
                    config,
                    progress,
                    f"recovery after fault {index} ({injected})",
                    config.recovery_timeout,
                )
                record.recovery_s = round(time.monotonic() - healed, 2)
            # Transactions too must come back: a coordinator left with a PrepareCommit/PrepareAbort it
            # no longer completes answers CONCURRENT_TRANSACTIONS for good, and nothing else shows it.
            _steady(
                cluster,
                admin,
                config,
                [*progress, txns],
                "a transaction completed after the last fault",
                config.recovery_timeout,
            )
        except ClusterTimeout as exc:
            result.violations.append(f"liveness: {exc}")
        _heal_everything(cluster, result)
        result.violations += stop_all(workers, timeout=60.0)
        result.notes += [f"{w.name}: {n}" for w in workers for n in w.notes[-5:]]
        _close_open_transaction(cluster.bootstrap, result)
        history.final, history.final_end = final_read(
            cluster.bootstrap, config.topic, config.partitions, "read_uncommitted"
        )
        history.final_committed, _ = final_read(
            cluster.bootstrap, config.txn_topic, config.partitions, "read_committed"
        )
        assignment = _assignment(admin, config)
        exits = cluster.stop()
        result.violations += [
            f"node {n} exited {code} at the final SIGTERM" for n, code in exits.items() if code
        ]
        log_dirs = {n.node_id: n.log_dir for n in cluster.nodes.values()}
        result.violations += verify_log_dirs(log_dirs)
        differ, compared = compare_replicas(log_dirs, assignment)
        result.violations += differ
        result.notes.append(f"replicas compared below {compared}")
        result.violations += check(history)
    finally:
        for worker in workers:
            worker.stopping.set()
        cluster.kill_all()
        result.elapsed_s = time.monotonic() - began
    return result


def _create_topics(admin: AdminClient, config: RunConfig) -> None:
    """The data topic and the transactional one, placed by the controller."""
    settings = {"min.insync.replicas": str(config.min_insync_replicas)}
    rf = config.replication_factor
    topics = [
        NewTopic(config.topic, config.partitions, rf, config=settings),
        NewTopic(config.txn_topic, config.partitions, rf, config=settings),
    ]
    for future in admin.create_topics(topics, request_timeout=30).values():
        future.result(60)


def _partitions(admin: AdminClient, topic: str) -> dict[int, object]:
    metadata = admin.list_topics(topic, timeout=5)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return {}
    return dict(found.partitions)


def _steady(
    cluster: FaultCluster,
    admin: AdminClient,
    config: RunConfig,
    progress: list[Worker],
    what: str,
    timeout: float,
) -> None:
    marks = [w.progress for w in progress]

    def ready() -> bool:
        if cluster.proxies.cut_links or any(not n.running or n.paused for n in cluster.nodes.values()):
            return False
        view = cluster.describe()
        if (
            view is None
            or view.controller < 0
            or set(view.fenced) != set(cluster.nodes)
            or any(view.fenced.values())
        ):
            return False
        partitions = _partitions(admin, config.topic)
        if len(partitions) != config.partitions:
            return False
        for p in partitions.values():
            if p.leader < 0 or len(p.isrs) < config.replication_factor:  # type: ignore[attr-defined]
                return False
        return all(w.progress > mark for w, mark in zip(progress, marks, strict=True))

    wait_for(what, ready, timeout, interval=0.5)


def _resolve(cluster: FaultCluster, admin: AdminClient, config: RunConfig, fault: schedule.Fault) -> int:
    """The node a role names now."""
    if fault.target == "controller":
        view = wait_for("the active controller", cluster.describe, 15.0, interval=0.2)
        return view.controller
    partition = wait_for(
        "partition 0's leader", lambda: _partitions(admin, config.topic).get(0), 15.0, interval=0.2
    )
    leader = partition.leader  # type: ignore[attr-defined]
    if fault.target == "leader":
        return leader
    followers = sorted(r for r in partition.replicas if r != leader) or sorted(
        n for n in cluster.nodes if n != leader
    )  # type: ignore[attr-defined]
    return followers[min(int(fault.peer_pick * len(followers)), len(followers) - 1)]


def _heal_everything(cluster: FaultCluster, result: RunResult) -> None:
    """After the last fault (or a failed wait): links healed, paused nodes continued, dead nodes restarted."""
    cluster.proxies.heal()
    for node in cluster.nodes.values():
        if node.paused and node.running:
            node.signal(schedule.signal.SIGCONT)
        if not node.running:
            try:
                cluster.restart(node.node_id)
            except ClusterTimeout as exc:
                result.violations.append(f"node {node.node_id} did not come back for the final checks: {exc}")


def _close_open_transaction(bootstrap: str, result: RunResult) -> None:
    """A new producer with the transactional id aborts the transaction the workload may have left open,
    so read_committed is not held at the last stable offset until the transaction times out."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": TRANSACTIONAL_ID,
            "client.id": "faults-txn-close",
            "logger": LOG,
        }
    )
    try:
        producer.init_transactions(30)
    except KafkaException as exc:
        result.notes.append(f"closing the open transaction: {exc}")


def _assignment(admin: AdminClient, config: RunConfig) -> dict[tuple[str, int], list[int]]:
    assignment = {}
    for topic in (config.topic, config.txn_topic):
        for p in _partitions(admin, topic).values():
            assignment[(topic, p.id)] = list(p.replicas)  # type: ignore[attr-defined]
    return assignment
