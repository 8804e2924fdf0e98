"""Short runs of the broker fuzzer (tests/bench/fuzz_broker.py): mutated frames against a real broker.

The client listener's corpus is the sample request of every API key and version the broker handles (no
stock clients, so the run is the same on every machine for its seed); the bench adds recorded client
traffic and runs a million frames. The controller listener's is the same for the controller registry,
plus Raft and lifecycle requests in this node's cluster and Raft epoch, which move its Raft state: the
node, a quorum of one, must elect itself again once the frames stop.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from fuzz_broker import NODE_ID, FuzzReport, fuzz  # noqa: E402

from kcli.broker.apis import build_controller_registry, build_registry  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_twelve_thousand_mutated_frames_kill_nothing_and_reach_no_handler_error(tmp_path: Path) -> None:
    report = fuzz(12_000, seed=14, connections=8, workdir=tmp_path, clients=False)
    assert report.frames == 12_000
    assert len(report.corpus) == len(list(build_registry()))  # every API the broker handles
    assert report.broker_deaths == [], _summary(report)
    assert not report.handler_errors and report.tracebacks == 0, _summary(report)
    assert report.warnings > 0  # the malformed ones were refused, each with a WARNING line
    assert report.clean_stop, _summary(report)
    assert report.verify_clean, report.verify_output
    assert report.peak_rss < 512 << 20, _summary(report)


DELIBERATE_ERRORS = re.compile(
    r"raft: node -?\d+ ((asks for a vote|claims the leadership of epoch -?\d+) but is not in "
    r"controller\.quorum\.voters \[1\]|sent a vote request meant for voter -?\d+ to this node \(1\))"
    r".*: the voter lists of the nodes disagree$"
)
"""The ERROR lines a Raft request from a node that is not a voter, or meant for another voter, gets
(meant for voter lists that differ between the nodes of a cluster); a mutated id brings it here."""


def test_ten_thousand_mutated_frames_on_the_controller_listener_leave_a_working_node(tmp_path: Path) -> None:
    # An epoch near 2**31-1 is a known defect (the node could not campaign in the next): out of the way.
    report = fuzz(
        10_000, seed=3, connections=8, workdir=tmp_path, target="controller", max_epoch=2**31 - 2**24
    )
    assert report.frames == 10_000
    assert len(report.corpus) == len(list(build_controller_registry()))
    assert report.broker_deaths == [], _summary(report)
    unexpected = [message for message in report.handler_errors if not DELIBERATE_ERRORS.match(message)]
    assert not unexpected and report.tracebacks == 0, _summary(report)
    assert report.warnings > 0
    # Whether a mutated frame (a higher epoch) deposes the node depends on timing; when one does, the
    # node must have been elected again, which the next line checks.
    assert report.elections >= 1
    assert report.quorum_leader == NODE_ID, _summary(report)  # DescribeQuorum: the node leads again
    assert report.recovery_seconds is not None and report.recovery_seconds < 20, _summary(report)
    assert report.node_check == "", report.node_check  # a client produced and consumed through it
    assert report.clean_stop, _summary(report)
    assert report.verify_clean, report.verify_output
    assert report.peak_rss < 512 << 20, _summary(report)


def _summary(report: FuzzReport) -> str:
    errors = "\n".join(f"{count} x {message}" for message, count in report.handler_errors.most_common(10))
    deaths = "\n".join(report.broker_deaths[:3])
    quorum = f"leader {report.quorum_leader} in epoch {report.quorum_epoch}, {report.node_check or 'node ok'}"
    return f"deaths:\n{deaths}\nerrors:\n{errors}\npeak RSS {report.peak_rss >> 20} MiB\n{quorum}"


def test_mutated_sasl_frames_before_authentication_kill_nothing(tmp_path: Path) -> None:
    """SaslHandshake, SaslAuthenticate and raw tokens mutated on a SASL_PLAINTEXT listener (half the
    connections open with a valid handshake, so the mutations reach the mechanisms)."""
    report = fuzz(3_000, seed=5, connections=32, workdir=tmp_path, target="sasl")
    assert report.frames == 3_000
    assert {"SaslHandshake", "SaslAuthenticate", "SaslToken", "ApiVersions"} <= set(report.corpus)
    assert report.broker_deaths == [], _summary(report)
    assert not report.handler_errors and report.tracebacks == 0, _summary(report)
    assert not report.stray_lines, report.stray_lines  # client strings never start a log line
    assert report.clean_stop and report.verify_clean, _summary(report)
    assert report.peak_rss < 512 << 20, _summary(report)


def test_mutated_and_truncated_client_hellos_kill_nothing(tmp_path: Path) -> None:
    """Garbage, truncated and lying TLS records where an SSL listener expects a ClientHello."""
    report = fuzz(3_000, seed=9, connections=8, workdir=tmp_path, target="tls")
    assert report.frames == 3_000
    assert report.mutations["truncated"] > 0 and report.mutations["garbage"] > 0
    assert report.broker_deaths == [], _summary(report)
    assert not report.handler_errors and report.tracebacks == 0, _summary(report)
    assert report.clean_stop and report.verify_clean, _summary(report)
    assert report.peak_rss < 512 << 20, _summary(report)
