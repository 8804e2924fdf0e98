"""Kafka's connection limits and the broker's memory bounds, against real broker processes and raw
sockets: max.connections.per.ip (and its overrides), max.connections, max.connection.creation.rate,
queued.max.request.bytes, a receive buffer that grows only as bytes arrive, and connections.max.idle.ms
for a frame that never completes."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BrokerProcess, start_broker, stop_cleanly

from kcli.broker.connection_quotas import ConnectionQuotas, TooManyConnectionsError
from kcli.config import BrokerConfig

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def _broker(tmp_path: Path, *overrides: str) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path / "broker", overrides=overrides)
    try:
        yield process
    finally:
        stop_cleanly(process)


def _api_versions(correlation_id: int) -> bytes:
    """ApiVersions v0: a request header v1 and an empty body."""
    header = struct.pack(">hhih", 18, 0, correlation_id, 1) + b"t"
    return struct.pack(">i", len(header)) + header


def _connect(broker: BrokerProcess, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=5, source_address=(source, 0))
    return sock


def _answers(sock: socket.socket, correlation_id: int, timeout: float = 5.0, *, send: bool = True) -> bool:
    """Whether ApiVersions is answered within `timeout` (False when closed or silent); without `send`,
    the answer to one sent before."""
    sock.settimeout(timeout)
    try:
        if send:
            sock.sendall(_api_versions(correlation_id))
        head = sock.recv(8, socket.MSG_WAITALL)
        if len(head) < 8:
            return False
        size, answered_id = struct.unpack(">ii", head)
        rest = size - 4
        while rest > 0:
            chunk = sock.recv(rest)
            if not chunk:
                return False
            rest -= len(chunk)
    except (TimeoutError, ConnectionError):
        return False
    return answered_id == correlation_id


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _two_listener_quotas(*settings: str) -> ConnectionQuotas:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            **dict(item.split("=", 1) for item in settings),
        }
    )
    return ConnectionQuotas(config, ["PLAINTEXT", "INTERNAL"], config.inter_broker_listener_name)


def test_the_inter_broker_listener_is_held_back_only_by_its_own_limit() -> None:
    quotas = _two_listener_quotas("max.connections=2", "listener.name.internal.max.connections=3")
    for address in ("10.0.0.1", "10.0.0.2"):
        assert quotas.connection_slot_available("PLAINTEXT")
        quotas.inc("PLAINTEXT", address)
    assert not quotas.connection_slot_available("PLAINTEXT")  # the broker-wide limit
    for _ in range(3):
        assert quotas.connection_slot_available("INTERNAL")  # protected: max.connections does not count
        quotas.inc("INTERNAL", "10.0.0.9")
    assert not quotas.connection_slot_available("INTERNAL")  # its own listener limit does
    assert quotas.max_connections_exceeded("PLAINTEXT") and not quotas.max_connections_exceeded("INTERNAL")
    quotas.dec("INTERNAL", "10.0.0.9")
    assert quotas.connection_slot_available("INTERNAL") and quotas.get("10.0.0.9") == 2


def test_per_ip_counts_and_the_creation_rate_throttle_as_kafka_measures_them() -> None:
    quotas = _two_listener_quotas(
        "max.connections.per.ip=1",
        "max.connections.per.ip.overrides=10.0.0.5:2",
        "listener.name.plaintext.max.connection.creation.rate=2",
        "quota.window.num=2",
        "quota.window.size.seconds=1",
    )
    quotas.inc("PLAINTEXT", "10.0.0.1")
    with pytest.raises(TooManyConnectionsError):
        quotas.inc("PLAINTEXT", "10.0.0.1")  # counted until its close calls dec, as Kafka's closeChannel
    assert quotas.get("10.0.0.1") == 2
    quotas.inc("PLAINTEXT", "10.0.0.5")
    quotas.inc("PLAINTEXT", "10.0.0.5")
    # 2 a second over samples - 1 = 1 s: the 3rd waits (3 - 2) / 2 s, the 4th the most, one window
    throttles = [quotas.record_connection_and_get_throttle_time_ms("PLAINTEXT", 1000.0) for _ in range(4)]
    assert throttles == [0, 0, 500, 1000]
    assert quotas.record_connection_and_get_throttle_time_ms("INTERNAL", 1000.0) == 0  # no limit of its own


def test_connections_beyond_the_per_ip_cap_are_closed_and_overrides_raise_it(tmp_path: Path) -> None:
    with _broker(
        tmp_path, "max.connections.per.ip=2", "max.connections.per.ip.overrides=127.0.0.2:4"
    ) as broker:
        kept = [_connect(broker) for _ in range(2)]
        beyond = _connect(broker)
        assert _closed(beyond)
        assert all(_answers(sock, i) for i, sock in enumerate(kept))  # the ones within keep working
        overridden = [_connect(broker, "127.0.0.2") for _ in range(4)]
        assert all(_answers(sock, i) for i, sock in enumerate(overridden))
        assert _closed(_connect(broker, "127.0.0.2"))
        kept.pop().close()
        time.sleep(0.3)
        again = _connect(broker)  # a closed connection frees its slot
        assert _answers(again, 7)
        log = broker.log()
        assert (
            "Rejected connection from 127.0.0.1, address 127.0.0.1 already has the configured maximum of 2"
            in log
        )
        assert "Rejected connection from 127.0.0.2" in log
        assert "Traceback" not in log
        for sock in [*kept, *overridden, again, beyond]:
            sock.close()


def test_at_max_connections_a_new_connection_waits_for_a_free_slot(tmp_path: Path) -> None:
    with _broker(tmp_path, "max.connections=3") as broker:
        first = [_connect(broker) for _ in range(3)]
        assert all(_answers(sock, i) for i, sock in enumerate(first))
        waiting = _connect(broker)  # TCP connects (the backlog), but nothing is read: Kafka blocks accepting
        assert not _answers(waiting, 9, timeout=1.5)
        first.pop(0).close()
        assert _answers(waiting, 9, send=False)
        assert all(_answers(sock, 10 + i) for i, sock in enumerate(first))
        for sock in [*first, waiting]:
            sock.close()


def test_connections_beyond_the_creation_rate_are_delayed(tmp_path: Path) -> None:
    overrides = ("max.connection.creation.rate=2", "quota.window.num=2", "quota.window.size.seconds=1")
    with _broker(tmp_path, *overrides) as broker:
        time.sleep(2.5)  # the start-up's own connections leave the window
        start = time.monotonic()
        socks = [_connect(broker) for _ in range(6)]  # all connect at once (TCP, the backlog)
        answered = []
        for i, sock in enumerate(socks):
            assert _answers(sock, i, timeout=15)
            answered.append(time.monotonic() - start)
        assert answered[0] < 1.0
        assert answered[-1] >= 1.2, answered  # about 2 a second: ~2 s for the last
        assert answered[-1] < 12, answered
        for sock in socks:
            sock.close()


def test_two_hundred_trickled_100_mib_frames_leave_memory_bounded(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        before = _rss_bytes(broker.pid)
        socks = []
        for _ in range(200):
            sock = _connect(broker)
            sock.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"\x00\x12")  # announced, barely begun
            socks.append(sock)
        for _ in range(5):
            for sock in socks:
                sock.sendall(bytes(16))  # each byte arriving keeps the frame open
            time.sleep(0.2)
        rss = _rss_bytes(broker.pid)
        assert rss < 300 * 1024 * 1024, (before, rss)
        bystander = _connect(broker)
        assert _answers(bystander, 1)
        for sock in [*socks, bystander]:
            sock.close()
        assert broker.is_running()


def test_a_frame_trickled_longer_than_the_idle_time_is_closed(tmp_path: Path) -> None:
    with _broker(tmp_path, "connections.max.idle.ms=1500") as broker:
        trickler = _connect(broker)
        steady = _connect(broker)
        trickler.sendall(struct.pack(">i", 1000))
        start = time.monotonic()
        closed_after = None
        trickler.settimeout(0.2)
        while time.monotonic() - start < 6:
            try:
                trickler.sendall(b"\x00")  # one byte every 200 ms: never idle by Kafka's reckoning
                if trickler.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except TimeoutError:
                pass
            except (ConnectionResetError, BrokenPipeError):
                closed_after = time.monotonic() - start
                break
            if int((time.monotonic() - start) * 5) % 3 == 0:
                assert _answers(steady, 1)  # whole requests keep a connection open
        assert closed_after is not None and 1.4 <= closed_after < 4.5, closed_after
        assert _answers(steady, 2)
        assert "bytes of a request, none complete for more than 1.5 s" in broker.log()
        trickler.close()
        steady.close()


def test_reading_a_new_request_waits_while_the_memory_pool_is_full(tmp_path: Path) -> None:
    with _broker(tmp_path, "queued.max.request.bytes=1000000") as broker:
        filler = _connect(broker)
        filler.sendall(struct.pack(">i", 3_000_000) + bytes(1_500_000))  # a request being read fills the pool
        time.sleep(0.5)
        waiting = _connect(broker)
        assert not _answers(waiting, 5, timeout=1.5)  # muted: no memory to read a new request into
        filler.close()
        assert _answers(waiting, 5, send=False)
        assert _answers(waiting, 6)
        waiting.close()
        assert "Traceback" not in broker.log()


def test_the_per_ip_limits_are_dynamic(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    def alter(value: str | None) -> None:
        operation = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        entry = ConfigEntry("max.connections.per.ip.overrides", value, incremental_operation=operation)
        resource = ConfigResource("broker", "1", incremental_configs=[entry])
        assert admin.incremental_alter_configs([resource])[resource].exception(30) is None

    def second_connection_closed() -> bool:
        first, second = _connect(broker, "127.0.0.3"), _connect(broker, "127.0.0.3")
        try:
            return _answers(first, 1) and _closed(second, timeout=1.0)
        finally:
            first.close()
            second.close()

    with _broker(tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert not second_connection_closed()
        alter("127.0.0.3:1")
        deadline = time.monotonic() + 10
        while not second_connection_closed():
            assert time.monotonic() < deadline, "the override never applied"
            time.sleep(0.3)
        alter(None)
        deadline = time.monotonic() + 10
        while second_connection_closed():
            assert time.monotonic() < deadline, "the override was never removed"
            time.sleep(0.3)


def test_per_ip_connection_rates_come_from_the_ip_quotas_and_unrecord_what_they_refuse() -> None:
    """KIP-612's ip entities: an address's own connection_creation_rate, else the default ip entity's,
    else none; a connection over it is un-recorded, so a client that keeps trying is not locked out."""
    quotas_now: dict = {(("ip", "10.0.0.7"),): {"connection_creation_rate": 2.0}}
    config = BrokerConfig({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    quotas = ConnectionQuotas(config, ["PLAINTEXT"], None, lambda: quotas_now)
    assert quotas.connection_rate_for_ip("10.0.0.7") == 2
    assert quotas.connection_rate_for_ip("10.0.0.8") == 2**31 - 1
    quotas_now[(("ip", None),)] = {"connection_creation_rate": 1.0}  # a new image: read at once
    assert quotas.connection_rate_for_ip("10.0.0.8") == 1
    throttles = [
        quotas.record_ip_connection_and_get_throttle_time_ms("PLAINTEXT", "10.0.0.7", 1000.0)
        for _ in range(4)
    ]
    assert throttles[:2] == [0, 0] and throttles[2] > 0 and throttles[3] == throttles[2], throttles
    assert quotas.record_ip_connection_and_get_throttle_time_ms("PLAINTEXT", "10.0.0.9", 1000.0) == 0
    assert quotas.record_ip_connection_and_get_throttle_time_ms("PLAINTEXT", "10.0.0.9", 1000.0) > 0


def test_an_ip_quota_closes_connections_over_its_rate_and_spares_other_addresses(tmp_path: Path) -> None:
    """`kcli configs alter --entity-type ips` (kafka-configs.sh's flags; AlterClientQuotas on an ip
    entity): new connections from that address beyond connection_creation_rate are closed after the
    throttle time, other addresses connect as before, and describe shows the quota; a key ips do not
    take and a name that is not an address are refused with kafka-configs.sh's sentences."""
    import subprocess

    from conftest import KCLI, kcli_env

    def kcli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=60)

    overrides = ("quota.window.num=2", "quota.window.size.seconds=1")
    with _broker(tmp_path, *overrides) as broker:
        ip = ("--bootstrap-server", broker.bootstrap, "--entity-type", "ips")
        done = kcli(
            "configs",
            "alter",
            *ip,
            "--entity-name",
            "127.0.0.2",
            "--add-config",
            "connection_creation_rate=1",
        )
        assert done.returncode == 0 and done.stdout == "Completed updating config for ip 127.0.0.2.\n", done
        described = kcli("configs", "describe", *ip, "--entity-name", "127.0.0.2")
        assert described.stdout == "Quota configs for ip '127.0.0.2' are connection_creation_rate=1.0\n", (
            described
        )
        wrong_key = kcli("configs", "alter", *ip, "--entity-default", "--add-config", "producer_byte_rate=1")
        assert wrong_key.returncode != 0 and "Traceback" not in wrong_key.stderr
        assert "Only connection quota configs can be added for 'ips'" in wrong_key.stderr
        not_an_ip = kcli("configs", "alter", *ip, "--entity-name", "no.such.host.invalid", "--add-config",
                         "connection_creation_rate=1")  # fmt: skip
        assert not_an_ip.returncode != 0 and "must be a valid IP or resolvable host" in not_an_ip.stderr
        time.sleep(0.5)
        limited = [_connect(broker, "127.0.0.2") for _ in range(4)]  # a burst from the limited address
        served = [_answers(sock, i, timeout=4) for i, sock in enumerate(limited)]
        assert served[0] and not any(served[1:]), served  # the rest closed once their throttle ended
        others = [_connect(broker) for _ in range(4)]  # 127.0.0.1 has no ip quota
        assert all(_answers(sock, 10 + i) for i, sock in enumerate(others))
        time.sleep(2.5)  # the window passes: the limited address connects again
        again = _connect(broker, "127.0.0.2")
        assert _answers(again, 20)
        assert "Traceback" not in broker.log()
        for sock in [*limited, *others, again]:
            sock.close()


