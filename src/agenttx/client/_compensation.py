"""The compensation RPCs' messages, to and from the values ``agenttx.types`` defines (the same
``CompensationPlan``, ``CompensationResult`` and ``RollbackResult`` the embedded engine
returns)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from agenttx.fieldcopy import field_copy
from agenttx.types import (
    CompensationAction,
    CompensationPlan,
    CompensationResult,
    RollbackResult,
    TxStatus,
)
from agenttx.wire import agenttx_pb2 as pb


def compensate_request(
    transaction_id: str, reason: str, principal: str, *, preview: bool = False
) -> pb.CompensateTransactionRequest:
    return pb.CompensateTransactionRequest(
        transaction_id=transaction_id, reason=reason, principal=principal, preview=preview
    )


def approve_request(
    transaction_id: str, principal: str, roles: Sequence[str]
) -> pb.ApproveCompensationRequest:
    return pb.ApproveCompensationRequest(
        transaction_id=transaction_id, principal=principal, roles=list(roles)
    )


def refuse_request(
    transaction_id: str, reason: str, principal: str, roles: Sequence[str]
) -> pb.RefuseCompensationRequest:
    return pb.RefuseCompensationRequest(
        transaction_id=transaction_id, principal=principal, roles=list(roles), reason=reason
    )


def action(a: pb.CompensateTransactionAction) -> CompensationAction:
    return field_copy(a, CompensationAction)


def plan(r: pb.CompensateTransactionResponse) -> CompensationPlan:
    return CompensationPlan(
        transaction_id=r.compensation_for,
        actions=[action(a) for a in r.actions],
        needs_approval=r.needs_approval,
    )


def result(r: pb.CompensateTransactionResponse) -> CompensationResult:
    evidence = json.loads(r.evidence_json) if r.evidence_json else []
    return CompensationResult(
        transaction_id=r.transaction_id,
        compensation_for=r.compensation_for,
        status=r.status,
        reason=r.reason,
        actions=[action(a) for a in r.actions],
        evidence=evidence if isinstance(evidence, list) else [],
        requires_human=r.requires_human,
        revision=r.revision,
    )


def approval(r: pb.ApproveCompensationResponse) -> RollbackResult:
    """The reply of ``ApproveCompensation`` and of ``RefuseCompensation``."""
    status = (
        TxStatus(r.transaction_status)
        if r.transaction_status in TxStatus.__members__
        else (TxStatus.ROLLING_BACK)
    )
    return RollbackResult(
        transaction_id=r.transaction_id,
        rolled_back=r.finished,
        next_step_id=0,
        compensations_run=r.compensations_run,
        compensation_errors=list(r.compensation_errors),
        transaction_status=status,
        revision=r.revision,
        compensation_approval_pending=r.compensation_approval_pending,
    )
