"""The generated suite (``tests/recovery_scenarios/generated.py``) as a benchmark section:
run it with the default policy and with retries off (the reference's decisions), summarize
against the oracle and check the targets (mean ≤ 1.15× the oracle, 0 bad effects, and exactly
the oracle's calls in each framework-error family)."""

from __future__ import annotations

from typing import Any

from recovery_scenarios.generated import (
    FAMILIES,
    FRAMEWORK_FAMILIES,
    generate,
    run_generated,
    summarize,
)

MEAN_RATIO_TARGET = 1.15
# The reference's decisions: no same-step retry at all (docs/rollback-strategies.md).
REFERENCE_DECISIONS = {"max_step_retries": 0}


async def run_suite(seed: int, count: int) -> dict[str, Any]:
    """Both runs of every scenario; summaries and every run's figures."""
    scenarios = generate(seed, count)
    ours = [await run_generated(s) for s in scenarios]
    reference = [await run_generated(s, policy=REFERENCE_DECISIONS) for s in scenarios]
    return {
        "seed": seed,
        "count": count,
        "summary": summarize(ours),
        "reference_decisions": summarize(reference),
        "runs": [r.to_dict() for r in ours],
    }


def check(suite: dict[str, Any]) -> list[dict[str, Any]]:
    s = suite["summary"]
    # A failure on arguments typed at the failing step costs only that step's retry (issue 25).
    framework: list[dict[str, Any]] = []
    for family in FRAMEWORK_FAMILIES:
        f = s["families"][family]
        if f["scenarios"]:
            framework.append(
                {
                    "scenario": f"generated {family}",
                    "target": "tool calls = the oracle's (1.00x)",
                    "ok": f["at_oracle"] == f["scenarios"],
                    "detail": f"mean {f['mean_ratio']:.4f}x, "
                    f"{f['at_oracle']}/{f['scenarios']} at the oracle",
                }
            )
    return [
        *framework,
        {
            "scenario": "generated",
            "target": f"mean tool calls <= {MEAN_RATIO_TARGET}x the oracle",
            "ok": s["mean_ratio"] <= MEAN_RATIO_TARGET,
            "detail": f"mean {s['mean_ratio']:.4f}x, worst {s['worst_ratio']:.4f}x",
        },
        {
            "scenario": "generated",
            "target": "0 bad effects",
            "ok": s["bad_effects"] == 0,
            "detail": f"{s['bad_effects']} bad effects",
        },
        {
            "scenario": "generated",
            "target": "every run commits, no global reset",
            "ok": s["failed_runs"] == 0 and s["global_resets"] == 0,
            "detail": f"{s['failed_runs']} failed runs, {s['global_resets']} resets",
        },
    ]


def table(suite: dict[str, Any]) -> str:
    ours, ref = suite["summary"], suite["reference_decisions"]
    head = (
        f"{'family':<21} {'runs':>4} │ {'mean':>6} {'worst':>6} {'=oracle':>7} {'bad':>4} "
        f"{'resets':>6} │ {'retries off: mean':>17} {'worst':>6} {'resets':>6}"
    )
    lines = [
        f"generated suite: seed {suite['seed']}, {suite['count']} scenarios; tool calls as a "
        "ratio to the oracle's",
        head,
        "─" * len(head),
    ]
    rows = [(f, ours["families"][f], ref["families"][f]) for f in FAMILIES]
    rows.append(("all", ours, ref))
    for name, a, b in rows:
        lines.append(
            f"{name:<21} {a['scenarios']:>4} │ {a['mean_ratio']:>6.3f} {a['worst_ratio']:>6.3f} "
            f"{a['at_oracle']:>7} {a['bad_effects']:>4} {a['global_resets']:>6} │ "
            f"{b['mean_ratio']:>17.3f} {b['worst_ratio']:>6.3f} {b['global_resets']:>6}"
        )
    return "\n".join(lines)
