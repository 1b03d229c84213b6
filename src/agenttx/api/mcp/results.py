"""Engine results → MCP tool results: ``structuredContent`` with the gRPC reply's wire fields
plus ``ok: true``, and a text that says what happened and names the next call exactly.

A rolled-back step is not an error result (the transaction is still open and the reply says
where to resume); ``isError`` is for an aborted transaction, an unknown outcome and refused
calls, which carry ``ok: false`` and a continuation (``continuations.py``).

The wire fields come from the gRPC adapter's own reply builders, read back field by field
(``agenttx.api.fields``), so the two adapters cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from agenttx.api import history, receipts_wire
from agenttx.api.continuations import Refusal, aborted, outcome_unknown
from agenttx.api.fields import message_fields
from agenttx.api.mcp.compensation import waiting_rollback_text, waiting_undo_text
from agenttx.api.operations.replies import (
    ALL_STRATEGIES,
    begin_reply,
    commit_reply,
    rollback_reply,
    step_reply,
    transaction_reply,
)
from agenttx.jsontext import compact
from agenttx.plural import plural
from agenttx.receipts import Approval, Preview, ReceiptStatus, voided_because
from agenttx.receipts import Refusal as ReceiptRefusal
from agenttx.types import (
    BeginResult,
    CommitResult,
    RollbackResult,
    StepResult,
    StepStatus,
    TransactionInfo,
    TxStatus,
)

# Output shown in the text beyond this many characters is cut; structuredContent has it all.
TEXT_OUTPUT_CHARS = 2000
# State changes listed in a preview's text; structuredContent has them all.
TEXT_CHANGES = 20
# Step attempts get_transaction shows unless asked for the whole history (the newest).
RECENT_STEPS = 10


def ok(fields: dict[str, Any], text: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"ok": True, **fields},
    )


def step_fields(r: StepResult, tool: str) -> dict[str, Any]:
    # A model reads the strategy's name in the text: it can handle RETRY, none is downgraded.
    fields = message_fields(step_reply(r, ALL_STRATEGIES), short_enums=True)
    if r.dry_run is None:  # the dry-run fields (18-21) say nothing about a real step
        for name in ("dry_run", "fidelity", "policy_decision"):
            fields.pop(name, None)
    return {"step_id": r.step_id, "tool": tool, **fields}


def step_result(r: StepResult, tool: str) -> types.CallToolResult | Refusal:
    fields = step_fields(r, tool)
    if r.status is StepStatus.SUCCESS:
        return ok(fields, _success_text(r, tool))
    if r.status is StepStatus.ROLLBACK_TRIGGERED:
        return ok(fields, _rollback_text(r, tool))
    if r.status is StepStatus.OUTCOME_UNKNOWN:
        return outcome_unknown(r, tool, fields)
    return aborted(r, tool, fields)


def _success_text(r: StepResult, tool: str) -> str:
    output = r.output_json or compact(r.output)
    if len(output) > TEXT_OUTPUT_CHARS:
        output = output[:TEXT_OUTPUT_CHARS] + f"… ({len(output)} characters in structuredContent)"
    return (
        f"Step {r.step_id} ({tool}) succeeded.\nOutput: {output}\n"
        f"Next: run_step with step_id {r.next_step_id} — or commit_transaction if the task "
        "is done."
    )


def _rollback_text(r: StepResult, tool: str) -> str:
    lines = [f"Step {r.step_id} ({tool}) failed; AgentTx rolled back ({r.strategy.value})."]
    lines.append(r.clean_hint)
    if r.context_reset:
        lines.append(
            "Everything was undone (global reset): restart the plan from step 1, keeping the "
            "constraints below."
        )
    elif r.next_step_id >= r.step_id:
        lines.append(f"Only step {r.step_id}'s own changes were undone; nothing earlier.")
    else:
        lines.append(
            f"Steps {r.next_step_id}..{r.step_id} were undone; send them again from step "
            f"{r.next_step_id}."
        )
    if r.transaction_status is TxStatus.ROLLING_BACK:
        lines.append(
            "An undo action waits for an approver: nothing runs until another principal with "
            "the approver role calls approve_compensation (or refuse_compensation) for this "
            "transaction."
        )
    else:
        lines.append(f"Resume with run_step step_id {r.next_step_id}.")
    if r.constraints:
        lines.append("Constraints learned (keep to them):")
        lines.extend(f"- {c}" for c in r.constraints)
    if r.compensation_errors:
        lines.append("Undo failures: " + "; ".join(r.compensation_errors))
    return "\n".join(lines)


def begin_result(b: BeginResult) -> types.CallToolResult:
    fields = message_fields(begin_reply(b), short_enums=True)
    return ok(
        fields,
        f"Transaction {b.transaction_id} begun. Next: list_tools (once per session), then "
        f"run_step with transaction_id {b.transaction_id} and step_id {b.next_step_id}.",
    )


def commit_result(c: CommitResult) -> types.CallToolResult:
    fields = message_fields(commit_reply(c), short_enums=True)
    text = (
        f"Committed transaction {c.transaction_id}: {plural(c.steps_committed, 'step')} took "
        f"effect; {plural(c.effects_dispatched, 'effect')} released, {c.effects_queued} queued "
        "for delivery."
    )
    if c.dispatch_errors:
        text += " Delivery errors (the commit stands): " + "; ".join(c.dispatch_errors)
    return ok(fields, text + " The task is done; begin_transaction for the next one.")


def rollback_result(b: RollbackResult, to_step: int | None) -> types.CallToolResult:
    fields = message_fields(rollback_reply(b), short_enums=True)
    if b.compensation_approval_pending:
        text = waiting_rollback_text(b)
    elif b.transaction_status is TxStatus.ROLLING_BACK:
        text = waiting_undo_text(b.transaction_id)  # the other wait: an unknown undo
    elif b.next_step_id:
        text = (
            f"Rolled transaction {b.transaction_id} back to before step {b.next_step_id} "
            f"({b.compensations_run} undo actions run). Resume with run_step step_id "
            f"{b.next_step_id}."
        )
    else:
        text = (
            f"Transaction {b.transaction_id} rolled back: everything was undone "
            f"({b.compensations_run} undo actions run) and nothing was sent. Start a new "
            "transaction with begin_transaction if the task goes on."
        )
    if b.compensation_errors:
        text += " Undo failures: " + "; ".join(b.compensation_errors)
    return ok(fields, text)


def transaction_result(t: TransactionInfo, *, bounded: bool = False) -> types.CallToolResult:
    """``bounded``: ``t`` is a bounded read (``Backend.get_transaction(recent=…)``): the reply
    carries ``earlier_steps_omitted`` and no ``edges``/``edge_kinds`` (it has not read them)."""
    reply = history.fit_transaction(transaction_reply(t), history.MAX_MESSAGE_BYTES)
    fields = message_fields(reply, short_enums=True)
    if bounded:
        del fields["edges"], fields["edge_kinds"]
        fields["earlier_steps_omitted"] = t.earlier_steps_omitted
        fields["history_trimmed"] = fields["history_trimmed"] or t.earlier_steps_omitted > 0
    live = sum(1 for s in t.steps if s.live and s.status == StepStatus.SUCCESS.value)
    if t.status.terminal:
        text = (
            f"Transaction {t.transaction_id} is {t.status.value} and takes no more calls. "
            "begin_transaction for a new task."
        )
    elif t.reconcile_state == "undo_outcome_unknown":
        text = waiting_undo_text(t.transaction_id)
    elif t.outcome_unknown_step:
        text = (
            f"Transaction {t.transaction_id} is blocked: the outcome of step "
            f"{t.outcome_unknown_step} is unknown. Next: reconcile_step with step_id "
            f"{t.outcome_unknown_step} (never run the step again), or rollback_transaction."
        )
    else:
        text = (
            f"Transaction {t.transaction_id} is {t.status.value} with {plural(live, 'step')} "
            f"done. Next: run_step with step_id {t.next_step_id} — or commit_transaction if the "
            "task is done."
        )
    if t.constraints:
        text += "\nConstraints learned:\n" + "\n".join(f"- {c}" for c in t.constraints)
    # The newest receipt, if it is a refusal the agent has not answered with a new preview, or
    # expired or voided unused.
    newest = t.receipts[0] if t.receipts and not t.status.terminal else None
    if newest is not None and newest.status == ReceiptStatus.REFUSED:
        text += (
            f"\nAn approver ({newest.decided_by}) refused receipt {newest.receipt_id}: "
            f"{newest.reason}. Change the transaction as asked, then preview_commit again — or "
            "rollback_transaction."
        )
    elif newest is not None and newest.status == ReceiptStatus.EXPIRED:
        text += (
            f"\nReceipt {newest.receipt_id} expired unused: it can no longer be approved or "
            "committed with. Call preview_commit again for a new receipt."
        )
    elif newest is not None and newest.status == ReceiptStatus.VOIDED:
        why = voided_because(newest.revision, t.revision, t.status.value)
        text += (
            f"\nReceipt {newest.receipt_id} was voided unused ({why}): the change it previewed "
            "is no longer the transaction's, so it can no longer be approved or committed "
            "with. Call preview_commit again for a new receipt before committing."
        )
    if t.earlier_steps_omitted:
        text += (
            f"\nShowing the newest {len(t.steps)} step attempts; {t.earlier_steps_omitted} "
            "earlier ones: get_transaction with history true."
        )
    return ok(fields, text)


def preview_result(p: Preview) -> types.CallToolResult:
    fields = message_fields(receipts_wire.preview_reply(p), short_enums=True)
    c = p.changes
    lines = [
        f"Preview of transaction {p.transaction_id} at revision {p.revision}: "
        f"{plural(len(c.state), 'state key')}, {plural(len(c.files), 'file')}, "
        f"{plural(len(c.effects), 'staged effect')}, "
        f"{plural(len(c.irreversible), 'irreversible step')} taken, "
        f"{plural(len(c.discarded_undo), 'undo action')} the commit would discard (details in "
        "structuredContent.changes).",
    ]
    lines.extend(
        f"- {s.key}: {_brief(s.before)} → {_brief(s.after)}" for s in c.state[:TEXT_CHANGES]
    )
    if len(c.state) > TEXT_CHANGES:
        lines.append(f"- … {len(c.state) - TEXT_CHANGES} more keys")
    lines.extend(
        f"- file {f.path} ({'new' if not f.before_sha256 else 'changed'})" for f in c.files
    )
    lines.extend(f"- effect {e.channel} (key {e.idempotency_key})" for e in c.effects)
    lines.extend(f"- irreversible step {i.step_id} {i.tool} (already done)" for i in c.irreversible)
    lines.extend(
        f"- undo of step {a.step_id} {a.tool}: {a.verdict.replace('_', ' ')}"
        + (f" ({a.reason})" if a.reason else "")
        for a in p.compensation
        if a.verdict != "run"
    )
    lines.append(f"receipt_id {p.receipt_id}, change_hash {p.change_hash}.")
    if p.approval_required:
        lines.append(
            "Approval required (" + "; ".join(p.approval_reasons) + "): ask an approver — "
            "someone other than the transaction's principal — to call approve_commit with "
            f"transaction_id {p.transaction_id} and receipt_id {p.receipt_id}; then call "
            f"commit_transaction with receipt_id {p.receipt_id} and expected_revision "
            f"{p.revision}."
        )
    else:
        lines.append(
            f"Next: commit_transaction with receipt_id {p.receipt_id} and expected_revision "
            f"{p.revision} to commit exactly this change."
        )
    return ok(fields, "\n".join(lines))


def approval_result(a: Approval) -> types.CallToolResult:
    fields = message_fields(receipts_wire.approval_reply(a), short_enums=True)
    return ok(
        fields,
        f"Receipt {a.receipt_id} of transaction {a.transaction_id} approved by {a.approved_by}. "
        f"Next: commit_transaction with receipt_id {a.receipt_id} and expected_revision "
        f"{a.revision}; any other step first voids this approval.",
    )


def refusal_result(r: ReceiptRefusal) -> types.CallToolResult:
    fields = message_fields(receipts_wire.refusal_reply(r), short_enums=True)
    return ok(
        fields,
        f"Receipt {r.receipt_id} of transaction {r.transaction_id} refused by {r.refused_by}: "
        f"{r.reason}. The transaction stays open; a commit with this receipt is refused, "
        "telling its agent who refused it and why.",
    )


def _brief(value: Any) -> str:
    if value is None:
        return "(absent)"
    text = compact(value)
    return text if len(text) <= 80 else text[:79] + "…"


def tools_result(tools: list[dict[str, Any]]) -> types.CallToolResult:
    rows = [
        {
            "name": d["name"],
            "description": d["description"],
            "effect": d["effect"],
            "input_schema": d["input_schema"],
            "output_schema": d.get("output_schema") or {},
            "example": {"tool": d["name"], "arguments": (d.get("examples") or [{}])[0]},
            "timeout_ms": int(d["timeout_s"] * 1000),
            "idempotent": d["idempotent"],
            "compensation": d["compensation"],
            "dry_run": d["dry_run"],
            "dry_run_reached": d.get("dry_run_reached", d["dry_run"]),
            "undoable": d.get("undoable", False),
            "reconcilable": d.get("reconcilable", False),
            # The downstream MCP server of a gateway tool; absent for AgentTx's own.
            **({"server": d["server"]} if d.get("server") else {}),
        }
        for d in tools
    ]
    lines = [f"{len(rows)} AgentTx tools for run_step (name [effect]: what — example arguments):"]
    lines.extend(
        f"- {r['name']} [{r['effect']}]: {_first_line(r['description'])}"
        f" — {compact(r['example']['arguments'])}"
        for r in rows
    )
    return ok({"tools": rows}, "\n".join(lines))


def transactions_result(rows: list[dict[str, Any]], next_page_token: str) -> types.CallToolResult:
    lines = [f"{plural(len(rows), 'transaction')} (oldest first):"]
    lines.extend(
        f"- {r['transaction_id']} {r['status']} next_step_id {r['next_step_id']}"
        + (f" agent {r['agent_id']}" if r["agent_id"] else "")
        for r in rows
    )
    if next_page_token:
        lines.append(f"More: list_transactions with page_token {next_page_token}.")
    return ok({"transactions": rows, "next_page_token": next_page_token}, "\n".join(lines))


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""
