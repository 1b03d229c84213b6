"""Settling an undo whose outcome is unknown (``undo_outcomes`` has the waiting records):
``reconcile_step`` asks the tool's ``@tool.undo_reconcile`` handler, ``resolve_step`` takes an
operator's word; once nothing is unknown the rollback or compensation goes on.

The handler runs under the transaction's lock (as the undo itself did, in the rewind) and the
undo's timeout, so no lease is needed: a crash while it runs leaves nothing held, and the
undo is asked about again after the restart — never run again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agenttx.audit import AuditKind
from agenttx.core.config import Clock
from agenttx.core.images import TxImages
from agenttx.core.limits import check_transaction_id, retry_ms
from agenttx.core.reconcile import ask_handler, ms_left, reconcile_result
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import TxRuntime
from agenttx.core.undo_outcomes import UNKNOWN, unknown_undo, with_records
from agenttx.errors import (
    FailedPrecondition,
    InvalidArgument,
    NoReconcileHandler,
    ReconcileNotDue,
)
from agenttx.store.contract import Store, UndoRow
from agenttx.tools.reconcile import ReconcileContext, Reconciled
from agenttx.tools.registry import ToolRegistry
from agenttx.types import ReconcileResult, RollbackResult, TxStatus

_ERROR_CHARS = 500
_WAITING = (TxStatus.ROLLING_BACK, TxStatus.COMPENSATING)


class UndoReconciler:
    """Reconciles and resolves undo actions whose outcome is unknown (module docstring)."""

    def __init__(
        self,
        images: TxImages,
        store: Store,
        registry: ToolRegistry,
        rewinder: Rewinder,
        clock: Clock,
        resume_compensation: Callable[[str], Awaitable[RollbackResult]],
    ) -> None:
        self.images = images
        self.store = store  # a compensating transaction's undo records are the original's
        self.registry = registry  # the undo's tool and its ``undo_reconcile`` handler
        self.rewinder = rewinder  # goes on with a rollback once nothing is unknown
        self.clock = clock
        # Goes on with a compensating transaction (``Compensator.resume``); called after the
        # settlement is durable, outside the transaction's lock (it takes it itself).
        self.resume_compensation = resume_compensation

    async def holds(self, transaction_id: str, step_id: int) -> bool:
        """True iff the transaction waits on an unknown undo of step ``step_id`` (then
        ``reconcile_step`` / ``resolve_step`` of that step are about the undo)."""
        check_transaction_id(transaction_id)
        row = await self.store.get_transaction(transaction_id)
        if row is None:
            return False
        return any(int(r["step"]) == step_id for r in unknown_undo(row.body))

    async def reconcile(self, transaction_id: str, step_id: int) -> ReconcileResult:
        """Ask the tool's ``@tool.undo_reconcile`` handler whether the undo took effect. It
        runs under the transaction's lock and the undo's timeout, as the undo itself did."""
        resume = False
        async with self.images.locked(transaction_id) as rt:
            record, row = await self._pending(rt, step_id)
            tool = self.registry.get(str(record["tool"]))
            if tool is None or tool.undo_reconcile_fn is None:
                raise NoReconcileHandler(transaction_id, step_id, str(record["tool"]), undo=True)
            left = ms_left(record, self.clock())
            if left > 0:
                raise ReconcileNotDue(transaction_id, step_id, left)
            record = dict(record, tries=int(record.get("tries", 0)) + 1)
            ctx = ReconcileContext(
                transaction_id=str(rt.body.get("compensation_for") or transaction_id),
                step_id=step_id,
                idempotency_key=row.idempotency_key,
                provider=str(record.get("provider", "")),
                operation_id=str(record.get("operation_id", "")) or None,
                cursor=None,
                attempt=int(record["tries"]),
                undo_id=row.id,
            )
            answer, error = await ask_handler(
                tool.undo_reconcile_fn, ctx, json.loads(row.args_json), tool.undo_timeout
            )
            if answer is None or answer.outcome == "unknown":
                return await self._still_unknown(rt, record, answer, error)
            resume = await self._settle(rt, row, record, answer.outcome, "handler", "")
            result = self._result(rt, record, answer.outcome)
        return await self._went_on(result, resume)

    async def resolve(
        self, transaction_id: str, step_id: int, outcome: str, output: Any, reason: str
    ) -> ReconcileResult:
        """An operator's word on the undo: ``happened`` (it took effect) or ``not_happened``
        (the step's effect stays: reported, the transaction needs a human)."""
        outcome = outcome.replace("-", "_")
        if outcome not in ("happened", "not_happened"):
            raise InvalidArgument(
                f"resolve outcome must be happened or not_happened, got {outcome!r}"
            )
        if output is not None:
            raise InvalidArgument(
                f"the undo of step {step_id} is resolved without an output: an undo has none"
            )
        async with self.images.locked(transaction_id) as rt:
            record, row = await self._pending(rt, step_id)
            resume = await self._settle(rt, row, record, outcome, "operator", reason)
            result = self._result(rt, record, outcome)
        return await self._went_on(result, resume)

    # ------------------------------------------------------------------ settling

    async def _pending(self, rt: TxRuntime, step_id: int) -> tuple[dict[str, Any], UndoRow]:
        """The newest unknown undo of ``step_id`` (its record and its row); refusals else."""
        tx = rt.transaction_id
        records = [r for r in unknown_undo(rt.body) if int(r["step"]) == step_id]
        status = TxStatus(rt.row.status)
        if not records or status not in _WAITING:
            raise FailedPrecondition(
                f"transaction {tx}: the undo of step {step_id} has no unknown outcome to "
                "reconcile (get_transaction shows outcome_unknown_step)"
            )
        record = records[0]
        original = str(rt.body.get("compensation_for") or "")
        undo = await self.store.load_undo(original) if original else rt.undo
        row = next((u for u in undo if u.id == int(record["undo_id"])), None)
        if row is None or row.status != UNKNOWN:
            # Settled by a call that crashed before its plan said so: recovery goes on.
            raise FailedPrecondition(
                f"transaction {tx}: the undo of step {step_id} is settled already; the "
                "maintenance pass finishes the rollback or compensation"
            )
        return dict(record), row

    async def _settle(
        self, rt: TxRuntime, row: UndoRow, record: dict[str, Any], outcome: str, via: str,
        reason: str,
    ) -> bool:  # fmt: skip
        """Make the answer durable: the undo record first (with its audit record), then the
        plan without it; then, once nothing is unknown, a rollback goes on here. Returns True
        iff a compensating transaction is to go on (outside the lock)."""
        images = self.images
        happened = outcome == "happened"
        row.status = "done" if happened else "failed"
        said = "its undo_reconcile handler says so" if via == "handler" else "an operator says so"
        words = f"{said}: {reason}" if reason else said
        row.last_error = (
            "" if happened else f"the undo did not take effect ({words}); the step's effect stays"
        )
        event = _event(record, outcome, via, reason=reason)
        records = images.chain(rt, rt.row.revision, self.clock(), event)
        sealed = images.seal_seq(rt)
        await self.store.set_undo_status(
            row.id, row.status, row.attempts, row.last_error, records, audit_seq=sealed
        )
        images.appended(rt, records, sealed)
        left = [r for r in unknown_undo(rt.body) if int(r["undo_id"]) != row.id]
        status = TxStatus(rt.row.status)
        body = with_records(rt.body, left)
        update = images.update(rt, status, rt.row.next_step_id, body, (status.value,))
        images.applied(rt, update, await self.store.update_transaction(update))
        if left:
            return False
        if status is TxStatus.COMPENSATING:
            return True
        plan = dict(rt.body["rewind"])
        events = [(str(k), d) for k, d in plan.get("events", ())]  # an undo_step's record
        await self.rewinder.rewind(
            rt,
            int(plan["target"]),
            TxStatus(plan["final"]),
            dict(rt.body),
            None,
            plan.get("cause") or {},
            events=events,
        )
        return False

    async def _still_unknown(
        self, rt: TxRuntime, record: dict[str, Any], answer: Reconciled | None, error: str
    ) -> ReconcileResult:
        ms = retry_ms(answer.retry_after_ms if answer else None)
        record = dict(record, retry_at=self.clock() + ms / 1000)
        if error:
            record["error"] = error[:_ERROR_CHARS]
        records = [
            record if int(r["undo_id"]) == int(record["undo_id"]) else r
            for r in unknown_undo(rt.body)
        ]
        status = TxStatus(rt.row.status)
        event = _event(record, "unknown", "handler", retry_after_ms=ms, error=error)
        update = self.images.update(
            rt,
            status,
            rt.row.next_step_id,
            with_records(rt.body, records),
            (status.value,),
            audit=[event],
        )
        self.images.applied(rt, update, await self.store.update_transaction(update))
        why = f" ({error[:120]})" if error else ""
        hint = (
            f"Hint: whether the undo of step {record['step']} took effect is still "
            f"unknown{why}; call reconcile_step again in {ms} ms, or an operator resolves it."
        )
        return self._result(rt, record, "unknown", hint, retry_after_ms=ms)

    def _result(
        self, rt: TxRuntime, record: Mapping[str, Any], outcome: str, hint: str = "", **more: Any
    ) -> ReconcileResult:
        step = int(record["step"])
        if not hint:
            hint = (
                f"Hint: the undo of step {step} did take effect; the rollback went on."
                if outcome == "happened"
                else f"Hint: the undo of step {step} did not take effect: the step's effect "
                "stays and the transaction needs a human; undo it in the outside system."
            )
        operation = (record.get("provider", ""), record.get("operation_id", ""))
        return reconcile_result(rt, step, outcome, hint, operation, **more)

    async def _went_on(self, result: ReconcileResult, resume: bool) -> ReconcileResult:
        """``result`` with the transaction as it stands once a compensating transaction went
        on (``resume``), else as is."""
        if not resume:
            return result
        went = await self.resume_compensation(result.transaction_id)
        return ReconcileResult(
            transaction_id=result.transaction_id,
            step_id=result.step_id,
            outcome=result.outcome,
            next_step_id=0,
            transaction_status=went.transaction_status,
            revision=went.revision,
            clean_hint=result.clean_hint.replace("the rollback", "the compensation"),
            operation_provider=result.operation_provider,
            operation_id=result.operation_id,
        )


def _event(
    record: Mapping[str, Any], outcome: str, via: str, **more: Any
) -> tuple[str, dict[str, Any]]:
    """The audit record of an answer about an undo: ``reconcile`` from its handler,
    ``step.resolved`` from an operator, each with ``of: undo``."""
    data = {
        "of": "undo",
        "undo_id": int(record["undo_id"]),
        "step": int(record["step"]),
        "tool": str(record["tool"]),
        "handler": str(record["handler"]),
        "outcome": outcome,
        "via": via,
        "tries": int(record.get("tries", 0)),
        "provider": str(record.get("provider", "")),
        "operation_id": str(record.get("operation_id", "")),
        **{k: v for k, v in more.items() if v not in ("", None)},
    }
    kind = AuditKind.RECONCILE if via == "handler" else AuditKind.STEP_RESOLVED
    return kind.value, data
