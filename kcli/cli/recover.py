"""`kcli recover`: Kafka's unclean-start recovery of a stopped broker's log dir (`logdir`), and the
unclean election of partitions that lost their whole ISR (`partitions`); both planned and reported
first, done with --execute, every removed byte or record kept in a quarantine."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import orjson
import typer

from kcli.cli.admin import BOOTSTRAP, COMMAND_CONFIG, DEFAULT_BOOTSTRAP, client_config
from kcli.cli.app import Output, app
from kcli.errors import KcliError

recover_app = typer.Typer(
    help="Recover what an unclean shutdown left: log dirs of a stopped broker (Kafka's or kcli's), and "
    "partitions whose whole ISR is gone.",
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
    .cleaned, .swap and .deleted files of interrupted compactions and deletes. Last, Kafka's
    clean-shutdown marker (.kafka_cleanshutdown), so that Kafka starts on the dir without recovering it
    again; it is needed whenever something changed or the marker is missing (a crashed broker's dir).

    Dry run by default: each change is printed with its file, byte range, offsets, records and
    producers. With --execute, cut bytes become segments in the quarantine (kcli replay
    QUARANTINE/topic-N puts them back), every deleted or rewritten file is copied there first, and
    journal.jsonl there records each action before it is done; kcli verify then runs on PATH.

    Exit 0 when there is nothing to do (or everything was done and verify is clean), 3 when a dry run
    found changes to make, 1 when verify still finds errors after --execute, 2 for a usage error.
    """
    from kcli.dirlock import lock_for_offline_change, refuse_if_in_use, release, warn_if_in_use
    from ops.recover import plan_log_dir
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

    if not execute:
        warn_if_in_use([path])
        plan = plan_log_dir(path, index_interval_bytes=index_interval_bytes, verify_findings=verify)
        for change in plan.changes():
            write(change)
        _summary(out, as_json, plan.summary(), None)
        return 0 if plan.empty else CHANGES_NEEDED
    refuse_if_in_use(path, "kcli recover logdir --execute")
    plan = plan_log_dir(path, index_interval_bytes=index_interval_bytes, verify_findings=verify)
    summary = plan.summary()
    if plan.empty:
        _summary(out, as_json, summary, None)
        return 0
    lock = lock_for_offline_change(path, "kcli recover logdir --execute")
    try:
        return _execute(plan, path, quarantine, write, verify, out, as_json)
    finally:
        release([lock])


def _execute(plan, path: Path, quarantine: Path | None, write, verify, out, as_json: bool) -> int:
    """Run the plan with the log dir locked: cut bytes and replaced files to the quarantine first."""
    from kcli.files import quarantine_beside
    from ops.recover import Executor, RecoverError

    summary = plan.summary()
    if quarantine is None:
        quarantine = quarantine_beside(path)
    executor = Executor(plan, quarantine, on_change=write)
    try:
        executor.run()
    except RecoverError as e:
        raise KcliError(str(e)) from None
    remaining = [f for f in verify(path) if f.severity == "error"]
    marker = next((Path(c.file) for c in plan.root_changes if c.kind == "write_clean_shutdown"), None)
    if remaining and marker is not None and marker.exists():
        marker.unlink()  # errors remain: Kafka must not skip its own recovery on the word of the marker
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


