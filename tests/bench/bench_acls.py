"""What the StandardAuthorizer costs a kcli broker: produce with 10,000 ACLs against none, in one run, and
the cost of one ACL check.

    python tests/bench/bench_acls.py [--mib 128] [--acls 10000] [--rounds 3]
    python tests/bench/bench_acls.py --quick     # 16 MiB, 1 round

Two kcli nodes run side by side, both with a SASL_PLAINTEXT listener (PLAIN): one without an authorizer,
one with `authorizer.class.name` set to the StandardAuthorizer and `--acls` ACLs created through
CreateAcls (half LITERAL topic names, half PREFIXED, for a hundred other principals; User:alice writes
through one PREFIXED ACL among them). User:alice, not a super user, produces `--mib` of 1 KiB records
with confluent-kafka (acks=1) to each node in turn, `--rounds` times, twice: with 1 MiB batches and with
16 KiB batches (more requests, so more checks per byte). Printed: MiB/s per node (the median round and
the best), the ratio (goal >= 0.95x) and the broker's CPU seconds per GiB; on a loaded machine the best
rounds say more than the medians.

Then the check itself, in this process: StandardAuthorizer.authorize over the same `--acls` ACLs for a
Produce's WRITE on a topic, first decided (the ACLs covering the name found through the literal and
prefix index) and then remembered (the same principal, host and resource again), with a plain scan of
every ACL for comparison. The machine is shared: the figures are indicative.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import KCLI, BrokerProcess, free_port_range, kcli_env, start_with_config  # noqa: E402

from kcli.security.acl import (  # noqa: E402
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)

RECORD = 1024
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC = "bench-acls-orders"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def bench_acls(count: int) -> list[StandardAcl]:
    """`count` ACLs for others, half literal and half prefixed, and alice's one prefixed WRITE."""
    acls = []
    for i in range(count - 1):
        literal = i % 2 == 0
        acls.append(
            StandardAcl(
                ResourceType.TOPIC,
                f"topic-{i}" if literal else f"team-{i}-",
                PatternType.LITERAL if literal else PatternType.PREFIXED,
                f"User:u{i % 100}",
                "*",
                AclOperation.WRITE if literal else AclOperation.READ,
                AclPermissionType.ALLOW,
            )
        )
    acls.append(
        StandardAcl(
            ResourceType.TOPIC,
            "bench-acls-",
            PatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
    )
    return acls


def start_node(workdir: Path, authorizer: bool) -> BrokerProcess:
    workdir.mkdir()
    controller = free_port_range(1)
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller}",
        "controller.listener.names=CONTROLLER",
        f"listeners=SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller}",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={workdir / 'data'}",
        "num.partitions=1",
        "offsets.topic.num.partitions=1",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        f'listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_MODULE} required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";',
    ]
    if authorizer:
        lines += [f"authorizer.class.name={AUTHORIZER}", "super.users=User:admin;User:ANONYMOUS"]
    config = workdir / "server.properties"
    config.write_text("\n".join(lines) + "\n")
    env = kcli_env()
    cluster_id = subprocess.run(
        [*KCLI, "storage", "random-uuid"], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    subprocess.run(
        [*KCLI, "storage", "format", "-c", str(config), "-t", cluster_id],
        capture_output=True,
        env=env,
        check=True,
    )
    return start_with_config(workdir, config)


async def create_acls(bootstrap: str, workdir: Path, acls: list[StandardAcl]) -> None:
    """CreateAcls as admin, a thousand at a time, then wait until DescribeAcls counts them all."""
    from kcli.client import KafkaClient
    from kcli.protocol.messages import build, nested_type
    from kcli.security.client_config import load_client_config

    path = workdir / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f'sasl.jaas.config={PLAIN_MODULE} required username="admin" password="admin-secret";\n'
    )
    async with await KafkaClient.connect(bootstrap, security=load_client_config(path).security) as admin:
        cls = admin.request_type(30)
        creation = nested_type(cls, "AclCreation")
        for start in range(0, len(acls), 1000):
            creations = tuple(
                build(creation, **a.wire_fields("resource_pattern_type")) for a in acls[start : start + 1000]
            )
            response = await admin.send(cls(creations=creations), timeout=120)
            failed = [r for r in response.results if r.error_code != 0]
            if failed:
                raise SystemExit(f"CreateAcls failed: {failed[0]}")
        describe = admin.request_type(29)
        deadline = time.monotonic() + 60
        while True:
            found = await admin.send(
                build(describe, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                      principal_filter=None, host_filter=None, operation=1, permission_type=1)
            )  # fmt: skip
            if sum(len(r.acls) for r in found.resources) >= len(acls):
                return
            if time.monotonic() > deadline:
                raise SystemExit("the ACLs did not all appear within 60 s")
            await asyncio.sleep(0.2)


def producer_config(bootstrap: str, batch_bytes: int) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "acks": "1",
        "linger.ms": "5",
        "batch.size": str(batch_bytes),
        "queue.buffering.max.kbytes": "262144",
    }


