"""Compensating a committed transaction: a new governed action, never an edit of the old one.

``compensate(tx, reason)`` creates a **compensating transaction**: its own id
(``compensation_id``: one per committed transaction, so a second call is refused), its own
audit chain, ``compensation_for`` = the original, status COMPENSATING. It runs the undo
actions the commit kept (``contracts.kept_entries``) newest first, each as the rewinder runs
one (retries, backoff, its own audit record), and settles COMPENSATED iff every action ran and
no step was left undone; otherwise FAILED with ``requires_human`` and the evidence (which
step, why: past its window, ``rollback_not_supported``, or its undo failed). A contract that
asks for an approver makes it wait in COMPENSATING (``compensation_approval``), and so does an
undo whose outcome is unknown, until it is reconciled or resolved (``undo_reconcile``).

Durability: the compensating transaction, with the plan it runs, is durable before any undo
runs; each undo's outcome is durable in the original's undo record (``done`` / ``failed``) with
its audit record; a crash in between is finished at the next start (``recover``), which runs
only the actions still pending.
"""

from __future__ import annotations

from typing import Any

from agenttx.audit import AuditKind
from agenttx.core.compensation_approval import principal_of
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.contracts import (
    BLOCKED,
    RUN,
    awaiting_approval,
    compensation_plan,
    evidence,
    kept_entries,
    refusal_reason,
)
from agenttx.core.contracts import describe as describe_action
from agenttx.core.images import TxImages
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import first_row
from agenttx.core.undo_outcomes import UNKNOWN, records_for, unknown_evidence, unknown_undo
from agenttx.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InternalError,
    NotActive,
    NotFound,
)
from agenttx.plural import plural
from agenttx.store.contract import Store, TxRow
from agenttx.tools.registry import ToolRegistry
from agenttx.types import (
    CompensationAction,
    CompensationPlan,
    CompensationResult,
    Isolation,
    RollbackResult,
    TxStatus,
)

_PLANNABLE = (TxStatus.ACTIVE, TxStatus.COMMITTED)


def compensation_id(transaction_id: str) -> str:
    """The id of the one compensating transaction a committed transaction may have."""
    return f"{transaction_id}-compensation"


