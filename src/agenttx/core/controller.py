"""The rollback controller: where the agent resumes after a failed step.

Pure and deterministic: :meth:`RollbackController.decide` reads a :class:`Failure`, the
transaction's :class:`RollbackPolicy` and its durable :class:`ControllerState`, updates the
state's counters and returns a :class:`Decision`. It performs no I/O and reads no clock, so the
same inputs always give the same decision, and the state (persisted with the transaction via
``to_dict``) is all that a resumed engine needs to carry on. The engine does the rewind itself.

Order of decisions when step K fails (first that applies wins):

0. fatal (the tool raised ``FatalToolError``) → ABORT;
1. RETRY step K for transient and argument-validation categories, at most
   :meth:`RollbackController.retry_limit` times per step per epoch; cost 1;
2. DEPENDENCY_JUMP to the root-cause step R < K, at most ``max(D, 1)`` jumps per root per epoch;
3. LOCAL_BACKTRACK to ``max(K - a, 1)`` on the a-th (non-retried) failure of K while a ≤ D;
4. a rewind to ``target`` costs ``K - target + 1`` replayed steps; if it would take the epoch's
   ``replay_used`` past ``policy.replay_budget(N)``, or no option is left: GLOBAL_RESET (new
   epoch, counters cleared) while resets remain, then ABORT.

Invariants (checked by ``tests/test_controller.py``):

- ``0 ≤ target ≤ K``; ``target ≥ 1`` unless the decision is ABORT.
- ``replay_used ≤ policy.replay_budget(furthest_step)`` after every decision.
- ``global_resets ≤ policy.max_global_resets``, and ``epoch == global_resets``.

Termination. Let N be the furthest step ever attempted in the transaction and B = replay_budget(N)
(the budget is non-decreasing in N). Within one epoch let M be the furthest step attempted so far
in it, s the next step to run and ``pending = max(0, M - s + 1)`` the steps the agent must run
again before it passes M. Then ``reexecutions + pending ≤ replay_used`` holds at every moment:
a successful run of a step ≤ M moves one unit from ``pending`` to ``reexecutions``; a run of
step M + 1 (which becomes M) changes neither; a failed run of K followed by a rewind to T raises
the sum by exactly ``K - T + 1`` (whether K was a re-run or the new furthest step), which is the
charge; a retry is the case T = K, charged 1; an escalation charges nothing, but its failed run
was a new furthest step or a unit already in ``pending``, and it ends the epoch or the
transaction.
Because every charge is checked against the budget, an epoch runs at most M ≤ N first-time steps
plus ``replay_used ≤ B`` re-executions, and there are at most ``max_global_resets + 1`` epochs::

    step executions ≤ (max_global_resets + 1) · (B + N)

Retries are charged like any rewind, so RETRY keeps the reference's bound. Manual rewinds
(``RollbackTransaction`` with ``to_step``) are the caller's choice and are not charged (see
:meth:`RollbackController.on_manual_rewind`); the bound counts the steps the controller sends the
agent back to, not the ones the caller asks to redo.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agenttx.core.hints import ARGUMENT_CATEGORIES, TRANSIENT_CATEGORIES
from agenttx.types import RollbackPolicy, Strategy

__all__ = [
    "ARGUMENT_CATEGORIES",
    "DEFAULT_RETRY_CATEGORIES",
    "TRANSIENT_CATEGORIES",
    "ControllerState",
    "Decision",
    "Failure",
    "RollbackController",
]

# The same step is retried for transient failures (the outside system was briefly unavailable)
# and argument errors (the agent re-sends the step with other arguments): no earlier step is
# at fault. One copy of the category sets, owned by the hint rules that produce them; the
# controller takes them as a parameter.
DEFAULT_RETRY_CATEGORIES: Final = TRANSIENT_CATEGORIES | ARGUMENT_CATEGORIES

# Why the controller escalated past the local strategies; the reference's wording, which ends up
# in ``abort_reason`` as "<why>; global reset budget (n) exhausted".
_DEPTH_EXHAUSTED: Final = "local backtrack depth exhausted"
_BUDGET_EXCEEDED: Final = "replay budget exceeded"


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed run of step ``step_id`` (K), as the engine saw it."""

    step_id: int  # K, the failing step; ≥ 1
    category: str  # the Clean Hint category, e.g. "timeout", "foreign_key", "unknown"
    key: str = ""  # the key the hint names ("" if none); informational, the graph already used it
    root_step: int | None = None  # root-cause step from the graph; honoured iff 1 ≤ root_step < K
    fatal: bool = False  # true iff the tool raised FatalToolError: abort at once

    def __post_init__(self) -> None:
        if self.step_id < 1:
            raise ValueError(f"a failing step id is ≥ 1, got {self.step_id}")


