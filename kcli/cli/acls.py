"""`kcli acls`: add, remove, list and check ACLs, with kafka-acls.sh's flags and lines."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kcli.cli.admin import BOOTSTRAP, COMMAND_CONFIG, OUTPUT, run_on_cluster, write_json_lines
from kcli.cli.app import Output, app
from kcli.errors import KcliError

if TYPE_CHECKING:
    from kcli.cluster import Cluster
    from kcli.security.acl import AclOperation, PatternType, ResourceType, StandardAcl

acls_app = typer.Typer(
    help="ACLs of the StandardAuthorizer: add, remove, list, and check what a principal may do.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(acls_app, name="acls")

ALLOW_PRINCIPAL = typer.Option(
    None, "--allow-principal", help="Principal (User:name) the ACLs allow; repeatable."
)
DENY_PRINCIPAL = typer.Option(
    None, "--deny-principal", help="Principal (User:name) the ACLs deny; repeatable."
)
ALLOW_HOST = typer.Option(
    None, "--allow-host", help="Host the allow ACLs apply from [default: * with --allow-principal]."
)
DENY_HOST = typer.Option(
    None, "--deny-host", help="Host the deny ACLs apply from [default: * with --deny-principal]."
)
OPERATION = typer.Option(
    None,
    "--operation",
    help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, AlterConfigs, DescribeConfigs, "
    "IdempotentWrite, All; repeatable [default: All].",
)
TOPIC = typer.Option(None, "--topic", help="Topic name (or * for every topic); repeatable.")
GROUP = typer.Option(None, "--group", help="Consumer group (or *); repeatable.")
TRANSACTIONAL_ID = typer.Option(None, "--transactional-id", help="Transactional id (or *); repeatable.")
CLUSTER = typer.Option(False, "--cluster", help="The cluster resource (kafka-cluster).")
PRODUCER = typer.Option(
    False,
    "--producer",
    help="WRITE, DESCRIBE, CREATE on the topics; WRITE, DESCRIBE on --transactional-id; IDEMPOTENT_WRITE with --idempotent.",
)
CONSUMER = typer.Option(False, "--consumer", help="READ, DESCRIBE on the topics and READ on the groups.")
IDEMPOTENT = typer.Option(False, "--idempotent", help="With --producer: IDEMPOTENT_WRITE on the cluster.")
FORCE = typer.Option(False, "--force", help="Remove without asking.")


def _operation(text: str) -> AclOperation:
    from kcli.security.acl import AclOperation

    key = text.replace("-", "").replace("_", "").upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    raise KcliError(f"--operation {text!r} is not one of Read, Write, Create, Delete, Alter, Describe, "
                    "ClusterAction, AlterConfigs, DescribeConfigs, IdempotentWrite, All.")  # fmt: skip


def _pattern_type(text: str, *, adding: bool) -> PatternType:
    from kcli.security.acl import PatternType

    try:
        pattern = PatternType[text.upper()]
    except KeyError:
        pattern = PatternType.UNKNOWN
    if pattern == PatternType.UNKNOWN or (
        adding and pattern not in (PatternType.LITERAL, PatternType.PREFIXED)
    ):
        raise KcliError(
            f"A '--resource-pattern-type' value of '{text}' is not valid when "
            f"{'adding' if adding else 'listing or removing'} acls."
        )
    return pattern


def _resources(
    topic: list[str] | None, group: list[str] | None, transactional_id: list[str] | None, cluster: bool
) -> list[tuple[ResourceType, str]]:
    from kcli.security.acl import CLUSTER_NAME, ResourceType

    found = [(ResourceType.TOPIC, t) for t in topic or ()]
    found += [(ResourceType.GROUP, g) for g in group or ()]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_id or ()]
    if cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


_SUPPORTED = {
    "TOPIC": (
        "READ",
        "WRITE",
        "CREATE",
        "DESCRIBE",
        "DELETE",
        "ALTER",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "ALL",
    ),
    "GROUP": ("READ", "DESCRIBE", "DELETE", "ALL"),
    "CLUSTER": (
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
        "ALL",
    ),  # fmt: skip
    "TRANSACTIONAL_ID": ("DESCRIBE", "WRITE", "TWO_PHASE_COMMIT", "ALL"),
}


def _entries(
    principals: list[str] | None, hosts: list[str] | None, allow: bool, what: str
) -> list[tuple[str, str, bool]]:
    if hosts and not principals:
        raise KcliError(f"--{what}-host needs --{what}-principal.")
    for principal in principals or ():
        if ":" not in principal or not principal.split(":", 1)[1]:
            raise KcliError(f"Invalid principal {principal!r}: expected Type:name, e.g. User:alice.")
    return [(p, h, allow) for p in principals or () for h in hosts or ["*"]]


def _bindings(
    allow_principal: list[str] | None,
    deny_principal: list[str] | None,
    allow_host: list[str] | None,
    deny_host: list[str] | None,
    operation: list[str] | None,
    resources: list[tuple[ResourceType, str]],
    pattern_type: PatternType,
    producer: bool,
    consumer: bool,
    idempotent: bool,
) -> list[StandardAcl]:
    """AclCommand.getResourceToAcls: every principal x host x operation on every resource."""
    from kcli.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, ResourceType, StandardAcl

    entries = _entries(allow_principal, allow_host, True, "allow") + _entries(
        deny_principal, deny_host, False, "deny"
    )
    if not entries:
        raise KcliError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    per_resource: list[tuple[ResourceType, str, list[AclOperation]]] = []
    if producer or consumer:
        if operation:
            raise KcliError("--operation cannot be combined with --producer or --consumer.")
        for resource_type, name in resources:
            ops: list[AclOperation] = []
            if resource_type == ResourceType.TOPIC:
                if producer:
                    ops += [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
                if consumer:
                    ops += [op for op in (AclOperation.READ, AclOperation.DESCRIBE) if op not in ops]
            elif resource_type == ResourceType.GROUP and consumer:
                ops = [AclOperation.READ]
            elif resource_type == ResourceType.TRANSACTIONAL_ID and producer:
                ops = [AclOperation.WRITE, AclOperation.DESCRIBE]
            if ops:
                per_resource.append((resource_type, name, ops))
        if producer and idempotent:
            per_resource.append((ResourceType.CLUSTER, CLUSTER_NAME, [AclOperation.IDEMPOTENT_WRITE]))
        if consumer and not any(t == ResourceType.GROUP for t, _ in resources):
            raise KcliError("With --consumer you must specify a --group.")
    else:
        ops = [_operation(o) for o in operation or ["All"]]
        for resource_type, name in resources:
            bad = [op.name for op in ops if op.name not in _SUPPORTED[resource_type.name]]
            if bad:
                raise KcliError(
                    f"ResourceType {resource_type.name} only supports operations "
                    f"{','.join(_SUPPORTED[resource_type.name])}"
                )
            per_resource.append((resource_type, name, ops))
    return [
        StandardAcl(
            resource_type,
            name,
            pattern_type,
            principal,
            host,
            op,
            AclPermissionType.ALLOW if allow else AclPermissionType.DENY,
        )
        for resource_type, name, ops in per_resource
        for principal, host, allow in entries
        for op in ops
    ]


@acls_app.command("add")
def add(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    allow_principal: list[str] = ALLOW_PRINCIPAL,
    deny_principal: list[str] = DENY_PRINCIPAL,
    allow_host: list[str] = ALLOW_HOST,
    deny_host: list[str] = DENY_HOST,
    operation: list[str] = OPERATION,
    topic: list[str] = TOPIC,
    group: list[str] = GROUP,
    transactional_id: list[str] = TRANSACTIONAL_ID,
    cluster: bool = CLUSTER,
    resource_pattern_type: str = typer.Option(
        "LITERAL", "--resource-pattern-type", help="LITERAL or PREFIXED."
    ),
    producer: bool = PRODUCER,
    consumer: bool = CONSUMER,
    idempotent: bool = IDEMPOTENT,
) -> None:
    """Add ACLs (CreateAcls), printing kafka-acls.sh's "Adding ACLs for resource" blocks."""
    from ops.acls import by_resource, create_acls, resource_block

    pattern = _pattern_type(resource_pattern_type, adding=True)
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        raise KcliError(
            "You must specify one of: --topic, --group, --transactional-id, --cluster when adding ACLs."
        )
    acls = _bindings(
        allow_principal,
        deny_principal,
        allow_host,
        deny_host,
        operation,
        resources,
        pattern,
        producer,
        consumer,
        idempotent,
    )

    async def work(cluster_: Cluster) -> None:
        for resource, chunk in by_resource(acls).items():
            sys.stdout.write(resource_block("Adding ACLs", resource, chunk))
            await create_acls(cluster_, chunk)

    run_on_cluster(bootstrap, work, config=command_config)


