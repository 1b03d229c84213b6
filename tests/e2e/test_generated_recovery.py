"""The generated recovery suite (``recovery_scenarios/generated.py``), bounded: two seeded
scenarios per fault family, run once per module through AgentTx with the real tools, against
the oracle that knows each failure's cause (issue 11, point 6). ``python -m
benchmarks.recovery`` runs the full suite and records it."""

from __future__ import annotations

import asyncio

import pytest

from recovery_scenarios.generated import (
    FAMILIES,
    Generated,
    GeneratedRun,
    Root,
    generate,
    run_generated,
    summarize,
)

SEED = 11
COUNT = 2 * len(FAMILIES)


@pytest.fixture(scope="module")
def runs() -> list[GeneratedRun]:
    async def run_all() -> list[GeneratedRun]:
        return [await run_generated(s) for s in generate(SEED, COUNT)]

    return asyncio.run(run_all())


def test_the_suite_meets_its_targets(runs: list[GeneratedRun]) -> None:
    summary = summarize(runs)
    assert summary["mean_ratio"] <= 1.15
    assert summary["worst_ratio"] <= 1.25  # a burst past the retry bound costs one backtrack
    assert summary["bad_effects"] == 0
    assert summary["failed_runs"] == 0
    assert summary["global_resets"] == 0
    assert {f: s["scenarios"] for f, s in summary["families"].items()} == dict.fromkeys(FAMILIES, 2)


def test_every_run_leaves_exactly_the_final_plans_effects(runs: list[GeneratedRun]) -> None:
    for r in runs:
        assert r.succeeded, r.id
        assert (r.duplicate_effects, r.leaked_effects, r.orphaned_files) == (0, 0, 0), r.id
        assert r.wrong_reservations == 0, r.id
        assert r.detail["missing_emails"] == 0, r.id


def test_root_causes_jump_once_to_their_producer(runs: list[GeneratedRun]) -> None:
    for r in runs:
        jumps = [s for s in r.strategies if s.startswith("DEPENDENCY_JUMP")]
        expected = [
            f"DEPENDENCY_JUMP@{root['fails_at']}→{root['producer']}" for root in r.detail["roots"]
        ]
        assert jumps == expected, r.id
        if r.detail["roots"]:
            assert not any(s.startswith("LOCAL_BACKTRACK") for s in r.strategies), r.id


def test_typos_retry_in_place_and_undo_nothing_earlier(runs: list[GeneratedRun]) -> None:
    typo_runs = [r for r in runs if r.detail["typo"]]
    assert typo_runs
    for r in typo_runs:
        step, *typos = r.detail["typo"]
        assert [s for s in r.strategies if s.endswith(f"@{step}→{step}")] == [
            f"RETRY@{step}→{step}"
        ] * len(typos), r.id
        assert r.tool_calls == r.oracle_calls, r.id


def test_a_burst_within_the_retry_bound_costs_only_its_failures(
    runs: list[GeneratedRun],
) -> None:
    bursts = [r for r in runs if r.family == "transient-burst"]
    for r in bursts:
        step, burst = r.detail["burst"]
        retries = min(burst, 3)
        assert r.strategies[:retries] == [f"RETRY@{step}→{step}"] * retries, r.id
        if burst <= 3:
            assert r.tool_calls == r.oracle_calls, r.id
        else:  # persistent after three in a row: one local backtrack, one step re-run
            assert r.strategies[3] == f"LOCAL_BACKTRACK@{step}→{step - 1}", r.id
            assert r.tool_calls == r.oracle_calls + 1, r.id


def test_a_failing_compensation_is_retried_and_leaves_nothing(
    runs: list[GeneratedRun],
) -> None:
    comp = [r for r in runs if r.family == "compensation-failure"]
    assert comp
    for r in comp:
        assert r.detail["failed_compensations"] == 1, r.id  # the undo did fail once
        assert r.compensation_errors == 0, r.id  # and its retry succeeded
        assert r.wrong_reservations == 0, r.id


def test_generation_is_seeded() -> None:
    assert generate(SEED, 9) == generate(SEED, 9)
    assert generate(SEED, 9) != generate(SEED + 1, 9)


def test_the_oracle_counts_each_failure_and_the_re_runs_its_cause_needs() -> None:
    root = Root("customer_id", "customers", "c-1", "c-404", producer=4, fails_at=9, via="ref")
    s = Generated(
        seed=0,
        index=0,
        family="typo+root",
        steps=12,
        fillers={},
        roots=(root,),
        burst_at=11,
        burst=2,
        typo_at=6,
        typos=("unknown-tool", "malformed-json"),
    )
    # 12 steps + (1 failed call + 5 re-runs of 4…8) + 2 transient tries + 2 malformed tries
    assert s.oracle_calls() == 12 + 6 + 2 + 2


def test_a_wrong_credential_never_undoes_earlier_steps_by_default() -> None:
    """http_auth and quota_exhausted are permanent unless configured otherwise: the controller
    retries the failing step (someone fixes the credential outside) and then aborts, never
    rewinding the steps before it."""
    from agenttx.core.controller import ControllerState, Failure, RollbackController
    from agenttx.types import RollbackPolicy, Strategy

    controller = RollbackController()
    state = ControllerState()
    policy = RollbackPolicy()
    for k in (1, 2, 3):
        controller.on_step_started(state, k)
    seen = []
    for _ in range(10):
        decision = controller.decide(Failure(step_id=3, category="http_auth"), state, policy)
        seen.append(decision.strategy)
        if decision.strategy is Strategy.ABORT:
            break
        assert decision.rollback_to_step == 3
    assert seen[-1] is Strategy.ABORT
    assert set(seen[:-1]) == {Strategy.RETRY}
