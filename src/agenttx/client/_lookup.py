"""``FindTransaction`` for the client: the request, and the reply read back into the
``FoundTransaction`` the embedded engine returns (``agenttx.types``)."""

from __future__ import annotations

from agenttx.client._wire import receipt_view
from agenttx.fieldcopy import field_copy
from agenttx.types import (
    Ending,
    FoundTransaction,
    TerminalResult,
    TxStatus,
    check_lookup_key,
)
from agenttx.wire import agenttx_pb2 as pb

_ENDINGS = frozenset(e.value for e in Ending)
_STATUSES = frozenset(s.value for s in TxStatus)


def find_request(receipt_id: str, request_id: str) -> pb.FindTransactionRequest:
    """The request with its one key. Both or neither is refused here, as the engine refuses
    it: the message holds only one (``oneof``), so the server could not tell."""
    check_lookup_key(receipt_id, request_id)
    if receipt_id:
        return pb.FindTransactionRequest(receipt_id=receipt_id)
    return pb.FindTransactionRequest(request_id=request_id)


def found(r: pb.FindTransactionResponse) -> FoundTransaction:
    t, end = r.transaction, r.result
    return field_copy(
        t,
        FoundTransaction,
        # A status or an ending a newer server added reads as the nearest this client knows.
        status=TxStatus(t.status) if t.status in _STATUSES else TxStatus.ACTIVE,
        labels=list(t.labels),
        result=TerminalResult(
            Ending(end.ending) if end.ending in _ENDINGS else Ending.OPEN,
            ended_at=end.ended_at,
            reason=end.reason,
            commit_receipt_id=end.commit_receipt_id,
        ),
        receipts=[receipt_view(x) for x in r.receipts],
        receipt_id=r.receipt_id,
        request_id=r.request_id,
        request_method=r.request_method,
    )
