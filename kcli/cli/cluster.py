"""`kcli cluster`: start a local multi-node cluster, and show a cluster's brokers and controller quorum."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcli.cli.admin import BOOTSTRAP, COMMAND_CONFIG, OUTPUT, run_on_cluster, table, write_json_lines
from kcli.cli.app import Output, app

if TYPE_CHECKING:
    from ops.quorum import ClusterStatus

cluster_app = typer.Typer(
    help="Local KRaft clusters: start N nodes on loopback; show brokers and the controller quorum.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("start")
def start(
    brokers: int = typer.Option(
        3, "--brokers", "-n", help="Brokers (each also a controller voter, unless --controllers)."
    ),
    controllers: int = typer.Option(
        None,
        "--controllers",
        help="Controller-only voters, with broker-only brokers (Kafka's isolated mode); 0: combined "
        "(the default; a started cluster keeps its own).",
        show_default=False,
    ),
    data_dir: Path = typer.Option(
        Path("kcli-cluster"), "--data-dir", help="Where the nodes keep their data."
    ),
    port: int = typer.Option(
        None,
        "--port",
        help="First client port (default 9092; a started cluster keeps its own); node k listens on PORT+2k, "
        "its controller on PORT+2k+1.",
        show_default=False,
    ),
    overrides: list[str] = typer.Option(
        [], "--override", metavar="KEY=VALUE", help="A broker property for every node; repeatable."
    ),
    security: str | None = typer.Option(
        None,
        "--security",
        metavar="plaintext|ssl|sasl_ssl",
        help="The client listeners' security (default plaintext; a started cluster keeps its own): ssl = "
        "TLS with client certificates required (a throwaway CA in DATA_DIR/tls), sasl_ssl = TLS with "
        "SCRAM-SHA-512/256 and a SCRAM user admin (random password in DATA_DIR/admin.password); the "
        "brokers reach each other the same way. The controller listener (127.0.0.1) is secured too: ssl "
        "with the node certificates, sasl_ssl with PLAIN as admin. "
        "DATA_DIR/client.properties is for --command-config (and Kafka's tools).",
        show_default=False,
    ),
    release_version: str | None = typer.Option(
        None,
        "--release-version",
        "-r",
        help="The release version a new cluster's feature levels are formatted for, e.g. 3.9 or 4.0-IV1 "
        "(as kcli storage format); the default is 4.1-IV1, with Kafka 4.1's defaults (ELR on, "
        "group.version 1, transaction.version 2).",
        show_default=False,
    ),
) -> None:
    """Format (first time) and start the nodes; print the bootstrap string; Ctrl-C stops them all.

    A node that stops on its own (a fatal fault) stops the others too, and its sentence is the error.
    With --security, also print where client.properties is and a confluent-kafka config.
    """
    from kcli.features import FeatureError, metadata_version_from_string
    from ops.local_cluster import LocalCluster, LocalClusterError, plan
    from ops.local_security import CLIENT_PROPERTIES, librdkafka_config

    try:
        release = None if release_version is None else metadata_version_from_string(release_version)
    except FeatureError as exc:
        raise LocalClusterError(str(exc)) from None
    layout = plan(
        data_dir, brokers, port, overrides, controllers=controllers, security=security, release=release
    )
    cluster = LocalCluster(layout)
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(f"cluster {layout.cluster_id}: starting {len(layout.nodes)} node(s) in {data_dir}", file=sys.stderr)
    cluster.start(
        lambda node: print(
            f"node {node.node_id} ({node.roles}) listening on {node.bootstrap}", file=sys.stderr
        )
    )
    print(f"bootstrap: {layout.bootstrap_servers}", flush=True)
    if layout.security != "plaintext":
        print(f"client config: {(data_dir / CLIENT_PROPERTIES).resolve()}")
        print(
            f"confluent-kafka: {librdkafka_config(layout.security, data_dir, layout.bootstrap_servers)}",
            flush=True,
        )
        print(f"security: {layout.security}", file=sys.stderr, flush=True)
    print(f"controllers: {layout.bootstrap_controllers}", file=sys.stderr, flush=True)
    reported: set[int] = set()
    while not stop:
        failure = cluster.failure()
        if failure is not None:  # a node stopped on its own (a fatal fault): the cluster stops with it
            print("a node stopped on its own; stopping the others (controlled shutdown)", file=sys.stderr)
            cluster.stop()
            raise failure
        for node_id, code in cluster.exited().items():
            if node_id not in reported:
                reported.add(node_id)
                print(f"node {node_id} exited with code {code}; see its broker.log", file=sys.stderr)
        time.sleep(0.2)
    print("stopping the nodes (controlled shutdown)", file=sys.stderr)
    cluster.stop()


@cluster_app.command("status")
def status(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    output: Output = OUTPUT,
) -> None:
    """Brokers (fenced or not, rack) and the controller quorum: leader, epoch, each voter's lag."""
    from ops.quorum import describe_cluster_status

    result = run_on_cluster(bootstrap, describe_cluster_status, config=command_config)
    if output is Output.json:
        write_json_lines(
            [
                {
                    "type": "cluster",
                    "clusterId": result.cluster_id,
                    "leaderId": result.leader_id,
                    "leaderEpoch": result.leader_epoch,
                    "highWatermark": result.high_watermark,
                },
                *(
                    {
                        "type": "broker",
                        "nodeId": b.node_id,
                        "host": b.host,
                        "port": b.port,
                        "rack": b.rack,
                        "fenced": b.fenced,
                    }
                    for b in result.brokers
                ),
                *(
                    {
                        "type": "voter" if r.is_voter else "observer",
                        "nodeId": r.node_id,
                        "logEndOffset": r.log_end_offset,
                        "lag": r.lag,
                        "lastFetchTimestamp": r.last_fetch_ms,
                        "lastCaughtUpTimestamp": r.last_caught_up_ms,
                    }
                    for r in result.replicas
                ),
            ]
        )
        return
    sys.stdout.write(status_lines(result))
    sys.stdout.write("\n")
    sys.stdout.write(
        table(
            ["BrokerId", "Host:Port", "Rack", "State"],
            [
                [str(b.node_id), f"{b.host}:{b.port}", b.rack or "-", "fenced" if b.fenced else "unfenced"]
                for b in result.brokers
            ],
        )
    )
    sys.stdout.write("\n")
    sys.stdout.write(replication_table(result))


