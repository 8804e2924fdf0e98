"""This node's source of producer ids: blocks the controller records in the metadata log, used one by one.

Kafka's RPCProducerIdManager asks the active controller for blocks with AllocateProducerIds (the
controller writes a ProducerIdsRecord in the metadata log, as KRaft's ProducerIdControlManager does); the
next block is awaited when the current one runs out, one request at a time. Ids are never handed out twice, even across restarts.
InitProducerId for idempotent producers and the transaction coordinator draw from the same manager.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kcli.broker.metadata.controller import ApiException
from kcli.broker.metadata.image import ProducerIdsBlock
from kcli.errors import KcliError

log = logging.getLogger("kcli.broker")


class ProducerIdsUnavailable(Exception):
    """The controller could not hand out a new block of producer ids."""


class ProducerIdManager:
    """Hands out producer ids from the current block, asking for the next block when it runs out."""

    def __init__(self, allocate_block: Callable[[], Awaitable[ProducerIdsBlock]]) -> None:
        self._allocate_block = allocate_block
        self._next_id = 0
        self._block_end = 0  # no block yet
        self._allocating = asyncio.Lock()

    async def generate_producer_id(self) -> int:
        async with self._allocating:
            if self._next_id >= self._block_end:
                try:
                    block = await self._allocate_block()
                except (ApiException, KcliError) as e:
                    raise ProducerIdsUnavailable(f"the controller refused a producer id block: {e}") from e
                self._next_id = block.first_producer_id
                self._block_end = block.next_block_first_id
                log.info("acquired producer ids [%d, %d)", block.first_producer_id, block.next_block_first_id)
        producer_id = self._next_id
        self._next_id += 1
        return producer_id
