"""Fuzz a real `kcli broker start` with mutated frames; report deaths, handler errors and RSS.

    python tests/bench/fuzz_broker.py [--frames 1000000] [--seed 1] [--connections 8]
        [--max-seconds 3600] [--rss-limit-mib 1024] [--spare API,...] [--no-clients]
        [--target client|controller|sasl|tls] [--max-epoch N]

A broker is started on a temporary data dir. Its corpus is recorded first: confluent-kafka, kafka-python
and aiokafka talk to it through a recording proxy on loopback (admin, idempotent and transactional
produce, consumer groups with commits, offsets), and one sample request of every API key and version
the broker handles is added (tests/protocol_samples.py), so that APIs no client used are fuzzed too.
Then `--frames` mutated frames (bit flips, inserted and deleted bytes, truncation, lying size prefixes,
lying or null array/string lengths, huge lengths, splices of two requests, a body under another
request's header, and some frames unchanged) are sent over `--connections` concurrent connections, a
few frames per connection, each connection half-closed after its frames and read until the broker
closes it (at most a second).

`--target controller` fuzzes the controller listener instead: the node is broker and controller
(node.id 1, `controller.listener.names=CONTROLLER` on a free loopback port, no controller.quorum.voters,
so it is the only voter of its quorum and runs the same Raft code as a cluster). Its corpus is the sample
request of every API key and version of the controller registry (Raft, broker lifecycle, the admin
requests brokers forward), and Raft and lifecycle requests that pass their first checks (this cluster's
id, `__cluster_metadata`, the node's ids, its current Raft epoch and the next, made again as the epoch
moves), so that mutations reach the Raft state machine and the active controller; for the second half of
every 8 s no Vote, BeginQuorumEpoch or EndQuorumEpoch goes, so that the node elects itself again in
the middle of the run too. After the frames the node must lead its quorum again (DescribeQuorum on the
controller listener), have its broker registered (it registers again when a mutated UnregisterBroker
removed it), and serve a producer and a consumer through its client listener; the brokers mutated
BrokerRegistrations added are unregistered first, so that the client talks to the node alone.
`--target sasl` fuzzes a SASL_PLAINTEXT listener before authentication (PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER enabled): the corpus is SaslHandshake v0/v1 for each mechanism and some that are not,
SaslAuthenticate v0-v2 with PLAIN, SCRAM and OAUTHBEARER tokens, the raw tokens a v0 handshake
announces, and ApiVersions; half the connections open with a valid SaslHandshake, so that the mutated
SaslAuthenticate (or raw token) reaches the mechanism. `--target tls` fuzzes an SSL listener with TLS
records: ClientHellos for TLS 1.2 and 1.3 (made by Python's ssl) with bit flips, truncation, inserted and
deleted bytes, lying record and handshake lengths and versions, and garbage, alerts and Kafka frames where
a record should be; frames counts records.
`--max-epoch` leaves unsent the Raft requests with a higher epoch, to look past the known defect of an
epoch near 2**31-1 (the node cannot campaign in the next one and its quorum is gone for good).

It reports frames sent, broker deaths (the process exited, or was killed for growing past
`--rss-limit-mib` or for not answering ApiVersions within 10 s; it is restarted on the same data dir
and ports), handler errors (ERROR lines and tracebacks in the broker log, grouped by message), WARNING
lines, peak RSS, and whether `kcli verify` finds the data dir clean after a graceful stop. Mutations
are drawn from `--seed`; the recorded frames differ a little between runs (ids, timestamps), so
`--no-clients` (samples only) is the way to replay a run byte for byte (not for the controller
listener, whose frames follow the node's Raft epoch and the clock). The run stops by itself after
`--frames` or `--max-seconds`. `--spare` leaves the named APIs out of the corpus, to look past a defect
already known (a partition count of 2**31-1 in CreateTopics made the controller build that many
partitions until it was bounded as Kafka bounds one operation). tests/test_fuzz.py runs the same core
on a short budget.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import os
import random
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import kcli_env  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from protocol_samples import sample_entity  # noqa: E402

from kcli.broker.apis import build_controller_registry, build_registry  # noqa: E402
from kcli.broker.apis.cluster import API_KEY as DESCRIBE_CLUSTER  # noqa: E402
from kcli.broker.apis.quorum import (  # noqa: E402
    ALLOCATE_PRODUCER_IDS,
    BEGIN_QUORUM_EPOCH,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    DESCRIBE_QUORUM,
    END_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    UNREGISTER_BROKER,
    VOTE,
)
from kcli.broker.apis.registry import ApiRegistry  # noqa: E402
from kcli.broker.raft.metadata_log import CLUSTER_METADATA_TOPIC_ID  # noqa: E402
from kcli.broker.raft.quorum_state import QUORUM_STATE, QuorumStateError, read_quorum_state  # noqa: E402
from kcli.client import ClientError, KafkaClient  # noqa: E402
from kcli.config import CLUSTER_METADATA_TOPIC  # noqa: E402
from kcli.protocol.codec import encode  # noqa: E402
from kcli.protocol.messages import api_name, nested_type, request_type  # noqa: E402
from kcli.protocol.request_header import decode_request, header_is_flexible, parse_request_header  # noqa: E402
from kcli.security.certs import loopback_pki  # noqa: E402

READY = re.compile(r"^kcli broker: listening on (\S+):(\d+)$", re.MULTILINE)
BROKER_OVERRIDES = ("group.initial.rebalance.delay.ms=0", "num.partitions=3")
NODE_ID = 1
SASL_USERS = 'user_alice="alice-secret"'
SASL_OVERRIDES = (
    "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name=SASL_PLAINTEXT",
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    "sasl.mechanism.inter.broker.protocol=PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
    f' required username="alice" password="alice-secret" {SASL_USERS};',
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config="
    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config="
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
)
"""A SASL_PLAINTEXT listener with every mechanism kcli serves (SCRAM users: none, so SCRAM fails late)."""
TARGETS = ("client", "controller", "sasl", "tls")
CONTROLLER_OVERRIDES = (
    "process.roles=broker,controller",
    f"node.id={NODE_ID}",
    "controller.listener.names=CONTROLLER",
    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
)
"""A node that is the whole quorum on its own, at its controller listener (no controller.quorum.voters)."""
READ_TIMEOUT = 1.0
"""How long a connection is read after its frames before it is reset (a long poll may still be parked)."""


@dataclasses.dataclass
class FuzzReport:
    frames: int = 0
    connections: int = 0
    spared_frames: int = 0
    """Mutated frames not sent (`max_epoch`)."""
    corpus: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    mutations: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    broker_deaths: list[str] = dataclasses.field(default_factory=list)
    handler_errors: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    tracebacks: int = 0
    stray_lines: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    warnings: int = 0
    peak_rss: int = 0
    clean_stop: bool = False
    verify_status: int | None = None
    verify_output: str = ""
    seconds: float = 0.0
    target: str = "client"
    elections: int = 0
    """Controller target: how many times the node became the Raft leader (once at each start)."""
    quorum_leader: int | None = None
    """Controller target, after the fuzz: the leader DescribeQuorum names on the controller listener."""
    quorum_epoch: int | None = None
    recovery_seconds: float | None = None
    """How long after the last frame DescribeQuorum named the node leader (None: not within the wait)."""
    registration_seconds: float | None = None
    """How long after the last frame DescribeCluster listed the node's broker, unfenced at its address."""
    brokers_unregistered: int = 0
    """Controller target, after the fuzz: brokers the frames had registered, unregistered before the client."""
    node_check: str = ""
    """Controller target, after the fuzz: what failed when a client produced and consumed ("": nothing)."""

    @property
    def verify_clean(self) -> bool:
        return self.verify_status == 0


