"""Every error AgentTx raises, with a stable code that adapters map to gRPC, HTTP and MCP.

    AgentTxError                      code
    ├── InvalidArgument               INVALID_ARGUMENT   request malformed or over a limit
    ├── NotFound                      NOT_FOUND          no such transaction (or step, tool)
    ├── FailedPrecondition            FAILED_PRECONDITION
    │   ├── WrongStep                 the step id is not the one the server expects
    │   ├── NotActive                 the transaction cannot take this call in its status
    │   └── OutcomeUnknownPending     a step's outcome must be reconciled first
    ├── AlreadyExists                 ALREADY_EXISTS     request_id reused with another payload
    ├── Aborted                       ABORTED
    │   ├── CommitConflict            first committer won; the keys are named
    │   └── RevisionConflict          another writer moved the transaction (compare-and-set lost)
    ├── DeadlineExceeded              DEADLINE_EXCEEDED  waited too long for a busy transaction
    └── InternalError                 INTERNAL           a bug or a store failure

Tools raise their own errors; two of them carry meaning to the engine:

    ToolSignal
    ├── FatalToolError                abort the transaction at once, no retry, no rewind
    └── UncertainOutcome              the outside call may or may not have happened

Any other exception a tool raises is a step failure: its text and traceback become the raw
error the hint cleaner reads. Driver errors are re-raised as ``InternalError`` ``from exc`` at
the store boundary.
"""

from __future__ import annotations

from collections.abc import Sequence


class AgentTxError(Exception):
    """Base of every error AgentTx raises on purpose. ``code`` is stable and wire-visible."""

    code = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def with_message(self, message: str) -> AgentTxError:
        """This error, saying ``message`` (a replayed outcome keeps its original words)."""
        self.message = message
        self.args = (message,)
        return self


class InvalidArgument(AgentTxError):
    code = "INVALID_ARGUMENT"


class NotFound(AgentTxError):
    code = "NOT_FOUND"


class FailedPrecondition(AgentTxError):
    code = "FAILED_PRECONDITION"


class WrongStep(FailedPrecondition):
    """The request's step id is not ``expected`` (the transaction's ``next_step_id``)."""

    def __init__(self, transaction_id: str, got: int, expected: int) -> None:
        super().__init__(
            f"transaction {transaction_id} expects step {expected}, got step {got}; "
            f"send step_id={expected}"
        )
        self.expected = expected
        self.got = got


class NotActive(FailedPrecondition):
    """The transaction's status does not allow the call (e.g. a step after commit)."""

    def __init__(self, transaction_id: str, status: str, action: str) -> None:
        super().__init__(f"transaction {transaction_id} is {status}; cannot {action}")
        self.status = status


class OutcomeUnknownPending(FailedPrecondition):
    """A step's outside effect has an unknown outcome; reconcile it before going on."""

    def __init__(self, transaction_id: str, step_id: int) -> None:
        super().__init__(
            f"transaction {transaction_id}: step {step_id} has an unknown outcome; "
            "reconcile it (happened / not happened) or roll back before the next step"
        )
        self.step_id = step_id


class AlreadyExists(AgentTxError):
    code = "ALREADY_EXISTS"


class Aborted(AgentTxError):
    code = "ABORTED"


class CommitConflict(Aborted):
    """Commit validation failed: another transaction committed these keys first.

    By the time this is raised the transaction is ``FAILED`` and its compensations have run.
    """

    def __init__(
        self,
        transaction_id: str,
        keys: Sequence[str],
        kind: str = "write",
        compensation_errors: Sequence[str] = (),
    ) -> None:
        shown = ", ".join(keys[:10]) + (f" (+{len(keys) - 10} more)" if len(keys) > 10 else "")
        super().__init__(
            f"transaction {transaction_id} aborted: {kind}-{'write' if kind == 'write' else 'set'} "
            f"conflict on {shown}; another transaction committed first. Begin a new transaction"
        )
        self.keys = list(keys)
        self.kind = kind
        self.compensation_errors = list(compensation_errors)


class RevisionConflict(Aborted):
    """A compare-and-set on the transaction's revision lost: someone else changed it."""


class DeadlineExceeded(AgentTxError):
    code = "DEADLINE_EXCEEDED"


class InternalError(AgentTxError):
    code = "INTERNAL"


class ToolSignal(Exception):
    """Base of the exceptions a tool raises to tell the engine something specific."""


class FatalToolError(ToolSignal):
    """The failure cannot be fixed by retrying or rewinding: abort the transaction now."""


class UncertainOutcome(ToolSignal):
    """The outside call may or may not have taken effect (e.g. a timeout after sending).

    ``operation_id`` is the provider's id for the call, if known, kept for reconciliation.
    """

    def __init__(self, message: str, operation_id: str | None = None) -> None:
        super().__init__(message)
        self.operation_id = operation_id
