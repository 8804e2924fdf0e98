"""`kcli configs`: describe and alter topic and broker configs, and users' SCRAM credentials, as
kafka-configs.sh."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcli.cli.admin import BOOTSTRAP, COMMAND_CONFIG, OUTPUT, run_on_cluster, write_json_lines
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from kcli.cluster import Cluster
    from ops.configs import ResourceConfigs, ResourceType

configs_app = typer.Typer(
    help="Topic and broker configs: where each value comes from, and changing them; users' SCRAM credentials.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(configs_app, name="configs")


class EntityType(StrEnum):
    topics = "topics"
    brokers = "brokers"
    users = "users"


ENTITY_TYPE = typer.Option(
    None,
    "--entity-type",
    help="topics, brokers (with --entity-name or --entity-default) or users (SCRAM credentials, with "
    "--entity-name).",
    show_default=False,
)
ENTITY_NAME = typer.Option(
    None, "--entity-name", help="The topic's name, the broker's id or the user's name.", show_default=False
)
ENTITY_DEFAULT = typer.Option(
    False, "--entity-default", help="With --entity-type brokers: the defaults shared by every broker."
)
TOPIC = typer.Option(
    None, "--topic", help="Short for --entity-type topics --entity-name TOPIC.", show_default=False
)
BROKER = typer.Option(
    None, "--broker", help="Short for --entity-type brokers --entity-name ID.", show_default=False
)
BROKER_DEFAULTS = typer.Option(
    False, "--broker-defaults", help="Short for --entity-type brokers --entity-default."
)


@configs_app.command("describe")
def describe(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    entity_type: EntityType = ENTITY_TYPE,
    entity_name: str = ENTITY_NAME,
    entity_default: bool = ENTITY_DEFAULT,
    topic: str = TOPIC,
    broker: str = BROKER,
    broker_defaults: bool = BROKER_DEFAULTS,
    all_: bool = typer.Option(
        False, "--all", help="Every config with its effective value, not only those set on the entity."
    ),
    output: Output = OUTPUT,
) -> None:
    """The configs set on a topic or broker, each with its synonyms (where else it is set, most specific
    first), as kafka-configs.sh --describe prints them; --all shows every config.

    Without a name, every topic (or every broker and the broker defaults) is described. Users
    (--entity-type users) show their SCRAM credentials: each mechanism and its iterations, never a key.
    """
    from ops.configs import BROKER_DEFAULTS as DEFAULTS_NAME
    from ops.configs import ResourceType, describe_configs, entity_names

    if entity_type is EntityType.users:
        _describe_users(bootstrap, entity_name, entity_default, all_, output)
        return
    kind, name = _entity(
        entity_type, entity_name, entity_default, topic, broker, broker_defaults, alter=False
    )

    async def work(cluster: Cluster) -> list[ResourceConfigs]:
        names = [name] if name is not None else await entity_names(cluster, kind)
        return await describe_configs(cluster, [(kind, n) for n in names])

    described = run_on_cluster(bootstrap, work, config=command_config)
    if output is Output.json:
        write_json_lines(d.to_json(d.entries if all_ else d.dynamic()) for d in described)
        return
    lines = []
    for d in described:
        if kind is ResourceType.BROKER and d.name == DEFAULTS_NAME:
            lines.append("Default configs for brokers in the cluster are:")
        else:
            lines.append(f"{'All' if all_ else 'Dynamic'} configs for {kind.label} {d.name} are:")
        for e in d.entries if all_ else d.dynamic():
            synonyms = ", ".join(str(s) for s in e.synonyms)
            value = "null" if e.value is None else e.value
            lines.append(
                f"  {e.name}={value} sensitive={str(e.is_sensitive).lower()} synonyms={{{synonyms}}}"
            )
    sys.stdout.write("".join(line + "\n" for line in lines))


@configs_app.command("alter")
def alter(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    entity_type: EntityType = ENTITY_TYPE,
    entity_name: str = ENTITY_NAME,
    entity_default: bool = ENTITY_DEFAULT,
    topic: str = TOPIC,
    broker: str = BROKER,
    broker_defaults: bool = BROKER_DEFAULTS,
    add_config: str = typer.Option(
        None,
        "--add-config",
        metavar="K=V,K2=V2",
        help="Configs to set; square brackets keep commas inside a value: 'k1=v1,k2=[v1,v2]'.",
        show_default=False,
    ),
    delete_config: list[str] = typer.Option(
        None,
        "--delete-config",
        metavar="K[,K2]",
        help="Configs to remove (back to their default); repeatable or comma-separated.",
        show_default=False,
    ),
) -> None:
    """Set or remove configs of one topic or broker with IncrementalAlterConfigs, or a user's SCRAM
    credentials with AlterUserScramCredentials.

    The broker checks each value and refuses the whole change with its reason if one is invalid.
    For --entity-type users, --add-config takes 'SCRAM-SHA-256=[iterations=8192,password=SECRET]'
    (iterations 4096-16384, default 4096) and --delete-config a mechanism name: the password is salted
    here and never sent nor printed.
    """
    from ops.configs import BROKER_DEFAULTS as DEFAULTS_NAME
    from ops.configs import alter_configs, parse_add_config

    if entity_type is EntityType.users:
        _alter_user(bootstrap, entity_name, entity_default, add_config, delete_config)
        return
    kind, name = _entity(entity_type, entity_name, entity_default, topic, broker, broker_defaults, alter=True)
    assert name is not None
    to_set = parse_add_config(add_config) if add_config is not None else {}
    to_delete = [k.strip() for item in delete_config or () for k in item.split(",") if k.strip()]
    if not to_set and not to_delete:
        raise KcliError("give --add-config, --delete-config or both.")
    run_on_cluster(
        bootstrap,
        lambda cluster: alter_configs(cluster, kind, name, set_configs=to_set, delete_configs=to_delete),
        config=command_config,
    )
    if name == DEFAULTS_NAME:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {kind.label} {name}.")


# ---------------------------------------------------------------------------------------------------


def _describe_users(
    bootstrap: str, name: str | None, entity_default: bool, all_: bool, output: Output
) -> None:
    """kafka-configs.sh --describe --entity-type users: one line per user with credentials."""
    from ops.scram import describe_user_scram_credentials

    if entity_default or all_:
        raise KcliError(
            f"{'--entity-default' if entity_default else '--all'} does not apply to users: kcli keeps their "
            "SCRAM credentials only (no user quotas)."
        )
    if name is not None:
        _check_user_name(name)
    described = run_on_cluster(
        bootstrap, lambda cluster: describe_user_scram_credentials(cluster, None if name is None else [name])
    )
    if output is Output.json:
        write_json_lines(d.to_json() for d in described)
        return
    sys.stdout.write("".join(d.describe_line() + "\n" for d in described))


def _check_user_name(name: str) -> None:
    try:
        name.encode()
    except UnicodeEncodeError:
        raise KcliError("the --entity-name of a user must be UTF-8 text.") from None


def _alter_user(
    bootstrap: str,
    name: str | None,
    entity_default: bool,
    add_config: str | None,
    delete_config: list[str] | None,
) -> None:
    """kafka-configs.sh --alter --entity-type users with SCRAM mechanisms as the configs."""
    from ops.configs import ConfigError, parse_add_config
    from ops.scram import alter_user_scram_credentials, scram_deletions, scram_upsertions

    if entity_default:
        raise KcliError(
            "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials "
            "using --bootstrap-server."
        )
    if not name:
        raise KcliError("name the user with --entity-name.")
    _check_user_name(name)
    try:
        to_set = parse_add_config(add_config) if add_config is not None else {}
    except ConfigError:  # its sentence would quote the value, and so the password
        raise KcliError(
            "--add-config for a user is MECHANISM=[iterations=N,password=PASSWORD], "
            "e.g. 'SCRAM-SHA-512=[iterations=8192,password=...]'."
        ) from None
    upsertions = scram_upsertions(to_set)
    deletions = scram_deletions(
        k.strip() for item in delete_config or () for k in item.split(",") if k.strip()
    )
    if not upsertions and not deletions:
        raise KcliError("give --add-config, --delete-config or both.")
    run_on_cluster(
        bootstrap,
        lambda cluster: alter_user_scram_credentials(
            cluster, name, upsertions=upsertions, deletions=deletions
        ),
    )
    print(f"Completed updating config for user {name}.")


def _entity(
    entity_type: EntityType | None,
    entity_name: str | None,
    entity_default: bool,
    topic: str | None,
    broker: str | None,
    broker_defaults: bool,
    *,
    alter: bool,
) -> tuple[ResourceType, str | None]:
    """(resource type, name) from kafka-configs.sh's two spellings; None as name means every entity."""
    from ops.configs import BROKER_DEFAULTS as DEFAULTS_NAME
    from ops.configs import ResourceType, broker_id

    shorthands = [flag for flag, given in (("--topic", topic), ("--broker", broker)) if given is not None]
    shorthands += ["--broker-defaults"] if broker_defaults else []
    long_form = entity_type is not None or entity_name is not None or entity_default
    if shorthands and long_form:
        raise KcliError(
            "--entity-type/--entity-name/--entity-default cannot be combined with " + shorthands[0] + "."
        )
    if len(shorthands) > 1:
        raise KcliError(f"give one of {', '.join(shorthands)}.")
    if topic is not None:
        return ResourceType.TOPIC, topic
    if broker is not None:
        return ResourceType.BROKER, str(broker_id(broker))
    if broker_defaults:
        return ResourceType.BROKER, DEFAULTS_NAME
    if entity_type is None:
        raise KcliError(
            "give the entity: --topic, --broker, --broker-defaults or --entity-type with --entity-name."
        )
    kind = ResourceType.TOPIC if entity_type is EntityType.topics else ResourceType.BROKER
    if entity_name is not None and entity_default:
        raise KcliError("give --entity-name or --entity-default, not both.")
    if entity_default:
        if kind is ResourceType.TOPIC:
            raise KcliError("--entity-default applies to brokers, not topics.")
        return kind, DEFAULTS_NAME
    if entity_name is None:
        if alter:
            what = (
                "the topic with --entity-name"
                if kind is ResourceType.TOPIC
                else "the broker with --entity-name or --entity-default"
            )
            raise KcliError(f"name {what}.")
        return kind, None
    if kind is ResourceType.BROKER:
        return kind, str(broker_id(entity_name))
    return kind, entity_name
