"""Dry runs, undo/redo and the revision counters on the wire: the fields and messages of
``docs/dry-run.md`` and ``docs/undo.md`` from the engine's values (shared by the gRPC
adapter; the client reads them back in ``client/_wire.py``)."""

from __future__ import annotations

import json

from agenttx.types import StepResult, TransactionInfo, UndoResult
from agenttx.wire import agenttx_pb2 as pb


def add_dry_run(reply: pb.ExecuteStepResponse, r: StepResult) -> None:
    """Fill a step reply's dry-run fields (18–21) iff ``r`` is a dry run's."""
    d = r.dry_run
    if d is None:
        return
    reply.dry_run = True
    reply.fidelity = d.fidelity.value
    reply.policy_decision = d.policy
    reply.dry_run_json = json.dumps(
        {
            "declared": d.declared.value,
            "would_succeed": d.would_succeed,
            "changes": d.changes,
            "notes": d.notes,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def add_counters(reply: pb.GetTransactionResponse, t: TransactionInfo) -> None:
    reply.revision_count = t.revision_count
    reply.max_revisions = t.max_revisions
    reply.remaining_revisions = t.remaining_revisions
    reply.can_undo = t.can_undo
    reply.can_redo = t.can_redo
    reply.can_commit = t.can_commit
    reply.can_rollback = t.can_rollback


def undo_reply(u: UndoResult) -> pb.UndoStepResponse:
    return pb.UndoStepResponse(
        transaction_id=u.transaction_id,
        step_id=u.step_id,
        next_step_id=u.next_step_id,
        transaction_status=u.transaction_status.value,
        revision=u.revision,
        compensations_run=u.compensations_run,
        compensation_errors=u.compensation_errors,
        effects_dropped=u.effects_dropped,
        can_undo=u.can_undo,
        can_redo=u.can_redo,
        snapshot=pb.Snapshot(transaction_id=u.transaction_id, revision=u.revision),
    )


def redo_reply(u: UndoResult) -> pb.RedoStepResponse:
    return pb.RedoStepResponse(
        transaction_id=u.transaction_id,
        step_id=u.step_id,
        next_step_id=u.next_step_id,
        transaction_status=u.transaction_status.value,
        revision=u.revision,
        can_undo=u.can_undo,
        can_redo=u.can_redo,
        snapshot=pb.Snapshot(transaction_id=u.transaction_id, revision=u.revision),
    )
