"""Tools whose failures quote a credential, loaded by every conformance engine: no reply on any
surface may hold ``SECRET`` (``surfaces/runner.py`` checks every case), and what it says in its
place is the masked text (``surfaces/error_cases.py``)."""

from __future__ import annotations

from typing import Any

import agenttx

# A live-key shape agenttx.redaction masks.
SECRET = "sk-live_Zq8vN3xP0aL7mK2bR5tW9yC4"


@agenttx.tool(name="leaky.call")
async def leaky_call(ctx: agenttx.ToolContext) -> dict[str, Any]:
    """An outside call that fails quoting its credentials."""
    raise RuntimeError(f"upstream refused: Authorization: Bearer {SECRET}")


@agenttx.tool(name="leaky.write", effect="compensatable")
async def leaky_write(ctx: agenttx.ToolContext) -> dict[str, Any]:
    """An outside write whose undo fails quoting its credentials."""
    await ctx.register_undo({})
    return {}


@leaky_write.undo
def _leaky_undo(ctx: Any) -> None:
    raise RuntimeError(f"provider said password={SECRET}")


TOOLS = [leaky_call, leaky_write]
