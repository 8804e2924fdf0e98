"""`kcli verify`: check a segment, a partition dir or a log dir; findings as text lines or JSON lines."""

import sys
from pathlib import Path

import orjson
import typer

from kcli.cli.app import Output, app
from kcli.errors import KcliError


@app.command("verify")
def verify(
    paths: list[Path] = typer.Argument(
        None, help="Segments (.log), partition directories or log directories.", show_default=False
    ),
    deep: bool = typer.Option(
        False, "--deep", help="Decode every record (structure, offsets, timestamps), not only batch headers."
    ),
    compacted: list[str] = typer.Option(
        None,
        "--compacted",
        metavar="TOPIC",
        help="A topic with cleanup.policy=compact, so its offset gaps are compaction (repeatable).",
        show_default=False,
    ),
    output: Output = typer.Option(
        Output.text, "--output", "-o", help="One line per finding, or one JSON object per line."
    ),
) -> int:
    """Check every file Kafka keeps for a segment, partition or log dir: CRCs, offsets, indexes, epochs.

    Exit 0 when clean (warnings alone included), 1 when errors were found, 2 for a usage error.
    """
    from kcli.dirlock import warn_if_in_use
    from kcli.output import progress_for
    from ops.verify import Finding, NotKafkaPath, Verifier, VerifyOptions, resolve

    if not paths:
        raise KcliError("give at least one segment, partition directory or log directory to verify.")
    try:
        targets = [resolve(path) for path in paths]
    except NotKafkaPath as e:
        raise KcliError(str(e)) from None
    warn_if_in_use(paths)
    out = sys.stdout
    as_json = output is Output.json

    def report(finding: Finding) -> None:
        out.write(orjson.dumps(finding.to_json()).decode() + "\n" if as_json else f"{finding}\n")

    options = VerifyOptions(deep=deep, compacted_topics=frozenset(compacted or ()))
    summary = Verifier(options, report, progress=progress_for).run(targets)
    if as_json:
        out.write(orjson.dumps(summary.to_json(deep)).decode() + "\n")
    else:
        out.write(summary.line(deep) + "\n")
    out.flush()
    return summary.exit_code
