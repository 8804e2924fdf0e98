"""`kcli groups`: list, describe (with lag), reset offsets of and delete consumer groups."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import typer

from kcli.cli.admin import (
    BOOTSTRAP,
    COMMAND_CONFIG,
    OUTPUT,
    T,
    client_config,
    run_on_cluster,
    table,
    write_json_lines,
)
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from ops.groups import GroupDescription, OffsetReset

groups_app = typer.Typer(
    help="Consumer groups: members, committed offsets and lag; reset offsets; delete.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(groups_app, name="groups")


@groups_app.command("list")
def list_(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    state: list[str] = typer.Option(
        None,
        "--state",
        help="Only groups in these states (Stable, Empty, PreparingRebalance, CompletingRebalance, Dead, "
        "Assigning, Reconciling; any case, ','-separated or repeated).",
        show_default=False,
    ),
    output: Output = OUTPUT,
) -> None:
    """Every group of every broker, with its state and protocol type."""
    from ops.groups import list_groups, parse_states

    states = parse_states(state or ())  # before connecting: an unknown state is an error, as in Kafka
    listings = run_on_cluster(bootstrap, lambda cluster: list_groups(cluster, states), config=command_config)
    if output is Output.json:
        write_json_lines(g.to_json() for g in listings)
    else:
        _print_table(
            ["GROUP", "STATE", "PROTOCOL-TYPE", "COORDINATOR"],
            [[g.group_id, g.state or "-", g.protocol_type or "-", str(g.coordinator)] for g in listings],
        )


@groups_app.command("describe")
def describe(
    groups: list[str] = typer.Argument(..., metavar="GROUP...", help="Groups to describe."),
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    members: bool = typer.Option(
        False, "--members", help="Show the members and their partition counts instead of offsets."
    ),
    state: bool = typer.Option(
        False, "--state", help="Show the coordinator, assignment strategy, state and member count."
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        help="With --members: each member's epoch and current and target assignments; with --state: the "
        "group epoch and target assignment epoch (consumer groups; '-' for classic ones).",
    ),
    watch: bool = typer.Option(False, "--watch", help="Redraw every --interval seconds until Ctrl-C."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between redraws with --watch."),
    output: Output = OUTPUT,
) -> int:
    """Committed offsets, log end offsets and lag per partition, as kafka-consumer-groups.sh --describe.

    The text is that tool's (its rows in its order; "has no active members" and "is rebalancing" on
    stderr), Kafka 4.1's columns with --verbose; --output json adds each member's assignment (and a
    consumer group's epochs and target assignments), the total lag and the lag in seconds (the age of
    the first record the group has not consumed). Exit 1 when a group does not exist.
    """
    from ops.groups import describe_groups

    if members and state:
        raise KcliError("give at most one of --members and --state.")
    view = "members" if members else "state" if state else "offsets"
    config = client_config(command_config)  # read once, not at every --watch redraw

    def fetch() -> list[GroupDescription]:
        return run_on_cluster(bootstrap, lambda cluster: describe_groups(cluster, groups), config=config)

    def render(descriptions: list[GroupDescription]) -> str:
        if output is Output.json:
            return "".join(orjson.dumps(d.to_json()).decode() + "\n" for d in descriptions)
        return "".join(
            _describe_text(d, view, verbose) for d in sorted(descriptions, key=lambda d: d.group_id)
        )

    if watch:
        _watch(fetch, render, interval)
        return 0
    descriptions = fetch()
    missing = [d.group_id for d in descriptions if not d.exists]
    # A group that does not exist gets its one sentence on stderr, not a table of nothing on stdout.
    shown = descriptions if output is Output.json else [d for d in descriptions if d.exists]
    if output is not Output.json:
        for d in sorted(shown, key=lambda d: d.group_id):
            note = _state_note(d)
            if note:
                sys.stderr.write(note)
            sys.stdout.write(_describe_text(d, view, verbose))
    else:
        sys.stdout.write(render(shown))
    sys.stdout.flush()
    for group_id in missing:
        print(f"kcli: consumer group '{group_id}' does not exist.", file=sys.stderr)
    return 1 if missing else 0


@groups_app.command("reset-offsets")
def reset_offsets(
    group: str = typer.Argument(..., metavar="GROUP", help="The group whose committed offsets to reset."),
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: list[str] = typer.Option(
        None,
        "--topic",
        metavar="TOPIC[:P,P...]",
        help="Reset this topic (all or the listed partitions); repeatable. Default: every partition with a committed offset.",
        show_default=False,
    ),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="To the log start offset."),
    to_latest: bool = typer.Option(False, "--to-latest", help="To the log end offset."),
    to_current: bool = typer.Option(
        False, "--to-current", help="To the committed offset (log end where none)."
    ),
    to_offset: int = typer.Option(
        None, "--to-offset", help="To this offset (clamped to the log).", show_default=False
    ),
    shift_by: int = typer.Option(
        None, "--shift-by", help="Committed offset plus N (N may be negative).", show_default=False
    ),
    to_datetime: str = typer.Option(
        None,
        "--to-datetime",
        metavar="ISO-8601",
        help="To the first offset at or after this time.",
        show_default=False,
    ),
    by_duration: str = typer.Option(
        None,
        "--by-duration",
        metavar="DURATION",
        help="To the first offset this long ago (PT1H30M or 1h30m).",
        show_default=False,
    ),
    from_file: Path = typer.Option(
        None,
        "--from-file",
        help="CSV of topic,partition,offset lines (as `--export` writes).",
        show_default=False,
    ),
    execute: bool = typer.Option(False, "--execute", help="Apply the new offsets (default: only show them)."),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Only show the new offsets (the default, as Kafka's --dry-run; no note on stderr).",
    ),
    export: bool = typer.Option(False, "--export", help="Print the plan as topic,partition,offset CSV."),
    output: Output = OUTPUT,
) -> None:
    """Compute new committed offsets for an inactive group; a dry run unless --execute.

    The plan prints as kafka-consumer-groups.sh --reset-offsets prints it (--output json adds each
    partition's committed offset). Refuses while the group has members, as Kafka does.
    """
    from ops.groups import (
        ResetSpec,
        parse_datetime,
        parse_duration,
        parse_scope,
        read_reset_file,
        reset_offsets,
    )

    chosen = [
        name
        for name, value in (
            ("--to-earliest", to_earliest),
            ("--to-latest", to_latest),
            ("--to-current", to_current),
            ("--to-offset", to_offset is not None),
            ("--shift-by", shift_by is not None),
            ("--to-datetime", to_datetime is not None),
            ("--by-duration", by_duration is not None),
            ("--from-file", from_file is not None),
        )
        if value
    ]
    if len(chosen) != 1:
        raise KcliError(
            "give exactly one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, "
            f"--to-datetime, --by-duration, --from-file{' (got ' + ', '.join(chosen) + ')' if chosen else ''}."
        )
    spec = ResetSpec(
        to_earliest=to_earliest,
        to_latest=to_latest,
        to_current=to_current,
        to_offset=to_offset,
        shift_by=shift_by,
        to_datetime=parse_datetime(to_datetime) if to_datetime is not None else None,
        by_duration=parse_duration(by_duration) if by_duration is not None else None,
        from_file=read_reset_file(from_file, group) if from_file is not None else None,
    )
    if dry_run and execute:
        raise KcliError("give one of --execute and --dry-run, not both.")
    if export and output is Output.json:
        raise KcliError(
            "--export prints topic,partition,offset CSV: give --export or --output json, not both."
        )
    scope = parse_scope(topic) if topic else None

    plan: list[OffsetReset] = run_on_cluster(
        bootstrap,
        lambda cluster: reset_offsets(cluster, group, spec, scope, execute=execute),
        config=command_config,
    )
    for reset in plan:  # as kafka-consumer-groups.sh warns (on stderr here)
        if reset.clamp_warning is not None:
            print(f"kcli: warning: {reset.clamp_warning}", file=sys.stderr)
    if export:
        sys.stdout.write("".join(f"{r.topic},{r.partition},{r.new}\n" for r in plan))
    elif output is Output.json:
        write_json_lines({"group": group, **r.to_json(), "executed": execute} for r in plan)
    else:
        sys.stdout.write(_reset_text(group, plan))
        if not plan:
            print(
                f"kcli: nothing to reset: group '{group}' has no committed offsets in scope (name topics with --topic).",
                file=sys.stderr,
            )
        elif not execute and not dry_run:
            print("(dry run: add --execute to commit these offsets)", file=sys.stderr)


@groups_app.command("delete")
def delete(
    groups: list[str] = typer.Argument(
        ..., metavar="GROUP...", help="Groups to delete (they must have no members)."
    ),
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
) -> int:
    """Delete groups and their committed offsets; exit 1 if any could not be deleted."""
    from ops.groups import delete_groups

    results = run_on_cluster(bootstrap, lambda cluster: delete_groups(cluster, groups), config=command_config)
    failed = 0
    for group_id, error in results.items():
        if error == 0:
            print(f"Deletion of requested consumer group '{group_id}' was successful.")
        else:
            failed += 1
            reason = {
                "non_empty_group": "the group is not empty",
                "group_id_not_found": "the group does not exist",
            }.get(error.name, error.name.upper())
            print(f"kcli: cannot delete consumer group '{group_id}': {reason}.", file=sys.stderr)
    return 1 if failed else 0


# --- rendering -------------------------------------------------------------------------------------


def _state_note(d: GroupDescription) -> str:
    """What kafka-consumer-groups.sh --describe writes to stderr for an Empty or rebalancing group."""
    if d.state == "Empty":
        return f"\nConsumer group '{d.group_id}' has no active members.\n"
    if d.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        return f"\nWarning: Consumer group '{d.group_id}' is rebalancing.\n"
    return ""


def _describe_text(d: GroupDescription, view: str, verbose: bool = False) -> str:
    """ConsumerGroupCommand's --describe text (default, --members or --state, with Kafka 4.1's
    --verbose columns) for one group: its printf formats, each line opened by a newline, columns at
    least 15 wide (grown to the longest cell)."""
    if view == "state":
        coordinator = f"{d.coordinator_address}  ({d.coordinator})"
        epochs = "%-15s %-25s " if verbose else ""
        line = f"%-{max(15, len(d.group_id))}s %-{max(25, len(coordinator))}s %-20s %-20s {epochs}%s"
        names = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE")
        cells = (d.group_id, coordinator, d.protocol or "-", d.state)
        if verbose:
            names += ("GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH")
            cells += (_or_dash(d.group_epoch), _or_dash(d.target_assignment_epoch))
        return f"\n{line % (*names, '#MEMBERS')}\n{line % (*cells, len(d.members))}\n"
    if view == "members":
        return _members_text(d, verbose)
    rows = _offset_rows(d)
    if not rows:
        return ""
    group_w = max(15, *(len(r[0]) for r in rows))
    topic_w = max(15, *(len(r[1]) for r in rows))
    member_w = max(15, *(len(r[6]) for r in rows))
    host_w = max(15, *(len(r[7]) for r in rows))
    line = f"%-{group_w}s %-{topic_w}s %-10s %-15s %-15s %-15s %-{member_w}s %-{host_w}s %s"
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")  # fmt: skip
    return "".join("\n" + line % tuple(r) for r in [header, *rows]) + "\n"


def _members_text(d: GroupDescription, verbose: bool) -> str:
    """--members: "%-Ns " cells, #PARTITIONS always 15 wide; --verbose adds the epochs and the
    assignments ("topic:p,p" per topic, sorted, joined by ";"), and UPGRADED where a consumer group
    holds members of both protocols."""
    with_instance = any(m.group_instance_id for m in d.members)
    cells = [
        [d.group_id, m.member_id]
        + ([m.group_instance_id or ""] if with_instance else [])
        + [m.client_host, m.client_id, str(sum(len(p) for p in m.assignment.values()))]
        for m in d.members
    ]
    names = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else [])
    names += ["HOST", "CLIENT-ID", "#PARTITIONS"]
    minimum = [15, 15] + ([17] if with_instance else []) + [15, 15, 15]
    widths = [max([low] + [len(row[i]) for row in cells]) for i, low in enumerate(minimum)]
    widths[-1] = 15  # #PARTITIONS is "%-15s " whatever its cells
    tails: list[list[str]] = [[] for _ in [names, *cells]]
    tail_widths: list[int] = []
    if verbose:
        upgraded = {m.upgraded for m in d.members}
        both = True in upgraded and False in upgraded
        tails[0] = ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        tails[0] += ["UPGRADED"] if both else []
        for tail, m in zip(tails[1:], d.members, strict=True):
            tail += [_or_dash(m.member_epoch), _assignment_text(m.assignment)]
            tail += [_or_dash(d.target_assignment_epoch), _assignment_text(m.target_assignment or {})]
            tail += [_or_dash(None if m.upgraded is None else str(m.upgraded).lower())] if both else []
        current = max([20] + [len(t[1]) for t in tails])
        target = max([20] + [len(t[3]) for t in tails])
        tail_widths = [15, current, 15, target]

    def line(row: list[str], tail: list[str]) -> str:
        text = "".join(cell.ljust(w) + " " for cell, w in zip(row, widths, strict=True))
        # the four verbose columns padded; UPGRADED, the last, is not
        padded = [cell.ljust(w) for cell, w in zip(tail, tail_widths, strict=False)]
        return text + " ".join(padded + tail[len(tail_widths) :])

    return "\n" + "".join(line(row, tail) + "\n" for row, tail in zip([names, *cells], tails, strict=True))


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _assignment_text(assignment: dict[str, tuple[int, ...]]) -> str:
    """ConsumerGroupCommand's getAssignmentString: "topic:p,p" per topic (partitions ascending), the
    topics' strings sorted and joined by ";"; "-" for none."""
    parts = sorted(f"{topic}:{','.join(map(str, sorted(ps)))}" for topic, ps in assignment.items() if ps)
    return ";".join(parts) or "-"