@dataclass(slots=True)
class ControllerState:
    """The controller's durable counters for one transaction (persisted with it as JSON).

    An *epoch* is the span between global resets; every per-epoch counter restarts at a reset.
    """

    epoch: int = 0  # == global_resets: the number of the current epoch, from 0
    # N: the furthest step id attempted in the transaction. Like the reference, it survives
    # resets: the task has shown it is N steps long, and the new epoch must replay them anyway.
    furthest_step: int = 0
    replay_used: int = 0  # replayed steps charged in this epoch; ≤ replay_budget(furthest_step)
    global_resets: int = 0  # resets used so far (all epochs); ≤ policy.max_global_resets
    # step id → failures of that step in this epoch that were not answered by a RETRY
    failures: dict[int, int] = field(default_factory=dict)
    jumps: dict[int, int] = field(default_factory=dict)  # root step → jumps to it in this epoch
    retries: dict[int, int] = field(default_factory=dict)  # step id → RETRYs in this epoch

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; map keys become strings (JSON object keys), sorted by step."""
        return {
            "epoch": self.epoch,
            "furthest_step": self.furthest_step,
            "replay_used": self.replay_used,
            "global_resets": self.global_resets,
            "failures": _counts_to_json(self.failures),
            "jumps": _counts_to_json(self.jumps),
            "retries": _counts_to_json(self.retries),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ControllerState:
        """The inverse of :meth:`to_dict`; missing fields (or ``None``) give a fresh state."""
        d = d or {}
        return cls(
            epoch=int(d.get("epoch", 0)),
            furthest_step=int(d.get("furthest_step", 0)),
            replay_used=int(d.get("replay_used", 0)),
            global_resets=int(d.get("global_resets", 0)),
            failures=_counts_from_json(d.get("failures")),
            jumps=_counts_from_json(d.get("jumps")),
            retries=_counts_from_json(d.get("retries")),
        )

    def _start_epoch(self) -> None:
        self.epoch += 1
        self.global_resets += 1
        self.replay_used = 0
        self.failures.clear()
        self.jumps.clear()
        self.retries.clear()


def _counts_to_json(counts: Mapping[int, int]) -> dict[str, int]:
    return {str(step): n for step, n in sorted(counts.items())}


def _counts_from_json(raw: Mapping[Any, Any] | None) -> dict[int, int]:
    return {int(step): int(n) for step, n in (raw or {}).items()}


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a failure. The engine undoes every step ≥ ``target`` (all of them for
    GLOBAL_RESET and ABORT) and replies with ``strategy``, ``rollback_to_step``,
    ``next_step_id = target``, ``context_reset`` and ``abort_reason``.
    """

    strategy: Strategy  # RETRY, DEPENDENCY_JUMP, LOCAL_BACKTRACK, GLOBAL_RESET or ABORT
    # the step the agent sends next (next_step_id); steps ≥ target are undone. GLOBAL_RESET: 1;
    # ABORT: 0 (the transaction has ended).
    target: int
    # wire field: the first step whose effects were undone (== target) for RETRY, DEPENDENCY_JUMP
    # and LOCAL_BACKTRACK; 0 ("initial state": everything undone, context log cleared) for
    # GLOBAL_RESET and ABORT. The reference's meaning, so its clients read it unchanged.
    rollback_to_step: int
    context_reset: bool = False  # true iff GLOBAL_RESET or ABORT (as the reference replies)
    abort_reason: str = ""  # non-empty iff ABORT
    # steps sent back for re-execution, K − target + 1: charged to the replay budget for RETRY,
    # DEPENDENCY_JUMP and LOCAL_BACKTRACK; for GLOBAL_RESET it is K and charged to the reset
    # budget instead (the new epoch starts at 0); 0 for ABORT.
    replayed: int = 0


