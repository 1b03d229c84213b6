"""Server-sent events: ``GET /v1/transactions/{id}/events`` (one transaction, until it ends)
and ``GET /v1/events`` (every transaction, until the client leaves).

A per-transaction stream asked for after the last revision of an ended transaction is a
204, not an empty stream: the answer that makes a browser's ``EventSource`` stop reconnecting.

Each event is ``event: transaction``, ``id: <revision>`` (per transaction) and ``data:`` the
``TransactionEvent`` wire fields as JSON. With API keys both show only what the key may
read (``/v1/events``: its tenant's transactions, an agent's own only, as a listing). A
reconnecting browser sends ``Last-Event-ID``; the
per-transaction stream then starts after that revision (``?after_revision=`` does the same),
so nothing is repeated and the current state is never missed. ``/v1/events`` has no history:
it starts with what happens next. A comment line every 15 s keeps proxies from closing an idle
stream. A subscriber that falls behind loses its oldest events, never the newest (each event
carries the full status).

Streams are counted with every other surface's (``api.stream_slots``: gRPC
``WatchTransaction`` and MCP's ``GET /mcp`` too), in all and per API key; one more is answered
503 ``TOO_MANY_SUBSCRIBERS`` with ``Retry-After`` before anything is watched. A stream's slot
is given back however it ends, also when the client leaves before its first byte.

A stream lives only as long as its key (``api.revocable``): when a reload of the key file
revokes it, the stream sends one last ``event: error`` whose data is the error body of every
other refusal (``UNAUTHENTICATED``), and closes. A key whose tenant or roles changed keeps a
per-transaction stream iff it may still read that transaction (else the last event is that
refusal, ``NOT_FOUND`` or ``PERMISSION_DENIED``); ``/v1/events`` goes on showing what the key
may read now.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from agenttx.api.http.v1.errors import invalid_response, refusal_body, refusal_response
from agenttx.api.http.v1.operations import path_refusal
from agenttx.api.revocable import until_revoked, watch_as
from agenttx.api.stream_slots import Slot, StreamSlots
from agenttx.auth.http_auth import grant_of
from agenttx.auth.keys import KeyGrant
from agenttx.errors import AgentTxError, InvalidArgument, StepFailure, TooManySubscribers
from agenttx.numbers import AFTER_REVISION
from agenttx.types import Caller

KEEPALIVE_SECS = 15.0
QUEUE_SIZE = 256
MAX_SEEN = 10_000  # transactions a keyed /v1/events stream remembers it may (not) read
_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def event_fields(e: Any) -> dict[str, Any]:
    return {
        "transaction_id": e.transaction_id,
        "revision": e.revision,
        "status": e.status.value,
        "next_step_id": e.next_step_id,
        "kind": e.kind,
        "at": e.at,
    }


def _frame(e: Any) -> bytes:
    data = json.dumps(event_fields(e), ensure_ascii=False)
    return f"event: transaction\nid: {e.revision}\ndata: {data}\n\n".encode()


def _error_frame(exc: AgentTxError, arguments: dict[str, Any]) -> bytes:
    """A stream's last event: the refusal that ended it, in the error shape of ``/v1``."""
    data = json.dumps(refusal_body(exc, arguments), ensure_ascii=False)
    return f"event: error\ndata: {data}\n\n".encode()


class Firehose:
    """Every transaction's events, fanned out to the ``/v1/events`` subscribers."""

    def __init__(self, engine: Any) -> None:
        self._queues: set[asyncio.Queue[Any]] = set()
        engine.events.add_listener(self._publish)

    def _publish(self, event: Any) -> None:
        for q in self._queues:
            if q.full():
                q.get_nowait()
            q.put_nowait(event)

    def open(self) -> asyncio.Queue[Any]:
        # No cap of its own: ``Streams.admit`` counts these with every other stream.
        q: asyncio.Queue[Any] = asyncio.Queue(QUEUE_SIZE)
        self._queues.add(q)
        return q

    def close(self, q: asyncio.Queue[Any]) -> None:
        self._queues.discard(q)


