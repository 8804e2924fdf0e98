"""`kcli replay`: put records from segment files back into a topic, on our broker or any Kafka cluster."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import orjson
import typer

from kcli.cli.app import Output, app
from kcli.errors import KcliError


class Partitioner(StrEnum):
    same = "same"
    key = "key"
    round_robin = "round-robin"


class Mode(StrEnum):
    auto = "auto"
    raw = "raw"
    record = "record"


class Compression(StrEnum):
    none = "none"
    gzip = "gzip"
    snappy = "snappy"
    lz4 = "lz4"
    zstd = "zstd"


@app.command("replay")
def replay(
    source: Path = typer.Argument(
        ...,
        help="A segment (.log), a partition dir, a log dir, or an archive holding log dirs.",
        show_default=False,
    ),
    bootstrap: str = typer.Option(
        ..., "--bootstrap-server", "-b", metavar="HOST:PORT[,...]", help="Brokers of the destination cluster."
    ),
    command_config: Path = typer.Option(
        None,
        "--producer.config",
        "--command-config",
        metavar="FILE",
        help="Producer properties, as kafka-console-producer.sh --producer.config takes them: "
        "security.protocol, ssl.*, sasl.* (Kafka's or librdkafka's names), client.id, request.timeout.ms; "
        "enable.idempotence and compression.type where --idempotence and --compression are not given.",
        show_default=False,
    ),
    topic: str = typer.Option(
        ...,
        "--topic",
        "-t",
        help="Destination topic; created when missing (see --create-topic).",
        show_default=False,
    ),
    create_topic: bool = typer.Option(
        True,
        "--create-topic/--no-create-topic",
        help="Create a missing destination with CreateTopics: as many partitions as the highest source "
        "partition + 1, the broker's default replication factor. --no-create-topic refuses instead.",
    ),
    replication_factor: int = typer.Option(
        None,
        "--replication-factor",
        min=1,
        help="Replication factor of a created destination [default: the broker's default.replication.factor].",
        show_default=False,
    ),
    topic_config: list[str] = typer.Option(
        None,
        "--config",
        metavar="KEY=VALUE",
        help="A config override of a created destination (retention.ms=-1, ...); repeatable.",
        show_default=False,
    ),
    source_topic: str = typer.Option(
        None, "--source-topic", help="The topic to read when SOURCE holds several.", show_default=False
    ),
    partition: list[int] = typer.Option(
        None, "--partition", "-p", help="Only this source partition (repeatable).", show_default=False
    ),
    from_offset: int = typer.Option(
        None, "--from-offset", min=0, help="First source offset to replay.", show_default=False
    ),
    to_offset: int = typer.Option(
        None, "--to-offset", min=0, help="Stop before this source offset (exclusive).", show_default=False
    ),
    from_time: str = typer.Option(
        None,
        "--from-time",
        help="Records timestamped at or after this: epoch milliseconds or ISO-8601 (2024-05-01T12:00:00Z).",
        show_default=False,
    ),
    to_time: str = typer.Option(
        None, "--to-time", help="Records timestamped before this (same forms).", show_default=False
    ),
    key_regex: str = typer.Option(
        None,
        "--key-regex",
        help="Only records whose key contains a match (Python regex on the key bytes; null keys never match).",
        show_default=False,
    ),
    committed_only: bool = typer.Option(
        False, "--committed-only", help="Leave out records of aborted (and unfinished) transactions."
    ),
    partitioner: Partitioner = typer.Option(
        Partitioner.same,
        "--partitioner",
        help="same: partition n to n; key: the Java producer's murmur2 of the key (null keys round-robin); "
        "round-robin: whole batches in raw mode, records in record mode.",
    ),
    mode: Mode = typer.Option(
        Mode.auto,
        "--mode",
        help="raw: re-send whole batches as they are; record: decode and rebuild every batch; "
        "auto: raw wherever a batch allows it.",
    ),
    compression: Compression = typer.Option(
        None,
        "--compression",
        help="Codec of rebuilt batches [default: the source batch's codec].",
        show_default=False,
    ),
    idempotence: bool = typer.Option(
        None,
        "--idempotence/--no-idempotence",
        help="Idempotent producer so retries never duplicate [default: on when the destination supports "
        "it, with a warning when it does not; --idempotence makes that an error].",
        show_default=False,
    ),
    rate: str = typer.Option(
        None,
        "--rate",
        metavar="BYTES/S",
        help="Send at most this many record-batch bytes per second: 5000000, 20MB, 64MiB.",
        show_default=False,
    ),
    batch_bytes: int = typer.Option(
        512 * 1024, "--batch-bytes", min=1, help="Record mode closes a batch at this many record bytes."
    ),
    checkpoint: Path = typer.Option(
        None,
        "--checkpoint",
        help="Checkpoint file: written as batches are acknowledged, read to resume an interrupted replay.",
        show_default=False,
    ),
    offset_map: Path = typer.Option(
        None,
        "--offset-map",
        help="Write source (partition, offset) -> destination (partition, offset) runs: JSON lines, or "
        "Parquet for a .parquet path (needs pyarrow).",
        show_default=False,
    ),
    skip_corrupt: bool = typer.Option(
        False,
        "--skip-corrupt",
        help="Skip corrupt batches (and the rest of a segment that cannot be framed).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the batches that would be sent; send nothing."
    ),
    output: Output = typer.Option(
        Output.text, "--output", "-o", help="Text lines, or one JSON object per line."
    ),
) -> None:
    """Replay records from segment files into a topic, with keys, values, headers and timestamps kept.

    A destination topic that does not exist is created first (and that is said on stderr), unless
    --no-create-topic; an existing one must have enough partitions for --partitioner same.

    Works against Apache Kafka as well as kcli's broker (standard Produce API, one connection per leader).
    """
    from formats.compression import Codec
    from ops.configs import parse_key_values
    from ops.groups import parse_datetime
    from ops.replay import Mapping, ReplayOptions
    from ops.replay import Mode as ReplayMode
    from ops.replay import replay as run_replay

    if not create_topic and (replication_factor is not None or topic_config):
        raise KcliError(
            "--replication-factor and --config apply to a topic replay creates: drop --no-create-topic."
        )
    from kcli.cli.admin import client_config
    from kcli.dirlock import warn_if_in_use

    warn_if_in_use([source])
    config = client_config(command_config, role="producer")
    if idempotence is None and "enable.idempotence" in config.producer:
        idempotence = config.producer["enable.idempotence"] == "true"
    if compression is None and "compression.type" in config.producer:
        compression = Compression(config.producer["compression.type"])
    as_json = output is Output.json
    options = ReplayOptions(
        source=source,
        topic=topic,
        bootstrap_servers=bootstrap,
        source_topic=source_topic,
        partitions=tuple(partition or ()),
        from_offset=from_offset,
        to_offset=to_offset,
        from_time=None if from_time is None else _time(from_time, parse_datetime),
        to_time=None if to_time is None else _time(to_time, parse_datetime),
        key_regex=_regex(key_regex),
        committed_only=committed_only,
        mapping=Mapping(partitioner.value),
        mode=ReplayMode(mode.value),
        compression=None if compression is None else Codec[compression.value.upper()],
        idempotence=idempotence,
        rate=None if rate is None else parse_rate(rate),
        dry_run=dry_run,
        checkpoint=checkpoint,
        offset_map=offset_map,
        skip_corrupt=skip_corrupt,
        batch_bytes=batch_bytes,
        create_topic=create_topic,
        replication_factor=-1 if replication_factor is None else replication_factor,
        topic_configs=tuple(parse_key_values(topic_config or (), "--config").items()),
        request_timeout=config.timeout_s("request.timeout.ms", 30.0),
        connect_timeout=config.timeout_s("socket.connection.setup.timeout.ms", 10.0),
        client_id=config.client_id or "kcli-replay",
        security=config.security,
    )
    out = sys.stdout

    def planned(batch) -> None:
        out.write(orjson.dumps(batch.to_json()).decode() + "\n" if as_json else f"{batch}\n")

    progress = _Progress(source.name)
    try:
        stats = run_replay(
            options,
            warn=progress.warn,
            on_progress=progress.update if progress.enabled else None,
            on_planned=planned if dry_run else None,
        )
    finally:
        progress.stop()
    if as_json:
        out.write(orjson.dumps({"type": "summary", "dryRun": dry_run, **stats.to_json()}).decode() + "\n")
    else:
        out.write(_summary_line(stats, topic, dry_run) + "\n")
    out.flush()


def parse_rate(text: str) -> float:
    """Bytes per second: a number with an optional k/M/G (powers of 1000) or KiB/MiB/GiB suffix."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]i?)?[bB]?(?:/s)?\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise KcliError(f"--rate {text!r} is not a positive number of bytes per second (e.g. 20MB or 64MiB).")
    unit = (match.group(2) or "").lower()
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}[unit]
    return float(match.group(1)) * scale


