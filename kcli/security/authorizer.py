"""The StandardAuthorizer (KIP-801): Kafka's StandardAuthorizerData matching over the image's ACLs.

Super users are allowed everything. Otherwise the ACLs on the resource's type whose pattern applies
(the literal name, the `*` wildcard, any prefix) and whose principal (or User:*) and host (or *) match
decide: one DENY for the operation denies at once; an ALLOW for it (READ, WRITE, DELETE or ALTER also
allow DESCRIBE, ALTER_CONFIGS allows DESCRIBE_CONFIGS) allows; no ACL on the resource at all falls back
to `allow.everyone.if.no.acl.found`; ACLs on the resource for others only deny. Each denial of an
operation a request asked for is one INFO line on kafka.authorizer.logger, as Kafka logs it.

Each new image's ACLs are indexed once by resource type, literal name and prefix, so a check reads the
ACLs that cover its resource and no others; decisions are remembered until the image's ACLs change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kcli.protocol.messages import api_name
from kcli.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    camel,
)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUDIT_LOG = logging.getLogger("kafka.authorizer.logger")

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


@dataclass(frozen=True, slots=True)
class Decision:
    """The result and the rule that gave it (Kafka's MatchingRule: SuperUser, DefaultAllow,
    DefaultDeny, or the ACL that matched)."""

    allowed: bool
    rule: str
    acl: StandardAcl | None = None


def host_of(peer: str) -> str:
    """The client's address without its port (Kafka matches ACL hosts on the address alone)."""
    host = peer.rsplit(":", 1)[0] if peer.count(":") == 1 or peer.startswith("[") else peer
    return host.strip("[]")


def find_result(operation: AclOperation, principal: str, host: str, acl: StandardAcl) -> bool | None:
    """StandardAuthorizerData.findResult: True (allow), False (deny), or None (the ACL does not apply)."""
    if acl.principal not in (principal, WILDCARD_PRINCIPAL):
        return None
    if acl.host not in (WILDCARD, host):
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission_type == AclPermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != acl.operation:
                return None
        elif operation != acl.operation:
            return None
    return acl.permission_type == AclPermissionType.ALLOW


_DECISION_CACHE_SIZE = 65536
"""Decisions remembered per image (principal, host, operation, resource); cleared when full."""


class _TypeIndex:
    """One resource type's ACLs as Kafka's StandardAuthorizerData finds them: by literal name (the `*`
    wildcard among them) and by prefix, so a check reads the ACLs that apply and no others."""

    def __init__(self, acls: list[StandardAcl]) -> None:
        self.literal: dict[str, list[StandardAcl]] = {}
        self.prefixed: dict[str, list[StandardAcl]] = {}
        for acl in acls:
            if acl.pattern_type == PatternType.LITERAL:
                self.literal.setdefault(acl.resource_name, []).append(acl)
            elif acl.pattern_type == PatternType.PREFIXED:
                self.prefixed.setdefault(acl.resource_name, []).append(acl)
        self.prefix_lengths = sorted({len(p) for p in self.prefixed})

    def matching(self, name: str) -> list[StandardAcl]:
        found = list(self.literal.get(name, ()))
        if name != WILDCARD:
            found += self.literal.get(WILDCARD, ())
        for length in self.prefix_lengths:
            if length > len(name):
                break
            found += self.prefixed.get(name[:length], ())
        return found


