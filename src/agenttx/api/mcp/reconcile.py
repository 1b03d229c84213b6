"""The MCP face of reconciling an unknown outcome: the ``reconcile_step`` tool's result; the
continuations of its refusals (below) are in ``api/continuations.py`` (``docs/reconcile.md``).

    situation                       continuation
    a step is OUTCOME_UNKNOWN       CallTool reconcile_step (after retry_after_ms)
    reconciled too early            RetryRequest: the same reconcile_step after the time left
    still unknown after reconcile   RetryRequest: reconcile_step again after retry_after_ms
    another reconcile is running    CallTool get_transaction: see how it settles
    the tool has no handler         ResolveExternally: an operator runs `agenttx tx resolve`

An agent never settles an outcome by its own word: ``resolve_step`` is the operator's (CLI,
gRPC), not an MCP tool.
"""

from __future__ import annotations

import mcp_types as types

from agenttx.api.continuations import Refusal, retry
from agenttx.api.fields import message_fields
from agenttx.api.reconcile_wire import reconcile_reply
from agenttx.types import ReconcileResult


def result(r: ReconcileResult) -> types.CallToolResult | Refusal:
    fields = message_fields(reconcile_reply(r), short_enums=True)
    if r.outcome == "unknown":
        return Refusal(
            "OUTCOME_STILL_UNKNOWN",
            f"step {r.step_id}: {r.clean_hint}",
            {
                **retry(
                    f"The outside system cannot tell yet. Wait {r.retry_after_ms} ms, then send "
                    f"the same reconcile_step again (transaction_id {r.transaction_id}, step_id "
                    f"{r.step_id}); or rollback_transaction to abandon the transaction."
                ),
                "retry_after_ms": r.retry_after_ms,
            },
            [{"id": "hint", "severity": "Warning", "message": r.clean_hint}],
            {"reply": {"ok": True, **fields}},
        )
    if r.outcome == "happened":
        text = (
            f"Step {r.step_id}'s outside call did happen: the step succeeded with output "
            f"{r.output_json}. Next: run_step with step_id {r.next_step_id} — or "
            "commit_transaction if the task is done."
        )
    else:
        text = (
            f"Step {r.step_id}'s outside call did not happen: nothing to undo. Next: run_step "
            f"with step_id {r.next_step_id} (the same call again, or another)."
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"ok": True, **fields},
    )