def fuzz(
    frames: int,
    seed: int,
    connections: int,
    workdir: Path,
    *,
    target: str = "client",
    clients: bool = True,
    max_seconds: float = 3600.0,
    rss_limit: int = 1 << 30,
    spare: frozenset[str] = frozenset(),
    max_epoch: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> FuzzReport:
    """The whole run: start a broker, build the corpus, send mutated frames, stop, verify, read the log.

    `target` "controller" fuzzes the controller listener of a node that is the whole quorum (its corpus
    is `controller_frames`, `clients` does not apply), then checks that the node still works: it leads
    the quorum again and a client produces and consumes through its client listener. `max_epoch` leaves
    unsent the mutated Vote, BeginQuorumEpoch and EndQuorumEpoch requests with a higher epoch (counted
    in `spared_frames`), to look past a known defect: a node moved to an epoch near 2**31-1 cannot
    campaign in the next one (an int32) and its quorum of one is gone for good.
    """
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {', '.join(TARGETS)}")
    say = progress or (lambda _message: None)
    report = FuzzReport(target=target)
    started = time.monotonic()
    listener = {"sasl": "SASL_PLAINTEXT", "tls": "SSL"}.get(target, "PLAINTEXT")
    broker = BrokerUnderFuzz(workdir, rss_limit, controller=target == "controller", listener=listener)
    broker.start()
    try:
        refresh = None
        lead: list[bytes] = []
        if target == "tls":
            corpus = client_hellos()
        elif target == "sasl":
            corpus, lead = sasl_frames()
        elif target == "controller":
            refresh = _EpochCorpus(broker, spare)
            corpus = refresh()
        else:
            corpus = sample_frames()
            if clients:
                say("recording stock clients through a proxy ...")
                corpus += record_clients(broker)
        if target == "tls":
            report.corpus["ClientHello"] = len(corpus)
        else:
            corpus = [frame for frame in corpus if _api_of(frame) not in spare]
            for frame in corpus:
                report.corpus[_api_of(frame)] += 1
        say(f"corpus: {len(corpus)} frames of {len(report.corpus)} APIs; sending {frames:,} mutated frames")
        deadline = started + max_seconds
        spare_frame = epoch_above(max_epoch) if max_epoch is not None else None
        asyncio.run(
            _send_all(
                broker,
                corpus,
                frames,
                seed,
                connections,
                deadline,
                report,
                say,
                refresh,
                spare_frame,
                lead=lead,
                tls=target == "tls",
            )
        )
        if target == "controller" and not broker.gone:
            say("checking that the node leads its quorum again and serves a client ...")
            check_node(broker, report)
    finally:
        report.clean_stop = broker.stop() == 0
    report.peak_rss = broker.peak_rss
    report.broker_deaths = broker.deaths
    _read_log(broker.log_paths, report)
    if target == "controller":
        report.elections = sum(
            len(_ELECTED.findall(path.read_text(errors="replace"))) for path in broker.log_paths
        )
    verify = subprocess.run(
        [sys.executable, "-m", "kcli", "verify", str(broker.data_dir)],
        capture_output=True,
        text=True,
        env=kcli_env(),
        timeout=600,
    )
    report.verify_status = verify.returncode
    report.verify_output = (verify.stdout + verify.stderr).strip()
    report.seconds = time.monotonic() - started
    return report


# ---------------------------------------------------------------------------------------------------
# The broker under test
# ---------------------------------------------------------------------------------------------------


class BrokerUnderFuzz:
    """A `kcli broker start` process, restarted on the same data dir and port(s) when it dies.

    With `controller`, the node is broker and controller (node.id 1, no controller.quorum.voters: the
    only voter, at its controller listener, on a port found free here); frames go to that listener.
    """

    def __init__(
        self, workdir: Path, rss_limit: int, *, controller: bool = False, listener: str = "PLAINTEXT"
    ) -> None:
        self.workdir = workdir
        self.listener = listener
        """PLAINTEXT, SASL_PLAINTEXT or SSL: the client listener's security protocol."""
        self.rss_limit = rss_limit
        self.data_dir = workdir / "data"
        self.port = 0
        self.controller_port = free_port() if controller else 0
        self.advertised: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_paths: list[Path] = []
        self.gone = False
        """A restart failed: the run stops sending and reports what it has."""
        self.deaths: list[str] = []
        self.peak_rss = 0
        self.killed_at_rss = 0
        self._sampler_stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def start(self) -> None:
        log_path = self.workdir / f"broker-{len(self.log_paths)}.log"
        self.log_paths.append(log_path)
        args = [sys.executable, "-m", "kcli", "broker", "start", "--data-dir", str(self.data_dir)]
        overrides = list(BROKER_OVERRIDES)
        if self.controller_port:
            listeners = f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            overrides += [f"listeners={listeners}", *CONTROLLER_OVERRIDES]
        elif self.listener != "PLAINTEXT":
            overrides += [f"listeners={self.listener}://127.0.0.1:{self.port}", *self._security_overrides()]
        else:
            args += ["--listen", f"127.0.0.1:{self.port}"]
        if self.advertised:
            overrides.append(f"advertised.listeners={self.listener}://{self.advertised}")
        for item in overrides:
            args += ["--override", item]
        with open(log_path, "wb") as log_file:
            self.process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=kcli_env()
            )
        deadline = time.monotonic() + 60
        while True:
            match = READY.search(log_path.read_text(errors="replace"))
            if match:
                self.port = int(match.group(2))
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"kcli broker did not start:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.05)
        if self._sampler is None:
            self._sampler = threading.Thread(target=self._sample_rss, daemon=True)
            self._sampler.start()

    def _security_overrides(self) -> list[str]:
        if self.listener == "SASL_PLAINTEXT":
            return list(SASL_OVERRIDES)
        pki = loopback_pki(self.workdir / "pki")
        return [
            "listener.security.protocol.map=SSL:SSL",
            "inter.broker.listener.name=SSL",
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.location={pki.node['p12']}",
            f"ssl.keystore.password={pki.password}",
            f"ssl.truststore.location={pki.ca}",
        ]

    @property
    def target_port(self) -> int:
        """Where the mutated frames go: the controller listener when there is one, else the client's."""
        return self.controller_port or self.port

    @property
    def cluster_id(self) -> str:
        for line in (self.data_dir / "meta.properties").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
        raise RuntimeError(f"no cluster.id in {self.data_dir / 'meta.properties'}")

    @property
    def broker_epoch(self) -> int:
        """The node's broker epoch when it started, from its log (-1 before it is unfenced; a
        registration again after a mutated UnregisterBroker goes unlogged)."""
        found = _BROKER_EPOCH.findall(self.log_paths[-1].read_text(errors="replace"))
        return int(found[-1]) if found else -1

    @property
    def raft_epoch(self) -> int:
        election = read_quorum_state(self.data_dir / "__cluster_metadata-0" / QUORUM_STATE)
        return election.epoch if election is not None else 0

    def restart_if_dead(self) -> bool:
        """Count a death and start again when the process has exited, or kill it first when it is over
        its RSS limit or does not answer; True when it died."""
        assert self.process is not None
        if self.gone:
            return False
        reason = None
        if self.killed_at_rss:
            reason = f"killed: RSS {self.killed_at_rss >> 20} MiB is over the limit"
            self.killed_at_rss = 0
        elif self.process.poll() is not None:
            reason = f"exit status {self.process.returncode}"
        elif self._rss() > self.rss_limit:
            reason = f"killed: RSS {self._rss() >> 20} MiB is over the limit"
        elif not _answers_api_versions(self.target_port, tls=self.listener == "SSL"):
            reason = "killed: no answer to ApiVersions within 10 s"
        if reason is None:
            return False
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        tail = self.log_paths[-1].read_text(errors="replace").splitlines()[-10:]
        self.deaths.append(f"{reason}; last log lines:\n" + "\n".join(tail))
        try:
            self.start()
        except RuntimeError as e:  # e.g. recovering thousands of logs outlasts the start timeout
            self.gone = True
            self.deaths.append(f"not restarted, the run ends here: {str(e).splitlines()[0]}")
        return True

    def restart_advertising(self, advertised: str | None) -> None:
        """Stop gracefully and start again advertising `advertised` (the recording proxy) or itself."""
        self.stop()
        self.advertised = advertised
        self.start()

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._sample_once()
        return self.process.returncode

    def _sample_rss(self) -> None:
        while not self._sampler_stop.wait(0.1):
            self._sample_once()
            process = self.process
            rss = self._rss()
            if process is not None and process.poll() is None and rss > self.rss_limit:
                os.kill(process.pid, signal.SIGKILL)  # the machine is shared: never let it grow on
                self.killed_at_rss = rss

    def _sample_once(self) -> None:
        self.peak_rss = max(self.peak_rss, self._rss())

    def _rss(self) -> int:
        process = self.process
        if process is None:
            return 0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


