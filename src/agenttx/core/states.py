"""The one transition table of the transaction lifecycle.

An illegal transition is a ``FailedPrecondition`` naming both ends, so a committed
transaction can never take another step and a bug cannot silently resurrect one.
"""

from __future__ import annotations

from agenttx.errors import FailedPrecondition
from agenttx.types import TxStatus

A, E, R, C = TxStatus.ACTIVE, TxStatus.EXECUTING, TxStatus.ROLLING_BACK, TxStatus.COMMITTING
DONE, ROLLED, FAILED = TxStatus.COMMITTED, TxStatus.ROLLED_BACK, TxStatus.FAILED
COMPENSATING, COMPENSATED = TxStatus.COMPENSATING, TxStatus.COMPENSATED

TRANSITIONS: dict[TxStatus, frozenset[TxStatus]] = {
    # ACTIVE → ACTIVE: a step that needs no outside effect finishes in one durable change.
    A: frozenset({A, E, R, C, DONE, ROLLED, FAILED}),
    # EXECUTING → ROLLING_BACK/FAILED: the running step failed and rewinds or aborts.
    E: frozenset({A, R, ROLLED, FAILED}),
    R: frozenset({A, R, ROLLED, FAILED}),
    # COMMITTING → ROLLING_BACK: validation found a conflict and the abort must compensate.
    C: frozenset({DONE, R, FAILED}),
    DONE: frozenset(),
    ROLLED: frozenset(),
    FAILED: frozenset(),
    # A compensating transaction: created COMPENSATING, it runs (or waits for an approver,
    # then runs) its undo actions and ends COMPENSATED or FAILED.
    COMPENSATING: frozenset({COMPENSATING, COMPENSATED, FAILED}),
    COMPENSATED: frozenset(),
}


# The statuses a call that needs an open, idle transaction may move it from (the
# ``from_statuses`` of its compare-and-set).
OPEN: tuple[str, ...] = (TxStatus.ACTIVE.value,)
# Every non-terminal status: a rewind or abort may start from any of them.
UNFINISHED: tuple[str, ...] = (A.value, E.value, R.value, C.value)


def check_transition(src: TxStatus, dst: TxStatus) -> None:
    if dst not in TRANSITIONS[src]:
        raise FailedPrecondition(f"illegal transaction state transition {src} -> {dst}")
