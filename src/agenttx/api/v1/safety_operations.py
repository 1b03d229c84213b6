"""The ``/v1`` operations of consequential actions and effects: preview, approve or refuse a
commit, undo and redo a step, reconcile or resolve an unknown outcome, compensate a committed
transaction (and approve or refuse a compensation), list and retry effects.

Each is one ``Operation`` entry, as the core operations are (``operations.py``): a route, a
strict body or query model, the engine call with the request's caller, and the gRPC reply
message, so field names, errors and statuses are the same as on the wire. Without API keys the
call names who approves (``principal``, ``roles``), as the embedded API does; with keys the
approver is the key's owner whatever the body says (``Caller.acting_as``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agenttx.api import compensation_wire, effects_wire, receipts_wire, reconcile_wire, undo_wire
from agenttx.api.v1.filters import StatusFilter
from agenttx.api.v1.operations import Call, Operation, _Body, path_number
from agenttx.core.outbox import STATUSES
from agenttx.numbers import AFTER_ID, EFFECTS_PAGE
from agenttx.wire import agenttx_pb2 as pb

Role = str  # "approver", "admin", "agent" (docs/security.md)


class ApproveBody(_Body):
    receipt_id: str = Field(min_length=1, max_length=64, description="preview's receipt_id")
    principal: str = Field(
        default="", max_length=256, description="who approves (ignored with API keys)"
    )
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


class RefuseBody(_Body):
    receipt_id: str = Field(min_length=1, max_length=64, description="preview's receipt_id")
    reason: str = Field(
        min_length=1,
        max_length=4096,
        description="why, and what would make the change acceptable (at most 4096 bytes)",
    )
    principal: str = Field(
        default="", max_length=256, description="who refuses (ignored with API keys)"
    )
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


class RequestBody(_Body):
    request_id: str = Field(default="", max_length=256)


class EmptyBody(_Body):
    """An operation that takes no fields (``{}`` or no body)."""


class ResolveBody(_Body):
    outcome: Literal["happened", "not_happened"]
    output: Any = Field(default=None, description="with happened: the step's output")
    reason: str = Field(default="", max_length=4096, description="kept in the audit chain")


class CompensateBody(_Body):
    reason: str = Field(default="", max_length=4096)
    principal: str = Field(default="", max_length=256, description="ignored with API keys")
    preview: bool = Field(default=False, description="only show what it would run")


class ApproveCompensationBody(_Body):
    principal: str = Field(default="", max_length=256, description="ignored with API keys")
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


class RefuseCompensationBody(_Body):
    reason: str = Field(
        min_length=1,
        max_length=4096,
        description="why the undo must not run (at most 4096 bytes)",
    )
    principal: str = Field(default="", max_length=256, description="ignored with API keys")
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


EFFECT_STATUSES = StatusFilter("effect status", STATUSES)


class EffectsQuery(_Body):
    model_config = _Body.model_config | {"strict": False}  # query strings are text

    status: list[str] = Field(
        default_factory=list,
        json_schema_extra={"items": {"type": "string", "pattern": EFFECT_STATUSES.pattern}},
        description="pending, delivering, delivered, dead (repeatable or comma-separated, "
        "any case); empty: all",
    )
    after_id: int = Field(
        default=0,
        ge=AFTER_ID.low,
        le=AFTER_ID.high,
        description="the next_after_id of the last page",
    )
    page_size: int = Field(default=100, ge=1, le=EFFECTS_PAGE.high)


def _step_id(c: Call) -> int:
    return path_number(c, "step_id")


async def _preview(c: Call) -> Any:
    return receipts_wire.preview_reply(
        await c.engine.preview_commit(c.transaction_id, caller=c.caller)
    )


async def _approve(c: Call) -> Any:
    b: ApproveBody = c.body
    a = await c.engine.approve_commit(
        c.transaction_id, b.receipt_id, principal=b.principal, roles=b.roles, caller=c.caller
    )
    return receipts_wire.approval_reply(a)


async def _refuse(c: Call) -> Any:
    b: RefuseBody = c.body
    r = await c.engine.refuse_commit(
        c.transaction_id,
        b.receipt_id,
        b.reason,
        principal=b.principal,
        roles=b.roles,
        caller=c.caller,
    )
    return receipts_wire.refusal_reply(r)


async def _undo(c: Call) -> Any:
    b: RequestBody = c.body
    u = await c.engine.undo_step(c.transaction_id, request_id=b.request_id, caller=c.caller)
    return undo_wire.undo_reply(u)


async def _redo(c: Call) -> Any:
    b: RequestBody = c.body
    u = await c.engine.redo_step(c.transaction_id, request_id=b.request_id, caller=c.caller)
    return undo_wire.redo_reply(u)


async def _reconcile(c: Call) -> Any:
    r = await c.engine.reconcile_step(c.transaction_id, _step_id(c), caller=c.caller)
    return reconcile_wire.reconcile_reply(r)


async def _resolve(c: Call) -> Any:
    b: ResolveBody = c.body
    r = await c.engine.resolve_step(
        c.transaction_id, _step_id(c), b.outcome, output=b.output, reason=b.reason, caller=c.caller
    )
    return reconcile_wire.reconcile_reply(r)


async def _compensate(c: Call) -> Any:
    b: CompensateBody = c.body
    if b.preview:
        plan = await c.engine.compensation_plan(c.transaction_id, caller=c.caller)
        return compensation_wire.plan_reply(plan)
    k = await c.engine.compensate(
        c.transaction_id, b.reason, principal=b.principal, caller=c.caller
    )
    return compensation_wire.result_reply(k)


async def _approve_compensation(c: Call) -> Any:
    b: ApproveCompensationBody = c.body
    r = await c.engine.approve_compensation(c.transaction_id, b.principal, b.roles, caller=c.caller)
    return compensation_wire.approval_reply(r)


async def _refuse_compensation(c: Call) -> Any:
    b: RefuseCompensationBody = c.body
    r = await c.engine.refuse_compensation(
        c.transaction_id, b.reason, b.principal, b.roles, caller=c.caller
    )
    return compensation_wire.approval_reply(r)


async def _effects(c: Call) -> Any:
    q: EffectsQuery = c.query
    page = await c.engine.list_effects(
        statuses=EFFECT_STATUSES.parse(q.status),
        transaction_id=c.path.get("transaction_id", ""),
        after_id=q.after_id,
        limit=q.page_size,
        caller=c.caller,
    )
    return effects_wire.effects_page(page.effects, page.next_after_id)


async def _retry_effect(c: Call) -> Any:
    effect = await c.engine.retry_effect(path_number(c, "effect_id"), caller=c.caller)
    return pb.RetryEffectResponse(effect=effects_wire.record(effect))


_TX = "/v1/transactions/{transaction_id}"
_STEP = _TX + "/steps/{step_id}"

SAFETY_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "POST",
        f"{_TX}/preview",
        "PreviewCommit",
        "The exact change a commit would make now, with a receipt bound to it",
        pb.PreviewCommitResponse,
        _preview,
        body=EmptyBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_TX}/approve",
        "ApproveCommit",
        "Approve a receipt once, as a principal other than the transaction's, with approver",
        pb.ApproveCommitResponse,
        _approve,
        body=ApproveBody,
    ),
    Operation(
        "POST",
        f"{_TX}/refuse",
        "RefuseCommit",
        "Refuse a receipt once, with a reason: the transaction stays open, its commit is refused",
        pb.RefuseCommitResponse,
        _refuse,
        body=RefuseBody,
    ),
    Operation(
        "POST",
        f"{_TX}/undo",
        "UndoStep",
        "Undo the last live step (its undo runs, next_step_id goes back to it)",
        pb.UndoStepResponse,
        _undo,
        body=RequestBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_TX}/redo",
        "RedoStep",
        "Re-apply the state-only step the last undo took back, if nothing ran since",
        pb.RedoStepResponse,
        _redo,
        body=RequestBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_STEP}/reconcile",
        "ReconcileStep",
        "Ask the tool whether an OUTCOME_UNKNOWN step's outside call happened, and settle it",
        pb.ReconcileStepResponse,
        _reconcile,
        body=EmptyBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_STEP}/resolve",
        "ResolveStep",
        "An operator's word on an OUTCOME_UNKNOWN step: happened or not_happened",
        pb.ReconcileStepResponse,
        _resolve,
        body=ResolveBody,
    ),
    Operation(
        "POST",
        f"{_TX}/compensate",
        "CompensateTransaction",
        "Compensate a committed transaction in a new compensating one (or preview it)",
        pb.CompensateTransactionResponse,
        _compensate,
        body=CompensateBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_TX}/approve-compensation",
        "ApproveCompensation",
        "Approve the undo a rollback or a compensation waits for (approver, not the owner)",
        pb.ApproveCompensationResponse,
        _approve_compensation,
        body=ApproveCompensationBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_TX}/refuse-compensation",
        "RefuseCompensation",
        "Refuse the undo a rollback or a compensation waits for, with a reason (not the owner)",
        pb.ApproveCompensationResponse,
        _refuse_compensation,
        body=RefuseCompensationBody,
    ),
    Operation(
        "GET",
        f"{_TX}/effects",
        "ListEffects",
        "The transaction's effects with their last error (dead letters included)",
        pb.ListEffectsResponse,
        _effects,
        query=EffectsQuery,
    ),
    Operation(
        "GET",
        "/v1/effects",
        "ListAllEffects",
        "The outbox of the caller's tenant, oldest first, with each effect's last error",
        pb.ListEffectsResponse,
        _effects,
        query=EffectsQuery,
    ),
    Operation(
        "POST",
        f"{_TX}/effects/{{effect_id}}/retry",
        "RetryEffect",
        "Requeue a dead effect and try it once now",
        pb.RetryEffectResponse,
        _retry_effect,
        body=EmptyBody,
        body_optional=True,
    ),
)

__all__ = ["SAFETY_OPERATIONS"]