def free_port() -> int:
    """A loopback port nothing listens on now (the OS's choice, released at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_BROKER_EPOCH = re.compile(rf"broker {NODE_ID} is unfenced \(broker epoch (\d+)\)")


def _answers_api_versions(port: int, *, tls: bool = False) -> bool:
    """Whether the broker answers an ApiVersions v0 request within 10 s (over TLS with `tls`: whether
    the node answers is the question here, not whom it is)."""
    request = _header(18, 0, flexible=False)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            sock = _UNCHECKED_TLS.wrap_socket(raw) if tls else raw
            sock.sendall(_sized(request))
            return len(sock.recv(4)) > 0
    except OSError:
        return False


_UNCHECKED_TLS = ssl.create_default_context()
_UNCHECKED_TLS.check_hostname = False
_UNCHECKED_TLS.verify_mode = ssl.CERT_NONE


# ---------------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------------


def sample_frames(registry: ApiRegistry | None = None) -> list[bytes]:
    """One request of every API key and version the broker handles (or `registry`), header v1/v2 and
    body (no size)."""
    frames = []
    for spec in registry if registry is not None else build_registry():
        for version in range(spec.min_version, spec.max_version + 1):
            cls = request_type(spec.api_key, version)
            frames.append(_frame(sample_entity(cls)))
    return frames


def _frame(request: object) -> bytes:
    cls = type(request)
    return _header(cls.__api_key__, cls.__version__, cls.__flexible__) + encode(request)  # type: ignore[attr-defined]


def controller_frames(broker: BrokerUnderFuzz, epoch: int, broker_epoch: int) -> list[bytes]:
    """The controller listener's corpus: the sample request of every API key and version it handles,
    and, for the Raft and broker lifecycle APIs, requests that get past their first checks (this
    cluster's id, `__cluster_metadata` and its topic id, the node as candidate, leader or replica, its
    broker epoch, the Raft epoch `epoch` and the next), so that mutations reach the Raft state machine
    and the controller rather than stopping at INCONSISTENT_CLUSTER_ID."""
    frames = sample_frames(build_controller_registry())
    cluster_id, epoch = broker.cluster_id, max(epoch, 1)
    metadata = {"cluster_id": cluster_id, "topic_name": CLUSTER_METADATA_TOPIC}
    for cls in _versions(VOTE):
        for replica_epoch, last_epoch, pre_vote in ((epoch + 1, epoch, False), (epoch, epoch, True)):
            frames.append(
                _frame(
                    _with_fields(
                        sample_entity(cls),
                        **metadata,
                        voter_id=NODE_ID,
                        replica_id=NODE_ID,
                        replica_epoch=replica_epoch,
                        last_offset_epoch=last_epoch,
                        last_offset=10,
                        pre_vote=pre_vote,
                    )
                )
            )
    for api_key in (BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH):
        for cls in _versions(api_key):
            endpoint = nested_type(cls, "LeaderEndpoint")(
                name="CONTROLLER", host="127.0.0.1", port=broker.controller_port
            )
            for leader_epoch in (epoch, epoch + 1):
                request = _with_fields(
                    sample_entity(cls),
                    **metadata,
                    voter_id=NODE_ID,
                    leader_id=NODE_ID,
                    leader_epoch=leader_epoch,
                    candidate_id=NODE_ID,
                    leader_endpoints=(endpoint,),
                )
                frames.append(_frame(request))
    for cls in _versions(FETCH):
        for replica_id in (NODE_ID, NODE_ID + 1):
            request = _with_fields(
                sample_entity(cls),
                cluster_id=cluster_id,
                replica_id=replica_id,
                max_bytes=1 << 16,
                partition_max_bytes=1 << 16,
                topic_id=CLUSTER_METADATA_TOPIC_ID,
                current_leader_epoch=epoch,
                fetch_offset=1,
                last_fetched_epoch=epoch,
                forgotten_topics_data=(),
            )
            frames.append(_frame(request))
    for cls in _versions(FETCH_SNAPSHOT):
        request = _with_fields(
            sample_entity(cls),
            cluster_id=cluster_id,
            replica_id=NODE_ID + 1,
            max_bytes=1 << 16,
            name=CLUSTER_METADATA_TOPIC,
            current_leader_epoch=epoch,
            end_offset=1,
            epoch=epoch,
        )
        frames.append(_frame(request))
    for cls in _versions(DESCRIBE_QUORUM):
        frames.append(_frame(_with_fields(sample_entity(cls), topic_name=CLUSTER_METADATA_TOPIC)))
    for cls in _versions(BROKER_REGISTRATION):
        listener = nested_type(cls, "Listener")(
            name="PLAINTEXT", host="127.0.0.1", port=9, security_protocol=0
        )
        feature = nested_type(cls, "Feature")(
            name="metadata.version", min_supported_version=1, max_supported_version=21
        )
        request = _with_fields(
            sample_entity(cls),
            cluster_id=cluster_id,
            broker_id=NODE_ID + 1,
            incarnation_id=uuid.UUID(int=NODE_ID + 1),
            listeners=(listener,),
            features=(feature,),
            log_dirs=(uuid.UUID(int=1 << 100),),
            previous_broker_epoch=-1,
        )
        frames.append(_frame(request))
    for cls in _versions(BROKER_HEARTBEAT):
        for broker_id in (NODE_ID, NODE_ID + 1):
            request = _with_fields(
                sample_entity(cls),
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                current_metadata_offset=1 << 20,
            )
            frames.append(_frame(request))
    for cls in _versions(UNREGISTER_BROKER):
        frames.append(_frame(_with_fields(sample_entity(cls), broker_id=NODE_ID + 1)))
    for cls in _versions(ALLOCATE_PRODUCER_IDS):
        request = _with_fields(sample_entity(cls), broker_id=NODE_ID, broker_epoch=broker_epoch)
        frames.append(_frame(request))
    return frames


class _EpochCorpus:
    """`controller_frames` at the node's current Raft epoch, made again when the epoch moves, and
    without the requests that move it (Vote, BeginQuorumEpoch, EndQuorumEpoch) for the second half of
    every QUIET_CYCLE seconds.

    A mutated Vote or BeginQuorumEpoch with a high bit flipped in its epoch moves the node millions of
    epochs ahead; requests in the epochs of the start would be fenced from then on, and the Raft state
    would move no more. And with those requests coming all the time the node never leads: it gets
    no election timeout without one. In the quiet half it elects itself again, and the other requests
    reach an active controller. Read when each batch is drawn, so the frames sent depend on the node's
    state and the clock as well as on the seed.
    """

    def __init__(self, broker: BrokerUnderFuzz, spare: frozenset[str]) -> None:
        self.broker = broker
        self.spare = spare
        self.key: tuple[int, bool] | None = None
        self.frames: list[bytes] = []
        self.started = time.monotonic()

    def __call__(self) -> list[bytes]:
        try:
            epoch = self.broker.raft_epoch
        except QuorumStateError:
            return self.frames
        quiet = (time.monotonic() - self.started) % QUIET_CYCLE >= QUIET_CYCLE / 2
        if (epoch, quiet) != self.key:
            self.key = epoch, quiet
            spare = self.spare | _EPOCH_MOVERS if quiet else self.spare
            frames = controller_frames(self.broker, epoch, self.broker.broker_epoch)
            self.frames = [f for f in frames if api_name(_INT16.unpack_from(f)[0]) not in spare]
        return self.frames


QUIET_CYCLE = 8.0
_EPOCH_MOVERS = frozenset(api_name(key) for key in (VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH))


def _versions(api_key: int) -> list[type]:
    spec = _CONTROLLER_REGISTRY.get(api_key)
    assert spec is not None
    return [request_type(api_key, v) for v in range(spec.min_version, spec.max_version + 1)]


def _with_fields(entity: Any, **values: object) -> Any:
    """`entity` with every field named in `values` replaced, at any depth (inside nested entities and
    arrays of them); a field replaced is not looked into."""
    changes: dict[str, object] = {}
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name in values:
            changes[f.name] = values[f.name]
        elif dataclasses.is_dataclass(value):
            changes[f.name] = _with_fields(value, **values)
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[f.name] = tuple(_with_fields(item, **values) for item in value)
    return dataclasses.replace(entity, **changes)


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    client_id = b"fuzz"
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    return header + b"\0" if flexible else header


def record_clients(broker: BrokerUnderFuzz) -> list[bytes]:
    """The frames stock clients send, recorded by a proxy the broker advertises as itself."""
    with RecordingProxy(broker) as proxy:
        broker.restart_advertising(f"127.0.0.1:{proxy.port}")
        try:
            bootstrap = f"127.0.0.1:{proxy.port}"
            for session in (_confluent_session, _kafka_python_session, _aiokafka_session):
                try:
                    session(bootstrap)
                except Exception as exc:  # a client library failing leaves its frames so far
                    print(f"  {session.__name__}: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            broker.restart_advertising(None)
        return list(proxy.frames)


class RecordingProxy:
    """A loopback TCP proxy to the broker that keeps every client-to-broker frame (without its size)."""

    def __init__(self, broker: BrokerUnderFuzz) -> None:
        self.broker = broker
        self.frames: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def __enter__(self) -> RecordingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.broker.port), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, record: bool) -> None:
        pending = b""
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                target.sendall(data)
                if record:
                    pending += data
                    while len(pending) >= 4:
                        (size,) = _INT32.unpack_from(pending)
                        if len(pending) < 4 + size:
                            break
                        with self._lock:
                            self.frames.append(pending[4 : 4 + size])
                        pending = pending[4 + size :]
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _confluent_session(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = {"fuzz-a": 3, "fuzz-b": 1, "fuzz-gone": 1}
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
        future.result(15)
    for future in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "fuzz-a")]).values():
        future.result(15)
    for future in admin.create_partitions([NewPartitions("fuzz-b", 2)]).values():
        future.result(15)
    admin.list_topics(timeout=15)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(300):
        producer.produce("fuzz-a", key=str(i % 7).encode(), value=os.urandom(200), partition=i % 3)
    producer.produce("fuzz-b", value=b"v", headers=[("h", b"1")])
    assert producer.flush(15) == 0
    compressed = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "acks": 1})
    for i in range(100):
        compressed.produce("fuzz-b", value=b"x" * 300, partition=i % 2)
    assert compressed.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fuzz-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["fuzz-a"])
    seen = 0
    deadline = time.monotonic() + 15
    while seen < 300 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.committed([TopicPartition("fuzz-a", p) for p in range(3)], timeout=10)
    consumer.get_watermark_offsets(TopicPartition("fuzz-a", 0), timeout=10)
    consumer.offsets_for_times([TopicPartition("fuzz-a", 0, 0)], timeout=10)
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fuzz-txn"})
    transactional.init_transactions(15)
    for commit in (True, False):
        transactional.begin_transaction()
        transactional.produce("fuzz-b", value=b"in a transaction", partition=0)
        transactional.send_offsets_to_transaction(
            [TopicPartition("fuzz-a", 0, 1)], consumer.consumer_group_metadata(), 15
        )
        if commit:
            transactional.commit_transaction(15)
        else:
            transactional.abort_transaction(15)
    consumer.close()
    for future in admin.delete_topics(["fuzz-gone"]).values():
        future.result(15)
    admin.list_consumer_groups().result(15)
    for future in admin.describe_consumer_groups(["fuzz-group"]).values():
        future.result(15)


def _kafka_python_session(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(100):
        producer.send("fuzz-a", key=b"k", value=b"kafka-python %d" % i, partition=i % 3)
    producer.flush(15)
    producer.close(5)
    consumer = KafkaConsumer(
        "fuzz-a",
        bootstrap_servers=bootstrap,
        group_id="fuzz-kafka-python",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    for _ in zip(range(200), consumer, strict=False):
        pass
    consumer.commit()
    consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    for ask in (
        admin.list_groups,
        lambda: admin.describe_groups(["fuzz-kafka-python"]),
        lambda: admin.list_group_offsets("fuzz-kafka-python"),
        admin.describe_log_dirs,
        admin.list_transactions,
        lambda: admin.describe_producers([("fuzz-b", 0)]),
    ):
        with contextlib.suppress(Exception):  # a newer admin call this broker does not take
            ask()
    admin.close()


def _aiokafka_session(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(50):
                await producer.send("fuzz-a", b"aiokafka %d" % i, partition=i % 3)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "fuzz-a", bootstrap_servers=bootstrap, group_id="fuzz-aiokafka", auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=3000)
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


# ---------------------------------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------------------------------


def mutate(frame: bytes, corpus: list[bytes], rng: random.Random) -> tuple[str, bytes]:
    """(what was done, the bytes to send with their size prefix) for one frame of the corpus."""
    kind = rng.choices(_MUTATIONS, _WEIGHTS)[0]
    if kind == "unchanged":
        return kind, _sized(frame)
    if kind == "size lie":
        declared = rng.choice(
            (-1, -(2**31), 0, 3, 2**31 - 1, len(frame) + rng.randint(1, 64), len(frame) // 2)
        )
        return kind, _INT32.pack(declared) + frame
    data = bytearray(frame)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        _BODY_MUTATORS[kind](data, corpus, rng)
    return kind, _sized(bytes(data))


def _sized(frame: bytes) -> bytes:
    return _INT32.pack(len(frame)) + frame


def _body_start(data: bytearray) -> int:
    """Where the body begins, roughly (header v1: 10 bytes + client id); never past the end."""
    if len(data) < 10:
        return 0
    (length,) = _INT16.unpack_from(data, 8)
    return min(len(data), 10 + max(length, 0))


def _position(data: bytearray, rng: random.Random) -> int:
    """A byte to change: mostly in the body, sometimes in the header."""
    if not data:
        return 0
    low = 0 if rng.random() < 0.1 else _body_start(data)
    return rng.randrange(low, len(data)) if low < len(data) else rng.randrange(len(data))


def _bit_flips(data: bytearray, corpus: list[bytes], rng: random.Random) -> None:
    for _ in range(rng.randint(1, 8)):
        if data:
            data[_position(data, rng)] ^= 1 << rng.randrange(8)


def _insert(data: bytearray, corpus: list[bytes], rng: random.Random) -> None:
    at = _position(data, rng)
    data[at:at] = rng.randbytes(rng.randint(1, 16))


def _delete(data: bytearray, corpus: list[bytes], rng: random.Random) -> None:
    at = _position(data, rng)
    del data[at : at + rng.randint(1, 16)]


def _truncate(data: bytearray, corpus: list[bytes], rng: random.Random) -> None:
    del data[rng.randrange(len(data) + 1) :]


def _length_lie(data: bytearray, corpus: list[bytes], rng: random.Random) -> None:
    """A count or length (an int32, int16 or one-byte compact varint whose value fits in the frame)
    becomes null, zero, one more, or huge."""
    start = _body_start(data)
    for _ in range(32):
        at = rng.randrange(start, len(data)) if start < len(data) else 0
        width = rng.choice((4, 2, 1))
        if at + width > len(data):
            continue
        value = int.from_bytes(data[at : at + width], "big", signed=True)
        if not 0 <= value <= len(data):
            continue
        if width == 1:
            if value == 0:
                continue
            data[at : at + 1] = rng.choice((b"\x00", b"\x01", bytes([value + 1]), b"\xff\xff\xff\xff\x0f"))
        else:
            limit = (1 << (8 * width - 1)) - 1
            new = min(rng.choice((-1, -1, 0, value + 1, value * 2 + 1, limit, -limit)), limit)
            data[at : at + width] = new.to_bytes(width, "big", signed=True)
        return


def _splice(data: bytearray, corpus: list[bytes], rng: random.Random) -> None:
    """The front of this request and the back of another."""
    other = rng.choice(corpus)
    data[rng.randrange(len(data) + 1) :] = other[rng.randrange(len(other) + 1) :]


def _other_header(data: bytearray, corpus: list[bytes], rng: random.Random) -> None:
    """This body under another request's API key and version: one schema's bytes read by another's."""
    other = rng.choice(corpus)
    data[:4] = other[:4]


