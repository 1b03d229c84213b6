"""``python -m benchmarks.recovery [--quick] [--seed S] [--generated COUNT] [--out PATH]``: the
reference's 12 scenarios and the generated suite (``generated.py``); run, print, write JSON."""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import RESULTS_DIR, Out, machine_info, write_result
from benchmarks.recovery import generated
from recovery_scenarios.reference import (
    BAD_EFFECTS_TOTAL,
    CALLS,
    PATHS,
    TOKENS,
    check_baseline_fidelity,
    check_targets,
)
from recovery_scenarios.runner import run_scenario
from recovery_scenarios.scenario import QUICK_SIZES, SIZES, scenarios

DEFAULT_OUT = RESULTS_DIR / "recovery.json"
SEED = 11
GENERATED = 312  # 24 per family
QUICK_GENERATED = 52  # 4 per family


async def run_all(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    return [await run_scenario(s) for s in scenarios(sizes)]


def _path(run: dict[str, Any]) -> str:
    steps = []
    for s in run["strategies"]:
        short = {
            "RETRY": "retry",
            "DEPENDENCY_JUMP": "jump",
            "LOCAL_BACKTRACK": "LB",
            "GLOBAL_RESET": "reset",
            "ABORT": "abort",
        }.get(s["strategy"], s["strategy"])
        steps.append(short if short in ("reset", "abort") else f"{short}→{s['next_step_id']}")
    return ", ".join(steps) or "-"


def table(results: list[dict[str, Any]]) -> str:
    head = (
        f"{'scenario':<15} {'r':>2} {'f':>3} │ {'calls base':>10} {'ours':>5} {'ref b/r':>8} │ "
        f"{'tokens base':>11} {'ours':>5} {'ref b/r':>9} │ {'bad base':>8} {'ours':>4} │ "
        "path (ours)"
    )
    lines = [head, "─" * len(head)]
    for r in results:
        b, a = r["baseline"], r["agenttx"]
        rb, rr = CALLS[r["kind"]][r["steps"]]
        tb, tr = TOKENS[r["kind"]]
        root = r["root_step"] if r["root_step"] is not None else max(r["steps"] // 4, 2)
        lines.append(
            f"{r['id']:<15} {root:>2} {r['failing_step']:>3} │ {b['tool_calls']:>10} "
            f"{a['tool_calls']:>5} {f'{rb}/{rr}':>8} │ {b['feedback_tokens']:>11} "
            f"{a['feedback_tokens']:>5} {f'{tb}/{tr}':>9} │ {b['bad_effects']:>8} "
            f"{a['bad_effects']:>4} │ {_path(a)}"
        )
    bad_b = sum(r["baseline"]["bad_effects"] for r in results)
    bad_a = sum(r["agenttx"]["bad_effects"] for r in results)
    lines.append("─" * len(head))
    lines.append(
        f"bad effects over {len(results)} scenarios: baseline {bad_b}, AgentTx {bad_a} "
        f"(reference, 12 scenarios: baseline {BAD_EFFECTS_TOTAL[0]}, "
        f"reference {BAD_EFFECTS_TOTAL[1]})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"N in {QUICK_SIZES} only")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON results file (default {DEFAULT_OUT.name} in benchmarks/results; "
        "a --quick run writes only when --out is given)",
    )
    parser.add_argument("--seed", type=int, default=SEED, help="seed of the generated suite")
    parser.add_argument(
        "--generated",
        type=int,
        default=None,
        help=f"generated scenarios (default {GENERATED}, --quick {QUICK_GENERATED}; 0 = none)",
    )
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    count = (
        args.generated
        if args.generated is not None
        else (QUICK_GENERATED if args.quick else GENERATED)
    )
    started = time.perf_counter()
    results = asyncio.run(run_all(sizes))
    suite = asyncio.run(generated.run_suite(args.seed, count)) if count else None
    elapsed = time.perf_counter() - started
    print(table(results))
    targets = check_targets(results)
    if suite is not None:
        print()
        print(generated.table(suite))
        targets += generated.check(suite)
    fidelity = check_baseline_fidelity(results)
    missed = [c for c in targets if not c["ok"]]
    unfaithful = [c for c in fidelity if not c["ok"]]
    print()
    print(
        f"targets: {len(targets) - len(missed)}/{len(targets)} met; baseline matches the "
        f"reference's in {len(fidelity) - len(unfaithful)}/{len(fidelity)} scenarios "
        f"({elapsed:.1f} s)"
    )
    for c in missed + unfaithful:
        print(f"  MISSED {c['scenario']}: {c['target']} ({c['detail']})")
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out is not None:
        report = {
            "schema_version": 1,
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "machine": platform.machine(),
            },
            "measured_on": machine_info(),
            "config": {
                "sizes": list(sizes),
                "quick": args.quick,
                "generated": {"seed": args.seed, "count": count},
            },
            "methodology": {
                "agent": "Deterministic scripted agent (no LLM); it fixes the root-cause step "
                "once any feedback it received contains 'customer_id' and sends the step it is "
                "asked for next.",
                "baseline": "Each call is its own engine transaction, always committed (failed "
                "calls included); undo records dropped; effects sent immediately to a plain "
                "JSON-lines file; raw error text to the agent; retry a step 3x, then restart "
                "from step 1 (max 3 restarts); 'already exists' on replay = done.",
                "agenttx": "One transaction, default policy (depth 2, 1 global reset, factor "
                "2.0), idle reaper off; the agent sees only the Clean Hint; effects counted "
                "from the engine's JSON-lines outbox after commit.",
                "tokens": "ceil(feedback bytes / 4), per scenario",
                "generated": "Seeded random step graphs, one fault family each (see "
                "tests/recovery_scenarios/generated.py); the scripted agent fixes what a hint "
                "names; the oracle knows each failure's cause when it shows and rewinds exactly "
                "there (N + per failure 1 + f - r); run with the default policy and with "
                "max_step_retries 0 (the reference's decisions).",
            },
            "reference": {
                "calls": {k: {str(n): list(v) for n, v in d.items()} for k, d in CALLS.items()},
                "tokens": {k: list(v) for k, v in TOKENS.items()},
                "bad_effects_total": list(BAD_EFFECTS_TOTAL),
                "paths": PATHS,
            },
            "scenarios": results,
            "targets": targets,
            "baseline_fidelity": fidelity,
            "generated": suite,
            "elapsed_s": round(elapsed, 3),
        }
        write_result(Out(), out, report)
    return 1 if missed or unfaithful else 0


if __name__ == "__main__":
    raise SystemExit(main())
