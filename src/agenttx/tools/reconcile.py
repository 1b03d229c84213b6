"""What a ``@tool.reconcile`` handler sees and returns.

A step whose outside call may or may not have happened (OUTCOME_UNKNOWN) is settled by asking
the outside system, never by sending the call again. The handler is called as
``fn(ctx, operation_id=…, **step_arguments)``: ``ctx`` is a ``ReconcileContext`` (the
checkpointed provider, operation id and cursor, the original attempt's idempotency key), the
step's own arguments follow so a handler can look the call up by them. It answers with
``"happened"``, ``"not_happened"`` or ``"unknown"``, or a ``Reconciled`` for more: the output
the step succeeds with, a new cursor, when to ask again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agenttx.plural import named

Outcome = Literal["happened", "not_happened", "unknown"]
OUTCOMES: tuple[str, ...] = ("happened", "not_happened", "unknown")


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A reconcile handler's richer answer.

    ``output``: with ``happened``, the step's output (what ``${steps.N…}`` then reads; the
    handler knows it from the outside system). ``cursor``: kept for the next reconcile (with
    ``unknown``). ``retry_after_ms``: with ``unknown``, when to ask again (default 5 s)."""

    outcome: Outcome
    output: Any = None
    cursor: Any = None
    retry_after_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ReconcileContext:
    """The step being reconciled and the provider operation it checkpointed."""

    transaction_id: str
    step_id: int
    # The original attempt's key: what the tool passed to the outside system, so a handler
    # without an operation id can look the call up by it.
    idempotency_key: str
    provider: str  # "" if the step checkpointed none
    operation_id: str | None  # None if the step checkpointed none
    cursor: Any  # the last cursor checkpointed or returned by a reconcile (None if none)
    attempt: int  # 1 for the first reconcile of this unknown outcome, growing
    # The undo record asked about by an ``@tool.undo_reconcile`` handler (0: the step's own
    # call, ``@tool.reconcile``); its provider and operation id are the ones its
    # ``UncertainOutcome`` reported.
    undo_id: int = 0


def as_reconciled(answer: Any) -> Reconciled:
    """The handler's answer as a ``Reconciled``; ``ValueError`` saying what is wrong."""
    if isinstance(answer, Reconciled):
        result = answer
    elif isinstance(answer, str):
        result = Reconciled(answer.replace("-", "_"))  # type: ignore[arg-type]
    elif isinstance(answer, dict) and "outcome" in answer:
        unknown = set(answer) - {"outcome", "output", "cursor", "retry_after_ms"}
        if unknown:
            raise ValueError(f"a reconcile answer has no {named('field', sorted(unknown))}")
        result = Reconciled(
            str(answer["outcome"]).replace("-", "_"),  # type: ignore[arg-type]
            answer.get("output"),
            answer.get("cursor"),
            answer.get("retry_after_ms"),
        )
    else:
        raise ValueError(
            "a reconcile handler returns 'happened', 'not_happened', 'unknown' or a "
            f"Reconciled, got {type(answer).__name__}"
        )
    if result.outcome not in OUTCOMES:
        raise ValueError(f"unknown reconcile outcome {result.outcome!r}; use one of {OUTCOMES}")
    ms = result.retry_after_ms
    if ms is not None and (not isinstance(ms, int) or isinstance(ms, bool) or ms < 0):
        raise ValueError(f"retry_after_ms must be a non-negative integer, got {ms!r}")
    return result
