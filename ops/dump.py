"""kafka-dump-log for every file Kafka writes: Kafka's text lines, or one JSON object per line.

Text output follows `kafka.tools.DumpLogSegments` (3.8+ form) line for line; the error summaries Kafka
prints to stderr after all files come from `Dumper.summary()`. JSON lines carry every header field with
stable camelCase names (Kafka's own), and header values as well as keys.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from formats import _native, checkpoints, snapshot
from formats.checkpoints import uuid_to_base64
from formats.errors import FormatError
from formats.index import OffsetIndex, TimeIndex, format_aborted_txn, read_txn_index
from formats.records import (
    DEFAULT_MAX_UNCOMPRESSED,
    Batch,
    ControlType,
    RecordBatch,
    control_type,
    end_txn_marker,
    read_kraft_version,
    read_leader_change,
    read_voters,
    snapshot_footer,
    snapshot_header,
)
from formats.segment import base_offset_of, walk
from kcli.logdir import SegmentReader

DECODERS = ("string", "hex", "base64", "json")
INTERNAL_DECODERS = ("offsets", "transaction-log", "cluster-metadata")
FLUSH_EVERY_BATCHES = 64
CHECKPOINT_FILES = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


@dataclass(frozen=True)
class DumpOptions:
    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_bytes: int | None = None
    max_message_size: int = 5 * 1024 * 1024
    skip_record_metadata: bool = False
    internal_decoder: str | None = None  # one of INTERNAL_DECODERS
    key_decoder: str = "string"
    value_decoder: str = "string"
    json: bool = False

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.prints_data

    @property
    def prints_data(self) -> bool:
        return self.print_data_log or self.internal_decoder is not None


@dataclass
class _Problems:
    """What Kafka's tool accumulates across files and prints to stderr at the end."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


