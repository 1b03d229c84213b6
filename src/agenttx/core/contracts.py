"""Compensation contracts, enforced: which undo actions of a rollback or of a compensation
may run, judged step by step from the tool's declaration (``Tool.compensation``).

Verdicts (``CompensationAction.verdict``), the same for a rollback before the commit and for
a compensation after it (``docs/compensation.md``):

- ``run``: the tool is ``supported`` or ``best_effort`` and its undo is inside its window.
- ``awaiting_approval``: as ``run``, but the tool asks for an approver first
  (``compensation_approval``) and none has approved yet: the rollback or compensation waits.
- ``past_window``: the window (``compensation_window_s``, measured from when the undo was
  recorded, just before the outside call) has ended: the undo is not run, a human decides.
- ``not_supported``: the tool declares ``rollback_not_supported``: nothing undoes it.
- ``refused``: as ``awaiting_approval``, but an approver refused it
  (``refuse_compensation``): the undo is not run, a human decides.
- ``outcome_unknown``: the undo ran and timed out or raised ``UncertainOutcome``: it is not
  run again; the rollback or compensation waits for its answer (``undo_outcomes``).

Everything here is a plain function of the transaction's steps, its undo records, the tools
and the time, so a rollback, a compensation and a preview (``compensation_plan``) agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agenttx.store.contract import StepRow, UndoRow
from agenttx.tools.contract import Tool
from agenttx.tools.registry import ToolRegistry
from agenttx.types import CompensationAction, CompensationPlan

RUN = "run"
AWAITING = "awaiting_approval"
PAST_WINDOW = "past_window"
NOT_SUPPORTED = "not_supported"
REFUSED = "refused"
BLOCKED = frozenset({PAST_WINDOW, NOT_SUPPORTED, REFUSED})  # reported, never run
UNDOABLE = frozenset({"supported", "best_effort"})


def tool_of(row: StepRow | None, handler: str, registry: ToolRegistry) -> Tool | None:
    """The tool whose step left an undo record: the step's own, else the handler's owner."""
    name = row.tool if row is not None else handler.removesuffix("#undo")
    return registry.get(name)


def judge(
    step_id: int,
    tool_name: str,
    contract: str,
    undo: UndoRow | None,
    expires_at: float,
    needs_approval: bool,
    now: float,
    *,
    approved: bool,
    refused: str = "",
    handler: str = "",
    undo_id: int = 0,
) -> CompensationAction:
    """The verdict on one step's undo (``undo`` None: the step left no undo record, or it
    is gone — then ``handler`` and ``undo_id`` say what it was). ``refused`` is the
    refusal's words (``refusal_reason``) when an approver refused what ``approved`` would
    have let run."""
    if undo is not None:
        handler, undo_id = undo.handler, undo.id

    def action(verdict: str, reason: str = "") -> CompensationAction:
        return CompensationAction(
            step_id,
            tool_name,
            contract,
            handler,
            undo_id,
            verdict,
            expires_at,
            reason,
            needs_approval,
        )

    if contract == "rollback_not_supported":
        return action(
            NOT_SUPPORTED, f"tool {tool_name} declares rollback_not_supported: nothing undoes it"
        )
    if undo is None:
        return action(PAST_WINDOW, "its undo record is gone: the compensation window ended")
    if undo.status in ("done", "failed", "skipped", "outcome_unknown"):
        return action(undo.status, undo.last_error)
    if expires_at and now >= expires_at:
        late = now - expires_at
        return action(
            PAST_WINDOW,
            f"its compensation window ended {late:.3f} s ago; the undo was not run",
        )
    if needs_approval and not approved:
        if refused:
            return action(REFUSED, refused)
        return action(AWAITING, "its tool's contract asks for an approver before the undo runs")
    return action(RUN)


def window_end(undo: UndoRow, tool: Tool | None, default_s: float | None) -> float:
    """When the undo's compensation window ends (0: never)."""
    window = tool.compensation_window_s if tool is not None else None
    if window is None:
        window = default_s
    return undo.created_at + window if window else 0.0


