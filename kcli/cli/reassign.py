"""`kcli reassign`: kafka-reassign-partitions.sh's generate, execute, verify, cancel and list, and more."""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import typer

from kcli.cli.admin import BOOTSTRAP, COMMAND_CONFIG, OUTPUT, run_on_cluster, write_json_lines
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from ops.reassign.progress import Snapshot

reassign_app = typer.Typer(
    help="Move partition replicas between brokers, as kafka-reassign-partitions.sh: generate a plan (Kafka's, "
    "or one that moves the fewest bytes), execute it in batches with progress, verify, cancel, list.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(reassign_app, name="reassign")

REASSIGNMENT_FILE = typer.Option(
    ...,
    "--reassignment-json-file",
    metavar="PATH",
    help='A reassignment: {"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}.',
    show_default=False,
)
LOG_DIR_TIMEOUT = typer.Option(
    10000,
    "--timeout",
    metavar="MS",
    min=0,
    help="How long moves of replicas between log dirs (the file's log_dirs) may take to start.",
)
PRESERVE_THROTTLES = typer.Option(
    False, "--preserve-throttles", help="Leave the broker and topic throttle configs as they are."
)


@reassign_app.command("generate")
def generate(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topics_file: Path = typer.Option(
        None,
        "--topics-to-move-json-file",
        metavar="PATH",
        help='Topics to move: {"topics":[{"topic":"foo"}],"version":1}. Default with --remove-broker, '
        "--add-broker or --size-aware: every topic.",
        show_default=False,
    ),
    broker_list: str = typer.Option(
        None,
        "--broker-list",
        metavar="ID,ID,...",
        help="The brokers to place replicas on.",
        show_default=False,
    ),
    disable_rack_aware: bool = typer.Option(False, "--disable-rack-aware", help="Ignore the brokers' racks."),
    size_aware: bool = typer.Option(
        False,
        "--size-aware",
        help="With --broker-list: move only replicas that must (off other brokers) or that even out bytes per "
        "broker (partition sizes from DescribeLogDirs), instead of laying every partition out afresh.",
    ),
    remove_broker: list[int] = typer.Option(
        None,
        "--remove-broker",
        metavar="ID",
        help="Decommission: move every replica off this broker (repeatable), onto the least loaded others; "
        "nothing else moves.",
        show_default=False,
    ),
    add_broker: list[int] = typer.Option(
        None,
        "--add-broker",
        metavar="ID",
        help="Expand: move replicas onto this new broker (repeatable) until it carries about the mean bytes.",
        show_default=False,
    ),
    output: Output = OUTPUT,
) -> None:
    """Propose a reassignment: prints the current assignment (keep it for a rollback) and the proposal.

    With --topics-to-move-json-file and --broker-list alone this is Kafka's --generate (its placement, a
    random start broker per topic). --size-aware, --remove-broker and --add-broker plan by partition size
    and rack instead and list only the partitions that move. Beyond Kafka's tool, a topics file naming no
    topic, and a --remove-broker id that is neither live nor holds a replica, are refused.
    """
    from ops.reassign.assignment import parse_broker_list, parse_topics_to_move
    from ops.reassign.generate import generate_assignment, generate_plan

    rack_aware = not disable_rack_aware
    topics = parse_topics_to_move(_read(topics_file)) if topics_file is not None else None
    brokers = parse_broker_list(broker_list) if broker_list is not None else None
    kcli_plan = size_aware or bool(remove_broker) or bool(add_broker)
    if not kcli_plan:
        if topics is None or brokers is None:
            raise KcliError(
                "give --topics-to-move-json-file and --broker-list (or --remove-broker, --add-broker, --size-aware)."
            )
        result = run_on_cluster(
            bootstrap,
            lambda c: generate_assignment(c, topics, brokers, rack_aware=rack_aware),
            config=command_config,
        )
    else:
        if size_aware and brokers is None:
            raise KcliError("--size-aware needs --broker-list.")
        if brokers is not None and (remove_broker or add_broker):
            raise KcliError("--broker-list cannot be combined with --remove-broker or --add-broker.")
        result = run_on_cluster(
            bootstrap,
            lambda c: generate_plan(
                c,
                topics,
                broker_list=brokers,
                remove_brokers=remove_broker or (),
                add_brokers=add_broker or (),
                rack_aware=rack_aware,
            ),
            config=command_config,
        )
    from ops.reassign import report
    from ops.reassign.assignment import format_reassignment

    if output is Output.json:
        record: dict[str, Any] = {
            "current": orjson.loads(format_reassignment(result.current)),
            "proposed": orjson.loads(format_reassignment(result.proposed)),
        }
        if result.plan is not None:
            record |= {
                "bytes_to_move": result.plan.bytes_to_move,
                "bytes_per_broker_before": {str(b): v for b, v in sorted(result.plan.load_before.items())},
                "bytes_per_broker_after": {str(b): v for b, v in sorted(result.plan.load_after.items())},
            }
        write_json_lines([record])
        return
    print(report.generated(result.current, result.proposed))
    if result.plan is not None:
        plan = result.plan
        print(
            f"kcli: {len(result.proposed)} partitions move, {_bytes(plan.bytes_to_move)} to copy; bytes per broker "
            + ", ".join(
                f"{b}: {_bytes(plan.load_before[b])} -> {_bytes(plan.load_after[b])}"
                for b in sorted(plan.load_after)
            ),
            file=sys.stderr,
        )


@reassign_app.command("execute")
def execute(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    reassignment_file: Path = REASSIGNMENT_FILE,
    additional: bool = typer.Option(
        False, "--additional", help="Go ahead although reassignments are under way (and change the throttle)."
    ),
    throttle: int = typer.Option(
        -1,
        "--throttle",
        metavar="BYTES/S",
        help="Cap replication between brokers while moving (leader and follower rates on the brokers "
        "involved, the moving replicas listed on their topics); cleared when done. -1: no throttle.",
    ),
    log_dir_throttle: int = typer.Option(
        -1,
        "--replica-alter-log-dirs-throttle",
        metavar="BYTES/S",
        help="Cap moves between log dirs of one broker. -1: no throttle.",
    ),
    rollback_file: Path = typer.Option(
        None,
        "--rollback-file",
        metavar="PATH",
        help="Where to write the current assignment, before anything is sent "
        "[default: reassign-rollback-<UTC time>.json here].",
        show_default=False,
    ),
    no_wait: bool = typer.Option(
        False,
        "--no-wait",
        help="Send the whole plan at once and exit, as Kafka's tool (then run verify to clear the throttles).",
    ),
    max_moves_per_broker: int = typer.Option(
        None,
        "--max-moves-per-broker",
        min=1,
        help="Moves a broker takes part in at once (as the one copying or the leader serving); the rest wait "
        "[default: 5].",
        show_default=False,
    ),
    interval: float = typer.Option(1.0, "--interval", min=0.1, help="Seconds between progress polls."),
    timeout: int = LOG_DIR_TIMEOUT,
    output: Output = OUTPUT,
) -> None:
    """Start the reassignment of --reassignment-json-file and, unless --no-wait, see it through: batches
    capped per broker, live progress (bytes copied and remaining, rate, ETA; --output json: one line per
    poll), throttles cleared at the end. Ctrl-C cancels the moves still running (the controller reverts
    them) and clears the throttles."""
    from ops.reassign.assignment import parse_execute
    from ops.reassign.batches import DEFAULT_MAX_MOVES_PER_BROKER
    from ops.reassign.execute import ExecuteOptions
    from ops.reassign.execute import execute as run

    if no_wait and max_moves_per_broker is not None:
        raise KcliError("--max-moves-per-broker needs execute to wait: it cannot be combined with --no-wait.")
    data = parse_execute(_read(reassignment_file))
    if rollback_file is None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        rollback_file = Path(f"reassign-rollback-{stamp}.json")
    options = ExecuteOptions(
        additional=additional,
        throttle=throttle,
        log_dir_throttle=log_dir_throttle,
        rollback_path=rollback_file,
        wait=not no_wait,
        max_moves_per_broker=max_moves_per_broker or DEFAULT_MAX_MOVES_PER_BROKER,
        poll_interval=interval,
        log_dir_timeout_ms=timeout,
    )
    renderer = _Renderer(output)
    try:
        run_on_cluster(
            bootstrap,
            lambda c: run(c, data, options, renderer.emit),
            client_id="reassign-partitions-tool",
            config=command_config,
        )
    finally:
        renderer.close()


@reassign_app.command("verify")
def verify(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    reassignment_file: Path = REASSIGNMENT_FILE,
    preserve_throttles: bool = PRESERVE_THROTTLES,
    output: Output = OUTPUT,
) -> None:
    """Whether each partition of the file is reassigned; once no reassignment runs, clear the throttles.

    As kafka-reassign-partitions.sh, a partition that does not exist is an error; beyond it, so is a file
    with an empty partitions list (Kafka's tool would report nothing and clear the throttles).
    """
    from ops.reassign.assignment import parse_reassignment
    from ops.reassign.verify import verify as run

    data = parse_reassignment(_read(reassignment_file))
    renderer = _Renderer(output)
    run_on_cluster(
        bootstrap,
        lambda c: run(c, data, preserve_throttles=preserve_throttles, emit=renderer.emit),
        config=command_config,
    )


@reassign_app.command("cancel")
def cancel(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    reassignment_file: Path = typer.Option(
        None,
        "--reassignment-json-file",
        metavar="PATH",
        help="The reassignment whose partitions to cancel.",
        show_default=False,
    ),
    all_: bool = typer.Option(False, "--all", help="Cancel every ongoing reassignment (no file needed)."),
    preserve_throttles: bool = PRESERVE_THROTTLES,
    timeout: int = LOG_DIR_TIMEOUT,
    output: Output = OUTPUT,
) -> None:
    """Cancel reassignments (the controller reverts each partition to its original replicas) and clear the
    throttles. A partition whose original replicas are all down is left moving, and named. Beyond
    kafka-reassign-partitions.sh, a file with an empty partitions list is refused."""
    from ops.reassign.assignment import parse_reassignment
    from ops.reassign.verify import cancel as run

    if (reassignment_file is None) == (not all_):
        raise KcliError("give either --reassignment-json-file or --all.")
    data = parse_reassignment(_read(reassignment_file)) if reassignment_file is not None else None
    renderer = _Renderer(output)
    run_on_cluster(
        bootstrap,
        lambda c: run(c, data, preserve_throttles=preserve_throttles, emit=renderer.emit, timeout_ms=timeout),
        config=command_config,
    )


@reassign_app.command("list")
def list_(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    output: Output = OUTPUT,
) -> None:
    """The reassignments under way: replicas, and those being added and removed."""
    from ops.reassign import report
    from ops.reassign.verify import list_ongoing

    ongoing = run_on_cluster(bootstrap, list_ongoing, config=command_config)
    if output is Output.json:
        write_json_lines(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "replicas": list(r.replicas),
                "adding": list(r.adding),
                "removing": list(r.removing),
            }
            for tp, r in sorted(ongoing.items())
        )
    else:
        print(report.ongoing(ongoing))


