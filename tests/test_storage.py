"""`kcli storage` (kafka-storage.sh random-uuid / format), the bootstrap snapshot it writes, and the
start-up checks of a node's log dirs, through the real CLI and a real broker."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from conftest import (
    KCLI,
    free_port_range,
    kcli_env,
    start_with_config,
    stop_cleanly,
)

from formats.checkpoints import MetaProperties, read_meta_properties, uuid_from_base64, write_meta_properties
from formats.errors import CorruptRecordError
from formats.internal import decode_metadata_record, encode_metadata_record
from formats.kraft_snapshot import build_snapshot, read_snapshot
from formats.records import (
    CONTROL_BIT,
    ControlType,
    SnapshotHeader,
    control_record_key,
    control_type,
    encode_snapshot_footer,
    encode_snapshot_header,
    snapshot_footer,
    snapshot_header,
)
from formats.segment import walk
from kcli.config import BrokerConfig
from kcli.storage import (
    META_PROPERTIES,
    StorageError,
    bootstrap_checkpoint,
    check_cluster_id,
    ensure_meta_properties,
    random_uuid,
    read_bootstrap_metadata,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"  # Kafka's docs' example id


def kcli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kcli ARGS` through kcli.cli.main.main in this process, run in `cwd`."""
    return run_kcli(*args, cwd=cwd)


