"""The client's side of ``ReconcileStep`` and ``ResolveStep``: requests and the result."""

from __future__ import annotations

import json
from typing import Any

from agenttx.errors import InvalidArgument
from agenttx.fieldcopy import field_copy
from agenttx.types import ReconcileResult, TxStatus
from agenttx.wire import agenttx_pb2 as pb


def reconcile_request(transaction_id: str, step_id: int) -> pb.ReconcileStepRequest:
    return pb.ReconcileStepRequest(transaction_id=transaction_id, step_id=step_id)


def resolve_request(
    transaction_id: str, step_id: int, outcome: str, output: Any, reason: str
) -> pb.ResolveStepRequest:
    try:
        output_json = "" if output is None else json.dumps(output, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"resolve output is not JSON: {exc}") from None
    return pb.ResolveStepRequest(
        transaction_id=transaction_id,
        step_id=step_id,
        outcome=outcome,
        output_json=output_json,
        reason=reason,
    )


def reconcile_result(r: pb.ReconcileStepResponse) -> ReconcileResult:
    try:
        status = TxStatus(r.transaction_status)
    except ValueError:
        status = TxStatus.ACTIVE
    output = json.loads(r.output_json) if r.output_json else None
    return field_copy(r, ReconcileResult, transaction_status=status, output=output)
