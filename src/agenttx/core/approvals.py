"""Preview receipts, approvals and what a commit must show before it runs (``docs/safety.md``).

Invariants:

- A receipt is bound to the change hash and the transaction's revision it was made at. Every
  durable change of a transaction grows its revision, so any later step, rewind or undo
  voids every receipt made before it — and with it any approval of one.
- A receipt is decided at most once — approved, or refused with a reason:
  ``Store.approve_receipt`` and ``Store.refuse_receipt`` are compare-and-sets from ``issued``,
  so of two concurrent decisions (two approvals, an approval and a refusal) exactly one wins
  (on any store, across replicas); a second decision or a replay is refused. A refused
  receipt is never approved and never committed with; the transaction stays open.
- A receipt holds until the engine's clock reaches its ``expires_at``: from that instant an
  approval, a refusal and a commit naming it are ``ReceiptRefused`` ``expired`` (preview
  again), and reads show it ``expired`` unless the commit used it (``core/reads.py``). That
  check comes before the revision's (``_receipt`` before ``_still_current``), so a receipt a
  later change voided that has also expired is refused ``expired``, and reads show it so;
  one that has not expired reads ``voided``.
- A preview, an approval and a refusal change no revision (they change no state of the
  transaction: a receipt row and an audit record, in one store unit) — so a preview never
  voids the receipt it hands out.
- A commit that names a receipt, or that needs approval, has its change set rebuilt and
  hashed under the transaction's lock: it commits only the exact change that was previewed
  (and approved). A commit ends the transaction, so a receipt is used once.
- Preview, approval and refusal run under the transaction's lock, like every call on it; they
  append their audit records (``preview``, ``approval``, ``approval.refused``) after the
  chain's head.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agenttx.audit import AuditKind, AuditRecord
from agenttx.core.callargs import check_strings, check_text
from agenttx.core.changes import build_change_set
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.contracts import compensation_plan, kept_entries
from agenttx.core.images import TxImages

# One set of limits for whoever approves (commits here, compensations in compensation_approval).
from agenttx.core.limits import check_refusal_reason, check_role_list, check_transaction_id
from agenttx.core.runtime import TxRuntime
from agenttx.core.safety import SafetyPolicy
from agenttx.errors import (
    ApprovalRefused,
    ApprovalRequired,
    InvalidArgument,
    NotActive,
    OutcomeUnknownPending,
    PlanRequired,
    ReceiptRefused,
    SnapshotMismatch,
)
from agenttx.receipts import Approval, Mode, Preview, ReceiptStatus, Refusal
from agenttx.store.contract import ReceiptRow, Store
from agenttx.tools.registry import ToolRegistry
from agenttx.types import MAX_PRINCIPAL_BYTES, TxStatus

APPROVER_ROLE = "approver"
MAX_RECEIPT_ID_BYTES = 64


def check_principal(name: str, principal: object) -> str:
    value = check_text(name, principal)
    if len(value.encode("utf-8")) > MAX_PRINCIPAL_BYTES:
        raise InvalidArgument(f"{name} exceeds {MAX_PRINCIPAL_BYTES} bytes")
    return value


def check_receipt_id(receipt_id: object) -> str:
    value = check_text("receipt_id", receipt_id)
    if not value:
        raise InvalidArgument("receipt_id is required (the receipt_id preview_commit returned)")
    if len(value.encode("utf-8")) > MAX_RECEIPT_ID_BYTES:
        raise InvalidArgument(
            f"receipt_id exceeds {MAX_RECEIPT_ID_BYTES} bytes; no receipt has such an id"
        )
    return value


def check_roles(roles: object) -> list[str]:
    """The roles an approval claims: strings, within the limits every approval has."""
    values = check_strings("roles", roles)
    check_role_list(values)
    return values


def mode_of(rt: TxRuntime) -> Mode:
    return Mode(str(rt.body.get("mode", Mode.TRANSACTIONAL.value)))


class Approvals:
    def __init__(
        self,
        images: TxImages,
        store: Store,
        config: EngineConfig,
        safety: SafetyPolicy,
        registry: ToolRegistry,
        clock: Clock,
    ) -> None:
        self.images = images  # the lock and the audit chain of each transaction
        self.store = store  # receipts, and the committed values a preview compares against
        self.config = config  # receipt_ttl_s, fs_root
        self.safety = safety  # the policy file's approval rules (the default has none)
        self.registry = registry  # each step's tool: its compensation contract and window
        self.clock = clock

    # ------------------------------------------------------------------ preview

    async def preview(self, transaction_id: str) -> Preview:
        check_transaction_id(transaction_id)
        async with self.images.locked(transaction_id) as rt:
            self._open(rt, "preview a commit")
            changes, change_hash = await build_change_set(rt, self.store, self.config.fs_root)
            reasons = self.approval_reasons(rt)
            now = self.clock()
            # What undoing the steps would do, from the same image and time as the change set.
            kept = kept_entries(rt.steps, rt.undo, self.registry, self.config.compensation_keep_s)
            plan = compensation_plan(rt.transaction_id, kept, rt.undo, now)
            row = ReceiptRow(
                id=f"rcpt_{uuid.uuid4().hex}",
                tx_id=rt.transaction_id,
                tenant=rt.row.tenant,
                revision=rt.row.revision,
                change_hash=change_hash,
                status=ReceiptStatus.ISSUED.value,
                created_at=now,
                expires_at=now + self.config.receipt_ttl_s,
                detail={"approval_reasons": reasons},
            )
            event = {
                "receipt_id": row.id,
                "change_hash": change_hash,
                "expires_at": row.expires_at,
                "approval_required": bool(reasons),
                "state": len(changes.state),
                "files": len(changes.files),
                "effects": len(changes.effects),
                "irreversible": len(changes.irreversible),
                "discarded_undo": len(changes.discarded_undo),
            }
            audit = self.images.chain(rt, rt.row.revision, now, (AuditKind.PREVIEW, event))
            sealed = self.images.seal_seq(rt)  # the steps' pending records go first
            await self.store.put_receipt(row, audit, audit_seq=sealed)
            self.images.appended(rt, audit, sealed)
            return Preview(
                transaction_id=rt.transaction_id,
                receipt_id=row.id,
                change_hash=change_hash,
                revision=row.revision,
                expires_at=row.expires_at,
                changes=changes,
                approval_required=bool(reasons),
                approval_reasons=reasons,
                mode=mode_of(rt),
                compensation=plan.actions,
            )

    # ------------------------------------------------------------------ approval

    async def approve(
        self, transaction_id: str, receipt_id: str, principal: str, roles: Sequence[str]
    ) -> Approval:
        check_transaction_id(transaction_id)
        receipt_id = check_receipt_id(receipt_id)
        principal = check_principal("principal", principal)
        role_list = check_roles(roles)
        _may_decide(transaction_id, receipt_id, principal, role_list, "approval")
        async with self.images.locked(transaction_id) as rt:
            receipt = await self._decidable(rt, receipt_id, principal, "approval")

            def write(now: float, audit: Sequence[AuditRecord], sealed: int) -> Awaitable[bool]:
                return self.store.approve_receipt(
                    receipt_id, approved_by=principal, at=now, audit=audit, audit_seq=sealed
                )

            now = await self._decide(
                rt, receipt, principal, role_list, "approval", AuditKind.APPROVAL, {}, write
            )
            return Approval(
                transaction_id=rt.transaction_id,
                receipt_id=receipt_id,
                change_hash=receipt.change_hash,
                revision=receipt.revision,
                approved_by=principal,
                approved_at=now,
                expires_at=receipt.expires_at,
            )

    async def _decidable(
        self, rt: TxRuntime, receipt_id: str, principal: str, what: str
    ) -> ReceiptRow:
        """The receipt an approval or a refusal (``what``) answers: the transaction open, the
        receipt this transaction's, undecided, and still current — a receipt a later change
        voided can be neither approved nor refused: the approver would answer a preview that
        no longer stands (SnapshotMismatch)."""
        verb = "approve" if what == "approval" else "refuse"
        self._open(rt, f"{verb} a commit")
        receipt = await self._undecided(rt, receipt_id, principal, what)
        await self._still_current(rt, receipt)
        return receipt

    async def _decide(
        self,
        rt: TxRuntime,
        receipt: ReceiptRow,
        principal: str,
        role_list: Sequence[str],
        what: str,
        kind: AuditKind,
        more: dict[str, Any],
        write: Callable[[float, Sequence[AuditRecord], int], Awaitable[bool]],
    ) -> float:
        """Record the decision: ``write`` is the store's compare-and-set from ``issued``,
        given the time, the decision's audit record (after the pending step records) and the
        watermark they seal; of two decisions one wins, the other is refused (``_lost``).
        Returns the decision's time."""
        now = self.clock()
        event = {
            "receipt_id": receipt.id,
            "principal": principal,
            "roles": sorted(role_list),
            "change_hash": receipt.change_hash,
            "receipt_revision": receipt.revision,
            **more,
        }
        audit = self.images.chain(rt, rt.row.revision, now, (kind, event))
        sealed = self.images.seal_seq(rt)
        if not await write(now, audit, sealed):
            await self._lost(rt, receipt.id, what)
        self.images.appended(rt, audit, sealed)
        return now

    # ------------------------------------------------------------------ refusal

    async def refuse(
        self,
        transaction_id: str,
        receipt_id: str,
        principal: str,
        roles: Sequence[str],
        reason: str,
    ) -> Refusal:
        """Refuse the receipt, once, with ``reason`` (checked and masked by the caller): the
        same rules as an approval for who may, the same checks of the receipt. The
        transaction stays ACTIVE at its revision; a commit naming the receipt is refused."""
        check_transaction_id(transaction_id)
        receipt_id = check_receipt_id(receipt_id)
        principal = check_principal("principal", principal)
        role_list = check_roles(roles)
        check_refusal_reason(reason)
        _may_decide(transaction_id, receipt_id, principal, role_list, "refusal")
        async with self.images.locked(transaction_id) as rt:
            receipt = await self._decidable(rt, receipt_id, principal, "refusal")

            def write(now: float, audit: Sequence[AuditRecord], sealed: int) -> Awaitable[bool]:
                return self.store.refuse_receipt(
                    receipt_id,
                    refused_by=principal,
                    at=now,
                    detail=dict(receipt.detail, refusal_reason=reason),
                    audit=audit,
                    audit_seq=sealed,
                )

            now = await self._decide(
                rt,
                receipt,
                principal,
                role_list,
                "refusal",
                AuditKind.APPROVAL_REFUSED,
                {"reason": reason},
                write,
            )
            return Refusal(
                transaction_id=rt.transaction_id,
                receipt_id=receipt_id,
                revision=rt.row.revision,
                refused_by=principal,
                refused_at=now,
                reason=reason,
            )

    # ------------------------------------------------------------------ commit admission

    async def admit_commit(
        self, rt: TxRuntime, expected_revision: int | None, receipt_id: str
    ) -> dict[str, Any]:
        """Called by the committer under the lock, before anything is written: refuse a commit
        whose snapshot moved, whose receipt does not hold, or that needs an approval it does
        not have. Returns what the commit's audit record adds (the receipt and approver)."""
        tx = rt.transaction_id
        if expected_revision is not None and expected_revision != rt.row.revision:
            raise SnapshotMismatch(tx, expected_revision, rt.row.revision)
        reasons = self.approval_reasons(rt)
        receipt: ReceiptRow | None = None
        if receipt_id:
            receipt = await self._receipt(rt, receipt_id)
            if receipt.status == ReceiptStatus.REFUSED.value:
                raise ReceiptRefused(tx, receipt.id, "refused", _refused_words(receipt))
            await self._still_current(rt, receipt)
        if reasons:
            if receipt is None:
                raise ApprovalRequired(
                    tx,
                    "",
                    "; ".join(reasons) + ". Preview it, have an approver approve the "
                    "preview's receipt, then commit with that receipt",
                )
            if receipt.status != ReceiptStatus.APPROVED.value:
                raise ApprovalRequired(
                    tx,
                    receipt.id,
                    f"receipt {receipt.id} is not approved yet ("
                    + "; ".join(reasons)
                    + "); an approver must approve it",
                )
        if receipt is None:
            planned = self.plan_required_by(rt)
            if planned:
                raise PlanRequired(tx, ", ".join(planned))
            return {}
        return {"receipt_id": receipt.id, "approved_by": receipt.approved_by}

    def plan_required_by(self, rt: TxRuntime) -> list[str]:
        """The tools of the transaction's steps that require a plan before commit, in order."""
        named: list[str] = []
        for st in rt.steps.values():
            tool = self.registry.get(st.tool)
            if tool is not None and tool.requires_plan_before_commit and st.tool not in named:
                named.append(st.tool)
        return named

    def approval_reasons(self, rt: TxRuntime) -> list[str]:
        """Why this transaction's commit needs an approved receipt (empty: it does not)."""
        return self.safety.commit_approval_reasons(
            mode_of(rt), rt.row.tenant, [(st.tool, st.effect) for st in rt.steps.values()]
        )

    # ------------------------------------------------------------------ shared checks

    @staticmethod
    def _open(rt: TxRuntime, action: str) -> None:
        status = TxStatus(rt.row.status)
        if status is not TxStatus.ACTIVE:
            raise NotActive(rt.transaction_id, status.value, action)
        if rt.body.get("outcome_unknown_step"):
            raise OutcomeUnknownPending(rt.transaction_id, int(rt.body["outcome_unknown_step"]))

    async def _receipt(self, rt: TxRuntime, receipt_id: str) -> ReceiptRow:
        tx = rt.transaction_id
        receipt = await self.store.get_receipt(receipt_id)
        if receipt is None:
            raise ReceiptRefused(tx, receipt_id, "unknown", "no such receipt")
        if receipt.tx_id != tx or receipt.tenant != rt.row.tenant:
            raise ReceiptRefused(tx, receipt_id, "foreign", "it belongs to another transaction")
        now = self.clock()
        if now >= receipt.expires_at:
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(receipt.expires_at))
            raise ReceiptRefused(
                tx,
                receipt_id,
                "expired",
                f"it expired at {at}, {now - receipt.expires_at:.0f} s ago (receipts last "
                f"{self.config.receipt_ttl_s:.0f} s)",
            )
        return receipt

    async def _undecided(
        self, rt: TxRuntime, receipt_id: str, principal: str, decision: str
    ) -> ReceiptRow:
        """The receipt, if ``principal`` may decide it now: it holds, it is still ``issued``,
        and ``principal`` did not begin the transaction."""
        tx = rt.transaction_id
        receipt = await self._receipt(rt, receipt_id)
        if receipt.status == ReceiptStatus.APPROVED.value:
            # An approval a later change voided leaves no decision to answer: a read shows the
            # receipt ``voided``, and so does this refusal — not "approved already; commit
            # with it", which the commit would then refuse.
            _same_revision(rt, receipt)
        if receipt.status != ReceiptStatus.ISSUED.value:
            raise _decided(tx, receipt, decision, "already")
        owner = str(rt.body.get("principal", ""))
        if owner and principal == owner:
            verb = "approve" if decision == "approval" else "refuse"
            raise ApprovalRefused(
                tx,
                receipt_id,
                "same_principal",
                f"{principal!r} began the transaction; a different principal must {verb}",
                decision=decision,
            )
        return receipt

    async def _lost(self, rt: TxRuntime, receipt_id: str, decision: str) -> None:
        """Raise for a decision whose compare-and-set lost: name the decision that won."""
        current = await self.store.get_receipt(receipt_id)
        if current is None:  # pruned meanwhile: say it as the receipt check would
            raise ReceiptRefused(rt.transaction_id, receipt_id, "unknown", "no such receipt")
        raise _decided(rt.transaction_id, current, decision, "at the same time")

    async def _still_current(self, rt: TxRuntime, receipt: ReceiptRow) -> None:
        """The receipt's snapshot is the transaction's now: same revision, same change."""
        tx = rt.transaction_id
        _same_revision(rt, receipt)
        _, change_hash = await build_change_set(rt, self.store, self.config.fs_root)
        if change_hash != receipt.change_hash:
            raise SnapshotMismatch(
                tx,
                receipt.revision,
                rt.row.revision,
                f"the change differs from receipt {receipt.id}'s (committed values or files "
                "changed outside the transaction)",
            )


