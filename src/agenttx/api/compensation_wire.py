"""Compensation on the wire: ``CompensateTransaction``, ``ApproveCompensation`` and
``RefuseCompensation`` (whose reply is ``ApproveCompensation``'s) replies from the engine's
values (``CompensationPlan``, ``CompensationResult``, ``RollbackResult``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from agenttx.fieldcopy import field_copy
from agenttx.types import CompensationAction, CompensationPlan, CompensationResult, RollbackResult
from agenttx.wire import agenttx_pb2 as pb


def action(a: CompensationAction) -> pb.CompensateTransactionAction:
    return field_copy(a, pb.CompensateTransactionAction)


def _actions(actions: Sequence[CompensationAction]) -> list[pb.CompensateTransactionAction]:
    return [action(a) for a in actions]


def plan_reply(p: CompensationPlan) -> pb.CompensateTransactionResponse:
    reported = [
        {"step": a.step_id, "tool": a.tool, "verdict": a.verdict, "reason": a.reason}
        for a in p.reported
    ]
    return pb.CompensateTransactionResponse(
        compensation_for=p.transaction_id,
        status="preview",
        actions=_actions(p.actions),
        evidence_json=json.dumps(reported),
        requires_human=bool(reported),
        needs_approval=p.needs_approval,
    )


def result_reply(k: CompensationResult) -> pb.CompensateTransactionResponse:
    return pb.CompensateTransactionResponse(
        transaction_id=k.transaction_id,
        compensation_for=k.compensation_for,
        status=k.status,
        reason=k.reason,
        actions=_actions(k.actions),
        evidence_json=json.dumps(k.evidence),
        requires_human=k.requires_human,
        revision=k.revision,
        needs_approval=any(a.needs_approval for a in k.actions),
    )


def approval_reply(r: RollbackResult) -> pb.ApproveCompensationResponse:
    return pb.ApproveCompensationResponse(
        transaction_id=r.transaction_id,
        finished=r.rolled_back,
        compensations_run=r.compensations_run,
        compensation_errors=r.compensation_errors,
        transaction_status=r.transaction_status.value,
        revision=r.revision,
        compensation_approval_pending=r.compensation_approval_pending,
        snapshot=pb.Snapshot(transaction_id=r.transaction_id, revision=r.revision),
    )
