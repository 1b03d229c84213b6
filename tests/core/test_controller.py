"""The rollback controller: every decision path, the reference's published call counts, and the
termination bound under random failures."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx.core.controller import (
    ARGUMENT_CATEGORIES,
    DEFAULT_RETRY_CATEGORIES,
    TRANSIENT_CATEGORIES,
    ControllerState,
    Decision,
    Failure,
    RollbackController,
)
from agenttx.types import RollbackPolicy, Strategy

DEFAULT = RollbackPolicy()
LB = Strategy.LOCAL_BACKTRACK
DJ = Strategy.DEPENDENCY_JUMP
RESET = Strategy.GLOBAL_RESET
ABORT = Strategy.ABORT
RETRY = Strategy.RETRY


def fail(
    controller: RollbackController,
    state: ControllerState,
    step: int,
    category: str = "unknown",
    *,
    policy: RollbackPolicy = DEFAULT,
    root: int | None = None,
    fatal: bool = False,
) -> Decision:
    """Step ``step`` runs and fails; return the controller's decision."""
    controller.on_step_started(state, step)
    return controller.decide(Failure(step, category, root_step=root, fatal=fatal), state, policy)


def moves(decisions: list[Decision]) -> list[tuple[Strategy, int]]:
    return [(d.strategy, d.target) for d in decisions]


# --- RETRY ---------------------------------------------------------------------------------


@pytest.mark.parametrize("category", sorted(DEFAULT_RETRY_CATEGORIES))
def test_transient_and_argument_failures_retry_the_same_step(category: str) -> None:
    c, s = RollbackController(), ControllerState()
    d = fail(c, s, 6, category)
    assert d == Decision(RETRY, target=6, rollback_to_step=6, replayed=1)
    # issue 11: a retry is charged to the step's own retry streak, not to the replay budget
    assert (s.replay_used, s.retries, s.failures) == (0, {6: 1}, {})


def test_default_retry_categories_are_transient_plus_argument_errors() -> None:
    assert {"timeout", "rate_limited", "connection", "server_error"} == TRANSIENT_CATEGORIES
    assert "malformed_json" in ARGUMENT_CATEGORIES
    assert DEFAULT_RETRY_CATEGORIES == TRANSIENT_CATEGORIES | ARGUMENT_CATEGORIES
    assert "unknown" not in DEFAULT_RETRY_CATEGORIES
    assert "foreign_key" not in DEFAULT_RETRY_CATEGORIES


def test_retry_limit_defaults_to_depth_plus_one_and_at_least_two() -> None:
    c = RollbackController()
    assert c.retry_limit(RollbackPolicy(max_local_depth=2)) == 3
    assert c.retry_limit(RollbackPolicy(max_local_depth=0)) == 2
    assert c.retry_limit(RollbackPolicy(max_local_depth=16)) == 17
    assert RollbackController(max_retries_per_step=5).retry_limit(DEFAULT) == 5


def test_exhausted_retries_fall_through_to_local_backtrack_then_reset() -> None:
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 6, "timeout") for _ in range(6)]
    assert moves(got) == [(RETRY, 6)] * 3 + [(LB, 5), (LB, 4), (RESET, 1)]
    assert got[-1].abort_reason == ""


def test_retries_are_counted_per_step() -> None:
    c, s = RollbackController(max_retries_per_step=1), ControllerState()
    assert fail(c, s, 3, "timeout").strategy is RETRY
    assert fail(c, s, 3, "timeout").strategy is LB
    assert fail(c, s, 4, "timeout").strategy is RETRY


def test_retries_disabled_gives_the_reference_behaviour() -> None:
    c, s = RollbackController(retry_categories=frozenset()), ControllerState()
    assert moves([fail(c, s, 6, "timeout")]) == [(LB, 5)]
    c, s = RollbackController(max_retries_per_step=0), ControllerState()
    assert moves([fail(c, s, 6, "timeout")]) == [(LB, 5)]


def test_retries_do_not_use_the_replay_budget() -> None:
    # issue 11: factor 0.1 at N = 1 gives a budget of 1; retries used to spend it and reset the
    # transaction at the second typo. Now they have their own bound (3 in a row by default),
    # and only then does the failure escalate as a persistent one (LB, LB, then reset).
    policy = RollbackPolicy(replay_budget_factor=0.1)
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 1, "timeout", policy=policy) for _ in range(3)]
    assert moves(got) == [(RETRY, 1)] * 3
    assert (s.epoch, s.replay_used, s.retries) == (0, 0, {1: 3})
    assert fail(c, s, 1, "timeout", policy=policy).strategy is LB


