"""A node's storage identity: formatting log dirs (`kcli storage format`), checking them at start, and
the bootstrap metadata a new cluster starts from; and the broker's own start-up step for its dirs
(`ensure_meta_properties`: check, lock, and on a one-node quorum format them on the spot).

What Kafka's StorageTool and Formatter do, with their sentences: every log dir and the metadata log dir
gets a version 1 `meta.properties` (cluster.id, node.id, a fresh directory.id each) and a
`bootstrap.checkpoint`, a KRaft snapshot of the FeatureLevelRecords the first active controller copies
into an empty metadata log. Dirs already formatted are refused unless ignored, and their cluster.id and
node.id must agree with what is being written (MetaPropertiesEnsemble.verify). A node reads its dirs back
at start with `load_meta_properties` / `check_meta_properties`, and the controller reads the bootstrap
records with `read_bootstrap_metadata`.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from formats.checkpoints import (
    MetaProperties,
    read_meta_properties,
    uuid_from_base64,
    uuid_to_base64,
    write_meta_properties,
)
from formats.errors import CheckpointError, FormatError
from formats.kraft_snapshot import BOOTSTRAP_CHECKPOINT, build_snapshot, read_snapshot
from formats.records import ControlType, kraft_version_value, voters_value
from kcli.config import BrokerConfig
from kcli.dirlock import LOCK_FILE_NAME, lock_for_offline_change, lock_log_dirs, refuse_if_in_use, release
from kcli.errors import KcliError
from kcli.features import (
    KRAFT_VERSION,
    FeatureError,
    bootstrap_feature_records,
    format_feature_levels,
    is_scram_supported,
    kraft_version_level,
)
from kcli.features import release_version as release_version
from kcli.files import write_atomically
from kcli.voters import VoterError, VoterNode, VoterSet, parse_dynamic_voters

if TYPE_CHECKING:
    from formats.internal import MetadataRecord

META_PROPERTIES = "meta.properties"
CLUSTER_METADATA_DIR = "__cluster_metadata-0"
BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"
"""Snapshots.BOOTSTRAP_SNAPSHOT_ID's file (end offset 0, epoch 0) in `__cluster_metadata-0`: the
KRaftVersion and Voters records a dynamic quorum starts from (KIP-853)."""
METADATA_VERSION = "metadata.version"
FORMAT_COMMAND = "kcli storage format"

_RESERVED_UUIDS = frozenset({0, 1})  # Uuid.RESERVED: ZERO_UUID, ONE_UUID (= METADATA_TOPIC_ID)
_RESERVED_DIRECTORY_IDS = frozenset({0, 1, 2})  # DirectoryId: MIGRATING (0), UNASSIGNED (1), LOST (2)


class StorageError(KcliError):
    """A log dir that cannot be formatted or used as it is; one sentence, exit code 2."""


# --- ids ----------------------------------------------------------------------------------------------


def random_uuid() -> str:
    """Kafka's Uuid.randomUuid as text: a random (v4) UUID in 22 chars of URL-safe base64, never a
    reserved id (all zeros, the metadata topic's 1) and never one whose text starts with "-"."""
    while True:
        value = uuid.uuid4()
        text = uuid_to_base64(value)
        if value.int not in _RESERVED_UUIDS and not text.startswith("-"):
            return text


def check_cluster_id(cluster_id: str) -> str:
    """The cluster id as given, if it is a base64 UUID (Kafka's Uuid.fromString); else StorageError."""
    try:
        uuid_from_base64(cluster_id)
    except CheckpointError as exc:
        raise StorageError(
            f"Cluster ID string {cluster_id} does not appear to be a valid UUID: {str(exc).rstrip('.')}."
        ) from None
    return cluster_id


def new_directory_id(taken: set[str]) -> str:
    """MetaPropertiesEnsemble.Copier.generateValidDirectoryId: random, not reserved, not already used."""
    while True:
        text = random_uuid()
        if uuid_from_base64(text).int not in _RESERVED_DIRECTORY_IDS and text not in taken:
            taken.add(text)
            return text


# --- meta.properties ------------------------------------------------------------------------------------


def storage_dirs(config: BrokerConfig) -> list[str]:
    """Every dir a node keeps meta.properties in: its log dirs, then the metadata log dir if it is
    not one of them."""
    dirs = list(dict.fromkeys(config.log_dirs))
    if config.metadata_log_dir not in dirs:
        dirs.append(config.metadata_log_dir)
    return dirs


def load_meta_properties(dirs: Iterable[str]) -> dict[str, MetaProperties]:
    """The meta.properties of each dir that has one; a dir without one (or missing) is left out."""
    found: dict[str, MetaProperties] = {}
    for log_dir in dirs:
        path = Path(log_dir) / META_PROPERTIES
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}.") from None
        try:
            found[log_dir] = read_meta_properties(text)
        except CheckpointError as exc:
            raise StorageError(f"cannot read {path}: {str(exc).rstrip('.')}.") from None
    return found


