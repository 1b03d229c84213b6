"""What each event of a transaction puts in its audit chain, and reading chains back.

The engine's parts append records with the write of the event they record: each builds its
event with one call here (``step_event``, ``rollback_event`` …) and hands it to the update
(``TxImages.update(..., audit=[event])``); ``TxImages.chain`` places it after the chain's head.
The record data says what happened without copying what the journal holds: arguments and
outputs are bound by their SHA-256, so a record stays small and holds no secrets a tool was
given, yet proves which journal content it recorded. ``docs/audit.md`` lists each kind's data.

``AuditReader`` reads chains and verifies them against the store's anchors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from agenttx.audit import (
    AuditKeys,
    AuditKind,
    AuditRecord,
    AuditVerification,
    canonical,
    json_string,
    text_digest,
    verify_chain,
)
from agenttx.core.limits import check_transaction_id
from agenttx.errors import NotFound, clip
from agenttx.store.contract import StepRow, Store, UndoRow

Event = tuple[str, Mapping[str, Any]]

# A step row's status → the event its write records.
_STEP_KINDS = {
    "RUNNING": AuditKind.STEP_STARTED.value,
    "SUCCESS": AuditKind.STEP_SUCCEEDED.value,
    "FAILED": AuditKind.STEP_FAILED.value,
    "OUTCOME_UNKNOWN": AuditKind.STEP_OUTCOME_UNKNOWN.value,
}
_ERROR_CHARS = 500  # an error text kept in a record: enough to read, bounded


def step_event(row: StepRow) -> Event:
    """The event a step row's write records, by its status."""
    data: dict[str, Any] = {
        "step": row.step_id,
        "attempt": row.attempt,
        "epoch": row.epoch,
        "tool": row.tool,
        "effect": row.effect,
        "arguments_sha256": text_digest(row.arguments_json),
    }
    detail = row.detail
    if row.output_json:
        data["output_sha256"] = text_digest(row.output_json)
    if "hint" in detail:
        data["hint"] = detail["hint"]
        data["category"] = detail.get("category", "")
    if "w" in detail:
        data["writes"] = len(detail["w"])
    if "fx" in detail:
        data["effects"] = len(detail["fx"])
    if "undo" in detail:
        data["undo"] = detail["undo"]
    if "rid" in detail:
        data["request_id"] = detail["rid"]
    return _STEP_KINDS.get(row.status, AuditKind.STEP_FAILED.value), data


def step_event_text(row: StepRow) -> tuple[str, str]:
    """``step_event`` as (kind, the data's canonical text), written out directly: the same
    text ``canonical(step_event(row)[1])`` gives (tested), without building the dict and
    sorting its keys, because every step makes one. Keys in sorted order."""
    detail = row.detail
    parts = [f'{{"arguments_sha256":"{text_digest(row.arguments_json)}","attempt":{row.attempt}']
    if "hint" in detail:
        parts.append(f',"category":{canonical(detail.get("category", ""))}')
    parts.append(f',"effect":{json_string(row.effect)}')
    if "fx" in detail:
        parts.append(f',"effects":{len(detail["fx"])}')
    parts.append(f',"epoch":{row.epoch}')
    if "hint" in detail:
        parts.append(f',"hint":{canonical(detail["hint"])}')
    if row.output_json:
        parts.append(f',"output_sha256":"{text_digest(row.output_json)}"')
    if "rid" in detail:
        parts.append(f',"request_id":{canonical(detail["rid"])}')
    parts.append(f',"step":{row.step_id},"tool":{json_string(row.tool)}')
    if "undo" in detail:
        parts.append(f',"undo":{canonical(detail["undo"])}')
    if "w" in detail:
        parts.append(f',"writes":{len(detail["w"])}')
    parts.append("}")
    return _STEP_KINDS.get(row.status, AuditKind.STEP_FAILED.value), "".join(parts)


def rollback_event(
    kind: AuditKind, target: int, final: str, cause: Mapping[str, Any], **more: Any
) -> Event:
    """A rewind: to ``target`` (0: everything), ending in ``final``, and why (``cause``: the
    strategy and what triggered it)."""
    return kind.value, {"target": target, "final": final, **cause, **more}


def compensation_event(row: UndoRow) -> Event:
    """One undo handler's run, as its record in the undo log now says."""
    data: dict[str, Any] = {
        "undo_id": row.id,
        "step": row.step_id,
        "handler": row.handler,
        "idempotency_key": row.idempotency_key,
        "outcome": row.status,
        "attempts": row.attempts,
    }
    if row.last_error:
        data["error"] = row.last_error[:_ERROR_CHARS]
    return AuditKind.COMPENSATION.value, data


class AuditReader:
    """Chains as stored, and their verification (with ``keys``, the audit keys the verifier
    holds: every surface that verifies comes here). Reads only."""

    PAGE = 1000  # records per store read while a chain is walked

    def __init__(self, store: Store, keys: AuditKeys | None = None) -> None:
        self.store = store
        self.keys = keys

    async def records(
        self, transaction_id: str, *, after_seq: int = 0, limit: int = 10_000
    ) -> list[AuditRecord]:
        check_transaction_id(transaction_id)
        return await self.store.load_audit(transaction_id, after_seq=after_seq, limit=limit)

    async def chain(self, transaction_id: str) -> AsyncIterator[AuditRecord]:
        """Every record of the chain, in order, a page at a time."""
        after = 0
        while True:
            page = await self.records(transaction_id, after_seq=after, limit=self.PAGE)
            for rec in page:
                yield rec
            if len(page) < self.PAGE:
                return
            after = page[-1].seq

    async def verify(self, transaction_id: str) -> AuditVerification:
        """The chain of ``transaction_id`` checked. ``NotFound`` when the store knows nothing
        of it — no record, no row, no delivery, no retention tombstone: an id that never
        existed (mistyped, another store's) is not a damaged chain. A transaction the store
        knows with no records left is one (``ok`` false, "no audit records")."""
        records = [rec async for rec in self.chain(transaction_id)]
        anchor = await self.store.audit_anchor(transaction_id)
        if not records and not anchor.revision and anchor.end is None and not anchor.deliveries:
            raise NotFound(
                f"transaction `{clip(transaction_id)}` not found: this store has no audit "
                "chain, row or tombstone of it (check the id and the store)"
            )
        return verify_chain(transaction_id, records, anchor, self.keys)

    async def verify_page(
        self, *, after_id: str = "", limit: int = 100
    ) -> tuple[list[AuditVerification], str]:
        """Up to ``limit`` chains after ``after_id`` checked, in transaction id order, and the
        id to continue after ("" when there are no more)."""
        ids = await self.store.list_audited(after_id=after_id, limit=limit)
        results = []
        for tx_id in ids:
            try:
                results.append(await self.verify(tx_id))
            except NotFound:  # listed, then gone with no trace: nothing left to check
                continue
        return results, ids[-1] if len(ids) == limit else ""

    async def verify_all(self) -> AsyncIterator[AuditVerification]:
        """Every chain of the store (and every transaction with none), in id order."""
        after = ""
        while True:
            page, after = await self.verify_page(after_id=after, limit=500)
            for v in page:
                yield v
            if not after:
                return


def cause(strategy: str, trigger: str, **more: Any) -> dict[str, Any]:
    """Why a rewind runs: its strategy (``Strategy`` value) and what triggered it."""
    return {"strategy": strategy, "trigger": trigger, **more}