def rewind_actions(
    steps: Mapping[int, StepRow],
    undo: Sequence[UndoRow],
    target: int,
    registry: ToolRegistry,
    now: float,
    *,
    approved: bool,
    refused: str = "",
    failed_row: StepRow | None = None,
    next_step_id: int | None = None,
) -> list[CompensationAction]:
    """The verdict on each step ≥ ``target`` a rewind would undo, newest undo first: its
    pending undo records, and its live steps whose tool is ``rollback_not_supported``."""

    def step_row(step_id: int) -> StepRow | None:
        # A live step, else the failed attempt (its undo records are its tool's).
        row = steps.get(step_id)
        if row is None and failed_row is not None and failed_row.step_id == step_id:
            return failed_row
        return row

    actions: list[CompensationAction] = []
    with_undo: set[int] = set()
    for row in sorted(undo, key=lambda u: u.id, reverse=True):
        if row.step_id < target or row.status != "pending":
            continue
        tool = tool_of(step_row(row.step_id), row.handler, registry)
        contract = tool.compensation if tool is not None else "supported"
        name = tool.name if tool is not None else row.handler.removesuffix("#undo")
        approval = tool.compensation_approval if tool is not None else False
        actions.append(
            judge(
                row.step_id,
                name,
                contract,
                row,
                window_end(row, tool, None),
                approval,
                now,
                approved=approved,
                refused=refused,
            )
        )
        with_undo.add(row.step_id)
    # Live steps only: a failed attempt without an undo record did not take effect. Only
    # the steps ≥ target are looked at: a rewind costs what it undoes, not the transaction.
    top = next_step_id - 1 if next_step_id is not None else max(steps, default=0)
    for step_id in range(top, max(target, 1) - 1, -1):
        st = steps.get(step_id)
        if st is None or step_id in with_undo:
            continue
        tool = registry.get(st.tool)
        if tool is not None and tool.compensation == "rollback_not_supported":
            actions.append(
                judge(step_id, st.tool, tool.compensation, None, 0.0, False, now, approved=approved)
            )
    return actions


def kept_entries(
    steps: Mapping[int, StepRow],
    undo: Iterable[UndoRow],
    registry: ToolRegistry,
    default_keep_s: float,
) -> list[dict[str, Any]]:
    """What a commit remembers for a later compensation, oldest step first: one entry per
    pending undo record (with the end of its window) and per live step of a
    ``rollback_not_supported`` tool, so a compensation can report what it cannot undo."""
    entries: list[dict[str, Any]] = []
    with_undo: set[int] = set()
    for row in sorted(undo, key=lambda u: u.id):
        if row.status != "pending":
            continue
        tool = tool_of(steps.get(row.step_id), row.handler, registry)
        entries.append(
            {
                "step": row.step_id,
                "tool": tool.name if tool is not None else row.handler.removesuffix("#undo"),
                "contract": tool.compensation if tool is not None else "supported",
                "undo_id": row.id,
                "handler": row.handler,
                "expires_at": window_end(row, tool, default_keep_s),
                "approval": bool(tool.compensation_approval) if tool is not None else False,
            }
        )
        with_undo.add(row.step_id)
    for step_id in steps:  # sorted with the rest below
        tool = registry.get(steps[step_id].tool)
        if step_id in with_undo or tool is None or tool.compensation != "rollback_not_supported":
            continue
        entries.append(
            {
                "step": step_id,
                "tool": tool.name,
                "contract": tool.compensation,
                "undo_id": 0,
                "expires_at": 0.0,
                "approval": False,
            }
        )
    entries.sort(key=lambda e: (int(e["step"]), int(e["undo_id"])))
    return entries


def kept_undo(entries: Iterable[Mapping[str, Any]], now: float) -> list[tuple[int, float]]:
    """The undo records a commit keeps: (id, window end) of each undoable entry whose window
    has not ended."""
    return [
        (int(e["undo_id"]), float(e["expires_at"]))
        for e in entries
        if e["undo_id"] and e["contract"] in UNDOABLE and float(e["expires_at"]) > now
    ]