# --- DEPENDENCY_JUMP -----------------------------------------------------------------------


def test_traceable_failure_jumps_to_the_root_cause_step() -> None:
    c, s = RollbackController(), ControllerState()
    d = fail(c, s, 6, "foreign_key", root=2)
    assert d == Decision(DJ, target=2, rollback_to_step=2, replayed=5)
    assert (s.replay_used, s.jumps, s.failures) == (5, {2: 1}, {6: 1})


def test_jumps_to_one_root_are_capped_at_the_depth_then_backtrack() -> None:
    c, s = RollbackController(), ControllerState()  # D = 2: two jumps to a root per epoch
    assert fail(c, s, 6, "foreign_key", root=2).strategy is DJ
    assert fail(c, s, 6, "foreign_key", root=2).strategy is DJ
    # The cap is per root: another step naming root 2 now backtracks locally …
    assert moves([fail(c, s, 7, "foreign_key", root=2)]) == [(LB, 6)]
    # … while a different root is still open.
    assert moves([fail(c, s, 7, "foreign_key", root=3)]) == [(DJ, 3)]


def test_jumps_deepen_the_failing_steps_backtrack_count() -> None:
    # The reference's order: a jump counts as a failure of K, so after two jumps the third
    # failure of K is past D = 2 and escalates.
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 6, "foreign_key", root=2) for _ in range(3)]
    assert moves(got) == [(DJ, 2), (DJ, 2), (RESET, 1)]


def test_depth_zero_still_allows_one_jump_per_root() -> None:
    policy = RollbackPolicy(max_local_depth=0)
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 6, "foreign_key", root=2, policy=policy) for _ in range(2)]
    assert moves(got) == [(DJ, 2), (RESET, 1)]


@pytest.mark.parametrize("root", [0, 6, 7, -1])
def test_a_root_not_before_the_failing_step_is_ignored(root: int) -> None:
    c, s = RollbackController(), ControllerState()
    assert moves([fail(c, s, 6, "foreign_key", root=root)]) == [(LB, 5)]
    assert s.jumps == {}


def test_a_transient_failure_retries_before_jumping() -> None:
    c, s = RollbackController(), ControllerState()
    assert fail(c, s, 6, "timeout", root=2).strategy is RETRY


# --- LOCAL_BACKTRACK -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("depth", "k", "expected"),
    [
        (1, 6, [(LB, 5), (RESET, 1)]),
        (2, 6, [(LB, 5), (LB, 4), (RESET, 1)]),
        (3, 6, [(LB, 5), (LB, 4), (LB, 3), (RESET, 1)]),
        # never below step 1
        (3, 2, [(LB, 1), (LB, 1), (LB, 1), (RESET, 1)]),
        (2, 1, [(LB, 1), (LB, 1), (RESET, 1)]),
    ],
)
def test_local_backtrack_goes_one_step_deeper_per_failure(
    depth: int, k: int, expected: list[tuple[Strategy, int]]
) -> None:
    policy = RollbackPolicy(max_local_depth=depth, replay_budget_factor=1000)
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, k, policy=policy) for _ in expected]
    assert moves(got) == expected
    assert [d.replayed for d in got[:-1]] == [k - t + 1 for _, t in expected[:-1]]


def test_depth_zero_never_backtracks() -> None:
    c, s = RollbackController(), ControllerState()
    assert fail(c, s, 6, policy=RollbackPolicy(max_local_depth=0)).strategy is RESET


def test_failure_counts_are_per_step() -> None:
    c, s = RollbackController(), ControllerState()
    assert moves([fail(c, s, 6), fail(c, s, 5), fail(c, s, 6)]) == [(LB, 5), (LB, 4), (LB, 4)]
    assert s.failures == {5: 1, 6: 2}


# --- budget, GLOBAL_RESET, ABORT -----------------------------------------------------------


@pytest.mark.parametrize(("n", "budget"), [(8, 64), (16, 160), (32, 384), (64, 896)])
def test_budget_table_of_the_docs(n: int, budget: int) -> None:
    assert DEFAULT.replay_budget(n) == budget