_BODY_MUTATORS: dict[str, Callable[[bytearray, list[bytes], random.Random], None]] = {
    "bit flips": _bit_flips,
    "insert bytes": _insert,
    "delete bytes": _delete,
    "truncate": _truncate,
    "length lie": _length_lie,
    "splice": _splice,
    "other header": _other_header,
}
_MUTATIONS = ["unchanged", "size lie", *_BODY_MUTATORS]
_WEIGHTS = [5, 5, 25, 8, 8, 6, 25, 8, 10]


# ---------------------------------------------------------------------------------------------------
# Sending
# ---------------------------------------------------------------------------------------------------


async def _send_all(
    broker: BrokerUnderFuzz,
    corpus: list[bytes],
    frames: int,
    seed: int,
    connections: int,
    deadline: float,
    report: FuzzReport,
    say: Callable[[str], None],
    refresh: Callable[[], list[bytes]] | None = None,
    spare_frame: Callable[[bytes], bool] | None = None,
    *,
    lead: list[bytes] | None = None,
    tls: bool = False,
) -> None:
    batches = (
        _tls_batches(corpus, frames, seed, report)
        if tls
        else _batches(corpus, frames, seed, report, refresh, spare_frame, lead)
    )
    restarting = asyncio.Lock()
    last_progress = last_checked = time.monotonic()

    async def worker() -> None:
        nonlocal last_progress, last_checked
        for batch in batches:
            if time.monotonic() > deadline or broker.gone:
                return
            try:
                await _send_batch(broker.target_port, batch)
            except OSError:
                async with restarting:
                    await asyncio.to_thread(broker.restart_if_dead)
            report.connections += 1
            if time.monotonic() - last_checked > 5:
                last_checked = time.monotonic()
                async with restarting:
                    await asyncio.to_thread(broker.restart_if_dead)
            if time.monotonic() - last_progress > 10:
                last_progress = time.monotonic()
                say(
                    f"  {report.frames:,} frames, {len(broker.deaths)} deaths, RSS {broker.peak_rss >> 20} MiB"
                )

    await asyncio.gather(*(worker() for _ in range(connections)))
    if not broker.gone:
        await asyncio.to_thread(broker.restart_if_dead)