def compensation_plan(
    transaction_id: str,
    entries: Iterable[Mapping[str, Any]],
    undo: Iterable[UndoRow],
    now: float,
    *,
    approved: bool = False,
    refused: str = "",
) -> CompensationPlan:
    """What a compensation of the transaction would do, newest first, from the entries its
    commit kept (``kept_entries``) and the undo records still stored: a plain function, so a
    preview before the commit and ``Engine.compensate`` after it show the same plan."""
    by_id = {u.id: u for u in undo}
    actions = [
        judge(
            int(e["step"]),
            str(e["tool"]),
            str(e["contract"]),
            by_id.get(int(e["undo_id"])),
            float(e["expires_at"]),
            bool(e.get("approval", False)),
            now,
            approved=approved,
            refused=refused,
            handler=str(e.get("handler", "")),
            undo_id=int(e["undo_id"]),
        )
        for e in sorted(entries, key=lambda e: (int(e["step"]), int(e["undo_id"])), reverse=True)
    ]
    needs = any(a.needs_approval and a.verdict in (RUN, AWAITING) for a in actions)
    return CompensationPlan(transaction_id, actions, needs)


def evidence(action: CompensationAction) -> dict[str, Any]:
    """An action that was not run (or failed), as the transaction's evidence records it."""
    return {
        "step": action.step_id,
        "tool": action.tool,
        "contract": action.contract,
        "undo_id": action.undo_id,
        "verdict": action.verdict,
        "reason": action.reason,
    }


def describe(action: CompensationAction) -> str:
    """One line for ``compensation_errors``: which step, why it was not undone."""
    return f"step {action.step_id} ({action.tool}) not undone: {action.reason}"


def describe_evidence(entry: Mapping[str, Any]) -> str:
    """``describe`` of an ``evidence`` entry."""
    return f"step {entry['step']} ({entry['tool']}) not undone: {entry['reason']}"


def merged_evidence(
    earlier: Iterable[Mapping[str, Any]], now: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``earlier`` evidence entries, each replaced by ``now``'s entry of the same step and undo
    record, then ``now``'s new ones: one entry per thing not undone."""
    by_key: dict[tuple[int, int], dict[str, Any]] = {}
    for entry in (*earlier, *now):
        by_key[(int(entry["step"]), int(entry["undo_id"]))] = dict(entry)
    return list(by_key.values())


class KeptUndo:
    """What a commit keeps for a later compensation (``Committer``)."""

    def __init__(self, registry: ToolRegistry, default_keep_s: float) -> None:
        self.registry = registry  # each undo record's tool, for its contract and window
        self.default_keep_s = default_keep_s  # the window of a tool that declares none

    def at_commit(
        self, steps: Mapping[int, StepRow], undo: Iterable[UndoRow], now: float
    ) -> tuple[list[dict[str, Any]], list[tuple[int, float]]]:
        """(the entries the committed body remembers, the undo records the store keeps)."""
        entries = kept_entries(steps, undo, self.registry, self.default_keep_s)
        return entries, kept_undo(entries, now)


def awaiting_approval(body: Mapping[str, Any]) -> bool:
    """True iff the transaction's rollback or compensation waits for an approver: it asked
    for one and no approver has decided (approved or refused) yet."""
    plan = body.get("rewind") or {}
    if plan.get("awaiting_approval") and not decided(plan):
        return True
    comp = body.get("compensation") or {}
    return bool(comp.get("approval")) and not decided(comp)


def decided(decision: Mapping[str, Any]) -> bool:
    """True iff an approver approved or refused the rollback plan or compensation
    ``decision`` (``body["rewind"]`` / ``body["compensation"]``)."""
    return bool(decision.get("approved_by") or decision.get("refused_by"))


def refusal_reason(decision: Mapping[str, Any]) -> str:
    """The words every refused action carries (its ``reason``, its evidence, its line in
    ``compensation_errors``), or "" when ``decision`` was not refused."""
    by = decision.get("refused_by")
    if not by:
        return ""
    return f"compensation refused by {by}: {decision.get('refusal_reason', '')}"