class Dumper:
    """Dump files one after another; `write` receives output bytes (whole lines with their newlines)."""

    def __init__(
        self,
        options: DumpOptions,
        write: Callable[[bytes], object],
        *,
        warn: Callable[[str], object],
        progress: Callable[[Path, int], Callable[[int], None] | None] | None = None,
    ) -> None:
        self.options = options
        self.write = write
        self.warn = warn
        self.progress = progress
        self.problems = _Problems()
        self.damage: dict[str, str] = {}
        """File -> what is wrong with it: kafka-dump-log.sh prints these and exits 0; kcli exits 1."""
        self.preallocated: set[str] = set()
        """Indexes still preallocated with zeros and holding no entry (a running broker's active segment,
        any after an unclean shutdown): Kafka's tool reads their zero first slot as an entry and reports
        it as a mismatch; the same lines are printed here, but such a file is not damaged."""
        self._key = _value_decoder(options.key_decoder, options.json)
        self._value = _value_decoder(options.value_decoder, options.json)
        fast = ("string", "hex", "base64")
        self._fast_json = (
            (_text_decoders[options.key_decoder], _text_decoders[options.value_decoder])
            if options.key_decoder in fast and options.value_decoder in fast
            else None
        )

    # --- dispatch ------------------------------------------------------------------------------------

    def dump(self, path: Path) -> None:
        self._emit_text(f"Dumping {path}\n")
        self._emit_json({"type": "file", "path": str(path)})
        name = path.name
        suffix = name[name.rfind(".") :] if "." in name else ""
        if suffix in (".log", ".checkpoint"):
            self._dump_log(path)
        elif suffix == ".index":
            self._dump_index(path)
        elif suffix == ".timeindex":
            self._dump_time_index(path)
        elif suffix == ".snapshot":
            self._dump_snapshot(path)
        elif suffix == ".txnindex":
            self._dump_txn_index(path)
        elif name == "leader-epoch-checkpoint":
            self._dump_leader_epochs(path)
        elif name in CHECKPOINT_FILES:
            self._dump_offset_checkpoint(path)
        elif name == "partition.metadata":
            pm = checkpoints.read_partition_metadata(_read_text(path))
            self._line(
                f"version: {pm.version} topicId: {checkpoints.uuid_to_base64(pm.topic_id)}\n",
                {
                    "type": "partition.metadata",
                    "version": pm.version,
                    "topicId": checkpoints.uuid_to_base64(pm.topic_id),
                },
            )
        elif name == "meta.properties":
            mp = checkpoints.read_meta_properties(_read_text(path))
            fields = {k: v for k, v in _fields(mp).items() if v is not None}
            self._line(
                " ".join(f"{k}: {v}" for k, v in fields.items()) + "\n", {"type": "meta.properties", **fields}
            )
        else:
            self.warn(f"Ignoring unknown file {path}")
            self.damage[str(path)] = "it is not a file Kafka writes, so it was not dumped"

    def summary(self) -> list[str]:
        """Kafka's end-of-run error report (stderr lines); in JSON mode the same facts as objects."""
        p = self.problems
        lines: list[str] = []
        for name, pairs in p.index_mismatches.items():
            lines.append(f"Mismatches in :{name}")
            lines += [f"  Index offset: {a}, log offset: {b}" for a, b in reversed(pairs)]
        for name, pairs in p.time_mismatches.items():
            lines.append(f"Found timestamp mismatch in :{name}")
            lines += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in pairs]
        for name, pairs in p.time_out_of_order.items():
            lines.append(f"Found out of order timestamp in :{name}")
            lines += [f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in pairs]
        for pairs in p.time_not_found.values():
            lines.append("The following indexed offsets are not found in the log.")
            lines += [f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs]
        for name, pairs in p.non_consecutive.items():
            lines.append(f"Non-consecutive offsets in {name}")
            lines += [f"  {a} is followed by {b}" for a, b in reversed(pairs)]
        return lines

    def failure(self) -> str | None:
        """One sentence naming each damaged file and what is wrong with it; None when all were sound.

        Index problems are found by the checks summary() reports; offsets that skip are not damage
        (compaction leaves them), so they are reported but do not count."""
        p = self.problems
        for table, what in (
            (p.index_mismatches, "index entries that do not match the log"),
            (p.time_mismatches, "time index timestamps that do not match the log"),
            (p.time_out_of_order, "time index timestamps out of order"),
            (p.time_not_found, "time index offsets not found in the log"),
        ):
            for name in table:
                if name not in self.preallocated:
                    self.damage.setdefault(name, what)
        if not self.damage:
            return None
        items = [f"{name} ({what})" for name, what in self.damage.items()]
        if len(items) == 1:
            name, what = next(iter(self.damage.items()))
            return f"{name}: {what}."
        return f"{len(items)} files are damaged: {'; '.join(items)}."

    def summary_objects(self) -> list[dict]:
        p = self.problems
        out: list[dict] = []
        for kind, table, names in (
            ("indexMismatch", p.index_mismatches, ("indexOffset", "logOffset")),
            ("timeIndexMismatch", p.time_mismatches, ("indexTimestamp", "logTimestamp")),
            ("timeIndexOutOfOrder", p.time_out_of_order, ("indexTimestamp", "previousTimestamp")),
            ("timeIndexOffsetNotFound", p.time_not_found, ("indexOffset", "logOffset")),
            ("nonConsecutiveOffsets", p.non_consecutive, ("offset", "nextOffset")),
        ):
            for name, pairs in table.items():
                out += [
                    {"type": "problem", "kind": kind, "file": name, names[0]: a, names[1]: b}
                    for a, b in pairs
                ]
        return out

    # --- .log ----------------------------------------------------------------------------------------

    def _dump_log(self, path: Path) -> None:
        opts = self.options
        start = base_offset_of(path.name)
        if path.name.endswith(".log"):
            self._line(f"Log starting offset: {start}\n", {"type": "segment", "baseOffset": start})
        elif path.name == "bootstrap.checkpoint":
            self._line("KRaft bootstrap snapshot\n", {"type": "snapshot", "bootstrap": True})
        else:
            offset, epoch = _snapshot_id(path.name)
            self._line(
                f"Snapshot end offset: {offset}, epoch: {epoch}\n",
                {"type": "snapshot", "endOffset": offset, "epoch": epoch},
            )
        on_progress = self.progress(path, path.stat().st_size) if self.progress else None
        reader = SegmentReader(path, max_bytes=opts.max_bytes, on_progress=on_progress)
        render = self._render_json if opts.json else self._render_text
        last = [-1]
        invalid = 0
        for chunk in reader.chunks():
            out: list = []
            for i, batch in enumerate(chunk.batches, 1):
                invalid += batch.crc_valid is False
                render(out, chunk.base, chunk.view, batch, last, path)
                if i % FLUSH_EVERY_BATCHES == 0:  # keep rendered output small: memory flat in file size
                    self._flush(out)
                    out = []
            self._flush(out)
        end = reader.end
        if invalid:
            self.damage[str(path)] = f"{invalid} of its batches fail their CRC"
        if end.problem:
            self.damage[str(path)] = f"corrupt data at position {end.position}: {end.problem.rstrip('.')}"
            self._line(
                f"Found corrupt data at position {end.position} of {path.name}: {end.problem}\n",
                {
                    "type": "problem",
                    "kind": "corrupt",
                    "file": str(path),
                    "position": end.position,
                    "message": end.problem,
                },
            )
        elif end.trailing_bytes > 0 and opts.max_bytes is None:
            self.damage[str(path)] = f"{end.trailing_bytes} bytes at its end are not a whole batch"
            self._line(
                f"Found {end.trailing_bytes} invalid bytes at the end of {path.name}\n",
                {
                    "type": "problem",
                    "kind": "trailingBytes",
                    "file": str(path),
                    "position": end.position,
                    "bytes": end.trailing_bytes,
                },
            )

    def _render_text(
        self, out: list, base: int, view: memoryview, batch: Batch, last: list, path: Path
    ) -> None:
        position = base + batch.position
        if batch.magic >= 2:
            horizon = batch.delete_horizon_ms
            head = (
                f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
                f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
                f"producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: {batch.partition_leader_epoch} "
                f"isTransactional: {_b(batch.is_transactional)} isControl: {_b(batch.is_control)} "
                f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'}"
            )
        else:
            head = f"offset: {batch.last_offset}"
        out.append(
            f"{head} position: {position} {batch.timestamp_type.label}: {batch.max_timestamp} size: {batch.size} "
            f"magic: {batch.magic} compresscodec: {batch.compression.label} crc: {batch.crc} isvalid: {_b(batch.crc_valid)}\n"
        )
        if not self.options.deep:
            return
        records = self._records(batch, view, position, out, path)
        self._continuity(records, last, path)
        opts = self.options
        ts_label = batch.timestamp_type.label
        v2 = batch.magic >= 2
        control = batch.is_control
        base_offset, base_sequence = batch.base_offset, getattr(batch, "base_sequence", -1)
        for record in records:
            prefix = "| "
            parts = []
            if not opts.skip_record_metadata:
                key, value = record.key, record.value
                ts_label_r = ts_label if v2 else record.timestamp_type.label
                parts.append(
                    f"| offset: {record.offset} {ts_label_r}: {record.timestamp} "
                    f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)}"
                )
                prefix = " "
                if v2:
                    keys = ",".join(k for k, _ in record.headers)
                    sequence = (
                        -1
                        if base_sequence < 0
                        else (base_sequence + record.offset - base_offset) % 2147483648
                    )
                    parts.append(f" sequence: {sequence} headerKeys: [{keys}]")
                else:
                    parts.append(f" isValid: {_b(record.crc_valid)} crc: {record.crc}}}")
                if control:
                    parts.append(_control_text(record))
            if opts.prints_data and not control:
                key_text, payload = self._decode(record)
                if key_text is not None:
                    parts.append(f"{prefix}key: {key_text}")
                if payload is not None:
                    parts.append(f" payload: {payload}")
            parts.append("\n")
            out.append("".join(parts))

    def _render_json(
        self, out: list, base: int, view: memoryview, batch: Batch, last: list, path: Path
    ) -> None:
        position = base + batch.position
        out.append(orjson.dumps(_batch_object(batch, position)))
        if not self.options.deep:
            return
        opts = self.options
        if batch.magic >= 2 and not batch.is_control and opts.internal_decoder is None and self._fast_json:
            max_size = max(opts.max_message_size, DEFAULT_MAX_UNCOMPRESSED)
            try:
                lines = _json_record_lines(batch, view, max_size, opts.key_decoder, opts.value_decoder)
            except FormatError:
                pass  # the path below reads the batch again and reports the error as every decoder does
            else:
                if lines:
                    out.append(memoryview(lines)[:-1])  # _flush joins with newlines: no copy to drop the last
                    # Record offsets for the continuity check: the first and last line start with them;
                    # a batch with holes (or a gap before it) is decoded for the per-record pairs.
                    first = int(lines[26 : lines.index(b",", 26)])
                    at = lines.rfind(b"\n", 0, -1) + 1 + 26
                    final = int(lines[at : lines.index(b",", at)])
                    if final - first + 1 != batch.records_count or last[0] not in (-1, first - 1):
                        self._continuity(batch.records(view, max_size), last, path)
                    last[0] = final
                return
        records = self._records(batch, view, position, out, path)
        self._continuity(records, last, path)
        v2 = batch.magic >= 2
        for record in records:
            obj = {"type": "record", "offset": record.offset, "timestamp": record.timestamp}
            if v2:
                obj["sequence"] = batch.sequence_of(record.offset)
            else:
                obj["timestampType"] = record.timestamp_type.label
                obj["isValid"] = record.crc_valid
                obj["crc"] = record.crc
            obj["keySize"] = -1 if record.key is None else len(record.key)
            obj["valueSize"] = -1 if record.value is None else len(record.value)
            if batch.is_control:
                obj["control"] = _control_object(record)
            elif opts.internal_decoder is not None:
                key_text, payload = self._decode(record)
                obj["key"] = _maybe_json(key_text)
                obj["value"] = _maybe_json(payload)
            else:
                obj["key"] = self._key(record.key)
                obj["value"] = self._value(record.value)
            obj["headers"] = [[k, self._value(v)] for k, v in record.headers]
            out.append(orjson.dumps(obj))

    def _records(self, batch: Batch, view: memoryview, position: int, out: list, path: Path) -> list:
        try:
            return batch.records(view, max(self.options.max_message_size, DEFAULT_MAX_UNCOMPRESSED))
        except FormatError as exc:
            message = f"Cannot read the records of the batch at position {position} of {path.name}: {exc}"
            if self.options.json:
                out.append(
                    orjson.dumps(
                        {
                            "type": "problem",
                            "kind": "corruptRecords",
                            "file": str(path),
                            "position": position,
                            "message": str(exc),
                        }
                    )
                )
            else:
                out.append(message + "\n")
            return []

    def _continuity(self, records: list, last: list, path: Path) -> None:
        """Record each offset that does not follow its predecessor; per record only in batches with holes."""
        if not records:
            return
        first, final = records[0][0], records[-1][0]
        pairs = []
        if last[0] != -1 and first != last[0] + 1:
            pairs.append((last[0], first))
        if final - first + 1 != len(records):
            previous = first
            for record in records[1:]:
                if record[0] != previous + 1:
                    pairs.append((previous, record[0]))
                previous = record[0]
        if pairs:
            self.problems.non_consecutive.setdefault(str(path.absolute()), []).extend(pairs)
        last[0] = final

    def _decode(self, record) -> tuple[str | None, str | None]:
        decoder = self.options.internal_decoder
        if decoder is not None:
            from formats import internal  # 43 schema tables: built only when a decoder is asked for
        if decoder == "offsets":
            return internal.dump_offsets_record(record.key, record.value, record.offset)
        if decoder == "transaction-log":
            return internal.dump_txn_record(record.key, record.value, record.offset)
        if decoder == "cluster-metadata":
            return None, internal.dump_metadata_record(record.value, record.offset)
        key = None if record.key is None else _text_decoders[self.options.key_decoder](record.key)
        value = None if record.value is None else _text_decoders[self.options.value_decoder](record.value)
        return key, value

    # --- indexes, snapshots, checkpoints --------------------------------------------------------------

    def _dump_index(self, path: Path) -> None:
        opts = self.options
        base = _required_base_offset(path)
        index = OffsetIndex(path.read_bytes(), base)
        if len(index) == 0:
            self._line(f"{path} is empty.\n", {"type": "index", "entries": 0})
            return
        if opts.index_sanity_check:
            index.sanity_check()
            self._line(
                f"{path} passed sanity check.\n", {"type": "sanityCheck", "file": str(path), "passed": True}
            )
            return
        if len(index.as_trimmed()) == 0:
            self.preallocated.add(str(path.absolute()))
        log = LogFile(_sibling(path, ".log"))
        out: list = []
        for entry in index.entries():
            found = log.last_offset_at(entry.position, opts.max_message_size)
            if found != entry.offset:
                self.problems.index_mismatches.setdefault(str(path.absolute()), []).append(
                    (entry.offset, found)
                )
            if not opts.verify_index_only:
                if opts.json:
                    out.append(
                        orjson.dumps(
                            {"type": "indexEntry", "offset": entry.offset, "position": entry.position}
                        )
                    )
                else:
                    out.append(f"offset: {entry.offset} position: {entry.position}\n")
        self._flush(out)

    def _dump_time_index(self, path: Path) -> None:
        opts = self.options
        base = _required_base_offset(path)
        time_index = TimeIndex(path.read_bytes(), base)
        if len(time_index) and len(time_index.as_trimmed()) == 0:
            self.preallocated.add(str(path.absolute()))
        if opts.index_sanity_check:
            time_index.sanity_check()
            self._line(
                f"{path} passed sanity check.\n", {"type": "sanityCheck", "file": str(path), "passed": True}
            )
            return
        index_path = _sibling(path, ".index")
        offset_index = OffsetIndex(index_path.read_bytes() if index_path.exists() else b"", base)
        log = LogFile(_sibling(path, ".log"))
        name = str(path.absolute())
        previous = -1
        out: list = []
        for entry in time_index.entries():
            start = offset_index.lookup(entry.offset).position
            found = log.first_batch_reaching(start, entry.offset)
            batch = found[1] if found else None
            if batch is None:
                self.problems.time_not_found.setdefault(name, []).append((entry.offset, -1))
            elif batch.last_offset != entry.offset:
                self.problems.time_not_found.setdefault(name, []).append((entry.offset, batch.last_offset))
            else:
                max_ts = max((r.timestamp for r in batch.records(found[0])), default=-1)
                if max_ts != entry.timestamp:
                    self.problems.time_mismatches.setdefault(name, []).append((entry.timestamp, max_ts))
                if previous >= entry.timestamp:
                    self.problems.time_out_of_order.setdefault(name, []).append((entry.timestamp, previous))
            if not opts.verify_index_only:
                if opts.json:
                    out.append(
                        orjson.dumps(
                            {"type": "timeIndexEntry", "timestamp": entry.timestamp, "offset": entry.offset}
                        )
                    )
                else:
                    out.append(f"timestamp: {entry.timestamp} offset: {entry.offset}\n")
            previous = entry.timestamp
        self._flush(out)

    def _dump_snapshot(self, path: Path) -> None:
        try:
            entries = snapshot.read_snapshot(path.read_bytes())
        except FormatError as exc:
            self.warn(str(exc))
            return
        for entry in entries:
            self._line(
                snapshot.format_snapshot_entry(entry) + "\n", {"type": "producerState", **_fields(entry)}
            )

    def _dump_txn_index(self, path: Path) -> None:
        for txn in read_txn_index(path.read_bytes()):
            self._line(format_aborted_txn(txn) + "\n", {"type": "abortedTxn", **_fields(txn)})

    def _dump_leader_epochs(self, path: Path) -> None:
        for entry in checkpoints.read_leader_epoch_checkpoint(_read_text(path)):
            self._line(
                f"epoch: {entry.epoch} startOffset: {entry.start_offset}\n",
                {"type": "leaderEpoch", "epoch": entry.epoch, "startOffset": entry.start_offset},
            )

    def _dump_offset_checkpoint(self, path: Path) -> None:
        for (topic, partition), offset in checkpoints.read_offset_checkpoint(_read_text(path)).items():
            self._line(
                f"topic: {topic} partition: {partition} offset: {offset}\n",
                {"type": "checkpointEntry", "topic": topic, "partition": partition, "offset": offset},
            )

    # --- output ----------------------------------------------------------------------------------------

    def _line(self, text: str, obj: dict) -> None:
        if self.options.json:
            self.write(orjson.dumps(obj) + b"\n")
        else:
            self.write(text.encode())

    def _emit_text(self, text: str) -> None:
        if not self.options.json:
            self.write(text.encode())

    def _emit_json(self, obj: dict) -> None:
        if self.options.json:
            self.write(orjson.dumps(obj) + b"\n")

    def _flush(self, out: list) -> None:
        if not out:
            return
        if self.options.json:
            out.append(b"")
            self.write(b"\n".join(out))
        else:
            self.write("".join(out).encode("utf-8", "surrogateescape"))


