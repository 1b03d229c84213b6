"""The audit chain on the wire: ``VerifyAudit`` and ``ListAuditRecords`` messages from the
engine's values, and their page sizes. A page of records stops before ``PAGE_BYTES`` so it
always fits the 4 MiB message limit (a record is small, but a chain has no length limit)."""

from __future__ import annotations

from collections.abc import Sequence

from agenttx.audit import AuditRecord, AuditVerification
from agenttx.errors import InvalidArgument
from agenttx.fieldcopy import field_copy
from agenttx.wire import agenttx_pb2 as pb

DEFAULT_CHAINS, MAX_CHAINS = 100, 500
DEFAULT_RECORDS, MAX_RECORDS = 500, 1000
PAGE_BYTES = 3 * 1024 * 1024


def _bounded(value: int, default: int, most: int, what: str) -> int:
    if value > most:
        raise InvalidArgument(f"page_size {value} is over the limit of {most} {what}")
    return value or default


def chains_per_page(page_size: int) -> int:
    return _bounded(page_size, DEFAULT_CHAINS, MAX_CHAINS, "chains")


def records_per_page(page_size: int) -> int:
    return _bounded(page_size, DEFAULT_RECORDS, MAX_RECORDS, "records")


def verification(v: AuditVerification) -> pb.AuditVerification:
    return field_copy(v, pb.AuditVerification)


def records_page(records: Sequence[AuditRecord], asked: int) -> pb.ListAuditRecordsResponse:
    """As many of ``records`` as fit ``PAGE_BYTES``; ``next_after_seq`` is set when more may
    follow (the page was cut, or the store returned all ``asked``)."""
    page = pb.ListAuditRecordsResponse()
    size = 0
    for rec in records:
        msg = pb.AuditRecord(seq=rec.seq, kind=rec.kind, at=rec.at, body=rec.body, hash=rec.hash)
        size += msg.ByteSize() + 8
        if size > PAGE_BYTES and page.records:
            page.next_after_seq = page.records[-1].seq
            return page
        page.records.append(msg)
    if records and len(records) == asked:
        page.next_after_seq = records[-1].seq
    return page
