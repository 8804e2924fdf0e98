"""What the log layer raises: each error carries the Kafka error code a response should give."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class RecordError(Exception):
    """An append the log refused; nothing of it was written.

    `record_errors` lists (index of the record in its batch, message) for record-level rejections, as
    a ProduceResponse v8+ reports them.
    """

    def __init__(
        self, error_code: ErrorCode, message: str, record_errors: tuple[tuple[int, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.record_errors = record_errors


class UnexpectedAppendOffset(RecordError):
    """A follower's append whose first batch starts below the log end (Kafka's
    UnexpectedAppendOffsetException): the offsets of that first batch say whether the follower can
    recover by restarting its empty log at the batch's base offset."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.invalid_record, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetOutOfRange(Exception):
    """An offset outside [log start offset, log end offset] (or above the high watermark where it matters)."""

    error_code = ErrorCode.offset_out_of_range


class LogStorageError(Exception):
    """A write, flush or rename failed on disk; the partition's data may be unreachable until restart."""

    error_code = ErrorCode.kafka_storage_error
