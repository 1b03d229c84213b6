"""The MCP results for compensation: ``compensate_transaction`` (or its preview),
``approve_compensation`` and ``refuse_compensation``, each refusal with a continuation naming
the next call.

Approval (or its refusal) is an explicit tool call by an approver: the 2026-07-28 protocol
cannot carry a server-initiated elicitation, so a waiting rollback or compensation says who
must call what.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import mcp_types as types

from agenttx.api import continuations as cont
from agenttx.api.compensation_wire import approval_reply, plan_reply, result_reply
from agenttx.api.fields import message_fields
from agenttx.core.eager import run_detached
from agenttx.errors import (
    AlreadyExists,
    CompensationApprovalRefused,
    NotActive,
)
from agenttx.service import TransactionService
from agenttx.types import RollbackResult


def _ok(fields: dict[str, Any], text: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"ok": True, **fields},
    )


def _approver_needed(transaction_id: str) -> str:
    return (
        f"Transaction {transaction_id} waits for an approver. Ask the user to have a "
        "different principal holding the 'approver' role call approve_compensation (or "
        f"refuse_compensation, with a reason) with transaction_id {transaction_id}; do not "
        "approve or refuse it yourself."
    )


async def compensate(
    service: TransactionService, args: dict[str, Any]
) -> types.CallToolResult | cont.Refusal:
    """``args``: as ``arguments.py`` read them."""
    tx = args["transaction_id"]
    if args["preview"]:
        plan = await run_detached(service.compensation_plan(tx))
        fields = message_fields(plan_reply(plan))
        lines = [f"A compensation of {tx} would:"]
        lines += [
            f"- step {a.step_id} {a.tool}: {a.verdict} {a.reason}".rstrip() for a in plan.actions
        ]
        if not plan.actions:
            lines.append("- nothing: no step left an undo action or an unsupported effect")
        lines.append("Call compensate_transaction without preview to start it.")
        return _ok(fields, "\n".join(lines))
    try:
        k = await run_detached(service.compensate(tx, args["reason"], principal=args["principal"]))
    except AlreadyExists as exc:
        return cont.Refusal(
            exc.reason,
            exc.message,
            cont.call_tool(
                "get_transaction",
                f"{tx} was compensated already: read the compensating transaction "
                f"{tx}-compensation with get_transaction for its outcome; do not compensate "
                "again.",
            ),
        )
    except NotActive as exc:
        return cont.Refusal(
            exc.reason,
            exc.message,
            cont.choose_tool(
                ["commit_transaction", "rollback_transaction"],
                f"Only a COMMITTED transaction is compensated; {tx} is {exc.status}. An open "
                "transaction is undone with rollback_transaction (or committed first).",
            ),
        )
    fields = message_fields(result_reply(k))
    if k.status == "awaiting_approval":
        text = _approver_needed(k.transaction_id)
    elif k.status == "compensated":
        text = (
            f"Compensated {tx} in transaction {k.transaction_id}: "
            f"{sum(a.verdict == 'done' for a in k.actions)} undo actions ran, newest first."
        )
    else:
        not_undone = "; ".join(f"step {e['step']}: {e['reason']}" for e in k.evidence)
        text = (
            f"The compensation {k.transaction_id} of {tx} ended {k.status}: not everything "
            f"was undone ({not_undone}). Tell the user: a person must settle these steps."
        )
    return _ok(fields, text)


async def approve(
    service: TransactionService, args: dict[str, Any]
) -> types.CallToolResult | cont.Refusal:
    decided = await _decide(
        "approve_compensation",
        args,
        service.approve_compensation(args["transaction_id"], args["principal"], args["roles"]),
    )
    if not isinstance(decided, RollbackResult):
        return decided
    r = decided
    text = (
        f"Approved: {r.transaction_id} is {r.transaction_status.value} "
        f"({r.compensations_run} undo actions ran)."
    )
    if r.compensation_errors:
        text += " Not undone: " + "; ".join(r.compensation_errors)
    return _ok(message_fields(approval_reply(r)), text)


async def refuse(
    service: TransactionService, args: dict[str, Any]
) -> types.CallToolResult | cont.Refusal:
    decided = await _decide(
        "refuse_compensation",
        args,
        service.refuse_compensation(
            args["transaction_id"], args["reason"], args["principal"], args["roles"]
        ),
    )
    if not isinstance(decided, RollbackResult):
        return decided
    r = decided
    text = (
        f"Refused: {r.transaction_id} is {r.transaction_status.value} ({r.compensations_run} "
        "other undo actions ran). Not undone: " + "; ".join(r.compensation_errors) + ". Tell "
        "the user: a person must settle these steps."
    )
    return _ok(message_fields(approval_reply(r)), text)


async def _decide(
    tool: str, args: dict[str, Any], decision: Coroutine[Any, Any, RollbackResult]
) -> RollbackResult | cont.Refusal:
    """An approver's ``decision``; refused, the tool's refusal with its continuation."""
    try:
        return await run_detached(decision)
    except CompensationApprovalRefused as exc:
        return cont.refused(exc, tool, args)


def waiting_undo_text(transaction_id: str) -> str:
    """The text of a rollback (or compensation) that waits on an undo whose outcome is
    unknown: what the agent may do, and what it must not."""
    return (
        f"Transaction {transaction_id} is rolling back but waits: an undo action's outcome is "
        "unknown (it timed out, or its provider could not tell), and it is never run again. "
        "Next: reconcile_step with the step_id its line below names (it asks the provider); "
        "if the tool cannot be asked, an operator runs `agenttx tx resolve`. Until then the "
        "transaction takes no steps."
    )


def waiting_rollback_text(b: RollbackResult) -> str:
    """The text of a rollback that waits for an approver (``rollback_transaction``)."""
    return (
        f"Transaction {b.transaction_id} is rolling back but waits for an approver before "
        "an undo action runs. " + _approver_needed(b.transaction_id)
    )
