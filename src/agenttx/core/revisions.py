"""The revision rules: which step ``undo_step`` may undo, which ``redo_step`` may re-apply, and
the counters GetTransaction shows (``docs/undo.md`` defines each one).

A transaction's *revisions* are its live successful steps: step 1 … ``next_step_id - 1``.
``undo_step`` drops the newest; ``redo_step`` puts back the one just dropped, exactly, if
nothing else changed the transaction since. The redo stack lives in the transaction's body:

    body["redo"] = {"revision": R, "steps": [{"seq": s, "step": n}, …]}   # newest undo last

valid only while the transaction's revision is still ``R`` — the revision the last undo or
redo left. Any other durable change (a step, a failed attempt, a rollback, a commit) moves
the revision, and with it every entry becomes stale: nothing needs to clear it.

Pure functions over rows; the registry is consulted for a tool's compensation contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenttx.store.contract import StepRow, TxRow, UndoRow
from agenttx.tools.registry import ToolRegistry
from agenttx.types import EffectClass, StepStatus, TxStatus

# Effect classes a redo may re-apply: their whole effect is the step's recorded writes.
_REDOABLE = frozenset({EffectClass.READ.value, EffectClass.STATE.value})


class RevisionRules:
    def __init__(self, registry: ToolRegistry, max_steps: int) -> None:
        self.registry = registry  # tools' compensation contracts, undo handlers by name
        self.max_steps = max_steps  # the engine's --max-steps: max_revisions

    def undo_refusal(self, step: StepRow, undo: Sequence[UndoRow] = ()) -> str:
        """Why ``step`` (the last live one) cannot be undone, as a hint; "" if it can.
        ``undo`` is the transaction's pending undo records (those of ``step`` are checked)."""
        where = f"step {step.step_id} ({step.tool})"
        if step.effect == EffectClass.IRREVERSIBLE.value:
            return (
                f"{where} is irreversible: its effect cannot be undone. Go on from step "
                f"{step.step_id + 1}, or abort with rollback (the effect stays)"
            )
        tool = self.registry.get(step.tool)
        if tool is not None and tool.compensation == "rollback_not_supported":
            return (
                f"{where} declares rollback_not_supported: its effect cannot be undone here. "
                f"Go on from step {step.step_id + 1}, or undo it in the outside system"
            )
        for row in undo:
            mine = row.step_id == step.step_id and row.status == "pending"
            if mine and self.registry.undo_handler(row.handler) is None:
                return (
                    f"{where} needs the undo handler {row.handler!r}, which is not "
                    "registered; start the server with the tool's module and try again"
                )
        return ""

    @staticmethod
    def redoable(step: StepRow) -> bool:
        """True iff ``step`` changed only managed state: its recorded writes are its effect."""
        detail = step.detail
        return step.effect in _REDOABLE and "fx" not in detail and "undo" not in detail

    def counters(self, row: TxRow, live: Sequence[StepRow] | None) -> dict[str, Any]:
        """The GetTransaction counters of ``row``, given its live successful steps (None: not
        read, as in a listing; then the count comes from ``next_step_id`` and can_undo is
        false)."""
        status = TxStatus(row.status)
        active = status is TxStatus.ACTIVE
        unknown = bool(row.body.get("outcome_unknown_step"))
        if live is not None:
            count = len(live)
        else:
            count = max(row.next_step_id - 1, 0) if not status.terminal else 0
        last = max(live, key=lambda s: s.step_id) if live else None
        return {
            "revision_count": count,
            "max_revisions": self.max_steps,
            "remaining_revisions": 0 if status.terminal else max(self.max_steps - count, 0),
            "can_undo": active
            and not unknown
            and last is not None
            and not self.undo_refusal(last)
            and last.step_id == row.next_step_id - 1,
            "can_redo": active and not unknown and bool(redo_stack(row.body, row.revision)),
            "can_commit": active and not unknown,
            "can_rollback": not status.terminal,
        }


def redo_stack(body: dict[str, Any], revision: int) -> list[dict[str, int]]:
    """The undone steps a redo may re-apply, newest last; empty once the transaction moved."""
    redo = body.get("redo")
    if not isinstance(redo, dict) or redo.get("revision") != revision:
        return []
    return list(redo.get("steps", []))


def live_steps(steps: Sequence[StepRow]) -> list[StepRow]:
    return [s for s in steps if s.live and s.status == StepStatus.SUCCESS.value]