@acls_app.command("remove")
def remove(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    allow_principal: list[str] = ALLOW_PRINCIPAL,
    deny_principal: list[str] = DENY_PRINCIPAL,
    allow_host: list[str] = ALLOW_HOST,
    deny_host: list[str] = DENY_HOST,
    operation: list[str] = OPERATION,
    topic: list[str] = TOPIC,
    group: list[str] = GROUP,
    transactional_id: list[str] = TRANSACTIONAL_ID,
    cluster: bool = CLUSTER,
    resource_pattern_type: str = typer.Option(
        "LITERAL", "--resource-pattern-type", help="LITERAL, PREFIXED, MATCH or ANY."
    ),
    producer: bool = PRODUCER,
    consumer: bool = CONSUMER,
    idempotent: bool = IDEMPOTENT,
    force: bool = FORCE,
) -> None:
    """Remove ACLs (DeleteAcls): the ones named, or with no principal every ACL of the resources."""
    from kcli.security.acl import AclBindingFilter
    from ops.acls import delete_acls, entry_text

    pattern = _pattern_type(resource_pattern_type, adding=False)
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        raise KcliError(
            "You must specify one of: --topic, --group, --transactional-id, --cluster when removing ACLs."
        )
    if allow_principal or deny_principal:
        acls = _bindings(
            allow_principal, deny_principal, allow_host, deny_host, operation, resources, pattern,
            producer, consumer, idempotent,
        )  # fmt: skip
        filters = [
            AclBindingFilter(
                a.resource_type, a.resource_name, pattern, a.principal, a.host, a.operation, a.permission_type
            )
            for a in acls
        ]
        question = (
            "Are you sure you want to remove ACLs: \n "
            + "\n".join("\t" + entry_text(a) for a in acls)
            + " \n"
        )
    else:
        filters = [AclBindingFilter(t, n, pattern) for t, n in resources]
        question = "Are you sure you want to delete all ACLs for " + ", ".join(
            f"{t.name} {n}" for t, n in resources
        )
    if not force:
        answer = input(f"{question}? (y/n)\n")
        if answer.strip().lower() != "y":
            return

    async def work(cluster_: Cluster) -> None:
        await delete_acls(cluster_, filters)

    run_on_cluster(bootstrap, work, config=command_config)


