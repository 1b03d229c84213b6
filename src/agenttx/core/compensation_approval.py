"""Compensation that needs an approver: the waiting state, ``approve_compensation`` and
``refuse_compensation``.

A tool declaring ``compensation_approval=True`` makes any rollback or compensation that must
run its undo wait for an approver. Waiting is durable state, not a call left hanging:

- a rollback waits in ROLLING_BACK with its plan (``body["rewind"]``) naming the steps in
  ``awaiting_approval``; recovery leaves it be;
- a compensating transaction waits in COMPENSATING with ``body["compensation"]["approval"]``.

An approver decides once, approving or refusing, as a principal holding the ``approver`` role
who is not the transaction's own (``principal_of``). The decision is written into the plan
(``approved_by`` / ``refused_by`` and ``refusal_reason``) with its audit record (``approval``
or ``approval.refused``, ``of: compensation``) before anything runs; then the rollback or
compensation goes on where it stopped. Approved, the waiting undo actions run; refused, they
are judged ``refused`` (``contracts``): reported and never run, as a ``rollback_not_supported``
step is, and every other undo action runs as it would have. A restart finishes a decided plan
the same way (``Recovery``, ``Compensator.recover``). The transaction's principal is
``body["principal"]`` (set at begin), else the ``principal`` entry of its metadata.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agenttx.audit import AuditKind
from agenttx.core.approvals import APPROVER_ROLE  # one role name for every approval
from agenttx.core.config import Clock
from agenttx.core.contracts import NOT_SUPPORTED, awaiting_approval, rewind_actions
from agenttx.core.images import TxImages
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import TxRuntime
from agenttx.errors import CompensationApprovalRefused, CompensationRefused
from agenttx.tools.registry import ToolRegistry
from agenttx.types import RollbackResult, TxStatus


def principal_of(body: Mapping[str, Any]) -> str:
    """Who the transaction acts for (``docs/compensation.md``)."""
    principal = body.get("principal") or (body.get("metadata") or {}).get("principal") or ""
    return str(principal)


def check_approver(
    transaction_id: str,
    owners: Sequence[str],
    principal: str,
    roles: Sequence[str],
    *,
    decision: str = "approval",
) -> None:
    """Raise ``CompensationApprovalRefused`` unless ``principal`` may decide (``decision``:
    "approval" or "refusal"): it is named, holds the ``approver`` role, and is none of the
    transaction's own principals ``owners`` (a compensating transaction's requester and the
    committed transaction's)."""
    verb = "approve" if decision == "approval" else "refuse"
    if not principal:
        raise CompensationApprovalRefused(
            transaction_id, f"name the {verb[:-1]}ing principal", decision=decision
        )
    if APPROVER_ROLE not in roles:
        raise CompensationApprovalRefused(
            transaction_id,
            f"{principal} does not hold the {APPROVER_ROLE!r} role",
            decision=decision,
        )
    if principal in owners:
        raise CompensationApprovalRefused(
            transaction_id,
            f"{principal} is the transaction's own principal; another approver must {verb}",
            decision=decision,
        )


def refuse_unsupported(rt: TxRuntime, target: int, registry: ToolRegistry, now: float) -> None:
    """A partial rollback to ``target`` that would need the undo of a step whose tool declares
    ``rollback_not_supported`` raises ``CompensationRefused`` (the caller may pick a later
    step, or abort, which marks the transaction as needing a human)."""
    for action in rewind_actions(
        rt.steps, rt.undo, target, registry, now, approved=True, next_step_id=rt.row.next_step_id
    ):
        if action.verdict == NOT_SUPPORTED:
            raise CompensationRefused(rt.transaction_id, action.step_id, action.tool)


def rollback_result(rt: TxRuntime, ran: int, errors: list[str]) -> RollbackResult:
    """The reply of a rollback as the transaction now stands (waiting or done)."""
    status = TxStatus(rt.row.status)
    waiting = status is TxStatus.ROLLING_BACK
    return RollbackResult(
        rt.transaction_id,
        not waiting,
        rt.row.next_step_id,
        ran,
        errors,
        status,
        rt.row.revision,
        compensation_approval_pending=waiting and awaiting_approval(rt.body),
    )


