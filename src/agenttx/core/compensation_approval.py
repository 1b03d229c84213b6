"""Compensation that needs an approver: the waiting state and ``approve_compensation``.

A tool declaring ``compensation_approval=True`` makes any rollback or compensation that must
run its undo wait for an approver. Waiting is durable state, not a call left hanging:

- a rollback waits in ROLLING_BACK with its plan (``body["rewind"]``) naming the steps in
  ``awaiting_approval``; recovery leaves it be;
- a compensating transaction waits in COMPENSATING with ``body["compensation"]["approval"]``.

``approve_compensation(tx, principal, roles)`` is accepted once, from a principal holding the
``approver`` role who is not the transaction's own principal (``principal_of``); it is an
audit event (``approval``), then the rollback or compensation goes on where it stopped. The
transaction's principal is ``body["principal"]`` (set at begin), else the ``principal`` entry
of its metadata.
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
    transaction_id: str, owners: Sequence[str], principal: str, roles: Sequence[str]
) -> None:
    """Raise ``CompensationApprovalRefused`` unless ``principal`` may approve: it is named,
    holds the ``approver`` role, and is none of the transaction's own principals ``owners``
    (a compensating transaction's requester and the committed transaction's)."""
    if not principal:
        raise CompensationApprovalRefused(transaction_id, "name the approving principal")
    if APPROVER_ROLE not in roles:
        raise CompensationApprovalRefused(
            transaction_id, f"{principal} does not hold the {APPROVER_ROLE!r} role"
        )
    if principal in owners:
        raise CompensationApprovalRefused(
            transaction_id,
            f"{principal} is the transaction's own principal; another approver must approve",
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
        images = self.images
        async with images.locked(transaction_id) as rt:
            status = TxStatus(rt.row.status)
            body = rt.body
            if not awaiting_approval(body):
                raise CompensationApprovalRefused(
                    transaction_id, f"nothing waits for a compensation approval ({status})"
                )
            compensated = str((body.get("compensation") or {}).get("for_principal", ""))
            owners = sorted({principal_of(body), compensated} - {""})
            check_approver(transaction_id, owners, principal, roles)
            approval = {
                "of": "compensation",
                "principal": principal,
                "roles": sorted(set(roles)),
            }
            now = self.clock()
            if status is TxStatus.ROLLING_BACK:
                plan = dict(body["rewind"], approved_by=principal, approved_at=now)
                waiting = plan.pop("awaiting_approval", [])
                why = plan.pop("cause", {})
                new_body = dict(body, rewind=plan)
                update = images.update(
                    rt,
                    status,
                    rt.row.next_step_id,
                    new_body,
                    (status.value,),
                    audit=[(AuditKind.APPROVAL.value, dict(approval, steps=waiting))],
                )
                images.applied(rt, update, await images.store.update_transaction(update))
                errors, ran = await self.rewinder.rewind(
                    rt, int(plan["target"]), TxStatus(plan["final"]), dict(rt.body), None, why
                )
                return rollback_result(rt, ran, errors)
            comp = dict(body["compensation"], approved_by=principal, approved_at=now)
            update = images.update(
                rt,
                status,
                0,
                dict(body, compensation=comp),
                (status.value,),
                audit=[(AuditKind.APPROVAL.value, approval)],
            )
            images.applied(rt, update, await images.store.update_transaction(update))
        return await self.resume_compensation(transaction_id)