def kcli_process(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kcli ARGS` as a real `python -m kcli` process in `cwd`: the entry point as installed."""
    result = subprocess.run(
        [*KCLI, *args], cwd=cwd, env=kcli_env(), capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in result.stderr
    return result


def free_port() -> int:
    """A free port of this worker's slice, below the ephemeral range: a port probed free there (bind 0)
    and bound again later could be taken meanwhile by any process's outgoing connection."""
    return free_port_range(1)


def write_config(path: Path, **settings: str) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def combined(tmp_path: Path, voters: str | None = None, **extra: str) -> Path:
    """A combined node 1 with a controller listener; `voters` defaults to this node alone."""
    port = free_port()
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": voters or f"1@127.0.0.1:{port}",
        "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": f"{tmp_path / 'logs-a'},{tmp_path / 'logs-b'}",
        "metadata.log.dir": str(tmp_path / "metadata"),
        **extra,
    }
    return write_config(tmp_path / "server.properties", **settings)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- formats: the control records and the snapshot layout ------------------------------------------------


def test_snapshot_control_records_round_trip_in_kafkas_bytes() -> None:
    assert control_record_key(ControlType.SNAPSHOT_HEADER) == b"\x00\x00\x00\x03"
    assert control_record_key(ControlType.SNAPSHOT_FOOTER) == b"\x00\x00\x00\x04"
    # int16 Version, int64 LastContainedLogTimestamp, then an empty tagged-field section (flexible v0).
    assert encode_snapshot_header(1700000000000) == struct.pack(">hq", 0, 1700000000000) + b"\x00"
    assert encode_snapshot_footer() == b"\x00\x00\x00"
    assert snapshot_header(encode_snapshot_header(5)) == SnapshotHeader(0, 5)
    assert snapshot_footer(encode_snapshot_footer()) == 0
    # An unknown tagged field is skipped, as Kafka's generated readers do.
    tagged = struct.pack(">hq", 0, 7) + bytes([1, 9, 2, 0xAB, 0xCD])
    assert snapshot_header(tagged) == SnapshotHeader(0, 7)
    for bad in (b"", b"\x00\x00", struct.pack(">hq", 0, 7) + b"\x01", struct.pack(">hq", 0, 7) + b"\x00\x00"):
        with pytest.raises(CorruptRecordError):
            snapshot_header(bad)


def test_a_snapshot_is_header_then_records_then_footer() -> None:
    values = [
        encode_metadata_record("FeatureLevelRecord", 0, {"name": "metadata.version", "featureLevel": 21})
    ]
    data = build_snapshot(values, timestamp=1_700_000_000_000, base_offset=10, epoch=3)
    batches = walk(data).batches
    assert [(b.base_offset, b.records_count, b.is_control, b.partition_leader_epoch) for b in batches] == [
        (10, 1, True, 3),
        (11, 1, False, 3),
        (12, 1, True, 3),
    ]
    assert all(b.crc_valid and b.producer_id == -1 and not b.is_transactional for b in batches)
    assert all(b.base_timestamp == b.max_timestamp == 1_700_000_000_000 for b in batches)
    header, record, footer = (b.records(data)[0] for b in batches)
    assert control_type(header[2]) is ControlType.SNAPSHOT_HEADER and header[3] == encode_snapshot_header(0)
    assert record[2] is None and record[3] == values[0]
    assert control_type(footer[2]) is ControlType.SNAPSHOT_FOOTER
    snapshot = read_snapshot(data)
    assert snapshot.header == SnapshotHeader(0, 0) and snapshot.footer_version == 0
    assert snapshot.records == [(11, values[0])] and snapshot.control_records == []
    with pytest.raises(CorruptRecordError, match="does not end with a SnapshotFooter"):
        read_snapshot(data[: batches[2].position])
    with pytest.raises(CorruptRecordError, match="does not start with a SnapshotHeader"):
        read_snapshot(data[batches[1].position :])
    with pytest.raises(CorruptRecordError, match="not a whole record batch"):
        read_snapshot(data[:-1])


# --- random-uuid ---------------------------------------------------------------------------------------


def test_random_uuid_prints_a_kafka_uuid(tmp_path: Path) -> None:
    result = kcli(tmp_path, "storage", "random-uuid")
    assert result.returncode == 0, result.stderr
    text = result.stdout.strip()
    assert len(text) == 22 and not text.startswith("-")
    assert uuid_from_base64(text).version == 4  # java.util.UUID.randomUUID, as Kafka's Uuid.randomUuid
    ids = {random_uuid() for _ in range(2000)}
    assert len(ids) == 2000 and not any(i.startswith("-") for i in ids)
    assert check_cluster_id(text) == text


# --- format ---------------------------------------------------------------------------------------------


def test_format_writes_meta_properties_and_the_bootstrap_snapshot(tmp_path: Path) -> None:
    config = combined(tmp_path)
    before = time.time() * 1000
    result = kcli_process(tmp_path, "storage", "format", "--config", str(config), "--cluster-id", CLUSTER_ID)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Formatting data directory {tmp_path / 'logs-a'} with metadata.version 4.1-IV1.",
        f"Formatting data directory {tmp_path / 'logs-b'} with metadata.version 4.1-IV1.",
        f"Formatting metadata directory {tmp_path / 'metadata'} with metadata.version 4.1-IV1.",
    ]
    directory_ids = set()
    for name in ("logs-a", "logs-b", "metadata"):
        meta = read_meta_properties((tmp_path / name / META_PROPERTIES).read_text())
        assert (meta.version, meta.cluster_id, meta.node_id) == (1, CLUSTER_ID, 1)
        assert meta.directory_id is not None and uuid_from_base64(meta.directory_id).int > 2
        directory_ids.add(meta.directory_id)
        assert (
            tmp_path / name / "bootstrap.checkpoint"
        ).is_file()  # Kafka writes it into every dir it formats
    assert len(directory_ids) == 3
    assert files_under(tmp_path / "metadata") == ["bootstrap.checkpoint", "meta.properties"]

    data = (tmp_path / "metadata" / "bootstrap.checkpoint").read_bytes()
    batches = walk(data).batches
    assert [(b.base_offset, b.partition_leader_epoch, b.is_control, b.records_count) for b in batches] == [
        (0, 0, True, 1),
        (1, 0, False, 4),
        (5, 0, True, 1),
    ]
    assert all(
        b.attributes in (0, CONTROL_BIT) and before - 1 <= b.max_timestamp <= time.time() * 1000
        for b in batches
    )
    snapshot = read_snapshot(data)
    assert snapshot.header == SnapshotHeader(version=0, last_contained_log_timestamp=0)
    defaults = [  # Kafka 4.1's format: 4.1-IV1, ELR on, group.version 1, transaction.version 2
        ("FeatureLevelRecord", 0, {"name": "metadata.version", "featureLevel": 27}),
        ("FeatureLevelRecord", 0, {"name": "eligible.leader.replicas.version", "featureLevel": 1}),
        ("FeatureLevelRecord", 0, {"name": "group.version", "featureLevel": 1}),
        ("FeatureLevelRecord", 0, {"name": "transaction.version", "featureLevel": 2}),
    ]
    decoded = [decode_metadata_record(value) for _, value in snapshot.records]
    assert [(r.name, r.version, r.data) for r in decoded] == defaults
    assert snapshot.footer_version == 0

    bootstrap = read_bootstrap_metadata(tmp_path / "metadata")
    assert bootstrap is not None and bootstrap.metadata_version == 27
    assert bootstrap.record_tuples() == defaults
    assert (
        bootstrap.source
        == f"the binary bootstrap metadata file: {tmp_path / 'metadata' / 'bootstrap.checkpoint'}"
    )


def test_dump_segment_reads_the_bootstrap_checkpoint(tmp_path: Path) -> None:
    assert (
        kcli(tmp_path, "storage", "format", "-c", str(combined(tmp_path)), "-t", CLUSTER_ID).returncode == 0
    )
    path = tmp_path / "metadata" / "bootstrap.checkpoint"
    result = kcli(tmp_path, "dump-segment", "--cluster-metadata-decoder", str(path))
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "KRaft bootstrap snapshot"]
    records = [line for line in lines if line.startswith("| ")]
    assert len(records) == 6
    assert records[0].startswith("| offset: 0 ") and records[0].endswith(
        ' SnapshotHeader {"version":0,"lastContainedLogTimestamp":0}'
    )
    for offset, (name, level) in enumerate(
        [
            ("metadata.version", 27),
            ("eligible.leader.replicas.version", 1),
            ("group.version", 1),
            ("transaction.version", 2),
        ],
        start=1,
    ):
        assert records[offset].startswith(f"| offset: {offset} ") and records[offset].endswith(
            f' payload: {{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{{"name":"{name}","featureLevel":{level}}}}}'
        )
    assert records[5].startswith("| offset: 5 ") and records[5].endswith(' SnapshotFooter {"version":0}')
    assert not any("invalid" in line or "corrupt" in line.lower() for line in lines)
    result = kcli(tmp_path, "dump-segment", "--deep-iteration", "--output", "json", str(path))
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["control"] for o in objects if o["type"] == "record" and "control" in o] == [
        {"type": "SNAPSHOT_HEADER", "version": 0, "lastContainedLogTimestamp": 0},
        {"type": "SNAPSHOT_FOOTER", "version": 0},
    ]
    assert not any(o["type"] == "problem" for o in objects)


def test_format_refuses_formatted_dirs_unless_told_to_ignore_them(tmp_path: Path) -> None:
    config = combined(tmp_path)
    (tmp_path / "logs-b").mkdir()
    meta = MetaProperties(1, node_id=1, cluster_id=CLUSTER_ID, directory_id=random_uuid())
    first = write_meta_properties(meta, datetime.now(UTC))
    (tmp_path / "logs-b" / META_PROPERTIES).write_text(first)
    result = kcli(tmp_path, "storage", "format", "--config", str(config), "--cluster-id", CLUSTER_ID)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"kcli: Log directory {tmp_path / 'logs-b'} is already formatted. "
        "Use --ignore-formatted to ignore this directory and format the others."
    ]
    assert files_under(tmp_path) == ["logs-b", f"logs-b/{META_PROPERTIES}", "server.properties"]

    result = kcli(tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID, "--ignore-formatted")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Formatting data directory {tmp_path / 'logs-a'} with metadata.version 4.1-IV1.",
        f"Formatting metadata directory {tmp_path / 'metadata'} with metadata.version 4.1-IV1.",
    ]
    assert (tmp_path / "logs-b" / META_PROPERTIES).read_text() == first  # left alone
    assert not (tmp_path / "logs-b" / "bootstrap.checkpoint").exists()
    result = kcli(tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID, "-g")
    assert result.returncode == 0 and result.stdout == "All of the log directories are already formatted.\n"
    # A formatted dir of another cluster (or node) is refused even with --ignore-formatted.
    other = random_uuid()
    result = kcli(tmp_path, "storage", "format", "-c", str(config), "-t", other, "-g")
    assert result.returncode == 2
    assert result.stderr == (
        f"kcli: Invalid cluster.id in: {tmp_path / 'logs-a' / META_PROPERTIES}. Expected {other}, but read {CLUSTER_ID}.\n"
    )
    result = kcli(
        tmp_path,
        "storage",
        "format",
        *("-c", str(config), "-t", CLUSTER_ID, "-g"),
        *("--override", "node.id=2", "--override", "controller.quorum.voters=2@127.0.0.1:9093"),
    )
    assert (
        result.returncode == 2 and "Stored node id 1 doesn't match the configured node.id 2" in result.stderr
    )


@pytest.mark.parametrize(
    ("settings", "cluster_id", "message"),
    [
        (
            {},
            "not-a-uuid",
            "Cluster ID string not-a-uuid does not appear to be a valid UUID: Input string `not-a-uuid` decoded "
            "as 7 bytes, which is not equal to the expected 16 bytes of a base64-encoded UUID.",
        ),
        (
            {},
            "a+b/" * 5 + "AA",
            f"Cluster ID string {'a+b/' * 5}AA does not appear to be a valid UUID: Input string `{'a+b/' * 5}AA` "
            "is not valid URL-safe base64.",
        ),
        (
            {"process.roles": None, "controller.quorum.voters": None, "node.id": None},
            CLUSTER_ID,
            "The configuration does not set process.roles, so it is not a KRaft controller or broker "
            "configuration; kcli storage format formats KRaft nodes only (without process.roles, kcli broker "
            "start formats its own log dirs).",
        ),
        (
            {"controller.quorum.voters": None, "controller.quorum.bootstrap.servers": "127.0.0.1:9093"},
            CLUSTER_ID,
            "Because controller.quorum.voters is not set on this controller, you must specify one of the "
            "following: --standalone, --initial-controllers, or --no-initial-controllers.",
        ),
        (
            {"controller.quorum.voters": "2@127.0.0.1:9093"},
            CLUSTER_ID,
            "If process.roles contains the 'controller' role, the node id 1 must be included in the set of "
            "voters controller.quorum.voters=Set(2).",
        ),
    ],
)
def test_format_refuses_in_one_sentence_and_writes_nothing(
    tmp_path: Path, settings: dict[str, str | None], cluster_id: str, message: str
) -> None:
    config = combined(tmp_path)
    text = config.read_text().splitlines()
    lines = [line for line in text if line.split("=", 1)[0] not in settings]
    lines += [f"{key}={value}" for key, value in settings.items() if value is not None]
    config.write_text("\n".join(lines) + "\n")
    result = kcli(tmp_path, "storage", "format", "--config", str(config), "--cluster-id", cluster_id)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"kcli: {message}"]
    assert result.stdout == ""
    assert files_under(tmp_path) == ["server.properties"]


def test_format_a_dynamic_quorum_controller_and_a_broker(tmp_path: Path) -> None:
    controller = write_config(
        tmp_path / "controller.properties",
        **{
            "process.roles": "controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
            "listeners": "CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(tmp_path / "controller"),
        },
    )
    result = kcli(
        tmp_path, "storage", "format", "-c", str(controller), "-t", CLUSTER_ID, "--no-initial-controllers"
    )
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout
        == f"Formatting metadata directory {tmp_path / 'controller'} with metadata.version 4.1-IV1.\n"
    )
    broker = write_config(
        tmp_path / "broker.properties",
        **{
            "process.roles": "broker",
            "node.id": "4",
            "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(tmp_path / "broker"),
        },
    )
    result = kcli(
        tmp_path, "storage", "format", "-c", str(broker), "-t", CLUSTER_ID
    )  # a broker needs no flag
    assert result.returncode == 0, result.stderr
    meta = read_meta_properties((tmp_path / "broker" / META_PROPERTIES).read_text())
    assert (meta.cluster_id, meta.node_id) == (CLUSTER_ID, 4)


def _dynamic_controller(tmp_path: Path, node_id: int, port: int) -> Path:
    return write_config(
        tmp_path / f"c{node_id}.properties",
        **{
            "process.roles": "controller",
            "node.id": str(node_id),
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": f"{tmp_path / f'c{node_id}-data'}",
            "metadata.log.dir": str(tmp_path / f"c{node_id}-meta"),
        },
    )


def _bootstrap_snapshot_records(metadata_dir: Path) -> list[tuple[int, str, tuple]]:
    """The control records of the bootstrap snapshot, decoded with kcli's own readers."""
    from formats.records import read_kraft_version, read_voters

    snapshot = read_snapshot(
        (metadata_dir / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint").read_bytes()
    )
    assert snapshot.records == [] and snapshot.footer_version == 0
    found = []
    for offset, kind, value in snapshot.control_records:
        decoded = read_kraft_version(value) if kind.name == "KRAFT_VERSION" else read_voters(value)
        found.append((offset, kind.name, decoded))
    return found


def test_format_standalone_and_initial_controllers_write_the_bootstrap_snapshot(tmp_path: Path) -> None:
    """Kafka's Formatter: the metadata dir of a dynamic quorum gets 0-0.checkpoint with KRaftVersion (1)
    and Voters after the SnapshotHeader; a voter's directory.id is its key's; kraft.version has no
    FeatureLevelRecord in bootstrap.checkpoint; a non-voter is a "dynamic metadata directory"."""
    from formats.records import KRaftVoter

    config = _dynamic_controller(tmp_path, 1, 23011)
    result = kcli(tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID, "--standalone")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Formatting data directory {tmp_path / 'c1-data'} with metadata.version 4.1-IV1.",
        f"Formatting dynamic metadata voter directory {tmp_path / 'c1-meta'} with metadata.version 4.1-IV1.",
    ]
    meta = read_meta_properties((tmp_path / "c1-meta" / META_PROPERTIES).read_text())
    records = _bootstrap_snapshot_records(tmp_path / "c1-meta")
    directory = uuid_from_base64(meta.directory_id).bytes
    assert records == [
        (1, "KRAFT_VERSION", (0, 1)),
        (2, "KRAFT_VOTERS", (0, (KRaftVoter(1, directory, (("CONTROLLER", "127.0.0.1", 23011),), 0, 1),))),
    ]
    assert not (tmp_path / "c1-data" / "__cluster_metadata-0").exists()
    bootstrap = read_bootstrap_metadata(tmp_path / "c1-meta")
    assert [r.data["name"] for r in bootstrap.records] == [
        "metadata.version",
        "eligible.leader.replicas.version",
        "group.version",
        "transaction.version",
    ]
    dump = kcli(
        tmp_path,
        "dump-segment",
        "--cluster-metadata-decoder",
        str(tmp_path / "c1-meta" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"),
    )
    assert dump.returncode == 0, dump.stderr
    assert ' KRaftVersion {"version":0,"kRaftVersion":1}' in dump.stdout
    assert (
        f' KRaftVoters {{"version":0,"voters":[{{"voterId":1,"voterDirectoryId":"{meta.directory_id}",'
        '"endpoints":[{"name":"CONTROLLER","host":"127.0.0.1","port":23011}],'
        '"kRaftVersionFeature":{"minSupportedVersion":0,"maxSupportedVersion":1}}]}' in dump.stdout
    )

    voters = "2@127.0.0.1:23012:JEXY6aqzQY-32P5TStzaFg,3@[::1]:23013:MvDxzVmcRsaTz33bUuRU6A"
    for node_id, port, kind in [(2, 23012, "voter directory"), (4, 23014, "directory")]:
        config = _dynamic_controller(tmp_path, node_id, port)
        result = kcli(tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID, "-I", voters)
        assert result.returncode == 0, result.stderr
        assert f"Formatting dynamic metadata {kind} {tmp_path / f'c{node_id}-meta'}" in result.stdout
        records = _bootstrap_snapshot_records(tmp_path / f"c{node_id}-meta")
        assert [(v.voter_id, v.endpoints) for v in records[1][2][1]] == [
            (2, (("CONTROLLER", "127.0.0.1", 23012),)),
            (3, (("CONTROLLER", "::1", 23013),)),
        ]
    meta = read_meta_properties((tmp_path / "c2-meta" / META_PROPERTIES).read_text())
    assert meta.directory_id == "JEXY6aqzQY-32P5TStzaFg"  # from --initial-controllers for node 2
    other = read_meta_properties((tmp_path / "c2-data" / META_PROPERTIES).read_text())
    assert other.directory_id != meta.directory_id


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--standalone", "--no-initial-controllers"],
            "argument --no-initial-controllers/-N: not allowed with argument --standalone/-s",
        ),
        (
            ["-I", "1@h:1:JEXY6aqzQY-32P5TStzaFg", "-s"],
            "argument --initial-controllers/-I: not allowed with argument --standalone/-s",
        ),
        (["-I", "1h:1:JEXY6aqzQY-32P5TStzaFg"], "No @ found in dynamic voter string."),
        (["-I", "1@h:99999:JEXY6aqzQY-32P5TStzaFg"], "Invalid port 99999 in dynamic voter string."),
        (["-I", "1@h:1:nope"], "Failed to parse directory ID in dynamic voter string."),
        (
            ["-I", "1@h:1:JEXY6aqzQY-32P5TStzaFg,1@h:2:MvDxzVmcRsaTz33bUuRU6A"],
            "Node id 1 was specified more than once.",
        ),
        (
            ["-s", "--feature", "kraft.version=0"],
            "Cannot set kraft.version to 0 if KIP-853 configuration is present. Try removing the --feature "
            "flag for kraft.version.",
        ),
        (
            ["-N", "--feature", "kraft.version=1"],
            "Cannot set kraft.version to 1 unless KIP-853 configuration is present. Try removing the "
            "--feature flag for kraft.version.",
        ),
    ],
)
def test_format_dynamic_quorum_options_refused(tmp_path: Path, args: list[str], message: str) -> None:
    config = _dynamic_controller(tmp_path, 1, 23011)
    result = kcli(tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID, *args)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"kcli: {message}"]
    assert files_under(tmp_path) == ["c1.properties"]


# --- start: formatted and unformatted dirs ------------------------------------------------------------


def describe_cluster_id(bootstrap: str) -> str:
    from kcli.client import KafkaClient
    from kcli.protocol.messages import request_type

    async def run() -> str:
        async with await KafkaClient.connect(bootstrap) as client:
            cls = request_type(60, 0)
            return (await client.send(cls(include_cluster_authorized_operations=False))).cluster_id

    return asyncio.run(run())


def test_a_formatted_node_starts_with_the_formatted_cluster_id(tmp_path: Path) -> None:
    config = combined(tmp_path)
    assert kcli(tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID).returncode == 0
    metas = {
        name: (tmp_path / name / META_PROPERTIES).read_text() for name in ("logs-a", "logs-b", "metadata")
    }
    broker = start_with_config(tmp_path, config)
    try:
        assert describe_cluster_id(broker.bootstrap) == CLUSTER_ID
        assert f"of cluster {CLUSTER_ID} serving" in broker.log()
    finally:
        stop_cleanly(broker)
    assert {name: (tmp_path / name / META_PROPERTIES).read_text() for name in metas} == metas
    assert (tmp_path / "metadata" / "__cluster_metadata-0").is_dir()
    assert not (tmp_path / "logs-a" / "__cluster_metadata-0").exists()


def test_a_multi_voter_node_refuses_unformatted_dirs_and_writes_nothing(tmp_path: Path) -> None:
    config = combined(tmp_path, voters="1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095")
    result = kcli_process(tmp_path, "broker", "start", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"kcli: No `meta.properties` found in {tmp_path / 'logs-a'} "
        "(have you run `kcli storage format` to format the directory?)"
    ]
    assert files_under(tmp_path) == ["server.properties"]


def test_a_node_formatting_itself_writes_the_bootstrap_checkpoint_storage_format_would(
    tmp_path: Path,
) -> None:
    """`kcli broker start` on empty dirs formats them as `kcli storage format` does: Kafka 4.1's levels by
    default, --release-version's with one; a dir added later to a formatted node gets meta.properties only."""
    from kcli.features import MV_3_9_IV0

    def node(*dirs: str) -> BrokerConfig:
        log_dirs = ",".join(str(tmp_path / d) for d in dirs)
        return BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": log_dirs})

    def levels(name: str) -> list[tuple[str, int]]:
        bootstrap = read_bootstrap_metadata(tmp_path / name)
        assert bootstrap is not None
        return [(r.data["name"], r.data["featureLevel"]) for r in bootstrap.records]

    ensure_meta_properties(node("new"))
    assert levels("new") == [
        ("metadata.version", 27),
        ("eligible.leader.replicas.version", 1),
        ("group.version", 1),
        ("transaction.version", 2),
    ]
    ensure_meta_properties(node("old"), release=MV_3_9_IV0)
    assert levels("old") == [("metadata.version", 21)]
    ensure_meta_properties(node("old", "added"), release=27)  # formatted already: the release is not used
    assert levels("old") == [("metadata.version", 21)]
    assert not (tmp_path / "added" / "bootstrap.checkpoint").exists()
    assert (tmp_path / "added" / META_PROPERTIES).is_file()


def test_cluster_start_formats_at_its_release_version_and_keeps_it(tmp_path: Path) -> None:
    """`kcli cluster start --release-version 3.9` formats every node at 3.9-IV0; the stored cluster starts
    again without the flag or with the same one, and another release is refused, not silently ignored."""
    from kcli.features import MV_3_9_IV0
    from ops.local_cluster import LocalClusterError, plan

    layout = plan(tmp_path / "c", 2, free_port_range(4), [], release=MV_3_9_IV0)
    for node in layout.nodes:
        bootstrap = read_bootstrap_metadata(BrokerConfig.load(config_file=node.properties).metadata_log_dir)
        assert bootstrap is not None and bootstrap.record_tuples() == [
            ("FeatureLevelRecord", 0, {"name": "metadata.version", "featureLevel": 21})
        ]
    assert plan(tmp_path / "c", 2, None, []) == layout
    assert plan(tmp_path / "c", 2, None, [], release=MV_3_9_IV0) == layout
    with pytest.raises(LocalClusterError) as refused:
        plan(tmp_path / "c", 2, None, [], release=27)
    assert str(refused.value) == (
        f"{tmp_path / 'c'} holds a cluster formatted with --release-version 3.9-IV0, so kcli cluster start "
        "cannot make it 4.1-IV1; start it without --release-version (`kcli features upgrade` moves a running "
        "cluster) or use another --data-dir."
    )
    default = plan(tmp_path / "d", 1, free_port_range(2), [])
    bootstrap = read_bootstrap_metadata(
        BrokerConfig.load(config_file=default.nodes[0].properties).metadata_log_dir
    )
    assert bootstrap is not None and bootstrap.metadata_version == 27


def test_which_nodes_format_themselves_at_start(tmp_path: Path) -> None:
    def node(*dirs: str, **settings: str) -> BrokerConfig:
        log_dirs = ",".join(str(tmp_path / d) for d in dirs)
        return BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": log_dirs, **settings})

    # kcli's default shape, and a static quorum of this node alone: formatted on the spot.
    cluster_id = ensure_meta_properties(node("default"))
    assert read_meta_properties((tmp_path / "default" / META_PROPERTIES).read_text()).cluster_id == cluster_id
    assert ensure_meta_properties(node("default", "default-2")) == cluster_id  # a new dir joins the cluster
    alone = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(tmp_path / "alone"),
    }
    assert ensure_meta_properties(BrokerConfig(alone))
    assert (tmp_path / "alone" / META_PROPERTIES).is_file()
    # A broker-only node and a node of a dynamic quorum are formatted with kcli storage format only.
    broker = {
        "process.roles": "broker",
        "node.id": "1",
        "controller.quorum.voters": "7@127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
    }
    dynamic = {
        **{key: value for key, value in alone.items() if key not in ("controller.quorum.voters", "log.dirs")},
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
    }
    for name, settings in (("broker", broker), ("dynamic", dynamic)):
        with pytest.raises(StorageError) as info:
            ensure_meta_properties(node(name, **settings))
        assert str(info.value) == (
            f"No `meta.properties` found in {tmp_path / name} (have you run `kcli storage format` to format "
            "the directory?)"
        )
        assert not (tmp_path / name).exists()
    # A formatted dir next to a new one: the new one is named, and nothing is written.
    with pytest.raises(StorageError, match=f"^No `meta.properties` found in {tmp_path / 'new'} "):
        ensure_meta_properties(node("default", "new", **broker))
    assert not (tmp_path / "new").exists()
    # Every node refuses a dir of another cluster.
    with pytest.raises(StorageError, match=r"^Invalid cluster.id in: .*alone/meta.properties\. Expected "):
        ensure_meta_properties(node("default", "alone"))


def test_read_bootstrap_metadata(tmp_path: Path) -> None:
    assert read_bootstrap_metadata(tmp_path) is None
    (tmp_path / "bootstrap.checkpoint").write_bytes(bootstrap_checkpoint(21, now_ms=1_700_000_000_000))
    bootstrap = read_bootstrap_metadata(tmp_path)
    assert bootstrap is not None and bootstrap.metadata_version == 21
    assert [r.name for r in bootstrap.records] == ["FeatureLevelRecord"]
    (tmp_path / "bootstrap.checkpoint").write_bytes(
        build_snapshot([encode_metadata_record("NoOpRecord", 0, {})], timestamp=0)
    )
    with pytest.raises(StorageError, match=r"^No FeatureLevelRecord for metadata.version was found"):
        read_bootstrap_metadata(tmp_path)
    (tmp_path / "bootstrap.checkpoint").write_bytes(bootstrap_checkpoint(21, now_ms=0)[:-3])
    with pytest.raises(StorageError, match=r"^cannot read .*bootstrap.checkpoint: .*whole record batch\.$"):
        read_bootstrap_metadata(tmp_path)


def _as_kafka_4_4_formats_it(metadata_dir: Path, features: dict[str, int]) -> None:
    """Kafka 4.4's storage tool writes no bootstrap.checkpoint: the FeatureLevelRecords go into the
    metadata log's 0-0 snapshot. Rewrite a kcli-formatted metadata dir that way."""
    from kcli.features import MV_3_9_IV0
    from kcli.storage import BOOTSTRAP_SNAPSHOT, CLUSTER_METADATA_DIR, bootstrap_checkpoint

    (metadata_dir / "bootstrap.checkpoint").unlink()
    (metadata_dir / CLUSTER_METADATA_DIR).mkdir(exist_ok=True)
    snapshot = bootstrap_checkpoint(MV_3_9_IV0, now_ms=0, features=features)
    (metadata_dir / CLUSTER_METADATA_DIR / BOOTSTRAP_SNAPSHOT).write_bytes(snapshot)


def test_features_kafka_4_4_formatted_into_the_bootstrap_snapshot_are_read_not_dropped(
    tmp_path: Path,
) -> None:
    """A level kcli does not support is refused as it is from bootstrap.checkpoint (it was silently
    replaced by kcli's defaults); a supported one is what the cluster starts at."""
    config = combined(tmp_path)
    assert kcli(tmp_path, "storage", "format", "-c", str(config), "-t", CLUSTER_ID).returncode == 0
    _as_kafka_4_4_formats_it(tmp_path / "metadata", {"share.version": 1})
    refused = subprocess.run(
        [*KCLI, "broker", "start", "--config", str(config)],
        cwd=tmp_path, env=kcli_env(), capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert refused.returncode != 0 and "share.version" in refused.stderr, refused.stderr

    again = tmp_path / "again"
    again.mkdir()
    config = combined(again)
    assert kcli(again, "storage", "format", "-c", str(config), "-t", CLUSTER_ID).returncode == 0
    _as_kafka_4_4_formats_it(again / "metadata", {"eligible.leader.replicas.version": 1})
    broker = start_with_config(again, config)
    try:
        described = kcli(again, "features", "describe", "-b", broker.bootstrap)
        assert "Feature: eligible.leader.replicas.version\t" in described.stdout, described.stdout
        line = next(x for x in described.stdout.splitlines() if "eligible.leader.replicas.version" in x)
        assert "FinalizedVersionLevel: 1\t" in line, described.stdout
        assert "bootstrapped the metadata log from" in broker.log()
    finally:
        stop_cleanly(broker)
