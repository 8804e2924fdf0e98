"""SkimpyOffsetMap: the cleaner's map from a key to the latest offset it was written at (Kafka's OffsetMap).

Kafka keeps an MD5 digest of each key (16 bytes) and an offset in a fixed array of slots sized from
`log.cleaner.dedupe.buffer.size`; two keys with the same digest count as one key, a risk Kafka accepts.
This map keys a dict by the same digest, except that a key of 16 bytes or fewer is its own slot key: it
takes no more room than a digest, cannot collide, and skips the hash (most keys are short). A dict entry
costs about 120 bytes in CPython instead of Kafka's 24, so the slot count is the memory divided by that
measured cost: the map stays within the memory it is given, and holds about a fifth of the keys Kafka's
would.
"""

from __future__ import annotations

import hashlib
from functools import partial

BYTES_PER_ENTRY = 128
"""Measured CPython cost of one entry (digest bytes object, offset int, dict slot), rounded up."""

_digest_of = partial(hashlib.md5, usedforsecurity=False)
_DIGEST_SIZE = 16


class SkimpyOffsetMap:
    """Key digest -> latest offset, with room for `slots` keys and the latest offset seen by the map build."""

    def __init__(self, memory: int) -> None:
        self.slots = memory // BYTES_PER_ENTRY
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        """Record `offset` as the latest for `key` (offsets are put in log order, so later ones win)."""
        self._offsets[key if len(key) <= _DIGEST_SIZE else _digest_of(key).digest()] = offset

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, or -1 when the key is not in the map."""
        return self._offsets.get(key if len(key) <= _DIGEST_SIZE else _digest_of(key).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        """The map covers the log up to `offset`: records past it were not seen and are always kept."""
        self.latest_offset = offset

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def utilization(self) -> float:
        """Share of the slots in use (Kafka's buffer utilization)."""
        return len(self._offsets) / self.slots if self.slots else 0.0
