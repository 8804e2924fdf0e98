"""`kcli recover logdir`: Kafka's unclean-start recovery of a stopped broker's log dir, planned and
reported first, done with --execute, every removed byte kept in a quarantine."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import orjson
import typer

from kcli.cli.app import Output, app
from kcli.errors import KcliError

recover_app = typer.Typer(
    help="Recover what an unclean shutdown left: log dirs of a stopped broker (Kafka's or kcli's).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(recover_app, name="recover")

CHANGES_NEEDED = 3
"""Exit status of a dry run that found changes to make."""


@recover_app.command("logdir")
def logdir(
    path: Path = typer.Argument(
        ...,
        help="The log dir of a stopped broker (the directory holding topic-partition dirs).",
        show_default=False,
    ),
    execute: bool = typer.Option(
        False, "--execute", help="Make the changes; without it nothing is written (a dry run)."
    ),
    quarantine: Path = typer.Option(
        None,
        "--quarantine",
        help="Where removed bytes, replaced files and the journal go; must be outside PATH "
        "[default: PATH.quarantine-<UTC time> beside PATH].",
        show_default=False,
    ),
    index_interval_bytes: int = typer.Option(
        4096, "--index-interval-bytes", min=1, help="index.interval.bytes of rebuilt indexes."
    ),
    output: Output = typer.Option(
        Output.text, "--output", "-o", help="One line per change, or one JSON object per line."
    ),
) -> int:
    """Do what Kafka's log loader does at an unclean start, explicitly: validate every segment, cut torn
    or corrupt tails (and drop later segments), rebuild bad or missing indexes, drop producer snapshots
    and leader-epoch entries past the recovered end, lower offset checkpoints above it, and clear the
    .cleaned, .swap and .deleted files of interrupted compactions and deletes.

    Dry run by default: each change is printed with its file, byte range, offsets, records and
    producers. With --execute, cut bytes become segments in the quarantine (kcli replay
    QUARANTINE/topic-N puts them back), every deleted or rewritten file is copied there first, and
    journal.jsonl there records each action before it is done; kcli verify then runs on PATH.

    Exit 0 when there is nothing to do (or everything was done and verify is clean), 3 when a dry run
    found changes to make, 1 when verify still finds errors after --execute, 2 for a usage error.
    """
    from ops.recover import Executor, RecoverError, plan_log_dir
    from ops.verify import Finding, NotKafkaPath, Verifier, VerifyOptions, resolve

    try:
        target = resolve(path)
    except NotKafkaPath as e:
        raise KcliError(str(e)) from None
    if target.kind != "log_dir":
        raise KcliError(
            f"{path} is a {target.kind.replace('_', ' ')}, not a log dir: give the directory that holds it."
        )
    out = sys.stdout
    as_json = output is Output.json

    def verify(log_dir: Path) -> list[Finding]:
        found: list[Finding] = []
        Verifier(VerifyOptions(), found.append).run([resolve(log_dir)])
        return found

    def write(obj) -> None:
        out.write(orjson.dumps(obj.to_json()).decode() + "\n" if as_json else f"{obj}\n")

    plan = plan_log_dir(path, index_interval_bytes=index_interval_bytes, verify_findings=verify)
    summary = plan.summary()
    if not execute:
        for change in plan.changes():
            write(change)
        _summary(out, as_json, summary, None)
        return 0 if plan.empty else CHANGES_NEEDED
    if plan.empty:
        _summary(out, as_json, summary, None)
        return 0
    if quarantine is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        quarantine = path.resolve().with_name(f"{path.resolve().name}.quarantine-{stamp}")
    executor = Executor(plan, quarantine, on_change=write)
    try:
        executor.run()
    except RecoverError as e:
        raise KcliError(str(e)) from None
    remaining = [f for f in verify(path) if f.severity == "error"]
    for finding in remaining:
        out.write(orjson.dumps(finding.to_json()).decode() + "\n" if as_json else f"still: {finding}\n")
    _summary(out, as_json, summary, quarantine, len(remaining))
    return 1 if remaining else 0


def _summary(out, as_json: bool, summary: dict, quarantine: Path | None, remaining: int = 0) -> None:
    done = quarantine is not None
    if as_json:
        extra = {"executed": done, "quarantine": str(quarantine) if done else None}
        if done:
            extra["verifyErrors"] = remaining
        out.write(orjson.dumps({**summary, **extra}).decode() + "\n")
    else:
        verb = "made" if done else "to make"
        line = (
            f"{summary['partitions']} partitions: {summary['changes']} changes {verb} in "
            f"{summary['partitionsChanged']} partitions, {summary['bytesRemoved']} bytes "
            f"({summary['recordsRemoved']} records) {'moved to ' + str(quarantine) if done else 'to remove'}"
        )
        if done:
            line += f"; kcli verify: {remaining} errors" if remaining else "; kcli verify: clean"
        out.write(line + ".\n")
    out.flush()
