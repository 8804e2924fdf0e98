"""ACLs and client quotas on a three-node SASL_SSL kcli cluster with the StandardAuthorizer survive a
controller failover (kill -9 of the active controller) and reach a node that can only learn them from
a metadata snapshot (a restarted node that fell behind, and a broker-only node that joins late): real
`kcli broker start` processes, `kcli acls` and `kcli configs`, confluent-kafka clients. Every node is a voter and a broker (`kcli cluster start --security sasl_ssl`'s layout), the
nodes log in to each other as admin, a super user; alice, bob, carol and dora are SCRAM users
bootstrapped into the metadata log, and allow.everyone.if.no.acl.found is false (Kafka's default), so
bob, who is given no ACL, is denied everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import free_port_range
from kraft_cluster import SESSION, LocalKraftCluster, NodeProcess, kcli, read_metadata_log, wait_for

from ops.local_cluster import LocalNode

pytestmark = pytest.mark.timeout(240)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SMALL_SNAPSHOTS = (
    "metadata.log.max.record.bytes.between.snapshots=2000",
    "metadata.max.retention.bytes=1000",
    "metadata.log.segment.bytes=8192",
)
USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret", "dora": "dora-secret"}
MECHANISM = "SCRAM-SHA-512"


class SecureCluster:
    """The cluster's files and a stock client's settings for each user."""

    def __init__(self, cluster: LocalKraftCluster, root: Path) -> None:
        self.cluster = cluster
        self.root = root
        self.admin_password = (root / "admin.password").read_text().strip()

    def properties(self, node_id: int) -> Path:
        """admin's client properties, bootstrapping from node `node_id` alone."""
        text = (self.root / "client.properties").read_text()
        text = re.sub(
            r"(?m)^bootstrap\.servers=.*$", f"bootstrap.servers={self.cluster[node_id].bootstrap}", text
        )
        path = self.root / f"admin-{node_id}.properties"
        path.write_text(text)
        path.chmod(0o600)
        return path

    def client(self, node_id: int, user: str, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.cluster[node_id].bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.root / "tls" / "ca.crt"),
            "sasl.mechanisms": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.admin_password if user == "admin" else USERS[user],
            **extra,
        }

    def kcli(self, node_id: int, *args: str, ok: bool = True) -> str:
        done = kcli(*args, "--command-config", str(self.properties(node_id)), timeout=60)
        if ok:
            assert done.returncode == 0, done.stderr
        return done.stdout

    def leader(self, node_id: int) -> int:
        out = self.kcli(node_id, "cluster", "status", "-o", "json")
        [item] = [
            json.loads(line) for line in out.splitlines() if '"type":"cluster"' in line.replace(" ", "")
        ]
        return int(item["leaderId"])

    def acls(self, node_id: int) -> list[str]:
        return sorted(self.kcli(node_id, "acls", "list", "--output", "json").splitlines())

    def quota(self, node_id: int, user: str) -> str:
        return self.kcli(node_id, "configs", "describe", "--entity-type", "users", "--entity-name", user)

    def create_topics(self, node_id: int, topics: list[NewTopic]) -> None:
        admin = AdminClient(self.client(node_id, "admin"))
        for future in admin.create_topics(topics, operation_timeout=30).values():
            future.result(timeout=60)


def produce(config: dict[str, Any], topic: str, size: int = 1, count: int = 1) -> KafkaError | None:
    """`count` messages of `size` bytes; the first delivery error, or None."""
    errors: list[KafkaError] = []
    delivered: list[bool] = []

    def done(err: KafkaError | None, _msg: Any) -> None:
        delivered.append(True)
        if err is not None:
            errors.append(err)

    producer = Producer({"message.timeout.ms": "30000", "acks": "all", **config})
    for _ in range(count):
        producer.produce(topic, b"v" * size, on_delivery=done)
    producer.flush(45)
    if len(delivered) < count:
        return KafkaError(KafkaError._MSG_TIMED_OUT)
    return errors[0] if errors else None


def denied(error: KafkaError | None) -> bool:
    return error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def log_start(directory: Path) -> int:
    """The metadata log's first offset: the base offset of its oldest segment still there."""
    return min(int(p.name.split(".")[0]) for p in directory.glob("*.log"))


