"""The MCP server: the SDK's low-level ``Server`` with ``tools/list`` and ``tools/call`` over
``TransactionService`` (``served.py``: the embedded engine, or a running server over gRPC).

One call, top to bottom: the SDK parses the frame (malformed JSON → -32700, a non-request →
-32600, an unknown method → -32601) → ``on_call_tool`` → an unknown MCP tool is -32602, a
protocol error → the tool's arguments read leniently by its binding (``arguments.py``) → its
handler (``handlers.py``): one service call, the reply shaped. A refused call becomes a
result with ``isError``, ``ok: false`` and a continuation, and one warning log line carrying
the same ``correlationId``.

The tools are the operation table's rows with an ``mcp`` binding, listed in one loop
(``catalog.py``), beside any a benchmark or a gateway adds (``add_tool``).

The SDK serves both protocol eras on one ``Server``: the handshake era (``initialize``;
2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05) and 2026-07-28 (stateless, ``server/discover``);
nothing here depends on which, and nothing here sends a server-to-client request.

Progress and cancellation (embedded engine only): when the caller's ``tools/call`` carries a
progress token, the tool's ``ToolContext.report_progress`` calls become
``notifications/progress``; when the caller cancels its ``run_step``, the running tool is
cancelled and the step fails with a hint saying so, undone like any failure. The engine call
itself runs detached (``run_detached``), so a caller that merely disconnects never stops a
step half-way.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agenttx.api import continuations as cont
from agenttx.api.mcp import handlers
from agenttx.api.mcp.arguments import Arguments, BadArgument
from agenttx.api.mcp.catalog import DEFAULT_ROWS, INSTRUCTIONS, LISTED_ROWS, tool
from agenttx.api.mcp.handlers import Call, ToolNames
from agenttx.api.mcp.served import Served
from agenttx.api.next_calls import MCP
from agenttx.api.operations import Row
from agenttx.api.public_errors import guidance, public_error
from agenttx.api.tracing import incoming
from agenttx.auth.http_auth import caller_of
from agenttx.redaction import redact
from agenttx.tools.context import ProgressSink

log = logging.getLogger("agenttx.mcp")

SERVER_NAME = "agenttx"

# A tool's handler, given the call (its arguments read by the tool's binding inside).
Handler = Callable[[Call], Awaitable["types.CallToolResult | cont.Refusal"]]


class AgentTxMCP:
    """The MCP face of one service: ``server`` is the SDK ``Server`` to run on a transport."""

    def __init__(self, served: Served, *, version: str = "") -> None:
        self.served = served
        self._tool_names = ToolNames(served)  # what run_step may name, as last listed
        self._handlers: dict[str, Handler] = {}
        self._tools: list[types.Tool] = []
        for row in DEFAULT_ROWS:  # every tool of the operation table, in tools/list order
            self._add(row)
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=version,
            title="AgentTx",
            instructions=INSTRUCTIONS,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
        )

    def add_tool(
        self,
        tool: types.Tool,
        handler: Callable[[dict[str, Any]], Awaitable[types.CallToolResult]],
    ) -> None:
        """Offer one more MCP tool beside AgentTx's (a benchmark's no-op, a gateway's):
        ``handler`` gets the call's arguments and returns its result."""
        if tool.name in self._handlers:
            raise ValueError(f"MCP tool {tool.name!r} exists already")

        async def call(c: Call) -> types.CallToolResult | cont.Refusal:
            return await handler(c.args.values)

        self._handlers[tool.name] = call
        self._tools.append(tool)

    def offer(self, row_name: str) -> None:
        """Offer the opt-in tool of the row ``row_name`` (``McpTool.opt_in``: the outbox's,
        ``effect_tools.py``) beside the default ones, in its place after them."""
        [row] = [r for r in LISTED_ROWS if r.name == row_name]
        assert row.mcp is not None, row_name
        assert row.mcp.opt_in, f"{row_name}: listed by default"
        self._add(row)

    def _add(self, row: Row) -> None:
        t = tool(row)
        if t.name in self._handlers:
            raise ValueError(f"MCP tool {t.name!r} exists already")
        self._handlers[t.name] = _reading(t.name, handlers.handler(row))
        self._tools.append(t)

    # ------------------------------------------------------------------ the two handlers

    async def _on_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self._tools))

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        handler = self._handlers.get(params.name)
        if handler is None:
            # A protocol error, not a tool result: the client asked for a tool never listed.
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown tool {params.name!r}; the tools are: {', '.join(sorted(self._handlers))}",
            )
        call = Call(
            self._served(ctx),
            Arguments(params.arguments or {}),
            _progress_sink(ctx, params),
            self._tool_names,
        )
        started = time.perf_counter()
        try:
            # W3C trace context in the request's _meta (traceparent, tracestate): the
            # transaction's spans join the caller's trace (api/tracing.py). A call without
            # one (nearly every call) skips the context manager.
            carrier = _trace_carrier(params.meta)
            if not carrier:
                outcome = await handler(call)
            else:
                with incoming(carrier):
                    outcome = await handler(call)
        except BadArgument as exc:
            outcome = cont.bad_request(redact(str(exc)))  # it may quote the caller's value
        except Exception as exc:  # its public form: a refusal, or an internal error
            e = public_error(exc, log, f"mcp {params.name}")
            # The row a tool is: its action's (run_step is execute_step), or its own name.
            operation = MCP.action_of(params.name) or params.name
            outcome = guidance(e, operation, call.args.values)
            if e.internal:  # logged once already, on the line its correlation id finds
                return _refusal_result(outcome, e.correlation_id)
        if isinstance(outcome, cont.Refusal):
            correlation = uuid.uuid4().hex
            # The one line the correlationId finds: what was refused and why.
            log.warning(
                "mcp %s refused: %s %s",
                params.name,
                outcome.code,
                outcome.message,
                extra={
                    "tool": params.name,
                    "code": outcome.code,
                    "correlation_id": correlation,
                    "transaction_id": call.args.values.get("transaction_id", ""),
                    "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                },
            )
            return _refusal_result(outcome, correlation)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "mcp %s ok",
                params.name,
                extra={"duration_ms": round((time.perf_counter() - started) * 1000, 3)},
            )
        return outcome

    def _served(self, ctx: ServerRequestContext[Any]) -> Served:
        """The service acting for this request's caller: over HTTP with keys, the one the
        request's bearer key named (``agenttx.auth.http_auth``), per request, so a session id
        used with another key acts for that key's owner; otherwise the process's own."""
        scope = getattr(ctx.request, "scope", None)
        caller = caller_of(scope) if isinstance(scope, dict) else None
        return self.served if caller is None else self.served.as_caller(caller)


