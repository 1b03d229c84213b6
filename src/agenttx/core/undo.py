"""Undo and redo of single steps (``Engine.undo_step`` / ``Engine.redo_step``).

``undo_step`` undoes the transaction's last live step through the ``Rewinder`` — exactly what
a rollback to that step does: its compensations run (newest first), its staged effects drop
unsent, its writes leave the write set — and ``next_step_id`` goes back to it. A step that
cannot be undone (irreversible, ``rollback_not_supported``, an undo handler that is not
registered) is refused with a hint, before anything runs.

``redo_step`` re-applies the most recently undone step if it was state-only (its effect is
its recorded writes): a new attempt row with the same arguments, output and writes, byte for
byte, in one durable write — no tool runs. It is refused with a hint once anything else
changed the transaction after the undo (``revisions.redo_stack``): then the step must be sent
again, since what it read may have changed.

Both append their own audit record (``step.undone`` after the rollback's, ``step.redone``)
in the write that makes them durable, and survive a restart: the redo stack is in the body.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agenttx.audit import AuditKind
from agenttx.core.attempts import next_attempt
from agenttx.core.audit import cause
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.controller import RollbackController
from agenttx.core.images import Event, TxImages
from agenttx.core.requests import Request
from agenttx.core.revisions import RevisionRules, redo_stack
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import TxRuntime
from agenttx.core.states import OPEN
from agenttx.core.views import graph_step
from agenttx.errors import (
    NotActive,
    OutcomeUnknownPending,
    RedoRefused,
    StepLimitReached,
    UndoRefused,
)
from agenttx.store.contract import StepRow, Store
from agenttx.types import StepStatus, TxStatus, UndoResult


class StepHistory:
    def __init__(
        self,
        images: TxImages,
        rewinder: Rewinder,
        store: Store,
        rules: RevisionRules,
        controller: RollbackController,
        config: EngineConfig,
        clock: Clock,
    ) -> None:
        self.images = images  # every change goes through its compare-and-set
        self.rewinder = rewinder  # an undo is a rewind to the step undone
        self.store = store  # the undone step's row, read back for a redo
        self.rules = rules  # what may be undone or redone
        self.controller = controller
        self.config = config
        self.clock = clock

    async def undo(self, transaction_id: str, request: Request | None) -> UndoResult:
        async with self.images.locked(transaction_id, request=request) as rt:
            rt = await self._active(rt, "undo a step")
            unknown = int(rt.body.get("outcome_unknown_step", 0))
            if unknown:  # as for a step or a commit: settle it (or roll back) first
                raise OutcomeUnknownPending(transaction_id, unknown)
            n = rt.row.next_step_id - 1
            step = rt.steps.get(n)
            if step is None:
                raise UndoRefused(
                    transaction_id, 0, "the transaction holds no live step; nothing to undo"
                )
            refusal = self.rules.undo_refusal(step, rt.undo)
            if refusal:
                raise UndoRefused(transaction_id, n, refusal)
            stack = redo_stack(rt.body, rt.row.revision)
            redoable = self.rules.redoable(step)
            dropped = sum(1 for e in rt.staged if e.step_id == n)
            self.controller.on_manual_rewind(rt.ctl, n)
            body: dict[str, Any] = dict(rt.body, controller=rt.ctl.to_dict())
            if redoable:
                # A state-only step's rewind is one write: the revision it leaves is this + 1.
                entry = {"seq": step.seq, "step": n}
                body["redo"] = {"revision": rt.row.revision + 1, "steps": [*stack, entry]}
            else:
                body.pop("redo", None)  # past an outside effect undone, nothing is redone
            undone: Event = (
                AuditKind.STEP_UNDONE.value,
                {"step": n, "tool": step.tool, "seq": step.seq, "redoable": redoable},
            )
            why = cause("MANUAL", "undo_step", step=n)
            errors, ran = await self.rewinder.rewind(
                rt, n, TxStatus.ACTIVE, body, None, why, events=[undone]
            )
            return self._result(rt, n, ran, errors, dropped)

    async def redo(self, transaction_id: str, request: Request | None) -> UndoResult:
        async with self.images.locked(transaction_id, request=request) as rt:
            rt = await self._active(rt, "redo a step")
            unknown = int(rt.body.get("outcome_unknown_step", 0))
            if unknown:
                raise OutcomeUnknownPending(transaction_id, unknown)
            redo = rt.body.get("redo")
            stack = redo_stack(rt.body, rt.row.revision)
            if not stack:
                if isinstance(redo, dict) and redo.get("steps"):
                    n = int(redo["steps"][-1]["step"])
                    raise RedoRefused(
                        transaction_id,
                        n,
                        f"step {n} was undone, but the transaction changed since (a step, a "
                        f"rollback or an undo of another kind ran); send step "
                        f"{rt.row.next_step_id} again instead",
                    )
                raise RedoRefused(
                    transaction_id,
                    0,
                    "no undone step to redo (only a state-only step undone by an undo can be "
                    f"redone); send step {rt.row.next_step_id} again",
                )
            entry = stack[-1]
            n, seq = int(entry["step"]), int(entry["seq"])
            old = await self._undone_row(transaction_id, seq)
            if old is None or n != rt.row.next_step_id:
                raise RedoRefused(
                    transaction_id,
                    n,
                    f"the undone step {n} is no longer in the history; send step "
                    f"{rt.row.next_step_id} again",
                )
            if n > self.config.max_steps:
                raise StepLimitReached(transaction_id, self.config.max_steps)
            now = self.clock()
            new_seq = int(rt.body.get("step_seq", 0)) + 1
            detail = {k: v for k, v in old.detail.items() if k != "rid"}  # not its request
            detail["redo_of"] = seq
            row = dataclasses.replace(
                old,
                seq=new_seq,
                attempt=next_attempt(rt.body, n),  # a new attempt, with a number of its own
                live=True,
                detail=detail,
                started_at=now,
                finished_at=now,
                lease_owner="",
                lease_until=0.0,
            )
            body: dict[str, Any] = dict(rt.body, step_seq=new_seq)
            rest = stack[:-1]
            if rest:
                body["redo"] = {"revision": rt.row.revision + 1, "steps": rest}
            else:
                body.pop("redo", None)
            redone: Event = (
                AuditKind.STEP_REDONE.value,
                {"step": n, "tool": old.tool, "seq": new_seq, "redo_of": seq,
                 "writes": len(detail.get("w", ()))},
            )  # fmt: skip
            update = self.images.update(rt, TxStatus.ACTIVE, n + 1, body, OPEN, audit=[redone])
            self.images.applied(rt, update, await self.store.finish_step(update, row))
            _apply(rt, row)
            return self._result(rt, n, 0, [], 0)

    async def _active(self, rt: TxRuntime, action: str) -> TxRuntime:
        if rt.row.status != TxStatus.ACTIVE.value:
            rt = await self.images.reload(rt)  # a stale cache may think otherwise
            if rt.row.status != TxStatus.ACTIVE.value:
                raise NotActive(rt.transaction_id, rt.row.status, action)
        return rt

    async def _undone_row(self, transaction_id: str, seq: int) -> StepRow | None:
        rows = await self.store.load_steps(transaction_id, live_only=False, after_seq=seq - 1)
        if not rows or rows[0].seq != seq:
            return None
        row = rows[0]
        ok = row.status == StepStatus.SUCCESS.value and not row.live and self.rules.redoable(row)
        return row if ok else None

    def _result(
        self, rt: TxRuntime, step_id: int, ran: int, errors: list[str], dropped: int
    ) -> UndoResult:
        last = rt.steps.get(rt.row.next_step_id - 1)
        return UndoResult(
            transaction_id=rt.transaction_id,
            step_id=step_id,
            next_step_id=rt.row.next_step_id,
            transaction_status=TxStatus(rt.row.status),
            revision=rt.row.revision,
            compensations_run=ran,
            compensation_errors=errors,
            effects_dropped=dropped,
            can_undo=last is not None and not self.rules.undo_refusal(last, rt.undo),
            can_redo=bool(redo_stack(rt.body, rt.row.revision)),
        )


def _apply(rt: TxRuntime, row: StepRow) -> None:
    """Mirror a redone step in the image, as a successful step is mirrored."""
    rt.steps[row.step_id] = row
    rt.outputs[row.step_id] = _output(row)
    writes = [(w[0], w[1], int(w[2])) for w in row.detail.get("w", ())]
    if writes:
        rt.apply_writes(row.step_id, writes)
    rt.add_to_graph(*graph_step(row))


def _output(row: StepRow) -> Any:
    return json.loads(row.output_json) if row.output_json else None