class Streams:
    """The open event streams' shared end: ``admit`` counts them with every surface's
    (``slots``), ``close`` (the listener's stop) ends every one at once, so a shutdown does
    not wait out the server's grace period for them; a browser reconnects to the next server
    by itself."""

    def __init__(self, slots: StreamSlots | None = None) -> None:
        self._closing = asyncio.Event()
        # The server's one count of streams (gRPC and MCP share it); a fresh one for an app
        # built alone.
        self.slots = slots if slots is not None else StreamSlots()

    def admit(self, grant: KeyGrant | None) -> Slot | Response:
        """A slot for one more stream of ``grant``'s key, or the 503 to answer instead."""
        try:
            return self.slots.admit(grant)
        except TooManySubscribers as exc:
            return refusal_response(exc, {})

    def close(self) -> None:
        self._closing.set()

    async def frames(
        self, events: AsyncIterator[Any], arguments: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        """``events`` as SSE frames, a keepalive comment when idle, until they or we end; a
        refusal raised by ``events`` (a revoked key) is the last frame (``arguments``: the
        request's, which its continuation quotes)."""
        yield b": connected\n\n"
        it = events.__aiter__()
        closing = asyncio.ensure_future(self._closing.wait())
        pending: asyncio.Future[Any] | None = None
        try:
            while not self._closing.is_set():
                if pending is None:
                    pending = asyncio.ensure_future(it.__anext__())
                done, _ = await asyncio.wait(
                    {pending, closing}, timeout=KEEPALIVE_SECS, return_when=asyncio.FIRST_COMPLETED
                )
                if pending not in done:
                    if not done:
                        yield b": keepalive\n\n"
                    continue
                got, pending = pending, None
                try:
                    event = got.result()
                except StopAsyncIteration:
                    return
                except AgentTxError as exc:
                    if isinstance(exc, StepFailure):  # no stream raises one: a bug
                        raise
                    yield _error_frame(exc, arguments)
                    return
                yield _frame(event)
        finally:
            closing.cancel()
            if pending is not None:
                # The generator may be closed only once its pending step has finished.
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()


async def _cancelled(step: asyncio.Future[Any]) -> None:
    """``step`` cancelled and finished, whatever it raised."""
    step.cancel()
    with contextlib.suppress(BaseException):
        await step


class _CountedStream(StreamingResponse):
    """An event stream that gives its slot back however it ends: when its frames end (also
    by the client leaving, which closes them), or, if they never started (the client gone
    before the first byte: a ``finally`` inside a generator that never ran never runs), when
    the response is done. Not only the latter: Starlette may return from the response while
    the body is still streamed on a task of its own."""

    def __init__(self, frames: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        self._release = release  # idempotent (``Slot.release``)
        self._started = False  # true iff the frames were iterated: their finally releases
        super().__init__(self._counted(frames), media_type="text/event-stream", headers=_HEADERS)

    async def _counted(self, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        self._started = True
        try:
            async for chunk in frames:
                yield chunk
        finally:
            self._release()
            aclose = getattr(frames, "aclose", None)
            if aclose is not None:  # stop watching now, not when the generator is collected
                await aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self._started:
                self._release()


class _Audience:
    """Whom a ``/v1/events`` stream shows events to. With API keys it shows what a listing
    shows the key: its tenant's transactions, and an agent's own only. Tenant and owner never
    change, so each transaction is checked once per stream and key (the first check of a new
    one reads its cached image, not the store)."""

    def __init__(self, engine: Any, caller: Caller | None) -> None:
        self.engine = engine
        self.caller = caller  # the key's caller as of the last reload; None: no keys, all
        # transaction id → ``caller`` may read it; emptied whenever ``caller`` changes.
        self._seen: dict[str, bool] = {}

    async def shows(self, transaction_id: str) -> bool:
        caller = self.caller
        if caller is None:
            return True
        visible = self._seen.get(transaction_id)
        if visible is None:
            visible = await self.engine.may_read(transaction_id, caller=caller)
            if caller is self.caller:  # not re-keyed meanwhile: the answer is still current
                if len(self._seen) >= MAX_SEEN:
                    self._seen.clear()
                self._seen[transaction_id] = visible
        return bool(visible)

    async def rekey(self, caller: Caller) -> None:
        """A reload gave the key another tenant or roles: from now on the stream shows what
        the key may read now, as a new stream would."""
        self.caller = caller
        self._seen.clear()


def routes(engine: Any, streams: Streams) -> list[BaseRoute]:
    firehose = Firehose(engine)

    async def transaction_events(request: Request) -> Response:
        transaction_id = request.path_params["transaction_id"]
        refused = path_refusal({"transaction_id": transaction_id})
        if refused is not None:
            return invalid_response(refused)
        after = request.query_params.get("after_revision") or request.headers.get(
            "last-event-id", "0"
        )
        try:
            after_revision = AFTER_REVISION.parse(after)
        except InvalidArgument as exc:
            return invalid_response(f"{exc.message} (after_revision or Last-Event-ID)")
        grant = grant_of(request.scope)
        slot = streams.admit(grant)
        if isinstance(slot, Response):
            return slot
        opened = asyncio.Event()
        stream = watch_as(engine, grant, transaction_id, after_revision, opened)
        # Answered once the transaction is found and watched, or its first event (or refusal)
        # came, whichever is first: an unknown id is a 404, not a stream, and a stream asked
        # for revisions past the current one of an open transaction is answered at once (its
        # first event waits for a change), not held without headers.
        first = asyncio.ensure_future(anext(stream))
        watched = asyncio.ensure_future(opened.wait())
        try:
            await asyncio.wait({first, watched}, return_when=asyncio.FIRST_COMPLETED)
            failed = first.exception() if first.done() else None
            if isinstance(failed, AgentTxError):
                slot.release()
                return refusal_response(failed, {"transaction_id": transaction_id})
            if isinstance(failed, StopAsyncIteration):
                # Ended, and its last state is at or before ``after_revision``: the client has
                # seen the end. 204 is what makes an ``EventSource`` stop reconnecting (HTML's
                # server-sent events: any status but 200 fails the connection for good); a 200
                # with no event would be reconnected to every few seconds, forever.
                slot.release()
                await stream.aclose()
                return Response(status_code=204, headers=_HEADERS)
            if failed is not None:
                raise failed  # a bug: the 500 of every route
        except BaseException:
            slot.release()
            await _cancelled(first)
            raise
        finally:
            watched.cancel()

        async def events() -> AsyncIterator[Any]:
            # aclosing: a stream that ends early stops watching (and its key's watch) now.
            async with contextlib.aclosing(stream):
                try:
                    event = await first
                except StopAsyncIteration:
                    return
                except BaseException:
                    # The generator may be closed only once its pending step has finished.
                    await _cancelled(first)
                    raise
                yield event
                async for e in stream:
                    yield e

        return _CountedStream(
            streams.frames(events(), {"transaction_id": transaction_id}), slot.release
        )

    async def all_events(request: Request) -> Response:
        grant = grant_of(request.scope)
        caller = grant.caller if grant is not None else None
        slot = streams.admit(grant)
        if isinstance(slot, Response):
            return slot
        q = firehose.open()
        audience = _Audience(engine, caller)

        async def events() -> AsyncIterator[Any]:
            while True:
                event = await q.get()
                if await audience.shows(event.transaction_id):
                    yield event

        def unsubscribe() -> None:
            firehose.close(q)
            slot.release()

        return _CountedStream(
            streams.frames(until_revoked(events(), grant, audience.rekey), {}), unsubscribe
        )

    return [
        Route("/transactions/{transaction_id}/events", transaction_events, methods=["GET"]),
        Route("/events", all_events, methods=["GET"]),
    ]
