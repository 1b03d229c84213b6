"""A transaction found by a receipt id or a request id, on the wire: ``FoundTransaction`` →
``FindTransactionResponse`` (issue 23.8), the one reply every surface sends.

The reply is small whatever the transaction holds: its state as a ``TransactionSummary``,
its end, and at most 21 receipts (the newest 20 and the one asked for); its steps are
``GetTransaction``'s. ``summary`` builds that message for a found transaction and for a
listed one (``TransactionInfo``, as ``ListTransactions`` lists it).
"""

from __future__ import annotations

from agenttx.api import receipts_wire
from agenttx.fieldcopy import field_copy
from agenttx.types import FoundTransaction, TransactionInfo
from agenttx.wire import agenttx_pb2 as pb


def summary(t: TransactionInfo | FoundTransaction) -> pb.TransactionSummary:
    """The listed form of a transaction: ``ListTransactions``' rows, ``FindTransaction``'s."""
    return field_copy(
        t, pb.TransactionSummary, status=t.status.value, snapshot=receipts_wire.snapshot(t.snapshot)
    )


def find_reply(f: FoundTransaction) -> pb.FindTransactionResponse:
    r = f.result
    return pb.FindTransactionResponse(
        transaction=summary(f),
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
