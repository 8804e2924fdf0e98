"""Apache Kafka, the reference kcli is measured against: resolved from Maven Central, started as
Kafka's scripts start it.

    python -m tests.apache_kafka resolve            # (./dev kafka) jars into the cache, checked against the pin
    python -m tests.apache_kafka start [--nodes 3]  # a combined KRaft node (or a cluster) until Ctrl-C
    python -m tests.apache_kafka run CLASS ARGS...  # one of Kafka's tools, e.g. org.apache.kafka.tools.TopicCommand
    python -m tests.apache_kafka pin                # resolve afresh and rewrite the pin (a maintainer's step)

KCLI_KAFKA_VERSION=4.4.0 in front of any of these, or of pytest, selects the other pinned release (see
LOG4J_OF); 4.1.2 is the default.

No jar is committed. `resolve` writes a small pom.xml into the cache dir (KCLI_KAFKA_CACHE, default
~/.cache/kcli/apache-kafka/<version>/), lets Maven copy the runtime dependencies into a `libs-*` dir and
compares the jar names with tests/apache-kafka-<version>.jars, the pinned set (as constraints.txt pins
Python): a different set is one error, so a new transitive version never slips into the reference
unnoticed. The set is kafka_2.13 (broker, storage tool), kafka-tools, kafka-clients and kafka-streams
(tests/test_java_clients.py compiles its Java clients and a Streams application against them). The
jars land in `libs-<digest of the pin>/`, one dir per pinned set; later calls find it complete and
start no Maven.

Processes run as bin/kafka-run-class.sh runs them (its G1 flags, headless, `-cp libs/*`) with a small
heap and C1 only: on two busy cores that formatted and started one node in 4.7 s instead of 7.4 s with the
full JIT, three nodes in 10.6 s instead of 27 s. log4j2 writes each JVM's log to a file beside its data.
Each kind of C1-only JVM (a node, a tool) writes a class archive (AppCDS) into the cache the first time
it runs and maps it from then on (class_archive, train): loading Kafka's classes was most of a short
JVM's CPU.

`start_cluster(..., security="sasl_ssl" | "mtls")` (or `start --security ...`) secures the client and
inter-broker listener as an operator would: SASL_SSL with SCRAM-SHA-512 (the `admin` user bootstrapped by
`kafka-storage format --add-scram`), or SSL with `ssl.client.auth=required`; certificates come from
kcli.security.certs, the controller listener stays PLAINTEXT on loopback. `cluster.client_properties` is
one file that Kafka's tools (--command-config), the Java clients and kcli's `--command-config` all read.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kcli.security.certs import LoopbackPki, loopback_pki

LOG4J_OF = {"4.1.2": "2.25.3", "4.4.0": "2.25.5"}
"""The pinned Apache Kafka releases, each with log4j2 as its kafka-server declares it (Kafka logs through
slf4j 1.7, so the binding is log4j-slf4j-impl): 4.1.2, the newest 4.1 patch on Maven Central when pinned
and the default, and 4.4.0, the newest 4.x there when pinned (KCLI_KAFKA_VERSION=4.4.0 selects it; see
docs/apache-kafka.md, "Against Kafka 4.4.0")."""
DEFAULT_VERSION = "4.1.2"
VERSION = os.environ.get("KCLI_KAFKA_VERSION") or DEFAULT_VERSION
if VERSION not in LOG4J_OF:
    raise SystemExit(f"KCLI_KAFKA_VERSION={VERSION}: not one of the pinned releases {', '.join(LOG4J_OF)}")
SCALA = "2.13"
LOG4J = LOG4J_OF[VERSION]
REPO = Path(__file__).resolve().parents[1]
PINNED = REPO / "tests" / f"apache-kafka-{VERSION}.jars"

STORAGE_TOOL = "kafka.tools.StorageTool"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
IN_CORE = VERSION.startswith("4.1.")
"""Kafka moved ConfigCommand and DumpLogSegments from the Scala core (kafka_2.13) into kafka-tools after
4.1: 4.4.0 has them in org.apache.kafka.tools; StorageTool and kafka.Kafka stay in the core."""
CONFIG_COMMAND = "kafka.admin.ConfigCommand" if IN_CORE else "org.apache.kafka.tools.ConfigCommand"
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"
METADATA_QUORUM_COMMAND = "org.apache.kafka.tools.MetadataQuorumCommand"
LOG_DIRS_COMMAND = "org.apache.kafka.tools.LogDirsCommand"
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"
DUMP_LOG_SEGMENTS = "kafka.tools.DumpLogSegments" if IN_CORE else "org.apache.kafka.tools.DumpLogSegments"

# bin/kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
KAFKA_JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
C1_ONLY = "-XX:TieredStopAtLevel=1"
"""What makes a JVM start fast on 2 cores (no C2 compile threads competing with start-up); it may slow a
long-running JVM's steady state, so throughput benchmarks can leave it out."""
JVM_FLAGS = (*KAFKA_JVM_FLAGS, C1_ONLY)
SERVER_HEAP = ("-Xms128m", "-Xmx384m")
TOOL_HEAP = ("-Xmx256m",)
READY_LINE = "Kafka Server started"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0