# --- helpers -------------------------------------------------------------------------------------------


def _b(value: bool | None) -> str:
    return "true" if value else "false"


_NATIVE_TEXT_MODES = {"string": 0, "hex": 1, "base64": 2}


def _json_record_lines(
    batch: RecordBatch, view: memoryview, max_size: int, key_decoder: str, value_decoder: str
) -> bytes:
    """The JSON lines, each ending in a newline, for the records of a v2 data batch: the hot loop of
    `--deep-iteration --output json`, rendered in C from the record bytes with no object per record.
    Raises FormatError for bad bytes, as `RecordBatch.records` does."""
    return _native.json_records(
        batch.records_data(view, max_size),
        batch.records_count,
        batch.base_offset,
        batch.base_timestamp,
        batch.log_append_time,
        batch.base_sequence,
        _NATIVE_TEXT_MODES[key_decoder],
        _NATIVE_TEXT_MODES[value_decoder],
    )


def _batch_object(batch: Batch, position: int) -> dict:
    obj = {"type": "batch", "position": position}
    if isinstance(batch, RecordBatch):
        obj.update(
            baseOffset=batch.base_offset,
            lastOffset=batch.last_offset,
            count=batch.records_count,
            baseSequence=batch.base_sequence,
            lastSequence=batch.last_sequence,
            producerId=batch.producer_id,
            producerEpoch=batch.producer_epoch,
            partitionLeaderEpoch=batch.partition_leader_epoch,
            isTransactional=batch.is_transactional,
            isControl=batch.is_control,
            deleteHorizonMs=batch.delete_horizon_ms,
            baseTimestamp=batch.base_timestamp,
        )
    else:
        obj.update(offset=batch.offset)
    obj.update(
        timestampType=batch.timestamp_type.label,
        maxTimestamp=batch.max_timestamp,
        size=batch.size,
        magic=batch.magic,
        attributes=batch.attributes,
        compressCodec=batch.compression.label,
        crc=batch.crc,
        isValid=bool(batch.crc_valid),
    )
    return obj


