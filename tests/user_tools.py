"""User tools that ``agenttx serve --tools user_tools`` loads in the server tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import agenttx


@agenttx.tool(name="test.sleep", timeout=60)
async def sleep(ctx: agenttx.ToolContext, seconds: float, started: str = "") -> dict[str, float]:
    """Sleep, then say so: a step that is still running when the server is told to stop.
    ``started``: a file made once the sleep begins, so a test acts while the step runs."""
    if started:
        await asyncio.to_thread(Path(started).touch)
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@agenttx.tool(name="test.call_api", effect="compensatable")
async def call_api(ctx: agenttx.ToolContext, order: str) -> dict[str, str]:
    """An outside call whose compensation always fails."""
    await ctx.register_undo({"order": order})
    return {"order": order}


@call_api.undo
async def cancel_order(ctx: Any, order: str) -> None:
    raise ConnectionError(f"api down: cannot cancel {order}")
