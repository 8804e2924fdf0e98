"""`kcli spark-audit gaps|duplicates|lag|all ARCHIVE`: PySpark audits of segment archives; pyspark loads lazily."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import click
import orjson
import typer

from kcli.cli.app import app
from kcli.errors import KcliError

spark_audit = typer.Typer(
    name="spark-audit",
    help="Audit segment archives with PySpark: offset gaps, duplicate records, consumer lag.",
    no_args_is_help=True,
)
app.add_typer(spark_audit)


class Output(NamedTuple):
    """Where the report goes: a table on the terminal, JSON lines (stdout or a file), or a Parquet file."""

    kind: str  # table, json or parquet
    path: Path | None = None


class OutputType(click.ParamType):
    """`table`, `json`, `json:PATH` or `parquet:PATH`: one option value, so typer parses it unambiguously."""

    name = "table|json|parquet:PATH"

    def convert(self, value, param, ctx) -> Output:
        if isinstance(value, Output):
            return value
        kind, sep, path = str(value).partition(":")
        if kind == "table" and not sep:
            return Output("table")
        if kind == "json":
            return Output("json", Path(path) if path else None)
        if kind == "parquet" and path:
            return Output("parquet", Path(path))
        if kind == "parquet":
            self.fail("parquet needs the file to write: --output parquet:PATH.", param, ctx)
        self.fail(f"{value!r} is not table, json, json:PATH or parquet:PATH.", param, ctx)


def _archive() -> str:
    return typer.Argument(
        ...,
        metavar="ARCHIVE",
        help="Archive root: a tree of Kafka log dirs (copied, backed up or downloaded); a local path or "
        "an fsspec URL (s3://bucket/backup, zip://::file:///backups/broker-1.zip, ...).",
        show_default=False,
    )


def _run(
    job: str,
    archive: str,
    master: str,
    conf: list[str] | None,
    output: Output,
    compacted: list[str] | None,
    no_crc: bool,
    window_offsets: int = 1000,
    window_ms: int | None = None,
    at: str | None = None,
) -> int:
    from ops.spark.archive import archive_root, check_archive, is_url
    from ops.spark.checks import AuditOptions

    if not archive.strip():  # Path("") is the current directory
        raise KcliError("give the archive: a directory of segments or an fsspec URL.")
    root = archive_root(archive)
    if not is_url(root) and not Path(root).is_dir():
        raise KcliError(f"{archive}: no such directory.")
    check_archive(root)  # before a Spark session starts (seconds), not after
    if not is_url(root):
        from kcli.dirlock import warn_if_in_use

        warn_if_in_use([Path(root)])
    settings = {}
    for item in conf or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise KcliError(f"--conf takes KEY=VALUE, not {item!r}.")
        settings[key] = value
    options = AuditOptions(
        check_crc=not no_crc,
        window_offsets=window_offsets,
        window_ms=window_ms,
        at=_parse_time(at) if at else None,
    )
    compacted_topics = tuple(compacted or ())
    from ops.spark import jobs

    if jobs.is_local(master):
        records, exit_code = _run_local(job, root, master, settings, options, compacted_topics)
    else:
        args = {
            "job": job,
            "archive": root,
            "options": options.to_json(),
            "compacted": list(compacted_topics),
        }
        try:
            result = jobs.submit(master, settings, args)
        except RuntimeError as e:
            raise KcliError(str(e), exit_code=2) from None
        records, exit_code = result["records"], result["exit_code"]
    _render(records, output)
    return exit_code


def _run_local(job, archive, master, settings, options, compacted_topics) -> tuple[list[dict], int]:
    from ops.spark import jobs

    progress, stop = _progress()
    spark = jobs.session(master, settings)
    try:
        report = jobs.run(
            spark, job, archive, options=options, compacted_topics=compacted_topics, progress=progress
        )
    finally:
        stop()
        spark.stop()
    return report.to_json(), report.exit_code


def _progress():
    """A rich bar of Spark's tasks on stderr when it is a terminal; else nothing."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress

    from kcli.output import stderr_console

    bar = Progress("scanning", BarColumn(), MofNCompleteColumn(), transient=True, console=stderr_console())
    task = bar.add_task("scan", total=None)
    bar.start()

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar.stop


def _render(records: list[dict], output: Output) -> None:
    """JSON lines to stdout alone; otherwise the table, after writing the file that was asked for."""
    if output.kind == "json":
        lines = "".join(orjson.dumps(record).decode() + "\n" for record in records)
        if output.path is None:
            sys.stdout.write(lines)
            return
        output.path.write_text(lines)
    if output.kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [{**r, "details": orjson.dumps(r).decode()} for r in records if r["type"] != "summary"]
        columns = [
            "type",
            "job",
            "kind",
            "severity",
            "topic",
            "partition",
            "first_offset",
            "last_offset",
            "message",
        ]
        table = (
            pa.table({c: [r.get(c) for r in rows] for c in columns + ["details"]}) if rows else pa.table({})
        )
        pq.write_table(table, output.path)
    _table(records)


