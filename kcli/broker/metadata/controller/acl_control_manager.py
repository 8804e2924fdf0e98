"""AclControlManager: ACLs created and deleted with CreateAcls and DeleteAcls (KIP-801).

Each ACL gets a random id and one AccessControlEntryRecord; an ACL that already exists is not written
twice (its creation still succeeds, as Kafka's). A deletion filter removes every ACL it matches with
RemoveAccessControlEntryRecord and lists them; an invalid ACL or filter fails alone with
INVALID_REQUEST, the others go through in the same batch.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import NONE, ApiError, ControllerResult, Record
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.security.acl import AclBindingFilter, StandardAcl, validate_new_acl


@dataclass(frozen=True, slots=True)
class DeletionResult:
    """One filter's answer in DeleteAclsResponse: its error, or the ACLs it removed."""

    error: ApiError = NONE
    deleted: tuple[StandardAcl, ...] = field(default=())


class AclControlManager:
    """Checks ACL changes against the image and turns them into ACL records."""

    def create_acls(
        self, image: ClusterMetadataImage, acls: list[StandardAcl]
    ) -> ControllerResult[list[ApiError]]:
        existing = set(image.acls.values())
        records: list[Record] = []
        results: list[ApiError] = []
        for acl in acls:
            reason = validate_new_acl(acl)
            if reason is not None:
                results.append(ApiError(ErrorCode.invalid_request, reason))
                continue
            if acl not in existing:
                existing.add(acl)
                records.append(("AccessControlEntryRecord", 0, acl.to_record(uuid.uuid4())))
            results.append(NONE)
        return ControllerResult(records, results)

    def delete_acls(
        self, image: ClusterMetadataImage, filters: list[AclBindingFilter]
    ) -> ControllerResult[list[DeletionResult]]:
        removed: set[uuid.UUID] = set()
        records: list[Record] = []
        results: list[DeletionResult] = []
        for acl_filter in filters:
            reason = acl_filter.unknown_element()
            if reason is not None:
                results.append(DeletionResult(ApiError(ErrorCode.invalid_request, reason)))
                continue
            deleted = []
            for acl_id, acl in image.acls.items():
                if acl_filter.matches(acl):
                    deleted.append(acl)
                    if acl_id not in removed:
                        removed.add(acl_id)
                        records.append(("RemoveAccessControlEntryRecord", 0, {"id": acl_id}))
            results.append(DeletionResult(NONE, tuple(deleted)))
        return ControllerResult(records, results)
