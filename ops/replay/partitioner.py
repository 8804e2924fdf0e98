"""Where a replayed record goes: the same partition number, the Java producer's key hash, or in turn.

Record mode applies the mapping once per record, inline in `walk` (a call per record would cost more
than the rest of the record's work); `partition_for_key` is what that inline line computes.
"""

from __future__ import annotations

from enum import StrEnum

from formats import _native


class Mapping(StrEnum):
    """Where a record goes: the same partition number, the Java client's key hash, or evenly."""

    SAME = "same"
    KEY = "key"
    ROUND_ROBIN = "round-robin"


def java_murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2: the 32-bit MurmurHash2 with Kafka's seed, as a signed Java int (compiled:
    in Python it cost more per 16-byte key than the rest of record mode's per-record work)."""
    return _native.murmur2(data)


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The Java producer's partition for a keyed record: toPositive(murmur2(key)) % partitions."""
    return (java_murmur2(key) & 0x7FFFFFFF) % num_partitions