def _control_text(record) -> str:
    kind = control_type(record.key)
    if kind in (ControlType.COMMIT, ControlType.ABORT):
        marker = end_txn_marker(record.value)
        return f" endTxnMarker: {kind.name} coordinatorEpoch: {marker.coordinator_epoch}"
    if kind in _SNAPSHOT_RECORD_NAMES:
        return (
            f" {_SNAPSHOT_RECORD_NAMES[kind]} {orjson.dumps(_snapshot_record_fields(kind, record)).decode()}"
        )
    type_id = int.from_bytes(record.key[2:4], "big", signed=True)
    return f" controlType: {kind.name}({type_id})"


def _control_object(record) -> dict:
    kind = control_type(record.key)
    obj: dict = {"type": kind.name}
    if kind in (ControlType.COMMIT, ControlType.ABORT):
        obj["coordinatorEpoch"] = end_txn_marker(record.value).coordinator_epoch
    elif kind in _SNAPSHOT_RECORD_NAMES:
        obj.update(_snapshot_record_fields(kind, record))
    return obj


_SNAPSHOT_RECORD_NAMES = {
    ControlType.LEADER_CHANGE: "LeaderChange:",  # kafka-dump-log writes this one with a colon, the others without
    ControlType.SNAPSHOT_HEADER: "SnapshotHeader",
    ControlType.SNAPSHOT_FOOTER: "SnapshotFooter",
    ControlType.KRAFT_VERSION: "KRaftVersion",
    ControlType.KRAFT_VOTERS: "KRaftVoters",
}


