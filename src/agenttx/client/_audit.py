"""The audit chain RPCs' messages, to and from the values ``agenttx.audit`` defines (the
same ``AuditVerification`` and ``AuditRecord`` the embedded engine returns)."""

from __future__ import annotations

from agenttx.audit import AuditRecord, AuditVerification
from agenttx.fieldcopy import field_copy
from agenttx.wire import agenttx_pb2 as pb


def verify_request(transaction_id: str) -> pb.VerifyAuditRequest:
    return pb.VerifyAuditRequest(transaction_id=transaction_id)


def verify_all_request(page_size: int, page_token: str) -> pb.VerifyAuditRequest:
    return pb.VerifyAuditRequest(all=True, page_size=page_size, page_token=page_token)


def verification(v: pb.AuditVerification) -> AuditVerification:
    return field_copy(v, AuditVerification, pending=0)  # the wire does not carry it


def records_request(
    transaction_id: str, after_seq: int, page_size: int
) -> pb.ListAuditRecordsRequest:
    return pb.ListAuditRecordsRequest(
        transaction_id=transaction_id, after_seq=after_seq, page_size=page_size
    )


def records(r: pb.ListAuditRecordsResponse, transaction_id: str) -> list[AuditRecord]:
    return [AuditRecord(transaction_id, m.seq, m.kind, m.at, m.body, m.hash) for m in r.records]