# --- rendering -------------------------------------------------------------------------------------


class _Renderer:
    """Events to Kafka's lines on stdout (notes on stderr, a live view on a terminal's stderr), or to
    JSON lines."""

    def __init__(self, output: Output) -> None:
        self.json = output is Output.json
        self.live: Any = None
        self.tty = not self.json and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"

    def emit(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if self.json:
            record = {k: v for k, v in event.items() if k not in ("text", "snapshot")}
            if kind == "warning":
                record["message"] = event["text"]
            write_json_lines([record])
            sys.stdout.flush()
            return
        if kind == "progress":
            if self.tty:
                self._draw(event["snapshot"])
            return
        self._stop_live()
        if kind == "rollback_file":
            print(
                f"kcli: the current assignment is saved in {event['path']} (for a rollback).", file=sys.stderr
            )
            return
        skipped = event.get("skipped_brokers")
        if skipped:
            print(
                f"kcli: broker{'s' if len(skipped) > 1 else ''} {','.join(map(str, skipped))} "
                f"down: throttle configs left alone there.",
                file=sys.stderr,
            )
        stream = sys.stderr if kind in ("refused", "not_cancelled", "clear_failed") else sys.stdout
        print(event["text"], file=stream)
        stream.flush()

    def _draw(self, snapshot: Snapshot) -> None:
        from rich.live import Live

        from kcli.output import stderr_console

        if self.live is None:
            self.live = Live(console=stderr_console(), refresh_per_second=4, transient=True)
            self.live.start()
        self.live.update(_progress_table(snapshot))

    def _stop_live(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def close(self) -> None:
        self._stop_live()


def _progress_table(snapshot: Snapshot) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False)
    for column in ("PARTITION", "ADDING", "COPIED", "REMAINING", "DONE", "RATE", "ETA"):
        table.add_column(column, justify="left" if column in ("PARTITION", "ADDING") else "right")
    for move in snapshot.moves:
        if move.state != "running":
            continue
        share = 100.0 if move.total == 0 else 100.0 * move.copied / move.total
        table.add_row(
            str(move.partition),
            ",".join(map(str, move.adding)),
            _bytes(move.copied),
            _bytes(move.remaining),
            f"{share:.0f}%",
            _rate(snapshot.partition_rates.get(move.partition)),
            _eta(snapshot.partition_eta(move)),
        )
    rate, eta = _rate(snapshot.rate), _eta(snapshot.eta)
    summary = (
        f"{snapshot.count('done')} done, {snapshot.count('running')} running, {snapshot.count('pending')} waiting; "
        f"{_bytes(snapshot.copied)} of {_bytes(snapshot.total)} copied, {_bytes(snapshot.remaining)} to go, "
        f"{rate}, ETA {eta}"
    )
    return Group(table, Text(summary, style="bold"))


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{_bytes(int(rate))}/s"


def _eta(seconds: float | None) -> str:
    return "-" if seconds is None else _duration(seconds)


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise KcliError(f"{path} is not a UTF-8 text file.") from None
