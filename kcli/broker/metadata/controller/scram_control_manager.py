"""ScramControlManager: SCRAM credentials altered with AlterUserScramCredentials (KIP-554).

The controller never sees a password: an upsertion carries the salt and the salted password, and the
controller derives StoredKey and ServerKey from it into a UserScramCredentialRecord; a deletion is a
RemoveUserScramCredentialRecord. Each user is checked on its own (a user altered twice in one request,
deletions and upsertions alike, gets DUPLICATE_RESOURCE); the users that pass are written as one batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import NONE, ApiError, ControllerResult, Record
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.features import is_scram_supported
from kcli.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted_password
from kcli.security.scram_credentials import MAX_NAME_BYTES, MECHANISM_NAMES, credential_record

_DUPLICATE = "A user credential cannot be altered twice in the same request"
_UNSUPPORTED = "The current metadata.version does not support SCRAM"


@dataclass(frozen=True, slots=True)
class UserResult:
    """One user's answer in AlterUserScramCredentialsResponse."""

    user: str
    error: ApiError = NONE


class ScramControlManager:
    """Checks AlterUserScramCredentials against the image and turns it into credential records."""

    def alter_credentials(
        self, image: ClusterMetadataImage, deletions: list[Any], upsertions: list[Any]
    ) -> ControllerResult[list[UserResult]]:
        """Kafka's ScramControlManager.alterCredentials: deletions and upsertions are kio entities
        (name, mechanism[, iterations, salt, salted_password]); the answer lists every user once."""
        supported = is_scram_supported(image.metadata_version)
        to_delete: dict[str, Any] = {}
        to_upsert: dict[str, Any] = {}
        errors: dict[str, ApiError] = {}
        for deletion in deletions:
            if deletion.name in errors:
                continue
            if to_delete.pop(deletion.name, None) is not None:
                errors[deletion.name] = ApiError(ErrorCode.duplicate_resource, _DUPLICATE)
            elif not supported:
                errors[deletion.name] = ApiError(ErrorCode.unsupported_version, _UNSUPPORTED)
            else:
                error = self._validate_deletion(image, deletion)
                if error.is_failure:
                    errors[deletion.name] = error
                else:
                    to_delete[deletion.name] = deletion
        for upsertion in upsertions:
            if upsertion.name in errors:
                continue
            if (
                to_delete.pop(upsertion.name, None) is not None
                or to_upsert.pop(upsertion.name, None) is not None
            ):
                errors[upsertion.name] = ApiError(ErrorCode.duplicate_resource, _DUPLICATE)
            elif not supported:
                errors[upsertion.name] = ApiError(ErrorCode.unsupported_version, _UNSUPPORTED)
            else:
                error = _validate_upsertion(upsertion)
                if error.is_failure:
                    errors[upsertion.name] = error
                else:
                    to_upsert[upsertion.name] = upsertion
        records: list[Record] = []
        results: list[UserResult] = []
        for name, deletion in to_delete.items():
            records.append(
                ("RemoveUserScramCredentialRecord", 0, {"name": name, "mechanism": int(deletion.mechanism)})
            )
            results.append(UserResult(name))
        for name, upsertion in to_upsert.items():
            records.append(_credential_record(upsertion))
            results.append(UserResult(name))
        results.extend(UserResult(name, error) for name, error in errors.items())
        return ControllerResult(records, results)

    @staticmethod
    def _validate_deletion(image: ClusterMetadataImage, deletion: Any) -> ApiError:
        error = _validate_name_and_mechanism(deletion.name, deletion.mechanism)
        if error.is_failure:
            return error
        mechanism = MECHANISM_NAMES[deletion.mechanism]
        if image.scram_credential(mechanism, deletion.name) is None:
            return ApiError(
                ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
            )
        return NONE


def _validate_name_and_mechanism(name: str, mechanism: int) -> ApiError:
    if not name:
        return ApiError(ErrorCode.unacceptable_credential, "Username must not be empty")
    if mechanism not in MECHANISM_NAMES:
        return ApiError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return NONE


def _validate_upsertion(upsertion: Any) -> ApiError:
    error = _validate_name_and_mechanism(upsertion.name, upsertion.mechanism)
    if error.is_failure:
        return error
    if len(upsertion.name.encode()) > MAX_NAME_BYTES:
        # Kafka fails the whole write when the record will not serialize; only this user fails here.
        return ApiError(ErrorCode.unknown_server_error, "'name' field is too long to be serialized")
    if upsertion.iterations < MIN_ITERATIONS:
        return ApiError(ErrorCode.unacceptable_credential, "Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        return ApiError(ErrorCode.unacceptable_credential, "Too many iterations")
    return NONE


def _credential_record(upsertion: Any) -> Record:
    """ScramControlManager.finishUpsertion: StoredKey and ServerKey from the salted password."""
    mechanism = MECHANISM_NAMES[upsertion.mechanism]
    credential = credential_from_salted_password(
        mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password), upsertion.iterations
    )
    return credential_record(upsertion.name, credential)
