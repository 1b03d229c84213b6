"""The state both transaction helpers keep: where the transaction is and what to send next.

Invariants:

- ``next_step_id`` is the step id the server expects, as its last reply said (0 once ended);
  the helper never makes one up.
- A request whose reply never arrived (the server was unreachable, or the deadline passed)
  keeps its request_id: calling the same method again with the same payload resends that id,
  so the server replays the first outcome instead of running the request twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agenttx.client._errors import (
    OutcomeUnknown,
    RollbackTriggered,
    ServerUnavailable,
    TransactionAborted,
)
from agenttx.client._wire import PolicyArg
from agenttx.errors import (
    AgentTxError,
    CommitConflict,
    DeadlineExceeded,
    FailedPrecondition,
    NotActive,
)
from agenttx.types import (
    BeginResult,
    CommitResult,
    RollbackResult,
    StepResult,
    StepStatus,
    TxStatus,
)

_REPLY_MAY_BE_LOST = (ServerUnavailable, DeadlineExceeded)


class TransactionCursor:
    """A transaction as the agent loop sees it; subclassed by the sync and async helpers."""

    def __init__(
        self,
        agent_id: str,
        metadata: Mapping[str, str] | None,
        policy: PolicyArg,
        isolation: str,
        labels: Sequence[str],
    ) -> None:
        self._begin_args: dict[str, Any] = {
            "agent_id": agent_id,
            "metadata": metadata,
            "policy": policy,
            "isolation": isolation,
            "labels": labels,
        }
        self.transaction_id = ""
        self.next_step_id = 0  # the step the server expects next; 0 once the transaction ended
        self.constraints: list[str] = []  # what the failures so far taught; show them to the agent
        self.status: TxStatus | None = None  # None until begun
        self.last_result: StepResult | None = None
        self._pending: tuple[tuple[Any, ...], str] | None = None  # (payload, request_id)

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
        if self.status is None:
            raise FailedPrecondition(
                "the transaction was not begun; use `with client.transaction(...) as tx` "
                "or call tx.begin() first"
            )
        if self.ended:
            raise NotActive(self.transaction_id, self.status.value, action)
        return self._request_id(payload)

    def _request_id(self, payload: tuple[Any, ...]) -> str:
        if self._pending is not None and self._pending[0] == payload:
            return self._pending[1]
        rid = uuid.uuid4().hex
        self._pending = (payload, rid)
        return rid

    # ------------------------------------------------------------------ after a call

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

    def _stepped(self, r: StepResult) -> Any:
        """Take the reply in; return the output, or raise what the step's status means."""
        self._pending = None
        self.last_result = r
        self.next_step_id = r.next_step_id
        self.constraints = list(r.constraints)
        self.status = r.transaction_status
        if r.status is StepStatus.SUCCESS:
            return r.output
        if r.status is StepStatus.ROLLBACK_TRIGGERED:
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
        return r

    def _exit_reason(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        return f"aborted by the client on {text[:200]}"
