"""User tools the MCP tests load (``--tools mcp_tools``): one that reports progress, one that
waits until it is cancelled and leaves evidence of its undo."""

from __future__ import annotations

import asyncio
from typing import Any

import agenttx


@agenttx.tool(name="test.progress", timeout=30)
async def progress(ctx: agenttx.ToolContext, steps: int) -> dict[str, int]:
    """Report progress ``steps`` times, then finish."""
    for done in range(1, steps + 1):
        await ctx.report_progress(done, steps, f"part {done} of {steps}")
        await asyncio.sleep(0)
    return {"parts": steps}


@agenttx.tool(name="test.wait", effect="compensatable", timeout=60)
async def wait(ctx: agenttx.ToolContext, marker: str, seconds: float = 30.0) -> dict[str, str]:
    """Register an undo that writes ``marker`` under the fs root, then wait (to be cancelled)."""
    await ctx.register_undo({"marker": marker, "root": str(ctx.fs_root)})
    await ctx.report_progress(0, 1, "waiting")
    await asyncio.sleep(seconds)
    return {"marker": marker}


@wait.undo
async def write_marker(ctx: Any, marker: str, root: str) -> None:
    from pathlib import Path

    path = Path(root) / "undone" / marker
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("undone")