def _batches(
    corpus: list[bytes],
    frames: int,
    seed: int,
    report: FuzzReport,
    refresh: Callable[[], list[bytes]] | None = None,
    spare_frame: Callable[[bytes], bool] | None = None,
    lead: list[bytes] | None = None,
) -> Iterator[bytes]:
    """Connections' worth of mutated frames (1 to 8 each), from one generator shared by the workers;
    `refresh` gives the corpus anew for each batch, and a mutated frame `spare_frame` picks is not sent.
    With `lead`, half the connections open with one of its frames unchanged (a valid SaslHandshake, so
    that what follows meets the mechanism rather than the handshake check; not counted as a frame)."""
    rng = random.Random(seed)
    while report.frames < frames:
        if refresh is not None:
            corpus = refresh()
        count = min(rng.randint(1, 8), frames - report.frames)
        parts = []
        for _ in range(count):
            kind, data = mutate(rng.choice(corpus), corpus, rng)
            if spare_frame is not None and spare_frame(data[4:]):
                report.spared_frames += 1
                continue
            report.mutations[kind] += 1
            parts.append(data)
        report.frames += len(parts)
        if parts and lead and rng.random() < 0.5:
            parts.insert(0, _sized(rng.choice(lead)))
        if parts:
            yield b"".join(parts)