def produce(config: dict[str, str], count: int) -> float:
    """Seconds to produce `count` 1 KiB records to TOPIC, all acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(config)
    value = os.urandom(RECORD)
    failed: list[object] = []
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, value, on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    seconds = time.perf_counter() - started
    if failed:
        raise SystemExit(f"{len(failed)} records failed: {failed[0]}")
    return seconds


def check_cost(acls: list[StandardAcl], repeat: int = 20000) -> dict[str, float]:
    """Microseconds per StandardAuthorizer check of a Produce's WRITE: decided, remembered, and a scan."""
    from kcli.security.authorizer import StandardAuthorizer, find_result

    image = {i: acl for i, acl in enumerate(acls)}
    authorizer = StandardAuthorizer()
    names = [f"bench-acls-{i}" for i in range(repeat)]
    args = (image, "User:alice", "127.0.0.1:5000", 0, AclOperation.WRITE, ResourceType.TOPIC)
    assert authorizer.authorize(*args, names[0])
    started = time.perf_counter()
    for name in names:  # every name new: found through the index and decided
        authorizer.authorize(*args, name)
    decided = (time.perf_counter() - started) / repeat
    started = time.perf_counter()
    for _ in range(repeat):  # the same resource: the remembered decision
        authorizer.authorize(*args, TOPIC)
    remembered = (time.perf_counter() - started) / repeat
    scans = max(repeat // 100, 10)
    started = time.perf_counter()
    for _ in range(scans):  # what reading every ACL of the type costs (the rule, no index)
        for acl in acls:
            covers = (acl.pattern_type == PatternType.LITERAL and acl.resource_name == TOPIC) or (
                acl.pattern_type == PatternType.PREFIXED and TOPIC.startswith(acl.resource_name)
            )
            if covers:
                find_result(AclOperation.WRITE, "User:alice", "127.0.0.1", acl)
    scanned = (time.perf_counter() - started) / scans
    return {"decided_us": decided * 1e6, "remembered_us": remembered * 1e6, "scan_us": scanned * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=128, help="MiB produced per node per round and batch size")
    parser.add_argument("--acls", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="16 MiB, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.mib, args.rounds = 16, 1
    count = args.mib * 2**20 // RECORD
    acls = bench_acls(args.acls)
    with tempfile.TemporaryDirectory(prefix="kcli-bench-acls-") as tmp:
        workdir = Path(tmp)
        nodes = {"none": start_node(workdir / "none", False), "acls": start_node(workdir / "acls", True)}
        try:
            started = time.perf_counter()
            asyncio.run(create_acls(nodes["acls"].bootstrap, workdir, acls))
            print(f"{len(acls)} ACLs created in {time.perf_counter() - started:.1f} s")
            for node in nodes.values():  # the topic (created by admin), then a warm-up
                subprocess.run(
                    [*KCLI, "topics", "create", "--bootstrap-server", node.bootstrap, "--command-config",
                     str(workdir / "admin.properties"), "--topic", TOPIC, "--partitions", "1"],
                    capture_output=True, env=kcli_env(), check=True,
                )  # fmt: skip
                produce(producer_config(node.bootstrap, 1 << 20), 2000)
            for batch in (1 << 20, 16 << 10):
                seconds: dict[str, list[float]] = {name: [] for name in nodes}
                cpu: dict[str, list[float]] = {name: [] for name in nodes}
                for _ in range(args.rounds):
                    for name, node in nodes.items():
                        before = cpu_seconds(node.pid)
                        seconds[name].append(produce(producer_config(node.bootstrap, batch), count))
                        cpu[name].append((cpu_seconds(node.pid) - before) / (count * RECORD / 2**30))
                rate = {name: args.mib / statistics.median(s) for name, s in seconds.items()}
                best = {name: args.mib / min(s) for name, s in seconds.items()}
                print(
                    f"produce, {batch >> 10} KiB batches: no authorizer {rate['none']:.0f} MiB/s "
                    f"({statistics.median(cpu['none']):.2f} broker CPU-s/GiB), {len(acls):,} ACLs "
                    f"{rate['acls']:.0f} MiB/s ({statistics.median(cpu['acls']):.2f} CPU-s/GiB): "
                    f"{rate['acls'] / rate['none']:.2f}x (median of {args.rounds}; best rounds "
                    f"{best['none']:.0f} / {best['acls']:.0f} MiB/s: {best['acls'] / best['none']:.2f}x; rounds "
                    f"{', '.join(f'{args.mib / s:.0f}' for s in seconds['none'])} / "
                    f"{', '.join(f'{args.mib / s:.0f}' for s in seconds['acls'])} MiB/s)"
                )
        finally:
            for node in nodes.values():
                node.stop()
    cost = check_cost(acls)
    print(
        f"one ACL check over {len(acls):,} ACLs: {cost['decided_us']:.1f} us decided, "
        f"{cost['remembered_us']:.2f} us remembered; a scan of every ACL {cost['scan_us']:.0f} us"
    )
    print(
        f"reproduce: python tests/bench/bench_acls.py --mib {args.mib} --acls {args.acls} --rounds {args.rounds}"
    )


if __name__ == "__main__":
    main()