def _snapshot_record_fields(kind: ControlType, record) -> dict:
    """A SnapshotHeader/Footer record's fields as Kafka's JSON converters name them (kafka-dump-log prints those)."""
    if kind is ControlType.SNAPSHOT_HEADER:
        header = snapshot_header(record.value)
        return {"version": header.version, "lastContainedLogTimestamp": header.last_contained_log_timestamp}
    if kind is ControlType.LEADER_CHANGE:  # LeaderChangeMessageJsonConverter ("version" is a field)
        value = bytes(record.value or b"")
        leader_id, voters, granting = read_leader_change(value)
        return {
            "version": int.from_bytes(value[:2], "big", signed=True),
            "leaderId": leader_id,
            "voters": [{"voterId": v} for v in voters],
            "grantingVoters": [{"voterId": v} for v in granting],
        }
    if kind is ControlType.KRAFT_VERSION:  # KRaftVersionRecordJsonConverter
        version, level = read_kraft_version(record.value or b"")
        return {"version": version, "kRaftVersion": level}
    if kind is ControlType.KRAFT_VOTERS:  # VotersRecordJsonConverter
        version, voters = read_voters(record.value or b"")
        return {
            "version": version,
            "voters": [
                {
                    "voterId": voter.voter_id,
                    "voterDirectoryId": uuid_to_base64(uuid.UUID(bytes=voter.directory_id)),
                    "endpoints": [{"name": n, "host": h, "port": p} for n, h, p in voter.endpoints],
                    "kRaftVersionFeature": {
                        "minSupportedVersion": voter.min_kraft_version,
                        "maxSupportedVersion": voter.max_kraft_version,
                    },
                }
                for voter in voters
            ],
        }
    return {"version": snapshot_footer(record.value)}


