"""The reference's 12 recovery scenarios (``tests/recovery_scenarios``, which
``benchmarks/recovery`` also runs) against our targets.

All 24 runs (12 scenarios × baseline and AgentTx) happen once per module; together they take
about two seconds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from recovery_scenarios import SIZES, Kind, Scenario, run_scenario, scenarios
from recovery_scenarios.reference import BAD_EFFECTS_TOTAL, CALLS, TOKENS

IDS = [s.id for s in scenarios(SIZES)]


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    async def run_all() -> list[dict[str, Any]]:
        return [await run_scenario(s) for s in scenarios(SIZES)]

    return {r["id"]: r for r in asyncio.run(run_all())}


@pytest.mark.parametrize("sid", IDS)
def test_agenttx_leaves_no_bad_effects(results: dict[str, dict[str, Any]], sid: str) -> None:
    run = results[sid]["agenttx"]
    assert run["duplicate_effects"] == 0
    assert run["leaked_effects"] == 0
    assert run["orphaned_files"] == 0, run["orphans"]


@pytest.mark.parametrize("sid", IDS)
def test_agenttx_calls_within_reference(results: dict[str, dict[str, Any]], sid: str) -> None:
    r = results[sid]
    assert r["agenttx"]["tool_calls"] <= CALLS[r["kind"]][r["steps"]][1]


@pytest.mark.parametrize("n", SIZES)
def test_transient_retries_the_same_step(results: dict[str, dict[str, Any]], n: int) -> None:
    run = results[f"transient-{n}"]["agenttx"]
    assert run["tool_calls"] == n + 1  # the reference needs N+2 (a local backtrack)
    assert [s["strategy"] for s in run["strategies"]] == ["RETRY"]
    assert run["succeeded"]


@pytest.mark.parametrize("n", SIZES)
def test_root_cause_jumps_once_to_the_root(results: dict[str, dict[str, Any]], n: int) -> None:
    r = results[f"root-cause-{n}"]
    run = r["agenttx"]
    assert [s["strategy"] for s in run["strategies"]] == ["DEPENDENCY_JUMP"]
    assert run["strategies"][0]["rollback_to_step"] == r["root_step"]
    assert run["strategies"][0]["next_step_id"] == r["root_step"]
    assert "customer_id" in run["strategies"][0]["hint"]
    assert run["succeeded"]
    plan = Scenario(Kind.ROOT_CAUSE, n)
    staged = [i for i in range(1, n + 1) if plan.plan(i, learned=True)[0] == "effect.stage"]
    assert run["effects_dispatched"] == len(staged)  # each wf-i exactly once


@pytest.mark.parametrize("n", SIZES)
def test_persistent_aborts_with_everything_undone(
    results: dict[str, dict[str, Any]], n: int
) -> None:
    r = results[f"persistent-{n}"]
    run, f = r["agenttx"], r["failing_step"]
    assert not run["succeeded"]
    # bench.broken's only input is typed at the step: its first failure is retried in place
    # of the reference's first local backtrack, then the escalation is the reference's
    assert [(s["strategy"], s["next_step_id"]) for s in run["strategies"]] == [
        ("RETRY", f),
        ("LOCAL_BACKTRACK", f - 2),
        ("GLOBAL_RESET", 1),
        ("RETRY", f),
        ("LOCAL_BACKTRACK", f - 2),
        ("ABORT", 0),
    ]
    assert run["tool_calls"] == CALLS["persistent"][n][1] - 2  # one replayed step per epoch
    assert run["effects_dispatched"] == 0


def test_baseline_reproduces_the_reference(results: dict[str, dict[str, Any]]) -> None:
    for r in results.values():
        base = r["baseline"]
        assert base["tool_calls"] == CALLS[r["kind"]][r["steps"]][0], r["id"]
        assert base["feedback_tokens"] == TOKENS[r["kind"]][0], r["id"]
    assert sum(r["baseline"]["bad_effects"] for r in results.values()) == BAD_EFFECTS_TOTAL[0]


def test_feedback_tokens_within_reference(results: dict[str, dict[str, Any]]) -> None:
    over = {
        sid: (r["agenttx"]["feedback_tokens"], TOKENS[r["kind"]][1])
        for sid, r in results.items()
        if r["agenttx"]["feedback_tokens"] > TOKENS[r["kind"]][1]
    }
    assert not over