@recover_app.command("partitions")
def partitions(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topics: list[str] = typer.Option(
        None,
        "--topic",
        help="Only this topic (repeatable); named partitions are planned even with a leader.",
        show_default=False,
    ),
    partition_ids: list[int] = typer.Option(
        None, "--partition", help="Only this partition of the --topic(s) (repeatable).", show_default=False
    ),
    log_dirs: list[str] = typer.Option(
        None,
        "--logdir",
        metavar="BROKER=PATH",
        help="The log dir of broker BROKER, read directly: needed for a stopped broker's replicas, and for a "
        "live Apache Kafka broker's epoch history and its records past the high watermark (repeatable; once per dir "
        "of a broker with several log dirs).",
        show_default=False,
    ),
    execute: bool = typer.Option(
        False, "--execute", help="Quarantine, elect and report; without it nothing changes (a dry run)."
    ),
    candidate: int = typer.Option(
        None,
        "--candidate",
        metavar="BROKER",
        help="The replica to elect with --execute [default: the best-ranked live one].",
        show_default=False,
    ),
    journal_path: Path = typer.Option(
        None,
        "--journal",
        help="Where --execute logs each action before it takes it "
        "[default: recover-partitions-<UTC time>.jsonl here].",
        show_default=False,
    ),
    allow_unread_loss: bool = typer.Option(
        False,
        "--allow-unread-loss",
        help="Go on with --execute when some records to be lost cannot be read (and so not quarantined).",
    ),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0, help="Seconds to wait for each step."),
    output: Output = typer.Option(
        Output.text, "--output", "-o", help="A report per partition, or one JSON object per partition."
    ),
) -> int:
    """Plan, and with --execute do, the unclean recovery of partitions with no leader (or the named ones).

    For every replica it gathers the log start and end offsets, the epoch history and the size: from
    live brokers over ListOffsets, OffsetForLeaderEpoch and DescribeLogDirs with the debugging replica
    id (-2), from stopped ones out of their --logdir. The candidates are ranked as KIP-966 does (ELR
    member, highest last epoch, longest log, lowest id) and, per candidate, each other replica's loss
    is printed: the offsets Kafka's follower truncation will cut, with records and bytes when its data
    can be read (Fetch with replica id -2, or the log dir).

    With --execute, for each partition: the records to be lost are produced to <topic>.recovered with
    their original offsets in kcli.recovered.* headers; the candidate is elected (ElectLeaders UNCLEAN,
    after a replica reorder putting it first if the controller would pick another, undone after);
    then each open transaction whose marker only the cut replicas held is ended as that marker had
    (COMMIT or ABORT), or aborted when its coordinator no longer holds it, so read_committed consumers
    are not held back; the groups whose committed offsets lie above the new log end are listed with
    the reset that resumes them. Every action is journaled first; a rerun copies nothing twice.

    Exit 0 when there is nothing to recover or everything was done, 3 when a dry run found partitions
    without a leader, 1 when a partition cannot be recovered as asked or a step failed (the journal says how
    far it went), 2 for a usage error.
    """
    import asyncio

    from kcli.cluster import Cluster
    from ops.recover.online import parse_log_dirs, plan_partitions
    from ops.recover.unclean import Journal, check_recoverable, recover_partition

    if partition_ids and not topics:
        raise KcliError("--partition needs --topic.")
    if candidate is not None and not execute:
        raise KcliError("--candidate chooses whom --execute elects; the dry run reports every candidate.")
    dirs = parse_log_dirs(log_dirs or [])
    if execute and journal_path is not None:
        Journal.check_path(journal_path)
    as_json = output is Output.json
    out = sys.stdout

    config = client_config(command_config)

    async def main() -> int:
        async with await Cluster.connect(
            bootstrap or config.bootstrap_servers or DEFAULT_BOOTSTRAP,
            client_id=config.client_id or "kcli",
            request_timeout=timeout,
            security=config.security,
            connect_timeout=config.timeout_s("socket.connection.setup.timeout.ms", 10.0),
        ) as cluster:
            plans = await plan_partitions(
                cluster, topics=topics or None, partitions=partition_ids or None, log_dirs=dirs
            )
            live = {f.broker for p in plans for f in p.found if f.live}
            if not execute:
                for plan in plans:
                    out.write(orjson.dumps(_plan_json(plan)).decode() + "\n" if as_json else _plan_text(plan))
                if not plans and not as_json:
                    out.write("No partition without a leader.\n")
                return CHANGES_NEEDED if any(p.leader < 0 for p in plans) else 0
            if not plans:
                if not as_json:
                    out.write("No partition without a leader.\n")
                return 0
            chosen = []
            for plan in plans:
                pick = plan.best if candidate is None else plan.candidate(candidate)
                where = f"{plan.topic}-{plan.partition}"
                if pick is None:
                    raise KcliError(
                        f"{where}: no live replica can be elected."
                        if candidate is None
                        else f"{where}: broker {candidate} holds no readable replica of it."
                    )
                chosen.append((plan, pick))
            for plan, pick in chosen:  # every partition checked before anything is written
                check_recoverable(plan, pick, live=live, allow_unread=allow_unread_loss)
            path = journal_path or Path(
                f"recover-partitions-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.jsonl"
            )
            journal = Journal(path)
            say = (lambda line: None) if as_json else (lambda line: out.write(line + "\n"))
            try:
                for plan, pick in chosen:
                    result = await recover_partition(
                        cluster, plan, pick, journal, live=live, allow_unread=allow_unread_loss,
                        timeout_s=timeout, say=say,
                    )  # fmt: skip
                    out.write(orjson.dumps(result).decode() + "\n" if as_json else _result_text(result))
            finally:
                journal.close()
            if not as_json:
                out.write(f"Journal: {path}\n")
            return 0

    return asyncio.run(main())