@acls_app.command("list")
def list_(
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    topic: list[str] = TOPIC,
    group: list[str] = GROUP,
    transactional_id: list[str] = TRANSACTIONAL_ID,
    cluster: bool = CLUSTER,
    resource_pattern_type: str = typer.Option(
        "LITERAL", "--resource-pattern-type", help="LITERAL, PREFIXED, MATCH or ANY."
    ),
    principal: list[str] = typer.Option(None, "--principal", help="Only this principal's ACLs; repeatable."),
    output: Output = OUTPUT,
) -> None:
    """List ACLs (DescribeAcls) as kafka-acls.sh --list prints them: every ACL, or the resources named."""
    from kcli.security.acl import AclBindingFilter
    from ops.acls import acl_json, by_resource, describe_acls, resource_block

    pattern = _pattern_type(resource_pattern_type, adding=False)
    resources = _resources(topic, group, transactional_id, cluster)
    filters = [AclBindingFilter(t, n, pattern) for t, n in resources] or [AclBindingFilter()]

    async def work(cluster_: Cluster) -> list[StandardAcl]:
        found: list[StandardAcl] = []
        for acl_filter in filters:
            found += [a for a in await describe_acls(cluster_, acl_filter) if a not in found]
        return found

    acls = run_on_cluster(bootstrap, work, config=command_config)
    if principal:
        acls = [a for a in acls if a.principal in principal]
    if output is Output.json:
        write_json_lines(acl_json(a) for a in acls)
        return
    for resource, chunk in by_resource(acls).items():
        sys.stdout.write(resource_block("Current ACLs", resource, chunk))


@acls_app.command("check")
def check(
    principal: str = typer.Option(..., "--principal", help="The principal, e.g. User:alice."),
    operation: str = typer.Option(..., "--operation", help="The operation, e.g. Write."),
    bootstrap: str | None = BOOTSTRAP,
    command_config: Path | None = COMMAND_CONFIG,
    host: str = typer.Option("*", "--host", help="The client's address [default: any host]."),
    topic: str | None = typer.Option(None, "--topic", help="The topic."),
    group: str | None = typer.Option(None, "--group", help="The consumer group."),
    transactional_id: str | None = typer.Option(None, "--transactional-id", help="The transactional id."),
    cluster: bool = CLUSTER,
    output: Output = OUTPUT,
) -> None:
    """Whether PRINCIPAL may do OPERATION on the resource, and which ACL decided (from DescribeAcls, as
    the StandardAuthorizer decides; super.users and allow.everyone.if.no.acl.found are not known here).
    Exits 1 when denied."""
    from ops.acls import check_acl

    if ":" not in principal:
        raise KcliError(f"Invalid principal {principal!r}: expected Type:name, e.g. User:alice.")
    resources = _resources(
        [topic] if topic else None,
        [group] if group else None,
        [transactional_id] if transactional_id else None,
        cluster,
    )
    if len(resources) != 1:
        raise KcliError("Name exactly one of --topic, --group, --transactional-id, --cluster.")
    op = _operation(operation)
    (resource,) = resources

    async def work(cluster_: Cluster):  # type: ignore[no-untyped-def]
        return await check_acl(cluster_, principal, host, op, resource[0], resource[1])

    result = run_on_cluster(bootstrap, work, config=command_config)
    if output is Output.json:
        acl = result.decision.acl
        write_json_lines(
            [
                {
                    "principal": principal,
                    "operation": op.name,
                    "resource_type": resource[0].name,
                    "resource_name": resource[1],
                    "allowed": result.allowed,
                    "rule": result.decision.rule if acl is None else "MatchingAcl",
                    "acl": None if acl is None else {k: v for k, v in _acl_fields(acl).items()},
                }
            ]
        )
    else:
        sys.stdout.write(result.line(principal, op, resource) + "\n")
    if not result.allowed:
        raise typer.Exit(1)


def _acl_fields(acl: StandardAcl) -> dict[str, str]:
    from ops.acls import acl_json

    return acl_json(acl)
