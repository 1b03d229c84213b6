"""What a tool sees while it runs: managed state, undo registration, effect staging.

The engine implements ``StepScope`` for each step attempt; ``ToolContext`` is the async face a
tool uses, ``SyncToolContext`` the blocking face given to plain (non-async) tools, which run on
a worker thread and reach the event loop through ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# Where a step's progress goes: (done, total or None, message or None). The caller of the step
# gives one (an MCP client that sent a progress token); without one, progress is dropped.
ProgressSink = Callable[[float, float | None, str | None], Awaitable[None]]


class StepScope(Protocol):
    """Implemented by the engine, one per step attempt."""

    transaction_id: str
    step_id: int
    idempotency_key: str
    fs_root: Path

    async def state_get(self, key: str) -> Any: ...
    async def state_exists(self, key: str) -> bool: ...
    def state_put(self, key: str, value: Any) -> None: ...
    async def state_delete(self, key: str) -> bool: ...
    async def register_undo(self, handler: str | None, args: dict[str, Any]) -> None: ...
    def stage_effect(self, channel: str, payload: Any, idempotency_key: str | None) -> str: ...
    async def report_progress(
        self, done: float, total: float | None, message: str | None
    ) -> None: ...
    async def checkpoint_operation(self, provider: str, operation_id: str, cursor: Any) -> None: ...


class StateView:
    """Managed state as this transaction sees it: its own writes first, then committed state
    at the transaction's isolation level."""

    def __init__(self, scope: StepScope) -> None:
        self._scope = scope

    async def get(self, key: str, default: Any = None) -> Any:
        if not await self._scope.state_exists(key):
            return default
        return await self._scope.state_get(key)

    async def exists(self, key: str) -> bool:
        return await self._scope.state_exists(key)

    async def put(self, key: str, value: Any) -> None:
        self._scope.state_put(key, value)

    async def delete(self, key: str) -> bool:
        """Delete ``key``; True iff it existed."""
        return await self._scope.state_delete(key)


class _StepIdentity:
    """Who is running: shared by the async and the blocking context."""

    _scope: StepScope

    @property
    def transaction_id(self) -> str:
        return self._scope.transaction_id

    @property
    def step_id(self) -> int:
        return self._scope.step_id

    @property
    def idempotency_key(self) -> str:
        """Stable for this step attempt: pass it to outside APIs so a retried call is one call."""
        return self._scope.idempotency_key

    @property
    def fs_root(self) -> Path:
        return self._scope.fs_root


class ToolContext(_StepIdentity):
    def __init__(self, scope: StepScope) -> None:
        self._scope = scope
        self.state = StateView(scope)

    async def register_undo(self, args: dict[str, Any], *, handler: str | None = None) -> None:
        """Record how to undo what this step is about to do. Durable before it returns: call it
        *before* the outside call. ``handler`` defaults to this tool's ``@tool.undo``."""
        await self._scope.register_undo(handler, args)

    def stage_effect(
        self, channel: str, payload: Any = None, idempotency_key: str | None = None
    ) -> str:
        """Queue an effect released only after the transaction commits; returns its key."""
        return self._scope.stage_effect(channel, payload, idempotency_key)

    async def checkpoint_operation(
        self, provider: str, operation_id: str, cursor: Any = None
    ) -> None:
        """Record the outside system's id for the call this step is about to make (or just
        made), durable before it returns: if the outcome turns out unknown, reconcile asks
        ``provider`` about ``operation_id``. Immutable once set: another id raises
        ``OperationIdConflict``; the same id again may update ``cursor`` (any JSON)."""
        await self._scope.checkpoint_operation(provider, operation_id, cursor)

    async def report_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the step's caller how far the tool is (``done`` of ``total``, growing). Relayed
        as MCP progress when the caller asked for it, dropped otherwise; never fails the tool."""
        await self._scope.report_progress(done, total, message)


class SyncStateView:
    def __init__(self, scope: StepScope, loop: asyncio.AbstractEventLoop) -> None:
        self._scope = scope
        self._loop = loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def get(self, key: str, default: Any = None) -> Any:
        if not self._call(self._scope.state_exists(key)):
            return default
        return self._call(self._scope.state_get(key))

    def exists(self, key: str) -> bool:
        return self._call(self._scope.state_exists(key))

    def put(self, key: str, value: Any) -> None:
        async def put() -> None:  # on the loop, so a bad key raises here, in order with reads
            self._scope.state_put(key, value)

        self._call(put())

    def delete(self, key: str) -> bool:
        return self._call(self._scope.state_delete(key))


class SyncToolContext(_StepIdentity):
    """The blocking context handed to a plain ``def`` tool running on a worker thread."""

    def __init__(self, scope: StepScope, loop: asyncio.AbstractEventLoop) -> None:
        self._scope = scope
        self._loop = loop
        self.state = SyncStateView(scope, loop)

    def register_undo(self, args: dict[str, Any], *, handler: str | None = None) -> None:
        asyncio.run_coroutine_threadsafe(
            self._scope.register_undo(handler, args), self._loop
        ).result()

    def stage_effect(
        self, channel: str, payload: Any = None, idempotency_key: str | None = None
    ) -> str:
        async def stage() -> str:
            return self._scope.stage_effect(channel, payload, idempotency_key)

        return asyncio.run_coroutine_threadsafe(stage(), self._loop).result()

    def report_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        asyncio.run_coroutine_threadsafe(
            self._scope.report_progress(done, total, message), self._loop
        ).result()

    def checkpoint_operation(self, provider: str, operation_id: str, cursor: Any = None) -> None:
        asyncio.run_coroutine_threadsafe(
            self._scope.checkpoint_operation(provider, operation_id, cursor), self._loop
        ).result()
