"""The wire side of reconciling unknown outcomes (``core/reconcile.py``): the
``ReconcileStepResponse`` and the fields other replies carry about a pending outcome. The gRPC
adapter and the client share nothing else; the client has its own reader (``client/_wire``)."""

from __future__ import annotations

from typing import Any

from agenttx import jsonpolicy
from agenttx.errors import InvalidArgument
from agenttx.fieldcopy import field_copy
from agenttx.jsonpolicy import JsonRefused
from agenttx.types import ReconcileResult, StepResult, StepView, TransactionInfo
from agenttx.wire import agenttx_pb2 as pb


def reconcile_reply(r: ReconcileResult) -> pb.ReconcileStepResponse:
    return field_copy(
        r,
        pb.ReconcileStepResponse,
        transaction_status=r.transaction_status.value,
        snapshot=pb.Snapshot(transaction_id=r.transaction_id, revision=r.revision),
    )


def resolve_output(output_json: str) -> Any:
    """A ResolveStep's output: its JSON, held to the JSON policy (empty: null)."""
    if not output_json.strip():
        return None
    try:
        return jsonpolicy.parse(output_json)
    except JsonRefused as exc:
        raise InvalidArgument(f"output_json: {exc.message}") from None


def fill_step(reply: pb.ExecuteStepResponse, r: StepResult) -> None:
    """An OUTCOME_UNKNOWN step reply's reconcile fields (22–24)."""
    reply.retry_after_ms = r.retry_after_ms
    reply.operation_provider = r.operation_provider
    reply.operation_id = r.operation_id


def fill_transaction(reply: pb.GetTransactionResponse, t: TransactionInfo) -> None:
    reply.reconcile_state = t.reconcile_state
    reply.reconcile_after = t.reconcile_after
    reply.operation_provider = t.operation_provider
    reply.operation_id = t.operation_id


def fill_record(record: pb.StepRecord, s: StepView) -> None:
    record.operation_provider = s.operation_provider
    record.operation_id = s.operation_id