def _loss_text(loss) -> str:
    what = f"broker {loss.broker} loses offsets {loss.start}..{loss.end - 1}"
    if loss.records is not None:
        what += f" ({loss.records} records, {loss.bytes} bytes"
        if loss.transactional_producers:
            what += f", transactional producers {', '.join(map(str, loss.transactional_producers))}"
        what += ")"
    return what


def _plan_text(plan) -> str:
    lines = [
        f"{plan.topic}-{plan.partition}: leader {plan.leader if plan.leader >= 0 else 'none'} "
        f"(epoch {plan.leader_epoch}), replicas {plan.replicas}, ISR {plan.isr}"
        + (f", ELR {plan.elr}" if plan.elr else "")
    ]
    for r in plan.found:
        state = "live" if r.live else "down"
        if r.history is None:
            lines.append(f"  replica {r.broker} ({state}): unknown: {r.error}")
            continue
        hw = f", high watermark {r.high_watermark}" if r.high_watermark is not None else ""
        size = f", {r.size_bytes} bytes" if r.size_bytes is not None else ""
        lines.append(
            f"  replica {r.broker} ({state}, from its {'log dir' if r.source == 'logdir' else 'broker'}): "
            f"offsets {r.log_start_offset}..{r.history.log_end_offset}, last epoch {r.history.latest_epoch}{hw}{size}"
        )
    for c in plan.candidates:
        head = (
            f"  candidate {c.rank}: broker {c.broker} (last epoch {c.last_epoch}, log end {c.log_end_offset}"
        )
        head += f"; not electable: {c.why_not})" if not c.electable else ")"
        losses = [_loss_text(loss) for loss in c.losses]
        losses += [f"broker {b}: unknown (its log could not be read)" for b in c.unknown]
        lines.append(head + (": " + "; ".join(losses) if losses else ": nothing lost"))
    for broker, why in sorted(plan.unread.items()):
        lines.append(f"  records of broker {broker} not counted: {why}")
    return "\n".join(lines) + "\n"


def _plan_json(plan) -> dict:
    return {
        "type": "partition",
        "topic": plan.topic,
        "partition": plan.partition,
        "leader": plan.leader,
        "leaderEpoch": plan.leader_epoch,
        "replicas": plan.replicas,
        "isr": plan.isr,
        "elr": plan.elr,
        "replicaStates": [
            {
                "broker": r.broker,
                "live": r.live,
                "inIsr": r.in_isr,
                "inElr": r.in_elr,
                "source": r.source,
                "logStartOffset": r.log_start_offset,
                "logEndOffset": r.history.log_end_offset if r.history else None,
                "lastEpoch": r.history.latest_epoch if r.history else None,
                "epochs": [list(e) for e in r.history.entries] if r.history else None,
                "highWatermark": r.high_watermark,
                "sizeBytes": r.size_bytes,
                "error": r.error,
            }
            for r in plan.found
        ],
        "candidates": [
            {
                "rank": c.rank,
                "broker": c.broker,
                "electable": c.electable,
                "whyNot": c.why_not,
                "lastEpoch": c.last_epoch,
                "logEndOffset": c.log_end_offset,
                "losses": [
                    {
                        "broker": loss.broker,
                        "startOffset": loss.start,
                        "endOffset": loss.end,
                        "records": loss.records,
                        "bytes": loss.bytes,
                        "transactionalProducers": list(loss.transactional_producers),
                    }
                    for loss in c.losses
                ],
                "unknown": list(c.unknown),
            }
            for c in plan.candidates
        ],
        "unread": {str(b): why for b, why in sorted(plan.unread.items())},
    }


def _result_text(result: dict) -> str:
    where = f"{result['topic']}-{result['partition']}"
    lines = [
        f"{where}: broker {result['leader']} leads; log end offset {result['logEndOffset']}; "
        + (
            f"{result['quarantined']} records quarantined in {result['quarantineTopic']}"
            if result["quarantined"]
            else "nothing to quarantine"
        )
    ]
    for txn in result["openTransactions"]:
        if "error" in txn:
            lines.append(f"  open transactions: not known ({txn['error']})")
        else:
            done = f"{txn['result']} by kcli" if txn["result"] else "left open"
            lines.append(
                f"  open transaction: producer {txn['producerId']} (epoch {txn['producerEpoch']}) from offset "
                f"{txn['startOffset']}: {done}, {txn['why']}"
            )
    for group in result["groupsAboveLogEnd"]:
        lines.append(
            f"  group {group['group']}: committed offset {group['committedOffset']} is above the log end "
            f"{group['logEndOffset']}: its consumers would skip the records written up to it; reset it: "
            f"kcli groups reset-offsets {group['group']} --topic {result['topic']}:{result['partition']} "
            "--to-latest --execute"
        )
    return "\n".join(lines) + "\n"
