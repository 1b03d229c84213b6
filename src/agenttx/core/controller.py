"""The rollback controller: where the agent resumes after a failed step.

Pure and deterministic: :meth:`RollbackController.decide` reads a :class:`Failure`, the
transaction's :class:`RollbackPolicy` and its durable :class:`ControllerState`, updates the
state's counters and returns a :class:`Decision`. It performs no I/O and reads no clock, so the
same inputs always give the same decision, and the state (persisted with the transaction via
``to_dict``) is all that a resumed engine needs to carry on. The engine does the rewind itself.

Order of decisions when step K fails (first that applies wins; the table with examples is in
``docs/rollback-strategies.md``):

0. fatal (the tool raised ``FatalToolError``) → ABORT;
0b. a permanent category (``permanent_categories``: a credential, a quota; nothing traced) →
   RETRY K while its streak lasts, then ABORT: no step caused it, no rewind can fix it;
1. RETRY step K when the failure's cause is K's own, at most
   :meth:`RollbackController.retry_limit` times in a row (the step's *retry streak*, ended by
   its success or a new epoch); not charged to the replay budget. K's own cause is:
   a transient category (whatever the graph says: the outside world failed, not an input);
   or, when the graph traced no earlier step, arguments that failed their checks
   (``Failure.in_arguments``), an argument-validation category, or a lookup/constraint
   category on a value that is a literal of K's own arguments (``Failure.literal``);
1b. RETRY step K once *in place of its first local backtrack* when any other category (an
   unrecognised error, a permission refused …) failed on literal inputs and the graph traced
   no earlier step: nothing ties it to an earlier step, so undoing one gains nothing. The retry
   counts as K's first failure, so if the failure persists the escalation goes on as the
   reference's would (LB to ``max(K - 2, 1)``, reset, abort), one replayed step cheaper; it
   happens only where that first backtrack would (``D ≥ 1``) and the retry streak allows;
2. DEPENDENCY_JUMP to the root-cause step R < K, at most ``max(D, 1)`` jumps per root per epoch;
3. LOCAL_BACKTRACK to ``max(K - a, 1)`` on the a-th (non-retried) failure of K while a ≤ D;
4. a rewind to ``target`` costs ``K - target + 1`` replayed steps; if it would take the epoch's
   ``replay_used`` past ``policy.replay_budget(N)``, or no option is left: GLOBAL_RESET (new
   epoch, counters cleared) while resets remain, then ABORT.

A failure whose retry streak is used up is treated as persistent: rules 2–4 decide, so the same
step failing again and again still ends in a backtrack, a reset and an abort, as in the
reference.

Invariants (checked by ``tests/core/test_controller.py``):

- ``0 ≤ target ≤ K``; ``target ≥ 1`` unless the decision is ABORT.
- ``replay_used ≤ policy.replay_budget(furthest_step)`` after every decision.
- ``global_resets ≤ policy.max_global_resets``, and ``epoch == global_resets``.
- ``retries[K] ≤ retry_limit(policy)`` for every step K.

Termination. Let N be the furthest step ever attempted in the transaction, B = replay_budget(N)
(the budget is non-decreasing in N) and R = retry_limit(policy). Group the step runs into
*chains*: a run that does not follow a RETRY, together with the RETRY runs of the same step
right after it. A chain has at most R + 1 runs, because a RETRY needs ``retries[K] < R`` and
every RETRY raises ``retries[K]`` by one; only a success of K or a new epoch lowers it, and
either ends the chain. Seen from outside, a chain behaves like one run of a controller without
RETRY: it ends in a success or in a failure answered by rules 2–4. For those, within one epoch
let M be the furthest step attempted so far in it, s the next step to run and
``pending = max(0, M - s + 1)`` the steps the agent must run again before it passes M. Then
``rechains + pending ≤ replay_used`` holds at every moment (``rechains``: chains that re-ran a
step ≤ M): a successful chain of a step ≤ M moves one unit from ``pending`` to ``rechains``; a
chain of step M + 1 (which becomes M) changes neither; a failed chain of K followed by a rewind
to T raises the sum by exactly ``K - T + 1`` (whether K was a re-run or the new furthest step),
which is the charge; an escalation charges nothing, but its failed chain was a new furthest
step or a unit already in ``pending``, and it ends the epoch or the transaction. Because every
charge is checked against the budget, an epoch runs at most M ≤ N first-time chains plus
``replay_used ≤ B`` re-run chains, and there are at most ``max_global_resets + 1`` epochs::

    step executions ≤ (max_global_resets + 1) · (B + N) · (R + 1)

With R = 0 (retries off) this is the reference's bound (resets+1)·(B+N). Retries are not charged
to the budget on purpose: an agent's typos at step 1 of a short task (B = 2 at N = 1) would
otherwise use the whole budget and force a GLOBAL_RESET of work that was never at fault; their
own bound R keeps the loop finite instead. Manual rewinds (``RollbackTransaction`` with
``to_step``) are the caller's choice and are not charged (see
:meth:`RollbackController.on_manual_rewind`); the bound counts the steps the controller sends the
agent back to, not the ones the caller asks to redo.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agenttx.core.hints import (
    ARGUMENT_CATEGORIES,
    LITERAL_CATEGORIES,
    PERMANENT_CATEGORIES,
    TRANSIENT_CATEGORIES,
)
from agenttx.types import RollbackPolicy, Strategy

__all__ = [
    "ARGUMENT_CATEGORIES",
    "DEFAULT_RETRY_CATEGORIES",
    "LITERAL_CATEGORIES",
    "TRANSIENT_CATEGORIES",
    "ControllerState",
    "Decision",
    "Failure",
    "RollbackController",
]

# The same step is retried for transient failures (the outside system was briefly unavailable)
# and argument errors (the agent re-sends the step with other arguments): no earlier step is
# at fault. One copy of the category sets, owned by the hint rules that produce them; the
# controller takes them as a parameter. Lookup and constraint failures (LITERAL_CATEGORIES)
# are retried too, but only on a literal of the step's own arguments (``Failure.literal``).
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
    # true iff K's arguments failed a check before or as the tool read them: JSON that does
    # not parse, an unknown tool, schema validation (ArgumentError) — the agent's own request
    in_arguments: bool = False
    # true iff the value the hint names is a literal of K's own arguments: it is there, and no
    # reference, implicit edge or state read supplied it (with no key named, or one K's
    # arguments do not hold: nothing of K's inputs came from an earlier step)
    literal: bool = False

    @property
    def traced(self) -> bool:
        """True iff the graph tied the failure to an earlier step (``1 ≤ root_step < K``)."""
        return self.root_step is not None and 1 <= self.root_step < self.step_id

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
    # step id → its retry streak: RETRYs of the step since it last succeeded, in this epoch;
    # ≤ retry_limit(policy). A step absent or at 0 has no streak.
    retries: dict[int, int] = field(default_factory=dict)

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
    # steps sent back for re-execution, K − target + 1: charged to the replay budget for
    # DEPENDENCY_JUMP and LOCAL_BACKTRACK; 1 for RETRY, charged to the step's retry streak
    # instead; for GLOBAL_RESET it is K and charged to the reset budget (the new epoch starts
    # at 0); 0 for ABORT.
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
        permanent_categories: frozenset[str] = PERMANENT_CATEGORIES,
    ) -> None:
        """``retry_categories``: hint categories answered by RETRY — transient ones always, the
        others unless the graph traced an earlier step. ``max_retries_per_step``: the retry
        streak allowed per step when the policy sets none; ``None`` derives it from the policy
        (see :meth:`retry_limit`); 0 turns every retry off (the reference's decisions).
        ``permanent_categories``: failures no step of the transaction caused and none can fix
        (a wrong credential, a used-up quota): RETRY K while its streak lasts (someone fixes it
        outside, the agent resends), then ABORT — rewinding earlier steps cannot help.
        """
        if max_retries_per_step is not None and max_retries_per_step < 0:
            raise ValueError(f"max_retries_per_step must be ≥ 0, got {max_retries_per_step}")
        self.retry_categories = frozenset(retry_categories)
        self.max_retries_per_step = max_retries_per_step
        self.permanent_categories = frozenset(permanent_categories)

    def retry_limit(self, policy: RollbackPolicy) -> int:
        """RETRYs allowed in a row per step (R): the policy's ``max_step_retries``, else the
        controller's ``max_retries_per_step``, else ``max(D, 1) + 1``.

        The derived default is one more than the local backtrack depth: a transient fault or a
        typo gets at least two more attempts before the controller starts rewinding earlier
        steps, and the limit grows with the patience the policy already expresses through D.
        """
        if policy.max_step_retries is not None:
            return policy.max_step_retries
        if self.max_retries_per_step is not None:
            return self.max_retries_per_step
        return max(policy.max_local_depth, 1) + 1

    def on_step_succeeded(self, state: ControllerState, step_id: int) -> None:
        """Step ``step_id`` succeeded: its retry streak ends (its next failure starts anew)."""
        state.retries.pop(step_id, None)

    def wants_literal(self, category: str) -> bool:
        """Whether a failure of ``category`` needs ``Failure.literal`` to be decided: the engine
        skips the graph work for the others (a timeout's or a typo's decision never depends on
        it; every other category's may, through the literal row or rule 1b)."""
        return category not in self.retry_categories and category not in self.permanent_categories

    def own_cause(self, failure: Failure) -> bool:
        """True iff the failure's cause lies in step K itself, so RETRY K is the answer (the
        decision table's first rows; see the module docstring)."""
        category = failure.category
        if category in TRANSIENT_CATEGORIES and category in self.retry_categories:
            return True  # says nothing about the inputs: the outside world failed
        if failure.traced:
            return False  # the graph ties it to an earlier step: a dependency jump
        return (
            failure.in_arguments
            or category in self.retry_categories
            or (failure.literal and category in LITERAL_CATEGORIES)
        )

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
        #    re-run. Bounded by the step's retry streak, not by the replay budget (see the
        #    termination argument), so a failure that is "transient" forever, or an agent that
        #    keeps making the same typo, falls through to the rules below after R retries.
        retried = state.retries.get(k, 0)
        permanent = failure.category in self.permanent_categories and not failure.traced
        if retried < self.retry_limit(policy) and (permanent or self.own_cause(failure)):
            state.retries[k] = retried + 1
            return Decision(Strategy.RETRY, target=k, rollback_to_step=k, replayed=1)
        if permanent:
            # Nothing earlier caused it and no rewind can fix it: end instead of undoing work.
            return _abort(f"step {k} keeps failing with {failure.category}; fix it outside")

        # Counted before choosing, so a dependency jump also deepens the next local backtrack
        # of this step (the reference's order).
        attempt = state.failures.get(k, 0) + 1
        state.failures[k] = attempt
        depth = policy.max_local_depth

        # 1b. Literal inputs, untraced, a category that says nothing about the cause: the first
        #     local backtrack would undo K − 1, which nothing ties to the failure. Retry K in its
        #     place; counted as that failure (above), so a persistent one escalates on the
        #     reference's schedule and never later.
        if (
            failure.literal
            and not failure.traced
            and attempt == 1
            and attempt <= depth
            and retried < self.retry_limit(policy)
        ):
            state.retries[k] = retried + 1
            return Decision(Strategy.RETRY, target=k, rollback_to_step=k, replayed=1)

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
