"""The client's errors: gRPC status codes turned back into AgentTx errors, and the step
outcomes the transaction helper raises.

    AgentTxError
    ├── (every error of ``agenttx.errors``, rebuilt from the status code and message)
    ├── ServerUnavailable             UNAVAILABLE after every retry (also a ConnectionError)
    └── StepError                     a step that did not succeed; ``result`` is its reply
        ├── RollbackTriggered         rolled back; the transaction is open at next_step_id
        ├── TransactionAborted        the transaction ended (FAILED)
        └── OutcomeUnknown            an outside call may or may not have happened

The server's messages are parsed only where an error carries data the caller needs: the
expected step of ``WrongStep``, the status of ``NotActive``, the step of
``OutcomeUnknownPending`` and the keys of ``CommitConflict``.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from agenttx import errors
from agenttx.errors import AgentTxError
from agenttx.types import StepResult

E = TypeVar("E", bound=AgentTxError)

_BY_CODE: dict[str, type[AgentTxError]] = {
    "INVALID_ARGUMENT": errors.InvalidArgument,
    "OUT_OF_RANGE": errors.InvalidArgument,
    "NOT_FOUND": errors.NotFound,
    "FAILED_PRECONDITION": errors.FailedPrecondition,
    "ALREADY_EXISTS": errors.AlreadyExists,
    "ABORTED": errors.Aborted,
    "DEADLINE_EXCEEDED": errors.DeadlineExceeded,
    "INTERNAL": errors.InternalError,
    "UNKNOWN": errors.InternalError,
    "DATA_LOSS": errors.InternalError,
}

# The server's wording (agenttx.errors); a message that does not match keeps the base class.
_WRONG_STEP = re.compile(r"transaction (\S+) expects step (\d+), got step (\d+)")
_NOT_ACTIVE = re.compile(r"transaction \S+ is ([A-Z_]+); cannot ")
_OUTCOME_PENDING = re.compile(r"step (\d+) has an unknown outcome")
_CONFLICT = re.compile(r"(\w+)-(?:write|set) conflict on (.*?); another transaction committed")
_REVISION = re.compile(r"changed concurrently|no longer exists")


class ServerUnavailable(AgentTxError, ConnectionError):
    """The server could not be reached (gRPC UNAVAILABLE) on any attempt. Every attempt
    carried the same request_id, so calling again with that id is safe."""

    code = "UNAVAILABLE"

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class StepError(AgentTxError):
    """A step that did not succeed. ``result`` is the full reply; the fields an agent loop
    needs are attributes too."""

    code = "STEP_FAILED"

    def __init__(self, result: StepResult, message: str) -> None:
        super().__init__(message)
        self.result = result
        self.transaction_id = result.transaction_id
        self.step_id = result.step_id
        self.clean_hint = result.clean_hint
        self.strategy = result.strategy
        self.rollback_to_step = result.rollback_to_step
        self.next_step_id = result.next_step_id
        self.constraints = list(result.constraints)
        self.context_reset = result.context_reset
        self.error_category = result.error_category


class RollbackTriggered(StepError):
    """The step failed and the transaction was rewound; it is still open. Re-plan from
    ``next_step_id`` (the helper already points there) using ``clean_hint`` and
    ``constraints``; if ``context_reset``, drop what the agent remembers of steps at or after
    ``next_step_id``."""

    code = "ROLLBACK_TRIGGERED"

    def __init__(self, result: StepResult) -> None:
        super().__init__(
            result,
            f"step {result.step_id} failed and was rolled back "
            f"({result.strategy.value} to step {result.rollback_to_step}); "
            f"continue at step {result.next_step_id}. {result.clean_hint}".rstrip(),
        )


class TransactionAborted(StepError):
    """The step failed and the transaction ended (its effects were undone); begin a new one."""

    code = "ABORTED"

    def __init__(self, result: StepResult) -> None:
        super().__init__(
            result,
            f"step {result.step_id} failed and transaction {result.transaction_id} was "
            f"aborted: {result.abort_reason}. {result.clean_hint}".rstrip(),
        )
        self.abort_reason = result.abort_reason
        self.compensation_errors = list(result.compensation_errors)


class OutcomeUnknown(StepError):
    """An outside call of the step may or may not have happened. The transaction takes no
    further step or commit until the outcome is reconciled; rolling back is allowed."""

    code = "OUTCOME_UNKNOWN"

    def __init__(self, result: StepResult) -> None:
        super().__init__(
            result,
            f"step {result.step_id}: the outcome of its outside call is unknown; reconcile it "
            f"or roll back. {result.clean_hint}".rstrip(),
        )


def error_from_status(code: str, message: str) -> AgentTxError:
    """The AgentTx error a gRPC status stands for (``code`` is the status code's name)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        exc = AgentTxError(message or code)
        exc.code = code  # an unexpected status keeps its name, e.g. RESOURCE_EXHAUSTED
        return exc
    if cls is errors.FailedPrecondition:
        return _failed_precondition(message)
    if cls is errors.Aborted:
        return _aborted(message)
    return cls(message)


def _failed_precondition(message: str) -> AgentTxError:
    if m := _WRONG_STEP.search(message):
        return _rebuilt(errors.WrongStep, message, expected=int(m.group(2)), got=int(m.group(3)))
    if m := _NOT_ACTIVE.search(message):
        return _rebuilt(errors.NotActive, message, status=m.group(1))
    if m := _OUTCOME_PENDING.search(message):
        return _rebuilt(errors.OutcomeUnknownPending, message, step_id=int(m.group(1)))
    return errors.FailedPrecondition(message)


def _aborted(message: str) -> AgentTxError:
    if m := _CONFLICT.search(message):
        shown = re.sub(r" \(\+\d+ more\)$", "", m.group(2))
        return _rebuilt(
            errors.CommitConflict,
            message,
            keys=shown.split(", "),
            kind=m.group(1),
            compensation_errors=[],
        )
    if _REVISION.search(message):
        return errors.RevisionConflict(message)
    return errors.Aborted(message)


def _rebuilt(cls: type[E], message: str, **attrs: Any) -> E:
    """An instance of ``cls`` saying exactly what the server said (these classes build their
    own message from their arguments; the server's wording is kept instead)."""
    exc = cls.__new__(cls)
    AgentTxError.__init__(exc, message)
    for name, value in attrs.items():
        setattr(exc, name, value)
    return exc