def _reading(tool: str, handler: handlers.Handler) -> Handler:
    """``handler`` given the call's arguments as ``tool``'s binding reads them."""

    async def call(c: Call) -> types.CallToolResult | cont.Refusal:
        return await handler(c, c.args.read(tool))

    return call


def _refusal_result(refusal: cont.Refusal, correlation: str) -> types.CallToolResult:
    structured: dict[str, Any] = {
        "ok": False,
        "error": {"code": refusal.code, "message": refusal.message, "correlationId": correlation},
        "continuation": refusal.continuation,
        "diagnostics": refusal.diagnostics,
        **refusal.extra,
    }
    text = (
        f"Refused ({refusal.code}): {refusal.message}\n"
        f"Next: {refusal.continuation['instruction']}\n"
        f"correlationId {correlation}"
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=True,
    )


def _trace_carrier(meta: Any) -> dict[str, str]:
    if not meta:
        return {}
    if not isinstance(meta, dict):
        meta = dict(meta)
    return {k: v for k in ("traceparent", "tracestate") if isinstance(v := meta.get(k), str)}


def _progress_sink(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> ProgressSink | None:
    """A sink relaying the tool's progress to the caller, iff the caller sent a token."""
    meta = params.meta or {}
    if meta.get("progress_token") is None and meta.get("progressToken") is None:
        return None
    session = ctx.session

    async def relay(done: float, total: float | None, message: str | None) -> None:
        await session.report_progress(done, total, message)

    return relay
