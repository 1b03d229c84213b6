"""The official TypeScript MCP SDK (``@modelcontextprotocol/sdk``, pinned; the client inside
Claude Code, VS Code, Cursor, Gemini CLI and the Inspector) lists AgentTx's tools and calls
every one of them, over stdio and over streamable HTTP (``ts_sdk_client.mjs``).

Its checks are stricter than the Python SDK's: ``tools/list`` fails as a whole when one
property schema is not an object (``true`` was), and every result with ``structuredContent``,
a refusal too, is validated against the tool's ``outputSchema``. A refused call passes here as
long as the SDK accepted its shape; the calls the scenario marks ``ok`` must succeed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from interop_clients import HERE, SCENARIO, http_server, npm_package, scenario, stdio_command
from server_process import TESTS_DIR, server_env

SDK = "@modelcontextprotocol/sdk"
SDK_VERSION = "1.32.2"


@pytest.fixture(scope="module")
def sdk_dir() -> Path:
    node_modules = npm_package(SDK, SDK_VERSION, f"{SDK}/package.json", "--ignore-scripts")
    return node_modules / SDK


def run_client(sdk_dir: Path, *target: str) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None  # npm_package installed with it
    done = subprocess.run(
        [node, str(HERE / "ts_sdk_client.mjs"), str(sdk_dir), str(SCENARIO), *target],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=TESTS_DIR,
        env=server_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["sdk"] == SDK_VERSION
    return report


def assert_every_tool_listed_and_called(report: dict[str, Any]) -> None:
    assert "error" not in report, report["error"]["message"]
    listed = {t["name"] for t in report["tools"]}
    called = {c["tool"] for c in report["calls"]}
    assert listed == called, (
        "listed, never called:",
        listed - called,
        "not listed:",
        called - listed,
    )
    rejected = [(c["tool"], c["error"]["message"]) for c in report["calls"] if "error" in c]
    assert rejected == []
    failed = [c for c in report["calls"] if c["expect"] == "ok" and (c["isError"] or not c["ok"])]
    assert failed == []
    refused = [c for c in report["calls"] if c["isError"]]
    assert refused, "the scenario's refusals never came: their shape went unchecked"
    assert all(c["ok"] is False and c["code"] for c in refused), refused
    assert len(report["calls"]) == len(scenario())


def test_the_typescript_sdk_lists_and_calls_every_tool_over_stdio(
    sdk_dir: Path, tmp_path: Path
) -> None:
    report = run_client(sdk_dir, "stdio", *stdio_command(tmp_path / "data"))
    assert_every_tool_listed_and_called(report)
    assert report["server"]["name"] == "agenttx"
    # The hints a host decides on (whether to ask a person first) arrive as declared.
    hints = {t["name"]: t["annotations"] for t in report["tools"]}
    assert (
        hints["commit_transaction"]["destructiveHint"],
        hints["get_transaction"]["readOnlyHint"],
    ) == (True, True)


def test_the_typescript_sdk_lists_and_calls_every_tool_over_http(
    sdk_dir: Path, tmp_path: Path
) -> None:
    with http_server(tmp_path / "data") as url:
        report = run_client(sdk_dir, "http", url)
    assert_every_tool_listed_and_called(report)