def _time(text: str, parse_datetime: Callable[[str], int]) -> int:
    return int(text) if text.strip().lstrip("-").isdecimal() else parse_datetime(text)  # "²" is no int


def _regex(pattern: str | None) -> str | None:
    if pattern is None:
        return None
    try:
        re.compile(pattern.encode())
    except re.error as e:
        raise KcliError(f"--key-regex {pattern!r} is not a regular expression: {e}.") from None
    return pattern


def _summary_line(stats, topic: str, dry_run: bool) -> str:
    verb = "would replay" if dry_run else "replayed"
    rate = stats.bytes / stats.elapsed / 1e6 if stats.elapsed else 0.0
    parts = [
        f"{verb} {stats.records} records ({stats.bytes} bytes) into {topic} in {stats.elapsed:.2f} s "
        f"({rate:.1f} MB/s): {stats.raw_batches} raw batches, {stats.rebuilt_batches} rebuilt"
    ]
    if not dry_run:
        parts.append("idempotent" if stats.idempotent else "not idempotent")
    for count, what in (
        (stats.resumed_records, "records already replayed"),
        (stats.filtered_records, "records filtered out"),
        (stats.aborted_records, "records of aborted transactions left out"),
        (stats.control_batches, "control batches left out"),
        (stats.corrupt_batches, "corrupt regions skipped"),
    ):
        if count:
            parts.append(f"{count} {what}")
    return "; ".join(parts) + "."


class _Progress:
    """Records, bytes and ETA on stderr, for terminals only."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self.bar = None
        self.task = None

    def update(self, done: int, total: int, records: int) -> None:
        if self.bar is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                TextColumn("{task.fields[records]} records"),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                transient=True,
                console=Console(stderr=True, no_color="NO_COLOR" in os.environ),
            )
            self.task = self.bar.add_task(self.name, total=max(total, 1), records=0)
            self.bar.start()
        self.bar.update(self.task, completed=done, records=records)

    def warn(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
