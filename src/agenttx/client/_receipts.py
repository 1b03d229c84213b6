"""Preview receipts, approvals and refusals over the wire, for the client: requests, and
replies read back into the embedded API's types (``agenttx.receipts``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agenttx.client._compensation import action as compensation_action
from agenttx.fieldcopy import field_copy
from agenttx.receipts import (
    Approval,
    ChangeSet,
    EffectChange,
    FileChange,
    IrreversibleStep,
    Mode,
    Preview,
    Refusal,
    StateChange,
    UndoAction,
)
from agenttx.wire import agenttx_pb2 as pb

_MODES = frozenset(m.value for m in Mode)


def preview_request(tx_id: str) -> pb.PreviewCommitRequest:
    return pb.PreviewCommitRequest(transaction_id=tx_id)


def approve_request(
    tx_id: str, receipt_id: str, principal: str, roles: Sequence[str]
) -> pb.ApproveCommitRequest:
    return pb.ApproveCommitRequest(
        transaction_id=tx_id, receipt_id=receipt_id, principal=principal, roles=list(roles)
    )


def refuse_request(
    tx_id: str, receipt_id: str, reason: str, principal: str, roles: Sequence[str]
) -> pb.RefuseCommitRequest:
    return pb.RefuseCommitRequest(
        transaction_id=tx_id,
        receipt_id=receipt_id,
        principal=principal,
        roles=list(roles),
        reason=reason,
    )


def _value(text: str) -> Any:
    return json.loads(text) if text else None


def preview_result(r: pb.PreviewCommitResponse) -> Preview:
    c = r.changes
    return Preview(
        transaction_id=r.transaction_id,
        receipt_id=r.receipt_id,
        change_hash=r.change_hash,
        revision=r.revision,
        expires_at=r.expires_at,
        changes=ChangeSet(
            state=[
                StateChange(
                    s.key,
                    _value(s.before_json),
                    _value(s.after_json),
                    s.before_sha256,
                    s.after_sha256,
                )
                for s in c.state
            ],
            files=[field_copy(f, FileChange) for f in c.files],
            effects=[field_copy(e, EffectChange) for e in c.effects],
            irreversible=[field_copy(i, IrreversibleStep) for i in c.irreversible],
            discarded_undo=[field_copy(u, UndoAction) for u in c.discarded_undo],
            values_elided=c.values_elided,
        ),
        approval_required=r.approval_required,
        approval_reasons=list(r.approval_reasons),
        mode=Mode(r.mode) if r.mode in _MODES else Mode.TRANSACTIONAL,
        compensation=[compensation_action(a) for a in r.compensation],
    )


def approval_result(r: pb.ApproveCommitResponse) -> Approval:
    return field_copy(r, Approval)


def refusal_result(r: pb.RefuseCommitResponse) -> Refusal:
    return field_copy(r, Refusal, revision=r.snapshot.revision)
