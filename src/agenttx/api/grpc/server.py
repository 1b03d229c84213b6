"""gRPC adapter: ``agenttx.v1.AgentTxService`` over ``agenttx.Engine``.

Thin on purpose: every unary method is derived from its row of the operation table
(``agenttx.api.operations``): the decoded request and the call's context (its key's caller,
the strategies it can name, the message limit) go to the row's ``run``, under ``_guard``.
Only ``WatchTransaction``, a server stream, is written here. Status codes follow the
reference: OK for steps that failed and were rolled back (a failure is data in the reply),
INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION (the message names the expected step),
ABORTED (commit conflict), ALREADY_EXISTS (a request_id reused with another payload),
INTERNAL, each from the one table in ``agenttx.errors``; a refusal also carries the error's
reason and fields as trailing metadata (``agenttx.errors``, docs/api.md). Health
(``grpc.health.v1``) and server reflection are served beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agenttx.api.grpc.requests import add_service
from agenttx.api.history import MAX_MESSAGE_BYTES  # the reference's cap, both directions
from agenttx.api.next_calls import grpc_calls
from agenttx.api.operations import ROWS, CallContext, Row
from agenttx.api.public_errors import guidance, public_error, public_row
from agenttx.api.revocable import watch_as
from agenttx.api.stream_slots import StreamSlots
from agenttx.api.tracing import incoming
from agenttx.auth.grpc_auth import grant_of_metadata
from agenttx.auth.keys import KeyGrant, KeyRing
from agenttx.core.eager import run_detached
from agenttx.core.engine import Engine
from agenttx.error_details import next_metadata, reason_metadata
from agenttx.errors import AgentTxError
from agenttx.fieldcopy import field_copy
from agenttx.types import (
    ACCEPT_STRATEGIES_METADATA,
    REFERENCE_FALLBACK,
    Caller,
    Strategy,
)
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

log = logging.getLogger("agenttx.grpc")

SERVICE_NAME = "agenttx.v1.AgentTxService"

T = TypeVar("T")

# The next calls of a continuation, by RPC: each row's.
GRPC = grpc_calls({row.name: row.rpc for row in ROWS})


def status_code(exc: AgentTxError) -> grpc.StatusCode:
    """The status a call refused with ``exc`` fails with (the public error policy's row of the
    table in ``agenttx.errors``: INTERNAL for an internal error)."""
    return grpc.StatusCode[public_row(exc).grpc_status]


async def _refuse(context: grpc.aio.ServicerContext, exc: Exception, operation: str = "") -> None:
    """Fail the call with ``exc`` in its public form (``api/public_errors.py``): its status and
    message, as a reference client expects, and its reason, fields and continuation as
    trailing metadata, which such a client ignores. An internal error (a step failure that
    escaped, any exception no call is refused with) says only INTERNAL and a correlation id;
    its text and traceback are logged once. ``operation``: the row called ("" a stream)."""
    e = public_error(exc, log, "gRPC")
    # What to call next, named by RPC: the continuation MCP and HTTP give, for gRPC callers.
    cont = guidance(e, operation, calls=GRPC).continuation
    await context.abort(
        grpc.StatusCode[e.grpc_status],
        e.message,
        trailing_metadata=reason_metadata(e.reason, e.fields) + next_metadata(cont),
    )


async def _guard(
    context: grpc.aio.ServicerContext,
    call: Callable[[], Coroutine[Any, Any, T]],
    operation: str = "",
) -> T:
    """Run ``call`` of row ``operation``; fail it with any error it raises in its public form
    (``_refuse``)."""
    # A client that gives up (deadline, disconnect) must not cancel a step half-way: it
    # finishes, and its reply is stored for a retry with the same request_id.
    try:
        # The caller's W3C trace context (traceparent metadata) is the parent of the spans;
        # a call without one (nearly every call) skips the context manager.
        carrier = _trace_carrier(context)
        if not carrier:
            return await run_detached(call())
        with incoming(carrier):
            return await run_detached(call())
    except grpc.aio.AbortError:
        raise
    except Exception as exc:
        await _refuse(context, exc, operation)
    raise AssertionError("unreachable: context.abort raises")


def _trace_carrier(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {
        k: v
        for k, v in context.invocation_metadata() or ()
        if k in ("traceparent", "tracestate") and isinstance(v, str)
    }


def accepted_strategies(context: grpc.aio.ServicerContext) -> frozenset[Strategy]:
    """Our strategies beyond the reference's that the caller says it can name, from its
    ``agenttx-accept-strategies`` metadata (unknown names are ignored: a newer client may
    know more than this server)."""
    found: frozenset[Strategy] = frozenset()
    for key, value in context.invocation_metadata() or ():
        if key == ACCEPT_STRATEGIES_METADATA and isinstance(value, str):
            found |= _strategies_named(value)
    return found


# The strategies a header value names, by value: a client sends the same value on every call,
# so it is read once. Bounded, so callers choosing values cannot grow it.
_NAMED: dict[str, frozenset[Strategy]] = {}
_NAMED_MAX = 64


def _strategies_named(value: str) -> frozenset[Strategy]:
    found = _NAMED.get(value)
    if found is None:
        names = {n.strip().upper() for n in value.split(",")}
        found = frozenset(s for s in REFERENCE_FALLBACK if s.value in names)
        if len(_NAMED) < _NAMED_MAX:
            _NAMED[value] = found
    return found


class AgentTxServicer(pb_grpc.AgentTxServiceServicer):
    def __init__(
        self, engine: Engine, keys: KeyRing | None = None, slots: StreamSlots | None = None
    ) -> None:
        self.engine = engine
        # The API keys every call must carry one of; None: none needed (loopback only).
        self.keys = keys
        # The server's one count of open event streams, shared with HTTP and MCP
        # (``api.stream_slots``); a fresh one for a gRPC server built alone.
        self.slots = slots if slots is not None else StreamSlots()

    def _caller(self, context: grpc.aio.ServicerContext) -> Caller | None:
        """Who is calling (raises Unauthenticated); None without keys: the local operator."""
        grant = self._grant(context)
        return grant.caller if grant is not None else None

    def _grant(self, context: grpc.aio.ServicerContext) -> KeyGrant | None:
        """The call's key, resolved (raises Unauthenticated); None without keys."""
        if self.keys is None:
            return None
        return grant_of_metadata(self.keys, context.invocation_metadata())

    def _context(self, context: grpc.aio.ServicerContext) -> CallContext:
        """The call's context for a row's ``run`` (raises Unauthenticated)."""
        return CallContext(self._caller(context), accepted_strategies(context), MAX_MESSAGE_BYTES)

    async def WatchTransaction(
        self, request: pb.WatchTransactionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TransactionEvent]:
        try:
            # A key a reload revokes ends the stream UNAUTHENTICATED (``api.revocable``).
            grant = self._grant(context)
            # Counted before anything is watched; past a limit RESOURCE_EXHAUSTED
            # TOO_MANY_SUBSCRIBERS, its retry_after_ms in the trailing metadata. The slot is
            # given back however the stream ends: by the ``with`` on an end, an error or a
            # cancel raised into the pending read; by the RPC's done callback when a cancel
            # finds this generator parked at a ``yield`` (a send pending), which no finally
            # here would see until the generator is collected.
            slot = self.slots.admit(grant)
            context.add_done_callback(lambda _: slot.release())
            with slot:
                events = watch_as(
                    self.engine, grant, request.transaction_id, request.after_revision
                )
                # aclosing: a client that leaves stops the watch (and its key's) at once.
                async with contextlib.aclosing(events):
                    async for e in events:
                        yield field_copy(e, pb.TransactionEvent, status=e.status.value)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:  # its public form, as every unary call's (``_refuse``)
            await _refuse(context, exc)


