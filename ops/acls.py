"""ACLs as kafka-acls.sh handles them: CreateAcls, DescribeAcls and DeleteAcls, and its printed lines.

Works against Apache Kafka as well as kcli's broker. `check` asks DescribeAcls for the ACLs that apply
to one resource (a MATCH filter) and decides as the StandardAuthorizer would, naming the ACL that
decided; super users are a broker setting the protocol does not tell, so they are not known here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.protocol.messages import build, nested_type
from kcli.security.acl import (
    AclBindingFilter,
    AclOperation,
    PatternType,
    ResourceType,
    StandardAcl,
)
from kcli.security.authorizer import Decision, StandardAuthorizer

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31


class AclError(KcliError):
    """ACLs the cluster refused to describe, create or delete; the sentence carries its reason."""


def _refused(what: str, code: int, message: str | None) -> AclError:
    name = ErrorCode(code).name.upper()
    return AclError(f"Could not {what}: {name}{f' ({message})' if message else ''}.")


def pattern_text(resource_type: ResourceType, name: str, pattern_type: PatternType) -> str:
    """Kafka's ResourcePattern.toString."""
    return f"ResourcePattern(resourceType={resource_type.name}, name={name}, patternType={pattern_type.name})"


def entry_text(acl: StandardAcl) -> str:
    """Kafka's AccessControlEntry.toString."""
    return (
        f"(principal={acl.principal}, host={acl.host}, operation={acl.operation.name}, "
        f"permissionType={acl.permission_type.name})"
    )


def resource_block(
    header: str, resource: tuple[ResourceType, str, PatternType], acls: Iterable[StandardAcl]
) -> str:
    """kafka-acls.sh's block: `<header> for resource `ResourcePattern(...)`:` then one tab-indented entry a line."""
    entries = "\n".join("\t" + entry_text(acl) for acl in acls)
    return f"{header} for resource `{pattern_text(*resource)}`: \n {entries} \n\n"


def by_resource(
    acls: Iterable[StandardAcl],
) -> dict[tuple[ResourceType, str, PatternType], list[StandardAcl]]:
    grouped: dict[tuple[ResourceType, str, PatternType], list[StandardAcl]] = defaultdict(list)
    for acl in acls:
        grouped[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(acl)
    return dict(grouped)


def acl_json(acl: StandardAcl) -> dict[str, str]:
    return {
        "resource_type": acl.resource_type.name,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type.name,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation.name,
        "permission_type": acl.permission_type.name,
    }


async def describe_acls(cluster: Cluster, acl_filter: AclBindingFilter) -> list[StandardAcl]:
    client = cluster.bootstrap
    cls = client.request_type(DESCRIBE_ACLS)
    response = await client.send(build(cls, **acl_filter.wire_fields()))
    if response.error_code != ErrorCode.none:
        raise _refused("describe ACLs", response.error_code, response.error_message)
    return [
        StandardAcl.from_wire(_Described(resource, acl), "pattern_type")
        for resource in response.resources
        for acl in resource.acls
    ]


async def create_acls(cluster: Cluster, acls: list[StandardAcl]) -> None:
    client = cluster.bootstrap
    cls = client.request_type(CREATE_ACLS)
    creation_cls = nested_type(cls, "AclCreation")
    creations = tuple(build(creation_cls, **acl.wire_fields("resource_pattern_type")) for acl in acls)
    response = await client.send(build(cls, creations=creations))
    for acl, result in zip(acls, response.results, strict=True):
        if result.error_code != ErrorCode.none:
            raise _refused(f"create ACL {acl}", result.error_code, result.error_message)


async def delete_acls(cluster: Cluster, filters: list[AclBindingFilter]) -> list[StandardAcl]:
    """The ACLs the filters removed."""
    client = cluster.bootstrap
    cls = client.request_type(DELETE_ACLS)
    filter_cls = nested_type(cls, "DeleteAclsFilter")
    wire = tuple(build(filter_cls, **f.wire_fields()) for f in filters)
    response = await client.send(build(cls, filters=wire))
    deleted = []
    for result in response.filter_results:
        if result.error_code != ErrorCode.none:
            raise _refused("delete ACLs", result.error_code, result.error_message)
        deleted.extend(StandardAcl.from_wire(m, "pattern_type") for m in result.matching_acls)
    return deleted


class _Described:
    """One ACL of a DescribeAclsResource with its resource's fields, as StandardAcl.from_wire reads them."""

    def __init__(self, resource: Any, acl: Any) -> None:
        self.resource_type = resource.resource_type
        self.resource_name = resource.resource_name
        self.pattern_type = resource.pattern_type
        self.principal = acl.principal
        self.host = acl.host
        self.operation = acl.operation
        self.permission_type = acl.permission_type


@dataclass(frozen=True, slots=True)
class CheckResult:
    allowed: bool
    decision: Decision

    def line(self, principal: str, operation: AclOperation, resource: tuple[ResourceType, str]) -> str:
        verdict = "ALLOWED" if self.allowed else "DENIED"
        what = f"{principal} {verdict} {operation.name} on {resource[0].name} {resource[1]}"
        if self.decision.acl is not None:
            acl = self.decision.acl
            return f"{what}: {entry_text(acl)} on {pattern_text(acl.resource_type, acl.resource_name, acl.pattern_type)}"
        if self.decision.rule == "DefaultDeny" and not self.allowed:
            return f"{what}: no ACL allows it"
        return f"{what}: no ACL applies ({self.decision.rule})"


async def check_acl(
    cluster: Cluster,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    allow_if_no_acl: bool = False,
) -> CheckResult:
    applying = await describe_acls(cluster, AclBindingFilter(resource_type, name, PatternType.MATCH))
    authorizer = StandardAuthorizer(allow_if_no_acl=allow_if_no_acl)
    decision = authorizer.decide(dict(enumerate(applying)), principal, host, operation, resource_type, name)
    return CheckResult(decision.allowed, decision)