def _same_revision(rt: TxRuntime, receipt: ReceiptRow) -> None:
    """Refuse a receipt made at another revision than the transaction's now: a later change
    voided it (reads show it ``voided``)."""
    if receipt.revision != rt.row.revision:
        raise SnapshotMismatch(
            rt.transaction_id,
            receipt.revision,
            rt.row.revision,
            f"receipt {receipt.id} was made at revision {receipt.revision}; a later change "
            "voided it",
        )


def _may_decide(
    transaction_id: str, receipt_id: str, principal: str, roles: list[str], decision: str
) -> None:
    """Who may approve or refuse a receipt: a named principal holding ``approver`` (that it
    is not the transaction's own is checked under the lock)."""
    if not principal:
        raise ApprovalRefused(
            transaction_id,
            receipt_id,
            "no_principal",
            f"a {decision} names its principal",
            decision=decision,
        )
    if APPROVER_ROLE not in roles:
        raise ApprovalRefused(
            transaction_id,
            receipt_id,
            "not_approver",
            f"principal {principal!r} does not hold the {APPROVER_ROLE!r} role",
            decision=decision,
        )


def _refused_words(receipt: ReceiptRow) -> str:
    return f"it was refused by {receipt.approved_by!r}: {receipt.refusal_reason}"


def _decided(tx: str, receipt: ReceiptRow, decision: str, when: str) -> ApprovalRefused:
    """The refusal of a second decision of ``receipt``, naming the first (``when``: "already",
    or "at the same time" for a lost race)."""
    if receipt.status == ReceiptStatus.REFUSED.value:
        return ApprovalRefused(
            tx,
            receipt.id,
            "already_refused",
            f"it was refused by {receipt.approved_by!r} {when} ({receipt.refusal_reason}); a "
            "receipt is decided once and a refused one is never approved: change the "
            "transaction and preview it again",
            decision=decision,
        )
    return ApprovalRefused(
        tx,
        receipt.id,
        "already_approved",
        f"it was approved by {receipt.approved_by!r} {when}; a receipt is decided once (to "
        "stop its commit, the transaction must change or be rolled back)"
        if decision == "refusal"
        else f"it was approved by {receipt.approved_by!r} {when}; a receipt is approved once",
        decision=decision,
    )
