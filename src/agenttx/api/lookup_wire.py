"""A transaction found by a receipt id or a request id, on the wire: ``FoundTransaction`` →
``FindTransactionResponse`` (issue 23.8), the one reply every surface sends.

The reply is small whatever the transaction holds: its state as a ``TransactionSummary``,
its end, and at most 21 receipts (the newest 20 and the one asked for); its steps are
``GetTransaction``'s.
"""

from __future__ import annotations

from agenttx.api import receipts_wire
from agenttx.types import FoundTransaction
from agenttx.wire import agenttx_pb2 as pb


def find_reply(f: FoundTransaction) -> pb.FindTransactionResponse:
    r = f.result
    return pb.FindTransactionResponse(
        transaction=pb.TransactionSummary(
            transaction_id=f.transaction_id,
            status=f.status.value,
            agent_id=f.agent_id,
            next_step_id=f.next_step_id,
            revision=f.revision,
            labels=f.labels,
            created_at=f.created_at,
            updated_at=f.updated_at,
            abort_reason=r.reason,
            snapshot=receipts_wire.snapshot(f.snapshot),
            compensation_for=f.compensation_for,
            principal=f.principal,
            tenant=f.tenant,
        ),
        result=pb.TerminalResult(
            ending=r.ending.value,
            ended_at=r.ended_at,
            reason=r.reason,
            commit_receipt_id=r.commit_receipt_id,
        ),
        receipts=[receipts_wire.receipt(x) for x in f.receipts],
        receipt_id=f.receipt_id,
        request_id=f.request_id,
        request_method=f.request_method,
    )