def check_meta_properties(
    found: Mapping[str, MetaProperties], *, cluster_id: str | None, node_id: int
) -> str | None:
    """Kafka's MetaPropertiesEnsemble.verify: every dir names one cluster.id (`cluster_id` when given)
    and the configured node.id. Returns the cluster id the dirs agree on, or the one given."""
    expected = cluster_id
    for log_dir, meta in found.items():
        path = Path(log_dir) / META_PROPERTIES
        if meta.cluster_id is not None:
            if expected is None:
                expected = meta.cluster_id
            elif meta.cluster_id != expected:
                raise StorageError(
                    f"Invalid cluster.id in: {path}. Expected {expected}, but read {meta.cluster_id}."
                )
        if meta.node_id is not None and meta.node_id != node_id:
            raise StorageError(
                f"Stored node id {meta.node_id} doesn't match the configured node.id {node_id} in {path}."
            )
    return expected


def write_meta_properties_file(log_dir: str | Path, meta: MetaProperties) -> None:
    """meta.properties written the Kafka way (tmp, fsync, rename); a failure is one sentence."""
    path = Path(log_dir) / META_PROPERTIES
    try:
        write_atomically(path, write_meta_properties(meta, datetime.now().astimezone()))
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {(exc.strerror or str(exc)).lower()}.") from None


def unformatted_error(log_dir: str) -> StorageError:
    """What a node that must be formatted says about a dir without meta.properties (KafkaRaftServer)."""
    return StorageError(
        f"No `meta.properties` found in {log_dir} (have you run `{FORMAT_COMMAND}` to format the directory?)"
    )


_KAFKA_ROOT_FILES = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
    ".kafka_cleanshutdown",
)