def status_lines(result: ClusterStatus) -> str:
    """The lines of kafka-metadata-quorum.sh describe --status."""
    now = int(time.time() * 1000)
    followers = [r for r in result.replicas if r.is_voter and r.node_id != result.leader_id]
    max_lag = max((r.lag for r in followers), default=0)
    max_lag_ms = max((now - r.last_caught_up_ms for r in followers if r.last_caught_up_ms >= 0), default=0)
    return (
        f"ClusterId:              {result.cluster_id}\n"
        f"LeaderId:               {result.leader_id}\n"
        f"LeaderEpoch:            {result.leader_epoch}\n"
        f"HighWatermark:          {result.high_watermark}\n"
        f"MaxFollowerLag:         {max_lag}\n"
        f"MaxFollowerLagTimeMs:   {max_lag_ms}\n"
        f"CurrentVoters:          {_replica_list(result, voters=True)}\n"
        f"CurrentObservers:       {_replica_list(result, voters=False)}\n"
    )


def _replica_list(result: ClusterStatus, *, voters: bool) -> str:
    """Kafka 4's list of replicas: `[{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://h:p"]}]`,
    the directory id only when the replica has one and the endpoints only when the quorum names them."""
    from formats.checkpoints import uuid_to_base64

    items = []
    for r in sorted((r for r in result.replicas if r.is_voter == voters), key=lambda r: r.node_id):
        text = f'{{"id": {r.node_id}'
        if r.directory_id.int:
            text += f', "directoryId": "{uuid_to_base64(r.directory_id)}"'
        if result.endpoints.get(r.node_id):
            text += ', "endpoints": [' + ", ".join(f'"{e}"' for e in result.endpoints[r.node_id]) + "]"
        items.append(text + "}")
    return "[" + ", ".join(items) + "]"


def replication_table(result: ClusterStatus) -> str:
    """The table of kafka-metadata-quorum.sh describe --replication."""
    now = int(time.time() * 1000)
    return table(
        ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"],
        [
            [
                str(r.node_id),
                str(r.log_end_offset),
                str(r.lag),
                _ago(now, r.last_fetch_ms),
                _ago(now, r.last_caught_up_ms),
                "Leader" if r.node_id == result.leader_id else ("Follower" if r.is_voter else "Observer"),
            ]
            for r in result.replicas
        ],
    )


def _ago(now_ms: int, timestamp_ms: int) -> str:
    return "-" if timestamp_ms < 0 else f"{max(now_ms - timestamp_ms, 0)} ms ago"
