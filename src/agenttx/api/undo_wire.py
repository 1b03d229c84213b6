"""Dry runs, undo/redo and the revision counters on the wire: the fields and messages of
``docs/dry-run.md`` and ``docs/undo.md`` from the engine's values (shared by the gRPC
adapter; the client reads them back in ``client/_wire.py``)."""

from __future__ import annotations

import json
from typing import TypeVar

from agenttx.fieldcopy import field_copy
from agenttx.types import StepResult, TransactionInfo, UndoResult
from agenttx.wire import agenttx_pb2 as pb

_Reply = TypeVar("_Reply", pb.UndoStepResponse, pb.RedoStepResponse)


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
    return _reply(u, pb.UndoStepResponse)


def redo_reply(u: UndoResult) -> pb.RedoStepResponse:
    return _reply(u, pb.RedoStepResponse)  # the same fields but the undo's own three


def _reply(u: UndoResult, into: type[_Reply]) -> _Reply:
    return field_copy(
        u,
        into,
        transaction_status=u.transaction_status.value,
        snapshot=pb.Snapshot(transaction_id=u.transaction_id, revision=u.revision),
    )