class RollbackController:
    """Decides the recovery of failed steps. Holds only configuration: the per-transaction
    counters live in the :class:`ControllerState` passed in, so one controller serves every
    transaction and the engine persists the state with the transaction.
    """

    def __init__(
        self,
        *,
        retry_categories: frozenset[str] = DEFAULT_RETRY_CATEGORIES,
        max_retries_per_step: int | None = None,
    ) -> None:
        """``retry_categories``: hint categories answered by RETRY (empty: the reference's
        behaviour, no retries). ``max_retries_per_step``: RETRYs of one step per epoch; ``None``
        derives it from the policy (see :meth:`retry_limit`).
        """
        if max_retries_per_step is not None and max_retries_per_step < 0:
            raise ValueError(f"max_retries_per_step must be ≥ 0, got {max_retries_per_step}")
        self.retry_categories = frozenset(retry_categories)
        self.max_retries_per_step = max_retries_per_step

    def retry_limit(self, policy: RollbackPolicy) -> int:
        """RETRYs allowed per step per epoch: the configured value, else ``max(D, 1) + 1``.

        One more than the local backtrack depth: a transient fault gets at least two more
        attempts before the controller starts rewinding earlier steps, and the limit grows with
        the patience the policy already expresses through D.
        """
        if self.max_retries_per_step is not None:
            return self.max_retries_per_step
        return max(policy.max_local_depth, 1) + 1

    def on_step_started(self, state: ControllerState, step_id: int) -> None:
        """Record that ``step_id`` is being attempted (raises N, the budget's step count)."""
        if step_id < 1:
            raise ValueError(f"step ids start at 1, got {step_id}")
        state.furthest_step = max(state.furthest_step, step_id)

    def on_manual_rewind(self, state: ControllerState, to_step: int) -> None:
        """A caller's ``RollbackTransaction(to_step)`` rewound the transaction; nothing is charged.

        As in the reference, a manual rewind leaves every counter as it is: it is not charged to
        the replay budget (a later failure must not turn into a global reset because the caller
        chose to redo work), and it does not clear failure, jump or retry counts either (a caller
        cannot reset the escalation of a step that keeps failing by rewinding past it). N stays:
        the transaction did reach it. The termination bound covers controller-driven replays
        only; the steps a caller asks to redo are its own choice, like any new step.
        """
        if to_step < 1:
            raise ValueError(f"a rewind goes to a step ≥ 1 (0 means abort), got {to_step}")

    def decide(self, failure: Failure, state: ControllerState, policy: RollbackPolicy) -> Decision:
        """Mutates ``state`` (counters) and returns the decision for ``failure``."""
        k = failure.step_id
        # The failing step was attempted even if the engine did not report it: N ≥ K always,
        # so the budget below is never computed for a shorter transaction than the one failing.
        self.on_step_started(state, k)
        if failure.fatal:
            return _abort(f"step {k} failed with a fatal error")

        budget = policy.replay_budget(state.furthest_step)

        # 1. RETRY: the step's own effects are undone and it runs again; nothing earlier is
        #    re-run. Charged 1, so a failure that is "transient" forever still exhausts the
        #    budget or the per-step limit and falls through to the steps below.
        retried = state.retries.get(k, 0)
        if failure.category in self.retry_categories and retried < self.retry_limit(policy):
            if state.replay_used + 1 > budget:
                return _escalate(state, policy, k, _BUDGET_EXCEEDED)
            state.retries[k] = retried + 1
            state.replay_used += 1
            return Decision(Strategy.RETRY, target=k, rollback_to_step=k, replayed=1)

        # Counted before choosing, so a dependency jump also deepens the next local backtrack
        # of this step (the reference's order).
        attempt = state.failures.get(k, 0) + 1
        state.failures[k] = attempt
        depth = policy.max_local_depth

        # 2. DEPENDENCY_JUMP, then 3. LOCAL_BACKTRACK.
        root = failure.root_step
        if root is not None and 1 <= root < k and state.jumps.get(root, 0) < max(depth, 1):
            strategy, target = Strategy.DEPENDENCY_JUMP, root
        elif attempt <= depth:
            strategy, target = Strategy.LOCAL_BACKTRACK, max(k - attempt, 1)
        else:
            return _escalate(state, policy, k, _DEPTH_EXHAUSTED)

        # 4. The budget bounds the total replay of an epoch to O(N log N).
        cost = k - target + 1
        if state.replay_used + cost > budget:
            return _escalate(state, policy, k, _BUDGET_EXCEEDED)
        state.replay_used += cost
        if strategy is Strategy.DEPENDENCY_JUMP:
            state.jumps[target] = state.jumps.get(target, 0) + 1
        return Decision(strategy, target=target, rollback_to_step=target, replayed=cost)


def _escalate(state: ControllerState, policy: RollbackPolicy, k: int, why: str) -> Decision:
    """GLOBAL_RESET into a new epoch while resets remain, else ABORT."""
    if state.global_resets >= policy.max_global_resets:
        return _abort(f"{why}; global reset budget ({policy.max_global_resets}) exhausted")
    state._start_epoch()
    return Decision(
        Strategy.GLOBAL_RESET, target=1, rollback_to_step=0, context_reset=True, replayed=k
    )


def _abort(reason: str) -> Decision:
    return Decision(
        Strategy.ABORT, target=0, rollback_to_step=0, context_reset=True, abort_reason=reason
    )