def epoch_above(max_epoch: int) -> Callable[[bytes], bool]:
    """Whether a frame is a Vote, BeginQuorumEpoch or EndQuorumEpoch the broker would decode, with an
    epoch above `max_epoch` in one of its partitions."""
    fields = {VOTE: "replica_epoch", BEGIN_QUORUM_EPOCH: "leader_epoch", END_QUORUM_EPOCH: "leader_epoch"}

    def check(frame: bytes) -> bool:
        if len(frame) < 4:
            return False
        api_key, version = _KEY_VERSION.unpack_from(frame)
        spec = _CONTROLLER_REGISTRY.get(api_key)
        if api_key not in fields or spec is None or not spec.handles(version):
            return False
        try:
            _, _, offset = parse_request_header(frame, header_is_flexible(api_key, version))
            request: Any = decode_request(api_name(api_key), api_key, version, frame, offset)
        except Exception:  # the broker refuses it too
            return False
        epochs = (getattr(p, fields[api_key]) for t in request.topics for p in t.partitions)
        return any(epoch > max_epoch for epoch in epochs)

    return check


async def _send_batch(port: int, data: bytes) -> None:
    """Write, half-close, read until the broker closes (it answers what it could parse, then closes);
    reset the connection after READ_TIMEOUT."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        writer.write_eof()
        await writer.drain()
        async with asyncio.timeout(READ_TIMEOUT):
            while await reader.read(1 << 16):
                pass
    except (TimeoutError, ConnectionError):
        pass
    finally:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()


# ---------------------------------------------------------------------------------------------------
# Before authentication: SASL frames and TLS records
# ---------------------------------------------------------------------------------------------------

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def sasl_frames() -> tuple[list[bytes], list[bytes]]:
    """(corpus, leads) for a SASL listener before authentication. The corpus: SaslHandshake v0/v1 for
    each mechanism and some the broker does not serve, SaslAuthenticate v0-v2 carrying PLAIN, SCRAM
    (client-first and a client-final with a made-up proof) and OAUTHBEARER tokens, those tokens raw (as
    after a v0 handshake: size-prefixed, no Kafka header), and ApiVersions v0-v3. The leads: a valid
    SaslHandshake v0 or v1 per mechanism, sent unchanged before half of the connections' frames."""
    tokens = [
        b"\0alice\0alice-secret",
        b"alice\0alice\0wrong",
        b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL",
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        b"n,a=alice,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.\x01\x01",
    ]
    handshakes = [
        _frame(_with_fields(sample_entity(request_type(SASL_HANDSHAKE, version)), mechanism=mechanism))
        for version in (0, 1)
        for mechanism in SASL_MECHANISMS
    ]
    others = [
        _frame(_with_fields(sample_entity(request_type(SASL_HANDSHAKE, 1)), mechanism=mechanism))
        for mechanism in ("GSSAPI", "", "plain", "SCRAM-SHA-1")
    ]
    authenticates = [
        _frame(_with_fields(sample_entity(request_type(SASL_AUTHENTICATE, version)), auth_bytes=token))
        for version in (0, 1, 2)
        for token in tokens
    ]
    api_versions = [_frame(sample_entity(request_type(API_VERSIONS, version))) for version in range(4)]
    return [*handshakes, *others, *authenticates, *tokens, *api_versions], handshakes


def _api_of(frame: bytes) -> str:
    """The API a corpus frame's header names; a raw SASL token (no header) is "SaslToken"."""
    name = api_name(_INT16.unpack_from(frame)[0]) if len(frame) >= 2 else ""
    return "SaslToken" if not name or name.startswith("api key") else name


def client_hellos() -> list[bytes]:
    """ClientHello records as Python's ssl writes them: TLS 1.2 only, 1.3 only, both; with and without
    SNI (the first flight of a TLS client, which is all a server reads before it answers)."""
    hellos = []
    for low, high in (
        (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2),
        (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3),
        (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
    ):
        for server_name in (None, "localhost"):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.minimum_version, context.maximum_version = low, high
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
            with contextlib.suppress(ssl.SSLWantReadError):
                tls.do_handshake()
            hellos.append(outgoing.read())
    return hellos


def mutate_tls(hello: bytes, corpus: list[bytes], rng: random.Random) -> tuple[str, bytes]:
    """(what was done, the bytes) for one record where a TLS server expects a ClientHello."""
    kind = rng.choices(_TLS_MUTATIONS, _TLS_WEIGHTS)[0]
    data = bytearray(hello)
    if kind == "bit flips":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncated":
        del data[rng.randrange(len(data)) :]
    elif kind == "inserted bytes":
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randint(1, 64))
    elif kind == "deleted bytes":
        at = rng.randrange(len(data))
        del data[at : at + rng.randint(1, 32)]
    elif kind == "record length lie":
        data[3:5] = struct.pack(">H", rng.choice((0, 1, 2**14, 2**14 + 2048 + 1, 0xFFFF, len(data) + 5)))
    elif kind == "handshake length lie":
        data[6:9] = rng.choice((0, 1, 2**24 - 1, len(data))).to_bytes(3, "big")
    elif kind == "version lie":
        data[1:3] = rng.choice((b"\x00\x00", b"\x02\x00", b"\x03\x00", b"\x03\x04", b"\xff\xff"))
    elif kind == "content type lie":
        data[0] = rng.choice((0, 20, 21, 23, 24, 255))
    elif kind == "garbage":
        data = bytearray(rng.randbytes(rng.randint(1, 600)))
    elif kind == "alert":
        data = bytearray(b"\x15\x03\x03\x00\x02" + bytes((rng.choice((1, 2)), rng.randrange(256))))
    elif kind == "kafka frame":
        data = bytearray(_sized(_header(API_VERSIONS, rng.randrange(4), flexible=False)))
    elif kind == "two hellos":
        data += rng.choice(corpus)
    return kind, bytes(data)