def kafka_data_in(log_dir: str | Path) -> str | None:
    """What in `log_dir` shows it already held a Kafka (or kcli) log dir: a partition dir (the metadata
    log's included, in any -delete/-future/-stray form) or a root checkpoint, named; None when there is
    none (a missing or empty dir, or one with unrelated files), which first start may format."""
    from formats.segment import parse_partition_dir

    try:
        entries = sorted(Path(log_dir).iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {log_dir}: {(exc.strerror or str(exc)).lower()}.") from None
    for entry in entries:
        if entry.is_dir() and parse_partition_dir(entry.name) is not None:
            return f"partition dir {entry.name}"
    for entry in entries:
        if entry.name in _KAFKA_ROOT_FILES:
            return entry.name
    return None


# --- bootstrap metadata ---------------------------------------------------------------------------------


def prepare_log_dirs(log_dirs: list[str]) -> None:
    """Create each log dir and prove it is writable, or fail with one sentence."""
    for log_dir in log_dirs:
        path = Path(log_dir)
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".kcli-probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise KcliError(f"data dir {log_dir} is not usable: {reason}.") from None


def ensure_meta_properties(
    config: BrokerConfig,
    cluster_id: str | None = None,
    *,
    locks: list[Path] | None = None,
    release: int | None = None,
) -> str:
    """Return the cluster id this node's dirs belong to, after checking them as Kafka does at start.

    Every log dir and the metadata log dir must name one cluster.id and the configured node.id
    (`MetaPropertiesEnsemble.verify`, with its sentences). A node that is the whole quorum on its own
    (kcli's default shape, see `BrokerConfig.is_single_node_quorum`) formats a dir with no
    meta.properties on the spot (version 1, a fresh directory.id; a new cluster id when no dir has
    one, and a new cluster's bootstrap.checkpoint with the feature levels `kcli storage format
    --release-version` gives `release`, None for kcli's default), so `kcli broker start` needs no
    format step. Any other node refuses such a dir, before creating anything, as KafkaRaftServer
    does: it is formatted with `kcli storage format`.

    With `locks`, every dir is locked (`.lock`, as Kafka's LogManager) once it exists and before
    anything is written to it; the lock files are appended there for the caller to release. A dir
    without meta.properties that already holds Kafka data (a copied or half-deleted broker dir) is
    refused rather than formatted: formatting it would start a new metadata log that knows none of
    its partitions.
    """
    dirs = storage_dirs(config)
    found = load_meta_properties(dirs)
    expected = check_meta_properties(found, cluster_id=cluster_id, node_id=config.node_id)
    missing = [log_dir for log_dir in dirs if log_dir not in found]
    if missing and not config.is_single_node_quorum:
        raise unformatted_error(missing[0])
    for log_dir in missing:
        held = kafka_data_in(log_dir)
        if held is not None:
            raise StorageError(
                f"{log_dir} holds Kafka data ({held}) but no meta.properties, and kcli formats only an empty "
                f"dir on first start: format it with `{FORMAT_COMMAND}` (partitions its new metadata log "
                f"does not know are then kept as -stray) or check it first with `kcli recover logdir {log_dir}`."
            )
    prepare_log_dirs(dirs)
    if locks is not None:
        locks.extend(lock_log_dirs(dirs))
    expected = expected or random_uuid()
    taken = {meta.directory_id for meta in found.values() if meta.directory_id}
    checkpoint = None
    if config.metadata_log_dir in missing:  # a new cluster: the levels `kcli storage format` gives it
        metadata_version, levels = format_feature_levels({}, release)
        checkpoint = bootstrap_checkpoint(metadata_version, now_ms=int(time.time() * 1000), features=levels)
    for log_dir in missing:
        if checkpoint is not None:
            try:
                write_atomically(Path(log_dir) / BOOTSTRAP_CHECKPOINT, checkpoint)
            except OSError as exc:
                raise StorageError(
                    f"cannot format {log_dir}: {(exc.strerror or str(exc)).lower()}."
                ) from None
        directory_id = new_directory_id(taken)
        meta = MetaProperties(1, node_id=config.node_id, cluster_id=expected, directory_id=directory_id)
        write_meta_properties_file(log_dir, meta)
    return expected


@dataclass(frozen=True, slots=True)
class BootstrapMetadata:
    """The records a new metadata log starts with (Kafka's BootstrapMetadata), and where they came from."""

    records: list[MetadataRecord]
    metadata_version: int
    source: str

    def record_tuples(self) -> list[tuple[str, int, dict[str, Any]]]:
        """The records as (name, version, data), the shape the controller's results use."""
        return [(record.name, record.version, record.data) for record in self.records]


def bootstrap_records(
    metadata_version: int,
    features: Mapping[str, int] | None = None,
    extra: Sequence[tuple[str, int, dict[str, Any]]] = (),
) -> list[bytes]:
    """Kafka's BootstrapMetadata.fromVersions: a FeatureLevelRecord (v0) for metadata.version, then one
    for every other feature above level 0, by name; then `extra` (the --add-scram credentials)."""
    from formats.internal import encode_metadata_record

    return [
        encode_metadata_record("FeatureLevelRecord", 0, {"name": name, "featureLevel": level})
        for name, level in bootstrap_feature_records(metadata_version, features or {})
    ] + [encode_metadata_record(name, version, data) for name, version, data in extra]


def bootstrap_checkpoint(
    metadata_version: int,
    *,
    now_ms: int,
    features: Mapping[str, int] | None = None,
    extra: Sequence[tuple[str, int, dict[str, Any]]] = (),
) -> bytes:
    """The bytes of `bootstrap.checkpoint` (BatchFileWriter): header, FeatureLevelRecords and `extra`,
    footer, at offset 0 and epoch 0, last contained log timestamp 0, every batch stamped `now_ms`."""
    return build_snapshot(bootstrap_records(metadata_version, features, extra), timestamp=now_ms)


def scram_bootstrap_records(
    metadata_version: int, arguments: Sequence[str]
) -> list[tuple[str, int, dict[str, Any]]]:
    """The UserScramCredentialRecords of --add-scram arguments (Kafka's Formatter and ScramParser):
    refused below metadata.version 3.5-IV2, and with ScramParser's sentence for a bad argument."""
    from kcli.security.scram_credentials import ScramArgumentError, credential_record, parse_add_scram

    if not arguments:
        return []
    if not is_scram_supported(metadata_version):
        raise StorageError(f"SCRAM is only supported in {METADATA_VERSION} 3.5-IV2 or later.")
    try:
        return [credential_record(*parse_add_scram(argument)) for argument in arguments]
    except ScramArgumentError as exc:
        raise StorageError(str(exc)) from None


def read_bootstrap_metadata(metadata_log_dir: str | Path) -> BootstrapMetadata | None:
    """The records of `<metadata_log_dir>/bootstrap.checkpoint`, or None when there is no such file.

    As Kafka's BootstrapDirectory.readFromBinaryFile: the metadata records of the snapshot's data
    batches (control records left out), which must include metadata.version's FeatureLevelRecord.
    A controller bootstrapping an empty metadata log appends these; with None, it falls back to its
    default metadata.version (Kafka's BootstrapDirectory.readFromConfiguration), as kcli's does today.
    """
    from formats.internal import decode_metadata_record

    path = Path(metadata_log_dir) / BOOTSTRAP_CHECKPOINT
    snapshot_path = Path(metadata_log_dir) / CLUSTER_METADATA_DIR / BOOTSTRAP_SNAPSHOT
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        # Kafka 4.4's storage tool writes no bootstrap.checkpoint: the features go into the metadata
        # log's 0-0 snapshot instead. Read them there, or a dir it formatted would start at kcli's
        # default levels with Kafka's chosen ones silently dropped.
        path = snapshot_path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}.") from None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}.") from None
    source = f"the binary bootstrap metadata file: {path}"
    try:
        snapshot = read_snapshot(data)
        records = [decode_metadata_record(value) for _, value in snapshot.records]
    except FormatError as exc:
        raise StorageError(f"cannot read {path}: {str(exc).rstrip('.')}.") from None
    if path == snapshot_path and not records:
        return None  # a dynamic quorum's bootstrap snapshot with only its KRaft control records
    levels = [
        r.data["featureLevel"]
        for r in records
        if r.name == "FeatureLevelRecord" and r.data.get("name") == METADATA_VERSION
    ]
    if not levels:
        raise StorageError(
            f"No FeatureLevelRecord for {METADATA_VERSION} was found in the bootstrap metadata from {source}."
        )
    return BootstrapMetadata(records, levels[-1], source)


