"""The client's errors: a refused call turned back into its AgentTx error, and the step
outcomes the transaction helper raises. All of them are drawn in the one tree of
``agenttx.errors``; the step outcomes live here because they carry a ``StepResult``.

A refused call is rebuilt from its status code and the structured details the server sends
beside it as trailing metadata (``agenttx.error_details.from_metadata``): the reason picks the
class, the fields fill its attributes (the expected step of ``WrongStep``, the status of
``NotActive``, the step of ``OutcomeUnknownPending``, the keys of ``CommitConflict`` …). The
message is never parsed, so rewording it changes nothing here; without details the error is
the status code's family class.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agenttx.error_details import from_metadata
from agenttx.errors import (
    Aborted,
    AgentTxError,
    FailedPrecondition,
    ServerUnavailable,
    error_from_wire,
)
from agenttx.types import StepResult

__all__ = [
    "OutcomeUnknown",
    "RollbackTriggered",
    "ServerUnavailable",
    "StepError",
    "StepsNotRedone",
    "TransactionAborted",
    "error_from_status",
]


class StepError(AgentTxError):
    """A step that did not succeed. ``result`` is the full reply; the fields an agent loop
    needs are attributes too."""

    code = "STEP_FAILED"
    reason = "STEP_ERROR"

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
        self.reference_category = result.reference_category


class RollbackTriggered(StepError):
    """The step failed and the transaction was rewound; it is still open. Re-plan from
    ``next_step_id`` (the helper already points there) using ``clean_hint`` and
    ``constraints``; if ``context_reset``, drop what the agent remembers of steps at or after
    ``next_step_id``."""

    code = reason = "ROLLBACK_TRIGGERED"

    def __init__(self, result: StepResult) -> None:
        super().__init__(
            result,
            f"step {result.step_id} failed and was rolled back "
            f"({result.strategy.value} to step {result.rollback_to_step}); "
            f"continue at step {result.next_step_id}. {result.clean_hint}".rstrip(),
        )


class TransactionAborted(StepError, Aborted):
    """The step failed and the transaction ended (its effects were undone); begin a new one.
    Also an ``Aborted``: the transaction is over, as after a commit conflict."""

    code = "ABORTED"
    reason = "TRANSACTION_ABORTED"

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

    code = reason = "OUTCOME_UNKNOWN"

    def __init__(self, result: StepResult) -> None:
        super().__init__(
            result,
            f"step {result.step_id}: the outcome of its outside call is unknown; reconcile it "
            f"or roll back. {result.clean_hint}".rstrip(),
        )


class StepsNotRedone(FailedPrecondition):
    """A ``with client.transaction() as tx:`` block ended cleanly while steps the server had
    rolled back were never redone: committing would silently lose them, so the helper rolled
    the transaction back instead. ``steps`` maps each such step id to the tool it called.
    Redo them (``tx.next_step_id`` says where), let ``tx.run(agent)`` drive the loop, or call
    ``tx.commit()`` inside the block to commit without them."""

    reason = "STEPS_NOT_REDONE"

    def __init__(self, transaction_id: str, steps: dict[int, str]) -> None:
        listed = ", ".join(f"{step_id} ({tool})" for step_id, tool in sorted(steps.items()))
        were = "was" if len(steps) == 1 else "were"
        super().__init__(
            f"transaction {transaction_id} was rolled back, not committed: "
            f"{'step' if len(steps) == 1 else 'steps'} {listed} {were} rolled back by the "
            "server and not redone before the block ended. "
            f"Redo them from step {min(steps)} (tx.next_step_id), drive the loop with "
            "tx.run(agent), or call tx.commit() in the block to commit without them."
        )
        self.transaction_id = transaction_id
        self.steps = dict(sorted(steps.items()))


def error_from_status(
    code: str, message: str, trailing_metadata: Iterable[tuple[str, Any]] | None = None
) -> AgentTxError:
    """The AgentTx error a refused call stands for (``code`` is the status code's name,
    ``trailing_metadata`` the call's, where the server puts the error's reason and fields)."""
    reason, fields = from_metadata(trailing_metadata)
    return error_from_wire(code, message, reason, fields)
