"""What ``wait_for_approval`` decides on each read of the transaction, for both helpers.

The sync and async helpers only read the transaction and sleep; everything else is here:
return the receipt once approved, raise at once when it can no longer be approved (refused,
expired, voided by a change, the transaction ended, or no longer listed), raise
``DeadlineExceeded`` after ``max_wait``, else say how long to sleep before the next read.

Expiry is measured on this process's monotonic clock from the moment the preview's reply
arrived, against the receipt's own lifetime (``expires_at - created_at``, both the server's):
no wall-clock skew between client and server can end a wait early. The server made the
receipt before its reply left, so the wait sees the expiry at most one preview round trip
after the server does — never before it. A read whose receipt the server already shows as
``expired`` (its own clock past ``expires_at``) ends the wait the same way, and one that shows
it ``voided`` ends it as a revision change does.

The reasons are looked at in the order the server decides a receipt: an ended transaction
first (``NotActive``), then a refusal, then expiry, then a change that voided it — so a
receipt both stale and expired ends the wait ``expired``, as a read of it shows and as an
approval or a commit of it would be refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agenttx.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    NotActive,
    ReceiptRefused,
    SnapshotMismatch,
)
from agenttx.receipts import Preview, ReceiptStatus, voided_because
from agenttx.types import ReceiptView, TransactionInfo, TxStatus


@dataclass(slots=True)
class ApprovalWait:
    """One ``wait_for_approval`` call on ``preview``'s receipt."""

    transaction_id: str
    preview: Preview
    previewed_at: float  # clock() when the preview's reply arrived
    max_wait: float  # seconds, > 0
    interval: float  # seconds between reads, > 0
    clock: Callable[[], float] = time.monotonic
    deadline: float = field(init=False)  # clock() at which the wait gives up

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.max_wait

    @property
    def receipt_id(self) -> str:
        return self.preview.receipt_id

    def poll(self, info: TransactionInfo) -> ReceiptView | float:
        """The receipt's view once approved, else the seconds to sleep before reading the
        transaction again; raises once the receipt can no longer be approved or ``max_wait``
        has passed."""
        rid = self.receipt_id
        if info.status.terminal:
            raise NotActive(self.transaction_id, info.status.value, _after_end(rid, info.status))
        # A transaction between states (a step running, a rewind or a commit under way) is
        # read again: where it settles (a new revision, an end) decides the receipt.
        now = self.clock()
        view = next((r for r in info.receipts if r.receipt_id == rid), None)
        moved = info.revision != self.preview.revision
        if view is None and moved:
            raise self._voided(info)
        if view is None:
            # Past the newest receipts the view lists: older than a newer preview, so not the
            # helper's last one (it made none since) — unless another client previewed
            # meanwhile.
            raise FailedPrecondition(
                f"receipt {rid} is no longer among transaction {self.transaction_id}'s "
                "newest receipts (other previews were made since); call tx.preview() again"
            )
        if view.status == ReceiptStatus.REFUSED.value:
            raise ReceiptRefused(
                self.transaction_id,
                rid,
                "refused",
                f"it was refused by {view.decided_by!r}: {view.reason}",
            )
        lifetime = view.expires_at - view.created_at
        # A view without both times (none today) leaves the expiry to the server's refusal.
        left = lifetime - (now - self.previewed_at) if lifetime > 0 else float("inf")
        # The server says so itself once its clock passed expires_at (a server older than
        # the ``expired`` status never does; the wait's own clock then decides alone).
        if left <= 0 or view.status == ReceiptStatus.EXPIRED.value:
            raise ReceiptRefused(self.transaction_id, rid, "expired", _expired(view, lifetime))
        # The server's ``voided`` is the revision check made on its side: the same end.
        if moved or view.status == ReceiptStatus.VOIDED.value:
            raise self._voided(info)
        if view.status == ReceiptStatus.APPROVED.value:
            return view
        waited = self.deadline - now
        if waited <= 0:
            raise DeadlineExceeded(
                f"receipt {rid} of transaction {self.transaction_id} was not decided within "
                f"{self.max_wait:g} s; wait again, or commit or roll back"
            )
        return min(self.interval, waited, left)

    def _voided(self, info: TransactionInfo) -> SnapshotMismatch:
        """The end of a wait on a receipt a later change voided: the error a commit with it
        gets, in the words ``tx show`` uses for a ``voided`` receipt."""
        made = self.preview.revision
        why = voided_because(made, info.revision, info.status.value)
        return SnapshotMismatch(
            self.transaction_id,
            made,
            info.revision,
            f"receipt {self.receipt_id} was made at revision {made}; a later change voided it "
            f"({why}): call tx.preview() again",
        )


def _after_end(receipt_id: str, status: TxStatus) -> str:
    """``NotActive``'s action: what the wait was for, and what is left to do."""
    if status is TxStatus.COMMITTED:
        then = "it was committed meanwhile; nothing is left to approve"
    else:
        then = (
            "an ended transaction's receipts can no longer be approved or used; begin a new "
            "transaction to make the change again"
        )
    return f"wait for receipt {receipt_id} to be approved ({then})"


def _expired(view: ReceiptView, lifetime: float) -> str:
    ttl = f"receipts last {lifetime:g} s on this server: --receipt-ttl-s"
    # An approved receipt the server shows as expired still names its approver.
    if view.status == ReceiptStatus.APPROVED.value or view.decided_by:
        return (
            f"it was approved by {view.decided_by!r} but expired before a commit used it "
            f"({ttl}), so the commit would be refused"
        )
    return f"it expired before an approver decided it ({ttl})"
