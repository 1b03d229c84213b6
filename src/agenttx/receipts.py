"""Plain value types of preview, receipts and approvals (issue 13, points 1 and 2).

``Engine.preview_commit`` returns a ``Preview``: the exact ``ChangeSet`` a commit would make,
its ``change_hash`` (SHA-256 of the change set's canonical JSON: the same change gives the
same hash) and a **receipt** bound to that hash and to the transaction's revision.
``Engine.approve_commit`` returns an ``Approval``, ``Engine.refuse_commit`` a ``Refusal``.
``Snapshot`` is what every reply that shows a transaction's state carries for the caller to
echo (``commit(expected_revision=…)``).

Imports nothing of AgentTx but ``errors`` and ``types``: the engine, the adapters and the
client share these types.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from agenttx.types import CompensationAction, HasSnapshot, TxStatus


class Mode(enum.StrEnum):
    """How a transaction may commit, chosen at begin (``docs/safety.md``)."""

    TRANSACTIONAL = "transactional"  # commit as asked; the policy file may require approval
    APPROVAL_REQUIRED = "approval_required"  # commit needs an approved receipt, always
    # The caller is trusted to act alone: the policy's approval rules do not apply to it
    # (its forbid and cap rules do), and the policy may refuse the mode altogether.
    AUTONOMOUS_TRUSTED = "autonomous_trusted"


class ReceiptStatus(enum.StrEnum):
    """A receipt's status as a read shows it. The store keeps the first three; ``expired`` and
    ``voided`` are never stored: a read shows them for an issued or approved receipt that no
    commit used — ``expired`` once the engine's clock reached its ``expires_at``, else
    ``voided`` once the transaction moved past it (``core/reads.py``)."""

    ISSUED = "issued"  # made by a preview; commits where no approval is needed
    APPROVED = "approved"  # approved once, by a principal other than the transaction's
    # Refused once, by such a principal, with a reason: never approved or committed with.
    REFUSED = "refused"
    # Past ``expires_at``, unused: it can no longer be approved, refused or committed with
    # (preview again). ``decided_by`` still names an approver who approved it in time.
    EXPIRED = "expired"
    # Its transaction moved past it unused: a later step, undo or rewind grew the revision, or
    # the transaction ended without it (rolled back, failed, committed with another receipt).
    # Like ``expired``, only a new preview helps; a receipt both voided and expired shows
    # ``expired``, the refusal a decision on it gives first.
    VOIDED = "voided"


def voided_because(receipt_revision: int, revision: int, status: str) -> str:
    """Why a ``voided`` receipt no longer stands, in the words every surface uses (``tx show``,
    MCP ``get_transaction``, ``wait_for_approval``): ``receipt_revision`` is the revision it
    was made at; ``revision`` and ``status`` are its transaction's now."""
    if status == TxStatus.COMMITTED.value:
        return "the transaction was committed without it"
    if status in TxStatus.__members__ and TxStatus(status).terminal:
        return f"the transaction ended {status} without using it"
    return f"revision {receipt_revision} moved to {revision}"


@dataclass(frozen=True, slots=True)
class StateChange:
    """One key of managed state the commit publishes. ``before``/``after`` are the JSON
    values (None: absent / deleted); a value over the preview's display limit is shown as
    ``{"elided": true, "bytes": n, "sha256": …}`` — the hash always covers the full text."""

    key: str
    before: Any
    after: Any
    before_sha256: str  # "" iff absent
    after_sha256: str  # "" iff deleted


@dataclass(frozen=True, slots=True)
class FileChange:
    """A file the transaction wrote in the sandbox (``fs.write``): it is on disk already, and
    the commit keeps it (the undo that would restore ``before`` is discarded)."""

    path: str  # relative to the sandbox root
    before_sha256: str  # "" iff the file did not exist
    after_sha256: str  # "" iff it does not exist now
    diff: str  # a unified diff for UTF-8 text within the diff limit, else ""
    note: str = ""  # why there is no diff (binary, too large), "" otherwise


@dataclass(frozen=True, slots=True)
class EffectChange:
    """A staged effect the commit releases (once, after it is durable)."""

    step_id: int
    channel: str
    idempotency_key: str
    payload_bytes: int
    payload_sha256: str
    summary: str  # the payload's JSON text, cut to the summary limit


@dataclass(frozen=True, slots=True)
class IrreversibleStep:
    """A step with an ``irreversible`` tool that already ran: no rollback can undo it."""

    step_id: int
    tool: str
    arguments_sha256: str


@dataclass(frozen=True, slots=True)
class UndoAction:
    """An undo the commit discards: after commit the step it undoes can no longer be
    compensated by a rollback."""

    step_id: int
    handler: str
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class ChangeSet:
    state: list[StateChange] = field(default_factory=list)  # sorted by key
    files: list[FileChange] = field(default_factory=list)  # sorted by path
    effects: list[EffectChange] = field(default_factory=list)  # in staging order
    irreversible: list[IrreversibleStep] = field(default_factory=list)  # by step
    discarded_undo: list[UndoAction] = field(default_factory=list)  # oldest first
    # State entries whose values were left out to keep the preview under its size limit
    # (their keys and hashes are still listed, and the change hash covers them).
    values_elided: int = 0

    @property
    def empty(self) -> bool:
        return not (self.state or self.files or self.effects or self.irreversible)


@dataclass(frozen=True, slots=True)
class Preview(HasSnapshot):
    """A change set and the receipt bound to it."""

    transaction_id: str
    receipt_id: str
    change_hash: str  # hex SHA-256 of the canonical change set
    revision: int  # the transaction's revision the receipt is bound to
    expires_at: float  # Unix seconds; the receipt is refused after it
    changes: ChangeSet
    approval_required: bool  # true iff the commit needs this receipt approved
    approval_reasons: list[str] = field(default_factory=list)  # why (mode, policy rules)
    mode: Mode = Mode.TRANSACTIONAL
    # What a rollback now, or a compensation once committed, would do to each undoable step,
    # newest first (``compensation_plan``): run, awaiting_approval, past_window or
    # not_supported, with the reason. Not in the change hash: it moves with the clock (a
    # window ends) while the change stays the same.
    compensation: list[CompensationAction] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Approval(HasSnapshot):
    """A receipt approved: the commit that names it may now run, once, while the
    transaction stays at ``revision`` with ``change_hash``."""

    transaction_id: str
    receipt_id: str
    change_hash: str
    revision: int
    approved_by: str
    approved_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Refusal(HasSnapshot):
    """A receipt refused: a commit naming it is refused (``ReceiptRefused`` ``refused``) with
    ``refused_by`` and ``reason``; the transaction stays open to be changed and previewed again,
    or rolled back. ``revision`` is the transaction's, unchanged by the refusal."""

    transaction_id: str
    receipt_id: str
    revision: int
    refused_by: str
    refused_at: float
    reason: str  # as given, with secret-looking text masked


__all__ = [
    "Approval",
    "ChangeSet",
    "EffectChange",
    "FileChange",
    "IrreversibleStep",
    "Mode",
    "Preview",
    "ReceiptStatus",
    "Refusal",
    "StateChange",
    "UndoAction",
    "voided_because",
]
