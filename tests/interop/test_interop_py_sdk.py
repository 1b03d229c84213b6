"""The official Python MCP SDK (``mcp``, our own pin) plays the same scenario as the
TypeScript SDK (``every_tool.json``: every tool) in both protocol eras, over stdio and over
streamable HTTP. The SDK validates a successful result against the tool's ``outputSchema``
itself; a refusal it does not check, so this test validates those too, as the TypeScript SDK
does. The other MCP tests cover each tool's behaviour; this one covers that every tool's
results, in every era and on both transports, are what its schema says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from interop_clients import http_server, resolve, scenario, stdio_command
from mcp_harness import ERAS, MODERN
from server_process import TESTS_DIR, server_env

pytestmark = pytest.mark.parametrize("era", ERAS)


async def play(c: Client, era: str) -> list[dict[str, Any]]:
    assert c.protocol_version == (MODERN if era == "auto" else "2025-11-25")
    tools = {t.name: t for t in (await c.list_tools()).tools}
    called = {step["tool"] for step in scenario()}
    assert set(tools) == called, (set(tools) - called, called - set(tools))
    saved: dict[str, dict[str, Any]] = {}
    refused: list[dict[str, Any]] = []
    for step in scenario():
        name = step["tool"]
        result = await c.call_tool(name, resolve(step["arguments"], saved))
        content = result.structured_content
        assert isinstance(content, dict), (name, result)
        if step.get("expect") == "ok":
            assert not result.is_error, (name, content)
        schema = tools[name].output_schema
        assert schema is not None, name
        errors = [e.message for e in validator_for(schema)(schema).iter_errors(content)]
        assert errors == [], (name, content, errors)
        if result.is_error:
            assert content["ok"] is False, content
            assert content["error"]["code"], content
            refused.append(content)
        if "save" in step:
            saved[step["save"]] = content
    return refused


async def test_the_python_sdk_calls_every_tool_over_stdio(era: str, tmp_path: Path) -> None:
    command = stdio_command(tmp_path / "data")
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=server_env(), cwd=str(TESTS_DIR)
    )
    async with Client(params, mode=era, read_timeout_seconds=60) as c:
        refused = await play(c, era)
    assert refused, "the scenario's refusals never came: their shape went unchecked"


async def test_the_python_sdk_calls_every_tool_over_http(era: str, tmp_path: Path) -> None:
    with http_server(tmp_path / "data") as url:
        async with Client(url, mode=era, read_timeout_seconds=60) as c:
            refused = await play(c, era)
    assert refused