class KafkaSetupError(RuntimeError):
    """Apache Kafka cannot be resolved or started here; the message says what is missing or wrong."""


def missing_tools(version: str = VERSION) -> list[str]:
    """Which programs the reference needs are not on PATH: java, and mvn unless the jars are cached."""
    needed = ("java",) if is_resolved(version) else ("java", "mvn")
    return [name for name in needed if shutil.which(name) is None]


def is_resolved(version: str = VERSION) -> bool:
    """Whether the cache holds exactly the pinned jars of `version` (then no Maven run is needed)."""
    libs = libs_dir(version)
    return libs.is_dir() and sorted(p.name for p in libs.glob("*.jar")) == pinned_jars(version)


def libs_dir(version: str = VERSION) -> Path:
    """The cache's jar dir for the pinned set: `libs-<digest of the pin>`, so that checkouts pinning
    different sets (one with kafka-streams, one without) share the cache without replacing each
    other's jars under a running JVM."""
    digest = hashlib.sha256("\n".join(pinned_jars(version)).encode()).hexdigest()[:12]
    return cache_dir(version) / f"libs-{digest}"


def cache_dir(version: str = VERSION) -> Path:
    """Where one version's jars live; KCLI_KAFKA_CACHE replaces ~/.cache/kcli/apache-kafka."""
    root = os.environ.get("KCLI_KAFKA_CACHE") or Path.home() / ".cache" / "kcli" / "apache-kafka"
    return Path(root) / version


POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by kcli's tests/apache_kafka.py: Apache Kafka {version}'s runtime jars, nothing else. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kcli.reference</groupId>
  <artifactId>apache-kafka</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

LOG4J2_CONFIG = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <File name="file" fileName="${{sys:kcli.kafka.log}}" immediateFlush="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="{level}"/>
    <Logger name="org.apache.kafka" level="{level}"/>
    <Root level="warn"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


def pinned_jars(version: str = VERSION) -> list[str]:
    """The committed jar names of `version` (comments and blank lines left out)."""
    path = REPO / "tests" / f"apache-kafka-{version}.jars"
    if not path.exists():
        raise KafkaSetupError(f"no pinned jar list {path.relative_to(REPO)} for Apache Kafka {version}")
    lines = (line.strip() for line in path.read_text().splitlines())
    return sorted(line for line in lines if line and not line.startswith("#"))