# --- format ---------------------------------------------------------------------------------------------


def format_storage(
    config: BrokerConfig,
    cluster_id: str,
    *,
    metadata_version: int | None = None,
    features: Mapping[str, int] | None = None,
    ignore_formatted: bool = False,
    no_initial_controllers: bool = False,
    standalone: bool = False,
    initial_controllers: str | None = None,
    add_scram: Sequence[str] = (),
    now_ms: int,
) -> list[str]:
    """Format this node's dirs as `kafka-storage.sh format` does; returns the lines it prints.

    `metadata_version` is the --release-version level (None: kcli's default, 4.1-IV1) and `features`
    the --feature settings; together they give the feature levels the cluster starts with, checked
    as Kafka's Formatter checks them (eligible.leader.replicas.version=1 needs metadata.version
    4.0-IV1 or later, and is the default from 4.1-IV0). `add_scram` holds --add-scram arguments, whose
    SCRAM credentials join the bootstrap records. Everything is checked before anything is
    written: the feature levels, the configuration is a KRaft one, the cluster id is a base64 UUID,
    dirs already formatted agree on cluster.id and node.id and are refused unless `ignore_formatted`.
    Each dir without meta.properties then gets `bootstrap.checkpoint` (as Kafka writes it into every
    dir it formats) and, last, meta.properties, so a dir only counts as formatted once both are on disk.
    """
    if not config.is_set("process.roles"):
        raise StorageError(
            "The configuration does not set process.roles, so it is not a KRaft controller or broker "
            f"configuration; {FORMAT_COMMAND} formats KRaft nodes only (without process.roles, "
            "kcli broker start formats its own log dirs)."
        )
    voters = initial_voters(config, standalone=standalone, initial_controllers=initial_controllers)
    if (
        not no_initial_controllers
        and config.is_controller
        and not config["controller.quorum.voters"]
        and voters is None
    ):
        raise StorageError(
            "Because controller.quorum.voters is not set on this controller, you must specify one of the "
            "following: --standalone, --initial-controllers, or --no-initial-controllers."
        )
    check_cluster_id(cluster_id)
    try:
        metadata_version, levels = format_feature_levels(
            features or {}, metadata_version, dynamic_quorum=voters is not None
        )
        kraft_version = kraft_version_level((features or {}).get(KRAFT_VERSION), voters is not None)
    except FeatureError as exc:
        raise StorageError(str(exc)) from None
    scram_records = scram_bootstrap_records(metadata_version, add_scram)
    dirs = sorted(storage_dirs(config))  # a TreeSet of the paths in Kafka's StorageTool
    found = load_meta_properties(dirs)
    check_meta_properties(found, cluster_id=cluster_id, node_id=config.node_id)
    if found and not ignore_formatted:
        raise StorageError(
            f"Log directory {min(found)} is already formatted. "
            "Use --ignore-formatted to ignore this directory and format the others."
        )
    empty = [d for d in dirs if d not in found]
    if not empty:
        return ["All of the log directories are already formatted."]
    for log_dir in empty:
        refuse_if_in_use(log_dir, FORMAT_COMMAND)
    locks: list[Path] = []
    try:
        checkpoint = bootstrap_checkpoint(
            metadata_version, now_ms=now_ms, features=levels, extra=scram_records
        )
        return _format_dirs(
            config,
            cluster_id,
            empty,
            found,
            voters,
            metadata_version,
            checkpoint,
            kraft_version,
            now_ms,
            locks,
        )
    finally:
        release(locks)