def _utf8(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _json_text(data: bytes) -> str:
    try:
        return orjson.dumps(orjson.loads(data)).decode()
    except orjson.JSONDecodeError:
        return _utf8(data)


_text_decoders: dict[str, Callable[[bytes], str]] = {
    "string": _utf8,
    "hex": bytes.hex,
    "base64": lambda data: base64.b64encode(data).decode(),
    "json": _json_text,
}


def _value_decoder(name: str, json_mode: bool) -> Callable[[bytes | None], object]:
    """For JSON output: bytes -> a JSON value (the json decoder embeds the document itself)."""
    if name not in DECODERS:
        raise ValueError(f"unknown decoder {name!r}; choose one of {', '.join(DECODERS)}")
    text = _text_decoders[name]
    if name == "json" and json_mode:

        def embed(data: bytes | None) -> object:
            if data is None:
                return None
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError:
                return _utf8(data)

        return embed
    return lambda data: None if data is None else text(data)


def _maybe_json(text: str | None) -> object:
    if text is None or not text.startswith("{"):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _fields(value) -> dict:
    items = value._asdict() if hasattr(value, "_asdict") else dataclasses.asdict(value)
    return {_camel(k): v for k, v in items.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _snapshot_id(name: str) -> tuple[int, int]:
    stem = name[: -len(".checkpoint")]
    try:
        offset, epoch = stem.split("-")
        return int(offset), int(epoch)
    except ValueError:
        raise FormatError(f"{name} is not named <20-digit offset>-<10-digit epoch>.checkpoint") from None


def _required_base_offset(path: Path) -> int:
    base = base_offset_of(path.name)
    if base is None:
        raise FormatError(f"{path.name} is not named after a 20-digit base offset")
    return base


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.split(".")[0] + suffix)


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


class LogFile:
    """Positional, bounded reads of a .log for index checks (which jump around the file)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def last_offset_at(self, position: int, max_message_size: int) -> int:
        """Last offset of the batch at `position`, read as Kafka does (a slice of max_message_size); -1 if
        none, as for a position a damaged index gives outside the file."""
        with open(self.path, "rb") as f:
            if not 0 <= position < os.fstat(f.fileno()).st_size:
                return -1
            data = os.pread(f.fileno(), max_message_size, position)
        result = walk(data, check_crc=False)
        return result.batches[0].last_offset if result.batches else -1

    def first_batch_reaching(self, position: int, offset: int) -> tuple[memoryview, Batch] | None:
        """The first batch from `position` on whose last offset is >= `offset`, with bytes holding it;
        None when there is none, as from a position a damaged index gives outside the file."""
        if not 0 <= position < self.path.stat().st_size:
            return None
        reader = SegmentReader(self.path, check_crc=False)
        for chunk in reader.chunks(position):
            for batch in chunk.batches:
                if batch.last_offset >= offset:
                    start = batch.position
                    return memoryview(bytes(chunk.view[start : start + batch.size])), batch._replace(
                        position=0
                    )
        return None
