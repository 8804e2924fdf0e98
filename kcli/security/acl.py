"""Kafka's ACL model: resource types, pattern types, operations, permissions, and one ACL.

The numeric codes are Kafka's (they travel in CreateAcls/DescribeAcls/DeleteAcls and in
AccessControlEntryRecord); names are what kafka-acls.sh prints. Filters match as Kafka's
AclBindingFilter does, so DescribeAcls and DeleteAcls select the same ACLs Kafka would.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

WILDCARD = "*"
"""A LITERAL resource name matching every resource of its type, or a host matching every host."""
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
"""The one name of the CLUSTER resource."""


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
"""Kafka's AclEntry.supportedOperations: what the authorized-operations bit sets can hold per type."""


def operations_bit_set(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit `code` set for each operation (an int32 on the wire)."""
    bits = 0
    for operation in operations:
        bits |= 1 << int(operation)
    return bits


def _enum_value(cls: type[enum.IntEnum], code: int) -> Any:
    """Kafka's fromCode: a code it does not know is UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


def camel(name: str) -> str:
    """Kafka's SecurityUtils.resourceTypeName/operationName: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL as the metadata log stores it (Kafka's StandardAcl)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> StandardAcl:
        return cls(
            _enum_value(ResourceType, data["resourceType"]),
            data["resourceName"],
            _enum_value(PatternType, data["patternType"]),
            data["principal"],
            data["host"],
            _enum_value(AclOperation, data["operation"]),
            _enum_value(AclPermissionType, data["permissionType"]),
        )

    @classmethod
    def from_wire(cls, entry: Any, pattern_field: str = "resource_pattern_type") -> StandardAcl:
        """From a CreateAcls creation (or anything with the same fields)."""
        return cls(
            _enum_value(ResourceType, int(entry.resource_type)),
            entry.resource_name,
            _enum_value(PatternType, int(getattr(entry, pattern_field))),
            entry.principal,
            entry.host,
            _enum_value(AclOperation, int(entry.operation)),
            _enum_value(AclPermissionType, int(entry.permission_type)),
        )

    def wire_fields(self, pattern_field: str = "pattern_type") -> dict[str, Any]:
        """The fields CreateAcls' creations and DeleteAcls' matching ACLs carry (kio names)."""
        return {
            "resource_type": int(self.resource_type),
            "resource_name": self.resource_name,
            pattern_field: int(self.pattern_type),
            "principal": self.principal,
            "host": self.host,
            "operation": int(self.operation),
            "permission_type": int(self.permission_type),
        }

    def to_record(self, acl_id: uuid.UUID) -> dict[str, Any]:
        """AccessControlEntryRecord's fields."""
        return {
            "id": acl_id,
            "resourceType": int(self.resource_type),
            "resourceName": self.resource_name,
            "patternType": int(self.pattern_type),
            "principal": self.principal,
            "host": self.host,
            "operation": int(self.operation),
            "permissionType": int(self.permission_type),
        }

    def __str__(self) -> str:
        """Kafka's StandardAcl.toString, which the authorizer's log lines name."""
        return (
            f"StandardAcl(resourceType={self.resource_type.name}, resourceName={self.resource_name}, "
            f"patternType={self.pattern_type.name}, principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None names match anything; ANY enums match anything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def from_wire(cls, entry: Any) -> AclBindingFilter:
        """From a DescribeAclsRequest or a DeleteAclsFilter."""
        return cls(
            _enum_value(ResourceType, int(entry.resource_type_filter)),
            entry.resource_name_filter,
            _enum_value(PatternType, int(entry.pattern_type_filter)),
            entry.principal_filter,
            entry.host_filter,
            _enum_value(AclOperation, int(entry.operation)),
            _enum_value(AclPermissionType, int(entry.permission_type)),
        )

    def wire_fields(self) -> dict[str, Any]:
        """The fields of a DescribeAclsRequest or a DeleteAclsFilter (kio names)."""
        return {
            "resource_type_filter": int(self.resource_type),
            "resource_name_filter": self.resource_name,
            "pattern_type_filter": int(self.pattern_type),
            "principal_filter": self.principal,
            "host_filter": self.host,
            "operation": int(self.operation),
            "permission_type": int(self.permission_type),
        }

    def unknown_element(self) -> str | None:
        """Kafka's findIndefiniteField for a filter: what cannot be matched, or None."""
        if self.resource_type == ResourceType.UNKNOWN:
            return "Unknown patternFilter."
        if self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN:
            return "Unknown entryFilter."
        return None

    def matches(self, acl: StandardAcl) -> bool:
        return self._pattern_matches(acl) and self._entry_matches(acl)

    def _pattern_matches(self, acl: StandardAcl) -> bool:
        """ResourcePatternFilter.matches; MATCH selects the literal, wildcard and prefixed ACLs that
        would apply to the named resource."""
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return self.resource_name == acl.resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == PatternType.PREFIXED:
            return self.resource_name.startswith(acl.resource_name)
        return False

    def _entry_matches(self, acl: StandardAcl) -> bool:
        """AccessControlEntryFilter.matches."""
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and self.operation in (AclOperation.ANY, acl.operation)
            and self.permission_type in (AclPermissionType.ANY, acl.permission_type)
        )


def validate_new_acl(acl: StandardAcl) -> str | None:
    """Kafka's AclControlManager.validateNewAcl plus the broker's CLUSTER name check: why `acl` cannot
    be created (an INVALID_REQUEST message), or None."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {acl.permission_type.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if ":" not in acl.principal:
        return (
            f"Could not parse principal from `{acl.principal}` "
            "(no colon is present separating the principal type from the principal name)"
        )
    if not acl.principal.split(":", 1)[1]:
        return "Invalid empty principal name"
    return None
