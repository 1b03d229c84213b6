"""Run an engine call so that its caller's cancellation cannot stop it half-way, cheaply.

A gRPC handler is cancelled when its client gives up (deadline, disconnect). An engine call
must not stop half-way for that: it finishes, and its reply is stored for a retry with the
same request_id. The usual way is a task of its own behind ``asyncio.shield`` — but a task
costs a creation and three turns of the event loop per call (~50–70 µs per step over
loopback, measured), a sizeable part of a step that otherwise never suspends (a state tool
on SQLite: the write commits inline).

So ``run_detached`` starts the call eagerly, in the caller's task, as Python 3.12's eager
tasks do: a call that completes without suspending returns at once — cancellation can only
land at a suspension point, and there was none. At its first suspension the call moves into
a shielded task of its own, which drives the same coroutine on from where it stopped.

The catch: while eager, the call runs in its *caller's* task, and anything that binds to the
running task — ``asyncio.timeout``, a ``TaskGroup``, and so any user code (tools, undo
handlers, delivery channels) — would bind to the wrong one once the call moves. The engine
therefore calls ``leave_eager()`` before such code: a no-op outside ``run_detached`` or once
the call has its own task, otherwise one suspension that moves it there first.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")

# True only while a call runs eagerly in its caller's task (set around the first send).
_EAGER: contextvars.ContextVar[bool] = contextvars.ContextVar("agenttx_eager", default=False)


async def run_detached(coro: Coroutine[Any, Any, T]) -> T:
    """``await coro``, except that cancelling the caller does not cancel ``coro``."""
    token = _EAGER.set(True)
    try:
        first = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except BaseException:
        coro.close()
        raise
    finally:
        _EAGER.reset(token)
    # The task copies the caller's context as it is now, with _EAGER back to False.
    task = asyncio.get_running_loop().create_task(_continue(coro, first))
    task.add_done_callback(_consume)
    return await asyncio.shield(task)


async def leave_eager() -> None:
    """Make sure the running engine call has a task of its own before code that binds to
    the running task (see the module docstring)."""
    if _EAGER.get():
        await asyncio.sleep(0)  # suspends: run_detached moves the call into its task


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
