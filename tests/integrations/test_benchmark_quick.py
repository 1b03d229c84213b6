"""``python -m benchmarks.integrations --quick`` runs to the end: each framework's plain run,
its run through the adapter (every call a committed ``kv.put`` step, which the benchmark
asserts run by run) and the engine floor, written as one result with the machine. Run as
users run it, in its own interpreter (tests never import ``benchmarks``); the figures' size is
not checked here, only that each is measured and the ratio is made of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FRAMEWORKS = {"langgraph", "openai_agents", "pydantic_ai"}


def test_the_quick_run_measures_every_framework_and_writes_its_result(tmp_path: Path) -> None:
    result = tmp_path / "integrations.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.integrations", "--quick", "--output", str(result)],
        cwd=REPO,
        env={**env, "AGENTTX_BENCH_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    res = json.loads(result.read_text())
    assert res["machine"]["git"]
    assert set(res["frameworks"]) == FRAMEWORKS
    sizes = res["sizes"]
    for name, r in res["frameworks"].items():
        p50 = {v: r[f"{v}_us"]["p50"] for v in ("plain", "wrapped", "floor")}
        assert all(x > 0 for x in p50.values()), (name, p50)
        assert r["wrapped_us"]["n"] == sizes["blocks"] * sizes["runs_per_block"], name
        expected = p50["wrapped"] / (p50["plain"] + p50["floor"])
        assert abs(r["ratio"] - expected) < 1e-3, (name, r["ratio"], expected)
        # the engine's own time is part of the wrapped run's, never more
        assert 0 < r["wrapped_engine_us"]["p50"] < p50["wrapped"], name