def test_a_rewind_over_the_budget_resets_instead() -> None:
    # N = 8, factor 0.5: budget ⌈0.5·8·4⌉ = 16. Two jumps 8 → 1 cost 8 each, exactly 16.
    policy = RollbackPolicy(replay_budget_factor=0.5)
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 8, "foreign_key", root=1, policy=policy) for _ in range(2)]
    assert moves(got) == [(DJ, 1), (DJ, 1)]
    assert s.replay_used == 16
    d = fail(c, s, 7, policy=policy)  # LB 7 → 6 would cost 2 more
    assert d == Decision(RESET, target=1, rollback_to_step=0, context_reset=True, replayed=7)


def test_a_global_reset_starts_a_new_epoch_and_keeps_n() -> None:
    c, s = RollbackController(), ControllerState()
    c.on_step_started(s, 9)
    fail(c, s, 6, "timeout")
    fail(c, s, 6, "foreign_key", root=2)
    fail(c, s, 6)
    assert fail(c, s, 6).strategy is RESET
    assert s == ControllerState(epoch=1, furthest_step=9, global_resets=1)


def test_out_of_resets_aborts_with_the_reference_reason() -> None:
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 6) for _ in range(6)]
    assert moves(got) == [(LB, 5), (LB, 4), (RESET, 1), (LB, 5), (LB, 4), (ABORT, 0)]
    assert got[-1] == Decision(
        ABORT,
        target=0,
        rollback_to_step=0,
        context_reset=True,
        abort_reason="local backtrack depth exhausted; global reset budget (1) exhausted",
    )
    assert (s.global_resets, s.epoch) == (1, 1)


def test_zero_resets_abort_at_the_first_escalation() -> None:
    policy = RollbackPolicy(max_global_resets=0, replay_budget_factor=0.1)
    c, s = RollbackController(), ControllerState()
    assert fail(c, s, 8, policy=policy).strategy is LB  # budget ⌈0.1·8·4⌉ = 4, cost 2
    d = fail(c, s, 8, policy=policy)  # cost 3 more: 5 > 4
    assert d.strategy is ABORT
    assert d.abort_reason == "replay budget exceeded; global reset budget (0) exhausted"


def test_a_huge_factor_leaves_the_depth_in_charge() -> None:
    policy = RollbackPolicy(replay_budget_factor=1000)
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 3, policy=policy) for _ in range(6)]
    assert moves(got) == [(LB, 2), (LB, 1), (RESET, 1), (LB, 2), (LB, 1), (ABORT, 0)]


def test_deep_backtracks_run_into_the_budget() -> None:
    # D = 16 at K = 5, budget 2·5·3 = 30: costs 2, 3, 4, 5, 5, 5 (24 so far), then 29, then 34.
    policy = RollbackPolicy(max_local_depth=16)
    c, s = RollbackController(), ControllerState()
    got = [fail(c, s, 5, policy=policy) for _ in range(8)]
    assert moves(got) == [(LB, 4), (LB, 3), (LB, 2), (LB, 1), (LB, 1), (LB, 1), (LB, 1), (RESET, 1)]


def test_fatal_aborts_at_once() -> None:
    c, s = RollbackController(), ControllerState()
    d = fail(c, s, 4, "timeout", root=2, fatal=True)
    assert d == Decision(
        ABORT,
        target=0,
        rollback_to_step=0,
        context_reset=True,
        abort_reason="step 4 failed with a fatal error",
    )
    assert s == ControllerState(furthest_step=4)


def test_decide_counts_the_failing_step_as_reached() -> None:
    c, s = RollbackController(), ControllerState()
    c.decide(Failure(5, "unknown"), s, DEFAULT)
    assert s.furthest_step == 5


def test_manual_rewinds_charge_nothing_and_keep_counters() -> None:
    c, s = RollbackController(), ControllerState()
    fail(c, s, 6)
    fail(c, s, 6, "timeout")
    before = ControllerState.from_dict(s.to_dict())
    c.on_manual_rewind(s, 2)
    assert s == before
    assert fail(c, s, 6).target == 4  # escalation of step 6 goes on where it was
    with pytest.raises(ValueError, match="0 means abort"):
        c.on_manual_rewind(s, 0)