def test_ip_shorthands_and_an_ip_quota_named_by_host_name(tmp_path: Path) -> None:
    """kafka-configs.sh's --ip and --ip-defaults: the same quota and describe line as --entity-type ips,
    ConfigCommand's refusals in one sentence each; a quota named `localhost` holds the address the name
    resolves to (127.0.0.1), as Kafka's InetAddress.getByName, and spares other addresses."""
    import subprocess

    from conftest import KCLI, kcli_env

    def kcli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KCLI, *args], capture_output=True, text=True, env=kcli_env(), timeout=60)

    with _broker(tmp_path, "quota.window.num=2", "quota.window.size.seconds=1") as broker:
        b = ("--bootstrap-server", broker.bootstrap)
        # 50 a second: more than this test's own kcli commands open from 127.0.0.1 on a fast machine
        done = kcli(
            "configs", "alter", *b, "--ip", "127.0.0.1", "--add-config", "connection_creation_rate=50"
        )
        assert (done.returncode, done.stdout, done.stderr) == (
            0,
            "Completed updating config for ip 127.0.0.1.\n",
            "",
        )
        line = "Quota configs for ip '127.0.0.1' are connection_creation_rate=50.0\n"
        short = kcli("configs", "describe", *b, "--ip", "127.0.0.1")
        long = kcli("configs", "describe", *b, "--entity-type", "ips", "--entity-name", "127.0.0.1")
        assert (short.returncode, short.stdout) == (0, line) and long.stdout == short.stdout, (short, long)
        done = kcli("configs", "alter", *b, "--ip-defaults", "--add-config", "connection_creation_rate=100")
        assert done.stdout == "Completed updating default config for ips in the cluster.\n", done
        defaults = kcli("configs", "describe", *b, "--ip-defaults")
        assert defaults.stdout == "Quota configs for the default ip are connection_creation_rate=100.0\n", (
            defaults
        )
        for args, message in [
            (["--ip", "127.0.0.1", "--user", "alice"], "Only 'users' and 'clients' entity types may be specified together"),
            (["--ip", "127.0.0.1", "--ip-defaults"], "Duplicate entity type(s) specified: ips"),
            (["--ip", "127.0.0.1", "--entity-name", "127.0.0.1"], "--entity-{type,name,default} should not be used in conjunction with specific entity flags"),
            (["--ip", "no.such.host.invalid"], "The entity name for ips must be a valid IP or resolvable host, but it is: no.such.host.invalid"),
        ]:  # fmt: skip
            refused = kcli("configs", "alter", *b, *args, "--add-config", "connection_creation_rate=1")
            assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", f"kcli: {message}\n"), args
        unchanged = kcli("configs", "describe", *b, "--entity-type", "ips")  # nothing refused went through
        assert set(unchanged.stdout.splitlines()) == {line.rstrip(), defaults.stdout.rstrip()}, unchanged

        # the host name's quota: 127.0.0.1 loses its own, so `localhost`'s one connection a second holds it
        gone = kcli(
            "configs", "alter", *b, "--ip", "127.0.0.1", "--delete-config", "connection_creation_rate"
        )
        assert gone.returncode == 0, gone
        named = kcli(
            "configs", "alter", *b, "--ip", "localhost", "--add-config", "connection_creation_rate=1"
        )
        assert named.stdout == "Completed updating config for ip localhost.\n", named
        time.sleep(2.5)  # the windows holding kcli's own connections pass
        limited = [_connect(broker, "127.0.0.1") for _ in range(4)]
        served = [_answers(sock, i, timeout=4) for i, sock in enumerate(limited)]
        assert served[0] and not any(served[1:]), served
        others = [_connect(broker, "127.0.0.2") for _ in range(4)]  # the default ip quota: 100 a second
        assert all(_answers(sock, 10 + i) for i, sock in enumerate(others))
        assert "Traceback" not in broker.log()
        for sock in [*limited, *others]:
            sock.close()
