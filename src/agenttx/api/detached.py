"""Run an engine call so that the caller's cancellation cannot stop it half-way, cheaply.

A gRPC handler is cancelled when its client gives up (deadline, disconnect). An engine call
must not stop half-way for that: it finishes, and its reply is stored for a retry with the
same request_id. The usual way is a task of its own behind ``asyncio.shield`` — but a task
costs a creation and two or three turns of the event loop per call, a sizeable part of a
step that otherwise finishes without ever suspending (a state tool on SQLite: the write
commits inline).

So the call starts eagerly, in the caller's task (as Python 3.12's eager tasks do): a call
that completes without suspending returns at once — cancellation can only land at a
suspension point, and there was none. At its first suspension it moves into a shielded task
of its own, which drives the same coroutine on from where it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


async def run_detached(coro: Coroutine[Any, Any, T]) -> T:
    """``await coro``, except that cancelling the caller does not cancel ``coro``."""
    try:
        first = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except BaseException:
        coro.close()
        raise
    task = asyncio.get_running_loop().create_task(_continue(coro, first))
    task.add_done_callback(_consume)
    return await asyncio.shield(task)


async def _continue(coro: Coroutine[Any, Any, T], first: Any) -> T:
    return await _Resume(coro, first)  # type: ignore[no-any-return]


class _Resume:
    """Awaitable that hands a suspended coroutine's pending future to the task awaiting it,
    then passes every result or exception back into the coroutine, as ``await`` would."""

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        pending = self.first
        while True:
            try:
                value = yield pending
            except BaseException as exc:  # forwarded into the coroutine, not handled here
                try:
                    pending = self.coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    pending = self.coro.send(value)
                except StopIteration as done:
                    return done.value


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve the task's outcome when nobody awaits it any more (no warning)."""
    if not task.cancelled():
        task.exception()
