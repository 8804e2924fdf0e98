"""What a control manager hands back: the records an operation writes and the answer it gives.

Kafka's control managers never write: each operation returns a `ControllerResult` (records plus the
response), and the QuorumController decides whether to append the records (not for validate-only
requests) before it answers. Errors travel as Kafka's `ApiError`, or as an `ApiException` raised
inside an operation, with Kafka's codes and sentences (clients and tests compare them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

Record = tuple[str, int, dict[str, Any]]
"""(record type name, version, fields) before encoding."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """Records to append as one batch (all or nothing), and the response once they are committed."""

    records: list[Record]
    response: T

    def without_records(self) -> ControllerResult[T]:
        """The same answer with nothing to write: what a validate-only request gets."""
        return ControllerResult([], self.response)


@dataclass(frozen=True, slots=True)
class ApiError:
    """An error code with Kafka's message (None where Kafka sends none)."""

    code: ErrorCode = ErrorCode.none
    message: str | None = None

    @property
    def is_failure(self) -> bool:
        return self.code is not ErrorCode.none


NONE = ApiError()


class ApiException(Exception):
    """Raised inside an operation to answer with `error` (Kafka's ApiException subclasses)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = ApiError(code, message)
