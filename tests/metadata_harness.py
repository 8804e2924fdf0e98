"""A real QuorumController, Raft client and metadata log, driven synchronously (tests and their subprocesses)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator

import pytest

from kcli.broker.metadata import ClusterMetadataImage, QuorumController
from kcli.broker.raft import open_raft_client
from kcli.config import BrokerConfig

NODE = 1


def empty_image() -> ClusterMetadataImage:
    return ClusterMetadataImage.empty("cluster-x", NODE, "PLAINTEXT")


class SyncController:
    """The real QuorumController over a real Raft client and metadata log, on a private event loop.

    Tests drive it synchronously: each operation runs until the quorum (this node) has committed it.
    """

    opened: list[SyncController] = []
    """Every controller made, so a test's teardown can close what the test left open."""

    def __init__(self, broker_config: BrokerConfig, *, bootstrap_records=None) -> None:
        SyncController.opened.append(self)
        self.closed = False
        self.loop = asyncio.new_event_loop()
        raft = open_raft_client(broker_config, "cluster-x")
        self.controller = QuorumController(
            broker_config, raft, empty_image(), bootstrap_records=bootstrap_records
        )
        try:
            self.run(raft.start())
            self.run(raft.wait_caught_up())
            self.run(self.controller.wait_active())
            self.run(raft.wait_committed(raft.log_end_offset - 1))  # the bootstrap record, if written
        except BaseException:
            self.close()
            raise

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def __getattr__(self, name: str):
        value = getattr(self.controller, name)
        if inspect.iscoroutinefunction(value):
            return lambda *args, **kwargs: self.run(value(*args, **kwargs))
        return value

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        raft = self.controller.raft_client
        self.run(raft.shutdown())
        raft.log.close()
        self.loop.close()


@pytest.fixture(autouse=True)
def close_controllers() -> Iterator[None]:
    """Stop the Raft client of every controller a test opened and left open (autouse in each module
    that imports it)."""
    yield
    while SyncController.opened:
        SyncController.opened.pop().close()
