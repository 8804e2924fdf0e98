"""Metadata snapshots: written when due, loaded at start-up, retention behind them, installed by a voter
that fell behind the leader's log. Real `kcli broker start` processes and real clients."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import forkserver
import pytest
from cli_in_process import run_kcli
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import free_port_range, kcli_env, start_broker
from waiting import wait_for

from ops.local_cluster import READY_MARK, plan

REPO = Path(__file__).resolve().parents[1]
SMALL_SNAPSHOTS = [
    "metadata.log.max.record.bytes.between.snapshots=2000",
    "metadata.max.retention.bytes=1000",
    "metadata.log.segment.bytes=8192",
]

pytestmark = pytest.mark.timeout(240)


def create_topics(bootstrap: str, names: list[str]) -> None:
    """Ten topics a request: each request is one metadata batch, which must fit in a segment."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for k in range(0, len(names), 10):
        batch = [NewTopic(n, 1, 1) for n in names[k : k + 10]]
        for future in admin.create_topics(batch, operation_timeout=30).values():
            future.result(timeout=60)


def topic_names(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=30).topics)


def snapshots(metadata_dir: Path) -> list[str]:
    return sorted(p.name for p in metadata_dir.iterdir() if p.name.endswith(".checkpoint"))


def kcli(*args: str) -> str:
    """`kcli ARGS` through kcli.cli.main.main in this process (test_dump and test_verify run the
    commands as real processes); its stdout, after exit status 0."""
    proc = run_kcli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_one_node_snapshots_cleans_its_log_and_restarts_from_the_snapshot(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "run1", data_dir=tmp_path / "data", overrides=SMALL_SNAPSHOTS)
    metadata_dir = tmp_path / "data" / "__cluster_metadata-0"
    try:
        create_topics(broker.bootstrap, [f"t{i}" for i in range(200)])
        # The snapshots and the clean-ups run after the commits, one snapshot per 2000 bytes of records;
        # on a busy machine they lag behind the last CreateTopics answer, and a snapshot written after
        # the first clean-up stays beside the older one until the next clean-up (Kafka's maybeClean).
        wait_for(
            "the first metadata segment deleted and the snapshots before the latest with it",
            lambda: (
                (metadata_dir / "00000000000000000000.log.deleted").exists()
                and len(snapshots(metadata_dir)) == 1
            ),
            30,
            0.05,
        )
    finally:
        broker.stop()
    taken = snapshots(metadata_dir)
    assert taken, "no snapshot was written"
    latest = taken[-1]
    end_offset = int(latest[:20])
    live_segments = sorted(int(p.name[:20]) for p in metadata_dir.glob("*.log"))
    assert live_segments[0] > 0, "retention did not move the log start past the first segment"
    # Retention deleted every snapshot below the log start it moved to; one written after that clean-up
    # (the snapshots lag the commits on a busy machine) stays beside it until the next one, as in Kafka.
    stale = [name for name in taken if int(name[:20]) < live_segments[0]]
    assert not stale, f"snapshots below the log start stay after retention moved it: {stale}"
    dumped = kcli("dump-segment", "--deep-iteration", str(metadata_dir / latest))
    assert (
        f"Snapshot end offset: {end_offset}" in dumped
        and "SnapshotHeader" in dumped
        and "SnapshotFooter" in dumped
    )
    assert "no findings" in kcli("verify", str(metadata_dir))

    again = start_broker(tmp_path / "run2", data_dir=tmp_path / "data")
    try:
        assert {f"t{i}" for i in range(200)} <= topic_names(again.bootstrap)
        create_topics(again.bootstrap, ["after-restart"])
        assert "after-restart" in topic_names(again.bootstrap)
    finally:
        again.stop()
    assert f"loading snapshot {latest}" in again.log()


class Nodes:
    def __init__(self, layout) -> None:  # noqa: ANN001
        self.layout = layout
        self.processes: dict[int, forkserver.Process] = {}

    def start(self, *ids: int) -> None:
        sizes = {}
        for node_id in ids:
            node = self.node(node_id)
            sizes[node_id] = node.log_file.stat().st_size if node.log_file.exists() else 0
            with open(node.log_file, "ab") as out:
                self.processes[node_id] = forkserver.popen(
                    ["broker", "start", "--config", str(node.properties)],
                    stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=kcli_env(),
                )  # fmt: skip
        waiting = set(ids)

        def ready() -> bool:
            for node_id in list(waiting):
                node = self.node(node_id)
                if self.processes[node_id].poll() is not None:
                    pytest.fail(
                        f"node {node_id} exited before it was ready:\n{node.log_file.read_text()[-3000:]}"
                    )
                with open(node.log_file, "rb") as f:
                    f.seek(sizes[node_id])
                    if READY_MARK.encode() in f.read():
                        waiting.discard(node_id)
            return not waiting

        wait_for(
            f"nodes {sorted(ids)} to start", ready, 120, 0.05, explain=lambda: f"not ready: {sorted(waiting)}"
        )

    def stop(self, node_id: int, *, send: bool = True) -> None:
        process = self.processes.pop(node_id)
        if send:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def stop_all(self) -> None:
        """SIGTERM to every node at once, then wait for each: one after the other, the last voter
        left waits out its controlled shutdown (no majority commits its fencing) after the others'."""
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for node_id in list(self.processes):
            self.stop(node_id, send=False)

    def node(self, node_id: int):  # noqa: ANN201
        return next(n for n in self.layout.nodes if n.node_id == node_id)


def test_a_voter_behind_the_leaders_log_start_installs_its_snapshot(tmp_path: Path) -> None:
    base = free_port_range(6)
    layout = plan(tmp_path / "cluster", 3, base, [*SMALL_SNAPSHOTS, "broker.session.timeout.ms=18000"])
    nodes = Nodes(layout)
    try:
        nodes.start(1, 2, 3)
        nodes.stop(3)  # controlled shutdown; two voters are still a majority
        bootstrap = nodes.node(1).bootstrap
        create_topics(bootstrap, [f"s{i}" for i in range(200)])
        leader_dirs = [nodes.node(i).directory / "data" / "__cluster_metadata-0" for i in (1, 2)]
        wait_for(  # each node snapshots its own image and cleans its own log
            "the live voters to move their log start",
            lambda: all((d / "00000000000000000000.log.deleted").exists() for d in leader_dirs),
            30,
        )
        behind = nodes.node(3).directory / "data" / "__cluster_metadata-0"
        nodes.start(3)
        text = nodes.node(3).log_file.read_text()
        assert "installed snapshot" in text, text[-3000:]
        assert {f"s{i}" for i in range(200)} <= topic_names(nodes.node(3).bootstrap)
        assert snapshots(behind)
    finally:
        nodes.stop_all()