def _table(records: list[dict]) -> None:
    import os

    from rich.console import Console
    from rich.table import Table

    console = Console(no_color="NO_COLOR" in os.environ, width=None if sys.stdout.isatty() else 160)
    findings = [r for r in records if r["type"] == "finding"]
    lag = [r for r in records if r["type"] == "lag"]
    summary = next(r for r in records if r["type"] == "summary")
    if findings:
        table = Table("partition", "kind", "offsets", "where", "message", title="findings")
        for f in findings:
            offsets = "" if f["first_offset"] is None else f"{f['first_offset']}..{f['last_offset']}"
            where = f.get("position", "")
            if f.get("after"):
                where = f"{_file_name(f['after']['file'])}:{f['after']['position']}"
            elif f.get("file"):
                where = f"{_file_name(f['file'])}:{f['position']}"
            table.add_row(f"{f['topic']}-{f['partition']}", f["kind"], offsets, str(where), f["message"])
        console.print(table)
    if lag:
        table = Table("group", "partition", "committed", "end offset", "lag", "lag (s)", title="consumer lag")
        for r in lag:
            table.add_row(
                r["group"], f"{r['topic']}-{r['partition']}", str(r["committed"]), str(r["end_offset"]),
                str(r["lag"]), "" if r["lag_seconds"] is None else f"{r['lag_seconds']:.3f}",
            )  # fmt: skip
        console.print(table)
    s = summary
    console.print(
        f"{s['job']}: {s['segments']} segments, {s['ranges']} ranges, {s['batches']} batches, {s['bytes']} bytes "
        f"in {s['seconds']} s: {s['findings']} findings ({s['errors']} errors)"
    )


def _file_name(location: str) -> str:
    """The segment's file name, from a path or an fsspec URL (chained ones too: zip://a/b.log::file://...)."""
    return location.partition("::")[0].rstrip("/").rsplit("/", 1)[-1]


def _parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date-time (no zone: local time)."""
    if text.lstrip("-").isdecimal():  # what int() reads; "²" is a digit it refuses
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise KcliError(
            f"--at takes milliseconds since the epoch or an ISO-8601 time, not {text!r}."
        ) from None


_MASTER = typer.Option(
    "local[*]", "--master", help="Spark master: local[N], spark://HOST:PORT, yarn, k8s://..."
)
_CONF = typer.Option(
    None, "--conf", metavar="KEY=VALUE", help="A Spark setting (repeatable).", show_default=False
)
_OUTPUT = typer.Option(
    "table",
    "--output",
    "-o",
    click_type=OutputType(),
    help="table (a summary on the terminal), json (JSON lines on stdout), json:PATH or parquet:PATH "
    "(a file, and the table on the terminal).",
)
_COMPACTED = typer.Option(
    None,
    "--compacted",
    metavar="TOPIC",
    help="A topic with cleanup.policy=compact (repeatable).",
    show_default=False,
)
_NO_CRC = typer.Option(False, "--no-crc", help="Skip CRC checks (faster, finds less).")

_WINDOW_OFFSETS = typer.Option(
    1000, "--window-offsets", help="Content copies at most this many offsets apart."
)
_WINDOW_MS = typer.Option(None, "--window-ms", help="... or at most this many ms apart.", show_default=False)
_AT = typer.Option(
    None, "--at", metavar="TIMESTAMP", help="Lag as it stood then (ms or ISO-8601).", show_default=False
)


@spark_audit.command("gaps")
def gaps(
    archive: str = _archive(),
    master: str = _MASTER,
    conf: list[str] = _CONF,
    output: Output = _OUTPUT,
    compacted: list[str] = _COMPACTED,
    no_crc: bool = _NO_CRC,
) -> int:
    """Offset ranges missing per partition, classified (compaction, retention head, transaction markers,
    unexplained), with the segment and byte position on both sides; corrupt batches too.

    Exit 0 when nothing needs attention (explained gaps alone included), 1 when findings exist.
    """
    return _run("gaps", archive, master, conf, output, compacted, no_crc)


@spark_audit.command("duplicates")
def duplicates(
    archive: str = _archive(),
    master: str = _MASTER,
    conf: list[str] = _CONF,
    output: Output = _OUTPUT,
    compacted: list[str] = _COMPACTED,
    no_crc: bool = _NO_CRC,
    window_offsets: int = _WINDOW_OFFSETS,
    window_ms: int = _WINDOW_MS,
) -> int:
    """Idempotent-producer duplicates (same producer, epoch and sequences at other offsets) and content
    duplicates (same key and value within a window), with the offsets of every copy.

    Exit 1 when findings exist.
    """
    return _run("duplicates", archive, master, conf, output, compacted, no_crc, window_offsets, window_ms)


@spark_audit.command("lag")
def lag(
    archive: str = _archive(),
    master: str = _MASTER,
    conf: list[str] = _CONF,
    output: Output = _OUTPUT,
    compacted: list[str] = _COMPACTED,
    no_crc: bool = _NO_CRC,
    at: str = _AT,
) -> int:
    """Committed offsets per group from the archived __consumer_offsets against each partition's end,
    in records and seconds; --at gives the lag at any past moment.

    Exit 1 when some group lags.
    """
    return _run("lag", archive, master, conf, output, compacted, no_crc, at=at)


@spark_audit.command("all")
def all_jobs(
    archive: str = _archive(),
    master: str = _MASTER,
    conf: list[str] = _CONF,
    output: Output = _OUTPUT,
    compacted: list[str] = _COMPACTED,
    no_crc: bool = _NO_CRC,
    window_offsets: int = _WINDOW_OFFSETS,
    window_ms: int = _WINDOW_MS,
    at: str = _AT,
) -> int:
    """Gaps, duplicates and lag in one pass over the data. Exit 1 when findings exist."""
    return _run("all", archive, master, conf, output, compacted, no_crc, window_offsets, window_ms, at)
