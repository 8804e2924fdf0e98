"""`kcli configs`: describe and alter topic and broker configs, users' SCRAM credentials, and user
and client-id quotas, as kafka-configs.sh."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcli.cli.admin import (
    BOOTSTRAP,
    BOOTSTRAP_CONTROLLER,
    COMMAND_CONFIG,
    OUTPUT,
    bootstrap_target,
    run_on_cluster,
    write_json_lines,
)
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from kcli.cluster import Cluster
    from ops.configs import ResourceConfigs, ResourceType

configs_app = typer.Typer(
    help="Topic and broker configs: where each value comes from, and changing them; users' SCRAM "
    "credentials; user and client-id quotas.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(configs_app, name="configs")


class EntityType(StrEnum):
    topics = "topics"
    brokers = "brokers"
    users = "users"
    clients = "clients"
    ips = "ips"


ENTITY_TYPE = typer.Option(
    None,
    "--entity-type",
    help="topics, brokers (with --entity-name or --entity-default), users (quotas and SCRAM credentials), "
    "clients (quotas) or ips (connection_creation_rate).",
    show_default=False,
)
ENTITY_NAME = typer.Option(
    None,
    "--entity-name",
    help="The topic's name, the broker's id, the user's name, the client id or the IP address.",
    show_default=False,
)
ENTITY_DEFAULT = typer.Option(
    False,
    "--entity-default",
    help="With --entity-type brokers, users, clients or ips: the defaults shared by every broker, user, "
    "client or address.",
)
USER = typer.Option(
    None, "--user", help="The user's quotas: short for --entity-type users --entity-name USER."
)
CLIENT = typer.Option(
    None, "--client", help="The client id's quotas (with --user: that user's client id).", show_default=False
)
USER_DEFAULTS = typer.Option(False, "--user-defaults", help="The quotas of the default user.")
CLIENT_DEFAULTS = typer.Option(False, "--client-defaults", help="The quotas of the default client id.")
IP = typer.Option(
    None,
    "--ip",
    metavar="ADDR",
    help="The IP address's connection_creation_rate: short for --entity-type ips --entity-name ADDR.",
    show_default=False,
)
IP_DEFAULTS = typer.Option(
    False, "--ip-defaults", help="The default connection_creation_rate of every IP address."
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
    bootstrap_controller: str | None = BOOTSTRAP_CONTROLLER,
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
    user: str = USER,
    client: str = CLIENT,
    user_defaults: bool = USER_DEFAULTS,
    client_defaults: bool = CLIENT_DEFAULTS,
    ip: str = IP,
    ip_defaults: bool = IP_DEFAULTS,
    output: Output = OUTPUT,
) -> None:
    """The configs set on a topic or broker, each with its synonyms (where else it is set, most specific
    first), as kafka-configs.sh --describe prints them; --all shows every config.

    Without a name, every topic (or every broker and the broker defaults) is described. Users and
    clients show their quotas ("Quota configs for user-principal 'alice' are producer_byte_rate=1024.0"),
    ips (--ip, --ip-defaults) their connection_creation_rate;
    users also show their SCRAM credentials: each mechanism and its iterations, never a key.
    """
    from ops.configs import BROKER_DEFAULTS as DEFAULTS_NAME
    from ops.configs import ResourceType, describe_configs, entity_names

    bootstrap, controllers = bootstrap_target(bootstrap, bootstrap_controller)

    quota_entity = _quota_entity(
        entity_type,
        entity_name,
        entity_default,
        user,
        client,
        user_defaults,
        client_defaults,
        ip,
        ip_defaults,
        _resource_flags(topic, broker, broker_defaults),
    )
    if quota_entity is not None:
        if all_:
            raise KcliError("--all applies to topics and brokers, not to users, clients or ips.")
        _describe_quotas(bootstrap, controllers, command_config, quota_entity, output)
        return
    kind, name = _entity(
        entity_type, entity_name, entity_default, topic, broker, broker_defaults, alter=False
    )

    async def work(cluster: Cluster) -> list[ResourceConfigs]:
        names = [name] if name is not None else await entity_names(cluster, kind)
        return await describe_configs(cluster, [(kind, n) for n in names])

    described = run_on_cluster(bootstrap, work, config=command_config, controllers=controllers)
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
    bootstrap_controller: str | None = BOOTSTRAP_CONTROLLER,
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
    user: str = USER,
    client: str = CLIENT,
    user_defaults: bool = USER_DEFAULTS,
    client_defaults: bool = CLIENT_DEFAULTS,
    ip: str = IP,
    ip_defaults: bool = IP_DEFAULTS,
) -> None:
    """Set or remove configs of one topic or broker with IncrementalAlterConfigs, or a user's SCRAM
    credentials with AlterUserScramCredentials.

    The broker checks each value and refuses the whole change with its reason if one is invalid.
    For --entity-type users, --add-config takes 'SCRAM-SHA-256=[iterations=8192,password=SECRET]'
    (iterations 4096-16384, default 4096) and --delete-config a mechanism name: the password is salted
    here and never sent nor printed. Users and clients take quotas (producer_byte_rate,
    consumer_byte_rate, request_percentage, controller_mutation_rate) with AlterClientQuotas; --user
    with --client names a user's client id, --user-defaults and --client-defaults the defaults.
    --ip (a literal address or a host name that resolves) and --ip-defaults take connection_creation_rate.
    """
    from ops.configs import BROKER_DEFAULTS as DEFAULTS_NAME
    from ops.configs import alter_configs, parse_add_config

    bootstrap, controllers = bootstrap_target(bootstrap, bootstrap_controller)

    quota_entity = _quota_entity(
        entity_type,
        entity_name,
        entity_default,
        user,
        client,
        user_defaults,
        client_defaults,
        ip,
        ip_defaults,
        _resource_flags(topic, broker, broker_defaults),
    )
    if quota_entity is not None:
        _alter_quotas(bootstrap, controllers, command_config, quota_entity, add_config, delete_config)
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
        controllers=controllers,
    )
    if name == DEFAULTS_NAME:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {kind.label} {name}.")


# ---------------------------------------------------------------------------------------------------


def _resource_flags(topic: str | None, broker: str | None, broker_defaults: bool) -> list[str]:
    """The entity types --topic, --broker and --broker-defaults name, for ConfigCommand's checks."""
    flags = ["topics"] if topic is not None else []
    flags += ["brokers"] if broker is not None else []
    return flags + (["brokers"] if broker_defaults else [])