def test_acls_and_quotas_survive_a_failover_and_reach_a_node_from_a_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    cluster = LocalKraftCluster(
        root,
        3,
        (
            f"authorizer.class.name={AUTHORIZER}",
            "super.users=User:admin",
            *SESSION,
            *SMALL_SNAPSHOTS,
        ),
        add_scram=[f"{MECHANISM}=[name={u},password={p}]" for u, p in USERS.items()],
        security="sasl_ssl",
    )
    try:
        cluster.start()
        c = SecureCluster(cluster, root)
        c.create_topics(1, [NewTopic("ha-topic", 1, 3)])
        c.kcli(1, "acls", "add", "--allow-principal", "User:alice", "--producer", "--topic", "ha-",
               "--resource-pattern-type", "prefixed")  # fmt: skip
        c.kcli(1, "acls", "add", "--allow-principal", "User:dora", "--producer", "--topic", "ha-",
               "--resource-pattern-type", "prefixed")  # fmt: skip
        c.kcli(1, "acls", "add", "--deny-principal", "User:alice", "--operation", "Write", "--topic",
               "ha-secret")  # fmt: skip
        c.kcli(1, "configs", "alter", "--entity-type", "users", "--entity-name", "dora",
               "--add-config", "producer_byte_rate=1024")  # fmt: skip
        quota = c.quota(1, "dora")
        assert "producer_byte_rate=1024" in quota, quota
        before = c.acls(1)
        assert len(before) >= 3 and any("User:alice" in line and "DENY" in line for line in before), before
        assert produce(c.client(1, "alice"), "ha-topic") is None
        assert denied(produce(c.client(1, "bob"), "ha-topic"))

        # kill -9 the active controller; a survivor answers with the same ACLs, enforces them, takes more
        old = c.leader(1)
        cluster[old].kill()
        survivor = next(n for n in (1, 2, 3) if n != old)

        def new_leader() -> int | None:
            leader = _try_leader(c, survivor)
            return leader if leader is not None and leader not in (-1, old) else None

        new = wait_for("a new active controller", new_leader, 60, 0.25)
        assert c.acls(survivor) == before
        assert produce(c.client(survivor, "alice"), "ha-topic") is None
        assert denied(produce(c.client(survivor, "bob"), "ha-topic"))
        c.create_topics(survivor, [NewTopic("ha-secret", 1, 2)])
        assert denied(produce(c.client(survivor, "alice"), "ha-secret"))  # DENY wins over the prefixed ALLOW
        c.kcli(
            survivor, "acls", "add", "--allow-principal", "User:carol", "--producer", "--topic", "ha-topic"
        )
        assert produce(c.client(survivor, "carol"), "ha-topic") is None
        after_failover = c.acls(survivor)
        assert len(after_failover) > len(before) and any("User:carol" in line for line in after_failover)

        # with the old controller down, the survivors snapshot and delete their log's prefix past its end
        behind = cluster.metadata_dir(old)
        behind_end = read_metadata_log(behind)[-1].last_offset
        live_dirs = [cluster.metadata_dir(n) for n in (1, 2, 3) if n != old]
        made = 0
        while not all(log_start(d) > behind_end + 1 for d in live_dirs):
            assert made < 400, (
                f"log starts {[log_start(d) for d in live_dirs]}, the old controller at {behind_end}"
            )
            c.create_topics(new, [NewTopic(f"filler-{made + k}", 1, 1) for k in range(10)])
            made += 10
        cluster[old].start()
        cluster[old].wait_ready()
        assert "installed snapshot" in cluster[old].log(), cluster[old].log()[-3000:]

        # the node that learned the metadata from a snapshot: the same ACLs and quota, enforced by it
        assert c.acls(old) == after_failover
        assert c.quota(old, "dora") == quota
        c.create_topics(old, [NewTopic("ha-late", 1, replica_assignment=[[old]])])
        assert produce(c.client(old, "alice"), "ha-late") is None
        assert denied(produce(c.client(old, "carol"), "ha-late"))  # carol's ACL names ha-topic only
        assert denied(produce(c.client(old, "bob"), "ha-late"))
        throttles: list[int] = []

        def stats(text: str) -> None:
            for broker in json.loads(text)["brokers"].values():
                if broker.get("nodeid") == old and broker["throttle"]["cnt"]:
                    throttles.append(broker["throttle"]["max"])

        dora = Producer(
            c.client(old, "dora", **{"statistics.interval.ms": 500, "stats_cb": stats, "batch.size": 4096})
        )
        errors: list[KafkaError] = []
        for _ in range(6):  # 24 kB against 1 kB/s
            dora.produce("ha-late", b"d" * 4000, on_delivery=lambda err, _m: err and errors.append(err))
        assert dora.flush(60) == 0 and not errors, errors

        def throttled() -> bool:
            dora.poll(0.5)
            return bool(throttles) and max(throttles) > 0

        wait_for("a throttled ProduceResponse from the restarted node", throttled, 20, 0.1)
        dora.flush(0)

        # a broker-only node formatted now, whose metadata log starts empty while the controllers' starts
        # past 0: it can learn the ACLs and quotas only from a snapshot, and enforces them
        late = join_broker_only(cluster, root, 4)
        late.wait_ready()
        assert "installed snapshot" in late.log(), late.log()[-3000:]
        assert c.acls(4) == after_failover
        assert c.quota(4, "dora") == quota
        c.create_topics(4, [NewTopic("ha-joined", 1, replica_assignment=[[4]])])
        assert produce(c.client(4, "alice"), "ha-joined") is None
        assert denied(produce(c.client(4, "bob"), "ha-joined"))
        assert denied(produce(c.client(4, "carol"), "ha-joined"))
    finally:
        cluster.kill_all()


def join_broker_only(cluster: LocalKraftCluster, root: Path, node_id: int) -> NodeProcess:
    """Node `node_id` as `process.roles=broker`, with node 1's security settings and the same voters,
    formatted with the cluster's id and started; it joins `cluster`'s nodes."""
    port = free_port_range(1)
    node = LocalNode(node_id, port, None, root / f"node-{node_id}")
    node.directory.mkdir()
    replaced = {
        "process.roles": "broker",
        "node.id": str(node_id),
        "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "log.dirs": str(node.directory / "data"),
    }
    lines = []
    for line in cluster[1].node.properties.read_text().splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={replaced[key]}" if key in replaced else line)
    node.properties.write_text("\n".join(lines) + "\n")
    node.properties.chmod(0o600)
    formatted = kcli("storage", "format", "--config", str(node.properties), "--cluster-id",
                     cluster.layout.cluster_id)  # fmt: skip
    assert formatted.returncode == 0, formatted.stderr
    cluster.nodes[node_id] = process = NodeProcess(node)
    process.start()
    return process


def _try_leader(c: SecureCluster, node_id: int) -> int | None:
    try:
        return c.leader(node_id)
    except AssertionError:
        return None
