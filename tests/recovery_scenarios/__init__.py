"""The reference's 12 recovery scenarios: a scripted agent (no LLM) on three failure kinds ×
N steps, run once as a naive auto-commit baseline and once through AgentTx.

Test data, shared by two users: ``tests/e2e/test_recovery_scenarios.py`` holds our targets to
these runs, and ``python -m benchmarks.recovery`` prints and records them. It lives under
``tests/`` because the tests are what pin it down (the plan, the tools' error texts, the
reference's figures must stay exact); the benchmark imports it from here, never the other way
round. ``scenario`` is the plan, ``tools`` the failing service tools, ``runner`` the two runs
and their metrics, ``reference`` the reference's published figures and the checks against them.
"""

from .reference import check_baseline_fidelity, check_targets
from .runner import RunMetrics, run_agenttx, run_baseline, run_scenario
from .scenario import QUICK_SIZES, SIZES, Kind, Scenario, scenarios

__all__ = [
    "QUICK_SIZES",
    "SIZES",
    "Kind",
    "RunMetrics",
    "Scenario",
    "check_baseline_fidelity",
    "check_targets",
    "run_agenttx",
    "run_baseline",
    "run_scenario",
    "scenarios",
]
