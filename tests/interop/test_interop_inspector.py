"""The MCP Inspector's CLI (``@modelcontextprotocol/inspector``, the protocol's reference
client tool) lists and calls AgentTx's tools: 2.12.0 over stdio and streamable HTTP, its
``--strict`` schema-portability check finding nothing (no error, no warning), and 0.15.0 —
what ``npx @modelcontextprotocol/inspector`` picks on Node 20 — over stdio. Both are built on
the TypeScript SDK, so a schema it refuses leaves them unable to list or call anything.

Each CLI call is its own ``agenttx mcp`` process on one data directory: the transaction one
begins is the one the next steps (the store keeps it).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from interop_clients import http_server, npm_package, stdio_command
from server_process import TESTS_DIR, server_env

INSPECTOR = "@modelcontextprotocol/inspector"
NEWEST = "2.12.0"  # runs on Node 20 (with an engine warning)
ON_NODE_20 = "0.15.0"  # the newest whose engines field admits Node 20: what npx picks there


def inspector(version: str) -> Path:
    # The CLI needs no install scripts; the web clients' postinstall is not used.
    node_modules = npm_package(INSPECTOR, version, ".bin/mcp-inspector", "--ignore-scripts")
    return node_modules / ".bin" / "mcp-inspector"


@pytest.fixture(scope="module")
def newest() -> Path:
    return inspector(NEWEST)


def run_cli(cli: Path, *args: str) -> tuple[dict[str, Any], str]:
    """The CLI's JSON answer and its stderr (where ``--strict`` reports)."""
    done = subprocess.run(
        [str(cli), "--cli", *args],
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
    return value, done.stderr


def assert_portable(stderr: str) -> None:
    """``--strict`` prints each finding as ``Error: tool …`` or ``Warning: tool …`` and a
    count; without findings, nothing of it."""
    findings = [line for line in stderr.splitlines() if line.startswith(("Error:", "Warning:"))]
    assert findings == [], stderr
    assert "portability" not in stderr.lower(), stderr


def list_and_step(cli: Path, server: list[str], *transport: str) -> dict[str, Any]:
    """tools/list, begin_transaction and one kv.put step; the listing."""
    listed, _ = run_cli(cli, *server, *transport, "--method", "tools/list")
    begun, _ = run_cli(
        cli,
        *server,
        *transport,
        "--method",
        "tools/call",
        "--tool-name",
        "begin_transaction",
        "--tool-arg",
        "goal=from the inspector",
    )
    assert begun["isError"] is False
    tx = begun["structuredContent"]["transaction_id"]
    step, _ = run_cli(
        cli,
        *server,
        *transport,
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
    return listed


def test_the_inspector_lists_and_calls_tools_over_stdio(newest: Path, tmp_path: Path) -> None:
    listed = list_and_step(newest, stdio_command(tmp_path / "data"))
    names = {t["name"] for t in listed["tools"]}
    assert {"begin_transaction", "run_step", "commit_transaction", "list_tools"} <= names


def test_the_inspector_on_node_20_lists_and_calls_tools(tmp_path: Path) -> None:
    listed = list_and_step(inspector(ON_NODE_20), stdio_command(tmp_path / "data"))
    assert "reconcile_step" in {t["name"] for t in listed["tools"]}


def test_strict_finds_no_portability_problem_over_stdio(newest: Path, tmp_path: Path) -> None:
    server = stdio_command(tmp_path / "data")
    listed, stderr = run_cli(newest, *server, "--method", "tools/list", "--strict")
    assert len(listed["tools"]) >= 18  # every tool, the outbox's too
    assert_portable(stderr)


def test_the_inspector_lists_and_calls_tools_over_http(newest: Path, tmp_path: Path) -> None:
    with http_server(tmp_path / "data") as url:
        http = ("--transport", "http")
        listed, stderr = run_cli(newest, url, *http, "--method", "tools/list", "--strict")
        assert_portable(stderr)
        assert "run_step" in {t["name"] for t in listed["tools"]}
        called, _ = run_cli(
            newest, url, *http, "--method", "tools/call", "--tool-name", "list_tools"
        )
    assert called["isError"] is False
    assert "kv.put" in {t["name"] for t in called["structuredContent"]["tools"]}
