"""Recovery scenarios: the reference's 12 scripted-agent runs, naive baseline vs AgentTx.

Run ``python -m benchmarks.recovery [--quick]``; ``docs/benchmarks.md`` (Recovery scenarios)
has the summary, ``benchmarks/results/recovery.md`` the method and every result. The scenarios
themselves (plan, tools, runner, reference figures) are test data in
``tests/recovery_scenarios``, which the tests check and this benchmark only runs and records;
``tests/`` goes on the path so it imports as ``recovery_scenarios``, the name the tests use.
"""

import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[2] / "tests"
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