_TLS_MUTATIONS = [
    "unchanged", "bit flips", "truncated", "inserted bytes", "deleted bytes", "record length lie",
    "handshake length lie", "version lie", "content type lie", "garbage", "alert", "kafka frame", "two hellos",
]  # fmt: skip
_TLS_WEIGHTS = [3, 25, 15, 8, 8, 8, 8, 4, 4, 8, 3, 3, 3]


def _tls_batches(corpus: list[bytes], frames: int, seed: int, report: FuzzReport) -> Iterator[bytes]:
    """A connection's worth of records for a TLS listener: mostly one mutated ClientHello, sometimes
    followed by more records (a server stops at the first it cannot take)."""
    rng = random.Random(seed)
    while report.frames < frames:
        count = min(rng.choice((1, 1, 1, 2, 3)), frames - report.frames)
        parts = []
        for _ in range(count):
            kind, data = mutate_tls(rng.choice(corpus), corpus, rng)
            report.mutations[kind] += 1
            parts.append(data)
        report.frames += count
        yield b"".join(parts)


# ---------------------------------------------------------------------------------------------------
# After a controller listener's fuzz: does the node still work?
# ---------------------------------------------------------------------------------------------------


def check_node(broker: BrokerUnderFuzz, report: FuzzReport, timeout: float = 30.0) -> None:
    """After the frames: DescribeQuorum on the controller listener until it names the node leader (a
    quorum of one the fuzz moved out of leadership elects itself again), DescribeCluster on the client
    listener until the node's broker is registered at its own address and unfenced (a mutated
    UnregisterBroker may have removed it, a BrokerRegistration replaced it: it registers again), then a
    confluent-kafka producer and consumer through the client listener (the controller creates the topic
    and allocates the idempotent producer's id)."""
    started = time.monotonic()
    leader, epoch = asyncio.run(_wait_for_leadership(broker.controller_port, timeout))
    report.quorum_leader, report.quorum_epoch = leader, epoch
    if leader != NODE_ID:
        report.node_check = f"DescribeQuorum names leader {leader} in epoch {epoch} after {timeout:.0f} s"
        return
    report.recovery_seconds = time.monotonic() - started
    try:
        registered = asyncio.run(_wait_for_registration(broker.port, timeout))
        if registered is None:
            report.node_check = (
                f"broker {NODE_ID} not registered and unfenced at its address after {timeout:.0f} s"
            )
            return
        report.registration_seconds = time.monotonic() - started
        report.brokers_unregistered = asyncio.run(_unregister_other_brokers(broker, registered, timeout))
        _produce_and_consume(f"127.0.0.1:{broker.port}", timeout)
    except Exception as exc:
        report.node_check = f"{type(exc).__name__}: {exc}"