def test_invalid_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="≥ 1"):
        Failure(0, "unknown")
    with pytest.raises(ValueError, match="start at 1"):
        RollbackController().on_step_started(ControllerState(), 0)
    with pytest.raises(ValueError, match="max_retries_per_step"):
        RollbackController(max_retries_per_step=-1)


# --- durable state -------------------------------------------------------------------------


def test_state_round_trips_through_json() -> None:
    s = ControllerState(
        epoch=1,
        furthest_step=12,
        replay_used=7,
        global_resets=1,
        failures={12: 2, 3: 1},
        jumps={2: 1},
        retries={12: 3},
    )
    wire = json.dumps(s.to_dict())
    assert json.loads(wire)["failures"] == {"3": 1, "12": 2}
    assert ControllerState.from_dict(json.loads(wire)) == s


def test_missing_state_is_a_fresh_state() -> None:
    assert ControllerState.from_dict(None) == ControllerState()
    assert ControllerState.from_dict({}) == ControllerState()
    assert ControllerState.from_dict({"epoch": 2}).failures == {}


# --- the reference's recovery scenarios ----------------------------------------------------


@dataclass
class Run:
    calls: int = 0
    path: list[tuple[Strategy, int]] = field(default_factory=list)
    aborted: bool = False


Script = Callable[[int], Failure | None]


def simulate(
    n: int,
    script: Script,
    policy: RollbackPolicy = DEFAULT,
    controller: RollbackController | None = None,
    *,
    persist: bool = False,
    limit: int = 1_000_000,
) -> Run:
    """A scripted agent: runs steps 1..n in order, following ``next_step_id`` after each failure,
    and counts tool calls. ``persist`` round-trips the state through JSON after every decision,
    as an engine resumed from its store would see it."""
    controller = controller or RollbackController()
    state, run, step = ControllerState(), Run(), 1
    while step <= n:
        run.calls += 1
        assert run.calls <= limit, "the controller did not end the transaction"
        controller.on_step_started(state, step)
        failure = script(step)
        if failure is None:
            step += 1
            continue
        d = controller.decide(failure, state, policy)
        run.path.append((d.strategy, d.target))
        if persist:
            state = ControllerState.from_dict(json.loads(json.dumps(state.to_dict())))
        if d.strategy is ABORT:
            run.aborted = True
            break
        step = d.target
    return run