class Compensator:
    def __init__(
        self,
        images: TxImages,
        rewinder: Rewinder,
        store: Store,
        registry: ToolRegistry,
        config: EngineConfig,
        clock: Clock,
    ) -> None:
        self.images = images
        self.rewinder = rewinder  # runs each undo handler (retries, backoff, audit record)
        self.store = store
        self.registry = registry  # each step's tool: its contract and window
        self.config = config  # the default keep of a tool that declares no window
        self.clock = clock

    # ------------------------------------------------------------------ the plan

    async def plan(self, transaction_id: str) -> CompensationPlan:
        """What ``compensate`` would run: for a committed transaction, from what its commit
        kept; for an open one, from what its commit would keep if it committed now."""
        row = await self.store.get_transaction(transaction_id)
        if row is None:
            raise NotFound(f"transaction `{transaction_id}` not found")
        status = TxStatus(row.status)
        now = self.clock()
        if status is TxStatus.COMMITTED:
            entries = list(row.body.get("compensation_kept", []))
            undo = await self.store.load_undo(transaction_id) if entries else []
            return compensation_plan(transaction_id, entries, undo, now)
        if status is TxStatus.ACTIVE:
            rt = await self.images.get(transaction_id)
            entries = kept_entries(
                rt.steps, rt.undo, self.registry, self.config.compensation_keep_s
            )
            return compensation_plan(transaction_id, entries, rt.undo, now)
        raise NotActive(transaction_id, status.value, "plan a compensation of")

    # ------------------------------------------------------------------ compensate

    async def compensate(
        self, transaction_id: str, reason: str, principal: str = ""
    ) -> CompensationResult:
        original = await self.store.get_transaction(transaction_id)
        if original is None:
            raise NotFound(f"transaction `{transaction_id}` not found")
        if original.status != TxStatus.COMMITTED.value:
            raise NotActive(transaction_id, original.status, "compensate")
        cid = compensation_id(transaction_id)
        await self._refuse_second(transaction_id, cid)
        plan = await self.plan(transaction_id)
        if not plan.actions:
            raise FailedPrecondition(
                f"transaction {transaction_id} has nothing to compensate: none of its steps "
                "left an undo action or an effect that cannot be undone"
            )
        now = self.clock()
        entries = list(original.body.get("compensation_kept", []))
        owner = principal or principal_of(original.body)
        row = first_row(
            cid,
            tenant=original.tenant,
            agent_id=original.agent_id,
            status=TxStatus.COMPENSATING,
            next_step_id=0,
            isolation=original.isolation,
            policy=self.config.default_policy,
            metadata={"principal": owner} if owner else {},
            labels=original.body.get("labels", []),
            now=now,
            principal=owner,
            compensation_for=transaction_id,
            compensation={
                "reason": reason,
                # The committed transaction's principal may not approve its compensation either.
                "for_principal": principal_of(original.body),
                "entries": entries,
                "approval": plan.needs_approval,
                "approved_by": "",
                "actions": [_action(a) for a in plan.actions],
            },
        )
        begun = {
            "compensation_for": transaction_id,
            "reason": reason,
            "principal": owner,
            "actions": [a.step_id for a in plan.runnable],
            "reported": [a.step_id for a in plan.reported],
            "needs_approval": plan.needs_approval,
        }
        audit = self.images.chain(None, 1, now, (AuditKind.BEGIN.value, begun), row=row)
        try:
            row = await self.store.create_transaction(row, None, audit)
        except InternalError:
            # Two compensations raced: the id is one per transaction, the first won.
            await self._refuse_second(transaction_id, cid)
            raise
        self.images.add(row, self.config.default_policy, Isolation(row.isolation), audit)
        if plan.needs_approval:
            return await self.result(cid)
        return await self.run(cid)

    async def _refuse_second(self, transaction_id: str, cid: str) -> None:
        existing = await self.store.get_transaction(cid)
        if existing is not None:
            raise AlreadyExists(
                f"transaction {transaction_id} is already compensated by {cid} "
                f"({existing.status}); read that transaction for its outcome"
            )

    async def run(self, cid: str, *, lock_timeout_s: float | None = None) -> CompensationResult:
        """Run the pending actions of compensating transaction ``cid`` newest first and settle
        it (unless it waits for an approver). Safe to call again after a crash: actions whose
        undo is already done are not run twice."""
        images = self.images
        async with images.locked(cid, lock_timeout_s) as rt:
            if rt.row.status != TxStatus.COMPENSATING.value or awaiting_approval(rt.body):
                return self._result(rt.row, None)
            comp = rt.body["compensation"]
            original = str(rt.body["compensation_for"])
            undo = await self.store.load_undo(original)
            by_id = {u.id: u for u in undo}
            # Past the wait (or never waiting): approved, or refused — then the actions that
            # needed the approval are judged ``refused`` and reported, never run.
            refused = refusal_reason(comp)

            def judged() -> CompensationPlan:
                return compensation_plan(
                    original,
                    comp["entries"],
                    undo,
                    self.clock(),
                    approved=not refused,
                    refused=refused,
                )

            plan = judged()
            to_run = [by_id[a.undo_id] for a in plan.actions if a.verdict == RUN]
            failures, fresh = await self.rewinder.compensate(rt, to_run, on_behalf_of=original)
            after = judged()
            # An undo whose outcome is unknown (now, or before a crash) is not run again: the
            # compensation waits in COMPENSATING for its answer (``undo_reconcile``).
            unknown = [by_id[a.undo_id] for a in after.actions if a.verdict == UNKNOWN]
            if unknown:
                tools = {int(e["undo_id"]): str(e["tool"]) for e in comp["entries"]}
                records = records_for(
                    unknown,
                    [*comp.get("undo_unknown", ()), *fresh],
                    lambda u: tools.get(u.id, u.handler.removesuffix("#undo")),
                    self.clock(),
                )
                if records != comp.get("undo_unknown"):
                    waiting = dict(
                        comp, undo_unknown=records, actions=[_action(a) for a in after.actions]
                    )
                    update = images.update(
                        rt, TxStatus.COMPENSATING, 0, dict(rt.body, compensation=waiting),
                        (TxStatus.COMPENSATING.value,),
                    )  # fmt: skip
                    images.applied(rt, update, await self.store.update_transaction(update))
                return self._result(rt.row, after.actions)
            # Judged again with the records as the run left them (done / failed); a step
            # judged past its window now was inside it when the run started, so the first
            # verdict stands for those.
            first = {(a.step_id, a.undo_id): a for a in plan.actions}
            actions = [
                first[(a.step_id, a.undo_id)] if a.verdict in BLOCKED else a for a in after.actions
            ]
            left = [a for a in actions if a.verdict in BLOCKED or a.verdict == "failed"]
            status = TxStatus.FAILED if left or failures else TxStatus.COMPENSATED
            now = self.clock()
            body = dict(
                rt.body,
                ended_at=now,
                requires_human=bool(left),
                compensation_errors=[describe_action(a) for a in left],
                compensation_evidence=[evidence(a) for a in left],
                compensation=dict(
                    {k: v for k, v in comp.items() if k != "undo_unknown"},
                    outcome=status.value,
                    actions=[_action(a) for a in actions],
                ),
            )
            if status is TxStatus.FAILED:
                body["abort_reason"] = (
                    f"compensation incomplete: {plural(len(left), 'step')} not undone"
                )
            settled = {
                "outcome": "compensated" if status is TxStatus.COMPENSATED else "failed",
                "ran": len(to_run),
                "not_undone": [evidence(a) for a in left],
            }
            update = images.update(
                rt,
                status,
                0,
                body,
                (TxStatus.COMPENSATING.value,),
                audit=[(AuditKind.COMPENSATION_SETTLED.value, settled)],
            )
            images.applied(rt, update, await self.store.update_transaction(update))
            images.evict(rt)
            return self._result(rt.row, actions)

    async def resume(self, cid: str) -> RollbackResult:
        """``approve_compensation``'s (and ``refuse_compensation``'s) continuation for a
        compensating transaction."""
        r = await self.run(cid)
        return RollbackResult(
            r.transaction_id,
            r.status in ("compensated", "failed"),
            0,
            sum(1 for a in r.actions if a.verdict in ("done", "failed")),
            [describe_action(a) for a in r.actions if a.verdict in ("failed", UNKNOWN, *BLOCKED)],
            TxStatus(await self._status(cid)),
            r.revision,
            compensation_approval_pending=r.status == "awaiting_approval",
        )

    async def _status(self, cid: str) -> str:
        row = await self.store.get_transaction(cid)
        return row.status if row is not None else TxStatus.FAILED.value

    async def recover(self) -> int:
        """Finish compensating transactions a crash interrupted (not those waiting for an
        approver); returns how many were settled."""
        settled = 0
        after = ""
        while True:
            rows = await self.store.list_transactions(
                statuses=(TxStatus.COMPENSATING.value,), limit=200, after_id=after
            )
            if not rows:
                return settled
            after = rows[-1].id
            for row in rows:
                if awaiting_approval(row.body):
                    continue
                rt = self.images.cache.get(row.id)
                if rt is not None and rt.lock.locked():
                    continue  # a live call is running it
                try:
                    # A short wait: a replica still running it holds the lock.
                    result = await self.run(row.id, lock_timeout_s=0.5)
                except DeadlineExceeded:
                    continue
                settled += result.status in ("compensated", "failed")

    # ------------------------------------------------------------------ reads

    async def result(self, cid: str) -> CompensationResult:
        row = await self.store.get_transaction(cid)
        if row is None or "compensation_for" not in row.body:
            raise NotFound(f"compensating transaction `{cid}` not found")
        return self._result(row, None)

    def _result(self, row: TxRow, actions: list[CompensationAction] | None) -> CompensationResult:
        body = row.body
        comp = body.get("compensation") or {}
        if actions is None:
            actions = [CompensationAction(**a) for a in comp.get("actions", [])]
        status = TxStatus(row.status)
        if status is TxStatus.COMPENSATED:
            word = "compensated"
        elif status is TxStatus.FAILED:
            word = "failed"
        elif unknown_undo(body):
            word = UNKNOWN  # waits for an undo's answer (``undo_reconcile``)
        elif awaiting_approval(body):
            word = "awaiting_approval"
        else:
            word = "running"
        return CompensationResult(
            transaction_id=row.id,
            compensation_for=str(body.get("compensation_for", "")),
            status=word,
            reason=str(comp.get("reason", "")),
            actions=actions,
            evidence=[
                *body.get("compensation_evidence", []),
                *map(unknown_evidence, unknown_undo(body)),
            ],
            requires_human=bool(body.get("requires_human", False) or unknown_undo(body)),
            revision=row.revision,
        )


def _action(a: CompensationAction) -> dict[str, Any]:
    return {
        "step_id": a.step_id,
        "tool": a.tool,
        "contract": a.contract,
        "handler": a.handler,
        "undo_id": a.undo_id,
        "verdict": a.verdict,
        "expires_at": a.expires_at,
        "reason": a.reason,
        "needs_approval": a.needs_approval,
    }
