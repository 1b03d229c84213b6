"""The MCP server: the SDK's low-level ``Server`` with ``tools/list`` and ``tools/call`` over
``TransactionService`` (``served.py``: the embedded engine, or a running server over gRPC).

One call, top to bottom: the SDK parses the frame (malformed JSON → -32700, a non-request →
-32600, an unknown method → -32601) → ``on_call_tool`` → an unknown MCP tool is -32602, a
protocol error → the tool's arguments read leniently by its row (``arguments.py``) → one
service call → ``results.py`` shapes the reply. A refused call becomes a result with ``isError``,
``ok: false`` and a continuation, and one warning log line carrying the same
``correlationId``.

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

import asyncio
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
from agenttx.api.mcp import compensation, reconcile, results, rows, undo
from agenttx.api.mcp.arguments import Arguments, BadArgument
from agenttx.api.mcp.catalog import INSTRUCTIONS, TOOL_NAMES, TOOLS
from agenttx.api.mcp.served import Served
from agenttx.api.next_calls import MCP
from agenttx.api.operations import Row
from agenttx.api.public_errors import guidance, public_error
from agenttx.api.tracing import incoming
from agenttx.auth.http_auth import caller_of
from agenttx.core.eager import run_detached
from agenttx.errors import AgentTxError, CommitConflict
from agenttx.redaction import redact
from agenttx.service import TransactionService
from agenttx.tools.context import ProgressSink

log = logging.getLogger("agenttx.mcp")

SERVER_NAME = "agenttx"

Handler = Callable[["_Call"], Awaitable["types.CallToolResult | cont.Refusal"]]
# A tool's handler, given its arguments as ``arguments.py`` read them, by name.
Reading = Callable[["_Call", dict[str, Any]], Awaitable["types.CallToolResult | cont.Refusal"]]


class _Call:
    """One ``tools/call``: its arguments and what its handler may use of the request."""

    def __init__(self, served: Served, args: Arguments, progress: ProgressSink | None) -> None:
        self.served = served  # acting for the request's caller
        self.service = served.service
        self.args = args
        self.progress = progress


class AgentTxMCP:
    """The MCP face of one service: ``server`` is the SDK ``Server`` to run on a transport."""

    def __init__(self, served: Served, *, version: str = "") -> None:
        self.served = served
        # The AgentTx tools as last listed; listed again when a step names one not in it.
        self._tool_names: list[str] | None = None
        reading: dict[str, Reading] = {
            "begin_transaction": self._begin,
            "run_step": self._run_step,
            "commit_transaction": self._commit,
            "rollback_transaction": self._rollback,
            "get_transaction": self._get,
            "list_tools": self._list_tools,
            "list_transactions": self._list_transactions,
            "preview_commit": self._preview,
            "approve_commit": self._approve,
            "refuse_commit": self._refuse,
            "undo_step": self._undo_step,
            "redo_step": self._redo_step,
            "reconcile_step": self._reconcile_step,
        }
        assert set(reading) == TOOL_NAMES | undo.UNDO_TOOL_NAMES
        self._tools = [*TOOLS, *undo.UNDO_TOOLS]
        for tool in compensation.TOOLS:  # compensate_transaction, approve_/refuse_compensation
            reading[tool.name] = _compensation_handler(compensation.HANDLERS[tool.name])
            self._tools.append(tool)
        self._handlers: dict[str, Handler] = {n: _reading(n, h) for n, h in reading.items()}
        for name, row in rows.MCP_ROWS.items():  # the tools the operation table derives
            assert name not in self._handlers, f"{name}: a tool written by hand has the name"
            self._handlers[name] = _row_handler(row)
            self._tools.append(rows.tool(row))
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

        async def call(c: _Call) -> types.CallToolResult | cont.Refusal:
            return await handler(c.args.values)

        self._handlers[tool.name] = call
        self._tools.append(tool)

    def add_served_tool(
        self,
        tool: types.Tool,
        handler: Callable[[Served, dict[str, Any]], Awaitable[types.CallToolResult]],
    ) -> None:
        """``add_tool`` for an AgentTx tool beyond the agent's (``effect_tools.py``): its
        handler calls the service as the request's caller (over HTTP with API keys, the key's
        owner) with the arguments its row in ``arguments.ARGUMENTS`` reads."""
        if tool.name in self._handlers:
            raise ValueError(f"MCP tool {tool.name!r} exists already")

        async def call(c: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
            return await handler(c.served, a)

        self._handlers[tool.name] = _reading(tool.name, call)
        self._tools.append(tool)

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
        call = _Call(
            self._served(ctx), Arguments(params.arguments or {}), _progress_sink(ctx, params)
        )
        started = time.perf_counter()
        try:
            # W3C trace context in the request's _meta (traceparent, tracestate): the
            # transaction's spans join the caller's trace (api/tracing.py).
            with incoming(_trace_carrier(params.meta)):
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

    # ------------------------------------------------------------------ the tools

    def _served(self, ctx: ServerRequestContext[Any]) -> Served:
        """The service acting for this request's caller: over HTTP with keys, the one the
        request's bearer key named (``agenttx.auth.http_auth``), per request, so a session id
        used with another key acts for that key's owner; otherwise the process's own."""
        scope = getattr(ctx.request, "scope", None)
        caller = caller_of(scope) if isinstance(scope, dict) else None
        return self.served if caller is None else self.served.as_caller(caller)

    async def _begin(self, call: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
        goal = a["goal"]
        b = await run_detached(
            call.service.begin(
                a["agent_id"],
                {"goal": goal} if goal else {},
                principal=a["principal"],
                mode=a["mode"],
            )
        )
        return results.begin_result(b)

    async def _run_step(
        self, call: _Call, a: dict[str, Any]
    ) -> types.CallToolResult | cont.Refusal:
        tx, step_id, tool, arguments = a["transaction_id"], a["step_id"], a["tool"], a["arguments"]
        known = await self._agenttx_tools()
        if tool not in known:
            # The MCP gateway adds tools while the engine runs (a server that came up late,
            # or said its tools changed): list again before calling a name unknown.
            self._tool_names = None
            known = await self._agenttx_tools()
        if tool not in known:
            return cont.unknown_tool(tool, known)
        if a["dry_run"]:
            dry = call.service.execute_step(
                tx, step_id, tool, arguments, a["reasoning"], dry_run=True
            )
            return undo.dry_run_result(await dry, tool)
        live = call.served.live
        step = run_detached(
            call.service.execute_step(tx, step_id, tool, arguments, a["reasoning"])
            if live is None
            else live.execute_step(
                tx, step_id, tool, arguments, a["reasoning"], progress=call.progress
            )
        )
        try:
            r = await step
        except asyncio.CancelledError:
            # The caller cancelled this run_step (MCP notifications/cancelled): stop its tool;
            # the step fails and is undone in the engine, and no reply is sent (the caller
            # said it wants none).
            if live is not None and live.cancel_step(tx, step_id):
                log.info(
                    "mcp run_step cancelled by the caller",
                    extra={"transaction_id": tx, "step_id": step_id, "tool": tool},
                )
            raise
        return results.step_result(r, tool)

    async def _commit(self, call: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
        tx = a["transaction_id"]
        try:
            c = await run_detached(
                call.service.commit(
                    tx, expected_revision=a["expected_revision"], receipt_id=a["receipt_id"]
                )
            )
        except CommitConflict as exc:
            try:
                info = await call.service.get_transaction(tx)
            except AgentTxError:
                info = None
            return cont.commit_conflict(exc, info)
        return results.commit_result(c)

    async def _rollback(
        self, call: _Call, a: dict[str, Any]
    ) -> types.CallToolResult | cont.Refusal:
        to_step = a["to_step"]
        b = await run_detached(
            call.service.rollback(a["transaction_id"], to_step or None, a["reason"])
        )
        return results.rollback_result(b, to_step)

    async def _preview(self, call: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
        p = await run_detached(call.service.preview_commit(a["transaction_id"]))
        return results.preview_result(p)

    async def _approve(self, call: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
        # An explicit call by an approver (never an elicitation: the 2026-07-28 protocol
        # cannot carry one, and the agent must not approve its own work).
        approval = call.service.approve_commit(
            a["transaction_id"], a["receipt_id"], principal=a["principal"], roles=a["roles"]
        )
        return results.approval_result(await run_detached(approval))

    async def _refuse(self, call: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
        # Like approve_commit: an explicit call by an approver, never asked of the agent.
        refusal = call.service.refuse_commit(
            a["transaction_id"],
            a["receipt_id"],
            a["reason"],
            principal=a["principal"],
            roles=a["roles"],
        )
        return results.refusal_result(await run_detached(refusal))

    async def _undo_step(
        self, call: _Call, a: dict[str, Any]
    ) -> types.CallToolResult | cont.Refusal:
        return undo.undo_result(await run_detached(call.service.undo_step(a["transaction_id"])))

    async def _redo_step(
        self, call: _Call, a: dict[str, Any]
    ) -> types.CallToolResult | cont.Refusal:
        return undo.redo_result(await run_detached(call.service.redo_step(a["transaction_id"])))

    async def _get(self, call: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
        tx = a["transaction_id"]
        if a["history"]:
            return results.transaction_result(await call.service.get_transaction(tx))
        # By default the newest attempts only: a whole history (every attempt's arguments and
        # output, the dependency graph) costs a read, a reply and a validation in proportion
        # to its length on every call, and an agent finding its place needs the newest.
        info = await call.served.listings.transaction(tx, results.RECENT_STEPS)
        return results.transaction_result(info, bounded=True)

    async def _list_tools(
        self, call: _Call, a: dict[str, Any]
    ) -> types.CallToolResult | cont.Refusal:
        return results.tools_result(await call.served.listings.tools())

    async def _list_transactions(
        self, call: _Call, a: dict[str, Any]
    ) -> types.CallToolResult | cont.Refusal:
        rows, token = await call.served.listings.transactions(
            [s.upper() for s in a["status"]], a["agent_id"], a["page_size"] or 50, a["page_token"]
        )
        return results.transactions_result(rows, token)

    async def _reconcile_step(
        self, call: _Call, a: dict[str, Any]
    ) -> types.CallToolResult | cont.Refusal:
        # A refusal (too early, another reconcile running) is ``cont.refusal_of``'s.
        r = await run_detached(call.service.reconcile_step(a["transaction_id"], a["step_id"]))
        return reconcile.result(r)

    async def _agenttx_tools(self) -> list[str]:
        # One listing serves every call until a step names a tool it lacks (``_run_step``).
        if self._tool_names is None:
            self._tool_names = [d["name"] for d in await self.served.listings.tools()]
        return self._tool_names


def _reading(tool: str, handler: Reading) -> Handler:
    """``handler`` given the call's arguments as ``tool``'s row reads them."""

    async def call(c: _Call) -> types.CallToolResult | cont.Refusal:
        return await handler(c, c.args.read(tool))

    return call


def _row_handler(row: Row) -> Handler:
    """The handler of a row's derived tool (``rows.py``), for the request's caller."""

    async def call(c: _Call) -> types.CallToolResult | cont.Refusal:
        return await rows.call(row, c.served, c.args)

    return call


def _compensation_handler(
    run: Callable[
        [TransactionService, dict[str, Any]], Awaitable[types.CallToolResult | cont.Refusal]
    ],
) -> Reading:
    async def call(c: _Call, a: dict[str, Any]) -> types.CallToolResult | cont.Refusal:
        return await run(c.service, a)

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
    if not isinstance(meta, dict):
        meta = dict(meta or {})
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
