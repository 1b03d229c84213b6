"""The MCP Inspector's CLI (``@modelcontextprotocol/inspector``, the protocol's reference
client tool, pinned) lists and calls AgentTx's tools over stdio and over streamable HTTP.

The test set-up installs the pinned package with npm into a cache directory outside the
tree (once; later runs reuse it). Without npm, or with the registry unreachable, the tests
are skipped with that reason, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from install_lock import npm_install
from mcp_harness import mcp_command
from server_process import TESTS_DIR, ServerProcess, server_env, start_server

INSPECTOR = "@modelcontextprotocol/inspector"
INSPECTOR_VERSION = "2.12.0"  # runs on Node 20 (with an engine warning)
CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "agenttx-tests"
    / f"mcp-inspector-{INSPECTOR_VERSION}"
)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the MCP Inspector is needed under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def inspector() -> Path:
    # The CLI needs no install scripts; the web clients' postinstall is not used.
    package = f"{INSPECTOR}@{INSPECTOR_VERSION}"
    problem = npm_install(CACHE, "mcp-inspector", [package], "--ignore-scripts")
    if problem:
        _unavailable(problem)
    return CACHE / "node_modules" / ".bin" / "mcp-inspector"


def run_cli(inspector: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(inspector), "--cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS_DIR,
        env=server_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    start = done.stdout.index("{")  # the JSON answer, after anything the CLI says first
    value = json.loads(done.stdout[start:])
    assert isinstance(value, dict)
    return value


def test_the_inspector_lists_and_calls_tools_over_stdio(inspector: Path, tmp_path: Path) -> None:
    server = mcp_command(tmp_path / "data")
    listed = run_cli(inspector, *server, "--method", "tools/list")
    names = {t["name"] for t in listed["tools"]}
    assert {"begin_transaction", "run_step", "commit_transaction", "list_tools"} <= names
    begun = run_cli(
        inspector,
        *server,
        "--method",
        "tools/call",
        "--tool-name",
        "begin_transaction",
        "--tool-arg",
        "goal=from the inspector",
    )
    assert begun["isError"] is False
    tx = begun["structuredContent"]["transaction_id"]
    step = run_cli(
        inspector,
        *server,
        "--method",
        "tools/call",
        "--tool-name",
        "run_step",
        "--tool-arg",
        f"transaction_id={tx}",
        "step_id=1",
        "tool=kv.put",
        'arguments={"key": "from", "value": "inspector"}',
    )
    assert step["isError"] is False, step
    assert step["structuredContent"]["status"] == "SUCCESS"
    assert step["structuredContent"]["next_step_id"] == 2


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path / "data", "--http-addr", "127.0.0.1:0")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


def test_the_inspector_lists_and_calls_tools_over_http(
    inspector: Path, http_server: ServerProcess
) -> None:
    [record] = [r for r in http_server.log_records() if r.get("event") == "serving"]
    url = record["mcp_http"]
    listed = run_cli(inspector, url, "--transport", "http", "--method", "tools/list")
    assert "run_step" in {t["name"] for t in listed["tools"]}
    called = run_cli(
        inspector,
        url,
        "--transport",
        "http",
        "--method",
        "tools/call",
        "--tool-name",
        "list_tools",
    )
    assert called["isError"] is False
    assert "kv.put" in {t["name"] for t in called["structuredContent"]["tools"]}