def resolve(version: str = VERSION, *, quiet: bool = False) -> Path:
    """The jar dir of `version`, resolved with Maven on first use; raises KafkaSetupError when
    Maven fails or resolves a set other than the pinned one."""
    expected = pinned_jars(version)
    root = cache_dir(version)
    libs = libs_dir(version)
    if is_resolved(version):
        return libs
    started = time.monotonic()
    if not quiet:
        print(f"apache-kafka: resolving Apache Kafka {version} with Maven into {root}", file=sys.stderr)
    staging = _maven_copy(
        version, root / f"libs.partial-{os.getpid()}"
    )  # test runs in other trees share the cache
    got = sorted(p.name for p in staging.glob("*.jar"))
    if got != expected:
        extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
        raise KafkaSetupError(
            f"Maven resolved a different jar set for Apache Kafka {version} than "
            f"{PINNED.relative_to(REPO)} pins: not pinned {extra or 'none'}, pinned but absent "
            f"{missing or 'none'} (update the pin deliberately with `python -m tests.apache_kafka pin`)"
        )
    if is_resolved(version):  # another run finished first
        shutil.rmtree(staging, ignore_errors=True)
    else:
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
    if not quiet:
        print(f"apache-kafka: {len(got)} jars in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return libs


def write_pin(version: str = VERSION) -> Path:
    """Resolve with Maven and write the jar list as the new pin (a maintainer's step, like ./dev lock)."""
    staging = _maven_copy(version, cache_dir(version) / f"libs.pin-{os.getpid()}")
    names = sorted(p.name for p in staging.glob("*.jar"))
    path = REPO / "tests" / f"apache-kafka-{version}.jars"
    env = "" if version == DEFAULT_VERSION else f"KCLI_KAFKA_VERSION={version} "
    header = (
        f"# Apache Kafka {version}'s runtime jars as Maven resolves them (tests/apache_kafka.py checks each\n"
        f"# resolve against this list). Regenerate with `{env}python -m tests.apache_kafka pin`.\n"
    )
    path.write_text(header + "".join(f"{name}\n" for name in names))
    shutil.rmtree(staging, ignore_errors=True)
    return path


def _maven_copy(version: str, staging: Path) -> Path:
    """Write the pom into the version's cache dir and let Maven copy its runtime jars into `staging`."""
    if shutil.which("mvn") is None:
        raise KafkaSetupError("resolving Apache Kafka's jars needs mvn on PATH")
    root = staging.parent
    root.mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text(POM.format(version=version, scala=SCALA, log4j=LOG4J))
    shutil.rmtree(staging, ignore_errors=True)
    result = subprocess.run(
        ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(root / "pom.xml"),
         "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if result.returncode != 0:
        raise KafkaSetupError(
            f"mvn dependency:copy-dependencies failed with status {result.returncode}:\n"
            f"{result.stdout}{result.stderr}"
        )
    return staging


def java_command(
    main_class: str,
    args: Sequence[str],
    *,
    log_path: Path,
    heap: Sequence[str] = TOOL_HEAP,
    level: str = "info",
    classpath: Sequence[Path] = (),
    c1_only: bool = True,
    archive_to: Path | None = None,
) -> list[str]:
    """`java ... -cp libs/* main_class args` as kafka-run-class.sh builds it, logging to `log_path`;
    `classpath` entries (compiled test programs) go before the jars; `c1_only=False` keeps the JVM's
    default tiered JIT (C2 too). A C1-only JVM maps the class archive of its kind when one is cached
    (class_archive); else, with `archive_to` (archive_slot), it writes one there at exit (see train)."""
    config = log_path.with_suffix(".log4j2.xml")
    config.write_text(LOG4J2_CONFIG.format(level=level))
    jvm = jvm_prefix(heap, classpath, c1_only)
    sharing: list[str] = []
    if c1_only:
        archive = class_archive(main_class, jvm)
        if archive.is_file():
            sharing = [f"-XX:SharedArchiveFile={archive}", *CDS_QUIET]
        elif archive_to is not None:
            sharing = [f"-XX:ArchiveClassesAtExit={archive_to}", *CDS_QUIET]
    return [
        *jvm[:-2], *sharing, f"-Dlog4j2.configurationFile={config}", f"-Dkcli.kafka.log={log_path}",
        *jvm[-2:], main_class, *args,
    ]  # fmt: skip


def jvm_prefix(heap: Sequence[str], classpath: Sequence[Path], c1_only: bool = True) -> list[str]:
    """`java`, the heap and JIT flags, and `-cp CLASSPATH` last."""
    libs = resolve(quiet=True)
    flags = JVM_FLAGS if c1_only else KAFKA_JVM_FLAGS
    return ["java", *heap, *flags, "-cp", os.pathsep.join([*map(str, classpath), f"{libs}/*"])]


CDS_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
"""A class archive that cannot be used, or classes it cannot hold, are otherwise warnings on stdout,
where the tools' output is compared."""


def class_archive(main_class: str, jvm: Sequence[str]) -> Path:
    """Where the AppCDS archive (a JDK 13+ dynamic archive) of one kind of JVM lives in the cache, keyed by
    the java binary, its flags and class path and the main class. Mapping it instead of loading and
    verifying thousands of classes from the jars took a tool's JVM from ~0.85 s to ~0.5 s of CPU and a
    node's start to ready from ~2.3 s to ~1.4 s (2026-12-02, two loaded cores)."""
    java = Path(shutil.which("java") or "java").resolve()
    stamp = f"{java}:{java.stat().st_mtime_ns if java.exists() else 0}"
    key = hashlib.sha256("\n".join([stamp, *jvm, main_class]).encode()).hexdigest()[:16]
    return cache_dir() / "class-archives" / f"{main_class.rsplit('.', 1)[-1]}-{key}.jsa"


def archive_slot(
    main_class: str, heap: Sequence[str] = TOOL_HEAP, classpath: Sequence[Path] = ()
) -> Path | None:
    """A fresh path for a C1-only JVM of this kind to write its class archive to (java_command's
    `archive_to`), or None when one is cached already."""
    archive = class_archive(main_class, jvm_prefix(heap, classpath))
    if archive.is_file():
        return None
    archive.parent.mkdir(parents=True, exist_ok=True)
    return archive.with_name(f"{archive.name}.partial-{uuid.uuid4().hex}")


def train(partial: Path | None, heap: Sequence[str] = TOOL_HEAP, classpath: Sequence[Path] = ()) -> None:
    """Once the JVM given `partial` has exited: keep the archive it wrote if a JVM of the same flags
    and class path maps it (-Xshare:on fails on a truncated or mismatched archive, which would crash a
    JVM that mapped it later), and drop it otherwise."""
    if partial is None:
        return
    try:
        if partial.is_file() and not partial.with_name(partial.name.split(".partial-")[0]).is_file():
            check = subprocess.run(
                [*jvm_prefix(heap, classpath), "-Xshare:on", f"-XX:SharedArchiveFile={partial}", *CDS_QUIET, "-version"],
                capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            if check.returncode == 0:
                os.replace(partial, partial.with_name(partial.name.split(".partial-")[0]))
    except (OSError, subprocess.TimeoutExpired):
        pass  # no archive this time; a later run writes one
    finally:
        partial.unlink(missing_ok=True)


def run_tool(
    main_class: str, args: Sequence[str], *, workdir: Path, timeout: float = 120.0, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's command-line tools to completion; its log4j output goes to a file in `workdir`.

    In this process's ToolHost JVM when it is free and the arguments name no path relative to
    `workdir` (a JVM cannot change its directory); else in a JVM of its own, as kafka-run-class.sh runs
    it. KCLI_TOOL_HOST=0 runs every tool in its own JVM."""
    workdir.mkdir(parents=True, exist_ok=True)
    host = ToolHost.shared()
    if host is not None and not _names_relative_path(args, workdir) and host.lock.acquire(blocking=False):
        try:
            return host.run(main_class, args, stdin=stdin, timeout=timeout)
        finally:
            host.lock.release()
    log_path = workdir / f"{main_class.rsplit('.', 1)[-1]}-{time.monotonic_ns()}.log"
    partial = archive_slot(main_class)
    try:
        return subprocess.run(
            java_command(main_class, args, log_path=log_path, level="warn", archive_to=partial),
            capture_output=True, text=True, timeout=timeout, cwd=workdir,
            input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        train(partial)


def _names_relative_path(args: Sequence[str], workdir: Path) -> bool:
    """Whether an argument (or a comma-separated part of one) is a relative path to something in `workdir`."""
    parts = (part for arg in args for part in arg.split(","))
    return any(part and not part.startswith("-") and not Path(part).is_absolute() and (workdir / part).exists()
               for part in parts)  # fmt: skip


TOOL_HOST_SOURCE = REPO / "tests" / "java" / "ToolHost.java"


def compile_java(source: Path) -> Path:
    """The classes dir of `source` (a test program), compiled with javac against the pinned jars on first
    use into the jar cache, keyed by the source and the pin: an edit or a new pin compiles afresh and
    concurrent runs never see a half-written dir."""
    libs = resolve(quiet=True)
    digest = hashlib.sha256(source.read_bytes() + libs.name.encode()).hexdigest()[:12]
    classes = cache_dir() / f"classes-{digest}"
    if (classes / f"{source.stem}.class").exists():
        return classes
    staging = classes.with_name(f"{classes.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    result = subprocess.run(
        ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(staging), "-cp", f"{libs}/*", str(source)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if result.returncode != 0:
        raise KafkaSetupError(f"javac {source.name} failed with status {result.returncode}:\n{result.stderr}")
    try:
        staging.rename(classes)
    except OSError:  # another run compiled the same source first
        shutil.rmtree(staging, ignore_errors=True)
    return classes


class ToolHost:
    """One JVM (tests/java/ToolHost.java) that runs Kafka's tools one after another for this process: a
    tool's own JVM spends ~0.45 CPU-s starting before it does anything, and the suite runs over a
    hundred. The tool's code, arguments, standard streams and exit status are the same; what differs is
    only that its classes are loaded and compiled once per test process."""

    _shared: ToolHost | None = None
    _refused = False

    def __init__(self, workdir: Path) -> None:
        self.lock = threading.Lock()
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    @classmethod
    def shared(cls) -> ToolHost | None:
        """This process's host, or None where there is none (no javac, KCLI_TOOL_HOST=0)."""
        if cls._shared is None and not cls._refused:
            if os.environ.get("KCLI_TOOL_HOST", "1") == "0" or shutil.which("javac") is None:
                cls._refused = True
                return None
            import atexit
            import tempfile

            cls._shared = cls(Path(tempfile.mkdtemp(prefix="kcli-tool-host-")))
            atexit.register(cls._shared._remove)
        return cls._shared

    def _start(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            classes = compile_java(TOOL_HOST_SOURCE)
            self._workdir.mkdir(parents=True, exist_ok=True)
            command = java_command(
                "ToolHost", [], log_path=self._workdir / "tools.log", level="warn", classpath=[classes]
            )
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd=self._workdir,
            )  # fmt: skip
            self._buffer = b""
        return self._process

    def run(
        self, main_class: str, args: Sequence[str], *, stdin: str | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """The tool's run as subprocess.run would report it; TimeoutExpired (the host is stopped) when it
        does not end within `timeout` seconds."""
        process = self._start()
        assert process.stdin is not None and process.stdout is not None
        request = {"main": main_class, "args": list(args), "stdin": stdin}
        process.stdin.write(json.dumps(request).encode() + b"\n")
        process.stdin.flush()
        deadline = time.monotonic() + timeout
        fd = process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.close()
                raise subprocess.TimeoutExpired([main_class, *args], timeout)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                status = process.wait()
                self._process = None
                raise KafkaSetupError(
                    f"the tool host JVM exited with status {status} while running {main_class}"
                )
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer = json.loads(line)
        return subprocess.CompletedProcess(
            [main_class, *args], answer["status"], answer["stdout"], answer["stderr"]
        )

    @property
    def pid(self) -> int | None:
        """The running JVM's process id (None before the first run and after `close`)."""
        return None if self._process is None else self._process.pid

    def close(self) -> None:
        """Stop the JVM (its next run starts another); at exit also drop its log dir."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def _remove(self) -> None:
        self.close()
        shutil.rmtree(self._workdir, ignore_errors=True)


def random_cluster_id() -> str:
    """A cluster id as `kafka-storage.sh random-uuid` prints it: 16 random bytes, URL-safe base64, no padding,
    never starting with "-" (Kafka's Uuid.randomUuid draws again too: the storage tool would read such an id
    after -t as an option, and format fails)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


SECURITY_KINDS = ("sasl_ssl", "mtls")
"""The secured set-ups start_cluster knows: SASL_SSL with SCRAM-SHA-512, and SSL with client certificates."""
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-secret"
"""The SCRAM user the brokers reach each other with and the clients log in as (no authorizer: all may)."""


@dataclass(frozen=True)
class Security:
    """A secured listener set-up and its files: `kind` (one of SECURITY_KINDS), the loopback PKI and
    the client.properties every client here reads."""

    kind: str
    pki: LoopbackPki
    client_properties: Path

    @property
    def protocol(self) -> str:
        """The listener's security protocol as Kafka names it (also used as the listener's name)."""
        return "SASL_SSL" if self.kind == "sasl_ssl" else "SSL"

    @property
    def add_scram(self) -> list[str]:
        """`storage format` arguments bootstrapping the admin's SCRAM-SHA-512 credential (none for mTLS)."""
        if self.kind != "sasl_ssl":
            return []
        return ["--add-scram", f"SCRAM-SHA-512=[name={ADMIN_USER},password={ADMIN_PASSWORD}]"]

    def server_properties(self) -> dict[str, str]:
        """The server.properties lines that secure the listener named `protocol` (TLS keystore as PKCS12,
        truststore as PEM; SASL with the inter-broker login), with Kafka's names; kcli reads the same."""
        lines = {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.pki.node["p12"]),
            "ssl.keystore.password": self.pki.password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca),
        }
        if self.kind == "mtls":
            lines["ssl.client.auth"] = "required"
        else:
            lines |= {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                    f'{SCRAM_MODULE} required username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";'
                ),
            }
        return lines


def client_properties_text(kind: str, pki: LoopbackPki) -> str:
    """client.properties for `kind` with Kafka's client names: what Kafka's tools take as
    --command-config and kcli's --command-config reads too."""
    lines = {"security.protocol": "SASL_SSL" if kind == "sasl_ssl" else "SSL"}
    lines |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}
    if kind == "sasl_ssl":
        lines |= {
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": f'{SCRAM_MODULE} required username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";',
        }
    else:
        lines |= {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki.client["p12"]),
            "ssl.keystore.password": pki.password,
        }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def make_security(kind: str, directory: Path) -> Security:
    """A fresh loopback PKI under `directory` and the client.properties for `kind`."""
    if kind not in SECURITY_KINDS:
        raise KafkaSetupError(f"security {kind!r} is not one of {', '.join(SECURITY_KINDS)}")
    pki = loopback_pki(directory / "pki")
    path = directory / f"client-{kind}.properties"
    path.write_text(client_properties_text(kind, pki))
    path.chmod(0o600)
    return Security(kind, pki, path)