async def _wait_for_registration(port: int, timeout: float) -> list[int] | None:
    """Every broker id DescribeCluster lists (fenced ones too) once it lists the node unfenced at its
    client listener; None if it does not within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with await KafkaClient.connect(f"127.0.0.1:{port}", request_timeout=5) as client:
                cls = client.request_type(DESCRIBE_CLUSTER)
                ask = _with_fields(
                    sample_entity(cls),
                    endpoint_type=1,
                    include_fenced_brokers=True,
                    include_cluster_authorized_operations=False,
                )
                while time.monotonic() < deadline:
                    brokers = (await client.send(ask)).brokers
                    if any(
                        (b.broker_id, b.port, getattr(b, "is_fenced", False)) == (NODE_ID, port, False)
                        for b in brokers
                    ):
                        return [b.broker_id for b in brokers]
                    await asyncio.sleep(0.1)
        except ClientError:
            await asyncio.sleep(0.1)
    return None


async def _unregister_other_brokers(broker: BrokerUnderFuzz, broker_ids: list[int], timeout: float) -> int:
    """Unregister the brokers mutated BrokerRegistrations added (and heartbeats may have unfenced), so
    that the client connects to the node alone, not to whatever address a mutation made up; how many.
    NOT_CONTROLLER is asked again until `timeout`: a mutated Vote or BeginQuorumEpoch still queued when
    leadership was seen can move the quorum of one through one more election."""
    others = [broker_id for broker_id in broker_ids if broker_id != NODE_ID]
    deadline = time.monotonic() + timeout
    async with await KafkaClient.connect(f"127.0.0.1:{broker.controller_port}", request_timeout=10) as client:
        cls = client.request_type(UNREGISTER_BROKER)
        for broker_id in others:
            while True:
                answer = await client.send(cls(broker_id=broker_id))
                if answer.error_code is ErrorCode.not_controller and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    continue
                if answer.error_code is not ErrorCode.none:
                    raise RuntimeError(f"UnregisterBroker {broker_id}: {answer.error_code.name}")
                break
    return len(others)


async def _wait_for_leadership(port: int, timeout: float) -> tuple[int, int]:
    """(leader id, epoch) DescribeQuorum answers once it names the node leader with no error and the
    node as the only voter, or its last answer at `timeout` ((-1, -1): none)."""
    deadline = time.monotonic() + timeout
    leader = epoch = -1
    while time.monotonic() < deadline:
        try:
            async with await KafkaClient.connect(
                f"127.0.0.1:{port}", client_id="fuzz-check", request_timeout=5
            ) as client:
                cls = client.request_type(DESCRIBE_QUORUM)
                request = _with_fields(sample_entity(cls), topic_name=CLUSTER_METADATA_TOPIC)
                while time.monotonic() < deadline:
                    partition = (await client.send(request)).topics[0].partitions[0]
                    leader, epoch = partition.leader_id, partition.leader_epoch
                    voters = [replica.replica_id for replica in partition.current_voters]
                    if partition.error_code is ErrorCode.none and leader == NODE_ID and voters == [NODE_ID]:
                        return leader, epoch
                    await asyncio.sleep(0.1)
        except ClientError:
            await asyncio.sleep(0.1)
    return leader, epoch


def _produce_and_consume(bootstrap: str, timeout: float) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "after-the-fuzz"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # On the node itself, whatever brokers the frames registered.
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[NODE_ID]])])[topic].result(timeout)
    failed: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "message.timeout.ms": int(timeout * 1000),
        }
    )
    values = [b"after the fuzz %d" % i for i in range(100)]
    for value in values:
        producer.produce(
            topic, value, partition=0, on_delivery=lambda error, _m: error and failed.append(str(error))
        )
    if producer.flush(timeout) != 0 or failed:
        raise RuntimeError(f"produce failed: {failed[:3] or 'messages still queued'}")
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "after-the-fuzz", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(seen) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
        if seen != values:
            raise RuntimeError(f"consumed {len(seen)} of {len(values)} messages, or not in order")
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            raise RuntimeError(f"offset commit failed: {exc}") from None
    finally:
        consumer.close()


_ELECTED = re.compile(rf"raft: node {NODE_ID} is the leader of epoch \d+")


# ---------------------------------------------------------------------------------------------------
# The broker log
# ---------------------------------------------------------------------------------------------------


def _read_log(paths: list[Path], report: FuzzReport) -> None:
    """Count WARNING lines; group ERROR lines and tracebacks (by their message and last line), and
    lines in no log format."""
    for path in paths:
        error: str | None = None
        for line in path.open(errors="replace"):
            line = line.rstrip("\n")
            match = _LOG_LINE.match(line)
            if match:
                if error is not None:
                    report.handler_errors[error] += 1
                    error = None
                level, message = match.group(1), match.group(2)
                if level == "WARNING":
                    report.warnings += 1
                elif level in ("ERROR", "CRITICAL"):
                    error = _ADDRESS.sub("ADDR", message)
            elif line.startswith("Traceback"):
                report.tracebacks += 1
                error = error or "(a traceback with no ERROR line)"
            elif error is not None and line and not line.startswith(" "):
                error = f"{error} | {_ADDRESS.sub('ADDR', line)}"  # the exception line
            elif line and not line.startswith((" ", "kcli broker:", "%")) and error is None:
                # Not kcli's format: asyncio's own complaints, or the rest of a message carrying a
                # client's string with a newline in it (a group id, say).
                report.stray_lines[line[:200]] += 1
        if error is not None:
            report.handler_errors[error] += 1


_LOG_LINE = re.compile(r"^\[[^\]]+\] ([A-Z]+) \S+: (.*)$")
_ADDRESS = re.compile(r"\d+\.\d+\.\d+\.\d+:\d+(-\d+)?")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
_CONTROLLER_REGISTRY = build_controller_registry()


# ---------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    parser.add_argument("--rss-limit-mib", type=int, default=1024)
    parser.add_argument("--spare", default="", help="APIs left out of the corpus, e.g. CreateTopics")
    parser.add_argument("--no-clients", action="store_true", help="corpus of sample requests only")
    parser.add_argument(
        "--max-epoch",
        type=int,
        default=None,
        help="controller target: send no Vote/BeginQuorumEpoch/EndQuorumEpoch with a higher epoch",
    )
    parser.add_argument(
        "--target",
        choices=TARGETS,
        default="client",
        help="the listener fuzzed: the client listener, the controller listener of a quorum of one, a "
        "SASL_PLAINTEXT listener before authentication, or an SSL listener's TLS records",
    )
    args = parser.parse_args()
    spare = frozenset(name for name in args.spare.split(",") if name)
    with tempfile.TemporaryDirectory(prefix="kcli-fuzz-") as workdir:
        report = fuzz(
            args.frames,
            args.seed,
            args.connections,
            Path(workdir),
            target=args.target,
            clients=not args.no_clients,
            max_seconds=args.max_seconds,
            rss_limit=args.rss_limit_mib << 20,
            spare=spare,
            max_epoch=args.max_epoch,
            progress=lambda message: print(message, file=sys.stderr, flush=True),
        )
    print_report(report)
    command = f"python tests/bench/fuzz_broker.py --frames {args.frames} --seed {args.seed}"
    command += f" --connections {args.connections} --rss-limit-mib {args.rss_limit_mib}"
    command += (f" --spare {args.spare}" if args.spare else "") + (" --no-clients" if args.no_clients else "")
    command += f" --target {args.target}" if args.target != "client" else ""
    command += f" --max-epoch {args.max_epoch}" if args.max_epoch is not None else ""
    print(f"reproduce: {command}")


def print_report(report: FuzzReport) -> None:
    print(
        f"frames sent:     {report.frames:,} over {report.connections:,} connections in {report.seconds:.0f} s"
    )
    print(f"corpus:          {sum(report.corpus.values())} frames of {len(report.corpus)} APIs")
    if report.spared_frames:
        print(f"spared:          {report.spared_frames:,} mutated frames not sent (--max-epoch)")
    print("mutations:       " + ", ".join(f"{k} {v:,}" for k, v in report.mutations.most_common()))
    print(f"broker deaths:   {len(report.broker_deaths)}")
    for death in report.broker_deaths[:5]:
        print("  " + death.replace("\n", "\n    "))
    print(f"handler errors:  {sum(report.handler_errors.values())} ({report.tracebacks} tracebacks)")
    for message, count in report.handler_errors.most_common(20):
        print(f"  {count:>7,}  {message[:300]}")
    print(f"WARNING lines:   {report.warnings:,}")
    print(f"stray lines:     {sum(report.stray_lines.values())} (in no log format)")
    for line, count in report.stray_lines.most_common(5):
        print(f"  {count:>7,}  {line}")
    if report.target == "controller":
        print(f"Raft elections:  {report.elections} (the node became leader; once at each start)")
        recovered = f"leader {report.quorum_leader} in epoch {report.quorum_epoch}" + (
            f", {report.recovery_seconds:.1f} s after the last frame"
            if report.recovery_seconds is not None
            else ""
        )
        print(f"after the fuzz:  DescribeQuorum: {recovered}")
        if report.registration_seconds is not None:
            print(
                f"                 broker {NODE_ID} registered: {report.registration_seconds:.1f} s after the last frame"
            )
        print(f"                 brokers the frames registered, unregistered: {report.brokers_unregistered}")
        print(f"                 produce/consume: {report.node_check or 'ok'}")
    print(f"peak RSS:        {report.peak_rss / 2**20:.0f} MiB")
    print(f"graceful stop:   {'yes' if report.clean_stop else 'NO'}")
    verdict = "clean" if report.verify_clean else f"exit {report.verify_status}"
    print(f"kcli verify:     {verdict}")
    if not report.verify_clean:
        print("  " + report.verify_output[-2000:].replace("\n", "\n  "))


if __name__ == "__main__":
    main()
