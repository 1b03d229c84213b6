"""Streams that end when their key does: one rule for every long-lived reply.

A stream (gRPC ``WatchTransaction``, ``GET /v1/transactions/{id}/events``, ``GET /v1/events``)
is authenticated once, when it opens, but may stay open for hours. ``until_revoked`` runs its
events beside the ``KeyGrant`` it was opened with (``agenttx.auth.keys``): when a reload of
the key file removes the key, the stream raises ``Unauthenticated`` in place of its next event
(the adapter sends it in its protocol's shape and closes); when the key now resolves to
another caller, ``recheck`` is given the new caller and either raises (the stream ends with
that refusal, e.g. ``NotFound`` for a transaction of the tenant it left) or lets the stream go
on. A revocation wins over an event that arrived at the same moment: nothing is sent after it.
Without keys (``grant`` None) the events pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from agenttx.auth.keys import KeyGrant
from agenttx.types import Caller

T = TypeVar("T")


async def _allowed(caller: Caller) -> None:
    """A recheck that lets the stream go on whoever the key now is."""


def watch_as(
    engine: Any,
    grant: KeyGrant | None,
    transaction_id: str,
    after_revision: int = 0,
    opened: asyncio.Event | None = None,
) -> AsyncGenerator[Any, None]:
    """``engine.watch`` of one transaction as ``grant``'s caller, for as long as the grant
    holds: the stream of gRPC ``WatchTransaction`` and ``/v1/transactions/{id}/events``. A key
    whose caller changed keeps it iff a new watch by that caller could read the transaction
    (else ``NotFound`` or ``PermissionDenied``, as ``Engine.check_read`` says)."""
    caller = grant.caller if grant is not None else None

    async def recheck(now: Caller) -> None:
        await engine.check_read(transaction_id, caller=now)

    if opened is None:
        events = engine.watch(transaction_id, after_revision, caller=caller)
    else:  # ``Engine.watch`` sets it once the transaction is found and may be read
        events = engine.watch(transaction_id, after_revision, caller=caller, opened=opened)
    return until_revoked(events, grant, recheck)


async def until_revoked(
    events: AsyncIterator[T],
    grant: KeyGrant | None,
    recheck: Callable[[Caller], Awaitable[None]] = _allowed,
) -> AsyncGenerator[T, None]:
    """``events`` for as long as ``grant`` holds; its revocation is raised in their place."""
    it = events.__aiter__()
    if grant is None:
        try:
            async for event in it:
                yield event
        finally:
            await _close(it)
        return
    held: asyncio.Future[Any] = asyncio.ensure_future(grant.hold(recheck))
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(it.__anext__())
            await asyncio.wait({pending, held}, return_when=asyncio.FIRST_COMPLETED)
            if held.done():
                held.result()  # raises: ``hold`` never returns
            got, pending = pending, None
            try:
                event = got.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        held.cancel()
        with contextlib.suppress(BaseException):
            await held
        if pending is not None:
            # The events' generator may be closed only once its pending step has finished.
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await _close(it)


async def _close(it: AsyncIterator[Any]) -> None:
    """Close ``events`` now (an async generator's ``finally`` unsubscribes it), not when
    collected."""
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()