def _offset_rows(d: GroupDescription) -> list[tuple[str, ...]]:
    """The rows in ConsumerGroupCommand's order: members with partitions, most partitions first, each
    one's partitions as its HashMap of log end offsets iterates them; then the committed partitions
    no member holds, likewise."""
    from kcli.output import java_hash_order

    by_tp = {(p.topic, p.partition): p for p in d.partitions}
    assigned = [m for m in d.members if any(m.assignment.values())]
    assigned.sort(key=lambda m: -sum(len(p) for p in m.assignment.values()))
    groups = [[(t, p) for t, parts in m.assignment.items() for p in parts] for m in assigned]
    held = {tp for tps in groups for tp in tps}
    groups.append([tp for tp, p in by_tp.items() if p.committed is not None and tp not in held])
    rows = []
    for tps in groups:
        for tp in java_hash_order(tps):
            p = by_tp.get(tp)
            committed = p.committed if p else None
            end = p.log_end_offset if p else None
            lag = None if committed is None or end is None else end - committed
            m = p.member if p else None
            rows.append((d.group_id, tp[0], str(tp[1]), _or_dash(committed), _or_dash(end), _or_dash(lag),
                         m.member_id if m else "-", m.client_host if m else "-", m.client_id if m else "-"))  # fmt: skip
    return rows


