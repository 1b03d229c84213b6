"""``agenttx mcp --gateway FILE`` end to end, with the SDK client in both protocol eras: the
downstream tools are listed by ``list_tools`` with their server, run through ``run_step``,
and a downstream tool's progress reaches the agent as MCP progress."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from gateway_servers import npm_server, write_gateway
from mcp_harness import ERAS, structured
from paths import TESTS
from server_process import TESTS_DIR, agenttx_command, server_env

LONG = "trigger-long-running-operation"


@pytest.fixture
def params(tmp_path: Path) -> StdioServerParameters:
    root = tmp_path / "srv"
    root.mkdir()
    (root / "notes.txt").write_text("hello from the gateway\n")
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.files]
        command = "{npm_server("mcp-server-filesystem")}"
        args = ["{root}"]
        include = ["read_text_file", "write_file"]

        [servers.every]
        command = "{npm_server("mcp-server-everything")}"
        include = ["{LONG}"]
        """,
    )
    command = agenttx_command(
        "mcp", "--data-dir", str(tmp_path / "data"), "--gateway", str(gateway)
    )
    return StdioServerParameters(
        command=command[0], args=command[1:], env=server_env(), cwd=str(TESTS_DIR)
    )


@pytest.mark.parametrize("era", ERAS)
async def test_downstream_tools_are_listed_and_run_as_steps(
    params: StdioServerParameters, tmp_path: Path, era: str
) -> None:
    async with Client(params, mode=era, read_timeout_seconds=60) as client:
        listed = structured(await client.call_tool("list_tools", {}))["tools"]
        tools = {t["name"]: t for t in listed}
        assert tools["files.read_text_file"]["server"] == "files"
        assert tools["files.write_file"]["effect"] == "staged"
        assert "server" not in tools["kv.put"]
        tx = structured(await client.call_tool("begin_transaction", {}))["transaction_id"]
        step: dict[str, Any] = structured(
            await client.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": 1,
                    "tool": "files.read_text_file",
                    "arguments": {"path": str(tmp_path / "srv" / "notes.txt")},
                },
            )
        )
        assert step["status"] == "SUCCESS", step
        assert step["output"]["content"] == "hello from the gateway\n"


async def test_downstream_progress_reaches_the_agent(params: StdioServerParameters) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(params, mode="legacy", read_timeout_seconds=60) as client:
        tx = structured(await client.call_tool("begin_transaction", {}))["transaction_id"]
        result = await client.call_tool(
            "run_step",
            {
                "transaction_id": tx,
                "step_id": 1,
                "tool": f"every.{LONG}",
                "arguments": {"duration": 1, "steps": 4},
            },
            progress_callback=on_progress,
        )
        assert structured(result)["status"] == "SUCCESS"
    assert len(seen) >= 3


async def test_a_tool_the_downstream_adds_later_can_be_run(tmp_path: Path) -> None:
    gateway = write_gateway(
        tmp_path / "late.toml",
        f"""
        [servers.store]
        command = "{sys.executable}"
        args = ["{TESTS.joinpath("gateway_downstream.py")}"]
        env = {{ KV_FILE = "{tmp_path / "kv.json"}" }}
        """,
    )
    command = agenttx_command(
        "mcp", "--data-dir", str(tmp_path / "late"), "--gateway", str(gateway)
    )
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=server_env(), cwd=str(TESTS_DIR)
    )
    async with Client(params, mode="legacy", read_timeout_seconds=60) as client:

        async def step(tx: str, n: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            args = {"transaction_id": tx, "step_id": n, "tool": tool, "arguments": arguments}
            return structured(await client.call_tool("run_step", args))

        tx = structured(await client.call_tool("begin_transaction", {}))["transaction_id"]
        assert (await step(tx, 1, "store.add_tool", {"name": "shout"}))["status"] == "SUCCESS"
        await client.call_tool("commit_transaction", {"transaction_id": tx})
        tx = structured(await client.call_tool("begin_transaction", {}))["transaction_id"]
        for _ in range(100):  # the relisting follows the commit's delivery
            result = await step(tx, 1, "store.shout", {"text": "hey"})
            if result.get("status") == "SUCCESS":
                break
            await asyncio.sleep(0.05)
        assert result["status"] == "SUCCESS", result
