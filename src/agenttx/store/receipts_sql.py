"""The SQL of receipts (preview and approval) and of the batch state read a preview makes,
written once for both dialects (the rules of ``store/sql.py`` hold: ``?`` placeholders,
PostgreSQL type names). The ``receipts`` table itself is created in ``sql.schema``.

A receipt row is written by a preview and changed once, by its approval or its refusal: a
compare-and-set from ``issued`` to ``approved`` or ``refused``, so of two decisions (two
approvals, or an approval and a refusal) exactly one wins on either store. Both decisions keep
who made them and when in ``approved_by``/``approved_at`` (the status says which decision); a
refusal's reason goes into ``detail`` with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agenttx.jsontext import compact
from agenttx.store.contract import ReceiptRow

RECEIPT_COLS = (
    "id, tx_id, tenant, revision, change_hash, status, created_at, expires_at, approved_by, "
    "approved_at, detail"
)
INSERT_RECEIPT = f"INSERT INTO receipts ({RECEIPT_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
GET_RECEIPT = f"SELECT {RECEIPT_COLS} FROM receipts WHERE id = ?"
APPROVE_RECEIPT = (
    "UPDATE receipts SET status = 'approved', approved_by = ?, approved_at = ? "
    "WHERE id = ? AND status = 'issued'"
)
# The detail is written whole: it changes only with this compare-and-set, so the caller's copy
# (read while the receipt was still issued) is the one it replaces.
REFUSE_RECEIPT = (
    "UPDATE receipts SET status = 'refused', approved_by = ?, approved_at = ?, detail = ? "
    "WHERE id = ? AND status = 'issued'"
)
# A transaction's newest receipts, for its view (``receipts_by_tx`` finds them).
LIST_RECEIPTS = (
    f"SELECT {RECEIPT_COLS} FROM receipts WHERE tx_id = ? ORDER BY created_at DESC, id DESC LIMIT ?"
)

# Keys per statement of a batch read: well under SQLite's limit on bound values.
READ_BATCH = 1000


def read_states_sql(key_in: str) -> str:
    """The newest committed version of each key ``key_in`` selects (the dialect's test for
    one of many values): one index probe per key."""
    return (
        "SELECT key, value, version FROM kv WHERE tenant = ? AND "
        f"{key_in} AND version = (SELECT max(k2.version) FROM kv k2 "
        "WHERE k2.tenant = kv.tenant AND k2.key = kv.key)"
    )


def receipt_values(r: ReceiptRow) -> tuple[Any, ...]:
    return (
        r.id,
        r.tx_id,
        r.tenant,
        r.revision,
        r.change_hash,
        r.status,
        r.created_at,
        r.expires_at,
        r.approved_by,
        r.approved_at,
        compact(r.detail),
    )


def receipt_row(r: Sequence[Any]) -> ReceiptRow:
    return ReceiptRow(
        id=str(r[0]),
        tx_id=str(r[1]),
        tenant=str(r[2]),
        revision=int(r[3]),
        change_hash=str(r[4]),
        status=str(r[5]),
        created_at=float(r[6]),
        expires_at=float(r[7]),
        approved_by=str(r[8]),
        approved_at=float(r[9]),
        detail=json.loads(r[10]) if r[10] else {},
    )
