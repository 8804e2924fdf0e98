"""`kcli dump-segment`: kafka-dump-log.sh for every file Kafka writes, as Kafka's text or JSON lines."""

import sys
from enum import StrEnum
from pathlib import Path

import orjson
import typer

from kcli.cli.app import Output, app
from kcli.errors import KcliError


class Decoder(StrEnum):
    string = "string"
    hex = "hex"
    base64 = "base64"
    json = "json"


@app.command("dump-segment")
def dump_segment(
    files: list[Path] = typer.Argument(
        None,
        help="Files to dump: .log, .index, .timeindex, .snapshot, .txnindex, checkpoints.",
        show_default=False,
    ),
    files_csv: str = typer.Option(
        None, "--files", help="Comma-separated files, as kafka-dump-log.sh takes them.", show_default=False
    ),
    print_data_log: bool = typer.Option(
        False, "--print-data-log", help="Print record keys and values (implies --deep-iteration)."
    ),
    deep_iteration: bool = typer.Option(
        False, "--deep-iteration", help="Print one line per record, not only per batch."
    ),
    verify_index_only: bool = typer.Option(
        False, "--verify-index-only", help="Check index files without printing their entries."
    ),
    index_sanity_check: bool = typer.Option(
        False, "--index-sanity-check", help="Only run the index sanity check Kafka runs at start-up."
    ),
    max_bytes: int = typer.Option(
        None, "--max-bytes", min=0, help="Read at most this many bytes of each .log file.", show_default=False
    ),
    max_message_size: int = typer.Option(
        5 * 1024 * 1024, "--max-message-size", min=1, help="Largest batch read when checking index entries."
    ),
    skip_record_metadata: bool = typer.Option(
        False, "--skip-record-metadata", help="Omit offset, timestamp and sizes from record lines."
    ),
    offsets_decoder: bool = typer.Option(
        False, "--offsets-decoder", help="Decode __consumer_offsets records (implies --print-data-log)."
    ),
    transaction_log_decoder: bool = typer.Option(
        False, "--transaction-log-decoder", help="Decode __transaction_state records."
    ),
    cluster_metadata_decoder: bool = typer.Option(
        False, "--cluster-metadata-decoder", help="Decode __cluster_metadata records."
    ),
    key_decoder: Decoder = typer.Option(
        Decoder.string,
        "--key-decoder",
        help="How to print record keys (implies --print-data-log when given).",
    ),
    value_decoder: Decoder = typer.Option(
        Decoder.string, "--value-decoder", help="How to print record values and header values."
    ),
    output: Output = typer.Option(
        Output.text, "--output", "-o", help="Kafka's text lines, or one JSON object per line."
    ),
) -> None:
    """Dump Kafka's on-disk files the way kafka-dump-log.sh does; --output json for machines.

    Exit 0 when every file was read whole and its index entries match its log; 1 when a file holds
    corrupt data, batches that fail their CRC or bytes at its end that are not a whole batch, when an
    index does not match its log, or when a file is not one Kafka writes (kafka-dump-log.sh exits 0
    for these; the lines it prints about them are printed the same); 2 for a usage error or a file
    that cannot be read.
    """
    from kcli.dirlock import warn_if_in_use
    from kcli.output import progress_for
    from ops.dump import Dumper, DumpOptions

    paths = list(files or []) + [Path(p) for p in (files_csv or "").split(",") if p]
    if not paths:
        raise KcliError("give at least one file to dump (positional FILE... or --files a,b).")
    for path in paths:
        if not path.is_file():
            raise KcliError(
                f"{path}: no such file." if not path.exists() else f"{path} is not a regular file."
            )
    warn_if_in_use(paths)
    decoder = next(
        (
            name
            for flag, name in (
                (offsets_decoder, "offsets"),
                (transaction_log_decoder, "transaction-log"),
                (cluster_metadata_decoder, "cluster-metadata"),
            )
            if flag
        ),
        None,
    )
    explicit_decoders = any(a.startswith(("--key-decoder", "--value-decoder")) for a in sys.argv)
    options = DumpOptions(
        print_data_log=print_data_log or explicit_decoders,
        deep_iteration=deep_iteration,
        verify_index_only=verify_index_only,
        index_sanity_check=index_sanity_check,
        max_bytes=max_bytes,
        max_message_size=max_message_size,
        skip_record_metadata=skip_record_metadata,
        internal_decoder=decoder,
        key_decoder=key_decoder.value,
        value_decoder=value_decoder.value,
        json=output is Output.json,
    )
    out = sys.stdout.buffer
    dumper = Dumper(options, out.write, warn=lambda line: print(line, file=sys.stderr), progress=progress_for)
    for path in paths:
        dumper.dump(path)
    if options.json:
        for obj in dumper.summary_objects():
            out.write(orjson.dumps(obj) + b"\n")
    out.flush()
    if not options.json:
        for line in dumper.summary():
            print(line, file=sys.stderr)
    failure = dumper.failure()
    if failure is not None:
        raise KcliError(failure, exit_code=1)
