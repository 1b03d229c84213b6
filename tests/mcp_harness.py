"""How the MCP tests reach AgentTx: the SDK's client over ``agenttx mcp`` (stdio, a real
subprocess) or over ``agenttx serve --http-addr`` (streamable HTTP), in either protocol era,
and a raw line-by-line stdio peer for what a client library would never send."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from server_process import TESTS_DIR, agenttx_command, server_env

# The two eras: "legacy" runs the initialize handshake (2025-11-25); "auto" probes
# server/discover and lands on 2026-07-28, the stateless era.
ERAS = ("legacy", "auto")
MODERN = "2026-07-28"


def mcp_command(data_dir: Path, *args: str) -> list[str]:
    return agenttx_command(
        "mcp", "--data-dir", str(data_dir), "--tools", "user_tools", "--tools", "mcp_tools", *args
    )


def stdio_params(data_dir: Path, *args: str) -> StdioServerParameters:
    command = mcp_command(data_dir, *args)
    return StdioServerParameters(
        command=command[0], args=command[1:], env=server_env(), cwd=str(TESTS_DIR)
    )


@asynccontextmanager
async def stdio_client(data_dir: Path, era: str, *args: str) -> AsyncIterator[Client]:
    async with Client(stdio_params(data_dir, *args), mode=era, read_timeout_seconds=60) as c:
        yield c


def structured(result: Any) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


class RawStdio:
    """``agenttx mcp`` driven line by line: what goes in, exactly what comes out on stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, data_dir: Path) -> RawStdio:
        command = mcp_command(data_dir)
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=TESTS_DIR,
            env=server_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def send_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_line(json.dumps(message))

    async def receive(self) -> dict[str, Any]:
        """The next stdout line (within 60 s: a loaded machine starts slowly), which must be
        one JSON-RPC message."""
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        assert line, "agenttx mcp closed stdout"
        message = json.loads(line)
        assert message.get("jsonrpc") == "2.0", message
        return message  # type: ignore[no-any-return]

    async def close(self) -> str:
        """Close stdin (the end of the session), wait for the exit; returns stderr."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 20)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode()


def initialize(version: str, request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"},
        },
    }
