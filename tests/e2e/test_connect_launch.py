"""The entry ``agenttx connect claude-code --write`` writes really starts AgentTx: the MCP SDK's
stdio client launches exactly its ``command`` and ``args``, with the small environment an app
gives a server (the SDK's default: HOME, PATH, …), from a directory that is not the project's,
and gets AgentTx's tools; the transaction it begins lands in the data directory the entry names.

It needs ``agenttx mcp`` and the ``mcp`` SDK (issue 12's MCP server); without them it skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

AGENTTX = os.path.abspath(Path(sys.executable).parent / "agenttx")


def written_entry(home: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTX_", "CLAUDE_"))}
    done = subprocess.run(
        [AGENTTX, "connect", "claude-code", "--write"],
        env={**env, "HOME": str(home)},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    entry: dict[str, Any] = json.loads((home / ".claude.json").read_text())["mcpServers"]["agenttx"]
    return entry


async def test_the_written_claude_code_entry_launches_agenttx_mcp(tmp_path: Path) -> None:
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    home = tmp_path / "home"
    home.mkdir()
    entry = written_entry(home)
    assert entry["type"] == "stdio"
    data_dir = Path(entry["args"][entry["args"].index("--data-dir") + 1])
    elsewhere = tmp_path / "app-cwd"  # an app starts servers from a directory of its own
    elsewhere.mkdir()

    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env={"HOME": str(home)}, cwd=elsewhere
    )
    with anyio.fail_after(120):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"begin_transaction", "run_step", "commit_transaction"} <= names
            begun = await session.call_tool("begin_transaction", {"goal": "connect check"})
            assert not begun.is_error, begun

    assert (data_dir / "agenttx.db").is_file()
    assert not list(elsewhere.iterdir())  # nothing was written where the app started it
