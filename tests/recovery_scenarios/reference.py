"""The reference's published recovery numbers (``/work/shared/REFERENCE.md``) and our targets.

Feedback tokens are published once per failure kind (root-cause 1029 / 27, transient 137 / 23,
persistent 1526 / 230). They are *per scenario*, not summed over N: in every kind the failures
happen at the same steps whatever N is, so each run of a kind receives the same feedback for
N = 8, 16, 32 and 64. Check: the baseline's root-cause feedback is 4 psycopg traces (1001 B)
plus one duplicate-key error on replay (109 B) = 4113 B → ⌈4113/4⌉ = 1029; summed over the
four sizes it would be 4116.
"""

from __future__ import annotations

from typing import Any

# (baseline calls, reference calls) per kind and N.
CALLS: dict[str, dict[int, tuple[int, int]]] = {
    "root-cause": {8: (17, 13), 16: (31, 25), 32: (59, 49), 64: (115, 97)},
    "transient": {8: (9, 10), 16: (17, 18), 32: (33, 34), 64: (65, 66)},
    "persistent": {8: (36, 22), 16: (60, 34), 32: (108, 58), 64: (204, 106)},
}

# (baseline tokens, reference tokens) per scenario of each kind, the same for every N.
TOKENS: dict[str, tuple[int, int]] = {
    "root-cause": (1029, 27),
    "transient": (137, 23),
    "persistent": (1526, 230),
}

# Bad effects (duplicate + leaked + orphaned) over all 12 scenarios.
BAD_EFFECTS_TOTAL = (148, 0)

PATHS = {
    "root-cause": "one dependency jump to r",
    "transient": "local backtrack to f-1",
    "persistent": "LB, LB, reset, LB, LB, abort",
}


def check_targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per target and scenario: {scenario, target, ok, detail}."""
    checks: list[dict[str, Any]] = []

    def add(scenario: str, target: str, ok: bool, detail: str) -> None:
        checks.append({"scenario": scenario, "target": target, "ok": ok, "detail": detail})

    for r in results:
        sid, kind, n = r["id"], r["kind"], r["steps"]
        ours = r["agenttx"]
        ref_calls = CALLS[kind][n][1]
        ref_tokens = TOKENS[kind][1]
        add(sid, "0 bad effects", ours["bad_effects"] == 0, f"{ours['bad_effects']} bad effects")
        add(
            sid,
            "calls <= reference",
            ours["tool_calls"] <= ref_calls,
            f"{ours['tool_calls']} vs {ref_calls}",
        )
        if kind == "transient":
            add(
                sid,
                "transient: N+1 calls (same-step retry)",
                ours["tool_calls"] == n + 1 and ours["tool_calls"] < ref_calls,
                f"{ours['tool_calls']} vs N+1 = {n + 1}",
            )
        if kind == "root-cause":
            jumps = [s for s in ours["strategies"] if s["strategy"] == "DEPENDENCY_JUMP"]
            ok = len(jumps) == 1 and jumps[0]["rollback_to_step"] == r["root_step"]
            add(sid, "one dependency jump to r", ok, f"{len(jumps)} jump(s) to {r['root_step']}")
        expected = kind != "persistent"
        add(
            sid,
            "outcome",
            ours["succeeded"] is expected,
            "committed" if ours["succeeded"] else "aborted",
        )
        add(
            sid,
            "feedback tokens <= reference",
            ours["feedback_tokens"] <= ref_tokens,
            f"{ours['feedback_tokens']} vs {ref_tokens}",
        )
    return checks


def check_baseline_fidelity(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our baseline against the reference's published baseline (same calls, same tokens)."""
    checks: list[dict[str, Any]] = []
    for r in results:
        base = r["baseline"]
        calls = CALLS[r["kind"]][r["steps"]][0]
        tokens = TOKENS[r["kind"]][0]
        ok = base["tool_calls"] == calls and base["feedback_tokens"] == tokens
        detail = (
            f"calls {base['tool_calls']} vs {calls}, tokens {base['feedback_tokens']} vs {tokens}"
        )
        checks.append(
            {"scenario": r["id"], "target": "baseline = reference's", "ok": ok, "detail": detail}
        )
    return checks
