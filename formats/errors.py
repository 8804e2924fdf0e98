"""Errors raised for bytes that do not follow Kafka's formats.

Every message is one sentence an operator can act on; callers add the file name and position.
"""


class FormatError(ValueError):
    """Bytes that do not follow one of Kafka's formats."""


class CorruptRecordError(FormatError):
    """A record batch, legacy message or record whose structure or CRC is wrong."""


class CompressionError(FormatError):
    """A compressed payload that cannot be decoded, or would decode past the allowed size."""


class CorruptIndexError(FormatError):
    """An .index, .timeindex or .txnindex file that fails Kafka's sanity checks."""


class CorruptSnapshotError(FormatError):
    """A producer-state .snapshot file with a bad version, size or CRC."""


class CheckpointError(FormatError):
    """A text checkpoint, partition.metadata or meta.properties file that does not parse."""
