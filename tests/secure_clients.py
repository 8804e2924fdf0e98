"""Stock clients over TLS and SASL_SSL, shared by the secured-broker and secured-cluster tests.

`Endpoint` is how to reach a secured listener (the CA, a client certificate, SASL credentials) and
spells it in each client's names. Each `run_*` produces five records, commits a transaction of three
and aborts one of two where the client has transactions, then reads the topic in a consumer group
with read_committed: `expected(name)` is what it must see. `secured_cluster` runs `kcli cluster start
--security ...` as a user does, reads what it printed, and stops it with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, Producer
from conftest import KCLI, free_port_range, kcli_env
from kafka import KafkaConsumer, KafkaProducer
from kraft_cluster import children_of, still_ours

from kcli.config import load_properties

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")


@dataclass(frozen=True)
class Endpoint:
    """A secured listener and who connects to it; `cert` is a PEM chain, `key` its PEM key."""

    bootstrap: str
    protocol: str
    ca: Path
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    cert: Path | None = None
    key: Path | None = None

    def librdkafka(self) -> dict[str, str]:
        config = {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol}
        config["ssl.ca.location"] = str(self.ca)
        if self.cert is not None and self.key is not None:
            config["ssl.certificate.location"] = str(self.cert)
            config["ssl.key.location"] = str(self.key)
        if self.mechanism is not None:
            config["sasl.mechanisms"] = self.mechanism
            config["sasl.username"] = self.username or ""
            config["sasl.password"] = self.password or ""
        return config

    def kafka_python(self) -> dict[str, object]:
        config: dict[str, object] = {
            "bootstrap_servers": self.bootstrap.split(","),
            "security_protocol": self.protocol,
            "ssl_cafile": str(self.ca),
        }
        if self.cert is not None and self.key is not None:
            config["ssl_certfile"], config["ssl_keyfile"] = str(self.cert), str(self.key)
        if self.mechanism is not None:
            config["sasl_mechanism"] = self.mechanism
            config["sasl_plain_username"], config["sasl_plain_password"] = self.username, self.password
        return config

    def aiokafka(self) -> dict[str, object]:
        config: dict[str, object] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.protocol,
            "ssl_context": create_ssl_context(
                cafile=str(self.ca),
                certfile=str(self.cert) if self.cert else None,
                keyfile=str(self.key) if self.key else None,
            ),
        }
        if self.mechanism is not None:
            config["sasl_mechanism"] = self.mechanism
            config["sasl_plain_username"], config["sasl_plain_password"] = self.username, self.password
        return config

    def kcat(self) -> list[str]:
        return [arg for key, value in self.librdkafka().items() for arg in ("-X", f"{key}={value}")]


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def expected(name: str, *, transactions: bool = True) -> list[bytes]:
    """What a read_committed group sees: the five plain records, then the committed three."""
    plain = [f"{name}-{i}".encode() for i in range(5)]
    return plain + ([f"{name}-tx-{i}".encode() for i in range(3)] if transactions else [])


def run_client(client: str, endpoint: Endpoint, name: str) -> list[bytes]:
    """Produce, run transactions and consume in a group with `client`; the values the group read."""
    runs = {
        "confluent-kafka": run_confluent_kafka,
        "kafka-python": run_kafka_python,
        "aiokafka": lambda e, n: asyncio.run(run_aiokafka(e, n)),
        "kcat": run_kcat,
    }
    return runs[client](endpoint, name)


def run_confluent_kafka(endpoint: Endpoint, name: str) -> list[bytes]:
    config = endpoint.librdkafka()
    producer = Producer({**config, "acks": "all"})
    for value in expected(name, transactions=False):
        producer.produce(name, value)
    assert producer.flush(30) == 0
    transactional = Producer({**config, "transactional.id": f"tx-{name}"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for i in range(3):
        transactional.produce(name, f"{name}-tx-{i}".encode())
    transactional.commit_transaction(30)
    transactional.begin_transaction()
    for i in range(2):
        transactional.produce(name, f"{name}-aborted-{i}".encode())
    transactional.abort_transaction(30)
    consumer = Consumer(
        {
            **config,
            "group.id": f"g-{name}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([name])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < 8 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def run_kafka_python(endpoint: Endpoint, name: str) -> list[bytes]:
    config = endpoint.kafka_python()
    producer = KafkaProducer(acks="all", **config)
    for value in expected(name, transactions=False):
        producer.send(name, value)
    producer.flush(30)
    producer.close()
    transactional = KafkaProducer(transactional_id=f"tx-{name}", **config)
    transactional.init_transactions()
    transactional.begin_transaction()
    for i in range(3):
        transactional.send(name, f"{name}-tx-{i}".encode())
    transactional.commit_transaction()
    transactional.begin_transaction()
    for i in range(2):
        transactional.send(name, f"{name}-aborted-{i}".encode())
    transactional.abort_transaction()
    transactional.close()
    consumer = KafkaConsumer(
        name,
        group_id=f"g-{name}",
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=20000,
        **config,
    )
    try:
        values = [m.value for _, m in zip(range(8), consumer, strict=False)]
        consumer.commit()
    finally:
        consumer.close()
    return values


async def run_aiokafka(endpoint: Endpoint, name: str) -> list[bytes]:
    config = endpoint.aiokafka()
    producer = AIOKafkaProducer(acks="all", **config)
    await producer.start()
    try:
        for value in expected(name, transactions=False):
            await producer.send_and_wait(name, value)
    finally:
        await producer.stop()
    transactional = AIOKafkaProducer(transactional_id=f"tx-{name}", **config)
    await transactional.start()
    try:
        async with transactional.transaction():
            for i in range(3):
                await transactional.send(name, f"{name}-tx-{i}".encode())
        await transactional.begin_transaction()
        for i in range(2):
            await transactional.send(name, f"{name}-aborted-{i}".encode())
        await transactional.abort_transaction()
    finally:
        await transactional.stop()
    consumer = AIOKafkaConsumer(
        name,
        group_id=f"g-{name}",
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **config,
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            async for message in consumer:
                values.append(message.value)
                if len(values) == 8:
                    break
        await consumer.commit()
    finally:
        await consumer.stop()
    return values


def run_kcat(endpoint: Endpoint, name: str) -> list[bytes]:
    """kcat has no transactions: five records produced, then read by a balanced consumer (-G)."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is not installed"
    lines = "".join(f"{value.decode()}\n" for value in expected(name, transactions=False))
    config = endpoint.kcat()
    subprocess.run(
        [kcat, *config, "-P", "-t", name, "-X", "acks=all"], input=lines.encode(), check=True, timeout=30
    )
    out = subprocess.run(
        [kcat, *config, "-X", "auto.offset.reset=earliest", "-G", f"g-{name}", "-c", "5", "-e", name],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return out.stdout.split()


# --- `kcli cluster start --security` as a process ------------------------------------------------------


@dataclass
class SecuredCluster:
    """A `kcli cluster start --security ...` of ours and what it printed for clients."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    stdout_path: Path
    stderr_path: Path
    bootstrap: str = ""
    client_properties: Path = Path()
    librdkafka: dict[str, str] = field(default_factory=dict, repr=False)
    nodes: list[int] = field(default_factory=list)
    """The node processes' PIDs."""

    def output(self) -> str:
        return self.stdout_path.read_text(errors="replace") + self.stderr_path.read_text(errors="replace")

    def logs(self) -> str:
        """Every node's broker.log."""
        return "".join(p.read_text(errors="replace") for p in sorted(self.data_dir.glob("node-*/broker.log")))

    def properties(self) -> dict[str, str]:
        return load_properties(self.client_properties)


def start_secured_cluster(
    workdir: Path, security: str, brokers: int, *overrides: str, controllers: int = 0, port: int | None = None
) -> SecuredCluster:
    """Run `kcli cluster start --security SECURITY` until it printed its confluent-kafka config
    (with `controllers`, that many controller-only nodes beside broker-only ones; `port`, the first port
    of a cluster that ran before)."""
    data_dir = workdir / "cluster"
    out, err = workdir / "cluster.out", workdir / "cluster.err"
    args = [*KCLI, "cluster", "start", "--security", security, "--brokers", str(brokers)]
    if controllers:
        args += ["--controllers", str(controllers)]
    port = free_port_range(2 * (brokers + controllers)) if port is None else port
    args += ["--data-dir", str(data_dir), "--port", str(port)]
    for item in overrides:
        args += ["--override", item]
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=kcli_env(), cwd=workdir
        )
    cluster = SecuredCluster(process, data_dir, out, err)
    deadline = time.monotonic() + 120
    while "confluent-kafka: " not in out.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_secured_cluster(cluster)
            raise AssertionError(f"kcli cluster start did not come up:\n{cluster.output()}")
        time.sleep(0.2)
    lines = dict(line.split(": ", 1) for line in out.read_text().splitlines())
    cluster.bootstrap = lines["bootstrap"]
    cluster.client_properties = Path(lines["client config"])
    # the printed text is a Python dict that reads the password from its file: evaluate it as a user would
    cluster.librdkafka = eval(lines["confluent-kafka"], {"open": open})  # noqa: S307
    cluster.nodes = children_of(process.pid)
    return cluster


def stop_secured_cluster(cluster: SecuredCluster) -> int:
    """Ctrl-C (SIGINT) to the runner, which stops every node; SIGKILL to what is left of ours."""
    process = cluster.process
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pid in cluster.nodes:
        if still_ours(pid, cluster.data_dir):
            os.kill(pid, signal.SIGKILL)
    return process.returncode


@contextmanager
def secured_cluster(workdir: Path, security: str, brokers: int = 3) -> Iterator[SecuredCluster]:
    """A module's cluster: started (groups rebalance at once), then stopped with Ctrl-C, which must stop
    every node and exit 0; no file of the data dir's secrets may show in its output or logs."""
    cluster = start_secured_cluster(workdir, security, brokers, "group.initial.rebalance.delay.ms=0")
    try:
        yield cluster
    finally:
        status = stop_secured_cluster(cluster)
    assert status == 0, cluster.output()
    assert "stopping the nodes (controlled shutdown)" in cluster.output()
    assert not [pid for pid in cluster.nodes if still_ours(pid, cluster.data_dir)]
    password = cluster.data_dir / "admin.password"
    if password.exists():
        secret = password.read_text().strip()
        assert secret not in cluster.output() and secret not in cluster.logs()
