"""Requests that wait on partitions (Kafka's DelayedOperationPurgatory, for DelayedFetch and DelayedProduce).

A waiting request watches the partitions it needs; every change of a partition's log end offset or high
watermark wakes the requests watching it, and each then checks its own condition (enough bytes for a
fetch, a high watermark past the offsets of a produce). No polling: the wake-up is the partition's change.

A follower's fetch reads up to the log end, so only records (or a change of leadership) can complete it:
it watches for those alone, and the high watermark moving after another follower's fetch does not wake
it to read nothing and park again (Kafka's DelayedFetch of a follower counts bytes from the log end too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

PartitionKey = tuple[str, int]


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[PartitionKey, list[Callable[[], None]]] = {}
        self._log_end_watchers: dict[PartitionKey, list[Callable[[], None]]] = {}

    def check_and_complete(self, key: PartitionKey, *, log_end_changed: bool = True) -> None:
        """Wake the requests watching `key` (called on each change of that partition); with
        `log_end_changed` False (only the high watermark moved), not those waiting for records only."""
        watchers = self._watchers.get(key)
        if watchers:
            for wake in list(watchers):
                wake()
        if log_end_changed:
            watchers = self._log_end_watchers.get(key)
            if watchers:
                for wake in list(watchers):
                    wake()

    async def wait_until(
        self, keys: Iterable[PartitionKey], done: Callable[[], bool], timeout: float
    ) -> bool:
        """Wait until `done()` holds, checked after each change of a partition in `keys`, or `timeout`
        seconds have passed. Returns whether it holds."""
        if done():
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        keys = list(keys)
        while True:
            if not await self.wait_for_change(keys, deadline):
                return done()
            if done():
                return True

    async def wait_for_change(
        self, keys: list[PartitionKey], deadline: float, *, log_end_only: bool = False
    ) -> bool:
        """Wait for one change of a partition in `keys` (with `log_end_only`, one that may have added
        records), until the loop's clock reaches `deadline`. Returns False when the deadline came first."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        registry = self._log_end_watchers if log_end_only else self._watchers

        def wake() -> None:
            if not woken.done():
                woken.set_result(True)

        for key in keys:
            registry.setdefault(key, []).append(wake)
        timer = loop.call_at(deadline, lambda: woken.done() or woken.set_result(False))
        try:
            return await woken
        finally:
            timer.cancel()
            for key in keys:
                watchers = registry.get(key)
                if watchers is not None:
                    watchers.remove(wake)
                    if not watchers:
                        del registry[key]

    def watched(self) -> int:
        """How many partitions have a request waiting on them (for tests and metrics)."""
        return len(self._watchers.keys() | self._log_end_watchers.keys())
