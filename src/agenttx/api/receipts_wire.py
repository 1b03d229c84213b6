"""Preview receipts, approvals and refusals on the wire: ``Preview``, ``Approval`` and
``Refusal`` → their gRPC replies (the MCP adapter reads the same messages back as fields, so
the two cannot drift apart).

A preview is kept under the message limit: past it the call is refused with what to do
(the change set itself is unbounded — a transaction may write many keys).
"""

from __future__ import annotations

from typing import Any

from agenttx.api import compensation_wire
from agenttx.api.history import MAX_MESSAGE_BYTES
from agenttx.errors import FailedPrecondition
from agenttx.fieldcopy import field_copy
from agenttx.jsontext import compact
from agenttx.plural import plural
from agenttx.receipts import Approval, Preview, Refusal
from agenttx.types import ReceiptView, Snapshot, TransactionInfo
from agenttx.wire import agenttx_pb2 as pb


def snapshot(s: Snapshot) -> pb.Snapshot:
    return pb.Snapshot(transaction_id=s.transaction_id, revision=s.revision)


def _json(value: Any) -> str:
    return "" if value is None else compact(value)


def preview_reply(p: Preview) -> pb.PreviewCommitResponse:
    c = p.changes
    reply = pb.PreviewCommitResponse(
        transaction_id=p.transaction_id,
        receipt_id=p.receipt_id,
        change_hash=p.change_hash,
        revision=p.revision,
        expires_at=p.expires_at,
        changes=pb.ChangeSet(
            state=[
                pb.StateChange(
                    key=s.key,
                    before_json=_json(s.before),
                    after_json=_json(s.after),
                    before_sha256=s.before_sha256,
                    after_sha256=s.after_sha256,
                )
                for s in c.state
            ],
            files=[field_copy(f, pb.FileChange) for f in c.files],
            effects=[field_copy(e, pb.EffectChange) for e in c.effects],
            irreversible=[field_copy(i, pb.IrreversibleStep) for i in c.irreversible],
            discarded_undo=[field_copy(u, pb.UndoAction) for u in c.discarded_undo],
            values_elided=c.values_elided,
        ),
        approval_required=p.approval_required,
        approval_reasons=p.approval_reasons,
        mode=p.mode.value,
        snapshot=snapshot(p.snapshot),
        compensation=[compensation_wire.action(a) for a in p.compensation],
    )
    size = reply.ByteSize()
    if size > MAX_MESSAGE_BYTES:
        raise FailedPrecondition(
            f"the preview of transaction {p.transaction_id} ({plural(len(c.state), 'key')}, "
            f"{plural(len(c.files), 'file')}, {plural(len(c.effects), 'effect')}) is {size} "
            "bytes, over the "
            f"{MAX_MESSAGE_BYTES}-byte message limit; split the work into smaller "
            "transactions, or preview it through the embedded API"
        )
    return reply


def approval_reply(a: Approval) -> pb.ApproveCommitResponse:
    return field_copy(a, pb.ApproveCommitResponse, snapshot=snapshot(a.snapshot))


def refusal_reply(r: Refusal) -> pb.RefuseCommitResponse:
    return field_copy(r, pb.RefuseCommitResponse, snapshot=snapshot(r.snapshot))


def receipt(r: ReceiptView) -> pb.Receipt:
    """One receipt and its decision, as GetTransaction and FindTransaction list it."""
    return field_copy(r, pb.Receipt)


def add_receipts(reply: pb.GetTransactionResponse, t: TransactionInfo) -> None:
    """GetTransaction's ``receipts`` (field 57): the newest receipts and their decisions."""
    reply.receipts.extend(receipt(r) for r in t.receipts)
