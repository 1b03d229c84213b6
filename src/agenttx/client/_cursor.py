"""The state both transaction helpers keep: where the transaction is and what to send next.

Invariants:

- ``next_step_id`` is the step id the server expects, as its last reply said (0 once ended);
  the helper never makes one up.
- ``_ledger`` (``StepLedger``, the one rule the framework integrations keep too) holds the
  steps that succeeded and stand, and the steps a server-side rollback (``RollbackTriggered``)
  rewound and that no later success at the same id replaced. Leaving the ``with`` block with
  such a step owed would commit without it, so the helper refuses (``StepsNotRedone``). A
  rollback the caller asks for (``tx.rollback(to_step)``) is the caller's decision: it drops
  steps silently.
- A request whose reply never arrived (the server was unreachable, or the deadline passed)
  keeps its request_id: calling the same method again with the same payload resends that id,
  so the server replays the first outcome instead of running the request twice.
- ``last_preview`` is the newest ``tx.preview()``; once there is one, every commit the helper
  makes (``tx.commit()``, the block's end) names its receipt and its revision, so the helper
  commits exactly what was last previewed, or nothing: a change since is ``SnapshotMismatch``
  (preview again), an unapproved receipt ``ApprovalRequired``, a refused one
  ``ReceiptRefused``. Explicit ``commit(expected_revision=…, receipt_id=…)`` arguments win.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from agenttx.client._approval_wait import ApprovalWait
from agenttx.client._errors import (
    OutcomeUnknown,
    RollbackTriggered,
    ServerUnavailable,
    StepsNotRedone,
    TransactionAborted,
)
from agenttx.client._ledger import StepLedger
from agenttx.client._loop import AgentTurn
from agenttx.client._wire import PolicyArg
from agenttx.errors import (
    AgentTxError,
    CommitConflict,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotActive,
)
from agenttx.receipts import Preview
from agenttx.types import (
    BeginResult,
    CommitResult,
    ReceiptView,
    RollbackResult,
    StepResult,
    StepStatus,
    TransactionInfo,
    TxStatus,
    UndoResult,
)

_REPLY_MAY_BE_LOST = (ServerUnavailable, DeadlineExceeded)


# The client a helper sends through: the blocking one or the asyncio one.
Client = TypeVar("Client")


class TransactionCursor(Generic[Client]):
    """A transaction as the agent loop sees it; subclassed by the sync and async helpers."""

    def __init__(
        self,
        client: Client,
        agent_id: str,
        metadata: Mapping[str, str] | None,
        policy: PolicyArg,
        isolation: str,
        labels: Sequence[str],
        principal: str = "",
        mode: str = "",
    ) -> None:
        self.client = client
        self._begin_args: dict[str, Any] = {
            "agent_id": agent_id,
            "metadata": metadata,
            "policy": policy,
            "isolation": isolation,
            "labels": labels,
            "principal": principal,
            "mode": mode,
        }
        self.transaction_id = ""
        self.next_step_id = 0  # the step the server expects next; 0 once the transaction ended
        self.constraints: list[str] = []  # what the failures so far taught; show them to the agent
        self.status: TxStatus | None = None  # None until begun
        self.last_result: StepResult | None = None
        self._pending: tuple[tuple[Any, ...], str] | None = None  # (payload, request_id)
        self._ledger = StepLedger()  # what stands, and what a server-side rewind left owed
        # Steps this helper undid (undo_step), newest last, as (step id, (tool, output)): a
        # redo puts the newest back among the standing ones.
        self._undone: list[tuple[int, tuple[str, Any]]] = []
        # The newest tx.preview() (None until one): what every commit of the helper binds to.
        self.last_preview: Preview | None = None
        self._previewed_at = 0.0  # time.monotonic() when last_preview's reply arrived

    @property
    def to_redo(self) -> dict[int, str]:
        """The steps the server rolled back that were not redone yet: step id -> tool."""
        return self._ledger.to_redo()

    @property
    def outputs(self) -> dict[int, Any]:
        """The output of every step that stands (succeeded and not rewound), by step id."""
        return self._ledger.outputs()

    @property
    def ended(self) -> bool:
        """True iff the transaction reached COMMITTED, ROLLED_BACK or FAILED."""
        return self.status is not None and self.status.terminal

    def __repr__(self) -> str:
        status = self.status.value if self.status else "NOT_BEGUN"
        return (
            f"<{type(self).__name__} {self.transaction_id or '-'} {status} "
            f"next_step_id={self.next_step_id}>"
        )

    # ------------------------------------------------------------------ before a call

    def _begin_request_id(self) -> str:
        if self.status is not None:
            raise FailedPrecondition(f"transaction {self.transaction_id} was already begun")
        return self._request_id(("begin",))

    def _open_request_id(self, payload: tuple[Any, ...], action: str) -> str:
        self._check_open(action)
        return self._request_id(payload)

    def _check_open(self, action: str) -> None:
        if self.status is None:
            raise FailedPrecondition(
                "the transaction was not begun; use `with client.transaction(...) as tx` "
                "or call tx.begin() first"
            )
        if self.ended:
            raise NotActive(self.transaction_id, self.status.value, action)

    def _commit_args(
        self, expected_revision: int | None, receipt_id: str | None
    ) -> tuple[int | None, str]:
        """What a commit sends: the arguments given, else the last preview's receipt and
        revision (``receipt_id=""`` commits without a receipt, as asked)."""
        p = self.last_preview
        if receipt_id is None:
            receipt_id = p.receipt_id if p is not None else ""
        if expected_revision is None and p is not None and receipt_id == p.receipt_id:
            expected_revision = p.revision
        return expected_revision, receipt_id

    def _previewed(self, p: Preview) -> Preview:
        self.last_preview = p
        self._previewed_at = time.monotonic()
        return p

    def _approval_wait(self, max_wait: float, interval: float) -> ApprovalWait:
        """A wait on the last preview's receipt (``wait_for_approval``)."""
        if self.last_preview is None:
            raise FailedPrecondition(
                "nothing to wait for: call tx.preview() first, and have an approver approve "
                "its receipt"
            )
        if not (max_wait > 0 and interval > 0):
            raise InvalidArgument(
                f"max_wait and interval must be positive seconds, got {max_wait!r} and {interval!r}"
            )
        return ApprovalWait(
            self.transaction_id, self.last_preview, self._previewed_at, max_wait, interval
        )

    def _waited(self, wait: ApprovalWait, info: TransactionInfo) -> ReceiptView | float:
        """``wait``'s answer to this read (the approved receipt, or seconds to sleep); a
        transaction found ended is ended for the helper too (its block's end does nothing)."""
        if info.status.terminal:
            self.status, self.next_step_id = info.status, 0
        return wait.poll(info)

    def _request_id(self, payload: tuple[Any, ...]) -> str:
        if self._pending is not None and self._pending[0] == payload:
            return self._pending[1]
        rid = uuid.uuid4().hex
        self._pending = (payload, rid)
        return rid

    # ------------------------------------------------------------------ after a call

    @contextlib.contextmanager
    def _sending(self) -> Iterator[None]:
        """Around a call that moves this transaction: a refusal is taken in (``_failed``)
        before it reaches the caller. A plain context manager, so that one serves both
        helpers: the asyncio one awaits inside it."""
        try:
            yield
        except AgentTxError as exc:
            self._failed(exc)
            raise

    def _failed(self, exc: AgentTxError) -> None:
        if not isinstance(exc, _REPLY_MAY_BE_LOST):
            self._pending = None
        if isinstance(exc, CommitConflict):
            self.status, self.next_step_id = TxStatus.FAILED, 0
        elif isinstance(exc, NotActive) and exc.status in TxStatus.__members__:
            self.status = TxStatus(exc.status)
            if self.status.terminal:
                self.next_step_id = 0

    def _begun(self, r: BeginResult) -> BeginResult:
        self._pending = None
        self.transaction_id = r.transaction_id
        self.next_step_id = r.next_step_id
        self.status = r.transaction_status
        return r

    def _stepped(self, r: StepResult, tool: str) -> Any:
        """Take the reply in; return the output, or raise what the step's status means."""
        self._pending = None
        self._undone.clear()  # any step ends what a redo could put back
        self.last_result = r
        self.next_step_id = r.next_step_id
        self.constraints = list(r.constraints)
        self.status = r.transaction_status
        if r.status is StepStatus.SUCCESS:
            self._ledger.succeeded(r.step_id, tool, r.output)
            return r.output
        if r.status is StepStatus.ROLLBACK_TRIGGERED:
            # Every step from next_step_id on was undone by the server: owed until redone.
            self._ledger.rewound(r.next_step_id)
            raise RollbackTriggered(r)
        if r.status is StepStatus.FAILED:
            raise TransactionAborted(r)
        raise OutcomeUnknown(r)

    def _committed(self, r: CommitResult) -> CommitResult:
        self._pending = None
        self.status, self.next_step_id = r.transaction_status, 0
        return r

    def _rolled_back(self, r: RollbackResult) -> RollbackResult:
        self._pending = None
        self.status, self.next_step_id = r.transaction_status, r.next_step_id
        self._ledger.dropped(r.next_step_id)  # the caller asked for this rewind: not owed
        return r

    def _undid(self, r: UndoResult) -> UndoResult:
        self._pending = None
        self.status, self.next_step_id = r.transaction_status, r.next_step_id
        standing = self._ledger.standing.pop(r.step_id, None)
        if standing is not None:
            self._undone.append((r.step_id, standing))
        if not r.can_redo:
            self._undone.clear()
        return r

    def _redid(self, r: UndoResult) -> UndoResult:
        self._pending = None
        self.status, self.next_step_id = r.transaction_status, r.next_step_id
        if self._undone and self._undone[-1][0] == r.step_id:
            self._ledger.standing[r.step_id] = self._undone.pop()[1]
        return r

    def _unfinished(self) -> StepsNotRedone | None:
        """The error leaving the block now stands for, if steps the server rewound are owed."""
        owed = self._ledger.to_redo()
        if not owed:
            return None
        return StepsNotRedone(self.transaction_id, owed)

    def _turn(self, error: RollbackTriggered | None, calls: int) -> AgentTurn:
        return AgentTurn(
            next_step_id=self.next_step_id,
            clean_hint=error.clean_hint if error else "",
            constraints=tuple(self.constraints),
            context_reset=error.context_reset if error else False,
            error=error,
            to_redo=self.to_redo,
            outputs=self.outputs,
            calls=calls,
        )

    def _exit_reason(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        return f"aborted by the client on {text[:200]}"