def _unary(row: Row) -> Callable[..., Coroutine[Any, Any, Any]]:
    """The servicer method of ``row``: its ``run`` under ``_guard``. The context is made
    inside the guard, so a missing or bad key is refused like any other error."""

    async def method(self: AgentTxServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await _guard(
            context, lambda: row.run(self.engine, request, self._context(context)), row.name
        )

    method.__name__ = method.__qualname__ = row.rpc
    return method


# One method per row; an RPC of the schema without a row stays the generated base's
# UNIMPLEMENTED, and WatchTransaction is the class's own.
for _row in ROWS:
    setattr(AgentTxServicer, _row.rpc, _unary(_row))
del _row


def build_server(
    engine: Engine,
    *,
    options: list[tuple[str, Any]] | None = None,
    interceptors: Sequence[Any] = (),
    keys: KeyRing | None = None,
    slots: StreamSlots | None = None,
) -> Any:
    """A ``grpc.aio`` server with the AgentTx service, health and reflection (not started);
    ``interceptors`` are ``grpc.aio.ServerInterceptor`` s (metrics, call logs); ``keys``: the
    API keys every AgentTx call must carry (health and reflection stay open: they reveal
    no transaction); ``slots``: the server's count of open event streams, shared with the
    HTTP listener's (``api.stream_slots``)."""
    server = grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            *(options or []),
        ],
    )
    # As the generated add_AgentTxServiceServicer_to_server, with every request checked as
    # it is decoded: malformed bytes and out-of-range 64-bit fields are INVALID_ARGUMENT.
    add_service(
        AgentTxServicer(engine, keys, slots),
        server,
        pb.DESCRIPTOR.services_by_name["AgentTxService"],
        pb,
        SERVICE_NAME,
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.agenttx_health = health_servicer
    reflection.enable_server_reflection(
        (
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    return server


async def mark_serving(server: Any, serving: bool = True) -> None:
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", SERVICE_NAME):
        await server.agenttx_health.set(name, status)