def _format_dirs(
    config: BrokerConfig,
    cluster_id: str,
    empty: list[str],
    found: Mapping[str, MetaProperties],
    voters: VoterSet | None,
    metadata_version: int,
    checkpoint: bytes,
    kraft_version: int,
    now_ms: int,
    locks: list[Path],
) -> list[str]:
    """Write bootstrap.checkpoint (and a dynamic quorum's bootstrap snapshot) then meta.properties into
    each unformatted dir; a dir that has a `.lock` file is locked from before its first write to the end
    (one without is not given one: Kafka's format leaves none)."""
    taken = {meta.directory_id for meta in found.values() if meta.directory_id}
    lines = []
    own = voters.voters.get(config.node_id) if voters is not None else None
    if own is not None and own.directory_id is not None:
        taken.add(uuid_to_base64(own.directory_id))
    for log_dir in empty:
        dynamic = voters is not None and log_dir == config.metadata_log_dir
        if log_dir != config.metadata_log_dir:
            kind = "data directory"
        elif voters is None:
            kind = "metadata directory"
        else:
            kind = "dynamic metadata voter directory" if own is not None else "dynamic metadata directory"
        lines.append(
            f"Formatting {kind} {log_dir} with {METADATA_VERSION} {release_version(metadata_version)}."
        )
        path = Path(log_dir)
        try:
            path.mkdir(parents=True, exist_ok=True)
            if (path / LOCK_FILE_NAME).exists():  # held while writing; none is created (Kafka's format)
                locks.append(lock_for_offline_change(log_dir, FORMAT_COMMAND))
            write_atomically(path / BOOTSTRAP_CHECKPOINT, checkpoint)
            if dynamic:
                assert voters is not None
                write_bootstrap_snapshot(path, voters, kraft_version, now_ms=now_ms)
        except OSError as exc:
            raise StorageError(f"cannot format {log_dir}: {(exc.strerror or str(exc)).lower()}.") from None
        if dynamic and own is not None and own.directory_id is not None:
            directory_id = uuid_to_base64(own.directory_id)  # this voter's key is the one given
        else:
            directory_id = new_directory_id(taken)
        meta = MetaProperties(1, node_id=config.node_id, cluster_id=cluster_id, directory_id=directory_id)
        write_meta_properties_file(log_dir, meta)
    return lines