class StandardAuthorizer:
    """Decides operations against the ACLs of the current metadata image."""

    def __init__(self, super_users: str = "", allow_if_no_acl: bool = False) -> None:
        """`super_users` as `super.users` gives them (User:a;User:b); `allow_if_no_acl` is
        `allow.everyone.if.no.acl.found`."""
        self.super_users = frozenset(u.strip() for u in super_users.split(";") if u.strip())
        self.allow_if_no_acl = allow_if_no_acl
        self._indexed: Mapping[object, StandardAcl] | None = None
        self._by_type: dict[ResourceType, tuple[StandardAcl, ...]] = {}
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], Decision] = {}
        self._by_type_answers: dict[tuple[str, str, AclOperation, ResourceType], bool] = {}

    def _reindex(self, acls: Mapping[object, StandardAcl]) -> None:
        """A new image: index its ACLs by resource type, literal name and prefix, once; forget the
        decisions made from the previous one."""
        if acls is self._indexed:
            return
        by_type: dict[ResourceType, list[StandardAcl]] = {}
        for acl in acls.values():
            by_type.setdefault(acl.resource_type, []).append(acl)
        self._by_type = {k: tuple(v) for k, v in by_type.items()}
        self._index = {k: _TypeIndex(v) for k, v in by_type.items()}
        self._decisions = {}
        self._by_type_answers = {}
        self._indexed = acls

    def _acls_of(
        self, acls: Mapping[object, StandardAcl], resource_type: ResourceType
    ) -> tuple[StandardAcl, ...]:
        self._reindex(acls)
        return self._by_type.get(resource_type, ())

    def decide(
        self,
        acls: Mapping[object, StandardAcl],
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> Decision:
        if principal in self.super_users:
            return Decision(True, "SuperUser")
        self._reindex(acls)
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= _DECISION_CACHE_SIZE:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def _decide(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> Decision:
        """StandardAuthorizerData.authorize over the ACLs whose pattern covers `name` (from the index)."""
        index = self._index.get(resource_type)
        allow: StandardAcl | None = None
        has_resource_acls = False
        for acl in index.matching(name) if index is not None else ():
            has_resource_acls = True
            result = find_result(operation, principal, host, acl)
            if result is False:
                return Decision(False, f"MatchingAcl(acl={acl})", acl)
            if result:
                allow = acl
        if allow is not None:
            return Decision(True, f"MatchingAcl(acl={allow})", allow)
        if not has_resource_acls:
            return Decision(self.allow_if_no_acl, "DefaultAllow" if self.allow_if_no_acl else "DefaultDeny")
        return Decision(False, "DefaultDeny")

    def authorize_by_resource_type(
        self,
        acls: Mapping[object, StandardAcl],
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: could `operation` be allowed on some resource of
        the type? An ALLOW on a pattern that no DENY (literal, prefix, or the wildcard) takes back.
        Remembered per image, as decisions are (it reads every ACL of the type)."""
        if principal in self.super_users:
            return True
        self._reindex(acls)
        key = (principal, host, operation, resource_type)
        answer = self._by_type_answers.get(key)
        if answer is None:
            if len(self._by_type_answers) >= _DECISION_CACHE_SIZE:
                self._by_type_answers.clear()
            answer = self._by_type_answers[key] = self._authorize_by_resource_type(
                acls, principal, host, operation, resource_type
            )
        return answer

    def _authorize_by_resource_type(
        self,
        acls: Mapping[object, StandardAcl],
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        deny_literals: set[str] = set()
        deny_prefixes: list[str] = []
        allows: list[StandardAcl] = []
        for acl in self._acls_of(acls, resource_type):
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (WILDCARD, host):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literals.add(acl.resource_name)
                elif acl.pattern_type == PatternType.PREFIXED:
                    deny_prefixes.append(acl.resource_name)
            elif acl.permission_type == AclPermissionType.ALLOW:
                allows.append(acl)
        for acl in allows:
            if any(acl.resource_name.startswith(prefix) for prefix in deny_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and acl.resource_name in deny_literals:
                continue
            return True
        return False

    def authorize(
        self,
        acls: Mapping[object, StandardAcl],
        principal: str,
        peer: str,
        api_key: int,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        log_if_denied: bool = True,
    ) -> bool:
        """One check a request makes; a denial the request asked for is logged at INFO."""
        host = host_of(peer)
        decision = self.decide(acls, principal, host, operation, resource_type, name)
        if not decision.allowed and log_if_denied and AUDIT_LOG.isEnabledFor(logging.INFO):
            AUDIT_LOG.info(
                "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s "
                "for request = %s with resourceRefCount = 1 based on rule %s",
                principal,
                operation.name,
                host,
                camel(resource_type.name),
                name,
                api_name(api_key),
                decision.rule,
            )
        return decision.allowed
