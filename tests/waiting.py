"""The one bounded wait of the suite: poll for an observable event, fail naming what never came.

    leader = wait_for("a leader", lambda: status().leader_id >= 0 and status(), timeout=30)

`check` returns something truthy once the event happened (that value is returned) and may raise while
it has not (a node mid-restart answers with errors): the error is kept for the failure message, which
says what was awaited, for how long, and the last error. `explain` adds context to that message (logs
of the processes involved). `wait_for_async` is the same wait for code that runs on an event loop whose
brokers must keep running while it waits.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


class WaitTimeout(pytest.fail.Exception):  # type: ignore[misc,name-defined]
    """A bounded wait ran out. It fails the test as pytest.fail does (it is not an Exception, so no
    `except Exception` in a caller or an enclosing check mistakes it for a retryable error), and code
    that recovers from a wait that ran out (tests/faults) catches it by name."""

    def __init__(self, message: str) -> None:
        super().__init__(message, pytrace=False)

    def __str__(self) -> str:
        return str(self.msg)


def wait_for(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    interval: float = 0.1,
    *,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll `check` every `interval` s until it returns something truthy and return that; WaitTimeout
    naming `what` and the last error after `timeout` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result:
                return result
            last_error = None  # an error of an earlier try is not why this one failed
        except Exception as exc:  # kept for the failure message
            last_error = exc
        if time.monotonic() > deadline:
            raise WaitTimeout(_timed_out(what, timeout, last_error, explain))
        time.sleep(interval)


async def wait_for_async(
    what: str,
    check: Callable[[], T | None | Awaitable[T | None]],
    timeout: float,
    interval: float = 0.05,
    *,
    explain: Callable[[], str] | None = None,
) -> T:
    """`wait_for` that yields to the running event loop between tries instead of blocking it; `check`
    may be a coroutine function (a request to a broker)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result  # type: ignore[return-value]
            last_error = None
        except Exception as exc:
            last_error = exc
        if loop.time() > deadline:
            raise WaitTimeout(_timed_out(what, timeout, last_error, explain))
        await asyncio.sleep(interval)


def _timed_out(
    what: str, timeout: float, last_error: Exception | None, explain: Callable[[], str] | None
) -> str:
    message = f"timed out after {timeout:g} s waiting for {what}"
    if last_error is not None:
        message += f" (last error: {type(last_error).__name__}: {last_error})"
    if explain is not None:
        message += "\n" + explain()
    return message
