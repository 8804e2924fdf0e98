"""`kcli broker start`: run the embedded Kafka-compatible broker in the foreground."""

import gc
import logging
import sys
from pathlib import Path

import typer

from kcli.cli.app import app

broker_app = typer.Typer(
    help="Run the embedded Kafka-compatible broker.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(broker_app, name="broker")

READY_LINE = "kcli broker: listening on {host}:{port}"
"""Printed on stderr once the socket is bound; tests and scripts wait for it."""


@broker_app.command("start")
def start(
    listen: str = typer.Option(
        None,
        "--listen",
        metavar="HOST:PORT",
        help="Address to bind (default 127.0.0.1:9092); port 0 picks a free port, printed when ready.",
        show_default=False,
    ),
    data_dir: Path = typer.Option(
        None, "--data-dir", help="Log directory (log.dirs); default ./kcli-data.", show_default=False
    ),
    config_file: Path = typer.Option(
        None, "--config", help="A Kafka server.properties file.", show_default=False
    ),
    overrides: list[str] = typer.Option(
        [], "--override", metavar="KEY=VALUE", help="Set one broker property; repeatable; wins over --config."
    ),
    release_version: str | None = typer.Option(
        None,
        "--release-version",
        "-r",
        help="On the first start of a single-node quorum (empty dirs, formatted on the spot), the release "
        "version of its feature levels, e.g. 3.9 (as kcli storage format); the default is 4.1-IV1, with "
        "Kafka 4.1's defaults (ELR on, group.version 1, transaction.version 2). Ignored once formatted.",
        show_default=False,
    ),
) -> None:
    """Start a single-node broker; SIGTERM or Ctrl-C shuts it down cleanly."""
    import asyncio

    from kcli.config import BrokerConfig
    from kcli.features import FeatureError, metadata_version_from_string
    from kcli.storage import StorageError

    try:
        release = None if release_version is None else metadata_version_from_string(release_version)
    except FeatureError as exc:
        raise StorageError(str(exc)) from None

    settings: dict[str, str] = {}
    if listen is not None:
        settings["listeners"] = f"PLAINTEXT://{_check_listen(listen)}"
    if data_dir is not None:
        settings["log.dirs"] = str(data_dir)
    _check_no_conflict(listen, data_dir, overrides)
    config = BrokerConfig.load(config_file=config_file, settings=settings, overrides=overrides)
    _configure_logging()

    # the broker's modules, imported with the cyclic collector off and then frozen: made once, they live
    # as long as the process, and no collection of the running broker need look at them again
    collecting = gc.isenabled()
    gc.disable()
    from kcli.broker.server import serve

    gc.freeze()
    if collecting:
        gc.enable()

    def ready(host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(READY_LINE.format(host=shown, port=port), file=sys.stderr, flush=True)

    try:
        asyncio.run(serve(config, ready, release=release))
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        raise typer.Exit(130) from None


def _check_listen(listen: str) -> str:
    from kcli.config import ConfigError

    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdecimal() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {listen!r} is not of the form HOST:PORT (port 0-65535).")
    return listen


_FLAG_KEYS = {"--listen": ("listeners",), "--data-dir": ("log.dirs", "log.dir")}


def _check_no_conflict(listen: str | None, data_dir: Path | None, overrides: list[str]) -> None:
    """--listen and --data-dir set listeners and log.dirs; an --override of the same property with
    another value is a contradiction, refused rather than one of them silently winning."""
    from kcli.config import ConfigError, parse_override

    given = {"--listen": listen, "--data-dir": str(data_dir) if data_dir is not None else None}
    flag_value = {"--listen": f"PLAINTEXT://{listen}", "--data-dir": given["--data-dir"]}
    for item in overrides:
        key, value = parse_override(item)
        for flag, keys in _FLAG_KEYS.items():
            if given[flag] is not None and key in keys and value.strip() != flag_value[flag]:
                raise ConfigError(
                    f"{flag} {given[flag]} and --override {key}={value} both set {keys[0]}: give one of them."
                )


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))
    for name in ("kcli", "kafka.authorizer.logger"):  # the second: one INFO line per ACL denial, as Kafka's
        root = logging.getLogger(name)
        root.handlers[:] = [handler]
        root.setLevel(logging.INFO)
        root.propagate = False
