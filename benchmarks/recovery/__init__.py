"""Recovery scenarios: the reference's 12 scripted-agent runs, naive baseline vs AgentTx.

Run ``python -m benchmarks.recovery [--quick]``; see ``docs/benchmarks.md`` (Recovery
scenarios) for the method and the results, ``runner.py`` for how each run is made.
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
