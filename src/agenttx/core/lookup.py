"""Finding a transaction by a key other than its id: a preview receipt's id, or the request id
one of its calls was sent with (``Engine.find_transaction``).

- A **receipt id** (``rcpt_`` and 32 hex digits) is unique in the store and belongs to one
  transaction: its row names the transaction and the tenant (``Store.get_receipt``). It is
  found as long as its transaction is kept (retention deletes the receipts with it).
- A **request id** is unique per tenant and names one *call*, not a transaction: the begin
  that made it, or a step, commit, rollback, undo or redo sent to it. Its stored reply records
  the transaction that call made or named (``StoredReply.tx_id``, ``Store.get_request``), and
  ``request_method`` says which call it was. A step's request id so finds the transaction the
  step ran in, and the result is the transaction's, not the step's (a step that failed and
  was rolled back sits in a transaction that may still have committed). It is found while its
  reply is kept: the retention period, a day with retention off (docs/operations.md).
  A begin that was refused made no transaction: its request id finds none.

Each is one primary-key read, then the transaction's row and its newest receipts (the
``receipts_by_tx`` index): the same small work whatever the store holds. A caller may find
what it may read (``Access``: another tenant's receipt is not found, word for word as an
unknown one; another principal's transaction needs the admin or approver role).
"""

from __future__ import annotations

import json

from agenttx.core.access import Access, Action
from agenttx.core.approvals import check_receipt_id
from agenttx.core.callargs import check_text
from agenttx.core.config import Clock
from agenttx.core.reads import VIEW_RECEIPTS, commit_receipt, receipt_view
from agenttx.core.requests import check_request_id
from agenttx.errors import NotFound, clip
from agenttx.store.contract import ReceiptRow, Store, StoredReply, TxRow
from agenttx.types import (
    Caller,
    Ending,
    FoundTransaction,
    TerminalResult,
    TxStatus,
    check_lookup_key,
)


def check_key(receipt_id: object, request_id: object) -> tuple[str, str]:
    """The two keys as given, refused unless exactly one is set and within its byte limit."""
    receipt = check_text("receipt_id", receipt_id)
    request = check_text("request_id", request_id)
    check_lookup_key(receipt, request)
    if receipt:
        check_receipt_id(receipt)
    else:
        check_request_id(request)
    return receipt, request


def terminal_result(row: TxRow) -> TerminalResult:
    """How the transaction of ``row`` ended, and when (``ended_at``, written with its end)."""
    status = TxStatus(row.status)
    ending = Ending.of(status)
    if ending is Ending.OPEN:
        return TerminalResult(ending)
    stopped = ending in (Ending.ROLLED_BACK, Ending.ABORTED)
    return TerminalResult(
        ending,
        ended_at=float(row.body.get("ended_at", row.updated_at)),
        reason=str(row.body.get("abort_reason", "")) if stopped else "",
        commit_receipt_id=commit_receipt(row) or "",
    )


def _reply_tx(stored: StoredReply) -> str:
    """The transaction a stored reply's call acted on: as recorded, or — for a reply stored
    before schema 6 recorded it — as its successful reply names it ("" if it names none)."""
    if stored.tx_id or not stored.reply_json:
        return stored.tx_id
    ok = json.loads(stored.reply_json).get("ok")
    return str(ok.get("transaction_id", "")) if isinstance(ok, dict) else ""


class TransactionFinder:
    """``find_transaction``'s part: the key → the transaction → what the caller sees of it."""

    def __init__(self, store: Store, access: Access, clock: Clock, tenant: str) -> None:
        self.store = store
        self.access = access  # the read rule of every transaction read
        self.clock = clock  # the engine's: when a listed receipt has expired
        self.tenant = tenant  # the engine's own: where embedded calls' request ids are kept

    async def find(
        self, *, receipt_id: object, request_id: object, caller: Caller | None
    ) -> FoundTransaction:
        receipt_key, request_key = check_key(receipt_id, request_id)
        named: ReceiptRow | None = None
        method = ""
        if receipt_key:
            named = await self._receipt(receipt_key, caller)
            tx_id = named.tx_id
        else:
            tx_id, method = await self._request(request_key, caller)
        await self.access.check(caller, tx_id, Action.READ)
        row = await self.store.get_transaction(tx_id)
        if row is None:
            shown = clip(receipt_key or request_key)
            key = f"receipt `{shown}`" if receipt_key else f"request_id `{shown}`"
            raise NotFound(
                f"{key} names transaction `{tx_id}`, which no longer exists (retention deleted it)"
            )
        rows = await self.store.list_receipts(tx_id, limit=VIEW_RECEIPTS)
        if named is not None and all(r.id != named.id for r in rows):
            rows.append(named)  # older than the newest ones: listed after them
        now = self.clock()
        return FoundTransaction(
            transaction_id=row.id,
            status=TxStatus(row.status),
            revision=row.revision,
            next_step_id=row.next_step_id,
            agent_id=row.agent_id,
            principal=str(row.body.get("principal", "")),
            tenant=row.tenant,
            labels=list(row.body.get("labels", [])),
            created_at=row.created_at,
            updated_at=row.updated_at,
            compensation_for=str(row.body.get("compensation_for", "")),
            result=terminal_result(row),
            receipts=[receipt_view(r, now, row) for r in rows],
            receipt_id=receipt_key,
            request_id=request_key,
            request_method=method,
        )

    async def _receipt(self, receipt_id: str, caller: Caller | None) -> ReceiptRow:
        found = await self.store.get_receipt(receipt_id)
        # Another tenant's receipt is not found, in the same words: its id tells nothing.
        if found is None or (caller is not None and found.tenant != caller.tenant):
            raise NotFound(
                f"receipt `{clip(receipt_id)}` not found: no transaction has it (a receipt "
                "is the receipt_id preview_commit returned; it goes when retention deletes "
                "its transaction)"
            )
        return found

    async def _request(self, request_id: str, caller: Caller | None) -> tuple[str, str]:
        """The transaction the call sent with ``request_id`` acted on, and which call it was."""
        tenant = caller.tenant if caller is not None else self.tenant
        stored = await self.store.get_request(tenant, request_id)
        if stored is None:
            raise NotFound(
                f"request_id `{clip(request_id)}` not found: no call of tenant `{tenant}` was "
                "sent with it, or its stored reply was pruned (replies are kept for the "
                "retention period, a day with retention off)"
            )
        tx_id = _reply_tx(stored)
        if tx_id:
            return tx_id, stored.method
        if stored.method == "begin":
            raise NotFound(
                f"request_id `{clip(request_id)}` was sent with a begin that was refused: it "
                "made no transaction"
            )
        raise NotFound(
            f"request_id `{clip(request_id)}` was sent with {stored.method} and refused before "
            "this AgentTx recorded each call's transaction (store schema 6): it names none"
        )
