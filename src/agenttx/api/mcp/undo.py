"""The MCP face of dry runs and undo/redo: the results of the ``undo_step`` and ``redo_step``
tools and of ``run_step`` with ``dry_run: true`` (their refusals' continuations are in
``api/continuations.py``, shared by every surface).

A dry run is never an error result, even when the step would fail: the call did what it was
asked (it said what would happen), and nothing changed. Its text says whether the step would
succeed, the fidelity reached, and what to call next.
"""

from __future__ import annotations

import mcp_types as types

from agenttx.api.fields import message_fields
from agenttx.api.mcp import results
from agenttx.api.mcp.compensation import waiting_undo_text
from agenttx.api.operations.replies import ALL_STRATEGIES, step_reply
from agenttx.api.undo_wire import redo_reply, undo_reply
from agenttx.jsontext import compact
from agenttx.types import StepResult, TxStatus, UndoResult


def dry_run_result(r: StepResult, tool: str) -> types.CallToolResult:
    assert r.dry_run is not None
    fields = message_fields(step_reply(r, ALL_STRATEGIES), short_enums=True)
    # ``dry_run_json`` arrives parsed under ``dry_run`` (fields.py): shown as ``report``.
    report = fields.pop("dry_run", None)
    fields = {"step_id": r.step_id, "tool": tool, **fields, "dry_run": True, "report": report}
    d = r.dry_run
    lines = [
        f"Dry run of step {r.step_id} ({tool}): it would "
        + ("succeed" if d.would_succeed else "fail")
        + f" (checked to {d.fidelity.value}; the tool declares {d.declared.value})."
    ]
    if not d.would_succeed:
        lines.append(r.clean_hint)
    if d.policy:
        lines.append(f"Policy: {d.policy}.")
    if r.output_json:
        shown = r.output_json
        if len(shown) > results.TEXT_OUTPUT_CHARS:
            shown = shown[: results.TEXT_OUTPUT_CHARS] + "… (more in structuredContent)"
        lines.append(f"Simulated output: {shown}")
    if d.changes:
        lines.append(f"Would change: {compact(d.changes)[: results.TEXT_OUTPUT_CHARS]}")
    lines.extend(f"Note: {n}" for n in d.notes)
    lines.append(
        f"Nothing was run or kept. Next: run_step step_id {r.next_step_id}"
        + (" without dry_run to do it." if d.would_succeed else " with corrected arguments.")
    )
    return results.ok(fields, "\n".join(lines))


def undo_result(u: UndoResult) -> types.CallToolResult:
    fields = message_fields(undo_reply(u), short_enums=True)
    if u.transaction_status is TxStatus.ROLLING_BACK:
        text = waiting_undo_text(u.transaction_id)  # its undo's outcome is unknown
    else:
        text = (
            f"Undid step {u.step_id} of transaction {u.transaction_id}"
            f" ({u.compensations_run} undo actions run, {u.effects_dropped} staged effects "
            f"dropped). Next: run_step with step_id {u.next_step_id}"
            + (", or redo_step to put it back exactly." if u.can_redo else ".")
        )
    if u.compensation_errors:
        text += " Undo failures: " + "; ".join(u.compensation_errors)
    return results.ok(fields, text)


def redo_result(u: UndoResult) -> types.CallToolResult:
    fields = message_fields(redo_reply(u), short_enums=True)
    return results.ok(
        fields,
        f"Redid step {u.step_id} of transaction {u.transaction_id} exactly as it was. Next: "
        f"run_step with step_id {u.next_step_id}"
        + (", or redo_step again." if u.can_redo else "."),
    )