@dataclass
class KafkaNode:
    """One Apache Kafka process (broker and controller in one JVM)."""

    node_id: int
    port: int
    controller_port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    start_seconds: float = 0.0
    c1_only: bool = True
    archive_partial: Path | None = field(default=None, repr=False)
    """Where this incarnation writes the server's class archive at exit (launch), kept by stop."""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        """Everything the node's log4j wrote, and its stdout/stderr after it."""
        parts = [
            p.read_text(errors="replace") for p in (self.log_path, self.workdir / "console.log") if p.exists()
        ]
        return "\n".join(parts)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> int | None:
        """SIGKILL by PID (a crash: no controlled shutdown, nothing flushed); returns the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        return self.process.wait()

    def restart(self) -> None:
        """Start the node again on its own server.properties and data, and wait for its ready line."""
        launch(self, self.workdir / "server.properties")
        wait_ready(self, time.monotonic())

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM by PID, then SIGKILL by PID after `timeout`; returns the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        partial, self.archive_partial = self.archive_partial, None
        train(partial, SERVER_HEAP)
        return self.process.returncode


@dataclass
class KafkaCluster:
    """Apache Kafka nodes that are all brokers and controllers, with static voters and one cluster id."""

    cluster_id: str
    nodes: list[KafkaNode]
    format_seconds: float = 0.0
    stranded: set[int] = field(default_factory=set)
    security: Security | None = None

    @property
    def client_properties(self) -> Path | None:
        """The client.properties of a secured cluster (None when its listener is PLAINTEXT)."""
        return self.security.client_properties if self.security else None

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def stop(self) -> dict[int, int | None]:
        """Stop every node: SIGTERM all at once, so that each broker's controlled shutdown meets a quorum.

        A node whose broker asks for controlled shutdown after a majority of the voters has already exited
        waits for an answer no controller can commit (Kafka's BrokerServer waits up to its shutdown
        timeout, minutes). Nodes still running after STOP_TIMEOUT are killed; when they are not a majority (the
        others had exited: one of two is not a majority) they are named in `stranded`, since Kafka itself
        could not end them."""
        for node in self.nodes:
            if node.is_running():
                os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(node.is_running() for node in self.nodes) and time.monotonic() < deadline:
            time.sleep(0.1)
        running = {node.node_id for node in self.nodes if node.is_running()}
        if 2 * len(running) <= len(self.nodes):  # no majority left to commit their shutdown
            self.stranded = running
        return {node.node_id: node.stop(timeout=0.0) for node in self.nodes}


def server_properties(
    node: KafkaNode,
    voters: str,
    replication: int,
    security: Security | None = None,
    extra: Mapping[str, object] | None = None,
) -> str:
    """server.properties of one combined node, with Kafka's property names; with `security` the client
    and inter-broker listener is secured (the controller listener stays PLAINTEXT); `extra` adds or
    overrides lines (an authorizer, a benchmark's group timeouts)."""
    listener = security.protocol if security else "PLAINTEXT"
    lines: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"{listener}://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"{listener}://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": listener,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{listener}:{listener}",
        "log.dirs": node.log_dir,
        "num.partitions": 1,
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min(2, replication),
        "transaction.state.log.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "background.threads": 2,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        "socket.request.max.bytes": 104857600,
    }
    if security:
        lines |= security.server_properties()
    lines |= dict(extra or {})
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def start_cluster(
    workdir: Path,
    count: int,
    base_port: int,
    *,
    c1_only: bool = True,
    security: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> KafkaCluster:
    """Format and start `count` combined nodes on 127.0.0.1 ports base_port .. base_port + 2*count - 1,
    and return once each has logged that it started (or raise KafkaSetupError with its log).
    `c1_only=False` runs the servers with the default JIT (the storage tool stays C1-only); `security`
    ("sasl_ssl" or "mtls") secures the client and inter-broker listener (see Security); `extra` lines
    are added to every node's server.properties."""
    cluster_id = random_cluster_id()
    secured = make_security(security, workdir) if security else None
    nodes = [
        KafkaNode(
            i + 1, base_port + 2 * i, base_port + 2 * i + 1, workdir / f"kafka-{i + 1}", c1_only=c1_only
        )
        for i in range(count)
    ]
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    started = time.monotonic()
    formatters = []
    format_archive = archive_slot(STORAGE_TOOL)
    for node in nodes:
        node.workdir.mkdir(parents=True, exist_ok=True)
        props = node.workdir / "server.properties"
        props.write_text(
            server_properties(node, voters, replication=min(3, count), security=secured, extra=extra)
        )
        log_path = node.workdir / "format.log"
        formatters.append(
            (
                node,
                subprocess.Popen(
                    java_command(
                        STORAGE_TOOL,
                        [
                            "format",
                            "-t",
                            cluster_id,
                            "-c",
                            str(props),
                            *(secured.add_scram if secured else []),
                        ],
                        log_path=log_path,
                        level="warn",
                        archive_to=format_archive if node is nodes[0] else None,
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                ),  # fmt: skip
            )
        )
    for node, proc in formatters:
        out, _ = proc.communicate(timeout=120)
        if node is nodes[0]:
            train(format_archive)
        if proc.returncode != 0:
            raise KafkaSetupError(
                f"kafka-storage format of node {node.node_id} failed:\n{out.decode(errors='replace')}"
            )
    cluster = KafkaCluster(cluster_id, nodes, time.monotonic() - started, security=secured)
    started = time.monotonic()
    try:
        for node in nodes:
            launch(node, node.workdir / "server.properties")
        for node in nodes:
            wait_ready(node, started)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def launch(node: KafkaNode, properties: Path) -> None:
    """Start `kafka.Kafka properties` for `node` (its log dir formatted already); see wait_ready. A
    previous run's server.log moves aside, so that its ready line does not count for this one."""
    if node.log_path.exists():
        node.log_path.rename(node.log_path.with_suffix(f".log.{time.monotonic_ns()}"))
    train(node.archive_partial, SERVER_HEAP)  # a previous incarnation's, if it was never stopped by stop()
    node.archive_partial = archive_slot("kafka.Kafka", SERVER_HEAP) if node.c1_only else None
    with open(node.workdir / "console.log", "ab") as console:
        node.process = subprocess.Popen(
            java_command(
                "kafka.Kafka", [str(properties)], log_path=node.log_path, heap=SERVER_HEAP,
                c1_only=node.c1_only, archive_to=node.archive_partial,
            ),
            stdout=console, stderr=console, stdin=subprocess.DEVNULL, cwd=node.workdir,
        )  # fmt: skip


def wait_ready(node: KafkaNode, started: float) -> None:
    """Wait for the node's own "Kafka Server started" log line (the last step of KafkaRaftServer.startup)."""
    assert node.process is not None
    deadline = started + START_TIMEOUT
    while True:
        if node.log_path.exists() and READY_LINE in node.log_path.read_text(errors="replace"):
            node.start_seconds = time.monotonic() - started
            return
        if node.process.poll() is not None:
            raise KafkaSetupError(
                f"Apache Kafka node {node.node_id} exited with status {node.process.returncode}:\n{node.log()[-5000:]}"
            )
        if time.monotonic() > deadline:
            raise KafkaSetupError(f"Apache Kafka node {node.node_id} not started after {START_TIMEOUT:g} s")
        time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.apache_kafka", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("resolve", help="resolve the pinned release into the cache (no-op when cached)")
    sub.add_parser("pin", help="resolve afresh and rewrite the pinned jar list")
    start = sub.add_parser("start", help="start combined KRaft nodes on 127.0.0.1 until interrupted")
    start.add_argument("--nodes", type=int, default=1)
    start.add_argument("--dir", type=Path, default=None, help="work dir (default: a new temporary dir)")
    start.add_argument("--security", choices=SECURITY_KINDS, default=None, help="secure the client listener")
    run = sub.add_parser("run", help="run one of Kafka's classes with the pinned classpath")
    run.add_argument("main_class")
    run.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    try:
        if options.command == "resolve":
            print(resolve())
        elif options.command == "pin":
            print(write_pin())
        elif options.command == "run":
            log_path = cache_dir() / "run.log"  # the tool's log4j output, outside the working tree
            os.execvp("java", java_command(options.main_class, options.args, log_path=log_path, level="warn"))
        else:
            import tempfile

            sys.path.insert(0, str(REPO / "tests"))
            from conftest import free_port_range

            # Stop the JVMs in `finally` on SIGTERM too, and on SIGINT even where it came in ignored.
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            signal.signal(signal.SIGINT, signal.default_int_handler)
            workdir = options.dir or Path(tempfile.mkdtemp(prefix="apache-kafka-"))
            cluster = start_cluster(
                workdir, options.nodes, free_port_range(2 * options.nodes), security=options.security
            )
            for node in cluster.nodes:
                print(
                    f"node {node.node_id}: {node.bootstrap} pid {node.pid} ready in {node.start_seconds:.1f} s"
                )
            print(f"formatted in {cluster.format_seconds:.1f} s")
            print(f"bootstrap {cluster.bootstrap}, cluster id {cluster.cluster_id}, logs under {workdir}")
            if cluster.client_properties:
                print(f"client properties {cluster.client_properties}")
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
            finally:
                print(f"stopped: {cluster.stop()}")
    except KafkaSetupError as error:
        print(f"apache-kafka: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
