"""``examples/agent_loop.py`` runs as a user runs it, with no model key in the environment (the
scripted model): on an embedded engine, and against a real ``agenttx serve`` (``--server``).
Its mistyped read fails, is retried in place from the hint at the same step, and the run
commits its two steps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from paths import ROOT
from server_process import server_env, start_server

EXAMPLE = ROOT / "examples" / "agent_loop.py"


def run_example(*args: str) -> str:
    # No model key, whatever the shell has: the scripted model, no network.
    env = {
        k: v for k, v in server_env().items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check_the_run(out: str) -> None:
    lines = out.splitlines()
    assert lines[0] == "model: scripted"
    assert lines[1].startswith('step 1: kv--put({"key": "customer/42"')
    assert lines[2].startswith(
        'step 2: kv--get({"key": "customer/24"}) -> AgentTx: kv--get (step 2)'
    )
    assert "resumes at step 2" in lines[2]  # retried in place: nothing earlier undone
    assert lines[3].startswith('step 2: kv--get({"key": "customer/42"}) -> {"key": "customer/42"')
    assert lines[-1].endswith(": committed 2 steps")


pytestmark = pytest.mark.stores("sqlite")  # the example opens its own SQLite engine


def test_the_agent_loop_runs_on_an_embedded_engine() -> None:
    check_the_run(run_example())


def test_the_agent_loop_runs_against_a_server(tmp_path: Path) -> None:
    server = start_server(tmp_path / "served")
    with server.killed_on_error():
        check_the_run(run_example("--server", server.address))
    assert server.terminate() == 0
