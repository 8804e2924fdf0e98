"""Requests that wait on partitions (Kafka's DelayedOperationPurgatory, for DelayedFetch and DelayedProduce).

A waiting request watches the partitions it needs; every change of a partition's log end offset or high
watermark wakes the requests watching it, and each then checks its own condition (enough bytes for a
fetch, a high watermark past the offsets of a produce), a fetch on the partitions that changed only.
No polling: the wake-up is the partition's change. A fetch session watches its partitions for as long as
it lives (`watch`), so its fetches register nothing per request and look only at what changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

PartitionKey = tuple[str, int]


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[PartitionKey, list[Callable[[PartitionKey], None]]] = {}

    def check_and_complete(self, key: PartitionKey) -> None:
        """Wake every request watching `key` (called on each change of that partition)."""
        watchers = self._watchers.get(key)
        if watchers:
            for wake in list(watchers):
                wake(key)

    def watch(self, key: PartitionKey, wake: Callable[[PartitionKey], None]) -> None:
        """Call `wake(key)` on every change of `key` until `unwatch`."""
        self._watchers.setdefault(key, []).append(wake)

    def unwatch(self, key: PartitionKey, wake: Callable[[PartitionKey], None]) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            try:
                watchers.remove(wake)
            except ValueError:
                return
            if not watchers:
                del self._watchers[key]

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

    async def wait_for_change(self, keys: list[PartitionKey], deadline: float) -> bool:
        """Wait for one change of a partition in `keys`, until the loop's clock reaches `deadline`.
        Returns False when the deadline came first."""
        return bool(await self.wait_for_changes(keys, deadline))

    async def wait_for_changes(self, keys: list[PartitionKey], deadline: float) -> set[PartitionKey]:
        """Wait for a change of a partition in `keys`, until the loop's clock reaches `deadline`: the
        partitions that changed until the waiter ran again (none when the deadline came first), so it
        looks again at those alone (DelayedFetch.tryComplete on a thousand partitions, one appended)."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        changed: set[PartitionKey] = set()

        def wake(key: PartitionKey) -> None:
            changed.add(key)
            if not woken.done():
                woken.set_result(True)

        watchers = self._watchers
        for key in keys:
            watchers.setdefault(key, []).append(wake)
        timer = loop.call_at(deadline, lambda: woken.done() or woken.set_result(False))
        try:
            await woken
            return changed
        finally:
            timer.cancel()
            for key in keys:
                self.unwatch(key, wake)

    def watched(self) -> int:
        """How many partitions have a request waiting on them (for tests and metrics)."""
        return len(self._watchers)