class CompensationApprovals:
    def __init__(
        self,
        images: TxImages,
        rewinder: Rewinder,
        clock: Clock,
        resume_compensation: Callable[[str], Awaitable[RollbackResult]],
    ) -> None:
        self.images = images
        self.rewinder = rewinder  # goes on with an approved rollback
        self.clock = clock
        # Goes on with an approved compensating transaction (``Compensator.run``); called
        # after the approval is durable, outside this transaction's lock.
        self.resume_compensation = resume_compensation

    async def approve(
        self, transaction_id: str, principal: str, roles: Sequence[str]
    ) -> RollbackResult:
        """Approve what waits: the waiting undo actions run, then the rest goes on."""
        return await self._decide(transaction_id, principal, roles, "")

    async def refuse(
        self, transaction_id: str, principal: str, roles: Sequence[str], reason: str
    ) -> RollbackResult:
        """Refuse what waits, saying why (``reason``, checked by the caller): the undo
        actions that waited are reported ``refused`` and never run; the rest goes on."""
        return await self._decide(transaction_id, principal, roles, reason)

    async def _decide(
        self, transaction_id: str, principal: str, roles: Sequence[str], refusal: str
    ) -> RollbackResult:
        """Record the decision (a refusal iff ``refusal``, its reason) and go on with the
        rollback or compensation; the decision is durable before any undo runs."""
        decision = "refusal" if refusal else "approval"
        images = self.images
        async with images.locked(transaction_id) as rt:
            status = TxStatus(rt.row.status)
            body = rt.body
            if not awaiting_approval(body):
                raise CompensationApprovalRefused(
                    transaction_id, _not_waiting(body, status), decision=decision
                )
            compensated = str((body.get("compensation") or {}).get("for_principal", ""))
            owners = sorted({principal_of(body), compensated} - {""})
            check_approver(transaction_id, owners, principal, roles, decision=decision)
            record = {
                "of": "compensation",
                "principal": principal,
                "roles": sorted(set(roles)),
            }
            now = self.clock()
            if refusal:
                kind = AuditKind.APPROVAL_REFUSED.value
                record["reason"] = refusal
                decided = {"refused_by": principal, "refused_at": now, "refusal_reason": refusal}
            else:
                kind = AuditKind.APPROVAL.value
                decided = {"approved_by": principal, "approved_at": now}
            if status is TxStatus.ROLLING_BACK:
                plan = dict(body["rewind"], **decided)
                waiting = plan.pop("awaiting_approval", [])
                why = plan.pop("cause", {})
                new_body = dict(body, rewind=plan)
                update = images.update(
                    rt,
                    status,
                    rt.row.next_step_id,
                    new_body,
                    (status.value,),
                    audit=[(kind, dict(record, steps=waiting))],
                )
                images.applied(rt, update, await images.store.update_transaction(update))
                # An undo_step's own records wait with the plan (``Rewinder.rewind``).
                events = [(str(k), d) for k, d in plan.get("events", ())]
                errors, ran = await self.rewinder.rewind(
                    rt,
                    int(plan["target"]),
                    TxStatus(plan["final"]),
                    dict(rt.body),
                    None,
                    why,
                    events=events,
                )
                return rollback_result(rt, ran, errors)
            comp = dict(body["compensation"], **decided)
            update = images.update(
                rt,
                status,
                0,
                dict(body, compensation=comp),
                (status.value,),
                audit=[(kind, record)],
            )
            images.applied(rt, update, await images.store.update_transaction(update))
        return await self.resume_compensation(transaction_id)


def _not_waiting(body: Mapping[str, Any], status: TxStatus) -> str:
    """Why nothing can be decided: it was decided once already, or nothing ever waited."""
    for plan in (body.get("rewind") or {}, body.get("compensation") or {}):
        if plan.get("refused_by"):
            return f"nothing waits: it was refused already by {plan['refused_by']} (decided once)"
        if plan.get("approved_by"):
            return f"nothing waits: it was approved already by {plan['approved_by']} (decided once)"
    return f"nothing waits for a compensation approval ({status})"
