"""`kcli topics`: create, list, describe, alter (add partitions) and delete topics, as kafka-topics.sh."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcli.cli.admin import (
    BOOTSTRAP,
    COMMAND_CONFIG,
    OUTPUT,
    YES,
    confirm_matches,
    run_on_cluster,
    write_json_lines,
)
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from ops.topics import PartitionDescription, TopicDescription

topics_app = typer.Typer(
    help="Topics: create, list, describe (leaders, replicas, ISR, configs), add partitions, delete.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(topics_app, name="topics")

TOPIC_REGEX_HELP = (
    "A topic name or a regular expression matching whole names (',' means or; escape dots: 'orders\\.eu')."
)
EXCLUDE_INTERNAL = typer.Option(
    False, "--exclude-internal", help="Leave out internal topics (__consumer_offsets, ...)."
)
IF_EXISTS = typer.Option(False, "--if-exists", help="No error when no topic matches --topic.")


@topics_app.command("list")
def list_(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: str = typer.Option(None, "--topic", "-t", help=TOPIC_REGEX_HELP, show_default=False),
    exclude_internal: bool = EXCLUDE_INTERNAL,
    output: Output = OUTPUT,
) -> None:
    """Topic names, one a line; internal topics included unless --exclude-internal."""
    from ops.topics import list_topics

    names = run_on_cluster(
        bootstrap,
        lambda cluster: list_topics(cluster, topic, exclude_internal=exclude_internal),
        config=command_config,
    )
    if output is Output.json:
        write_json_lines({"topic": name} for name in names)
    else:
        sys.stdout.write("".join(name + "\n" for name in names))


@topics_app.command("describe")
def describe(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: str = typer.Option(
        None, "--topic", "-t", help=TOPIC_REGEX_HELP + " Default: every topic.", show_default=False
    ),
    exclude_internal: bool = EXCLUDE_INTERNAL,
    if_exists: bool = IF_EXISTS,
    under_replicated: bool = typer.Option(
        False,
        "--under-replicated-partitions",
        help="Only partitions whose ISR is smaller than their replica set.",
    ),
    unavailable: bool = typer.Option(
        False,
        "--unavailable-partitions",
        help="Only partitions without a leader or whose leader is not a live broker.",
    ),
    under_min_isr: bool = typer.Option(
        False,
        "--under-min-isr-partitions",
        help="Only partitions without a leader or whose ISR is smaller than the topic's min.insync.replicas.",
    ),
    at_min_isr: bool = typer.Option(
        False,
        "--at-min-isr-partitions",
        help="Only partitions whose ISR is exactly the topic's min.insync.replicas.",
    ),
    with_overrides: bool = typer.Option(
        False,
        "--topics-with-overrides",
        help="Only topics with configs not at their default, and only their topic line.",
    ),
    output: Output = OUTPUT,
) -> None:
    """A topic line (TopicId, PartitionCount, ReplicationFactor, non-default Configs), then one line per
    partition (Leader, Replicas, Isr), as kafka-topics.sh --describe prints them.

    With --under-replicated-partitions, --unavailable-partitions, --under-min-isr-partitions or
    --at-min-isr-partitions only the partition lines matching any of them are printed (no topic lines);
    with --output json each topic is one object whose "partitions" are the matching ones, and topics
    without any are left out.
    """
    from ops.topics import describe_topics

    report = under_replicated or unavailable or under_min_isr or at_min_isr
    if report and with_overrides:
        raise KcliError(
            "--topics-with-overrides cannot be combined with --under-replicated-partitions, "
            "--unavailable-partitions, --under-min-isr-partitions or --at-min-isr-partitions."
        )
    descriptions = run_on_cluster(
        bootstrap,
        lambda cluster: describe_topics(
            cluster, topic, exclude_internal=exclude_internal, if_exists=if_exists, with_configs=not report
        ),
        config=command_config,
    )

    def shown(d: TopicDescription) -> list[PartitionDescription]:
        if with_overrides:
            return []
        return [
            p
            for p in d.partitions
            if not report
            or (under_replicated and p.under_replicated)
            or (unavailable and p.unavailable)
            or (under_min_isr and p.under_min_isr)
            or (at_min_isr and p.at_min_isr)
        ]

    if with_overrides:
        descriptions = [d for d in descriptions if d.configs]
    if output is Output.json:
        write_json_lines(d.to_json(shown(d)) for d in descriptions if not report or shown(d))
        return
    lines = []
    for d in descriptions:
        if not report:
            lines.append(_topic_line(d))
        lines += [_partition_line(d.name, p) for p in shown(d)]
    sys.stdout.write("".join(line + "\n" for line in lines))


@topics_app.command("create")
def create(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: str = typer.Option(..., "--topic", "-t", help="The topic to create.", show_default=False),
    partitions: int = typer.Option(
        None,
        "--partitions",
        help="Number of partitions [default: the broker's num.partitions].",
        show_default=False,
    ),
    replication_factor: int = typer.Option(
        None,
        "--replication-factor",
        help="Replicas of each partition [default: the broker's default.replication.factor].",
        show_default=False,
    ),
    replica_assignment: str = typer.Option(
        None,
        "--replica-assignment",
        metavar="B:B,B:B,...",
        help="Brokers of each partition: '1:2,2:3' puts partition 0 on brokers 1 and 2, partition 1 on 2 and 3.",
        show_default=False,
    ),
    config: list[str] = typer.Option(
        None, "--config", metavar="KEY=VALUE", help="A topic config override; repeatable.", show_default=False
    ),
    if_not_exists: bool = typer.Option(
        False, "--if-not-exists", help="No error (and nothing done) when the topic exists."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Let the broker validate the request (CreateTopics validate_only); create nothing.",
    ),
    output: Output = OUTPUT,
) -> None:
    """Create a topic with CreateTopics: partitions and replication factor, or an explicit replica assignment."""
    from ops.configs import parse_key_values
    from ops.topics import create_topic, parse_replica_assignment

    # -1 is CreateTopics' "the broker's default": only leaving the option out may say that
    if partitions is not None and partitions < 1:
        raise KcliError("the number of partitions must be at least 1.")
    if replication_factor is not None and replication_factor < 1:
        raise KcliError("the replication factor must be between 1 and 32767.")
    if replica_assignment is not None and (partitions is not None or replication_factor is not None):
        raise KcliError("--replica-assignment cannot be combined with --partitions or --replication-factor.")
    assignment = parse_replica_assignment(replica_assignment) if replica_assignment is not None else None
    configs = parse_key_values(config or (), "--config")
    created = run_on_cluster(
        bootstrap,
        lambda cluster: create_topic(
            cluster,
            topic,
            partitions=partitions,
            replication_factor=replication_factor,
            assignment=assignment,
            configs=configs,
            if_not_exists=if_not_exists,
            validate_only=dry_run,
        ),
        config=command_config,
    )
    if "." in topic or "_" in topic:  # TopicCommand's warning, on stderr here
        print(
            "kcli: warning: topics with a period ('.') or an underscore ('_') could collide in metric "
            "names; best use either, but not both.",
            file=sys.stderr,
        )
    if output is Output.json:
        write_json_lines([{**created.to_json(), "dry_run": dry_run}])
    elif dry_run:
        print(
            f"Topic {topic} would be created with {created.num_partitions} partitions, "
            f"replication factor {created.replication_factor} (dry run)."
        )
    elif created.created:
        print(f"Created topic {topic}.")


@topics_app.command("alter")
def alter(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: str = typer.Option(..., "--topic", "-t", help=TOPIC_REGEX_HELP, show_default=False),
    partitions: int = typer.Option(
        ..., "--partitions", help="The new number of partitions (it can only grow).", show_default=False
    ),
    replica_assignment: str = typer.Option(
        None,
        "--replica-assignment",
        metavar="B:B,B:B,...",
        help="Brokers of every partition, as for create; the entries past the current count place the new ones.",
        show_default=False,
    ),
    if_exists: bool = IF_EXISTS,
    yes: bool = YES,
) -> None:
    """Add partitions to topics (CreatePartitions). To change a topic's configs use `kcli configs alter`.

    Records with a key may go to another partition than before once partitions are added. Beyond
    kafka-topics.sh: internal topics are refused (a group's or a transaction's partition is a hash modulo
    their count), and when --topic matches topics it does not name, they are listed and kcli asks first
    (or wants --yes when stdin is not a terminal).
    """
    from ops.topics import create_partitions, parse_replica_assignment

    assignment = parse_replica_assignment(replica_assignment) if replica_assignment is not None else None
    altered = run_on_cluster(
        bootstrap,
        lambda cluster: create_partitions(
            cluster,
            topic,
            partitions,
            assignment=assignment,
            if_exists=if_exists,
            confirm=confirm_matches("alter", topic, yes),
        ),
        config=command_config,
    )
    for name in altered:
        print(f"Topic {name} now has {partitions} partitions.")


@topics_app.command("delete")
def delete(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: str = typer.Option(..., "--topic", "-t", help=TOPIC_REGEX_HELP, show_default=False),
    if_exists: bool = IF_EXISTS,
    yes: bool = YES,
) -> None:
    """Delete every topic matching --topic (DeleteTopics) and all their records.

    Beyond kafka-topics.sh: internal topics (__consumer_offsets, __transaction_state,
    __share_group_state) are refused, as the ZooKeeper-era tool did; and when --topic matches topics it
    does not name, they are listed and kcli asks first (or wants --yes when stdin is not a terminal).
    """
    from ops.topics import delete_topics

    deleted = run_on_cluster(
        bootstrap,
        lambda cluster: delete_topics(
            cluster, topic, if_exists=if_exists, confirm=confirm_matches("delete", topic, yes)
        ),
        config=command_config,
    )
    for name in deleted:
        print(f"Deleted topic {name}.")


# --- rendering -------------------------------------------------------------------------------------


def _topic_line(d: TopicDescription) -> str:
    """kafka-topics.sh's topic line: tab-separated, TopicId only when the topic has one."""
    configs = ",".join(f"{k}={'null' if v is None else v}" for k, v in (d.configs or {}).items())
    topic_id = f"\tTopicId: {d.topic_id_text}" if d.topic_id_text else ""
    return (
        f"Topic: {d.name}{topic_id}\tPartitionCount: {len(d.partitions)}\t"
        f"ReplicationFactor: {d.replication_factor}\tConfigs: {configs}"
    )


def _partition_line(topic: str, p: PartitionDescription) -> str:
    """kafka-topics.sh's partition line; Elr and LastKnownElr are N/A when the broker has no
    DescribeTopicPartitions (Metadata does not carry them)."""
    leader = str(p.leader) if p.leader >= 0 else "none"
    return (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}\t"
        f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
        f"Elr: {_replica_list(p.elr)}\tLastKnownElr: {_replica_list(p.last_known_elr)}"
    )


def _replica_list(replicas: tuple[int, ...] | None) -> str:
    return "N/A" if replicas is None else ",".join(map(str, replicas))