QuotaTarget = list[tuple[str, str | None]]
"""(kafka-configs.sh entity type "users"/"clients", name or None for the default) in the order given;
an empty name list ([("users", "")]) means every entity of the type."""


def _quota_entity(
    entity_type: EntityType | None,
    entity_name: str | None,
    entity_default: bool,
    user: str | None,
    client: str | None,
    user_defaults: bool,
    client_defaults: bool,
    ip: str | None,
    ip_defaults: bool,
    resource_flags: list[str],
) -> QuotaTarget | None:
    """The users/clients/ips entity the options name, or None when they name a topic or broker;
    ConfigCommand.checkArgs's refusals, in its order and with its sentences."""
    named = [("clients", client), ("users", user), ("ips", ip)]  # ConfigCommand's entityFlags order
    defaults = [("clients", client_defaults), ("users", user_defaults), ("ips", ip_defaults)]
    flags = [kind for kind, name in named if name is not None] + [kind for kind, on in defaults if on]
    kinds = ([entity_type.value] if entity_type is not None else []) + resource_flags + flags
    if not {"users", "clients", "ips"} & set(kinds):
        return None  # a topic or broker: _entity checks those options
    repeated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if repeated:
        raise KcliError(f"Duplicate entity type(s) specified: {','.join(repeated)}")
    if len(kinds) > 1 and set(kinds) != {"users", "clients"}:
        raise KcliError("Only 'users' and 'clients' entity types may be specified together")
    if flags and (entity_type is not None or entity_name is not None or entity_default):
        raise KcliError(
            "--entity-{type,name,default} should not be used in conjunction with specific entity flags"
        )
    if ip is not None:
        _check_ip(ip)
    if flags:
        target: QuotaTarget = []
        if user is not None or user_defaults:
            target.append(("users", None if user_defaults else user))
        if client is not None or client_defaults:
            target.append(("clients", None if client_defaults else client))
        if ip is not None or ip_defaults:
            target.append(("ips", None if ip_defaults else ip))
        for kind, name in target:
            if name is not None and kind != "ips":
                _check_user_name(name)
        return target
    if entity_type not in (EntityType.users, EntityType.clients, EntityType.ips):
        return None
    if entity_name is not None and entity_default:
        raise KcliError("give --entity-name or --entity-default, not both.")
    if entity_name is not None and entity_type is EntityType.ips:
        _check_ip(entity_name)
    elif entity_name is not None:
        _check_user_name(entity_name)
    if entity_name is not None:
        return [(entity_type.value, entity_name)]
    if entity_default:
        return [(entity_type.value, None)]
    return [(entity_type.value, "")]


def _quota_components(target: QuotaTarget) -> list[tuple[str, str | None, bool]]:
    from ops.client_quotas import ENTITY_TYPE_OF

    return [(ENTITY_TYPE_OF[kind], name or None, name is None) for kind, name in target]


