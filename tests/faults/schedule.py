"""A seeded schedule of faults, and how each is injected and healed on a `FaultCluster`.

Kinds (Kafka's ducktape clean/hard bounce, Redpanda's chaos harness):
- `kill`: SIGKILL, then a restart after `duration` (the node's page cache survives: logic, not fsync);
- `term`: SIGTERM (controlled shutdown), then a restart after `duration`;
- `pause`: SIGSTOP for `duration`, then SIGCONT (a long one outlives the broker session: a zombie);
- `isolate`: every link to and from the node cut for `duration` (clients still reach it);
- `cut`: one link, or both directions of one pair, between the target and another node.
Targets are roles, resolved when the fault is injected: the leader of the data topic's partition 0, a
follower of it (with one replica: a node that does not host it), the active controller.
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faults.cluster import FaultCluster

KINDS = ("kill", "term", "pause", "isolate", "cut")
TARGETS = ("leader", "follower", "controller")


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str
    duration: float  # seconds the fault lasts before it is healed
    peer_pick: float = 0.0  # which other node a `cut` uses, as a fraction, resolved against the live set
    direction: str = "both"  # `cut`: "to" (target -> peer), "from" (peer -> target) or "both"

    def __str__(self) -> str:
        extra = f" {self.direction}" if self.kind == "cut" else ""
        return f"{self.kind} {self.target}{extra} for {self.duration:.1f} s"


def plan(seed: int, count: int) -> list[Fault]:
    """`count` faults drawn by random.Random(seed): every kind and target, durations of a few seconds.

    The first faults cycle through the kinds (in a seeded order) so a short run covers as many as it can.
    """
    rng = random.Random(seed)
    order = list(KINDS)
    rng.shuffle(order)
    faults = []
    for i in range(count):
        kind = order[i] if i < len(order) else rng.choice(KINDS)
        target = rng.choice(TARGETS)
        duration = round(rng.uniform(2.0, 6.0) if kind != "pause" else rng.uniform(2.0, 15.0), 1)
        faults.append(
            Fault(kind, target, duration, round(rng.random(), 3), rng.choice(("to", "from", "both")))
        )
    return faults


@dataclass
class Injected:
    """A fault as injected: the node it hit and, for a cut, the links."""

    fault: Fault
    node: int
    links: tuple[tuple[int, int], ...] = ()

    def __str__(self) -> str:
        where = f" links {list(self.links)}" if self.links else ""
        return f"{self.fault} -> node {self.node}{where}"


def inject(cluster: FaultCluster, fault: Fault, node: int) -> Injected:
    """Start `fault` on `node`."""
    target = cluster.nodes[node]
    others = sorted(n for n in cluster.nodes if n != node)
    if fault.kind == "kill":
        target.kill()
    elif fault.kind == "term":
        target.terminate()
    elif fault.kind == "pause":
        target.signal(signal.SIGSTOP)
    elif fault.kind == "isolate":
        links = tuple((node, o) for o in others) + tuple((o, node) for o in others)
        cluster.proxies.cut(links)
        return Injected(fault, node, links)
    elif fault.kind == "cut":
        peer = others[min(int(fault.peer_pick * len(others)), len(others) - 1)]
        links = {"to": ((node, peer),), "from": ((peer, node),), "both": ((node, peer), (peer, node))}
        cluster.proxies.cut(links[fault.direction])
        return Injected(fault, node, links[fault.direction])
    else:
        raise ValueError(f"unknown fault kind {fault.kind!r}")
    return Injected(fault, node)


def heal(cluster: FaultCluster, injected: Injected) -> None:
    """End the fault: restart, continue, or heal the links."""
    kind = injected.fault.kind
    if kind in ("kill", "term"):
        cluster.restart(injected.node)
    elif kind == "pause":
        cluster.nodes[injected.node].signal(signal.SIGCONT)
    else:
        cluster.proxies.heal()