def scenario_steps(n: int) -> tuple[int, int]:
    r = max(n // 4, 2)
    return r, max(math.ceil(3 * n / 4), r + 2)


def persistent(n: int) -> Script:
    _, f = scenario_steps(n)
    return lambda step: Failure(step, "unknown") if step == f else None


def transient(n: int) -> Script:
    _, f = scenario_steps(n)
    failed = False

    def script(step: int) -> Failure | None:
        nonlocal failed
        if step == f and not failed:
            failed = True
            return Failure(step, "timeout")
        return None

    return script


def root_cause(n: int) -> Script:
    """Step r stores a bad customer id until the agent has seen a hint naming customer_id;
    step f's insert fails on the foreign key while the value step r stored is bad."""
    r, f = scenario_steps(n)
    learned = good = False

    def script(step: int) -> Failure | None:
        nonlocal learned, good
        if step == r:
            good = learned
        if step == f and not good:
            learned = True
            return Failure(step, "foreign_key", key="customer_id", root_step=r)
        return None

    return script


@pytest.mark.parametrize(("n", "calls"), [(8, 22), (16, 34), (32, 58), (64, 106)])
def test_persistent_failure_matches_the_reference(n: int, calls: int) -> None:
    _, f = scenario_steps(n)
    run = simulate(n, persistent(n))
    assert run.calls == calls
    assert run.aborted
    assert run.path == [(LB, f - 1), (LB, f - 2), (RESET, 1), (LB, f - 1), (LB, f - 2), (ABORT, 0)]


@pytest.mark.parametrize(("n", "calls"), [(8, 13), (16, 25), (32, 49), (64, 97)])
def test_root_cause_failure_matches_the_reference(n: int, calls: int) -> None:
    r, _ = scenario_steps(n)
    run = simulate(n, root_cause(n))
    assert (run.calls, run.path, run.aborted) == (calls, [(DJ, r)], False)


@pytest.mark.parametrize(("n", "calls"), [(8, 9), (16, 17), (32, 33), (64, 65)])
def test_transient_failure_costs_one_call_with_retry(n: int, calls: int) -> None:
    _, f = scenario_steps(n)
    run = simulate(n, transient(n))
    assert (run.calls, run.path, run.aborted) == (calls, [(RETRY, f)], False)


@pytest.mark.parametrize(("n", "calls"), [(8, 10), (16, 18), (32, 34), (64, 66)])
def test_without_retry_transient_failure_matches_the_reference(n: int, calls: int) -> None:
    _, f = scenario_steps(n)
    run = simulate(n, transient(n), controller=RollbackController(retry_categories=frozenset()))
    assert (run.calls, run.path) == (calls, [(LB, f - 1)])


@pytest.mark.parametrize("n", [8, 16, 32, 64])
def test_persistent_transient_failure_still_ends(n: int) -> None:
    _, f = scenario_steps(n)
    run = simulate(n, lambda step: Failure(step, "timeout") if step == f else None)
    epoch = [(RETRY, f)] * 3 + [(LB, f - 1), (LB, f - 2)]
    assert run.path == [*epoch, (RESET, 1), *epoch, (ABORT, 0)]
    assert run.calls == 2 * (f + 3 + 2 + 3)


# --- termination ---------------------------------------------------------------------------

CATEGORIES = ["timeout", "malformed_json", "unknown", "foreign_key", "not_null"]


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 24),
    depth=st.integers(0, 16),
    resets=st.integers(0, 6),
    factor=st.one_of(st.floats(0.1, 50), st.sampled_from([0.1, 1000.0])),
    max_retries=st.one_of(st.none(), st.integers(0, 4)),
    p_fail=st.floats(0, 1),
    rng=st.randoms(use_true_random=False),
)
def test_every_transaction_ends_within_the_bound(
    n: int,
    depth: int,
    resets: int,
    factor: float,
    max_retries: int | None,
    p_fail: float,
    rng: random.Random,
) -> None:
    policy = RollbackPolicy(depth, resets, factor)
    controller = RollbackController(max_retries_per_step=max_retries)
    # issue 11: each run that does not follow a RETRY may be followed by R retries of it
    bound = (resets + 1) * (policy.replay_budget(n) + n) * (controller.retry_limit(policy) + 1)
    state, calls, step = ControllerState(), 0, 1
    while step <= n:
        calls += 1
        assert calls <= bound
        controller.on_step_started(state, step)
        if rng.random() >= p_fail:
            step += 1
            continue
        root = rng.choice([None, None, rng.randint(0, step + 1)])
        failure = Failure(step, rng.choice(CATEGORIES), root_step=root, fatal=rng.random() < 0.01)
        d = controller.decide(failure, state, policy)

        assert 0 <= d.target <= step
        assert state.replay_used <= policy.replay_budget(state.furthest_step)
        assert state.epoch == state.global_resets <= resets
        if d.strategy is ABORT:
            assert (d.target, d.rollback_to_step, d.replayed, d.context_reset) == (0, 0, 0, True)
            assert d.abort_reason
            break
        assert d.target >= 1
        assert not d.abort_reason
        if d.strategy is RESET:
            assert (d.target, d.rollback_to_step, d.context_reset) == (1, 0, True)
        else:
            assert d.strategy in (RETRY, DJ, LB)
            assert d.rollback_to_step == d.target
            assert d.replayed == step - d.target + 1
            assert not d.context_reset
        if d.strategy is RETRY:
            assert d.target == step
        # resume from the store, as a restarted engine would
        state = ControllerState.from_dict(json.loads(json.dumps(state.to_dict())))
        step = d.target


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 40), depth=st.integers(0, 16), resets=st.integers(0, 16))
def test_an_always_failing_step_ends_within_the_bound(n: int, depth: int, resets: int) -> None:
    """The adversary: the last step fails with a retryable category every time."""
    policy = RollbackPolicy(depth, resets, 1000.0)
    run = simulate(
        n,
        lambda step: Failure(step, "timeout", root_step=1) if step == n else None,
        policy,
        limit=(resets + 1) * (policy.replay_budget(n) + n) * (max(depth, 1) + 2),
        persist=True,
    )
    assert run.aborted
    assert run.path.count((RESET, 1)) == resets