def _describe_quotas(
    bootstrap: str | None, controllers: bool, command_config: Path | None, target: QuotaTarget, output: Output
) -> None:
    """kafka-configs.sh --describe for users or clients: quota lines, then (users only, no default,
    no client) the SCRAM credential lines."""
    from ops.client_quotas import describe_client_quotas
    from ops.scram import describe_user_scram_credentials

    kinds = [kind for kind, _ in target]
    names = [name for _, name in target]
    with_scram = set(kinds) == {"users"} and None not in names

    async def work(cluster: Cluster) -> tuple[list, list]:
        quotas = await describe_client_quotas(cluster, _quota_components(target))
        users = [name for name in names if name] or None
        scram = await describe_user_scram_credentials(cluster, users) if with_scram else []
        return quotas, scram

    quotas, scram = run_on_cluster(bootstrap, work, config=command_config, controllers=controllers)
    if output is Output.json:
        write_json_lines([*(q.to_json() for q in quotas), *(d.to_json() for d in scram)])
        return
    lines = [q.describe_line() for q in quotas] + [d.describe_line() for d in scram]
    sys.stdout.write("".join(line + "\n" for line in lines))


def _alter_quotas(
    bootstrap: str | None,
    controllers: bool,
    command_config: Path | None,
    target: QuotaTarget,
    add_config: str | None,
    delete_config: list[str] | None,
) -> None:
    """kafka-configs.sh --alter for users or clients: quotas with AlterClientQuotas, and for a named
    user alone its SCRAM mechanisms with AlterUserScramCredentials."""
    from kcli.security.scram import MECHANISMS
    from ops.client_quotas import ENTITY_TYPE_OF, alter_client_quotas, check_quota_configs
    from ops.configs import ConfigError, parse_add_config
    from ops.scram import alter_user_scram_credentials, scram_deletions, scram_upsertions

    if any(name == "" for _, name in target):
        raise KcliError(f"name the {target[0][0][:-1]} with --entity-name or give --entity-default.")
    try:
        to_set = parse_add_config(add_config) if add_config is not None else {}
    except ConfigError:  # its sentence would quote the value, and so a password
        raise KcliError("--add-config is K=V[,K2=V2], e.g. 'producer_byte_rate=1048576'.") from None
    to_delete = [k.strip() for item in delete_config or () for k in item.split(",") if k.strip()]
    if not to_set and not to_delete:
        raise KcliError("give --add-config, --delete-config or both.")
    scram_set = {k: v for k, v in to_set.items() if k in MECHANISMS}
    scram_del = [k for k in to_delete if k in MECHANISMS]
    if scram_set or scram_del:
        if len(target) != 1 or target[0][0] != "users" or target[0][1] is None:
            raise KcliError(
                "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials "
                "using --bootstrap-server."
                if target[0][1] is None
                else "SCRAM credentials belong to a user alone, not to a client id."
            )
    quota_set = check_quota_configs(
        {k: v for k, v in to_set.items() if k not in MECHANISMS},
        [k for k in to_delete if k not in MECHANISMS],
        target[0][0],
    )
    quota_del = [k for k in to_delete if k not in MECHANISMS]
    upsertions, deletions = scram_upsertions(scram_set), scram_deletions(scram_del)  # checked before sending
    entity = tuple((ENTITY_TYPE_OF[kind], name) for kind, name in target)

    async def work(cluster: Cluster) -> None:
        if quota_set or quota_del:
            await alter_client_quotas(cluster, entity, set_quotas=quota_set, delete_quotas=quota_del)
        if scram_set or scram_del:
            await alter_user_scram_credentials(
                cluster,
                target[0][1],  # type: ignore[arg-type]
                upsertions=upsertions,
                deletions=deletions,
            )

    run_on_cluster(bootstrap, work, config=command_config, controllers=controllers)
    kind, name = target[0]
    if name is None:
        print(f"Completed updating default config for {kind} in the cluster.")
    else:
        print(f"Completed updating config for {kind[:-1]} {name}.")


def _check_ip(name: str) -> None:
    """ConfigCommand's check (DynamicConfig.Ip.isValidIpEntity: InetAddress.getByName succeeds)."""
    from kcli.quota_config import is_valid_ip

    if not is_valid_ip(name):
        raise KcliError(f"The entity name for ips must be a valid IP or resolvable host, but it is: {name}")


def _check_user_name(name: str) -> None:
    try:
        name.encode()
    except UnicodeEncodeError:
        raise KcliError("the --entity-name of a user must be UTF-8 text.") from None


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