def initial_voters(
    config: BrokerConfig, *, standalone: bool = False, initial_controllers: str | None = None
) -> VoterSet | None:
    """The voters a dynamic quorum starts with (Kafka's StorageTool): --initial-controllers as given,
    or with --standalone this controller alone, at its (advertised) controller listener with a new
    directory id; None without either. Endpoints are on the first controller.listener.names entry."""
    names = config["controller.listener.names"] or ["CONTROLLER"]  # type: ignore[index]
    listener_name = names[0]  # type: ignore[index]
    voters = None
    if initial_controllers is not None:
        try:
            voters = parse_dynamic_voters(initial_controllers, listener_name)
        except VoterError as exc:
            raise StorageError(str(exc)) from None
    if standalone:
        if not config.is_controller:
            raise StorageError("You can only use --standalone on a controller.")
        listener = _advertised_controller_listener(config)
        if listener is None:
            raise StorageError("No controller listeners found.")
        host, port = listener
        directory_id = uuid_from_base64(random_uuid())
        voters = VoterSet.of([VoterNode(config.node_id, directory_id, {listener_name: (host, port)})])
    return voters


def _advertised_controller_listener(config: BrokerConfig) -> tuple[str, int] | None:
    """KafkaConfig.effectiveAdvertisedControllerListeners' first entry; an unset host is "localhost"."""
    own = config.controller_listener
    if own is None:
        return None
    chosen = own
    for listener in config["advertised.listeners"] or []:  # type: ignore[attr-defined]
        if listener.name == own.name:
            chosen = listener
            break
    return (chosen.host or "localhost", chosen.port)


def bootstrap_snapshot_bytes(voters: VoterSet, kraft_version: int, *, now_ms: int) -> bytes:
    """The bootstrap snapshot as Kafka's Formatter.writeDynamicQuorumSnapshot writes it (a
    RecordsSnapshotWriter at offset 0, epoch 0): one control batch of SnapshotHeader (last contained
    log timestamp: now), KRaftVersion and Voters (both record version 0), then the SnapshotFooter
    batch; with kraft.version 0, the header alone."""
    records: list[tuple[ControlType, bytes]] = []
    if kraft_version >= 1:
        records.append((ControlType.KRAFT_VERSION, kraft_version_value(kraft_version)))
        records.append((ControlType.KRAFT_VOTERS, voters_value(voters.to_records())))
    return build_snapshot((), timestamp=now_ms, last_contained_log_timestamp=now_ms, kraft_records=records)


def write_bootstrap_snapshot(
    metadata_dir: Path, voters: VoterSet, kraft_version: int, *, now_ms: int
) -> Path:
    """`<metadata dir>/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`."""
    directory = metadata_dir / CLUSTER_METADATA_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / BOOTSTRAP_SNAPSHOT
    write_atomically(path, bootstrap_snapshot_bytes(voters, kraft_version, now_ms=now_ms))
    return path
