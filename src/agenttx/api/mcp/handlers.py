"""What each MCP tool does when called: its row's service call and the result shaped in the
MCP's own words, keyed by the row's name in ``HANDLERS``. A bound row without a handler here
is served generically (``generic``): its request filled from the arguments, the row run, the
reply's fields and its binding's line of text.

A handler gets the call (``Call``) and the arguments as its binding reads them
(``arguments.py``), calls ``TransactionService`` acting for the request's caller
(``served.py``), detached (``run_detached``: a caller that goes away stops nothing half-way),
and returns a result (``results.py``, ``undo.py``, ``reconcile.py``, ``compensation.py``,
``effect_tools.py``) or a ``Refusal`` the server sends as an error result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from agenttx.api import continuations as cont
from agenttx.api.fields import message_fields
from agenttx.api.mcp import compensation, effect_tools, reconcile, results, undo
from agenttx.api.mcp.arguments import Arguments
from agenttx.api.mcp.served import Served
from agenttx.api.operations import Row
from agenttx.api.operations.requests import filled
from agenttx.core.eager import run_detached
from agenttx.errors import AgentTxError, CommitConflict
from agenttx.tools.context import ProgressSink

log = logging.getLogger("agenttx.mcp")

Result = types.CallToolResult | cont.Refusal
# A tool's handler: the call, and its arguments by name as its binding reads them.
Handler = Callable[["Call", dict[str, Any]], Awaitable[Result]]


class ToolNames:
    """The AgentTx tools as last listed (what ``run_step`` may name), listed again when a
    step names one not in it: the MCP gateway adds tools while the engine runs (a server
    that came up late, or said its tools changed)."""

    def __init__(self, served: Served) -> None:
        self._served = served
        self._names: list[str] | None = None

    async def known(self, name: str) -> tuple[bool, list[str]]:
        """Whether ``name`` is an AgentTx tool, and the names listed."""
        if self._names is not None and name in self._names:
            return True, self._names
        self._names = [d["name"] for d in await self._served.listings.tools()]
        return name in self._names, self._names


class Call:
    """One ``tools/call``: its arguments and what its handler may use of the request."""

    def __init__(
        self, served: Served, args: Arguments, progress: ProgressSink | None, tools: ToolNames
    ) -> None:
        self.served = served  # acting for the request's caller
        self.service = served.service
        self.args = args
        self.progress = progress
        self.tools = tools


async def _begin(call: Call, a: dict[str, Any]) -> Result:
    goal = a["goal"]
    b = await run_detached(
        call.service.begin(
            a["agent_id"], {"goal": goal} if goal else {}, principal=a["principal"], mode=a["mode"]
        )
    )
    return results.begin_result(b)


async def _run_step(call: Call, a: dict[str, Any]) -> Result:
    tx, step_id, tool, arguments = a["transaction_id"], a["step_id"], a["tool"], a["arguments"]
    known, names = await call.tools.known(tool)
    if not known:
        return cont.unknown_tool(tool, names)
    if a["dry_run"]:
        dry = call.service.execute_step(tx, step_id, tool, arguments, a["reasoning"], dry_run=True)
        return undo.dry_run_result(await dry, tool)
    live = call.served.live
    step = run_detached(
        call.service.execute_step(tx, step_id, tool, arguments, a["reasoning"])
        if live is None
        else live.execute_step(tx, step_id, tool, arguments, a["reasoning"], progress=call.progress)
    )
    try:
        r = await step
    except asyncio.CancelledError:
        # The caller cancelled this run_step (MCP notifications/cancelled): stop its tool; the
        # step fails and is undone in the engine, and no reply is sent (the caller said it
        # wants none).
        if live is not None and live.cancel_step(tx, step_id):
            log.info(
                "mcp run_step cancelled by the caller",
                extra={"transaction_id": tx, "step_id": step_id, "tool": tool},
            )
        raise
    return results.step_result(r, tool)


async def _commit(call: Call, a: dict[str, Any]) -> Result:
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


async def _rollback(call: Call, a: dict[str, Any]) -> Result:
    to_step = a["to_step"]
    b = await run_detached(call.service.rollback(a["transaction_id"], to_step or None, a["reason"]))
    return results.rollback_result(b, to_step)


async def _get(call: Call, a: dict[str, Any]) -> Result:
    tx = a["transaction_id"]
    if a["history"]:
        return results.transaction_result(await call.service.get_transaction(tx))
    # By default the newest attempts only: a whole history (every attempt's arguments and
    # output, the dependency graph) costs a read, a reply and a validation in proportion to
    # its length on every call, and an agent finding its place needs the newest.
    info = await call.served.listings.transaction(tx, results.RECENT_STEPS)
    return results.transaction_result(info, bounded=True)


async def _list_tools(call: Call, a: dict[str, Any]) -> Result:
    return results.tools_result(await call.served.listings.tools())


async def _list_transactions(call: Call, a: dict[str, Any]) -> Result:
    rows, token = await call.served.listings.transactions(
        [s.upper() for s in a["status"]], a["agent_id"], a["page_size"] or 50, a["page_token"]
    )
    return results.transactions_result(rows, token)


async def _preview(call: Call, a: dict[str, Any]) -> Result:
    p = await run_detached(call.service.preview_commit(a["transaction_id"]))
    return results.preview_result(p)


async def _approve(call: Call, a: dict[str, Any]) -> Result:
    # An explicit call by an approver (never an elicitation: the 2026-07-28 protocol cannot
    # carry one, and the agent must not approve its own work).
    approval = call.service.approve_commit(
        a["transaction_id"], a["receipt_id"], principal=a["principal"], roles=a["roles"]
    )
    return results.approval_result(await run_detached(approval))


async def _refuse(call: Call, a: dict[str, Any]) -> Result:
    # Like approve_commit: an explicit call by an approver, never asked of the agent.
    refusal = call.service.refuse_commit(
        a["transaction_id"],
        a["receipt_id"],
        a["reason"],
        principal=a["principal"],
        roles=a["roles"],
    )
    return results.refusal_result(await run_detached(refusal))


async def _undo_step(call: Call, a: dict[str, Any]) -> Result:
    return undo.undo_result(await run_detached(call.service.undo_step(a["transaction_id"])))


async def _redo_step(call: Call, a: dict[str, Any]) -> Result:
    return undo.redo_result(await run_detached(call.service.redo_step(a["transaction_id"])))


async def _reconcile_step(call: Call, a: dict[str, Any]) -> Result:
    # A refusal (too early, another reconcile running) is ``cont.refusal_of``'s.
    r = await run_detached(call.service.reconcile_step(a["transaction_id"], a["step_id"]))
    return reconcile.result(r)


# Each shaped tool's handler, by its row's name (``api.operations.ROWS``).
HANDLERS: dict[str, Handler] = {
    "begin": _begin,
    "execute_step": _run_step,
    "commit": _commit,
    "rollback": _rollback,
    "get_transaction": _get,
    "list_tools": _list_tools,
    "list_transactions": _list_transactions,
    "preview_commit": _preview,
    "approve_commit": _approve,
    "refuse_commit": _refuse,
    "undo_step": _undo_step,
    "redo_step": _redo_step,
    "reconcile_step": _reconcile_step,
    "compensate": lambda c, a: compensation.compensate(c.service, a),
    "approve_compensation": lambda c, a: compensation.approve(c.service, a),
    "refuse_compensation": lambda c, a: compensation.refuse(c.service, a),
    # Over HTTP with keys each is the request's caller's: its tenant, its transactions.
    "list_effects": lambda c, a: effect_tools.list_effects(c.served, a),
    "retry_effect": lambda c, a: effect_tools.retry_effect(c.served, a),
}


def handler(row: Row) -> Handler:
    """``row``'s tool's handler: its own, or the generic one."""
    return HANDLERS.get(row.name) or generic(row)


def generic(row: Row) -> Handler:
    """A bound row served from the row alone: the arguments (each a field of the request)
    → the row's request (``operations.requests.filled``: two members of a oneof refused) →
    the row run for the request's caller (``Served.send``) → ``{"ok": true, **fields}``, the
    reply's fields as ``api.fields`` reads them, and the binding's line of text."""
    b = row.mcp
    assert b is not None, row.name
    assert b.text, f"{row.name}: a generic tool needs its line of text"
    assert all(not i.reading for i in b.inputs), f"{row.name}: an input not of its request"

    async def call(c: Call, a: dict[str, Any]) -> Result:
        reply = await run_detached(c.served.send(row, filled(row.request, a)))
        fields = message_fields(reply, short_enums=True)
        return results.ok(fields, b.text.format_map(fields))

    return call