def _reset_text(group: str, plan: list[OffsetReset]) -> str:
    """ConsumerGroupCommand.printOffsetsToReset: fixed columns (cells padded, the last one too), each
    line opened by a newline, rows in the order of its HashMap of new offsets; the committed offsets
    are in --output json."""
    from kcli.output import java_hash_order

    new = {(r.topic, r.partition): r.new for r in plan}
    rows = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    rows += [(group, t, str(p), str(new[t, p])) for t, p in java_hash_order(new)]
    return "".join(f"\n{g:<30} {t:<30} {p:<10} {o:<15}" for g, t, p, o in rows) + "\n"


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    sys.stdout.write(table(header, rows))


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _watch(fetch: Callable[[], T], render: Callable[[T], str], interval: float) -> None:
    """Redraw in place on a terminal (rich Live); elsewhere print each round, separated by a blank line.

    Ctrl-C raises KeyboardInterrupt wherever it lands: left to asyncio.run, a SIGINT during a fetch
    becomes a cancellation of its task, which Python 3.11's wait_for can swallow when the awaited
    answer arrives at the same moment; the round then ends normally and the watch never stops."""
    signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    if not sys.stdout.isatty():
        while True:
            sys.stdout.write(render(fetch()) + "\n")
            sys.stdout.flush()
            time.sleep(interval)
    from rich.live import Live
    from rich.text import Text

    with Live(Text(render(fetch())), auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(Text(render(fetch())), refresh=True)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
